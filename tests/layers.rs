//! The layers point one way (DESIGN.md principle 11): the tensor library (crates/dp-tensor)
//! is below the interpreter and must not reach up into it — no dependency on the `dp` crate,
//! and no mention of the interpreter's values, machine, faults or differentiation.

use std::path::{Path, PathBuf};

fn tensor_crate() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/dp-tensor")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read a source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_tensor_crate_does_not_depend_on_the_interpreter() {
    let manifest = std::fs::read_to_string(tensor_crate().join("Cargo.toml")).expect("read dp-tensor's Cargo.toml");
    for line in manifest.lines().map(str::trim) {
        let key = line.split(['=', ' ', '.']).next().unwrap_or("");
        assert!(
            key != "dp" && line != "[dependencies.dp]",
            "crates/dp-tensor/Cargo.toml depends on the interpreter: `{line}`"
        );
    }
}

#[test]
fn the_tensor_crate_names_nothing_of_the_interpreter() {
    // Paths into the interpreter, and the names of its run-time types (as whole words).
    const PATHS: &[&str] = &["dp::", "crate::eval", "crate::ad", "crate::core", "crate::builtins"];
    const NAMES: &[&str] = &["Value", "Machine", "Fault", "FResult"];
    let mut files = Vec::new();
    rust_files(&tensor_crate().join("src"), &mut files);
    assert!(files.len() > 5, "found only {} source files under crates/dp-tensor/src", files.len());
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read a source file");
        for (i, line) in text.lines().enumerate() {
            let words: Vec<&str> = line.split(|c: char| !(c.is_alphanumeric() || c == '_')).collect();
            let hit = PATHS.iter().find(|p| line.contains(*p)).or_else(|| NAMES.iter().find(|n| words.contains(n)));
            if let Some(what) = hit {
                found.push(format!("{}:{}: `{what}`: {}", file.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "the tensor crate reaches into the interpreter:\n{}", found.join("\n"));
}

#[test]
fn a_plain_cargo_test_covers_the_tensor_crate() {
    // The README's `cargo test` runs the tensor library's unit tests only while it is a default
    // member of the workspace.
    let manifest = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .expect("read the workspace's Cargo.toml");
    let line = manifest.lines().find(|l| l.trim_start().starts_with("default-members")).unwrap_or("");
    assert!(line.contains("\"crates/dp-tensor\""), "crates/dp-tensor is not a default member: `{line}`");
}
