//! User-written derivative rules and recomputation: `custom_vjp f bwd x`, `custom_jvp f tan x`
//! and `checkpoint f x` (docs/grad.md §7). Each is handled at one level, the innermost running
//! one that perturbs a leaf of `x`: `f` runs on `x`'s values at that level, so none of its
//! operations is recorded there (levels further out still see them, which is what makes a rule
//! written in differentiable operations differentiable again). Then, in reverse mode, the call
//! leaves one record (`AdjFrame::Custom`) whose after-code is dp code — the rule, or `f` run
//! again under a `grad` seeded with the output's adjoint — which the backward pass hands to the
//! machine to run (`Back::Call`) and takes up again with its result (`resume_backward`). In
//! forward mode `custom_jvp`'s tangent is its rule's result; `custom_vjp` and `checkpoint`
//! have no forward rule there, and a `jvp` differentiates their `f` itself.
//!
//! `vmap`s running inside that level batch the call: `f` runs batched, its result is batched
//! by each of them (`spread`), and the rule, run after those `vmap`s have returned, runs under
//! them reopened (`Rebatch`, docs/grad.md §8).

use super::batch::{spread, stack_leaf};
use super::tensor::call;
use super::{
    accumulate, add_leafwise, innermost, is_tensor, live, map_leaves, primal_at, run_backward, shape_of, zero_like,
    zip_leaves, Back, Host,
};
use crate::runtime::perturbed::{
    tag_of, AdjFrame, Batched, CustomFrame, Dual, Rebatch, Rule, RuleCall, Suspended, Tracked,
};
use crate::runtime::value::{Pap, Value};
use crate::runtime::{FResult, Fault};
use crate::source::Span;
use crate::tensor::TOp;
use std::cell::RefCell;
use std::rc::Rc;

/// Where a custom call is handled: its level, and the `vmap` levels inside that level which
/// batch the argument (`Rebatch`).
pub struct Site {
    pub tag: u32,
    pub batch: Rebatch,
}

/// The innermost running `grad` or `jvp` level that perturbs a leaf of `x`, looking under the
/// leaves' batching layers (`None` when `x` is plain there, perhaps batched: the call is then
/// `f x`, batched like any code). A `vmap` inside that level is not where the rule applies —
/// it has no derivatives — but it batches the call: `f`, and later the rule, run batched by it.
pub fn custom_site<H: Host>(m: &mut H, x: &Value) -> FResult<Option<Site>> {
    let mut tag = 0;
    let mut batch: Rebatch = Vec::new();
    map_leaves(x.clone(), &mut |leaf| {
        let mut v = live(m, leaf.clone());
        while let Value::Batched(b) = &v {
            if !batch.iter().any(|&(t, _)| t == b.tag) {
                batch.push((b.tag, shape_of(&b.value).get(b.axis).copied().unwrap_or(0)));
            }
            let inner = b.value.clone();
            v = live(m, inner);
        }
        tag = innermost(m, tag, tag_of(&v));
        Ok(leaf)
    })?;
    if tag == 0 {
        return Ok(None);
    }
    // A batching layer of a `vmap` outside the level stays batched as it is (that `vmap` is
    // still running when the rule runs).
    batch.retain(|&(t, _)| m.inner_level(t, tag) == Some(t));
    batch.sort_by(|a, b| match m.inner_level(a.0, b.0) {
        _ if a.0 == b.0 => std::cmp::Ordering::Equal,
        Some(inner) if inner == b.0 => std::cmp::Ordering::Less,
        _ => std::cmp::Ordering::Greater,
    });
    Ok(Some(Site { tag, batch }))
}

/// `f` applied to what `v` holds under its layers of the levels of `batch`, those layers kept.
fn under(v: &Value, batch: &Rebatch, f: &mut dyn FnMut(&Value) -> FResult<Value>) -> FResult<Value> {
    match v {
        Value::Batched(b) if batch.iter().any(|&(t, _)| t == b.tag) => {
            let value = under(&b.value, batch, f)?;
            Ok(Value::Batched(Rc::new(Batched { tag: b.tag, value, axis: b.axis, kind: b.kind })))
        }
        other => f(other),
    }
}

/// What `v` holds under its layers of the levels of `batch`, and those layers (level, batch
/// axis), outermost first.
fn core_of<'a>(v: &'a Value, batch: &Rebatch) -> (&'a Value, Vec<(u32, usize)>) {
    let mut layers = Vec::new();
    let mut v = v;
    while let Value::Batched(b) = v {
        if !batch.iter().any(|&(t, _)| t == b.tag) {
            break;
        }
        layers.push((b.tag, b.axis));
        v = &b.value;
    }
    (v, layers)
}

