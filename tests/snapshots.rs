//! Snapshots of rendered error messages (plain text, as a user sees them in a pipe).

use crate::golden::dp;
use std::path::Path;

fn render(path: &Path) -> String {
    let out = dp().arg("run").arg(path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    // Paths differ between machines; keep the file name only.
    text.replace(concat!(env!("CARGO_MANIFEST_DIR"), "/"), "")
}

#[test]
fn error_messages() {
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/programs/errors"));
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "dp"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 30, "expected at least 30 error programs, found {}", paths.len());
    for p in paths {
        let name = p.file_stem().unwrap().to_string_lossy().to_string();
        let rel =
            p.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap().to_string_lossy().trim_start_matches('/').to_string();
        let out = dp().current_dir(env!("CARGO_MANIFEST_DIR")).arg("run").arg(&rel).output().unwrap();
        let _ = render;
        let text = String::from_utf8_lossy(&out.stderr).to_string();
        insta::assert_snapshot!(name, text);
    }
}
