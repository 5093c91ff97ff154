//! The Python interpreter that tests compare dp against (NumPy, safetensors, JAX, Jupyter's test
//! clients). `.ci/run` makes a virtual environment from `.ci/requirements.txt` and points
//! `DP_PYTHON` at it, with `DP_REQUIRE_PYTHON=1`; elsewhere a test that needs a module it cannot
//! import prints a notice and skips.

use std::path::PathBuf;
use std::process::Command;

/// The interpreter named by `DP_PYTHON` (else `python3`), if it imports every one of `modules`.
/// `what` names the test, for the notice printed when it is skipped.
pub fn python_with(modules: &[&str], what: &str) -> Option<PathBuf> {
    let python = PathBuf::from(std::env::var_os("DP_PYTHON").unwrap_or_else(|| "python3".into()));
    let imports = format!("import {}", modules.join(", "));
    let ok = Command::new(&python).arg("-c").arg(&imports).output().is_ok_and(|o| o.status.success());
    if ok {
        return Some(python);
    }
    let required = std::env::var("DP_REQUIRE_PYTHON").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "DP_REQUIRE_PYTHON=1 but `{}` cannot `{imports}` (needed by {what}; .ci/run installs .ci/requirements.txt)",
        python.display()
    );
    eprintln!(
        "note: `{}` cannot `{imports}`; skipping {what} (set DP_PYTHON to a venv made from .ci/requirements.txt)",
        python.display()
    );
    None
}

/// Runs `script` with the interpreter of `python_with(modules, what)`: its stdout's lines, or
/// None when the test is skipped. A failing script fails the test, with its stderr.
pub fn run_lines(modules: &[&str], what: &str, script: &str) -> Option<Vec<String>> {
    let python = python_with(modules, what)?;
    let out = Command::new(&python).arg("-c").arg(script).output().expect("run python");
    assert!(out.status.success(), "python: {}\n--- script\n{script}", String::from_utf8_lossy(&out.stderr));
    Some(String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect())
}

/// Whether dp's numbers and Python's agree to `tol` relative to max(1, |want|), NaN matching NaN.
pub fn agree(got: &[f64], want: &[f64], tol: f64) -> bool {
    got.len() == want.len()
        && got.iter().zip(want).all(|(g, w)| (g.is_nan() && w.is_nan()) || (g - w).abs() <= tol * w.abs().max(1.0))
}

/// The rows of a table of (dp expression, Python expression) whose printed numbers (`got`,
/// `want`, line by line) disagree to `tol`, each as a report.
pub fn disagreements(cases: &[(&str, &str)], got: &[String], want: &[String], tol: f64) -> Vec<String> {
    use crate::golden::numbers;
    cases
        .iter()
        .zip(got.iter().zip(want))
        .filter(|(_, (g, w))| !agree(&numbers(g), &numbers(w), tol))
        .map(|((dp, py), (g, w))| format!("`{dp}`: dp {g}\n    `{py}`: {w}"))
        .collect()
}
