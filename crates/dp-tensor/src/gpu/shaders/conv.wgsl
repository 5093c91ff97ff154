// 2-D convolution (NCHW input, OCKK weights; a stride S and zero padding P on every side:
// output (y, x) reads input (y·S − P + i, x·S − P + j)) and k×k, stride-k max pooling, with
// their adjoints. Direct loops: one thread per output (or input) element, except the
// weight adjoint, which folds N·OH·OW products per weight with a tree in workgroup memory.
// Workgroup ids are linearised over a 2-D grid.
// conv prm: [N, C, H, W, O, KH, KW, OH, OW, S, P]
// pool prm: [planes (N·C), H, W, k, OH, OW]

@group(0) @binding(0) var<storage, read> prm: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<storage, read> g: array<f32>;

const WG: u32 = 256u;

fn gid(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG + lid;
}

// The input row (or column) output position o reads at kernel offset i, or -1 in the padding.
fn src_pos(o: u32, i: u32, len: u32) -> i32 {
    let p = i32(o * prm[9] + i) - i32(prm[10]);
    if (p < 0 || p >= i32(len)) {
        return -1;
    }
    return p;
}

// The output position whose kernel offset i reads input position p, or -1 if none does.
fn dst_pos(p: u32, i: u32, len: u32) -> i32 {
    let t = i32(p + prm[10]) - i32(i);
    if (t < 0 || u32(t) % prm[9] != 0u || u32(t) / prm[9] >= len) {
        return -1;
    }
    return i32(u32(t) / prm[9]);
}

// out[n, o, y, x] = Σ_{c, i, j} x[n, c, y·S − P + i, x·S − P + j] · w[o, c, i, j]
@compute @workgroup_size(256)
fn conv2d(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let N = prm[0]; let C = prm[1]; let H = prm[2]; let W = prm[3];
    let O = prm[4]; let KH = prm[5]; let KW = prm[6]; let OH = prm[7]; let OW = prm[8];
    let t = gid(wid, nwg, lid);
    if (t >= N * O * OH * OW) {
        return;
    }
    let ox = t % OW;
    let oy = (t / OW) % OH;
    let o = (t / (OW * OH)) % O;
    let n = t / (OW * OH * O);
    var acc = 0.0;
    for (var c = 0u; c < C; c = c + 1u) {
        for (var i = 0u; i < KH; i = i + 1u) {
            let sy = src_pos(oy, i, H);
            if (sy < 0) {
                continue;
            }
            let xrow = ((n * C + c) * H + u32(sy)) * W;
            let wrow = ((o * C + c) * KH + i) * KW;
            for (var j = 0u; j < KW; j = j + 1u) {
                let sx = src_pos(ox, j, W);
                if (sx >= 0) {
                    acc = fma(x[xrow + u32(sx)], w[wrow + j], acc);
                }
            }
        }
    }
    out[t] = acc;
}

// dx[n, c, h, w] = Σ_{o, i, j} g[n, o, y, x] · w[o, c, i, j] over the (y, x) that read (h, w)
@compute @workgroup_size(256)
fn conv2d_dx(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let N = prm[0]; let C = prm[1]; let H = prm[2]; let W = prm[3];
    let O = prm[4]; let KH = prm[5]; let KW = prm[6]; let OH = prm[7]; let OW = prm[8];
    let t = gid(wid, nwg, lid);
    if (t >= N * C * H * W) {
        return;
    }
    let px = t % W;
    let py = (t / W) % H;
    let c = (t / (W * H)) % C;
    let n = t / (W * H * C);
    var acc = 0.0;
    for (var o = 0u; o < O; o = o + 1u) {
        for (var i = 0u; i < KH; i = i + 1u) {
            let y = dst_pos(py, i, OH);
            if (y < 0) {
                continue;
            }
            for (var j = 0u; j < KW; j = j + 1u) {
                let xx = dst_pos(px, j, OW);
                if (xx < 0) {
                    continue;
                }
                acc = fma(g[((n * O + o) * OH + u32(y)) * OW + u32(xx)], w[((o * C + c) * KH + i) * KW + j], acc);
            }
        }
    }
    out[t] = acc;
}

var<workgroup> tree: array<f32, 256>;

// dw[o, c, i, j] = Σ_{n, y, x} g[n, o, y, x] · x[n, c, y·S − P + i, x·S − P + j]: one
// workgroup per weight.
@compute @workgroup_size(256)
fn conv2d_dw(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let N = prm[0]; let C = prm[1]; let H = prm[2]; let W = prm[3];
    let O = prm[4]; let KH = prm[5]; let KW = prm[6]; let OH = prm[7]; let OW = prm[8];
    let t = wid.x + wid.y * nwg.x;
    if (t >= O * C * KH * KW) {
        return;
    }
    let j = t % KW;
    let i = (t / KW) % KH;
    let c = (t / (KW * KH)) % C;
    let o = t / (KW * KH * C);
    let per = OH * OW;
    var acc = 0.0;
    for (var e = lid; e < N * per; e = e + WG) {
        let n = e / per;
        let y = (e % per) / OW;
        let xx = e % OW;
        let sy = src_pos(y, i, H);
        let sx = src_pos(xx, j, W);
        if (sy >= 0 && sx >= 0) {
            acc = fma(g[((n * O + o) * OH + y) * OW + xx], x[((n * C + c) * H + u32(sy)) * W + u32(sx)], acc);
        }
    }
    tree[lid] = acc;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            tree[lid] = tree[lid] + tree[lid + s];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        out[t] = tree[0];
    }
}

fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

// The position (flat index into x) of the maximum of output window t, as the CPU's
// `conv::pool` picks it: the first NaN if any (the maximum is then NaN), else the first
// largest element (an all -inf window: its first element).
fn window_max(t: u32) -> u32 {
    let H = prm[1]; let W = prm[2]; let k = prm[3]; let OH = prm[4]; let OW = prm[5];
    let xx = t % OW;
    let y = (t / OW) % OH;
    let plane = t / (OW * OH);
    var at = plane * H * W + (y * k) * W + xx * k;
    var best = x[at];
    for (var i = 0u; i < k; i = i + 1u) {
        for (var j = 0u; j < k; j = j + 1u) {
            let idx = plane * H * W + (y * k + i) * W + xx * k + j;
            if (is_nan(best)) {
                return at;
            }
            if (is_nan(x[idx]) || x[idx] > best) {
                best = x[idx];
                at = idx;
            }
        }
    }
    return at;
}

@compute @workgroup_size(256)
fn max_pool(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let t = gid(wid, nwg, lid);
    if (t >= prm[0] * prm[4] * prm[5]) {
        return;
    }
    out[t] = x[window_max(t)];
}

// out (zeroed beforehand, the shape of x) gets g[t] at each window's maximum; windows do not
// overlap (stride k), so no two threads write one element.
@compute @workgroup_size(256)
fn max_pool_grad(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let t = gid(wid, nwg, lid);
    if (t >= prm[0] * prm[4] * prm[5]) {
        return;
    }
    out[window_max(t)] = g[t];
}

// out[t] = g[position of window t's maximum] (g has the shape of x): forward-mode rule.
@compute @workgroup_size(256)
fn max_pool_pick(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let t = gid(wid, nwg, lid);
    if (t >= prm[0] * prm[4] * prm[5]) {
        return;
    }
    out[t] = g[window_max(t)];
}
