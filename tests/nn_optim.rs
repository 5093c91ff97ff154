//! The model-building part of the standard library (LANGUAGE.md "Standard library": `nn.gelu`,
//! `nn.gelu_exact`, `nn.layer_norm`, `nn.attention`, `nn.embedding`, `nn.dropout`,
//! `optim.adamw`, `optim.cosine_schedule`, `optim.linear_warmup`) against independent oracles:
//! - values against NumPy written from the definitions (PyTorch's `LayerNorm` and `AdamW`
//!   algorithms as their documentation states them), `jax.nn.gelu` (both forms) and
//!   `jax.random.bernoulli` (dropout's mask), in float64;
//! - gradients in float64 against central finite differences of the NumPy functions, of
//!   `L x = sum (sin (f x))`, including attention with a query row that is masked everywhere.
//!
//! bench/w6 runs the whole Transformer beside PyTorch and JAX (one loss, to 1e-5).

use crate::golden::numbers;
use crate::run::run_ok;

/// Dyadic inputs (exact in float32 and float64), one list each, written into both programs.
fn grid(n: usize, mul: usize, modulo: usize, scale: f64) -> Vec<f64> {
    (0..n).map(|i| ((i * mul + 3) % modulo) as f64 / scale - (modulo as f64) / (2.0 * scale)).collect()
}

fn list(xs: &[f64]) -> String {
    let items: Vec<String> = xs.iter().map(|x| format!("{x:?}")).collect();
    format!("[{}]", items.join(", "))
}

/// (name, shape, values): float64 tensors named the same in dp and NumPy.
fn inputs() -> Vec<(&'static str, Vec<usize>, Vec<f64>)> {
    vec![
        ("x", vec![2, 3, 4], grid(24, 7, 13, 4.0)),
        ("g", vec![4], grid(4, 3, 5, 2.0).iter().map(|v| v + 1.5).collect()),
        ("b", vec![4], grid(4, 5, 7, 8.0)),
        ("q", vec![2, 3, 4], grid(24, 5, 11, 4.0)),
        ("k", vec![2, 5, 4], grid(40, 3, 13, 4.0)),
        ("v", vec![2, 5, 2], grid(20, 7, 9, 2.0)),
        ("q4", vec![2, 2, 3, 4], grid(48, 5, 17, 8.0)),
        ("k4", vec![2, 2, 3, 4], grid(48, 7, 19, 8.0)),
        ("v4", vec![2, 2, 3, 3], grid(36, 3, 11, 4.0)),
        ("table", vec![5, 3], grid(15, 4, 9, 4.0)),
    ]
}

fn dp_inputs() -> String {
    let mut s = String::new();
    for (name, shape, vals) in inputs() {
        let shape: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        s += &format!("let {name} = astype \"float64\" (reshape (tensor {}) [{}])\n", list(&vals), shape.join(", "));
    }
    // A mask [3, 5] whose middle row keeps nothing (that query attends to nothing).
    s += "let mask = tensor [[true, false, true, true, false], [false, false, false, false, false], [true, true, true, true, true]]\n";
    s += "let ids = tensor [[1, 4], [1, 0], [3, 3]]\n";
    s += "import nn\nimport optim\n";
    s
}

