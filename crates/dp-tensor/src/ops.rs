//! The op table's dispatch (DESIGN.md principle 6, after candle's `BackendStorage`): each
//! device's storage implements `Backend`, one method per kind of operation; `forward` checks
//! the operation's shape rule (`TOp::check`), matches on the operands' storage once, and runs
//! the one generic definition (`apply`) on that backend. An operation added to `TOp` must be
//! given to both backends before anything compiles: there is no silent CPU fallback.

use crate::cpu::{compare, elementwise, layout};
use crate::op::{Bin, Cmp, Conv, TOp};
use crate::{gpu, DType, Device, Storage, TResult, Tensor, TensorError};
use ndarray::ArrayD;
use std::borrow::Cow;
use std::rc::Rc;

/// What an operation gives: a tensor, or a Float for the reductions to one number.
pub enum Out {
    Tensor(Tensor),
    Float(f64),
}

/// The operations of one device's storage. Shapes have passed `TOp::check` before any of
/// these run; what a method still checks is internal.
pub trait Backend: Sized {
    /// This device's storage of `t`, if it lives here.
    fn of(t: &Tensor) -> Option<&Self>;
    fn into_tensor(self) -> Tensor;
    fn shape(&self) -> &[usize];
    fn matmul(&self, b: &Self) -> TResult<Self>;
    /// The sum of all elements.
    fn sum_all(&self) -> TResult<f64>;
    /// The largest element.
    fn max_all(&self) -> TResult<f64>;
    fn logsumexp(&self) -> TResult<f64>;
    /// The one element of a one-element tensor.
    fn item(&self) -> TResult<f64>;
    /// The sum along `axis` (removed), or with `mean` the mean.
    fn sum_axis(&self, axis: usize, mean: bool) -> TResult<Self>;
    fn sum_to(&self, shape: &[usize]) -> TResult<Self>;
    fn broadcast_to(&self, shape: &[usize]) -> TResult<Self>;
    fn reshape(&self, shape: &[usize]) -> TResult<Self>;
    fn transpose(&self) -> TResult<Self>;
    /// Axis i of the result is axis `perm[i]` of `self`.
    fn permute(&self, perm: &[usize]) -> TResult<Self>;
    fn row(&self, i: usize) -> TResult<Self>;
    fn scatter_row(&self, i: usize, shape: &[usize]) -> TResult<Self>;
    /// Softmax (or, with `log`, log-softmax) over the last axis.
    fn softmax(&self, log: bool) -> TResult<Self>;
    /// The adjoint of `softmax(log)` for its result `self` and the result's adjoint `g`.
    fn softmax_grad(&self, g: &Self, log: bool) -> TResult<Self>;
    /// Each vector along the last axis to mean 0 and variance 1, (x - mean) / sqrt(var + eps);
    /// with `Some(g)`, the adjoint of that at `self` for the result's adjoint g instead.
    fn normalize(&self, g: Option<&Self>, eps: f64) -> TResult<Self>;
    fn concat(parts: &[&Self], axis: usize) -> TResult<Self>;
    fn slice(&self, axis: usize, lo: usize, hi: usize) -> TResult<Self>;
    fn unslice(&self, axis: usize, lo: usize, shape: &[usize]) -> TResult<Self>;
    /// The largest element along `axis` (removed), NaN propagating.
    fn max_axis(&self, axis: usize) -> TResult<Self>;
    /// Running sums along `axis`.
    fn cumsum(&self, axis: usize) -> TResult<Self>;
    /// `self` where `m > 0`, else 0 (equal shapes).
    fn mask(&self, m: &Self) -> TResult<Self>;
    fn step(&self) -> TResult<Self>;
    fn sign(&self) -> TResult<Self>;
    fn argmax_mask(&self) -> TResult<Self>;
    fn conv2d(&self, w: &Self, cv: Conv) -> TResult<Self>;
    /// The adjoint of `conv2d` for its input (`input`) or its weights, given (x, w, g).
    fn conv2d_grad(&self, w: &Self, g: &Self, cv: Conv, input: bool) -> TResult<Self>;
    /// k×k max pooling; with `other`, routes it back to each window's maximum, or (`pick`)
    /// picks its element at each window's maximum.
    fn max_pool(&self, k: usize, other: Option<&Self>, pick: bool) -> TResult<Self>;
}

