//! Automatic differentiation, checked from outside: dp programs run through the `dp` binary and
//! their derivatives compared with numbers computed here in Rust.
//!
//! * Property tests generate random expression trees over the differentiable scalar primitives,
//!   render each as a dp function, and compare dp's `grad`, `jvp` and `value_and_grad` with a
//!   native evaluator (forward mode in f64, first and second derivatives) and with central
//!   finite differences; second derivatives (`grad (grad f)`, `jvp` over `grad`, `grad` over
//!   `jvp`) are compared with each other, with the native second derivative and with finite
//!   differences of the native first derivative. Many functions share one dp process (one line
//!   of output each).
//! * Deterministic tests with closed forms: nesting, structured arguments, control flow, state,
//!   a million-step `value_and_grad` loop, type errors.
//! * Tests for interpreter bugs found while writing this file (see their comments; they fail
//!   until the bugs are fixed).

use crate::golden::numbers;
use crate::run::{run_dp, run_ok};
use proptest::prelude::*;

// ------------------------------------------------------------------ running dp

/// The numbers of every output line of a program that must succeed.
fn run_numbers(src: &str) -> Vec<Vec<f64>> {
    run_ok(src).iter().map(|l| numbers(l)).collect()
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()).max(1.0)
}

#[track_caller]
fn assert_close(got: &[f64], want: &[f64], rel: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: got {got:?}, want {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(close(*g, *w, rel), "{what}: got {got:?}, want {want:?} (relative tolerance {rel})");
    }
}

