//! The tensor operation table: each operation's forward definition (on plain tensors), its
//! reverse rule (`vjp`) and its forward rule (`jvp`), side by side. Rules are written with
//! `call` and the machine's generic arithmetic, so they are differentiable themselves and
//! higher-order derivatives through tensor code need nothing extra.

use super::elementwise::{binary, with_scalar, Bin};
use super::{fmt_shape, matmul, sum_to, transpose, Device, Tensor};
use crate::ad;
use crate::core::Prim;
use crate::eval::machine::{FResult, Fault, Machine};
use crate::eval::value::Value;
use ndarray::{ArrayD, Axis, IxDyn, Slice};
use std::rc::Rc;

#[derive(Clone, Debug, PartialEq)]
pub enum TOp {
    MatMul,
    /// All elements to a Float.
    Sum,
    Mean,
    Max,
    Logsumexp,
    Item,
    SumAxis(usize),
    MeanAxis(usize),
    /// Sum a broadcast result back down to a shape (the adjoint of broadcasting).
    SumTo(Vec<usize>),
    /// Broadcast a tensor (or Float) up to a shape.
    BroadcastTo(Vec<usize>),
    Reshape(Vec<usize>),
    Transpose,
    Row(usize),
    /// A zero tensor of the shape with one row set (the adjoint of `Row`).
    ScatterRow(usize, Vec<usize>),
    Softmax,
    LogSoftmax,
    Concat(usize),
    Slice(usize, usize, usize),
    /// Zero padding around a slice (the adjoint of `Slice`): axis, offset, full shape.
    Unslice(usize, usize, Vec<usize>),
    /// 1 where the input is positive, else 0 (relu's derivative; not differentiable).
    Step,
    /// The sign of each element (abs's derivative; not differentiable).
    Sign,
    /// 1 at the position of the maximum (max's derivative; not differentiable).
    ArgmaxMask,
    /// Valid, stride-1 2-D convolution (NCHW input, OCKK weights). Differentiable once.
    Conv2d,
    /// The adjoints of Conv2d given (x, w, g): not differentiable further.
    Conv2dInputGrad,
    Conv2dWeightGrad,
    /// k×k, stride-k max pooling. Differentiable once.
    MaxPool2d(usize),
    /// Routes (x, g) back to each window's maximum.
    MaxPool2dGrad(usize),
    /// (x, t): t at each window's maximum of x (the forward-mode rule of max pooling).
    MaxPool2dPick(usize),
    /// Moves a tensor to a device (`to_device`); its adjoint moves back.
    ToDevice(Device),
}

fn tensor_of(v: &Value) -> FResult<&Tensor> {
    match v {
        Value::Tensor(t) => Ok(t),
        other => Err(Fault::new(format!("internal: expected a Tensor, got {}", other.type_name()))),
    }
}

fn wrap(t: Tensor) -> Value {
    Value::Tensor(Rc::new(t))
}

fn last_axis(t: &Tensor) -> FResult<Axis> {
    if t.shape().is_empty() {
        return Err(Fault::new("softmax of a scalar tensor (it needs at least one axis)"));
    }
    Ok(Axis(t.shape().len() - 1))
}

fn softmax_array(x: &ArrayD<f32>, ax: Axis) -> ArrayD<f32> {
    let max = x.map_axis(ax, |r| r.fold(f32::NEG_INFINITY, |a, &b| a.max(b))).insert_axis(ax);
    let e = (x - &max).mapv(f32::exp);
    let s = e.sum_axis(ax).insert_axis(ax);
    e / s
}

fn check_axis(t: &Tensor, axis: usize, what: &str) -> FResult<()> {
    if axis >= t.shape().len() {
        return Err(Fault::new(format!(
            "{what}: axis {axis} is out of range for a tensor of shape {}",
            fmt_shape(t.shape())
        )));
    }
    Ok(())
}

