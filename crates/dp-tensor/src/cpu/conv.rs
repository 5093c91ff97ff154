//! Convolution (NCHW, any stride and zero padding, by im2col and `gemm`) and k×k max pooling
//! on the CPU.
//! Shapes have passed the op table's rule (`op::conv_dims`, `TOp::check`).

use crate::op::{conv_dims, Conv, ConvDims};
use crate::{Real, TResult};
use ndarray::{Array2, Array3, ArrayD, ArrayView2, IxDyn};

/// The input position output position `o` reads at kernel offset `i` (o·stride − pad + i),
/// or None where that falls in the zero padding.
#[inline]
fn source(o: usize, i: usize, d: &ConvDims, len: usize) -> Option<usize> {
    (o * d.stride + i).checked_sub(d.pad).filter(|&p| p < len)
}

/// Calls `f(input index, column index)` for every (image element, im2col column) pair of
/// kernel offset (c, i, j): the one map im2col reads through and its adjoint writes through.
#[inline]
fn each_tap(d: &ConvDims, c: usize, i: usize, j: usize, mut f: impl FnMut(usize, usize)) {
    for y in 0..d.oh {
        let Some(sy) = source(y, i, d, d.h) else { continue };
        for xx in 0..d.ow {
            if let Some(sx) = source(xx, j, d, d.w) {
                f((c * d.h + sy) * d.w + sx, y * d.ow + xx);
            }
        }
    }
}

/// im2col of one image: [C*KH*KW, OH*OW] (padding positions stay zero).
fn im2col<T: Real>(x: &[T], d: &ConvDims) -> Array2<T> {
    let mut cols = Array2::<T>::zeros((d.c * d.kh * d.kw, d.oh * d.ow));
    for c in 0..d.c {
        for i in 0..d.kh {
            for j in 0..d.kw {
                let mut row = cols.row_mut((c * d.kh + i) * d.kw + j);
                each_tap(d, c, i, j, |src, col| row[col] = x[src]);
            }
        }
    }
    cols
}

/// Row-major data of an array.
fn raw<T: Real>(a: &ArrayD<T>) -> Vec<T> {
    a.as_standard_layout().to_owned().into_raw_vec_and_offset().0
}

fn from_vec<T: Real>(shape: &[usize], data: Vec<T>) -> TResult<ArrayD<T>> {
    Ok(ArrayD::from_shape_vec(IxDyn(shape), data).map_err(|e| e.to_string())?)
}

/// A convolution's sizes, its input as row-major data and its weights as an O × (C·KH·KW)
/// matrix (the form im2col multiplies).
fn conv_operands<T: Real>(x: &ArrayD<T>, k: &ArrayD<T>, cv: Conv) -> TResult<(ConvDims, Vec<T>, Array2<T>)> {
    let d = conv_dims(x.shape(), k.shape(), cv)?;
    let wm =
        k.as_standard_layout().to_owned().into_shape_with_order((d.o, d.c * d.kh * d.kw)).map_err(|e| e.to_string())?;
    Ok((d, raw(x), wm))
}

/// Convolution with a stride and zero padding, NCHW.
pub fn conv2d<T: Real>(x: &ArrayD<T>, k: &ArrayD<T>, cv: Conv) -> TResult<ArrayD<T>> {
    let (d, xs, wm) = conv_operands(x, k, cv)?;
    let img = d.c * d.h * d.w;
    let mut out = Array3::<T>::zeros((d.n, d.o, d.oh * d.ow));
    for (n, out_n) in out.outer_iter_mut().enumerate() {
        let cols = im2col(&xs[n * img..(n + 1) * img], &d);
        T::gemm(T::one(), wm.view(), cols.view(), T::zero(), out_n);
    }
    from_vec(&[d.n, d.o, d.oh, d.ow], out.into_raw_vec_and_offset().0)
}

/// The adjoints of `conv2d` with respect to its input and its weights.
pub fn conv2d_grads<T: Real>(x: &ArrayD<T>, k: &ArrayD<T>, g: &ArrayD<T>, cv: Conv) -> TResult<(ArrayD<T>, ArrayD<T>)> {
    let (d, xs, wm) = conv_operands(x, k, cv)?;
    let gs = raw(g);
    let img = d.c * d.h * d.w;
    let gimg = d.o * d.oh * d.ow;
    let mut dw = Array2::<T>::zeros((d.o, d.c * d.kh * d.kw));
    let mut dx = vec![T::zero(); d.n * img];
    for n in 0..d.n {
        let cols = im2col(&xs[n * img..(n + 1) * img], &d);
        let gn =
            ArrayView2::from_shape((d.o, d.oh * d.ow), &gs[n * gimg..(n + 1) * gimg]).map_err(|e| e.to_string())?;
        T::gemm(T::one(), gn, cols.t(), T::one(), dw.view_mut());
        let mut dcols = Array2::<T>::zeros((d.c * d.kh * d.kw, d.oh * d.ow));
        T::gemm(T::one(), wm.t(), gn, T::zero(), dcols.view_mut());
        let dxn = &mut dx[n * img..(n + 1) * img];
        for c in 0..d.c {
            for i in 0..d.kh {
                for j in 0..d.kw {
                    let row = dcols.row((c * d.kh + i) * d.kw + j);
                    each_tap(&d, c, i, j, |src, col| dxn[src] += row[col]);
                }
            }
        }
    }
    Ok((from_vec(x.shape(), dx)?, from_vec(k.shape(), dw.into_raw_vec_and_offset().0)?))
}

/// k×k max pooling with stride k over the last two axes of [N, C, H, W]. With `g`, routes the
/// adjoint back to each window's maximum instead, or (`pick`) takes g's element at each
/// window's maximum (max pooling's forward-mode rule).
pub fn pool<T: Real>(x: &ArrayD<T>, k: usize, g: Option<&ArrayD<T>>, pick: bool) -> TResult<ArrayD<T>> {
    let s = x.shape();
    let (n, c, h, w) = (s[0], s[1], s[2], s[3]);
    let (oh, ow) = (h / k, w / k);
    let xs = raw(x);
    let gs = g.map(raw);
    let scatter = gs.is_some() && !pick;
    let mut out = vec![T::zero(); if scatter { n * c * h * w } else { n * c * oh * ow }];
    for plane in 0..n * c {
        for y in 0..oh {
            for xx in 0..ow {
                // The window's first NaN (the maximum is then NaN: it propagates), else its
                // first largest element; an all -inf window routes to its own first element.
                let first = plane * h * w + y * k * w + xx * k;
                let mut best = (xs[first], first);
                'window: for i in 0..k {
                    for j in 0..k {
                        let idx = plane * h * w + (y * k + i) * w + xx * k + j;
                        if best.0.is_nan() {
                            break 'window;
                        }
                        if xs[idx].is_nan() || xs[idx] > best.0 {
                            best = (xs[idx], idx);
                        }
                    }
                }
                let o = plane * oh * ow + y * ow + xx;
                match &gs {
                    Some(gs) if pick => out[o] = gs[best.1],
                    Some(gs) => out[best.1] += gs[o],
                    None => out[o] = best.0,
                }
            }
        }
    }
    if scatter {
        from_vec(s, out)
    } else {
        from_vec(&[n, c, oh, ow], out)
    }
}