// ------------------------------------------------------------------ expression trees

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op2 {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op1 {
    Neg,
    Sin,
    Cos,
    Tan,
    Exp,
    Log,
    Sqrt,
    Tanh,
    Sigmoid,
    Relu,
    Abs,
}

/// A scalar expression in one variable. The generator builds domain guards into the tree
/// itself (`log (e * e + 1.0)`), so rendering and evaluation are both literal.
#[derive(Clone, Debug)]
enum E {
    X,
    C(f64),
    Un(Op1, Box<E>),
    Bin(Op2, Box<E>, Box<E>),
}

fn un(op: Op1, a: E) -> E {
    E::Un(op, Box::new(a))
}
fn bin(op: Op2, a: E, b: E) -> E {
    E::Bin(op, Box::new(a), Box::new(b))
}
/// `a * a + 1.0`: positive, at least 1.
fn pos(a: E) -> E {
    bin(Op2::Add, bin(Op2::Mul, a.clone(), a), E::C(1.0))
}

fn render(e: &E, out: &mut String) {
    match e {
        E::X => out.push('x'),
        E::C(c) if *c < 0.0 => out.push_str(&format!("(-{:?})", -c)),
        E::C(c) => out.push_str(&format!("{c:?}")),
        E::Un(Op1::Neg, a) => {
            out.push_str("(-");
            render(a, out);
            out.push(')');
        }
        E::Un(op, a) => {
            let name = match op {
                Op1::Sin => "sin",
                Op1::Cos => "cos",
                Op1::Tan => "tan",
                Op1::Exp => "exp",
                Op1::Log => "log",
                Op1::Sqrt => "sqrt",
                Op1::Tanh => "tanh",
                Op1::Sigmoid => "sigmoid",
                Op1::Relu => "relu",
                Op1::Abs => "abs",
                Op1::Neg => unreachable!(),
            };
            out.push('(');
            out.push_str(name);
            out.push(' ');
            render(a, out);
            out.push(')');
        }
        E::Bin(op, a, b) => {
            let sym = match op {
                Op2::Add => "+",
                Op2::Sub => "-",
                Op2::Mul => "*",
                Op2::Div => "/",
                Op2::Pow => "**",
            };
            out.push('(');
            render(a, out);
            out.push(' ');
            out.push_str(sym);
            out.push(' ');
            render(b, out);
            out.push(')');
        }
    }
}

fn source(e: &E) -> String {
    let mut s = String::new();
    render(e, &mut s);
    s
}

/// A number with its first and second derivatives with respect to x (a truncated Taylor
/// series), and bounds `a1`, `a2` on the rounding those derivatives can suffer: the same
/// derivatives computed with the absolute value of every term, so that no term cancels. Any
/// evaluation order (dp's reverse mode, its forward mode, this one) computes the derivative
/// to within a few ulps of that bound per operation.
#[derive(Clone, Copy, Debug)]
struct D {
    v: f64,
    d1: f64,
    d2: f64,
    a1: f64,
    a2: f64,
}

impl D {
    fn var(x: f64) -> D {
        D { v: x, d1: 1.0, d2: 0.0, a1: 1.0, a2: 0.0 }
    }
    fn constant(c: f64) -> D {
        D { v: c, d1: 0.0, d2: 0.0, a1: 0.0, a2: 0.0 }
    }
    /// g(self), given g(u), g'(u) and g''(u).
    fn chain(self, v: f64, g1: f64, g2: f64) -> D {
        D {
            v,
            d1: g1 * self.d1,
            d2: g2 * self.d1 * self.d1 + g1 * self.d2,
            a1: g1.abs() * self.a1,
            a2: g2.abs() * self.a1 * self.a1 + g1.abs() * self.a2,
        }
    }
    fn add(self, o: D, sign: f64) -> D {
        D {
            v: if sign > 0.0 { self.v + o.v } else { self.v - o.v },
            d1: self.d1 + sign * o.d1,
            d2: self.d2 + sign * o.d2,
            a1: self.a1 + o.a1,
            a2: self.a2 + o.a2,
        }
    }
    fn mul(self, o: D) -> D {
        D {
            v: self.v * o.v,
            d1: self.d1 * o.v + self.v * o.d1,
            d2: self.d2 * o.v + 2.0 * self.d1 * o.d1 + self.v * o.d2,
            a1: self.a1 * o.v.abs() + self.v.abs() * o.a1,
            a2: self.a2 * o.v.abs() + 2.0 * self.a1 * o.a1 + self.v.abs() * o.a2,
        }
    }
}

/// What an evaluation saw on the way: the argument of every `relu` and `abs` (the points
/// where they are not smooth), and the largest intermediate value and derivative.
#[derive(Default)]
struct Trace {
    kinks: Vec<f64>,
    value: f64,
    slope: f64,
}

/// Evaluates `e` at `x` (a variable made by `D::var`) with dp's definitions of the
/// primitives: values by the same operations in the same order as dp, derivatives by the
/// chain rule.
fn eval(e: &E, x: D, tr: &mut Trace) -> D {
    let r = eval_node(e, x, tr);
    tr.value = tr.value.max(r.v.abs());
    tr.slope = tr.slope.max(r.d1.abs());
    r
}

fn eval_node(e: &E, x: D, tr: &mut Trace) -> D {
    match e {
        E::X => x,
        E::C(c) => D::constant(*c),
        E::Un(op, a) => {
            let a = eval(a, x, tr);
            let u = a.v;
            match op {
                Op1::Neg => a.chain(-u, -1.0, 0.0),
                Op1::Sin => a.chain(u.sin(), u.cos(), -u.sin()),
                Op1::Cos => a.chain(u.cos(), -u.sin(), -u.cos()),
                Op1::Tan => {
                    let t = u.tan();
                    a.chain(t, 1.0 + t * t, 2.0 * t * (1.0 + t * t))
                }
                Op1::Exp => a.chain(u.exp(), u.exp(), u.exp()),
                Op1::Log => a.chain(u.ln(), 1.0 / u, -1.0 / (u * u)),
                Op1::Sqrt => a.chain(u.sqrt(), 0.5 / u.sqrt(), -0.25 / (u * u.sqrt())),
                Op1::Tanh => {
                    let t = u.tanh();
                    a.chain(t, 1.0 - t * t, -2.0 * t * (1.0 - t * t))
                }
                Op1::Sigmoid => {
                    let s = 1.0 / (1.0 + (-u).exp());
                    a.chain(s, s * (1.0 - s), s * (1.0 - s) * (1.0 - 2.0 * s))
                }
                Op1::Relu => {
                    tr.kinks.push(u);
                    a.chain(u.max(0.0), if u > 0.0 { 1.0 } else { 0.0 }, 0.0)
                }
                Op1::Abs => {
                    tr.kinks.push(u);
                    a.chain(u.abs(), if u >= 0.0 { 1.0 } else { -1.0 }, 0.0)
                }
            }
        }
        E::Bin(op, a, b) => {
            let (a, b) = (eval(a, x, tr), eval(b, x, tr));
            match op {
                Op2::Add => a.add(b, 1.0),
                Op2::Sub => a.add(b, -1.0),
                Op2::Mul => a.mul(b),
                Op2::Div => {
                    let r = a.mul(b.chain(1.0 / b.v, -1.0 / (b.v * b.v), 2.0 / (b.v * b.v * b.v)));
                    D { v: a.v / b.v, ..r }
                }
                Op2::Pow if b.d1 == 0.0 && b.d2 == 0.0 && b.a1 == 0.0 => {
                    // a constant exponent k: (a^k)' = k a^(k-1) a'
                    let k = b.v;
                    a.chain(a.v.powf(k), k * a.v.powf(k - 1.0), k * (k - 1.0) * a.v.powf(k - 2.0))
                }
                Op2::Pow => {
                    // a variable exponent (the base is positive): a^b = exp (b log a)
                    let l = a.chain(a.v.ln(), 1.0 / a.v, -1.0 / (a.v * a.v));
                    let y = a.v.powf(b.v);
                    b.mul(l).chain(y, y, y)
                }
            }
        }
    }
}

/// What the native side knows about `e` near `x0`.
struct Native {
    f: f64,
    df: f64,
    d2f: f64,
    /// Rounding bounds for df and d2f (see `D`).
    a1: f64,
    a2: f64,
    /// Finite-difference estimates of f' (from f) and f'' (from the native f') at two step
    /// sizes; `None` where a kink lies too close, an intermediate value is too large or a
    /// value is not finite.
    fd1: Option<(f64, f64)>,
    fd2: Option<(f64, f64)>,
}

/// The five-point central difference of `g` at `x0` with step `h`.
fn five_point(g: &dyn Fn(f64) -> f64, x0: f64, h: f64) -> f64 {
    (g(x0 - 2.0 * h) - 8.0 * g(x0 - h) + 8.0 * g(x0 + h) - g(x0 + 2.0 * h)) / (12.0 * h)
}

fn native(e: &E, x0: f64) -> Option<Native> {
    let mut tr0 = Trace::default();
    let at0 = eval(e, D::var(x0), &mut tr0);
    let finite = [at0.v, at0.d1, at0.d2, at0.a1, at0.a2].iter().all(|v| v.is_finite());
    if !finite || tr0.kinks.iter().any(|k| k.abs() < 1e-9) {
        return None;
    }
    // Beyond LARGE, rounding swamps the differences (`cos (1e14 + x)` moves in steps of
    // 0.03). The step keeps every intermediate's change across the stencil under 0.02, so
    // that a fast oscillation (`sin (x^3)` where x^3 is large) is not aliased.
    let h = 1e-3 / (tr0.slope / 10.0).max(1.0);
    // Every point the differences use must be on the same smooth piece as x0.
    let smooth = tr0.value <= LARGE
        && tr0.slope <= LARGE
        && [-2.0, -1.0, -0.5, 0.5, 1.0, 2.0].iter().all(|t| {
            let mut tr = Trace::default();
            let p = eval(e, D::var(x0 + t * h), &mut tr);
            p.v.is_finite()
                && p.d1.is_finite()
                && tr.kinks.iter().zip(&tr0.kinks).all(|(a, b)| (*a > 0.0) == (*b > 0.0))
        });
    let fv = |x: f64| eval(e, D::var(x), &mut Trace::default()).v;
    let fd = |x: f64| eval(e, D::var(x), &mut Trace::default()).d1;
    let pair = |g: &dyn Fn(f64) -> f64| {
        let r = (five_point(g, x0, h), five_point(g, x0, h / 2.0));
        (smooth && r.0.is_finite() && r.1.is_finite()).then_some(r)
    };
    Some(Native { f: at0.v, df: at0.d1, d2f: at0.d2, a1: at0.a1, a2: at0.a2, fd1: pair(&fv), fd2: pair(&fd) })
}

// Generation. Depth counts generated operations, not the guards the generator adds.

fn leaf() -> BoxedStrategy<E> {
    prop_oneof![
        3 => Just(E::X),
        2 => (-12i32..=12).prop_map(|i| E::C(i as f64 / 4.0)),
    ]
    .boxed()
}

fn expr(depth: u32) -> BoxedStrategy<E> {
    if depth == 0 {
        return leaf();
    }
    let s = expr(depth - 1);
    let direct = prop_oneof![
        Just(Op1::Neg),
        Just(Op1::Sin),
        Just(Op1::Cos),
        Just(Op1::Exp),
        Just(Op1::Tanh),
        Just(Op1::Sigmoid),
        Just(Op1::Relu),
        Just(Op1::Abs),
    ];
    let arith = prop_oneof![Just(Op2::Add), Just(Op2::Sub), Just(Op2::Mul)];
    prop_oneof![
        2 => leaf(),
        6 => (arith, s.clone(), s.clone()).prop_map(|(op, a, b)| bin(op, a, b)),
        6 => (direct, s.clone()).prop_map(|(op, a)| un(op, a)),
        // a / (b * b + 1.0)
        2 => (s.clone(), s.clone()).prop_map(|(a, b)| bin(Op2::Div, a, pos(b))),
        // log and sqrt of a positive argument
        1 => s.clone().prop_map(|a| un(Op1::Log, pos(a))),
        1 => s.clone().prop_map(|a| un(Op1::Sqrt, pos(a))),
        // tan of an argument in [-1.2, 1.2]
        1 => s.clone().prop_map(|a| un(Op1::Tan, bin(Op2::Mul, E::C(1.2), un(Op1::Sin, a)))),
        // powers: an integer exponent of anything, a real exponent of a positive base, and a
        // variable exponent of a positive base
        1 => (s.clone(), prop_oneof![Just(2.0), Just(3.0)]).prop_map(|(a, k)| bin(Op2::Pow, a, E::C(k))),
        1 => (s.clone(), prop_oneof![Just(0.5), Just(-1.5), Just(2.5)])
            .prop_map(|(a, k)| bin(Op2::Pow, pos(a), E::C(k))),
        1 => (s.clone(), s).prop_map(|(a, b)| bin(Op2::Pow, pos(a), un(Op1::Sin, b))),
    ]
    .boxed()
}

/// Points in [-2, 2], off the grid of "nice" numbers where kinks tend to sit.
fn point() -> impl Strategy<Value = f64> {
    (-200i32..=200).prop_map(|i| i as f64 / 100.0 + 0.00371)
}

const BATCH: usize = 64;
/// Values and derivatives beyond this are skipped: finite differences lose their digits.
const LARGE: f64 = 1e6;

/// Renders a batch: `f0 … fN` and one printed line per function.
/// A float as a dp argument.
fn lit(x: f64) -> String {
    if x < 0.0 {
        format!("(-{:?})", -x)
    } else {
        format!("{x:?}")
    }
}

fn program(fns: &[(E, f64)], line: impl Fn(usize, &str) -> String) -> String {
    let mut src = String::new();
    for (i, (e, _)) in fns.iter().enumerate() {
        src.push_str(&format!("let f{i} (x : Float) = {}\n", source(e)));
    }
    src.push_str("let () =\n");
    let lines: Vec<String> =
        fns.iter().enumerate().map(|(i, (_, x0))| format!("  println {}", line(i, &lit(*x0)))).collect();
    src.push_str(&lines.join(";\n"));
    src.push('\n');
    src
}

/// Runs a batch and returns, per function, the numbers on its line.
fn run_batch(src: &str, n: usize, width: usize) -> Result<Vec<Vec<f64>>, String> {
    let r = run_dp(src);
    if !r.ok || r.stderr.contains("panicked") {
        return Err(format!("dp failed:\n{}\n--- program\n{src}", r.stderr));
    }
    let rows: Vec<Vec<f64>> = r.stdout.lines().map(numbers).collect();
    if rows.len() != n || rows.iter().any(|r| r.len() != width) {
        return Err(format!("unexpected output shape:\n{}\n--- program\n{src}", r.stdout));
    }
    Ok(rows)
}

/// Tolerance for comparing with finite differences: relative 1e-5 of the derivative, plus
/// what rounding in the differenced values (of size `scale`) can contribute.
fn fd_ok(ad: f64, fd: f64, scale: f64) -> bool {
    (ad - fd).abs() <= 1e-5 * ad.abs().max(fd.abs()).max(1.0) + 1e-9 * scale.abs()
}

/// Two finite-difference estimates that agree well enough to judge by.
fn converged(fd: (f64, f64), scale: f64) -> Option<f64> {
    ((fd.0 - fd.1).abs() <= 1e-7 * fd.0.abs().max(1.0) + 1e-10 * scale.abs()).then_some(fd.1)
}

/// Two derivatives computed in different orders agree to `rel`, relative, up to what
/// rounding can do to a sum whose terms add up (in absolute value) to `bound`.
fn agree(x: f64, y: f64, rel: f64, bound: f64) -> bool {
    (x - y).abs() <= rel * x.abs().max(y.abs()).max(1.0) + 1e-13 * bound
}

fn first_order(fns: &[(E, f64)]) -> Result<usize, String> {
    let src =
        program(fns, |i, x0| format!("(f{i} {x0}, grad f{i} {x0}, snd (jvp f{i} {x0} 1.0), value_and_grad f{i} {x0})"));
    let rows = run_batch(&src, fns.len(), 5)?;
    let mut judged = 0;
    for ((e, x0), row) in fns.iter().zip(&rows) {
        let (v, g, t, vv, vg) = (row[0], row[1], row[2], row[3], row[4]);
        let fail = |what: &str| Err(format!("{what} for f x = {} at x = {x0}: dp printed {row:?}", source(e)));
        let Some(n) = native(e, *x0) else { continue };
        if n.f.abs() > LARGE || n.df.abs() > LARGE {
            continue;
        }
        if !close(v, n.f, 1e-12) || vv != v {
            return fail(&format!("value differs from the native {}", n.f));
        }
        if vg != g {
            return fail("value_and_grad and grad differ");
        }
        if !agree(g, t, 1e-12, n.a1) {
            return fail("grad and jvp differ");
        }
        if !agree(g, n.df, 1e-9, n.a1) {
            return fail(&format!("grad differs from the native derivative {}", n.df));
        }
        if let Some(fd) = n.fd1.and_then(|fd| converged(fd, n.f)) {
            judged += 1;
            if !fd_ok(g, fd, n.f) {
                return fail(&format!("grad differs from the finite difference {fd}"));
            }
        }
    }
    Ok(judged)
}

fn second_order(fns: &[(E, f64)]) -> Result<usize, String> {
    let src = program(fns, |i, x0| {
        format!("(grad (grad f{i}) {x0}, snd (jvp (grad f{i}) {x0} 1.0), grad (fun x -> snd (jvp f{i} x 1.0)) {x0})")
    });
    let rows = run_batch(&src, fns.len(), 3)?;
    let mut judged = 0;
    for ((e, x0), row) in fns.iter().zip(&rows) {
        let fail = |what: &str| Err(format!("{what} for f x = {} at x = {x0}: dp printed {row:?}", source(e)));
        let Some(n) = native(e, *x0) else { continue };
        if n.f.abs() > LARGE || n.df.abs() > LARGE || n.d2f.abs() > LARGE {
            continue;
        }
        let (rr, fr, rf) = (row[0], row[1], row[2]);
        if !agree(rr, fr, 1e-10, n.a2) || !agree(rr, rf, 1e-10, n.a2) {
            return fail("reverse-over-reverse, forward-over-reverse and reverse-over-forward differ");
        }
        if !agree(rr, n.d2f, 1e-9, n.a2) {
            return fail(&format!("grad (grad f) differs from the native second derivative {}", n.d2f));
        }
        if let Some(fd) = n.fd2.and_then(|fd| converged(fd, n.df)) {
            judged += 1;
            if !fd_ok(rr, fd, n.df) {
                return fail(&format!("grad (grad f) differs from the finite difference {fd} of f'"));
            }
        }
    }
    Ok(judged)
}

/// `jit` of random functions and of their derivatives (`jit (grad f)`, `jit (value_and_grad
/// f)`, a staged `jvp`, `grad (jit f)`, `jit (grad (grad f))`) against the native
/// derivatives. Each staged function is traced at another point first, so the numbers at x0
/// come from a compiled program run on a new input: a decision the trace made from the first
/// point's numbers (relu's, abs's, a power's) would show here.
fn staged(fns: &[(E, f64)]) -> Result<usize, String> {
    let mut src = String::new();
    for (i, (e, x0)) in fns.iter().enumerate() {
        let o = lit(0.1 - x0 * 0.5);
        src.push_str(&format!(
            "let f{i} (x : Float) = {}\n\
             let jf{i} = jit f{i}\nlet jg{i} = jit (grad f{i})\nlet jv{i} = jit (value_and_grad f{i})\n\
             let jt{i} = jit (fun x -> snd (jvp f{i} x 1.0))\nlet jh{i} = jit (grad (grad f{i}))\n\
             let _ = (jf{i} {o}, jg{i} {o}, jv{i} {o}, jt{i} {o}, jh{i} {o})\n",
            source(e)
        ));
    }
    src.push_str("let () =\n");
    let lines: Vec<String> = fns
        .iter()
        .enumerate()
        .map(|(i, (_, x0))| {
            let x = lit(*x0);
            format!("  println (jf{i} {x}, jg{i} {x}, jv{i} {x}, jt{i} {x}, grad jf{i} {x}, jh{i} {x})")
        })
        .collect();
    src.push_str(&lines.join(";\n"));
    src.push('\n');
    let rows = run_batch(&src, fns.len(), 7)?;
    let mut judged = 0;
    for ((e, x0), row) in fns.iter().zip(&rows) {
        let (v, g, vv, vg, t, gj, h) = (row[0], row[1], row[2], row[3], row[4], row[5], row[6]);
        let fail = |what: &str| Err(format!("{what} for f x = {} at x = {x0}: dp printed {row:?}", source(e)));
        let Some(n) = native(e, *x0) else { continue };
        if n.f.abs() > LARGE || n.df.abs() > LARGE {
            continue;
        }
        judged += 1;
        if !close(v, n.f, 1e-12) || !close(vv, n.f, 1e-12) {
            return fail(&format!("a staged value differs from the native {}", n.f));
        }
        for (what, d) in
            [("jit (grad f)", g), ("jit (value_and_grad f)", vg), ("a staged jvp", t), ("grad (jit f)", gj)]
        {
            if !agree(d, n.df, 1e-9, n.a1) {
                return fail(&format!("{what} differs from the native derivative {}", n.df));
            }
        }
        if n.d2f.abs() <= LARGE && !agree(h, n.d2f, 1e-9, n.a2) {
            return fail(&format!("jit (grad (grad f)) differs from the native second derivative {}", n.d2f));
        }
    }
    Ok(judged)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 100,
        failure_persistence: None,
        max_shrink_iters: 300,
        ..ProptestConfig::default()
    })]

    /// grad, jvp and value_and_grad of random functions against dual numbers and finite
    /// differences; grad and jvp agree to 1e-12.
    #[test]
    fn random_first_derivatives(fns in prop::collection::vec((expr(4), point()), BATCH)) {
        let judged = first_order(&fns);
        prop_assert!(judged.is_ok(), "{}", judged.unwrap_err());
        // Most points are smooth and well-scaled; a batch judged by almost nothing would
        // mean the generator or the filters are broken.
        prop_assert!(judged.unwrap() >= BATCH / 4, "too few functions could be judged");
    }

    /// Staged functions and staged derivatives against the native ones.
    #[test]
    fn random_staged_derivatives(fns in prop::collection::vec((expr(4), point()), BATCH)) {
        let judged = staged(&fns);
        prop_assert!(judged.is_ok(), "{}", judged.unwrap_err());
        prop_assert!(judged.unwrap() >= BATCH / 4, "too few functions could be judged");
    }

    /// grad (grad f), jvp over grad and grad over jvp against each other and against finite
    /// differences of the natively computed first derivative.
    #[test]
    fn random_second_derivatives(fns in prop::collection::vec((expr(4), point()), BATCH)) {
        let judged = second_order(&fns);
        prop_assert!(judged.is_ok(), "{}", judged.unwrap_err());
        prop_assert!(judged.unwrap() >= BATCH / 4, "too few functions could be judged");
    }
}

