//! The operations the tensor library knows, as data: the unary math functions (`Un`), the
//! binary arithmetic (`Bin`) and the tensor operations (`TOp`), each with its user-facing name.
//! The interpreter's compiler, its derivative rules and both backends name operations with
//! these enums, so the list is written once.

use crate::{fmt_shape, DType, Device, TResult, TensorError};

/// The elementwise math functions (`sin x`, `exp t`, ...), on Floats and tensors. The
/// discriminants are `unary.wgsl`'s codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Un {
    Neg = 0,
    Sin = 1,
    Cos = 2,
    Tan = 3,
    Exp = 4,
    Log = 5,
    Sqrt = 6,
    Tanh = 7,
    Sigmoid = 8,
    Relu = 9,
    Abs = 10,
    Erf = 11,
    /// GELU in its tanh form, 0.5 x (1 + tanh (√(2/π) (x + 0.044715 x³))) (`nn.gelu`): one pass
    /// instead of the nine operations of the formula, each a fresh activation-sized buffer
    /// (and twice that many in the backward pass). (12–15 are unary.wgsl's internal codes.)
    Gelu = 16,
    /// GELU's derivative (its reverse and forward rules; differentiable in turn).
    GeluGrad = 17,
}

/// √(2/π) and the cubic coefficient of GELU's tanh form.
pub const GELU_C: f64 = 0.7978845608028654;
pub const GELU_A: f64 = 0.044715;

/// GELU's tanh form at x (or, with `grad`, its derivative) from t = tanh (`gelu_arg` x): the
/// caller takes the tanh (libm's for Floats, the vectorizable float32 one for tensor
/// elements), so the loop over a tensor inlines it.
#[inline(always)]
pub fn gelu<F: num_traits::Float>(x: F, t: F, grad: bool) -> F {
    let k = |v: f64| F::from(v).unwrap_or_else(F::nan);
    let (half, one) = (k(0.5), F::one());
    if !grad {
        return half * x * (one + t);
    }
    // d/dx: 0.5 (1 + t) + 0.5 x (1 - t²) c (1 + 3 a x²).
    half * (one + t) + half * x * (one - t * t) * k(GELU_C) * (one + k(3.0 * GELU_A) * x * x)
}

/// `gelu` from s = σ(2 `gelu_arg` x) instead of t = tanh (`gelu_arg` x): the same function,
/// as 1 + t = 2s and 1 − t² = 4s(1 − s). The float32 tensor loops use it: a sigmoid is one
/// exp and one division where the accurate tanh takes two of each and three polynomials
/// (the GELU was the largest elementwise cost of a Transformer step), and 2s has no
/// cancellation where t nears −1 (x ≪ 0), as 1 + t has.
#[inline(always)]
pub fn gelu_by_sigmoid<F: num_traits::Float>(x: F, s: F, grad: bool) -> F {
    let k = |v: f64| F::from(v).unwrap_or_else(F::nan);
    if !grad {
        return x * s;
    }
    s + k(2.0) * x * s * (F::one() - s) * k(GELU_C) * (F::one() + k(3.0 * GELU_A) * x * x)
}

/// The argument of GELU's tanh, √(2/π) (x + 0.044715 x³).
#[inline(always)]
pub fn gelu_arg<F: num_traits::Float>(x: F) -> F {
    let k = |v: f64| F::from(v).unwrap_or_else(F::nan);
    k(GELU_C) * x * (F::one() + k(GELU_A) * x * x)
}

impl Un {
    /// The forward definition on plain floats.
    /// (Generic so Floats compute in f64 and tensor elements natively in f32.)
    #[inline]
    pub fn eval<F: num_traits::Float>(self, x: F) -> F {
        match self {
            Un::Neg => -x,
            Un::Sin => x.sin(),
            Un::Cos => x.cos(),
            Un::Tan => x.tan(),
            Un::Exp => x.exp(),
            Un::Log => x.ln(),
            Un::Sqrt => x.sqrt(),
            Un::Tanh => x.tanh(),
            Un::Sigmoid => F::one() / (F::one() + (-x).exp()),
            // NaN propagates, as NumPy's and JAX's maximum(x, 0) (f64::max would give 0).
            Un::Relu => {
                if x.is_nan() {
                    x
                } else {
                    x.max(F::zero())
                }
            }
            Un::Abs => x.abs(),
            // num_traits has no erf: libm's (FreeBSD's, musl's), under an ulp in float64.
            // (float32 tensor elements take its `erff` instead: `Real::un`.)
            Un::Erf => match x.to_f64() {
                Some(v) => F::from(libm::erf(v)).unwrap_or_else(F::nan),
                None => F::nan(),
            },
            Un::Gelu | Un::GeluGrad => gelu(x, gelu_arg(x).tanh(), self == Un::GeluGrad),
        }
    }
}