/// The forward definition of `op` on tensors (the interpreter turns Float operands of
/// `SumTo` and `BroadcastTo` into tensors first). Operands on two devices are an error.
pub fn forward(op: &TOp, args: &[&Tensor]) -> TResult<Out> {
    if let TOp::ToDevice(d) = op {
        let t = args.first().ok_or_else(|| TensorError::internal("`to_device` without an operand"))?;
        return Ok(Out::Tensor(t.to_device(*d)?));
    }
    if let TOp::AsType(d) = op {
        let t = args.first().ok_or_else(|| TensorError::internal("`astype` without an operand"))?;
        if t.is_gpu() && *d != DType::F32 {
            return Err(TensorError::new(format!(
                "`astype \"{}\"` on a GPU tensor: the GPU backend holds float32 tensors only",
                d.name()
            ))
            .help("move it to the CPU first with `to_device \"cpu\" t`"));
        }
        return Ok(Out::Tensor(t.astype(*d)?));
    }
    // Before the devices are compared: its int64 indices are on the CPU whatever `t`'s device.
    if let TOp::Gather(axis) | TOp::ScatterAdd(axis, _) = op {
        op.check(args)?;
        return crate::cpu::gather::forward(op, *axis, args).map(|storage| Out::Tensor(Tensor { storage }));
    }
    let gpu = args.iter().any(|t| t.is_gpu());
    let uploaded;
    let args = if gpu && args.iter().any(|t| !t.is_gpu()) {
        uploaded = gpu_operands(op, args)?;
        &uploaded.iter().collect::<Vec<_>>()[..]
    } else {
        args
    };
    op.check(args)?;
    if matches!(op, TOp::Cmp(_) | TOp::Not | TOp::Where | TOp::ArgmaxAxis(_)) {
        return comparing(op, args, gpu).map(|storage| Out::Tensor(Tensor { storage }));
    }
    if gpu {
        return apply::<gpu::GpuTensor>(op, args);
    }
    let first = args.first().map_or(DType::F32, |t| t.dtype());
    let same = args.iter().all(|t| t.dtype() == first);
    match first {
        DType::F32 if same => apply::<ArrayD<f32>>(op, args),
        DType::F64 if same => apply::<ArrayD<f64>>(op, args),
        _ => {
            let joint = args.iter().fold(first, |d, t| DType::promote(d, t.dtype()));
            // Moving elements keeps an int64 or bool dtype; computing with them is done in
            // the floating dtype they promote to.
            // The reductions to one Float compute in float64, exact for every int64 up to 2^53.
            let dtype = if is_layout(op) {
                joint
            } else if matches!(op, TOp::Sum | TOp::Mean | TOp::Max | TOp::Logsumexp | TOp::Item) {
                DType::F64
            } else {
                joint.float_for()
            };
            let converted = args.iter().map(|t| t.astype(dtype)).collect::<TResult<Vec<_>>>()?;
            let args: Vec<&Tensor> = converted.iter().collect();
            match dtype {
                DType::F32 => apply::<ArrayD<f32>>(op, &args),
                DType::F64 => apply::<ArrayD<f64>>(op, &args),
                DType::I64 => apply_layout(op, &args, |t| t.i64s(), Storage::I64),
                DType::Bool => apply_layout(op, &args, |t| t.bools(), Storage::Bool),
            }
        }
    }
}

