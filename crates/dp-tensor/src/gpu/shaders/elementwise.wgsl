// Elementwise binary arithmetic (+ - * / **) with NumPy broadcasting, a tensor with a Float,
// and in-place accumulation (adjoints). One thread per output element; workgroup ids are
// linearised over a 2-D grid (wid.x + wid.y * num_workgroups.x) so more than 65,535
// workgroups fit in one dispatch.
//
// prm for `binary`:        [n, op, rank, 0, shape[rank], a_stride[rank], b_stride[rank]]
//                           (a stride is 0 along the axes an operand is broadcast over)
// prm for `binary_same`:   [n, op]                    (equal shapes, no index arithmetic)
// prm for `binary_scalar`: [n, op, bits of the Float, 1 if the Float is the left operand]
// prm for `accumulate`:    [n]                        (out += a)
// op: binary_op's code (element.wgsl, prepended to this file).

@group(0) @binding(0) var<storage, read> prm: array<u32>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

const WG: u32 = 256u;

fn index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG + lid;
}

@compute @workgroup_size(256)
fn binary(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    let n = prm[0];
    if (i >= n) {
        return;
    }
    let rank = prm[2];
    var rem = i;
    var ia = 0u;
    var ib = 0u;
    for (var d = rank; d > 0u; d = d - 1u) {
        let k = d - 1u;
        let size = prm[4u + k];
        let c = rem % size;
        rem = rem / size;
        ia = ia + c * prm[4u + rank + k];
        ib = ib + c * prm[4u + 2u * rank + k];
    }
    out[i] = binary_op(prm[1], a[ia], b[ib]);
}

@compute @workgroup_size(256)
fn binary_same(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= prm[0]) {
        return;
    }
    out[i] = binary_op(prm[1], a[i], b[i]);
}

@compute @workgroup_size(256)
fn binary_scalar(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= prm[0]) {
        return;
    }
    let s = bitcast<f32>(prm[2]);
    if (prm[3] == 1u) {
        out[i] = binary_op(prm[1], s, a[i]);
    } else {
        out[i] = binary_op(prm[1], a[i], s);
    }
}

@compute @workgroup_size(256)
fn accumulate(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= prm[0]) {
        return;
    }
    out[i] = out[i] + a[i];
}
