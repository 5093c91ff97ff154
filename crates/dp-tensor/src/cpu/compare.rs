//! The comparing operations on the CPU (`TOp::Cmp`, `TOp::Not`, `TOp::Where`): written once
//! over any ordered element type, so int64 compares exactly and bool tensors need no
//! conversion. `ops::forward` brings the operands to one dtype first.

use super::elementwise::ARITHMETIC_COST;
use super::simd::{self, By, Repeat, Swapped};
use crate::op::Cmp;
use crate::{broadcast_shape, TResult};
use ndarray::{ArrayD, IxDyn, Zip};
use std::mem::MaybeUninit;

/// How two row-major operands fill a result of n elements without a broadcast iteration: both
/// whole, or one whole against a single element. An operand with all n elements differs from
/// the result's shape only by axes of length 1, so its row-major order is the result's.
#[derive(Clone, Copy)]
enum Flat {
    Both,
    OneRight,
    OneLeft,
}

fn flat(a: usize, b: usize, n: usize) -> Option<Flat> {
    match (a == n, b == n) {
        (true, true) => Some(Flat::Both),
        (true, false) if b == 1 => Some(Flat::OneRight),
        (false, true) if a == 1 => Some(Flat::OneLeft),
        _ => None,
    }
}

/// out[i] = f(x[i], y[i]) with both broadcast to their joint shape.
fn zip2<T: Copy, U>(x: &ArrayD<T>, y: &ArrayD<T>, f: impl Fn(T, T) -> U) -> TResult<ArrayD<U>> {
    let shape = broadcast_shape(x.shape(), y.shape())?;
    // Row-major operands of the result's size or of one element (`clip`'s bounds): a flat
    // loop. ndarray's broadcast iteration cost ~10× the comparison itself (a tenth of a staged
    // W4 step clipped its gradients that way).
    if let (Some(a), Some(b)) = (x.as_slice(), y.as_slice()) {
        if let Some(how) = flat(a.len(), b.len(), shape.iter().product()) {
            let out: Vec<U> = match how {
                Flat::Both => a.iter().zip(b).map(|(&p, &q)| f(p, q)).collect(),
                Flat::OneRight => a.iter().map(|&p| f(p, b[0])).collect(),
                Flat::OneLeft => b.iter().map(|&q| f(a[0], q)).collect(),
            };
            return Ok(ArrayD::from_shape_vec(IxDyn(&shape), out).map_err(|e| e.to_string())?);
        }
    }
    let xb = x.broadcast(IxDyn(&shape)).ok_or("broadcast failed")?;
    let yb = y.broadcast(IxDyn(&shape)).ok_or("broadcast failed")?;
    Ok(Zip::from(&xb).and(&yb).map_collect(|&p, &q| f(p, q)))
}

/// A comparison (`Cmp::holds`) of every pair of elements.
pub fn compare<T: Copy + PartialOrd>(op: Cmp, x: &ArrayD<T>, y: &ArrayD<T>) -> TResult<ArrayD<bool>> {
    zip2(x, y, |p, q| op.holds(p, q))
}

/// `logical_and` or `logical_or` of two truth-valued arrays.
pub fn logic(op: Cmp, x: &ArrayD<bool>, y: &ArrayD<bool>) -> TResult<ArrayD<bool>> {
    zip2(x, y, |p, q| op.logic(p, q))
}

