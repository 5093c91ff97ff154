//! A chain of elementwise operations (`crate::chain`) computed in one pass on the CPU: a staged
//! program's `tanh (x + y) * z` reads x, y and z once and writes one result, where the
//! operations one by one would write and read back a tensor between each two (and allocate
//! it). The chain runs in blocks of a few hundred elements that stay in the L1 cache: each
//! step is one vectorized loop over the block (the same loops, on the same element
//! functions, as the single operations of `elementwise` and `compare`), so every element is
//! the number the operations one by one compute, to the bit.

use super::elementwise::{owned, unary_cost, with_bin, with_un, ARITHMETIC_COST};
use super::simd::{self, By, Shared};
use crate::chain::{fill_of, Arg, Chain, Fill, Operand, Reduce, Step};
use crate::op::{Bin, Un};
use crate::ops::Out;
use crate::{Real, Tensor};
use ndarray::{ArrayD, IxDyn};
use std::mem::MaybeUninit;
use std::rc::Rc;

/// The chain on its operands as a tensor of `shape`, in one pass, when every tensor operand
/// is a row-major CPU tensor of one float dtype with that shape, a single element, or one
/// that repeats in whole blocks to fill it (a bias, a per-row statistic); else the
/// operands back, for the caller to compute the steps one by one. The result is written over
/// an operand's buffer when nothing else holds it.
pub(crate) fn run(chain: &Chain, shape: &[usize], operands: Vec<Operand>) -> Result<Tensor, Vec<Operand>> {
    match tensor_dtype(&operands) {
        _ if operands.len() != chain.operands() || shape.is_empty() => Err(operands),
        Some(crate::DType::F32) => run_real::<f32>(chain, shape, operands),
        Some(crate::DType::F64) => run_real::<f64>(chain, shape, operands),
        _ => Err(operands),
    }
}

/// The dtype of the first tensor among a chain's operands (the passes take one float dtype).
fn tensor_dtype(operands: &[Operand]) -> Option<crate::DType> {
    operands.iter().find_map(|o| match o {
        Operand::Tensor(t) => Some(t.dtype()),
        Operand::Float(_) => None,
    })
}

/// An operand as the loops read it.
#[derive(Clone, Copy)]
enum Leaf<T> {
    /// All n elements, row-major.
    Whole(*const T),
    One(T),
    /// A row-major operand repeated as a whole along the leading axes (a bias): element i of
    /// the result reads element i mod len.
    Cycle(*const T, usize),
    /// A row-major operand each of whose elements spreads over a run of the trailing axes (a
    /// per-row statistic, [n, 1]): element i of the result reads element i / run.
    Spread(*const T, usize),
}

// SAFETY: the pointers are read-only views of buffers that outlive the pass, shared by the
// pool's threads, each of which reads its own pieces.
unsafe impl<T: Send> Send for Leaf<T> {}
unsafe impl<T: Sync> Sync for Leaf<T> {}

/// The operands as the loops read them, when each is a Float or a row-major tensor of dtype
/// T that fills `shape` (see `Fill`).
fn leaves_of<T: Real>(operands: &[Operand], shape: &[usize]) -> Option<Vec<Leaf<T>>> {
    operands
        .iter()
        .map(|o| match o {
            Operand::Float(x) => Some(Leaf::One(T::of_f64(*x))),
            // `as_slice`: a row-major array (the fill is that of its elements in order).
            Operand::Tensor(t) => match T::of(t).and_then(|a| Some((a.as_slice()?, fill_of(a.shape(), shape)?)))? {
                (s, Fill::Whole) => Some(Leaf::Whole(s.as_ptr())),
                (s, Fill::One) => Some(Leaf::One(s[0])),
                (s, Fill::Cycle(len)) => Some(Leaf::Cycle(s.as_ptr(), len)),
                (s, Fill::Spread(run)) => Some(Leaf::Spread(s.as_ptr(), run)),
            },
        })
        .collect()
}