/// The comparing operations (`Cmp`, `Not`, `Where`). Their truth-valued results and operands
/// have no place in `Backend` (its results keep the operands' floating dtype): on the CPU
/// they are `bool` arrays, computed in the operands' own promoted dtype (int64 exactly); on
/// the GPU, float32 buffers of 0 and 1, any nonzero element read as true.
fn comparing(op: &TOp, args: &[&Tensor], on_gpu: bool) -> TResult<Storage> {
    let arg =
        |i: usize| args.get(i).copied().ok_or_else(|| TensorError::internal(format!("{}: operand {i}", op.name())));
    if on_gpu {
        let g = |i: usize| arg(i)?.gpu().ok_or_else(|| TensorError::internal("a CPU operand on the GPU path"));
        let out = match op {
            TOp::Cmp(c) => gpu::kernels::compare(*c, g(0)?, g(1)?)?,
            TOp::Not => gpu::kernels::logical_not(g(0)?)?,
            // Positions are int64 on both devices (`gather`'s indices, compared with int64
            // labels), and int64 tensors live on the CPU: computed on the device, read back.
            TOp::ArgmaxAxis(a) => {
                let pos = gpu::ops::argmax_axis(g(0)?, *a)?;
                return Ok(Storage::I64(pos.host()?.mapv(|p| p as i64)));
            }
            _ => gpu::kernels::select(g(0)?, g(1)?, g(2)?)?,
        };
        return Ok(Storage::Gpu(out));
    }
    // Operands already of the dtype wanted are borrowed: `where` runs on activations (the
    // attention's mask, a loss's select and both selects of its reverse rule), and a copy of
    // each operand was most of its time.
    fn as_dtype(t: &Tensor, d: DType) -> TResult<Cow<'_, Tensor>> {
        Ok(if t.dtype() == d { Cow::Borrowed(t) } else { Cow::Owned(t.astype(d)?) })
    }
    let truth = |i: usize| as_dtype(arg(i)?, DType::Bool);
    fn bools(t: &Tensor) -> TResult<&ArrayD<bool>> {
        t.bools().ok_or_else(|| TensorError::internal("not a bool tensor"))
    }
    match op {
        TOp::Not => Ok(Storage::Bool(bools(&*truth(0)?)?.mapv(|x| !x))),
        TOp::ArgmaxAxis(a) => {
            let x = arg(0)?;
            let x = if x.dtype().is_float() { x.clone() } else { x.astype(DType::F64)? };
            let pos = match &x.storage {
                Storage::F64(v) => compare::argmax_axis(v, *a),
                _ => compare::argmax_axis(x.cpu().ok_or_else(|| TensorError::internal("argmax_axis: dtype"))?, *a),
            };
            Ok(Storage::I64(pos))
        }
        TOp::Cmp(c @ (Cmp::And | Cmp::Or)) => {
            let (x, y) = (truth(0)?, truth(1)?);
            Ok(Storage::Bool(compare::logic(*c, bools(&x)?, bools(&y)?)?))
        }
        _ => {
            // The compared (or selected) operands, in their promoted dtype.
            let cond = if *op == TOp::Where { Some(truth(0)?) } else { None };
            let first = usize::from(cond.is_some());
            let (x, y) = (arg(first)?, arg(first + 1)?);
            let d = DType::promote(x.dtype(), y.dtype());
            let (x, y) = (as_dtype(x, d)?, as_dtype(y, d)?);
            let c = match &cond {
                Some(t) => Some(bools(t)?),
                None => None,
            };
            match d {
                DType::F32 => typed(op, c, &x, &y, |t| t.cpu(), Storage::F32),
                DType::F64 => typed(op, c, &x, &y, <f64 as crate::Real>::of, Storage::F64),
                DType::I64 => typed(op, c, &x, &y, |t| t.i64s(), Storage::I64),
                DType::Bool => typed(op, c, &x, &y, |t| t.bools(), Storage::Bool),
            }
        }
    }
}

