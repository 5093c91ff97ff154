//! Tensors, checked from outside: dp programs run through the `dp` binary and compared with
//! numbers computed here in Rust (float64, on ndarray).
//!
//! * Every differentiable tensor primitive gets a `Case`: a dp expression over inputs `$0`, `$1`,
//!   … (Tensors or Floats), and the same operation written in f64 Rust. For each case one dp
//!   process (shared by all cases of a test) prints
//!   - `grad` of `sum (OP(x…) * r)` (a fixed random `r`, so every output element matters) with
//!     respect to every input, with the gradient's shape, compared with central finite
//!     differences of the Rust forward (step 1e-3);
//!   - `jvp` of `OP` along a random direction: the primal (checks the forward) and the tangent,
//!     compared with the finite-difference directional derivative;
//!   - for some cases, second order: `grad (fun x -> sum (grad L x * v))`, `jvp (grad L) x v`
//!     and `grad (fun x -> snd (jvp L x v))`, all compared with finite differences of finite
//!     differences (the Hessian-vector product).
//! * Broadcasting shapes (forward and gradient shapes), `.npy` round trips and files written by
//!   NumPy (or byte-for-byte by this file when NumPy is missing), printing.
//! * Shape errors: a located run-time error naming the shapes, never a panic, in plain code,
//!   under `grad` and under `jvp`.
//!
//! If a batch program fails, the failing snippet is found by rerunning, and every failing case
//! is reported with dp's stderr, so one bug does not hide the others.

use crate::golden::numbers;
use crate::run::{run_dp, run_ok, temp_path};
use ndarray::{ArrayD, Axis, Ix1, Ix2, IxDyn, Slice};
use std::process::Command;

pub(crate) type A = ArrayD<f64>;

// ------------------------------------------------------------------ running dp

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * a.abs().max(b.abs()).max(1.0)
}

fn all_close(got: &[f64], want: &[f64], tol: f64) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(g, w)| close(*g, *w, tol))
}

fn fmt_list(xs: &[f64]) -> String {
    format!("[{}]", xs.iter().map(|x| format!("{x:.6}")).collect::<Vec<_>>().join(", "))
}

// ------------------------------------------------------------------ random inputs

/// SplitMix64; values are rounded to float32 so dp and the reference see the same inputs.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0x9E37_79B9_7F4A_7C15)
    }
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn float(&mut self, lo: f64, hi: f64) -> f64 {
        (lo + (hi - lo) * self.unit()) as f32 as f64
    }
    /// Uniform in [lo, hi).
    pub(crate) fn arr(&mut self, shape: &[usize], lo: f64, hi: f64) -> A {
        let n = shape.iter().product();
        A::from_shape_vec(IxDyn(shape), (0..n).map(|_| self.float(lo, hi)).collect()).unwrap()
    }
    /// Magnitude in [lo, hi), random sign: away from the kinks of relu/abs and the pole of `/`.
    fn away(&mut self, shape: &[usize], lo: f64, hi: f64) -> A {
        let a = self.arr(shape, lo, hi);
        a.mapv(|x| if self.next_u64() & 1 == 0 { x } else { -x })
    }
    /// Distinct values at least 0.25 apart (a well-defined `max`).
    pub(crate) fn distinct(&mut self, shape: &[usize]) -> A {
        let n: usize = shape.iter().product();
        let mut idx: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = (self.next_u64() % (i as u64 + 1)) as usize;
            idx.swap(i, j);
        }
        let data = idx.iter().map(|&i| (i as f64 * 0.3 - 1.0 + 0.05 * self.unit()) as f32 as f64).collect();
        A::from_shape_vec(IxDyn(shape), data).unwrap()
    }
}

// ------------------------------------------------------------------ dp literals

fn flit(x: f64) -> String {
    let s = format!("{:?}", x as f32);
    let s = if s.contains(['.', 'e', 'n', 'i']) { s } else { format!("{s}.0") };
    if x < 0.0 {
        format!("({s})")
    } else {
        s
    }
}

fn nested(a: &A) -> String {
    if a.ndim() == 0 {
        return flit(a[IxDyn(&[])]);
    }
    let parts: Vec<String> = a.axis_iter(Axis(0)).map(|sub| nested(&sub.to_owned())).collect();
    format!("[{}]", parts.join(", "))
}

/// A dp expression for an input: `tensor [...]`, or a Float.
fn lit(a: &A, float: bool) -> String {
    if float {
        flit(a[IxDyn(&[])])
    } else {
        format!("(tensor {})", nested(a))
    }
}

fn scalar(x: f64) -> A {
    A::from_elem(IxDyn(&[]), x)
}

// ------------------------------------------------------------------ the reference in f64

fn bshape(a: &[usize], b: &[usize]) -> Vec<usize> {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| {
            let da = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
            let db = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
            assert!(da == db || da == 1 || db == 1, "test bug: shapes {a:?} and {b:?}");
            da.max(db)
        })
        .collect()
}

fn zip(a: &A, b: &A, f: impl Fn(f64, f64) -> f64) -> A {
    let s = bshape(a.shape(), b.shape());
    let (x, y) = (a.broadcast(IxDyn(&s)).unwrap(), b.broadcast(IxDyn(&s)).unwrap());
    ndarray::Zip::from(&x).and(&y).map_collect(|&p, &q| f(p, q))
}

fn matmul(a: &A, b: &A) -> A {
    let m2 = |x: &A| x.view().into_dimensionality::<Ix2>().unwrap().to_owned();
    let m1 = |x: &A| x.view().into_dimensionality::<Ix1>().unwrap().to_owned();
    match (a.ndim(), b.ndim()) {
        (2, 2) => m2(a).dot(&m2(b)).into_dyn(),
        (2, 1) => m2(a).dot(&m1(b)).into_dyn(),
        (1, 2) => m1(a).dot(&m2(b)).into_dyn(),
        (1, 1) => scalar(m1(a).dot(&m1(b))),
        _ => panic!("test bug: matmul ranks"),
    }
}

fn last_axis_map(a: &A, f: impl Fn(&[f64]) -> Vec<f64>) -> A {
    let ax = Axis(a.ndim() - 1);
    let mut out = a.clone();
    for mut lane in out.lanes_mut(ax) {
        let v: Vec<f64> = lane.iter().copied().collect();
        for (o, n) in lane.iter_mut().zip(f(&v)) {
            *o = n;
        }
    }
    out
}

fn lse(v: &[f64]) -> f64 {
    let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    m + v.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
}

fn softmax(a: &A) -> A {
    last_axis_map(a, |v| {
        let l = lse(v);
        v.iter().map(|x| (x - l).exp()).collect()
    })
}

