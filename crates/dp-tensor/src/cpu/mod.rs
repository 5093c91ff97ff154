//! The CPU backend: tensors as ndarray `ArrayD<f32>`, the op table on them (`Backend`), and
//! dp's own kernels where ndarray's would be slow — matrix products (`gemm`), elementwise
//! loops compiled per operation (`elementwise`), vectorizable exp/tanh/sigmoid (`vmath`) and
//! convolution by im2col (`conv`).

pub mod compare;
mod conv;
pub(crate) mod direct;
pub mod elementwise;
pub mod fused;
pub mod gather;
pub mod gemm;
pub mod layout;
mod norm;
pub(crate) mod simd;
mod softmax;
pub mod subnormals;
pub mod vmath;

use crate::op::Conv;
use crate::ops::Backend;
use crate::{fmt_shape, Real, TResult, Tensor, TensorError};
use ndarray::{ArrayD, ArrayViewD, Axis, CowArray, IxDyn};

/// The sum over `axis` of `a`, in ndarray's order (the same bits) but over the threads when
/// large: when `a` is row-major, a row at a time with vector adds (`simd::sum_middle`) for an
/// axis with elements after it, lane by lane (`simd::sum_lanes`) for an innermost one;
/// ndarray's own otherwise.
fn sum_over<T: Real>(a: ArrayViewD<T>, axis: usize) -> ArrayD<T> {
    let Some(data) = a.as_slice() else { return a.sum_axis(Axis(axis)) };
    let out = sums_over(data, a.shape(), axis, elementwise::ARITHMETIC_COST);
    let mut dims = a.shape().to_vec();
    dims.remove(axis);
    ArrayD::from_shape_vec(IxDyn(&dims), out).unwrap_or_else(|_| a.sum_axis(Axis(axis)))
}

/// The sums over `axis` of the row-major elements of `shape` that `a` reads (a buffer, or a
/// staged chain computing them: `fused::run_reduced`), row-major with that axis removed:
/// `simd::sum_middle` for an axis with elements after it, `simd::sum_lanes` for the innermost.
/// `cost_each` is an element's work, for the pool.
pub(crate) fn sums_over<T: Real, S: simd::Source<T> + ?Sized>(
    a: &S,
    shape: &[usize],
    axis: usize,
    cost_each: f64,
) -> Vec<T> {
    let (outer, inner): (usize, usize) = (shape[..axis].iter().product(), shape[axis + 1..].iter().product());
    if inner > 1 {
        simd::sum_middle(a, outer, shape[axis], inner, cost_each)
    } else {
        simd::sum_lanes(a, outer, shape[axis], cost_each)
    }
}

/// Sums over an axis of length `len` made means (`mean_axis`): each divided by the length, in
/// T (an empty axis divides by 1).
pub(crate) fn into_means<T: Real>(sums: &mut [T], len: usize) {
    let d = T::of_f64(len.max(1) as f64);
    sums.iter_mut().for_each(|x| *x = *x / d);
}