/// The generator and the native evaluator on fixed cases, so that a broken oracle does not
/// pass silently.
#[test]
fn oracle_self_check() {
    let e = bin(Op2::Mul, un(Op1::Sin, E::X), E::X); // x sin x
    let n = native(&e, 0.7).unwrap();
    let exact = 0.7f64.sin() + 0.7 * 0.7f64.cos();
    assert!((n.df - exact).abs() < 1e-15);
    assert!((converged(n.fd1.unwrap(), n.f).unwrap() - exact).abs() < 1e-9);
    let exact2 = 2.0 * 0.7f64.cos() - 0.7 * 0.7f64.sin();
    assert!((converged(n.fd2.unwrap(), n.df).unwrap() - exact2).abs() < 1e-9);
    assert!((n.d2f - exact2).abs() < 1e-15);
    // The native second derivative of every kind of node against differences of the first.
    let all = bin(
        Op2::Add,
        bin(Op2::Pow, pos(un(Op1::Tan, E::X)), un(Op1::Sin, E::X)),
        bin(
            Op2::Div,
            un(Op1::Sigmoid, un(Op1::Sqrt, pos(un(Op1::Tanh, E::X)))),
            pos(bin(Op2::Pow, un(Op1::Log, pos(un(Op1::Exp, un(Op1::Cos, E::X)))), E::C(-1.5))),
        ),
    );
    let n = native(&all, 0.3).unwrap();
    assert!((converged(n.fd2.unwrap(), n.df).unwrap() - n.d2f).abs() < 1e-8 * n.d2f.abs().max(1.0));
    // x - x cancels exactly in forward mode but not necessarily in reverse mode, where its
    // adjoint (here 3e12 |x|) is added to x's and subtracted again: the rounding bound knows.
    let big = bin(Op2::Pow, pos(bin(Op2::Pow, pos(E::C(-3.0)), E::C(2.5))), E::C(2.5));
    let e = bin(Op2::Mul, big, bin(Op2::Mul, bin(Op2::Sub, E::X, E::X), un(Op1::Abs, E::X)));
    let n = native(&e, -1.15629).unwrap();
    assert!(n.df == 0.0 && n.a1 > 1e12);
    assert_eq!(source(&bin(Op2::Pow, pos(E::X), E::C(-1.5))), "(((x * x) + 1.0) ** (-1.5))");
    // A kink at the point: not judged.
    assert!(native(&un(Op1::Relu, bin(Op2::Sub, E::X, E::C(0.5))), 0.5).is_none());
    // cos (2.8e14 + s x): rounding makes f' a staircase, so no finite difference.
    let huge = un(Op1::Exp, bin(Op2::Pow, pos(E::C(-1.75)), E::C(2.5)));
    let e = un(Op1::Cos, bin(Op2::Add, huge, un(Op1::Sqrt, pos(bin(Op2::Mul, E::X, E::C(-1.5))))));
    assert!(native(&e, -1.03629).unwrap().fd2.is_none());
    // sin ((90.5 + x)^3): a fast oscillation, judged with a small enough step.
    let e = un(
        Op1::Sin,
        bin(Op2::Pow, bin(Op2::Sub, bin(Op2::Pow, pos(E::C(2.25)), E::C(2.5)), un(Op1::Neg, E::X)), E::C(3.0)),
    );
    let n = native(&e, 0.90371).unwrap();
    assert!((converged(n.fd1.unwrap(), n.f).unwrap() - n.df).abs() < 1e-5 * n.df.abs());
    // A kink within the stencil: no finite difference.
    assert!(native(&un(Op1::Abs, bin(Op2::Sub, E::X, E::C(0.5))), 0.5001).unwrap().fd1.is_none());
}

