//! Differentiation as delimited-continuation handlers (DESIGN.md principle 3), written against
//! a host (`Host`, host.rs) rather than the machine: everything here is generic over it.
//!
//! **What is built.** `grad f x` (the machine's `Control::Grad`) takes a fresh tag, wraps the
//! leaves of `x` in tracked values (`wrap`), and runs `f` in a segment delimited by
//! `GradPrompt(tag)`, which sits on a segment whose delimiter, `GradHandler`, holds the level's
//! state (`GradState`). In the shift/reset model (docs/grad.md §2) a primitive meeting a tracked
//! value would `shift` to that prompt, compute `y`, call `k y`, and when `k` returns add
//! `adj(y) · ∂y/∂input` to each input's adjoint. Two refinements make that O(1) per operation:
//! - the capture and the resumption are fused: `k y` would put the captured frames back
//!   exactly where they were, so they are never moved;
//! - the after-code is defunctionalised: it is always "scale the output's adjoint by these
//!   partials and add it to these cells", so it is kept as data — an adjoint record
//!   (`AdjFrame`) pushed onto the list in the handler's delimiter — instead of a suspended
//!   Rust or dp computation.
//!   Where the partials themselves are tensor work (a tracked tensor `sin`, `tanh`, `/`,
//!   `**`, …), the record saves the primals instead (`AdjFrame::Deferred`) and the backward
//!   pass computes the partials, only for records an adjoint reaches.
//!
//! When `f` returns to its prompt, `backward` seeds the output's adjoint and runs the records
//! last first: the order in which the nested `k y` calls would have returned.
//!
//! **Why this is faithful to the shift/reset model**, not a tape kept beside it: the records
//! live in the handler's delimiter, that is, *in the continuation*, so what the continuation
//! semantics gives still holds by the same mechanism. A continuation captured inside `f` and
//! resumed several times (multi-shot) copies the handler segment with its records, and each
//! run's backward pass starts from zero adjoints. A tracked value that escapes its `grad`
//! finds no delimiter for its tag (`Host::handler` is `None`) and behaves as its primal.
//! Nested `grad`s are distinct delimiters with distinct tags, so their records never mix; the
//! rules compute with the host's generic arithmetic, so an inner backward pass, run while the
//! outer `grad` is live, is recorded by the outer level like any other code. `jvp` is a
//! delimiter too (`Jvp(tag)`), holding nothing (forward mode needs no continuation), so that
//! every running level is a segment boundary: whether a level is live, and which of two is
//! nested in the other, is read off the delimiters — the host indexes the running ones, so
//! each question costs O(levels) (`innermost`, `live`).
//!
//! The data (tracked values, dual numbers, adjoint records) is the run-time layer's
//! (runtime/perturbed.rs); the rules — `rules.rs` for scalars, `tensor.rs` for tensor
//! operations, `matmul.rs` for the fused reverse rule of `@` — are the one table of derivatives
//! for both modes.

pub mod batch;
mod custom;
mod host;
mod matmul;
pub mod rules;
pub mod tensor;

use crate::core::Prim;
use crate::runtime::perturbed::{
    is_ad, strip, tag_of, AdjFrame, Deferred, DeferredFrame, Dual, Example, GradState, OpFrame, Operand, RuleCall,
    StagedFrame, Suspended, Tracked,
};
use crate::runtime::value::{RecordVal, Value};
use crate::runtime::{FResult, Fault};
use crate::tensor::{TOp, Tensor, Un};
pub use custom::{custom_site, dual_result, peel, record_custom, resume_backward, spread_all, tangents_at, Site};
pub use host::Host;
use std::cell::RefCell;
use std::rc::Rc;

/// `stop_gradient`: strips perturbations throughout a structure.
pub fn strip_deep(v: &Value) -> Value {
    map_leaves(v.clone(), &mut |x| Ok(strip(&x))).unwrap_or_else(|_| v.clone())
}

