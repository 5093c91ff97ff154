//! Arithmetic over whole differentiable structures — tuples, records and lists whose leaves
//! are Floats and Tensors — so optimisers in `stdlib/optim.dp` work on any parameter shape.
//! Leaves combine with the machine's own arithmetic (so these are differentiable too).

use crate::ad::{self, map_leaves, zip_leaves};
use crate::builtins::B;
use crate::core::Prim;
use crate::eval::machine::Machine;
use crate::runtime::perturbed::strip;
use crate::runtime::value::Value;
use crate::runtime::{FResult, Fault};
use crate::tensor::{TOp, Un};

fn sqrt(m: &mut Machine, v: Value) -> FResult<Value> {
    ad::apply_un(m, Un::Sqrt, v)
}

fn clip(v: &Value, lo: f64, hi: f64) -> FResult<Value> {
    Ok(match strip(v) {
        Value::Float(x) => Value::Float(x.clamp(lo, hi)),
        Value::Tensor(t) => Value::Tensor(std::rc::Rc::new(t.clamp(lo as f32, hi as f32)?)),
        other => other,
    })
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
            let (lo, hi) = (arg().as_float()?, arg().as_float()?);
            // `clamp` would panic on these: they name no interval.
            if lo.is_nan() || hi.is_nan() || lo > hi {
                return Err(Fault::new(format!(
                    "tree_clip {lo} {hi}: the bounds must satisfy lo <= hi (and not be NaN)"
                )));
            }
            map_leaves(arg(), &mut |x| clip(&x, lo, hi))?
        }
        B::TreeZeros => map_leaves(arg(), &mut |x| Ok(ad::zero_like(&x)))?,
        B::TreeSumSquares => {
            let mut total = Value::Float(0.0);
            map_leaves(arg(), &mut |x| {
                let sq = m.prim2(Prim::Mul, x.clone(), x.clone())?;
                let s =
                    if matches!(strip(&sq), Value::Tensor(_)) { ad::tensor::call(m, TOp::Sum, vec![sq])? } else { sq };
                total = m.prim2(Prim::Add, total.clone(), s)?;
                Ok(x)
            })?;
            total
        }
        other => return Err(Fault::internal(format!("{other:?} is not a tree builtin"))),
    })
}