/// The forward definition of `op` on plain values.
pub fn forward(op: &TOp, args: &[Value]) -> FResult<Value> {
    if let TOp::ToDevice(d) = op {
        return Ok(match &args[0] {
            Value::Tensor(t) => wrap(t.to_device(*d)?),
            other => other.clone(),
        });
    }
    // Operations with a GPU operand run on the GPU (gpu/ops.rs; mixed devices are an error).
    if args.iter().any(|a| matches!(a, Value::Tensor(t) if t.is_gpu())) {
        return super::gpu::ops::forward(op, args);
    }
    let t0 = || tensor_of(&args[0]);
    Ok(match op {
        TOp::MatMul => wrap(matmul(t0()?, tensor_of(&args[1])?)?),
        TOp::Sum => Value::Float(t0()?.array().iter().fold(0.0, |s, &x| s + x as f64)),
        TOp::Mean => {
            let t = t0()?;
            if t.is_empty() {
                return Err(Fault::new("mean of an empty tensor"));
            }
            Value::Float(t.array().iter().map(|&x| x as f64).sum::<f64>() / t.len() as f64)
        }
        TOp::Max => {
            let t = t0()?;
            if t.is_empty() {
                return Err(Fault::new("max of an empty tensor"));
            }
            Value::Float(t.array().iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64)
        }
        TOp::Logsumexp => {
            let t = t0()?;
            let m = t.array().iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
            let s: f64 = t.array().iter().map(|&x| (x as f64 - m).exp()).sum();
            Value::Float(m + s.ln())
        }
        TOp::Item => {
            let t = t0()?;
            if t.len() != 1 {
                return Err(Fault::new(format!("item needs a one-element tensor, got shape {}", fmt_shape(t.shape()))));
            }
            Value::Float(t.array().iter().next().copied().unwrap_or(0.0) as f64)
        }
        TOp::SumAxis(a) | TOp::MeanAxis(a) => {
            let t = t0()?;
            check_axis(t, *a, if matches!(op, TOp::MeanAxis(_)) { "mean_axis" } else { "sum_axis" })?;
            let s = t.array().sum_axis(Axis(*a));
            let n = t.shape()[*a].max(1) as f32;
            wrap(Tensor::from_array(if matches!(op, TOp::MeanAxis(_)) { s / n } else { s }))
        }
        // Always a tensor (0-d for []): `ad::accumulate` turns it into a Float for Float inputs.
        TOp::SumTo(shape) => match &args[0] {
            Value::Float(x) => wrap(Tensor::full_on(super::gpu::default_device()?, shape, *x as f32)?),
            v => wrap(sum_to(tensor_of(v)?, shape)?),
        },
        TOp::BroadcastTo(shape) => match &args[0] {
            Value::Float(x) => wrap(Tensor::full_on(super::gpu::default_device()?, shape, *x as f32)?),
            v => {
                let t = tensor_of(v)?;
                let b = t.array().broadcast(IxDyn(shape)).ok_or_else(|| {
                    Fault::new(format!("cannot broadcast shape {} to {}", fmt_shape(t.shape()), fmt_shape(shape)))
                })?;
                wrap(Tensor::from_array(b.to_owned()))
            }
        },
        TOp::Reshape(shape) => {
            let t = t0()?;
            check_reshape(t.shape(), shape)?;
            let a = t.array().as_standard_layout().to_owned();
            wrap(Tensor::from_array(a.into_shape_with_order(IxDyn(shape)).map_err(|e| Fault::new(e.to_string()))?))
        }
        TOp::Transpose => wrap(transpose(t0()?)),
        TOp::Row(i) => {
            let t = t0()?;
            if t.shape().is_empty() || *i >= t.shape()[0] {
                return Err(Fault::new(format!(
                    "row {i} is out of range for a tensor of shape {}",
                    fmt_shape(t.shape())
                )));
            }
            wrap(Tensor::from_array(t.array().index_axis(Axis(0), *i).to_owned()))
        }
        TOp::ScatterRow(i, shape) => {
            let g = t0()?;
            let mut out = ArrayD::<f32>::zeros(IxDyn(shape));
            out.index_axis_mut(Axis(0), *i).assign(g.array());
            wrap(Tensor::from_array(out))
        }
        TOp::Softmax => {
            let t = t0()?;
            wrap(Tensor::from_array(softmax_array(t.array(), last_axis(t)?)))
        }
        TOp::LogSoftmax => {
            let t = t0()?;
            let ax = last_axis(t)?;
            let x = t.array();
            let max = x.map_axis(ax, |r| r.fold(f32::NEG_INFINITY, |a, &b| a.max(b))).insert_axis(ax);
            let shifted = x - &max;
            let lse = shifted.mapv(f32::exp).sum_axis(ax).mapv(f32::ln).insert_axis(ax);
            wrap(Tensor::from_array(shifted - lse))
        }
        TOp::Concat(axis) => {
            let ts = args.iter().map(tensor_of).collect::<FResult<Vec<_>>>()?;
            if ts.is_empty() {
                return Err(Fault::new("concat of an empty list"));
            }
            check_axis(ts[0], *axis, "concat")?;
            let views: Vec<_> = ts.iter().map(|t| t.array().view()).collect();
            let a = ndarray::concatenate(Axis(*axis), &views).map_err(|_| {
                Fault::new(format!(
                    "concat along axis {axis}: shapes {} do not agree on the other axes",
                    ts.iter().map(|t| fmt_shape(t.shape())).collect::<Vec<_>>().join(", ")
                ))
            })?;
            wrap(Tensor::from_array(a))
        }
        TOp::Slice(axis, lo, hi) => {
            let t = t0()?;
            check_axis(t, *axis, "slice")?;
            if lo > hi || *hi > t.shape()[*axis] {
                return Err(Fault::new(format!(
                    "slice {lo}..{hi} on axis {axis} is out of range for shape {}",
                    fmt_shape(t.shape())
                )));
            }
            wrap(Tensor::from_array(t.array().slice_axis(Axis(*axis), Slice::from(*lo..*hi)).to_owned()))
        }
        TOp::Unslice(axis, lo, shape) => {
            let g = t0()?;
            let mut out = ArrayD::<f32>::zeros(IxDyn(shape));
            let n = g.shape()[*axis];
            out.slice_axis_mut(Axis(*axis), Slice::from(*lo..*lo + n)).assign(g.array());
            wrap(Tensor::from_array(out))
        }
        TOp::Step => wrap(t0()?.map(|x| if x > 0.0 { 1.0 } else { 0.0 })),
        TOp::Sign => wrap(t0()?.map(|x| if x >= 0.0 { 1.0 } else { -1.0 })),
        TOp::Conv2d => wrap(super::conv2d(t0()?, tensor_of(&args[1])?)?),
        TOp::Conv2dInputGrad | TOp::Conv2dWeightGrad => {
            let (dx, dw) = super::conv2d_grads(t0()?, tensor_of(&args[1])?, tensor_of(&args[2])?)?;
            wrap(if *op == TOp::Conv2dInputGrad { dx } else { dw })
        }
        TOp::MaxPool2d(k) => wrap(super::max_pool2d(t0()?, *k, None)?),
        TOp::MaxPool2dGrad(k) => wrap(super::max_pool2d(t0()?, *k, Some(tensor_of(&args[1])?))?),
        TOp::MaxPool2dPick(k) => wrap(super::max_pool2d_pick(t0()?, *k, tensor_of(&args[1])?)?),
        TOp::ToDevice(_) => args[0].clone(), // handled above
        TOp::ArgmaxMask => {
            let t = t0()?;
            let mut out = ArrayD::<f32>::zeros(IxDyn(t.shape()));
            if let Some(i) = argmax(t) {
                if let Some(x) = out.iter_mut().nth(i) {
                    *x = 1.0;
                }
            }
            wrap(Tensor::from_array(out))
        }
    })
}

