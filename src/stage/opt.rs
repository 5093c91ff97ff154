//! The optimisations of a traced program, in one forward pass and one backward pass:
//! - simplification: an operation on constants is computed once, at compile time (constant
//!   folding), and the identities `x * 1`, `1 * x`, `x / 1`, `x - 0` (exact in IEEE
//!   arithmetic) become `x` when they keep its kind (no broadcast, no dtype change);
//! - common subexpressions: a node equal to an earlier one (the same operation on the same
//!   operands, or the same constant) is that node;
//! - dead code: nodes no output reaches are dropped (a `grad`'s partials of inputs whose
//!   adjoint is never read, the primal result `grad` discards).

use super::exec;
use super::ir::{Node, Op, Program};
use crate::core::Prim;
use crate::runtime::value::Value;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::rc::Rc;

pub fn optimise(p: Program) -> Program {
    dead_code(simplify(p))
}

/// What makes two nodes the same: a Float constant's bits, a tensor constant's identity, an
/// operation and its operands. (Programs run to millions of nodes: the common arithmetic keys
/// are plain numbers, hashed with `Fx`.)
#[derive(Hash, PartialEq, Eq)]
enum Key {
    Float(u64),
    Tensor(usize),
    Bin(u8, u32, u32),
    Un(u8, u32),
    /// A tensor-library operation, by its written form (its parameters included); boxed, so
    /// the common keys stay 16 bytes, which keeps the table of a million-node trace small.
    T(Box<(String, Vec<u32>)>),
}

fn key(node: &Node) -> Option<Key> {
    Some(match node {
        Node::Input(_) => return None,
        Node::Const(Value::Float(x)) => Key::Float(x.to_bits()),
        Node::Const(Value::Tensor(t)) => Key::Tensor(Rc::as_ptr(t) as usize),
        Node::Const(_) => return None,
        Node::Apply(Op::Bin(p), args) if args.len() == 2 => Key::Bin(*p as u8, args[0], args[1]),
        Node::Apply(Op::Un(u), args) if args.len() == 1 => Key::Un(*u as u8, args[0]),
        Node::Apply(op, args) => Key::T(Box::new((format!("{op:?}"), args.clone()))),
    })
}

/// The Firefox hash (as rustc's FxHasher): one multiply per word, ample for these keys.
#[derive(Default)]
struct Fx(u64);

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

fn simplify(p: Program) -> Program {
    let Program { nodes, kinds, inputs, outputs, template } = p;
    let mut out = Program { nodes: Vec::new(), kinds: Vec::new(), inputs, outputs: Vec::new(), template };
    // Old node → new node.
    let mut to = Vec::with_capacity(nodes.len());
    let mut seen: HashMap<Key, u32, BuildHasherDefault<Fx>> =
        HashMap::with_capacity_and_hasher(nodes.len(), Default::default());
    for (node, kind) in nodes.into_iter().zip(kinds) {
        let node = match node {
            Node::Apply(op, mut args) => {
                // Renumbered in place: no allocation per node of a million-node trace.
                args.iter_mut().for_each(|a| *a = to[*a as usize]);
                let constant = |i: u32| match &out.nodes[i as usize] {
                    Node::Const(v) => Some(v.clone()),
                    _ => None,
                };
                let values: Option<Vec<Value>> = args.iter().map(|&a| constant(a)).collect();
                if let Some(v) = values.and_then(|vs| exec::apply(&op, vs).ok()) {
                    Node::Const(v)
                } else if let Some(x) = identity(&op, &args, &out, &kind) {
                    to.push(x);
                    continue;
                } else {
                    Node::Apply(op, args)
                }
            }
            other => other,
        };
        let i = out.nodes.len() as u32;
        if let Some(k) = key(&node) {
            match seen.entry(k) {
                Entry::Occupied(e) => {
                    to.push(*e.get());
                    continue;
                }
                Entry::Vacant(e) => {
                    e.insert(i);
                }
            }
        }
        out.nodes.push(node);
        out.kinds.push(kind);
        to.push(i);
    }
    out.outputs = outputs.iter().map(|&o| to[o as usize]).collect();
    out
}

/// The operand an identity operation returns unchanged, when its kind is the result's.
fn identity(op: &Op, args: &[u32], p: &Program, kind: &super::ir::Kind) -> Option<u32> {
    let is = |i: u32, c: f64| matches!(&p.nodes[i as usize], Node::Const(Value::Float(x)) if *x == c);
    let keeps = |i: u32| &p.kinds[i as usize] == kind;
    let (a, b) = match args {
        [a, b] => (*a, *b),
        _ => return None,
    };
    let x = match op {
        Op::Bin(Prim::Mul) if is(b, 1.0) => a,
        Op::Bin(Prim::Mul) if is(a, 1.0) => b,
        Op::Bin(Prim::Div) if is(b, 1.0) => a,
        Op::Bin(Prim::Sub) if is(b, 0.0) => a,
        _ => return None,
    };
    keeps(x).then_some(x)
}

pub(super) fn dead_code(p: Program) -> Program {
    let mut live = vec![false; p.nodes.len()];
    for &o in &p.outputs {
        live[o as usize] = true;
    }
    for i in (0..p.nodes.len()).rev() {
        if let (true, Node::Apply(_, args)) = (live[i], &p.nodes[i]) {
            for &a in args {
                live[a as usize] = true;
            }
        }
    }
    let mut to = vec![0u32; p.nodes.len()];
    let mut out =
        Program { nodes: Vec::new(), kinds: Vec::new(), inputs: p.inputs, outputs: Vec::new(), template: p.template };
    for (i, (node, kind)) in p.nodes.into_iter().zip(p.kinds).enumerate() {
        if !live[i] {
            continue;
        }
        to[i] = out.nodes.len() as u32;
        out.nodes.push(match node {
            Node::Apply(op, mut args) => {
                args.iter_mut().for_each(|a| *a = to[*a as usize]);
                Node::Apply(op, args)
            }
            other => other,
        });
        out.kinds.push(kind);
    }
    out.outputs = p.outputs.iter().map(|&o| to[o as usize]).collect();
    out
}
