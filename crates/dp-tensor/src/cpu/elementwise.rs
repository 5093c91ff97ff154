//! Elementwise arithmetic and math on CPU tensors.
//!
//! Two things make these fast, and both are why this module exists:
//! - every loop is compiled once per operation (the `with_*` macros bind the operation to a
//!   closure before the loop), so contiguous operands run as plain slice loops the compiler
//!   vectorizes; a function pointer chosen at run time would cost an indirect call per element;
//! - operands arrive by value: a tensor nobody else holds (`Rc` count 1, e.g. the temporary
//!   between two optimiser steps) is overwritten in place instead of allocating a new buffer.
//!
//! GPU operands never reach these functions (`Tensor::binary` and `Tensor::unary` route them
//! to the GPU's kernels).

use crate::op::{Bin, Un};
use crate::{broadcast_shape, Storage, TResult, Tensor};
use ndarray::{ArrayD, IxDyn, Zip};
use std::rc::Rc;

/// Evaluates `$body` with `$f` bound to `$op` as a closure, once per operation.
macro_rules! with_bin {
    ($op:expr, $f:ident, $body:expr) => {
        match $op {
            Bin::Add => {
                let $f = |x: f32, y: f32| x + y;
                $body
            }
            Bin::Sub => {
                let $f = |x: f32, y: f32| x - y;
                $body
            }
            Bin::Mul => {
                let $f = |x: f32, y: f32| x * y;
                $body
            }
            Bin::Div => {
                let $f = |x: f32, y: f32| x / y;
                $body
            }
            Bin::Pow => {
                let $f = f32::powf;
                $body
            }
            Bin::Mask => {
                let $f = |x: f32, m: f32| if m > 0.0 { x } else { 0.0 };
                $body
            }
        }
    };
}

/// `op` on one f32 element: `Un::eval`, except the `vmath` versions where libm's would keep a
/// loop from vectorizing. Always inlined with a constant `op` (see `with_un`), so the match
/// folds away.
#[inline(always)]
fn un_f32(op: Un, x: f32) -> f32 {
    match op {
        Un::Exp => super::vmath::exp(x),
        Un::Tanh => super::vmath::tanh(x),
        Un::Sigmoid => super::vmath::sigmoid(x),
        _ => op.eval(x),
    }
}

/// Evaluates `$body` with `$f` bound to `$op`'s f32 definition, once per operation.
macro_rules! with_un {
    ($op:expr, $f:ident, $body:expr) => {
        with_un!(@arms $op, $f, $body; Neg Sin Cos Tan Exp Log Sqrt Tanh Sigmoid Relu Abs)
    };
    (@arms $op:expr, $f:ident, $body:expr; $($v:ident)*) => {
        match $op {
            $(Un::$v => {
                let $f = |x: f32| un_f32(Un::$v, x);
                $body
            })*
        }
    };
}

/// The CPU array of a tensor only this caller holds, or the tensor back.
fn owned(t: Rc<Tensor>) -> Result<ArrayD<f32>, Rc<Tensor>> {
    match Rc::try_unwrap(t) {
        Ok(Tensor { storage: Storage::Cpu(a) }) => Ok(a),
        Ok(gpu) => Err(Rc::new(gpu)),
        Err(shared) => Err(shared),
    }
}

/// dst[i] = g(dst[i], src[i]), with `src` broadcast to `dst`'s shape.
#[inline(always)]
fn update(dst: &mut ArrayD<f32>, src: &ArrayD<f32>, g: impl Fn(f32, f32) -> f32) {
    if dst.shape() == src.shape() {
        if let (Some(d), Some(s)) = (dst.as_slice_mut(), src.as_slice()) {
            d.iter_mut().zip(s).for_each(|(p, &q)| *p = g(*p, q));
            return;
        }
    }
    dst.zip_mut_with(src, |p, &q| *p = g(*p, q));
}

/// A new array of `shape` with out[i] = f(x[i], y[i]), both broadcast to `shape`.
#[inline(always)]
fn fresh(x: &ArrayD<f32>, y: &ArrayD<f32>, shape: &[usize], f: impl Fn(f32, f32) -> f32) -> TResult<ArrayD<f32>> {
    if x.shape() == y.shape() {
        if let (Some(a), Some(b)) = (x.as_slice(), y.as_slice()) {
            let out = a.iter().zip(b).map(|(&p, &q)| f(p, q)).collect();
            return Ok(ArrayD::from_shape_vec(x.raw_dim(), out).map_err(|e| e.to_string())?);
        }
    }
    let xb = x.broadcast(IxDyn(shape)).ok_or("broadcast failed")?;
    let yb = y.broadcast(IxDyn(shape)).ok_or("broadcast failed")?;
    Ok(Zip::from(&xb).and(&yb).map_collect(|&p, &q| f(p, q)))
}

/// out[i] = f(x[i]) into `x` itself.
#[inline(always)]
fn update1(x: &mut ArrayD<f32>, f: impl Fn(f32) -> f32) {
    match x.as_slice_mut() {
        Some(s) => s.iter_mut().for_each(|v| *v = f(*v)),
        None => x.mapv_inplace(f),
    }
}