fn run_real<T: Real>(chain: &Chain, shape: &[usize], mut operands: Vec<Operand>) -> Result<Tensor, Vec<Operand>> {
    let n: usize = shape.iter().product();
    let Some(leaves) = leaves_of::<T>(&operands, shape) else { return Err(operands) };
    if n == 0 {
        return Ok(Tensor::from_real(ArrayD::<T>::zeros(IxDyn(shape))));
    }
    // An operand of the result's shape (a `Whole` leaf) that only this pass holds takes the
    // result: each block is read whole before its result is written back (`pass`).
    let reusable = (0..operands.len()).find(|&k| {
        matches!(leaves[k], Leaf::Whole(_)) && matches!(&operands[k], Operand::Tensor(t) if Rc::strong_count(t) == 1)
    });
    let cost = cost_each(chain);
    let out = match reusable {
        Some(k) => {
            let Operand::Tensor(t) = std::mem::replace(&mut operands[k], Operand::Float(0.0)) else {
                return Err(operands);
            };
            let mut a = match owned::<T>(t) {
                Ok(a) => a,
                Err(t) => {
                    operands[k] = Operand::Tensor(t);
                    return Err(operands);
                }
            };
            let Some(s) = a.as_slice_mut() else {
                // (Not reached: a `Whole` leaf is row-major.) The operand goes back as it was.
                operands[k] = Operand::Tensor(Rc::new(Tensor::from_real(a)));
                return Err(operands);
            };
            let at = Shared(s.as_mut_ptr() as *mut MaybeUninit<T>);
            // SAFETY: the pieces are disjoint ranges of `s`'s n elements; the leaves that read
            // `s` read a block before `pass` writes it.
            simd::in_pieces(n, cost, &|r| unsafe { pass(chain, &leaves, r.clone(), at.piece(r), true) });
            a
        }
        None => {
            let write = |r: std::ops::Range<usize>, d: &mut [MaybeUninit<T>]| {
                // SAFETY: the leaves are n-element buffers (or single elements) that outlive
                // the pass, and none is `d`.
                unsafe { pass(chain, &leaves, r, d, false) }
            };
            // SAFETY: `pass` writes every element of its piece.
            let v = unsafe { simd::build_in_pieces(n, 1, cost, &write) };
            match ArrayD::from_shape_vec(IxDyn(shape), v) {
                Ok(a) => a,
                Err(_) => return Err(operands),
            }
        }
    };
    Ok(Tensor { storage: T::storage(out) })
}

/// The chain's elements read by a reduction as it goes (`simd::Source`): each range is
/// computed by `pass` into the reduction's scratch, never stored whole.
struct Computed<'a, T> {
    chain: &'a Chain,
    leaves: &'a [Leaf<T>],
    /// The chain's elements (every read lies inside them).
    n: usize,
}

impl<T: Real> simd::Source<T> for Computed<'_, T> {
    fn read<'s>(&'s self, r: std::ops::Range<usize>, scratch: &'s mut Vec<T>) -> &'s [T] {
        let len = r.len();
        debug_assert!(r.end <= self.n, "a reduction read past its chain");
        scratch.clear();
        scratch.reserve(len);
        // SAFETY: the leaves fill the chain's n elements (`leaves_of` against its shape) and
        // outlive the reduction; `pass` writes all `len` elements of the spare capacity before
        // the length is set, and reads none of it.
        unsafe {
            pass(self.chain, self.leaves, r, &mut scratch.spare_capacity_mut()[..len], false);
            scratch.set_len(len);
        }
        scratch
    }
}

/// The chain on its operands reduced by `reduce`, in one pass, without its result stored:
/// the sums read the chain's elements block by block in the order in which they read a
/// stored tensor (`simd::Source`), so the result is the reduction's of the chain's result to
/// the bit. Takes the operands `run` takes; else gives them back.
pub(crate) fn run_reduced(
    chain: &Chain,
    shape: &[usize],
    reduce: Reduce,
    operands: Vec<Operand>,
) -> Result<Out, Vec<Operand>> {
    let n: usize = shape.iter().product();
    match tensor_dtype(&operands) {
        _ if operands.len() != chain.operands() || n == 0 || !reduce.fits(shape) => Err(operands),
        Some(crate::DType::F32) => reduced_real::<f32>(chain, shape, reduce, operands),
        Some(crate::DType::F64) => reduced_real::<f64>(chain, shape, reduce, operands),
        _ => Err(operands),
    }
}

