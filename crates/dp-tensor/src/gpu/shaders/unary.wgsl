// Elementwise unary math, the derivative masks (step, sign), clamping and filling.
// One thread per element, workgroup ids linearised over a 2-D grid.
//
// prm: [n, op, bits of p0, bits of p1]
// op: unary_op's code (element.wgsl, prepended to this file).

@group(0) @binding(0) var<storage, read> prm: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

const WG: u32 = 256u;

@compute @workgroup_size(256)
fn unary(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= prm[0]) {
        return;
    }
    out[i] = unary_op(prm[1], x[i], bitcast<f32>(prm[2]), bitcast<f32>(prm[3]));
}

// out[i] = p0 (prm: [n, 0, bits of p0])
@compute @workgroup_size(256)
fn fill(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= prm[0]) {
        return;
    }
    out[i] = bitcast<f32>(prm[2]);
}