/// `reshape`'s one condition, on either device: the element counts agree.
pub fn check_reshape(from: &[usize], to: &[usize]) -> FResult<()> {
    let (m, n): (usize, usize) = (from.iter().product(), to.iter().product());
    if m != n {
        return Err(Fault::new(format!(
            "cannot reshape a tensor of shape {} ({m} elements) to {} ({n} elements)",
            fmt_shape(from),
            fmt_shape(to)
        )));
    }
    Ok(())
}

pub fn argmax(t: &Tensor) -> Option<usize> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &x) in t.array().iter().enumerate() {
        if best.is_none_or(|(_, b)| x > b) {
            best = Some((i, x));
        }
    }
    best.map(|(i, _)| i)
}

/// Applies a tensor operation to values that may carry perturbations: the AD-aware entry point.
pub fn call(m: &mut Machine, op: TOp, args: Vec<Value>) -> FResult<Value> {
    if !args.iter().any(ad::is_ad) {
        return forward(&op, &args);
    }
    ad::tensor_op(m, op, args)
}

fn shape_of(v: &Value) -> Vec<usize> {
    match ad::strip(v) {
        Value::Tensor(t) => t.shape().to_vec(),
        _ => Vec::new(),
    }
}

fn mul(m: &mut Machine, a: Value, b: Value) -> FResult<Value> {
    m.prim2(Prim::Mul, a, b)
}

/// Sums over the last axis, keeping it (for the softmax rules).
fn sum_last_keep(m: &mut Machine, v: Value) -> FResult<Value> {
    let mut shape = shape_of(&v);
    let Some(last) = shape.len().checked_sub(1) else { return Ok(v) };
    let s = call(m, TOp::SumAxis(last), vec![v])?;
    shape[last] = 1;
    call(m, TOp::Reshape(shape), vec![s])
}

/// The device of a (possibly perturbed) tensor; the CPU for Floats.
fn device_of(v: &Value) -> Device {
    match ad::strip(v) {
        Value::Tensor(t) => t.device(),
        _ => Device::Cpu,
    }
}

