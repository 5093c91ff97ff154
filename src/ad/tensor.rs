//! The tensor operations' derivative rules: each operation's reverse rule (`vjp`) and forward
//! rule (`jvp`), beside the AD-aware entry point (`call`). The forward definitions are the
//! tensor library's op table (dp_tensor::ops); the rules are written with `call` and the
//! machine's generic arithmetic, so they are differentiable themselves and higher-order
//! derivatives through tensor code need nothing extra.

use super::Host;
use crate::ad;
use crate::core::Prim;
use crate::runtime::perturbed::{is_ad, strip};
use crate::runtime::tensor::wrap;
use crate::runtime::value::Value;
use crate::runtime::FResult;
use crate::tensor::{Cmp, Device, TOp, Tensor, Un};

/// Applies a tensor operation to values that may carry perturbations: the AD-aware entry point.
pub fn call<H: Host>(m: &mut H, op: TOp, args: Vec<Value>) -> FResult<Value> {
    if is_identity(&op, &args) {
        return Ok(args.into_iter().next().unwrap_or(Value::Unit));
    }
    if let (TOp::Reshape(shape), [Value::Tensor(_)]) = (&op, args.as_slice()) {
        if let Some(Value::Tensor(t)) = args.into_iter().next() {
            return match std::rc::Rc::try_unwrap(t) {
                Ok(t) => Ok(wrap(crate::tensor::ops::reshape_owned(t, shape)?)),
                Err(shared) => m.forward(&op, &[Value::Tensor(shared)]),
            };
        }
        return Err(crate::runtime::Fault::internal("a reshape without its operand"));
    }
    if !args.iter().any(is_ad) {
        return m.forward(&op, &args);
    }
    ad::tensor_op(m, op, args)
}

/// The reverse rule of `slice` straight into the operand's adjoint buffer: once that buffer
/// exists (a tensor nobody else holds), each slice's adjoint is added into its place, instead
/// of being spread over a zero tensor of the operand's shape and added whole (attention's q, k
/// and v are three slices of one product). False when the rule must run as usual: the first
/// slice, whose result becomes the buffer; perturbed adjoints (nested levels); a buffer or
/// adjoint of another device or dtype.
pub(super) fn slice_adjoint_into(cell: &crate::runtime::perturbed::Tracked, axis: usize, lo: usize, g: &Value) -> bool {
    let Value::Tensor(g) = g else { return false };
    let mut slot = cell.adj.borrow_mut();
    let Some(Value::Tensor(buf)) = slot.as_mut() else { return false };
    std::rc::Rc::get_mut(buf).is_some_and(|buf| buf.add_into_slice(axis, lo, g))
}

/// Whether `op` leaves its one tensor operand as it is: a reshape, broadcast or sum to the
/// shape it already has, or the identity permutation (einsum's lowering and the batched
/// product's rule emit them for every operand). The operand is then the result: a CPU tensor
/// owns its buffer, so running the operation would copy it, and under `grad` record a frame.
fn is_identity(op: &TOp, args: &[Value]) -> bool {
    let [x] = args else { return false };
    if !ad::is_tensor(x) {
        return false;
    }
    match op {
        TOp::Reshape(s) | TOp::SumTo(s) | TOp::BroadcastTo(s) => ad::shape_of(x) == *s,
        TOp::Permute(perm) => perm.iter().enumerate().all(|(i, &p)| i == p) && perm.len() == ad::shape_of(x).len(),
        _ => false,
    }
}

fn mul<H: Host>(m: &mut H, a: Value, b: Value) -> FResult<Value> {
    m.prim2(Prim::Mul, a, b)
}

/// `x·w + c·(1 − w)` for a constant weight `w` in {0, ½, 1}, each side through `select` (so
/// an infinite or NaN value on the side weighted 0 stays out): a clip's result, `c` the
/// clamped value, with the tie's ½ at a bound.
pub fn blend<H: Host>(m: &mut H, x: Value, c: Value, w: Value) -> FResult<Value> {
    let rest = m.prim2(Prim::Sub, Value::Float(1.0), w.clone())?;
    let kept = select(m, x, w.clone())?;
    let kept = m.prim2(Prim::Mul, kept, w)?;
    let fixed = select(m, c, rest.clone())?;
    let fixed = m.prim2(Prim::Mul, fixed, rest)?;
    m.prim2(Prim::Add, kept, fixed)
}

