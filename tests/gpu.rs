//! The GPU backend, checked against the CPU: the same dp program runs through the `dp` binary
//! with `--device cpu` and with `--device gpu` (so every construction builtin places its tensor
//! on that device), and every printed number must agree:
//!
//!     |gpu − cpu| ≤ tol · (|cpu| + mean |cpu| over the printed line)
//!
//! (a relative error, with the line's typical magnitude as the floor so values that happen to
//! be near zero are not held to an impossible standard); tol is 1e-4 for elementwise and data
//! movement, 1e-3 for reductions, matrix products and derivatives. Shapes and other text must
//! match exactly. Inputs are `randn` tensors with odd shapes (not multiples of any workgroup
//! size), plus one elementwise operation over more than 65,535 × 256 elements, which needs a
//! 2-D dispatch grid.
//!
//! The GPU runs trace CPU fallbacks (`DP_GPU_TRACE=1`): none may happen, so every operation
//! here, forward and derivative, ran a GPU kernel. Programs that print only Floats are also
//! checked to read back nothing but those Floats (no whole tensor comes back mid-derivative).
//!
//! Without a GPU adapter (no Vulkan driver, say) the comparisons print a notice and pass,
//! unless `DP_REQUIRE_GPU=1`, when they fail. The device-selection errors are checked on every
//! machine.

use crate::run::{run_with, Run};
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

fn dp_with(device: &str, src: &str, env: &[(&str, &str)]) -> Run {
    // Mesa's device-select layer complains on stderr when there is no display; it is not ours.
    let env: Vec<(&str, &str)> = [("NODEVICE_SELECT", "1")].into_iter().chain(env.iter().copied()).collect();
    run_with(&["--device", device], src, &env)
}

fn dp(device: &str, src: &str) -> Run {
    dp_with(device, src, &[])
}

/// Whether `--device gpu` works here (checked once). Without an adapter: false after a notice,
/// or a failure when DP_REQUIRE_GPU=1.
fn gpu() -> bool {
    static AVAILABLE: OnceLock<Result<(), String>> = OnceLock::new();
    let r = AVAILABLE.get_or_init(|| {
        let r = dp("gpu", "let () = println (show (to_list (ones [3] + 1.0)))\n");
        if r.ok && r.stdout.trim() == "[2.0, 2.0, 2.0]" {
            Ok(())
        } else {
            Err(format!("stdout: {}\nstderr: {}", r.stdout.trim(), r.stderr.trim()))
        }
    });
    match r {
        Ok(()) => true,
        Err(e) => {
            if std::env::var("DP_REQUIRE_GPU").as_deref() == Ok("1") {
                panic!("DP_REQUIRE_GPU=1 but `dp run --device gpu` does not work:\n{e}");
            }
            eprintln!("note: skipping a GPU test: no usable GPU adapter ({e})");
            false
        }
    }
}

/// Inputs and printing helpers shared by the comparison programs.
const PRELUDE: &str = r#"
import nn
import optim

let pt (t : Tensor) = (println (show (shape t)); println (show (to_list t)))
let pf (v : Float) = println (show v)
let pm (t : Tensor) = let m = grad max t in (pt m; println (show (argmax m)))

let x = randn 1 [37, 53]
let y = randn 2 [37, 53]
let rv = randn 3 [53]
let cv = randn 4 [37, 1]
let w = randn 5 [53, 29]
let x3 = randn 6 [5, 4, 7]
let b3 = randn 7 [4, 1]
let v53 = randn 8 [53]
let a130 = randn 9 [130, 70]
let b70 = randn 10 [70, 65]
let img = randn 11 [2, 3, 9, 8]
let ker = randn 12 [4, 3, 3, 2]
let long = randn 13 [5, 1000]
let pos = abs x + 0.5
let k29 = randn 14 [37, 29]
let dx = randn 15 [37, 53]
let dy = randn 16 [37, 53]
let nan1 = tensor [0.0 / 0.0]
let ninf1 = tensor [-1.0 / 0.0]
let e53 = (arange 53 - 26.0) * 0.25
"#;

struct Case {
    name: &'static str,
    tol: f64,
    code: &'static str,
}

fn parse_numbers(line: &str) -> Option<Vec<f64>> {
    let t = line.trim().trim_start_matches('[').trim_end_matches(']');
    if t.is_empty() {
        return if line.trim() == "[]" { Some(Vec::new()) } else { None };
    }
    t.split(',').map(|s| s.trim().parse::<f64>().ok()).collect()
}

/// Compares one case's lines; a description of every disagreement.
fn compare_lines(case: &Case, cpu: &[&str], gpu: &[&str]) -> Vec<String> {
    let mut bad = Vec::new();
    if cpu.len() != gpu.len() {
        bad.push(format!("{}: {} lines on the CPU, {} on the GPU", case.name, cpu.len(), gpu.len()));
        return bad;
    }
    for (i, (c, g)) in cpu.iter().zip(gpu).enumerate() {
        match (parse_numbers(c), parse_numbers(g)) {
            (Some(cs), Some(gs)) => {
                if cs.len() != gs.len() {
                    bad.push(format!(
                        "{} line {i}: {} values on the CPU, {} on the GPU",
                        case.name,
                        cs.len(),
                        gs.len()
                    ));
                    continue;
                }
                let mean = cs.iter().map(|v| v.abs()).filter(|v| v.is_finite()).sum::<f64>() / cs.len().max(1) as f64;
                let mut worst: Option<(usize, f64, f64)> = None;
                let mut count = 0;
                for (j, (&cv, &gv)) in cs.iter().zip(&gs).enumerate() {
                    let same = (cv.is_nan() && gv.is_nan()) || cv == gv;
                    let d = (gv - cv).abs();
                    if !same && (d.is_nan() || d > case.tol * (cv.abs() + mean)) {
                        count += 1;
                        if worst.is_none() {
                            worst = Some((j, cv, gv));
                        }
                    }
                }
                if let Some((j, cv, gv)) = worst {
                    bad.push(format!(
                        "{} line {i}: {count} of {} values differ beyond {} (first at {j}: cpu {cv}, gpu {gv})",
                        case.name,
                        cs.len(),
                        case.tol
                    ));
                }
            }
            _ => {
                if c != g {
                    bad.push(format!("{} line {i}: cpu `{c}`, gpu `{g}`", case.name));
                }
            }
        }
    }
    bad
}

/// Runs the cases as one program on each device and compares them case by case.
fn check(cases: &[Case]) {
    if !gpu() {
        return;
    }
    let mut src = PRELUDE.to_string();
    for c in cases {
        src += &format!("let () = println \"## {}\"\n{}\n", c.name, c.code);
    }
    let cpu = dp("cpu", &src);
    assert!(cpu.ok, "the CPU run failed:\n{}\n--- program\n{src}", cpu.stderr);
    let gpu = dp_with("gpu", &src, &[("DP_GPU_TRACE", "1")]);
    assert!(gpu.ok && !gpu.stderr.contains("panicked"), "the GPU run failed:\n{}\n--- program\n{src}", gpu.stderr);
    assert_no_fallback(&gpu.stderr);
    let sections = |out: &str| -> Vec<(String, Vec<String>)> {
        let mut v: Vec<(String, Vec<String>)> = Vec::new();
        for line in out.lines() {
            if let Some(name) = line.strip_prefix("## ") {
                v.push((name.to_string(), Vec::new()));
            } else if let Some(last) = v.last_mut() {
                last.1.push(line.to_string());
            }
        }
        v
    };
    let (cs, gs) = (sections(&cpu.stdout), sections(&gpu.stdout));
    assert_eq!(cs.len(), cases.len(), "the CPU run printed {} of {} cases", cs.len(), cases.len());
    assert_eq!(gs.len(), cases.len(), "the GPU run printed {} of {} cases", gs.len(), cases.len());
    let mut bad = Vec::new();
    for (case, ((_, c), (_, g))) in cases.iter().zip(cs.iter().zip(&gs)) {
        let c: Vec<&str> = c.iter().map(String::as_str).collect();
        let g: Vec<&str> = g.iter().map(String::as_str).collect();
        bad.extend(compare_lines(case, &c, &g));
    }
    assert!(bad.is_empty(), "GPU and CPU disagree:\n{}", bad.join("\n"));
}

/// Everything ran on the GPU: the trace names no CPU fallback.
fn assert_no_fallback(trace: &str) {
    let fallbacks: Vec<&str> = trace.lines().filter(|l| l.contains("CPU fallback")).collect();
    assert!(fallbacks.is_empty(), "operations fell back to the CPU:\n{}", fallbacks.join("\n"));
}

