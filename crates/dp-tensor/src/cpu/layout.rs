//! The operations that move elements without computing with them (reshape, transpose, rows,
//! slices, concatenation, broadcasting), for every dtype: the floating backend and the int64
//! and bool tensors share these.

use super::simd::{self, Repeat};
use crate::{fmt_shape, TResult};
use ndarray::{ArrayD, Axis, IxDyn, Slice};
use std::mem::MaybeUninit;

pub fn broadcast_to<T: Clone>(a: &ArrayD<T>, shape: &[usize]) -> TResult<ArrayD<T>> {
    let b = a
        .broadcast(IxDyn(shape))
        .ok_or_else(|| format!("cannot broadcast shape {} to {}", fmt_shape(a.shape()), fmt_shape(shape)))?;
    // The broadcasts of reverse rules (a bias's gradient over a batch, a per-row statistic's
    // over its row) as block copies and fills; ndarray's copy steps a multi-axis index per
    // element.
    if let (Some(how), Some(data)) = (repeat_of(a, shape), a.as_slice()) {
        let n: usize = shape.iter().product();
        let mut out = Vec::with_capacity(n);
        match how {
            Repeat::Cycle => {
                for _ in 0..n / data.len() {
                    out.extend_from_slice(data);
                }
            }
            Repeat::Spread => {
                for x in data {
                    out.extend(std::iter::repeat_n(x.clone(), n / data.len()));
                }
            }
        }
        if let Ok(out) = ArrayD::from_shape_vec(IxDyn(shape), out) {
            return Ok(out);
        }
    }
    Ok(b.to_owned())
}

pub fn reshape<T: Copy + Send + Sync>(a: &ArrayD<T>, shape: &[usize]) -> TResult<ArrayD<T>> {
    let a = match a.as_slice() {
        // A reshape under `grad` copies activations (the operand stays its adjoint record's):
        // an identity map, over the threads when large.
        Some(data) => simd::map_into_par(data, simd::By(|x: T| x), COPY_COST),
        None => a.as_standard_layout().iter().copied().collect(),
    };
    Ok(ArrayD::from_shape_vec(IxDyn(shape), a).map_err(|e| e.to_string())?)
}

/// The work of copying an element, in the pool's flops (`simd::in_pieces`): a copy is
/// memory-bound, like an arithmetic loop.
const COPY_COST: f64 = super::elementwise::ARITHMETIC_COST;

/// Reverses the axes (the usual transpose for matrices).
pub fn transpose<T: Clone>(a: &ArrayD<T>) -> ArrayD<T> {
    a.t().as_standard_layout().into_owned()
}