/// `x` where the constant `mask` is positive, else 0 — on Floats or tensors, `x` perturbed or
/// not. A select, not a product: where the mask is 0 an infinite or NaN `x` gives 0 (JAX's
/// `select` in the rules of relu and `**`), so a zero local derivative stops any adjoint.
pub fn select<H: Host>(m: &mut H, x: Value, mask: Value) -> FResult<Value> {
    match strip(&mask) {
        mask @ (Value::Tensor(_) | Value::Staged(_)) if ad::is_tensor(&mask) => {
            let (xs, ms) = (ad::shape_of(&x), ad::shape_of(&mask));
            let (x, mask) = if !ad::is_tensor(&x) {
                (call(m, TOp::BroadcastTo(ms), vec![x])?, mask)
            } else if xs != ms {
                (x, call(m, TOp::BroadcastTo(xs), vec![mask])?)
            } else {
                (x, mask)
            };
            call(m, TOp::Mask, vec![x, mask])
        }
        // A traced Float mask for a tensor (a traced Float exponent's or base's in the rule of
        // `**`): spread over the tensor's shape, as a Float mask is by the test below.
        mask @ Value::StagedFloat(_) if ad::is_tensor(&x) => {
            let mask = call(m, TOp::BroadcastTo(ad::shape_of(&x)), vec![mask])?;
            call(m, TOp::Mask, vec![x, mask])
        }
        // A mask per example: the select of the batching rule of `Mask`; a traced Float mask:
        // the staged program selects (on Floats, exec.rs).
        Value::Batched(_) | Value::Staged(_) | Value::StagedFloat(_) => call(m, TOp::Mask, vec![x, mask]),
        Value::Float(k) if k > 0.0 => Ok(x),
        // A perturbed scalar selected out is an exact zero that stays perturbed, as JAX's
        // select is: an outer level's adjoint then sends an exact zero back to `x` (which
        // meets the partials below it: 0 · NaN = NaN), where an untracked zero would send
        // nothing. Built from the tensor select on a 0-d tensor, whose rules already do this.
        _ if is_ad(&x) => {
            let x0 = call(m, TOp::BroadcastTo(Vec::new()), vec![x])?;
            let mask = wrap(Tensor::from_vec(&[], vec![0.0f32])?);
            let selected = call(m, TOp::Mask, vec![x0, mask])?;
            call(m, TOp::Item, vec![selected])
        }
        _ => Ok(ad::zero_like(&x)),
    }
}

/// Whether a value carries no perturbation (a plain tensor, or a traced one): the one-pass
/// adjoint operations (`NormalizeGrad`, `SoftmaxGrad`), which have no derivatives of their
/// own, may compute with it.
fn plain(v: &Value) -> bool {
    matches!(v, Value::Tensor(_) | Value::Staged(_) | Value::StagedFloat(_))
}

/// The adjoint of softmax (`log` false: y · (g − Σ g y)) or log-softmax (g − exp y · Σ g)
/// whose result is y, for g, the sums along the last axis: the one-pass `SoftmaxGrad` when
/// nothing is differentiated through it, else the formula from differentiable operations.
fn softmax_adjoint<H: Host>(m: &mut H, log: bool, y: &Value, g: Value) -> FResult<Value> {
    if plain(y) && plain(&g) {
        return call(m, TOp::SoftmaxGrad { log }, vec![y.clone(), g]);
    }
    if log {
        let p = ad::apply_un(m, Un::Exp, y.clone())?;
        let s = sum_last_keep(m, g.clone())?;
        let ps = mul(m, p, s)?;
        return m.prim2(Prim::Sub, g, ps);
    }
    let gy = mul(m, g.clone(), y.clone())?;
    let s = sum_last_keep(m, gy)?;
    let d = m.prim2(Prim::Sub, g, s)?;
    mul(m, y.clone(), d)
}

/// The adjoint (or, the Jacobian being symmetric, the tangent) of `normalize eps` at x, whose
/// result is y, for g: rstd · (g − mean g − y · mean (g y)) along the last axis, rstd =
/// 1 / √(var x + eps). When nothing is differentiated through it (a first-order gradient, or
/// a staged one) that is the one-pass `NormalizeGrad`; otherwise the same formula from
/// differentiable operations, so higher orders and batches follow.
fn normalize_adjoint<H: Host>(m: &mut H, eps: f64, x: &Value, y: &Value, g: Value) -> FResult<Value> {
    if plain(x) && plain(&g) {
        return call(m, TOp::NormalizeGrad(eps), vec![x.clone(), g]);
    }
    let (_, sd) = centred_and_sd(m, x, Value::Float(eps))?;
    let mg = mean_last_keep(m, g.clone())?;
    let gy = mul(m, g.clone(), y.clone())?;
    let mgy = mean_last_keep(m, gy)?;
    let centred = m.prim2(Prim::Sub, g, mg)?;
    let ymgy = mul(m, y.clone(), mgy)?;
    let d = m.prim2(Prim::Sub, centred, ymgy)?;
    m.prim2(Prim::Div, d, sd)
}