/// Runs a program that prints only Floats on the GPU and checks that the data stayed there:
/// no fallback, and every read-back is a single value (a Float result), never a tensor.
fn assert_stays_on_the_gpu(code: &str) {
    if !gpu() {
        return;
    }
    let src = format!("{PRELUDE}{code}");
    let r = dp_with("gpu", &src, &[("DP_GPU_TRACE", "1")]);
    assert!(r.ok && !r.stderr.contains("panicked"), "the GPU run failed:\n{}\n--- program\n{src}", r.stderr);
    assert_no_fallback(&r.stderr);
    let bulk: Vec<&str> =
        r.stderr.lines().filter(|l| l.contains("read back") && !l.ends_with("read back 1 value")).collect();
    assert!(bulk.is_empty(), "tensors were read back from the GPU:\n{}", bulk.join("\n"));
    assert!(r.stderr.contains("read back 1 value"), "the trace is missing (DP_GPU_TRACE):\n{}", r.stderr);
}

const E: f64 = 1e-4; // elementwise, data movement
const R: f64 = 1e-3; // reductions, matrix products, derivatives

#[test]
fn gpu_elementwise_with_broadcasting() {
    check(&[
        Case { name: "add", tol: E, code: "let () = pt (x + y)" },
        Case { name: "sub row", tol: E, code: "let () = pt (x - rv)" },
        Case { name: "mul outer", tol: E, code: "let () = pt (cv * rv)" },
        Case { name: "div", tol: E, code: "let () = pt (x / pos)" },
        Case { name: "pow 2", tol: E, code: "let () = pt (x ** 2.0)" },
        Case { name: "pow 3 negative bases", tol: E, code: "let () = pt (x ** 3.0)" },
        Case { name: "pow tensor exponent", tol: E, code: "let () = pt (pos ** y)" },
        Case { name: "pow 0.5", tol: E, code: "let () = pt (pos ** 0.5)" },
        Case { name: "float base", tol: E, code: "let () = pt (2.0 ** x)" },
        Case { name: "float minus", tol: E, code: "let () = pt (2.0 - x)" },
        Case { name: "float over", tol: E, code: "let () = pt (3.0 / pos)" },
        Case { name: "times float", tol: E, code: "let () = pt (x * 0.5 + 1.0)" },
        Case { name: "rank 3 broadcast", tol: E, code: "let () = pt (x3 + b3)" },
        Case {
            name: "rank 1 by column",
            tol: E,
            code: "let () = pt (tensor [1.0, 2.0] * tensor [[3.0], [4.0], [5.0]])",
        },
        Case { name: "empty", tol: E, code: "let () = pt (zeros [0, 3] + ones [0, 3])" },
        Case { name: "neg", tol: E, code: "let () = pt (-x)" },
    ]);
}

#[test]
fn gpu_unary_math() {
    check(&[
        Case { name: "sin", tol: E, code: "let () = pt (sin (x * 3.0))" },
        Case { name: "cos", tol: E, code: "let () = pt (cos (x * 3.0))" },
        Case { name: "tan", tol: E, code: "let () = pt (tan (x * 0.5))" },
        Case { name: "exp", tol: E, code: "let () = pt (exp x)" },
        Case { name: "log", tol: E, code: "let () = pt (log pos)" },
        Case { name: "sqrt", tol: E, code: "let () = pt (sqrt pos)" },
        Case { name: "tanh", tol: E, code: "let () = pt (tanh (x * 3.0))" },
        Case { name: "tanh saturated", tol: E, code: "let () = pt (tanh (x * 40.0))" },
        Case { name: "sigmoid", tol: E, code: "let () = pt (sigmoid (x * 4.0))" },
        // Every branch of the shader's erf: |x| below 0.84375, 1.25, 1/0.35 and 6, and beyond.
        Case { name: "erf", tol: E, code: "let () = (pt (erf x); pt (erf (x * 3.0)); pt (erf (x * 8.0)))" },
        Case { name: "gelu", tol: E, code: "let () = (pt (gelu (x * 3.0)); pt (gelu (x * 40.0)))" },
        Case { name: "gelu's derivative", tol: E, code: "let () = pt (grad (fun x -> sum (gelu (x * 3.0))) x)" },
        Case {
            name: "erf special values",
            tol: E,
            code: "let () = pt (erf (tensor [0.0, -0.0, 1.0e-30, -1.0e-9, 0.84375, -1.25, 2.857143, 5.999, 6.0, 1.0 / 0.0, -1.0 / 0.0, 0.0 / 0.0]))",
        },
        Case { name: "relu", tol: E, code: "let () = pt (relu x)" },
        Case { name: "abs", tol: E, code: "let () = pt (abs x)" },
        Case { name: "clip", tol: E, code: "let () = pt (tree_clip (-0.5) 0.5 x)" },
    ]);
}

#[test]
fn gpu_reductions_and_softmax() {
    check(&[
        Case { name: "sum", tol: R, code: "let () = pf (sum x)" },
        Case { name: "mean", tol: R, code: "let () = pf (mean pos)" },
        Case { name: "max", tol: R, code: "let () = pf (max x)" },
        Case { name: "logsumexp", tol: R, code: "let () = pf (logsumexp x)" },
        Case { name: "sum_axis 0", tol: R, code: "let () = pt (sum_axis x 0)" },
        Case { name: "sum_axis 1", tol: R, code: "let () = pt (sum_axis x 1)" },
        Case { name: "mean_axis 0", tol: R, code: "let () = pt (mean_axis x 0)" },
        Case { name: "mean_axis rank 3", tol: R, code: "let () = pt (mean_axis x3 1)" },
        Case { name: "sum_axis rank 3", tol: R, code: "let () = pt (sum_axis x3 2)" },
        Case { name: "sum_axis long groups", tol: R, code: "let () = pt (sum_axis (randn 20 [3, 5000]) 1)" },
        Case { name: "sum_axis long columns", tol: R, code: "let () = pt (sum_axis (randn 21 [5000, 3]) 0)" },
        Case { name: "sum multi-pass", tol: R, code: "let () = pf (sum (abs (randn 22 [300001])))" },
        Case { name: "max multi-pass", tol: R, code: "let () = pf (max (randn 22 [300001]))" },
        Case { name: "logsumexp multi-pass", tol: R, code: "let () = pf (logsumexp (randn 22 [300001]))" },
        Case { name: "softmax", tol: R, code: "let () = pt (softmax x)" },
        Case { name: "log_softmax", tol: R, code: "let () = pt (log_softmax x)" },
        Case { name: "softmax long rows", tol: R, code: "let () = pt (softmax long)" },
        Case { name: "log_softmax long rows", tol: R, code: "let () = pt (log_softmax (long * 10.0))" },
        Case { name: "softmax vector", tol: R, code: "let () = pt (softmax rv)" },
        Case { name: "softmax rank 3", tol: R, code: "let () = pt (softmax x3)" },
        Case { name: "normalize", tol: R, code: "let () = pt (normalize 1e-5 x)" },
        Case { name: "normalize rank 3", tol: R, code: "let () = pt (normalize 0.1 x3)" },
        Case { name: "item", tol: R, code: "let () = pf (item (tensor [[2.5]]) + item (slice v53 0 7 8))" },
        Case { name: "argmax", tol: R, code: "let () = println (show (argmax x))" },
    ]);
}

#[test]
fn gpu_matmul() {
    check(&[
        Case { name: "matrix matrix", tol: R, code: "let () = pt (x @ w)" },
        Case { name: "several tiles", tol: R, code: "let () = pt (a130 @ b70)" },
        Case { name: "matrix vector", tol: R, code: "let () = pt (x @ v53)" },
        Case { name: "vector matrix", tol: R, code: "let () = pt (v53 @ w)" },
        Case { name: "vector vector", tol: R, code: "let () = pt (v53 @ v53)" },
        Case { name: "1x1", tol: R, code: "let () = pt (randn 32 [1, 1] @ randn 33 [1, 1])" },
        Case { name: "larger", tol: R, code: "let () = pt (randn 30 [200, 300] @ randn 31 [300, 150])" },
        Case { name: "long inner", tol: R, code: "let () = pt (randn 34 [3, 5000] @ randn 35 [5000, 2])" },
        Case { name: "64-wide tiles", tol: R, code: "let () = pt (randn 36 [700, 50] @ randn 37 [50, 1200])" },
        Case { name: "64-wide tiles, ragged", tol: R, code: "let () = pt (randn 38 [1030, 33] @ randn 39 [33, 1001])" },
        Case {
            name: "64-wide tiles, ragged rows",
            tol: R,
            code: "let () = pt (randn 40 [650, 45] @ randn 41 [45, 1003])",
        },
        Case {
            name: "64-wide tiles, stacked",
            tol: R,
            code: "let () = pt (sum_axis (randn 42 [8, 301, 77] @ randn 43 [8, 77, 650]) 2)",
        },
    ]);
}

