// Reductions: tree reductions in workgroup memory.
//
// `reduce_all`: every element to one partial per workgroup (each thread first folds a
//   grid-stride run of elements, then the workgroup folds its 256 values pairwise); the host
//   runs it again over the partials until one value is left.
//   prm: [n, op, bits of shift]   op: 0 sum, 1 max, 2 sum of exp(x - shift) (logsumexp)
// `reduce_groups`: the elements of each output group (a sum_axis, a sum back to a broadcast
//   shape, ...) — one workgroup per output, a tree over the group's elements.
// `reduce_chunks`: a first pass for long groups: workgroup (o, c) folds elements
//   [c·chunk, (c+1)·chunk) of group o into out[o·nchunks + c] (unscaled); the host folds those
//   partials as groups of nchunks. prm: as reduce_groups, then [nchunks, chunk].
// `reduce_groups_thread`: the same, one thread per output (for small groups).
//   prm: [n_out, op, r, nk, nr, bits of scale, kshape[nk], kstride[nk], rshape[nr], rstride[nr]]
//   op: 0 sum, 1 max; output o (row-major over kshape) folds the r elements at
//   Σ kcoord·kstride + Σ rcoord·rstride, times scale.
// `argmax_pairs`: the first index of the largest element, as `reduce_all` folds (grid-stride
//   runs, a tree per workgroup, repeated by the host), carrying (key, index) pairs of u32s:
//   the first pass reads the elements' bits (prm[1] = 0), later ones the pairs (prm[1] = 1).
//   prm: [n, 1 if src holds pairs]
// `argmax_mask`: out[i] = 1 where i is the index of the final pair, else 0.   prm: [n]

@group(0) @binding(0) var<storage, read> prm: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

const WG: u32 = 256u;
const GW: u32 = 64u;

var<workgroup> tree: array<f32, 256>;

@group(0) @binding(3) var<storage, read> src: array<u32>;
@group(0) @binding(4) var<storage, read_write> pairs: array<u32>;

fn neg_inf() -> f32 {
    return bitcast<f32>(0xff800000u);
}

// NaN on the bits: shader compilers may assume float comparisons never see NaN.
fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

// max propagates NaN, as on the CPU (a NaN anywhere makes the maximum NaN).
fn combine(op: u32, p: f32, q: f32) -> f32 {
    if (op == 1u) {
        if (is_nan(p)) {
            return p;
        }
        if (is_nan(q)) {
            return q;
        }
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
            acc = combine(op, acc, v);
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

// Group o's elements [start, end) folded by the workgroup: its GW threads stride through them,
// then a tree in workgroup memory; every thread returns the result. (Called in uniform
// control flow: it holds barriers.)
fn fold_group(o: u32, start: u32, end: u32, lid: u32) -> f32 {
    let op = prm[1];
    let base = group_base(o);
    var acc = 0.0;
    if (op == 1u) {
        acc = neg_inf();
    }
    for (var i = start + lid; i < end; i = i + GW) {
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
    return gtree[0];
}

@compute @workgroup_size(64)
fn reduce_groups(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let o = wid.x + wid.y * nwg.x;
    if (o >= prm[0]) {
        return;
    }
    let folded = fold_group(o, 0u, prm[2], lid);
    if (lid == 0u) {
        out[o] = folded * bitcast<f32>(prm[5]);
    }
}

@compute @workgroup_size(64)
fn reduce_chunks(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let w = wid.x + wid.y * nwg.x;
    let at = 6u + 2u * prm[3] + 2u * prm[4];
    let nchunks = prm[at];
    let chunk = prm[at + 1u];
    if (w >= prm[0] * nchunks) {
        return;
    }
    let c = w % nchunks;
    let folded = fold_group(w / nchunks, c * chunk, min(prm[2], (c + 1u) * chunk), lid);
    if (lid == 0u) {
        out[w] = folded;
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

// The CPU's argmax is the first NaN if there is one (max propagates NaN, and its derivative
// goes to the element that made it), else the first largest element; -0 ties with +0. Keys
// are integers ordered that way (NaN highest): integer comparisons keep it exact where float
// comparisons of NaN may be assumed away by the shader compiler.
fn order_key(bits: u32, i: u32) -> u32 {
    let mag = bits & 0x7fffffffu;
    if (mag > 0x7f800000u) {
        return 0xffffffffu;
    }
    if (mag == 0u) {
        return 0x80000000u;
    }
    if (bits != mag) {
        return ~bits;
    }
    return bits | 0x80000000u;
}

// Ties go to the lower index: the first maximum.
fn better(k: u32, i: u32, bk: u32, bi: u32) -> bool {
    return k > bk || (k == bk && i < bi);
}

var<workgroup> tkey: array<u32, 256>;
var<workgroup> tidx: array<u32, 256>;

@compute @workgroup_size(256)
fn argmax_pairs(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let n = prm[0];
    let from_pairs = prm[1] == 1u;
    let g = wid.x + wid.y * nwg.x;
    let stride = nwg.x * nwg.y * WG;
    // Loses to every real pair (indices stay below 2^31).
    var bk = 0u;
    var bi = 0xffffffffu;
    for (var i = g * WG + lid; i < n; i = i + stride) {
        var k = 0u;
        var j = i;
        if (from_pairs) {
            k = src[2u * i];
            j = src[2u * i + 1u];
        } else {
            k = order_key(src[i], i);
        }
        if (better(k, j, bk, bi)) {
            bk = k;
            bi = j;
        }
    }
    tkey[lid] = bk;
    tidx[lid] = bi;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s && better(tkey[lid + s], tidx[lid + s], tkey[lid], tidx[lid])) {
            tkey[lid] = tkey[lid + s];
            tidx[lid] = tidx[lid + s];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        pairs[2u * g] = tkey[0];
        pairs[2u * g + 1u] = tidx[0];
    }
}

@compute @workgroup_size(256)
fn argmax_mask(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= prm[0]) {
        return;
    }
    out[i] = select(0.0, 1.0, i == src[1]);
}