/// Axis i of the result is axis `perm[i]` of `a` (a permutation, checked by the op's rule).
/// The result is written in order, row by row of its last axis, reading `a` through the
/// permuted strides: ndarray's general copy steps a multi-axis index per element, and the
/// head split and merge of attention permute activation-sized tensors.
pub fn permute<T: Copy + Send + Sync>(a: &ArrayD<T>, perm: &[usize]) -> ArrayD<T> {
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
    // The rows of the result in `range` (whole rows of `inner` elements), into `out`.
    let write = |range: std::ops::Range<usize>, out: &mut [MaybeUninit<T>]| {
        // The first row's index and offset in `a`; offsets stay inside `data`, being those
        // of the view's elements.
        let (mut idx, mut at) = (vec![0; r], 0isize);
        let mut row = range.start / inner;
        for d in (0..r).rev() {
            idx[d] = row % shape[d];
            row /= shape[d];
            at += idx[d] as isize * strides[d];
        }
        for o in out.chunks_exact_mut(inner) {
            // A last axis kept in place (attention's head split and merge keep the head's
            // features) is one copy.
            if step == 1 {
                for (o, &x) in o.iter_mut().zip(&data[at as usize..at as usize + inner]) {
                    o.write(x);
                }
            } else {
                for (j, o) in o.iter_mut().enumerate() {
                    o.write(data[(at + j as isize * step) as usize]);
                }
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
    };
    // SAFETY: the pieces are whole rows (granule `inner`), each written whole.
    let out = unsafe { simd::build_in_pieces(data.len(), inner, COPY_COST, &write) };
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
    let view = a.slice_axis(Axis(axis), Slice::from(lo..hi));
    // A row-major array's slice is a run of (hi - lo) · inner elements per position before
    // the axis (attention's q, k and v out of one [B T, 3d] product): copied run by run, where
    // ndarray's `to_owned` of the strided view goes element by element.
    if let (Some(data), true) = (a.as_slice(), axis < a.ndim()) {
        let inner: usize = a.shape()[axis + 1..].iter().product();
        let block = a.shape()[axis] * inner;
        let (from, to) = (lo * inner, hi * inner);
        if block > 0 && to <= block {
            let mut out = Vec::with_capacity(view.len());
            for b in data.chunks_exact(block) {
                out.extend_from_slice(&b[from..to]);
            }
            if let Ok(r) = ArrayD::from_shape_vec(view.raw_dim(), out) {
                return r;
            }
        }
    }
    view.to_owned()
}

/// `a[…, lo..lo + n, …] += g` along `axis` (n = g's length there), in place; false, with
/// nothing written, when `g` does not fit there.
pub fn add_into_slice<T: Clone + std::ops::AddAssign>(
    a: &mut ArrayD<T>,
    axis: usize,
    lo: usize,
    g: &ArrayD<T>,
) -> bool {
    let (s, gs) = (a.shape(), g.shape());
    let fits = s.len() == gs.len()
        && axis < s.len()
        && lo + gs[axis] <= s[axis]
        && (0..s.len()).all(|i| i == axis || s[i] == gs[i]);
    if fits {
        a.slice_axis_mut(Axis(axis), Slice::from(lo..lo + gs[axis])).zip_mut_with(g, |x, y| *x += y.clone());
    }
    fits
}

/// How a row-major `y` broadcast to `shape` repeats as flat blocks: along leading axes (a
/// bias: its shape a suffix of the result's, repeated block by block) or trailing ones (a
/// per-row statistic such as layer norm's mean, [n, 1]: each element spread over a block);
/// None for any other broadcast, or when `y` is not row-major. These are the broadcasts of a
/// model's layers, which ndarray's general iteration ran element by element.
pub(crate) fn repeat_of<T>(y: &ArrayD<T>, shape: &[usize]) -> Option<Repeat> {
    if !y.is_standard_layout() {
        return None;
    }
    repeat_of_shape(y.shape(), shape)
}

/// `y` (row-major) as an operand that repeats over `shape` (`repeat_of`): itself when it does,
/// else its `cycled_block`, which cycles. None otherwise (ndarray's general iteration).
pub(crate) fn as_repeat<'a, T: Clone>(
    y: &'a ArrayD<T>,
    shape: &[usize],
) -> Option<(std::borrow::Cow<'a, ArrayD<T>>, Repeat)> {
    match repeat_of(y, shape) {
        Some(how) => Some((std::borrow::Cow::Borrowed(y), how)),
        None => Some((std::borrow::Cow::Owned(cycled_block(y, shape)?), Repeat::Cycle)),
    }
}

/// A broadcast of `y` to `shape` that leaves leading axes over which `y` is constant, as the
/// block that cycles over them: `y` spread over the trailing axes from the first one it varies
/// along, made once (attention's [Tq, 1] factor against [B, H, Tq, dv] is a [Tq, dv] block
/// cycled B H times). None when that block is not a small part of the result (a quarter at
/// most), or `y` is not row-major.
pub(crate) fn cycled_block<T: Clone>(y: &ArrayD<T>, shape: &[usize]) -> Option<ArrayD<T>> {
    let pad = shape.len().checked_sub(y.ndim())?;
    let first = pad + y.shape().iter().position(|&d| d != 1)?;
    let (block, total) = (shape[first..].iter().product::<usize>(), shape.iter().product::<usize>());
    if first == 0 || block.saturating_mul(4) > total || !y.is_standard_layout() {
        return None;
    }
    let own = y.to_shape(IxDyn(&y.shape()[first - pad..])).ok()?;
    Some(own.broadcast(IxDyn(&shape[first..]))?.as_standard_layout().into_owned())
}

/// `repeat_of` for a row-major operand of shape `own` (the GPU's tensors are all row-major).
pub(crate) fn repeat_of_shape(own: &[usize], shape: &[usize]) -> Option<Repeat> {
    let n: usize = shape.iter().product();
    let len: usize = own.iter().product();
    if len == 0 || !n.is_multiple_of(len) {
        return None;
    }
    let kept: Vec<usize> = own.iter().copied().skip_while(|&d| d == 1).collect();
    if shape.ends_with(&kept) {
        return Some(Repeat::Cycle);
    }
    let lead = own.iter().rposition(|&d| d != 1).map_or(0, |i| i + 1);
    let pad = shape.len().checked_sub(own.len())?;
    (shape[pad..pad + lead] == own[..lead] && shape[..pad].iter().all(|&d| d == 1)).then_some(Repeat::Spread)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_copied_run_by_run_are_ndarrays_slices() {
        let a = ArrayD::from_shape_vec(IxDyn(&[3, 4, 5]), (0..60).collect::<Vec<i64>>()).unwrap();
        for axis in 0..3 {
            let n = a.shape()[axis];
            for (lo, hi) in [(0, n), (1, n - 1), (2, 2), (n - 1, n)] {
                let want = a.slice_axis(Axis(axis), Slice::from(lo..hi)).to_owned();
                assert_eq!(slice(&a, axis, lo, hi), want, "axis {axis} {lo}..{hi}");
            }
        }
        // A transposed (not row-major) array takes ndarray's own copy.
        let t = a.clone().reversed_axes();
        assert_eq!(slice(&t, 1, 1, 3), t.slice_axis(Axis(1), Slice::from(1..3)).to_owned());
    }

    #[test]
    fn permutes_and_reshapes_in_pieces_agree_with_ndarrays_copies() {
        // Large enough for several pieces on the pool; a kept last axis and a moved one.
        let shape = [4, 9, 33, 17];
        let a = ArrayD::from_shape_vec(IxDyn(&shape), (0..shape.iter().product::<usize>()).map(|i| i as i64).collect())
            .unwrap();
        for perm in [[0, 2, 1, 3], [3, 1, 0, 2], [2, 0, 3, 1]] {
            let want = a.view().permuted_axes(IxDyn(&perm)).as_standard_layout().into_owned();
            let got = crate::cpu::gemm::with_forced_parallel(|| permute(&a, &perm));
            assert_eq!(got, want, "{perm:?}");
            assert_eq!(permute(&a, &perm), want, "{perm:?} on one thread");
        }
        let flat = crate::cpu::gemm::with_forced_parallel(|| reshape(&a, &[36, 561]).unwrap());
        assert_eq!(flat.as_slice(), a.as_slice());
    }

    #[test]
    fn broadcast_to_agrees_with_ndarrays_copy() {
        let cases: [(&[usize], &[usize]); 7] = [
            (&[3], &[2, 3]),
            (&[1, 3], &[4, 2, 3]),
            (&[2, 1], &[2, 5]),
            (&[2, 1, 1], &[2, 3, 4]),
            (&[1], &[0, 4]),
            (&[2, 1, 3], &[2, 4, 3]),
            (&[2, 3], &[2, 3]),
        ];
        for (from, to) in cases {
            let n: usize = from.iter().product();
            let a = ArrayD::from_shape_vec(IxDyn(from), (0..n as i64).collect::<Vec<_>>()).unwrap();
            let want = a.broadcast(IxDyn(to)).unwrap().to_owned();
            assert_eq!(broadcast_to(&a, to).unwrap(), want, "{from:?} -> {to:?}");
        }
        assert!(broadcast_to(&ArrayD::<f32>::zeros(IxDyn(&[2])), &[3]).is_err());
    }

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
