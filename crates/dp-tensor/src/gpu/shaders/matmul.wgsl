// Matrix product C[M, N] = A[M, K] · B[K, N], row-major, tiled through workgroup memory.
// Two entry points, one per tile of C that a 16×16 workgroup computes: `matmul` (64×64, 4×4
// per thread) for products that make enough workgroups to fill a GPU, `matmul_32` (32×32, 2×2
// per thread) for the others. The K axis is walked 16 columns at a time: the workgroup stages
// a tile of A and one of B in workgroup memory, then every thread accumulates from there.
// `matmul` keeps every per-thread value in vec4 registers and unrolled statements, never in
// an array indexed in a loop, which a driver may leave in local memory: on an H200 the
// earlier form of this kernel, which indexed such arrays, ran 30 times slower (325 against
// 8,600 to 10,500 GFLOP/s on a 1024² product; bench/RESULTS.md; that local memory was the
// cause is inferred, not read from the driver's code). Every output element is one fused
// multiply-add chain over k in order in both, so the kernel chosen does not change a bit of
// the result.
// A batch of such products (stacks of matrices, `@` of rank ≥ 3) is the grid's z axis:
// product z reads A at z·a_stride and B at z·b_stride (a stride 0 broadcasts one matrix over
// the batch) and writes C at z·M·N; z0 offsets z when a batch needs several dispatches.
// prm: [M, N, K, a_stride, b_stride, z0]; grid: (ceil(N / tile), ceil(M / tile), batch).

@group(0) @binding(0) var<storage, read> prm: array<u32>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

const TS: u32 = 64u;
const TK: u32 = 16u;
const TQ: u32 = TS / 4u; // vec4s across a tile

// 64×64 tiles: each thread computes rows 4·ty .. 4·ty + 3 and columns 4·tx .. 4·tx + 3 of
// its tile, reading one vec4 of A and one of B from workgroup memory per step of K.
var<workgroup> a4: array<vec4<f32>, 256>; // [TK][TQ]: rows 4q .. 4q + 3 at one k
var<workgroup> b4: array<vec4<f32>, 256>; // [TK][TQ]: columns 4q .. 4q + 3 at one k

fn a_at(ao: u32, r: u32, c: u32, m: u32, k: u32) -> f32 {
    if (r < m && c < k) {
        return a[ao + r * k + c];
    }
    return 0.0;
}

fn b_at(bo: u32, r: u32, c: u32, k: u32, n: u32) -> f32 {
    if (r < k && c < n) {
        return b[bo + r * n + c];
    }
    return 0.0;
}

fn store4(co: u32, r: u32, col: u32, m: u32, n: u32, v: vec4<f32>) {
    if (r >= m) {
        return;
    }
    let o = co + r * n + col;
    if (col + 3u < n) {
        c[o] = v.x;
        c[o + 1u] = v.y;
        c[o + 2u] = v.z;
        c[o + 3u] = v.w;
        return;
    }
    if (col < n) { c[o] = v.x; }
    if (col + 1u < n) { c[o + 1u] = v.y; }
    if (col + 2u < n) { c[o + 2u] = v.z; }
}

// The operands one thread stages for a step of K: 4 rows of A at one column, 4 columns of B
// at one row.
struct Staged {
    a: vec4<f32>,
    b: vec4<f32>,
}

fn stage(ao: u32, bo: u32, m: u32, n: u32, k: u32, k0: u32, ar: u32, ak: u32, bk: u32, bc: u32) -> Staged {
    let kc = k0 + ak;
    let br = k0 + bk;
    return Staged(
        vec4<f32>(a_at(ao, ar, kc, m, k), a_at(ao, ar + 1u, kc, m, k), a_at(ao, ar + 2u, kc, m, k),
                  a_at(ao, ar + 3u, kc, m, k)),
        vec4<f32>(b_at(bo, br, bc, k, n), b_at(bo, br, bc + 1u, k, n), b_at(bo, br, bc + 2u, k, n),
                  b_at(bo, br, bc + 3u, k, n)));
}

