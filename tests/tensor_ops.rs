//! The tensor operations of LANGUAGE.md "Tensors, continued" (masks, reductions, shapes and
//! indexing), checked against independent oracles:
//! - values against NumPy (ties, NaN, int64 and bool operands, negative axes);
//! - gradients in float64 against central finite differences of the same function written
//!   with NumPy, of `L x = sum (sin (OP x))` (every output element weighted differently);
//! - second order (`grad` of a gradient's inner product with v) against JAX in float64;
//! - `jvp` against `grad` (the directional derivative equals ⟨grad, v⟩).
//!
//! The GPU side is in tests/gpu.rs (`gpu_masks_reductions_and_indexing`), error texts in the
//! snapshots of tests/programs/errors/tensor_ops_*.dp.

use crate::golden::numbers;
use crate::run::run_ok;

/// The inputs, as dp and as NumPy: dyadic values, so float32 literals convert to float64
/// exactly; `x` and `y` have no ties (finite differences are defined everywhere used).
const DP_INPUTS: &str = r#"
let x = astype "float64" (tensor [[0.5, -1.25, 2.0], [1.75, -0.25, 3.0]])
let y = astype "float64" (tensor [1.0, -0.5, 2.5])
let v = astype "float64" (tensor [[1.0, -0.5, 0.25], [0.75, 2.0, -1.5]])
let t = tensor [[1.0, 0.0 / 0.0, 2.0], [2.0, 2.0, -1.0]]
let i = tensor [[3, -7, 3], [16777217, 1, 0]]
let b = tensor [true, false, true]
let z = astype "float64" (zeros [1])
"#;

const NP_INPUTS: &str = r#"
import numpy
def helpers(np):
    def softmax_axis(x, a):
        e = np.exp(x - np.max(x, axis=a, keepdims=True))
        return e / np.sum(e, axis=a, keepdims=True)
    def log_softmax_axis(x, a):
        s = x - np.max(x, axis=a, keepdims=True)
        return s - np.log(np.sum(np.exp(s), axis=a, keepdims=True))
    # NumPy has no erf: Python's, elementwise; JAX's own under JAX (for second order).
    if np is numpy:
        import math
        erf = numpy.vectorize(math.erf)
    else:
        from jax.scipy.special import erf
    def gelu(x):
        return 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))
    def normalize(x, eps):
        c = x - np.mean(x, axis=-1, keepdims=True)
        return c / np.sqrt(np.mean(c * c, axis=-1, keepdims=True) + eps)
    return dict(np=np, softmax_axis=softmax_axis, log_softmax_axis=log_softmax_axis, erf=erf, gelu=gelu,
                normalize=normalize)
np = numpy
x = np.array([[0.5, -1.25, 2.0], [1.75, -0.25, 3.0]])
y = np.array([1.0, -0.5, 2.5])
v = np.array([[1.0, -0.5, 0.25], [0.75, 2.0, -1.5]])
t = np.array([[1.0, np.nan, 2.0], [2.0, 2.0, -1.0]], dtype=np.float32)
i = np.array([[3, -7, 3], [16777217, 1, 0]], dtype=np.int64)
b = np.array([True, False, True])
z = np.zeros(1)
def show(r):
    print(' '.join(repr(float(e)) for e in np.ravel(np.asarray(r, dtype=np.float64))))
"#;

