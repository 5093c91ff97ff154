//! Batched products, `einsum`, strided and padded convolutions, average pooling (issue 14):
//!
//! * derivatives through the `tensors` harness (dp's `grad`, `jvp` and, for some cases, second
//!   order against central finite differences of a float64 reference written here with plain
//!   loops, not dp's lowering), in float32 and in float64;
//! * values against NumPy (`np.matmul`, `np.einsum`, a convolution written in NumPy), in
//!   float32 and float64;
//! * the errors for specs and shapes that do not fit: located, never a panic.

use crate::golden::numbers;
use crate::run::{run_dp, run_ok, temp_path};
use crate::tensors::{case, check_cases, conv2d_with, t, Case, Rng, A};
use ndarray::IxDyn;
use std::collections::BTreeMap;
use std::process::Command;

// ------------------------------------------------------------------ references (plain loops)

/// Every index tuple of `shape`, row-major.
fn positions(shape: &[usize]) -> Vec<Vec<usize>> {
    let mut out = vec![vec![]];
    for &n in shape {
        out = out.into_iter().flat_map(|p| (0..n).map(move |i| [&p[..], &[i]].concat())).collect();
    }
    out
}

/// `einsum` by definition: for every assignment of the spec's letters, the product of the
/// operands' elements, added to the output element it names.
fn einsum(spec: &str, xs: &[A]) -> A {
    let (lhs, out) = spec.split_once("->").expect("test bug: explicit output");
    let ins: Vec<Vec<char>> = lhs.split(',').map(|s| s.chars().collect()).collect();
    let out: Vec<char> = out.chars().collect();
    let mut size = BTreeMap::new();
    for (idx, x) in ins.iter().zip(xs) {
        for (c, &n) in idx.iter().zip(x.shape()) {
            size.insert(*c, n);
        }
    }
    let letters: Vec<char> = size.keys().copied().collect();
    let dims: Vec<usize> = letters.iter().map(|c| size[c]).collect();
    let oshape: Vec<usize> = out.iter().map(|c| size[c]).collect();
    let mut y = A::zeros(IxDyn(&oshape));
    for p in positions(&dims) {
        let at = |c: &char| p[letters.iter().position(|d| d == c).unwrap()];
        let term: f64 = ins.iter().zip(xs).map(|(idx, x)| x[IxDyn(&idx.iter().map(at).collect::<Vec<_>>())]).product();
        y[IxDyn(&out.iter().map(at).collect::<Vec<_>>())] += term;
    }
    y
}

/// NumPy's `matmul`: a rank-1 operand a row (left) or column (right), batch axes broadcast.
fn matmul(a: &A, b: &A) -> A {
    let a2 = if a.ndim() == 1 { a.clone().insert_axis(ndarray::Axis(0)) } else { a.clone() };
    let b2 = if b.ndim() == 1 { b.clone().insert_axis(ndarray::Axis(1)) } else { b.clone() };
    let (ra, rb) = (a2.ndim(), b2.ndim());
    let (ba, bb) = (&a2.shape()[..ra - 2], &b2.shape()[..rb - 2]);
    let nb = ba.len().max(bb.len());
    let dim = |s: &[usize], i: usize| if i + s.len() >= nb { s[i + s.len() - nb] } else { 1 };
    let batch: Vec<usize> = (0..nb).map(|i| dim(ba, i).max(dim(bb, i))).collect();
    let (m, k, n) = (a2.shape()[ra - 2], a2.shape()[ra - 1], b2.shape()[rb - 1]);
    let mut y = A::zeros(IxDyn(&[&batch[..], &[m, n]].concat()));
    let pick = |own: &[usize], p: &[usize]| -> Vec<usize> {
        (0..own.len()).map(|d| if own[d] == 1 { 0 } else { p[d + nb - own.len()] }).collect()
    };
    for p in positions(&batch) {
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0.0;
                for l in 0..k {
                    acc += a2[IxDyn(&[pick(ba, &p), vec![i, l]].concat())]
                        * b2[IxDyn(&[pick(bb, &p), vec![l, j]].concat())];
                }
                y[IxDyn(&[p.clone(), vec![i, j]].concat())] = acc;
            }
        }
    }
    let mut shape = batch;
    if a.ndim() > 1 {
        shape.push(m);
    }
    if b.ndim() > 1 {
        shape.push(n);
    }
    y.into_shape_with_order(IxDyn(&shape)).unwrap()
}

