//! Element types (LANGUAGE.md "Element types"): each case is a dp expression and the same
//! computation in NumPy with the dtype docs/language.md's promotion rules give, written out
//! here (NumPy's own promotion differs for weakly typed Floats, so the test does not ask NumPy
//! for the dtype). dp must print that dtype and NumPy's values; float64 cases to 1e-15
//! relative, so a float32 step anywhere in them would fail.

use crate::golden::numbers;
use crate::run::run_ok;
use std::process::Command;

/// (dp expression, the dtype the rules give, NumPy expression computing the values)
const CASES: &[(&str, &str, &str)] = &[
    ("tensor [1, 2, 3]", "int64", "np.array([1, 2, 3])"),
    ("tensor [[true, false]]", "bool", "np.array([[True, False]])"),
    ("x64 * x64 + 0.1", "float64", "x64 * x64 + 0.1"),
    ("exp x64 / 3.0", "float64", "np.exp(x64) / 3.0"),
    ("x64 + x32", "float64", "x64 + x32.astype(np.float64)"),
    ("i64 * 0.5", "float32", "(i64 * 0.5).astype(np.float32)"),
    ("i64 + i64 * i64", "int64", "i64 + i64 * i64"),
    ("i64 / (i64 + tensor [10, 10, 10])", "float32", "(i64 / (i64 + 10)).astype(np.float32)"),
    ("i64 ** tensor [2, 3, 0]", "int64", "i64 ** np.array([2, 3, 0])"),
    ("b + b", "int64", "b.astype(np.int64) + b.astype(np.int64)"),
    ("-i64", "int64", "-i64"),
    ("sin i64", "float32", "np.sin(i64.astype(np.float32))"),
    ("reshape i64 [3, 1]", "int64", "i64.reshape(3, 1)"),
    ("transpose (reshape b [1, 3])", "bool", "b.reshape(1, 3).T"),
    ("concat 0 [i64, i64]", "int64", "np.concatenate([i64, i64])"),
    (
        "astype \"int64\" (tensor [1.7, -2.7, 0.5])",
        "int64",
        "np.array([1.7, -2.7, 0.5], dtype=np.float32).astype(np.int64)",
    ),
    ("astype \"bool\" (tensor [0.0, -2.0])", "bool", "np.array([0.0, -2.0]) != 0"),
    ("astype \"float32\" x64", "float32", "x64.astype(np.float32)"),
    ("reshape x64 [3, 1] @ reshape x64 [1, 3]", "float64", "x64.reshape(3, 1) @ x64.reshape(1, 3)"),
    ("softmax x64", "float64", "np.exp(x64 - x64.max()) / np.exp(x64 - x64.max()).sum()"),
    ("grad (fun x -> sum (x * x * x)) x64", "float64", "3 * x64 * x64"),
    ("grad (fun x -> mean (exp x)) x64", "float64", "np.exp(x64) / 3"),
    ("grad (fun x -> logsumexp (x * 2.0)) x64", "float64", "2 * np.exp(2 * x64 - np.log(np.exp(2 * x64).sum()))"),
    ("grad (fun x -> sum (astype \"float64\" x * x64)) x32", "float32", "x64.astype(np.float32)"),
    ("snd (jvp (fun x -> sin x * x) x64 x64)", "float64", "(np.cos(x64) * x64 + np.sin(x64)) * x64"),
];

/// The definitions every case may use: float64 values no float32 holds exactly.
const PRELUDE_DP: &str = r#"let x64 = load_npy X64
let x32 = tensor [0.5, 0.25, -1.0]
let i64 = tensor [3, -4, 5]
let b = tensor [true, false, true]
"#;

const PRELUDE_NP: &str = r#"import numpy as np, sys
x64 = np.array([0.1, 0.7, -1.3])
x32 = np.array([0.5, 0.25, -1.0], dtype=np.float32)
i64 = np.array([3, -4, 5])
b = np.array([True, False, True])
"#;