/// `normalize`'s definition from differentiable operations, for an `eps` that is itself
/// differentiated or traced: (x − mean x) / sd along the last axis.
pub fn normalize_formula<H: Host>(m: &mut H, x: &Value, eps: Value) -> FResult<Value> {
    let (c, sd) = centred_and_sd(m, x, eps)?;
    m.prim2(Prim::Div, c, sd)
}

/// x − mean x and √(var x + eps) along the last axis (kept, of length 1), from differentiable
/// operations: `normalize`'s formula and its rule's.
fn centred_and_sd<H: Host>(m: &mut H, x: &Value, eps: Value) -> FResult<(Value, Value)> {
    let mu = mean_last_keep(m, x.clone())?;
    let c = m.prim2(Prim::Sub, x.clone(), mu)?;
    let cc = mul(m, c.clone(), c.clone())?;
    let var = mean_last_keep(m, cc)?;
    let v = m.prim2(Prim::Add, var, eps)?;
    let sd = ad::apply_un(m, Un::Sqrt, v)?;
    Ok((c, sd))
}

/// The mean over the last axis, keeping it.
fn mean_last_keep<H: Host>(m: &mut H, v: Value) -> FResult<Value> {
    let n = ad::shape_of(&v).last().copied().unwrap_or(1).max(1) as f64;
    let s = sum_last_keep(m, v)?;
    m.prim2(Prim::Div, s, Value::Float(n))
}

/// The fault of a rule asked of an operation that is never differentiated (it is only made
/// where nothing is).
fn not_differentiated(op: &TOp) -> crate::runtime::Fault {
    crate::runtime::Fault::internal(format!("`{}` was differentiated", op.name()))
}

/// Sums over the last axis, keeping it (for the softmax rules).
fn sum_last_keep<H: Host>(m: &mut H, v: Value) -> FResult<Value> {
    let mut shape = ad::shape_of(&v);
    let Some(last) = shape.len().checked_sub(1) else { return Ok(v) };
    let s = call(m, TOp::SumAxis(last), vec![v])?;
    shape[last] = 1;
    call(m, TOp::Reshape(shape), vec![s])
}

/// The device of a (possibly perturbed) tensor; the CPU for Floats.
fn device_of(v: &Value) -> Device {
    match ad::underlying(v) {
        Some(t) => t.device(),
        None => Device::Cpu,
    }
}

/// A Float adjoint `g` spread over the shape of `x`, in x's floating dtype and on its device
/// (the adjoint of a reduction to a Float).
fn spread<H: Host>(m: &mut H, x: &Value, g: Value) -> FResult<Value> {
    let s0 = ad::shape_of(x);
    let Some(t) = ad::underlying(x) else { return call(m, TOp::BroadcastTo(s0), vec![g]) };
    match g {
        Value::Float(v) => Ok(wrap(t.full_like(&s0, v)?)),
        Value::Tensor(_) => call(m, TOp::BroadcastTo(s0), vec![g]),
        // A perturbed Float (a higher-order derivative): spread so the product records it.
        g => {
            let ones = wrap(t.full_like(&s0, 1.0)?);
            mul(m, ones, g)
        }
    }
}

/// A 0-d zero of `v`'s floating dtype on its device (the unselected side of a `Where` rule).
fn zero0(v: &Value) -> FResult<Value> {
    match ad::underlying(v) {
        Some(t) => Ok(wrap(t.full_like(&[], 0.0)?)),
        None => Ok(Value::Float(0.0)),
    }
}

/// The weights of `max_of`/`min_of`'s operands in its derivative, as JAX's `maximum`: 1 for the
/// operand the result came from, 0.5 each at a tie, 0 for both where the result is a NaN
/// neither equals. Built from the primal values: locally constant, not differentiated.
fn pick_weights<H: Host>(m: &mut H, a: &Value, b: &Value, y: &Value) -> FResult<(Value, Value)> {
    let (a, b, y) = (strip(a), strip(b), strip(y));
    let ea = call(m, TOp::Cmp(Cmp::Equal), vec![a, y.clone()])?;
    let eb = call(m, TOp::Cmp(Cmp::Equal), vec![b, y])?;
    let weight = |m: &mut H, e: &Value, other: &Value| -> FResult<Value> {
        let half = m.prim2(Prim::Mul, other.clone(), Value::Float(0.5))?;
        let share = m.prim2(Prim::Sub, Value::Float(1.0), half)?;
        m.prim2(Prim::Mul, e.clone(), share)
    };
    Ok((weight(m, &ea, &eb)?, weight(m, &eb, &ea)?))
}