#[test]
fn gpu_shape_operations() {
    check(&[
        Case { name: "transpose", tol: E, code: "let () = pt (transpose x)" },
        Case { name: "transpose rank 3", tol: E, code: "let () = pt (transpose x3)" },
        Case { name: "reshape", tol: E, code: "let () = pt (reshape x [53, 37] + 1.0)" },
        Case { name: "reshape rank 3", tol: E, code: "let () = pt (reshape x3 [20, 7])" },
        Case { name: "slice rows", tol: E, code: "let () = pt (slice x 0 3 20)" },
        Case { name: "slice a column", tol: E, code: "let () = pt (slice x 1 10 11)" },
        Case { name: "slice rank 3", tol: E, code: "let () = pt (slice x3 2 1 6)" },
        Case { name: "concat rows", tol: E, code: "let () = pt (concat 0 [x, y, x])" },
        Case { name: "concat columns", tol: E, code: "let () = pt (concat 1 [x, cv])" },
        Case { name: "concat rank 3", tol: E, code: "let () = pt (concat 2 [x3, x3])" },
        Case { name: "row", tol: E, code: "let () = pt (row x 5)" },
        Case { name: "row rank 3", tol: E, code: "let () = pt (row x3 4)" },
        Case { name: "onehot", tol: E, code: "let () = pt (onehot 7 3)" },
        Case { name: "arange full", tol: E, code: "let () = pt (arange 5 + full [5] 0.5)" },
        Case { name: "show", tol: E, code: "let () = println (show (tensor [[1.0, 2.0], [3.0, 4.5]] * 2.0))" },
        Case { name: "show large", tol: E, code: "let () = println (show (abs (randn 40 [40, 40]) + 1.0))" },
        Case { name: "equality", tol: E, code: "let () = println (show (x + y == y + x))" },
        Case {
            name: "to_device round trip",
            tol: E,
            code: "let () = pt (to_device \"gpu\" (to_device \"cpu\" x) * 2.0)",
        },
    ]);
}

#[test]
fn gpu_conv2d_and_max_pool2d() {
    check(&[
        Case { name: "conv2d", tol: R, code: "let () = pt (conv2d img ker)" },
        Case { name: "max_pool2d 2", tol: E, code: "let () = pt (max_pool2d 2 img)" },
        Case { name: "max_pool2d 3", tol: E, code: "let () = pt (max_pool2d 3 img)" },
        Case {
            name: "conv2d grads",
            tol: R,
            code: "let () = let (gi, gk) = grad (fun (a, b) -> sum (conv2d a b * randn 50 [2, 4, 7, 7])) (img, ker) in (pt gi; pt gk)",
        },
        Case {
            name: "max_pool2d grad",
            tol: R,
            code: "let () = pt (grad (fun (a : Tensor) -> sum (max_pool2d 2 a * randn 51 [2, 3, 4, 4])) img)",
        },
        Case {
            name: "conv2d and pool jvp",
            tol: R,
            code: "let () = let (p, t) = jvp (fun (a, b) -> max_pool2d 2 (conv2d a b)) (img, ker) (randn 52 [2, 3, 9, 8], randn 53 [4, 3, 3, 2]) in (pt p; pt t)",
        },
    ]);
}

#[test]
fn gpu_gradients_of_every_rule() {
    check(&[
        Case { name: "d add", tol: R, code: "let () = let (a, b) = grad (fun (a, b) -> sum ((a + b) * y)) (x, rv) in (pt a; pt b)" },
        Case { name: "d sub", tol: R, code: "let () = let (a, b) = grad (fun (a, b) -> sum ((a - b) * y)) (x, cv) in (pt a; pt b)" },
        Case { name: "d mul", tol: R, code: "let () = let (a, b) = grad (fun (a, b) -> sum (a * b * y)) (x, rv) in (pt a; pt b)" },
        Case { name: "d div", tol: R, code: "let () = let (a, b) = grad (fun (a, b) -> sum (a / b * y)) (x, pos) in (pt a; pt b)" },
        Case { name: "d pow", tol: R, code: "let () = let (a, b) = grad (fun (a, b) -> sum (a ** b * y)) (pos, y) in (pt a; pt b)" },
        Case { name: "d pow float", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum (a ** 3.0 * y)) x)" },
        Case { name: "d floats", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum ((2.0 * a - a / 3.0 + 1.0) * y)) x)" },
        Case { name: "d scalar param", tol: R, code: "let () = pf (grad (fun (s : Float) -> sum (x * s * y)) 2.0)" },
        Case { name: "d neg", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum (-a * y)) x)" },
        Case { name: "d sin", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum (sin a * y)) x)" },
        Case { name: "d cos", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum (cos a * y)) x)" },
        Case { name: "d tan", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum (tan (a * 0.5) * y)) x)" },
        Case { name: "d exp", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum (exp a * y)) x)" },
        Case { name: "d log", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum (log a * y)) pos)" },
        Case { name: "d sqrt", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum (sqrt a * y)) pos)" },
        Case { name: "d tanh", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum (tanh a * y)) x)" },
        Case { name: "d sigmoid", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum (sigmoid a * y)) x)" },
        Case { name: "d erf", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum (erf a * y)) x)" },
        Case { name: "d relu", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum (relu a * y)) x)" },
        Case { name: "d abs", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum (abs a * y)) x)" },
        Case { name: "d matmul", tol: R, code: "let () = let (a, b) = grad (fun (a, b) -> sum (a @ b * k29)) (x, w) in (pt a; pt b)" },
        Case { name: "d matvec", tol: R, code: "let () = let (a, b) = grad (fun (a, b) -> sum (a @ b * sum_axis cv 1)) (x, v53) in (pt a; pt b)" },
        Case { name: "d vecmat", tol: R, code: "let () = let (a, b) = grad (fun (a, b) -> sum (a @ b * sum_axis cv 1)) (rv, transpose x) in (pt a; pt b)" },
        Case { name: "d vecvec", tol: R, code: "let () = let (a, b) = grad (fun (a, b) -> item (a @ b)) (v53, rv) in (pt a; pt b)" },
        Case { name: "d sum", tol: R, code: "let () = pt (grad sum x)" },
        Case { name: "d mean", tol: R, code: "let () = pt (grad mean x)" },
        Case { name: "d max", tol: R, code: "let () = pt (grad max x)" },
        Case { name: "d logsumexp", tol: R, code: "let () = pt (grad logsumexp x)" },
        Case { name: "d item", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> item (slice (row a 3) 0 2 3) * 3.0) x)" },
        Case { name: "d sum_axis", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum (sum_axis a 0 * rv)) x)" },
        Case { name: "d mean_axis", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum (mean_axis a 1 * sum_axis cv 1)) x)" },
        Case { name: "d softmax", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum (softmax a * y)) x)" },
        Case { name: "d log_softmax", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum (log_softmax a * y)) x)" },
        Case { name: "d normalize", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum (normalize 1e-5 a * y)) x)" },
        Case { name: "d layer_norm", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum (nn.layer_norm { g = randn 5 [53], b = randn 6 [53] } a * y)) x)" },
        Case { name: "d reshape", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum (reshape a [53, 37] * transpose y)) x)" },
        Case { name: "d transpose", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum (transpose a * transpose y)) x)" },
        Case { name: "d row", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum (row a 4 * rv) + sum (row a 4)) x)" },
        Case { name: "d slice", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum (slice a 1 5 9 * slice y 1 5 9)) x)" },
        Case { name: "d concat", tol: R, code: "let () = let (a, b) = grad (fun (a, b) -> sum (concat 1 [a, b] * concat 1 [y, cv])) (x, cv) in (pt a; pt b)" },
        Case { name: "d to_device", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> sum (to_device \"cpu\" a * to_device \"cpu\" y)) x)" },
        Case { name: "d mlp", tol: R, code: "let () = let (a, b) = grad (fun (a, b) -> nn.cross_entropy_batch (tanh (x @ a) @ b) (softmax k29)) (w, transpose (slice w 0 0 29)) in (pt a; pt b)" },
    ]);
}

