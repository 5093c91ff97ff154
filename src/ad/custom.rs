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

use super::{
    accumulate, add_leafwise, innermost, live, map_leaves, primal_at, run_backward, zero_like, zip_leaves, Back, Host,
};
use crate::runtime::perturbed::{tag_of, AdjFrame, CustomFrame, Dual, Rule, RuleCall, Suspended, Tracked};
use crate::runtime::value::{Pap, Value};
use crate::runtime::FResult;
use crate::source::Span;
use std::cell::RefCell;
use std::rc::Rc;

/// The innermost running level that perturbs a leaf of `x` (`None` when `x` is plain there).
pub fn custom_level<H: Host>(m: &mut H, x: &Value) -> FResult<Option<u32>> {
    let mut tag = 0;
    map_leaves(x.clone(), &mut |leaf| {
        let leaf = live(m, leaf);
        tag = innermost(m, tag, tag_of(&leaf));
        Ok(leaf)
    })?;
    Ok((tag != 0).then_some(tag))
}

/// `x`'s value at level `tag`: every leaf's primal there (levels outside it stay).
pub fn peel<H: Host>(m: &mut H, x: &Value, tag: u32) -> FResult<Value> {
    map_leaves(x.clone(), &mut |leaf| Ok(primal_at(&live(m, leaf), tag)))
}

/// `x`'s tangent at the forward level `tag`, leaf by leaf (zero where a leaf is not perturbed
/// there), in each leaf's own kind and shape.
pub fn tangents_at<H: Host>(m: &mut H, x: &Value, tag: u32) -> FResult<Value> {
    map_leaves(x.clone(), &mut |leaf| {
        Ok(match live(m, leaf) {
            Value::Dual(d) if d.tag == tag => match (&d.tangent, super::tensor_like(&d.primal)) {
                (Value::Float(z), Some(p)) => Value::Tensor(Rc::new(p.full_like(p.shape(), *z)?)),
                (t, _) => t.clone(),
            },
            other => zero_like(&other),
        })
    })
}

/// `custom_jvp`'s result at the forward level `tag`: `y` with the tangent rule's `ydot`.
pub fn dual_result(y: Value, ydot: Value, tag: u32) -> FResult<Value> {
    zip_leaves(y, ydot, &mut |primal, tangent| Ok(Value::Dual(Rc::new(Dual { tag, primal, tangent }))))
}

/// Records a finished call of `f` (which returned `returned` on the argument's values `x` at
/// the `grad` level `tag`): its result is made of fresh cells of that level, and one record
/// holds what the backward pass needs to run the rule.
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
) -> FResult<Value> {
    let y = map_leaves(returned.clone(), &mut |leaf| Ok(primal_at(&leaf, tag)))?;
    let outputs = map_leaves(y.clone(), &mut |primal| {
        Ok(Value::Tracked(Rc::new(Tracked { tag, primal, adj: RefCell::new(None) })))
    })?;
    let frame = CustomFrame { rule, f, inputs, x, y: y.clone(), outputs: outputs.clone(), returned, span };
    match m.handler(tag) {
        Some(h) => h.frames.push(AdjFrame::Custom(Box::new(frame))),
        None => return Ok(y),
    }
    Ok(outputs)
}

/// The backward pass has reached a custom record: the output's adjoint `ybar` (zero where
/// nothing flowed back) and the dp code that maps it to the argument's, or `None` when no
/// adjoint reached the record at all (nothing to run).
pub(super) fn rule_call<H: Host>(m: &mut H, tag: u32, frame: CustomFrame) -> FResult<Option<(Value, RuleCall)>> {
    let CustomFrame { rule, f, inputs, x, y, outputs, returned, span } = frame;
    let mut reached = false;
    let ybar = zip_leaves(outputs, returned, &mut |out, returned| {
        let g = match &out {
            Value::Tracked(t) => t.adj.borrow_mut().take(),
            _ => None,
        };
        let Some(g) = g else { return Ok(zero_like(&out)) };
        reached = true;
        // A leaf `f` computed from a value it captured, tracked here: its own records pass
        // the adjoint on to that value.
        if let Value::Tracked(r) = &returned {
            if r.tag == tag {
                accumulate(m, r, g.clone())?;
            }
        }
        Ok(g)
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
    Ok(Some((inputs, call)))
}

/// The rule's dp code returned `xbar`, the argument's adjoint: adds it to the argument's cells
/// of this level and goes on with the backward pass.
pub fn resume_backward<H: Host>(m: &mut H, paused: Suspended, xbar: Value) -> FResult<Back> {
    let Suspended { state, y, inputs } = paused;
    add_leafwise(m, state.tag, inputs, xbar)?;
    run_backward(m, state, y)
}