/// The CPU backend, once for both floating dtypes.
impl<T: Real> Backend for ArrayD<T> {
    #[inline]
    fn of(t: &Tensor) -> Option<&Self> {
        T::of(t)
    }
    fn into_tensor(self) -> Tensor {
        Tensor::from_real(self)
    }
    fn shape(&self) -> &[usize] {
        ArrayD::shape(self)
    }
    fn matmul(&self, b: &Self) -> TResult<Self> {
        let (xs, ys) = (self.shape(), b.shape());
        if xs.len() > 2 || ys.len() > 2 {
            return batched_product(self, b);
        }
        let shape: Vec<usize> = xs[..xs.len() - 1].iter().chain(&ys[1..]).copied().collect();
        product_result(&shape, |out| product_into_view(out, self, false, b, false, T::zero()))
    }
    fn sum_all(&self) -> TResult<f64> {
        Ok(match self.as_slice_memory_order() {
            Some(data) => simd::sum_f64(data),
            None => self.iter().fold(0.0, |s, &x| s + x.to_f64().unwrap_or(f64::NAN)),
        })
    }
    fn max_all(&self) -> TResult<f64> {
        // NaN propagates (Float::max would skip it: a diverged loss would look finite).
        let m = self.iter().fold(T::neg_infinity(), |a, &b| if a.is_nan() || b <= a { a } else { b });
        Ok(m.to_f64().unwrap_or(f64::NAN))
    }
    fn logsumexp(&self) -> TResult<f64> {
        let m = self.max_all()?;
        // An infinite (or NaN) maximum is the result: exp(x - m) would be exp(inf - inf).
        if !m.is_finite() {
            return Ok(m);
        }
        let s: f64 = self.iter().map(|&x| (x.to_f64().unwrap_or(f64::NAN) - m).exp()).sum();
        Ok(m + s.ln())
    }
    fn item(&self) -> TResult<f64> {
        Ok(self.iter().next().map_or(0.0, |x| x.to_f64().unwrap_or(f64::NAN)))
    }
    fn sum_axis(&self, axis: usize, mean: bool) -> TResult<Self> {
        let mut s = sum_over(self.view(), axis);
        if mean {
            let sums = s
                .as_slice_memory_order_mut()
                .ok_or_else(|| TensorError::internal("a sum over an axis is not contiguous"))?;
            into_means(sums, self.shape()[axis]);
        }
        Ok(s)
    }
    fn sum_to(&self, shape: &[usize]) -> TResult<Self> {
        if self.shape() == shape {
            return Ok(self.clone());
        }
        // Borrowed until the first sum: the operand itself is never copied.
        let mut a = CowArray::from(self.view());
        while a.ndim() > shape.len() {
            a = CowArray::from(sum_over(a.view(), 0));
        }
        for (i, &d) in shape.iter().enumerate() {
            if d == 1 && a.shape()[i] != 1 {
                a = CowArray::from(sum_over(a.view(), i).insert_axis(Axis(i)));
            }
        }
        if a.shape() != shape {
            return Err(format!(
                "cannot reduce a gradient of shape {} to {}",
                fmt_shape(self.shape()),
                fmt_shape(shape)
            )
            .into());
        }
        Ok(a.into_owned())
    }
    fn broadcast_to(&self, shape: &[usize]) -> TResult<Self> {
        layout::broadcast_to(self, shape)
    }
    fn reshape(&self, shape: &[usize]) -> TResult<Self> {
        layout::reshape(self, shape)
    }
    fn transpose(&self) -> TResult<Self> {
        Ok(layout::transpose(self))
    }
    fn permute(&self, perm: &[usize]) -> TResult<Self> {
        Ok(layout::permute(self, perm))
    }
    fn row(&self, i: usize) -> TResult<Self> {
        Ok(layout::row(self, i))
    }
    fn scatter_row(&self, i: usize, shape: &[usize]) -> TResult<Self> {
        let mut out = ArrayD::<T>::zeros(IxDyn(shape));
        out.index_axis_mut(Axis(0), i).assign(self);
        Ok(out)
    }
    fn softmax(&self, log: bool) -> TResult<Self> {
        softmax::softmax(self, log)
    }
    fn softmax_grad(&self, g: &Self, log: bool) -> TResult<Self> {
        softmax::softmax_grad(self, g, log)
    }
    fn normalize(&self, g: Option<&Self>, eps: f64) -> TResult<Self> {
        norm::normalize(self, g, eps)
    }
    fn concat(parts: &[&Self], axis: usize) -> TResult<Self> {
        layout::concat(parts, axis)
    }
    fn slice(&self, axis: usize, lo: usize, hi: usize) -> TResult<Self> {
        Ok(layout::slice(self, axis, lo, hi))
    }
    fn unslice(&self, axis: usize, lo: usize, shape: &[usize]) -> TResult<Self> {
        let mut out = ArrayD::<T>::zeros(IxDyn(shape));
        let n = self.shape()[axis];
        out.slice_axis_mut(Axis(axis), ndarray::Slice::from(lo..lo + n)).assign(self);
        Ok(out)
    }
    fn max_axis(&self, axis: usize) -> TResult<Self> {
        // NaN propagates, as in `max_all`.
        Ok(self.map_axis(Axis(axis), |line| {
            line.fold(T::neg_infinity(), |a, &b| if a.is_nan() || b <= a { a } else { b })
        }))
    }
    fn cumsum(&self, axis: usize) -> TResult<Self> {
        let mut out = self.clone();
        out.accumulate_axis_inplace(Axis(axis), |&prev, cur| *cur += prev);
        Ok(out)
    }
    fn mask(&self, m: &Self) -> TResult<Self> {
        if self.shape() != m.shape() {
            return Err(TensorError::internal("a mask of another shape"));
        }
        Ok(ndarray::Zip::from(self).and(m).map_collect(|&x, &m| if m > T::zero() { x } else { T::zero() }))
    }
    fn step(&self) -> TResult<Self> {
        Ok(self.mapv(|x| if x > T::zero() { T::one() } else { T::zero() }))
    }
    fn sign(&self) -> TResult<Self> {
        Ok(self.mapv(|x| if x >= T::zero() { T::one() } else { -T::one() }))
    }
    fn argmax_mask(&self) -> TResult<Self> {
        let mut out = ArrayD::<T>::zeros(self.raw_dim());
        if let Some(i) = argmax(self) {
            if let Some(x) = out.iter_mut().nth(i) {
                *x = T::one();
            }
        }
        Ok(out)
    }
    fn conv2d(&self, w: &Self, cv: Conv) -> TResult<Self> {
        conv::conv2d(self, w, cv)
    }
    fn conv2d_grad(&self, w: &Self, g: &Self, cv: Conv, input: bool) -> TResult<Self> {
        let (dx, dw) = conv::conv2d_grads(self, w, g, cv)?;
        Ok(if input { dx } else { dw })
    }
    fn max_pool(&self, k: usize, other: Option<&Self>, pick: bool) -> TResult<Self> {
        conv::pool(self, k, other, pick)
    }
}

