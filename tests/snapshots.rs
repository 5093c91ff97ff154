//! Snapshots of rendered error messages (plain text, as a user sees them in a pipe).

use crate::golden::{dp, dp_files};
use std::path::Path;

#[test]
fn error_messages() {
    let paths = dp_files(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/programs/errors")));
    assert!(paths.len() >= 30, "expected at least 30 error programs, found {}", paths.len());
    for p in paths {
        let name = p.file_stem().unwrap().to_string_lossy().to_string();
        let rel =
            p.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap().to_string_lossy().trim_start_matches('/').to_string();
        // Run from the project root with a relative path, so reports read the same everywhere.
        let out = dp().current_dir(env!("CARGO_MANIFEST_DIR")).arg("run").arg(&rel).output().unwrap();
        let text = String::from_utf8_lossy(&out.stderr).to_string();
        insta::assert_snapshot!(name, text);
    }
}