// ------------------------------------------------------------------ closed forms: nesting

#[test]
fn nested_derivatives() {
    let rows = run_numbers(
        r#"
println (grad (fun x -> x * grad (fun y -> x + y) 1.0) 1.0)
println (grad (grad (grad (fun x -> x ** 4.0))) 2.0)
// d/dx [x * d/dy (x y^2) at y = x] = d/dx 2x^3 = 6x^2
println (grad (fun x -> x * grad (fun y -> x * y * y) x) 1.5)
// Siskind & Pearlmutter: d/dx (x * (d/dy (x + y))(1)) at 1, and the "D(λy. x y)" variant
println (grad (fun x -> grad (fun y -> x * y) 2.0) 3.0)
// fourth derivative of sin at 0.3 is sin 0.3
println (grad (grad (grad (grad sin))) 0.3)
// value_and_grad inside grad: v + d = x^3 + 3x^2 at x = 2 -> 3x^2 + 6x = 24
println (grad (fun x -> let (v, d) = value_and_grad (fun y -> y * y * y) x in v + d) 2.0)
"#,
    );
    let s = 0.3f64.sin();
    assert_close(&rows.concat(), &[1.0, 48.0, 6.0 * 1.5 * 1.5, 1.0, s, 24.0], 1e-12, "nested");
}