/// A comparison, `max_of`/`min_of`, or (with `cond`) a select, on operands of one dtype.
fn typed<T: Copy + PartialOrd + Send + Sync>(
    op: &TOp,
    cond: Option<&ArrayD<bool>>,
    x: &Tensor,
    y: &Tensor,
    of: impl Fn(&Tensor) -> Option<&ArrayD<T>>,
    wrap: impl Fn(ArrayD<T>) -> Storage,
) -> TResult<Storage> {
    let (Some(x), Some(y)) = (of(x), of(y)) else {
        return Err(TensorError::internal(format!("{}: operands of mixed dtypes", op.name())));
    };
    Ok(match (op, cond) {
        (TOp::Cmp(c), _) if c.gives_bool() => Storage::Bool(compare::compare(*c, x, y)?),
        (TOp::Cmp(c), _) => wrap(compare::pick(*c, x, y)?),
        (_, Some(c)) => wrap(compare::select(c, x, y)?),
        _ => return Err(TensorError::internal(format!("{} is not a comparing operation", op.name()))),
    })
}

/// The operations that only move elements, defined for every dtype.
fn is_layout(op: &TOp) -> bool {
    matches!(
        op,
        TOp::Reshape(_)
            | TOp::Transpose
            | TOp::Permute(_)
            | TOp::Row(_)
            | TOp::Concat(_)
            | TOp::Slice(..)
            | TOp::BroadcastTo(_)
    )
}

/// A layout operation on int64 or bool tensors (all of one dtype: `of` reads it).
fn apply_layout<T: Copy + Send + Sync>(
    op: &TOp,
    args: &[&Tensor],
    of: impl Fn(&Tensor) -> Option<&ArrayD<T>>,
    wrap: impl Fn(ArrayD<T>) -> Storage,
) -> TResult<Out> {
    let arrays = args.iter().map(|t| of(t)).collect::<Option<Vec<_>>>();
    let Some(arrays) = arrays.filter(|a| !a.is_empty()) else {
        return Err(TensorError::internal(format!("{}: operands of mixed dtypes", op.name())));
    };
    let x = arrays[0];
    let out = match op {
        TOp::Reshape(shape) => layout::reshape(x, shape)?,
        TOp::Transpose => layout::transpose(x),
        TOp::Permute(perm) => layout::permute(x, perm),
        TOp::Row(i) => layout::row(x, *i),
        TOp::Concat(axis) => layout::concat(&arrays, *axis)?,
        TOp::Slice(axis, lo, hi) => layout::slice(x, *axis, *lo, *hi),
        TOp::BroadcastTo(shape) => layout::broadcast_to(x, shape)?,
        other => return Err(TensorError::internal(format!("{} is not a layout operation", other.name()))),
    };
    Ok(Out::Tensor(Tensor { storage: wrap(out) }))
}

/// `reshape` of a tensor the caller owns: a row-major CPU array takes the new shape without
/// copying its elements (the generic `forward` gets a borrowed operand and must copy). The
/// reverse rules reshape adjoints nobody else holds, and activations pass through several
/// reshapes in attention's head split and merge.
pub fn reshape_owned(t: Tensor, shape: &[usize]) -> TResult<Tensor> {
    let op = TOp::Reshape(shape.to_vec());
    op.check(&[&t])?;
    fn moved<T: Copy + Send + Sync>(a: ArrayD<T>, shape: &[usize]) -> TResult<ArrayD<T>> {
        if a.is_standard_layout() {
            Ok(a.into_shape_with_order(ndarray::IxDyn(shape)).map_err(|e| e.to_string())?)
        } else {
            layout::reshape(&a, shape)
        }
    }
    let storage = match t.storage {
        Storage::F32(a) => Storage::F32(moved(a, shape)?),
        Storage::F64(a) => Storage::F64(moved(a, shape)?),
        Storage::I64(a) => Storage::I64(moved(a, shape)?),
        Storage::Bool(a) => Storage::Bool(moved(a, shape)?),
        gpu @ Storage::Gpu(_) => {
            return match forward(&op, &[&Tensor { storage: gpu }])? {
                Out::Tensor(t) => Ok(t),
                Out::Float(_) => Err(TensorError::internal("a reshape to a Float")),
            }
        }
    };
    Ok(Tensor { storage })
}

