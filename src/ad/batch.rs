//! Batching as a handler: `vmap f xs` (docs/grad.md §8). `vmap` takes a fresh tag, as `grad`
//! and `jvp` do, and runs `f` once, in a segment delimited by `Vmap`, on its argument with
//! every Tensor leaf made a *batched* value of that level (`Batched`: the stacked values of all
//! B examples and which axis holds them — JAX's BatchTracer). An operation meeting a batched
//! value at the innermost level does not run per example: its *batching rule* below turns it
//! into one operation on the whole stack (an elementwise operation broadcasts with the batch
//! axis in front, a reduction reduces the axes after it, a matrix–vector product with a batch of
//! vectors becomes one matrix product), and returns a batched value again. An operand that is
//! not batched at that level is the same for every example and stays as it is (no copies of it
//! are made). When `f` returns to the delimiter, each leaf of the result is stacked along a
//! new axis 0 (`finish`): a batched one is its stack with the batch axis moved to the front, one
//! that did not depend on the batch is broadcast.
//!
//! The rules compute with the host's operations on the stacked values, which may themselves be
//! perturbed or batched by levels outside this one (`grad (fun p -> sum (vmap (f p) xs))`), so
//! those levels record or batch the batched operation like any other: composition with `grad`,
//! `jvp` and other `vmap`s needs nothing more. A level inside this one (`vmap (grad f)`) sees
//! batched values as its primals, and its own rules, written with the host's arithmetic, come
//! back here for the batch. What has no rule yet is an error naming the operation, never a
//! wrong answer.

use super::tensor::call;
use super::{shape_of, Host};
use crate::core::Prim;
use crate::runtime::perturbed::{strip, Batched, Example};
use crate::runtime::value::Value;
use crate::runtime::{FResult, Fault};
use crate::tensor::{Cmp, DType, TOp, Un};
use std::rc::Rc;

/// An operand seen at the batching level `tag`.
enum At {
    /// Batched there: the stack, its batch axis and what one example is.
    Batch(Value, usize, Example),
    /// The same for every example.
    Plain(Value),
}

fn at(v: Value, tag: u32) -> At {
    match v {
        Value::Batched(b) if b.tag == tag => {
            let b = Rc::try_unwrap(b).unwrap_or_else(|shared| Batched {
                tag: shared.tag,
                value: shared.value.clone(),
                axis: shared.axis,
                kind: shared.kind,
            });
            At::Batch(b.value, b.axis, b.kind)
        }
        other => At::Plain(other),
    }
}

fn batched(tag: u32, value: Value, axis: usize, kind: Example) -> Value {
    Value::Batched(Rc::new(Batched { tag, value, axis, kind }))
}

/// Whether `tag` is the level of a batched operand (a tag belongs to one kind of level, and
/// only a `vmap` makes batched values).
pub fn is_batch_level<'a>(mut args: impl Iterator<Item = &'a Value>, tag: u32) -> bool {
    args.any(|a| matches!(a, Value::Batched(b) if b.tag == tag))
}

/// A batched value used after its `vmap` returned (kept in a reference cell or a closure): it
/// stands for B values at once, and no running `vmap` can say which.
fn check_live<H: Host>(m: &H, tag: u32) -> FResult<()> {
    if m.level_is_live(tag) {
        return Ok(());
    }
    Err(Fault::new("a value batched by a `vmap` that has returned is used here")
        .help("it escaped its `vmap` through a reference cell or a closure; return it from the function instead"))
}

/// The stack with its batch axis moved to the front.
fn front<H: Host>(m: &mut H, value: Value, axis: usize) -> FResult<Value> {
    if axis == 0 {
        return Ok(value);
    }
    let rank = shape_of(&value).len();
    let mut perm = vec![axis];
    perm.extend((0..rank).filter(|&i| i != axis));
    call(m, TOp::Permute(perm), vec![value])
}

/// Reshapes a batch-first stack of examples of shape `example` to rank `1 + rank`, with ones
/// inserted after the batch axis, so that it broadcasts against operands of that rank the way
/// one example would.
fn lift<H: Host>(m: &mut H, value: Value, example: &[usize], rank: usize) -> FResult<Value> {
    if example.len() >= rank {
        return Ok(value);
    }
    let b = shape_of(&value)[0];
    let mut shape = vec![b];
    shape.extend(std::iter::repeat_n(1, rank - example.len()));
    shape.extend_from_slice(example);
    call(m, TOp::Reshape(shape), vec![value])
}

/// The shape of one example of an operand at this level.
fn example_shape(a: &At) -> Vec<usize> {
    match a {
        At::Batch(v, axis, Example::Tensor) => {
            let mut s = shape_of(v);
            s.remove(*axis);
            s
        }
        At::Batch(..) => Vec::new(),
        At::Plain(v) => shape_of(v),
    }
}

