//! Elementwise arithmetic and math on CPU tensors.
//!
//! Two things make these fast, and both are why this module exists:
//! - every loop is compiled once per operation and element type (the `with_*` macros bind the
//!   operation to a closure before the loop), so contiguous operands run as plain slice loops
//!   the compiler vectorizes; a function pointer chosen at run time would cost an indirect call
//!   per element;
//! - operands arrive by value: a tensor nobody else holds (`Rc` count 1, e.g. the temporary
//!   between two optimiser steps) is overwritten in place instead of allocating a new buffer.
//!
//! The floating dtypes share one generic definition (`Real`); int64 has its own arithmetic,
//! and dtypes promote as JAX's do (`DType::promote`). GPU operands never reach these functions
//! (`ops::binary` and `Tensor::unary` route them to the GPU's kernels).

use super::layout::as_repeat;
use super::simd::{self, By, Elem1, Elem2, Swapped};
use crate::op::{Bin, Un};
use crate::{broadcast_shape, DType, Real, Storage, TResult, Tensor, TensorError};
use ndarray::{ArrayD, IxDyn, Zip};
use std::rc::Rc;

/// Evaluates `$body` with `$f` bound to `$op` on elements of type `$t`, once per operation.
macro_rules! with_bin {
    ($op:expr, $t:ty, $f:ident, $body:expr) => {
        match $op {
            Bin::Add => {
                let $f = |x: $t, y: $t| x + y;
                $body
            }
            Bin::Sub => {
                let $f = |x: $t, y: $t| x - y;
                $body
            }
            Bin::Mul => {
                let $f = |x: $t, y: $t| x * y;
                $body
            }
            Bin::Div => {
                let $f = |x: $t, y: $t| x / y;
                $body
            }
            Bin::Pow => {
                let $f = <$t as num_traits::Float>::powf;
                $body
            }
            Bin::Mask => {
                let $f = |x: $t, m: $t| {
                    if m > <$t as num_traits::Zero>::zero() {
                        x
                    } else {
                        <$t as num_traits::Zero>::zero()
                    }
                };
                $body
            }
        }
    };
}

pub(crate) use with_bin;

/// Evaluates `$body` with `$f` the name of a unit type whose `Elem1::call` computes `$op` on
/// any real dtype (`Real::un`), once per operation.
macro_rules! with_un {
    ($op:expr, $f:ident, $body:expr) => {
        with_un!(@arms $op, $f, $body; Neg Sin Cos Tan Exp Log Sqrt Tanh Sigmoid Relu Abs Erf Gelu GeluGrad)
    };
    (@arms $op:expr, $f:ident, $body:expr; $($v:ident)*) => {
        match $op {
            $(Un::$v => {
                // A type whose `call` is `#[inline(always)]`, not a closure over `un` or a
                // function item passed as `Fn`: those stayed an outlined call per element
                // (`un`'s tanh is large), so the loops did not vectorize.
                #[derive(Clone, Copy)]
                struct $f;
                impl<R: $crate::Real> $crate::cpu::simd::Elem1<R> for $f {
                    #[inline(always)]
                    fn call(self, x: R) -> R {
                        R::un(Un::$v, x)
                    }
                }
                $body
            })*
        }
    };
}

pub(crate) use with_un;

/// The work of one element, in the flops by which the thread pool decides to split a loop
/// (`simd::in_pieces`): an arithmetic operation, and a function such as exp or tanh (its
/// polynomial, about four times the time at the same vector width).
pub(crate) const ARITHMETIC_COST: f64 = 10.0;
pub(crate) const FUNCTION_COST: f64 = 40.0;

/// The array of a tensor only this caller holds, when it is stored as `T`; or the tensor back.
pub(crate) fn owned<T: Real>(t: Rc<Tensor>) -> Result<ArrayD<T>, Rc<Tensor>> {
    match Rc::try_unwrap(t) {
        Ok(Tensor { storage }) => T::take(storage).map_err(|storage| Rc::new(Tensor { storage })),
        Err(shared) => Err(shared),
    }
}

/// `t`'s array as `T` (the caller has converted it).
fn real<T: Real>(t: &Tensor) -> TResult<&ArrayD<T>> {
    T::of(t).ok_or_else(|| {
        TensorError::internal(format!("a {} tensor where {} was expected", t.dtype().name(), T::DTYPE.name()))
    })
}