/// `max_of` or `min_of` of every pair of elements (`Cmp::pick`).
pub fn pick<T: Copy + PartialOrd + Send + Sync>(op: Cmp, x: &ArrayD<T>, y: &ArrayD<T>) -> TResult<ArrayD<T>> {
    // The flat cases of `zip2` through the vectorized loops (`clip` is two of these on every
    // gradient of a training step, a bound against a whole matrix).
    if let (Some(a), Some(b)) = (x.as_slice(), y.as_slice()) {
        let shape = broadcast_shape(x.shape(), y.shape())?;
        if let Some(how) = flat(a.len(), b.len(), shape.iter().product()) {
            let f = By(move |p: T, q: T| op.pick(p, q));
            // One element over all n is a single run of `Spread`.
            let out = match how {
                Flat::Both => simd::zip_into_par(a, b, f, ARITHMETIC_COST),
                Flat::OneRight => simd::repeat_into_par(a, b, Repeat::Spread, f, ARITHMETIC_COST),
                Flat::OneLeft => simd::repeat_into_par(b, a, Repeat::Spread, Swapped(f), ARITHMETIC_COST),
            };
            return Ok(ArrayD::from_shape_vec(IxDyn(&shape), out).map_err(|e| e.to_string())?);
        }
    }
    zip2(x, y, |p, q| op.pick(p, q))
}

/// `a` where `c`, else `b`, the three broadcast together.
pub fn select<T: Copy + Send + Sync>(c: &ArrayD<bool>, a: &ArrayD<T>, b: &ArrayD<T>) -> TResult<ArrayD<T>> {
    let shape = broadcast_shape(&broadcast_shape(c.shape(), a.shape())?, b.shape())?;
    // The selects of models (a mask over the last axes, a constant on one side, the operands
    // of a reverse rule) repeat each operand's elements in whole blocks: a flat loop over
    // those blocks instead of ndarray's broadcast iteration over every axis.
    if let (Some(cs), Some(xs), Some(ys)) = (repeated(c, &shape), repeated(a, &shape), repeated(b, &shape)) {
        let (cs, xs, ys) = (cs.as_ref(), xs.as_ref(), ys.as_ref());
        let n: usize = shape.iter().product();
        // The blocks nest (each length is a product of trailing axes), so the shortest block
        // longer than one element divides every other; one-element operands are spread to it.
        let p = [cs.len(), xs.len(), ys.len()].into_iter().filter(|&l| l > 1).min().unwrap_or(n);
        fn spread<T: Copy>(s: &[T], p: usize) -> std::borrow::Cow<'_, [T]> {
            if s.len() == 1 {
                std::borrow::Cow::Owned(vec![s[0]; p])
            } else {
                std::borrow::Cow::Borrowed(s)
            }
        }
        let (cs, xs, ys) = (spread(cs, p), spread(xs, p), spread(ys, p));
        let write = |r: std::ops::Range<usize>, d: &mut [MaybeUninit<T>]| select_blocks(&cs, &xs, &ys, r, p, d);
        // SAFETY: the pieces are whole blocks (granule p, which divides n), each written whole.
        let out = unsafe { simd::build_in_pieces(n, p, ARITHMETIC_COST, &write) };
        return Ok(ArrayD::from_shape_vec(IxDyn(&shape), out).map_err(|e| e.to_string())?);
    }
    let cb = c.broadcast(IxDyn(&shape)).ok_or("broadcast failed")?;
    let ab = a.broadcast(IxDyn(&shape)).ok_or("broadcast failed")?;
    let bb = b.broadcast(IxDyn(&shape)).ok_or("broadcast failed")?;
    Ok(Zip::from(&cb).and(&ab).and(&bb).map_collect(|&c, &p, &q| if c { p } else { q }))
}

/// `select`'s flat loop over the elements `r` of the result (whole blocks of p), into `out`.
#[inline(always)]
fn select_blocks_body<T: Copy>(
    cs: &[bool],
    xs: &[T],
    ys: &[T],
    r: std::ops::Range<usize>,
    p: usize,
    out: &mut [MaybeUninit<T>],
) {
    for (start, out) in r.step_by(p).zip(out.chunks_exact_mut(p)) {
        let block = |len: usize| start % len..start % len + p;
        let (c, x, y) = (&cs[block(cs.len())], &xs[block(xs.len())], &ys[block(ys.len())]);
        // Both operands loaded and the flag (a byte) choosing between the values: written as
        // `if c { x } else { y }` the loop chose between the two addresses and gathered its
        // operands one lane at a time.
        let (c, x, y) = (&c[..p], &x[..p], &y[..p]);
        let c: &[u8] = bytemuck_bools(c);
        for i in 0..p {
            out[i].write(std::hint::select_unpredictable(c[i] != 0, x[i], y[i]));
        }
    }
}

