//! The tensor builtins of LANGUAGE.md "Tensors, continued": comparisons and masks (`less` …,
//! `where`, `clip`, `any`/`all`, `max_of`/`min_of` of tensors), reductions (`min`, the per-axis
//! ones, `cumsum`, `var`) and shapes and indexing (`expand_dims` … `get`). The operations are
//! the op table's; this module reads axes (negative ones count from the end), turns a Float
//! operand into a tensor, and composes the builtins that need no operation of their own from
//! differentiable ones (so their derivatives, to any order, come with them).

use crate::ad;
use crate::builtins::B;
use crate::core::Prim;
use crate::eval::machine::Machine;
use crate::runtime::perturbed::strip;
use crate::runtime::tensor::wrap;
use crate::runtime::value::Value;
use crate::runtime::{FResult, Fault};
use crate::tensor::{fmt_shape, Cmp, TOp, Un};

/// A Float beside a tensor as a 0-d tensor of that tensor's floating dtype (an int64 or bool
/// partner gives float32, as arithmetic's weakly typed Floats do) on its device. A perturbed
/// Float stays differentiable: it scales a 0-d one.
fn scalar_like(m: &mut Machine, x: Value, partner: &Value) -> FResult<Value> {
    let Some(t) = crate::ad::underlying(partner) else {
        return Err(Fault::internal("a Float operand without a tensor beside it"));
    };
    match x {
        Value::Float(v) => Ok(wrap(t.full_like(&[], v)?)),
        x => {
            let one = wrap(t.full_like(&[], 1.0)?);
            m.prim2(Prim::Mul, one, x)
        }
    }
}

/// Two operands of a broadcasting operation as tensors (the checker lets one be a Float).
fn tensors(m: &mut Machine, a: Value, b: Value, what: &str) -> FResult<(Value, Value)> {
    let is_tensor = ad::is_tensor;
    Ok(match (is_tensor(&a), is_tensor(&b)) {
        (true, true) => (a, b),
        (false, true) => (scalar_like(m, a, &b)?, b),
        (true, false) => {
            let b = scalar_like(m, b, &a)?;
            (a, b)
        }
        (false, false) => return Err(Fault::internal(format!("`{what}` without a tensor operand"))),
    })
}

/// A comparison or logic operation: not differentiable, so it reads the operands' values.
fn compare(m: &mut Machine, c: Cmp, a: Value, b: Value) -> FResult<Value> {
    let (a, b) = tensors(m, strip(&a), strip(&b), c.name())?;
    ad::tensor::call(m, TOp::Cmp(c), vec![a, b])
}

/// `max_of`/`min_of`: elementwise on tensors (differentiable, JAX's tie rule); on two Ints,
/// Floats or Strings the larger (smaller) one, `a` when they are equal, as before tensors.
fn pick(m: &mut Machine, c: Cmp, a: Value, b: Value) -> FResult<Value> {
    if ad::is_tensor(&a) || ad::is_tensor(&b) {
        let (a, b) = tensors(m, a, b, c.name())?;
        return ad::tensor::call(m, TOp::Cmp(c), vec![a, b]);
    }
    if traced_floats(&a, &b) {
        return pick_traced(m, c, a, b);
    }
    let test = if c == Cmp::Max { Prim::Ge } else { Prim::Le };
    let keep_a = m.prim2(test, strip(&a), strip(&b))?;
    if let Value::Batched(_) = keep_a {
        // Floats of a batch: each example picks its own.
        return ad::batch::pick(m, keep_a, a, b);
    }
    Ok(if matches!(keep_a, Value::Bool(true)) { a } else { b })
}

/// Whether a pick of two Floats has a traced operand (inside `jit`) and no batched one (a
/// batch's comparison stages as it is).
fn traced_floats(a: &Value, b: &Value) -> bool {
    let (a, b) = (strip(a), strip(b));
    let traced = |v: &Value| matches!(v, Value::StagedFloat(_));
    let batched = |v: &Value| matches!(v, Value::Batched(_));
    (traced(&a) || traced(&b)) && !batched(&a) && !batched(&b)
}

