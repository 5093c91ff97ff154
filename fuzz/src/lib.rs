//! The bodies of the file-format fuzz targets, shared by the libFuzzer binaries
//! (`fuzz_targets/*.rs`, one line each) and by a plain `cargo test` of the main crate
//! (tests/fuzz_bodies.rs includes this file), which runs every body over the seed corpus in
//! `fuzz/seeds/TARGET/` and a few thousand mutations of it, so CI exercises them without
//! nightly or cargo-fuzz.
//!
//! To add a target (say `load_npz`): write its body here as `fn(&[u8])` that hands the bytes
//! to dp through `through_file` (the loaders take paths, as users call them) and lets every
//! `Err` pass; add it to `TARGETS`; add `fuzz_targets/load_npz.rs` with
//! the one-line glue (copy `load_npy.rs`), a `[[bin]]` in
//! fuzz/Cargo.toml, and seed files under `fuzz/seeds/load_npz/`. A panic (or an abort) is the
//! bug the fuzzer looks for; an `Err` is a refused file, which is fine.

use std::io::Write;

/// A target's name (also its seed directory and binary) and its body.
pub type Target = (&'static str, fn(&[u8]));

pub const TARGETS: &[Target] = &[
    ("load_npy", load_npy),
    ("read_csv", read_csv),
    ("load_csv", load_csv),
    ("load_npz", load_npz),
    ("load_params", load_params),
];

/// Inputs larger than this are skipped: the formats' interesting structure is small.
pub const MAX_LEN: usize = 1 << 16;

/// `load_npy` on the bytes as a file.
pub fn load_npy(data: &[u8]) {
    through_file(data, "npy", |path| {
        let _ = dp::tensor::npy::load(path);
    });
}

/// `load_npz` on the bytes as a file: every member it returns is a whole tensor.
pub fn load_npz(data: &[u8]) {
    through_file(data, "npz", |path| {
        if let Ok(members) = dp::tensor::npz::load(path) {
            for (_, t) in members {
                assert_eq!(t.to_f64s().map(|v| v.len()).ok(), Some(t.shape().iter().product::<usize>()));
            }
        }
    });
}

/// `load_params` on the bytes as a file, against the template `(0.0, zeros [2, 3], [zeros [2]])`
/// (leaves `0`, `1`, `2.0`; the seeds are files with those names), and the safetensors reader
/// on every entry of whatever header parses, so entries the template does not name are read too.
pub fn load_params(data: &[u8]) {
    use dp::runtime::value::Value;
    through_file(data, "safetensors", |path| {
        let zeros = |s: &[usize]| Value::Tensor(std::rc::Rc::new(dp::tensor::Tensor::zeros(s)));
        let template = Value::Tuple(std::rc::Rc::new(vec![
            Value::Float(0.0),
            zeros(&[2, 3]),
            Value::list([zeros(&[2])].into_iter()),
        ]));
        let mut args = vec![template, Value::Str(std::rc::Rc::new(path.to_string()))];
        let _ = dp::eval::builtins::files::call(dp::builtins::B::LoadParams, &mut || args.pop().unwrap_or_default());
        if let Ok(file) = dp::tensor::safetensors::read(path) {
            for e in &file.entries {
                let _ = file.tensor(e);
                let _ = file.scalar(e);
            }
        }
    });
}

/// `read_csv`'s parser on the bytes; every field it returns is valid UTF-8 by construction.
pub fn read_csv(data: &[u8]) {
    if data.len() > MAX_LEN {
        return;
    }
    if let Ok(rows) = dp::eval::builtins::csv::read_strings(data) {
        // An RFC 4180 writer's output of those rows reads back as the same rows.
        let again = dp::eval::builtins::csv::read_strings(write_csv(&rows).as_bytes());
        assert_eq!(again.as_ref().ok(), Some(&rows), "rewritten CSV reads differently");
    }
}

/// `load_csv`'s parser on the bytes: a table it accepts has rows × cols values.
pub fn load_csv(data: &[u8]) {
    if data.len() > MAX_LEN {
        return;
    }
    if let Ok(t) = dp::eval::builtins::csv::load_numeric(data) {
        assert_eq!(t.values.len(), t.rows * t.cols);
    }
}

/// Writes rows as RFC 4180 with every field quoted (an empty row stays an empty line).
fn write_csv(rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    for r in rows {
        let fields: Vec<String> = r.iter().map(|f| format!("\"{}\"", f.replace('"', "\"\""))).collect();
        out += &fields.join(",");
        out += "\r\n";
    }
    out
}

/// Runs `f` on a path holding `data`: one file per thread and extension, rewritten for each
/// input (on Linux's /tmp or `TMPDIR`), so the loaders run exactly as `load_npy "f.npy"` does.
pub fn through_file(data: &[u8], ext: &str, f: impl FnOnce(&str)) {
    if data.len() > MAX_LEN {
        return;
    }
    let name = format!("dp-fuzz-{}-{:?}.{ext}", std::process::id(), std::thread::current().id());
    let path = std::env::temp_dir().join(name.replace(['(', ')'], ""));
    let written = std::fs::File::create(&path).and_then(|mut file| file.write_all(data));
    if written.is_ok() {
        if let Some(p) = path.to_str() {
            f(p);
        }
    }
}
