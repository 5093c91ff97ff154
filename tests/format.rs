//! `printf`/`sprintf` against Python's `%` operator (which formats as C's printf does) on a few
//! thousand generated directives and values: integers, floats of every magnitude, ties, signed
//! zeros, infinities and NaN, strings; flags, widths and precisions.
//!
//! Python departs from C in three corners, where dp follows C (and `src/format.rs`'s unit tests
//! pin C's result): the `0` flag pads infinities and NaN with zeros in Python (spaces in C), the
//! `0` flag is kept beside a precision on `%d` (C ignores it), and `%.0d` of 0 is `0` (empty in
//! C). Those cases are not compared.

use crate::gen::rng::Rng;
use crate::run::run_dp;
use std::process::Command;

/// A directive and its argument, as dp source text and as a Python expression.
fn case(rng: &mut Rng) -> (String, String, String) {
    let mut flags = String::new();
    for f in ["-", "0", "+", " "] {
        if rng.below(5) == 0 {
            flags.push_str(f);
        }
    }
    let width = if rng.below(2) == 0 { String::new() } else { rng.below(14).to_string() };
    let precision = match rng.below(3) {
        0 => String::new(),
        _ => format!(".{}", rng.below(12)),
    };
    let conv = ["d", "f", "e", "g", "s"][rng.below(5)];
    let (dp, py) = match conv {
        "d" => {
            let n: i64 = match rng.below(4) {
                0 => rng.below(10) as i64,
                1 => rng.below(100_000) as i64 - 50_000,
                2 => (rng.next_u64() >> 24) as i64 * if rng.below(2) == 0 { 1 } else { -1 },
                _ => [0, -1, 1, 999_999_999_999, -999_999_999_999][rng.below(5)],
            };
            (if n < 0 { format!("({n})") } else { n.to_string() }, n.to_string())
        }
        "s" => {
            let s = ["", "a", "hello", "tab\there", "ünïcode", "a longer string"][rng.below(6)];
            let dp = format!("{s:?}");
            (dp.clone(), dp)
        }
        _ => {
            let x: f64 = match rng.below(6) {
                0 => [0.0, -0.0, 0.5, 1.5, 2.5, 0.125, 0.375, 1e22, 1e-7, 123456.5, 9.9999995][rng.below(11)],
                1 => [f64::INFINITY, f64::NEG_INFINITY, f64::NAN][rng.below(3)],
                _ => {
                    let mantissa = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                    let exp = rng.below(40) as i32 - 20;
                    let sign = if rng.below(3) == 0 { -1.0 } else { 1.0 };
                    sign * mantissa * 10f64.powi(exp)
                }
            };
            let py = if x.is_nan() {
                "float('nan')".to_string()
            } else if x.is_infinite() {
                format!("float('{}inf')", if x < 0.0 { "-" } else { "" })
            } else {
                format!("{x:?}")
            };
            let dp = if x.is_nan() {
                "nan".to_string()
            } else if x.is_infinite() {
                if x < 0.0 { "(-infinity)" } else { "infinity" }.to_string()
            } else if x.is_sign_negative() {
                format!("(-{:?})", -x)
            } else {
                format!("{x:?}")
            };
            (dp, py)
        }
    };
    (format!("%{flags}{width}{precision}{conv}"), dp, py)
}

/// Whether Python's `%` formats this case otherwise than C's printf (see the module's header).
fn python_departs_from_c(directive: &str, dp: &str) -> bool {
    // The generator writes the flags in the order `-`, `0`, `+`, space.
    let zero_flag = directive[1..].trim_start_matches('-').starts_with('0');
    let non_finite = dp.contains("nan") || dp.contains("infinity");
    let int_precision = directive.ends_with('d') && directive.contains('.');
    (zero_flag && (non_finite || int_precision)) || (int_precision && dp == "0" && directive.contains(".0d"))
}

#[test]
fn printf_formats_as_python_percent_does() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("note: python3 not found; skipping the comparison of printf with Python's %");
        return;
    }
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let cases: Vec<_> = (0..3000).map(|_| case(&mut rng)).filter(|(f, d, _)| !python_departs_from_c(f, d)).collect();
    let mut dp = String::new();
    let mut py = String::from("import sys\nout = []\n");
    for (directive, d, p) in &cases {
        dp.push_str(&format!("let () = printf \"[{directive}]\\n\" {d}\n"));
        py.push_str(&format!("out.append('[{directive}]' % ({p},))\n"));
    }
    py.push_str("sys.stdout.write(''.join(s + '\\n' for s in out))\n");
    let r = run_dp(&dp);
    assert!(r.ok, "dp failed: {}", r.stderr);
    let script = crate::run::temp_path("py");
    std::fs::write(&script, py).expect("write the Python script");
    let out = Command::new("python3").arg(&script).output().expect("run python3");
    let _ = std::fs::remove_file(&script);
    assert!(out.status.success(), "python3 failed: {}", String::from_utf8_lossy(&out.stderr));
    let want = String::from_utf8_lossy(&out.stdout);
    let mismatches: Vec<String> = cases
        .iter()
        .zip(r.stdout.lines().zip(want.lines()))
        .filter(|(_, (a, b))| a != b)
        .map(|((directive, d, _), (a, b))| format!("{directive} of {d}: dp {a:?}, Python {b:?}"))
        .collect();
    assert!(cases.len() > 2500, "most cases are compared ({})", cases.len());
    assert_eq!(r.stdout.lines().count(), cases.len(), "one line per case");
    assert!(
        mismatches.is_empty(),
        "{} of {} differ:\n{}",
        mismatches.len(),
        cases.len(),
        mismatches[..mismatches.len().min(20)].join("\n")
    );
}
