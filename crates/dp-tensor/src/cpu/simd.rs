//! The elementwise loops of the CPU backend, compiled once more for each wider vector
//! instruction set and chosen at run time by what the CPU has.
//!
//! dp is built for baseline x86-64, whose vectors hold four float32s; the loops of
//! `elementwise`, the softmax and `where` are written so that they vectorize, and on a CPU
//! with AVX2 or AVX-512 the same loops, compiled with those features enabled, do two or four
//! times as many elements per instruction (GELU's tanh alone was a sixth of a Transformer
//! training step at SSE width). Rust does not contract `a * b + c` into a fused multiply-add,
//! so every width computes the same IEEE operations in the same order: the results are
//! bit-identical whichever copy runs (the tests below compare them).
//!
//! Each kernel is an `#[inline(always)]` generic body; `widened!` wraps it in a dispatcher
//! with one `#[target_feature]` copy per instruction set, into which the body (and the
//! element function it is given) is inlined, and so compiled for that set. The element
//! functions come as `Elem1`/`Elem2` values, whose `call` is `#[inline(always)]`: a large
//! function (the GELU's tanh) passed as a plain `Fn` stayed an outlined call per element, in
//! a loop that then did not vectorize at all.

use std::mem::MaybeUninit;

/// The vector instruction sets the loops are compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) enum Level {
    Base,
    Avx2,
    Avx512,
}

/// The widest set the CPU has (std caches the detection, so this is a few loads).
#[inline]
pub(crate) fn level() -> Level {
    #[cfg(test)]
    if let Some(forced) = tests::FORCED.with(|f| f.get()) {
        return forced.min_with(detected());
    }
    detected()
}

#[inline]
fn detected() -> Level {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512dq")
            && is_x86_feature_detected!("avx512vl")
        {
            return Level::Avx512;
        }
        if is_x86_feature_detected!("avx2") {
            return Level::Avx2;
        }
    }
    Level::Base
}

impl Level {
    #[cfg(test)]
    fn min_with(self, other: Level) -> Level {
        let rank = |l: Level| match l {
            Level::Base => 0,
            Level::Avx2 => 1,
            Level::Avx512 => 2,
        };
        if rank(self) <= rank(other) {
            self
        } else {
            other
        }
    }
}

/// `vis fn name[generics](args) -> ret => body`: `name` runs `body` compiled for the widest
/// instruction set the CPU has.
macro_rules! widened {
    ($(#[$doc:meta])* $vis:vis fn $name:ident [$($gen:tt)*] ($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty => $body:path) => {
        $(#[$doc])*
        #[inline]
        $vis fn $name<$($gen)*>($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2")]
                unsafe fn avx512<$($gen)*>($($arg: $ty),*) -> $ret {
                    $body($($arg),*)
                }
                #[target_feature(enable = "avx2")]
                unsafe fn avx2<$($gen)*>($($arg: $ty),*) -> $ret {
                    $body($($arg),*)
                }
                match $crate::cpu::simd::level() {
                    // SAFETY: `level` names only a set the CPU has.
                    $crate::cpu::simd::Level::Avx512 => return unsafe { avx512($($arg),*) },
                    $crate::cpu::simd::Level::Avx2 => return unsafe { avx2($($arg),*) },
                    $crate::cpu::simd::Level::Base => {}
                }
            }
            $body($($arg),*)
        }
    };
}
pub(crate) use widened;

/// A function of one element, inlined into the loops (see the module's comment).
pub(crate) trait Elem1<T>: Copy {
    fn call(self, x: T) -> T;
}

/// A function of two elements, inlined into the loops.
pub(crate) trait Elem2<T>: Copy {
    fn call(self, x: T, y: T) -> T;
}

/// A closure as an element function (small closures inline by themselves; `call` only
/// forwards).
#[derive(Clone, Copy)]
pub(crate) struct By<F>(pub F);

impl<T, F: Fn(T) -> T + Copy> Elem1<T> for By<F> {
    #[inline(always)]
    fn call(self, x: T) -> T {
        (self.0)(x)
    }
}

impl<T, F: Fn(T, T) -> T + Copy> Elem2<T> for By<F> {
    #[inline(always)]
    fn call(self, x: T, y: T) -> T {
        (self.0)(x, y)
    }
}

/// An element function with its operands swapped.
#[derive(Clone, Copy)]
pub(crate) struct Swapped<F>(pub F);

impl<T, F: Elem2<T>> Elem2<T> for Swapped<F> {
    #[inline(always)]
    fn call(self, x: T, y: T) -> T {
        self.0.call(y, x)
    }
}

/// A vector with room for `n` elements, to be written through `spare_capacity_mut` and then
/// given its length by `written`: these results are written once, so zeroing them first would
/// be a third of the memory traffic of a binary operation. (Not a helper taking the writing
/// loop as a closure: a closure that large stays an outlined call, compiled without the
/// caller's vector features.)
#[inline(always)]
pub(crate) fn unwritten<T>(n: usize) -> Vec<T> {
    Vec::with_capacity(n)
}

/// `out` with its first `n` elements, which the caller has written.
///
/// # Safety
/// `out.spare_capacity_mut()[..n]` must have been initialised.
#[inline(always)]
pub(crate) unsafe fn written<T>(mut out: Vec<T>, n: usize) -> Vec<T> {
    debug_assert!(n <= out.capacity());
    // SAFETY: the caller's contract.
    unsafe { out.set_len(n) };
    out
}

#[inline(always)]
fn map_in_place_body<T: Copy, F: Elem1<T>>(s: &mut [T], f: F) {
    for v in s {
        *v = f.call(*v);
    }
}

#[inline(always)]
fn map_to_body<T: Copy, F: Elem1<T>>(s: &[T], d: &mut [MaybeUninit<T>], f: F) {
    for (o, &x) in d.iter_mut().zip(s) {
        o.write(f.call(x));
    }
}

#[inline(always)]
fn zip_in_place_body<T: Copy, F: Elem2<T>>(d: &mut [T], s: &[T], f: F) {
    for (p, &q) in d.iter_mut().zip(s) {
        *p = f.call(*p, q);
    }
}

#[inline(always)]
fn zip_to_body<T: Copy, F: Elem2<T>>(a: &[T], b: &[T], d: &mut [MaybeUninit<T>], f: F) {
    for ((o, &p), &q) in d.iter_mut().zip(a).zip(b) {
        o.write(f.call(p, q));
    }
}

/// How a shorter operand `y` repeats over a longer `x` (`len(y)` divides `len(x)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Repeat {
    /// y whole, again and again: x[i] pairs with y[i mod len(y)] (a bias over a batch).
    Cycle,
    /// each y[j] over a run of len(x) / len(y) elements: x[i] pairs with y[i / run] (a
    /// per-row statistic).
    Spread,
}