/// Maps the differentiable leaves (Floats and perturbed values) of a structure. The structure
/// comes by value: parts only this caller holds are taken apart rather than copied, so leaves
/// reach `f` uniquely owned when they can (the tree builtins then update tensors in place).
pub fn map_leaves(v: Value, f: &mut dyn FnMut(Value) -> FResult<Value>) -> FResult<Value> {
    Ok(match v {
        Value::Float(_)
        | Value::Tracked(_)
        | Value::Dual(_)
        | Value::Batched(_)
        | Value::Tensor(_)
        | Value::Staged(_)
        | Value::StagedFloat(_) => f(v)?,
        Value::Tuple(vs) => {
            Value::Tuple(Rc::new(take(vs).into_iter().map(|x| map_leaves(x, f)).collect::<FResult<_>>()?))
        }
        Value::Record(r) => {
            let RecordVal { names, values } = take(r);
            Value::Record(Rc::new(RecordVal {
                names,
                values: values.into_iter().map(|x| map_leaves(x, f)).collect::<FResult<_>>()?,
            }))
        }
        Value::Nil | Value::Cons(_) => {
            let items = take_list(v).into_iter().map(|x| map_leaves(x, f)).collect::<FResult<Vec<_>>>()?;
            Value::list(items.into_iter())
        }
        other => other,
    })
}

/// Zips the leaves of two structures of the same shape (by value, as `map_leaves`).
pub fn zip_leaves(a: Value, b: Value, f: &mut dyn FnMut(Value, Value) -> FResult<Value>) -> FResult<Value> {
    zip_leaves_or(
        a,
        b,
        &|n, m| format!("two structures that must have the same shape hold lists of {n} and {m} elements"),
        f,
    )
}

/// `zip_leaves`, with the message for lists of different lengths (`a`'s length, `b`'s).
fn zip_leaves_or(
    a: Value,
    b: Value,
    mismatch: &dyn Fn(usize, usize) -> String,
    f: &mut dyn FnMut(Value, Value) -> FResult<Value>,
) -> FResult<Value> {
    let go = |p, q, f: &mut dyn FnMut(Value, Value) -> FResult<Value>| zip_leaves_or(p, q, mismatch, f);
    Ok(match (a, b) {
        (Value::Tuple(x), Value::Tuple(y)) if x.len() == y.len() => {
            Value::Tuple(Rc::new(take(x).into_iter().zip(take(y)).map(|(p, q)| go(p, q, f)).collect::<FResult<_>>()?))
        }
        (Value::Record(x), Value::Record(y)) if x.names == y.names => {
            let (RecordVal { names, values: xs }, ys) = (take(x), take(y).values);
            Value::Record(Rc::new(RecordVal {
                names,
                values: xs.into_iter().zip(ys).map(|(p, q)| go(p, q, f)).collect::<FResult<_>>()?,
            }))
        }
        (a @ (Value::Nil | Value::Cons(_)), b @ (Value::Nil | Value::Cons(_))) => {
            let (xs, ys) = (take_list(a), take_list(b));
            if xs.len() != ys.len() {
                return Err(Fault::new(mismatch(xs.len(), ys.len())));
            }
            let items = xs.into_iter().zip(ys).map(|(p, q)| go(p, q, f)).collect::<FResult<Vec<_>>>()?;
            Value::list(items.into_iter())
        }
        (a, b) => f(a, b)?,
    })
}

/// The contents of a shared node: moved out when this is the only holder, copied otherwise.
fn take<T: Clone>(r: Rc<T>) -> T {
    Rc::try_unwrap(r).unwrap_or_else(|shared| (*shared).clone())
}

/// A list's elements, taking cells apart where this is their only holder.
fn take_list(mut l: Value) -> Vec<Value> {
    let mut out = Vec::new();
    while let Value::Cons(cell) = l {
        l = match Rc::try_unwrap(cell) {
            // ConsCell's Drop unlinks long tails iteratively, so the fields are swapped out.
            Ok(mut c) => {
                out.push(std::mem::take(&mut c.head));
                std::mem::take(&mut c.tail)
            }
            Err(shared) => {
                out.push(shared.head.clone());
                shared.tail.clone()
            }
        };
    }
    out
}

/// `grad`'s argument: every differentiable leaf tracked by `tag`.
pub fn wrap(x: &Value, tag: u32) -> FResult<Value> {
    map_leaves(x.clone(), &mut |leaf| {
        Ok(Value::Tracked(Rc::new(Tracked { tag, primal: leaf, adj: RefCell::new(None) })))
    })
}

/// `jvp`'s argument: dual numbers pairing each leaf of `x` with the leaf of `v`.
pub fn dual(x: &Value, v: &Value, tag: u32) -> FResult<Value> {
    zip_leaves_or(
        x.clone(),
        v.clone(),
        &|n, m| format!("jvp: the tangent list has {m} elements, the point {n}"),
        &mut |primal, tangent| Ok(Value::Dual(Rc::new(Dual { tag, primal, tangent }))),
    )
}

/// The value at `tag`'s level: its primal if it is perturbed by `tag`, itself otherwise.
fn primal_at(v: &Value, tag: u32) -> Value {
    match v {
        Value::Tracked(t) if t.tag == tag => t.primal.clone(),
        Value::Dual(d) if d.tag == tag => d.primal.clone(),
        other => other.clone(),
    }
}

