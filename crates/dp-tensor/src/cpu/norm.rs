//! `Normalize` and `NormalizeGrad` on the CPU: layer norm's core, each row (a vector along
//! the last axis) to mean 0 and variance 1, and its adjoint, one row at a time. A row of a
//! Transformer's activations (64 floats) stays in the L1 cache while its two statistics and its
//! result are computed, so the whole operation is one read and one write of the tensor, where
//! the same function written with `mean_axis`, `-`, `*`, `sqrt`, `/` (dp's `nn.layer_norm`
//! before, or PyTorch's composite forms) makes nine passes forward and some twenty backward.
//!
//! Per row of n elements x, with mean μ = Σx / n, variance v = Σ(x − μ)² / n (the population
//! variance, as PyTorch's LayerNorm) and r = 1 / √(v + eps):
//!   y = (x − μ) · r,
//!   adjoint for the result's adjoint g:  r · (g − Σg / n − y · Σ(g y) / n)
//! (the Jacobian r (I − 11ᵀ/n − y yᵀ/n) is symmetric, so this is also the tangent map).

use super::simd::{self, fold2, widened};
use crate::{Real, TResult};
use ndarray::ArrayD;
use std::mem::MaybeUninit;

/// The result (`g` None) or the adjoint (`g` Some) of `Normalize(eps)` at `x`, rows in pieces
/// over the pool when large. Operands that are not row-major are made so first.
pub(super) fn normalize<T: Real>(x: &ArrayD<T>, g: Option<&ArrayD<T>>, eps: f64) -> TResult<ArrayD<T>> {
    let n = *x.shape().last().ok_or_else(|| crate::TensorError::internal("normalize of a scalar"))?;
    let x = x.as_standard_layout();
    let g = g.map(|g| g.as_standard_layout());
    let (Some(xs), gs) = (x.as_slice(), g.as_ref().map(|g| g.as_slice())) else {
        return Err(crate::TensorError::internal("normalize: a row-major copy is not a slice"));
    };
    let gs = match gs {
        Some(Some(s)) if s.len() == xs.len() => Some(s),
        Some(_) => return Err(crate::TensorError::internal("normalize_grad of operands of two shapes")),
        None => None,
    };
    if n == 0 || xs.is_empty() {
        return Ok(ArrayD::zeros(x.raw_dim()));
    }
    let eps = T::of_f64(eps);
    // Per element: two folds and a multiply-subtract forward; four folds and the combination
    // backward (in the pool's units, `elementwise::ARITHMETIC_COST` each).
    let cost = super::elementwise::ARITHMETIC_COST * if gs.is_some() { 6.0 } else { 3.0 };
    let write = |r: std::ops::Range<usize>, d: &mut [MaybeUninit<T>]| match gs {
        None => normalize_rows(&xs[r], n, eps, d),
        Some(gs) => normalize_grad_rows(&xs[r.clone()], &gs[r], n, eps, d),
    };
    // SAFETY: each piece is whole rows (n divides it), and the row functions write every
    // element of theirs.
    let out = unsafe { simd::build_in_pieces(xs.len(), n, cost, &write) };
    ArrayD::from_shape_vec(x.raw_dim(), out).map_err(|e| e.to_string().into())
}

/// The row's mean and reciprocal standard deviation.
#[inline(always)]
fn stats<T: Real>(row: &[T], eps: T) -> (T, T) {
    let count = T::of_f64(row.len() as f64);
    let mean = fold2(row, row, |x, _| x) / count;
    let var = fold2(row, row, |x, _| (x - mean) * (x - mean)) / count;
    (mean, T::one() / (var + eps).sqrt())
}

#[inline(always)]
fn normalize_rows_body<T: Real>(xs: &[T], n: usize, eps: T, out: &mut [MaybeUninit<T>]) {
    for (row, o) in xs.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        let (mean, rstd) = stats(row, eps);
        for (o, &x) in o.iter_mut().zip(row) {
            o.write((x - mean) * rstd);
        }
    }
}

#[inline(always)]
fn normalize_grad_rows_body<T: Real>(xs: &[T], gs: &[T], n: usize, eps: T, out: &mut [MaybeUninit<T>]) {
    let count = T::of_f64(n as f64);
    for ((row, g), o) in xs.chunks_exact(n).zip(gs.chunks_exact(n)).zip(out.chunks_exact_mut(n)) {
        let (mean, rstd) = stats(row, eps);
        let mg = fold2(g, g, |g, _| g) / count;
        let mgy = fold2(g, row, |g, x| g * ((x - mean) * rstd)) / count;
        for ((o, &g), &x) in o.iter_mut().zip(g).zip(row) {
            o.write(rstd * (g - mg - (x - mean) * rstd * mgy));
        }
    }
}

widened! {
    fn normalize_rows[T: Real](xs: &[T], n: usize, eps: T, out: &mut [MaybeUninit<T>]) -> () => normalize_rows_body
}
widened! {
    fn normalize_grad_rows[T: Real](xs: &[T], gs: &[T], n: usize, eps: T, out: &mut [MaybeUninit<T>]) -> () => normalize_grad_rows_body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::simd::tests::{agrees_with_differences, row_operands};
    use ndarray::IxDyn;

    /// Against the definition in float64 (two-pass statistics, a division): the rows of a
    /// [3, 37] tensor (a remainder after the lanes) and its adjoint, checked by finite
    /// differences of Σ g·normalize(x).
    #[test]
    fn rows_and_their_adjoint_follow_the_definition() {
        let (rows, n) = (3, 37);
        let (x, g) = row_operands(rows, n);
        let eps = 1e-5;
        let y = normalize(&x, None, eps).unwrap();
        for r in 0..rows {
            let row: Vec<f64> = (0..n).map(|j| x[[r, j]]).collect();
            let mean = row.iter().sum::<f64>() / n as f64;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
            for j in 0..n {
                let want = (row[j] - mean) / (var + eps).sqrt();
                assert!((y[[r, j]] - want).abs() < 1e-12, "row {r} element {j}");
            }
        }
        let dx = normalize(&x, Some(&g), eps).unwrap();
        let loss = |x: &ArrayD<f64>| (normalize(x, None, eps).unwrap() * &g).sum();
        agrees_with_differences(&x, &dx, loss, "normalize");
        // float32 alike, to its rounding; and over the pool's pieces the same bits.
        let x32 = x.mapv(|v| v as f32);
        let g32 = g.mapv(|v| v as f32);
        let y32 = normalize(&x32, None, eps).unwrap();
        assert!(y32.iter().zip(y.iter()).all(|(a, b)| (*a as f64 - b).abs() < 1e-5));
        let dx32 = normalize(&x32, Some(&g32), eps).unwrap();
        assert!(dx32.iter().zip(dx.iter()).all(|(a, b)| (*a as f64 - b).abs() < 1e-4 * b.abs().max(1.0)));
        let big = ArrayD::from_shape_fn(IxDyn(&[700, 64]), |i| ((i[0] * 7 + i[1] * 3) % 19) as f32 - 9.0);
        let one = normalize(&big, Some(&big), eps).unwrap();
        let par = crate::cpu::gemm::with_forced_parallel(|| normalize(&big, Some(&big), eps).unwrap());
        assert_eq!(one, par);
    }
}