/// Whether one example of the operand is a Tensor (rather than a Float or a Bool).
fn is_tensor_example(a: &At) -> bool {
    match a {
        At::Batch(_, _, k) => *k == Example::Tensor,
        At::Plain(v) => {
            matches!(strip(v), Value::Tensor(_)) || matches!(strip(v), Value::Batched(b) if b.kind == Example::Tensor)
        }
    }
}

/// The dtype of an operand's tensor, under every layer (float32 for Floats).
fn dtype_under(v: &Value) -> DType {
    match strip(v) {
        Value::Tensor(t) => t.dtype(),
        Value::Batched(b) => match b.kind {
            Example::Float(d) => d,
            _ => dtype_under(&b.value),
        },
        _ => DType::F32,
    }
}

/// The floating dtype a batch of Floats reduced from a tensor of dtype `d` is stacked in.
fn float_origin(d: DType) -> DType {
    if d.is_float() {
        d
    } else {
        DType::F32
    }
}

/// Operands of an elementwise operation, made to broadcast as one example's would: batched
/// ones batch-first and lifted to the examples' common rank, a batch of Floats meeting tensors
/// converted to their dtype (as a Float meeting a tensor takes its dtype). With `full`, plain
/// operands are broadcast over the batch too (for the operations that do not broadcast).
/// Returns the operands and what one example of the result is.
fn align<H: Host>(m: &mut H, args: Vec<At>, full: bool) -> FResult<(Vec<Value>, Example)> {
    let tensors = args.iter().any(is_tensor_example);
    let rank = args.iter().map(|a| example_shape(a).len()).max().unwrap_or(0);
    let b = args.iter().find_map(|a| match a {
        At::Batch(v, axis, _) => Some(shape_of(v)[*axis]),
        At::Plain(_) => None,
    });
    let Some(b) = b else { return Err(Fault::internal("a batching rule with no batched operand")) };
    let tensor_dtype = args.iter().find_map(|a| match a {
        At::Batch(v, _, Example::Tensor) => Some(dtype_under(v)),
        At::Plain(v) if is_tensor_example(a) => Some(dtype_under(v)),
        _ => None,
    });
    let kind = if tensors {
        Example::Tensor
    } else if args.iter().any(|a| matches!(a, At::Batch(_, _, Example::Bool))) {
        Example::Bool
    } else {
        // A Float's origin: float64 if any operand came from float64 data.
        let f64 = args.iter().any(|a| matches!(a, At::Batch(_, _, Example::Float(DType::F64))));
        Example::Float(if f64 { DType::F64 } else { DType::F32 })
    };
    let mut out = Vec::with_capacity(args.len());
    for a in args {
        let shape = example_shape(&a);
        out.push(match a {
            At::Batch(v, axis, k) => {
                let mut v = front(m, v, axis)?;
                if let (Example::Float(_), true, Some(d)) = (k, tensors, tensor_dtype) {
                    v = call(m, TOp::AsType(d), vec![v])?;
                }
                lift(m, v, &shape, rank)?
            }
            At::Plain(v) if full => {
                let mut s = vec![b];
                s.extend(std::iter::repeat_n(1, rank - shape.len()));
                s.extend_from_slice(&shape);
                let mut v = v;
                if !shape.is_empty() {
                    let mut one = vec![1];
                    one.extend_from_slice(&s[1..]);
                    v = call(m, TOp::Reshape(one), vec![v])?;
                }
                let v = call(m, TOp::BroadcastTo(s), vec![v])?;
                if tensors {
                    v
                } else {
                    // Beside a batch of Floats (float64), a Float is one too.
                    call(m, TOp::AsType(DType::F64), vec![v])?
                }
            }
            At::Plain(v) => v,
        });
    }
    Ok((out, kind))
}

/// `a p b` (arithmetic) with an operand batched at `tag`.
pub fn binary<H: Host>(m: &mut H, tag: u32, p: Prim, a: Value, b: Value) -> FResult<Value> {
    check_live(m, tag)?;
    let (a, b) = (at(a, tag), at(b, tag));
    // The common case of one shape of examples, batched alike: nothing to move.
    if let (At::Batch(va, xa, ka), At::Batch(vb, xb, kb)) = (&a, &b) {
        if xa == xb && ka == kb && shape_of(va) == shape_of(vb) {
            let y = m.prim2(p, va.clone(), vb.clone())?;
            return Ok(batched(tag, y, *xa, *ka));
        }
    }
    if let (At::Batch(va, axis, Example::Tensor), At::Plain(vb))
    | (At::Plain(vb), At::Batch(va, axis, Example::Tensor)) = (&a, &b)
    {
        // A plain Float broadcasts against the stack wherever its batch axis is.
        if !is_tensor_example(&At::Plain(vb.clone())) {
            let (x, y) = if matches!(a, At::Batch(..)) { (va.clone(), vb.clone()) } else { (vb.clone(), va.clone()) };
            let out = m.prim2(p, x, y)?;
            return Ok(batched(tag, out, *axis, Example::Tensor));
        }
    }
    let (args, kind) = align(m, vec![a, b], false)?;
    let mut args = args.into_iter();
    let (x, y) = (args.next().unwrap_or_default(), args.next().unwrap_or_default());
    let out = m.prim2(p, x, y)?;
    Ok(batched(tag, out, 0, kind))
}

