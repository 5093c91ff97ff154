//! The random programs: scalar expressions (float64) and tensor compositions (float32), each
//! printed twice — as dp and as the equivalent JAX — from one tree, so the two cannot drift.

use crate::gen::rng::Rng;

/// Scalar math functions: (dp builtin, JAX function).
const UNARY: &[(&str, &str)] = &[
    ("sin", "jnp.sin"),
    ("cos", "jnp.cos"),
    ("tan", "jnp.tan"),
    ("exp", "jnp.exp"),
    ("log", "jnp.log"),
    ("sqrt", "jnp.sqrt"),
    ("tanh", "jnp.tanh"),
    ("sigmoid", "jax.nn.sigmoid"),
    ("relu", "jax.nn.relu"),
    ("abs", "jnp.abs"),
];

const BINARY: &[&str] = &["+", "-", "*", "/"];

/// Inputs at the edges of the domain, drawn now and then in place of an ordinary number.
const EDGES: &[f64] = &[f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0];

/// A number as a dp literal and as a Python one (both read back to the same f64).
pub fn lit(x: f64, dp: bool) -> String {
    match (x, dp) {
        (x, true) if x.is_nan() => "nan".into(),
        (x, false) if x.is_nan() => "jnp.nan".into(),
        (x, true) if x == f64::INFINITY => "infinity".into(),
        (x, true) if x == f64::NEG_INFINITY => "(-infinity)".into(),
        (x, false) if x.is_infinite() => if x > 0.0 { "jnp.inf" } else { "(-jnp.inf)" }.into(),
        (x, _) if x.is_sign_negative() => format!("(-{:?})", -x),
        (x, _) => format!("{x:?}"),
    }
}

/// An ordinary constant or input: two decimals in [-3, 3], exact in both languages' parsers.
fn number(rng: &mut Rng) -> f64 {
    rng.range(-300, 300) as f64 / 100.0
}

/// A point of the domain: ordinary, or (one time in `edge`) NaN, ±inf or a signed zero.
pub fn point(rng: &mut Rng, edge: f64) -> f64 {
    if rng.chance(edge) {
        *rng.pick(EDGES)
    } else {
        number(rng)
    }
}

pub enum S {
    Var(usize),
    Const(f64),
    Un(usize, Box<S>),
    Bin(usize, Box<S>, Box<S>),
    /// e ** c for a constant integral or half exponent.
    PowC(Box<S>, f64),
    /// c ** e for a constant c > 0.
    CPow(f64, Box<S>),
    /// if a < b then c else d (control flow on values).
    If(Box<[S; 4]>),
    /// n steps of acc := body(acc, …) from init; the body binds one new variable.
    Loop(usize, Box<S>, Box<S>),
    /// The derivative of body (binding one new variable) at a point, inside the loss.
    Grad(Box<S>, Box<S>),
    /// The tangent of body at a point along a constant.
    Jvp(Box<S>, Box<S>, f64),
}

pub struct Gen<'a> {
    pub rng: &'a mut Rng,
    /// Variables in scope (v0 is the function's argument).
    pub vars: usize,
    pub depth: usize,
    /// Whether the tensor compositions may use the selects and value-reading builtins that
    /// batch per example (`where`, `max_of`/`min_of` and `tree_clip` on Floats, `argmax`): the
    /// vmap cases', at ordinary points.
    pub batch: bool,
}

impl Gen<'_> {
    pub fn scalar(&mut self) -> S {
        // The root is never a leaf: a constant or the identity tests nothing.
        let leaf = self.depth >= 5 || (self.depth > 0 && self.rng.chance(0.15 + 0.1 * self.depth as f64));
        if leaf {
            return if self.rng.chance(0.7) { S::Var(self.rng.below(self.vars)) } else { S::Const(number(self.rng)) };
        }
        self.depth += 1;
        let weights = [3.0, 4.0, 1.0, 0.6, 0.8, 0.4, 0.5, 0.5];
        let e = match self.rng.weighted(&weights) {
            0 => S::Un(self.rng.below(UNARY.len()), Box::new(self.scalar())),
            1 => S::Bin(self.rng.below(BINARY.len()), Box::new(self.scalar()), Box::new(self.scalar())),
            2 => S::PowC(Box::new(self.scalar()), *self.rng.pick(&[2.0, 3.0, 0.5, -1.0, 0.0, 1.0])),
            3 => S::CPow(*self.rng.pick(&[2.0, 0.5, 1.5]), Box::new(self.scalar())),
            4 => S::If(Box::new([self.scalar(), self.scalar(), self.scalar(), self.scalar()])),
            5 => {
                let n = self.rng.range(1, 3) as usize;
                let init = self.scalar();
                let body = self.bind(|g| g.scalar());
                S::Loop(n, Box::new(body), Box::new(init))
            }
            6 => {
                let at = self.scalar();
                S::Grad(Box::new(self.bind(|g| g.scalar())), Box::new(at))
            }
            _ => {
                let at = self.scalar();
                S::Jvp(Box::new(self.bind(|g| g.scalar())), Box::new(at), number(self.rng))
            }
        };
        self.depth -= 1;
        e
    }

    /// Generates with one more variable in scope (the newest is the binder's).
    fn bind(&mut self, f: impl FnOnce(&mut Self) -> S) -> S {
        self.vars += 1;
        let e = f(self);
        self.vars -= 1;
        e
    }
}

