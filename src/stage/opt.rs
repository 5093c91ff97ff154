//! The optimisations of a traced program, in one forward pass and one backward pass:
//! - simplification: an operation on constants is computed once, at compile time (constant
//!   folding), and the identities `x * 1`, `1 * x`, `x / 1`, `x - (+0)` (exact in IEEE
//!   arithmetic) become `x` when they keep its kind (no broadcast, no dtype change), a reshape
//!   of a reshape one reshape, and a reshape to the shape its operand has nothing; likewise a
//!   permutation of a permutation is one, and nothing when the two cancel;
//! - common subexpressions: a node equal to an earlier one (the same operation on the same
//!   operands, or the same constant) is that node;
//! - dead code: nodes no output reaches are dropped (a `grad`'s partials of inputs whose
//!   adjoint is never read, the primal result `grad` discards).
//!
//! Traces run to millions of nodes (W1's is 1.35M), and compile time is part of a staged
//! call's first run, so both passes work in place (no second copy of the program to fault in)
//! and the common-subexpression search avoids a table over every node: the node an operation
//! duplicates reads the same operands, so it is looked for among the readers of its latest
//! operand — a short list of nodes made shortly before, still in cache — where a hash table
//! of a million entries costs a cache miss per node.

use super::exec;
use super::ir::{Kind, Node, Op, Program};
use crate::core::Prim;
use crate::runtime::value::Value;
use crate::tensor::{Real, TOp, Tensor};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::rc::Rc;

pub fn optimise(mut p: Program) -> Program {
    simplify(&mut p);
    dead_code(&mut p);
    p
}

/// How many readers of an operand are kept in its list. A value read all through the
/// program (a captured weight, a constant) has as many readers as the program has
/// iterations: searching them all would make the pass quadratic, so the readers beyond
/// these go to a hash table (`Seen::hot`), which only such values pay for.
const LISTED: u8 = 16;
const NONE: u32 = u32::MAX;

/// The Firefox hash (as rustc's FxHasher): one multiply per word, ample for these keys.
#[derive(Default)]
pub(super) struct Fx(u64);

impl Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u8(&mut self, n: u8) {
        self.write_u64(n as u64);
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64);
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

pub(super) type FxMap<K, V = u32> = HashMap<K, V, BuildHasherDefault<Fx>>;

/// An operation as a hash key: the arithmetic by its enum's number, a tensor-library
/// operation by its written form (its parameters included; boxed, so the common keys stay
/// 16 bytes).
#[derive(Hash, PartialEq, Eq)]
enum Key {
    Bin(u8, u32, u32),
    Un(u8, u32),
    T(Box<(String, Vec<u32>)>),
}

fn key(op: &Op, args: &[u32]) -> Key {
    match (op, args) {
        (Op::Bin(p), &[a, b]) => Key::Bin(*p as u8, a, b),
        (Op::Un(u), &[a]) => Key::Un(*u as u8, a),
        _ => Key::T(Box::new((format!("{op:?}"), args.to_vec()))),
    }
}

/// The nodes already kept, for the common-subexpression search: constants by value (a Float's
/// bits, a tensor's identity), operations by their latest operand's readers.
struct Seen {
    floats: FxMap<u64>,
    tensors: FxMap<u64>,
    /// `first[a]`: the first kept operation whose latest operand is `a`; `then[r]`: the next
    /// one after `r`, up to `LISTED` of them; `listed[a]`: how many there are.
    first: Vec<u32>,
    then: Vec<u32>,
    listed: Vec<u8>,
    hot: FxMap<Key>,
}

impl Seen {
    fn new(n: usize) -> Seen {
        Seen {
            floats: FxMap::default(),
            tensors: FxMap::default(),
            first: vec![NONE; n],
            then: vec![NONE; n],
            listed: vec![0; n],
            hot: FxMap::default(),
        }
    }