/// The output buffer of a batched product, written by several threads at once: each product
/// of the batch writes its own disjoint m × n block.
struct Blocks<T>(*mut T);

// SAFETY: the pointer is only offset to distinct blocks, one per product (`batched_product`).
unsafe impl<T> Send for Blocks<T> {}
unsafe impl<T> Sync for Blocks<T> {}

impl<T> Blocks<T> {
    fn at(&self, offset: usize) -> *mut T {
        self.0.wrapping_add(offset)
    }
}

/// For each position of the broadcast batch shape `batch` (row-major), the index of the
/// matrix an operand with batch shape `own` contributes there (NumPy broadcasting).
fn batch_index(own: &[usize], batch: &[usize]) -> Vec<usize> {
    let pad = batch.len() - own.len();
    let mut stride = vec![0; batch.len()];
    let mut s = 1;
    for d in (0..own.len()).rev() {
        stride[d + pad] = if own[d] == 1 { 0 } else { s };
        s *= own[d];
    }
    let total: usize = batch.iter().product();
    let mut out = Vec::with_capacity(total);
    let mut idx = vec![0; batch.len()];
    for _ in 0..total {
        out.push(idx.iter().zip(&stride).map(|(i, s)| i * s).sum());
        for d in (0..batch.len()).rev() {
            idx[d] += 1;
            if idx[d] < batch[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

/// `@` with a rank-3-or-more operand: stacks of matrices with broadcast batch axes, as NumPy's
/// `matmul` (a rank-1 operand is a row on the left, a column on the right, its axis dropped).
fn batched_product<T: Real>(x: &ArrayD<T>, y: &ArrayD<T>) -> TResult<ArrayD<T>> {
    let (xs, ys) = (x.shape(), y.shape());
    let out_shape = crate::op::matmul_shape(xs, ys)?;
    let ((bx, m, k), (by, _, n)) = (crate::op::as_stack(xs, true), crate::op::as_stack(ys, false));
    let batch = crate::broadcast_shape(&bx, &by)?;
    let (ix, iy) = (batch_index(&bx, &batch), batch_index(&by, &batch));
    product_result(&out_shape, |mut out| {
        let out = out.as_slice_mut().ok_or_else(|| TensorError::internal("a product's result is not contiguous"))?;
        stacked_products(out, (x, false, &ix), (y, false, &iy), (m, k, n), T::zero())
    })
}

/// A product's result of `shape`, written by `fill` as a beta = 0 product. Float32's own
/// kernels write every element of C and never read it when beta = 0 (gemm's tests start C as
/// NaN), so its buffer is not zeroed first (those memsets were ~1 ms of a W6 step on the main
/// thread, by perf); float64's products go through ndarray and matrixmultiply, so theirs is.
fn product_result<T: Real>(
    shape: &[usize],
    fill: impl FnOnce(ndarray::ArrayViewMutD<T>) -> TResult<()>,
) -> TResult<ArrayD<T>> {
    if T::DTYPE != crate::DType::F32 {
        let mut out = ArrayD::zeros(IxDyn(shape));
        fill(out.view_mut())?;
        return Ok(out);
    }
    let mut out = ArrayD::<T>::uninit(IxDyn(shape));
    // SAFETY: the view is row-major over the whole buffer and only written through: `fill`'s
    // beta = 0 float32 product stores every element without reading any.
    fill(unsafe { out.raw_view_mut().cast::<T>().deref_into_view_mut() })?;
    // SAFETY: as above, every element has been written.
    Ok(unsafe { out.assume_init() })
}

/// A stack operand of `stacked_products`: the array, whether each matrix is used transposed,
/// and the index of the matrix each product of the batch reads.
type Stacked<'a, T> = (&'a ArrayD<T>, bool, &'a [usize]);

/// out[i] = x'[ix[i]] @ y'[iy[i]] + beta · out[i] for every product i of a batch (x' the
/// matrix or, when flagged, its transpose, read in place through strides), each m × k by
/// k × n, written straight into its block of `out`. Each product is one call of dp's GEMM;
/// the batch is spread over the threads when that pays (`gemm::for_each_product`).
fn stacked_products<T: Real>(
    out: &mut [T],
    (x, tx, ix): Stacked<T>,
    (y, ty, iy): Stacked<T>,
    (m, k, n): (usize, usize, usize),
    beta: T,
) -> TResult<()> {
    let (xc, yc) = (x.as_standard_layout(), y.as_standard_layout());
    let internal = || TensorError::internal("a batched product of non-contiguous operands");
    let (xd, yd) = (xc.as_slice().ok_or_else(internal)?, yc.as_slice().ok_or_else(internal)?);
    let fits = |d: &[T], at: &[usize], size: usize| at.iter().all(|&j| (j + 1) * size <= d.len());
    if ix.len() != iy.len() || out.len() != ix.len() * m * n || !fits(xd, ix, m * k) || !fits(yd, iy, k * n) {
        return Err(TensorError::internal("a batched product of operands that do not fit"));
    }
    let blocks = Blocks(out.as_mut_ptr());
    fn view<T>(d: &[T], rows: usize, cols: usize, t: bool) -> Result<ndarray::ArrayView2<'_, T>, ndarray::ShapeError> {
        let v = ndarray::ArrayView2::from_shape(if t { (cols, rows) } else { (rows, cols) }, d);
        v.map(|v| if t { v.reversed_axes() } else { v })
    }
    let work = |i: usize, alone: bool| {
        let (a, b) = (&xd[ix[i] * m * k..][..m * k], &yd[iy[i] * k * n..][..k * n]);
        // Shapes fit their slices by construction, so these views cannot fail.
        let (Ok(a), Ok(b)) = (view(a, m, k, tx), view(b, k, n, ty)) else {
            return;
        };
        // SAFETY: block i of `out` (m·n elements from i·m·n) is inside the buffer, which
        // outlives this call, and no other product of the batch touches it.
        let c = unsafe { ndarray::ArrayViewMut2::from_shape_ptr((m, n), blocks.at(i * m * n)) };
        if alone {
            T::gemm(T::one(), a, b, beta, c);
        } else {
            T::gemm_serial(T::one(), a, b, beta, c);
        }
    };
    gemm::for_each_product(ix.len(), 2.0 * (m * n * k) as f64, &work);
    Ok(())
}

/// The position of the first NaN, else of the first largest element (row-major), as NumPy's
/// argmax; None for an empty array.
pub fn argmax<T: num_traits::Float>(a: &ArrayD<T>) -> Option<usize> {
    let mut best: Option<(usize, T)> = None;
    for (i, &x) in a.iter().enumerate() {
        if best.is_none_or(|(_, b)| !b.is_nan() && (x.is_nan() || x > b)) {
            best = Some((i, x));
        }
    }
    best.map(|(i, _)| i)
}

/// out = x' @ y' + beta · out, where x' is x or (with `tx`) its transpose, likewise y' — the
/// transposes are strided views, never copies. Vectors act as a column on the right and a row
/// on the left; a vector-by-vector product with a matrix `out` is their outer product.
pub fn product_into<T: Real>(
    out: &mut ArrayD<T>,
    x: &ArrayD<T>,
    tx: bool,
    y: &ArrayD<T>,
    ty: bool,
    beta: T,
) -> TResult<()> {
    product_into_view(out.view_mut(), x, tx, y, ty, beta)
}

/// x' @ y' (as `product_into`) as a new array of `shape`, the product's, which float32's
/// kernels write without zeroing it first (`product_result`).
pub fn product_new<T: Real>(shape: &[usize], x: &ArrayD<T>, tx: bool, y: &ArrayD<T>, ty: bool) -> TResult<ArrayD<T>> {
    product_result(shape, |out| product_into_view(out, x, tx, y, ty, T::zero()))
}

/// `product_into` for a view of the result. With beta = 0 every element of `out` is written
/// and none is read.
fn product_into_view<T: Real>(
    mut out: ndarray::ArrayViewMutD<T>,
    x: &ArrayD<T>,
    tx: bool,
    y: &ArrayD<T>,
    ty: bool,
    beta: T,
) -> TResult<()> {
    use ndarray::{Ix1, Ix2};
    fn m2<T: Real>(t: &ArrayD<T>, transposed: bool) -> TResult<ndarray::ArrayView2<'_, T>> {
        let v = t.view().into_dimensionality::<Ix2>().map_err(|e| e.to_string())?;
        Ok(if transposed { v.reversed_axes() } else { v })
    }
    fn v1<T: Real>(t: &ArrayD<T>) -> TResult<ndarray::ArrayView1<'_, T>> {
        Ok(t.view().into_dimensionality::<Ix1>().map_err(|e| e.to_string())?)
    }
    let out_shape = out.shape().to_vec();
    let bad = || {
        crate::TensorError::internal(format!(
            "product of shapes {} and {} into {}",
            fmt_shape(x.shape()),
            fmt_shape(y.shape()),
            fmt_shape(&out_shape)
        ))
    };
    match (x.ndim(), y.ndim(), out.ndim()) {
        (2, 2, 2) | (1, 1, 2) => {
            let (a, b) = if x.ndim() == 2 {
                (m2(x, tx)?, m2(y, ty)?)
            } else {
                (v1(x)?.insert_axis(ndarray::Axis(1)), v1(y)?.insert_axis(ndarray::Axis(0)))
            };
            let c = out.view_mut().into_dimensionality::<Ix2>().map_err(|e| e.to_string())?;
            if a.ncols() != b.nrows() || c.dim() != (a.nrows(), b.ncols()) {
                return Err(bad());
            }
            T::gemm(T::one(), a, b, beta, c);
        }
        (2, 1, 1) | (1, 2, 1) => {
            // A row vector on the left is the transposed matrix on the right.
            let (a, v) = if x.ndim() == 2 { (m2(x, tx)?, v1(y)?) } else { (m2(y, !ty)?, v1(x)?) };
            let c = out.view_mut().into_dimensionality::<Ix1>().map_err(|e| e.to_string())?;
            if a.ncols() != v.len() || c.len() != a.nrows() {
                return Err(bad());
            }
            T::gemv(T::one(), a, v, beta, c);
        }
        // Stacks of matrices with the same batch axes (the reverse rule of a batched `@`:
        // dA += G Bᵀ, dB += Aᵀ G without materialising the transposes).
        (r, r2, r3) if r > 2 && r2 == r && r3 == r => {
            let b = r - 2;
            let (xs, ys) = (x.shape(), y.shape());
            let (batch, same) = (&out_shape[..b], xs[..b] == out_shape[..b] && ys[..b] == out_shape[..b]);
            let (m, k) = if tx { (xs[b + 1], xs[b]) } else { (xs[b], xs[b + 1]) };
            let (k2, n) = if ty { (ys[b + 1], ys[b]) } else { (ys[b], ys[b + 1]) };
            if !same || k != k2 || out_shape[b..] != [m, n] {
                return Err(bad());
            }
            let all: Vec<usize> = (0..batch.iter().product()).collect();
            let o = out.as_slice_mut().ok_or_else(bad)?;
            stacked_products(o, (x, tx, &all), (y, ty, &all), (m, k, n), beta)?;
        }
        (1, 1, 0) => {
            let d = v1(x)?.dot(&v1(y)?);
            let o = out.first_mut().ok_or_else(bad)?;
            *o = if beta == T::zero() { d } else { d + beta * *o };
        }
        _ => return Err(bad()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arr(shape: &[usize], f: impl Fn(usize) -> f64) -> ArrayD<f64> {
        ArrayD::from_shape_vec(IxDyn(shape), (0..shape.iter().product()).map(f).collect()).unwrap()
    }

    #[test]
    fn float32_products_write_every_element_of_their_unzeroed_result() {
        // Every path of `@` for float32 against float64's (zeroed) result: matrix, matrix by
        // vector each side, vector by vector, an empty inner axis, a broadcast batch.
        let cases: [(&[usize], &[usize]); 7] = [
            (&[5, 3], &[3, 4]),
            (&[5, 3], &[3]),
            (&[3], &[3, 4]),
            (&[3], &[3]),
            (&[4, 0], &[0, 6]),
            (&[2, 5, 3], &[3, 4]),
            (&[3, 1, 4, 5], &[2, 5, 2]),
        ];
        for (xs, ys) in cases {
            let (x, y) = (arr(xs, |i| (i % 7) as f64 - 2.5), arr(ys, |i| (i % 5) as f64 * 0.5 - 1.0));
            let want = x.matmul(&y).unwrap();
            let got = x.mapv(|v| v as f32).matmul(&y.mapv(|v| v as f32)).unwrap();
            assert_eq!(got.shape(), want.shape(), "{xs:?} @ {ys:?}");
            assert_eq!(got.mapv(|v| v as f64), want, "{xs:?} @ {ys:?}");
        }
    }

    #[test]
    fn softmax_by_rows_agrees_with_the_general_path() {
        let x = arr(&[3, 2, 5], |i| ((i * 7) % 11) as f64 * 0.37 - 1.5);
        // `general` holds x's elements in another memory order (not row-major): it is made
        // row-major first and gives the same numbers; both agree with the definition.
        let t = x.clone().reversed_axes();
        for log in [false, true] {
            let rows = x.softmax(log).unwrap();
            let general = t.as_standard_layout().into_owned().reversed_axes();
            assert_eq!(general.softmax(log).unwrap(), rows);
            let want = {
                let ax = Axis(2);
                let max = general.map_axis(ax, |r| r.fold(f64::NEG_INFINITY, |a, &b| a.max(b))).insert_axis(ax);
                let e = (&general - &max).mapv(f64::exp);
                let s = e.sum_axis(ax).insert_axis(ax);
                if log {
                    &general - &max - s.mapv(f64::ln)
                } else {
                    e / s
                }
            };
            for (p, q) in rows.iter().zip(want.iter()) {
                assert!((p - q).abs() < 1e-15, "{p} {q}");
            }
        }
    }

    #[test]
    fn softmax_by_rows_of_whole_and_partial_blocks_with_masked_scores() {
        // Rows of 64 (whole blocks of 16 lanes) and 37 (two blocks and a partial one), every
        // third score masked to -inf as attention's are: float32 against float64's formula.
        for n in [64, 37] {
            let x = arr(&[3, n], |i| if i % 3 == 0 { f64::NEG_INFINITY } else { ((i * 5) % 17) as f64 * 0.61 - 4.0 });
            let x32 = x.mapv(|v| v as f32);
            for log in [false, true] {
                let got = x32.softmax(log).unwrap();
                for (r, (row, out)) in x.outer_iter().zip(got.outer_iter()).enumerate() {
                    let max = row.fold(f64::NEG_INFINITY, |a, &b| a.max(b));
                    let sum: f64 = row.iter().map(|&v| (v - max).exp()).sum();
                    for (j, (&v, &o)) in row.iter().zip(out.iter()).enumerate() {
                        let want = if log { v - max - sum.ln() } else { (v - max).exp() / sum };
                        if v == f64::NEG_INFINITY {
                            assert_eq!(o as f64, if log { f64::NEG_INFINITY } else { 0.0 }, "row {r} col {j}");
                        } else {
                            assert!(
                                (o as f64 - want).abs() <= 2e-6 * want.abs().max(1e-3),
                                "n {n} row {r} col {j}: {o} {want}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn products_of_stacks_read_transposes_in_place() {
        // out = x'[i] @ y'[i] + out for a batch of 2 × 3, against the sums written out.
        let (m, k, n) = (3, 4, 2);
        let x = arr(&[2, 3, k, m], |i| (i % 13) as f64 - 6.0);
        let y = arr(&[2, 3, k, n], |i| (i % 7) as f64 * 0.5);
        let mut out = arr(&[2, 3, m, n], |i| i as f64);
        let before = out.clone();
        product_into(&mut out, &x, true, &y, false, 1.0).unwrap();
        for (b, c) in [(0, 0), (1, 2), (0, 1)] {
            for (i, j) in [(0, 0), (2, 1), (1, 0)] {
                let s: f64 = (0..k).map(|p| x[[b, c, p, i].as_slice()] * y[[b, c, p, j].as_slice()]).sum();
                assert_eq!(out[[b, c, i, j].as_slice()], s + before[[b, c, i, j].as_slice()]);
            }
        }
        // Batch axes that differ are refused before anything is written.
        let mut other = arr(&[1, 3, m, n], |_| 0.0);
        assert!(product_into(&mut other, &x, true, &y, false, 1.0).is_err());
        assert!(other.iter().all(|&v| v == 0.0));
    }
}