fn log_softmax(a: &A) -> A {
    last_axis_map(a, |v| {
        let l = lse(v);
        v.iter().map(|x| x - l).collect()
    })
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn reshape(a: &A, shape: &[usize]) -> A {
    a.as_standard_layout().to_owned().into_shape_with_order(IxDyn(shape)).unwrap()
}

fn concat(axis: usize, xs: &[A]) -> A {
    let views: Vec<_> = xs.iter().map(|x| x.view()).collect();
    ndarray::concatenate(Axis(axis), &views).unwrap()
}

/// Valid, stride-1 convolution: x [N, C, H, W], w [O, C, KH, KW] -> [N, O, H-KH+1, W-KW+1].
fn conv2d(x: &A, w: &A) -> A {
    conv2d_with(1, 0, x, w)
}

/// Convolution with a stride and zero padding (PyTorch's conv2d), by its definition.
pub(crate) fn conv2d_with(s: usize, p: usize, x: &A, w: &A) -> A {
    let (xs, ws) = (x.shape(), w.shape());
    let (n, c, h, wd, o, kh, kw) = (xs[0], xs[1], xs[2], xs[3], ws[0], ws[2], ws[3]);
    let (oh, ow) = ((h + 2 * p - kh) / s + 1, (wd + 2 * p - kw) / s + 1);
    let mut out = A::zeros(IxDyn(&[n, o, oh, ow]));
    for b in 0..n {
        for f in 0..o {
            for y in 0..oh {
                for z in 0..ow {
                    let mut acc = 0.0;
                    for ch in 0..c {
                        for i in 0..kh {
                            for j in 0..kw {
                                let (r, q) = ((y * s + i) as isize - p as isize, (z * s + j) as isize - p as isize);
                                if r >= 0 && q >= 0 && (r as usize) < h && (q as usize) < wd {
                                    acc += x[[b, ch, r as usize, q as usize]] * w[[f, ch, i, j]];
                                }
                            }
                        }
                    }
                    out[[b, f, y, z]] = acc;
                }
            }
        }
    }
    out
}

/// k x k max pooling with stride k over [N, C, H, W] (a partial last window is dropped).
fn max_pool2d(k: usize, x: &A) -> A {
    let s = x.shape();
    let (oh, ow) = (s[2] / k, s[3] / k);
    let mut out = A::zeros(IxDyn(&[s[0], s[1], oh, ow]));
    for b in 0..s[0] {
        for c in 0..s[1] {
            for y in 0..oh {
                for z in 0..ow {
                    let mut m = f64::NEG_INFINITY;
                    for i in 0..k {
                        for j in 0..k {
                            m = m.max(x[[b, c, y * k + i, z * k + j]]);
                        }
                    }
                    out[[b, c, y, z]] = m;
                }
            }
        }
    }
    out
}

// ------------------------------------------------------------------ cases

type Forward = Box<dyn Fn(&[A]) -> A>;

pub(crate) struct Case {
    name: String,
    /// A dp expression; `$0`, `$1`, … are the inputs.
    body: String,
    inputs: Vec<A>,
    /// Which inputs are Floats (the others are Tensors).
    floats: Vec<bool>,
    /// Whether the body is a Float (else a Tensor).
    out_float: bool,
    f: Forward,
    pub(crate) second_order: bool,
    /// Inputs, tangents and weights as float64 tensors (checked to a tighter tolerance).
    float64: bool,
}

pub(crate) fn case(
    name: &str,
    body: &str,
    out_float: bool,
    inputs: Vec<(A, bool)>,
    f: impl Fn(&[A]) -> A + 'static,
) -> Case {
    let (inputs, floats) = inputs.into_iter().unzip();
    Case {
        name: name.into(),
        body: body.into(),
        inputs,
        floats,
        out_float,
        f: Box::new(f),
        second_order: false,
        float64: false,
    }
}

pub(crate) fn t(a: A) -> (A, bool) {
    (a, false)
}
fn fl(x: f64) -> (A, bool) {
    (scalar(x), true)
}

const H: f64 = 1e-3;
const TOL: f64 = 1e-3;

impl Case {
    /// The same case computed in float64 by dp, held to 1e-5 (central differences of a smooth
    /// function with step 1e-3 are that close; float32 rounding is not in the way).
    pub(crate) fn in_float64(mut self) -> Case {
        self.float64 = true;
        self.name += " (float64)";
        self
    }
    fn lit(&self, a: &A, float: bool) -> String {
        if self.float64 && !float {
            format!("(astype \"float64\" {})", lit(a, false))
        } else {
            lit(a, float)
        }
    }
    fn n(&self) -> usize {
        self.inputs.len()
    }
    fn subst(&self, names: &[String]) -> String {
        let mut b = self.body.clone();
        for (i, n) in names.iter().enumerate() {
            b = b.replace(&format!("${i}"), n);
        }
        b
    }
    fn names(&self, p: &str) -> Vec<String> {
        (0..self.n()).map(|i| format!("{p}{i}")).collect()
    }
    fn ty(&self, i: usize) -> &'static str {
        if self.floats[i] {
            "Float"
        } else {
            "Tensor"
        }
    }
    /// `(x0 : Tensor)` or `((x0 : Tensor), (x1 : Float))`.
    fn pat(&self, p: &str) -> String {
        let ps: Vec<String> = (0..self.n()).map(|i| format!("({p}{i} : {})", self.ty(i))).collect();
        tuple(&ps)
    }
    /// Names as an expression or a pattern: `x0` or `(x0, x1)`.
    fn tup(&self, p: &str) -> String {
        tuple(&self.names(p))
    }
    /// How to print a value of the inputs' type bound to names `p0, p1…`: tensors with shapes.
    fn show(&self, p: &str) -> String {
        let ps: Vec<String> = (0..self.n())
            .map(|i| if self.floats[i] { format!("{p}{i}") } else { format!("(shape {p}{i}, to_list {p}{i})") })
            .collect();
        tuple(&ps)
    }
    /// The scalar objective over inputs named `p0, p1…`.
    fn objective(&self, p: &str, k: usize) -> String {
        let b = self.subst(&self.names(p));
        if self.out_float {
            b
        } else {
            format!("sum (({b}) * c{k}_r)")
        }
    }
    fn defs(&self, k: usize, r: &A, v: &[A]) -> String {
        let mut s = String::new();
        for (i, (x, vi)) in self.inputs.iter().zip(v).enumerate().take(self.n()) {
            s += &format!("let c{k}_x{i} = {}\n", self.lit(x, self.floats[i]));
            s += &format!("let c{k}_v{i} = {}\n", self.lit(vi, self.floats[i]));
        }
        if !self.out_float {
            s += &format!("let c{k}_r = {}\n", self.lit(r, false));
        }
        s
    }

    // --- reference
    fn loss(&self, xs: &[A], r: &A) -> f64 {
        let y = (self.f)(xs);
        if self.out_float {
            y.iter().sum()
        } else {
            assert_eq!(y.shape(), r.shape());
            (&y * r).sum()
        }
    }
    fn fd_grad(&self, xs: &[A], r: &A) -> Vec<Vec<f64>> {
        self.fd_grad_of(xs, &|xs| self.loss(xs, r))
    }
    fn fd_grad_of(&self, xs: &[A], l: &dyn Fn(&[A]) -> f64) -> Vec<Vec<f64>> {
        (0..self.n())
            .map(|i| {
                (0..xs[i].len())
                    .map(|j| {
                        let mut p = xs.to_vec();
                        let mut q = xs.to_vec();
                        *p[i].iter_mut().nth(j).unwrap() += H;
                        *q[i].iter_mut().nth(j).unwrap() -= H;
                        (l(&p) - l(&q)) / (2.0 * H)
                    })
                    .collect()
            })
            .collect()
    }
    fn shift(xs: &[A], v: &[A], h: f64) -> Vec<A> {
        xs.iter().zip(v).map(|(x, d)| x + &(d * h)).collect()
    }
    fn fd_dir(&self, xs: &[A], v: &[A]) -> Vec<f64> {
        let (p, q) = ((self.f)(&Self::shift(xs, v, H)), (self.f)(&Self::shift(xs, v, -H)));
        p.iter().zip(q.iter()).map(|(a, b)| (a - b) / (2.0 * H)).collect()
    }
    /// With shapes, as `show` prints them.
    fn with_shapes(&self, gs: &[Vec<f64>]) -> Vec<f64> {
        let mut out = Vec::new();
        for (i, g) in gs.iter().enumerate() {
            if !self.floats[i] {
                out.extend(self.inputs[i].shape().iter().map(|&d| d as f64));
            }
            out.extend(g);
        }
        out
    }
    fn hvp(&self, r: &A, v: &[A]) -> Vec<Vec<f64>> {
        let dir = |xs: &[A]| (self.loss(&Self::shift(xs, v, H), r) - self.loss(&Self::shift(xs, v, -H), r)) / (2.0 * H);
        self.fd_grad_of(&self.inputs, &dir)
    }
}

fn tuple(xs: &[String]) -> String {
    if xs.len() == 1 {
        xs[0].clone()
    } else {
        format!("({})", xs.join(", "))
    }
}

/// One line of dp output and what it should be.
struct Snippet {
    case: usize,
    what: String,
    code: String,
    want: Vec<f64>,
}