/// `v` summed down to the shape of `x` (the adjoint of an operand broadcast in the forward).
fn sum_to<H: Host>(m: &mut H, x: &Value, v: Value) -> FResult<Value> {
    let (sx, sv) = (ad::shape_of(x), ad::shape_of(&v));
    if sx == sv {
        return Ok(v);
    }
    call(m, TOp::SumTo(sx), vec![v])
}

/// `max_axis`'s derivative weights: 1/k at each of the k positions along the axis that hold
/// the maximum (JAX's rule for reductions by max), 0 elsewhere; kept dims of `y` say where.
/// Built from the primal values: locally constant.
fn max_axis_weights<H: Host>(m: &mut H, x: &Value, y: &Value, axis: usize) -> FResult<Value> {
    let mut kept = ad::shape_of(x);
    kept[axis] = 1;
    let top = call(m, TOp::Reshape(kept.clone()), vec![strip(y)])?;
    let at_top = call(m, TOp::Cmp(Cmp::Equal), vec![strip(x), top])?;
    let at_top = m.prim2(Prim::Mul, at_top, Value::Float(1.0))?;
    let count = call(m, TOp::SumAxis(axis), vec![at_top.clone()])?;
    let count = call(m, TOp::Reshape(kept), vec![count])?;
    m.prim2(Prim::Div, at_top, count)
}