pub fn apply_un<H: Host>(m: &mut H, op: Un, x: Value) -> FResult<Value> {
    match x {
        Value::Float(f) => Ok(Value::Float(op.eval(f))),
        Value::Tensor(t) => Ok(Value::Tensor(Rc::new(m.unary(op, t)?))),
        Value::Staged(_) | Value::StagedFloat(_) => m.un_other(op, x),
        other => unary(m, op, other),
    }
}

/// The shape of a (possibly perturbed, batched or traced) value as the program sees it: [] for
/// Floats, one example's for a batched value.
pub fn shape_of(v: &Value) -> Vec<usize> {
    match strip(v) {
        Value::Tensor(t) => t.shape().to_vec(),
        Value::Batched(b) if b.kind == Example::Tensor => {
            let mut s = shape_of(&b.value);
            if b.axis < s.len() {
                s.remove(b.axis);
            }
            s
        }
        Value::Staged(s) => s.example.shape().to_vec(),
        _ => Vec::new(),
    }
}

/// The dtype of a (possibly perturbed, batched or traced) tensor; None for Floats.
pub fn dtype_of(v: &Value) -> Option<crate::tensor::DType> {
    match strip(v) {
        Value::Tensor(t) => Some(t.dtype()),
        Value::Batched(b) if b.kind == Example::Tensor => dtype_of(&b.value),
        Value::Staged(s) => Some(s.example.dtype()),
        _ => None,
    }
}

/// The plain tensor under every layer of `v` (perturbations, batches, a traced value's example;
/// see runtime/staged.rs), if it is one: what a new tensor of the same dtype and device is
/// made like. Its shape is the whole batch's for a batched value (`shape_of` is the program's),
/// and a traced value's numbers are one call's, never to be computed with.
pub fn underlying(v: &Value) -> Option<Rc<Tensor>> {
    match strip(v) {
        Value::Tensor(t) => Some(t),
        Value::Batched(b) => underlying(&b.value),
        Value::Staged(s) => Some(s.example.clone()),
        _ => None,
    }
}

/// A plain tensor of `v`'s shape (one example's, for a batched value), dtype and device, filled
/// with `z` (a tangent given as a Float for a tensor).
pub fn full_like(v: &Value, z: f64) -> FResult<Value> {
    let shape = shape_of(v);
    Ok(Value::Tensor(Rc::new(match underlying(v) {
        Some(t) => t.full_like(&shape, z)?,
        None => Tensor::full(&shape, z as f32),
    })))
}

/// A zero of the same shape as `v` (one example's, for a batched value: the same for all), a
/// plain constant also for a traced `v`.
pub fn zero_like(v: &Value) -> Value {
    match strip(v) {
        Value::Tensor(t) => Value::Tensor(Rc::new(t.zeros_like().unwrap_or_else(|_| Tensor::zeros(t.shape())))),
        w if is_tensor(&w) => {
            full_like(&w, 0.0).unwrap_or_else(|_| Value::Tensor(Rc::new(Tensor::zeros(&shape_of(&w)))))
        }
        _ => Value::Float(0.0),
    }
}

/// A tensor operation applied to perturbed arguments (see `tensor::call`).
pub fn tensor_op<H: Host>(m: &mut H, op: TOp, args: Vec<Value>) -> FResult<Value> {
    let args: Vec<Value> = args.into_iter().map(|a| live(m, a)).collect();
    if !args.iter().any(is_ad) {
        return m.forward(&op, &args);
    }
    let tag = args.iter().map(tag_of).fold(0, |t, u| innermost(m, t, u));
    if batch::is_batch_level(args.iter(), tag) {
        return batch::tensor_op(m, tag, op, args);
    }
    let primals: Vec<Value> = args.iter().map(|a| primal_at(a, tag)).collect();
    let y = tensor::call(m, op.clone(), primals.clone())?;
    if args.iter().any(|a| matches!(a, Value::Dual(d) if d.tag == tag)) {
        // A zero tangent may be a plain 0.0; tensor rules want tensors (or None for zero).
        let tangents: Vec<Option<Value>> = args
            .iter()
            .map(|a| {
                Ok(match a {
                    Value::Dual(d) if d.tag == tag => match &d.tangent {
                        Value::Float(z) if *z == 0.0 && is_tensor(&d.primal) => None,
                        Value::Float(z) if is_tensor(&d.primal) => Some(full_like(&d.primal, *z)?),
                        t => Some(t.clone()),
                    },
                    _ => None,
                })
            })
            .collect::<FResult<_>>()?;
        let tangent = tensor::jvp(m, &op, &primals, &y, &tangents)?;
        return Ok(Value::Dual(Rc::new(Dual { tag, primal: y, tangent })));
    }
    let inputs: Vec<Option<Rc<Tracked>>> = args
        .iter()
        .map(|a| match a {
            Value::Tracked(t) if t.tag == tag => Some(t.clone()),
            _ => None,
        })
        .collect();
    let out = Rc::new(Tracked { tag, primal: y.clone(), adj: RefCell::new(None) });
    match m.handler(tag) {
        Some(h) => h.record(AdjFrame::Op(Box::new(OpFrame { out: out.clone(), op, inputs, primals }))),
        None => return Ok(out.primal.clone()),
    }
    Ok(Value::Tracked(out))
}

