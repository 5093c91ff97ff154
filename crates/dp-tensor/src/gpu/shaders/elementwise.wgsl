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
// op: 0 +, 1 -, 2 *, 3 /, 4 **, 5 mask (x where y > 0, else 0); the comparing operations
// (op.rs `Cmp`, truth values as 0/1, nonzero read as true): 6 <, 7 <=, 8 >, 9 >=, 10 ==,
// 11 !=, 12 and, 13 or, 14 maximum, 15 minimum (a NaN operand is the result)

@group(0) @binding(0) var<storage, read> prm: array<u32>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

const WG: u32 = 256u;

fn nan() -> f32 {
    return bitcast<f32>(0x7fc00000u);
}

// Bitwise, as unary.wgsl's: a compiler may fold `v != v` away.
fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

fn inf() -> f32 {
    return bitcast<f32>(0x7f800000u);
}

// x ** y as C's powf: negative bases need integral exponents (WGSL's pow leaves them undefined).
fn powf(x: f32, y: f32) -> f32 {
    if (y == 0.0) {
        return 1.0;
    }
    if (y == 1.0) {
        return x;
    }
    if (y == 2.0) {
        return x * x;
    }
    let ax = abs(x);
    if (ax == 0.0) {
        if (y > 0.0) {
            return 0.0;
        }
        return inf();
    }
    if (y == 0.5 && x > 0.0) {
        return sqrt(x);
    }
    let r = exp2(y * log2(ax));
    if (x < 0.0) {
        if (y != floor(y)) {
            return nan();
        }
        let h = y * 0.5;
        if (h != floor(h)) {
            return -r;
        }
    }
    return r;
}

fn apply(op: u32, x: f32, y: f32) -> f32 {
    switch op {
        case 0u: {
            return x + y;
        }
        case 1u: {
            return x - y;
        }
        case 2u: {
            return x * y;
        }
        case 3u: {
            return x / y;
        }
        case 4u: {
            return powf(x, y);
        }
        case 6u: {
            return select(0.0, 1.0, x < y);
        }
        case 7u: {
            return select(0.0, 1.0, x <= y);
        }
        case 8u: {
            return select(0.0, 1.0, x > y);
        }
        case 9u: {
            return select(0.0, 1.0, x >= y);
        }
        case 10u: {
            return select(0.0, 1.0, x == y);
        }
        case 11u: {
            return select(0.0, 1.0, x != y);
        }
        case 12u: {
            return select(0.0, 1.0, x != 0.0 && y != 0.0);
        }
        case 13u: {
            return select(0.0, 1.0, x != 0.0 || y != 0.0);
        }
        case 14u: {
            return select(select(select(x, y, y > x), y, is_nan(y)), x, is_nan(x));
        }
        case 15u: {
            return select(select(select(x, y, y < x), y, is_nan(y)), x, is_nan(x));
        }
        default: {
            // mask: x where y > 0 (a 0/1 mask), else 0
            return select(0.0, x, y > 0.0);
        }
    }
}

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
    out[i] = apply(prm[1], a[ia], b[ib]);
}

@compute @workgroup_size(256)
fn binary_same(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= prm[0]) {
        return;
    }
    out[i] = apply(prm[1], a[i], b[i]);
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
        out[i] = apply(prm[1], s, a[i]);
    } else {
        out[i] = apply(prm[1], a[i], s);
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