/// k×k mean pooling with stride k (a partial last window dropped).
fn avg_pool2d(k: usize, x: &A) -> A {
    let s = x.shape();
    let (oh, ow) = (s[2] / k, s[3] / k);
    let mut out = A::zeros(IxDyn(&[s[0], s[1], oh, ow]));
    for p in positions(&[s[0], s[1], oh, ow]) {
        let mut acc = 0.0;
        for i in 0..k {
            for j in 0..k {
                acc += x[[p[0], p[1], p[2] * k + i, p[3] * k + j]];
            }
        }
        out[IxDyn(&p)] = acc / (k * k) as f64;
    }
    out
}

// ------------------------------------------------------------------ derivatives

fn both(c: impl Fn() -> Case) -> [Case; 2] {
    [c(), c().in_float64()]
}

fn second(mut c: Case) -> Case {
    c.second_order = true;
    c
}

#[test]
fn batched_products_differentiate() {
    let mut cases = Vec::new();
    let shapes: &[(&[usize], &[usize])] = &[
        (&[2, 3, 4], &[2, 4, 2]),
        (&[2, 1, 2, 3], &[3, 3, 2]),
        (&[2, 3, 4], &[4, 2]),
        (&[3, 2], &[2, 2, 3]),
        (&[3], &[2, 3, 2]),
        (&[2, 2, 3], &[3]),
    ];
    for (k, &(sa, sb)) in shapes.iter().enumerate() {
        let mk = || {
            let mut rng = Rng::new(200 + k as u64);
            let ab = vec![t(rng.arr(sa, -1.5, 1.5)), t(rng.arr(sb, -1.5, 1.5))];
            case(&format!("{sa:?} @ {sb:?}"), "$0 @ $1", false, ab, |x| matmul(&x[0], &x[1]))
        };
        cases.extend(both(mk));
    }
    // Second order through the batched rule (its adjoint's products and batch sums are
    // recorded too), in float64.
    let mut rng = Rng::new(210);
    let ab = vec![t(rng.arr(&[2, 1, 2, 3], -1.0, 1.0)), t(rng.arr(&[2, 3, 2], -1.0, 1.0))];
    cases.push(
        second(case("tanh of a broadcast batched product", "tanh ($0 @ $1)", false, ab, |x| {
            matmul(&x[0], &x[1]).mapv(f64::tanh)
        }))
        .in_float64(),
    );
    let ab = vec![t(rng.arr(&[2, 2, 3], -1.0, 1.0)), t(rng.arr(&[3], -1.0, 1.0))];
    cases.push(
        second(case("a stack times a vector, squared", "($0 @ $1) * ($0 @ $1)", false, ab, |x| {
            let y = matmul(&x[0], &x[1]);
            &y * &y
        }))
        .in_float64(),
    );
    check_cases(201, cases);
}