/// A Float adjoint `g` spread over the shape of `x`, on x's device (the adjoint of a
/// reduction to a Float). `BroadcastTo` of a Float makes its tensor on the default device, so
/// a tensor on the other device gets its spread made explicitly there.
fn spread(m: &mut Machine, x: &Value, g: Value) -> FResult<Value> {
    let s0 = shape_of(x);
    let d = device_of(x);
    if matches!(g, Value::Tensor(_)) || d == super::gpu::default_device()? {
        return call(m, TOp::BroadcastTo(s0), vec![g]);
    }
    match g {
        Value::Float(v) => Ok(wrap(Tensor::full_on(d, &s0, v as f32)?)),
        g => {
            let ones = wrap(Tensor::full_on(d, &s0, 1.0)?);
            mul(m, ones, g)
        }
    }
}

/// Reverse rule: the contribution to each input's adjoint, given the output adjoint `g`.
/// `needs[i]` says whether input i's contribution is wanted (it is tracked): rules with
/// expensive per-input work (matrix products) skip the others.
pub fn vjp(
    m: &mut Machine,
    op: &TOp,
    xs: &[Value],
    y: &Value,
    g: Value,
    needs: &[bool],
) -> FResult<Vec<Option<Value>>> {
    let s0 = shape_of(&xs[0]);
    let need = |i: usize| needs.get(i).copied().unwrap_or(true);
    Ok(match op {
        TOp::MatMul => {
            let (sa, sb) = (s0.len(), shape_of(&xs[1]).len());
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
                        let n = shape_of(&g)[0];
                        let k = shape_of(&b)[0];
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
                        let k = shape_of(&a)[0];
                        let n = shape_of(&g)[0];
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
            let mask = call(m, TOp::ArgmaxMask, vec![ad::strip(&xs[0])])?;
            vec![Some(mul(m, mask, g)?)]
        }
        TOp::Logsumexp => {
            // d lse / dx = exp(x - lse)
            let d = m.prim2(Prim::Sub, xs[0].clone(), y.clone())?;
            let e = ad::apply_un(m, crate::ad::rules::Un::Exp, d)?;
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
        TOp::Row(i) => vec![Some(call(m, TOp::ScatterRow(*i, s0), vec![g])?)],
        TOp::ScatterRow(i, _) => vec![Some(call(m, TOp::Row(*i), vec![g])?)],
        TOp::Softmax => {
            let gy = mul(m, g.clone(), y.clone())?;
            let s = sum_last_keep(m, gy)?;
            let d = m.prim2(Prim::Sub, g, s)?;
            vec![Some(mul(m, y.clone(), d)?)]
        }
        TOp::LogSoftmax => {
            let p = ad::apply_un(m, crate::ad::rules::Un::Exp, y.clone())?;
            let s = sum_last_keep(m, g.clone())?;
            let ps = mul(m, p, s)?;
            vec![Some(m.prim2(Prim::Sub, g, ps)?)]
        }
        TOp::Concat(axis) => {
            let mut out = Vec::new();
            let mut lo = 0;
            for x in xs {
                let n = shape_of(x)[*axis];
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
        TOp::Conv2d => {
            let (x, w) = (xs[0].clone(), xs[1].clone());
            vec![
                Some(call(m, TOp::Conv2dInputGrad, vec![x.clone(), w.clone(), g.clone()])?),
                Some(call(m, TOp::Conv2dWeightGrad, vec![x, w, g])?),
            ]
        }
        TOp::Conv2dInputGrad => {
            let (w, gy) = (xs[1].clone(), xs[2].clone());
            vec![
                None,
                Some(call(m, TOp::Conv2dWeightGrad, vec![g.clone(), w.clone(), gy])?),
                Some(call(m, TOp::Conv2d, vec![g, w])?),
            ]
        }
        TOp::Conv2dWeightGrad => {
            let (x, gy) = (xs[0].clone(), xs[2].clone());
            vec![
                Some(call(m, TOp::Conv2dInputGrad, vec![x.clone(), g.clone(), gy])?),
                None,
                Some(call(m, TOp::Conv2d, vec![x, g])?),
            ]
        }
        // Pooling routes values by the (locally constant) argmax: linear in everything else.
        TOp::MaxPool2d(k) => vec![Some(call(m, TOp::MaxPool2dGrad(*k), vec![ad::strip(&xs[0]), g])?)],
        TOp::MaxPool2dGrad(k) => vec![None, Some(call(m, TOp::MaxPool2dPick(*k), vec![ad::strip(&xs[0]), g])?)],
        TOp::MaxPool2dPick(k) => vec![None, Some(call(m, TOp::MaxPool2dGrad(*k), vec![ad::strip(&xs[0]), g])?)],
        TOp::ToDevice(_) => vec![Some(call(m, TOp::ToDevice(device_of(&xs[0])), vec![g])?)],
        TOp::Step | TOp::Sign | TOp::ArgmaxMask => xs.iter().map(|_| None).collect(),
    })
}

/// Forward rule: the output tangent, given input tangents (None = zero).
pub fn jvp(m: &mut Machine, op: &TOp, xs: &[Value], y: &Value, ts: &[Option<Value>]) -> FResult<Value> {
    let linear = |m: &mut Machine, ts: &[Option<Value>]| -> FResult<Value> {
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
        TOp::Max | TOp::Logsumexp | TOp::Softmax | TOp::LogSoftmax => {
            // Contract the tangent with the reverse rule's weights: exact for these ops.
            let Some(t) = &ts[0] else { return Ok(Value::Float(0.0)) };
            match op {
                TOp::Max => {
                    let mask = call(m, TOp::ArgmaxMask, vec![ad::strip(&xs[0])])?;
                    let p = mul(m, mask, t.clone())?;
                    call(m, TOp::Sum, vec![p])
                }
                TOp::Logsumexp => {
                    let d = m.prim2(Prim::Sub, xs[0].clone(), y.clone())?;
                    let e = ad::apply_un(m, crate::ad::rules::Un::Exp, d)?;
                    let p = mul(m, e, t.clone())?;
                    call(m, TOp::Sum, vec![p])
                }
                TOp::Softmax => {
                    let ty = mul(m, t.clone(), y.clone())?;
                    let s = sum_last_keep(m, ty)?;
                    let d = m.prim2(Prim::Sub, t.clone(), s)?;
                    mul(m, y.clone(), d)
                }
                _ => {
                    let p = ad::apply_un(m, crate::ad::rules::Un::Exp, y.clone())?;
                    let pt = mul(m, p, t.clone())?;
                    let s = sum_last_keep(m, pt)?;
                    m.prim2(Prim::Sub, t.clone(), s)
                }
            }
        }
        TOp::Conv2d => {
            let mut acc = Value::Float(0.0);
            if let Some(tx) = &ts[0] {
                acc = call(m, TOp::Conv2d, vec![tx.clone(), xs[1].clone()])?;
            }
            if let Some(tw) = &ts[1] {
                let c = call(m, TOp::Conv2d, vec![xs[0].clone(), tw.clone()])?;
                acc = m.prim2(Prim::Add, acc, c)?;
            }
            Ok(acc)
        }
        TOp::MaxPool2d(k) => {
            let Some(t) = &ts[0] else { return Ok(Value::Float(0.0)) };
            call(m, TOp::MaxPool2dPick(*k), vec![ad::strip(&xs[0]), t.clone()])
        }
        TOp::Conv2dInputGrad | TOp::Conv2dWeightGrad => {
            // Bilinear in the two arguments it reads (IG ignores x, WG ignores w): sum the terms.
            let ignored = if *op == TOp::Conv2dInputGrad { 0 } else { 1 };
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
            Some(t) => call(m, op.clone(), vec![ad::strip(&xs[0]), t.clone()]),
            None => Ok(Value::Float(0.0)),
        },
        TOp::Step | TOp::Sign | TOp::ArgmaxMask => Ok(Value::Float(0.0)),
        _ => linear(m, ts),
    }
}

/// Elementwise arithmetic on plain tensors and Floats (broadcasting). Operands come by value
/// so a tensor only this call holds is reused for the result (`elementwise::binary`).
pub fn elementwise(p: Prim, a: Value, b: Value) -> FResult<Value> {
    if [&a, &b].iter().any(|v| matches!(v, Value::Tensor(t) if t.is_gpu())) {
        return super::gpu::ops::elementwise(p, &a, &b);
    }
    let Some(op) = Bin::of(p) else { return Err(Fault::new(format!("internal: `{p:?}` on tensors"))) };
    Ok(match (a, b) {
        (Value::Tensor(x), Value::Tensor(y)) => wrap(binary(op, x, y)?),
        (Value::Tensor(x), Value::Float(y)) => wrap(with_scalar(op, x, y as f32, false)),
        (Value::Float(x), Value::Tensor(y)) => wrap(with_scalar(op, y, x as f32, true)),
        (a, b) => return Err(Fault::new(format!("internal: `{p:?}` on {} and {}", a.type_name(), b.type_name()))),
    })
}