/// Reverse rule: the contribution to each input's adjoint, given the output adjoint `g`.
/// `needs[i]` says whether input i's contribution is wanted (it is tracked): rules with
/// expensive per-input work (matrix products) skip the others.
pub fn vjp<H: Host>(
    m: &mut H,
    op: &TOp,
    xs: &[Value],
    y: &Value,
    g: Value,
    needs: &[bool],
) -> FResult<Vec<Option<Value>>> {
    let s0 = ad::shape_of(&xs[0]);
    let need = |i: usize| needs.get(i).copied().unwrap_or(true);
    Ok(match op {
        TOp::MatMul if s0.len() > 2 || ad::shape_of(&xs[1]).len() > 2 => {
            batched_matmul_vjp(m, xs[0].clone(), xs[1].clone(), g, need(0), need(1))?
        }
        TOp::MatMul => {
            let (sa, sb) = (s0.len(), ad::shape_of(&xs[1]).len());
            let (a, b) = (xs[0].clone(), xs[1].clone());
            // (contribution to a, contribution to b), each computed only when needed.
            let (da, db): (Option<Value>, Option<Value>) = match (sa, sb) {
                (2, 2) => (
                    if need(0) {
                        let bt = call(m, TOp::Transpose, vec![b.clone()])?;
                        Some(call(m, TOp::MatMul, vec![g.clone(), bt])?)
                    } else {
                        None
                    },
                    if need(1) {
                        let at = call(m, TOp::Transpose, vec![a])?;
                        Some(call(m, TOp::MatMul, vec![at, g])?)
                    } else {
                        None
                    },
                ),
                (2, 1) => (
                    if need(0) {
                        let n = ad::shape_of(&g)[0];
                        let k = ad::shape_of(&b)[0];
                        let gc = call(m, TOp::Reshape(vec![n, 1]), vec![g.clone()])?;
                        let br = call(m, TOp::Reshape(vec![1, k]), vec![b])?;
                        Some(call(m, TOp::MatMul, vec![gc, br])?)
                    } else {
                        None
                    },
                    // aᵀ @ g as g @ a: the same numbers without materialising the transpose.
                    if need(1) { Some(call(m, TOp::MatMul, vec![g.clone(), a])?) } else { None },
                ),
                (1, 2) => (
                    if need(0) { Some(call(m, TOp::MatMul, vec![b, g.clone()])?) } else { None },
                    if need(1) {
                        let k = ad::shape_of(&a)[0];
                        let n = ad::shape_of(&g)[0];
                        let ac = call(m, TOp::Reshape(vec![k, 1]), vec![a])?;
                        let gr = call(m, TOp::Reshape(vec![1, n]), vec![g])?;
                        Some(call(m, TOp::MatMul, vec![ac, gr])?)
                    } else {
                        None
                    },
                ),
                _ => (Some(mul(m, g.clone(), b)?), Some(mul(m, g, a)?)),
            };
            vec![da, db]
        }
        TOp::Sum | TOp::Item => vec![Some(spread(m, &xs[0], g)?)],
        TOp::Mean => {
            let n = s0.iter().product::<usize>().max(1) as f64;
            let gn = m.prim2(Prim::Div, g, Value::Float(n))?;
            vec![Some(spread(m, &xs[0], gn)?)]
        }
        TOp::Max => {
            let mask = call(m, TOp::ArgmaxMask, vec![strip(&xs[0])])?;
            vec![Some(mul(m, mask, g)?)]
        }
        TOp::Logsumexp => {
            // d lse / dx = exp(x - lse)
            let d = m.prim2(Prim::Sub, xs[0].clone(), y.clone())?;
            let e = ad::apply_un(m, Un::Exp, d)?;
            vec![Some(mul(m, e, g)?)]
        }
        TOp::SumAxis(a) | TOp::MeanAxis(a) => {
            let mut kept = s0.clone();
            kept[*a] = 1;
            let gr = call(m, TOp::Reshape(kept), vec![g])?;
            let gr =
                if matches!(op, TOp::MeanAxis(_)) { m.prim2(Prim::Div, gr, Value::Float(s0[*a] as f64))? } else { gr };
            vec![Some(call(m, TOp::BroadcastTo(s0), vec![gr])?)]
        }
        TOp::SumTo(_) => vec![Some(call(m, TOp::BroadcastTo(s0), vec![g])?)],
        TOp::BroadcastTo(_) => vec![Some(call(m, TOp::SumTo(s0), vec![g])?)],
        TOp::Reshape(_) => vec![Some(call(m, TOp::Reshape(s0), vec![g])?)],
        TOp::Transpose => vec![Some(call(m, TOp::Transpose, vec![g])?)],
        TOp::Permute(perm) => {
            let mut inverse = vec![0; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inverse[p] = i;
            }
            vec![Some(call(m, TOp::Permute(inverse), vec![g])?)]
        }
        TOp::Row(i) => vec![Some(call(m, TOp::ScatterRow(*i, s0), vec![g])?)],
        TOp::ScatterRow(i, _) => vec![Some(call(m, TOp::Row(*i), vec![g])?)],
        TOp::Normalize(eps) => vec![Some(normalize_adjoint(m, *eps, &xs[0], y, g)?)],
        TOp::NormalizeGrad(_) => return Err(not_differentiated(op)),
        TOp::Softmax => vec![Some(softmax_adjoint(m, false, y, g)?)],
        TOp::LogSoftmax => vec![Some(softmax_adjoint(m, true, y, g)?)],
        TOp::SoftmaxGrad { .. } => return Err(not_differentiated(op)),
        TOp::Concat(axis) => {
            let mut out = Vec::new();
            let mut lo = 0;
            for x in xs {
                let n = ad::shape_of(x)[*axis];
                out.push(Some(call(m, TOp::Slice(*axis, lo, lo + n), vec![g.clone()])?));
                lo += n;
            }
            out
        }
        TOp::Slice(axis, lo, _) => vec![Some(call(m, TOp::Unslice(*axis, *lo, s0), vec![g])?)],
        TOp::Unslice(axis, lo, _) => {
            let n = s0[*axis];
            vec![Some(call(m, TOp::Slice(*axis, *lo, lo + n), vec![g])?)]
        }
        // Convolution is bilinear: <g, conv(x, w)> = <IG(w, g), x> = <WG(x, g), w>, so the
        // adjoint maps are themselves linear in each argument and have exact reverse rules.
        // (The same holds with a stride and padding: all three are one trilinear form's
        // partial maps, so each keeps the forward operation's stride and padding.)
        TOp::Conv2d(cv) => {
            let (x, w) = (xs[0].clone(), xs[1].clone());
            vec![
                Some(call(m, TOp::Conv2dInputGrad(*cv), vec![x.clone(), w.clone(), g.clone()])?),
                Some(call(m, TOp::Conv2dWeightGrad(*cv), vec![x, w, g])?),
            ]
        }
        TOp::Conv2dInputGrad(cv) => {
            let (w, gy) = (xs[1].clone(), xs[2].clone());
            vec![
                None,
                Some(call(m, TOp::Conv2dWeightGrad(*cv), vec![g.clone(), w.clone(), gy])?),
                Some(call(m, TOp::Conv2d(*cv), vec![g, w])?),
            ]
        }
        TOp::Conv2dWeightGrad(cv) => {
            let (x, gy) = (xs[0].clone(), xs[2].clone());
            vec![
                Some(call(m, TOp::Conv2dInputGrad(*cv), vec![x.clone(), g.clone(), gy])?),
                None,
                Some(call(m, TOp::Conv2d(*cv), vec![x, g])?),
            ]
        }
        // Pooling routes values by the (locally constant) argmax: linear in everything else.
        TOp::MaxPool2d(k) => vec![Some(call(m, TOp::MaxPool2dGrad(*k), vec![strip(&xs[0]), g])?)],
        TOp::MaxPool2dGrad(k) => vec![None, Some(call(m, TOp::MaxPool2dPick(*k), vec![strip(&xs[0]), g])?)],
        TOp::MaxPool2dPick(k) => vec![None, Some(call(m, TOp::MaxPool2dGrad(*k), vec![strip(&xs[0]), g])?)],
        TOp::ToDevice(_) => vec![Some(call(m, TOp::ToDevice(device_of(&xs[0])), vec![g])?)],
        // Only a floating result carries a derivative, back in the input's dtype.
        TOp::AsType(to) => match ad::dtype_of(&xs[0]) {
            Some(from) if from.is_float() && to.is_float() => vec![Some(call(m, TOp::AsType(from), vec![g])?)],
            _ => vec![None],
        },
        TOp::Mask => vec![Some(call(m, TOp::Mask, vec![g, strip(&xs[1])])?), None],
        TOp::Cmp(Cmp::Max | Cmp::Min) => {
            let (wa, wb) = pick_weights(m, &xs[0], &xs[1], y)?;
            let mut out = Vec::new();
            for (i, w) in [wa, wb].into_iter().enumerate() {
                out.push(if need(i) {
                    let gw = mul(m, g.clone(), w)?;
                    Some(sum_to(m, &xs[i], gw)?)
                } else {
                    None
                });
            }
            out
        }
        // A select: the adjoint goes to the chosen side only, exactly zero on the other (an
        // infinite or NaN `g` there does not leak as 0 · g would).
        TOp::Where => {
            // Only the tracked sides: a constant branch (the -1e30 of a mask, the 0 of a
            // selection) would cost a select and a sum over the whole shape for nothing.
            let (c, z) = (strip(&xs[0]), zero0(&g)?);
            let side = |i: usize, m: &mut H| -> FResult<Option<Value>> {
                if !need(i) {
                    return Ok(None);
                }
                let picked =
                    if i == 1 { vec![c.clone(), g.clone(), z.clone()] } else { vec![c.clone(), z.clone(), g.clone()] };
                let gi = call(m, TOp::Where, picked)?;
                Ok(Some(sum_to(m, &xs[i], gi)?))
            };
            vec![None, side(1, m)?, side(2, m)?]
        }
        TOp::Cmp(_) | TOp::Not | TOp::ArgmaxAxis(_) => xs.iter().map(|_| None).collect(),
        TOp::MaxAxis(a) => {
            let w = max_axis_weights(m, &xs[0], y, *a)?;
            let mut kept = s0.clone();
            kept[*a] = 1;
            let gk = call(m, TOp::Reshape(kept), vec![g])?;
            vec![Some(mul(m, w, gk)?)]
        }
        // The adjoint of a running sum is the running sum from the other end: the total
        // minus the running sum before each position.
        TOp::Cumsum(a) => {
            let mut kept = s0.clone();
            kept[*a] = 1;
            let total = call(m, TOp::SumAxis(*a), vec![g.clone()])?;
            let total = call(m, TOp::Reshape(kept), vec![total])?;
            let before = call(m, TOp::Cumsum(*a), vec![g.clone()])?;
            let rest = m.prim2(Prim::Sub, total, before)?;
            vec![Some(m.prim2(Prim::Add, rest, g)?)]
        }
        TOp::Gather(a) => vec![Some(call(m, TOp::ScatterAdd(*a, s0), vec![g, strip(&xs[1])])?), None],
        TOp::ScatterAdd(a, _) => vec![Some(call(m, TOp::Gather(*a), vec![g, strip(&xs[1])])?), None],
        TOp::Step | TOp::Sign | TOp::ArgmaxMask => xs.iter().map(|_| None).collect(),
    })
}

