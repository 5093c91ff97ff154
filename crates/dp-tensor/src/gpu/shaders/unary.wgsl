// Elementwise unary math, the derivative masks (step, sign), clamping and filling.
// One thread per element, workgroup ids linearised over a 2-D grid.
//
// prm: [n, op, bits of p0, bits of p1]
// op: 0 neg, 1 sin, 2 cos, 3 tan, 4 exp, 5 log, 6 sqrt, 7 tanh, 8 sigmoid, 9 relu, 10 abs,
//     11 step (1 where x > 0), 12 sign (1 where x >= 0, else -1), 13 clamp to [p0, p1],
//     14 ln x where x > 0, else 0 (in the derivative of a ** b with respect to b)

@group(0) @binding(0) var<storage, read> prm: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

const WG: u32 = 256u;

// x > 0 on the bits (not NaN, not ±0, sign clear): NaN must read as not positive, as on the CPU,
// and shader compilers may assume float comparisons never see NaN.
fn positive(v: f32) -> bool {
    return bitcast<u32>(v) - 1u < 0x7f800000u;
}

fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

fn apply(op: u32, v: f32, p0: f32, p1: f32) -> f32 {
    switch op {
        case 0u: {
            return -v;
        }
        case 1u: {
            return sin(v);
        }
        case 2u: {
            return cos(v);
        }
        case 3u: {
            return tan(v);
        }
        case 4u: {
            return exp(v);
        }
        case 5u: {
            return log(v);
        }
        case 6u: {
            return sqrt(v);
        }
        case 7u: {
            // tanh saturates in f32 long before 15; clamping keeps exp-based implementations finite.
            return tanh(clamp(v, -15.0, 15.0));
        }
        case 8u: {
            return 1.0 / (1.0 + exp(-v));
        }
        case 9u: {
            // NaN propagates (NumPy's and JAX's maximum(x, 0)).
            return select(0.0, v, positive(v) || is_nan(v));
        }
        case 10u: {
            return abs(v);
        }
        case 11u: {
            return select(0.0, 1.0, positive(v));
        }
        case 12u: {
            return select(-1.0, 1.0, v >= 0.0);
        }
        case 14u: {
            return select(0.0, log(v), positive(v));
        }
        default: {
            return select(min(max(v, p0), p1), v, is_nan(v));
        }
    }
}

@compute @workgroup_size(256)
fn unary(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= prm[0]) {
        return;
    }
    out[i] = apply(prm[1], x[i], bitcast<f32>(prm[2]), bitcast<f32>(prm[3]));
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