/// Binary elementwise arithmetic (NumPy broadcasting). The discriminants are
/// `elementwise.wgsl`'s codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bin {
    Add = 0,
    Sub = 1,
    Mul = 2,
    Div = 3,
    Pow = 4,
    /// `a` where `b > 0`, else 0: a select, not a product (an infinite or NaN `a` stays out
    /// where `b` is 0). Internal: the derivative rules' masks (`TOp::Mask`).
    Mask = 5,
}

impl Bin {
    /// The operator as the user writes it, for errors.
    pub fn symbol(self) -> &'static str {
        match self {
            Bin::Add => "`+`",
            Bin::Sub => "`-`",
            Bin::Mul => "`*`",
            Bin::Div => "`/`",
            Bin::Pow => "`**`",
            Bin::Mask => "mask",
        }
    }
}

/// The elementwise operations of two tensors that compare elements (NumPy broadcasting): the
/// comparisons and `logical_and`/`logical_or`, whose results are `bool` (on the GPU, float32
/// 0/1), and `max_of`/`min_of` of tensors, in the operands' promoted dtype. The discriminants
/// are `elementwise.wgsl`'s codes, after `Bin`'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    Less = 6,
    LessEqual = 7,
    Greater = 8,
    GreaterEqual = 9,
    Equal = 10,
    NotEqual = 11,
    And = 12,
    Or = 13,
    Max = 14,
    Min = 15,
}

impl Cmp {
    /// The builtin's name, for errors.
    pub fn name(self) -> &'static str {
        match self {
            Cmp::Less => "less",
            Cmp::LessEqual => "less_equal",
            Cmp::Greater => "greater",
            Cmp::GreaterEqual => "greater_equal",
            Cmp::Equal => "equal",
            Cmp::NotEqual => "not_equal",
            Cmp::And => "logical_and",
            Cmp::Or => "logical_or",
            Cmp::Max => "max_of",
            Cmp::Min => "min_of",
        }
    }

    /// Whether the result is a truth value (every operation but `Max` and `Min`).
    pub fn gives_bool(self) -> bool {
        !matches!(self, Cmp::Max | Cmp::Min)
    }

    /// The comparison on two elements of any ordered type (NaN compares false but for `!=`,
    /// as IEEE and NumPy say); `And` and `Or` on truth values (`ops::forward` converts their
    /// operands to `bool` first, nonzero being true).
    #[inline]
    pub fn holds<T: PartialOrd>(self, x: T, y: T) -> bool {
        match self {
            Cmp::Less => x < y,
            Cmp::LessEqual => x <= y,
            Cmp::Greater => x > y,
            Cmp::GreaterEqual => x >= y,
            Cmp::Equal => x == y,
            Cmp::NotEqual => x != y,
            // Not comparisons: `logic` and `pick` define them.
            Cmp::And | Cmp::Or | Cmp::Max | Cmp::Min => false,
        }
    }

    /// `And` and `Or` on truth values.
    #[inline]
    pub fn logic(self, x: bool, y: bool) -> bool {
        if self == Cmp::And {
            x && y
        } else {
            x || y
        }
    }

    /// The larger (`Max`) or smaller (`Min`) of two elements; a NaN operand is the result, as
    /// NumPy's and JAX's `maximum` (`f64::max` would drop it).
    #[inline]
    pub fn pick<T: PartialOrd + Copy>(self, x: T, y: T) -> T {
        // An element unordered with itself is NaN.
        if x.partial_cmp(&x).is_none() {
            return x;
        }
        if y.partial_cmp(&y).is_none() {
            return y;
        }
        match self {
            Cmp::Min => {
                if y < x {
                    y
                } else {
                    x
                }
            }
            _ => {
                if y > x {
                    y
                } else {
                    x
                }
            }
        }
    }
}

