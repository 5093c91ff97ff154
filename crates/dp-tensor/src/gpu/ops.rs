//! The op table (`ops::Backend`) on GPU tensors: each operation's kernel. `item` reads back by
//! nature (it returns a host value); `argmax` reads back only its index
//! (`kernels::argmax_index`).

use super::kernels::{self as k, Fold, UnOp};
use super::GpuTensor;
use crate::op::{Bin, Conv, Un};
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
        k::softmax(self, log)
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

/// A math function on a GPU tensor.
pub fn unary(op: Un, x: &GpuTensor) -> TResult<GpuTensor> {
    k::unary(UnOp::Math(op), x, 0.0, 0.0)
}

/// ln x where x > 0, else 0: the factor of the derivative of a ** b with respect to b.
pub fn log_or_zero(x: &GpuTensor) -> TResult<GpuTensor> {
    k::unary(UnOp::LogPos, x, 0.0, 0.0)
}

/// Whether every element is positive (NaN is not), reading back one value rather than x.
pub fn all_positive(x: &GpuTensor) -> TResult<bool> {
    if x.is_empty() {
        return Ok(true);
    }
    let not_positive = k::binary_scalar(Bin::Sub, &k::unary(UnOp::Step, x, 0.0, 0.0)?, 1.0, true)?;
    Ok(k::reduce_all(&not_positive, Fold::Max, 0.0)? == 0.0)
}