/// dst[i] = g(dst[i], src[i]), with `src` broadcast to `dst`'s shape; over the threads when
/// large.
#[inline(always)]
fn update<T: Copy + Send + Sync>(dst: &mut ArrayD<T>, src: &ArrayD<T>, g: impl Elem2<T> + Sync, cost_each: f64) {
    if let Some((src, how)) = as_repeat(src, dst.shape()) {
        if let (Some(d), Some(s)) = (dst.as_slice_mut(), src.as_slice()) {
            if d.len() == s.len() {
                return simd::zip_in_place_par(d, s, g, cost_each);
            }
            return simd::repeat_in_place_par(d, s, how, g, cost_each);
        }
    }
    dst.zip_mut_with(src, |p, &q| *p = g.call(*p, q));
}

/// dst += src (src broadcast to dst's shape), in place: an adjoint's accumulation.
pub(crate) fn add_in_place<T: Real>(dst: &mut ArrayD<T>, src: &ArrayD<T>) {
    update(dst, src, By(|x: T, y: T| x + y), ARITHMETIC_COST)
}

/// A new array of `shape` with out[i] = f(x[i], y[i]), both broadcast to `shape`.
#[inline(always)]
fn fresh<T: Copy + Send + Sync>(
    x: &ArrayD<T>,
    y: &ArrayD<T>,
    shape: &[usize],
    f: impl Elem2<T> + Sync,
    cost_each: f64,
) -> TResult<ArrayD<T>> {
    if let (Some(a), Some(b)) = (x.as_slice(), y.as_slice()) {
        let out = if x.shape() == y.shape() {
            Some(simd::zip_into_par(a, b, f, cost_each))
        } else if x.shape() == shape {
            as_repeat(y, shape).and_then(|(y, how)| Some(simd::repeat_into_par(a, y.as_slice()?, how, f, cost_each)))
        } else if y.shape() == shape {
            as_repeat(x, shape)
                .and_then(|(x, how)| Some(simd::repeat_into_par(b, x.as_slice()?, how, Swapped(f), cost_each)))
        } else {
            None
        };
        if let Some(out) = out {
            return Ok(ArrayD::from_shape_vec(IxDyn(shape), out).map_err(|e| e.to_string())?);
        }
    }
    let xb = x.broadcast(IxDyn(shape)).ok_or("broadcast failed")?;
    let yb = y.broadcast(IxDyn(shape)).ok_or("broadcast failed")?;
    Ok(Zip::from(&xb).and(&yb).map_collect(|&p, &q| f.call(p, q)))
}

/// out[i] = f(x[i]) into `x` itself.
#[inline(always)]
fn update1<T: Copy + Send + Sync>(x: &mut ArrayD<T>, f: impl Elem1<T> + Sync, cost_each: f64) {
    match x.as_slice_mut() {
        Some(s) => simd::map_in_place_par(s, f, cost_each),
        None => x.mapv_inplace(|v| f.call(v)),
    }
}

/// A new array with out[i] = f(x[i]). Contiguous data goes through a plain slice loop: through
/// ndarray's `mapv` the `vmath` loops do not vectorize (the W2 benchmark ran 1.25× slower).
#[inline(always)]
fn fresh1<T: Copy + Send + Sync>(x: &ArrayD<T>, f: impl Elem1<T> + Sync, cost_each: f64) -> ArrayD<T> {
    match x.as_slice() {
        // The shape is x's own, so `from_shape_vec` cannot fail; `mapv` is only the formal else.
        Some(s) => ArrayD::from_shape_vec(x.raw_dim(), simd::map_into_par(s, f, cost_each))
            .unwrap_or_else(|_| x.mapv(|v| f.call(v))),
        None => x.mapv(|v| f.call(v)),
    }
}

/// The dtype of `a op b` for operands promoted to `d`: integer division is true division (a
/// float32 result), and bool arithmetic counts in int64.
fn arithmetic_dtype(op: Bin, d: DType) -> DType {
    match d {
        DType::I64 | DType::Bool if op == Bin::Div => DType::F32,
        DType::Bool => DType::I64,
        d => d,
    }
}