/// `op x` for a math function, with `x` batched at `tag`: elementwise, so the stack as it is.
pub fn unary<H: Host>(m: &mut H, tag: u32, op: Un, x: Value) -> FResult<Value> {
    check_live(m, tag)?;
    match at(x, tag) {
        At::Batch(_, _, Example::Bool) => Err(Fault::internal(format!("`{op:?}` of a batch of Bools"))),
        At::Batch(v, axis, kind) => Ok(batched(tag, super::apply_un(m, op, v)?, axis, kind)),
        At::Plain(v) => super::apply_un(m, op, v),
    }
}

/// A comparison of Floats (`<`, `==`, …) with an operand batched at `tag`: a batch of Bools.
pub fn compare<H: Host>(m: &mut H, tag: u32, p: Prim, a: Value, b: Value) -> FResult<Value> {
    check_live(m, tag)?;
    let (a, b) = (at(a, tag), at(b, tag));
    if is_tensor_example(&a) || is_tensor_example(&b) {
        return Err(Fault::unbatched(match p {
            Prim::Eq => "==",
            Prim::Ne => "<>",
            _ => "comparison",
        }));
    }
    let c = match p {
        Prim::Lt => Cmp::Less,
        Prim::Le => Cmp::LessEqual,
        Prim::Gt => Cmp::Greater,
        Prim::Ge => Cmp::GreaterEqual,
        Prim::Eq => Cmp::Equal,
        Prim::Ne => Cmp::NotEqual,
        other => return Err(Fault::internal(format!("`{other:?}` is not a comparison"))),
    };
    // Compared as plain numbers (comparisons are not differentiated), a plain Float as a 0-d
    // tensor of the batch's dtype.
    let template = match (&a, &b) {
        (At::Batch(v, _, _), _) | (_, At::Batch(v, _, _)) => super::underlying(v),
        _ => None,
    };
    let plain = |v: At| -> FResult<Value> {
        Ok(match v {
            At::Batch(v, _, _) => strip(&v),
            At::Plain(v) => match (strip(&v), &template) {
                (Value::Float(x), Some(t)) => crate::runtime::tensor::wrap(t.full_like(&[], x)?),
                (other, _) => other,
            },
        })
    };
    let (x, y) = (plain(a)?, plain(b)?);
    let out = m.forward(&TOp::Cmp(c), &[x, y])?;
    Ok(batched(tag, out, 0, Example::Bool))
}