/// Of two live levels, the one nested inside the other: its delimiter sits higher on the
/// machine's stack. Usually that is the newer tag, but a continuation captured inside an older
/// `grad` and resumed inside a newer one reinstates the older level above the newer.
fn innermost<H: Host>(m: &H, a: u32, b: u32) -> u32 {
    if a == 0 || b == 0 || a == b {
        return a.max(b);
    }
    m.inner_level(a, b).unwrap_or(a.max(b))
}

/// `live` on every leaf of a level's result, before that level ends: a leaf that escaped a
/// finished inner level and was returned with no operation applied would otherwise hide the
/// running levels' perturbations beneath a dead one (read as a constant: derivative 0).
pub fn settle<H: Host>(m: &mut H, v: Value) -> FResult<Value> {
    match v {
        // The common result: nothing to strip.
        Value::Float(_) | Value::Tensor(_) => Ok(v),
        v => map_leaves(v, &mut |leaf| Ok(live(m, leaf))),
    }
}

/// Strips the perturbations of handlers that are no longer running: a value that escaped its
/// `grad` or `jvp` (through a reference cell, say) is a plain value of the levels still live.
fn live<H: Host>(m: &mut H, v: Value) -> Value {
    let mut v = v;
    loop {
        v = match v {
            Value::Tracked(t) if m.handler(t.tag).is_none() => t.primal.clone(),
            Value::Dual(d) if !m.level_is_live(d.tag) => d.primal.clone(),
            other => return other,
        }
    }
}

pub fn unary<H: Host>(m: &mut H, op: Un, x: Value) -> FResult<Value> {
    let x = live(m, x);
    if !is_ad(&x) {
        return apply_un(m, op, x);
    }
    let tag = tag_of(&x);
    if tag == 0 {
        return Err(Fault::internal(format!("`{op:?}` on {}", x.type_name())));
    }
    if let Value::Batched(_) = x {
        return batch::unary(m, tag, op, x);
    }
    let p = primal_at(&x, tag);
    let y = apply_un(m, op, p.clone())?;
    match &x {
        Value::Dual(d) => {
            let dy = rules::un_deriv(op, m, &p, &y)?;
            let tangent = rules::apply_deriv(op, m, d.tangent.clone(), dy)?;
            Ok(Value::Dual(Rc::new(Dual { tag, primal: y, tangent })))
        }
        Value::Tracked(t) => {
            let tensor = is_tensor(&p);
            // On a tensor the derivative is tensor work: left to the backward pass.
            let dy = if tensor { None } else { Some(rules::un_deriv(op, m, &p, &y)?) };
            let out = Rc::new(Tracked { tag, primal: y, adj: RefCell::new(None) });
            let frame = match dy {
                // A traced mask is a select too (what it selects is known only at run time).
                Some(dy) if rules::selects(op) && !matches!(dy, Value::Float(_)) => {
                    AdjFrame::Deferred(Box::new(DeferredFrame { out: out.clone(), op: Deferred::Un(op, t.clone()) }))
                }
                // A selected-out derivative (relu at x ≤ 0 or NaN) still sends back an exact
                // zero, as JAX's select does: the zero then meets the partials below it, so a
                // NaN partial there gives NaN, while an infinite adjoint from above gives 0
                // (a Scale frame would multiply it: 0 · inf). The deferred frame selects.
                Some(Value::Float(z)) if rules::selects(op) && z == 0.0 => {
                    AdjFrame::Deferred(Box::new(DeferredFrame { out: out.clone(), op: Deferred::Un(op, t.clone()) }))
                }
                Some(dy) => AdjFrame::Scale { out: out.clone(), a: Some((t.clone(), dy)), b: None },
                None => {
                    AdjFrame::Deferred(Box::new(DeferredFrame { out: out.clone(), op: Deferred::Un(op, t.clone()) }))
                }
            };
            match m.handler(tag) {
                Some(h) => h.record(frame),
                None => return Ok(out.primal.clone()),
            }
            Ok(Value::Tracked(out))
        }
        _ => unreachable!("tag_of said perturbed"),
    }
}