    /// The kept node equal to `node` (numbered `i` if it is kept), recording it as kept when
    /// there is none.
    fn find_or_add(&mut self, nodes: &[Node], node: &Node, i: u32) -> Option<u32> {
        fn once<K: std::hash::Hash + Eq>(map: &mut FxMap<K>, k: K, i: u32) -> Option<u32> {
            match map.entry(k) {
                Entry::Occupied(e) => Some(*e.get()),
                Entry::Vacant(e) => {
                    e.insert(i);
                    None
                }
            }
        }
        let (op, args) = match node {
            Node::Const(Value::Float(x)) => return once(&mut self.floats, x.to_bits(), i),
            Node::Const(Value::Tensor(t)) => return once(&mut self.tensors, Rc::as_ptr(t) as usize as u64, i),
            Node::Input(_) | Node::Const(_) => return None,
            Node::Apply(op, args) => (op, args),
        };
        let &latest = args.iter().max()?;
        let latest = latest as usize;
        let (mut r, mut last) = (self.first[latest], NONE);
        while r != NONE {
            if let Node::Apply(o, a) = &nodes[r as usize] {
                if o == op && a == args {
                    return Some(r);
                }
            }
            (last, r) = (r, self.then[r as usize]);
        }
        if self.listed[latest] == LISTED {
            return once(&mut self.hot, key(op, args), i);
        }
        self.listed[latest] += 1;
        match last {
            NONE => self.first[latest] = i,
            _ => self.then[last as usize] = i,
        }
        None
    }
}

fn simplify(p: &mut Program) {
    let n = p.nodes.len();
    // Old node → new node. Nodes move down in place: the k-th kept node goes to index k,
    // which the loop has already read.
    let mut to: Vec<u32> = Vec::with_capacity(n);
    let mut seen = Seen::new(n);
    // Whether each kept node is a constant.
    let mut constants: Vec<bool> = Vec::with_capacity(n);
    let mut kept = 0usize;
    for i in 0..n {
        let node = std::mem::replace(&mut p.nodes[i], Node::Input(0));
        let kind = std::mem::replace(&mut p.kinds[i], Kind::Float);
        let (nodes, kinds) = (&p.nodes[..kept], &p.kinds[..kept]);
        // Operands are read through `constants` first: in a backward pass they lie far back,
        // and reading each node would be a cache miss per operand.
        let constant = |&a: &u32| constants[a as usize];
        let node = match node {
            Node::Apply(mut op, mut args) => {
                // Renumbered in place: no allocation per node of a million-node trace.
                args.iter_mut().for_each(|a| *a = to[*a as usize]);
                if let Some((x, composed)) = composed_permutation(&op, &args, nodes) {
                    let Some(perm) = composed else {
                        to.push(x);
                        continue;
                    };
                    (op, args[0]) = (Op::T(Box::new(TOp::Permute(perm))), x);
                }
                // A reshape of a reshape is one reshape of the first operand, and none when
                // that has the shape already (a reverse rule's [1] → [] → [1]).
                if let (Op::T(t), [a]) = (&op, &mut args[..]) {
                    if matches!(**t, TOp::Reshape(_)) {
                        if let Node::Apply(Op::T(inner), inner_args) = &nodes[*a as usize] {
                            if let (TOp::Reshape(_), [x]) = (&**inner, &inner_args[..]) {
                                *a = *x;
                            }
                        }
                        if kinds[*a as usize] == kind {
                            to.push(*a);
                            continue;
                        }
                    }
                }
                let folded = match args.iter().all(constant) {
                    true => {
                        let values = args
                            .iter()
                            .map(|&a| match &nodes[a as usize] {
                                Node::Const(v) => v.clone(),
                                _ => Value::Unit,
                            })
                            .collect();
                        exec::apply(&op, values).ok()
                    }
                    false => None,
                };
                if let Some(v) = folded {
                    Node::Const(v)
                } else if let Some(x) = identity(&op, &args, nodes, kinds, &constants, &kind) {
                    to.push(x);
                    continue;
                } else {
                    Node::Apply(op, args)
                }
            }
            other => other,
        };
        if let Some(earlier) = seen.find_or_add(nodes, &node, kept as u32) {
            to.push(earlier);
            continue;
        }
        constants.push(matches!(node, Node::Const(_)));
        p.nodes[kept] = node;
        p.kinds[kept] = kind;
        to.push(kept as u32);
        kept += 1;
    }
    p.nodes.truncate(kept);
    p.kinds.truncate(kept);
    p.outputs.iter_mut().for_each(|o| *o = to[*o as usize]);
}

