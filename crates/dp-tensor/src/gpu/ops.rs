//! The op table (`ops::Backend`) on GPU tensors: each operation's kernel. `item` reads back by
//! nature (it returns a host value); `argmax` reads back only its index
//! (`kernels::argmax_index`).

use super::kernels::{self as k, Fold, UnOp};
use super::GpuTensor;
use crate::op::{Bin, Cmp, Conv, Un};
use crate::ops::Backend;
use crate::{TResult, Tensor, TensorError};

impl Backend for GpuTensor {
    fn of(t: &Tensor) -> Option<&Self> {
        t.gpu()
    }
    fn into_tensor(self) -> Tensor {
        Tensor::from_gpu(self)
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn matmul(&self, b: &Self) -> TResult<Self> {
        k::matmul(self, b)
    }
    fn sum_all(&self) -> TResult<f64> {
        Ok(k::reduce_all(self, Fold::Sum, 0.0)? as f64)
    }
    fn max_all(&self) -> TResult<f64> {
        Ok(k::reduce_all(self, Fold::Max, 0.0)? as f64)
    }
    fn logsumexp(&self) -> TResult<f64> {
        let m = k::reduce_all(self, Fold::Max, 0.0)?;
        // An infinite (or NaN) maximum is the result, as on the CPU.
        if !m.is_finite() {
            return Ok(m as f64);
        }
        let s = k::reduce_all(self, Fold::SumExp, m)?;
        Ok(m as f64 + (s as f64).ln())
    }
    fn item(&self) -> TResult<f64> {
        Ok(super::context()?.read(self.raw(), 1)?[0] as f64)
    }
    fn sum_axis(&self, axis: usize, mean: bool) -> TResult<Self> {
        let scale = if mean { 1.0 / self.shape[axis].max(1) as f32 } else { 1.0 };
        k::reduce_axis(self, axis, Fold::Sum, scale)
    }
    fn sum_to(&self, shape: &[usize]) -> TResult<Self> {
        if self.shape == shape {
            return Ok(self.clone());
        }
        k::sum_to(self, shape)
    }
    fn broadcast_to(&self, shape: &[usize]) -> TResult<Self> {
        k::broadcast_to(self, shape)
    }
    fn reshape(&self, shape: &[usize]) -> TResult<Self> {
        Ok(self.reshaped(shape.to_vec()))
    }
    fn transpose(&self) -> TResult<Self> {
        k::transpose(self)
    }
    fn permute(&self, perm: &[usize]) -> TResult<Self> {
        k::permute(self, perm)
    }
    fn row(&self, i: usize) -> TResult<Self> {
        k::row(self, i)
    }
    fn scatter_row(&self, i: usize, shape: &[usize]) -> TResult<Self> {
        k::scatter_row(self, i, shape)
    }
    fn softmax(&self, log: bool) -> TResult<Self> {
        match self.shape.last() {
            Some(&len) if len > k::GROUP_CHUNK => long_softmax(self, log),
            _ => k::softmax(self, log),
        }
    }
    fn normalize(&self, g: Option<&Self>, eps: f64) -> TResult<Self> {
        normalize(self, g, eps)
    }
    fn softmax_grad(&self, g: &Self, log: bool) -> TResult<Self> {
        softmax_grad(self, g, log)
    }
    fn concat(parts: &[&Self], axis: usize) -> TResult<Self> {
        let mut shape = parts.first().ok_or_else(|| TensorError::internal("concat of nothing"))?.shape.clone();
        shape[axis] = parts.iter().map(|t| t.shape[axis]).sum();
        k::concat(parts, axis, &shape)
    }
    fn slice(&self, axis: usize, lo: usize, hi: usize) -> TResult<Self> {
        k::slice(self, axis, lo, hi)
    }
    fn unslice(&self, axis: usize, lo: usize, shape: &[usize]) -> TResult<Self> {
        k::unslice(self, axis, lo, shape)
    }
    fn max_axis(&self, axis: usize) -> TResult<Self> {
        k::reduce_axis(self, axis, Fold::Max, 1.0)
    }
    fn cumsum(&self, axis: usize) -> TResult<Self> {
        k::cumsum(self, axis)
    }
    fn mask(&self, m: &Self) -> TResult<Self> {
        k::binary(Bin::Mask, self, m)
    }
    fn step(&self) -> TResult<Self> {
        k::unary(UnOp::Step, self, 0.0, 0.0)
    }
    fn sign(&self) -> TResult<Self> {
        k::unary(UnOp::Sign, self, 0.0, 0.0)
    }
    fn argmax_mask(&self) -> TResult<Self> {
        k::argmax_mask(self)
    }
    fn conv2d(&self, w: &Self, cv: Conv) -> TResult<Self> {
        k::conv2d(self, w, cv)
    }
    fn conv2d_grad(&self, w: &Self, g: &Self, cv: Conv, input: bool) -> TResult<Self> {
        k::conv2d_grad(self, w, g, cv, input)
    }
    fn max_pool(&self, kk: usize, other: Option<&Self>, pick: bool) -> TResult<Self> {
        k::max_pool(self, kk, other, pick)
    }
}

/// The position of the first largest element along `axis` (removed), as float32: the
/// largest of (n − position) over the positions that hold the maximum, subtracted from n.
pub fn argmax_axis(x: &GpuTensor, axis: usize) -> TResult<GpuTensor> {
    let n = x.shape[axis];
    let mut kept = x.shape.clone();
    kept[axis] = 1;
    let top = k::reduce_axis(x, axis, Fold::Max, 1.0)?.reshaped(kept);
    let at_top = k::compare(Cmp::Equal, x, &top)?;
    let mut along = vec![1; x.shape.len()];
    along[axis] = n;
    let rank_from_end: Vec<f32> = (0..n).map(|i| (n - i) as f32).collect();
    let ranks = super::upload(
        &ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&along), rank_from_end).map_err(|e| e.to_string())?,
    )?;
    let first = k::reduce_axis(&k::binary(Bin::Mul, &at_top, &ranks)?, axis, Fold::Max, 1.0)?;
    k::binary_scalar(Bin::Sub, &first, n as f32, true)
}