#[inline(always)]
fn repeat_in_place_body<T: Copy, F: Elem2<T>>(d: &mut [T], y: &[T], how: Repeat, f: F) {
    if y.is_empty() {
        return;
    }
    match how {
        Repeat::Cycle => {
            for block in d.chunks_exact_mut(y.len()) {
                for (p, &q) in block.iter_mut().zip(y) {
                    *p = f.call(*p, q);
                }
            }
        }
        Repeat::Spread => {
            for (block, &q) in d.chunks_exact_mut(d.len() / y.len()).zip(y) {
                for p in block {
                    *p = f.call(*p, q);
                }
            }
        }
    }
}

/// d[i] = f(x[i], y repeated `how`); len(y) divides len(x), and `d` is as long as `x`.
#[inline(always)]
fn repeat_to_body<T: Copy, F: Elem2<T>>(x: &[T], y: &[T], how: Repeat, dst: &mut [MaybeUninit<T>], f: F) {
    if y.is_empty() || !x.len().is_multiple_of(y.len()) || dst.len() < x.len() {
        return;
    }
    let dst = &mut dst[..x.len()];
    match how {
        Repeat::Cycle => {
            for (o, p) in dst.chunks_exact_mut(y.len()).zip(x.chunks_exact(y.len())) {
                for ((o, &p), &q) in o.iter_mut().zip(p).zip(y) {
                    o.write(f.call(p, q));
                }
            }
        }
        Repeat::Spread => {
            let run = x.len() / y.len();
            for ((o, p), &q) in dst.chunks_exact_mut(run).zip(x.chunks_exact(run)).zip(y) {
                for (o, &p) in o.iter_mut().zip(p) {
                    o.write(f.call(p, q));
                }
            }
        }
    }
}