pub fn binary<H: Host>(m: &mut H, p: Prim, a: Value, b: Value) -> FResult<Value> {
    let (a, b) = (live(m, a), live(m, b));
    if !is_ad(&a) && !is_ad(&b) {
        return m.prim2(p, a, b);
    }
    let tag = innermost(m, tag_of(&a), tag_of(&b));
    if batch::is_batch_level([&a, &b].into_iter(), tag) {
        return batch::binary(m, tag, p, a, b);
    }
    let (pa, pb) = (primal_at(&a, tag), primal_at(&b, tag));
    let (a_in, b_in) = (tag_of(&a) == tag, tag_of(&b) == tag);
    if p == Prim::Pow && !b_in && matches!(strip(&pb), Value::Float(z) if z == 0.0) {
        // a ** 0 is constant in a, as JAX's `integer_pow(a, 0)` rule: its tangent is a
        // concrete zero (which then meets the partials after it, 0 / 0 = NaN), while reverse
        // mode records nothing, since a recorded zero partial would multiply adjoints that may
        // be infinite (0 · inf).
        let y = m.prim2(p, pa, pb)?;
        return Ok(match (a_in, &a) {
            (true, Value::Dual(_)) => Value::Dual(Rc::new(Dual { tag, tangent: zero_like(&y), primal: y })),
            _ => y,
        });
    }
    let is_dual = matches!(if a_in { &a } else { &b }, Value::Dual(_));
    if !is_dual {
        if let Some((y, da, db)) = rules::scalar_partials(p, &pa, &pb) {
            return record(m, tag, Value::Float(y), (&a, a_in, Value::Float(da)), (&b, b_in, Value::Float(db)));
        }
    }
    let y = m.prim2(p, pa.clone(), pb.clone())?;
    if is_dual {
        let (da, db) = rules::partials(m, p, &pa, &pb, &y)?;
        let mut tangent = Value::Float(0.0);
        for (inp, d, on) in [(&a, da, a_in), (&b, db, b_in)] {
            if let (true, Value::Dual(x)) = (on, inp) {
                let c = m.prim2(Prim::Mul, d, x.tangent.clone())?;
                tangent = add(m, tangent, c)?;
            }
        }
        // The tangent has the output's kind and shape even where an input broadcast.
        // (Shapes as the program sees them: one example's, for batched values.)
        let tangent = if is_tensor(&y) && (!is_tensor(&tangent) || shape_of(&y) != shape_of(&tangent)) {
            tensor::call(m, TOp::BroadcastTo(shape_of(&y)), vec![tangent])?
        } else {
            tangent
        };
        return Ok(Value::Dual(Rc::new(Dual { tag, primal: y, tangent })));
    }
    // The partials of `/` and `**` on tensors are tensor work (those of `+ - *` are constants
    // or the operands themselves): left to the backward pass.
    if matches!(p, Prim::Div | Prim::Pow) && (is_tensor(&pa) || is_tensor(&pb)) {
        let operand = |v: &Value, on: bool, primal: Value| match (on, v) {
            (true, Value::Tracked(t)) => Operand::Tracked(t.clone()),
            _ => Operand::Const(primal),
        };
        let op = Deferred::Bin(p, operand(&a, a_in, pa), operand(&b, b_in, pb));
        let out = Rc::new(Tracked { tag, primal: y, adj: RefCell::new(None) });
        match m.handler(tag) {
            Some(h) => h.record(AdjFrame::Deferred(Box::new(DeferredFrame { out: out.clone(), op }))),
            None => return Ok(out.primal.clone()),
        }
        return Ok(Value::Tracked(out));
    }
    let (da, db) = rules::partials(m, p, &pa, &pb, &y)?;
    record(m, tag, y, (&a, a_in, da), (&b, b_in, db))
}

/// Whether a value is a tensor under its perturbations (one example of a batched value is; a
/// traced value is when its example is).
pub fn is_tensor(v: &Value) -> bool {
    match strip(v) {
        Value::Tensor(_) => true,
        Value::Batched(b) => b.kind == Example::Tensor,
        Value::Staged(_) => true,
        _ => false,
    }
}