/// The tensor operations: every one has a CPU and a GPU definition (`ops::forward`) and, in
/// the interpreter, a derivative rule.
#[derive(Clone, Debug, PartialEq)]
pub enum TOp {
    MatMul,
    /// All elements to a Float.
    Sum,
    Mean,
    Max,
    Logsumexp,
    Item,
    SumAxis(usize),
    MeanAxis(usize),
    /// Sum a broadcast result back down to a shape (the adjoint of broadcasting).
    SumTo(Vec<usize>),
    /// Broadcast a tensor (or Float) up to a shape.
    BroadcastTo(Vec<usize>),
    Reshape(Vec<usize>),
    Transpose,
    /// Axis i of the result is axis `perm[i]` of the operand (internal: the batched product's
    /// adjoint and `einsum`'s lowering; a layout operation, defined for every dtype).
    Permute(Vec<usize>),
    Row(usize),
    /// A zero tensor of the shape with one row set (the adjoint of `Row`).
    ScatterRow(usize, Vec<usize>),
    Softmax,
    LogSoftmax,
    /// (y, g): the adjoint of `Softmax` (`log` false: y · (g − Σ g y)) or of `LogSoftmax`
    /// (`log` true: g − exp y · Σ g) for the result y and its adjoint g, the sums along the
    /// last axis, in one pass per row (the reverse rules' fast path).
    SoftmaxGrad {
        log: bool,
    },
    /// Each vector along the last axis normalised: (x - mean) / sqrt(var + eps), with the
    /// population variance (layer norm without its gain and bias), eps the parameter.
    Normalize(f64),
    /// (x, g): the adjoint of `Normalize(eps)` at x for the result's adjoint g, in one pass
    /// per row (the reverse rule's fast path; its Jacobian is symmetric, so also the tangent).
    NormalizeGrad(f64),
    Concat(usize),
    Slice(usize, usize, usize),
    /// Zero padding around a slice (the adjoint of `Slice`): axis, offset, full shape.
    Unslice(usize, usize, Vec<usize>),
    /// (x, m): x where m > 0, else 0, for a mask m of x's shape held constant (the
    /// derivative rules' selects: a zero there stops an infinite adjoint, as in JAX).
    Mask,
    /// 1 where the input is positive, else 0 (relu's derivative; not differentiable).
    Step,
    /// The sign of each element (abs's derivative; not differentiable).
    Sign,
    /// 1 at the position of the maximum (max's derivative; not differentiable).
    ArgmaxMask,
    /// 2-D convolution (NCHW input, OCKK weights) with a stride and zero padding on every
    /// side (`conv2d_with stride padding`). Bilinear: its adjoints are convolutions again, so
    /// it is differentiable to any order.
    Conv2d(Conv),
    /// The adjoints of Conv2d given (x, w, g), bilinear in the two they read (differentiable).
    /// x and w are read for their shapes too: with a stride, g's shape does not fix x's.
    Conv2dInputGrad(Conv),
    Conv2dWeightGrad(Conv),
    /// k×k, stride-k max pooling: routes by the (locally constant) argmax, so its adjoints
    /// are pooling routes again and it is differentiable to any order.
    MaxPool2d(usize),
    /// Routes (x, g) back to each window's maximum.
    MaxPool2dGrad(usize),
    /// (x, t): t at each window's maximum of x (the forward-mode rule of max pooling).
    MaxPool2dPick(usize),
    /// Moves a tensor to a device (`to_device`); its adjoint moves back.
    ToDevice(Device),
    /// Converts the elements to a dtype (`astype`); a floating result's adjoint converts back.
    AsType(DType),
    /// (a, b): an elementwise comparison, logic or `max_of`/`min_of` (`Cmp`), broadcasting.
    Cmp(Cmp),
    /// `logical_not`: true where the element is zero (or false).
    Not,
    /// (c, a, b): `a` where `c` is true (nonzero), else `b`, all three broadcast together.
    Where,
    /// The largest element along an axis (removed); NaN propagates.
    MaxAxis(usize),
    /// The position of the first largest element along an axis (removed): int64 on the CPU,
    /// float32 on the GPU (exact below 2^24). Not differentiable.
    ArgmaxAxis(usize),
    /// Running sums along an axis (linear: its adjoint is the reversed running sum).
    Cumsum(usize),
    /// (t, indices): NumPy's `take(t, indices, axis)` with an int64 `indices` of any shape.
    Gather(usize),
    /// (g, indices): zeros of the shape with each slice of `g` added at its index along the
    /// axis (the adjoint of `Gather`, a scatter-add; linear in `g`).
    ScatterAdd(usize, Vec<usize>),
}

