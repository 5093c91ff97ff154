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