/// For a permutation of a permutation of x: x and the one permutation they make (None when
/// the two cancel). Not when the outer one swaps the last two axes: a matrix product reads that
/// swap in place (`fuse`), and would instead read a copy made by the composed permutation.
fn composed_permutation(op: &Op, args: &[u32], nodes: &[Node]) -> Option<(u32, Option<Vec<usize>>)> {
    let (Op::T(t), &[a]) = (op, args) else { return None };
    let TOp::Permute(outer) = &**t else { return None };
    let Node::Apply(Op::T(inner), inner_args) = &nodes[a as usize] else { return None };
    let (TOp::Permute(first), &[x]) = (&**inner, &inner_args[..]) else { return None };
    if super::fuse::swaps_last_two(outer) {
        return None;
    }
    let composed: Vec<usize> = outer.iter().map(|&i| first[i]).collect();
    let identity = composed.iter().enumerate().all(|(i, &j)| i == j);
    Some((x, (!identity).then_some(composed)))
}

/// The operand an identity operation returns unchanged, when its kind is the result's.
fn identity(op: &Op, args: &[u32], nodes: &[Node], kinds: &[Kind], constants: &[bool], kind: &Kind) -> Option<u32> {
    // Bit for bit: x - (-0) is not x (for x = -0 it is +0).
    let is = |i: u32, c: f64| {
        constants[i as usize]
            && match &nodes[i as usize] {
                Node::Const(Value::Float(x)) => x.to_bits() == c.to_bits(),
                // A tensor of one value throughout (a traced `grad` seeds `sum`'s adjoint as a
                // tensor of ones): the identity holds elementwise, so long as `keeps` (below)
                // says the tensor does not broadcast the other operand.
                Node::Const(Value::Tensor(t)) => splat_of(t, c),
                _ => false,
            }
    };
    let keeps = |i: u32| &kinds[i as usize] == kind;
    let (a, b) = match args {
        [a, b] => (*a, *b),
        _ => return None,
    };
    // The kind first: `is` reads a constant tensor whole.
    match op {
        Op::Bin(Prim::Mul) if keeps(a) && is(b, 1.0) => Some(a),
        Op::Bin(Prim::Mul) if keeps(b) && is(a, 1.0) => Some(b),
        Op::Bin(Prim::Div) if keeps(a) && is(b, 1.0) => Some(a),
        Op::Bin(Prim::Sub) if keeps(a) && is(b, 0.0) => Some(a),
        _ => None,
    }
}

/// Whether every element of a float tensor is c, bit for bit.
fn splat_of(t: &Tensor, c: f64) -> bool {
    fn all<T: Real>(t: &Tensor, c: f64) -> bool {
        T::of(t).is_some_and(|a| a.iter().all(|&v| v.to_f64().is_some_and(|v| v.to_bits() == c.to_bits())))
    }
    all::<f32>(t, c) || all::<f64>(t, c)
}

pub(super) fn dead_code(p: &mut Program) {
    let n = p.nodes.len();
    let mut live = vec![false; n];
    for &o in &p.outputs {
        live[o as usize] = true;
    }
    for i in (0..n).rev() {
        if let (true, Node::Apply(_, args)) = (live[i], &p.nodes[i]) {
            for &a in args {
                live[a as usize] = true;
            }
        }
    }
    // Live nodes move down in place, as in `simplify`.
    let mut to = vec![0u32; n];
    let mut kept = 0;
    for i in 0..n {
        if !live[i] {
            continue;
        }
        to[i] = kept as u32;
        p.nodes.swap(kept, i);
        p.kinds.swap(kept, i);
        if let Node::Apply(_, args) = &mut p.nodes[kept] {
            args.iter_mut().for_each(|a| *a = to[*a as usize]);
        }
        kept += 1;
    }
    p.nodes.truncate(kept);
    p.kinds.truncate(kept);
    p.outputs.iter_mut().for_each(|o| *o = to[*o as usize]);
}