/// The bytes of a `bool` slice (each 0 or 1).
#[inline(always)]
fn bytemuck_bools(c: &[bool]) -> &[u8] {
    // SAFETY: `bool` has the size and alignment of `u8`, and every bool is a valid u8.
    unsafe { std::slice::from_raw_parts(c.as_ptr().cast::<u8>(), c.len()) }
}

super::simd::widened! {
    fn select_blocks[T: Copy](cs: &[bool], xs: &[T], ys: &[T], r: std::ops::Range<usize>, p: usize, out: &mut [MaybeUninit<T>]) -> () => select_blocks_body
}

/// The elements of `a` as one block that, repeated, fills `shape` in row-major order: when
/// `a` is stored row-major and its shape, leading 1s aside, is a suffix of `shape`, or else
/// its `cycled_block`.
fn repeated<'a, T: Clone>(a: &'a ArrayD<T>, shape: &[usize]) -> Option<std::borrow::Cow<'a, [T]>> {
    let own: Vec<usize> = a.shape().iter().copied().skip_while(|&d| d == 1).collect();
    let data = a.as_slice()?;
    if own.len() <= shape.len() && shape.ends_with(&own) && !data.is_empty() {
        return Some(std::borrow::Cow::Borrowed(data));
    }
    // Constant over some leading axes only (a per-query mask [Tq, 1] against [B, H, Tq, dv]):
    // the block those axes cycle, made once.
    let block = super::layout::cycled_block(a, shape)?;
    Some(std::borrow::Cow::Owned(block.into_raw_vec_and_offset().0))
}