impl TOp {
    /// The user-facing name of an operation, for errors (the internal adjoint operations, which
    /// a program cannot call by name, show as their Rust form).
    pub fn name(&self) -> String {
        let s = match self {
            TOp::MatMul => "@",
            TOp::Sum => "sum",
            TOp::Mean => "mean",
            TOp::Max => "max",
            TOp::Logsumexp => "logsumexp",
            TOp::Item => "item",
            TOp::SumAxis(_) => "sum_axis",
            TOp::MeanAxis(_) => "mean_axis",
            TOp::Reshape(_) => "reshape",
            TOp::Transpose => "transpose",
            TOp::Row(_) => "row",
            TOp::Softmax => "softmax",
            TOp::LogSoftmax => "log_softmax",
            TOp::SoftmaxGrad { log: false } => "softmax_grad",
            TOp::SoftmaxGrad { log: true } => "log_softmax_grad",
            TOp::Normalize(_) => "normalize",
            TOp::NormalizeGrad(_) => "normalize_grad",
            TOp::Concat(_) => "concat",
            TOp::Slice(..) => "slice",
            TOp::Conv2d(c) if *c == Conv::VALID => "conv2d",
            TOp::Conv2d(_) => "conv2d_with",
            TOp::MaxPool2d(_) => "max_pool2d",
            TOp::AsType(_) => "astype",
            TOp::Cmp(c) => c.name(),
            TOp::Not => "logical_not",
            TOp::Where => "where",
            TOp::MaxAxis(_) => "max_axis",
            TOp::ArgmaxAxis(_) => "argmax_axis",
            TOp::Cumsum(_) => "cumsum",
            TOp::Gather(_) => "gather",
            other => return format!("{other:?}"),
        };
        format!("`{s}`")
    }
}

/// A convolution's stride and zero padding (the same on both spatial axes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv {
    pub stride: usize,
    pub pad: usize,
}

impl Conv {
    /// `conv2d`: stride 1, no padding.
    pub const VALID: Conv = Conv { stride: 1, pad: 0 };
}

/// The shape of `x @ y` under NumPy's `matmul` rules: a rank-1 left operand is a row (its
/// axis dropped from the result), a rank-1 right operand a column, and the axes before the
/// last two are batch axes that broadcast. The error is what a program sees.
pub fn matmul_shape(xs: &[usize], ys: &[usize]) -> TResult<Vec<usize>> {
    if xs.is_empty() || ys.is_empty() {
        return Err(TensorError::new(format!(
            "`@` multiplies matrices and vectors (rank 1 or more); got shapes {} and {}",
            fmt_shape(xs),
            fmt_shape(ys)
        )));
    }
    // The contracted axis: the last of the left operand, the first (or, for a stack of
    // matrices, the second to last) of the right.
    let (kx, ky) = (xs[xs.len() - 1], ys[ys.len().saturating_sub(2)]);
    if kx != ky {
        return Err(TensorError::new(format!(
            "matrix product of shapes {} and {}: inner dimensions differ ({kx} and {ky})",
            fmt_shape(xs),
            fmt_shape(ys)
        )));
    }
    let (bx, by) = (&xs[..xs.len().saturating_sub(2)], &ys[..ys.len().saturating_sub(2)]);
    let mut out = crate::broadcast_shape(bx, by).map_err(|_| {
        TensorError::new(format!(
            "matrix product of shapes {} and {}: the batch dimensions {} and {} do not broadcast",
            fmt_shape(xs),
            fmt_shape(ys),
            fmt_shape(bx),
            fmt_shape(by)
        ))
    })?;
    if xs.len() >= 2 {
        out.push(xs[xs.len() - 2]);
    }
    if ys.len() >= 2 {
        out.push(ys[ys.len() - 1]);
    }
    Ok(out)
}