/// A tensor operation of the op table with an operand batched at `tag`: its batching rule.
pub fn tensor_op<H: Host>(m: &mut H, tag: u32, op: TOp, args: Vec<Value>) -> FResult<Value> {
    check_live(m, tag)?;
    let mut args: Vec<At> = args.into_iter().map(|a| at(a, tag)).collect();
    let no_rule = |op: &TOp| Err(Fault::unbatched(&op.name()));
    // The single operand, batch-first: (stack, batch size, one example's shape, kind).
    let first = |m: &mut H, args: &mut Vec<At>| -> FResult<(Value, usize, Vec<usize>, Example)> {
        let a = args.remove(0);
        let shape = example_shape(&a);
        match a {
            At::Batch(v, axis, kind) => {
                let v = front(m, v, axis)?;
                let b = shape_of(&v)[0];
                Ok((v, b, shape, kind))
            }
            At::Plain(_) => Err(Fault::internal("a batching rule's batched operand is plain")),
        }
    };
    let with_batch = |b: usize, s: &[usize]| -> Vec<usize> {
        let mut out = vec![b];
        out.extend_from_slice(s);
        out
    };
    Ok(match op {
        TOp::MatMul => {
            let b = args.pop().unwrap_or(At::Plain(Value::Unit));
            let a = args.pop().unwrap_or(At::Plain(Value::Unit));
            matmul(m, tag, a, b)?
        }
        TOp::Sum | TOp::Mean | TOp::Max | TOp::Logsumexp | TOp::Item if args.len() == 1 => {
            let (v, b, shape, kind) = first(m, &mut args)?;
            if kind != Example::Tensor {
                return no_rule(&op);
            }
            let d = float_origin(dtype_under(&v));
            let n = shape.iter().product::<usize>();
            let flat = call(m, TOp::Reshape(vec![b, n]), vec![v])?;
            let reduced = match op {
                TOp::Sum => call(m, TOp::SumAxis(1), vec![flat])?,
                TOp::Mean => call(m, TOp::MeanAxis(1), vec![flat])?,
                TOp::Max => call(m, TOp::MaxAxis(1), vec![flat])?,
                TOp::Item if n == 1 => call(m, TOp::Reshape(vec![b]), vec![flat])?,
                TOp::Item => {
                    return Err(Fault::new(format!(
                        "item: expected a tensor with one element, got shape {}",
                        crate::tensor::fmt_shape(&shape)
                    )))
                }
                _ => {
                    // log Σ exp x = c + log Σ exp (x - c), c each example's maximum (held
                    // constant: the identity holds for any c, so derivatives are unchanged).
                    let c = strip(&call(m, TOp::MaxAxis(1), vec![strip(&flat)])?);
                    let c2 = call(m, TOp::Reshape(vec![b, 1]), vec![c.clone()])?;
                    let shifted = m.prim2(Prim::Sub, flat, c2)?;
                    let e = super::apply_un(m, Un::Exp, shifted)?;
                    let s = call(m, TOp::SumAxis(1), vec![e])?;
                    let l = super::apply_un(m, Un::Log, s)?;
                    m.prim2(Prim::Add, l, c)?
                }
            };
            // One example's reduction is a Float: computed on as float64.
            let reduced = call(m, TOp::AsType(DType::F64), vec![reduced])?;
            batched(tag, reduced, 0, Example::Float(d))
        }
        TOp::SumAxis(ax) | TOp::MeanAxis(ax) | TOp::MaxAxis(ax) | TOp::ArgmaxAxis(ax) | TOp::Cumsum(ax)
            if args.len() == 1 =>
        {
            let At::Batch(v, axis, Example::Tensor) = args.remove(0) else { return no_rule(&op) };
            let here = if ax >= axis { ax + 1 } else { ax };
            let moved = match op {
                TOp::SumAxis(_) => TOp::SumAxis(here),
                TOp::MeanAxis(_) => TOp::MeanAxis(here),
                TOp::MaxAxis(_) => TOp::MaxAxis(here),
                TOp::ArgmaxAxis(_) => TOp::ArgmaxAxis(here),
                _ => TOp::Cumsum(here),
            };
            let removes = !matches!(op, TOp::Cumsum(_));
            let axis_after = if removes && here < axis { axis - 1 } else { axis };
            // An out-of-range axis is reported as one example's shape would report it.
            check_axis(&op, ax, &example_shape(&At::Batch(v.clone(), axis, Example::Tensor)))?;
            batched(tag, call(m, moved, vec![v])?, axis_after, Example::Tensor)
        }
        TOp::Softmax | TOp::LogSoftmax | TOp::Step | TOp::Sign | TOp::Not | TOp::ToDevice(_) | TOp::AsType(_)
            if args.len() == 1 =>
        {
            let At::Batch(v, axis, kind) = args.remove(0) else { return no_rule(&op) };
            // Elementwise on a batch of Floats (relu's and abs's derivatives) or of Bools too.
            let elementwise = match kind {
                Example::Tensor => true,
                Example::Float(_) => matches!(op, TOp::Step | TOp::Sign),
                Example::Bool => matches!(op, TOp::Not),
            };
            if !elementwise {
                return no_rule(&op);
            }
            if kind != Example::Tensor {
                return Ok(batched(tag, call(m, op, vec![v])?, axis, kind));
            }
            let last = shape_of(&v).len().saturating_sub(1);
            // The softmaxes work on the last axis: it must be an example's.
            let (v, axis) = if matches!(op, TOp::Softmax | TOp::LogSoftmax) && axis == last && last > 0 {
                (front(m, v, axis)?, 0)
            } else {
                (v, axis)
            };
            batched(tag, call(m, op, vec![v])?, axis, Example::Tensor)
        }
        TOp::Reshape(s) => {
            let (v, b, _, kind) = first(m, &mut args)?;
            if kind != Example::Tensor {
                return no_rule(&TOp::Reshape(s));
            }
            batched(tag, call(m, TOp::Reshape(with_batch(b, &s)), vec![v])?, 0, Example::Tensor)
        }
        TOp::Transpose | TOp::Permute(_) => {
            let (v, _, shape, kind) = first(m, &mut args)?;
            if kind != Example::Tensor {
                return no_rule(&op);
            }
            let r = shape.len();
            let perm: Vec<usize> = match &op {
                TOp::Transpose => (0..r).rev().collect(),
                TOp::Permute(p) => p.clone(),
                _ => unreachable!("matched above"),
            };
            if perm.len() != r {
                // One example's operation would refuse it: let it say why.
                return call(m, op, vec![v]).and(Err(Fault::internal("a permutation of another rank")));
            }
            let mut full = vec![0];
            full.extend(perm.iter().map(|p| p + 1));
            batched(tag, call(m, TOp::Permute(full), vec![v])?, 0, Example::Tensor)
        }
        TOp::Row(i) => {
            let At::Batch(v, axis, Example::Tensor) = args.remove(0) else { return no_rule(&TOp::Row(i)) };
            if axis > 0 {
                // The row axis is before the batch axis: take the row of the stack.
                batched(tag, call(m, TOp::Row(i), vec![v])?, axis - 1, Example::Tensor)
            } else {
                let shape = shape_of(&v);
                if shape.len() < 2 || i >= shape[1] {
                    return Err(Fault::new(format!(
                        "row {i} of a tensor of shape {}",
                        crate::tensor::fmt_shape(&shape[1..])
                    )));
                }
                let sliced = call(m, TOp::Slice(1, i, i + 1), vec![v])?;
                let mut rest = shape.clone();
                rest.remove(1);
                batched(tag, call(m, TOp::Reshape(rest), vec![sliced])?, 0, Example::Tensor)
            }
        }
        TOp::ScatterRow(i, s) => {
            let (v, b, shape, _) = first(m, &mut args)?;
            let mut one = vec![b, 1];
            one.extend_from_slice(&shape);
            let v = call(m, TOp::Reshape(one), vec![v])?;
            batched(tag, call(m, TOp::Unslice(1, i, with_batch(b, &s)), vec![v])?, 0, Example::Tensor)
        }
        TOp::Slice(ax, lo, hi) => {
            let At::Batch(v, axis, Example::Tensor) = args.remove(0) else { return no_rule(&op) };
            let here = if ax >= axis { ax + 1 } else { ax };
            check_axis(&op, ax, &example_shape(&At::Batch(v.clone(), axis, Example::Tensor)))?;
            batched(tag, call(m, TOp::Slice(here, lo, hi), vec![v])?, axis, Example::Tensor)
        }
        TOp::Unslice(ax, lo, s) => {
            let (v, b, _, _) = first(m, &mut args)?;
            batched(tag, call(m, TOp::Unslice(ax + 1, lo, with_batch(b, &s)), vec![v])?, 0, Example::Tensor)
        }
        TOp::BroadcastTo(ref s) | TOp::SumTo(ref s) => {
            let is_sum = matches!(op, TOp::SumTo(_));
            let s = s.clone();
            let (mut v, b, shape, kind) = first(m, &mut args)?;
            if let Example::Float(_) = kind {
                // A Float spread over a shape is a float32 tensor, as `full` makes it.
                v = call(m, TOp::AsType(DType::F32), vec![v])?;
            } else if kind == Example::Bool {
                return no_rule(&op);
            }
            if is_sum {
                // Axes an example has beyond the target's rank are summed first: `SumTo` of
                // the stack aligns shapes from the right, where the batch axis would meet them.
                for _ in s.len()..shape.len() {
                    v = call(m, TOp::SumAxis(1), vec![v])?;
                }
                let kept = shape.len().min(s.len());
                let rest = &shape[shape.len() - kept..];
                v = lift(m, v, rest, s.len())?;
                batched(tag, call(m, TOp::SumTo(with_batch(b, &s)), vec![v])?, 0, Example::Tensor)
            } else {
                if shape.len() > s.len() {
                    return Err(Fault::new(format!(
                        "cannot broadcast shape {} to {}",
                        crate::tensor::fmt_shape(&shape),
                        crate::tensor::fmt_shape(&s)
                    )));
                }
                let v = lift(m, v, &shape, s.len())?;
                batched(tag, call(m, TOp::BroadcastTo(with_batch(b, &s)), vec![v])?, 0, Example::Tensor)
            }
        }
        TOp::Concat(ax) => {
            let (parts, _) = align_parts(m, args)?;
            batched(tag, call(m, TOp::Concat(ax + 1), parts)?, 0, Example::Tensor)
        }
        // Elementwise, broadcasting: the operands lined up as one example's would be.
        TOp::Cmp(_) | TOp::Where => {
            let (parts, _) = align(m, args, false)?;
            batched(tag, call(m, op, parts)?, 0, Example::Tensor)
        }
        // Elementwise on operands of one shape.
        TOp::Mask => {
            let (parts, kind) = align(m, args, true)?;
            batched(tag, call(m, op, parts)?, 0, kind)
        }
        // On image stacks: one call on all the examples' images.
        TOp::MaxPool2d(_) | TOp::MaxPool2dGrad(_) | TOp::MaxPool2dPick(_) => {
            let (parts, _) = align(m, args, true)?;
            per_image(m, tag, &op, parts)?
        }
        TOp::Conv2d(_) | TOp::Conv2dInputGrad(_) if matches!(args.get(1), Some(At::Plain(_))) => {
            let w = args.remove(1);
            let (mut parts, _) = align(m, args, true)?;
            if let At::Plain(w) = w {
                parts.insert(1, w);
            }
            per_image(m, tag, &op, parts)?
        }
        TOp::Gather(ax) if matches!(args[1], At::Plain(_)) => {
            let idx = args.remove(1);
            let At::Batch(v, axis, Example::Tensor) = args.remove(0) else { return no_rule(&op) };
            let At::Plain(idx) = idx else { return no_rule(&op) };
            let v = front(m, v, axis)?;
            batched(tag, call(m, TOp::Gather(ax + 1), vec![v, idx])?, 0, Example::Tensor)
        }
        TOp::ScatterAdd(ax, s) if matches!(args[1], At::Plain(_)) => {
            let idx = args.remove(1);
            let (v, b, _, _) = first(m, &mut args)?;
            let At::Plain(idx) = idx else { return no_rule(&TOp::ScatterAdd(ax, s)) };
            batched(tag, call(m, TOp::ScatterAdd(ax + 1, with_batch(b, &s)), vec![v, idx])?, 0, Example::Tensor)
        }
        TOp::ArgmaxMask => {
            // 1 at each example's first maximum: its position along the flattened example,
            // compared with every position.
            let (v, b, shape, kind) = first(m, &mut args)?;
            if kind != Example::Tensor {
                return no_rule(&TOp::ArgmaxMask);
            }
            let d = dtype_under(&v);
            let n = shape.iter().product::<usize>();
            let flat = call(m, TOp::Reshape(vec![b, n]), vec![strip(&v)])?;
            let at = call(m, TOp::ArgmaxAxis(1), vec![flat])?;
            let at = call(m, TOp::Reshape(vec![b, 1]), vec![at])?;
            let at = call(m, TOp::AsType(DType::I64), vec![at])?;
            let positions =
                crate::runtime::tensor::wrap(crate::tensor::Tensor::from_i64s(&[n], (0..n as i64).collect())?);
            let device = super::underlying(&v).map_or(crate::tensor::Device::Cpu, |t| t.device());
            let positions = call(m, TOp::ToDevice(device), vec![positions])?;
            let hot = call(m, TOp::Cmp(Cmp::Equal), vec![at, positions])?;
            let hot = call(m, TOp::AsType(d), vec![hot])?;
            batched(tag, call(m, TOp::Reshape(with_batch(b, &shape)), vec![hot])?, 0, Example::Tensor)
        }
        other => return no_rule(&other),
    })
}

