//! The operation table (`tensor::ops::TOp`) on GPU operands: each operation's kernel, and the
//! explicit CPU fallback for those without one (read the operands back, run the CPU
//! definition, upload the result). Every operation in the table has a kernel today; the
//! fallback catches operations added to the table later. `item` reads back by nature (it
//! returns a host value); `argmax` reads back only its index (`kernels::argmax_index`).

use super::kernels::{self as k, BinOp, Fold, UnOp};
use super::GpuTensor;
use crate::ad::rules::Un;
use crate::core::Prim;
use crate::eval::machine::{FResult, Fault};
use crate::eval::value::Value;
use crate::tensor::ops::TOp;
use crate::tensor::{fmt_shape, Device, Tensor};
use std::rc::Rc;

fn wrap(g: GpuTensor) -> Value {
    Value::Tensor(Rc::new(Tensor::from_gpu(g)))
}

/// The error for operands on two devices, naming both.
pub fn mixed_devices(what: &str, a: Device, b: Device) -> Fault {
    Fault::new(format!("{what}: the operands are on two devices ({} and {})", a.name(), b.name()))
        .help("move one with `to_device \"gpu\" t` or `to_device \"cpu\" t`")
}

/// The user-facing name of an operation, for errors.
fn op_name(op: &TOp) -> String {
    let s = match op {
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
        other => return format!("{other:?}"),
    };
    format!("`{s}`")
}

fn bin_op(p: Prim) -> FResult<(BinOp, &'static str)> {
    Ok(match p {
        Prim::Add => (BinOp::Add, "`+`"),
        Prim::Sub => (BinOp::Sub, "`-`"),
        Prim::Mul => (BinOp::Mul, "`*`"),
        Prim::Div => (BinOp::Div, "`/`"),
        Prim::Pow => (BinOp::Pow, "`**`"),
        _ => return Err(Fault::new(format!("internal: `{p:?}` on tensors"))),
    })
}

/// Elementwise arithmetic where at least one operand is a GPU tensor (Floats broadcast).
pub fn elementwise(p: Prim, a: &Value, b: &Value) -> FResult<Value> {
    let (op, sym) = bin_op(p)?;
    Ok(match (a, b) {
        (Value::Tensor(x), Value::Tensor(y)) => match (x.gpu(), y.gpu()) {
            (Some(gx), Some(gy)) => wrap(k::binary(op, gx, gy)?),
            _ => return Err(mixed_devices(sym, x.device(), y.device())),
        },
        (Value::Tensor(x), Value::Float(s)) => wrap(k::binary_scalar(op, gpu_of(x)?, *s as f32, false)?),
        (Value::Float(s), Value::Tensor(y)) => wrap(k::binary_scalar(op, gpu_of(y)?, *s as f32, true)?),
        _ => return Err(Fault::new(format!("internal: `{p:?}` on {} and {}", a.type_name(), b.type_name()))),
    })
}

fn gpu_of(t: &Tensor) -> FResult<&GpuTensor> {
    t.gpu().ok_or_else(|| Fault::new("internal: expected a GPU tensor"))
}

/// A math function on a GPU tensor.
pub fn unary(op: Un, x: &GpuTensor) -> Result<GpuTensor, String> {
    let code = match op {
        Un::Neg => UnOp::Neg,
        Un::Sin => UnOp::Sin,
        Un::Cos => UnOp::Cos,
        Un::Tan => UnOp::Tan,
        Un::Exp => UnOp::Exp,
        Un::Log => UnOp::Log,
        Un::Sqrt => UnOp::Sqrt,
        Un::Tanh => UnOp::Tanh,
        Un::Sigmoid => UnOp::Sigmoid,
        Un::Relu => UnOp::Relu,
        Un::Abs => UnOp::Abs,
    };
    k::unary(code, x, 0.0, 0.0)
}

/// ln x where x > 0, else 0: the factor of the derivative of a ** b with respect to b.
pub fn log_or_zero(x: &GpuTensor) -> Result<GpuTensor, String> {
    k::unary(UnOp::LogPos, x, 0.0, 0.0)
}