/// An operand of `@` as a stack of matrices: (batch axes, rows, columns). A vector is one row
/// on the left (`left`) and one column on the right.
pub fn as_stack(s: &[usize], left: bool) -> (Vec<usize>, usize, usize) {
    match s.len() {
        0 => (vec![], 1, 1),
        1 if left => (vec![], 1, s[0]),
        1 => (vec![], s[0], 1),
        r => (s[..r - 2].to_vec(), s[r - 2], s[r - 1]),
    }
}

/// A pooling window's shape rule (`max_pool2d`, `avg_pool2d`).
pub fn check_pool(what: &str, k: usize, s: &[usize]) -> TResult<()> {
    if k == 0 {
        return Err(TensorError::new(format!("{what} 0: the window size must be at least 1")));
    }
    if s.len() != 4 || s[2] < k || s[3] < k {
        return Err(TensorError::new(format!(
            "{what} {k} needs an input [N, C, H, W] with H, W ≥ {k}; got shape {}",
            fmt_shape(s)
        )));
    }
    Ok(())
}

/// `what: axis a is out of range …` unless `axis` is an axis of `shape`.
fn check_axis(shape: &[usize], axis: usize, what: &str) -> TResult<()> {
    if axis >= shape.len() {
        return Err(TensorError::new(format!(
            "{what}: axis {axis} is out of range for a tensor of shape {}",
            fmt_shape(shape)
        )));
    }
    Ok(())
}

/// What a shape rule reads: anything with a shape (a tensor, or a bare shape).
pub trait Shaped {
    fn dims(&self) -> &[usize];
}

impl Shaped for [usize] {
    fn dims(&self) -> &[usize] {
        self
    }
}

impl Shaped for crate::Tensor {
    fn dims(&self) -> &[usize] {
        self.shape()
    }
}

