//! Arithmetic over whole differentiable structures — tuples, records and lists whose leaves
//! are Floats and Tensors — so optimisers in `stdlib/optim.dp` work on any parameter shape.
//! Leaves combine with the machine's own arithmetic (so these are differentiable too).

use crate::ad::{self, map_leaves, zip_leaves};
use crate::builtins::B;
use crate::core::Prim;
use crate::eval::machine::Machine;
use crate::runtime::perturbed::{is_ad, strip};
use crate::runtime::value::Value;
use crate::runtime::{FResult, Fault};
use crate::tensor::{TOp, Un};
use std::rc::Rc;

fn sqrt(m: &mut Machine, v: Value) -> FResult<Value> {
    ad::apply_un(m, Un::Sqrt, v)
}

fn clamp(v: &Value, lo: f64, hi: f64) -> FResult<Value> {
    Ok(match strip(v) {
        Value::Float(x) => Value::Float(x.clamp(lo, hi)),
        Value::Tensor(t) => Value::Tensor(Rc::new(t.clamp(lo as f32, hi as f32)?)),
        other => other,
    })
}

/// A leaf clipped by the `clip` builtin, with bounds that may be perturbed: a tensor as it is,
/// a Float as a 0-d float64 tensor (the derivatives are the Float rule's, which is jnp.clip's).
fn clip_by_values(m: &mut Machine, lo: &Value, hi: &Value, x: Value) -> FResult<Value> {
    if ad::is_tensor(&x) {
        return super::tensor_ops::clip(m, lo.clone(), hi.clone(), x);
    }
    let t = super::tensor_ops::float_tensor(m, x)?;
    let c = super::tensor_ops::clip(m, lo.clone(), hi.clone(), t)?;
    ad::tensor::call(m, TOp::Item, vec![c])
}

/// `x` clipped to [lo, hi], differentiable: as JAX's `clip` (min (max x lo) hi), the
/// derivative is 1 strictly inside, 0 outside, and 1/2 for each bound `x` sits on (the
/// balanced tie of max and min). A tensor leaf is the `clip` builtin. For a Float the value is
/// the plain clamp and the perturbation of `x` is kept with weight w by
/// `select(x, w) · w + select(clamp x, 1 - w) · (1 - w)`.
fn clip(m: &mut Machine, x: Value, lo: f64, hi: f64) -> FResult<Value> {
    match strip(&x) {
        // A traced tensor (inside `jit`): the `clip` builtin, which stages.
        Value::Staged(_) => return super::tensor_ops::clip(m, Value::Float(lo), Value::Float(hi), x),
        // A traced Float cannot be clamped by its number: as a 0-d tensor, the `clip` builtin
        // stages (with the Float rule's derivative, which is jnp.clip's).
        Value::StagedFloat(_) => return clip_by_values(m, &Value::Float(lo), &Value::Float(hi), x),
        // A batch: a tensor leaf is the `clip` builtin's, a batch of Floats clipped per example.
        Value::Batched(_) if !ad::is_tensor(&x) => return ad::batch::clip_floats(m, x, lo, hi),
        Value::Batched(_) => return super::tensor_ops::clip(m, Value::Float(lo), Value::Float(hi), x),
        _ => {}
    }
    let c = clamp(&x, lo, hi)?;
    if !is_ad(&x) {
        return Ok(c);
    }
    let w = match strip(&x) {
        Value::Float(s) => {
            let side = |above: bool, on: bool| {
                if above {
                    1.0
                } else if on {
                    0.5
                } else {
                    0.0
                }
            };
            let at_lo = s.max(lo);
            let w = side(s > lo, s == lo) * side(at_lo < hi, at_lo == hi);
            if w == 1.0 {
                return Ok(x);
            }
            if w == 0.0 {
                return Ok(c);
            }
            Value::Float(w)
        }
        // Tensors as the `clip` builtin, which is `jnp.clip`'s construction.
        Value::Tensor(_) => return super::tensor_ops::clip(m, Value::Float(lo), Value::Float(hi), x),
        _ => return Ok(c),
    };
    ad::tensor::blend(m, x, c, w)
}

pub fn call(m: &mut Machine, b: B, arg: &mut dyn FnMut() -> Value) -> FResult<Value> {
    // Leaves are combined through a raw pointer-free closure over `m`.
    let two = |m: &mut Machine, p: Prim, x: Value, y: Value| zip_leaves(x, y, &mut |a, b| m.prim2(p, a, b));
    Ok(match b {
        B::TreeAdd => two(m, Prim::Add, arg(), arg())?,
        B::TreeSub => two(m, Prim::Sub, arg(), arg())?,
        B::TreeMul => two(m, Prim::Mul, arg(), arg())?,
        B::TreeDiv => two(m, Prim::Div, arg(), arg())?,
        B::TreeScale => {
            let k = arg();
            map_leaves(arg(), &mut |x| m.prim2(Prim::Mul, k.clone(), x))?
        }
        B::TreeAddScalar => {
            let k = arg();
            map_leaves(arg(), &mut |x| m.prim2(Prim::Add, x, k.clone()))?
        }
        B::TreeSqrt => map_leaves(arg(), &mut |x| sqrt(m, x))?,
        B::TreeClip => {
            let (lo, hi) = (arg(), arg());
            // The bounds are checked below, which the staged program could not repeat.
            if [&lo, &hi].iter().any(|v| matches!(strip(v), Value::StagedFloat(_))) {
                return Err(Fault::unstageable("`tree_clip` with a traced bound"));
            }
            let (l, h) = (strip(&lo).as_float()?, strip(&hi).as_float()?);
            // `clamp` would panic on these: they name no interval.
            if l.is_nan() || h.is_nan() || l > h {
                return Err(Fault::new(format!(
                    "tree_clip {l} {h}: the bounds must satisfy lo <= hi (and not be NaN)"
                )));
            }
            if is_ad(&lo) || is_ad(&hi) {
                // Differentiated bounds: each leaf by the `clip` builtin, whose derivative
                // reaches them (a Float leaf as a 0-d tensor).
                return map_leaves(arg(), &mut |x| clip_by_values(m, &lo, &hi, x));
            }
            map_leaves(arg(), &mut |x| clip(m, x, l, h))?
        }
        B::TreeZeros => map_leaves(arg(), &mut |x| Ok(ad::zero_like(&x)))?,
        B::TreeSumSquares => {
            let mut total = Value::Float(0.0);
            map_leaves(arg(), &mut |x| {
                let sq = m.prim2(Prim::Mul, x.clone(), x.clone())?;
                let s = if ad::is_tensor(&sq) { ad::tensor::call(m, TOp::Sum, vec![sq])? } else { sq };
                total = m.prim2(Prim::Add, total.clone(), s)?;
                Ok(x)
            })?;
            total
        }
        other => return Err(Fault::internal(format!("{other:?} is not a tree builtin"))),
    })
}
