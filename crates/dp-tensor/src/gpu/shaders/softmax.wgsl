// softmax and log_softmax along the last axis: one workgroup per row (ids linearised over a
// 2-D grid), the row's maximum and its sum of exponentials by tree reductions in workgroup
// memory. prm: [rows, row length, op]   op: 0 softmax, 1 log_softmax

@group(0) @binding(0) var<storage, read> prm: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

const WG: u32 = 64u;

var<workgroup> tree: array<f32, 64>;

@compute @workgroup_size(64)
fn softmax(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= prm[0]) {
        return;
    }
    let len = prm[1];
    let base = row * len;
    var m = bitcast<f32>(0xff800000u);
    for (var i = lid; i < len; i = i + WG) {
        m = max(m, x[base + i]);
    }
    tree[lid] = m;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            tree[lid] = max(tree[lid], tree[lid + s]);
        }
        workgroupBarrier();
    }
    let mx = tree[0];
    workgroupBarrier();
    var acc = 0.0;
    for (var i = lid; i < len; i = i + WG) {
        acc = acc + exp(x[base + i] - mx);
    }
    tree[lid] = acc;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            tree[lid] = tree[lid] + tree[lid + s];
        }
        workgroupBarrier();
    }
    let total = tree[0];
    if (prm[2] == 0u) {
        for (var i = lid; i < len; i = i + WG) {
            out[base + i] = exp(x[base + i] - mx) / total;
        }
    } else {
        let lse = log(total);
        for (var i = lid; i < len; i = i + WG) {
            out[base + i] = x[base + i] - mx - lse;
        }
    }
}
