// Data movement: one strided copy serves transpose (permuted source strides), broadcast_to
// (zero source strides), slice (a source offset), and the zero-padded adjoint of a slice and
// the parts of a concat (destination offset and strides). One thread per element copied,
// workgroup ids linearised over a 2-D grid.
// prm: [n, rank, src offset, dst offset, shape[rank], src_stride[rank], dst_stride[rank]]
// `cumsum`: running sums along an axis, one thread per line, in the CPU's order.
// prm: [lines, n (the axis's length), inner (the product of the axes after it)]

@group(0) @binding(0) var<storage, read> prm: array<u32>;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

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
    let base = (i / inner) * n * inner + i % inner;
    var acc = 0.0;
    for (var j = 0u; j < n; j = j + 1u) {
        acc = acc + src[base + j * inner];
        dst[base + j * inner] = acc;
    }
}