#[test]
fn einsum_differentiates() {
    let specs: &[(&str, &[&[usize]])] = &[
        ("ij,jk->ik", &[&[2, 3], &[3, 2]]),
        ("bij,bjk->bik", &[&[2, 2, 3], &[2, 3, 2]]),
        ("bij,bkj->bik", &[&[2, 2, 3], &[2, 2, 3]]),
        ("ii->i", &[&[3, 3]]),
        ("iij->j", &[&[2, 2, 3]]),
        ("ij->ji", &[&[2, 3]]),
        ("ijk->kj", &[&[2, 3, 2]]),
        ("ij,ij->", &[&[2, 3], &[2, 3]]),
        ("i,j->ij", &[&[2], &[3]]),
        ("bi,bi->b", &[&[3, 4], &[3, 4]]),
        ("ij,jk,kl->il", &[&[2, 3], &[3, 2], &[2, 2]]),
        ("bhqd,bhkd->bhqk", &[&[1, 2, 2, 3], &[1, 2, 3, 3]]),
        ("ij,kj,k->i", &[&[2, 3], &[2, 3], &[2]]),
    ];
    let mut cases = Vec::new();
    for (k, &(spec, shapes)) in specs.iter().enumerate() {
        let args: Vec<String> = (0..shapes.len()).map(|i| format!("${i}")).collect();
        let body = format!("einsum \"{spec}\" [{}]", args.join(", "));
        let mk = || {
            let mut rng = Rng::new(300 + k as u64);
            let xs = shapes.iter().map(|s| t(rng.arr(s, -1.5, 1.5))).collect();
            let spec = spec.to_string();
            case(&format!("einsum {spec}"), &body, false, xs, move |x| einsum(&spec, x))
        };
        cases.extend(both(mk));
    }
    let mut rng = Rng::new(320);
    let xs = vec![t(rng.arr(&[2, 3], -1.0, 1.0)), t(rng.arr(&[3, 3], -1.0, 1.0))];
    cases.push(
        second(case("tanh of an einsum", "tanh (einsum \"ij,jk->ik\" [$0, $1])", false, xs, |x| {
            einsum("ij,jk->ik", x).mapv(f64::tanh)
        }))
        .in_float64(),
    );
    let xs = vec![t(rng.arr(&[3, 3], -1.0, 1.0))];
    cases.push(
        second(case("a diagonal squared", "einsum \"ii,ii->i\" [$0, $0]", false, xs, |x| {
            einsum("ii,ii->i", &[x[0].clone(), x[0].clone()])
        }))
        .in_float64(),
    );
    check_cases(301, cases);
}

#[test]
fn strided_convolutions_and_average_pooling_differentiate() {
    let convs: &[(usize, usize, &[usize], &[usize])] = &[
        (2, 0, &[1, 2, 5, 5], &[2, 2, 3, 3]),
        (1, 1, &[2, 1, 3, 4], &[2, 1, 3, 3]),
        (2, 1, &[1, 2, 5, 4], &[3, 2, 3, 2]),
        (3, 2, &[1, 1, 4, 4], &[1, 1, 2, 2]),
        (1, 0, &[1, 2, 4, 4], &[1, 2, 2, 2]),
    ];
    let mut cases = Vec::new();
    for (k, &(s, p, xs, ws)) in convs.iter().enumerate() {
        let mk = || {
            let mut rng = Rng::new(400 + k as u64);
            let xw = vec![t(rng.arr(xs, -1.5, 1.5)), t(rng.arr(ws, -1.5, 1.5))];
            case(
                &format!("conv2d_with {s} {p} {xs:?} {ws:?}"),
                &format!("conv2d_with {s} {p} $0 $1"),
                false,
                xw,
                move |x| conv2d_with(s, p, &x[0], &x[1]),
            )
        };
        cases.extend(both(mk));
    }
    for (k, &(n, s)) in
        [(2usize, &[1, 2, 4, 4][..]), (2, &[2, 1, 5, 3]), (3, &[1, 1, 3, 4]), (1, &[1, 1, 2, 2])].iter().enumerate()
    {
        let mk = || {
            let mut rng = Rng::new(420 + k as u64);
            case(
                &format!("avg_pool2d {n} {s:?}"),
                &format!("avg_pool2d {n} $0"),
                false,
                vec![t(rng.arr(s, -1.5, 1.5))],
                move |x| avg_pool2d(n, &x[0]),
            )
        };
        cases.extend(both(mk));
    }
    let mut rng = Rng::new(430);
    let xw = vec![t(rng.arr(&[1, 2, 5, 5], -1.0, 1.0)), t(rng.arr(&[2, 2, 3, 3], -1.0, 1.0))];
    cases.push(
        second(case(
            "a strided, padded layer, pooled",
            "avg_pool2d 2 (tanh (conv2d_with 2 1 $0 $1))",
            false,
            xw,
            |x| avg_pool2d(2, &conv2d_with(2, 1, &x[0], &x[1]).mapv(f64::tanh)),
        ))
        .in_float64(),
    );
    check_cases(401, cases);
}

