//! The Jupyter kernel: `dp jupyter install` writes a kernel spec; the kernel passes the Jupyter
//! project's own kernel tests (jupyter_kernel_test) and dp's protocol checks, and runs
//! examples/notebooks/tour.ipynb headlessly (nbclient) with the expected outputs. Both Python
//! halves are in tests/jupyter_kernel.py.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A fresh directory holding the kernel spec (`dp jupyter install --prefix DIR`), and the
/// environment that makes Jupyter find it and keep its files there.
fn installed(tag: &str) -> (PathBuf, Vec<(&'static str, PathBuf)>) {
    let dir = std::env::temp_dir().join(format!("dp-jupyter-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out =
        Command::new(env!("CARGO_BIN_EXE_dp")).args(["jupyter", "install", "--prefix"]).arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let env = vec![
        ("JUPYTER_PATH", dir.join("share").join("jupyter")),
        ("JUPYTER_DATA_DIR", dir.join("data")),
        ("JUPYTER_RUNTIME_DIR", dir.join("runtime")),
        ("JUPYTER_CONFIG_DIR", dir.join("config")),
        ("IPYTHONDIR", dir.join("ipython")),
    ];
    (dir, env)
}

#[test]
fn install_writes_a_kernel_spec_naming_this_dp() {
    let (dir, _) = installed("spec");
    let spec = dir.join("share/jupyter/kernels/dp/kernel.json");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&spec).unwrap()).unwrap();
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_dp")).unwrap();
    assert_eq!(json["argv"], serde_json::json!([exe.to_string_lossy(), "jupyter", "kernel", "{connection_file}"]));
    assert!(Path::new(json["argv"][0].as_str().unwrap()).is_absolute());
    assert_eq!(json["display_name"], "dp");
    assert_eq!(json["language"], "dp");
    assert_eq!(json["interrupt_mode"], "message");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn install_for_the_user_honours_jupyter_data_dir() {
    let dir = std::env::temp_dir().join(format!("dp-jupyter-user-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_dp"))
        .args(["jupyter", "install", "--user"])
        .env("JUPYTER_DATA_DIR", &dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(dir.join("kernels/dp/kernel.json").is_file());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_connection_file_is_a_clear_error() {
    let path = std::env::temp_dir().join(format!("dp-jupyter-conn-{}.json", std::process::id()));
    std::fs::write(&path, "{\"shell_port\": 1}").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_dp")).args(["jupyter", "kernel"]).arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("connection file") && err.contains("iopub_port"), "{err}");
    let _ = std::fs::remove_file(&path);
}

fn python_half(tag: &str, args: &[&str]) {
    let Some(python) = crate::python::python_with(&["jupyter_kernel_test", "nbclient"], "the Jupyter kernel tests")
    else {
        return;
    };
    let (dir, env) = installed(tag);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/jupyter_kernel.py");
    let out = Command::new(python).arg(script).args(args).envs(env).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    eprintln!("{stdout}{stderr}");
}

#[test]
fn the_kernel_passes_jupyter_kernel_test_and_dps_protocol_checks() {
    python_half("kernel", &["kernel"]);
}

#[test]
fn the_tour_notebook_runs_headlessly_with_the_expected_outputs() {
    let notebook = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/notebooks/tour.ipynb");
    python_half("notebook", &["notebook", notebook.to_str().unwrap()]);
}
