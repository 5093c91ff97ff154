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
            // `serde_json::Value` (the safetensors header) is JSON's value, not the interpreter's.
            let words: Vec<&str> =
                words.into_iter().filter(|w| *w != "Value" || !line.contains("serde_json::Value")).collect();
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

/// The layers of the dp crate as docs/design.md draws them: its ```layers block, top first, one
/// layer a line. Modules on one line are side by side (neither imports the other); `a+b` is a
/// knot of modules that import each other, one layer.
fn documented_layers() -> Vec<Vec<Vec<String>>> {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/design.md"))
        .expect("read docs/design.md");
    let start = doc.find("```layers\n").expect("docs/design.md has a ```layers block") + "```layers\n".len();
    let len = doc[start..].find("```").expect("the ```layers block ends");
    doc[start..start + len]
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(|knot| knot.split('+').map(String::from).collect()).collect())
        .collect()
}

/// The dp module a source file belongs to: the first component under src/.
fn module_of(file: &Path, src: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_string_lossy().to_string();
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_string();
    (name != "lib").then_some(name)
}

/// Each `crate::name` that a file's code (not its comments) mentions.
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let name: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            // A grouped `use crate::{a, b}` would hide its modules from this check: it is
            // reported as a module of its own name, `{`, which no layer holds.
            let name = if name.is_empty() && after.starts_with('{') { "{".to_string() } else { name };
            if !name.is_empty() {
                out.push((i + 1, name));
            }
            rest = after;
        }
    }
    out
}

#[test]
fn the_dp_crate_imports_only_downwards() {
    let layers = documented_layers();
    let rank = |m: &str| {
        layers
            .iter()
            .enumerate()
            .find_map(|(i, layer)| layer.iter().find(|knot| knot.iter().any(|k| k == m)).map(|knot| (i, knot.clone())))
    };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        let Some(module) = module_of(file, &src) else { continue };
        let Some((mine, knot)) = rank(&module) else {
            wrong
                .push(format!("{}: module `{module}` is not in the ```layers block of docs/design.md", file.display()));
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read a source file");
        for (line, target) in crate_paths(&text) {
            if target == module || knot.contains(&target) {
                continue;
            }
            match rank(&target) {
                Some((theirs, _)) if theirs > mine => {}
                Some(_) => wrong.push(format!(
                    "{}:{line}: `{module}` uses `crate::{target}`, which is not below it",
                    file.display()
                )),
                None => wrong.push(format!(
                    "{}:{line}: `crate::{target}` is not in the ```layers block of docs/design.md",
                    file.display()
                )),
            }
        }
    }
    assert!(files.len() > 20, "found only {} source files under src/", files.len());
    assert!(wrong.is_empty(), "imports against the layer diagram (docs/design.md):\n{}", wrong.join("\n"));
}

#[test]
fn the_layer_check_reads_paths_and_skips_comments() {
    let found = crate_paths("use crate::runtime::value::Value; // crate::eval\nlet x = crate::ad::strip(v);\n");
    assert_eq!(found, vec![(1, "runtime".to_string()), (2, "ad".to_string())]);
}