/// `vmap` (issue 15) on the GPU: its batching rules' whole-batch operations run as GPU kernels
/// (a batch of Floats is a float32 stack there, float64 on the CPU), with per-example
/// gradients, a `grad` and a `jvp` outside the `vmap`, nested `vmap`s, a `custom_vjp` and a
/// `checkpoint` inside it under an outer `grad`, selects and convolutions.
#[test]
fn gpu_vmap_matches_the_cpu() {
    check(&[
        Case { name: "vmap matvec", tol: R, code: "let () = pt (vmap (fun r -> tanh (r @ w)) x)" },
        Case { name: "vmap floats", tol: R, code: "let () = pt (vmap (fun (r, s) -> sum (sin r * s) * 2.0 + max r) (x, y))" },
        Case { name: "vmap grad", tol: R, code: "let () = pt (vmap (grad (fun r -> sum (tanh (r @ w) * 0.5))) x)" },
        Case { name: "grad vmap", tol: R, code: "let () = pt (grad (fun w -> sum (vmap (fun (r, t) -> sum (tanh (r @ w) * t)) (x, k29))) w)" },
        Case { name: "jvp vmap", tol: R, code: "let () = pt (snd (jvp (vmap (fun r -> logsumexp (r * rv))) x y))" },
        Case { name: "vmap vmap", tol: R, code: "let () = pt (vmap (fun r -> vmap (fun s -> sum (r * s)) (slice y 0 0 5)) (slice x 0 0 4))" },
        Case {
            name: "grad vmap custom_vjp",
            tol: R,
            code: "let cv = custom_vjp (fun (w, r) -> sum (tanh (r @ w))) (fun (w, r) o g -> (grad (fun w -> sum (tanh (r @ w))) w * (g * 2.0), rv * g))\n\
                   let () = pt (grad (fun w -> sum (vmap (fun r -> cv (w, r)) x)) w)",
        },
        Case {
            name: "grad vmap checkpoint",
            tol: R,
            code: "let () = pt (grad (fun w -> sum (vmap (fun r -> checkpoint (fun (w, r) -> sum (sigmoid (r @ w))) (w, r)) x)) w)",
        },
        Case { name: "vmap selects", tol: R, code: "let () = pt (vmap (fun r -> where (greater r 0.0) r (r * 0.1) + max_of (sum r) 0.0) x)" },
        Case { name: "vmap conv2d", tol: R, code: "let () = pt (vmap (fun im -> conv2d im ker) (reshape img [2, 1, 3, 9, 8]))" },
        Case { name: "vmap softmax", tol: R, code: "let () = pt (vmap (fun r -> softmax r * mean r) x)" },
    ]);
}

#[test]
fn gpu_forward_mode_and_second_order() {
    check(&[
        Case {
            name: "jvp softmax matmul",
            tol: R,
            code: "let () = let (p, t) = jvp (fun (a : Tensor) -> softmax (a @ w)) x dx in (pt p; pt t)",
        },
        Case {
            name: "jvp binary",
            tol: R,
            code:
                "let () = let (p, t) = jvp (fun (a, b) -> tanh (a * b) / (b * b + pos)) (x, y) (dx, dy) in (pt p; pt t)",
        },
        Case {
            name: "jvp reductions",
            tol: R,
            code: "let () = let (p, t) = jvp (fun (a : Tensor) -> logsumexp a + max a + mean a) x dx in (pf p; pf t)",
        },
        Case {
            name: "jvp concat",
            tol: R,
            code: "let () = let (p, t) = jvp (fun (a : Tensor) -> concat 0 [a, y]) x dx in (pt p; pt t)",
        },
        Case {
            name: "jvp log_softmax",
            tol: R,
            code: "let () = let (p, t) = jvp (fun (a : Tensor) -> log_softmax a) x dx in (pt p; pt t)",
        },
        Case {
            name: "grad of grad",
            tol: R,
            code: "let () = pt (grad (fun (a : Tensor) -> sum (grad (fun (b : Tensor) -> sum (tanh b * b)) a * y)) x)",
        },
        Case {
            name: "jvp of grad",
            tol: R,
            code: "let () = let (_, t) = jvp (grad (fun (b : Tensor) -> sum (sin b * b))) x dx in pt t",
        },
        Case {
            name: "grad of jvp",
            tol: R,
            code: "let () = pt (grad (fun (a : Tensor) -> let (_, t) = jvp (fun (b : Tensor) -> sum (exp b * b)) a dx in t) x)",
        },
    ]);
}

#[test]
fn gpu_max_derivative_mask() {
    // The mask marks the first maximum in row-major order, as the CPU's argmax: ties go to the
    // first, the first NaN wins wherever it is (max propagates NaN), -0 ties with +0. `argmax` of the mask (read
    // on the host) says which index the GPU picked.
    check(&[
        Case { name: "random", tol: E, code: "let () = pm x" },
        Case { name: "rank 3, odd sizes", tol: E, code: "let () = pm (randn 70 [7, 11, 3])" },
        Case { name: "one element", tol: E, code: "let () = pm (tensor [[4.0]])" },
        Case { name: "negative", tol: E, code: "let () = pm (x - 10.0)" },
        Case { name: "ties", tol: E, code: "let () = pm (tensor [1.0, 3.0, 3.0, 2.0, 3.0])" },
        Case { name: "ties, negative", tol: E, code: "let () = pm (tensor [-5.0, -2.0, -7.0, -2.0])" },
        Case { name: "all equal", tol: E, code: "let () = pm (full [3, 37] 2.5)" },
        Case { name: "signed zeros", tol: E, code: "let () = pm (tensor [-1.0, -0.0, 0.0, -0.0])" },
        Case { name: "NaN first", tol: E, code: "let () = pm (concat 0 [nan1, tensor [1.0, 5.0, 2.0]])" },
        Case {
            name: "NaN between",
            tol: E,
            code: "let () = pm (concat 0 [tensor [1.0], nan1, tensor [5.0], nan1, tensor [5.0]])",
        },
        Case { name: "all NaN", tol: E, code: "let () = pm (concat 0 [nan1, nan1, nan1])" },
        Case { name: "NaN and -inf", tol: E, code: "let () = pm (concat 0 [ninf1, nan1, ninf1, tensor [-3.0]])" },
        Case { name: "all -inf", tol: E, code: "let () = pm (concat 0 [ninf1, ninf1])" },
        Case { name: "inf", tol: E, code: "let () = pm (concat 0 [tensor [1.0], -ninf1, tensor [2.0], -ninf1])" },
        // 300,001 elements: three passes (1,024 partials, then 4, then 1). Clipping ties the
        // maximum across every workgroup; the spikes tie at 200,003 (workgroup 781 of the first
        // pass) and 299,999 (workgroup 147, second grid-stride step): the index decides, not
        // the workgroup order.
        Case {
            name: "multi-pass ties",
            tol: E,
            code: "let () = let m = grad max (tree_clip (-1.0) 1.0 (randn 22 [300001])) in (pf (sum m); println (show (argmax m)))",
        },
        Case {
            name: "multi-pass late ties",
            tol: E,
            code: "let () = let s = onehot 300001 200003 + onehot 300001 299999 in let m = grad max (tree_clip (-1.0) 0.5 (randn 22 [300001]) * (1.0 - s) + s * 2.0) in (pf (sum m); println (show (argmax m)))",
        },
        Case {
            name: "multi-pass NaN first",
            tol: E,
            code: "let () = let m = grad max (concat 0 [nan1, randn 22 [300000]]) in (pf (sum m); println (show (argmax m)))",
        },
        Case {
            name: "jvp with ties",
            tol: R,
            code: "let () = let (p, t) = jvp max (tensor [1.0, 3.0, 3.0, 2.0]) (tensor [10.0, 20.0, 30.0, 40.0]) in (pf p; pf t)",
        },
        Case {
            name: "jvp NaN first",
            tol: R,
            code: "let () = let (_, t) = jvp max (concat 0 [nan1, tensor [4.0, 5.0]]) (tensor [10.0, 20.0, 30.0]) in pf t",
        },
        Case { name: "grad of a product", tol: R, code: "let () = pt (grad (fun (a : Tensor) -> max (a * y) * 3.0) x)" },
    ]);
}