/// The operands of an operation with a GPU operand, all on the GPU (`to_gpu`).
fn gpu_operands(op: &TOp, args: &[&Tensor]) -> TResult<Vec<Tensor>> {
    args.iter().map(|t| if t.is_gpu() { Ok((*t).clone()) } else { to_gpu(t, &op.name()) }).collect()
}

/// A CPU operand of an operation on GPU tensors, on the GPU: a bool or int64 tensor (a
/// `bernoulli` mask, a comparison of int64 tensors, labels) goes there as float32, its 0/1 or
/// integer values, since the GPU holds no other dtype and so it could not have been moved (the
/// CPU, too, computes with such an operand in a floating dtype). Another CPU operand is an
/// error: the program chose its device.
fn to_gpu(t: &Tensor, what: &str) -> TResult<Tensor> {
    match t.dtype() {
        DType::Bool | DType::I64 => t.astype(DType::F32)?.to_device(Device::Gpu),
        _ => Err(mixed_devices(what, Device::Gpu, Device::Cpu)),
    }
}

/// The error for operands on two devices, naming both.
pub fn mixed_devices(what: &str, a: Device, b: Device) -> TensorError {
    TensorError::new(format!("{what}: the operands are on two devices ({} and {})", a.name(), b.name()))
        .help("move one with `to_device \"gpu\" t` or `to_device \"cpu\" t`")
}

/// Each operation, defined once in terms of `Backend`, on operands all stored on `B`'s device.
/// (Operands are read through `B::of` rather than collected: the small tensor operations of a
/// recursive model are dominated by such per-call costs.)
fn apply<B: Backend>(op: &TOp, args: &[&Tensor]) -> TResult<Out> {
    let arg = |i: usize| -> TResult<&B> {
        args.get(i)
            .and_then(|t| B::of(t))
            .ok_or_else(|| TensorError::internal(format!("{} expects a tensor operand {i}", op.name())))
    };
    let x = arg(0)?;
    let n = || x.shape().iter().product::<usize>();
    let t = |b: B| Ok(Out::Tensor(b.into_tensor()));
    match op {
        TOp::MatMul => t(x.matmul(arg(1)?)?),
        TOp::Sum => Ok(Out::Float(x.sum_all()?)),
        TOp::Mean => Ok(Out::Float(x.sum_all()? / n() as f64)),
        TOp::Max => Ok(Out::Float(x.max_all()?)),
        TOp::Logsumexp => Ok(Out::Float(x.logsumexp()?)),
        TOp::Item => Ok(Out::Float(x.item()?)),
        TOp::SumAxis(a) => t(x.sum_axis(*a, false)?),
        TOp::MeanAxis(a) => t(x.sum_axis(*a, true)?),
        // Always a tensor (0-d for []): the interpreter turns it into a Float for Float inputs.
        TOp::SumTo(shape) => t(x.sum_to(shape)?),
        TOp::BroadcastTo(shape) => t(x.broadcast_to(shape)?),
        TOp::Reshape(shape) => t(x.reshape(shape)?),
        TOp::Transpose => t(x.transpose()?),
        TOp::Permute(perm) => t(x.permute(perm)?),
        TOp::Row(i) => t(x.row(*i)?),
        TOp::ScatterRow(i, shape) => t(x.scatter_row(*i, shape)?),
        TOp::Softmax => t(x.softmax(false)?),
        TOp::LogSoftmax => t(x.softmax(true)?),
        TOp::SoftmaxGrad { log } => t(x.softmax_grad(arg(1)?, *log)?),
        TOp::Normalize(eps) => t(x.normalize(None, *eps)?),
        TOp::NormalizeGrad(eps) => t(x.normalize(Some(arg(1)?), *eps)?),
        TOp::Concat(axis) => t(B::concat(&(0..args.len()).map(arg).collect::<TResult<Vec<_>>>()?, *axis)?),
        TOp::Slice(axis, lo, hi) => t(x.slice(*axis, *lo, *hi)?),
        TOp::Unslice(axis, lo, shape) => t(x.unslice(*axis, *lo, shape)?),
        TOp::Mask => t(x.mask(arg(1)?)?),
        TOp::MaxAxis(a) => t(x.max_axis(*a)?),
        TOp::Cumsum(a) => t(x.cumsum(*a)?),
        TOp::Step => t(x.step()?),
        TOp::Sign => t(x.sign()?),
        TOp::ArgmaxMask => t(x.argmax_mask()?),
        TOp::Conv2d(cv) => t(x.conv2d(arg(1)?, *cv)?),
        TOp::Conv2dInputGrad(cv) => t(x.conv2d_grad(arg(1)?, arg(2)?, *cv, true)?),
        TOp::Conv2dWeightGrad(cv) => t(x.conv2d_grad(arg(1)?, arg(2)?, *cv, false)?),
        TOp::MaxPool2d(k) => t(x.max_pool(*k, None, false)?),
        TOp::MaxPool2dGrad(k) => t(x.max_pool(*k, Some(arg(1)?), false)?),
        TOp::MaxPool2dPick(k) => t(x.max_pool(*k, Some(arg(1)?), true)?),
        TOp::ToDevice(_)
        | TOp::AsType(_)
        | TOp::Cmp(_)
        | TOp::Not
        | TOp::Where
        | TOp::ArgmaxAxis(_)
        | TOp::Gather(_)
        | TOp::ScatterAdd(..) => Err(TensorError::internal(format!("{} is not a backend operation", op.name()))),
    }
}