/// Records y = a `p` b for reverse mode at `tag`: a tracked output and the adjoint frame that
/// scales its adjoint by each tracked operand's partial.
fn record<H: Host>(
    m: &mut H,
    tag: u32,
    y: Value,
    a: (&Value, bool, Value),
    b: (&Value, bool, Value),
) -> FResult<Value> {
    // `live` has just found this tag's handler (the operand tracked by it is live).
    let out = Rc::new(Tracked { tag, primal: y, adj: RefCell::new(None) });
    let pick = |(v, on, d): (&Value, bool, Value)| match (on, v) {
        (true, Value::Tracked(t)) => Some((t.clone(), d)),
        _ => None,
    };
    let frame = AdjFrame::Scale { out: out.clone(), a: pick(a), b: pick(b) };
    match m.handler(tag) {
        Some(h) => h.record(frame),
        None => return Ok(out.primal.clone()),
    }
    Ok(Value::Tracked(out))
}

fn add<H: Host>(m: &mut H, a: Value, b: Value) -> FResult<Value> {
    match (a, b) {
        (Value::Float(x), Value::Float(y)) => Ok(Value::Float(x + y)),
        // Adjoints accumulate in place when this sum is the only owner of the tensor.
        (Value::Tensor(mut x), Value::Tensor(y)) if x.shape() == y.shape() => match Rc::get_mut(&mut x) {
            Some(t) => {
                t.add_assign(&y)?;
                Ok(Value::Tensor(x))
            }
            None => m.prim2(Prim::Add, Value::Tensor(x), Value::Tensor(y)),
        },
        (a, b) => m.prim2(Prim::Add, a, b),
    }
}

fn mul<H: Host>(m: &mut H, a: Value, b: Value) -> FResult<Value> {
    match (&a, &b) {
        (Value::Float(x), Value::Float(y)) => Ok(Value::Float(x * y)),
        // The partial 1 of `+` and `-`: a · 1 is a to the bit, so no pass over a tensor.
        (_, Value::Float(y)) if *y == 1.0 => Ok(a),
        _ => m.prim2(Prim::Mul, a, b),
    }
}

pub(super) fn accumulate<H: Host>(m: &mut H, cell: &Tracked, contribution: Value) -> FResult<()> {
    // A broadcast input receives the sum of its copies' adjoints, in its own kind (Float or
    // Tensor) and shape.
    if let (Value::Float(_), Value::Float(c)) = (&cell.primal, &contribution) {
        // The scalar case: no shapes to reconcile.
        let mut adj = cell.adj.borrow_mut();
        *adj = Some(match adj.take() {
            Some(Value::Float(old)) => Value::Float(old + c),
            None => Value::Float(*c),
            Some(old) => {
                drop(adj);
                let sum = add(m, old, Value::Float(*c))?;
                *cell.adj.borrow_mut() = Some(sum);
                return Ok(());
            }
        });
        return Ok(());
    }
    // A traced Float (a `grad` inside a `jit`) meets a Float or a traced one: no shapes or
    // dtypes to reconcile either, and `in_kind_of` would walk each value five times to find
    // that, once per traced operation.
    let scalar = |v: &Value| matches!(v, Value::Float(_) | Value::StagedFloat(_));
    let contribution = match scalar(&cell.primal) && scalar(&contribution) {
        true => contribution,
        false => in_kind_of(m, &cell.primal, contribution)?,
    };
    let old = cell.adj.borrow_mut().take();
    let new = match old {
        None => contribution,
        Some(o) => add(m, o, contribution)?,
    };
    *cell.adj.borrow_mut() = Some(new);
    Ok(())
}

/// An adjoint contribution in its primal's kind (Float or tensor), shape and dtype.
fn in_kind_of<H: Host>(m: &mut H, primal: &Value, contribution: Value) -> FResult<Value> {
    let target_is_tensor = is_tensor(primal);
    let have_tensor = is_tensor(&contribution);
    let (want, have) = (shape_of(primal), shape_of(&contribution));
    let contribution = match (target_is_tensor, have_tensor) {
        (false, true) => tensor::call(m, TOp::Sum, vec![contribution])?,
        (true, false) => tensor::call(m, TOp::BroadcastTo(want), vec![contribution])?,
        (true, true) if want != have => tensor::call(m, TOp::SumTo(want), vec![contribution])?,
        _ => contribution,
    };
    // An adjoint has its primal's floating dtype: a float64 input's gradient is computed and
    // returned in float64 even where a rule made a float32 constant (a broadcast Float).
    Ok(match (dtype_of(primal), dtype_of(&contribution)) {
        (Some(want), Some(have)) if want != have && want.is_float() => {
            tensor::call(m, TOp::AsType(want), vec![contribution])?
        }
        _ => contribution,
    })
}