/// The reverse rule of `@` on stacks of matrices (either operand of rank 3 or more): with a
/// rank-1 operand made a row (left) or column (right) matrix, dA = G Bᵀ and dB = Aᵀ G as
/// batched products (ᵀ swapping the last two axes), each summed over the batch axes its
/// operand was broadcast along, then shaped back. Written with `call`, so it differentiates.
fn batched_matmul_vjp<H: Host>(
    m: &mut H,
    a: Value,
    b: Value,
    g: Value,
    need_a: bool,
    need_b: bool,
) -> FResult<Vec<Option<Value>>> {
    let (sa, sb) = (ad::shape_of(&a), ad::shape_of(&b));
    let as_matrix = |m: &mut H, v: Value, s: &[usize], row: bool| -> FResult<Value> {
        match s {
            [k] => call(m, TOp::Reshape(if row { vec![1, *k] } else { vec![*k, 1] }), vec![v]),
            _ => Ok(v),
        }
    };
    let a2 = as_matrix(m, a, &sa, true)?;
    let b2 = as_matrix(m, b, &sb, false)?;
    let (sa2, sb2) = (ad::shape_of(&a2), ad::shape_of(&b2));
    // g with the row or column axis a vector operand dropped put back.
    let gs = crate::tensor::op::matmul_shape(&sa2, &sb2)?;
    let g2 = call(m, TOp::Reshape(gs), vec![g])?;
    let swap_last = |m: &mut H, v: Value| -> FResult<Value> {
        let r = ad::shape_of(&v).len();
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 2, r - 1);
        call(m, TOp::Permute(perm), vec![v])
    };
    let back = |m: &mut H, d: Value, s2: &[usize], s: &[usize]| -> FResult<Value> {
        let d = call(m, TOp::SumTo(s2.to_vec()), vec![d])?;
        call(m, TOp::Reshape(s.to_vec()), vec![d])
    };
    let da = if need_a {
        let bt = swap_last(m, b2.clone())?;
        let d = call(m, TOp::MatMul, vec![g2.clone(), bt])?;
        Some(back(m, d, &sa2, &sa)?)
    } else {
        None
    };
    let db = if need_b {
        let at = swap_last(m, a2)?;
        let d = call(m, TOp::MatMul, vec![at, g2])?;
        Some(back(m, d, &sb2, &sb)?)
    } else {
        None
    };
    Ok(vec![da, db])
}