/// `full`, a value stacked over every level of `batch` (their axes in front, outermost first,
/// as nested `vmap`s stack), as the stack under `layers` (a leaf's layers of some of those
/// levels, `core_of`): the axes of the levels it lacks summed (what those examples
/// contributed to a value the same for all of them), the others moved to where the layers
/// have them, and in `like`'s floating dtype.
fn unstack<H: Host>(
    m: &mut H,
    full: Value,
    batch: &Rebatch,
    layers: &[(u32, usize)],
    like: Option<&Value>,
) -> FResult<Value> {
    #[derive(PartialEq)]
    enum Axis {
        Level(u32),
        Example(usize),
    }
    let k = batch.len();
    let rank = shape_of(&full).len();
    if rank < k {
        return Err(Fault::internal("a custom rule's batched result has too few axes"));
    }
    let mut have: Vec<Axis> =
        batch.iter().map(|&(t, _)| Axis::Level(t)).chain((0..rank - k).map(Axis::Example)).collect();
    let mut want: Vec<Axis> = (0..rank - k).map(Axis::Example).collect();
    for &(t, ax) in layers {
        if ax > want.len() {
            return Err(Fault::internal("a batching layer's axis beyond its value's rank"));
        }
        want.insert(ax, Axis::Level(t));
    }
    let mut v = full;
    for i in (0..k).rev() {
        if !layers.iter().any(|&(t, _)| t == batch[i].0) {
            v = call(m, TOp::SumAxis(i), vec![v])?;
            have.remove(i);
        }
    }
    let perm: Option<Vec<usize>> = want.iter().map(|a| have.iter().position(|h| h == a)).collect();
    let Some(perm) = perm else { return Err(Fault::internal("a custom rule's result misses a batch axis")) };
    if perm.iter().enumerate().any(|(i, &p)| i != p) {
        v = call(m, TOp::Permute(perm), vec![v])?;
    }
    if let (Some(want), Some(have)) = (like.and_then(super::dtype_of), super::dtype_of(&v)) {
        if want != have && want.is_float() {
            v = call(m, TOp::AsType(want), vec![v])?;
        }
    }
    Ok(v)
}

/// `x`'s value at level `tag`: every leaf's primal there (levels outside it stay, and so do
/// the batching layers of `batch` above it).
pub fn peel<H: Host>(m: &mut H, x: &Value, tag: u32, batch: &Rebatch) -> FResult<Value> {
    map_leaves(x.clone(), &mut |leaf| {
        let leaf = live(m, leaf);
        under(&leaf, batch, &mut |core| Ok(primal_at(&live(m, core.clone()), tag)))
    })
}

/// `x`'s tangent at the forward level `tag`, leaf by leaf (zero where a leaf is not perturbed
/// there), in each leaf's own kind and shape, batched as the leaf is by the levels of `batch`.
pub fn tangents_at<H: Host>(m: &mut H, x: &Value, tag: u32, batch: &Rebatch) -> FResult<Value> {
    map_leaves(x.clone(), &mut |leaf| {
        let leaf = live(m, leaf);
        let perturbed = matches!(live(m, core_of(&leaf, batch).0.clone()), Value::Dual(d) if d.tag == tag);
        if !perturbed {
            return Ok(zero_like(&leaf));
        }
        under(&leaf, batch, &mut |core| {
            Ok(match live(m, core.clone()) {
                Value::Dual(d) if d.tag == tag => match &d.tangent {
                    Value::Float(z) if is_tensor(&d.primal) => super::full_like(&d.primal, *z)?,
                    t => t.clone(),
                },
                other => zero_like(&other),
            })
        })
    })
}

/// `custom_jvp`'s result at the forward level `tag`: `y` with the tangent rule's `ydot`. With
/// `batch`, `y` is batched by all of its levels (`spread`), and each leaf of `ydot` is lined up
/// with its layers.
pub fn dual_result<H: Host>(m: &mut H, y: Value, ydot: Value, tag: u32, batch: &Rebatch) -> FResult<Value> {
    zip_leaves(y, ydot, &mut |primal, tangent| {
        if batch.is_empty() {
            return Ok(Value::Dual(Rc::new(Dual { tag, primal, tangent })));
        }
        let (core, layers) = core_of(&primal, batch);
        let mut full = tangent;
        for &(t, n) in batch.iter().rev() {
            full = stack_leaf(m, t, n, full)?;
        }
        let core = core.clone();
        let mut tangent = Some(unstack(m, full, batch, &layers, Some(&core))?);
        under(&primal, batch, &mut |p| {
            Ok(Value::Dual(Rc::new(Dual { tag, primal: p.clone(), tangent: tangent.take().unwrap_or_default() })))
        })
    })
}

