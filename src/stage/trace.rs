//! The tracer: the leaves of a staged call's argument become traced values, and every
//! operation the machine (or a derivative rule, through the machine's arithmetic) applies to
//! one emits a node. A constant operand becomes a `Const` node. Each node's example is
//! computed at once by the executor's own `apply`, so shapes and dtypes come from the
//! operations' own rules.

use super::exec;
use super::ir::{Args, Kind, Node, Op, Program, Template};
use crate::memory::reserve_long;
use crate::runtime::perturbed::is_ad;
use crate::runtime::staged::{Staged, StagedFloat};
use crate::runtime::value::{RecordVal, Value};
use crate::runtime::{FResult, Fault};
use std::rc::Rc;

pub struct Trace {
    pub id: u32,
    nodes: Vec<Node>,
    kinds: Vec<Kind>,
    /// Each node's example when it is a Float (what a `Value::StagedFloat` of it stands for);
    /// NaN for a tensor's node, whose example its `Staged` cell holds.
    floats: Vec<f64>,
    /// Float constants' nodes by their bits, direct-mapped (`constant`).
    recent: Box<[Option<(u64, u32)>; RECENT_CONSTANTS]>,
    inputs: usize,
}

/// The slots of `Trace::recent` (a power of two: a slot is the top bits of a hash).
const RECENT_CONSTANTS: usize = 64;

/// The fault of a traced value met outside its trace.
pub fn escaped() -> Fault {
    Fault::new("jit: a traced value escaped the function being staged")
        .help("a staged function's values may leave it only through its result (not through a reference, a continuation or a captured `grad` variable)")
}

impl Trace {
    pub fn new(id: u32) -> Trace {
        Trace {
            id,
            nodes: Vec::new(),
            kinds: Vec::new(),
            floats: Vec::new(),
            recent: Box::new([None; RECENT_CONSTANTS]),
            inputs: 0,
        }
    }

    /// Appends `node`, whose value on this call is `example` (a Float or a tensor), and
    /// returns it traced.
    fn push(&mut self, node: Node, example: Value) -> FResult<Value> {
        let id = self.nodes.len() as u32;
        match example {
            Value::Float(x) => {
                self.append(node, Kind::Float);
                *self.floats.last_mut().expect("appended") = x;
                Ok(Value::StagedFloat(StagedFloat { trace: self.id, node: id }))
            }
            Value::Tensor(t) => {
                self.append(node, Kind::of_tensor(&t));
                Ok(Value::Staged(Rc::new(Staged { trace: self.id, node: id, example: t })))
            }
            other => Err(Fault::internal(format!("a traced {} (neither a Float nor a tensor)", other.type_name()))),
        }
    }