// ------------------------------------------------------------------ values against NumPy

/// Each case: the dp expression over `a`, `b`, `c` (loaded from .npy files NumPy wrote) and
/// the NumPy expression over the same names.
const NUMPY_CASES: &[(&str, &str)] = &[
    ("a3 @ b3", "np.matmul(a3, b3)"),
    ("a4 @ b3", "np.matmul(a4, b3)"),
    ("a3 @ m", "np.matmul(a3, m)"),
    ("v @ b3", "np.matmul(v, b3)"),
    ("a3 @ v", "np.matmul(a3, v)"),
    ("einsum \"bij,bjk->bik\" [a3, b3]", "np.einsum('bij,bjk->bik', a3, b3)"),
    ("einsum \"bij,bkj->bki\" [a3, a3]", "np.einsum('bij,bkj->bki', a3, a3)"),
    ("einsum \"ii->i\" [sq]", "np.einsum('ii->i', sq)"),
    ("einsum \"ij->\" [sq]", "np.einsum('ij->', sq)"),
    ("einsum \"bij,jk,k->bi\" [a3, m, u]", "np.einsum('bij,jk,k->bi', a3, m, u)"),
    ("einsum \"i,j->ji\" [u, w]", "np.einsum('i,j->ji', u, w)"),
    ("conv2d_with 2 1 x k", "conv(x, k, 2, 1)"),
    ("conv2d_with 1 2 x k", "conv(x, k, 1, 2)"),
    ("conv2d_with 3 0 x k", "conv(x, k, 3, 0)"),
    ("avg_pool2d 2 x", "x[:, :, :2*(x.shape[2]//2), :2*(x.shape[3]//2)].reshape(2, 3, 3, 2, 3, 2).mean(axis=(3, 5))"),
];

const NUMPY_INPUTS: &str = r#"
import numpy as np
rng = np.random.default_rng(14)
def r(*s): return rng.uniform(-1, 1, s)
ins = dict(a3=r(4, 3, 5), b3=r(4, 5, 2), a4=r(2, 1, 3, 5), m=r(5, 2), v=r(5), w=r(2), u=r(2),
           sq=r(3, 3), x=r(2, 3, 7, 6), k=r(4, 3, 3, 2))
def conv(x, w, s, p):
    x = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = (h - kh) // s + 1, (wd - kw) // s + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, :, i:i + s * (oh - 1) + 1:s, j:j + s * (ow - 1) + 1:s]
            out += np.einsum('nchw,oc->nohw', patch, w[:, :, i, j])
    return out
"#;

