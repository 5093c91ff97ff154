//! Running a staged program: each node's operation called directly on the tensor library's
//! kernels (through the run-time layer's plain-value entry points, the ones the machine
//! uses), with no evaluator in between; the outputs are put back into the function's output
//! structure. `apply` is also what the tracer computes each node's example with, so a traced
//! call and a compiled one run the same code on the same numbers.

use super::ir::{Node, Op, Program, Template};
use crate::core::Prim;
use crate::runtime::value::{ConVal, RecordVal, Value};
use crate::runtime::{tensor, FResult, Fault};
use crate::tensor::{cpu, TOp};
use std::rc::Rc;

/// One operation on plain Floats and tensors.
/// The machine's own Float arithmetic (Machine::prim2), operation for operation.
#[inline]
fn float_bin(p: Prim, x: f64, y: f64) -> FResult<f64> {
    Ok(match p {
        Prim::Add => x + y,
        Prim::Sub => x - y,
        Prim::Mul => x * y,
        Prim::Div => x / y,
        Prim::Pow => x.powf(y),
        _ => return Err(Fault::internal(format!("staged `{p:?}`"))),
    })
}

pub fn apply(op: &Op, args: Vec<Value>) -> FResult<Value> {
    let floats: Option<Vec<f64>> = args.iter().map(|a| if let Value::Float(x) = a { Some(*x) } else { None }).collect();
    match (op, floats.as_deref()) {
        (Op::Bin(p), Some(&[x, y])) => Ok(Value::Float(float_bin(*p, x, y)?)),
        (Op::Un(u), Some(&[x])) => Ok(Value::Float(u.eval(x))),
        // The derivative rules' masks on a traced Float (on a plain Float the rules decide
        // them directly, as the scalar rules in ad/rules.rs do; these are those decisions).
        (Op::T(TOp::Step), Some(&[x])) => Ok(Value::Float(if x > 0.0 { 1.0 } else { 0.0 })),
        (Op::T(TOp::Sign), Some(&[x])) => Ok(Value::Float(if x >= 0.0 { 1.0 } else { -1.0 })),
        (Op::T(TOp::Mask), Some(&[x, mask])) => Ok(Value::Float(if mask > 0.0 { x } else { 0.0 })),
        (Op::Bin(p), _) => {
            let mut args = args.into_iter();
            let (a, b) = (args.next().unwrap_or_default(), args.next().unwrap_or_default());
            tensor::elementwise(*p, a, b)
        }
        (Op::Un(u), _) => match args.into_iter().next() {
            Some(Value::Tensor(t)) => Ok(tensor::wrap(cpu::elementwise::unary(*u, t)?)),
            other => Err(Fault::internal(format!("staged `{u:?}` on {}", other.unwrap_or_default().type_name()))),
        },
        (Op::T(t), _) => tensor::forward(t, &args),
    }
}

/// The last node that reads each node (`None`: nothing does), so a value is moved into its
/// last reader — a tensor nobody else holds is then reused in place by elementwise kernels.
pub fn last_uses(p: &Program) -> Vec<Option<u32>> {
    let mut last = vec![None; p.nodes.len()];
    for (i, n) in p.nodes.iter().enumerate() {
        if let Node::Apply(_, args) = n {
            for &a in args {
                last[a as usize] = Some(i as u32);
            }
        }
    }
    for &o in &p.outputs {
        // An output is read at the end, after every node.
        last[o as usize] = Some(u32::MAX);
    }
    last
}

/// Runs `p` on the argument's leaves (in the signature's order) and builds the result.
pub fn run(p: &Program, last: &[Option<u32>], mut inputs: Vec<Value>) -> FResult<Value> {
    let mut slots: Vec<Value> = Vec::with_capacity(p.nodes.len());
    for (i, node) in p.nodes.iter().enumerate() {
        let v = match node {
            Node::Input(k) => std::mem::take(&mut inputs[*k]),
            Node::Const(v) => v.clone(),
            // Scalar code: straight to the f64 operation, with no operand vector.
            Node::Apply(Op::Bin(p), args) if is_float(&slots, args) => {
                Value::Float(float_bin(*p, float(&slots, args[0]), float(&slots, args[1]))?)
            }
            Node::Apply(Op::Un(u), args) if is_float(&slots, args) => Value::Float(u.eval(float(&slots, args[0]))),
            Node::Apply(op, args) => {
                let vals = args
                    .iter()
                    .map(|&a| {
                        let a = a as usize;
                        if last[a] == Some(i as u32) && !args_repeat(args, a) {
                            std::mem::take(&mut slots[a])
                        } else {
                            slots[a].clone()
                        }
                    })
                    .collect();
                apply(op, vals)?
            }
        };
        slots.push(v);
    }
    let outs: Vec<Value> = p.outputs.iter().map(|&o| slots[o as usize].clone()).collect();
    Ok(build(&p.template, &outs))
}

fn is_float(slots: &[Value], args: &[u32]) -> bool {
    args.iter().all(|&a| matches!(slots[a as usize], Value::Float(_)))
}

fn float(slots: &[Value], a: u32) -> f64 {
    match slots[a as usize] {
        Value::Float(x) => x,
        _ => f64::NAN,
    }
}

/// Whether a node reads operand `a` twice (`x * x`): it is then cloned, not moved.
fn args_repeat(args: &[u32], a: usize) -> bool {
    args.iter().filter(|&&x| x as usize == a).count() > 1
}

fn build(t: &Template, outs: &[Value]) -> Value {
    match t {
        Template::Out(k) => outs[*k].clone(),
        Template::Value(v) => v.clone(),
        Template::Tuple(ts) => Value::Tuple(Rc::new(ts.iter().map(|t| build(t, outs)).collect())),
        Template::Record(names, ts) => Value::Record(Rc::new(RecordVal {
            names: names.clone(),
            values: ts.iter().map(|t| build(t, outs)).collect(),
        })),
        Template::List(ts) => Value::list(ts.iter().map(|t| build(t, outs)).collect::<Vec<_>>().into_iter()),
        Template::Con(tag, name, ts) => Value::Con(Rc::new(ConVal {
            tag: *tag,
            name: name.clone(),
            args: ts.iter().map(|t| build(t, outs)).collect(),
        })),
    }
}
