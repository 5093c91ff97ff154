//! Keyed random numbers (LANGUAGE.md "Random keys") against JAX: the same seed and the same
//! splits give JAX's numbers — `uniform_key` and the key words exactly, `normal` to float32
//! rounding of the inverse error function, `bernoulli` exactly. `randint` and `permutation` are
//! dp's own schemes (docs/language.md), tested here for their contracts.

use crate::golden::numbers;
use crate::run::{run_dp, run_ok};
use std::process::Command;

/// (dp expression printing a list of numbers, the JAX expression of the same numbers, tolerance
/// relative to max(1, |value|))
const CASES: &[(&str, &str, f64)] = &[
    ("to_list (uniform_key (key 42) 0.0 1.0 [5])", "jr.uniform(jr.key(42), (5,))", 0.0),
    (
        "to_list (uniform_key (fst (split_key (key 7))) (-2.0) 3.0 [2, 3])",
        "jr.uniform(jr.split(jr.key(7))[0], (2, 3), minval=-2.0, maxval=3.0)",
        0.0,
    ),
    ("to_list (uniform_key (snd (split_key (key 7))) 0.0 1.0 [4])", "jr.uniform(jr.split(jr.key(7))[1], (4,))", 0.0),
    (
        "to_list (uniform_key (option_default (key 0) (nth (split_keys (key 3) 5) 4)) 0.0 1.0 [3])",
        "jr.uniform(jr.split(jr.key(3), 5)[4], (3,))",
        0.0,
    ),
    ("to_list (normal (key 0) [1000])", "jr.normal(jr.key(0), (1000,))", 2e-6),
    ("to_list (normal (key 123456789) [3, 7])", "jr.normal(jr.key(123456789), (3, 7))", 2e-6),
    (
        "to_list (astype \"float32\" (bernoulli (key 5) 0.3 [64]))",
        "jr.bernoulli(jr.key(5), 0.3, (64,)).astype(jnp.float32)",
        0.0,
    ),
    // dp's seed is a 64-bit Int: key (-9) is JAX's key of the int64 -9 (words 2^32 - 1 and
    // 2^32 - 9), which JAX without x64 can only be given as data.
    (
        "to_list (uniform_key (key (-9)) 0.0 1.0 [3])",
        "jr.uniform(jr.wrap_key_data(np.array([0xFFFFFFFF, 0xFFFFFFF7], np.uint32)), (3,))",
        0.0,
    ),
];

#[test]
fn keyed_numbers_are_jaxs() {
    let Some(python) = crate::python::python_with(&["jax"], "the random-key checks against JAX") else { return };
    let mut script = String::from(
        "import jax, jax.numpy as jnp, jax.random as jr, numpy as np\n\
         jax.config.update('jax_threefry_partitionable', True)\n",
    );
    for (_, jax_expr, _) in CASES {
        script += &format!("print(' '.join(repr(float(v)) for v in np.ravel(np.asarray({jax_expr}))))\n");
    }
    let out = Command::new(&python).arg("-c").arg(&script).output().expect("run python");
    assert!(out.status.success(), "jax: {}", String::from_utf8_lossy(&out.stderr));
    let want: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect();
    let src: String = CASES.iter().map(|(dp, _, _)| format!("let () = println ({dp})\n")).collect();
    let got = run_ok(&src);
    assert_eq!(got.len(), CASES.len(), "{got:?}");
    let mut failures = Vec::new();
    for (((dp, _, tol), g), w) in CASES.iter().zip(&got).zip(&want) {
        let (g, w) = (numbers(g), numbers(w));
        let close = g.len() == w.len() && g.iter().zip(&w).all(|(a, b)| (a - b).abs() <= tol * b.abs().max(1.0));
        if !close {
            failures.push(format!("{dp}\n  dp:  {g:?}\n  jax: {w:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn keys_are_values_and_samplers_keep_their_contracts() {
    let out = run_ok(
        r#"let k = key 11
let (a, b) = split_key k
let () = println (a == b, a == fst (split_key k), k == key 11)
let r = to_list (astype "float32" (randint k (-3) 4 [2000]))
let () = println (minimum r, maximum r)
let p = to_list (astype "float32" (permutation k 10))
let () = println (sum_float p, length p)
let () = println (dtype (randint k 0 2 [1]), dtype (bernoulli k 0.5 [1]), dtype (normal k [1]))
let () = println (shape (normal k [2, 0, 3]), length (split_keys k 0))
let u = uniform_key k 0.0 1.0 [3]
let dlo = grad (fun lo -> sum (uniform_key k lo 5.0 [3])) 1.0
let dhi = grad (fun hi -> sum (uniform_key k 1.0 hi [3])) 5.0
let () = println (abs (dlo - (3.0 - sum u)) < 1e-6, abs (dhi - sum u) < 1e-6, dlo > 0.0, dhi > 0.0)
"#,
    );
    assert_eq!(
        out,
        [
            "(false, true, true)",
            "(Some (-3.0), Some 3.0)",
            "(45.0, 10)",
            "(\"int64\", \"bool\", \"float32\")",
            "([2, 0, 3], 0)",
            "(true, true, true, true)",
        ]
    );
}

#[test]
fn bad_sampler_arguments_are_located_errors() {
    for (src, want) in [
        ("let t = randint (key 1) 3 3 [2]", "randint: the range [3, 3) is empty"),
        ("let t = bernoulli (key 1) 1.5 [2]", "bernoulli: the probability must be in [0, 1] (got 1.5)"),
        ("let t = normal (key 1) [-2]", "a dimension must not be negative"),
        ("let t = split_keys (key 1) (-1)", "split_keys's count must not be negative"),
    ] {
        let r = run_dp(src);
        assert!(!r.ok && r.stderr.contains(want) && !r.stderr.contains("panicked"), "{src}: {}", r.stderr);
    }
    let r = run_dp("let t = normal 3 [2]");
    assert!(!r.ok && r.stderr.contains("Key") && r.stderr.contains("Int"), "a seed is not a key: {}", r.stderr);
}
