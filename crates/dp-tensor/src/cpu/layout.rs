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
/// The result is written in order, row by row of its last axis, reading `a` through the
/// permuted strides: ndarray's general copy steps a multi-axis index per element, and the
/// head split and merge of attention permute activation-sized tensors.
pub fn permute<T: Clone>(a: &ArrayD<T>, perm: &[usize]) -> ArrayD<T> {
    let v = a.view().permuted_axes(IxDyn(perm));
    let (Some(data), Some(&inner)) = (a.as_slice(), v.shape().last()) else {
        return v.as_standard_layout().into_owned();
    };
    if v.is_standard_layout() || inner == 0 {
        return v.to_owned();
    }
    let (shape, strides) = (v.shape().to_vec(), v.strides().to_vec());
    let r = shape.len() - 1;
    let step = strides[r];
    let mut out = Vec::with_capacity(data.len());
    let (mut idx, mut at) = (vec![0; r], 0isize);
    for _ in 0..data.len() / inner {
        // Offsets stay inside `data`: they are those of the view's elements. A last axis kept
        // in place (attention's head split and merge keep the head's features) is one copy.
        if step == 1 {
            out.extend_from_slice(&data[at as usize..at as usize + inner]);
        } else {
            out.extend((0..inner as isize).map(|j| data[(at + j * step) as usize].clone()));
        }
        for d in (0..r).rev() {
            idx[d] += 1;
            at += strides[d];
            if idx[d] < shape[d] {
                break;
            }
            at -= strides[d] * shape[d] as isize;
            idx[d] = 0;
        }
    }
    ArrayD::from_shape_vec(IxDyn(&shape), out).unwrap_or_else(|_| v.as_standard_layout().into_owned())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permute_agrees_with_ndarrays_copy() {
        let a = ArrayD::from_shape_vec(IxDyn(&[2, 3, 4, 5]), (0..120).collect::<Vec<i64>>()).unwrap();
        for perm in [[0, 2, 1, 3], [0, 1, 3, 2], [3, 2, 1, 0], [1, 0, 2, 3], [0, 1, 2, 3]] {
            let want = a.view().permuted_axes(IxDyn(&perm)).as_standard_layout().into_owned();
            let got = permute(&a, &perm);
            assert_eq!(got, want, "{perm:?}");
            assert!(got.is_standard_layout());
        }
        // A view that is not row-major takes ndarray's path, with the same result.
        let t = a.clone().reversed_axes();
        assert_eq!(permute(&t, &[1, 0, 2, 3]), t.view().permuted_axes(IxDyn(&[1, 0, 2, 3])).as_standard_layout());
        assert_eq!(permute(&ArrayD::<f32>::zeros(IxDyn(&[0, 3])), &[1, 0]).shape(), &[3, 0]);
    }
}
