//! Running the `dp` binary on a program written to a temporary file: the one helper the AD,
//! tensor and GPU tests share.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

pub struct Run {
    pub stdout: String,
    pub stderr: String,
    pub ok: bool,
}

/// A fresh path in the temporary directory (unique within this test process).
pub fn temp_path(ext: &str) -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("dp-test-{}-{n}.{ext}", std::process::id()))
}

/// `dp run ARGS FILE` on `src`, with extra environment variables.
pub fn run_with(args: &[&str], src: &str, env: &[(&str, &str)]) -> Run {
    let path = temp_path("dp");
    std::fs::write(&path, src).expect("write a temporary dp file");
    let out = Command::new(env!("CARGO_BIN_EXE_dp"))
        .arg("run")
        .args(args)
        .arg(&path)
        .envs(env.iter().copied())
        .output()
        .expect("run dp");
    let _ = std::fs::remove_file(&path);
    Run {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        ok: out.status.success(),
    }
}

pub fn run_dp(src: &str) -> Run {
    run_with(&[], src, &[])
}

/// Runs a program that must succeed (and not panic); returns its stdout lines.
pub fn run_ok(src: &str) -> Vec<String> {
    let r = run_dp(src);
    assert!(r.ok && !r.stderr.contains("panicked"), "dp failed on:\n{src}\n--- stderr\n{}", r.stderr);
    r.stdout.lines().map(String::from).collect()
}