    /// The node of the Float constant `x`: a recent one of the same bits, else a new node. A
    /// loop's constants recur every iteration (`acc * 0.99` and its partial): reusing their
    /// nodes keeps 200,000 of the 1.7 million nodes of W1's trace from being made (the
    /// optimiser would merge them all the same, into the first).
    fn constant(&mut self, x: f64) -> u32 {
        let bits = x.to_bits();
        let slot = (bits.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - RECENT_CONSTANTS.trailing_zeros())) as usize;
        match self.recent[slot] {
            Some((b, node)) if b == bits => node,
            _ => {
                let node = self.nodes.len() as u32;
                self.append(Node::Const(Value::Float(x)), Kind::Float);
                *self.floats.last_mut().expect("appended") = x;
                self.recent[slot] = Some((bits, node));
                node
            }
        }
    }

    /// The zero of a traced value of this trace (the seed of an adjoint nothing reaches).
    pub fn zero_of(&self, v: &Value) -> Option<Value> {
        match v {
            Value::Staged(s) if s.trace == self.id => Some(crate::ad::zero_like(&Value::Tensor(s.example.clone()))),
            Value::StagedFloat(s) if s.trace == self.id => Some(Value::Float(0.0)),
            _ => None,
        }
    }

    fn append(&mut self, node: Node, kind: Kind) {
        // The three vectors have one length, so the nodes' capacity check covers them all.
        if self.nodes.len() == self.nodes.capacity() {
            reserve_long(&mut self.nodes);
            reserve_long(&mut self.kinds);
            reserve_long(&mut self.floats);
        }
        self.nodes.push(node);
        self.kinds.push(kind);
        self.floats.push(f64::NAN);
    }

    /// A new input leaf with this call's value.
    pub fn input(&mut self, example: Value) -> FResult<Value> {
        let k = self.inputs;
        self.inputs += 1;
        self.push(Node::Input(k), example)
    }

    /// Emits `op` on `args` (traced values of this trace, or plain Floats and tensors).
    pub fn emit<A: AsMut<[Value]> + Into<Vec<Value>>>(&mut self, op: Op, mut args: A) -> FResult<Value> {
        let mut ids = Args::new();
        // The operands become their examples in place.
        for a in args.as_mut() {
            match a {
                Value::StagedFloat(s) if s.trace == self.id => {
                    ids.push(s.node);
                    *a = Value::Float(self.floats[s.node as usize]);
                }
                Value::Staged(s) if s.trace == self.id => {
                    ids.push(s.node);
                    *a = Value::Tensor(s.example.clone());
                }
                Value::Staged(_) | Value::StagedFloat(_) => return Err(escaped()),
                Value::Float(x) => ids.push(self.constant(*x)),
                Value::Tensor(_) => {
                    ids.push(self.nodes.len() as u32);
                    self.append(Node::Const(a.clone()), Kind::of(a));
                }
                other => return Err(Fault::internal(format!("staging `{op}` on {}", other.type_name()))),
            }
        }
        let y = match (&op, args.as_mut()) {
            // Nearly every node of a scalar trace: the executor's own Float arithmetic,
            // without the vector `apply` takes (a million nodes, a million allocations).
            (Op::Bin(p), [Value::Float(x), Value::Float(y)]) => Value::Float(exec::float_bin(*p, *x, *y)?),
            (Op::Un(u), [Value::Float(x)]) => Value::Float(u.eval(*x)),
            _ => exec::apply(&op, args.into())?,
        };
        self.push(Node::Apply(op, ids), y)
    }

    /// The program whose result is `out`: its traced leaves become the outputs.
    pub fn finish(self, out: &Value) -> FResult<Program> {
        let mut outputs = Vec::new();
        let template = self.template(out, &mut outputs)?;
        Ok(Program { nodes: self.nodes, kinds: self.kinds, inputs: self.inputs, outputs, template })
    }

    fn template(&self, v: &Value, outputs: &mut Vec<u32>) -> FResult<Template> {
        let many = |vs: &[Value], outputs: &mut Vec<u32>| -> FResult<Vec<Template>> {
            vs.iter().map(|x| self.template(x, outputs)).collect()
        };
        Ok(match v {
            Value::Staged(_) | Value::StagedFloat(_) => {
                let node = match v {
                    Value::Staged(s) if s.trace == self.id => s.node,
                    Value::StagedFloat(s) if s.trace == self.id => s.node,
                    _ => return Err(escaped()),
                };
                outputs.push(node);
                Template::Out(outputs.len() - 1)
            }
            v if is_ad(v) => return Err(Fault::new(
                "jit: the staged function's result is differentiated by a `grad` or `jvp` running outside the `jit`",
            )
            .help("pass the differentiated value to the staged function as part of its argument")),
            Value::Tuple(vs) => Template::Tuple(many(vs, outputs)?),
            Value::Record(r) => {
                let RecordVal { names, values } = &**r;
                Template::Record(names.clone(), many(values, outputs)?)
            }
            Value::Nil | Value::Cons(_) => {
                let items: Vec<Value> = v.iter_list().cloned().collect();
                Template::List(many(&items, outputs)?)
            }
            Value::Con(c) => Template::Con(c.tag, c.name.clone(), many(&c.args, outputs)?),
            Value::Closure(_) | Value::Pap(_) | Value::Builtin(_) | Value::Cont(_) | Value::Ref(_) => {
                return Err(Fault::new(format!(
                    "jit: the staged function returns a {}, which staging cannot compile",
                    if matches!(v, Value::Ref(_)) { "reference" } else { "function" }
                ))
                .help(
                    "a staged function returns data: Floats, tensors, and tuples, records, lists and variants of them",
                ))
            }
            other => Template::Value(other.clone()),
        })
    }
}