/// `a op b` with NumPy broadcasting, on the operands' device. The operands come by value: a
/// CPU tensor only this call holds is overwritten with the result (`cpu::elementwise`).
/// (`#[inline]`: arithmetic on small tensors is per-call overhead, and this is a thin layer.)
#[inline]
pub fn binary(op: Bin, a: Rc<Tensor>, b: Rc<Tensor>) -> TResult<Tensor> {
    match (a.gpu(), b.gpu()) {
        (None, None) => elementwise::binary(op, a, b),
        (Some(x), Some(y)) => Ok(Tensor::from_gpu(gpu::kernels::binary(op, x, y)?)),
        (Some(_), None) => binary(op, a, Rc::new(to_gpu(&b, op.symbol())?)),
        (None, Some(_)) => binary(op, Rc::new(to_gpu(&a, op.symbol())?), b),
    }
}

/// `t op s`, or `s op t` when `scalar_left`, on t's device (in place when only this call holds
/// a CPU `t`).
#[inline]
pub fn binary_scalar(op: Bin, t: Rc<Tensor>, s: f64, scalar_left: bool) -> TResult<Tensor> {
    match t.gpu() {
        None => elementwise::with_scalar(op, t, s, scalar_left),
        Some(g) => Ok(Tensor::from_gpu(gpu::kernels::binary_scalar(op, g, s as f32, scalar_left)?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_vec(shape, v.to_vec()).unwrap()
    }

    /// A row-major tensor the caller owns takes a new shape in place (same buffer); a shape
    /// of another size is the reshape's error; a transposed one is copied into row-major order.
    #[test]
    fn reshape_owned_moves_row_major_elements_and_copies_the_rest() {
        let x = t(&[2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let at = |t: &Tensor| match &t.storage {
            Storage::F32(a) => a.as_ptr() as usize,
            _ => 0,
        };
        let before = at(&x);
        let r = reshape_owned(x, &[3, 2]).unwrap();
        assert_eq!((r.shape(), at(&r)), (&[3, 2][..], before));
        assert_eq!(r.to_f64s().unwrap(), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        assert!(reshape_owned(r, &[4]).is_err());
        let transposed = Tensor {
            storage: Storage::F32(
                ArrayD::from_shape_vec(ndarray::IxDyn(&[2, 3]), vec![0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0])
                    .unwrap()
                    .reversed_axes(),
            ),
        };
        assert_eq!(reshape_owned(transposed, &[6]).unwrap().to_f64s().unwrap(), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    }

    fn tensor(out: Out) -> Tensor {
        match out {
            Out::Tensor(t) => t,
            Out::Float(x) => panic!("expected a tensor, got the Float {x}"),
        }
    }

    #[test]
    fn the_table_runs_on_the_cpu() {
        let x = t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert!(matches!(forward(&TOp::Sum, &[&x]), Ok(Out::Float(s)) if s == 21.0));
        assert!(matches!(forward(&TOp::Mean, &[&x]), Ok(Out::Float(s)) if s == 3.5));
        assert_eq!(tensor(forward(&TOp::MeanAxis(0), &[&x]).unwrap()).data(), vec![2.5, 3.5, 4.5]);
        assert_eq!(tensor(forward(&TOp::Transpose, &[&x]).unwrap()).shape(), &[3, 2]);
        let v = t(&[3], &[1.0, 0.0, -1.0]);
        assert_eq!(tensor(forward(&TOp::MatMul, &[&x, &v]).unwrap()).data(), vec![-2.0, -2.0]);
        let c = tensor(forward(&TOp::Concat(0), &[&x, &x]).unwrap());
        assert_eq!(c.shape(), &[4, 3]);
        assert_eq!(tensor(forward(&TOp::Slice(0, 2, 3), &[&c]).unwrap()).data(), vec![1.0, 2.0, 3.0]);
    }

    #[test]
    fn shape_errors_come_from_the_rule_before_any_kernel() {
        let x = t(&[2, 3], &[0.0; 6]);
        let e = forward(&TOp::MeanAxis(5), &[&x]).err().expect("an error");
        assert_eq!(e.msg, "mean_axis: axis 5 is out of range for a tensor of shape [2, 3]");
    }

    #[test]
    fn elementwise_reuses_a_unique_operand() {
        let a = Rc::new(t(&[2], &[1.0, 2.0]));
        let ptr = a.cpu().unwrap().as_ptr();
        let r = binary_scalar(Bin::Mul, a, 3.0, false).unwrap();
        assert_eq!(r.data(), vec![3.0, 6.0]);
        assert_eq!(r.cpu().unwrap().as_ptr(), ptr);
    }

    #[test]
    fn both_devices_reject_the_same_shapes_in_the_same_words() {
        if gpu::context().is_err() {
            eprintln!("no GPU adapter: the CPU side of the comparison only");
            return;
        }
        let x = t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let g = x.to_device(Device::Gpu).unwrap();
        let cases = [
            TOp::MeanAxis(2),
            TOp::SumAxis(2),
            TOp::Row(5),
            TOp::Slice(1, 2, 9),
            TOp::Reshape(vec![4]),
            TOp::MaxPool2d(2),
            TOp::Item,
        ];
        for op in cases {
            let on = |t: &Tensor| forward(&op, &[t]).err().map(|e| e.msg);
            assert_eq!(on(&x), on(&g), "{op:?}");
            assert!(on(&g).is_some(), "{op:?} should fail");
        }
        let e = forward(&TOp::MatMul, &[&g, &t(&[3], &[1.0; 3])]).err().expect("mixed devices");
        assert_eq!(e.msg, "`@`: the operands are on two devices (gpu and cpu)");
    }
}