/// `Normalize` and `NormalizeGrad` from the GPU's kernels: the per-row mean and reciprocal
/// standard deviation by reductions over the last axis, the rest elementwise with those
/// broadcast along it (a handful of dispatches: layer norm is a small part of a GPU step).
fn normalize(x: &GpuTensor, g: Option<&GpuTensor>, eps: f64) -> TResult<GpuTensor> {
    let len = *x.shape.last().ok_or_else(|| TensorError::internal("normalize of a scalar"))?;
    let scale = 1.0 / len.max(1) as f32;
    let mean_kept = |t: &GpuTensor| fold_last(t, Fold::Sum, scale);
    let c = k::binary(Bin::Sub, x, &mean_kept(x)?)?;
    let var = mean_kept(&k::binary(Bin::Mul, &c, &c)?)?;
    let sd = unary(Un::Sqrt, &k::binary_scalar(Bin::Add, &var, eps as f32, false)?)?;
    let rstd = k::binary_scalar(Bin::Div, &sd, 1.0, true)?;
    let y = k::binary(Bin::Mul, &c, &rstd)?;
    let Some(g) = g else { return Ok(y) };
    // rstd · (g − mean g − y · mean (g y))
    let mg = mean_kept(g)?;
    let mgy = mean_kept(&k::binary(Bin::Mul, g, &y)?)?;
    let centred = k::binary(Bin::Sub, g, &mg)?;
    let d = k::binary(Bin::Sub, &centred, &k::binary(Bin::Mul, &y, &mgy)?)?;
    k::binary(Bin::Mul, &d, &rstd)
}

/// `t` folded over its last axis (times `scale`), that axis kept with length 1 so the result
/// broadcasts back along it. `t` has at least one axis.
fn fold_last(t: &GpuTensor, fold: Fold, scale: f32) -> TResult<GpuTensor> {
    let last = t.shape.len() - 1;
    let mut kept = t.shape.clone();
    kept[last] = 1;
    Ok(k::reduce_axis(t, last, fold, scale)?.reshaped(kept))
}

/// softmax (log_softmax) of rows too long for one workgroup's loop (`softmax.wgsl`'s came out
/// wrong past ~1.37M elements on lavapipe), from the chunked reductions: x − m − log Σ exp(x − m)
/// with m the row's maximum, exponentiated for softmax.
fn long_softmax(x: &GpuTensor, log: bool) -> TResult<GpuTensor> {
    let shifted = k::binary(Bin::Sub, x, &fold_last(x, Fold::Max, 1.0)?)?;
    let sum = fold_last(&unary(Un::Exp, &shifted)?, Fold::Sum, 1.0)?;
    let log_p = k::binary(Bin::Sub, &shifted, &unary(Un::Log, &sum)?)?;
    if log {
        return Ok(log_p);
    }
    unary(Un::Exp, &log_p)
}

/// `SoftmaxGrad` from the GPU's kernels: the row sums by a reduction over the last axis, the
/// rest elementwise with them broadcast along it.
fn softmax_grad(y: &GpuTensor, g: &GpuTensor, log: bool) -> TResult<GpuTensor> {
    if y.shape.is_empty() {
        return Err(TensorError::internal("softmax_grad of a scalar"));
    }
    let sum_kept = |t: &GpuTensor| fold_last(t, Fold::Sum, 1.0);
    if log {
        // g − exp y · Σ g
        let p = unary(Un::Exp, y)?;
        return k::binary(Bin::Sub, g, &k::binary(Bin::Mul, &p, &sum_kept(g)?)?);
    }
    // y · (g − Σ g y)
    let s = sum_kept(&k::binary(Bin::Mul, g, y)?)?;
    k::binary(Bin::Mul, y, &k::binary(Bin::Sub, g, &s)?)
}

/// A math function on a GPU tensor.
pub fn unary(op: Un, x: &GpuTensor) -> TResult<GpuTensor> {
    k::unary(UnOp::Math(op), x, 0.0, 0.0)
}

/// ln x where x > 0, else 0: the factor of the derivative of a ** b with respect to b.
pub fn log_or_zero(x: &GpuTensor) -> TResult<GpuTensor> {
    k::unary(UnOp::LogPos, x, 0.0, 0.0)
}

/// Whether some element is nonzero (or, with `zeros`, is zero), reading back one value.
pub fn any_nonzero(x: &GpuTensor, zeros: bool) -> TResult<bool> {
    if x.is_empty() {
        return Ok(false);
    }
    let test = if zeros { k::logical_not(x)? } else { k::compare_scalar(Cmp::NotEqual, x, 0.0)? };
    Ok(k::reduce_all(&test, Fold::Max, 0.0)? > 0.0)
}

/// Whether every element is positive (NaN is not), reading back one value rather than x.
pub fn all_positive(x: &GpuTensor) -> TResult<bool> {
    if x.is_empty() {
        return Ok(true);
    }
    let not_positive = k::binary_scalar(Bin::Sub, &k::unary(UnOp::Step, x, 0.0, 0.0)?, 1.0, true)?;
    Ok(k::reduce_all(&not_positive, Fold::Max, 0.0)? == 0.0)
}
