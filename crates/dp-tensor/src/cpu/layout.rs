//! The operations that move elements without computing with them (reshape, transpose, rows,
//! slices, concatenation, broadcasting), for every dtype: the floating backend and the int64
//! and bool tensors share these.

use crate::{fmt_shape, TResult};
use ndarray::{ArrayD, Axis, IxDyn, Slice};

pub fn broadcast_to<T: Clone>(a: &ArrayD<T>, shape: &[usize]) -> TResult<ArrayD<T>> {
    let b = a
        .broadcast(IxDyn(shape))
        .ok_or_else(|| format!("cannot broadcast shape {} to {}", fmt_shape(a.shape()), fmt_shape(shape)))?;
    Ok(b.to_owned())
}

pub fn reshape<T: Clone>(a: &ArrayD<T>, shape: &[usize]) -> TResult<ArrayD<T>> {
    let a = a.as_standard_layout().to_owned();
    Ok(a.into_shape_with_order(IxDyn(shape)).map_err(|e| e.to_string())?)
}

/// Reverses the axes (the usual transpose for matrices).
pub fn transpose<T: Clone>(a: &ArrayD<T>) -> ArrayD<T> {
    a.t().as_standard_layout().into_owned()
}

/// Axis i of the result is axis `perm[i]` of `a` (a permutation, checked by the op's rule).
pub fn permute<T: Clone>(a: &ArrayD<T>, perm: &[usize]) -> ArrayD<T> {
    a.view().permuted_axes(IxDyn(perm)).as_standard_layout().into_owned()
}

pub fn row<T: Clone>(a: &ArrayD<T>, i: usize) -> ArrayD<T> {
    a.index_axis(Axis(0), i).to_owned()
}

pub fn concat<T: Clone>(parts: &[&ArrayD<T>], axis: usize) -> TResult<ArrayD<T>> {
    let views: Vec<_> = parts.iter().map(|t| t.view()).collect();
    Ok(ndarray::concatenate(Axis(axis), &views).map_err(|e| e.to_string())?)
}

pub fn slice<T: Clone>(a: &ArrayD<T>, axis: usize, lo: usize, hi: usize) -> ArrayD<T> {
    a.slice_axis(Axis(axis), Slice::from(lo..hi)).to_owned()
}