/// (dp expression giving a Tensor, the NumPy expression of its value).
const VALUES: &[(&str, &str)] = &[
    ("less x y", "x < y"),
    ("less_equal t 2.0", "t <= 2.0"),
    ("greater 0.0 x", "0.0 > x"),
    ("greater_equal t (tensor [2.0])", "t >= 2.0"),
    ("equal t (tensor [[2.0], [2.0]])", "t == 2.0"),
    ("not_equal t t", "t != t"),
    ("less i (tensor [3, 3, 3])", "i < 3"),
    ("equal i (tensor [16777216])", "i == 16777216"),
    ("logical_and (greater x 0.0) b", "np.logical_and(x > 0, b)"),
    ("logical_or b (less x 0.0)", "np.logical_or(b, x < 0)"),
    ("logical_not (tensor [0.0, 2.0, 0.0 / 0.0])", "np.logical_not(np.array([0.0, 2.0, np.nan]))"),
    ("logical_not i", "np.logical_not(i)"),
    ("where (greater x 0.0) x (y * 10.0)", "np.where(x > 0, x, y * 10)"),
    ("where b (tensor [0.0 / 0.0, 1.0, 0.0 / 0.0]) (tensor [5.0])", "np.where(b, [np.nan, 1.0, np.nan], 5.0)"),
    ("where (tensor [1, 0, 2]) i (tensor [9, 9, 9])", "np.where([1, 0, 2], i, 9)"),
    ("clip 0.3 1.9 x", "np.clip(x, 0.3, 1.9)"),
    ("clip 2.0 1.0 x", "np.clip(x, 2.0, 1.0)"),
    ("clip 1.5 1.75 t", "np.clip(t, np.float32(1.5), np.float32(1.75))"),
    ("tensor [if any (less x (-1.0)) then 1.0 else 0.0, if all b then 1.0 else 0.0]", "[np.any(x < -1), np.all(b)]"),
    ("tensor [if any (zeros [0]) then 1.0 else 0.0, if all (zeros [0]) then 1.0 else 0.0]", "[False, True]"),
    ("max_of x y", "np.maximum(x, y)"),
    ("min_of t 1.5", "np.minimum(t, np.float32(1.5))"),
    ("max_of 1.0 t", "np.maximum(np.float32(1.0), t)"),
    ("max_of i (tensor [2, 2, 2])", "np.maximum(i, 2)"),
    ("tensor [min x, float (argmin x), float (argmin (tensor [2.0, 1.0, 1.0]))]", "[np.min(x), np.argmin(x), 1]"),
    ("tensor [min t, float (argmin t)]", "[np.min(t), np.argmin(t)]"),
    ("max_axis x 1", "np.max(x, axis=1)"),
    ("max_axis t 1", "np.max(t, axis=1)"),
    ("min_axis x (-2)", "np.min(x, axis=-2)"),
    ("argmax_axis t 0", "np.argmax(t, axis=0)"),
    ("argmax_axis t (-1)", "np.argmax(t, axis=-1)"),
    ("argmin_axis x 1", "np.argmin(x, axis=1)"),
    ("argmin_axis i 0", "np.argmin(i, axis=0)"),
    ("cumsum x 1", "np.cumsum(x, axis=1)"),
    ("cumsum x (-2)", "np.cumsum(x, axis=-2)"),
    ("softmax_axis x 0", "softmax_axis(x, 0)"),
    ("softmax_axis (x * 300.0) 1", "softmax_axis(x * 300, 1)"),
    ("log_softmax_axis (x * 300.0) 0", "log_softmax_axis(x * 300, 0)"),
    ("log_softmax_axis x (-1)", "log_softmax_axis(x, -1)"),
    ("normalize 1e-5 x", "normalize(x, 1e-5)"),
    ("normalize 0.5 (x * 300.0)", "normalize(x * 300, 0.5)"),
    ("normalize 1e-5 (reshape x [3, 2])", "normalize(x.reshape(3, 2), 1e-5)"),
    ("tensor [var x, var (tensor [1.0, 2.0, 4.0])]", "[np.var(x), np.var(np.float32([1, 2, 4]))]"),
    ("tensor [sum i, mean i, max i, sum b, mean b]", "[np.sum(i), np.mean(i), np.max(i), np.sum(b), np.mean(b)]"),
    ("expand_dims x 1", "np.expand_dims(x, 1)"),
    ("tensor (map float (shape (expand_dims x (-1))))", "np.expand_dims(x, -1).shape"),
    ("tensor (map float (shape (squeeze (tensor [[1.0], [2.0]]) (-1))))", "np.squeeze(np.ones((2, 1)), -1).shape"),
    ("stack 1 [x, v]", "np.stack([x, v], axis=1)"),
    ("stack (-1) [y, y]", "np.stack([y, y], axis=-1)"),
    ("broadcast_to y [2, 2, 3]", "np.broadcast_to(y, (2, 2, 3))"),
    ("ravel x", "np.ravel(x)"),
    ("gather x (tensor [[2, 0], [-1, 1]]) 1", "np.take(x, [[2, 0], [-1, 1]], axis=1)"),
    ("gather i (tensor [1]) 0", "np.take(i, [1], axis=0)"),
    ("tensor [get x [1, 2], get x [-1, -3], get (tensor 5.0) []]", "[x[1, 2], x[-1, -3], 5.0]"),
];