impl TOp {
    /// The shape rule: the conditions an operation puts on its operands' shapes, with the
    /// errors a program sees when they fail. `ops::forward` checks it once, before either
    /// device runs, so the two backends cannot disagree on what is an error or on its words.
    /// (The adjoint operations' operands come from the rules, so their checks are internal.)
    pub fn check<S: Shaped + ?Sized>(&self, operands: &[&S]) -> TResult<()> {
        let s0 = || {
            operands
                .first()
                .map(|s| s.dims())
                .ok_or_else(|| TensorError::internal(format!("{} without operands", self.name())))
        };
        let need_nonempty = |what: &str| -> TResult<()> {
            if s0()?.iter().product::<usize>() == 0 {
                return Err(TensorError::new(format!("{what} of an empty tensor")));
            }
            Ok(())
        };
        match self {
            TOp::MatMul => {
                matmul_shape(s0()?, operands.get(1).map_or(&[][..], |s| s.dims()))?;
            }
            TOp::Permute(perm) => {
                let s = s0()?;
                let mut seen = vec![false; s.len()];
                if perm.len() != s.len() || !perm.iter().all(|&a| a < s.len() && !std::mem::replace(&mut seen[a], true))
                {
                    return Err(TensorError::internal(format!(
                        "permuting the axes of a tensor of shape {} by {perm:?}",
                        fmt_shape(s)
                    )));
                }
            }
            TOp::Mean => need_nonempty("mean")?,
            TOp::Max => need_nonempty("max")?,
            TOp::Item => {
                let s = s0()?;
                if s.iter().product::<usize>() != 1 {
                    return Err(TensorError::new(format!(
                        "item needs a one-element tensor, got shape {}",
                        fmt_shape(s)
                    )));
                }
            }
            TOp::SumAxis(a) => check_axis(s0()?, *a, "sum_axis")?,
            // As `mean` of an empty tensor: no mean to give (NumPy's NaN and a warning).
            TOp::MeanAxis(a) => {
                let s = s0()?;
                check_axis(s, *a, "mean_axis")?;
                if s[*a] == 0 {
                    return Err(TensorError::new(format!("mean_axis: axis {a} of shape {} is empty", fmt_shape(s))));
                }
            }
            TOp::Reshape(to) => {
                let from = s0()?;
                let (m, n): (usize, usize) = (from.iter().product(), to.iter().product());
                if m != n {
                    return Err(TensorError::new(format!(
                        "cannot reshape a tensor of shape {} ({m} elements) to {} ({n} elements)",
                        fmt_shape(from),
                        fmt_shape(to)
                    )));
                }
            }
            TOp::Row(i) => {
                let s = s0()?;
                if s.is_empty() || *i >= s[0] {
                    return Err(TensorError::new(format!(
                        "row {i} is out of range for a tensor of shape {}",
                        fmt_shape(s)
                    )));
                }
            }
            TOp::ScatterRow(i, shape) => {
                let g = s0()?;
                if shape.is_empty() || *i >= shape[0] || g[..] != shape[1..] {
                    return Err(TensorError::internal(format!(
                        "scattering a row of shape {} into row {i} of {}",
                        fmt_shape(g),
                        fmt_shape(shape)
                    )));
                }
            }
            TOp::Softmax | TOp::LogSoftmax => {
                if s0()?.is_empty() {
                    return Err(TensorError::new("softmax of a scalar tensor (it needs at least one axis)"));
                }
            }
            TOp::SoftmaxGrad { .. } => {
                if s0()?.is_empty() || operands.get(1).map(|g| g.dims()) != Some(s0()?) {
                    return Err(TensorError::internal("softmax_grad of a scalar or of operands of two shapes"));
                }
            }
            TOp::Normalize(_) | TOp::NormalizeGrad(_) => {
                if s0()?.last().is_none_or(|&n| n == 0) {
                    return Err(TensorError::new(
                        "normalize needs a tensor with at least one axis, the last one not empty",
                    ));
                }
                if matches!(self, TOp::NormalizeGrad(_)) && operands.get(1).map(|g| g.dims()) != Some(s0()?) {
                    return Err(TensorError::internal("normalize_grad of operands of two shapes"));
                }
            }
            TOp::Concat(axis) => {
                let Some(first) = operands.first().map(|s| s.dims()) else {
                    return Err(TensorError::new("concat of an empty list"));
                };
                check_axis(first, *axis, "concat")?;
                let agree = operands.iter().map(|s| s.dims()).all(|s| {
                    s.len() == first.len()
                        && s.iter().zip(first.iter()).enumerate().all(|(d, (p, q))| d == *axis || p == q)
                });
                if !agree {
                    return Err(TensorError::new(format!(
                        "concat along axis {axis}: shapes {} do not agree on the other axes",
                        operands.iter().map(|s| fmt_shape(s.dims())).collect::<Vec<_>>().join(", ")
                    )));
                }
            }
            TOp::Slice(axis, lo, hi) => {
                let s = s0()?;
                check_axis(s, *axis, "slice")?;
                if lo > hi || *hi > s[*axis] {
                    return Err(TensorError::new(format!(
                        "slice {lo}..{hi} on axis {axis} is out of range for shape {}",
                        fmt_shape(s)
                    )));
                }
            }
            TOp::Conv2d(cv) | TOp::Conv2dInputGrad(cv) | TOp::Conv2dWeightGrad(cv) => {
                conv_dims(s0()?, operands.get(1).map_or(&[][..], |s| s.dims()), *cv)?;
            }
            TOp::MaxAxis(a) | TOp::ArgmaxAxis(a) => {
                let s = s0()?;
                check_axis(s, *a, &self.name().replace('`', ""))?;
                if s[*a] == 0 {
                    return Err(TensorError::new(format!(
                        "{}: axis {a} of shape {} is empty",
                        self.name().replace('`', ""),
                        fmt_shape(s)
                    )));
                }
            }
            TOp::Cumsum(a) => check_axis(s0()?, *a, "cumsum")?,
            TOp::Gather(a) => check_axis(s0()?, *a, "gather")?,
            TOp::ScatterAdd(a, shape) => {
                if *a >= shape.len() {
                    return Err(TensorError::internal("a scatter-add along a missing axis"));
                }
            }
            TOp::Cmp(_) | TOp::Where => {
                let mut shape = s0()?.to_vec();
                for s in &operands[1..] {
                    shape = crate::broadcast_shape(&shape, s.dims())
                        .map_err(|e| TensorError::new(format!("{}: {}", self.name(), e.msg)))?;
                }
            }
            TOp::MaxPool2d(k) | TOp::MaxPool2dGrad(k) | TOp::MaxPool2dPick(k) => check_pool("max_pool2d", *k, s0()?)?,
            // Broadcasting and its adjoint report their own shapes where they fail (the
            // backends derive the strides as they go); the rest accept any shape.
            TOp::Sum
            | TOp::Logsumexp
            | TOp::SumTo(_)
            | TOp::BroadcastTo(_)
            | TOp::Transpose
            | TOp::Unslice(..)
            | TOp::Mask
            | TOp::Step
            | TOp::Sign
            | TOp::ArgmaxMask
            | TOp::ToDevice(_)
            | TOp::AsType(_)
            | TOp::Not => {}
        }
        Ok(())
    }
}