#[test]
fn jvp_over_grad_hessian_vector_product() {
    // f(a, b) = a^2 b + sin a * b^3. H = [[2b - sin a b^3, 2a + 3 cos a b^2],
    //                                     [2a + 3 cos a b^2, 6 sin a b]]
    let rows = run_numbers(
        r#"
let f (a, b) = a * a * b + sin a * b * b * b
let p = (0.7, -1.3)
println (jvp (grad f) p (1.0, 0.0))
println (snd (jvp (grad f) p (0.25, 2.0)))
// forward over forward and reverse over reverse give the same entries
println (snd (jvp (fun q -> snd (jvp f q (1.0, 0.0))) p (0.0, 1.0)))
println (grad (fun q -> fst (grad f q)) p)
"#,
    );
    let (a, b): (f64, f64) = (0.7, -1.3);
    let (haa, hab, hbb) = (2.0 * b - a.sin() * b.powi(3), 2.0 * a + 3.0 * a.cos() * b * b, 6.0 * a.sin() * b);
    let g = (2.0 * a * b + a.cos() * b.powi(3), a * a + 3.0 * a.sin() * b * b);
    assert_close(&rows[0], &[g.0, g.1, haa, hab], 1e-12, "jvp (grad f) p e1");
    assert_close(&rows[1], &[0.25 * haa + 2.0 * hab, 0.25 * hab + 2.0 * hbb], 1e-12, "H v");
    assert_close(&rows[2], &[hab], 1e-12, "forward over forward");
    assert_close(&rows[3], &[haa, hab], 1e-12, "reverse over reverse");
}