widened! {
    /// s[i] = f(s[i]).
    pub(crate) fn map_in_place[T: Copy, F: Elem1<T>](s: &mut [T], f: F) -> () => map_in_place_body
}
widened! {
    /// d[i] = f(s[i]) (the shorter length).
    pub(crate) fn map_to[T: Copy, F: Elem1<T>](s: &[T], d: &mut [MaybeUninit<T>], f: F) -> () => map_to_body
}
widened! {
    /// d[i] = f(d[i], s[i]) (the shorter length).
    pub(crate) fn zip_in_place[T: Copy, F: Elem2<T>](d: &mut [T], s: &[T], f: F) -> () => zip_in_place_body
}
widened! {
    /// d[i] = f(a[i], b[i]) (the shortest length).
    pub(crate) fn zip_to[T: Copy, F: Elem2<T>](a: &[T], b: &[T], d: &mut [MaybeUninit<T>], f: F) -> () => zip_to_body
}
widened! {
    /// d[i] = f(d[i], y repeated `how`).
    pub(crate) fn repeat_in_place[T: Copy, F: Elem2<T>](d: &mut [T], y: &[T], how: Repeat, f: F) -> () => repeat_in_place_body
}
widened! {
    /// d[i] = f(x[i], y repeated `how`).
    fn repeat_to[T: Copy, F: Elem2<T>](x: &[T], y: &[T], how: Repeat, d: &mut [MaybeUninit<T>], f: F) -> () => repeat_to_body
}

/// The elements of one piece of work for a thread of the pool: large enough that claiming it
/// (an atomic add) is nothing beside it, small enough that two threads share a 64 K-element
/// activation evenly.
const PIECE: usize = 8192;

/// A pointer that threads may share: each writes only its own piece through it.
pub(crate) struct Shared<T>(pub(crate) *mut T);

// Not derived: a derived `Copy` would ask `T: Copy`, and only the pointer is copied.
impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Shared<T> {}
// SAFETY: used only by `in_pieces`' callers, whose pieces are disjoint ranges of one buffer
// that outlives the call.
unsafe impl<T: Send> Sync for Shared<T> {}
unsafe impl<T: Send> Send for Shared<T> {}

impl<T> Shared<T> {
    /// # Safety
    /// `r` lies inside the buffer, and no other live slice overlaps it.
    pub(crate) unsafe fn piece<'a>(self, r: std::ops::Range<usize>) -> &'a mut [T] {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(r.start), r.len()) }
    }
}

/// `piece(range)` for consecutive ranges covering 0..n, on the GEMM's thread pool when the
/// work (`cost_each` per element, in the flops the pool's thresholds count: about 10 for
/// arithmetic, 40 for a function such as tanh) is worth it. PyTorch spreads these loops over
/// its threads too; the GELU of a Transformer's MLP is 256 K elements.
pub(crate) fn in_pieces(n: usize, cost_each: f64, piece: &(dyn Fn(std::ops::Range<usize>) + Sync)) {
    in_pieces_of(n, 1, cost_each, piece)
}

/// `in_pieces` with every range but the last a multiple of `granule` long (and starting at
/// one): a broadcast operand's repetitions stay whole within a piece.
fn in_pieces_of(n: usize, granule: usize, cost_each: f64, piece: &(dyn Fn(std::ops::Range<usize>) + Sync)) {
    let len = (PIECE / granule.max(1)).max(1) * granule.max(1);
    let items = n.div_ceil(len);
    if items < 2 {
        return piece(0..n);
    }
    super::gemm::for_each_product(items, cost_each * len as f64, &|i, _| piece(i * len..((i + 1) * len).min(n)));
}

/// s[i] = f(s[i]), over the threads when `s` is large (`in_pieces`).
pub(crate) fn map_in_place_par<T: Copy + Send, F: Elem1<T> + Sync>(s: &mut [T], f: F, cost_each: f64) {
    let (n, at) = (s.len(), Shared(s.as_mut_ptr()));
    // SAFETY: the pieces are disjoint ranges of `s`, which is borrowed for the whole call.
    in_pieces(n, cost_each, &|r| map_in_place(unsafe { at.piece(r) }, f));
}

/// d[i] = f(d[i], s[i]) (d and s of one length), over the threads when large.
pub(crate) fn zip_in_place_par<T: Copy + Send + Sync, F: Elem2<T> + Sync>(d: &mut [T], s: &[T], f: F, cost_each: f64) {
    let (n, at) = (d.len().min(s.len()), Shared(d.as_mut_ptr()));
    // SAFETY: the pieces are disjoint ranges of `d`, which is borrowed for the whole call.
    in_pieces(n, cost_each, &|r| zip_in_place(unsafe { at.piece(r.clone()) }, &s[r], f));
}

/// d[i] = f(d[i], y repeated `how`) (len(y) divides len(d)), over the threads when large, in
/// pieces of whole repetitions (`Cycle`) or whole runs (`Spread`) as `repeat_into_par`.
pub(crate) fn repeat_in_place_par<T: Copy + Send + Sync, F: Elem2<T> + Sync>(
    d: &mut [T],
    y: &[T],
    how: Repeat,
    f: F,
    cost_each: f64,
) {
    let Some(pieces) = RepeatPieces::of(d.len(), y, how) else { return };
    let at = Shared(d.as_mut_ptr());
    // SAFETY: the pieces are disjoint ranges of `d`, borrowed for the whole call.
    let piece = |r: std::ops::Range<usize>| repeat_in_place(unsafe { at.piece(r.clone()) }, pieces.ys(&r), how, f);
    in_pieces_of(d.len(), pieces.granule, cost_each, &piece);
}

