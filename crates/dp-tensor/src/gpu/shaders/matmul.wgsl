// Matrix product C[M, N] = A[M, K] · B[K, N], row-major, tiled through workgroup memory.
// Each 16×16 workgroup computes a 64×64 tile of C; each thread a 4×4 block of it (rows
// ty + 16i, columns tx + 16j, so neighbouring threads touch neighbouring addresses). The K
// axis is walked 16 at a time: the workgroup stages a 64×16 tile of A and a 16×64 tile of B
// in workgroup memory, then every thread accumulates from there.
// A batch of such products (stacks of matrices, `@` of rank ≥ 3) is the grid's z axis:
// product z reads A at z·a_stride and B at z·b_stride (a stride 0 broadcasts one matrix over
// the batch) and writes C at z·M·N; z0 offsets z when a batch needs several dispatches.
// Grid: (ceil(N / 64), ceil(M / 64), batch). prm: [M, N, K, a_stride, b_stride, z0]

@group(0) @binding(0) var<storage, read> prm: array<u32>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

const TS: u32 = 64u;
const TK: u32 = 16u;

var<workgroup> as_: array<f32, 1024>; // [TK][TS]: as_[k * TS + m]
var<workgroup> bs: array<f32, 1024>;  // [TK][TS]: bs[k * TS + n]

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
    var acc: array<f32, 16>;
    for (var i = 0u; i < 16u; i = i + 1u) {
        acc[i] = 0.0;
    }
    for (var k0 = 0u; k0 < k; k0 = k0 + TK) {
        for (var j = 0u; j < 4u; j = j + 1u) {
            let e = li + 256u * j;
            // A: 64 rows × 16 columns, consecutive threads along K.
            let am = e / TK;
            let ak = e % TK;
            var av = 0.0;
            if (row0 + am < m && k0 + ak < k) {
                av = a[ao + (row0 + am) * k + k0 + ak];
            }
            as_[ak * TS + am] = av;
            // B: 16 rows × 64 columns, consecutive threads along N.
            let bk = e / TS;
            let bn = e % TS;
            var bv = 0.0;
            if (k0 + bk < k && col0 + bn < n) {
                bv = b[bo + (k0 + bk) * n + col0 + bn];
            }
            bs[bk * TS + bn] = bv;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk = kk + 1u) {
            var ra: array<f32, 4>;
            var rb: array<f32, 4>;
            for (var i = 0u; i < 4u; i = i + 1u) {
                ra[i] = as_[kk * TS + lid.y + 16u * i];
                rb[i] = bs[kk * TS + lid.x + 16u * i];
            }
            for (var i = 0u; i < 4u; i = i + 1u) {
                for (var j = 0u; j < 4u; j = j + 1u) {
                    acc[i * 4u + j] = fma(ra[i], rb[j], acc[i * 4u + j]);
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i = i + 1u) {
        let r = row0 + lid.y + 16u * i;
        for (var j = 0u; j < 4u; j = j + 1u) {
            let col = col0 + lid.x + 16u * j;
            if (r < m && col < n) {
                c[co + r * n + col] = acc[i * 4u + j];
            }
        }
    }
}

// The same with 32×32 tiles (2×2 per thread): four times the workgroups, for products too
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