/// Forward rule: the output tangent, given input tangents (None = zero).
pub fn jvp<H: Host>(m: &mut H, op: &TOp, xs: &[Value], y: &Value, ts: &[Option<Value>]) -> FResult<Value> {
    let linear = |m: &mut H, ts: &[Option<Value>]| -> FResult<Value> {
        match &ts[0] {
            Some(t) => call(m, op.clone(), vec![t.clone()]),
            None => Ok(Value::Float(0.0)),
        }
    };
    match op {
        TOp::MatMul => {
            let mut acc = Value::Float(0.0);
            if let Some(ta) = &ts[0] {
                acc = call(m, TOp::MatMul, vec![ta.clone(), xs[1].clone()])?;
            }
            if let Some(tb) = &ts[1] {
                let c = call(m, TOp::MatMul, vec![xs[0].clone(), tb.clone()])?;
                acc = m.prim2(Prim::Add, acc, c)?;
            }
            Ok(acc)
        }
        TOp::Concat(_) => {
            let parts = xs
                .iter()
                .zip(ts)
                .map(|(x, t)| match t {
                    Some(t) => Ok(t.clone()),
                    None => Ok(ad::zero_like(x)),
                })
                .collect::<FResult<Vec<_>>>()?;
            call(m, op.clone(), parts)
        }
        // The Jacobian is symmetric: the tangent map is the adjoint map.
        TOp::Normalize(eps) => match &ts[0] {
            Some(t) => normalize_adjoint(m, *eps, &xs[0], y, t.clone()),
            None => Ok(Value::Float(0.0)),
        },
        TOp::NormalizeGrad(_) | TOp::SoftmaxGrad { .. } => Err(not_differentiated(op)),
        TOp::Max | TOp::Logsumexp | TOp::Softmax | TOp::LogSoftmax => {
            // Contract the tangent with the reverse rule's weights: exact for these ops.
            let Some(t) = &ts[0] else { return Ok(Value::Float(0.0)) };
            match op {
                TOp::Max => {
                    let mask = call(m, TOp::ArgmaxMask, vec![strip(&xs[0])])?;
                    let p = mul(m, mask, t.clone())?;
                    call(m, TOp::Sum, vec![p])
                }
                TOp::Logsumexp => {
                    let d = m.prim2(Prim::Sub, xs[0].clone(), y.clone())?;
                    let e = ad::apply_un(m, Un::Exp, d)?;
                    let p = mul(m, e, t.clone())?;
                    call(m, TOp::Sum, vec![p])
                }
                // Its Jacobian diag(y) − y yᵀ is symmetric: the tangent map is the adjoint map.
                TOp::Softmax => softmax_adjoint(m, false, y, t.clone()),
                _ => {
                    let p = ad::apply_un(m, Un::Exp, y.clone())?;
                    let pt = mul(m, p, t.clone())?;
                    let s = sum_last_keep(m, pt)?;
                    m.prim2(Prim::Sub, t.clone(), s)
                }
            }
        }
        TOp::Conv2d(_) => {
            let mut acc = Value::Float(0.0);
            if let Some(tx) = &ts[0] {
                acc = call(m, op.clone(), vec![tx.clone(), xs[1].clone()])?;
            }
            if let Some(tw) = &ts[1] {
                let c = call(m, op.clone(), vec![xs[0].clone(), tw.clone()])?;
                acc = m.prim2(Prim::Add, acc, c)?;
            }
            Ok(acc)
        }
        TOp::MaxPool2d(k) => {
            let Some(t) = &ts[0] else { return Ok(Value::Float(0.0)) };
            call(m, TOp::MaxPool2dPick(*k), vec![strip(&xs[0]), t.clone()])
        }
        TOp::Conv2dInputGrad(_) | TOp::Conv2dWeightGrad(_) => {
            // Bilinear in the two arguments it reads (IG ignores x, WG ignores w): sum the terms.
            let ignored = if matches!(op, TOp::Conv2dInputGrad(_)) { 0 } else { 1 };
            let mut acc = Value::Float(0.0);
            for (i, t) in ts.iter().enumerate() {
                if let (Some(t), true) = (t, i != ignored) {
                    let mut args = xs.to_vec();
                    args[i] = t.clone();
                    let c = call(m, op.clone(), args)?;
                    acc = m.prim2(Prim::Add, acc, c)?;
                }
            }
            Ok(acc)
        }
        TOp::MaxPool2dGrad(_) | TOp::MaxPool2dPick(_) => match &ts[1] {
            Some(t) => call(m, op.clone(), vec![strip(&xs[0]), t.clone()]),
            None => Ok(Value::Float(0.0)),
        },
        TOp::Mask => match &ts[0] {
            Some(t) => call(m, TOp::Mask, vec![t.clone(), strip(&xs[1])]),
            None => Ok(Value::Float(0.0)),
        },
        TOp::Cmp(Cmp::Max | Cmp::Min) => {
            let (wa, wb) = pick_weights(m, &xs[0], &xs[1], y)?;
            let mut acc = Value::Float(0.0);
            for (t, w) in ts.iter().zip([wa, wb]) {
                if let Some(t) = t {
                    let c = mul(m, t.clone(), w)?;
                    acc = m.prim2(Prim::Add, acc, c)?;
                }
            }
            Ok(acc)
        }
        TOp::Where => {
            if ts[1].is_none() && ts[2].is_none() {
                return Ok(Value::Float(0.0));
            }
            let side = |t: &Option<Value>| t.clone().map_or_else(|| zero0(y), Ok);
            let (ta, tb) = (side(&ts[1])?, side(&ts[2])?);
            let t = call(m, TOp::Where, vec![strip(&xs[0]), ta, tb])?;
            let shape = ad::shape_of(y);
            if ad::shape_of(&t) == shape {
                Ok(t)
            } else {
                call(m, TOp::BroadcastTo(shape), vec![t])
            }
        }
        TOp::MaxAxis(a) => {
            let Some(t) = &ts[0] else { return Ok(Value::Float(0.0)) };
            let w = max_axis_weights(m, &xs[0], y, *a)?;
            let p = mul(m, w, t.clone())?;
            call(m, TOp::SumAxis(*a), vec![p])
        }
        TOp::Gather(_) | TOp::ScatterAdd(..) => match &ts[0] {
            Some(t) => call(m, op.clone(), vec![t.clone(), strip(&xs[1])]),
            None => Ok(Value::Float(0.0)),
        },
        TOp::Step | TOp::Sign | TOp::ArgmaxMask | TOp::Cmp(_) | TOp::Not | TOp::ArgmaxAxis(_) => Ok(Value::Float(0.0)),
        TOp::AsType(to) if !to.is_float() => Ok(Value::Float(0.0)),
        _ => linear(m, ts),
    }
}