/// Dimensions of a 2-D convolution, checked.
pub struct ConvDims {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub o: usize,
    pub kh: usize,
    pub kw: usize,
    pub oh: usize,
    pub ow: usize,
    pub stride: usize,
    pub pad: usize,
}

/// `conv2d`'s shape rule, and the sizes both backends' kernels loop over: output position
/// (y, x) reads input rows y·stride − pad + i (outside the input: zero).
pub fn conv_dims(x: &[usize], k: &[usize], cv: Conv) -> TResult<ConvDims> {
    let what = if cv == Conv::VALID { "conv2d".to_string() } else { format!("conv2d_with {} {}", cv.stride, cv.pad) };
    if cv.stride == 0 {
        return Err(TensorError::new(format!("{what}: the stride must be at least 1")));
    }
    if x.len() != 4 || k.len() != 4 {
        return Err(TensorError::new(format!(
            "{what} takes an input [N, C, H, W] and weights [O, C, KH, KW]; got shapes {} and {}",
            fmt_shape(x),
            fmt_shape(k)
        )));
    }
    let (ph, pw) = (x[2] + 2 * cv.pad, x[3] + 2 * cv.pad);
    if x[1] != k[1] || k[2] > ph || k[3] > pw || k[2] == 0 || k[3] == 0 {
        let padded = if cv.pad > 0 { format!(" (padded to {ph} × {pw})") } else { String::new() };
        return Err(TensorError::new(format!(
            "{what}: input {}{padded} and weights {} do not fit",
            fmt_shape(x),
            fmt_shape(k)
        )));
    }
    Ok(ConvDims {
        n: x[0],
        c: x[1],
        h: x[2],
        w: x[3],
        o: k[0],
        kh: k[2],
        kw: k[3],
        oh: (ph - k[2]) / cv.stride + 1,
        ow: (pw - k[3]) / cv.stride + 1,
        stride: cv.stride,
        pad: cv.pad,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gelu_and_its_derivative_in_float64_and_float32() {
        // NumPy: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))).
        let xs: [f64; 7] = [-3.0, -1.0, -0.5, 0.0, 0.3, 1.0, 2.5];
        let want = [
            -0.0036373920817729943,
            -0.15880800939172324,
            -0.15428599017485606,
            0.0,
            0.18537092354275922,
            0.8411919906082768,
            2.484915733910001,
        ];
        for (&x, &w) in xs.iter().zip(&want) {
            assert!((Un::Gelu.eval(x) - w).abs() < 1e-15, "gelu {x}");
            let f32_value = <f32 as crate::Real>::un(Un::Gelu, x as f32);
            assert!((f64::from(f32_value) - w).abs() < 1e-6, "float32 gelu {x}");
            // The derivative against central differences.
            let h = 1e-6;
            let fd = (Un::Gelu.eval(x + h) - Un::Gelu.eval(x - h)) / (2.0 * h);
            assert!((Un::GeluGrad.eval(x) - fd).abs() < 1e-8, "gelu' {x}");
            let d32 = <f32 as crate::Real>::un(Un::GeluGrad, x as f32);
            assert!((f64::from(d32) - fd).abs() < 1e-6, "float32 gelu' {x}");
        }
    }

    fn fits(op: TOp, shapes: &[&[usize]]) -> bool {
        op.check(shapes).is_ok()
    }

    fn err(op: TOp, shapes: &[&[usize]]) -> String {
        op.check(shapes).expect_err("the rule should fail").msg
    }

    #[test]
    fn axis_errors_name_their_operation() {
        // The GPU once said `sum_axis` here: the rule is now the one place that says it.
        assert_eq!(err(TOp::MeanAxis(2), &[&[2, 3]]), "mean_axis: axis 2 is out of range for a tensor of shape [2, 3]");
        assert_eq!(err(TOp::SumAxis(2), &[&[2, 3]]), "sum_axis: axis 2 is out of range for a tensor of shape [2, 3]");
        assert_eq!(err(TOp::Concat(1), &[&[2]]), "concat: axis 1 is out of range for a tensor of shape [2]");
    }

    #[test]
    fn shape_rules_accept_what_fits_and_say_why_not() {
        assert!(fits(TOp::MatMul, &[&[2, 3], &[3]]));
        assert_eq!(
            err(TOp::MatMul, &[&[2, 3], &[2]]),
            "matrix product of shapes [2, 3] and [2]: inner dimensions differ (3 and 2)"
        );
        assert_eq!(matmul_shape(&[2, 3, 4], &[4]).unwrap(), vec![2, 3]);
        assert_eq!(matmul_shape(&[4], &[2, 4, 5]).unwrap(), vec![2, 5]);
        assert_eq!(matmul_shape(&[2, 1, 3, 4], &[5, 4, 6]).unwrap(), vec![2, 5, 3, 6]);
        assert_eq!(
            err(TOp::MatMul, &[&[2, 3, 4], &[3, 4, 5]]),
            "matrix product of shapes [2, 3, 4] and [3, 4, 5]: the batch dimensions [2] and [3] do not broadcast"
        );
        assert_eq!(
            err(TOp::MatMul, &[&[], &[4]]),
            "`@` multiplies matrices and vectors (rank 1 or more); got shapes [] and [4]"
        );
        assert!(fits(TOp::Concat(0), &[&[2, 3], &[1, 3]]));
        assert_eq!(
            err(TOp::Concat(0), &[&[2, 3], &[1, 4]]),
            "concat along axis 0: shapes [2, 3], [1, 4] do not agree on the other axes"
        );
        assert_eq!(err(TOp::Concat(0), &[]), "concat of an empty list");
        assert_eq!(
            err(TOp::Reshape(vec![4]), &[&[2, 3]]),
            "cannot reshape a tensor of shape [2, 3] (6 elements) to [4] (4 elements)"
        );
        assert_eq!(err(TOp::Mean, &[&[0]]), "mean of an empty tensor");
        assert_eq!(err(TOp::MeanAxis(0), &[&[0, 3]]), "mean_axis: axis 0 of shape [0, 3] is empty");
        assert!(fits(TOp::MaxPool2d(2), &[&[1, 1, 4, 4]]));
        assert!(!fits(TOp::MaxPool2d(0), &[&[1, 1, 4, 4]]));
        assert!(fits(TOp::Conv2d(Conv::VALID), &[&[1, 2, 5, 5], &[3, 2, 3, 3]]));
        assert!(!fits(TOp::Conv2d(Conv::VALID), &[&[1, 2, 5, 5], &[3, 1, 3, 3]]));
        let d = conv_dims(&[1, 2, 5, 7], &[3, 2, 3, 3], Conv { stride: 2, pad: 1 }).unwrap();
        // (5 + 2 - 3) / 2 + 1 and (7 + 2 - 3) / 2 + 1, as PyTorch's formula gives.
        assert_eq!((d.oh, d.ow), (3, 4));
        assert_eq!(
            err(TOp::Conv2d(Conv { stride: 1, pad: 1 }), &[&[1, 1, 2, 2], &[1, 1, 5, 5]]),
            "conv2d_with 1 1: input [1, 1, 2, 2] (padded to 4 × 4) and weights [1, 1, 5, 5] do not fit"
        );
        assert_eq!(
            err(TOp::Conv2d(Conv { stride: 0, pad: 0 }), &[&[1, 1, 2, 2], &[1, 1, 1, 1]]),
            "conv2d_with 0 0: the stride must be at least 1"
        );
    }
}