/// `max_of`/`min_of` of Floats with a traced operand: the staged program cannot branch on
/// it, so both go into 0-d float64 tensors and a `where` picks as the Float rule does (`a`
/// when a ≥ b for `max_of`, a ≤ b for `min_of`: on a tie `a`, beside a NaN `b`), so the
/// derivative goes to the operand picked, as there.
fn pick_traced(m: &mut Machine, c: Cmp, a: Value, b: Value) -> FResult<Value> {
    let test = if c == Cmp::Max { Cmp::GreaterEqual } else { Cmp::LessEqual };
    let ta = float_tensor(m, a)?;
    let tb = float_tensor(m, b)?;
    let mask = ad::tensor::call(m, TOp::Cmp(test), vec![strip(&ta), strip(&tb)])?;
    let picked = ad::tensor::call(m, TOp::Where, vec![mask, ta, tb])?;
    ad::tensor::call(m, TOp::Item, vec![picked])
}

/// A Float (a traced or differentiated one too) as a 0-d float64 tensor, which keeps its
/// precision; `TOp::Item` turns it back.
pub(super) fn float_tensor(m: &mut Machine, x: Value) -> FResult<Value> {
    let one = wrap(crate::tensor::Tensor::from_f64s(&[], vec![1.0])?);
    m.prim2(Prim::Mul, one, x)
}

/// An axis of a tensor of `shape` (rank r): 0 ≤ axis < r, or −r ≤ axis < 0 counting from the
/// end, as NumPy's. `extra` admits one more (`expand_dims` inserts at r).
pub(super) fn axis_of(v: &Value, shape: &[usize], extra: bool, what: &str) -> FResult<usize> {
    let a = v.as_int()?;
    let r = (shape.len() + usize::from(extra)) as i64;
    let k = if a < 0 { a + r } else { a };
    if !(0..r).contains(&k) {
        return Err(Fault::new(format!("{what}: axis {a} is out of range for a tensor of shape {}", fmt_shape(shape))));
    }
    Ok(k as usize)
}

fn neg(m: &mut Machine, t: Value) -> FResult<Value> {
    ad::apply_un(m, Un::Neg, t)
}

/// The largest element along an axis (removed).
fn max_axis(m: &mut Machine, t: Value, axis: usize) -> FResult<Value> {
    ad::tensor::call(m, TOp::MaxAxis(axis), vec![t])
}

/// The shape with the axis removed (`squeeze`) or a 1 inserted there (`expand_dims`).
fn reshaped(m: &mut Machine, t: Value, shape: Vec<usize>) -> FResult<Value> {
    ad::tensor::call(m, TOp::Reshape(shape), vec![t])
}

/// log_softmax along any axis: x − m − log Σ exp(x − m), with m the axis's maximum held
/// constant (any m gives the same value; the maximum keeps exp from overflowing). The last
/// axis is the op table's own `LogSoftmax` (`Softmax`).
fn softmax_axis(m: &mut Machine, t: Value, axis: usize, log: bool) -> FResult<Value> {
    let shape = ad::shape_of(&t);
    if axis + 1 == shape.len() {
        return ad::tensor::call(m, if log { TOp::LogSoftmax } else { TOp::Softmax }, vec![t]);
    }
    let mut kept = shape.clone();
    kept[axis] = 1;
    let top = max_axis(m, strip(&t), axis)?;
    let top = reshaped(m, top, kept.clone())?;
    let shifted = m.prim2(Prim::Sub, t, top)?;
    let e = ad::apply_un(m, Un::Exp, shifted.clone())?;
    let total = ad::tensor::call(m, TOp::SumAxis(axis), vec![e])?;
    let total = reshaped(m, total, kept)?;
    let lse = ad::apply_un(m, Un::Log, total)?;
    let out = m.prim2(Prim::Sub, shifted, lse)?;
    if log {
        Ok(out)
    } else {
        ad::apply_un(m, Un::Exp, out)
    }
}

/// `get t [i, j, …]`: the element as a differentiable Float (flattened, `Row` of its offset,
/// `Item`). One index per axis; negative ones count from the end, as NumPy's.
fn get(m: &mut Machine, t: Value, ix: &Value) -> FResult<Value> {
    let shape = ad::shape_of(&t);
    let ix = ix.iter_list().map(Value::as_int).collect::<FResult<Vec<_>>>()?;
    let show = || format!("[{}]", ix.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", "));
    if ix.len() != shape.len() {
        return Err(Fault::new(format!(
            "get: {} indices {} for a tensor of shape {} (one per axis)",
            ix.len(),
            show(),
            fmt_shape(&shape)
        )));
    }
    let mut offset = 0;
    for (&i, &n) in ix.iter().zip(&shape) {
        let k = if i < 0 { i + n as i64 } else { i };
        if !(0..n as i64).contains(&k) {
            return Err(Fault::new(format!("get: index {} is out of range for shape {}", show(), fmt_shape(&shape))));
        }
        offset = offset * n + k as usize;
    }
    let n = shape.iter().product();
    let flat = reshaped(m, t, vec![n])?;
    let r = ad::tensor::call(m, TOp::Row(offset), vec![flat])?;
    ad::tensor::call(m, TOp::Item, vec![r])
}

