//! Elementwise chains: elementwise operations on tensors of one float dtype and shape, each
//! intermediate read only by the next, become one node (`Op::Chain`) that the executor
//! computes in one pass over its operands (`cpu::fused`), with no tensor written and read back
//! between two of them. An optimiser's update `p - lr * g / sqrt (m + 1e-8)` is one loop
//! instead of four; the reverse rule of `tanh`, `(1 - y * y) * g`, one instead of three.
//!
//! The chains are trees: an intermediate with a second reader (or that is an output) is
//! computed once, as a chain's result of its own, and read from memory by both. Every step
//! has the chain's shape; the operands may also be Floats, single elements (`clip`'s bounds)
//! and tensors that broadcast to it (a bias, layer norm's per-row statistics). Each step is
//! the operation the node computed, on the same element function, so a chain's result is the
//! nodes' to the bit.

use super::fuse::readers;
use super::ir::{Args, Chained, Kind, Node, Op, Program};
use crate::runtime::tensor::bin_of;
use crate::tensor::chain::{Arg, Chain, Step};
use crate::tensor::{broadcast_shape, Cmp, DType, TOp};
use std::rc::Rc;

/// The chain step a node's operation is, when it is elementwise.
fn step_of(op: &Op) -> Option<Step> {
    match op {
        Op::Bin(p) => bin_of(*p).map(Step::Bin),
        Op::Un(u) => Some(Step::Un(*u)),
        Op::T(t) => match **t {
            TOp::Cmp(c @ (Cmp::Max | Cmp::Min)) => Some(Step::Pick(c)),
            _ => None,
        },
        _ => None,
    }
}

/// The operation a chain step is (the executor's fallback computes the steps one by one).
pub fn op_of(step: Step) -> Op {
    use crate::core::Prim;
    use crate::tensor::Bin;
    match step {
        Step::Bin(b) => Op::Bin(match b {
            Bin::Add => Prim::Add,
            Bin::Sub => Prim::Sub,
            Bin::Mul => Prim::Mul,
            Bin::Div => Prim::Div,
            Bin::Pow => Prim::Pow,
            // (`step_of` makes no `Mask` step; the tensor op is the same operation.)
            Bin::Mask => return Op::T(Box::new(TOp::Mask)),
        }),
        Step::Un(u) => Op::Un(u),
        Step::Pick(c) => Op::T(Box::new(TOp::Cmp(c))),
    }
}

/// Whether node i can be a step of a chain: an elementwise operation whose result is a float
/// tensor (of at least one axis) and whose operands are Floats or tensors of its dtype (of its
/// shape, or broadcast to it: the loop takes single elements and operands that repeat in whole
/// blocks, and hands any other broadcast back to be computed step by step).
fn chainable(p: &Program, i: usize) -> bool {
    let (Node::Apply(op, args), Kind::Tensor(dtype @ (DType::F32 | DType::F64), shape)) = (&p.nodes[i], &p.kinds[i])
    else {
        return false;
    };
    step_of(op).is_some_and(|step| args.len() == step.arity())
        && !shape.is_empty()
        && args.iter().all(|&a| match &p.kinds[a as usize] {
            Kind::Float => true,
            Kind::Tensor(d, s) => d == dtype && broadcast_shape(s, shape).is_ok_and(|b| b == **shape),
        })
}

/// The most steps in one chain: a pass keeps a block of each step's results (`cpu::fused`),
/// and a long sum of tensors (a trace's `acc + x` a thousand times) would otherwise be one
/// chain of a thousand blocks.
const MOST_STEPS: usize = 32;

pub fn chains(mut p: Program) -> Program {
    let n = p.nodes.len();
    let uses = readers(&p);
    let steps: Vec<bool> = (0..n).map(|i| chainable(&p, i)).collect();
    // Node a goes into its one reader's chain when both are steps of one kind, while the
    // chain stays within MOST_STEPS (`size`: the steps of the chain ending at each node).
    let mut inside = vec![false; n];
    let mut size = vec![0usize; n];
    for i in 0..n {
        if let (true, Node::Apply(_, args)) = (steps[i], &p.nodes[i]) {
            size[i] = 1;
            for &a in args {
                let a = a as usize;
                if steps[a] && uses[a] == 1 && p.kinds[a] == p.kinds[i] && size[i] + size[a] <= MOST_STEPS {
                    inside[a] = true;
                    size[i] += size[a];
                }
            }
        }
    }
    let mut changed = false;
    for root in 0..n {
        if !steps[root] || inside[root] {
            continue;
        }
        let mut b = Builder { p: &p, inside: &inside, steps: Vec::new(), operands: Vec::new() };
        b.visit(root);
        if b.steps.len() < 2 {
            continue;
        }
        let Builder { steps, operands, .. } = b;
        let (Some(chain), Kind::Tensor(_, shape)) = (Chain::new(steps, operands.len()), &p.kinds[root]) else {
            continue;
        };
        let op = Op::Chain(Rc::new(Chained { chain, shape: shape.to_vec(), reduce: None }));
        p.nodes[root] = Node::Apply(op, Args::from(operands));
        changed = true;
    }
    changed |= into_reductions(&mut p, &uses, &steps, &inside);
    // The steps now inside chains are read by nobody.
    if changed {
        super::opt::dead_code(&mut p);
    }
    p
}