/// Fills the piece of a result that covers the given range of its elements.
pub(crate) type PieceWriter<'a, T> = dyn Fn(std::ops::Range<usize>, &mut [MaybeUninit<T>]) + Sync + 'a;

/// A vector of n elements written piece by piece on the pool when the work is worth it
/// (`in_pieces_of`): `write(range, piece)` fills `piece`, the elements `range` of the result.
///
/// # Safety
/// `write` must initialise every element of each piece it is given.
pub(crate) unsafe fn build_in_pieces<T: Send>(
    n: usize,
    granule: usize,
    cost_each: f64,
    write: &PieceWriter<'_, T>,
) -> Vec<T> {
    let mut out = unwritten(n);
    let at = Shared(out.spare_capacity_mut().as_mut_ptr());
    // SAFETY: the pieces are disjoint ranges of the n-element spare capacity, which lives
    // until this function returns.
    in_pieces_of(n, granule, cost_each, &|r| write(r.clone(), unsafe { at.piece(r) }));
    // SAFETY: the pieces cover 0..n, and the caller's `write` initialised each.
    unsafe { written(out, n) }
}

/// [f(a[i], b[i])] (the shorter length), over the threads when large.
pub(crate) fn zip_into_par<T: Copy + Send + Sync, F: Elem2<T> + Sync>(
    a: &[T],
    b: &[T],
    f: F,
    cost_each: f64,
) -> Vec<T> {
    let n = a.len().min(b.len());
    // SAFETY: `zip_to` writes every element of a piece of the same length as its operands.
    unsafe { build_in_pieces(n, 1, cost_each, &|r, d| zip_to(&a[r.clone()], &b[r], d, f)) }
}

/// [f(x[i], y repeated `how`)] (len(y) divides len(x)), over the threads when large: pieces of
/// whole repetitions of `y` (`Cycle`) or of whole runs of one of its elements (`Spread`).
pub(crate) fn repeat_into_par<T: Copy + Send + Sync, F: Elem2<T> + Sync>(
    x: &[T],
    y: &[T],
    how: Repeat,
    f: F,
    cost_each: f64,
) -> Vec<T> {
    let Some(pieces) = RepeatPieces::of(x.len(), y, how) else { return Vec::new() };
    let write = |r: std::ops::Range<usize>, d: &mut [MaybeUninit<T>]| {
        let ys = pieces.ys(&r);
        repeat_to(&x[r], ys, how, d, f)
    };
    // SAFETY: each piece is whole repetitions of `y` (or whole runs), so `repeat_to` writes
    // all of it.
    unsafe { build_in_pieces(x.len(), pieces.granule, cost_each, &write) }
}

/// How n elements against a repeated `y` split into pieces for the pool: pieces of whole
/// repetitions of `y` (`Cycle`) or whole runs of one of its elements (`Spread`), and the part
/// of `y` a piece pairs with.
struct RepeatPieces<'a, T> {
    y: &'a [T],
    how: Repeat,
    /// n / len(y): how many elements each element of `y` spreads over.
    run: usize,
    granule: usize,
}

impl<'a, T> RepeatPieces<'a, T> {
    /// None unless len(y) divides n (and y is not empty).
    fn of(n: usize, y: &'a [T], how: Repeat) -> Option<Self> {
        if y.is_empty() || !n.is_multiple_of(y.len()) {
            return None;
        }
        let run = n / y.len();
        let granule = match how {
            Repeat::Cycle => y.len(),
            Repeat::Spread => run,
        };
        Some(RepeatPieces { y, how, run, granule })
    }

    /// The elements of `y` that the piece `r` pairs with.
    fn ys(&self, r: &std::ops::Range<usize>) -> &'a [T] {
        match self.how {
            Repeat::Cycle => self.y,
            Repeat::Spread => &self.y[r.start / self.run..r.end.div_ceil(self.run)],
        }
    }
}

/// Where a reduction reads the elements of its row-major operand: a buffer (`[T]`), or a
/// staged chain computing them on demand (`fused::Computed`, so that `sum (x * y)` never
/// stores `x * y`). The sums below read ranges in one order whatever the source, so a
/// reduction of a chain is the reduction of the chain's stored result, to the bit.
pub(crate) trait Source<T>: Sync {
    /// Elements `r`, borrowed from the source or computed into `scratch`.
    fn read<'s>(&'s self, r: std::ops::Range<usize>, scratch: &'s mut Vec<T>) -> &'s [T];
}