fn snippets(k: usize, c: &Case, r: &A, v: &[A]) -> Vec<Snippet> {
    let args = tuple(&c.names(&format!("c{k}_x")));
    let dirs = tuple(&c.names(&format!("c{k}_v")));
    let mut out = Vec::new();
    // grad, with the gradient's shapes
    let fd = c.fd_grad(&c.inputs, r);
    let want = c.with_shapes(&fd);
    let code = format!(
        "let () =\n  let {} = grad (fun {} -> {}) {args} in\n  println {}\n",
        c.tup("g"),
        c.pat("x"),
        c.objective("x", k),
        c.show("g")
    );
    out.push(Snippet { case: k, what: "grad".into(), code, want });
    // jvp: primal and tangent
    let mut want: Vec<f64> = (c.f)(&c.inputs).iter().copied().collect();
    want.extend(c.fd_dir(&c.inputs, v));
    let pr = |n: &str| if c.out_float { n.to_string() } else { format!("to_list {n}") };
    let code = format!(
        "let () =\n  let (y, t) = jvp (fun {} -> {}) {args} {dirs} in\n  println ({}, {})\n",
        c.pat("x"),
        c.subst(&c.names("x")),
        pr("y"),
        pr("t")
    );
    out.push(Snippet { case: k, what: "jvp".into(), code, want });
    // With more than one input: each input alone, the others constants (a constant operand
    // must not change the shape or type of a tangent or an adjoint).
    if c.n() > 1 {
        for i in 0..c.n() {
            let mut names = c.names(&format!("c{k}_x"));
            names[i] = format!("x{i}");
            let body = c.subst(&names);
            let mut want = Vec::new();
            if !c.floats[i] {
                want.extend(c.inputs[i].shape().iter().map(|&d| d as f64));
            }
            want.extend(&fd[i]);
            let obj = if c.out_float { body.clone() } else { format!("sum (({body}) * c{k}_r)") };
            let pat = format!("(x{i} : {})", c.ty(i));
            let shown = if c.floats[i] { "g".to_string() } else { "(shape g, to_list g)".to_string() };
            let code = format!("let () =\n  let g = grad (fun {pat} -> {obj}) c{k}_x{i} in\n  println {shown}\n");
            out.push(Snippet { case: k, what: format!("grad wrt ${i} alone"), code, want });
            let mut want: Vec<f64> = (c.f)(&c.inputs).iter().copied().collect();
            let dirs: Vec<A> = (0..c.n()).map(|j| if j == i { v[j].clone() } else { v[j].mapv(|_| 0.0) }).collect();
            want.extend(c.fd_dir(&c.inputs, &dirs));
            let code = format!(
                "let () =\n  let (y, t) = jvp (fun {pat} -> {body}) c{k}_x{i} c{k}_v{i} in\n  println ({}, {})\n",
                pr("y"),
                pr("t")
            );
            out.push(Snippet { case: k, what: format!("jvp wrt ${i} alone"), code, want });
        }
    }
    if c.second_order {
        let want = c.with_shapes(&c.hvp(r, v));
        let dot: Vec<String> = (0..c.n())
            .map(|i| if c.floats[i] { format!("h{i} * c{k}_v{i}") } else { format!("sum (h{i} * c{k}_v{i})") })
            .collect();
        let inner = format!("(fun {} -> {})", c.pat("z"), c.objective("z", k));
        let code = format!(
            "let () =\n  let {} = grad (fun {} -> let {} = grad {inner} {} in {}) {args} in\n  println {}\n",
            c.tup("g"),
            c.pat("x"),
            c.tup("h"),
            c.tup("x"),
            dot.join(" + "),
            c.show("g")
        );
        out.push(Snippet { case: k, what: "grad of grad".into(), code, want: want.clone() });
        let code = format!(
            "let () =\n  let (_, {}) = jvp (grad {inner}) {args} {dirs} in\n  println {}\n",
            c.tup("g"),
            c.show("g")
        );
        out.push(Snippet { case: k, what: "jvp of grad".into(), code, want: want.clone() });
        let code = format!(
            "let () =\n  let {} = grad (fun {} -> let (_, tt) = jvp {inner} {} {dirs} in tt) {args} in\n  println {}\n",
            c.tup("g"),
            c.pat("x"),
            c.tup("x"),
            c.show("g")
        );
        out.push(Snippet { case: k, what: "grad of jvp".into(), code, want });
    }
    out
}

/// Runs `snips` (one output line each) as one program; on failure, finds the failing ones.
/// Returns each snippet's output line or dp's error.
fn run_snippets(defs: &[String], snips: &[Snippet]) -> Vec<Result<String, String>> {
    let program = |range: &[Snippet]| {
        let mut cases: Vec<usize> = range.iter().map(|s| s.case).collect();
        cases.dedup();
        let mut src = String::new();
        for &c in &cases {
            src += &defs[c];
        }
        for s in range {
            src += &s.code;
        }
        src
    };
    let mut results = Vec::new();
    let mut rest = snips;
    while !rest.is_empty() {
        let src = program(rest);
        let r = run_dp(&src);
        let lines: Vec<String> = r.stdout.lines().map(String::from).collect();
        if r.ok && lines.len() == rest.len() && !r.stderr.contains("panicked") {
            results.extend(lines.into_iter().map(Ok));
            break;
        }
        // Lines before the failure are good; the next snippet is the suspect.
        let k = lines.len().min(rest.len() - 1);
        results.extend(lines.into_iter().take(k).map(Ok));
        let alone = run_dp(&program(&rest[k..k + 1]));
        if alone.ok && !alone.stderr.contains("panicked") {
            // It was not this one (a type error elsewhere, say): run the others one by one.
            results.push(Ok(alone.stdout.lines().next().unwrap_or("").to_string()));
            for s in &rest[k + 1..] {
                let one = run_dp(&program(std::slice::from_ref(s)));
                results.push(if one.ok && !one.stderr.contains("panicked") {
                    Ok(one.stdout.lines().next().unwrap_or("").to_string())
                } else {
                    Err(one.stderr)
                });
            }
            break;
        }
        results.push(Err(alone.stderr));
        rest = &rest[k + 1..];
    }
    results
}