// The next step's operands are read from memory into registers before the current step is
// computed, so their latency hides behind its multiply-adds (on an H200 that made 1024²
// products 7–9% faster and W5's staged iteration 15%, with bit-identical results;
// bench/RESULTS.md).
@compute @workgroup_size(16, 16)
fn matmul(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
          @builtin(local_invocation_index) li: u32) {
    let m = prm[0];
    let n = prm[1];
    let k = prm[2];
    let z = wid.z + prm[5];
    let ao = z * prm[3];
    let bo = z * prm[4];
    let co = z * m * n;
    let row0 = wid.y * TS;
    let col0 = wid.x * TS;
    let ak = li % TK;
    let aq = li / TK;
    let bk = li / TQ;
    let bq = li % TQ;
    let ar = row0 + 4u * aq;
    let bc = col0 + 4u * bq;
    var next = stage(ao, bo, m, n, k, 0u, ar, ak, bk, bc);
    var c0 = vec4<f32>(0.0);
    var c1 = vec4<f32>(0.0);
    var c2 = vec4<f32>(0.0);
    var c3 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < k; k0 = k0 + TK) {
        a4[ak * TQ + aq] = next.a;
        b4[bk * TQ + bq] = next.b;
        workgroupBarrier();
        if (k0 + TK < k) {
            next = stage(ao, bo, m, n, k, k0 + TK, ar, ak, bk, bc);
        }
        for (var kk = 0u; kk < TK; kk = kk + 1u) {
            let av = a4[kk * TQ + lid.y];
            let bv = b4[kk * TQ + lid.x];
            c0 = fma(vec4<f32>(av.x), bv, c0);
            c1 = fma(vec4<f32>(av.y), bv, c1);
            c2 = fma(vec4<f32>(av.z), bv, c2);
            c3 = fma(vec4<f32>(av.w), bv, c3);
        }
        workgroupBarrier();
    }
    let r = row0 + 4u * lid.y;
    let col = col0 + 4u * lid.x;
    store4(co, r, col, m, n, c0);
    store4(co, r + 1u, col, m, n, c1);
    store4(co, r + 2u, col, m, n, c2);
    store4(co, r + 3u, col, m, n, c3);
}

// 32×32 tiles (2×2 per thread): four times the workgroups, for products too
// small to fill the GPU with 64×64 tiles. Grid: (ceil(N / 32), ceil(M / 32), batch).
const SS: u32 = 32u;

var<workgroup> as32: array<f32, 512>; // [TK][SS]
var<workgroup> bs32: array<f32, 512>; // [TK][SS]

@compute @workgroup_size(16, 16)
fn matmul_32(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
             @builtin(local_invocation_index) li: u32) {
    let m = prm[0];
    let n = prm[1];
    let k = prm[2];
    let z = wid.z + prm[5];
    let ao = z * prm[3];
    let bo = z * prm[4];
    let co = z * m * n;
    let row0 = wid.y * SS;
    let col0 = wid.x * SS;
    var acc: array<f32, 4>;
    for (var i = 0u; i < 4u; i = i + 1u) {
        acc[i] = 0.0;
    }
    for (var k0 = 0u; k0 < k; k0 = k0 + TK) {
        for (var j = 0u; j < 2u; j = j + 1u) {
            let e = li + 256u * j;
            let am = e / TK;
            let ak = e % TK;
            var av = 0.0;
            if (row0 + am < m && k0 + ak < k) {
                av = a[ao + (row0 + am) * k + k0 + ak];
            }
            as32[ak * SS + am] = av;
            let bk = e / SS;
            let bn = e % SS;
            var bv = 0.0;
            if (k0 + bk < k && col0 + bn < n) {
                bv = b[bo + (k0 + bk) * n + col0 + bn];
            }
            bs32[bk * SS + bn] = bv;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk = kk + 1u) {
            let a0 = as32[kk * SS + lid.y];
            let a1 = as32[kk * SS + lid.y + 16u];
            let b0 = bs32[kk * SS + lid.x];
            let b1 = bs32[kk * SS + lid.x + 16u];
            acc[0] = fma(a0, b0, acc[0]);
            acc[1] = fma(a0, b1, acc[1]);
            acc[2] = fma(a1, b0, acc[2]);
            acc[3] = fma(a1, b1, acc[3]);
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 2u; i = i + 1u) {
        let r = row0 + lid.y + 16u * i;
        for (var j = 0u; j < 2u; j = j + 1u) {
            let col = col0 + lid.x + 16u * j;
            if (r < m && col < n) {
                c[co + r * n + col] = acc[i * 2u + j];
            }
        }
    }
}