#[test]
fn grad_over_jvp() {
    // d/dx [d/dy exp(x y)] = d/dx [x exp(x y)] = exp(x y) (1 + x y)
    let rows = run_numbers(
        r#"
println (grad (fun x -> snd (jvp (fun y -> exp (x * y)) 0.5 1.0)) 1.5)
// the tangent of a tuple-valued function, differentiated
println (grad (fun x -> let (_, (ta, tb)) = jvp (fun y -> (x * y, y * y * x)) 2.0 1.0 in ta + tb) 3.0)
// the tangent direction itself differentiated: d/dv of the tangent of y^2 at 3 along v is 6
println (grad (fun v -> snd (jvp (fun y -> y * y) 3.0 v)) 1.0)
// jvp of a function that calls jvp: d/dx of d/dy (x^2 y^3) = 6 x y^2
println (jvp (fun x -> snd (jvp (fun y -> x * x * y * y * y) 2.0 1.0)) 1.5 1.0)
"#,
    );
    let (x, y) = (1.5f64, 0.5f64);
    assert_close(&rows[0], &[(x * y).exp() * (1.0 + x * y)], 1e-12, "grad over jvp");
    assert_close(&rows[1], &[1.0 + 4.0], 1e-12, "grad over jvp of a tuple");
    assert_close(&rows[2], &[6.0], 1e-12, "grad with respect to the tangent");
    assert_close(&rows[3], &[3.0 * 1.5 * 1.5 * 4.0, 6.0 * 1.5 * 4.0], 1e-12, "jvp over jvp");
}

// ------------------------------------------------------------------ closed forms: shapes