/// An axis argument beyond one example's rank: the error one example's operation gives.
fn check_axis(op: &TOp, ax: usize, example: &[usize]) -> FResult<()> {
    if ax < example.len() {
        return Ok(());
    }
    Err(Fault::new(format!(
        "{}: axis {ax} is out of range for a tensor of shape {}",
        op.name(),
        crate::tensor::fmt_shape(example)
    )))
}

/// `concat`'s parts, batch-first, the plain ones broadcast over the batch (a concatenation
/// has no broadcasting of its own).
fn align_parts<H: Host>(m: &mut H, args: Vec<At>) -> FResult<(Vec<Value>, Example)> {
    if args.iter().any(|a| !is_tensor_example(a)) {
        return Err(Fault::unbatched("concat"));
    }
    // Parts keep their own shapes: each is lined up on its own, not to a common rank.
    let b = args
        .iter()
        .find_map(|a| match a {
            At::Batch(v, axis, _) => Some(shape_of(v)[*axis]),
            At::Plain(_) => None,
        })
        .unwrap_or(0);
    let mut out = Vec::new();
    for a in args {
        out.push(match a {
            At::Batch(v, axis, _) => front(m, v, axis)?,
            At::Plain(v) => {
                let s = shape_of(&v);
                let mut one = vec![1];
                one.extend_from_slice(&s);
                let v = call(m, TOp::Reshape(one), vec![v])?;
                let mut full = vec![b];
                full.extend_from_slice(&s);
                call(m, TOp::BroadcastTo(full), vec![v])?
            }
        });
    }
    Ok((out, Example::Tensor))
}

