// Data movement: one strided copy serves transpose (permuted source strides), broadcast_to
// (zero source strides), slice (a source offset), and the zero-padded adjoint of a slice and
// the parts of a concat (destination offset and strides). One thread per element copied,
// workgroup ids linearised over a 2-D grid.
// prm: [n, rank, src offset, dst offset, shape[rank], src_stride[rank], dst_stride[rank]]
// `cumsum`: running sums along an axis, one thread per chunk of a line (the CPU's order within
// the chunk), each chunk's total to `totals` [outer, nchunks, inner]; `cumsum_carry` then adds
// to each element of chunk c > 0 the inclusive running sum of the totals before it.
// prm: [lines · nchunks (cumsum) or elements (cumsum_carry), n (the axis's length), inner (the
// product of the axes after it), chunk]

@group(0) @binding(0) var<storage, read> prm: array<u32>;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
@group(0) @binding(3) var<storage, read_write> totals: array<f32>;

const WG: u32 = 256u;

@compute @workgroup_size(256)
fn strided_copy(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= prm[0]) {
        return;
    }
    let rank = prm[1];
    var rem = i;
    var s = prm[2];
    var d = prm[3];
    for (var k1 = rank; k1 > 0u; k1 = k1 - 1u) {
        let k = k1 - 1u;
        let size = prm[4u + k];
        let c = rem % size;
        rem = rem / size;
        s = s + c * prm[4u + rank + k];
        d = d + c * prm[4u + 2u * rank + k];
    }
    dst[d] = src[s];
}

@compute @workgroup_size(256)
fn cumsum(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= prm[0]) {
        return;
    }
    let n = prm[1];
    let inner = prm[2];
    let chunk = prm[3];
    let nch = (n + chunk - 1u) / chunk;
    // i over (outer, chunk, inner), the layout of `totals`.
    let r = i % inner;
    let c = (i / inner) % nch;
    let o = i / (inner * nch);
    let base = o * n * inner + r;
    var acc = 0.0;
    for (var j = c * chunk; j < min(n, (c + 1u) * chunk); j = j + 1u) {
        acc = acc + src[base + j * inner];
        dst[base + j * inner] = acc;
    }
    totals[i] = acc;
}

@compute @workgroup_size(256)
fn cumsum_carry(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let e = (wid.x + wid.y * nwg.x) * WG + lid;
    if (e >= prm[0]) {
        return;
    }
    let n = prm[1];
    let inner = prm[2];
    let chunk = prm[3];
    let nch = (n + chunk - 1u) / chunk;
    let r = e % inner;
    let c = ((e / inner) % n) / chunk;
    let o = e / (inner * n);
    if (c > 0u) {
        dst[e] = dst[e] + src[(o * nch + c - 1u) * inner + r];
    }
}

// `gather` (NumPy's `take` along an axis): dst[o, k, r] = src[o, pos[k], r], o over the axes
// before the axis, k over the indices, r over the axes after it; one thread per element. The
// positions come checked and made non-negative from the host, where the int64 indices live.
// prm: [n, number of indices, inner (the product of the axes after), the axis's length, pos…]
@compute @workgroup_size(256)
fn gather(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= prm[0]) {
        return;
    }
    let nidx = prm[1];
    let inner = prm[2];
    let r = i % inner;
    let k = (i / inner) % nidx;
    let o = i / (inner * nidx);
    dst[i] = src[(o * prm[3] + prm[4u + k]) * inner + r];
}

// `scatter_add`, gather's adjoint: dst[o, j, r] = Σ src[o, k, r] over the k with pos[k] = j.
// WGSL has no float atomics, so rather than each source element adding itself, each output
// element sums its own list of k (grouped by position on the host), in increasing k: the
// CPU's order, so the two devices give the same bits.
// prm: [n, number of indices, inner, the axis's length (d), start[d + 1], ks…], the k of
// position j being ks[start[j]..start[j + 1]]
@compute @workgroup_size(256)
fn scatter_add(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= prm[0]) {
        return;
    }
    let nidx = prm[1];
    let inner = prm[2];
    let d = prm[3];
    let r = i % inner;
    let j = (i / inner) % d;
    let o = i / (inner * d);
    let ks = 5u + d;
    var acc = 0.0;
    for (var s = prm[4u + j]; s < prm[5u + j]; s = s + 1u) {
        acc = acc + src[(o * nidx + prm[ks + s]) * inner + r];
    }
    dst[i] = acc;
}