#[test]
fn gradients_have_the_arguments_shape() {
    let out = run_ok(
        r#"
println (grad (fun (a, (b, c)) -> a * b * c) (1.0, (2.0, 3.0)))
println (grad (fun xs -> sum_float (map (fun x -> x * x) xs)) [1.0, 2.0, 3.0])
println (grad (fun p -> p.w * p.w * p.b + sum_float p.bs) { w = 3.0, b = 0.5, bs = [1.0, 2.0] })
println (grad (fun xs -> 0.0) [1.0, 2.0])
println (grad (fun ps -> sum_float (map (fun (a, b) -> a * b) ps)) [(1.0, 2.0), (3.0, 4.0)])
println (grad (fun r -> r.layer.w * r.scale) { layer = { w = 2.0 }, scale = 5.0 })
println (grad (fun (xs : List Float) -> 1.0) [])
println (value_and_grad (fun (a, b) -> a / b) (1.0, 4.0))
println (jvp (fun (a, b) -> (a * b, a + b)) (2.0, 3.0) (1.0, 0.0))
println (jvp (fun xs -> map (fun x -> x * x) xs) [1.0, 2.0] [1.0, 0.5])
"#,
    );
    assert_eq!(
        out,
        [
            "(6.0, (3.0, 2.0))",
            "[2.0, 4.0, 6.0]",
            "{ b = 9.0, bs = [1.0, 1.0], w = 3.0 }",
            "[0.0, 0.0]",
            "[(2.0, 1.0), (4.0, 3.0)]",
            "{ layer = { w = 5.0 }, scale = 2.0 }",
            "[]",
            "(0.25, (0.25, -0.0625))",
            "((6.0, 5.0), (3.0, 1.0))",
            "([1.0, 4.0], [2.0, 2.0])",
        ]
    );
}

// ------------------------------------------------------------------ closed forms: control

#[test]
fn through_control_flow_recursion_and_closures() {
    let rows = run_numbers(
        r#"
// if reads the primal: |x| by branches, at -2 and 3
let myabs x = if x < 0.0 then -x else x
println (grad myabs (-2.0), grad myabs 3.0)
// match on a variant carrying tracked floats
type Shape = Circle Float | Rect Float Float
let area s = match s with | Circle r -> 3.0 * r * r | Rect w h -> w * h
println (grad (fun x -> area (Circle x) + area (Rect x (2.0 * x))) 1.5)
// recursion: x^n by repeated multiplication, n = 5
let rec pow x n = if n == 0 then 1.0 else x * pow x (n - 1)
println (grad (fun x -> pow x 5) 1.2)
// mutual recursion
let rec ev x n = if n == 0 then x else od (x * x) (n - 1)
and od x n = if n == 0 then x else ev (sin x) (n - 1)
println (grad (fun x -> ev x 3) 0.9)
// higher-order functions and closures
let compose f g x = f (g x)
let adder a = fun x -> x + a
println (grad (compose sin (adder 1.0)) 0.5)
println (grad (fun a -> fold_left (fun acc f -> f acc) 1.0 [adder a, (fun v -> v * a), exp]) 0.3)
// a closure capturing the tracked variable, called later
println (grad (fun x -> let k = fun y -> x * y in k 2.0 + k x) 4.0)
// reference cells
println (grad (fun x -> let r = ref 1.0 in iter (fun c -> r := !r * (x + c)) [1.0, 2.0, 3.0]; !r) 0.5)
// a while-style loop accumulating in a cell
let loop_sum x =
  let acc = ref 0.0 in
  let rec go i = if i < 10 then (acc := !acc + x * float i; go (i + 1)) in
  go 0; !acc
println (grad loop_sum 7.0)
// shift/reset inside the differentiated function: x * 1 + x * 2
println (grad (fun x -> reset (fun () -> x * shift (fun k -> k 1.0 + k 2.0))) 1.0)
// stop_gradient
println (grad (fun x -> x * stop_gradient (x * x)) 3.0)
// grad applied inside map
println (map (grad (fun x -> x * x * x)) [1.0, 2.0, 3.0])
"#,
    );
    let (x0, x1): (f64, f64) = (0.9, 0.9 * 0.9);
    // ev x 3 = od (x^2) 2 = ev (sin x^2) 1 = od ((sin x^2)^2) 0 = (sin x^2)^2
    let mutual = 2.0 * x1.sin() * x1.cos() * 2.0 * x0;
    let a: f64 = 0.3;
    // ((1 + a) * a) then exp: d/da exp(a + a^2) = exp(a + a^2)(1 + 2a)
    let hof = (a + a * a).exp() * (1.0 + 2.0 * a);
    let x: f64 = 0.5;
    let prod = (x + 2.0) * (x + 3.0) + (x + 1.0) * (x + 3.0) + (x + 1.0) * (x + 2.0);
    let want: Vec<Vec<f64>> = vec![
        vec![-1.0, 1.0],
        vec![6.0 * 1.5 + 4.0 * 1.5],
        vec![5.0 * 1.2f64.powi(4)],
        vec![mutual],
        vec![1.5f64.cos()],
        vec![hof],
        vec![2.0 + 2.0 * 4.0],
        vec![prod],
        vec![45.0],
        vec![3.0],
        vec![9.0],
        vec![3.0, 12.0, 27.0],
    ];
    assert_eq!(rows.len(), want.len(), "{rows:?}");
    for (i, (r, w)) in rows.iter().zip(&want).enumerate() {
        assert_close(r, w, 1e-12, &format!("line {}", i + 1));
    }
}

#[test]
fn escaped_tracked_values_are_plain() {
    let out = run_ok(
        r#"
let leak = ref 0.0
let g = grad (fun x -> leak := x * 2.0; x * x) 3.0
println g
println (!leak)
println (!leak * 3.0)
// used inside a later grad it is a constant
println (grad (fun y -> y * !leak) 5.0)
// and inside a nested grad, where its tag is larger than the live outer one
println (grad (fun x -> let _ = grad (fun y -> leak := y; y) 1.0 in x * !leak) 4.0)
"#,
    );
    assert_eq!(out, ["6.0", "6.0", "18.0", "6.0", "1.0"]);
}

// ------------------------------------------------------------------ a long loop