/// The image operations (convolution, pooling and their adjoints) on a batch of image stacks
/// [B, N, C, H, W]: one call on the B·N images, shaped back. `parts` are batch-first, the
/// weights (never batched here) plain.
fn per_image<H: Host>(m: &mut H, tag: u32, op: &TOp, parts: Vec<Value>) -> FResult<Value> {
    let mut flat = Vec::with_capacity(parts.len());
    let mut b = 0;
    for (i, p) in parts.into_iter().enumerate() {
        let is_weights = i == 1 && matches!(op, TOp::Conv2d(_) | TOp::Conv2dInputGrad(_));
        if is_weights {
            flat.push(p);
            continue;
        }
        let s = shape_of(&p);
        if s.len() != 5 {
            // One example's operation would refuse a non-NCHW operand: let it say why.
            let mut one = s.clone();
            one.remove(0);
            return Err(Fault::new(format!(
                "{}: expected an image stack of rank 4 (N, C, H, W), got shape {}",
                op.name(),
                crate::tensor::fmt_shape(&one)
            )));
        }
        b = s[0];
        flat.push(call(m, TOp::Reshape(vec![s[0] * s[1], s[2], s[3], s[4]]), vec![p])?);
    }
    let out = call(m, op.clone(), flat)?;
    let s = shape_of(&out);
    let n = s[0] / b.max(1);
    let shaped = call(m, TOp::Reshape(vec![b, n, s[1], s[2], s[3]]), vec![out])?;
    Ok(batched(tag, shaped, 0, Example::Tensor))
}