/// The position of the first largest element along `axis` (removed), the first NaN if any,
/// as NumPy's `argmax`.
pub fn argmax_axis<T: num_traits::Float>(x: &ArrayD<T>, axis: usize) -> ArrayD<i64> {
    x.map_axis(ndarray::Axis(axis), |line| {
        let mut best: Option<(usize, T)> = None;
        for (i, &v) in line.iter().enumerate() {
            if best.is_none_or(|(_, b)| !b.is_nan() && (v.is_nan() || v > b)) {
                best = Some((i, v));
            }
        }
        best.map_or(0, |(i, _)| i as i64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a<T: Clone>(shape: &[usize], v: &[T]) -> ArrayD<T> {
        ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap()
    }

    #[test]
    fn selects_in_pieces_agree_with_the_broadcast_iteration() {
        // A mask over the last two axes against a batch, and a scalar on the other side.
        let (b, t) = (9, 64);
        let c = ArrayD::from_shape_fn(IxDyn(&[t, t]), |i| i[1] <= i[0]);
        let x = ArrayD::from_shape_fn(IxDyn(&[b, t, t]), |i| (i[0] * 7 + i[1] * 3 + i[2]) as f32);
        let y = a(&[1], &[-1.0f32]);
        let want = Zip::from(&c.broadcast(IxDyn(&[b, t, t])).unwrap())
            .and(&x)
            .and(&y.broadcast(IxDyn(&[b, t, t])).unwrap())
            .map_collect(|&c, &p, &q| if c { p } else { q });
        let got = crate::cpu::gemm::with_forced_parallel(|| select(&c, &x, &y).unwrap());
        assert_eq!(got, want);
    }

    #[test]
    fn comparisons_broadcast_and_nan_compares_false() {
        let x = a(&[2, 1], &[1.0, f64::NAN]);
        let y = a(&[2], &[1.0, 2.0]);
        let lt = compare(Cmp::Less, &x, &y).unwrap();
        assert_eq!(lt.shape(), &[2, 2]);
        assert_eq!(lt.iter().copied().collect::<Vec<_>>(), vec![false, true, false, false]);
        let ne = compare(Cmp::NotEqual, &x, &y).unwrap();
        assert_eq!(ne.iter().copied().collect::<Vec<_>>(), vec![false, true, true, true]);
        // int64 beyond 2^53 compares exactly (no float conversion).
        let big = a(&[2], &[(1i64 << 60) + 1, 1i64 << 60]);
        let eq = compare(Cmp::Equal, &big, &a(&[], &[1i64 << 60])).unwrap();
        assert_eq!(eq.iter().copied().collect::<Vec<_>>(), vec![false, true]);
    }

    #[test]
    fn flat_comparisons_match_the_broadcast_iteration() {
        let general = |x: &ArrayD<f64>, y: &ArrayD<f64>| {
            let s = broadcast_shape(x.shape(), y.shape()).unwrap();
            let (xb, yb) = (x.broadcast(s.clone()).unwrap(), y.broadcast(s).unwrap());
            Zip::from(&xb).and(&yb).map_collect(|&p, &q| Cmp::Max.pick(p, q))
        };
        let m = a(&[2, 3], &[1.0, -4.0, f64::NAN, 7.0, 0.5, -0.0]);
        let cases = [
            (m.clone(), a(&[], &[0.25])),
            (a(&[1], &[0.25]), m.clone()),
            (m.clone(), a(&[1, 2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0])),
            // Not flat (a row broadcast down the columns): the general iteration.
            (m.clone(), a(&[3], &[0.0, 1.0, 2.0])),
        ];
        for (x, y) in cases {
            let (got, want) = (pick(Cmp::Max, &x, &y).unwrap(), general(&x, &y));
            assert_eq!(got.shape(), want.shape());
            assert!(got.iter().zip(&want).all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan())));
        }
    }

    #[test]
    fn pick_propagates_nan_and_select_broadcasts() {
        let x = a(&[3], &[1.0, f64::NAN, 3.0]);
        let y = a(&[3], &[2.0, 0.0, f64::NAN]);
        let m: Vec<f64> = pick(Cmp::Max, &x, &y).unwrap().iter().copied().collect();
        assert_eq!(m[0], 2.0);
        assert!(m[1].is_nan() && m[2].is_nan());
        let c = a(&[2, 1], &[true, false]);
        let s = select(&c, &a(&[3], &[1, 2, 3]), &a(&[], &[0])).unwrap();
        assert_eq!(s.iter().copied().collect::<Vec<_>>(), vec![1, 2, 3, 0, 0, 0]);
    }

    #[test]
    fn the_block_loop_selects_as_the_general_broadcast() {
        // A mask over the last two axes of [2, 3, 2, 2], a constant, a full operand, a [1, 2]
        // row: the block loop's cases, against ndarray's broadcast iteration.
        let general = |c: &ArrayD<bool>, x: &ArrayD<i64>, y: &ArrayD<i64>| {
            let s = broadcast_shape(&broadcast_shape(c.shape(), x.shape()).unwrap(), y.shape()).unwrap();
            let (cb, xb, yb) =
                (c.broadcast(s.clone()).unwrap(), x.broadcast(s.clone()).unwrap(), y.broadcast(s).unwrap());
            Zip::from(&cb).and(&xb).and(&yb).map_collect(|&c, &p, &q| if c { p } else { q })
        };
        let full = a(&[2, 3, 2, 2], &(0..24).collect::<Vec<i64>>());
        let mask = a(&[2, 2], &[true, false, true, true]);
        let row = a(&[1, 2], &[-1i64, -2]);
        let cases = [
            (mask.clone(), full.clone(), a(&[], &[-7i64])),
            (mask.clone(), a(&[], &[5i64]), full.clone()),
            (a(&[2, 3, 2, 2], &(0..24).map(|i| i % 3 == 0).collect::<Vec<_>>()), row.clone(), full.clone()),
            (a(&[1, 1, 2], &[false, true]), row, a(&[3, 2, 2], &(0..12).collect::<Vec<i64>>())),
        ];
        for (c, x, y) in cases {
            assert_eq!(select(&c, &x, &y).unwrap(), general(&c, &x, &y));
        }
    }
}
