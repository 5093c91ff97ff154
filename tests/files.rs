//! Files of tensors against their Python readers and writers: checkpoints (`save_params`,
//! `load_params`) with the `safetensors` package, `.npz` archives with NumPy. Expected values
//! are the ones the Python side wrote or read, never dp's own output.

use crate::run::{run_dp, run_ok, temp_path};
use std::path::{Path, PathBuf};
use std::process::Command;

fn safetensors_python() -> Option<PathBuf> {
    crate::python::python_with(&["safetensors", "numpy"], "the safetensors checkpoint checks")
}

fn numpy() -> Option<PathBuf> {
    crate::python::python_with(&["numpy"], "the .npz checks against NumPy")
}

fn dp_str(p: &Path) -> String {
    format!("{:?}", p.to_string_lossy())
}

/// Runs a Python script with `args`; returns its stdout lines (it must succeed).
fn python(python: &Path, script: &str, args: &[&Path]) -> Vec<String> {
    let out = Command::new(python).arg("-c").arg(script).args(args).output().expect("run python");
    assert!(out.status.success(), "python failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect()
}

#[test]
fn dp_checkpoints_read_in_python() {
    let Some(py) = safetensors_python() else { return };
    let path = temp_path("safetensors");
    run_ok(&format!(
        "let p = {{ w = tensor [[1.5, -2.0, 3.25], [0.0, 4.0, 5.5]], b = 0.1, layers = [{{ k = tensor [1.0, 2.0] }}, {{ k = tensor [3.0] }}], pair = (2.5, tensor [7.0]) }}\nlet () = save_params {} p\n",
        dp_str(&path)
    ));
    let script = r#"
import sys
from safetensors.numpy import load_file
from safetensors import safe_open
d = load_file(sys.argv[1])
for k in sorted(d):
    print(k, d[k].dtype, list(d[k].shape), d[k].ravel().tolist())
with safe_open(sys.argv[1], "numpy") as f:
    print(f.metadata())
"#;
    let got = python(&py, script, &[&path]);
    assert_eq!(
        got,
        [
            "b float64 [] [0.1]",
            "layers.0.k float32 [2] [1.0, 2.0]",
            "layers.1.k float32 [1] [3.0]",
            "pair.0 float64 [] [2.5]",
            "pair.1 float32 [1] [7.0]",
            "w float32 [2, 3] [1.5, -2.0, 3.25, 0.0, 4.0, 5.5]",
            "{'format': 'dp'}",
        ]
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn python_checkpoints_load_in_dp() {
    let Some(py) = safetensors_python() else { return };
    let (path, big, wide) = (temp_path("safetensors"), temp_path("safetensors"), temp_path("safetensors"));
    let script = r#"
import sys, numpy as np
from safetensors.numpy import save_file
save_file({
    "w": (np.arange(6, dtype=np.float32) * 0.5).reshape(2, 3),
    "b": np.array(0.25, dtype=np.float64),
    "layers.0.k": np.array([1, 2], dtype=np.int64),
    "layers.1.k": np.array([3.5], dtype=np.float16),
}, sys.argv[1])
save_file({"w": np.array([1, 2**63], dtype=np.uint64)}, sys.argv[2])
save_file({"w": np.array([2**53 + 1], dtype=np.int64), "v": np.array([1e300, 0.1], dtype=np.float64)}, sys.argv[3])
"#;
    python(&py, script, &[&path, &big, &wide]);
    let got = run_ok(&format!(
        "let p = load_params {} {{ w = zeros [2, 3], b = 0.0, layers = [{{ k = zeros [2] }}, {{ k = zeros [1] }}] }}\nlet () = println (to_list (reshape p.w [6]), p.b, map (fun l -> to_list l.k) p.layers)\n",
        dp_str(&path)
    ));
    assert_eq!(got, ["([0.0, 0.5, 1.0, 1.5, 2.0, 2.5], 0.25, [[1.0, 2.0], [3.5]])"]);
    // Leaves take the template's dtypes, so int64 and float64 values load exactly into int64 and
    // float64 leaves...
    let got = run_ok(&format!(
        "let p = load_params {} {{ w = tensor [0], v = astype \"float64\" (zeros [2]) }}\nlet () = println (p.w, dtype p.w, p.v)\n",
        dp_str(&wide)
    ));
    assert_eq!(got, ["(tensor [9007199254740993], \"int64\", astype \"float64\" (tensor [1e300, 0.1]))"]);
    // ...a float32 leaf converts them, as PyTorch's load_state_dict does (1e300 overflows)...
    let got = run_ok(&format!(
        "let p = load_params {} {{ w = zeros [1], v = zeros [2] }}\nlet () = println (p.w, dtype p.w, p.v)\n",
        dp_str(&wide)
    ));
    assert_eq!(got, ["(tensor [9007199000000000.0], \"float32\", tensor [infinity, 0.1])"]);
    // ...and an int64 leaf takes only int64.
    let r = run_dp(&format!("let p = load_params {} {{ w = tensor [0], v = tensor [0, 0] }}\n", dp_str(&wide)));
    assert!(
        !r.ok && r.stderr.contains("tensor `v` has dtype float64, but the template's leaf is int64"),
        "{}",
        r.stderr
    );
    // ...and a value no dtype of dp's holds is refused, naming the tensor and element.
    let r = run_dp(&format!("let p = load_params {} {{ w = zeros [2] }}\n", dp_str(&big)));
    assert!(
        !r.ok && r.stderr.contains("element 1 is 9223372036854775808") && r.stderr.contains("tensor `w`"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("panicked") && !r.stderr.contains("internal"), "{}", r.stderr);
    for p in [path, big, wide] {
        let _ = std::fs::remove_file(p);
    }
}

#[test]
fn checkpoint_dtype_and_corruption_errors() {
    // A dtype dp has no float32 conversion for, written by hand (8-byte length, JSON, data).
    let path = temp_path("safetensors");
    let header = br#"{"w":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}}"#;
    let bytes = [(header.len() as u64).to_le_bytes().to_vec(), header.to_vec(), vec![0x38]].concat();
    std::fs::write(&path, &bytes).unwrap();
    let r = run_dp(&format!("let p = load_params {} {{ w = zeros [1] }}\n", dp_str(&path)));
    assert!(!r.ok && r.stderr.contains("tensor `w` has dtype F8_E4M3, which dp cannot load"), "{}", r.stderr);
    // Every truncation of a good file is a clear error.
    run_ok(&format!("let () = save_params {} {{ w = tensor [1.0, 2.0], b = 3.0 }}\n", dp_str(&path)));
    let good = std::fs::read(&path).unwrap();
    for cut in [0, 7, 8, 20, good.len() - 9, good.len() - 1] {
        std::fs::write(&path, &good[..cut]).unwrap();
        let r = run_dp(&format!("let p = load_params {} {{ w = zeros [2], b = 0.0 }}\n", dp_str(&path)));
        assert!(!r.ok && r.stderr.contains("is not a safetensors file"), "cut {cut}: {}", r.stderr);
        assert!(!r.stderr.contains("panicked") && !r.stderr.contains("internal"), "{}", r.stderr);
    }
    let _ = std::fs::remove_file(&path);
}

#[test]
fn dp_npz_read_by_numpy() {
    let Some(py) = numpy() else { return };
    let path = temp_path("npz");
    run_ok(&format!(
        "let () = save_npz {} [(\"zeta\", tensor [[1.0, 2.0], [3.0, 4.5]]), (\"alpha\", tensor [-1.0]), (\"s\", reshape (tensor [2.0]) [])]\n",
        dp_str(&path)
    ));
    let script = r#"
import sys, numpy as np
with np.load(sys.argv[1]) as z:
    for k in z.files:
        print(k, z[k].dtype, list(z[k].shape), z[k].ravel().tolist())
"#;
    assert_eq!(
        python(&py, script, &[&path]),
        ["zeta float32 [2, 2] [1.0, 2.0, 3.0, 4.5]", "alpha float32 [1] [-1.0]", "s float32 [] [2.0]"]
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn numpy_npz_loads_in_dp() {
    let Some(py) = numpy() else { return };
    let (plain, packed) = (temp_path("npz"), temp_path("npz"));
    // The same arrays stored and deflated; NumPy prints what it wrote.
    let script = r#"
import sys, numpy as np
arrays = dict(
    w=np.arange(12, dtype=np.float64).reshape(3, 4) / 4,
    mask=np.array([True, False, True]),
    ids=np.array([[7, -8]], dtype=np.int32),
    big=np.linspace(0, 1, 5000, dtype=np.float32),
    one=np.array(3.5),
)
np.savez(sys.argv[1], **arrays)
np.savez_compressed(sys.argv[2], **arrays)
for k, a in arrays.items():
    print(k, list(a.shape), float(a.astype(np.float64).sum()))
"#;
    let want = python(&py, script, &[&plain, &packed]);
    for file in [&plain, &packed] {
        let got = run_ok(&format!(
            "let () = iter (fun (name, t) -> printf \"%s %s %s\\n\" name (show (shape t)) (show (sum t))) (load_npz {})\n",
            dp_str(file)
        ));
        assert_eq!(got.len(), want.len(), "{got:?}");
        for (g, w) in got.iter().zip(&want) {
            let (gn, gs) = g.rsplit_once(' ').unwrap();
            let (wn, ws) = w.rsplit_once(' ').unwrap();
            assert_eq!(gn, wn, "names and shapes");
            let (gv, wv): (f64, f64) = (gs.parse().unwrap(), ws.parse().unwrap());
            assert!((gv - wv).abs() <= 1e-4 * wv.abs().max(1.0), "{g} vs {w}");
        }
    }
    // A damaged archive is a clear error, never a panic.
    let mut bytes = std::fs::read(&packed).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&packed, &bytes).unwrap();
    let r = run_dp(&format!("let a = load_npz {}\n", dp_str(&packed)));
    assert!(!r.ok && r.stderr.contains("member `"), "{}", r.stderr);
    std::fs::write(&packed, &bytes[..mid]).unwrap();
    let r = run_dp(&format!("let a = load_npz {}\n", dp_str(&packed)));
    assert!(!r.ok && r.stderr.contains("is not a ZIP archive (.npz) or is damaged"), "{}", r.stderr);
    assert!(!r.stderr.contains("panicked") && !r.stderr.contains("internal"), "{}", r.stderr);
    for p in [plain, packed] {
        let _ = std::fs::remove_file(p);
    }
}