#[test]
fn gpu_nan_propagation_and_selects() {
    // Issue 16: NaN propagates through relu, max, clamping and pooling; an all -inf window
    // routes to its own first element; relu's derivative, tree_clip's and `**`'s are selects.
    // A 4 × 4 image whose windows are: finite, all -inf, NaN first, NaN after finite values.
    macro_rules! win {
        ($body:literal) => {
            concat!("let () = let win = reshape (concat 0 [tensor [5.0, 1.0], ninf1, ninf1, tensor [0.0, 2.0], ninf1, ninf1, nan1, tensor [1.0, 2.0, 3.0], tensor [4.0, 4.0], nan1, tensor [0.0]]) [1, 1, 4, 4] in ", $body)
        };
    }
    check(&[
        Case { name: "relu", tol: E, code: "let () = pt (relu (concat 0 [nan1, tensor [-1.0, 2.0, -0.0], ninf1]))" },
        Case { name: "max", tol: E, code: "let () = pf (max (concat 0 [tensor [1.0], nan1, tensor [3.0]]))" },
        Case { name: "clip", tol: E, code: "let () = pt (tree_clip 0.0 1.0 (concat 0 [nan1, tensor [-1.0, 0.5, 2.0], ninf1]))" },
        Case { name: "pool", tol: E, code: win!("pt (max_pool2d 2 win)") },
        Case { name: "pool grad", tol: R, code: win!("pt (grad (fun a -> sum (max_pool2d 2 a * tensor [[[[1.0, 2.0], [3.0, 4.0]]]])) win)") },
        Case { name: "pool jvp", tol: R, code: win!("pt (snd (jvp (max_pool2d 2) win (reshape (arange 16) [1, 1, 4, 4])))") },
        Case { name: "relu select", tol: R, code: "let () = pt (grad (fun t -> sum (sqrt (relu t))) (tensor [-1.0, 4.0, 0.0, 9.0]))" },
        Case {
            name: "clip grad",
            tol: R,
            code: "let () = pt (grad (fun t -> sum (tree_clip 0.0 1.0 t * tensor [1.0, 2.0, 3.0, 4.0, 5.0])) (tensor [-1.0, 0.0, 0.5, 1.0, 1.0 / 0.0]))",
        },
        Case {
            name: "pow at 0",
            tol: R,
            code: "let () = pt (grad (fun t -> sum (grad (fun t -> sum (grad (fun t -> sum (t ** tensor [2.0, 3.0, 0.0])) t)) t)) (tensor [0.0, 0.0, 0.0]))",
        },
        // Comparisons with NaN are unordered (only `!=` holds) and NaN is true, as on the CPU:
        // lavapipe's `nan != nan` was false, so the replace-NaN idiom kept the NaN.
        Case {
            name: "NaN comparisons",
            tol: E,
            code: r#"
let n = concat 0 [nan1, tensor [1.0, 2.0]]
let f32 t = astype "float32" t
let () = pt (f32 (not_equal n n))
let () = pt (f32 (equal n n))
let () = pt (f32 (less n 1.5))
let () = pt (f32 (greater_equal n 1.0))
let () = pt (f32 (logical_and n (tensor [1.0, 0.0, 1.0])))
let () = pt (f32 (logical_or n (tensor [0.0, 0.0, 0.0])))
let () = pt (where (not_equal n n) (zeros [3]) n)
let () = pt (where n (ones [3]) (zeros [3]))
let () = pt (jit (fun n -> where (not_equal n n) (zeros [3]) (n * 2.0)) n)
"#,
        },
    ]);
}

#[test]
fn gpu_pow_exponent_gradient_with_non_positive_bases() {
    // ∂(a^b)/∂b = a^b · ln a, with ln a taken as 0 where a ≤ 0 (or NaN). e53 mixes integral
    // exponents (finite powers of negative bases) with fractional ones (NaN there).
    check(&[
        Case {
            name: "negative bases",
            tol: R,
            code: "let () = let (a, b) = grad (fun (a, b) -> sum (a ** b * y)) (x, e53) in (pt a; pt b)",
        },
        Case {
            name: "integral exponents",
            tol: R,
            code: "let () = let (a, b) = grad (fun (a, b) -> sum (a ** b * slice y 1 0 7)) (slice x 1 0 7, tensor [-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0]) in (pt a; pt b)",
        },
        Case {
            name: "zero bases",
            tol: R,
            code: "let () = let (a, b) = grad (fun (a, b) -> sum (a ** b * y)) (relu x, e53) in (pt a; pt b)",
        },
        Case {
            name: "signed zero bases",
            tol: R,
            code: "let () = pt (grad (fun (b : Tensor) -> sum ((x * 0.0) ** b * y)) e53)",
        },
        Case {
            name: "only the exponent",
            tol: R,
            code: "let () = pt (grad (fun (b : Tensor) -> sum (x ** b)) (y * 0.0 + 2.0))",
        },
        Case {
            name: "special bases",
            tol: R,
            code: "let () = pt (grad (fun (b : Tensor) -> sum (concat 0 [nan1, ninf1, -ninf1, tensor [0.0, -2.0, 2.0]] ** b)) (tensor [2.0, 3.0, -1.0, 1.0, 3.0, 0.5]))",
        },
        Case {
            name: "Float exponent, negative bases",
            tol: R,
            code: "let () = pt (grad (fun (a : Tensor) -> sum (a ** 2.0 * y)) x)",
        },
        Case {
            name: "Float bases",
            tol: R,
            code: "let () = (pt (grad (fun (b : Tensor) -> sum (2.0 ** b)) e53); pt (grad (fun (b : Tensor) -> sum ((0.0 - 2.0) ** b)) e53))",
        },
        Case {
            name: "jvp",
            tol: R,
            code: "let () = let (p, t) = jvp (fun (b : Tensor) -> x ** b) e53 (rv * 0.5) in (pt p; pt t)",
        },
        // Nested: the base carries an outer perturbation, so ln a is differentiated further when
        // every base is positive (pos) and is a constant otherwise (x), as on the CPU.
        Case {
            name: "grad of grad, mixed signs",
            tol: R,
            code: "let () = pt (grad (fun (a : Tensor) -> sum (grad (fun (b : Tensor) -> sum (a ** b * y)) e53 * rv)) x)",
        },
        Case {
            name: "grad of grad, positive",
            tol: R,
            code: "let () = pt (grad (fun (a : Tensor) -> sum (grad (fun (b : Tensor) -> sum (a ** b * y)) rv * rv)) pos)",
        },
    ]);
}

#[test]
fn gpu_derivatives_read_back_no_tensor() {
    // Max's mask and the exponent's partial of `**` used to be computed on the host.
    assert_stays_on_the_gpu(
        r#"
let () = pf (sum (grad max x * y))
let () = pf (sum (grad max (concat 0 [nan1, randn 22 [300000]]) * randn 23 [300001]))
let () = let (_, t) = jvp max x dx in pf t
let () = pf (sum (grad (fun (b : Tensor) -> sum (x ** b * y)) e53 * rv))
let () = pf (sum (grad (fun (a : Tensor) -> sum (a ** 2.0 * y)) x * y))
let () = pf (sum (grad (fun (a : Tensor) -> sum (grad (fun (b : Tensor) -> sum (a ** b * y)) e53 * rv)) x * y))
"#,
    );
}

#[test]
fn gpu_training_with_the_standard_library() {
    check(&[Case {
        name: "adam steps",
        tol: R,
        code: r#"
let targets = nn.onehot_rows 5 (tensor [0.0, 1.0, 2.0, 3.0, 4.0, 0.0, 1.0])
let inputs = slice x 0 0 7
let model0 = { l1 = nn.linear_init 1 53 16, l2 = nn.linear_init 2 16 5 }
let loss m = nn.cross_entropy_batch (nn.linear m.l2 (tanh (nn.linear m.l1 inputs))) targets
let rec train k state model =
  if k == 0 then model else (
    let (l, g) = value_and_grad loss model in
    pf l;
    let (model', state') = optim.adam 0.01 0.9 0.999 1e-8 state model (optim.clip_by_global_norm 1.0 g) in
    train (k - 1) state' model')
let () = let m = train 4 (optim.adam_init model0) model0 in (pt m.l1.w; pt m.l2.b)
"#,
    }]);
}

/// A staged program's elementwise chains (`jit`) on GPU tensors: each runs as one generated
/// shader (gpu/fused.rs) whose operands are read whole, as one element (`tensor 0.25`),
/// repeated (`rv`, a row; `cv`, a column), as Floats, and through the result's own buffer
/// when the chain was its last reader; the numbers agree with the CPU's, and the trace shows
/// every chain in one dispatch (some over an operand's buffer), none step by step.
#[test]
fn gpu_staged_chains_run_as_one_generated_shader_each() {
    const CODE: &str =
        "let f (a, b) = sum (clip (-0.5) 0.5 (tanh (a * b + 0.5) - max_of a (tensor 0.25)) * sqrt (abs b + 1e-8)\n\
                          \x20   + (a - rv) / (abs cv + 1.0)) + sum (tanh (a @ w) * 2.0 + 1.0)\n\
                        let j = jit (value_and_grad f)\n\
                        let () = (let (l, (ga, gb)) = j (x, y) in (pf l; pt ga; pt gb))\n\
                        let () = (let (l, (ga, gb)) = j (y, x) in (pf l; pt ga; pt gb))";
    check(&[Case { name: "jit value_and_grad of chains", tol: R, code: CODE }]);
    if !gpu() {
        return;
    }
    let r = dp_with("gpu", &format!("{PRELUDE}{CODE}\n"), &[("DP_GPU_TRACE", "1")]);
    assert!(r.ok, "{}", r.stderr);
    let chains: Vec<&str> = r.stderr.lines().filter(|l| l.contains("a chain of")).collect();
    assert!(chains.len() >= 10, "too few chains in the trace:\n{}", r.stderr);
    assert!(chains.iter().all(|l| l.contains("in one dispatch")), "chains ran step by step:\n{}", chains.join("\n"));
    assert!(
        chains.iter().any(|l| l.contains("over operand")),
        "no chain wrote over its operand:\n{}",
        chains.join("\n")
    );
}

