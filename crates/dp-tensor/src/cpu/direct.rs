//! float64 matrix–vector products and rank-1 updates as direct loops over the operands.
//!
//! float64's general products are matrixmultiply's dgemm (dtype.rs), which packs its operands
//! into panels first: right for large products, but a recurrent network's step is a stream of
//! small ones — a 100 × 100 matrix times a vector, forward (rows contiguous) and transposed in
//! the backward pass (columns contiguous), and a weight's gradient growing by one outer product
//! per time step — where ndarray's matrix–vector fallback walked a transposed matrix element
//! by element and the packing and dispatch of a k = 1 dgemm cost more than its arithmetic
//! (two thirds of a staged W4 step, by `perf`). These loops read the operands where they lie
//! and are compiled for each vector width (`simd::widened!`). There is no fused multiply-add,
//! so every width gives the same bits; unstaged and staged programs both reach them through
//! `Real::gemv`/`Real::gemm`, so they agree with each other. float32 has its own kernels
//! (gemm.rs) with FMA; these are not twins of them but float64's only unpacked path.

use super::simd::widened;
use ndarray::{ArrayView1, ArrayView2, ArrayViewMut1, ArrayViewMut2};

/// Independent partial sums of a dot product: wide enough for two AVX-512 vectors.
const LANES: usize = 16;
/// Rows of y accumulated at once by the column-order loop (they stay in registers).
const BLOCK: usize = 64;

/// `alpha · v + beta · old`, where beta = 0 ignores the old value (even NaN), as BLAS does.
#[inline(always)]
fn store(v: f64, alpha: f64, beta: f64, old: f64) -> f64 {
    let v = if alpha == 1.0 { v } else { alpha * v };
    if beta == 0.0 {
        v
    } else {
        v + beta * old
    }
}

/// y = alpha · A x + beta · y. False (nothing written) for layouts these loops do not take:
/// the caller then uses the general product.
pub fn gemv(alpha: f64, a: &ArrayView2<f64>, x: &ArrayView1<f64>, beta: f64, y: &mut ArrayViewMut1<f64>) -> bool {
    let (m, k) = a.dim();
    if m == 0 || k == 0 || x.len() != k || y.len() != m {
        return false;
    }
    let (Some(xs), Some(ys)) = (x.as_slice(), y.as_slice_mut()) else { return false };
    if let Some(rows) = a.as_slice() {
        rows_dot(rows, k, xs, alpha, beta, ys);
        return true;
    }
    if let Some(cols) = a.t().as_slice() {
        cols_axpy(cols, m, xs, alpha, beta, ys);
        return true;
    }
    false
}

/// C = alpha · u vᵀ + beta · C for a product whose inner dimension is 1 (A is a column, B a
/// row). False (nothing written) for other products or layouts.
pub fn rank1(alpha: f64, a: &ArrayView2<f64>, b: &ArrayView2<f64>, beta: f64, c: &mut ArrayViewMut2<f64>) -> bool {
    let ((m, k), (k2, n)) = (a.dim(), b.dim());
    if k != 1 || k2 != 1 || c.dim() != (m, n) || m == 0 || n == 0 {
        return false;
    }
    let (col, row) = (a.column(0), b.row(0));
    let (Some(u), Some(v), Some(cs)) = (col.as_slice(), row.as_slice(), c.as_slice_mut()) else { return false };
    outer(u, v, alpha, beta, cs);
    true
}

/// y[i] = alpha · (row i of A) · x + beta · y[i], A row-major with rows of length k.
#[inline(always)]
fn rows_dot_body(a: &[f64], k: usize, x: &[f64], alpha: f64, beta: f64, y: &mut [f64]) {
    for (row, yi) in a.chunks_exact(k).zip(y.iter_mut()) {
        // Independent lanes, summed at the end in a fixed order: the same bits at every width.
        let mut acc = [0.0f64; LANES];
        let (rc, xc) = (row.chunks_exact(LANES), x.chunks_exact(LANES));
        let tail: f64 = rc.remainder().iter().zip(xc.remainder()).map(|(&p, &q)| p * q).sum();
        for (r, xv) in rc.zip(xc) {
            for l in 0..LANES {
                acc[l] += r[l] * xv[l];
            }
        }
        *yi = store(acc.iter().sum::<f64>() + tail, alpha, beta, *yi);
    }
}