/// Prints a scalar expression; `vars` is the number of variables bound outside it.
pub fn print_scalar(e: &S, dp: bool, vars: usize) -> String {
    print_scalar_in(e, dp, Branch::Python, vars)
}

/// How JAX code spells dp's `if`: a Python conditional (control flow, as dp's `if` is: the
/// branch not taken is not traced, and a branch that does not depend on the input carries no
/// tangent), or `lax.cond`, which `jax.checkpoint` needs (it traces its function abstractly)
/// but which gives a constant branch a concrete zero tangent, so there a NaN partial after
/// it makes the tangent NaN where dp's is 0.
#[derive(Clone, Copy, PartialEq)]
pub enum Branch {
    Python,
    LaxCond,
}

pub fn print_scalar_in(e: &S, dp: bool, branch: Branch, vars: usize) -> String {
    let p = |e: &S| print_scalar_in(e, dp, branch, vars);
    let inner = |e: &S| print_scalar_in(e, dp, branch, vars + 1);
    let v = format!("v{vars}");
    match e {
        S::Var(i) => format!("v{i}"),
        S::Const(c) => lit(*c, dp),
        S::Un(k, a) => {
            let (d, j) = UNARY[*k];
            if dp {
                format!("({d} {})", p(a))
            } else {
                format!("{j}({})", p(a))
            }
        }
        S::Bin(k, a, b) => format!("({} {} {})", p(a), BINARY[*k], p(b)),
        // JAX: an integral exponent as a Python int is lax.integer_pow (whose rule has no
        // 0 · inf at 0; dp's `**` selects the same zero), a half as a float.
        S::PowC(a, c) if !dp && c.fract() == 0.0 => format!("({} ** {})", p(a), *c as i64),
        S::PowC(a, c) if dp => format!("({} ** {})", p(a), lit(*c, dp)),
        // Through jnp: Python's own `**` makes a complex number of a negative constant ** 0.5.
        S::PowC(a, c) => format!("jnp.power(_f({}), {})", p(a), lit(*c, dp)),
        S::CPow(c, a) => format!("({} ** {})", lit(*c, dp), p(a)),
        S::If(q) => {
            let [a, b, c, d] = &**q;
            if dp {
                format!("(if {} < {} then {} else {})", p(a), p(b), p(c), p(d))
            } else if branch == Branch::Python {
                format!("(_f({}) if {} < {} else _f({}))", p(c), p(a), p(b), p(d))
            } else {
                format!("jax.lax.cond({} < {}, lambda: _f({}), lambda: _f({}))", p(a), p(b), p(c), p(d))
            }
        }
        S::Loop(n, body, init) => {
            if dp {
                format!(
                    "(let rec loop{vars} i {v} = if i == 0 then {v} else loop{vars} (i - 1) {} in loop{vars} {n} {})",
                    inner(body),
                    p(init)
                )
            } else {
                format!("functools.reduce(lambda {v}, _: {}, range({n}), {})", inner(body), p(init))
            }
        }
        S::Grad(body, at) => {
            if dp {
                format!("(grad (fun {v} -> {}) {})", inner(body), p(at))
            } else {
                format!("jax.grad(lambda {v}: _f({}))(_f({}))", inner(body), p(at))
            }
        }
        S::Jvp(body, at, t) => {
            if dp {
                format!("(snd (jvp (fun {v} -> {}) {} {}))", inner(body), p(at), lit(*t, dp))
            } else {
                format!("jax.jvp(lambda {v}: _f({}), (_f({}),), (_f({}),))[1]", inner(body), p(at), lit(*t, dp))
            }
        }
    }
}

