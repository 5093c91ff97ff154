//! Loops recovered from a traced program (issue 17's "native loops").
//!
//! Tracing unrolls recursion on an Int: W1's `go i acc` under `value_and_grad` becomes a
//! forward run of 100,000 near-identical iterations followed by a backward run of 100,000
//! more. This pass finds such runs in the node sequence and describes each as a loop over one
//! iteration's nodes, so native code runs a loop body instead of a million straight-line
//! instructions (which would take seconds to compile and megabytes of code).
//!
//! A run of `count` iterations of `period` nodes starting at `start` is a loop when, for
//! every offset `k` in the body, the node at `start + k + j·period` has the same operation
//! for every `j`, and each of its operands is an affine function of `j`: `base + j·stride`.
//! The strides cover every pattern a trace makes: `period` for a value of the same or the
//! previous iteration (a loop-carried accumulator), 0 for a value computed before the loop (a
//! captured weight, a CSE'd constant), and `-period'` for a backward loop reading the forward
//! loop's values in reverse order (the tape). Constants that differ per iteration (`float i *
//! 1e-4`) stay nodes of the body: their numbers already sit in the slot array, at an affine
//! address like any other value. Because a loop is checked against every unrolled iteration,
//! it computes exactly what the unrolled program computes, node for node.

use super::ir::{Node, Op};

/// Fewer iterations than this stay straight-line code: a loop's set-up would not pay.
const MIN_ITERATIONS: usize = 4;
/// A loop must cover at least this many nodes.
const MIN_NODES: usize = 32;
/// The longest body looked for, and how many candidate periods are tried at a node.
const MAX_PERIOD: usize = 4096;
const CANDIDATES: usize = 8;

/// One operand of a loop-body node: in iteration `j` it is node `base + j·stride`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Affine {
    pub base: u32,
    pub stride: i64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Nodes `start..end`, each once.
    Straight { start: u32, end: u32 },
    /// Nodes `start..start + period·count`: `count` iterations of the body `start..start +
    /// period`; `operands[k]` are body node `k`'s operands (empty for a constant).
    Loop { start: u32, period: u32, count: u32, operands: Vec<Vec<Affine>> },
}

/// What must agree between a node and its copy one iteration later, hashed for the candidate
/// search: the kind of node and, for an operation, its operation and number of operands.
/// Arithmetic is keyed by its enum's number: this runs once per node of a million-node trace,
/// where writing each operation out as text cost more than the search itself.
#[derive(Hash, PartialEq, Eq)]
enum Shape {
    Const,
    Bin(u8, usize),
    Un(u8, usize),
    /// A tensor operation by its written form, which includes its parameters (a reshape's
    /// shape).
    T(String, usize),
}

fn shape(node: &Node) -> Option<Shape> {
    match node {
        Node::Input(_) => None,
        Node::Const(_) => Some(Shape::Const),
        Node::Apply(Op::Bin(p), args) => Some(Shape::Bin(*p as u8, args.len())),
        Node::Apply(Op::Un(u), args) => Some(Shape::Un(*u as u8, args.len())),
        Node::Apply(op @ (Op::T(_) | Op::Product { .. } | Op::AddRow(_) | Op::Chain(_)), args) => {
            Some(Shape::T(format!("{op:?}"), args.len()))
        }
    }
}

/// Whether nodes `a` and `b` can be the same body node of two iterations.
#[inline]
fn same_op(a: &Node, b: &Node) -> bool {
    match (a, b) {
        (Node::Const(_), Node::Const(_)) => true,
        (Node::Apply(x, xs), Node::Apply(y, ys)) => x == y && xs.len() == ys.len(),
        _ => false,
    }
}

/// A node's operands (none for a constant or an input).
pub fn args(node: &Node) -> &[u32] {
    match node {
        Node::Apply(_, args) => args,
        _ => &[],
    }
}

