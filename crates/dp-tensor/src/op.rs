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
    Row(usize),
    /// A zero tensor of the shape with one row set (the adjoint of `Row`).
    ScatterRow(usize, Vec<usize>),
    Softmax,
    LogSoftmax,
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
    /// Valid, stride-1 2-D convolution (NCHW input, OCKK weights). Bilinear: its adjoints are
    /// convolutions again, so it is differentiable to any order.
    Conv2d,
    /// The adjoints of Conv2d given (x, w, g), bilinear in the two they read (differentiable).
    Conv2dInputGrad,
    Conv2dWeightGrad,
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
            TOp::Concat(_) => "concat",
            TOp::Slice(..) => "slice",
            TOp::Conv2d => "conv2d",
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
                let (xs, ys) = (s0()?, operands.get(1).map_or(&[][..], |s| s.dims()));
                if !(1..=2).contains(&xs.len()) || !(1..=2).contains(&ys.len()) {
                    return Err(TensorError::new(format!(
                        "`@` multiplies matrices and vectors; got shapes {} and {}",
                        fmt_shape(xs),
                        fmt_shape(ys)
                    )));
                }
                // The contracted axis: the last of the left operand, the first of the right.
                if xs[xs.len() - 1] != ys[0] {
                    return Err(TensorError::new(format!(
                        "matrix product of shapes {} and {}: inner dimensions differ",
                        fmt_shape(xs),
                        fmt_shape(ys)
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
            TOp::MeanAxis(a) => check_axis(s0()?, *a, "mean_axis")?,
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
            TOp::Conv2d | TOp::Conv2dInputGrad | TOp::Conv2dWeightGrad => {
                conv_dims(s0()?, operands.get(1).map_or(&[][..], |s| s.dims()))?;
            }
            TOp::MaxPool2d(k) | TOp::MaxPool2dGrad(k) | TOp::MaxPool2dPick(k) => {
                let s = s0()?;
                if s.len() != 4 || *k == 0 || s[2] < *k || s[3] < *k {
                    return Err(TensorError::new(format!(
                        "max_pool2d {k} needs an input [N, C, H, W] with H, W ≥ {k}; got shape {}",
                        fmt_shape(s)
                    )));
                }
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
}

/// `conv2d`'s shape rule, and the sizes both backends' kernels loop over.
pub fn conv_dims(x: &[usize], k: &[usize]) -> TResult<ConvDims> {
    if x.len() != 4 || k.len() != 4 {
        return Err(TensorError::new(format!(
            "conv2d takes an input [N, C, H, W] and weights [O, C, KH, KW]; got shapes {} and {}",
            fmt_shape(x),
            fmt_shape(k)
        )));
    }
    if x[1] != k[1] || k[2] > x[2] || k[3] > x[3] {
        return Err(TensorError::new(format!(
            "conv2d: input {} and weights {} do not fit",
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
        oh: x[2] - k[2] + 1,
        ow: x[3] - k[3] + 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
            "matrix product of shapes [2, 3] and [2]: inner dimensions differ"
        );
        assert_eq!(
            err(TOp::MatMul, &[&[2, 3, 4], &[4]]),
            "`@` multiplies matrices and vectors; got shapes [2, 3, 4] and [4]"
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
        assert!(fits(TOp::MaxPool2d(2), &[&[1, 1, 4, 4]]));
        assert!(!fits(TOp::MaxPool2d(0), &[&[1, 1, 4, 4]]));
        assert!(fits(TOp::Conv2d, &[&[1, 2, 5, 5], &[3, 2, 3, 3]]));
        assert!(!fits(TOp::Conv2d, &[&[1, 2, 5, 5], &[3, 1, 3, 3]]));
    }
}