/// `stack axis ts`: each tensor given a new axis there, then concatenated along it.
fn stack(m: &mut Machine, axis: &Value, ts: &Value) -> FResult<Value> {
    let ts: Vec<Value> = ts.iter_list().cloned().collect();
    let Some(first) = ts.first().map(ad::shape_of) else {
        return Err(Fault::new("stack of an empty list"));
    };
    if let Some(other) = ts.iter().map(ad::shape_of).find(|s| *s != first) {
        return Err(Fault::new(format!(
            "stack: the tensors' shapes differ ({} and {})",
            fmt_shape(&first),
            fmt_shape(&other)
        )));
    }
    let a = axis_of(axis, &first, true, "stack")?;
    let mut shape = first;
    shape.insert(a, 1);
    let parts = ts.into_iter().map(|t| reshaped(m, t, shape.clone())).collect::<FResult<Vec<_>>>()?;
    ad::tensor::call(m, TOp::Concat(a), parts)
}

/// `clip lo hi t` built as `jnp.clip` is, `min hi (max lo t)`: the derivative is that of the two
/// selections (1 inside, 0 outside, 1/2 on a bound), multiplied through as JAX does, so an
/// infinite adjoint meeting a clipped-out element gives NaN there in both. `tree_clip`'s tensor
/// leaves use it too.
pub(super) fn clip(m: &mut Machine, lo: Value, hi: Value, t: Value) -> FResult<Value> {
    let (lo, t) = tensors(m, lo, t, "clip")?;
    let above = ad::tensor::call(m, TOp::Cmp(Cmp::Max), vec![lo, t])?;
    let (hi, above) = tensors(m, hi, above, "clip")?;
    ad::tensor::call(m, TOp::Cmp(Cmp::Min), vec![hi, above])
}