/// Where a backward pass stands when it stops: finished with the `grad`'s result, or paused at
/// a custom rule's record for the machine to run the rule's dp code (whose result goes to
/// `resume_backward`).
pub enum Back {
    Done(Value),
    Call(Box<Suspended>, RuleCall),
}

/// The handler's work once `f` has returned `y`: seed, return through the adjoint frames,
/// read the argument's adjoints.
pub fn backward<H: Host>(m: &mut H, mut state: GradState, y: Value) -> FResult<Back> {
    let tag = state.tag;
    match state.seed.take() {
        None => match &y {
            Value::Tracked(o) if o.tag == tag => *o.adj.borrow_mut() = Some(Value::Float(1.0)),
            _ => {}
        },
        Some(seed) => add_leafwise(m, tag, y.clone(), seed)?,
    }
    run_backward(m, state, y)
}

/// Adds `adjoint` to a cell's adjoint (in the cell's kind): how a staged call's traced
/// backward pass is seeded with the adjoints of its result (stage/vjp.rs).
pub fn seed_cell<H: Host>(m: &mut H, cell: &Tracked, adjoint: Value) -> FResult<()> {
    accumulate(m, cell, adjoint)
}

/// Adds each leaf of `adjoint` to the matching leaf of `cells` where that is a cell of level
/// `tag` (a leaf of another level or a constant there takes nothing).
pub(super) fn add_leafwise<H: Host>(m: &mut H, tag: u32, cells: Value, adjoint: Value) -> FResult<()> {
    zip_leaves(cells, adjoint, &mut |cell, g| {
        // (Not `live`: in the backward pass this level's prompt has ended, but its cells are
        // what the pass fills.)
        if let Value::Tracked(t) = &cell {
            if t.tag == tag {
                accumulate(m, t, g)?;
            }
        }
        Ok(Value::Unit)
    })?;
    Ok(())
}