/// `a op b` with NumPy broadcasting and JAX's promotion, reusing an operand's buffer when only
/// this caller holds it and it already has the result's shape and dtype.
pub fn binary(op: Bin, a: Rc<Tensor>, b: Rc<Tensor>) -> TResult<Tensor> {
    if let (Storage::F32(_), Storage::F32(_)) = (&a.storage, &b.storage) {
        return binary_real::<f32>(op, a, b);
    }
    match arithmetic_dtype(op, DType::promote(a.dtype(), b.dtype())) {
        DType::F32 => binary_real::<f32>(op, Tensor::as_real::<f32>(a)?, Tensor::as_real::<f32>(b)?),
        DType::F64 => binary_real::<f64>(op, Tensor::as_real::<f64>(a)?, Tensor::as_real::<f64>(b)?),
        _ => binary_int(op, &a.astype(DType::I64)?, &b.astype(DType::I64)?),
    }
}

fn binary_real<T: Real>(op: Bin, a: Rc<Tensor>, b: Rc<Tensor>) -> TResult<Tensor> {
    let shape = broadcast_shape(a.shape(), b.shape())?;
    let cost = if op == Bin::Pow { FUNCTION_COST } else { ARITHMETIC_COST };
    with_bin!(op, T, f, {
        let a = if a.shape() == shape.as_slice() {
            match owned::<T>(a) {
                Ok(mut x) => {
                    update(&mut x, real::<T>(&b)?, By(f), cost);
                    return Ok(Tensor::from_real(x));
                }
                Err(a) => a,
            }
        } else {
            a
        };
        let b = if b.shape() == shape.as_slice() {
            match owned::<T>(b) {
                Ok(mut y) => {
                    update(&mut y, real::<T>(&a)?, Swapped(By(f)), cost);
                    return Ok(Tensor::from_real(y));
                }
                Err(b) => b,
            }
        } else {
            b
        };
        fresh(real::<T>(&a)?, real::<T>(&b)?, &shape, By(f), cost).map(Tensor::from_real)
    })
}

/// int64 arithmetic: wrapping, as NumPy's and JAX's; a negative power is an error (NumPy
/// refuses it too), and so is `**` past int64's range.
fn binary_int(op: Bin, a: &Tensor, b: &Tensor) -> TResult<Tensor> {
    let (Some(x), Some(y)) = (a.i64s(), b.i64s()) else {
        return Err(TensorError::internal("int64 arithmetic on another dtype"));
    };
    let shape = broadcast_shape(x.shape(), y.shape())?;
    let out = match op {
        Bin::Add => fresh(x, y, &shape, By(i64::wrapping_add), ARITHMETIC_COST)?,
        Bin::Sub => fresh(x, y, &shape, By(i64::wrapping_sub), ARITHMETIC_COST)?,
        Bin::Mul => fresh(x, y, &shape, By(i64::wrapping_mul), ARITHMETIC_COST)?,
        Bin::Pow => {
            if y.iter().any(|&e| e < 0) {
                return Err(TensorError::new(
                    "`**`: an int64 tensor to a negative power (convert with `astype \"float32\"` first)",
                ));
            }
            fresh(
                x,
                y,
                &shape,
                By(|p: i64, e: i64| p.wrapping_pow(u32::try_from(e).unwrap_or(u32::MAX))),
                ARITHMETIC_COST,
            )?
        }
        Bin::Mask => fresh(x, y, &shape, By(|x: i64, m: i64| if m > 0 { x } else { 0 }), ARITHMETIC_COST)?,
        Bin::Div => return Err(TensorError::internal("int64 division reached the integer kernel")),
    };
    Ok(Tensor { storage: Storage::I64(out) })
}

/// `t op s` (or `s op t` when `scalar_left`), in place when only this caller holds `t`. A
/// Float is weakly typed, as in JAX: it takes a floating tensor's dtype, and makes an int64 or
/// bool tensor's result float32.
pub fn with_scalar(op: Bin, t: Rc<Tensor>, s: f64, scalar_left: bool) -> TResult<Tensor> {
    match t.dtype() {
        DType::F64 => scalar_real::<f64>(op, t, s, scalar_left),
        DType::F32 if !t.is_gpu() => scalar_real::<f32>(op, t, s as f32, scalar_left),
        _ => scalar_real::<f32>(op, Tensor::as_real::<f32>(t)?, s as f32, scalar_left),
    }
}