impl<T: Copy + Sync> Source<T> for [T] {
    fn read<'s>(&'s self, r: std::ops::Range<usize>, _: &'s mut Vec<T>) -> &'s [T] {
        &self[r]
    }
}

/// The sums over the middle axis of a row-major [outer, n, inner] array `a`, as a row-major
/// [outer, inner] vector: out[o, c] = 0 + a[o, 0, c] + a[o, 1, c] + … — ndarray's `sum_axis`
/// order for an axis that is not the innermost, so results are the same to the bit (a sign of
/// zero included), but whole rows at a time with vector adds instead of ndarray's per-row
/// iteration; over the threads when large. A gradient's bias and layer-norm parameters are
/// such sums of [batch, features] adjoints.
pub(crate) fn sum_middle<T, S>(a: &S, outer: usize, n: usize, inner: usize, cost_each: f64) -> Vec<T>
where
    T: Copy + Send + Sync + num_traits::Zero,
    S: Source<T> + ?Sized,
{
    let len = outer * inner;
    let write = |r: std::ops::Range<usize>, d: &mut [MaybeUninit<T>]| {
        d.fill(MaybeUninit::new(T::zero()));
        // SAFETY: every element was just written.
        let d = unsafe { &mut *(d as *mut [MaybeUninit<T>] as *mut [T]) };
        let mut scratch = Vec::new();
        // The range crosses blocks of `inner` outputs; each segment sums its own column range.
        let mut at = r.start;
        while at < r.end {
            let (o, c0) = (at / inner, at % inner);
            let c1 = inner.min(c0 + (r.end - at));
            let seg = &mut d[at - r.start..at - r.start + (c1 - c0)];
            // Whole rows are read several at a time (one pass of a chain for a block of them).
            let rows_at_once = if c1 - c0 == inner { (PIECE / inner).max(1) } else { 1 };
            let mut i = 0;
            while i < n {
                let k = rows_at_once.min(n - i);
                let first = (o * n + i) * inner;
                let rows = a.read(first + c0..first + (k - 1) * inner + c1, &mut scratch);
                for j in 0..k {
                    zip_in_place(seg, &rows[j * inner..j * inner + (c1 - c0)], By(|x: T, y: T| x + y));
                }
                i += k;
            }
            at += c1 - c0;
        }
    };
    // SAFETY: `write` fills every element of each piece.
    unsafe { build_in_pieces(len, 1, cost_each * n as f64, &write) }
}

/// ndarray's `sum` of a contiguous lane (its eight-way unrolled order): the one sum of a row
/// that `sum_lanes` computes, stored or not.
fn lane_sum<T: Copy + num_traits::Zero + std::ops::Add<Output = T>>(lane: &[T]) -> T {
    ndarray::ArrayView1::from(lane).sum()
}

/// The sums of `outer` consecutive lanes of `n` elements of `a`, each ndarray's `sum` of a
/// contiguous lane (its eight-way unrolled order, so results are the same to the bit), over
/// the threads when large: layer norm's statistics are such sums over the last axis.
pub(crate) fn sum_lanes<T, S>(a: &S, outer: usize, n: usize, cost_each: f64) -> Vec<T>
where
    T: Copy + Send + Sync + num_traits::Zero + std::ops::Add<Output = T>,
    S: Source<T> + ?Sized,
{
    let write = |r: std::ops::Range<usize>, d: &mut [MaybeUninit<T>]| {
        let mut scratch = Vec::new();
        let lanes_at_once = (PIECE / n.max(1)).max(1);
        let mut o = r.start;
        while o < r.end {
            let k = lanes_at_once.min(r.end - o);
            let lanes = a.read(o * n..(o + k) * n, &mut scratch);
            for j in 0..k {
                d[o - r.start + j].write(lane_sum(&lanes[j * n..(j + 1) * n]));
            }
            o += k;
        }
    };
    // SAFETY: `write` fills every element of each piece.
    unsafe { build_in_pieces(outer, 1, cost_each * n as f64, &write) }
}

/// The sum of `xs` in float64: blocks of `PIECE` elements (over the threads when large), each
/// summed in eight lanes, then the blocks' sums added in order. The blocks do not depend on
/// the number of threads, so neither does the result. Against one float64 fold element by
/// element (what `sum` did before): the same value to ~1e-16 relative, and W5's sum of a
/// 1024 x 1024 float32 tensor in 0.23 ms instead of 0.77 (`DP_JIT_PROFILE`, AVX-512).
pub(crate) fn sum_f64<T: num_traits::ToPrimitive + Copy + Send + Sync>(xs: &[T]) -> f64 {
    sum_f64_of(xs, xs.len())
}