/// y = alpha · A x + beta · y, A column-major with columns of length m: y accumulates
/// x[p] · column p, BLOCK rows at a time.
#[inline(always)]
fn cols_axpy_body(a: &[f64], m: usize, x: &[f64], alpha: f64, beta: f64, y: &mut [f64]) {
    for i0 in (0..m).step_by(BLOCK) {
        let rows = BLOCK.min(m - i0);
        let mut acc = [0.0f64; BLOCK];
        for (col, &xp) in a.chunks_exact(m).zip(x) {
            for (s, &v) in acc.iter_mut().zip(&col[i0..i0 + rows]) {
                *s += v * xp;
            }
        }
        for (yi, &s) in y[i0..i0 + rows].iter_mut().zip(&acc) {
            *yi = store(s, alpha, beta, *yi);
        }
    }
}

/// c[i, j] = alpha · u[i] · v[j] + beta · c[i, j], c row-major.
#[inline(always)]
fn outer_body(u: &[f64], v: &[f64], alpha: f64, beta: f64, c: &mut [f64]) {
    for (ci, &ui) in c.chunks_exact_mut(v.len()).zip(u) {
        if beta == 0.0 {
            ci.iter_mut().zip(v).for_each(|(c, &vj)| *c = store(ui * vj, alpha, 0.0, 0.0));
        } else if beta == 1.0 && alpha == 1.0 {
            // A gradient's accumulator: the common case, kept free of branches per element.
            ci.iter_mut().zip(v).for_each(|(c, &vj)| *c += ui * vj);
        } else {
            ci.iter_mut().zip(v).for_each(|(c, &vj)| *c = store(ui * vj, alpha, beta, *c));
        }
    }
}

widened! {
    fn rows_dot[](a: &[f64], k: usize, x: &[f64], alpha: f64, beta: f64, y: &mut [f64]) -> () => rows_dot_body
}
widened! {
    fn cols_axpy[](a: &[f64], m: usize, x: &[f64], alpha: f64, beta: f64, y: &mut [f64]) -> () => cols_axpy_body
}
widened! {
    fn outer[](u: &[f64], v: &[f64], alpha: f64, beta: f64, c: &mut [f64]) -> () => outer_body
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array1, Array2};

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * (1.0 + b.abs())
    }

    fn matrix(m: usize, n: usize, seed: u64) -> Array2<f64> {
        let mut s = seed;
        Array2::from_shape_fn((m, n), |_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) - 0.5
        })
    }

    #[test]
    fn gemv_both_layouts_match_the_general_product() {
        for &(m, k) in &[(1, 1), (3, 17), (100, 100), (65, 100), (100, 65), (130, 7)] {
            for beta in [0.0, 1.0, 0.5] {
                let a = matrix(m, k, 1);
                let x: Array1<f64> = matrix(1, k, 2).row(0).to_owned();
                let y0: Array1<f64> = matrix(1, m, 3).row(0).to_owned();
                let want = a.dot(&x) * 0.75 + &y0 * beta;
                let mut y = y0.clone();
                assert!(gemv(0.75, &a.view(), &x.view(), beta, &mut y.view_mut()));
                assert!(y.iter().zip(&want).all(|(&p, &q)| close(p, q)), "rows {m}x{k} beta {beta}");
                // The same matrix stored column-major, read through its transpose.
                let at = a.t().as_standard_layout().to_owned();
                let mut y = y0.clone();
                assert!(gemv(0.75, &at.t(), &x.view(), beta, &mut y.view_mut()));
                assert!(y.iter().zip(&want).all(|(&p, &q)| close(p, q)), "columns {m}x{k} beta {beta}");
            }
        }
    }

    #[test]
    fn rank1_matches_the_general_product_and_refuses_others() {
        let (u, v) = (matrix(37, 1, 4), matrix(1, 70, 5));
        for beta in [0.0, 1.0, -2.0] {
            let c0 = matrix(37, 70, 6);
            let want = u.dot(&v) + &c0 * beta;
            let mut c = c0.clone();
            assert!(rank1(1.0, &u.view(), &v.view(), beta, &mut c.view_mut()));
            assert!(c.iter().zip(&want).all(|(&p, &q)| close(p, q)));
        }
        let mut c = Array2::zeros((37, 70));
        assert!(!rank1(1.0, &matrix(37, 2, 7).view(), &matrix(2, 70, 8).view(), 0.0, &mut c.view_mut()));
    }

    #[test]
    fn every_width_gives_the_same_bits() {
        let (a, x) = (matrix(100, 100, 9), matrix(1, 100, 10));
        let runs = super::super::simd::tests::at_every_level(|| {
            let mut y = Array1::zeros(100);
            assert!(gemv(1.0, &a.view(), &x.row(0), 0.0, &mut y.view_mut()));
            let mut z = Array1::zeros(100);
            assert!(gemv(1.0, &a.t(), &x.row(0), 0.0, &mut z.view_mut()));
            (y, z)
        });
        assert!(runs.windows(2).all(|w| w[0] == w[1]));
    }
}