/// The pieces covering `nodes[start..end]` (every node there is one the caller can compile:
/// a constant or an operation): loops where the sequence repeats, straight runs elsewhere.
pub fn pieces(nodes: &[Node], start: usize, end: usize) -> Vec<Piece> {
    let next = next_same(nodes, start, end);
    let mut out = Vec::new();
    let mut straight = start;
    let mut i = start;
    while i < end {
        match find_loop(nodes, &next, i, end) {
            Some((period, count, operands)) => {
                if straight < i {
                    out.push(Piece::Straight { start: straight as u32, end: i as u32 });
                }
                out.push(Piece::Loop { start: i as u32, period: period as u32, count: count as u32, operands });
                i += period * count;
                straight = i;
            }
            None => i += 1,
        }
    }
    if straight < end {
        out.push(Piece::Straight { start: straight as u32, end: end as u32 });
    }
    out
}

/// For each node, the next node of the range with the same shape (`usize::MAX`: none).
fn next_same(nodes: &[Node], start: usize, end: usize) -> Vec<usize> {
    let mut next = vec![usize::MAX; end - start];
    // Constants and arithmetic, nearly every node of a scalar trace, by a small number (a
    // hash table's insert per node was three quarters of this pass on W1); tensor operations
    // by their written form.
    let mut latest = [usize::MAX; SMALL_SHAPES];
    let mut seen: super::opt::FxMap<Shape, usize> = Default::default();
    for i in (start..end).rev() {
        next[i - start] = match shape(&nodes[i]) {
            Some(Shape::Const) => std::mem::replace(&mut latest[0], i),
            Some(Shape::Bin(p, 2)) => std::mem::replace(&mut latest[1 + p as usize], i),
            Some(Shape::Un(u, 1)) => std::mem::replace(&mut latest[1 + 256 + u as usize], i),
            Some(other) => seen.insert(other, i).unwrap_or(usize::MAX),
            None => usize::MAX,
        };
    }
    next
}

/// The slots of `next_same`'s array: a constant, then each binary `Prim` and each unary `Un`
/// by their enums' numbers (each below 256).
const SMALL_SHAPES: usize = 1 + 2 * 256;

/// The longest-running loop starting at `i`, trying the nearest repeats of node `i` as
/// periods.
fn find_loop(nodes: &[Node], next: &[usize], i: usize, end: usize) -> Option<(usize, usize, Vec<Vec<Affine>>)> {
    let base = end - next.len();
    let mut t = next[i - base];
    for _ in 0..CANDIDATES {
        if t == usize::MAX || t - i > MAX_PERIOD {
            return None;
        }
        let period = t - i;
        if let Some(found) = try_period(nodes, i, period, end) {
            return Some(found);
        }
        t = next[t - base];
    }
    None
}