pub fn call(m: &mut Machine, b: B, arg: &mut dyn FnMut() -> Value) -> FResult<Value> {
    let cmp = |b: B| match b {
        B::Less => Some(Cmp::Less),
        B::LessEqual => Some(Cmp::LessEqual),
        B::Greater => Some(Cmp::Greater),
        B::GreaterEqual => Some(Cmp::GreaterEqual),
        B::Equal => Some(Cmp::Equal),
        B::NotEqual => Some(Cmp::NotEqual),
        B::LogicalAnd => Some(Cmp::And),
        B::LogicalOr => Some(Cmp::Or),
        _ => None,
    };
    if let Some(c) = cmp(b) {
        let x = arg();
        return compare(m, c, x, arg());
    }
    Ok(match b {
        B::LogicalNot => ad::tensor::call(m, TOp::Not, vec![strip(&arg())])?,
        B::Where => {
            let (c, x) = (strip(&arg()), arg());
            ad::tensor::call(m, TOp::Where, vec![c, x, arg()])?
        }
        // As jnp.clip: maximum with lo, then minimum with hi (so hi wins when lo > hi, and the
        // derivative at either bound is the tie's 1/2).
        B::Clip => {
            let (lo, hi, t) = (arg(), arg(), arg());
            clip(m, lo, hi, t)?
        }
        B::Any | B::All => {
            let t = arg();
            if let Value::Batched(_) = strip(&t) {
                return ad::batch::any_all(m, &t, b == B::All);
            }
            let t = t.as_tensor()?;
            Value::Bool(if b == B::All { t.all()? } else { t.any()? })
        }
        B::MaxOf | B::MinOf => {
            let c = if b == B::MaxOf { Cmp::Max } else { Cmp::Min };
            let x = arg();
            pick(m, c, x, arg())?
        }
        B::Min => {
            let n = neg(m, arg())?;
            let top = ad::tensor::call(m, TOp::Max, vec![n])?;
            m.prim1(Prim::Neg, top)?
        }
        B::Argmin => {
            let t = arg();
            if let Value::Batched(_) = strip(&t) {
                return ad::batch::arg_extreme(m, &t, true);
            }
            let t = t.as_tensor()?;
            match t.unary(Un::Neg)?.argmax()? {
                Some(i) => Value::Int(i as i64),
                None => return Err(Fault::new("argmin of an empty tensor")),
            }
        }
        B::MaxAxis | B::MinAxis | B::ArgmaxAxis | B::ArgminAxis | B::Cumsum | B::SoftmaxAxis | B::LogSoftmaxAxis => {
            let t = arg();
            let name = crate::builtins::TABLE.iter().find(|e| e.1 == b).map_or("axis", |e| e.0);
            let a = axis_of(&arg(), &ad::shape_of(&t), false, name)?;
            match b {
                B::MaxAxis => max_axis(m, t, a)?,
                B::MinAxis => {
                    let n = neg(m, t)?;
                    let top = max_axis(m, n, a)?;
                    neg(m, top)?
                }
                B::ArgmaxAxis => ad::tensor::call(m, TOp::ArgmaxAxis(a), vec![strip(&t)])?,
                B::ArgminAxis => {
                    let n = neg(m, strip(&t))?;
                    ad::tensor::call(m, TOp::ArgmaxAxis(a), vec![n])?
                }
                B::Cumsum => ad::tensor::call(m, TOp::Cumsum(a), vec![t])?,
                _ => softmax_axis(m, t, a, b == B::LogSoftmaxAxis)?,
            }
        }
        // Layer norm's core. A plain eps is the operation's parameter; an eps that is itself
        // differentiated or traced takes the definition, so its derivative is not lost.
        B::Normalize => {
            let (eps, t) = (arg(), arg());
            match eps {
                Value::Float(eps) => ad::tensor::call(m, TOp::Normalize(eps), vec![t])?,
                eps => {
                    if ad::shape_of(&t).last().is_none_or(|&n| n == 0) {
                        return Err(Fault::new(
                            "normalize needs a tensor with at least one axis, the last one not empty",
                        ));
                    }
                    ad::tensor::normalize_formula(m, &t, eps)?
                }
            }
        }
        // The population variance (ddof 0, NumPy's default): the mean squared deviation.
        B::Var => {
            let t = arg();
            let mu = ad::tensor::call(m, TOp::Mean, vec![t.clone()])?;
            let d = m.prim2(Prim::Sub, t, mu)?;
            let dd = m.prim2(Prim::Mul, d.clone(), d)?;
            ad::tensor::call(m, TOp::Mean, vec![dd])?
        }
        B::ExpandDims | B::Squeeze => {
            let t = arg();
            let mut shape = ad::shape_of(&t);
            let name = if b == B::Squeeze { "squeeze" } else { "expand_dims" };
            let a = axis_of(&arg(), &shape, b == B::ExpandDims, name)?;
            if b == B::ExpandDims {
                shape.insert(a, 1);
            } else if shape[a] != 1 {
                return Err(Fault::new(format!(
                    "squeeze: axis {a} of shape {} has length {}, not 1",
                    fmt_shape(&shape),
                    shape[a]
                )));
            } else {
                shape.remove(a);
            }
            reshaped(m, t, shape)?
        }
        B::Stack => {
            let axis = arg();
            stack(m, &axis, &arg())?
        }
        B::BroadcastTo => {
            let t = arg();
            let to = arg()
                .iter_list()
                .map(|d| usize::try_from(d.as_int()?).map_err(|_| Fault::new("broadcast_to: a negative dimension")))
                .collect::<FResult<Vec<_>>>()?;
            let from = ad::shape_of(&t);
            if crate::tensor::broadcast_shape(&from, &to).ok().as_deref() != Some(&to[..]) {
                return Err(Fault::new(format!(
                    "broadcast_to: cannot broadcast shape {} to {}",
                    fmt_shape(&from),
                    fmt_shape(&to)
                )));
            }
            ad::tensor::call(m, TOp::BroadcastTo(to), vec![t])?
        }
        B::Ravel => {
            let t = arg();
            let n = ad::shape_of(&t).iter().product();
            reshaped(m, t, vec![n])?
        }
        B::Gather => {
            let (t, ix) = (arg(), strip(&arg()));
            let a = axis_of(&arg(), &ad::shape_of(&t), false, "gather")?;
            ad::tensor::call(m, TOp::Gather(a), vec![t, ix])?
        }
        B::Get => {
            let t = arg();
            get(m, t, &arg())?
        }
        other => return Err(Fault::internal(format!("{other:?} is not a tensor operation builtin"))),
    })
}