/// Whether every element is positive (NaN is not), reading back one value rather than x.
pub fn all_positive(x: &GpuTensor) -> Result<bool, String> {
    if x.is_empty() {
        return Ok(true);
    }
    let not_positive = k::binary_scalar(BinOp::Sub, &k::unary(UnOp::Step, x, 0.0, 0.0)?, 1.0, true)?;
    Ok(k::reduce_all(&not_positive, Fold::Max, 0.0)? == 0.0)
}

fn check_axis(shape: &[usize], axis: usize, what: &str) -> FResult<()> {
    if axis >= shape.len() {
        return Err(Fault::new(format!(
            "{what}: axis {axis} is out of range for a tensor of shape {}",
            fmt_shape(shape)
        )));
    }
    Ok(())
}

/// The forward definition of `op` when some operand is a GPU tensor.
pub fn forward(op: &TOp, args: &[Value]) -> FResult<Value> {
    // Every tensor operand must be on the GPU.
    let mut ts: Vec<&GpuTensor> = Vec::new();
    for a in args {
        if let Value::Tensor(t) = a {
            match t.gpu() {
                Some(g) => ts.push(g),
                None => return Err(mixed_devices(&op_name(op), Device::Gpu, Device::Cpu)),
            }
        }
    }
    let t0 = || -> FResult<&GpuTensor> {
        match args.first() {
            Some(Value::Tensor(t)) => gpu_of(t),
            _ => Err(Fault::new(format!("internal: `{}` expects a tensor", op_name(op)))),
        }
    };
    let nth = |i: usize| -> FResult<&GpuTensor> {
        match args.get(i) {
            Some(Value::Tensor(t)) => gpu_of(t),
            _ => Err(Fault::new(format!("internal: `{}` expects a tensor operand {i}", op_name(op)))),
        }
    };
    Ok(match op {
        TOp::MatMul => wrap(k::matmul(t0()?, nth(1)?)?),
        TOp::Sum => Value::Float(k::reduce_all(t0()?, Fold::Sum, 0.0)? as f64),
        TOp::Mean => {
            let t = t0()?;
            if t.is_empty() {
                return Err(Fault::new("mean of an empty tensor"));
            }
            Value::Float(k::reduce_all(t, Fold::Sum, 0.0)? as f64 / t.len() as f64)
        }
        TOp::Max => {
            let t = t0()?;
            if t.is_empty() {
                return Err(Fault::new("max of an empty tensor"));
            }
            Value::Float(k::reduce_all(t, Fold::Max, 0.0)? as f64)
        }
        TOp::Logsumexp => {
            let t = t0()?;
            let m = k::reduce_all(t, Fold::Max, 0.0)?;
            let s = k::reduce_all(t, Fold::SumExp, m)?;
            Value::Float(m as f64 + (s as f64).ln())
        }
        TOp::Item => {
            let t = t0()?;
            if t.len() != 1 {
                return Err(Fault::new(format!("item needs a one-element tensor, got shape {}", fmt_shape(&t.shape))));
            }
            Value::Float(super::context()?.read(t.raw(), 1)?[0] as f64)
        }
        TOp::SumAxis(a) | TOp::MeanAxis(a) => {
            let t = t0()?;
            check_axis(&t.shape, *a, "sum_axis")?;
            let scale = if matches!(op, TOp::MeanAxis(_)) { 1.0 / t.shape[*a].max(1) as f32 } else { 1.0 };
            wrap(k::reduce_axis(t, *a, Fold::Sum, scale)?)
        }
        TOp::SumTo(shape) => match &args[0] {
            // As on the CPU: always a tensor (0-d for []).
            Value::Tensor(_) => {
                let t = t0()?;
                if &t.shape == shape {
                    args[0].clone()
                } else {
                    wrap(k::sum_to(t, shape)?)
                }
            }
            _ => return fallback(op, args),
        },
        TOp::BroadcastTo(shape) => match &args[0] {
            Value::Tensor(_) => wrap(k::broadcast_to(t0()?, shape)?),
            _ => return fallback(op, args),
        },
        TOp::Reshape(shape) => {
            let t = t0()?;
            crate::tensor::ops::check_reshape(&t.shape, shape)?;
            wrap(t.reshaped(shape.clone()))
        }
        TOp::Transpose => wrap(k::transpose(t0()?)?),
        TOp::Row(i) => {
            let t = t0()?;
            if t.shape.is_empty() || *i >= t.shape[0] {
                return Err(Fault::new(format!(
                    "row {i} is out of range for a tensor of shape {}",
                    fmt_shape(&t.shape)
                )));
            }
            wrap(k::row(t, *i)?)
        }
        TOp::ScatterRow(i, shape) => {
            let g = t0()?;
            if shape.is_empty() || *i >= shape[0] || g.shape[..] != shape[1..] {
                return Err(Fault::new(format!(
                    "internal: scattering a row of shape {} into row {i} of {}",
                    fmt_shape(&g.shape),
                    fmt_shape(shape)
                )));
            }
            wrap(k::scatter_row(g, *i, shape)?)
        }
        TOp::Softmax | TOp::LogSoftmax => {
            let t = t0()?;
            if t.shape.is_empty() {
                return Err(Fault::new("softmax of a scalar tensor (it needs at least one axis)"));
            }
            wrap(k::softmax(t, *op == TOp::LogSoftmax)?)
        }
        TOp::Concat(axis) => {
            if ts.is_empty() {
                return Err(Fault::new("concat of an empty list"));
            }
            check_axis(&ts[0].shape, *axis, "concat")?;
            let agree = ts.iter().all(|t| {
                t.shape.len() == ts[0].shape.len()
                    && t.shape.iter().zip(&ts[0].shape).enumerate().all(|(d, (p, q))| d == *axis || p == q)
            });
            if !agree {
                return Err(Fault::new(format!(
                    "concat along axis {axis}: shapes {} do not agree on the other axes",
                    ts.iter().map(|t| fmt_shape(&t.shape)).collect::<Vec<_>>().join(", ")
                )));
            }
            let mut shape = ts[0].shape.clone();
            shape[*axis] = ts.iter().map(|t| t.shape[*axis]).sum();
            wrap(k::concat(&ts, *axis, &shape)?)
        }
        TOp::Slice(axis, lo, hi) => {
            let t = t0()?;
            check_axis(&t.shape, *axis, "slice")?;
            if lo > hi || *hi > t.shape[*axis] {
                return Err(Fault::new(format!(
                    "slice {lo}..{hi} on axis {axis} is out of range for shape {}",
                    fmt_shape(&t.shape)
                )));
            }
            wrap(k::slice(t, *axis, *lo, *hi)?)
        }
        TOp::Unslice(axis, lo, shape) => wrap(k::unslice(t0()?, *axis, *lo, shape)?),
        TOp::Step => wrap(k::unary(UnOp::Step, t0()?, 0.0, 0.0)?),
        TOp::Sign => wrap(k::unary(UnOp::Sign, t0()?, 0.0, 0.0)?),
        TOp::Conv2d => wrap(k::conv2d(t0()?, nth(1)?)?),
        TOp::Conv2dInputGrad | TOp::Conv2dWeightGrad => {
            wrap(k::conv2d_grad(t0()?, nth(1)?, nth(2)?, *op == TOp::Conv2dInputGrad)?)
        }
        TOp::MaxPool2d(kk) => wrap(k::max_pool(t0()?, *kk, None, false)?),
        TOp::MaxPool2dGrad(kk) => wrap(k::max_pool(t0()?, *kk, Some(nth(1)?), false)?),
        TOp::MaxPool2dPick(kk) => wrap(k::max_pool(t0()?, *kk, Some(nth(1)?), true)?),
        TOp::ArgmaxMask => wrap(k::argmax_mask(t0()?)?),
        // No GPU kernel (yet): anything new in the table.
        _ => return fallback(op, args),
    })
}

/// The explicit CPU fallback: GPU operands are read back, the CPU definition runs, and a tensor
/// result is uploaded again.
pub fn fallback(op: &TOp, args: &[Value]) -> FResult<Value> {
    super::trace(|| format!("CPU fallback for {op:?}"));
    let cpu_args = args
        .iter()
        .map(|v| match v {
            Value::Tensor(t) if t.is_gpu() => Ok(Value::Tensor(Rc::new(t.to_device(Device::Cpu)?))),
            other => Ok(other.clone()),
        })
        .collect::<Result<Vec<_>, String>>()?;
    let y = crate::tensor::ops::forward(op, &cpu_args)?;
    Ok(match y {
        Value::Tensor(t) => Value::Tensor(Rc::new(t.to_device(Device::Gpu)?)),
        other => other,
    })
}