/// Runs the NumPy side: `body` prints lines (with `show`).
fn numpy(body: &str, what: &str, modules: &[&str]) -> Option<Vec<String>> {
    crate::python::run_lines(modules, what, &format!("{NP_INPUTS}\n{body}"))
}

#[test]
fn tensor_ops_values_agree_with_numpy() {
    let body: String = VALUES.iter().map(|(_, np)| format!("show({np})\n")).collect();
    let Some(want) =
        numpy(&format!("globals().update(helpers(numpy))\n{body}"), "the tensor ops against NumPy", &["numpy"])
    else {
        return;
    };
    let mut src = DP_INPUTS.to_string();
    for (dp, _) in VALUES {
        src += &format!("let () = println (to_list ({dp}))\n");
    }
    let got = run_ok(&src);
    assert_eq!(got.len(), VALUES.len(), "{got:?}");
    let bad = crate::python::disagreements(VALUES, &got, &want, 1e-6);
    assert!(bad.is_empty(), "disagreements with NumPy:\n{}", bad.join("\n"));
}

/// (dp expression of a Tensor in `x`, the same in NumPy/JAX as `np`). A Float result is
/// added to the float64 `z` (`full` would make a float32 tensor of it).
const GRADS: &[(&str, &str)] = &[
    ("max_of x y", "np.maximum(x, y)"),
    ("max_of x 1.0", "np.maximum(x, 1.0)"),
    ("min_of 0.3 x", "np.minimum(0.3, x)"),
    ("clip 0.3 1.9 x", "np.clip(x, 0.3, 1.9)"),
    ("where (greater x 0.0) (x * x) (x * 3.0)", "np.where(x > 0, x * x, x * 3.0)"),
    ("where (less y 0.0) y x * x", "np.where(y < 0, y, x) * x"),
    ("max_axis (x * x) 1", "np.max(x * x, axis=1)"),
    ("min_axis x (-2)", "np.min(x, axis=-2)"),
    ("cumsum (x * x) 1", "np.cumsum(x * x, axis=1)"),
    ("cumsum x 0 * x", "np.cumsum(x, axis=0) * x"),
    ("softmax_axis x 0", "softmax_axis(x, 0)"),
    ("log_softmax_axis (x * x) 1", "log_softmax_axis(x * x, 1)"),
    ("log_softmax_axis x 0", "log_softmax_axis(x, 0)"),
    ("normalize 1e-5 x * y", "normalize(x, 1e-5) * y"),
    ("normalize 0.1 (x * x) * x", "normalize(x * x, 0.1) * x"),
    ("z + var (x * x)", "z + np.var(x * x)"),
    ("z + min (x * x)", "z + np.min(x * x)"),
    ("expand_dims x 1 * 2.0", "np.expand_dims(x, 1) * 2.0"),
    ("squeeze (expand_dims (x * x) 0) 0", "x * x"),
    ("stack 1 [x, x * x]", "np.stack([x, x * x], axis=1)"),
    ("broadcast_to (row x 0) [4, 3] * broadcast_to (row x 1) [4, 3]", "np.broadcast_to(x[0], (4, 3)) * x[1]"),
    ("ravel x * ravel x", "np.ravel(x) * np.ravel(x)"),
    ("gather x (tensor [[2, 0], [2, 2]]) 1 * 1.5", "np.take(x, np.array([[2, 0], [2, 2]]), axis=1) * 1.5"),
    ("gather (x * x) (tensor [1, 1, 0]) 0", "np.take(x * x, np.array([1, 1, 0]), axis=0)"),
    ("z + get x [1, -1] * get x [0, 1]", "z + x[1, -1] * x[0, 1]"),
    ("erf (x * x) * erf x + erf (y - x)", "erf(x * x) * erf(x) + erf(y - x)"),
    ("gelu (x * y) * gelu x", "gelu(x * y) * gelu(x)"),
];