/// The backward pass from the newest record left in `state` on (see `backward`).
fn run_backward<H: Host>(m: &mut H, mut state: GradState, y: Value) -> FResult<Back> {
    let tag = state.tag;
    let mut n = 0u32;
    let mut outer = matmul::OuterSums::default();
    while let Some(frame) = state.frames.pop() {
        n = n.wrapping_add(1);
        if n.is_multiple_of(4096) && m.interrupted() {
            return Err(Fault::abort("interrupted"));
        }
        match frame {
            AdjFrame::Scale { out, a, b } => {
                outer.flush(m, &out)?;
                let Some(g) = out.adj.borrow_mut().take() else { continue };
                if let Some((a, da)) = a {
                    let c = mul(m, g.clone(), da)?;
                    accumulate(m, &a, c)?;
                }
                if let Some((b, db)) = b {
                    let c = mul(m, g, db)?;
                    accumulate(m, &b, c)?;
                }
            }
            AdjFrame::Deferred(frame) => {
                let DeferredFrame { out, op } = *frame;
                outer.flush(m, &out)?;
                let Some(g) = out.adj.borrow_mut().take() else { continue };
                match op {
                    Deferred::Un(op, x) => {
                        let dy = rules::un_deriv(op, m, &x.primal, &out.primal)?;
                        let c = rules::apply_deriv(op, m, g, dy)?;
                        accumulate(m, &x, c)?;
                    }
                    Deferred::Bin(p, a, b) => {
                        let (da, db) = rules::partials(m, p, &a.primal(), &b.primal(), &out.primal)?;
                        for (operand, d) in [(a, da), (b, db)] {
                            if let Operand::Tracked(cell) = operand {
                                let c = mul(m, g.clone(), d)?;
                                accumulate(m, &cell, c)?;
                            }
                        }
                    }
                }
            }
            AdjFrame::Custom(frame) => {
                // The rule is dp code: the machine runs it, and then `resume_backward`.
                outer.flush_all(m)?;
                if let Some((inputs, batch, call)) = custom::rule_call(m, tag, *frame)? {
                    return Ok(Back::Call(Box::new(Suspended { state, y, inputs, batch }), call));
                }
            }
            AdjFrame::Staged(frame) => {
                let StagedFrame { outs, inputs, mut residuals, backward } = *frame;
                for out in &outs {
                    outer.flush(m, out)?;
                }
                let adjoints: Vec<Option<Value>> = outs.iter().map(|o| o.adj.borrow_mut().take()).collect();
                if adjoints.iter().all(Option::is_none) {
                    continue;
                }
                for (out, g) in outs.iter().zip(adjoints) {
                    let g = match g {
                        None => zero_like(&out.primal),
                        Some(g) if is_tensor(&out.primal) => in_kind_of(m, &out.primal, g)?,
                        Some(g) => g,
                    };
                    if is_ad(&g) {
                        // Only a lone `grad` level stages a call (stage::Jit::call), so no
                        // other level perturbs the adjoints, short of a continuation resumed
                        // elsewhere; the compiled program could not differentiate them.
                        return Err(Fault::new("jit: a staged call's adjoint is differentiated by another `grad` or `jvp`")
                            .help("a staged function differentiated by nested levels runs unstaged only when the levels are running at the call"));
                    }
                    residuals.push(g);
                }
                let grads = backward.run(residuals)?;
                let Value::Tuple(grads) = grads else {
                    return Err(Fault::internal("a staged backward program returned no tuple"));
                };
                let grads = Rc::try_unwrap(grads).unwrap_or_else(|shared| (*shared).clone());
                for (cell, g) in inputs.iter().zip(grads) {
                    match g {
                        // The call's result does not depend on that leaf.
                        Value::Unit => {}
                        // An outer product u ⊗ v, summed with the others of that cell at the
                        // end (stage/vjp.rs `defer_outer_products`).
                        Value::Tuple(uv) => match &uv[..] {
                            [Value::Tensor(u), Value::Tensor(v)] if u.cpu().is_some() && v.cpu().is_some() => {
                                outer.push(cell, u.clone(), v.clone());
                            }
                            [u, v] => {
                                let p = m.forward(&TOp::MatMul, &[u.clone(), v.clone()])?;
                                accumulate(m, cell, p)?;
                            }
                            _ => return Err(Fault::internal("a staged backward program's outer product")),
                        },
                        g => accumulate(m, cell, g)?,
                    }
                }
            }
            AdjFrame::Op(frame) => {
                let OpFrame { out, op, inputs, primals } = *frame;
                outer.flush(m, &out)?;
                let Some(g) = out.adj.borrow_mut().take() else { continue };
                if let (TOp::Slice(axis, lo, _), [Some(cell)]) = (&op, inputs.as_slice()) {
                    if tensor::slice_adjoint_into(cell, *axis, *lo, &g) {
                        continue;
                    }
                }
                let mut needs: Vec<bool> = inputs.iter().map(Option::is_some).collect();
                if op == TOp::MatMul {
                    for (i, inp) in inputs.iter().enumerate() {
                        if let Some(cell) = inp {
                            needs[i] = !matmul::adjoint_into(m, &primals, &g, i, cell, &mut outer)?;
                        }
                    }
                    if !needs.contains(&true) {
                        continue;
                    }
                }
                let contributions = tensor::vjp(m, &op, &primals, &out.primal, g, &needs)?;
                for (inp, c) in inputs.iter().zip(contributions) {
                    if let (Some(inp), Some(c)) = (inp, c) {
                        accumulate(m, inp, c)?;
                    }
                }
            }
        }
    }
    outer.flush_all(m)?;
    m.recycle(std::mem::take(&mut state.frames));
    // Reading an input's adjoint also clears it, so a continuation that re-enters this
    // `grad` (multi-shot) starts its next backward pass from zero.
    let grads = map_leaves(state.input.clone(), &mut |leaf| {
        Ok(match leaf {
            Value::Tracked(t) if t.tag == tag => t.adj.borrow_mut().take().unwrap_or_else(|| zero_like(&t.primal)),
            other => zero_like(&other),
        })
    })?;
    if state.with_value {
        Ok(Back::Done(Value::Tuple(Rc::new(vec![primal_at(&y, tag), grads]))))
    } else {
        Ok(Back::Done(grads))
    }
}

/// `jvp`'s result: (primal output, tangent output) at `tag`.
pub fn jvp_finish(tag: u32, y: Value) -> FResult<Value> {
    let primal = map_leaves(y.clone(), &mut |leaf| Ok(primal_at(&leaf, tag)))?;
    let tangent = map_leaves(y, &mut |leaf| {
        Ok(match leaf {
            Value::Dual(d) if d.tag == tag => match &d.tangent {
                Value::Float(z) if is_tensor(&d.primal) => full_like(&d.primal, *z)?,
                t => t.clone(),
            },
            other => zero_like(&other),
        })
    })?;
    Ok(Value::Tuple(Rc::new(vec![primal, tangent])))
}
