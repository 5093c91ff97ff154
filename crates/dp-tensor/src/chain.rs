//! A chain of elementwise operations run as one pass over its operands (a staged program's
//! `tanh (x + y) * z` reads x, y and z once and writes one result, where the operations one
//! by one would write and read back a tensor between each two). This module is the chain as
//! data, the same on every device; `run` hands it to the device's pass: the CPU's blocked
//! loop (`cpu::fused`) or a compute shader generated for the chain (`gpu::fused`).

use crate::op::{Bin, Cmp, TOp, Un};
use crate::ops::Out;
use crate::Tensor;
use std::rc::Rc;

/// One elementwise operation of a chain.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Step {
    /// `+ - * / **` and `mask`, as `ops::binary`.
    Bin(Bin),
    /// A math function, as `ops::unary` (its second operand is not read).
    Un(Un),
    /// `max_of` or `min_of` (`Cmp::pick`).
    Pick(Cmp),
}

impl Step {
    /// How many operands the step reads (a math function's second `Arg` is not read).
    pub fn arity(self) -> usize {
        match self {
            Step::Un(_) => 1,
            Step::Bin(_) | Step::Pick(_) => 2,
        }
    }
}

/// Where a step's operand comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arg {
    /// The chain's k-th operand.
    In(u16),
    /// An earlier step's result.
    At(u16),
}

/// The steps, in order; the last one's result is the chain's.
#[derive(Clone, Debug, PartialEq)]
pub struct Chain {
    steps: Vec<(Step, [Arg; 2])>,
    operands: usize,
}

impl Chain {
    /// A chain of `operands` operands, or None when a step reads an operand or a step that
    /// is not there (or not before it), or `Pick` is not `max_of`/`min_of`.
    pub fn new(steps: Vec<(Step, [Arg; 2])>, operands: usize) -> Option<Chain> {
        let fine = |k: usize, a: Arg| match a {
            Arg::In(i) => (i as usize) < operands,
            Arg::At(j) => (j as usize) < k,
        };
        let valid = !steps.is_empty()
            && steps.len() <= u16::MAX as usize
            && steps.iter().enumerate().all(|(k, (step, args))| {
                args.iter().all(|&a| fine(k, a)) && !matches!(step, Step::Pick(c) if c.gives_bool())
            });
        valid.then_some(Chain { steps, operands })
    }

    pub fn steps(&self) -> &[(Step, [Arg; 2])] {
        &self.steps
    }

    /// How many operands the chain reads.
    pub fn operands(&self) -> usize {
        self.operands
    }
}

/// An operand of a chain: a tensor, or a Float (converted to the tensor's dtype as
/// `ops::binary_scalar` converts it).
#[derive(Clone, Debug)]
pub enum Operand {
    Tensor(Rc<Tensor>),
    Float(f64),
}

/// How a tensor operand of a chain fills the chain's result, element i of which reads:
pub(crate) enum Fill {
    /// element i (the operand has the result's shape);
    Whole,
    /// the operand's one element;
    One,
    /// element i mod len, for an operand of len elements repeated along the leading axes (a
    /// bias);
    Cycle(usize),
    /// element i / run, for an operand each of whose elements spreads over a run of the
    /// trailing axes (a per-row statistic, [n, 1]).
    Spread(usize),
}

/// How a row-major operand of shape `own` fills a result of `shape`, or None for a broadcast
/// of another form (or no broadcast at all): the one classification both devices' passes
/// take their operands by.
pub(crate) fn fill_of(own: &[usize], shape: &[usize]) -> Option<Fill> {
    let len: usize = own.iter().product();
    if own == shape {
        return Some(Fill::Whole);
    }
    if len == 1 && own.len() <= shape.len() {
        return Some(Fill::One);
    }
    if crate::broadcast_shape(own, shape).ok().as_deref() != Some(shape) {
        return None;
    }
    match crate::cpu::layout::repeat_of_shape(own, shape)? {
        crate::cpu::simd::Repeat::Cycle => Some(Fill::Cycle(len)),
        crate::cpu::simd::Repeat::Spread => Some(Fill::Spread(shape.iter().product::<usize>() / len)),
    }
}

/// The chain on its operands as a tensor of `shape`, in one pass on the operands' device,
/// when that device's pass takes them (see `cpu::fused::run` and `gpu::fused::run`); else the
/// operands back, for the caller to compute the steps one by one.
pub fn run(chain: &Chain, shape: &[usize], operands: Vec<Operand>) -> Result<Tensor, Vec<Operand>> {
    let on_gpu = operands.iter().any(|o| matches!(o, Operand::Tensor(t) if t.is_gpu()));
    if on_gpu {
        crate::gpu::fused::run(chain, shape, operands)
    } else {
        crate::cpu::fused::run(chain, shape, operands)
    }
}

/// A reduction that takes a chain's elements as the chain computes them (`run_reduced`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduce {
    /// `sum` (or `mean`) of every element, a Float.
    All { mean: bool },
    /// `sum_axis` (or `mean_axis`) along `axis`; with `keep` the axis stays, of length 1.
    Axis { axis: usize, mean: bool, keep: bool },
}

impl Reduce {
    /// The reduction `op` computes on a tensor of `shape`, when it is one of these: `sum`,
    /// `mean`, `sum_axis`, `mean_axis`, and a `SumTo` (a broadcast's adjoint) that sums one
    /// axis — a leading one it drops (a bias's gradient) or one it keeps as 1.
    pub fn of(op: &TOp, shape: &[usize]) -> Option<Reduce> {
        match op {
            TOp::Sum => Some(Reduce::All { mean: false }),
            TOp::Mean => Some(Reduce::All { mean: true }),
            TOp::SumAxis(a) => Some(Reduce::Axis { axis: *a, mean: false, keep: false }),
            TOp::MeanAxis(a) => Some(Reduce::Axis { axis: *a, mean: true, keep: false }),
            TOp::SumTo(to) if shape.len() == to.len() + 1 && shape[1..] == to[..] => {
                Some(Reduce::Axis { axis: 0, mean: false, keep: false })
            }
            TOp::SumTo(to) if shape.len() == to.len() => {
                let mut differ = (0..to.len()).filter(|&i| shape[i] != to[i]);
                match (differ.next(), differ.next()) {
                    (Some(axis), None) if to[axis] == 1 => Some(Reduce::Axis { axis, mean: false, keep: true }),
                    _ => None,
                }
            }
            _ => None,
        }
        .filter(|r| r.fits(shape))
    }

    /// Whether the reduction applies to a tensor of `shape` (its axis is one of the shape's).
    pub fn fits(self, shape: &[usize]) -> bool {
        match self {
            Reduce::All { .. } => true,
            Reduce::Axis { axis, .. } => axis < shape.len(),
        }
    }
}

/// The chain on its operands, reduced, without the chain's result stored, when the operands'
/// device has such a pass (the CPU: `cpu::fused::run_reduced`); else the operands back, for
/// the caller to run the chain and then the reduction.
pub fn run_reduced(
    chain: &Chain,
    shape: &[usize],
    reduce: Reduce,
    operands: Vec<Operand>,
) -> Result<Out, Vec<Operand>> {
    let on_gpu = operands.iter().any(|o| matches!(o, Operand::Tensor(t) if t.is_gpu()));
    if on_gpu {
        Err(operands)
    } else {
        crate::cpu::fused::run_reduced(chain, shape, reduce, operands)
    }
}