/// `DP_GPU_STATS=1` prints one line per read-back; a loop doing the same work each step settles
/// into the same pooled buffers, so after a few steps it makes no new buffers and finds every
/// bind group it needs already made (gpu/mod.rs, `Pool`).
#[test]
fn gpu_stats_show_a_loop_reusing_its_buffers_and_bind_groups() {
    if !gpu() {
        return;
    }
    let code = "let rec go i p = if i == 0 then () else\n\
                \x20 (let g = grad (fun q -> sum (tanh (x @ q))) p in (pf (sum g); go (i - 1) (p - g * 0.01)))\n\
                let () = go 12 w\n";
    let r = dp_with("gpu", &format!("{PRELUDE}{code}"), &[("DP_GPU_STATS", "1")]);
    assert!(r.ok, "{}", r.stderr);
    let lines: Vec<&str> = r.stderr.lines().filter(|l| l.starts_with("dp gpu stats: ")).collect();
    assert!(lines.len() >= 12, "expected a stats line per read-back:\n{}", r.stderr);
    for l in &lines {
        assert!(l.contains(" dispatches, ") && l.contains(" submits, ") && l.contains("| wall "), "{l}");
        assert!(l.contains("gpu: busy ") || l.contains("gpu: no timestamp queries"), "{l}");
    }
    for l in &lines[lines.len() - 3..] {
        assert!(
            l.contains(" 0 new buffers") && l.contains(" 0 new bind groups"),
            "a settled step made new resources: {l}"
        );
    }
    let plain = dp("gpu", &format!("{PRELUDE}{code}"));
    assert_eq!(plain.stdout, r.stdout, "statistics changed the results");
}

#[test]
fn gpu_large_elementwise_uses_a_2d_grid() {
    // 4100 × 4100 = 16,810,000 > 65,535 × 256 elements: more workgroups than one grid
    // dimension holds. The last rows lie past the first 65,535 workgroups.
    check(&[
        Case {
            name: "large",
            tol: R,
            code: r#"
let big = randn 60 [4100, 4100]
let z = big * 2.0 + tanh big
let () = pt (slice z 0 4095 4100)
let () = pf (sum z)
let () = pf (max (z - big))
let () = pt (slice (sum_axis z 0) 0 4000 4100)
"#,
        },
        // The mask kernel's thread per element needs the 2-D grid too, and the maximum (tied)
        // lies past the first 65,535 workgroups.
        Case {
            name: "max mask",
            tol: E,
            code: r#"
let spiky = reshape big [16810000] + (onehot 16810000 16800001 + onehot 16810000 16805000) * 100.0
let m = grad max spiky
let () = pf (sum m)
let () = println (show (argmax m))
let () = pt (slice m 0 16799990 16800010)
"#,
        },
    ]);
}

/// Long reductions, softmaxes and scans, whose single-workgroup (or single-thread) loops came
/// out wrong on lavapipe past ~1.37M elements a group and 65,535 a line, now folded in chunks;
/// and tanh near 0, where the exp-based builtin cancels.
#[test]
fn gpu_long_axes_and_tanh_near_zero() {
    check(&[
        Case {
            name: "long sum_axis",
            tol: R,
            code: r#"
let tall = randn 21 [1400000, 2]
let () = pt (sum_axis tall 0)
let () = pt (mean_axis (ones [3, 1400000]) 1)
let () = pt (max_axis tall 0)
let () = pt (grad (fun b -> sum (ones [1400000] * b)) (tensor [1.0]))
let wide = randn 26 [2, 1400000]
let () = pt (sum_axis (softmax wide) 1)
let () = pt (slice (log_softmax wide) 1 1399995 1400000)
let () = pf (sum (softmax (zeros [1400000])))
"#,
        },
        Case {
            name: "long cumsum",
            tol: R,
            code: r#"
let c = cumsum (randn 22 [3, 70000]) 1
let () = pt (slice c 1 65530 65540)
let () = pt (slice c 1 69990 70000)
let d = cumsum (randn 23 [9000, 2, 3]) 0
let () = pt (slice d 0 4094 4098)
let () = pt (slice (jit (fun x -> cumsum (x * 2.0) 0) (randn 24 [70000])) 0 69995 70000)
let () = pt (slice (grad (fun x -> sum (cumsum x 0 * x)) (randn 25 [70000])) 0 0 5)
"#,
        },
        Case {
            name: "tanh near 0",
            tol: E,
            code: r#"
let t = tensor [1e-30, 1e-10, 1e-8, 1e-6, 1e-5, 0.001, 0.1, -0.2499, 0.25, -0.3, 1.0, -3.0, 20.0]
let () = pt (tanh t / t)
let () = pt (jit (fun t -> tanh (t * 1.0) / t) t)
let () = pt (grad (fun t -> sum (tanh t)) t)
"#,
        },
    ]);
}

#[test]
fn gpu_load_params_converts_a_float64_checkpoint_for_a_gpu_template() {
    if !gpu() {
        return;
    }
    let path = std::env::temp_dir().join(format!("dp-gpu-f64-{}.safetensors", std::process::id()));
    let path = path.to_string_lossy().to_string();
    let r = dp(
        "gpu",
        &format!(
            "let () = save_params \"{path}\" {{ w = astype \"float64\" (to_device \"cpu\" (tensor [1.5, 2.0])) }}\n\
             let p = load_params \"{path}\" {{ w = ones [2] }}\n\
             let () = println (p.w * 2.0, dtype p.w)\n"
        ),
    );
    let _ = std::fs::remove_file(&path);
    assert!(r.ok && r.stdout.trim() == "(tensor [3.0, 4.0], \"float32\")", "{}{}", r.stdout, r.stderr);
}

#[test]
fn gpu_mixed_devices_are_an_error_naming_both() {
    if !gpu() {
        return;
    }
    let r =
        dp("gpu", "let a = ones [2, 2]\nlet b = to_device \"cpu\" (ones [2, 2])\nlet () = println (show (a + b))\n");
    assert!(!r.ok, "mixing devices succeeded: {}", r.stdout);
    assert!(r.stderr.contains("two devices") && r.stderr.contains("gpu") && r.stderr.contains("cpu"), "{}", r.stderr);
    let r =
        dp("gpu", "let a = ones [2, 2]\nlet b = to_device \"cpu\" (ones [2, 2])\nlet () = println (show (a @ b))\n");
    assert!(!r.ok && r.stderr.contains("two devices (gpu and cpu)"), "{}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
}

#[test]
fn gpu_bool_and_int64_operands_meet_gpu_tensors_and_positions_are_int64() {
    if !gpu() {
        return;
    }
    // A bernoulli mask (a CPU bool tensor) beside GPU activations: nn.dropout, staged and not;
    // argmax_axis positions are int64 on both devices, so they index `gather` and compare with
    // int64 labels; a literal bool mask and int64 labels in arithmetic.
    let src = "import nn\n\
        let x = reshape (arange 12) [3, 4]\n\
        let d = nn.dropout (key 3) 0.5 x\n\
        let () = println (show (d, jit (nn.dropout (key 3) 0.5) x))\n\
        let () = println (show (grad (fun x -> sum (nn.dropout (key 3) 0.5 x * x)) x))\n\
        let i = argmax_axis (x * x - 5.0 * x) 1\n\
        let () = println (show (i, dtype i, argmin_axis x 0, gather x (expand_dims i 1) 1))\n\
        let () = println (show (equal i (tensor [0, 3, 3]), x * astype \"float32\" (tensor [true, false, true, true])))\n\
        let () = println (show (where (tensor [true, false, true, false]) x (tensor 0.0), x + tensor [1, 2, 3, 4]))\n";
    let (cpu, gpu) = (dp("cpu", src), dp("gpu", src));
    assert!(cpu.ok && gpu.ok, "cpu: {}\ngpu: {}", cpu.stderr, gpu.stderr);
    assert_eq!(cpu.stdout, gpu.stdout);
    assert!(cpu.stdout.contains("\"int64\""), "{}", cpu.stdout);
    // A CPU float32 tensor is still the program's choice of device: an error.
    let r = dp("gpu", "let () = println (show (where (tensor [true]) (ones [1]) (to_device \"cpu\" (ones [1]))))\n");
    assert!(!r.ok && r.stderr.contains("two devices (gpu and cpu)"), "{}", r.stderr);
}

#[test]
fn gpu_missing_adapter_is_a_clear_error_and_auto_falls_back() {
    // WGPU_BACKEND restricts wgpu to a backend this platform lacks (or, on Windows, to one that
    // exists but is not Vulkan); on Linux this is the situation of a machine without a driver.
    if !cfg!(target_os = "linux") {
        return;
    }
    let src = "let () = println (show (to_list (ones [2] * 3.0)))\n";
    let env = [("WGPU_BACKEND", "dx12")];
    let r = dp_with("gpu", src, &env);
    assert!(!r.ok, "--device gpu without an adapter succeeded");
    assert!(r.stderr.contains("--device gpu") && r.stderr.contains("no GPU adapter"), "{}", r.stderr);
    assert!(r.stderr.contains("backends tried: Vulkan"), "{}", r.stderr);
    let r = dp_with("auto", &format!("{src}{src}"), &env);
    assert!(r.ok, "{}", r.stderr);
    assert_eq!(r.stdout, "[3.0, 3.0]\n[3.0, 3.0]\n");
    assert_eq!(r.stderr.matches("using the CPU").count(), 1, "{}", r.stderr);
    let r = dp_with("cpu", "let () = println (show (to_list (to_device \"gpu\" (ones [2]))))\n", &env);
    assert!(!r.ok && r.stderr.contains("no GPU adapter"), "{}", r.stderr);
    // Programs without tensors never touch the GPU under auto.
    let r = dp_with("auto", "let () = println (show (1 + 1))\n", &env);
    assert!(r.ok && r.stderr.is_empty(), "{}", r.stderr);
}

#[test]
fn gpu_auto_uses_the_gpu_when_there_is_one() {
    if !gpu() {
        return;
    }
    let r = dp("auto", "let a = ones [2]\nlet b = to_device \"cpu\" (ones [2])\nlet () = println (show (a + b))\n");
    assert!(!r.ok && r.stderr.contains("two devices (gpu and cpu)"), "{}", r.stderr);
}

/// Every way a run ends quiesces the GPU first (`gpu::shutdown`: the submission thread joined,
/// the queue waited on) — the end of the program, a run-time error, `exit` — so `exit` never
/// runs the driver's exit-time handlers beside a submission (1–2% of runs ending with unread
/// GPU work died there on lavapipe). One run cannot show a race that rare; this checks that
/// each way out reaches the shutdown, and that a CPU run has nothing to shut down.
#[test]
fn gpu_every_way_out_quiesces_the_gpu_first() {
    if !gpu() {
        return;
    }
    let work = "let a = randn 1 [40, 40]\nlet b = (a @ a) + 1.0\n";
    let ends = [("", 0), ("let _ = error \"boom\"\n", 1), ("let _ = exit 3\n", 3)];
    for (device, shuts_down) in [("gpu", true), ("cpu", false)] {
        for (end, code) in ends {
            let path = crate::run::temp_path("dp");
            std::fs::write(&path, format!("{work}{end}")).expect("write a temporary dp file");
            let out = Command::new(env!("CARGO_BIN_EXE_dp"))
                .args(["run", "--device", device])
                .arg(&path)
                .envs([("NODEVICE_SELECT", "1"), ("DP_GPU_TRACE", "1")])
                .output()
                .expect("run dp");
            let _ = std::fs::remove_file(&path);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(code), "--device {device}, ending `{end}`: {stderr}");
            let said = stderr.contains("dp gpu: shutdown: the queue is idle");
            assert_eq!(said, shuts_down, "--device {device}, ending `{end}`: {stderr}");
        }
    }
}