fn reduced_real<T: Real>(
    chain: &Chain,
    shape: &[usize],
    reduce: Reduce,
    operands: Vec<Operand>,
) -> Result<Out, Vec<Operand>> {
    let Some(leaves) = leaves_of::<T>(&operands, shape) else { return Err(operands) };
    let n: usize = shape.iter().product();
    let source = Computed { chain, leaves: &leaves, n };
    // Each element costs its chain and an add (the sums' own cost is ARITHMETIC_COST).
    let cost = cost_each(chain) + ARITHMETIC_COST;
    Ok(match reduce {
        Reduce::All { mean } => {
            let s = simd::sum_f64_of(&source, n);
            Out::Float(if mean { s / n as f64 } else { s })
        }
        Reduce::Axis { axis, mean, keep } => {
            let mut sums = super::sums_over(&source, shape, axis, cost);
            if mean {
                super::into_means(&mut sums, shape[axis]);
            }
            let mut dims = shape.to_vec();
            if keep {
                dims[axis] = 1;
            } else {
                dims.remove(axis);
            }
            match ArrayD::from_shape_vec(IxDyn(&dims), sums) {
                Ok(a) => Out::Tensor(Tensor::from_real(a)),
                Err(_) => return Err(operands),
            }
        }
    })
}

/// The work of one element, in the pool's units (`elementwise::ARITHMETIC_COST`).
fn cost_each(chain: &Chain) -> f64 {
    chain
        .steps()
        .iter()
        .map(|(s, _)| match s {
            Step::Un(u) => unary_cost(*u),
            _ => ARITHMETIC_COST,
        })
        .sum()
}

/// The elements of one block the loops work on at a time: a step's results for a block, at
/// float64, are 2 KB, so a chain's steps stay in the L1 cache together.
const BLOCK: usize = 256;

/// Operands of a chain whose slots `pass` keeps on the stack (a staged chain has at most 33).
const MOST_LEAVES: usize = 64;

thread_local! {
    /// `pass`'s blocks of step results and repeated operands, kept per thread: a staged
    /// program runs its chains over and over, many of them on a few hundred elements, where
    /// allocating and zeroing the blocks on every call was a measurable part of the pass.
    static BLOCKS: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Computes the chain for the elements `r`, into `out` (r's length).
///
/// # Safety
/// Every `Whole` leaf points at a buffer holding at least `r.end` elements, and every `Cycle`
/// and `Spread` leaf at an operand that repeats to at least `r.end`; `out` may be one of the
/// `Whole` buffers' range `r` when `reads_out` (the last step's block is then written there
/// after the steps have read it; otherwise the last step writes `out` itself).
unsafe fn pass<T: Real>(
    chain: &Chain,
    leaves: &[Leaf<T>],
    r: std::ops::Range<usize>,
    out: &mut [MaybeUninit<T>],
    reads_out: bool,
) {
    // Where each repeated operand's block is kept (`slot[i]`), on the stack for a staged chain.
    let (mut on_stack, mut on_heap) = ([usize::MAX; MOST_LEAVES], Vec::new());
    let slot: &mut [usize] = if leaves.len() <= MOST_LEAVES {
        &mut on_stack[..leaves.len()]
    } else {
        on_heap.resize(leaves.len(), usize::MAX);
        &mut on_heap
    };
    let mut repeated = 0;
    for (i, leaf) in leaves.iter().enumerate() {
        if matches!(leaf, Leaf::Cycle(..) | Leaf::Spread(..)) {
            slot[i] = repeated;
            repeated += 1;
        }
    }
    const { assert!(std::mem::align_of::<T>() <= 8) };
    let width = BLOCK.min(r.len());
    let len = (chain.steps().len() + repeated) * width;
    BLOCKS.with(|cell| match cell.try_borrow_mut() {
        Ok(mut v) => {
            // Elements of T in u64 words (T is f32 or f64: any bits are a value).
            let words = (len * std::mem::size_of::<T>()).div_ceil(8);
            if v.len() < words {
                v.resize(words, 0);
            }
            // SAFETY: the words hold at least len elements of T, suitably aligned (T's
            // alignment is at most 8); every bit pattern is a float.
            let blocks = unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<T>(), len) };
            // SAFETY: the caller's contract.
            unsafe { run_blocks(chain, leaves, r, out, reads_out, slot, blocks) }
        }
        // Only if a pass re-entered itself on this thread; a private buffer keeps that correct.
        // SAFETY: the caller's contract.
        Err(_) => unsafe { run_blocks(chain, leaves, r, out, reads_out, slot, &mut vec![T::zero(); len]) },
    })
}