/// `sum_f64` of the `len` elements of a source.
pub(crate) fn sum_f64_of<T, S>(xs: &S, len: usize) -> f64
where
    T: num_traits::ToPrimitive + Copy + Send + Sync,
    S: Source<T> + ?Sized,
{
    let blocks = len.div_ceil(PIECE);
    let write = |r: std::ops::Range<usize>, d: &mut [MaybeUninit<f64>]| {
        let mut scratch = Vec::new();
        for (b, out) in r.zip(d) {
            out.write(sum_lanes_f64(xs.read(b * PIECE..((b + 1) * PIECE).min(len), &mut scratch)));
        }
    };
    // SAFETY: `write` fills every element of each piece.
    let sums = unsafe { build_in_pieces(blocks, 1, PIECE as f64, &write) };
    // From +0 (an empty sum is 0, not `Iterator::sum`'s -0).
    sums.iter().fold(0.0, |s, &x| s + x)
}

widened! {
    fn sum_lanes_f64[T: num_traits::ToPrimitive + Copy](xs: &[T]) -> f64 => sum_lanes_f64_body
}

#[inline(always)]
fn sum_lanes_f64_body<T: num_traits::ToPrimitive + Copy>(xs: &[T]) -> f64 {
    let f = |x: T| x.to_f64().unwrap_or(f64::NAN);
    let mut acc = [0.0f64; 8];
    let chunks = xs.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += f(x);
        }
    }
    let mut s = rest.iter().fold(0.0, |s, &x| s + f(x));
    for a in acc {
        s += a;
    }
    s
}

/// [f(s[i])], over the threads when `s` is large (`in_pieces`).
pub(crate) fn map_into_par<T: Copy + Send + Sync, F: Elem1<T> + Sync>(s: &[T], f: F, cost_each: f64) -> Vec<T> {
    // SAFETY: `map_to` writes every element of a piece as long as its operand.
    unsafe { build_in_pieces(s.len(), 1, cost_each, &|r, d| map_to(&s[r], d, f)) }
}

/// Lanes of the folds: wide enough for the compiler to keep a vector register per few lanes.
pub(crate) const FOLD_LANES: usize = 16;