fn scalar_real<T: Real>(op: Bin, t: Rc<Tensor>, s: T, scalar_left: bool) -> TResult<Tensor> {
    with_bin!(op, T, f, {
        let g = |v: T| if scalar_left { f(s, v) } else { f(v, s) };
        match owned::<T>(t) {
            Ok(mut x) => {
                update1(&mut x, By(g), ARITHMETIC_COST);
                Ok(Tensor::from_real(x))
            }
            Err(t) => Ok(Tensor::from_real(fresh1(real::<T>(&t)?, By(g), ARITHMETIC_COST))),
        }
    })
}

/// A math function on every element, in place when only this caller holds `t`. Negation,
/// `abs` and `relu` keep an int64 tensor's dtype; the other functions compute in float32 for
/// an int64 or bool tensor (as `jnp.sin` does).
pub fn unary(op: Un, t: Rc<Tensor>) -> TResult<Tensor> {
    if t.is_gpu() {
        return t.unary(op);
    }
    match t.dtype() {
        DType::F32 => unary_real::<f32>(op, t),
        DType::F64 => unary_real::<f64>(op, t),
        _ if matches!(op, Un::Neg | Un::Abs | Un::Relu) => {
            let t = t.astype(DType::I64)?;
            let x = t.i64s().ok_or_else(|| TensorError::internal("int64 conversion"))?;
            let out = match op {
                Un::Neg => x.mapv(i64::wrapping_neg),
                Un::Abs => x.mapv(i64::wrapping_abs),
                _ => x.mapv(|v| v.max(0)),
            };
            Ok(Tensor { storage: Storage::I64(out) })
        }
        _ => unary_real::<f32>(op, Tensor::as_real::<f32>(t)?),
    }
}

/// The work of one element of a math function (`ARITHMETIC_COST` for the few that are one
/// instruction).
pub(crate) fn unary_cost(op: Un) -> f64 {
    if matches!(op, Un::Neg | Un::Abs | Un::Relu | Un::Sqrt) {
        ARITHMETIC_COST
    } else {
        FUNCTION_COST
    }
}