/// `pass` with `blocks` holding the step results' blocks, then the repeated operands'.
///
/// # Safety
/// As `pass`.
unsafe fn run_blocks<T: Real>(
    chain: &Chain,
    leaves: &[Leaf<T>],
    r: std::ops::Range<usize>,
    out: &mut [MaybeUninit<T>],
    reads_out: bool,
    slot: &[usize],
    blocks: &mut [T],
) {
    let steps = chain.steps().len();
    // Each step's block of results (no wider than the range: a chain on a 100-element vector).
    let width = BLOCK.min(r.len());
    let (regs, spread) = blocks.split_at_mut(steps * width);
    let mut lo = r.start;
    while lo < r.end {
        let b = width.min(r.end - lo);
        for (i, leaf) in leaves.iter().enumerate() {
            let block = match slot[i] {
                usize::MAX => continue,
                k => &mut spread[k * width..k * width + b],
            };
            // SAFETY: the caller's contract: each repeated operand holds len (or n / run)
            // elements, and i mod len (or i / run) indexes them for every i < n.
            unsafe { fill_repeated(*leaf, lo, block) };
        }
        let at = lo - r.start;
        for (k, (step, args)) in chain.steps().iter().enumerate() {
            let (done, rest) = regs.split_at_mut(k * width);
            let src = |a: Arg| match a {
                Arg::In(i) => match leaves[i as usize] {
                    // SAFETY: the caller's contract: the buffer holds elements lo..lo + b.
                    Leaf::Whole(p) => Src::Slice(unsafe { std::slice::from_raw_parts(p.add(lo), b) }),
                    Leaf::One(x) => Src::One(x),
                    Leaf::Cycle(..) | Leaf::Spread(..) => {
                        let k = slot[i as usize];
                        Src::Slice(&spread[k * width..k * width + b])
                    }
                },
                Arg::At(j) => Src::Slice(&done[j as usize * width..j as usize * width + b]),
            };
            let dst = if k + 1 == steps && !reads_out {
                &mut out[at..at + b]
            } else {
                // SAFETY: initialised elements, and the loops write only initialised values.
                unsafe { &mut *(&mut rest[..b] as *mut [T] as *mut [MaybeUninit<T>]) }
            };
            apply(*step, src(args[0]), src(args[1]), dst);
        }
        if reads_out {
            let last = &regs[(steps - 1) * width..(steps - 1) * width + b];
            for (o, &x) in out[at..at + b].iter_mut().zip(last) {
                o.write(x);
            }
        }
        lo += b;
    }
}

/// The elements lo, lo + 1, … of a repeated operand broadcast to the result, into `block`.
///
/// # Safety
/// A `Cycle` leaf points at `len` elements; a `Spread` leaf at enough for every
/// (lo + j) / run, j < block's length.
#[inline]
unsafe fn fill_repeated<T: Copy>(leaf: Leaf<T>, lo: usize, block: &mut [T]) {
    match leaf {
        Leaf::Cycle(p, len) => {
            // SAFETY: the caller's contract.
            let y = unsafe { std::slice::from_raw_parts(p, len) };
            let (mut at, mut j) = (lo % len, 0);
            while j < block.len() {
                let take = (len - at).min(block.len() - j);
                block[j..j + take].copy_from_slice(&y[at..at + take]);
                (at, j) = (0, j + take);
            }
        }
        Leaf::Spread(p, run) => {
            let mut j = 0;
            while j < block.len() {
                let e = (lo + j) / run;
                let take = ((e + 1) * run - (lo + j)).min(block.len() - j);
                // SAFETY: the caller's contract.
                block[j..j + take].fill(unsafe { *p.add(e) });
                j += take;
            }
        }
        Leaf::Whole(_) | Leaf::One(_) => {}
    }
}

/// A step's operand over one block.
#[derive(Clone, Copy)]
enum Src<'a, T> {
    Slice(&'a [T]),
    One(T),
}