/// Σ f(a[i], b[i]) over two rows of one length, in FOLD_LANES lanes and then the rest in order
/// (slices, not indices: the loop over a block of FOLD_LANES is one vector operation).
#[inline(always)]
pub(crate) fn fold2<T: crate::Real>(a: &[T], b: &[T], f: impl Fn(T, T) -> T) -> T {
    let mut acc = [T::zero(); FOLD_LANES];
    let (ca, cb) = (a.chunks_exact(FOLD_LANES), b.chunks_exact(FOLD_LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (xs, ys) in ca.zip(cb) {
        for ((s, &x), &y) in acc.iter_mut().zip(xs).zip(ys) {
            *s += f(x, y);
        }
    }
    let mut s = ra.iter().zip(rb).fold(T::zero(), |s, (&x, &y)| s + f(x, y));
    for a in acc {
        s += a;
    }
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        /// A lower set for this thread's loops than the CPU's best (never a higher one).
        pub(crate) static FORCED: Cell<Option<Level>> = const { Cell::new(None) };
    }

    /// A [rows, n] operand and an adjoint for the tests of the row operations (softmax,
    /// normalize), values in [-2, 2.4].
    pub(crate) fn row_operands(rows: usize, n: usize) -> (ndarray::ArrayD<f64>, ndarray::ArrayD<f64>) {
        let shape = ndarray::IxDyn(&[rows, n]);
        let x = ndarray::ArrayD::from_shape_fn(shape.clone(), |i| ((i[0] * 31 + i[1] * 7) % 23) as f64 / 5.0 - 2.0);
        let g = ndarray::ArrayD::from_shape_fn(shape, |i| ((i[0] * 13 + i[1] * 11) % 17) as f64 / 4.0 - 2.0);
        (x, g)
    }

    /// `dx` against central differences of `loss` at x, at the first element, one in the
    /// middle and the last.
    pub(crate) fn agrees_with_differences(
        x: &ndarray::ArrayD<f64>,
        dx: &ndarray::ArrayD<f64>,
        loss: impl Fn(&ndarray::ArrayD<f64>) -> f64,
        what: &str,
    ) {
        let (rows, n) = (x.shape()[0], x.shape()[1]);
        for (r, j) in [(0, 0), (rows / 2, n / 2), (rows - 1, n - 1)] {
            let h = 1e-6;
            let (mut up, mut down) = (x.clone(), x.clone());
            up[[r, j]] += h;
            down[[r, j]] -= h;
            let fd = (loss(&up) - loss(&down)) / (2.0 * h);
            assert!((dx[[r, j]] - fd).abs() < 1e-6 * fd.abs().max(1.0), "{what} ({r}, {j}): {} vs {fd}", dx[[r, j]]);
        }
    }

    #[test]
    fn float64_sums_in_blocks_and_lanes_are_the_fold_to_rounding_and_the_same_on_any_pool() {
        for n in [0, 1, 7, 8, 9, PIECE - 1, PIECE, 3 * PIECE + 5, 100_000] {
            let xs: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1013) as f32 * 0.37 - 150.0).collect();
            let fold = xs.iter().fold(0.0, |s, &x| s + x as f64);
            let got = sum_f64(&xs);
            assert!((got - fold).abs() <= 1e-12 * fold.abs().max(1.0), "{n}: {got} {fold}");
            let par = crate::cpu::gemm::with_forced_parallel(|| sum_f64(&xs));
            assert_eq!(par.to_bits(), got.to_bits(), "{n}");
            for level in at_every_level(|| sum_f64(&xs)) {
                assert!((level - got).abs() <= 1e-12 * got.abs().max(1.0), "{n}");
            }
        }
        assert_eq!(sum_f64::<f32>(&[]).to_bits(), 0.0f64.to_bits());
        assert!(sum_f64(&[1.0f32, f32::NAN]).is_nan());
    }

    /// `f`'s result at every set the CPU has, the baseline first.
    pub(crate) fn at_every_level<R>(f: impl Fn() -> R) -> Vec<R> {
        [Level::Base, Level::Avx2, Level::Avx512]
            .into_iter()
            .map(|l| {
                FORCED.with(|c| c.set(Some(l)));
                let r = f();
                FORCED.with(|c| c.set(None));
                r
            })
            .collect()
    }

    fn data(n: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 7919) % 1000) as f32 / 97.0 - 5.0).collect()
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn every_width_gives_the_same_bits() {
        // Lengths that leave remainders at every vector width.
        for n in [1, 15, 64, 1000, 4099] {
            let x = data(n);
            let y: Vec<f32> = data(n + 3)[3..].to_vec();
            let tanh = |v: f32| crate::cpu::vmath::tanh(v) * 0.5 + crate::cpu::vmath::exp(-v * v);
            let runs = at_every_level(|| {
                let mut a = x.clone();
                map_in_place(&mut a, By(tanh));
                let b = map_into_par(&x, By(|v: f32| v.sqrt().max(0.25)), 0.0);
                let mut c = x.clone();
                zip_in_place(&mut c, &y, By(|p: f32, q: f32| p / q - p * q));
                let d = zip_into_par(&x, &y, By(|p: f32, q: f32| if p > q { p } else { q * 3.0 }), 0.0);
                [bits(&a), bits(&b), bits(&c), bits(&d)]
            });
            assert!(runs.windows(2).all(|w| w[0] == w[1]), "n = {n}");
            let mut want = x.clone();
            want.iter_mut().for_each(|v| *v = tanh(*v));
            assert_eq!(runs[0][0], bits(&want));
        }
    }

    #[test]
    fn pieces_on_the_pool_cover_everything() {
        let x = data(5 * PIECE + 123);
        let f = By(|v: f32| crate::cpu::vmath::tanh(v) - v);
        let want = map_into_par(&x, f, 0.0);
        crate::cpu::gemm::with_forced_parallel(|| {
            assert_eq!(bits(&map_into_par(&x, f, 40.0)), bits(&want));
            let mut y = x.clone();
            map_in_place_par(&mut y, f, 40.0);
            assert_eq!(bits(&y), bits(&want));
        });
        // The in-place binary loops, against the same loops on one thread.
        let (y, short) = (data(x.len() + 5)[5..].to_vec(), data(3 * 41)[..41].to_vec());
        let g = By(|p: f32, q: f32| p * q - q);
        let mut zipped = x.clone();
        zip_in_place(&mut zipped, &y, g);
        let long: Vec<f32> = x[..41 * 1000].to_vec();
        for how in [Repeat::Cycle, Repeat::Spread] {
            let mut want = long.clone();
            repeat_in_place(&mut want, &short, how, g);
            let mut got = long.clone();
            crate::cpu::gemm::with_forced_parallel(|| repeat_in_place_par(&mut got, &short, how, g, 10.0));
            assert_eq!(bits(&got), bits(&want), "{how:?}");
        }
        let mut got = x.clone();
        crate::cpu::gemm::with_forced_parallel(|| zip_in_place_par(&mut got, &y, g, 10.0));
        assert_eq!(bits(&got), bits(&zipped));
    }

    #[test]
    fn middle_sums_are_ndarrays_to_the_bit() {
        use ndarray::{Array3, Axis};
        // Shapes whose output pieces cross blocks of `inner`, on one thread and in pieces.
        for (outer, n, inner) in [(1, 7, 5), (3, 1, 2), (5, 300, 33), (2, 40, PIECE + 17), (4, 0, 3)] {
            let mut x = data(outer * n * inner);
            x.iter_mut().step_by(7).for_each(|v| *v = -0.0);
            let want = Array3::from_shape_vec((outer, n, inner), x.clone()).unwrap().sum_axis(Axis(1));
            let want = bits(want.as_slice().unwrap());
            assert_eq!(bits(&sum_middle(&x[..], outer, n, inner, 0.0)), want, "{outer} {n} {inner}");
            let par = crate::cpu::gemm::with_forced_parallel(|| sum_middle(&x[..], outer, n, inner, 10.0));
            assert_eq!(bits(&par), want, "{outer} {n} {inner} in pieces");
        }
    }

    #[test]
    fn lane_sums_are_ndarrays_to_the_bit() {
        use ndarray::{Array2, Axis};
        for (outer, n) in [(3, 1), (5, 7), (4, 64), (3 * PIECE, 13), (4, 0)] {
            let mut x = data(outer * n);
            x.iter_mut().step_by(5).for_each(|v| *v = -0.0);
            let want = Array2::from_shape_vec((outer, n), x.clone()).unwrap().sum_axis(Axis(1));
            let want = bits(want.as_slice().unwrap());
            assert_eq!(bits(&sum_lanes(&x[..], outer, n, 0.0)), want, "{outer} {n}");
            let par = crate::cpu::gemm::with_forced_parallel(|| sum_lanes(&x[..], outer, n, 10.0));
            assert_eq!(bits(&par), want, "{outer} {n} in pieces");
        }
    }

    #[test]
    fn repeats_pair_the_right_elements() {
        let x: Vec<f32> = (0..12).map(|i| i as f32).collect();
        let y = [100.0, 200.0, 300.0];
        let cycled = repeat_into_par(&x, &y, Repeat::Cycle, By(|p: f32, q: f32| p + q), 0.0);
        assert_eq!(cycled[..4], [100.0, 201.0, 302.0, 103.0]);
        let spread = repeat_into_par(&x, &y, Repeat::Spread, By(|p: f32, q: f32| p + q), 0.0);
        assert_eq!(spread[..5], [100.0, 101.0, 102.0, 103.0, 204.0]);
        let mut d = x.clone();
        repeat_in_place(&mut d, &y, Repeat::Cycle, By(|p: f32, q: f32| p + q));
        assert_eq!(d, cycled);
        let mut d = x.clone();
        repeat_in_place(&mut d, &y, Repeat::Spread, By(|p: f32, q: f32| p + q));
        assert_eq!(d, spread);
        let runs = at_every_level(|| {
            bits(&repeat_into_par(&data(4096), &data(64), Repeat::Cycle, By(|p: f32, q: f32| p * q - q), 0.0))
        });
        assert!(runs.windows(2).all(|w| w[0] == w[1]));
    }

    #[test]
    fn binary_pieces_on_the_pool_agree_with_one_loop() {
        let f = By(|p: f32, q: f32| p * q - q);
        // Pieces of whole repetitions (Cycle: y of 96 and of 3; Spread: runs of 7 and of
        // 3 PIECE + 5, which is longer than a piece) and an odd total.
        let cases = [(96 * 700, 96), (3 * 3001, 3), (7 * 4000, 4000), ((3 * PIECE + 5) * 3, 3)];
        for (n, m) in cases {
            let (x, y) = (data(n), data(m));
            let want_zip: Vec<f32> = x.iter().zip(&data(n)).map(|(&p, &q)| f.call(p, q)).collect();
            let want = |how: Repeat| -> Vec<f32> {
                let run = n / m;
                (0..n).map(|i| f.call(x[i], y[if how == Repeat::Cycle { i % m } else { i / run }])).collect()
            };
            crate::cpu::gemm::with_forced_parallel(|| {
                assert_eq!(bits(&zip_into_par(&x, &data(n), f, 10.0)), bits(&want_zip), "zip n = {n}");
                for how in [Repeat::Cycle, Repeat::Spread] {
                    let got = repeat_into_par(&x, &y, how, f, 10.0);
                    assert_eq!(bits(&got), bits(&want(how)), "{how:?} n = {n}, m = {m}");
                }
            });
        }
    }
}