/// Tensor compositions over the parameter `t` (shape [2, 3]), float32.
pub enum T {
    Param,
    Const(Vec<f64>),
    Un(usize, Box<T>),
    Bin(usize, Box<T>, Box<T>),
    /// t op c (or c op t when the flag is set).
    Scalar(usize, Box<T>, f64, bool),
    PowC(Box<T>, f64),
    /// t @ c for a constant [3, 3] matrix.
    MatMul(Box<T>, Vec<f64>),
    Softmax(Box<T>),
    LogSoftmax(Box<T>),
    Clip(Box<T>, f64, f64),
    /// reshape (tensor (to_list t)) [2, 3]: through the list conversions and back.
    Rebuild(Box<T>),
    /// Rows 1..3 of concat 0 [a, b]: the second row of a over the first of b.
    ConcatSlice(Box<T>, Box<T>),
    /// t * full [2, 3] (mean t): a reduction broadcast back.
    FullMean(Box<T>),
    /// transpose (transpose t).
    Transpose2(Box<T>),
    /// where (greater a b) a (b * 0.5): a select with a mask computed from the data.
    Select(Box<T>, Box<T>),
    /// t * max_of (mean t) 0.2 + min_of (sum t) 1.0: picks between Floats (dp's convention,
    /// spelled out on the JAX side).
    FloatPick(Box<T>),
    /// t * tree_clip (-1.0) 1.0 (mean t): a clipped Float.
    FloatClip(Box<T>),
    /// t * float (argmax t): an Int read from the data.
    ArgWeight(Box<T>),
}

/// The Floats of a constant tensor of `n` elements.
pub fn values(rng: &mut Rng, n: usize, edge: f64) -> Vec<f64> {
    (0..n).map(|_| point(rng, edge)).collect()
}

impl Gen<'_> {
    pub fn tensor(&mut self) -> T {
        if self.depth >= 4 || (self.depth > 0 && self.rng.chance(0.15 + 0.15 * self.depth as f64)) {
            return if self.rng.chance(0.8) { T::Param } else { T::Const(values(self.rng, 6, 0.0)) };
        }
        self.depth += 1;
        let weights = [3.0, 2.0, 1.5, 0.7, 1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.4, 0.4, 0.5, 0.5, 0.5, 0.3];
        let n = if self.batch { weights.len() } else { 12 };
        let e = match self.rng.weighted(&weights[..n]) {
            0 => T::Un(self.rng.below(UNARY.len()), Box::new(self.tensor())),
            1 => T::Bin(self.rng.below(BINARY.len()), Box::new(self.tensor()), Box::new(self.tensor())),
            2 => {
                T::Scalar(self.rng.below(BINARY.len()), Box::new(self.tensor()), number(self.rng), self.rng.chance(0.5))
            }
            3 => T::PowC(Box::new(self.tensor()), *self.rng.pick(&[2.0, 3.0, 0.5])),
            4 => T::MatMul(Box::new(self.tensor()), values(self.rng, 9, 0.0)),
            5 => T::Softmax(Box::new(self.tensor())),
            6 => T::LogSoftmax(Box::new(self.tensor())),
            7 => {
                let (a, b) = (number(self.rng), number(self.rng));
                T::Clip(Box::new(self.tensor()), a.min(b), a.max(b))
            }
            8 => T::Rebuild(Box::new(self.tensor())),
            9 => T::ConcatSlice(Box::new(self.tensor()), Box::new(self.tensor())),
            10 => T::FullMean(Box::new(self.tensor())),
            11 => T::Transpose2(Box::new(self.tensor())),
            12 => T::Select(Box::new(self.tensor()), Box::new(self.tensor())),
            13 => T::FloatPick(Box::new(self.tensor())),
            14 => T::FloatClip(Box::new(self.tensor())),
            _ => T::ArgWeight(Box::new(self.tensor())),
        };
        self.depth -= 1;
        e
    }
}

/// A constant tensor of `shape` (2-D) as a dp literal or a float32 JAX array.
pub fn tensor_lit(v: &[f64], cols: usize, dp: bool) -> String {
    let rows: Vec<String> =
        v.chunks(cols).map(|r| format!("[{}]", r.iter().map(|x| lit(*x, dp)).collect::<Vec<_>>().join(", "))).collect();
    if dp {
        format!("(tensor [{}])", rows.join(", "))
    } else {
        format!("jnp.array([{}], dtype=jnp.float32)", rows.join(", "))
    }
}