/// `a @ b` with an operand batched at `tag`: one product on the stacks (a batch of vectors
/// against a plain matrix is one matrix product).
fn matmul<H: Host>(m: &mut H, tag: u32, a: At, b: At) -> FResult<Value> {
    let (sa, sb) = (example_shape(&a), example_shape(&b));
    if sa.is_empty() || sb.is_empty() || !is_tensor_example(&a) || !is_tensor_example(&b) {
        return Err(Fault::new(format!(
            "`@` multiplies matrices and vectors (rank 1 or more); got shapes {} and {}",
            crate::tensor::fmt_shape(&sa),
            crate::tensor::fmt_shape(&sb)
        )));
    }
    // One example's product decides the shape (and reports a mismatch as it would).
    let out = crate::tensor::op::matmul_shape(&sa, &sb)?;
    let dtype = match (&a, &b) {
        (At::Batch(v, _, _), _) | (_, At::Batch(v, _, _)) => dtype_under(v),
        _ => DType::F32,
    };
    // A product of two vectors is a Float per example.
    let result = |m: &mut H, v: Value, axis: usize| -> FResult<Value> {
        if out.is_empty() {
            let v = call(m, TOp::AsType(DType::F64), vec![v])?;
            Ok(batched(tag, v, 0, Example::Float(float_origin(dtype))))
        } else {
            Ok(batched(tag, v, axis, Example::Tensor))
        }
    };
    match (a, b) {
        (At::Batch(va, xa, _), At::Plain(w)) => {
            let va = front(m, va, xa)?;
            if sa.len() == 1 {
                // A batch of row vectors is a matrix [B, n]: x @ w for each row at once. Against
                // a stack of matrices the batch lands on the second-to-last axis.
                let y = call(m, TOp::MatMul, vec![va, w])?;
                let axis = if sb.len() >= 3 { sb.len() - 2 } else { 0 };
                return result(m, y, axis);
            }
            // Stacks of matrices: the batch is one more stack axis, in front of w's.
            let va = lift(m, va, &sa, sb.len().max(sa.len()))?;
            let y = call(m, TOp::MatMul, vec![va, w])?;
            result(m, y, 0)
        }
        (At::Plain(w), At::Batch(vb, xb, _)) => {
            let vb = front(m, vb, xb)?;
            if sb.len() == 1 {
                if sa.len() == 2 {
                    // W x for every x: X Wᵀ, [B, n] by [n, m], one matrix product.
                    let wt = call(m, TOp::Transpose, vec![w])?;
                    let y = call(m, TOp::MatMul, vec![vb, wt])?;
                    return result(m, y, 0);
                }
                if sa.len() == 1 {
                    // w · x for every x: X w.
                    let y = call(m, TOp::MatMul, vec![vb, w])?;
                    return result(m, y, 0);
                }
                // A stack of matrices times each x: W Xᵀ, the batch on the last axis.
                let xt = call(m, TOp::Transpose, vec![vb])?;
                let y = call(m, TOp::MatMul, vec![w, xt])?;
                let axis = shape_of(&y).len() - 1;
                return result(m, y, axis);
            }
            let vb = lift(m, vb, &sb, sa.len().max(sb.len()))?;
            let y = call(m, TOp::MatMul, vec![w, vb])?;
            result(m, y, 0)
        }
        (At::Batch(va, xa, _), At::Batch(vb, xb, _)) => {
            // Both batched: a product of stacks, vectors made single rows and columns.
            let (va, vb) = (front(m, va, xa)?, front(m, vb, xb)?);
            let bsz = shape_of(&va)[0];
            let as_matrix = |m: &mut H, v: Value, s: &[usize], row: bool| -> FResult<(Value, Vec<usize>)> {
                if s.len() != 1 {
                    return Ok((v, s.to_vec()));
                }
                let s2 = if row { vec![1, s[0]] } else { vec![s[0], 1] };
                let v = call(m, TOp::Reshape(vec![bsz, s2[0], s2[1]]), vec![v])?;
                Ok((v, s2))
            };
            let (va, sa2) = as_matrix(m, va, &sa, true)?;
            let (vb, sb2) = as_matrix(m, vb, &sb, false)?;
            let rank = sa2.len().max(sb2.len());
            let va = lift(m, va, &sa2, rank)?;
            let vb = lift(m, vb, &sb2, rank)?;
            let y = call(m, TOp::MatMul, vec![va, vb])?;
            let y = call(m, TOp::Reshape(std::iter::once(bsz).chain(out.iter().copied()).collect()), vec![y])?;
            result(m, y, 0)
        }
        (At::Plain(_), At::Plain(_)) => Err(Fault::internal("a batching rule with no batched operand")),
    }
}