#[test]
fn dtypes_promote_and_compute_as_documented() {
    let Some(python) = crate::python::python_with(&["numpy"], "the dtype checks against NumPy") else { return };
    let x64 = crate::run::temp_path("npy");
    let mut script = PRELUDE_NP.to_string();
    script += &format!("np.save({:?}, x64)\n", x64.to_string_lossy());
    for (_, _, np_expr) in CASES {
        script += &format!("print(' '.join(repr(float(v)) for v in np.ravel({np_expr})))\n");
    }
    let out = Command::new(&python).arg("-c").arg(&script).output().expect("run python");
    assert!(out.status.success(), "numpy: {}", String::from_utf8_lossy(&out.stderr));
    let want: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect();
    let mut src = PRELUDE_DP.replace("X64", &format!("{:?}", x64.to_string_lossy()));
    for (dp_expr, _, _) in CASES {
        src += &format!("let () = let t = {dp_expr} in println (dtype t, to_list t)\n");
    }
    let got = run_ok(&src);
    assert_eq!(got.len(), CASES.len(), "{got:?}");
    let mut failures = Vec::new();
    for (((dp_expr, dtype, _), g), w) in CASES.iter().zip(&got).zip(&want) {
        let shown = format!("(\"{dtype}\",");
        let (values, expected) = (numbers(g), numbers(w));
        let tol = if *dtype == "float32" { 1e-6 } else { 1e-15 };
        let close = values.len() == expected.len()
            && values.iter().zip(&expected).all(|(a, b)| (a - b).abs() <= tol * b.abs().max(1e-300) || a == b);
        if !g.starts_with(&shown) || !close {
            failures.push(format!("`{dp_expr}`: dp printed {g}; want dtype {dtype} and values {w}"));
        }
    }
    let _ = std::fs::remove_file(&x64);
    assert!(failures.is_empty(), "{} of {} cases:\n{}", failures.len(), CASES.len(), failures.join("\n"));
}

#[test]
fn dtype_errors_are_clear() {
    for (src, want) in [
        ("let t = astype \"float16\" (tensor [1.0])", "unknown dtype `float16`"),
        ("let t = astype \"int64\" (tensor [nan])", "which no int64 holds"),
        ("let t = tensor [1, 2] ** tensor [-1, 1]", "negative power"),
    ] {
        let r = crate::run::run_dp(&format!("{src}\nlet () = println t\n"));
        assert!(!r.ok && r.stderr.contains(want) && r.stderr.contains(":1:"), "{src}:\n{}", r.stderr);
        assert!(!r.stderr.contains("internal") && !r.stderr.contains("panicked"), "{}", r.stderr);
    }
}

/// `DP_FLUSH_SUBNORMALS=1` flushes subnormal results and operands to zero on every thread dp
/// computes on — the interpreter's, the CPU pool's (a 512² product runs on it), and staged
/// code — and without it arithmetic is IEEE: the same program prints the subnormals.
#[test]
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn flushing_subnormals_is_a_process_wide_choice() {
    let src = "let () = println (1e-308 * 0.5)\n\
               let a = ones [512, 512] * 1e-21\n\
               let c = a @ a\n\
               let () = println (sum c > 0.0, max c > 0.0)\n\
               let d = astype \"float64\" (ones [100000]) * 1e-300 * 1e-10\n\
               let () = println (sum d > 0.0)\n\
               let () = println (jit (fun x -> x * 0.5) 1e-308)\n";
    let ieee = crate::run::run_with(&[], src, &[]);
    assert!(ieee.ok, "{}", ieee.stderr);
    assert_eq!(ieee.stdout, "5e-309\n(true, true)\ntrue\n5e-309\n");
    for threads in ["1", "2"] {
        let flushed = crate::run::run_with(&[], src, &[("DP_FLUSH_SUBNORMALS", "1"), ("DP_NUM_THREADS", threads)]);
        assert!(flushed.ok, "{}", flushed.stderr);
        assert_eq!(flushed.stdout, "0.0\n(false, false)\nfalse\n0.0\n", "DP_NUM_THREADS={threads}");
    }
}