pub fn print_tensor(e: &T, dp: bool) -> String {
    let p = |e: &T| print_tensor(e, dp);
    match e {
        T::Param => "t".into(),
        T::Const(v) => tensor_lit(v, 3, dp),
        T::Un(k, a) => {
            let (d, j) = UNARY[*k];
            if dp {
                format!("({d} {})", p(a))
            } else {
                format!("{j}({})", p(a))
            }
        }
        T::Bin(k, a, b) => format!("({} {} {})", p(a), BINARY[*k], p(b)),
        T::Scalar(k, a, c, left) if *left => format!("({} {} {})", lit(*c, dp), BINARY[*k], p(a)),
        T::Scalar(k, a, c, _) => format!("({} {} {})", p(a), BINARY[*k], lit(*c, dp)),
        T::PowC(a, c) if !dp && c.fract() == 0.0 => format!("({} ** {})", p(a), *c as i64),
        T::PowC(a, c) => format!("({} ** {})", p(a), lit(*c, dp)),
        T::MatMul(a, c) => format!("({} @ {})", p(a), tensor_lit(c, 3, dp)),
        T::Softmax(a) if dp => format!("(softmax {})", p(a)),
        T::Softmax(a) => format!("jax.nn.softmax({}, axis=-1)", p(a)),
        T::LogSoftmax(a) if dp => format!("(log_softmax {})", p(a)),
        T::LogSoftmax(a) => format!("jax.nn.log_softmax({}, axis=-1)", p(a)),
        T::Clip(a, lo, hi) if dp => format!("(tree_clip {} {} {})", lit(*lo, dp), lit(*hi, dp), p(a)),
        T::Clip(a, lo, hi) => format!("jnp.clip({}, {}, {})", p(a), lit(*lo, dp), lit(*hi, dp)),
        T::Rebuild(a) if dp => format!("(reshape (tensor (to_list {})) [2, 3])", p(a)),
        T::Rebuild(a) => format!("jnp.reshape(jnp.stack(list(jnp.ravel({}))), (2, 3))", p(a)),
        T::ConcatSlice(a, b) if dp => format!("(slice (concat 0 [{}, {}]) 0 1 3)", p(a), p(b)),
        T::ConcatSlice(a, b) => format!("jnp.concatenate([{}, {}], axis=0)[1:3]", p(a), p(b)),
        T::FullMean(a) if dp => format!("(let m = {} in m * full [2, 3] (mean m))", p(a)),
        T::FullMean(a) => format!("(lambda m: m * jnp.full((2, 3), jnp.mean(m)))({})", p(a)),
        T::Transpose2(a) if dp => format!("(transpose (transpose {}))", p(a)),
        T::Transpose2(a) => format!("jnp.transpose(jnp.transpose({}))", p(a)),
        T::Select(a, b) if dp => format!("(where (greater {0} {1}) {0} ({1} * 0.5))", p(a), p(b)),
        T::Select(a, b) => format!("jnp.where({0} > {1}, {0}, {1} * 0.5)", p(a), p(b)),
        T::FloatPick(a) if dp => format!("({0} * max_of (mean {0}) 0.2 + min_of (sum {0}) 1.0)", p(a)),
        // dp's `max_of` of Floats keeps `a` when a >= b, else b (so a NaN mean gives 0.2, and a
        // tie's derivative goes to `a`): jnp.where spells that, where jnp.maximum would not.
        T::FloatPick(a) => format!(
            "(lambda m, s: {0} * jnp.where(m >= 0.2, m, 0.2) + jnp.where(s <= 1.0, s, 1.0))(jnp.mean({0}), jnp.sum({0}))",
            p(a)
        ),
        T::FloatClip(a) if dp => format!("({0} * tree_clip (-1.0) 1.0 (mean {0}))", p(a)),
        T::FloatClip(a) => format!("({0} * jnp.clip(jnp.mean({0}), -1.0, 1.0))", p(a)),
        T::ArgWeight(a) if dp => format!("({0} * float (argmax {0}))", p(a)),
        T::ArgWeight(a) => format!("({0} * jnp.argmax({0}))", p(a)),
    }
}

/// The reductions that end a tensor case: (dp, JAX).
pub const REDUCE: &[(&str, &str)] =
    &[("sum", "jnp.sum"), ("mean", "jnp.mean"), ("max", "jnp.max"), ("logsumexp", "jax.scipy.special.logsumexp")];

/// Whether `max` may end `e` without ties (the one convention dp and JAX do not share, see
/// mod.rs): relu, abs and clip make equal elements routinely, anywhere below.
pub fn tie_free(e: &T) -> bool {
    match e {
        T::Param | T::Const(_) => true,
        T::Un(8 | 9, _) | T::Clip(..) | T::Select(..) | T::FloatPick(_) | T::FloatClip(_) | T::ArgWeight(_) => false,
        T::Un(_, a) | T::Scalar(_, a, ..) | T::PowC(a, _) | T::MatMul(a, _) | T::Softmax(a) => tie_free(a),
        T::LogSoftmax(a) | T::Rebuild(a) | T::FullMean(a) | T::Transpose2(a) => tie_free(a),
        T::Bin(_, a, b) | T::ConcatSlice(a, b) => tie_free(a) && tie_free(b),
    }
}