/// The tensor examples on the GPU print what their `.expected` files say, exactly as the CPU
/// run does (checked by `golden::examples_run_as_documented`): the same losses to the printed
/// digits, the same accuracy and samples. char_rnn's chaotic losses after step 0 are
/// placeholders there, so for it the first loss, the decrease and the sample must agree.
#[test]
fn gpu_examples_print_what_the_cpu_prints() {
    if !gpu() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for name in ["linear_regression", "mlp", "lstm", "treelstm", "cnn", "char_rnn"] {
        let out = Command::new(env!("CARGO_BIN_EXE_dp"))
            .args(["run", "--device", "gpu"])
            .arg(root.join("examples").join(format!("{name}.dp")))
            .env("NODEVICE_SELECT", "1")
            .output()
            .expect("run dp");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{name} on the GPU failed:\n{}", String::from_utf8_lossy(&out.stderr));
        let expected = std::fs::read_to_string(root.join("tests/programs/examples").join(format!("{name}.expected")))
            .expect("read the expected output");
        assert!(
            crate::golden::output_matches(expected.trim_end(), stdout.trim_end()),
            "{name} on the GPU:\n--- expected (the CPU's)\n{expected}\n--- got\n{stdout}"
        );
    }
}

/// The Transformer (examples/transformer.dp, W6's shapes) trains on the GPU as on the CPU,
/// unstaged and with its whole step staged (`jit`: attention's products of transposed stacks,
/// the fused chains): the first loss and the second agree to float32 rounding. Its int64
/// windows and targets stay on the CPU; `astype "float32"` of them goes to the default device.
#[test]
fn gpu_transformer_trains_staged_and_unstaged_as_on_the_cpu() {
    if !gpu() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let init = crate::run::temp_path("safetensors");
    let init_str = init.to_string_lossy().to_string();
    let run = |device: &str, extra: &[&str]| -> Vec<f64> {
        let out = Command::new(env!("CARGO_BIN_EXE_dp"))
            .args(["run", "--device", device, "examples/transformer.dp"])
            .args(extra)
            .current_dir(root)
            .env("NODEVICE_SELECT", "1")
            .output()
            .expect("run dp");
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "{device} {extra:?}:\n{}", String::from_utf8_lossy(&out.stderr));
        ["value=", "last="]
            .iter()
            .filter_map(|k| stdout.split(k).nth(1)?.split_whitespace().next()?.parse().ok())
            .collect()
    };
    run("cpu", &["init", &init_str]);
    for staged in [false, true] {
        let mut args = vec!["bench", init_str.as_str(), "2"];
        if staged {
            args.push("jit");
        }
        let (cpu, gpu) = (run("cpu", &args), run("gpu", &args));
        assert_eq!(cpu.len(), 2, "{cpu:?}");
        assert_eq!(gpu.len(), 2, "{gpu:?}");
        for (c, g) in cpu.iter().zip(&gpu) {
            assert!((c - g).abs() <= 1e-5 * c.abs(), "staged {staged}: cpu {cpu:?}, gpu {gpu:?}");
        }
    }
    let _ = std::fs::remove_file(&init);
}

/// `argmax` on a GPU tensor agrees with the CPU (the first index on ties, NaN ordered as the
/// CPU orders it) and brings back only the winning (key, index) pair, never the tensor.
#[test]
fn gpu_argmax_reads_back_only_the_index() {
    let cases = [
        Case { name: "random", tol: E, code: "let () = println (show (argmax x))" },
        Case { name: "ties", tol: E, code: "let () = println (show (argmax (tensor [1.0, 3.0, 3.0, 2.0, 3.0])))" },
        Case { name: "NaN first", tol: E, code: "let () = println (show (argmax (tensor [0.0] / tensor [0.0])))" },
        Case {
            name: "NaN between",
            tol: E,
            code: "let () = println (show (argmax (concat 0 [tensor [1.0, 0.0 / 0.0, 5.0], tensor [0.0] / tensor [0.0], tensor [5.0]])))",
        },
        Case { name: "three passes", tol: E, code: "let () = println (show (argmax (randn 9 [300001])))" },
        Case { name: "matrix", tol: E, code: "let () = println (show (argmax (tensor [[1.0, 9.0], [9.0, 2.0]])))" },
    ];
    check(&cases);
    if !gpu() {
        return;
    }
    for c in &cases {
        let src = format!("{PRELUDE}{}", c.code);
        let r = dp_with("gpu", &src, &[("DP_GPU_TRACE", "1")]);
        assert!(r.ok, "{}: the GPU run failed:\n{}", c.name, r.stderr);
        assert_no_fallback(&r.stderr);
        let bulk: Vec<&str> =
            r.stderr.lines().filter(|l| l.contains("read back") && !l.ends_with("read back 2 values")).collect();
        assert!(bulk.is_empty(), "{}: more than the index came back:\n{}", c.name, bulk.join("\n"));
    }
}