/// A reduction (`sum`, `mean`, `sum_axis`, `mean_axis`, a one-axis `SumTo`: `Reduce::of`)
/// whose operand is a chain, or a single elementwise step, read by it alone takes that chain
/// in: the node becomes the chain reduced as it goes, and the chain's elements are never
/// stored (layer norm's `mean_axis ((x - μ)²)`, a bias's gradient `SumTo (g * mask)`, a loss's
/// `sum (p * y)`). Returns whether any did.
fn into_reductions(p: &mut Program, uses: &[u32], steps: &[bool], inside: &[bool]) -> bool {
    let mut changed = false;
    for r in 0..p.nodes.len() {
        let Node::Apply(Op::T(t), args) = &p.nodes[r] else { continue };
        let &[a] = &args[..] else { continue };
        let a = a as usize;
        let Kind::Tensor(DType::F32 | DType::F64, shape) = &p.kinds[a] else { continue };
        if crate::tensor::chain::Reduce::of(t, shape).is_none() || uses[a] != 1 || shape.iter().product::<usize>() == 0
        {
            continue;
        }
        let (chain, operands) = match &p.nodes[a] {
            Node::Apply(Op::Chain(c), operands) if c.reduce.is_none() => (c.chain.clone(), operands.clone()),
            _ if steps[a] && !inside[a] => {
                let mut b = Builder { p, inside, steps: Vec::new(), operands: Vec::new() };
                b.visit(a);
                let Builder { steps, operands, .. } = b;
                let Some(chain) = Chain::new(steps, operands.len()) else { continue };
                (chain, Args::from(operands))
            }
            _ => continue,
        };
        let reduced = Chained { chain, shape: shape.to_vec(), reduce: Some((**t).clone()) };
        p.nodes[r] = Node::Apply(Op::Chain(Rc::new(reduced)), operands);
        changed = true;
    }
    changed
}

/// A chain's steps in the order they are computed (operands before the step that reads them),
/// and its operands.
struct Builder<'a> {
    p: &'a Program,
    inside: &'a [bool],
    steps: Vec<(Step, [Arg; 2])>,
    operands: Vec<u32>,
}

impl Builder<'_> {
    /// Adds node i's steps, and returns where its value is.
    fn visit(&mut self, i: usize) -> Arg {
        let Node::Apply(op, args) = &self.p.nodes[i] else { return self.operand(i as u32) };
        let Some(step) = step_of(op) else { return self.operand(i as u32) };
        let mut at = [Arg::In(0); 2];
        for (k, &a) in args.iter().enumerate() {
            at[k] = if self.inside[a as usize] { self.visit(a as usize) } else { self.operand(a) };
        }
        if args.len() == 1 {
            at[1] = at[0];
        }
        self.steps.push((step, at));
        // At most MOST_STEPS steps.
        Arg::At((self.steps.len() - 1) as u16)
    }

    /// Node a as an operand of the chain (each node once: `x * x` reads one operand twice).
    /// A reshape of a single element is read through (the loop reads one element alike
    /// whatever its shape), so the reshape need not run.
    fn operand(&mut self, a: u32) -> Arg {
        let a = self.through_unit_reshape(a);
        let k = self.operands.iter().position(|&o| o == a).unwrap_or_else(|| {
            self.operands.push(a);
            self.operands.len() - 1
        });
        // At most MOST_STEPS + 1 operands.
        Arg::In(k as u16)
    }

    fn through_unit_reshape(&self, a: u32) -> u32 {
        let single =
            |i: u32| matches!(&self.p.kinds[i as usize], Kind::Tensor(_, s) if s.iter().product::<usize>() == 1);
        match &self.p.nodes[a as usize] {
            Node::Apply(Op::T(t), x) if matches!(**t, TOp::Reshape(_)) && x.len() == 1 && single(a) && single(x[0]) => {
                x[0]
            }
            _ => a,
        }
    }
}