fn unary_real<T: Real>(op: Un, t: Rc<Tensor>) -> TResult<Tensor> {
    let cost = unary_cost(op);
    with_un!(op, F, {
        let x = match owned::<T>(t) {
            Ok(mut x) => {
                update1(&mut x, F, cost);
                x
            }
            Err(t) => fresh1(real::<T>(&t)?, F, cost),
        };
        Ok(Tensor::from_real(x))
    })
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
        let ptr = b.cpu().unwrap().as_ptr();
        // `a` is shared, so the result goes into `b`'s buffer: a - b, not b - a.
        let r = binary(Bin::Sub, a, b).unwrap();
        assert_eq!(r.data(), vec![-9.0, -18.0, -27.0]);
        assert_eq!(r.cpu().unwrap().as_ptr(), ptr);
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

    /// Operands constant over leading axes only (a [4, 1] against [2, 3, 4, 5], and a [1, 4, 1]
    /// in place and on either side) take the cycled-block path: the same elements as ndarray's
    /// broadcast, element by element; a select with such a condition likewise.
    #[test]
    fn blocks_cycled_over_leading_axes_are_the_broadcast() {
        let shape = [2, 3, 4, 5];
        let n: usize = shape.iter().product();
        let big: Vec<f32> = (0..n).map(|i| (i % 17) as f32 - 8.0).collect();
        for small in [&[4, 1][..], &[1, 4, 1], &[3, 1, 1]] {
            let m: usize = small.iter().product();
            let s: Vec<f32> = (0..m).map(|i| i as f32 * 0.5 + 1.0).collect();
            let want = |swap: bool| {
                let a = ArrayD::from_shape_vec(IxDyn(&shape), big.clone()).unwrap();
                let b = ArrayD::from_shape_vec(IxDyn(small), s.clone()).unwrap();
                let b = b.broadcast(IxDyn(&shape)).unwrap();
                let out: Vec<f32> = a.iter().zip(b.iter()).map(|(&x, &y)| if swap { y - x } else { x - y }).collect();
                out
            };
            let kept = t(&shape, &big);
            let (fresh, keep) = (binary(Bin::Sub, kept.clone(), t(small, &s)).unwrap(), kept.clone());
            assert_eq!(fresh.data(), want(false), "{small:?}");
            assert_eq!(binary(Bin::Sub, t(small, &s), keep).unwrap().data(), want(true), "{small:?}");
            // The big operand only this call holds: updated in place.
            assert_eq!(binary(Bin::Sub, t(&shape, &big), t(small, &s)).unwrap().data(), want(false), "{small:?}");
            let c = ArrayD::from_shape_vec(IxDyn(small), (0..m).map(|i| i % 3 != 1).collect()).unwrap();
            let a = ArrayD::from_shape_vec(IxDyn(&shape), big.clone()).unwrap();
            let z = ArrayD::from_elem(IxDyn(&[]), 0.0f32);
            let got = super::super::compare::select(&c, &a, &z).unwrap();
            let cb = c.broadcast(IxDyn(&shape)).unwrap();
            let want: Vec<f32> = cb.iter().zip(a.iter()).map(|(&c, &x)| if c { x } else { 0.0 }).collect();
            assert_eq!(got.iter().copied().collect::<Vec<_>>(), want, "select {small:?}");
        }
    }

    #[test]
    fn scalar_sides_and_unary() {
        let x = t(&[2], &[1.0, 4.0]);
        assert_eq!(with_scalar(Bin::Sub, x.clone(), 1.0, true).unwrap().data(), vec![0.0, -3.0]);
        assert_eq!(with_scalar(Bin::Sub, x.clone(), 1.0, false).unwrap().data(), vec![0.0, 3.0]);
        assert_eq!(unary(Un::Sqrt, x).unwrap().data(), vec![1.0, 2.0]);
    }

    #[test]
    fn dtypes_promote_as_jax_does() {
        let f64s = Rc::new(Tensor::from_f64s(&[2], vec![0.1, 0.2]).unwrap());
        let ints = Rc::new(Tensor::from_i64s(&[2], vec![3, -4]).unwrap());
        let bools = Rc::new(Tensor::from_bools(&[2], vec![true, false]).unwrap());
        let r = binary(Bin::Add, f64s.clone(), t(&[2], &[1.0, 2.0])).unwrap();
        assert_eq!((r.dtype(), r.to_f64s().unwrap()), (DType::F64, vec![1.1, 2.2]));
        let r = binary(Bin::Mul, ints.clone(), ints.clone()).unwrap();
        assert_eq!((r.dtype(), r.to_f64s().unwrap()), (DType::I64, vec![9.0, 16.0]));
        let r = binary(Bin::Div, ints.clone(), ints.clone()).unwrap();
        assert_eq!((r.dtype(), r.to_f64s().unwrap()), (DType::F32, vec![1.0, 1.0]));
        let r = binary(Bin::Add, bools.clone(), bools).unwrap();
        assert_eq!((r.dtype(), r.to_f64s().unwrap()), (DType::I64, vec![2.0, 0.0]));
        let r = with_scalar(Bin::Mul, ints.clone(), 0.5, false).unwrap();
        assert_eq!((r.dtype(), r.to_f64s().unwrap()), (DType::F32, vec![1.5, -2.0]));
        let r = with_scalar(Bin::Mul, f64s, 3.0, false).unwrap();
        assert_eq!((r.dtype(), r.to_f64s().unwrap()), (DType::F64, vec![0.1 * 3.0, 0.2 * 3.0]));
        let r = unary(Un::Neg, ints.clone()).unwrap();
        assert_eq!((r.dtype(), r.to_f64s().unwrap()), (DType::I64, vec![-3.0, 4.0]));
        let r = unary(Un::Exp, ints.clone()).unwrap();
        assert_eq!(r.dtype(), DType::F32);
        let e = binary(Bin::Pow, ints.clone(), Rc::new(Tensor::from_i64s(&[2], vec![2, -1]).unwrap()));
        assert!(e.is_err());
    }
}
