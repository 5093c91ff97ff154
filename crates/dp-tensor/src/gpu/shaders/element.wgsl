// The element functions of the elementwise shaders, prepended to each shader that uses them
// (elementwise.wgsl, unary.wgsl, and the shaders generated for staged chains, gpu/fused.rs),
// so every one computes an element the same way.
//
// binary_op's op: 0 +, 1 -, 2 *, 3 /, 4 **, 5 mask (x where y > 0, else 0); the comparing
// operations (op.rs `Cmp`, truth values as 0/1, nonzero read as true): 6 <, 7 <=, 8 >, 9 >=,
// 10 ==, 11 !=, 12 and, 13 or, 14 maximum, 15 minimum (a NaN operand is the result).
// unary_op's op: 0 neg, 1 sin, 2 cos, 3 tan, 4 exp, 5 log, 6 sqrt, 7 tanh, 8 sigmoid, 9 relu,
// 10 abs, 11 erf, 12 step (1 where x > 0), 13 sign (1 where x >= 0, else -1), 14 clamp to
// [p0, p1], 15 ln x where x > 0, else 0 (in the derivative of a ** b with respect to b),
// 16 gelu (tanh form), 17 its derivative.

fn nan() -> f32 {
    return bitcast<f32>(0x7fc00000u);
}

// Bitwise, as unary.wgsl's: a compiler may fold `v != v` away.
fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

// A truth value's test, on the bits: anything but ±0 is true (NaN included, as on the CPU).
fn truthy(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) != 0u;
}