/// How many iterations of `period` nodes repeat from `start` (with the operands' strides),
/// when that is enough to make a loop.
fn try_period(nodes: &[Node], start: usize, period: usize, end: usize) -> Option<(usize, usize, Vec<Vec<Affine>>)> {
    if start + 3 * period > end {
        return None;
    }
    // Iterations 0 and 1 fix each operand's stride.
    let mut operands = Vec::with_capacity(period);
    for k in 0..period {
        let (a, b) = (&nodes[start + k], &nodes[start + period + k]);
        if !same_op(a, b) {
            return None;
        }
        let ops: Vec<Affine> =
            args(a).iter().zip(args(b)).map(|(&x, &y)| Affine { base: x, stride: y as i64 - x as i64 }).collect();
        // An operand must come before its node in every iteration: a stride above the
        // period would overtake it.
        if ops.iter().any(|o| o.stride > period as i64) {
            return None;
        }
        operands.push(ops);
    }
    // Further iterations must follow the same strides.
    let mut count = 2;
    'iterations: while start + (count + 1) * period <= end {
        let at = start + count * period;
        for (k, ops) in operands.iter().enumerate() {
            let node = &nodes[at + k];
            if !same_op(&nodes[start + k], node) {
                break 'iterations;
            }
            let (found, j) = (args(node), count as i64);
            if found.len() != ops.len() || found.iter().zip(ops).any(|(&a, o)| a as i64 != o.base as i64 + j * o.stride)
            {
                break 'iterations;
            }
        }
        count += 1;
    }
    (count >= MIN_ITERATIONS && count * period >= MIN_NODES).then_some((period, count, operands))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Prim;
    use crate::runtime::value::Value;

    fn bin(p: Prim, a: u32, b: u32) -> Node {
        Node::Apply(Op::Bin(p), vec![a, b].into())
    }

    /// Every loop reproduces the unrolled nodes it replaces, and the pieces cover the range.
    fn check(nodes: &[Node], start: usize, ps: &[Piece]) {
        let mut at = start as u32;
        for p in ps {
            match p {
                Piece::Straight { start, end } => {
                    assert_eq!(*start, at);
                    at = *end;
                }
                Piece::Loop { start, period, count, operands } => {
                    assert_eq!(*start, at);
                    for j in 0..*count {
                        for (k, ops) in operands.iter().enumerate() {
                            let node = &nodes[(start + j * period) as usize + k];
                            assert!(same_op(node, &nodes[*start as usize + k]));
                            let want: Vec<u32> =
                                ops.iter().map(|o| (o.base as i64 + j as i64 * o.stride) as u32).collect();
                            assert_eq!(args(node), &want[..]);
                        }
                    }
                    at = start + period * count;
                }
            }
        }
        assert_eq!(at as usize, nodes.len());
    }

    fn loops(ps: &[Piece]) -> Vec<&Piece> {
        ps.iter().filter(|p| matches!(p, Piece::Loop { .. })).collect()
    }

    /// `acc = acc * w + c_j` for 20 iterations after an input and a weight: one loop (from
    /// the second iteration: the first reads the input, not a previous iteration), whose
    /// operands are the carried accumulator (stride = period), the weight (stride 0) and the
    /// per-iteration constant (stride = period).
    #[test]
    fn an_accumulator_loop_is_found() {
        let mut nodes = vec![Node::Input(0), Node::Const(Value::Float(0.5))];
        let mut acc = 0u32;
        for j in 0..20 {
            let c = nodes.len() as u32;
            nodes.push(Node::Const(Value::Float(j as f64)));
            nodes.push(bin(Prim::Mul, acc, 1));
            nodes.push(bin(Prim::Add, c + 1, c));
            acc = c + 2;
        }
        let ps = pieces(&nodes, 2, nodes.len());
        check(&nodes, 2, &ps);
        let ls = loops(&ps);
        assert_eq!(ls.len(), 1, "{ps:?}");
        let Piece::Loop { period, count, operands, .. } = ls[0] else { unreachable!() };
        assert_eq!((*period, *count), (3, 19));
        let strides: Vec<Vec<i64>> = operands.iter().map(|os| os.iter().map(|o| o.stride).collect()).collect();
        assert!(strides.contains(&vec![3, 0]) && strides.contains(&vec![3, 3]), "{ps:?}");
    }

    /// A backward loop reads the forward loop's values in reverse: a negative stride.
    #[test]
    fn a_reversed_read_is_a_negative_stride() {
        let mut nodes = vec![Node::Input(0)];
        let mut x = 0u32;
        for _ in 0..40 {
            nodes.push(bin(Prim::Mul, x, x));
            x = nodes.len() as u32 - 1;
        }
        let mut g = 0u32;
        for j in (1..=40u32).rev() {
            nodes.push(bin(Prim::Mul, g, j));
            g = nodes.len() as u32 - 1;
        }
        let ps = pieces(&nodes, 1, nodes.len());
        check(&nodes, 1, &ps);
        let ls = loops(&ps);
        assert_eq!(ls.len(), 2, "{ps:?}");
        let Piece::Loop { operands, .. } = ls[1] else { unreachable!() };
        assert_eq!(operands[0][1].stride, -1);
    }

    /// Operands that follow no one stride (j² grows faster than any affine map) are not
    /// rolled where they break the pattern.
    #[test]
    fn irregular_code_stays_straight() {
        let mut nodes = vec![Node::Input(0)];
        for j in 0..40u32 {
            let a = (j * j).min(nodes.len() as u32 - 1);
            nodes.push(bin(Prim::Add, a, 0));
        }
        let ps = pieces(&nodes, 1, nodes.len());
        check(&nodes, 1, &ps);
    }
}