/// `step` on one block, into `out`. A step whose operands are single elements fills the block
/// with its one value (the operations one by one would broadcast that value later).
#[inline]
fn apply<T: Real>(step: Step, x: Src<T>, y: Src<T>, out: &mut [MaybeUninit<T>]) {
    match step {
        Step::Un(u) => match x {
            Src::Slice(s) => with_un!(u, F, simd::map_to(s, out, F)),
            Src::One(v) => out.iter_mut().for_each(|o| {
                o.write(T::un(u, v));
            }),
        },
        Step::Bin(op) => with_bin!(op, T, f, binary(x, y, out, f)),
        Step::Pick(c) => binary(x, y, out, move |p: T, q: T| c.pick(p, q)),
    }
}

#[inline(always)]
fn binary<T: Real>(x: Src<T>, y: Src<T>, d: &mut [MaybeUninit<T>], f: impl Fn(T, T) -> T + Copy) {
    match (x, y) {
        (Src::Slice(a), Src::Slice(b)) => simd::zip_to(a, b, d, By(f)),
        (Src::Slice(a), Src::One(s)) => simd::map_to(a, d, By(move |v| f(v, s))),
        (Src::One(s), Src::Slice(b)) => simd::map_to(b, d, By(move |v| f(s, v))),
        (Src::One(s), Src::One(t)) => d.iter_mut().for_each(|o| {
            o.write(f(s, t));
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::Cmp;
    use crate::ops::{self, Out};
    use crate::{DType, Storage, TOp};

    fn bits(t: &Tensor) -> Vec<u64> {
        t.to_f64s().unwrap().iter().map(|x| x.to_bits()).collect()
    }

    fn tensor(out: Out) -> Rc<Tensor> {
        match out {
            Out::Tensor(t) => Rc::new(t),
            Out::Float(x) => panic!("expected a tensor, got the Float {x}"),
        }
    }

    /// tanh (x + y) * 0.5 - max_of x c, against the operations one by one, in both float
    /// dtypes, on one element, on more than one block and on more than one piece of the pool,
    /// with NaN and -0 among the elements; and the same with x's buffer taking the result.
    #[test]
    fn a_chain_is_the_operations_one_by_one_to_the_bit() {
        use Arg::{At, In};
        let chain = Chain::new(
            vec![
                (Step::Bin(Bin::Add), [In(0), In(1)]),
                (Step::Un(Un::Tanh), [At(0), At(0)]),
                (Step::Bin(Bin::Mul), [At(1), In(2)]),
                (Step::Pick(Cmp::Max), [In(0), In(3)]),
                (Step::Bin(Bin::Sub), [At(2), At(3)]),
            ],
            4,
        )
        .unwrap();
        for n in [1, 7, BLOCK + 3, 3 * 8192 + 5] {
            let shape = [n];
            let mut xs: Vec<f64> = (0..n).map(|i| ((i * 37 % 101) as f64 - 50.0) / 7.0).collect();
            xs[0] = -0.0;
            if n > 2 {
                xs[2] = f64::NAN;
            }
            let ys: Vec<f64> = (0..n).map(|i| ((i * 53 % 89) as f64 - 44.0) / 9.0).collect();
            for dtype in [DType::F64, DType::F32] {
                let t =
                    |s: &[usize], v: &[f64]| Rc::new(Tensor::from_f64s(s, v.to_vec()).unwrap().astype(dtype).unwrap());
                let (x, y, c) = (t(&shape, &xs), t(&shape, &ys), t(&[], &[0.25]));
                let by_one = {
                    let s = Rc::new(ops::binary(Bin::Add, x.clone(), y.clone()).unwrap());
                    let s = Rc::new(crate::cpu::elementwise::unary(Un::Tanh, s).unwrap());
                    let s = Rc::new(ops::binary_scalar(Bin::Mul, s, 0.5, false).unwrap());
                    let m = tensor(ops::forward(&TOp::Cmp(Cmp::Max), &[&x, &c]).unwrap());
                    ops::binary(Bin::Sub, s, m).unwrap()
                };
                let operands = |x: Rc<Tensor>| {
                    vec![
                        Operand::Tensor(x),
                        Operand::Tensor(y.clone()),
                        Operand::Float(0.5),
                        Operand::Tensor(c.clone()),
                    ]
                };
                let fused = run(&chain, &shape, operands(x.clone()))
                    .unwrap_or_else(|_| panic!("the one-pass loop did not take the operands"));
                assert_eq!(fused.dtype(), dtype);
                assert_eq!(bits(&fused), bits(&by_one), "n = {n}, {dtype:?}");
                // x held only by the chain: its buffer becomes the result.
                let own = Rc::new((*x).clone());
                let at = T::as_ptr(&own);
                let fused = run(&chain, &shape, operands(own))
                    .unwrap_or_else(|_| panic!("the one-pass loop did not take the operands"));
                assert_eq!(T::as_ptr(&fused), at, "the result in x's buffer");
                assert_eq!(bits(&fused), bits(&by_one), "n = {n}, {dtype:?}, in place");
            }
        }
    }

    /// Layer norm's tail, (x - mu) / sd * gamma + beta with mu, sd of shape [rows, 1] (each
    /// spread over a row) and gamma, beta of shape [cols] (repeated for every row), against
    /// the operations one by one: on one block, across blocks whose edges fall inside rows, and
    /// over more than one piece of the pool.
    #[test]
    fn repeated_operands_are_the_broadcasts_to_the_bit() {
        use Arg::{At, In};
        let chain = Chain::new(
            vec![
                (Step::Bin(Bin::Sub), [In(0), In(1)]),
                (Step::Bin(Bin::Div), [At(0), In(2)]),
                (Step::Bin(Bin::Mul), [At(1), In(3)]),
                (Step::Bin(Bin::Add), [At(2), In(4)]),
            ],
            5,
        )
        .unwrap();
        for (rows, cols) in [(3, 5), (7, 100), (300, 67)] {
            let t = |s: &[usize], seed: usize| {
                let n: usize = s.iter().product();
                let v = (0..n).map(|i| (((i + seed) * 37 % 101) as f64 - 50.0) / 17.0).collect();
                Rc::new(Tensor::from_f64s(s, v).unwrap().astype(DType::F32).unwrap())
            };
            let (x, mu, sd) = (t(&[rows, cols], 0), t(&[rows, 1], 3), t(&[rows, 1], 5));
            let (gamma, beta) = (t(&[cols], 7), t(&[cols], 11));
            let by_one = {
                let s = Rc::new(ops::binary(Bin::Sub, x.clone(), mu.clone()).unwrap());
                let s = Rc::new(ops::binary(Bin::Div, s, sd.clone()).unwrap());
                let s = Rc::new(ops::binary(Bin::Mul, s, gamma.clone()).unwrap());
                ops::binary(Bin::Add, s, beta.clone()).unwrap()
            };
            let operands = [x, mu, sd, gamma, beta].into_iter().map(Operand::Tensor).collect();
            let fused = run(&chain, &[rows, cols], operands)
                .unwrap_or_else(|_| panic!("the one-pass loop did not take the operands"));
            assert_eq!(bits(&fused), bits(&by_one), "{rows} x {cols}");
        }
    }

    /// The address of a tensor's elements.
    struct T;
    impl T {
        fn as_ptr(t: &Tensor) -> usize {
            match &t.storage {
                Storage::F32(a) => a.as_ptr() as usize,
                Storage::F64(a) => a.as_ptr() as usize,
                _ => 0,
            }
        }
    }

    #[test]
    fn operands_it_cannot_take_come_back() {
        let chain = Chain::new(vec![(Step::Bin(Bin::Add), [Arg::In(0), Arg::In(1)])], 2).unwrap();
        let x = Rc::new(Tensor::from_vec(&[2, 3], vec![1.0; 6]).unwrap());
        // A broadcast that is not whole blocks ([2, 1] against [2, 3] is; [3, 1] against
        // [3, 2, 3] is not), another dtype, int64.
        let x3 = Rc::new(Tensor::from_vec(&[3, 2, 3], vec![1.0; 18]).unwrap());
        let y3 = Rc::new(Tensor::from_vec(&[3, 1, 1], vec![1.0; 3]).unwrap());
        assert!(run(&chain, &[3, 2, 3], vec![Operand::Tensor(x3.clone()), Operand::Tensor(y3)]).is_ok());
        let y31 = Rc::new(Tensor::from_vec(&[3, 1], vec![1.0; 3]).unwrap());
        assert!(run(&chain, &[3, 2, 3], vec![Operand::Tensor(x3), Operand::Tensor(y31)]).is_err());
        let z = Rc::new(x.astype(DType::F64).unwrap());
        assert!(run(&chain, &[2, 3], vec![Operand::Tensor(x.clone()), Operand::Tensor(z)]).is_err());
        let i = Rc::new(x.astype(DType::I64).unwrap());
        assert!(run(&chain, &[2, 3], vec![Operand::Tensor(i), Operand::Float(1.0)]).is_err());
        assert!(Chain::new(vec![(Step::Bin(Bin::Add), [Arg::In(0), Arg::At(0)])], 1).is_none());
        assert!(Chain::new(vec![(Step::Pick(Cmp::Less), [Arg::In(0), Arg::In(0)])], 1).is_none());
    }

    /// A chain reduced as it goes (`run_reduced`) is the reduction of the chain's stored
    /// result to the bit: `sum`, `mean`, `sum_axis`/`mean_axis` over a leading, middle and
    /// last axis, and the one-axis `SumTo`s, in both float dtypes, with a broadcast operand,
    /// NaN and -0 among the elements, on one thread and over the pool's pieces.
    #[test]
    fn a_reduced_chain_is_the_reduction_of_the_chains_result_to_the_bit() {
        use Arg::{At, In};
        // (x - b) * (x - b) * 0.5, b repeated along the leading axes.
        let chain = Chain::new(
            vec![
                (Step::Bin(Bin::Sub), [In(0), In(1)]),
                (Step::Bin(Bin::Mul), [At(0), At(0)]),
                (Step::Bin(Bin::Mul), [At(1), In(2)]),
            ],
            3,
        )
        .unwrap();
        for shape in [
            vec![5],
            vec![3 * 8192 + 9],
            vec![3, 7],
            vec![4, 3, 5],
            vec![2, 3 * 8192 + 5],
            vec![3 * 8192 + 7, 3],
            vec![40, 900],
        ] {
            let n: usize = shape.iter().product();
            let last = *shape.last().unwrap();
            let mut xs: Vec<f64> = (0..n).map(|i| ((i * 37 % 101) as f64 - 50.0) / 7.0).collect();
            xs[0] = -0.0;
            if shape.len() > 1 {
                // (A NaN makes the whole sum NaN: the one-axis shape keeps `sum` a number.)
                xs[n / 2] = f64::NAN;
            }
            let bs: Vec<f64> = (0..last).map(|i| i as f64 / 3.0 - 1.0).collect();
            let mut reductions = vec![TOp::Sum, TOp::Mean];
            for axis in 0..shape.len() {
                reductions.extend([TOp::SumAxis(axis), TOp::MeanAxis(axis)]);
                let mut kept = shape.clone();
                kept[axis] = 1;
                reductions.push(TOp::SumTo(kept));
            }
            reductions.push(TOp::SumTo(shape[1..].to_vec()));
            for dtype in [DType::F64, DType::F32] {
                let t =
                    |s: &[usize], v: &[f64]| Rc::new(Tensor::from_f64s(s, v.to_vec()).unwrap().astype(dtype).unwrap());
                let (x, b) = (t(&shape, &xs), t(&[last], &bs));
                let operands = || vec![Operand::Tensor(x.clone()), Operand::Tensor(b.clone()), Operand::Float(0.5)];
                let Ok(stored) = run(&chain, &shape, operands()) else { panic!("the chain did not run") };
                for op in &reductions {
                    let Some(reduce) = Reduce::of(op, &shape) else {
                        // A SumTo of a one-element axis sums nothing: not a reduction here.
                        assert!(matches!(op, TOp::SumTo(_)), "{op:?} of {shape:?}");
                        continue;
                    };
                    let want = ops::forward(op, &[&stored]).unwrap();
                    for parallel in [false, true] {
                        let go = || run_reduced(&chain, &shape, reduce, operands());
                        let got = if parallel { crate::cpu::gemm::with_forced_parallel(go) } else { go() };
                        let what = format!("{op:?} of {shape:?}, {dtype:?}, parallel {parallel}");
                        match (got, &want) {
                            (Ok(Out::Float(g)), Out::Float(w)) => assert_eq!(g.to_bits(), w.to_bits(), "{what}"),
                            (Ok(Out::Tensor(g)), Out::Tensor(w)) => {
                                assert_eq!(g.shape(), w.shape(), "{what}");
                                assert_eq!(g.dtype(), dtype, "{what}");
                                assert_eq!(bits(&g), bits(w), "{what}");
                            }
                            _ => panic!("{what}: not the reduction's kind of result"),
                        }
                    }
                }
            }
        }
    }
}