/// A new array with out[i] = f(x[i]). Contiguous data goes through a plain slice loop: through
/// ndarray's `mapv` the `vmath` loops do not vectorize (the W2 benchmark ran 1.25× slower).
#[inline(always)]
fn fresh1(x: &ArrayD<f32>, f: impl Fn(f32) -> f32) -> ArrayD<f32> {
    match x.as_slice() {
        // The shape is x's own, so `from_shape_vec` cannot fail; `mapv` is only the formal else.
        Some(s) => {
            ArrayD::from_shape_vec(x.raw_dim(), s.iter().map(|&v| f(v)).collect()).unwrap_or_else(|_| x.mapv(&f))
        }
        None => x.mapv(f),
    }
}

/// `a op b` with NumPy broadcasting, reusing an operand's buffer when only this caller holds it
/// and it already has the result's shape.
pub fn binary(op: Bin, a: Rc<Tensor>, b: Rc<Tensor>) -> TResult<Tensor> {
    let shape = broadcast_shape(a.shape(), b.shape())?;
    with_bin!(op, f, {
        let a = if a.shape() == shape.as_slice() {
            match owned(a) {
                Ok(mut x) => {
                    update(&mut x, b.array(), f);
                    return Ok(Tensor::from_array(x));
                }
                Err(a) => a,
            }
        } else {
            a
        };
        let b = if b.shape() == shape.as_slice() {
            match owned(b) {
                Ok(mut y) => {
                    update(&mut y, a.array(), |q, p| f(p, q));
                    return Ok(Tensor::from_array(y));
                }
                Err(b) => b,
            }
        } else {
            b
        };
        fresh(a.array(), b.array(), &shape, f).map(Tensor::from_array)
    })
}

/// `t op s` (or `s op t` when `scalar_left`), in place when only this caller holds `t`.
pub fn with_scalar(op: Bin, t: Rc<Tensor>, s: f32, scalar_left: bool) -> Tensor {
    with_bin!(op, f, {
        let g = |v: f32| if scalar_left { f(s, v) } else { f(v, s) };
        match owned(t) {
            Ok(mut x) => {
                update1(&mut x, g);
                Tensor::from_array(x)
            }
            Err(t) => Tensor::from_array(fresh1(t.array(), g)),
        }
    })
}

/// A math function on every element, in place when only this caller holds `t`.
pub fn unary(op: Un, t: Rc<Tensor>) -> TResult<Tensor> {
    if t.is_gpu() {
        return t.unary(op);
    }
    Ok(with_un!(op, f, {
        match owned(t) {
            Ok(mut x) => {
                update1(&mut x, f);
                Tensor::from_array(x)
            }
            Err(t) => Tensor::from_array(fresh1(t.array(), f)),
        }
    }))
}

/// A math function on every element of a borrowed array (no reuse possible).
pub fn map_un(op: Un, x: &ArrayD<f32>) -> ArrayD<f32> {
    with_un!(op, f, fresh1(x, f))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(shape: &[usize], v: &[f32]) -> Rc<Tensor> {
        Rc::new(Tensor::from_vec(shape, v.to_vec()).unwrap())
    }

    #[test]
    fn reuses_a_unique_operand_and_leaves_a_shared_one_alone() {
        let a = t(&[3], &[1.0, 2.0, 3.0]);
        let keep = a.clone();
        let b = t(&[3], &[10.0, 20.0, 30.0]);
        let ptr = b.array().as_ptr();
        // `a` is shared, so the result goes into `b`'s buffer: a - b, not b - a.
        let r = binary(Bin::Sub, a, b).unwrap();
        assert_eq!(r.data(), vec![-9.0, -18.0, -27.0]);
        assert_eq!(r.array().as_ptr(), ptr);
        assert_eq!(keep.data(), vec![1.0, 2.0, 3.0]);
    }

    #[test]
    fn broadcasts_in_both_directions() {
        let row = t(&[3], &[1.0, 2.0, 3.0]);
        let col = t(&[2, 1], &[10.0, 20.0]);
        let r = binary(Bin::Div, row, col).unwrap();
        assert_eq!(r.shape(), &[2, 3]);
        assert_eq!(r.data(), vec![0.1, 0.2, 0.3, 0.05, 0.1, 0.15]);
        let m = t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let r = binary(Bin::Pow, t(&[2], &[2.0, 3.0]), m).unwrap();
        assert_eq!(r.data(), vec![2.0, 9.0, 8.0, 81.0]);
    }

    #[test]
    fn scalar_sides_and_unary() {
        let x = t(&[2], &[1.0, 4.0]);
        assert_eq!(with_scalar(Bin::Sub, x.clone(), 1.0, true).data(), vec![0.0, -3.0]);
        assert_eq!(with_scalar(Bin::Sub, x.clone(), 1.0, false).data(), vec![0.0, 3.0]);
        assert_eq!(unary(Un::Sqrt, x).unwrap().data(), vec![1.0, 2.0]);
    }
}