/// W1 of bench/WORKLOADS.md with N = 1,000,000: a million-step loop of scalar operations
/// under `value_and_grad`, checked against the same loop in Rust (value bit for bit, the
/// derivative by dual numbers).
#[test]
fn million_step_value_and_grad() {
    let n = 1_000_000;
    let out = run_ok(&format!(
        r#"
let f x =
  let rec go i acc = if i > {n} then acc else go (i + 1) (acc * 0.99 + sin (x * (float i * 1e-4)) * x) in
  go 1 0.0
println (value_and_grad f 0.5)
"#
    ));
    let x = 0.5f64;
    let (mut acc, mut dacc) = (0.0f64, 0.0f64);
    for i in 1..=n {
        let c = i as f64 * 1e-4;
        let s = (x * c).sin();
        dacc = dacc * 0.99 + (x * c).cos() * c * x + s;
        acc = acc * 0.99 + s * x;
    }
    let got = numbers(&out[0]);
    assert_eq!(got.len(), 2, "{out:?}");
    assert_eq!(got[0], acc, "value");
    assert!(close(got[1], dacc, 1e-9), "gradient {} vs {dacc}", got[1]);
}

// ------------------------------------------------------------------ errors

#[test]
fn grad_of_an_int_function_is_a_type_error_before_running() {
    let r = run_dp(
        r#"
println "ran"
let g = grad (fun (x : Float) -> int x) 2.0
"#,
    );
    assert!(!r.ok, "should fail");
    assert_eq!(r.stdout, "", "nothing may run before the type error");
    assert!(r.stderr.contains("type"), "{}", r.stderr);
    assert!(r.stderr.contains("Int") && r.stderr.contains("Float"), "{}", r.stderr);
}

#[test]
fn grad_at_a_string_is_a_type_error_before_running() {
    let r = run_dp(
        r#"
println "ran"
let g = grad (fun s -> float (string_length s)) "abc"
"#,
    );
    assert!(!r.ok, "should fail");
    assert_eq!(r.stdout, "", "nothing may run before the type error");
    assert!(r.stderr.contains("differentiable") && r.stderr.contains("String"), "{}", r.stderr);
}

#[test]
fn jvp_with_a_mismatched_tangent_is_an_error_not_a_crash() {
    let r = run_dp("println (jvp (fun xs -> sum_float xs) [1.0, 2.0] [1.0])\n");
    assert!(!r.ok);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    assert!(r.stderr.contains("tangent"), "{}", r.stderr);
}

// ------------------------------------------------------------------ interpreter bugs

/// BUG: resuming a multi-shot continuation that captured a running `grad` reuses the
/// adjoints the first resumption left in the argument's cells, so the second gradient is
/// the sum of both. `k 1.0` differentiates x * 1 (gradient 1), `k 2.0` differentiates x * 2
/// (gradient 2): the sum is 3, dp says 4. (`ad::backward` reads the input leaves' adjoints
/// without clearing them; the copied handler state shares those `Tracked` cells.)
#[test]
fn multi_shot_continuation_through_grad() {
    let out = run_ok(
        r#"
println (reset (fun () -> grad (fun x -> x * shift (fun k -> k 1.0 + k 2.0)) 3.0))
println (reset (fun () -> [grad (fun x -> let y = x * x in y * shift (fun k -> k 1.0 ++ k 2.0)) 3.0]))
"#,
    );
    assert_eq!(out, ["3.0", "[6.0, 12.0]"]);
}

/// BUG: a dual number that escapes its `jvp` (through a cell) keeps its tag, and since that
/// tag is larger than a live outer `grad`'s or `jvp`'s, mixing it with the outer level's
/// values produces a dual of the dead tag wrapping them: the outer handler then finds no
/// value of its own tag at the output and reports a zero derivative. y * 1.0 has derivative
/// 1 at any y; dp says 0.
#[test]
fn escaped_dual_number_is_plain() {
    let out = run_ok(
        r#"
let r = ref 0.0
println (grad (fun y -> let _ = jvp (fun x -> r := x; x) 1.0 1.0 in y * !r) 3.0)
let s = ref 0.0
println (jvp (fun y -> let _ = jvp (fun x -> s := x; x) 1.0 1.0 in y * !s) 3.0 1.0)
"#,
    );
    assert_eq!(out, ["1.0", "(3.0, 1.0)"]);
}

/// BUG: tags are ordered by creation, and the machine treats the larger tag as the inner
/// derivative. A continuation captured inside an earlier `grad` (or `jvp`) and resumed inside
/// a later one reinstalls the earlier, smaller-tagged handler *inside* the later one: the
/// operation `x * z` (x of the resumed grad, z of the enclosing one) is then recorded as if
/// z's level were innermost, the resumed grad finds no value of its tag at its output and
/// returns 0. `(!saved) z` is the gradient of x * z with respect to x, that is z, so its
/// derivative with respect to z is 1 (dp: 0.0), and that of z * (!saved) z is 2z = 10
/// (dp: 5.0). The `jvp` version: `snd ((!saved2) z)` is z, derivative 1 (dp: 0.0).
#[test]
fn resumed_continuation_nests_an_older_grad_inside_a_newer_one() {
    let out = run_ok(
        r#"
let saved = ref (fun (v : Float) -> v)
let r = reset (fun () -> grad (fun x -> x * shift (fun k -> saved := k; 0.0)) 2.0)
println ((!saved) 5.0)
println (grad (fun z -> (!saved) z) 5.0)
println (grad (fun z -> z * (!saved) z) 5.0)
let saved2 = ref (fun (v : Float) -> (v, v))
let r2 = reset (fun () -> jvp (fun x -> x * shift (fun k -> saved2 := k; (0.0, 0.0))) 2.0 1.0)
println ((!saved2) 5.0)
println (grad (fun z -> snd ((!saved2) z)) 5.0)
"#,
    );
    assert_eq!(out, ["5.0", "1.0", "10.0", "(10.0, 5.0)", "1.0"]);
}