/// `vmap`'s argument: every Tensor leaf of `x` batched at `tag` along its axis 0 (its length,
/// the batch size, the same for all); other leaves are the same for every example.
pub fn start<H: Host>(m: &mut H, x: &Value, tag: u32) -> FResult<(Value, usize)> {
    let mut size: Option<(usize, Vec<usize>)> = None;
    let v = super::map_leaves(x.clone(), &mut |leaf| {
        let leaf = super::live(m, leaf);
        // A Tensor leaf: plain, batched by an outer `vmap`, or traced by `jit`.
        if !super::is_tensor(&leaf) {
            return Ok(leaf);
        }
        let s = shape_of(&leaf);
        let Some(&n) = s.first() else {
            return Err(Fault::new("vmap maps over axis 0 of every Tensor of its argument, but one has shape []")
                .help("a 0-d tensor has no axis to map over: pass it inside a Float, or give it an axis"));
        };
        match &size {
            Some((b, other)) if *b != n => {
                return Err(Fault::new(format!(
                    "vmap: the argument's tensors disagree on the batch size: axis 0 of shape {} is {b}, of shape {} is {n}",
                    crate::tensor::fmt_shape(other),
                    crate::tensor::fmt_shape(&s)
                )))
            }
            Some(_) => {}
            None => size = Some((n, s)),
        }
        Ok(batched(tag, leaf, 0, Example::Tensor))
    })?;
    let Some((b, _)) = size else {
        return Err(Fault::new("vmap: the argument holds no Tensor to map over")
            .help("vmap maps over axis 0 of the argument's tensors; Floats and other values are passed to every example as they are"));
    };
    Ok((v, b))
}

/// `vmap`'s result: each leaf of `f`'s result stacked along a new axis 0 — a batched one its
/// stack batch-first (a batch of Floats in the dtype of the data it came from), one that is
/// the same for every example broadcast over the `size` examples.
pub fn finish<H: Host>(m: &mut H, tag: u32, size: usize, y: Value) -> FResult<Value> {
    super::map_leaves(y, &mut |leaf| match at(leaf, tag) {
        At::Batch(v, axis, Example::Float(d)) => {
            let v = front(m, v, axis)?;
            call(m, TOp::AsType(d), vec![v])
        }
        At::Batch(v, axis, _) => front(m, v, axis),
        At::Plain(v) => {
            let s = shape_of(&v);
            let mut full = vec![size];
            full.extend_from_slice(&s);
            match strip(&v) {
                w if !super::is_tensor(&w) => call(m, TOp::BroadcastTo(full), vec![v]),
                _ => {
                    let mut one = vec![1];
                    one.extend_from_slice(&s);
                    let v = call(m, TOp::Reshape(one), vec![v])?;
                    call(m, TOp::BroadcastTo(full), vec![v])
                }
            }
        }
    })
}

/// Whether a leaf of `x` is perturbed, under its batching layers, by a `grad` or `jvp` level
/// (one outside a `vmap` that batches it).
pub fn perturbed_under_batch(x: &Value) -> bool {
    let mut found = false;
    let _ = super::map_leaves(x.clone(), &mut |leaf| {
        let mut v = &leaf;
        while let Value::Batched(b) = v {
            v = &b.value;
        }
        if matches!(v, Value::Tracked(_) | Value::Dual(_)) && matches!(leaf, Value::Batched(_)) {
            found = true;
        }
        Ok(leaf.clone())
    });
    found
}