/// Checks every case in one dp process; panics listing every failure.
pub(crate) fn check_cases(seed: u64, mut cases: Vec<Case>) {
    let mut rng = Rng::new(seed);
    let mut defs = Vec::new();
    let mut snips = Vec::new();
    for (k, c) in cases.iter_mut().enumerate() {
        let y = (c.f)(&c.inputs);
        let r = rng.arr(y.shape(), -1.0, 1.0);
        let v: Vec<A> = c.inputs.iter().map(|x| rng.arr(x.shape(), -1.0, 1.0)).collect();
        defs.push(c.defs(k, &r, &v));
        snips.extend(snippets(k, c, &r, &v));
    }
    let results = run_snippets(&defs, &snips);
    eprintln!("{} cases, {} derivative checks", cases.len(), snips.len());
    let mut failures = Vec::new();
    for (s, res) in snips.iter().zip(&results) {
        let name = &cases[s.case].name;
        match res {
            Ok(line) => {
                let got = numbers(line);
                let tol = if cases[s.case].float64 { 1e-5 } else { TOL };
                if !all_close(&got, &s.want, tol) {
                    failures.push(format!(
                        "{name} [{}]: `{}`\n    got  {}\n    want {}",
                        s.what,
                        cases[s.case].body,
                        fmt_list(&got),
                        fmt_list(&s.want)
                    ));
                }
            }
            Err(e) => failures.push(format!(
                "{name} [{}]: `{}`: dp failed:\n    {}",
                s.what,
                cases[s.case].body,
                e.trim().lines().take(3).collect::<Vec<_>>().join("\n    ")
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} tensor derivative checks failed:\n\n{}",
        failures.len(),
        snips.len(),
        failures.join("\n\n")
    );
}

// ------------------------------------------------------------------ first-order checks

#[derive(Clone, Copy)]
enum Bin {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
}

impl Bin {
    fn sym(self) -> &'static str {
        match self {
            Bin::Add => "+",
            Bin::Sub => "-",
            Bin::Mul => "*",
            Bin::Div => "/",
            Bin::Pow => "**",
        }
    }
    fn eval(self, a: f64, b: f64) -> f64 {
        match self {
            Bin::Add => a + b,
            Bin::Sub => a - b,
            Bin::Mul => a * b,
            Bin::Div => a / b,
            Bin::Pow => a.powf(b),
        }
    }
}

/// An operand's shape; `None` is a Float.
type Operand = Option<&'static [usize]>;

/// Operand shapes covering broadcasting in both directions.
const BROADCASTS: &[(Operand, Operand)] = &[
    (Some(&[2, 3]), Some(&[2, 3])),
    (Some(&[3, 1]), Some(&[1, 4])),
    (Some(&[2, 3]), Some(&[3])),
    (Some(&[3]), Some(&[2, 3])),
    (Some(&[2, 1, 3]), Some(&[4, 1])),
    (Some(&[1]), Some(&[2, 2])),
    (Some(&[2, 3]), None),
    (None, Some(&[2, 3])),
    (Some(&[4]), Some(&[4])),
];

fn operand(rng: &mut Rng, op: Bin, shape: Option<&[usize]>, left: bool) -> (A, bool) {
    let s = shape.unwrap_or(&[]);
    let a = match (op, left) {
        (Bin::Div, false) => rng.away(s, 0.5, 1.5),
        (Bin::Pow, true) => rng.arr(s, 0.5, 2.0),
        (Bin::Pow, false) => rng.arr(s, -1.5, 2.5),
        _ => rng.arr(s, -2.0, 2.0),
    };
    (a, shape.is_none())
}

fn binary_cases(rng: &mut Rng, ops: &[Bin]) -> Vec<Case> {
    let mut cases = Vec::new();
    for &op in ops {
        for &(sa, sb) in BROADCASTS {
            let (a, b) = (operand(rng, op, sa, true), operand(rng, op, sb, false));
            let show = |s: Option<&[usize]>| s.map_or("Float".to_string(), |s| format!("{s:?}"));
            let name = format!("{} {} {}", show(sa), op.sym(), show(sb));
            cases.push(case(&name, &format!("$0 {} $1", op.sym()), false, vec![a, b], move |x| {
                zip(&x[0], &x[1], |p, q| op.eval(p, q))
            }));
        }
    }
    cases
}

#[test]
fn grad_jvp_add_sub_mul() {
    let mut rng = Rng::new(1);
    check_cases(101, binary_cases(&mut rng, &[Bin::Add, Bin::Sub, Bin::Mul]));
}

#[test]
fn grad_jvp_div_pow() {
    let mut rng = Rng::new(2);
    let mut cases = binary_cases(&mut rng, &[Bin::Div, Bin::Pow]);
    // Float bases and exponents with tensors, and a constant exponent.
    cases.push(case("t ** 2.5", "$0 ** 2.5", false, vec![t(rng.arr(&[2, 3], 0.5, 2.0))], |x| {
        x[0].mapv(|v| v.powf(2.5))
    }));
    cases.push(case("2.0 ** t", "2.0 ** $0", false, vec![t(rng.arr(&[2, 3], -1.0, 1.0))], |x| {
        x[0].mapv(|v| 2f64.powf(v))
    }));
    cases.push(case("1.0 / t", "1.0 / $0", false, vec![t(rng.away(&[3], 0.5, 1.5))], |x| x[0].mapv(|v| 1.0 / v)));
    check_cases(102, cases);
}

type UnF = fn(f64) -> f64;

#[test]
fn grad_jvp_unary() {
    let mut rng = Rng::new(3);
    let s: &[usize] = &[2, 3];
    let un: Vec<(&str, &str, A, UnF)> = vec![
        ("negation", "-$0", rng.arr(s, -2.0, 2.0), |x| -x),
        ("sin", "sin $0", rng.arr(s, -2.0, 2.0), f64::sin),
        ("cos", "cos $0", rng.arr(s, -2.0, 2.0), f64::cos),
        ("tan", "tan $0", rng.arr(s, -1.0, 1.0), f64::tan),
        ("exp", "exp $0", rng.arr(s, -2.0, 2.0), f64::exp),
        ("log", "log $0", rng.arr(s, 0.3, 3.0), f64::ln),
        ("sqrt", "sqrt $0", rng.arr(s, 0.3, 3.0), f64::sqrt),
        ("tanh", "tanh $0", rng.arr(s, -2.0, 2.0), f64::tanh),
        ("sigmoid", "sigmoid $0", rng.arr(s, -3.0, 3.0), sigmoid),
        ("relu", "relu $0", rng.away(s, 0.1, 2.0), |x| x.max(0.0)),
        ("abs", "abs $0", rng.away(s, 0.1, 2.0), f64::abs),
        ("negation of a vector", "-$0", rng.arr(&[5], -2.0, 2.0), |x| -x),
        ("relu of a vector", "relu $0", rng.away(&[5], 0.1, 2.0), |x| x.max(0.0)),
        ("abs of a 3-d tensor", "abs $0", rng.away(&[2, 2, 2], 0.1, 2.0), f64::abs),
    ];
    let cases =
        un.into_iter().map(|(name, body, x, f)| case(name, body, false, vec![t(x)], move |xs| xs[0].mapv(f))).collect();
    check_cases(103, cases);
}

#[test]
fn grad_jvp_matmul() {
    let mut rng = Rng::new(4);
    fn m(rng: &mut Rng, sa: &[usize], sb: &[usize]) -> Vec<(A, bool)> {
        vec![t(rng.arr(sa, -1.5, 1.5)), t(rng.arr(sb, -1.5, 1.5))]
    }
    let mm = |x: &[A]| matmul(&x[0], &x[1]);
    let mut cases = vec![
        case("matrix @ matrix", "$0 @ $1", false, m(&mut rng, &[2, 3], &[3, 4]), mm),
        case("matrix @ vector", "$0 @ $1", false, m(&mut rng, &[2, 3], &[3]), mm),
        case("vector @ matrix", "$0 @ $1", false, m(&mut rng, &[3], &[3, 4]), mm),
        case("vector @ vector", "$0 @ $1", false, m(&mut rng, &[4], &[4]), mm),
        case("square matrix @ itself", "$0 @ $0", false, m(&mut rng, &[3, 3], &[1])[..1].to_vec(), |x| {
            matmul(&x[0], &x[0])
        }),
        case("transpose a @ b", "transpose $0 @ $1", false, m(&mut rng, &[3, 2], &[3, 4]), |x| {
            matmul(&x[0].t().to_owned(), &x[1])
        }),
        case(
            "(a @ b) @ c",
            "($0 @ $1) @ $2",
            false,
            {
                let mut v = m(&mut rng, &[2, 3], &[3, 4]);
                v.push(t(rng.arr(&[4], -1.0, 1.0)));
                v
            },
            |x| matmul(&matmul(&x[0], &x[1]), &x[2]),
        ),
        case(
            "(m @ v) * s",
            "($0 @ $1) * $2",
            false,
            {
                let mut v = m(&mut rng, &[2, 3], &[3]);
                v.push(fl(0.75));
                v
            },
            |x| &matmul(&x[0], &x[1]) * x[2][IxDyn(&[])],
        ),
    ];
    // One weight in several matrix-vector products: its outer products are summed as one
    // product at the end of the backward pass (or when the weight's own adjoint is read, for
    // an intermediate), alongside contributions from other uses.
    let (w, v) = (rng.arr(&[3, 3], -1.0, 1.0), rng.arr(&[3], -1.0, 1.0));
    cases.push(case("w @ tanh (w @ v)", "$0 @ tanh ($0 @ $1)", false, vec![t(w.clone()), t(v.clone())], |x| {
        matmul(&x[0], &matmul(&x[0], &x[1]).mapv(f64::tanh))
    }));
    let u = rng.arr(&[3], -1.0, 1.0);
    cases.push(case("u @ w + w @ v", "$1 @ $0 + $0 @ $2", false, vec![t(w.clone()), t(u), t(v.clone())], |x| {
        &matmul(&x[1], &x[0]) + &matmul(&x[0], &x[2])
    }));
    cases.push(case(
        "w @ v + sum_axis (w * w) 1",
        "$0 @ $1 + sum_axis ($0 * $0) 1",
        false,
        vec![t(rng.arr(&[2, 3], -1.0, 1.0)), t(v.clone())],
        |x| &matmul(&x[0], &x[1]) + &x[0].mapv(|p| p * p).sum_axis(ndarray::Axis(1)),
    ));
    cases.push(case(
        "an intermediate weight",
        "(let w2 = $0 * 2.0 in w2 @ tanh (w2 @ $1))",
        false,
        vec![t(w), t(v)],
        |x| {
            let w2 = x[0].mapv(|p| 2.0 * p);
            matmul(&w2, &matmul(&w2, &x[1]).mapv(f64::tanh))
        },
    ));
    // a two-layer network: a composite of many primitives
    cases.push(case(
        "mlp",
        "log_softmax (tanh ($0 @ $1 + $2) @ $3)",
        false,
        vec![
            t(rng.arr(&[3, 4], -1.0, 1.0)),
            t(rng.arr(&[4, 5], -1.0, 1.0)),
            t(rng.arr(&[5], -0.5, 0.5)),
            t(rng.arr(&[5, 2], -1.0, 1.0)),
        ],
        |x| log_softmax(&matmul(&zip(&matmul(&x[0], &x[1]), &x[2], |p, q| p + q).mapv(f64::tanh), &x[3])),
    ));
    check_cases(104, cases);
}

#[test]
fn grad_jvp_reductions() {
    let mut rng = Rng::new(5);
    let mut cases = Vec::new();
    for s in [&[2, 3][..], &[5], &[2, 2, 3]] {
        let x = rng.arr(s, -2.0, 2.0);
        cases.push(case(&format!("sum {s:?}"), "sum $0", true, vec![t(x.clone())], |x| scalar(x[0].sum())));
        cases.push(case(&format!("mean {s:?}"), "mean $0", true, vec![t(x)], |x| scalar(x[0].mean().unwrap())));
        cases.push(case(&format!("max {s:?}"), "max $0", true, vec![t(rng.distinct(s))], |x| {
            scalar(x[0].iter().copied().fold(f64::NEG_INFINITY, f64::max))
        }));
    }
    for (s, axis) in [(&[2, 3][..], 0usize), (&[2, 3], 1), (&[2, 3, 2], 1), (&[2, 3, 2], 2), (&[4], 0)] {
        let x = rng.arr(s, -2.0, 2.0);
        cases.push(case(
            &format!("sum_axis {s:?} {axis}"),
            &format!("sum_axis $0 {axis}"),
            false,
            vec![t(x.clone())],
            move |x| x[0].sum_axis(Axis(axis)),
        ));
        cases.push(case(
            &format!("mean_axis {s:?} {axis}"),
            &format!("mean_axis $0 {axis}"),
            false,
            vec![t(x)],
            move |x| x[0].mean_axis(Axis(axis)).unwrap(),
        ));
    }
    // a reduction feeding more arithmetic: the adjoint of the reduction is itself broadcast
    cases.push(case("x - mean_axis x 0", "$0 - mean_axis $0 0", false, vec![t(rng.arr(&[3, 2], -2.0, 2.0))], |x| {
        zip(&x[0], &x[0].mean_axis(Axis(0)).unwrap(), |p, q| p - q)
    }));
    cases.push(case("sum x * x", "sum ($0 * $0) * mean $0", true, vec![t(rng.arr(&[3], -2.0, 2.0))], |x| {
        scalar((&x[0] * &x[0]).sum() * x[0].mean().unwrap())
    }));
    for s in [&[1][..], &[1, 1], &[]] {
        cases.push(case(&format!("item {s:?}"), "item $0 * item $0", true, vec![t(rng.arr(s, -2.0, 2.0))], |x| {
            let v = x[0].iter().next().copied().unwrap();
            scalar(v * v)
        }));
    }
    check_cases(105, cases);
}

#[test]
fn grad_jvp_shape_ops() {
    let mut rng = Rng::new(6);
    let mut cases = Vec::new();
    for (from, to) in
        [(&[2, 3][..], &[3, 2][..]), (&[2, 3], &[6]), (&[6], &[2, 1, 3]), (&[2, 2, 2], &[4, 2]), (&[1], &[])]
    {
        let to_v = to.to_vec();
        let body = format!("reshape $0 [{}]", to.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "));
        cases.push(case(
            &format!("reshape {from:?} to {to:?}"),
            &body,
            false,
            vec![t(rng.arr(from, -2.0, 2.0))],
            move |x| reshape(&x[0], &to_v),
        ));
    }
    for s in [&[2, 3][..], &[2, 3, 4], &[3]] {
        cases.push(case(&format!("transpose {s:?}"), "transpose $0", false, vec![t(rng.arr(s, -2.0, 2.0))], |x| {
            x[0].t().to_owned()
        }));
    }
    for (axis, shapes) in
        [(0usize, vec![&[2, 3][..], &[1, 3]]), (1, vec![&[2, 3], &[2, 2]]), (0, vec![&[2], &[3], &[1]])]
    {
        let names: Vec<String> = (0..shapes.len()).map(|i| format!("${i}")).collect();
        let inputs = shapes.iter().map(|s| t(rng.arr(s, -2.0, 2.0))).collect();
        cases.push(case(
            &format!("concat {axis} {shapes:?}"),
            &format!("concat {axis} [{}]", names.join(", ")),
            false,
            inputs,
            move |x| concat(axis, x),
        ));
    }
    cases.push(case(
        "concat of one tensor with itself",
        "concat 1 [$0, $0]",
        false,
        vec![t(rng.arr(&[2, 2], -2.0, 2.0))],
        |x| concat(1, &[x[0].clone(), x[0].clone()]),
    ));
    for (s, axis, lo, hi) in
        [(&[4, 3][..], 0usize, 1usize, 3usize), (&[4, 3], 1, 0, 2), (&[5], 0, 2, 5), (&[2, 3, 4], 2, 1, 2)]
    {
        cases.push(case(
            &format!("slice {s:?} {axis} {lo} {hi}"),
            &format!("slice $0 {axis} {lo} {hi}"),
            false,
            vec![t(rng.arr(s, -2.0, 2.0))],
            move |x| x[0].slice_axis(Axis(axis), Slice::from(lo..hi)).to_owned(),
        ));
    }
    for (s, i) in [(&[3, 4][..], 1usize), (&[3, 2, 2], 2), (&[4], 2)] {
        cases.push(case(
            &format!("row {s:?} {i}"),
            &format!("row $0 {i}"),
            false,
            vec![t(rng.arr(s, -2.0, 2.0))],
            move |x| x[0].index_axis(Axis(0), i).to_owned(),
        ));
    }
    cases.push(case("sum of two rows", "row $0 0 * row $0 2", false, vec![t(rng.arr(&[3, 2], -2.0, 2.0))], |x| {
        &x[0].index_axis(Axis(0), 0) * &x[0].index_axis(Axis(0), 2)
    }));
    check_cases(106, cases);
}

#[test]
fn grad_jvp_softmax_family() {
    let mut rng = Rng::new(7);
    let mut cases = Vec::new();
    for s in [&[5][..], &[2, 4], &[2, 2, 3]] {
        cases.push(case(&format!("softmax {s:?}"), "softmax $0", false, vec![t(rng.arr(s, -2.0, 2.0))], |x| {
            softmax(&x[0])
        }));
        cases.push(case(&format!("log_softmax {s:?}"), "log_softmax $0", false, vec![t(rng.arr(s, -2.0, 2.0))], |x| {
            log_softmax(&x[0])
        }));
        cases.push(case(&format!("logsumexp {s:?}"), "logsumexp $0", true, vec![t(rng.arr(s, -2.0, 2.0))], |x| {
            scalar(lse(&x[0].iter().copied().collect::<Vec<_>>()))
        }));
    }
    // large logits: the shifted forms must not overflow
    cases.push(case("softmax of large logits", "softmax ($0 * 60.0)", false, vec![t(rng.arr(&[4], -2.0, 2.0))], |x| {
        softmax(&x[0].mapv(|v| v * 60.0))
    }));
    cases.push(case(
        "logsumexp of large values",
        "logsumexp ($0 + 100.0)",
        true,
        vec![t(rng.arr(&[4], -2.0, 2.0))],
        |x| scalar(lse(&x[0].iter().map(|v| v + 100.0).collect::<Vec<_>>())),
    ));
    cases.push(case(
        "cross entropy",
        "0.0 - sum (log_softmax $0 * $1)",
        true,
        vec![t(rng.arr(&[2, 3], -2.0, 2.0)), t(rng.arr(&[2, 3], 0.0, 1.0))],
        |x| scalar(-(&log_softmax(&x[0]) * &x[1]).sum()),
    ));
    check_cases(107, cases);
}

#[test]
fn grad_jvp_conv2d_max_pool2d() {
    let mut rng = Rng::new(10);
    let mut cases = Vec::new();
    for (xs, ws) in
        [(&[2, 2, 4, 5][..], &[3, 2, 2, 3][..]), (&[1, 1, 3, 3], &[1, 1, 3, 3]), (&[1, 3, 3, 4], &[2, 3, 1, 1])]
    {
        cases.push(case(
            &format!("conv2d {xs:?} {ws:?}"),
            "conv2d $0 $1",
            false,
            vec![t(rng.arr(xs, -1.5, 1.5)), t(rng.arr(ws, -1.5, 1.5))],
            |x| conv2d(&x[0], &x[1]),
        ));
    }
    for (k, s) in
        [(2usize, &[1, 2, 4, 4][..]), (2, &[2, 1, 5, 4]), (3, &[1, 1, 3, 3]), (1, &[1, 1, 2, 3]), (2, &[1, 1, 2, 2])]
    {
        cases.push(case(
            &format!("max_pool2d {k} {s:?}"),
            &format!("max_pool2d {k} $0"),
            false,
            vec![t(rng.distinct(s))],
            move |x| max_pool2d(k, &x[0]),
        ));
    }
    cases.push(case(
        "a convolutional layer",
        "max_pool2d 2 (tanh (conv2d $0 $1 + $2))",
        false,
        vec![t(rng.distinct(&[1, 2, 5, 5])), t(rng.arr(&[2, 2, 2, 2], -1.0, 1.0)), fl(0.25)],
        |x| max_pool2d(2, &conv2d(&x[0], &x[1]).mapv(|v| (v + x[2][IxDyn(&[])]).tanh())),
    ));
    check_cases(110, cases);
}

// ------------------------------------------------------------------ second order

#[test]
fn second_order() {
    let mut rng = Rng::new(8);
    let mut cases = vec![
        case("tanh", "tanh $0", false, vec![t(rng.arr(&[2, 3], -1.5, 1.5))], |x| x[0].mapv(f64::tanh)),
        case("softmax", "softmax $0", false, vec![t(rng.arr(&[2, 4], -1.5, 1.5))], |x| softmax(&x[0])),
        case("matmul", "$0 @ $1", false, vec![t(rng.arr(&[2, 3], -1.5, 1.5)), t(rng.arr(&[3, 2], -1.5, 1.5))], |x| {
            matmul(&x[0], &x[1])
        }),
        case(
            "matrix @ vector",
            "tanh ($0 @ $1)",
            false,
            vec![t(rng.arr(&[2, 3], -1.0, 1.0)), t(rng.arr(&[3], -1.0, 1.0))],
            |x| matmul(&x[0], &x[1]).mapv(f64::tanh),
        ),
        case("log_softmax", "log_softmax $0", false, vec![t(rng.arr(&[5], -1.5, 1.5))], |x| log_softmax(&x[0])),
        case("logsumexp", "logsumexp $0", true, vec![t(rng.arr(&[2, 3], -1.5, 1.5))], |x| {
            scalar(lse(&x[0].iter().copied().collect::<Vec<_>>()))
        }),
        case("sigmoid", "sigmoid $0", false, vec![t(rng.arr(&[4], -2.0, 2.0))], |x| x[0].mapv(sigmoid)),
        case(
            "broadcast divide",
            "$0 / $1",
            false,
            vec![t(rng.arr(&[2, 3], -1.0, 1.0)), t(rng.away(&[3], 0.5, 1.5))],
            |x| zip(&x[0], &x[1], |p, q| p / q),
        ),
        case(
            "exp * sin with a Float",
            "exp $0 * sin $0 * $1",
            false,
            vec![t(rng.arr(&[3], -1.0, 1.0)), fl(1.25)],
            |x| x[0].mapv(|v| v.exp() * v.sin() * x[1][IxDyn(&[])]),
        ),
        case("power", "$0 ** 2.5", false, vec![t(rng.arr(&[3], 0.5, 2.0))], |x| x[0].mapv(|v| v.powf(2.5))),
        case("sum_axis of a square", "sum_axis ($0 * $0) 1", false, vec![t(rng.arr(&[2, 3], -1.0, 1.0))], |x| {
            (&x[0] * &x[0]).sum_axis(Axis(1))
        }),
        case(
            "mlp",
            "log_softmax (tanh ($0 @ $1) @ $2)",
            false,
            vec![t(rng.arr(&[2, 3], -1.0, 1.0)), t(rng.arr(&[3, 3], -1.0, 1.0)), t(rng.arr(&[3, 2], -1.0, 1.0))],
            |x| log_softmax(&matmul(&matmul(&x[0], &x[1]).mapv(f64::tanh), &x[2])),
        ),
    ];
    for c in &mut cases {
        c.second_order = true;
    }
    check_cases(108, cases);
}

/// conv2d is documented as "differentiable once": a second derivative through it must be
/// right or refused with an error, never silently zero.
#[test]
fn second_order_through_conv2d() {
    let mut rng = Rng::new(11);
    let mut cases = vec![
        case(
            "conv2d",
            "conv2d $0 $1",
            false,
            vec![t(rng.arr(&[1, 1, 3, 3], -1.0, 1.0)), t(rng.arr(&[1, 1, 2, 2], -1.0, 1.0))],
            |x| conv2d(&x[0], &x[1]),
        ),
        case(
            "conv2d squared",
            "conv2d $0 $1 * conv2d $0 $1",
            false,
            vec![t(rng.arr(&[1, 2, 3, 3], -1.0, 1.0)), t(rng.arr(&[2, 2, 2, 2], -1.0, 1.0))],
            |x| {
                let y = conv2d(&x[0], &x[1]);
                &y * &y
            },
        ),
    ];
    for c in &mut cases {
        c.second_order = true;
    }
    check_cases(111, cases);
}

// ------------------------------------------------------------------ broadcasting

fn expect_lines(src: &str, want: &[&str]) {
    let got = run_ok(src);
    assert_eq!(got, want, "program:\n{src}");
}

#[test]
fn slices_of_one_tensor_add_their_adjoints_into_one_buffer() {
    // Overlapping slices along both axes: the later adjoints are added into the buffer the
    // first one made, in place; the primal (printed after) must stay untouched.
    let body = |dtype: &str| {
        format!(
            r#"
let x = astype "{dtype}" (tensor [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
let f x = sum (slice x 1 0 2 * 2.0) + sum (slice x 1 1 3 * 3.0) + sum (slice x 0 1 2 ** 2.0)
println (to_list (grad f x))
println (to_list x)
let (v, g) = value_and_grad (fun x -> f x + sum (slice x 0 0 1)) x
println (v, to_list g)
"#
        )
    };
    for dtype in ["float32", "float64"] {
        expect_lines(
            &body(dtype),
            &[
                "[2.0, 5.0, 3.0, 10.0, 15.0, 15.0]",
                "[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]",
                "(155.0, [3.0, 6.0, 4.0, 10.0, 15.0, 15.0])",
            ],
        );
    }
}

#[test]
fn broadcasting_shapes() {
    expect_lines(
        r#"
let col = tensor [[1.0], [2.0], [3.0]]
let rw = tensor [[10.0, 20.0, 30.0, 40.0]]
let m = tensor [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
let v = tensor [100.0, 200.0, 300.0]
println (shape (col + rw), to_list (col + rw))
println (shape (rw - col), shape (m * v), shape (v * m), to_list (m + v), to_list (v - m))
println (to_list (2.0 * m), to_list (m / 2.0), to_list (1.0 - v), to_list (v ** 0.0))
println (shape (zeros [2, 1, 3] + zeros [4, 1]), shape (tensor 5.0 + m), shape (tensor [5.0] * m))
// gradients come back at the shape of each argument
let (gc, gr) = grad (fun (a, b) -> sum (a * b)) (col, rw)
println (shape gc, to_list gc, shape gr, to_list gr)
let (gm, gv) = grad (fun (a, b) -> sum (a + b)) (m, v)
println (shape gm, shape gv, to_list gv)
let (gv2, gm2) = grad (fun (a, b) -> sum (a * b)) (v, m)
println (shape gv2, to_list gv2, shape gm2)
let (gs, gt) = grad (fun ((s : Float), (x : Tensor)) -> sum (s * x)) (3.0, m)
println (gs, shape gt)
println (grad (fun (s : Float) -> sum (m / s)) 2.0, grad (fun (s : Float) -> sum (s - m)) 1.0)
let g3 = grad (fun x -> sum (x * zeros [4, 1] + x)) (ones [2, 1, 3])
println (shape g3, to_list g3)
"#,
        &[
            "([3, 4], [11.0, 21.0, 31.0, 41.0, 12.0, 22.0, 32.0, 42.0, 13.0, 23.0, 33.0, 43.0])",
            "([3, 4], [2, 3], [2, 3], [101.0, 202.0, 303.0, 104.0, 205.0, 306.0], [99.0, 198.0, 297.0, 96.0, 195.0, 294.0])",
            "([2.0, 4.0, 6.0, 8.0, 10.0, 12.0], [0.5, 1.0, 1.5, 2.0, 2.5, 3.0], [-99.0, -199.0, -299.0], [1.0, 1.0, 1.0])",
            "([2, 4, 3], [2, 3], [2, 3])",
            "([3, 1], [100.0, 100.0, 100.0], [1, 4], [6.0, 6.0, 6.0, 6.0])",
            "([2, 3], [3], [2.0, 2.0, 2.0])",
            "([3], [5.0, 7.0, 9.0], [2, 3])",
            "(21.0, [2, 3])",
            "(-5.25, 6.0)",
            "([2, 1, 3], [4.0, 4.0, 4.0, 4.0, 4.0, 4.0])",
        ],
    );
}

/// The gradient with respect to a 0-d tensor (or a [1] tensor) broadcast against a matrix is
/// a tensor of the argument's own shape, not a Float: `grad : (a -> Float) -> a -> a`.
#[test]
fn broadcasting_gradient_of_scalar_tensors() {
    expect_lines(
        r#"
let m = tensor [[1.0, 2.0], [3.0, 4.0]]
let g0 = grad (fun (s : Tensor) -> sum (m * s)) (tensor 2.0)
println (shape g0, to_list g0)
let g1 = grad (fun (s : Tensor) -> sum (m * s)) (tensor [2.0])
println (shape g1, to_list g1)
let g2 = grad (fun (s : Tensor) -> sum (s * s)) (tensor 3.0)
println (shape g2, to_list g2)
"#,
        &["([], [10.0])", "([1], [10.0])", "([], [6.0])"],
    );
}

/// 0-d tensors broadcast against matrices, on either side, for every elementwise operation.
#[test]
fn grad_jvp_zero_dimensional_operands() {
    let mut rng = Rng::new(12);
    let mut cases = Vec::new();
    // (`**` has its own bug with tensor bases; see grad_jvp_div_pow.)
    for op in [Bin::Add, Bin::Sub, Bin::Mul, Bin::Div] {
        for (sa, sb) in [(&[][..], &[2, 3][..]), (&[2, 3], &[])] {
            let (a, b) = (operand(&mut rng, op, Some(sa), true), operand(&mut rng, op, Some(sb), false));
            cases.push(case(
                &format!("{sa:?} {} {sb:?}", op.sym()),
                &format!("$0 {} $1", op.sym()),
                false,
                vec![a, b],
                move |x| zip(&x[0], &x[1], |p, q| op.eval(p, q)),
            ));
        }
    }
    check_cases(112, cases);
}

// ------------------------------------------------------------------ .npy

/// A `.npy` file as NumPy writes it (format 1.0), built here byte by byte.
fn npy_bytes(descr: &str, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let shape_txt = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!("({})", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_txt}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

/// The test venv's Python, when it has NumPy (`.ci/run` requires it).
fn numpy() -> Option<std::path::PathBuf> {
    crate::python::python_with(&["numpy"], "the .npy checks against NumPy")
}

fn dp_str(p: &std::path::Path) -> String {
    format!("{:?}", p.to_string_lossy())
}

#[test]
fn npy_round_trips() {
    let dir = temp_path("npy-dir");
    std::fs::create_dir_all(&dir).unwrap();
    let shapes: &[&[usize]] = &[&[5], &[2, 3], &[2, 1, 3], &[], &[0], &[3, 0, 2], &[1, 1, 1, 4]];
    let mut rng = Rng::new(9);
    let mut src = String::new();
    let mut want = Vec::new();
    for (i, s) in shapes.iter().enumerate() {
        let a = rng.arr(s, -100.0, 100.0);
        let p = dir.join(format!("t{i}.npy"));
        let l = if a.is_empty() {
            format!("(zeros [{}])", s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "))
        } else {
            lit(&a, false)
        };
        src += &format!(
            "let t{i} = {l}\nlet () = save_npy {} t{i}\nlet u{i} = load_npy {}\nlet () = println (u{i} == t{i}, shape u{i}, to_list u{i})\n",
            dp_str(&p),
            dp_str(&p)
        );
        want.push(format!(
            "(true, [{}], [{}])",
            s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "),
            a.iter().map(|x| format!("{:?}", *x as f32 as f64)).collect::<Vec<_>>().join(", ")
        ));
    }
    let got = run_ok(&src);
    // Values print as f64 shortest forms of the float32s: compare numerically.
    assert_eq!(got.len(), want.len(), "{got:?}");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(numbers(g), numbers(w), "npy round trip: got {g}, want {w}");
        assert!(g.starts_with("(true,"), "{g}");
    }
    // dp's files are readable by NumPy, with the same values
    if let Some(python) = numpy() {
        let p = dir.join("t1.npy");
        let out = Command::new(&python)
            .args([
                "-c",
                "import numpy, sys; a = numpy.load(sys.argv[1]); print(a.dtype, a.shape, a.flags['C_CONTIGUOUS'])",
            ])
            .arg(&p)
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "float32 (2, 3) True",
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn npy_from_numpy_dtypes() {
    let dir = temp_path("npy-dir");
    std::fs::create_dir_all(&dir).unwrap();
    // Written byte by byte here...
    let f64s: Vec<u8> = [1.5f64, -2.25, 3.0e10, 0.1, 5.0, 6.0].iter().flat_map(|x| x.to_le_bytes()).collect();
    let i32s: Vec<u8> = [1i32, -2, 3, 16777216].iter().flat_map(|x| x.to_le_bytes()).collect();
    let i64s: Vec<u8> = [7i64, -8, 9].iter().flat_map(|x| x.to_le_bytes()).collect();
    let f32s: Vec<u8> = [0.5f32, 0.25].iter().flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(dir.join("f64.npy"), npy_bytes("<f8", &[2, 3], &f64s)).unwrap();
    std::fs::write(dir.join("i32.npy"), npy_bytes("<i4", &[4], &i32s)).unwrap();
    std::fs::write(dir.join("i64.npy"), npy_bytes("<i8", &[3, 1], &i64s)).unwrap();
    std::fs::write(dir.join("f32.npy"), npy_bytes("<f4", &[1, 2], &f32s)).unwrap();
    let mut names = vec!["f64", "i32", "i64", "f32"];
    // ...and by NumPy itself when it is installed (same values, plus a 0-d array and a
    // version 2.0 header).
    let python = numpy();
    if let Some(python) = &python {
        let script = r#"
import numpy as np, sys
d = sys.argv[1]
np.save(d + '/np_f64.npy', np.array([[1.5, -2.25, 3.0e10], [0.1, 5.0, 6.0]], dtype=np.float64))
np.save(d + '/np_i32.npy', np.array([1, -2, 3, 16777216], dtype=np.int32))
np.save(d + '/np_i64.npy', np.array([[7], [-8], [9]], dtype=np.int64))
np.save(d + '/np_f32.npy', np.array([[0.5, 0.25]], dtype=np.float32))
np.save(d + '/np_0d.npy', np.array(2.5, dtype=np.float32))
np.save(d + '/np_t.npy', np.ascontiguousarray(np.arange(6, dtype=np.float64).reshape(2, 3).T))
from numpy.lib import format as fmt
with open(d + '/np_v2.npy', 'wb') as f:
    fmt.write_array(f, np.array([1.0, 2.0], dtype=np.float32), version=(2, 0))
"#;
        let out = Command::new(python).args(["-c", script]).arg(&dir).output().unwrap();
        assert!(out.status.success(), "numpy: {}", String::from_utf8_lossy(&out.stderr));
        names.extend(["np_f64", "np_i32", "np_i64", "np_f32"]);
    }
    let mut src = String::new();
    for n in &names {
        src += &format!(
            "let () = let t = load_npy {} in println (shape t, to_list t, dtype t)\n",
            dp_str(&dir.join(format!("{n}.npy")))
        );
    }
    let expected = [
        ("([2, 3], [1.5, -2.25, 30000000000.0, 0.1, 5.0, 6.0])", "float64"),
        ("([4], [1.0, -2.0, 3.0, 16777216.0])", "int64"),
        ("([3, 1], [7.0, -8.0, 9.0])", "int64"),
        ("([1, 2], [0.5, 0.25])", "float32"),
    ];
    let got = run_ok(&src);
    assert_eq!(got.len(), names.len());
    for (i, g) in got.iter().enumerate() {
        let (values, dtype) = expected[i % 4];
        assert_eq!(numbers(g), numbers(values), "{}: got {g}", names[i]);
        assert!(g.ends_with(&format!("\"{dtype}\")")), "{}: got {g}, want dtype {dtype}", names[i]);
    }
    if let Some(python) = &python {
        let got = run_ok(&format!(
            "let () = println (load_npy {})\nlet () = println (load_npy {})\nlet () = println (load_npy {})\n",
            dp_str(&dir.join("np_0d.npy")),
            dp_str(&dir.join("np_t.npy")),
            dp_str(&dir.join("np_v2.npy"))
        ));
        assert_eq!(
            got,
            ["tensor 2.5", "astype \"float64\" (tensor [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]])", "tensor [1.0, 2.0]"]
        );
        // A Fortran-ordered array is refused with a message, not misread.
        let script =
            "import numpy as np, sys; np.save(sys.argv[1], np.asfortranarray(np.ones((2, 3), dtype=np.float32)))";
        let p = dir.join("fortran.npy");
        assert!(Command::new(python).args(["-c", script]).arg(&p).status().unwrap().success());
        let r = run_dp(&format!("let t = load_npy {}\n", dp_str(&p)));
        assert!(!r.ok && r.stderr.contains("Fortran") && !r.stderr.contains("panicked"), "{}", r.stderr);
    }
    // Unsupported and broken files are located errors, not panics.
    std::fs::write(dir.join("c8.npy"), npy_bytes("<c8", &[1], &[0; 8])).unwrap();
    std::fs::write(dir.join("short.npy"), npy_bytes("<f4", &[4], &[0; 8])).unwrap();
    std::fs::write(dir.join("junk.npy"), b"not a numpy file at all").unwrap();
    std::fs::write(dir.join("cut.npy"), &npy_bytes("<f4", &[2], &[0; 8])[..12]).unwrap();
    for (n, msg) in [("c8", "unsupported dtype"), ("short", "truncated"), ("junk", "not a NumPy"), ("cut", "")] {
        let r = run_dp(&format!("let t = load_npy {}\n", dp_str(&dir.join(format!("{n}.npy")))));
        assert!(!r.ok, "{n}.npy loaded");
        assert!(r.stderr.contains(msg) && r.stderr.contains("run-time error"), "{n}.npy: {}", r.stderr);
        assert!(!r.stderr.contains("panicked") && !r.stderr.contains("internal"), "{n}.npy: {}", r.stderr);
    }
    let r = run_dp("let () = save_npy \"/nonexistent-dir/x.npy\" (zeros [2])\n");
    assert!(!r.ok && r.stderr.contains("cannot write"), "{}", r.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

// ------------------------------------------------------------------ printing

#[test]
fn printing() {
    expect_lines(
        r#"
println (tensor [[1.0, 2.0], [3.0, 4.0]])
println (tensor [1.0, -2.5, 0.1])
println (tensor 3.0)
println (zeros [0])
println (zeros [2, 0])
println (ones [2, 1, 2])
println (tensor [1e-8, 123456789.0, 1e20, 0.00001])
println [tensor [1.0], tensor [2.0, 3.0]]
println (show (tensor [1.5]))
println { w = tensor [1.0], b = 0.5 }
println (full [1001] 2.0)
println (arange 2000 - 1000.0)
println (to_list (tensor [[1.0, 2.0], [3.0, 4.0]]))
println (shape (tensor 1.0), shape (zeros [3, 0]))
"#,
        &[
            "tensor [[1.0, 2.0], [3.0, 4.0]]",
            "tensor [1.0, -2.5, 0.1]",
            "tensor 3.0",
            "tensor []",
            "tensor [[], []]",
            "tensor [[[1.0, 1.0]], [[1.0, 1.0]]]",
            "tensor [1e-8, 123456790.0, 1e20, 0.00001]",
            "[tensor [1.0], tensor [2.0, 3.0]]",
            "tensor [1.5]",
            "{ b = 0.5, w = tensor [1.0] }",
            "<tensor [1001] min 2.0 max 2.0 mean 2.0>",
            "<tensor [2000] min -1000.0 max 999.0 mean -0.5>",
            "[1.0, 2.0, 3.0, 4.0]",
            "([], [3, 0])",
        ],
    );
}

// ------------------------------------------------------------------ shape errors

/// `(program expression, substrings the message must contain)`.
const SHAPE_ERRORS: &[(&str, &[&str])] = &[
    ("tensor [1.0, 2.0] + tensor [1.0, 2.0, 3.0]", &["[2]", "[3]"]),
    ("zeros [2, 3] * zeros [3, 2]", &["[2, 3]", "[3, 2]"]),
    ("zeros [4, 2] - zeros [3]", &["[4, 2]", "[3]"]),
    ("zeros [2] / zeros [3, 3]", &["[2]", "[3, 3]"]),
    ("zeros [2] ** zeros [3]", &["[2]", "[3]"]),
    ("zeros [2, 3] @ zeros [2, 3]", &["[2, 3]", "[2, 3]"]),
    ("zeros [2, 3] @ zeros [4]", &["[2, 3]", "[4]"]),
    ("zeros [4] @ zeros [3, 2]", &["[4]", "[3, 2]"]),
    ("zeros [2] @ zeros [3]", &["[2]", "[3]"]),
    ("zeros [2, 2, 2] @ zeros [3, 2, 2]", &["[2, 2, 2]", "[3, 2, 2]"]),
    ("reshape (zeros [2, 3]) [4]", &["[2, 3]", "[4]"]),
    ("reshape (zeros [2, 3]) [4, 2]", &["[2, 3]", "[4, 2]"]),
    ("row (zeros [2, 3]) 2", &["[2, 3]", "2"]),
    ("row (tensor 1.0) 0", &["[]"]),
    ("slice (zeros [2, 3]) 1 1 4", &["[2, 3]", "1..4"]),
    ("slice (zeros [2, 3]) 0 2 1", &["[2, 3]", "2..1"]),
    ("slice (zeros [2, 3]) 2 0 1", &["[2, 3]", "axis 2"]),
    ("concat 0 [zeros [2, 3], zeros [2, 2]]", &["[2, 3]", "[2, 2]"]),
    ("concat 1 [zeros [2, 3], zeros [3, 3]]", &["[2, 3]", "[3, 3]"]),
    ("concat 2 [zeros [2, 3], zeros [2, 3]]", &["[2, 3]", "axis 2"]),
    ("concat 0 [zeros [2, 3], zeros [3]]", &["[2, 3]", "[3]"]),
    ("item (zeros [2])", &["[2]"]),
    ("item (zeros [1, 3])", &["[1, 3]"]),
    ("item (zeros [0])", &["[0]"]),
    ("sum_axis (zeros [2, 3]) 2", &["[2, 3]", "axis 2"]),
    ("mean_axis (zeros [2]) 1", &["[2]", "axis 1"]),
    ("tensor [[1.0, 2.0], [3.0]]", &["ragged"]),
    ("tensor [[1.0], [2.0, 3.0]]", &["ragged"]),
    ("tensor [[[1.0], [2.0]], [[3.0]]]", &["ragged"]),
    ("tensor [[], [1.0]]", &["ragged"]),
];

/// The run-time error for `expr`, placed on line 2 column 9 (after `let x = `).
fn shape_error(expr: &str, wrap: &str) -> Result<String, String> {
    let src = format!("let y = 1\nlet x = {}\n", wrap.replace("EXPR", expr));
    let r = run_dp(&src);
    if r.ok {
        return Err(format!("`{expr}` in `{wrap}` succeeded: {}", r.stdout.trim()));
    }
    if r.stderr.contains("panicked") || r.stderr.contains("internal") {
        return Err(format!("`{expr}` in `{wrap}`: crashed:\n{}", r.stderr));
    }
    if !r.stderr.contains("run-time error") {
        return Err(format!("`{expr}` in `{wrap}`: not a run-time error:\n{}", r.stderr));
    }
    Ok(r.stderr)
}

#[test]
fn shape_errors_are_located_runtime_errors() {
    let mut failures = Vec::new();
    for (expr, must) in SHAPE_ERRORS {
        match shape_error(expr, "EXPR") {
            Ok(stderr) => {
                for m in *must {
                    if !stderr.contains(m) {
                        failures.push(format!("`{expr}`: the message lacks `{m}`:\n{stderr}"));
                    }
                }
                // the report points into line 2, at the expression (column 9) or inside it
                let located = stderr.lines().any(|l| l.contains(".dp:2:"));
                let col_ok = stderr.lines().any(|l| {
                    l.split(".dp:2:")
                        .nth(1)
                        .and_then(|c| c.trim_end_matches(" ]").parse::<usize>().ok())
                        .is_some_and(|c| c >= 9)
                });
                if !located || !col_ok || !stderr.contains("raised here") {
                    failures.push(format!("`{expr}`: not located at the expression:\n{stderr}"));
                }
            }
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.is_empty(), "{} shape error check(s) failed:\n\n{}", failures.len(), failures.join("\n\n"));
}

/// The same errors raised while `grad` and `jvp` are tracking the operands.
#[test]
fn shape_errors_under_grad_and_jvp() {
    let tracked: &[(&str, &str, &[&str])] = &[
        ("sum ($x + zeros [3])", "zeros [2]", &["[2]", "[3]"]),
        ("sum ($x * zeros [3, 2])", "zeros [2, 3]", &["[2, 3]", "[3, 2]"]),
        ("sum ($x @ zeros [2, 3])", "zeros [2, 3]", &["[2, 3]"]),
        ("sum (zeros [4] @ $x)", "zeros [3, 2]", &["[4]", "[3, 2]"]),
        ("sum (reshape $x [5])", "zeros [2, 3]", &["[2, 3]", "[5]"]),
        ("sum (row $x 3)", "zeros [2, 3]", &["[2, 3]"]),
        ("sum (slice $x 0 1 3)", "zeros [2, 3]", &["[2, 3]"]),
        ("sum (concat 0 [$x, zeros [2]])", "zeros [2, 3]", &["[2, 3]", "[2]"]),
        ("item $x", "zeros [2, 3]", &["[2, 3]"]),
        ("sum (sum_axis $x 3)", "zeros [2, 3]", &["[2, 3]"]),
    ];
    let mut failures = Vec::new();
    for (body, arg, must) in tracked {
        for wrap in [
            format!("grad (fun (x : Tensor) -> {}) ({arg})", body.replace("$x", "x")),
            format!("jvp (fun (x : Tensor) -> {}) ({arg}) ({arg})", body.replace("$x", "x")),
            format!(
                "grad (fun (x : Tensor) -> sum (grad (fun (y : Tensor) -> {}) x)) ({arg})",
                body.replace("$x", "y")
            ),
        ] {
            match shape_error(&wrap, "EXPR") {
                Ok(stderr) => {
                    for m in *must {
                        if !stderr.contains(m) {
                            failures.push(format!("`{wrap}`: the message lacks `{m}`:\n{stderr}"));
                        }
                    }
                    if !stderr.contains(".dp:2:") {
                        failures.push(format!("`{wrap}`: not located:\n{stderr}"));
                    }
                }
                Err(e) => failures.push(e),
            }
        }
    }
    assert!(failures.is_empty(), "{} check(s) failed:\n\n{}", failures.len(), failures.join("\n\n"));
}