/// LANGUAGE.md "Tensors, continued" on the GPU: comparisons and logic (held as float32 0/1
/// there, printed as the CPU's bools' values), selects, per-axis reductions, running sums and
/// the shape operations, with their derivatives.
#[test]
fn gpu_masks_reductions_and_indexing() {
    check(&[
        Case { name: "comparisons", tol: E, code: "let () = (pt (less x y); pt (greater_equal x 0.5); pt (equal cv cv); pt (not_equal 0.0 x); pt (less_equal x3 b3))" },
        Case { name: "logic", tol: E, code: "let () = (pt (logical_and (less x y) (greater x 0.0)); pt (logical_or (less x y) (greater cv 0.0)); pt (logical_not (less x 0.0)))" },
        Case { name: "where", tol: E, code: "let () = (pt (where (less x y) x y); pt (where (greater cv 0.0) rv (x * 2.0)); pt (where (tensor [1.0, 0.0]) (tensor [1.0 / 0.0, 0.0 / 0.0]) (tensor [3.0])))" },
        Case { name: "clip, max_of, min_of", tol: E, code: "let () = (pt (clip (-0.5) 0.5 x); pt (max_of x y); pt (min_of x 0.25); pt (max_of cv rv); pt (max_of nan1 1.0))" },
        Case { name: "any all", tol: E, code: "let () = println (show (any (greater x 3.0), all (greater pos 0.0), any (greater x 99.0), all (greater x 0.0)))" },
        Case { name: "select derivatives", tol: R, code: "let () = (pt (grad (fun x -> sum (max_of x y * dx)) x); pt (grad (fun x -> sum (clip (-0.5) 0.5 x * dx)) x); pt (grad (fun x -> sum (where (less x y) (x * x) (x * 3.0))) x); pt (snd (jvp (fun x -> min_of x y) x dx)))" },
        Case { name: "reductions", tol: R, code: "let () = (pf (min x); println (show (argmin x)); pt (max_axis x 0); pt (min_axis x3 (-1)); pt (argmax_axis x 1); pt (argmin_axis x3 0); pf (var x))" },
        Case { name: "cumsum softmax_axis", tol: R, code: "let () = (pt (cumsum x 1); pt (cumsum x3 0); pt (softmax_axis x 0); pt (log_softmax_axis x3 1); pt (softmax_axis x3 (-1)))" },
        Case { name: "reduction derivatives", tol: R, code: "let () = (pt (grad (fun x -> sum (sin (max_axis x 1))) x); pt (grad (fun x -> sum (sin (cumsum x 1))) x); pt (grad (fun x -> sum (sin (softmax_axis x 0))) x); pt (grad var x))" },
        // Bool and int64 tensors are made on the CPU whatever the device; `astype "float32"`
        // takes them to the default device, where they meet the GPU's tensors.
        Case { name: "bool and int64 literals made float32", tol: E, code: "let () = (pt (where (astype \"float32\" (tensor [true, false])) (tensor [1.0, 2.0]) (tensor [3.0, 4.0])); pt (astype \"float32\" (tensor [[2, 0], [1, 5]]) * arange 2); pt (equal (expand_dims (astype \"float32\" (tensor [2, 0])) 1) (arange 3)))" },
        Case { name: "shapes", tol: E, code: "let () = (pt (expand_dims x 1); pt (squeeze (expand_dims x 0) 0); pt (stack 1 [x, y]); pt (broadcast_to rv [3, 37, 53]); pt (ravel x3); pf (get x [3, -2]); pt (grad (fun x -> get x [3, -2] * get x [0, 0]) x))" },
    ]);
}

/// `gather` from a GPU tensor (its int64 indices stay on the CPU, made there even under
/// `--device gpu`) and its adjoint, the scatter-add, with repeated, negative and unused
/// indices, on every axis, with index tensors of rank 0 to 2 and none at all; `nn.embedding`
/// and its gradient in a training step. Then the indices' errors.
#[test]
fn gpu_gather_and_its_scatter_add() {
    check(&[
        Case { name: "gather axis 0", tol: E, code: "let () = pt (gather x (tensor [3, 0, 36, -1, 3]) 0)" },
        Case { name: "gather axis 1", tol: E, code: "let () = pt (gather x (tensor [[52, 1], [-53, 7], [1, 1]]) 1)" },
        Case { name: "gather rank 3, middle axis", tol: E, code: "let () = (pt (gather x3 (tensor [2, 2, 0]) 1); pt (gather x3 (tensor [[6]]) (-1)))" },
        Case { name: "gather rank 0 indices and none", tol: E, code: "let () = (pt (gather x3 (tensor 1) 0); pt (gather x (randint (key 1) 0 53 [0]) 1))" },
        Case {
            name: "scatter-add (grad of gather)",
            tol: E,
            code: "let () = (pt (grad (fun t -> sum (gather t (tensor [3, 0, 3, -1, 3]) 0 * randn 40 [5, 53])) x); pt (grad (fun t -> sum (sin (gather t (tensor [[6, 0], [6, 6]]) 2))) x3); pt (grad (fun t -> sum (gather t (randint (key 1) 0 53 [0]) 1)) x))",
        },
        Case {
            name: "jvp and second order through gather",
            tol: R,
            code: "let () = (pt (snd (jvp (fun t -> gather (t * t) (tensor [1, 1, 4]) 1) x dx)); pt (grad (fun t -> sum (grad (fun u -> sum (sin (gather u (tensor [2, 2, 0]) 0))) t * x3)) x3))",
        },
        Case {
            name: "embedding training step",
            tol: R,
            code: "let () = let table = randn 41 [11, 6] in let ids = tensor [[1, 4, 4], [10, 0, 4]] in let g = grad (fun t -> sum (sin (nn.embedding t ids @ randn 42 [6, 3]))) table in pt (table - 0.1 * g)",
        },
    ]);
    if !gpu() {
        return;
    }
    let bad_index = dp("gpu", "let () = println (to_list (gather (ones [2, 3]) (tensor [0, 3]) 1))\n");
    assert!(!bad_index.ok && bad_index.stderr.contains("index 3 is out of range for axis 1"), "{}", bad_index.stderr);
    let float_indices = dp("gpu", "let () = println (to_list (gather (ones [2, 3]) (tensor [0.0]) 1))\n");
    assert!(
        !float_indices.ok && float_indices.stderr.contains("the indices must be an int64 tensor"),
        "{}",
        float_indices.stderr
    );
}
// Batched products, einsum, strided and padded convolutions, average pooling (issue 14): the
// batched WGSL product (one dispatch, the batch on the grid's z axis), its broadcast operands,
// and every derivative through them.
#[test]
fn gpu_batched_products_einsum_strided_conv() {
    check(&[
        Case { name: "stack @ stack", tol: R, code: "let () = pt (randn 60 [5, 37, 29] @ randn 61 [5, 29, 70])" },
        Case {
            name: "broadcast batch",
            tol: R,
            code: "let () = pt (randn 62 [2, 1, 7, 9] @ randn 63 [3, 9, 5])",
        },
        Case { name: "stack @ matrix", tol: R, code: "let () = pt (x3 @ randn 64 [7, 3])" },
        Case { name: "vector @ stack", tol: R, code: "let () = pt (randn 65 [4] @ x3)" },
        Case { name: "stack @ vector", tol: R, code: "let () = pt (x3 @ randn 66 [7])" },
        Case {
            name: "d batched, broadcast",
            tol: R,
            code: "let () = let (a, b) = grad (fun (a, b) -> sum (a @ b * randn 67 [2, 3, 7, 5])) (randn 68 [2, 1, 7, 9], randn 69 [3, 9, 5]) in (pt a; pt b)",
        },
        Case {
            name: "einsum attention scores",
            tol: R,
            code: "let () = pt (einsum \"bhqd,bhkd->bhqk\" [randn 70 [2, 3, 5, 4], randn 71 [2, 3, 6, 4]])",
        },
        Case { name: "einsum diagonal", tol: E, code: "let () = pt (einsum \"ii->i\" [randn 72 [6, 6]])" },
        Case {
            name: "d einsum, three operands",
            tol: R,
            code: "let () = let (a, b) = grad (fun (a, b) -> item (einsum \"ij,jk,k->\" [a, b, rv])) (randn 73 [4, 7], randn 74 [7, 53]) in (pt a; pt b)",
        },
        Case { name: "conv2d_with 2 1", tol: R, code: "let () = pt (conv2d_with 2 1 img ker)" },
        Case { name: "conv2d_with 3 2", tol: R, code: "let () = pt (conv2d_with 3 2 img ker)" },
        Case {
            name: "conv2d_with grads",
            tol: R,
            code: "let () = let (gi, gk) = grad (fun (a, b) -> sum (conv2d_with 2 1 a b * randn 75 [2, 4, 5, 5])) (img, ker) in (pt gi; pt gk)",
        },
        Case {
            name: "conv2d_with second order",
            tol: R,
            code: "let () = pt (grad (fun (a : Tensor) -> sum (grad (fun (b : Tensor) -> sum (tanh (conv2d_with 2 1 a b))) ker)) img)",
        },
        Case { name: "avg_pool2d 2", tol: E, code: "let () = pt (avg_pool2d 2 img)" },
        Case {
            name: "avg_pool2d grad",
            tol: R,
            code: "let () = pt (grad (fun (a : Tensor) -> sum (avg_pool2d 3 a * randn 76 [2, 3, 3, 2])) img)",
        },
    ]);
}

#[test]
fn gpu_load_csv_follows_the_default_device() {
    if !gpu() {
        return;
    }
    let path = std::env::temp_dir().join(format!("dp-gpu-csv-{}.csv", std::process::id()));
    std::fs::write(&path, "a,b\n1,2\n3,4\n").unwrap();
    let path = path.to_string_lossy().to_string();
    let r = dp("gpu", &format!("let t = load_csv \"{path}\"\nlet () = println (t + ones [2, 2])\n"));
    let _ = std::fs::remove_file(&path);
    assert!(r.ok && r.stdout.trim() == "tensor [[2.0, 3.0], [4.0, 5.0]]", "{}{}", r.stdout, r.stderr);
}