fn np_inputs() -> String {
    let mut s = String::from(
        r#"
import numpy as np, math
def show(r):
    print(' '.join(repr(float(e)) for e in np.ravel(np.asarray(r, dtype=np.float64))))
"#,
    );
    for (name, shape, vals) in inputs() {
        let shape: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        s += &format!("{name} = np.array({}, dtype=np.float64).reshape(({},))\n", list(&vals), shape.join(", "));
    }
    s += r#"
mask = np.array([[1, 0, 1, 1, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]], dtype=bool)
ids = np.array([[1, 4], [1, 0], [3, 3]])
def gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
def gelu_exact(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
def layer_norm(g, b, x):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * g + b
def attention(q, k, v, mask):
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    s = np.where(mask, s, -np.inf)
    m = np.max(s, -1, keepdims=True)
    e = np.where(mask, np.exp(s - np.where(np.isfinite(m), m, 0)), 0)
    z = e.sum(-1, keepdims=True)
    w = np.where(z > 0, e / np.where(z > 0, z, 1), 0)   # a row with nothing kept attends to nothing
    return w @ v
causal = np.tril(np.ones((3, 3), dtype=bool))
"#;
    s
}

fn python(body: &str, what: &str, modules: &[&str]) -> Option<Vec<String>> {
    crate::python::run_lines(modules, what, &format!("{}\n{body}", np_inputs()))
}

/// (dp expression of a Tensor, its NumPy/JAX value).
const VALUES: &[(&str, &str)] = &[
    ("nn.gelu x", "jax.nn.gelu(jnp.asarray(x), approximate=True)"),
    ("nn.gelu (x * 4.0)", "gelu(x * 4)"),
    ("nn.gelu_exact x", "jax.nn.gelu(jnp.asarray(x), approximate=False)"),
    ("nn.gelu_exact (x * 4.0)", "jax.nn.gelu(jnp.asarray(x * 4), approximate=False)"),
    ("nn.layer_norm { g = g, b = b } x", "layer_norm(g, b, x)"),
    ("nn.layer_norm (nn.layer_norm_init 4) (x * 100.0)", "layer_norm(1.0, 0.0, x * 100)"),
    ("nn.attention q k v mask", "attention(q, k, v, mask)"),
    ("nn.attention q4 k4 v4 (nn.causal_mask 3)", "attention(q4, k4, v4, causal)"),
    (
        "nn.attention (row q 0) (row k 1) (row v 1) (tensor [true, true, false, true, true])",
        "attention(q[0], k[1], v[1], np.array([1, 1, 0, 1, 1], bool))",
    ),
    ("astype \"float64\" (nn.causal_mask 3)", "causal"),
    ("nn.embedding table ids", "np.take(table, ids, axis=0)"),
    ("nn.embedding table (tensor [2])", "table[[2]]"),
    ("nn.dropout (key 3) 0.25 x", "np.where(keep3, x / 0.75, 0)"),
    ("nn.dropout (key 3) 0.0 x", "x"),
    ("nn.dropout (key 3) 1.0 x", "0 * x"),
];

#[test]
fn nn_values_agree_with_numpy_and_jax() {
    let body: String = VALUES.iter().map(|(_, np)| format!("show({np})\n")).collect();
    // The mask is drawn before float64 is enabled: with x64 on, JAX draws its uniforms in
    // float64 and so gives other bits (dp's `bernoulli` is JAX's default, float32).
    let header = "import jax, jax.numpy as jnp, jax.random as jr\n\
                  keep3 = np.asarray(jr.bernoulli(jr.key(3), 0.75, x.shape))\n\
                  jax.config.update('jax_enable_x64', True)\n";
    let Some(want) = python(&format!("{header}{body}"), "nn's functions against NumPy and JAX", &["numpy", "jax"])
    else {
        return;
    };
    let mut src = dp_inputs();
    for (dp, _) in VALUES {
        src += &format!("let () = println (to_list ({dp}))\n");
    }
    let got = run_ok(&src);
    assert_eq!(got.len(), VALUES.len(), "{got:?}");
    let bad = crate::python::disagreements(VALUES, &got, &want, 1e-12);
    assert!(bad.is_empty(), "disagreements:\n{}", bad.join("\n"));
}

/// The shapes and dtypes the functions promise, and attention's masked-everywhere row.
#[test]
fn nn_shapes_and_the_empty_attention_row() {
    let mut src = dp_inputs();
    src += "let () = println (shape (nn.embedding table ids), dtype (nn.embedding table ids))\n\
            let () = println (shape (nn.attention q4 k4 v4 (nn.causal_mask 3)))\n\
            let () = println (dtype (nn.causal_mask 4), dtype (nn.gelu (tensor [1.0])), dtype (nn.layer_norm { g = g, b = b } x))\n\
            let () = println (to_list (row (row (nn.attention q k v mask) 0) 1))\n\
            let () = println (to_list (row (row (grad (fun q -> sum (nn.attention q k v mask)) q) 1) 1))\n";
    assert_eq!(
        run_ok(&src),
        [
            r#"([3, 2, 3], "float64")"#,
            "[2, 2, 3, 3]",
            r#"("bool", "float32", "float64")"#,
            "[0.0, 0.0]",
            "[0.0, 0.0, 0.0, 0.0]"
        ]
    );
}

/// (dp function of `x` giving a Tensor, the same in NumPy, the input's name).
const GRADS: &[(&str, &str, &str)] = &[
    ("nn.gelu (x * 3.0)", "gelu(x * 3)", "x"),
    ("nn.gelu_exact (x * 3.0)", "gelu_exact(x * 3)", "x"),
    ("nn.layer_norm { g = g, b = b } x", "layer_norm(g, b, x)", "x"),
    ("nn.layer_norm { g = x, b = b } (q * q)", "layer_norm(x, b, q * q)", "g"),
    ("nn.layer_norm { g = g, b = x * x } q", "layer_norm(g, x * x, q)", "b"),
    ("nn.attention x k v mask", "attention(x, k, v, mask)", "q"),
    ("nn.attention q x v mask", "attention(q, x, v, mask)", "k"),
    ("nn.attention q k (x * x) mask", "attention(q, k, x * x, mask)", "v"),
    ("nn.attention x x x (nn.causal_mask 3)", "attention(x, x, x, causal)", "q4"),
    ("nn.embedding (x * x) ids", "np.take(x * x, ids, axis=0)", "table"),
    ("nn.dropout (key 11) 0.5 (x * x)", "np.where(keep, x * x / 0.5, 0)", "x"),
];

#[test]
fn nn_gradients_match_finite_differences() {
    let cases: String = GRADS.iter().map(|(_, np, input)| format!("    ({np:?}, {input}),\n")).collect();
    let body = format!(
        r#"
import jax, jax.random as jr
keep = np.asarray(jr.bernoulli(jr.key(11), 0.5, x.shape))
h = 1e-6
for expr, x0 in [
{cases}]:
    L = lambda x: np.sum(np.sin(eval(expr, dict(globals(), x=x))))
    fd = np.zeros_like(x0)   # not `g`: that is an input
    for i in np.ndindex(x0.shape):
        e = np.zeros_like(x0); e[i] = h
        fd[i] = (L(x0 + e) - L(x0 - e)) / (2 * h)
    show(fd)
"#
    );
    let Some(want) = python(&body, "nn's gradients against finite differences", &["numpy", "jax"]) else { return };
    let mut src = dp_inputs();
    for (dp, _, input) in GRADS {
        src += &format!("let () = println (to_list (grad (fun x -> sum (sin ({dp}))) {input}))\n");
    }
    let got = run_ok(&src);
    assert_eq!(got.len(), GRADS.len(), "{got:?}");
    let bad: Vec<String> = GRADS
        .iter()
        .zip(got.iter().zip(&want))
        .filter(|(_, (g, w))| !crate::python::agree(&numbers(g), &numbers(w), 1e-6))
        .map(|((dp, _, _), (g, w))| format!("`{dp}`: grad {g}\n    finite differences {w}"))
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// AdamW, four steps on a record of a tensor and a Float, the gradients those of a quadratic
/// at the current parameters and the lr from the warm-up and cosine schedules, against
/// torch.optim.AdamW's algorithm (its documentation's pseudocode) in NumPy; and the schedules
/// themselves, steps -1 .. 12.
#[test]
fn adamw_and_schedules_agree_with_torchs_algorithm() {
    let body = r#"
lr0, b1, b2, eps, wd = 0.1, 0.9, 0.99, 1e-8, 0.05
def sched(s):
    return lr0 * (s + 1) / 2 if s < 2 else lr0 * 0.5 * (1 + math.cos(math.pi * (s - 2) / 4))
p = [x[0].copy(), np.float64(0.75)]
m = [np.zeros_like(p[0]), 0.0]; v = [np.zeros_like(p[0]), 0.0]
for t in range(1, 5):
    lr = sched(t - 1)
    grads = [2 * (p[0] - x[1]) + p[0] ** 3, 3 * p[1] ** 2 - 1]
    for i, gr in enumerate(grads):
        p[i] = p[i] - lr * wd * p[i]                      # decoupled weight decay
        m[i] = b1 * m[i] + (1 - b1) * gr
        v[i] = b2 * v[i] + (1 - b2) * gr * gr
        mhat, vhat = m[i] / (1 - b1 ** t), v[i] / (1 - b2 ** t)
        p[i] = p[i] - lr * mhat / (np.sqrt(vhat) + eps)
show(p[0]); show(p[1])
def warm(lr, w, s): return lr if s >= w else (0.0 if s <= 0 else lr * s / w)
def cos_(lr, n, s): return lr if s <= 0 else (0.0 if s >= n else lr * 0.5 * (1 + math.cos(math.pi * s / n)))
show([warm(0.5, 4, s) for s in range(-1, 13)]); show([cos_(0.5, 10, s) for s in range(-1, 13)])
"#;
    let Some(want) = python(body, "optim.adamw against torch's algorithm", &["numpy"]) else { return };
    let mut src = dp_inputs();
    src += "let sched s = if s < 2 then optim.linear_warmup 0.1 2 (s + 1) else optim.cosine_schedule 0.1 4 (s - 2)\n\
            let target = row x 1\n\
            let loss p = sum ((p.w - target) * (p.w - target)) + sum (p.w * p.w * p.w * p.w) * 0.25 + p.c * p.c * p.c - p.c\n\
            let rec go s p st = if s == 4 then p else let (p', st') = optim.adamw (sched s) 0.9 0.99 1e-8 0.05 st p (grad loss p) in go (s + 1) p' st'\n\
            let p0 = { w = row x 0, c = 0.75 }\n\
            let p = go 0 p0 (optim.adamw_init p0)\n\
            let () = println (to_list p.w)\n\
            let () = println p.c\n\
            let () = println (map (optim.linear_warmup 0.5 4) (range (-1) 13))\n\
            let () = println (map (optim.cosine_schedule 0.5 10) (range (-1) 13))\n";
    let got = run_ok(&src);
    assert_eq!(got.len(), 4, "{got:?}");
    for (g, w) in got.iter().zip(&want) {
        assert!(crate::python::agree(&numbers(g), &numbers(w), 1e-12), "dp {g}\nNumPy {w}");
    }
}
