//! `Softmax`, `LogSoftmax` and their adjoint `SoftmaxGrad` on the CPU, one row (a vector along
//! the last axis) at a time: a row of attention's scores (64 floats) stays in the L1 cache
//! while its statistics and its result are computed, so each operation is one read and one
//! write of the tensor. Written out of `*`, `sum_axis` and `-`, the adjoint was four passes
//! over the largest tensors of a Transformer step.

use super::elementwise;
use super::simd::{self, fold2, widened};
use crate::{Real, TResult};
use ndarray::ArrayD;
use std::mem::MaybeUninit;

/// Softmax (or, with `log`, log-softmax) of `x` over its last axis, rows in pieces over the
/// pool when large.
pub(super) fn softmax<T: Real>(x: &ArrayD<T>, log: bool) -> TResult<ArrayD<T>> {
    let n = *x.shape().last().ok_or_else(|| crate::TensorError::internal("softmax of a scalar"))?;
    let x = x.as_standard_layout();
    let Some(data) = x.as_slice() else {
        return Err(crate::TensorError::internal("softmax: a row-major copy is not a slice"));
    };
    if n == 0 || data.is_empty() {
        return Ok(x.into_owned());
    }
    // Rows are independent: pieces of whole rows on the pool when it pays. An element costs
    // about two exps' time (~1 ns against exp's ~0.45 on AVX-512, by a loop of softmaxes of
    // attention's [16, 4, 64, 64]): the exp, a division, and the row's two folds.
    let cost = 2.0 * elementwise::FUNCTION_COST + elementwise::ARITHMETIC_COST;
    // SAFETY: `softmax_rows` writes every row of its piece (n divides the piece).
    let out = unsafe { simd::build_in_pieces(data.len(), n, cost, &|r, d| softmax_rows(&data[r], n, log, d)) };
    ArrayD::from_shape_vec(x.raw_dim(), out).map_err(|e| e.to_string().into())
}

/// The adjoint of softmax (or log-softmax) at its result `y` for the result's adjoint `g`:
/// per row, y · (g − Σ g y), or g − exp y · Σ g.
pub(super) fn softmax_grad<T: Real>(y: &ArrayD<T>, g: &ArrayD<T>, log: bool) -> TResult<ArrayD<T>> {
    let n = *y.shape().last().ok_or_else(|| crate::TensorError::internal("softmax_grad of a scalar"))?;
    let (y, g) = (y.as_standard_layout(), g.as_standard_layout());
    let (Some(ys), Some(gs)) = (y.as_slice(), g.as_slice()) else {
        return Err(crate::TensorError::internal("softmax_grad: a row-major copy is not a slice"));
    };
    if ys.len() != gs.len() {
        return Err(crate::TensorError::internal("softmax_grad of operands of two shapes"));
    }
    if n == 0 || ys.is_empty() {
        return Ok(y.into_owned());
    }
    // A fold and a multiply-subtract per element (and an exp for log-softmax's).
    let cost = 2.0 * elementwise::ARITHMETIC_COST + if log { elementwise::FUNCTION_COST } else { 0.0 };
    let write =
        |r: std::ops::Range<usize>, d: &mut [MaybeUninit<T>]| softmax_grad_rows(&ys[r.clone()], &gs[r], n, log, d);
    // SAFETY: each piece is whole rows (n divides it), and `softmax_grad_rows` writes every
    // element of its rows.
    let out = unsafe { simd::build_in_pieces(ys.len(), n, cost, &write) };
    ArrayD::from_shape_vec(y.raw_dim(), out).map_err(|e| e.to_string().into())
}

#[inline(always)]
fn softmax_grad_rows_body<T: Real>(ys: &[T], gs: &[T], n: usize, log: bool, out: &mut [MaybeUninit<T>]) {
    for ((y, g), o) in ys.chunks_exact(n).zip(gs.chunks_exact(n)).zip(out.chunks_exact_mut(n)) {
        if log {
            let s = fold2(g, g, |g, _| g);
            for ((o, &g), &y) in o.iter_mut().zip(g).zip(y) {
                o.write(g - T::un(crate::Un::Exp, y) * s);
            }
        } else {
            let s = fold2(g, y, |g, y| g * y);
            for ((o, &g), &y) in o.iter_mut().zip(g).zip(y) {
                o.write(y * (g - s));
            }
        }
    }
}

widened! {
    fn softmax_grad_rows[T: Real](ys: &[T], gs: &[T], n: usize, log: bool, out: &mut [MaybeUninit<T>]) -> () => softmax_grad_rows_body
}