// Whether a comparison of x and y is unordered (a NaN operand): then only `!=` holds.
fn unordered(x: f32, y: f32) -> bool {
    return is_nan(x) || is_nan(y);
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

fn binary_op(op: u32, x: f32, y: f32) -> f32 {
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
        // Comparisons test NaN on the bits: a compiler may assume float comparisons never see
        // it (lavapipe's `nan != nan` was false, so `where (not_equal x x)` kept NaNs).
        case 6u: {
            return select(0.0, 1.0, !unordered(x, y) && x < y);
        }
        case 7u: {
            return select(0.0, 1.0, !unordered(x, y) && x <= y);
        }
        case 8u: {
            return select(0.0, 1.0, !unordered(x, y) && x > y);
        }
        case 9u: {
            return select(0.0, 1.0, !unordered(x, y) && x >= y);
        }
        case 10u: {
            return select(0.0, 1.0, !unordered(x, y) && x == y);
        }
        case 11u: {
            return select(0.0, 1.0, unordered(x, y) || x != y);
        }
        case 12u: {
            return select(0.0, 1.0, truthy(x) && truthy(y));
        }
        case 13u: {
            return select(0.0, 1.0, truthy(x) || truthy(y));
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

// x > 0 on the bits (not NaN, not ±0, sign clear): NaN must read as not positive, as on the CPU,
// and shader compilers may assume float comparisons never see NaN.
fn positive(v: f32) -> bool {
    return bitcast<u32>(v) - 1u < 0x7f800000u;
}

// erf, which WGSL lacks: FreeBSD's s_erff.c (musl's, and so the CPU's float32 `erff` from
// the libm crate), its branches on the same bit thresholds, so the two devices differ only
// where `exp` does. Near 0 it is x + x·R(x²), relative error about an ulp (a single rational
// fit over [-4, 4], as Eigen's, loses several ulp); beyond 0.84375 erf is 1 − erfc with erfc
// from rational fits in 1/x² times exp(−x²) split so that −x² is exact.
fn erf(v: f32) -> f32 {
    if (is_nan(v)) {
        return v;
    }
    let ix = bitcast<u32>(v) & 0x7fffffffu;
    let a = abs(v);
    if (ix < 0x3f580000u) {
        // |x| < 0.84375 (below 2^-28, z is 0 or subnormal and R(z) its constant term).
        let z = v * v;
        let r = 1.2837916613e-01 + z * (-3.2504209876e-01 + z * (-2.8481749818e-02
            + z * (-5.7702702470e-03 + z * -2.3763017452e-05)));
        let s = 1.0 + z * (3.9791721106e-01 + z * (6.5022252500e-02 + z * (5.0813062117e-03
            + z * (1.3249473704e-04 + z * -3.9602282413e-06))));
        return v + v * (r / s);
    }
    var y = 1.0;
    if (ix < 0x3fa00000u) {
        // |x| < 1.25: erf(1) + P(|x| − 1)/Q(|x| − 1).
        let s = a - 1.0;
        let p = -2.3621185683e-03 + s * (4.1485610604e-01 + s * (-3.7220788002e-01
            + s * (3.1834661961e-01 + s * (-1.1089469492e-01 + s * (3.5478305072e-02
            + s * -2.1663755178e-03)))));
        let q = 1.0 + s * (1.0642088205e-01 + s * (5.4039794207e-01 + s * (7.1828655899e-02
            + s * (1.2617121637e-01 + s * (1.3637083583e-02 + s * 1.1984500103e-02)))));
        y = 1.0 - (1.0 - 8.4506291151e-01 - p / q);
    } else if (ix < 0x40c00000u) {
        // |x| < 6 (beyond, erf rounds to ±1 in float32).
        let s = 1.0 / (a * a);
        var r: f32;
        var d: f32;
        if (ix < 0x4036db6du) {
            // |x| < 1/0.35
            r = -9.8649440333e-03 + s * (-6.9385856390e-01 + s * (-1.0558626175e+01
                + s * (-6.2375331879e+01 + s * (-1.6239666748e+02 + s * (-1.8460508728e+02
                + s * (-8.1287437439e+01 + s * -9.8143291473e+00))))));
            d = 1.0 + s * (1.9651271820e+01 + s * (1.3765776062e+02 + s * (4.3456588745e+02
                + s * (6.4538726807e+02 + s * (4.2900814819e+02 + s * (1.0863500214e+02
                + s * (6.5702495575e+00 + s * -6.0424413532e-02)))))));
        } else {
            r = -9.8649431020e-03 + s * (-7.9928326607e-01 + s * (-1.7757955551e+01
                + s * (-1.6063638306e+02 + s * (-6.3756646729e+02 + s * (-1.0250950928e+03
                + s * -4.8351919556e+02)))));
            d = 1.0 + s * (3.0338060379e+01 + s * (3.2579251099e+02 + s * (1.5367296143e+03
                + s * (3.1998581543e+03 + s * (2.5530502930e+03 + s * (4.7452853394e+02
                + s * -2.2440952301e+01))))));
        }
        // z: |x| with its low 13 mantissa bits cleared, so z·z is exact.
        let z = bitcast<f32>(bitcast<u32>(a) & 0xffffe000u);
        y = 1.0 - exp(-z * z - 0.5625) * exp((z - a) * (z + a) + r / d) / a;
    }
    return select(y, -y, v < 0.0);
}

fn unary_op(op: u32, v: f32, p0: f32, p1: f32) -> f32 {
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
            // Near 0 an exp-based tanh ((e^2v - 1)/(e^2v + 1), lavapipe's) cancels: tanh 1e-6
            // came out 1.3% high, and every |v| below 3e-8 as 2^-25. Its odd series to v^9
            // there (the next term, 1382/155925 v^11, is below 2e-9 relative at 0.25).
            if (abs(v) < 0.25) {
                let w = v * v;
                return v * (1.0 + w * (-1.0 / 3.0 + w * (2.0 / 15.0 + w * (-17.0 / 315.0 + w * (62.0 / 2835.0)))));
            }
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
            return erf(v);
        }
        case 12u: {
            return select(0.0, 1.0, positive(v));
        }
        case 13u: {
            return select(-1.0, 1.0, v >= 0.0);
        }
        case 15u: {
            return select(0.0, log(v), positive(v));
        }
        case 16u, 17u: {
            // As the CPU's `op::gelu` (tanh clamped as in case 7).
            let c = 0.7978845608028654;
            let a = 0.044715;
            let t = tanh(clamp(c * v * (1.0 + a * v * v), -15.0, 15.0));
            if (op == 16u) {
                return 0.5 * v * (1.0 + t);
            }
            return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * c * (1.0 + 3.0 * a * v * v);
        }
        default: {
            return select(min(max(v, p0), p1), v, is_nan(v));
        }
    }
}