#[test]
fn tensor_ops_gradients_match_finite_differences_and_jax_second_order() {
    let cases: String = GRADS.iter().map(|(_, np)| format!("    {np:?},\n")).collect();
    let body = format!(
        r#"
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
N, J = helpers(numpy), helpers(jnp)
h = 1e-6
for expr in [
{cases}]:
    L = lambda x: numpy.sum(numpy.sin(eval(expr, dict(N, x=x, y=y, z=z))))
    g = numpy.zeros_like(x)
    for k in numpy.ndindex(x.shape):
        e = numpy.zeros_like(x); e[k] = h
        g[k] = (L(x + e) - L(x - e)) / (2 * h)
    show(g)
    LJ = lambda x: jnp.sum(jnp.sin(eval(expr, dict(J, x=x, y=y, z=z))))
    show(jax.grad(lambda x: jnp.sum(jax.grad(LJ)(x) * v))(x))
"#
    );
    let Some(want) = numpy(&body, "tensor-op gradients against NumPy and JAX", &["numpy", "jax"]) else { return };
    let mut src = DP_INPUTS.to_string();
    for (dp, _) in GRADS {
        src += &format!(
            "let () = let l = fun x -> sum (sin ({dp})) in \
             (println (to_list (grad l x)); \
              println (to_list (grad (fun x -> sum (grad l x * v)) x)); \
              println (snd (jvp l x v), sum (grad l x * v)))\n"
        );
    }
    let got = run_ok(&src);
    assert_eq!(got.len(), 3 * GRADS.len(), "{got:?}");
    let mut bad = Vec::new();
    for (k, (dp, _)) in GRADS.iter().enumerate() {
        let (g, hv, jv) = (numbers(&got[3 * k]), numbers(&got[3 * k + 1]), numbers(&got[3 * k + 2]));
        let (fd, jax_hv) = (numbers(&want[2 * k]), numbers(&want[2 * k + 1]));
        if !crate::python::agree(&g, &fd, 1e-6) {
            bad.push(format!("`{dp}`: grad {g:?}, finite differences {fd:?}"));
        }
        if !crate::python::agree(&hv, &jax_hv, 1e-9) {
            bad.push(format!("`{dp}`: second order {hv:?}, JAX {jax_hv:?}"));
        }
        // 1e-7, not float64's 1e-12: a Float's tangent broadcast against a tensor (`t - mean t`
        // in `var`) is made a float32 tensor by the forward mode of arithmetic (src/ad/mod.rs,
        // BroadcastTo of a Float), which this slice leaves alone.
        if jv.len() != 2 || !crate::python::agree(&jv[..1], &jv[1..], 1e-7) {
            bad.push(format!("`{dp}`: jvp and ⟨grad, v⟩ differ: {jv:?}"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The tie rules, against values JAX gives (`jax.grad(lambda x: jnp.maximum(x, 1.0))(1.0)` is
/// 0.5, and so is `jnp.clip`'s at either bound); a NaN result passes nothing back, as JAX's.
#[test]
fn tensor_ops_ties_split_as_jax_does() {
    let got = run_ok(
        "let () = println (to_list (grad (fun x -> sum (max_of x (tensor [1.0, 1.0, 5.0]))) (tensor [1.0, 2.0, 3.0])))\n\
         let () = println (to_list (grad (fun x -> sum (clip 1.0 3.0 x)) (tensor [0.0, 1.0, 2.0, 3.0, 4.0])))\n\
         let () = println (to_list (grad (fun x -> sum (min_of x 2.0)) (tensor [0.0 / 0.0, 2.0])))\n\
         let () = println (to_list (grad (fun x -> sum (max_axis x 1)) (tensor [[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]])))\n\
         let () = println (to_list (grad (fun x -> sum (where (greater x 0.0) (sqrt (relu x)) (x * 0.0))) (tensor [4.0, -1.0])))\n",
    );
    assert_eq!(
        got,
        ["[0.5, 1.0, 0.0]", "[0.0, 0.5, 1.0, 0.5, 0.0]", "[0.0, 0.5]", "[0.0, 0.5, 0.5, 1.0, 0.0, 0.0]", "[0.25, 0.0]",]
    );
}

/// `erf` (LANGUAGE.md "Tensors, continued") against Python's `math.erf` (C's, in float64):
/// Floats and float64 tensors within 2 ulp of it, float32 tensors within 1 ulp of its
/// float32 rounding (the CPU's float32 erf is its own, not float64's rounded), at inputs in
/// every branch of the approximations, at their boundaries, in the tails where erf rounds
/// to ±1, and at ±0, ±inf and NaN; the inputs are exact in float32, so all three paths see
/// the same numbers. The derivative is 2/√π·exp(−x²) (tensor_ops_gradients_… checks it by
/// finite differences and second order against JAX).
#[test]
fn erf_agrees_with_python_math_erf() {
    let mut xs: Vec<f64> = (-112..=112).map(|k| k as f64 / 16.0).collect();
    xs.extend([
        0.84375,
        -0.84375,
        1.25,
        f64::from(f32::from_bits(0x4036_db6d)), // 1/0.35 as erff splits there
        6.0,
        5.999_999_523_162_842,
        3.0e-9,
        -(2f64.powi(-30)),
        2f64.powi(-126),
        0.1,
        -0.3,
        1e-4,
        26.0,
    ]);
    // Round each to float32 (so `tensor` keeps it exactly), then to the printed form.
    let xs: Vec<f64> = xs.iter().map(|&x| x as f32 as f64).collect();
    let list: Vec<String> = xs.iter().map(|x| format!("{x:?}")).collect();
    let list = format!("[{}]", list.join(", "));
    let script = format!(
        "import math, struct\n\
         xs = {list} + [-0.0, math.inf, -math.inf, math.nan]\n\
         f32 = lambda v: struct.unpack('f', struct.pack('f', v))[0]\n\
         print(' '.join(repr(math.erf(x)) for x in xs))\n\
         print(' '.join(repr(f32(math.erf(x))) for x in xs))\n\
         print(' '.join(repr(2 / math.sqrt(math.pi) * math.exp(-x * x)) for x in xs[:20]))\n"
    );
    let Some(want) = crate::python::run_lines(&["math"], "erf against math.erf", &script) else { return };
    let src = format!(
        "let xs = {list} ++ [-0.0, 1.0 / 0.0, -1.0 / 0.0, 0.0 / 0.0]\n\
         let () = println (map erf xs)\n\
         let () = println (to_list (erf (astype \"float64\" (tensor xs))))\n\
         let () = println (to_list (erf (tensor xs)))\n\
         let () = println (map (grad erf) (take 20 xs))\n\
         let () = println (to_list (grad (fun t -> sum (erf t)) (astype \"float64\" (tensor (take 20 xs)))))\n\
         let () = println (dtype (erf (tensor [1.0])), dtype (erf (tensor [1])), erf 0.5)\n"
    );
    let got = run_ok(&src);
    assert_eq!(got.len(), 6, "{got:?}");
    let (w64, w32, wd) = (numbers(&want[0]), numbers(&want[1]), numbers(&want[2]));
    // Within `ulps` units in the last place of the wanted value's format (`eps`), NaN
    // matching NaN and signed zeros their sign.
    let close = |what: &str, got: &[f64], want: &[f64], eps: f64, ulps: f64| {
        assert_eq!(got.len(), want.len(), "{what}: {got:?}");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            let ok = if w.is_nan() {
                g.is_nan()
            } else if *w == 0.0 {
                *g == 0.0 && g.is_sign_negative() == w.is_sign_negative()
            } else {
                (g - w).abs() <= ulps * eps * w.abs()
            };
            assert!(ok, "{what}: erf({}) is {g:e}, want {w:e}", xs.get(i).copied().unwrap_or(f64::NAN));
        }
    };
    close("Float", &numbers(&got[0]), &w64, f64::EPSILON, 2.0);
    close("float64 tensor", &numbers(&got[1]), &w64, f64::EPSILON, 2.0);
    close("float32 tensor", &numbers(&got[2]), &w32, f32::EPSILON as f64, 1.0);
    close("d erf, Float", &numbers(&got[3]), &wd, f64::EPSILON, 4.0);
    close("d erf, float64 tensor", &numbers(&got[4]), &wd, f64::EPSILON, 4.0);
    assert!(got[5].starts_with(r#"("float32", "float32", 0.5204998778130465"#), "{}", got[5]);
}