/// Softmax (or log-softmax) of each row of `n` elements of `data`, row by row into one new
/// buffer: the general path makes four activation-sized temporaries (the shifted values,
/// their exponentials, the broadcast sums, the quotient), and attention's scores are the
/// largest tensors of a Transformer step: exp (x − max), then scaled by the reciprocal of the
/// row's sum, or x − max − ln (sum).
#[inline(always)]
fn softmax_rows_body<T: Real>(data: &[T], n: usize, log: bool, out: &mut [MaybeUninit<T>]) {
    for (row, o) in data.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        let max = max_of_lanes(row);
        // The exponentials, summed as they are written: lane j of `acc` takes the elements
        // j, j + 16, ... of the whole blocks of 16, the elements after them are summed in
        // order, then the lanes added to that one by one (the order `e.sum` had in its own
        // pass).
        let mut acc = [T::zero(); LANES];
        let (blocks, rest) = row.split_at(n - n % LANES);
        let (o_blocks, o_rest) = o.split_at_mut(blocks.len());
        for (xs, os) in blocks.chunks_exact(LANES).zip(o_blocks.chunks_exact_mut(LANES)) {
            for ((a, o), &x) in acc.iter_mut().zip(os).zip(xs) {
                let e = T::un(crate::Un::Exp, x - max);
                o.write(e);
                *a += e;
            }
        }
        // The last partial block's exponentials as one whole block (a row of 55 logits took
        // twice the time of a row of 64 with these one at a time), summed in order.
        let mut sum = T::zero();
        if !rest.is_empty() {
            let mut xs = [max; LANES];
            xs[..rest.len()].copy_from_slice(rest);
            for x in xs.iter_mut() {
                *x = T::un(crate::Un::Exp, *x - max);
            }
            for (o, &e) in o_rest.iter_mut().zip(&xs) {
                o.write(e);
                sum += e;
            }
        }
        for a in acc {
            sum += a;
        }
        if log {
            let lse = sum.ln();
            for (o, &x) in o.iter_mut().zip(row) {
                o.write(x - max - lse);
            }
        } else {
            // One division per row, then products: a vector division takes about as long as
            // the whole exponential (~16 cycles on AVX-512), and e · (1 / sum) is within an
            // ulp of e / sum (PyTorch's CPU softmax scales by the reciprocal too).
            let scale = T::one() / sum;
            for o in o.iter_mut() {
                // SAFETY: written by the loops above.
                let e = unsafe { o.assume_init() };
                o.write(e * scale);
            }
        }
    }
}

/// The lanes a row's maximum and sum are folded in: a fold one element after another waits
/// out each operation's latency (an ordered float fold does not vectorize), and a row of
/// attention's scores is short.
const LANES: usize = simd::FOLD_LANES;

/// The largest element of `xs` (NaNs passed over, as `max` does; −∞ when there is no other):
/// 16 interleaved lanes, then the lanes halved until one is left. The maximum does not depend
/// on the order.
#[inline(always)]
fn max_of_lanes<T: Real>(xs: &[T]) -> T {
    let mut acc = [T::neg_infinity(); LANES];
    let chunks = xs.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a = a.max(x);
        }
    }
    for (a, &x) in acc.iter_mut().zip(rest) {
        *a = a.max(x);
    }
    let mut width = LANES / 2;
    while width > 0 {
        for j in 0..width {
            acc[j] = acc[j].max(acc[j + width]);
        }
        width /= 2;
    }
    acc[0]
}

widened! {
    fn softmax_rows[T: Real](data: &[T], n: usize, log: bool, out: &mut [MaybeUninit<T>]) -> () => softmax_rows_body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::simd::tests::{agrees_with_differences, row_operands};
    use ndarray::IxDyn;

    /// Against the definitions in float64: softmax's and log-softmax's rows of a [3, 37] tensor
    /// (a remainder after the lanes) and their adjoints, y · (g − Σ g y) and g − e^y Σ g,
    /// checked by finite differences of Σ g · softmax(x); over the pool's pieces the same bits.
    #[test]
    fn rows_and_their_adjoints_follow_the_definitions() {
        let (rows, n) = (3, 37);
        let (x, g) = row_operands(rows, n);
        for log in [false, true] {
            let y = softmax(&x, log).unwrap();
            for r in 0..rows {
                let max = (0..n).map(|j| x[[r, j]]).fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = (0..n).map(|j| (x[[r, j]] - max).exp()).sum();
                for j in 0..n {
                    let p = (x[[r, j]] - max).exp() / sum;
                    let want = if log { p.ln() } else { p };
                    assert!((y[[r, j]] - want).abs() < 1e-12, "log {log}: row {r} element {j}");
                }
            }
            let dx = softmax_grad(&y, &g, log).unwrap();
            let loss = |x: &ArrayD<f64>| (softmax(x, log).unwrap() * &g).sum();
            agrees_with_differences(&x, &dx, loss, if log { "log_softmax" } else { "softmax" });
            let big = ArrayD::from_shape_fn(IxDyn(&[700, 64]), |i| ((i[0] * 7 + i[1] * 3) % 19) as f32 / 9.0 - 1.0);
            let p = softmax(&big, log).unwrap();
            let one = softmax_grad(&p, &big, log).unwrap();
            let par = crate::cpu::gemm::with_forced_parallel(|| softmax_grad(&p, &big, log).unwrap());
            assert_eq!(one, par);
        }
    }
}
