// Reductions: tree reductions in workgroup memory.
//
// `reduce_all`: every element to one partial per workgroup (each thread first folds a
//   grid-stride run of elements, then the workgroup folds its 256 values pairwise); the host
//   runs it again over the partials until one value is left.
//   prm: [n, op, bits of shift]   op: 0 sum, 1 max, 2 sum of exp(x - shift) (logsumexp)
// `reduce_groups`: the elements of each output group (a sum_axis, a sum back to a broadcast
//   shape, ...) — one workgroup per output, a tree over the group's elements.
// `reduce_groups_thread`: the same, one thread per output (for small groups).
//   prm: [n_out, op, r, nk, nr, bits of scale, kshape[nk], kstride[nk], rshape[nr], rstride[nr]]
//   op: 0 sum, 1 max; output o (row-major over kshape) folds the r elements at
//   Σ kcoord·kstride + Σ rcoord·rstride, times scale.

@group(0) @binding(0) var<storage, read> prm: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

const WG: u32 = 256u;
const GW: u32 = 64u;

var<workgroup> tree: array<f32, 256>;

fn neg_inf() -> f32 {
    return bitcast<f32>(0xff800000u);
}

fn combine(op: u32, p: f32, q: f32) -> f32 {
    if (op == 1u) {
        return max(p, q);
    }
    return p + q;
}

@compute @workgroup_size(256)
fn reduce_all(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let n = prm[0];
    let op = prm[1];
    let shift = bitcast<f32>(prm[2]);
    let g = wid.x + wid.y * nwg.x;
    let stride = nwg.x * nwg.y * WG;
    var acc = 0.0;
    if (op == 1u) {
        acc = neg_inf();
    }
    for (var i = g * WG + lid; i < n; i = i + stride) {
        let v = x[i];
        if (op == 1u) {
            acc = max(acc, v);
        } else if (op == 2u) {
            acc = acc + exp(v - shift);
        } else {
            acc = acc + v;
        }
    }
    tree[lid] = acc;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            tree[lid] = combine(op, tree[lid], tree[lid + s]);
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        out[g] = tree[0];
    }
}

// The offset of output o's first element, and of the group's element r.
fn group_base(o: u32) -> u32 {
    let nk = prm[3];
    var rem = o;
    var off = 0u;
    for (var d = nk; d > 0u; d = d - 1u) {
        let k = d - 1u;
        let size = prm[6u + k];
        off = off + (rem % size) * prm[6u + nk + k];
        rem = rem / size;
    }
    return off;
}

fn group_offset(r: u32) -> u32 {
    let nk = prm[3];
    let nr = prm[4];
    let base = 6u + 2u * nk;
    var rem = r;
    var off = 0u;
    for (var d = nr; d > 0u; d = d - 1u) {
        let k = d - 1u;
        let size = prm[base + k];
        off = off + (rem % size) * prm[base + nr + k];
        rem = rem / size;
    }
    return off;
}

var<workgroup> gtree: array<f32, 64>;

@compute @workgroup_size(64)
fn reduce_groups(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let o = wid.x + wid.y * nwg.x;
    if (o >= prm[0]) {
        return;
    }
    let op = prm[1];
    let r = prm[2];
    let base = group_base(o);
    var acc = 0.0;
    if (op == 1u) {
        acc = neg_inf();
    }
    for (var i = lid; i < r; i = i + GW) {
        acc = combine(op, acc, x[base + group_offset(i)]);
    }
    gtree[lid] = acc;
    workgroupBarrier();
    for (var s = GW / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            gtree[lid] = combine(op, gtree[lid], gtree[lid + s]);
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        out[o] = gtree[0] * bitcast<f32>(prm[5]);
    }
}

@compute @workgroup_size(256)
fn reduce_groups_thread(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                        @builtin(local_invocation_index) lid: u32) {
    let o = (wid.x + wid.y * nwg.x) * WG + lid;
    if (o >= prm[0]) {
        return;
    }
    let op = prm[1];
    let r = prm[2];
    let base = group_base(o);
    var acc = 0.0;
    if (op == 1u) {
        acc = neg_inf();
    }
    for (var i = 0u; i < r; i = i + 1u) {
        acc = combine(op, acc, x[base + group_offset(i)]);
    }
    out[o] = acc * bitcast<f32>(prm[5]);
}