/// `returned` batched by every level of `batch` (`spread`), when there are any.
pub fn spread_all<H: Host>(m: &mut H, returned: Value, batch: &Rebatch) -> FResult<Value> {
    if batch.is_empty() {
        return Ok(returned);
    }
    let innermost_first: Vec<(u32, usize)> = batch.iter().rev().copied().collect();
    map_leaves(returned, &mut |leaf| spread(m, leaf, &innermost_first))
}

/// Records a finished call of `f` (which returned `returned` on the argument's values `x` at
/// the `grad` level `tag`; with `batch`, spread over its levels): its result is made of fresh
/// cells of that level, under the batching layers, and one record holds what the backward
/// pass needs to run the rule.
#[allow(clippy::too_many_arguments)]
pub fn record_custom<H: Host>(
    m: &mut H,
    tag: u32,
    rule: Rule,
    f: Value,
    inputs: Value,
    x: Value,
    returned: Value,
    span: Span,
    batch: Rebatch,
) -> FResult<Value> {
    let y = map_leaves(returned.clone(), &mut |leaf| under(&leaf, &batch, &mut |core| Ok(primal_at(core, tag))))?;
    let outputs = map_leaves(y.clone(), &mut |leaf| {
        under(&leaf, &batch, &mut |primal| {
            Ok(Value::Tracked(Rc::new(Tracked { tag, primal: primal.clone(), adj: RefCell::new(None) })))
        })
    })?;
    let frame = CustomFrame { rule, f, inputs, x, y: y.clone(), outputs: outputs.clone(), returned, span, batch };
    match m.handler(tag) {
        Some(h) => h.record(AdjFrame::Custom(Box::new(frame))),
        None => return Ok(y),
    }
    Ok(outputs)
}

/// The backward pass has reached a custom record: the argument's cells, the levels the rule
/// runs under, and the rule's dp code with the output's adjoint `ybar` (zero where nothing
/// flowed back; batched as the output is), or `None` when no adjoint reached the record at
/// all (nothing to run).
pub(super) fn rule_call<H: Host>(
    m: &mut H,
    tag: u32,
    frame: CustomFrame,
) -> FResult<Option<(Value, Rebatch, RuleCall)>> {
    let CustomFrame { rule, f, inputs, x, y, outputs, returned, span, batch } = frame;
    let mut reached = false;
    let ybar = zip_leaves(outputs, returned, &mut |out, returned| {
        let g = match core_of(&out, &batch).0 {
            Value::Tracked(t) => t.adj.borrow_mut().take(),
            _ => None,
        };
        let Some(g) = g else { return Ok(zero_like(&out)) };
        reached = true;
        // A leaf `f` computed from a value it captured, tracked here: its own records pass
        // the adjoint on to that value.
        if let Value::Tracked(r) = core_of(&returned, &batch).0 {
            if r.tag == tag {
                accumulate(m, r, g.clone())?;
            }
        }
        under(&out, &batch, &mut |_| Ok(g.clone()))
    })?;
    if !reached {
        return Ok(None);
    }
    let call = match rule {
        Rule::Vjp(bwd) => RuleCall::Apply(bwd, vec![x, y, ybar], span),
        Rule::Checkpoint => RuleCall::Vjp { f, x, seed: ybar, span },
        Rule::Jvp(tan) => {
            // ⟨tan x xdot, ybar⟩ is linear in xdot: its gradient, at any point (zero), is the
            // transposed tangent map applied to ybar.
            let zero = map_leaves(x.clone(), &mut |leaf| Ok(zero_like(&leaf)))?;
            let linear = Value::Pap(Rc::new(Pap { callee: tan, args: vec![x] }));
            RuleCall::Vjp { f: linear, x: zero, seed: ybar, span }
        }
    };
    Ok(Some((inputs, batch, call)))
}

/// The rule's dp code returned `xbar`, the argument's adjoint: adds it to the argument's cells
/// of this level and goes on with the backward pass. Under reopened `vmap` levels, `xbar`
/// comes stacked over all of them (their delimiters stacked it); each cell takes it as its
/// leaf is batched (`unstack`).
pub fn resume_backward<H: Host>(m: &mut H, paused: Suspended, xbar: Value) -> FResult<Back> {
    let Suspended { state, y, inputs, batch } = paused;
    if batch.is_empty() {
        add_leafwise(m, state.tag, inputs, xbar)?;
    } else {
        let tag = state.tag;
        zip_leaves(inputs, xbar, &mut |cell, g| {
            let (core, layers) = core_of(&cell, &batch);
            if let Value::Tracked(t) = core {
                if t.tag == tag {
                    let c = unstack(m, g, &batch, &layers, None)?;
                    accumulate(m, t, c)?;
                }
            }
            Ok(Value::Unit)
        })?;
    }
    run_backward(m, state, y)
}