#[test]
fn products_agree_with_numpy() {
    let Some(python) = crate::python::python_with(&["numpy"], "batched products, einsum and convolutions") else {
        return;
    };
    let dir = temp_path("products");
    std::fs::create_dir_all(&dir).expect("temp dir");
    for dtype in ["float64", "float32"] {
        let mut script = format!("{NUMPY_INPUTS}\nins = {{k: v.astype(np.{dtype}) for k, v in ins.items()}}\n");
        script += &format!("for k, v in ins.items(): np.save({:?} + '/' + k + '.npy', v)\n", dir.to_string_lossy());
        script += "globals().update(ins)\n";
        for (_, expr) in NUMPY_CASES {
            script += &format!("print(' '.join(repr(float(e)) for e in np.ravel({expr})))\n");
        }
        let out = Command::new(&python).arg("-c").arg(&script).output().expect("run python");
        assert!(out.status.success(), "numpy: {}", String::from_utf8_lossy(&out.stderr));
        let want: Vec<Vec<f64>> = String::from_utf8_lossy(&out.stdout).lines().map(numbers).collect();
        let mut src = String::new();
        for name in ["a3", "b3", "a4", "m", "v", "w", "u", "sq", "x", "k"] {
            src += &format!("let {name} = load_npy {:?}\n", format!("{}/{name}.npy", dir.to_string_lossy()));
        }
        for (expr, _) in NUMPY_CASES {
            src += &format!("let () = let t = {expr} in println (dtype t, to_list t)\n");
        }
        let got = run_ok(&src);
        assert_eq!(got.len(), NUMPY_CASES.len(), "{got:?}");
        let tol = if dtype == "float32" { 2e-6 } else { 1e-13 };
        let mut failures = Vec::new();
        for (((expr, np_expr), g), w) in NUMPY_CASES.iter().zip(&got).zip(&want) {
            let values = numbers(g);
            let ok = g.starts_with(&format!("(\"{dtype}\","))
                && values.len() == w.len()
                && values.iter().zip(w).all(|(a, b)| (a - b).abs() <= tol * b.abs().max(1.0));
            if !ok {
                failures.push(format!("{dtype} `{expr}` against `{np_expr}`:\n  dp    {g}\n  numpy {w:?}"));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ------------------------------------------------------------------ errors

#[test]
fn product_errors_are_located_and_clear() {
    let cases = [
        ("zeros [2, 3, 4] @ zeros [3, 4, 5]", "the batch dimensions [2] and [3] do not broadcast"),
        ("zeros [2, 3, 4] @ zeros [2, 5, 6]", "inner dimensions differ (4 and 5)"),
        ("einsum \"ij,jk\" [zeros [2, 3], zeros [3, 4]]", "needs an explicit output after `->`"),
        ("einsum \"ij,jk->ik\" [zeros [2, 3], zeros [4, 4]]", "index `j` is 3 in operand 0"),
        ("einsum \"ij->i\" [zeros [2, 3, 4]]", "operand 0 (`ij`) has 2 indices but its tensor has shape [2, 3, 4]"),
        ("einsum \"ij->q\" [zeros [2, 3]]", "output index `q` appears in no operand"),
        ("einsum \"i->i\" []", "einsum needs at least one tensor"),
        ("einsum \"i$->i\" [zeros [2, 3]]", "unexpected `$`"),
        ("conv2d_with 0 0 (zeros [1, 1, 3, 3]) (zeros [1, 1, 2, 2])", "the stride must be at least 1"),
        (
            "conv2d_with 1 1 (zeros [1, 1, 2, 2]) (zeros [1, 1, 5, 5])",
            "(padded to 4 × 4) and weights [1, 1, 5, 5] do not fit",
        ),
        ("conv2d_with 1 (-1) (zeros [1, 1, 2, 2]) (zeros [1, 1, 1, 1])", "padding must not be negative"),
        ("avg_pool2d 3 (zeros [1, 1, 2, 2])", "avg_pool2d 3 needs an input [N, C, H, W] with H, W ≥ 3"),
        ("avg_pool2d 2 (zeros [2, 2])", "got shape [2, 2]"),
    ];
    for (expr, want) in cases {
        for wrap in ["{e}", "grad (fun t -> sum ({e} * t)) (ones [1])"] {
            let e = wrap.replace("{e}", expr);
            let r = run_dp(&format!("let y = {e}\nlet () = println (shape y)\n"));
            assert!(!r.ok && r.stderr.contains(want), "`{e}`: want {want:?} in\n{}", r.stderr);
            assert!(r.stderr.contains(":1:"), "`{e}`: not located:\n{}", r.stderr);
            assert!(!r.stderr.contains("internal") && !r.stderr.contains("panicked"), "`{e}`:\n{}", r.stderr);
        }
    }
}
