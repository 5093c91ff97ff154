//! The tensor builtins of LANGUAGE.md "Tensors": construction, shape operations, reductions,
//! conversions. Differentiable ones go through `ad::tensor::call`.

use super::tensor_ops::axis_of;
use crate::ad;
use crate::builtins::B;
use crate::core::Prim;
use crate::eval::machine::Machine;
use crate::runtime::perturbed::{is_ad, strip};
use crate::runtime::tensor::wrap;
use crate::runtime::value::Value;
use crate::runtime::{FResult, Fault};
use crate::stage;
use crate::tensor::op::{check_pool, Conv};
use crate::tensor::{fmt_shape, gpu, npy, DType, Device, Rng, TOp, Tensor};

/// A new tensor, on the default device (`--device`).
pub(super) fn new(t: Tensor) -> FResult<Value> {
    Ok(wrap(t.place()?))
}

/// A new tensor of `shape` filled with `v`, made directly on the default device.
fn new_full(shape: &[usize], v: f32) -> FResult<Value> {
    Ok(wrap(Tensor::full_on(gpu::default_device()?, shape, v)?))
}

pub(super) fn index(v: &Value, what: &str) -> FResult<usize> {
    let n = v.as_int()?;
    usize::try_from(n).map_err(|_| Fault::new(format!("{what} must not be negative (got {n})")))
}

pub(super) fn shape_arg(v: &Value) -> FResult<Vec<usize>> {
    let dims = v.iter_list().map(|d| index(d, "a dimension")).collect::<FResult<Vec<_>>>()?;
    checked_shape(dims)
}

/// A shape whose tensor dp may allocate: a larger one would abort the process when the
/// allocation fails rather than raise an error.
fn checked_shape(dims: Vec<usize>) -> FResult<Vec<usize>> {
    let n = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    match n {
        Some(n) if n <= 1 << 31 => Ok(dims),
        _ => Err(Fault::new(format!("shape {} is too large", fmt_shape(&dims)))),
    }
}

/// k×k average pooling with stride k (rows and columns past the last whole window dropped, as
/// `max_pool2d`), lowered to a slice, a reshape to [N, C, H/k, k, W/k, k], two axis sums and a
/// scale: linear, so those operations' rules give its derivatives to any order on either device.
fn avg_pool2d(m: &mut Machine, k: usize, x: Value) -> FResult<Value> {
    let s = ad::shape_of(&x);
    check_pool("avg_pool2d", k, &s)?;
    let (oh, ow) = (s[2] / k, s[3] / k);
    let mut x = x;
    if s[2] != oh * k {
        x = ad::tensor::call(m, TOp::Slice(2, 0, oh * k), vec![x])?;
    }
    if s[3] != ow * k {
        x = ad::tensor::call(m, TOp::Slice(3, 0, ow * k), vec![x])?;
    }
    let x = ad::tensor::call(m, TOp::Reshape(vec![s[0], s[1], oh, k, ow, k]), vec![x])?;
    let x = ad::tensor::call(m, TOp::SumAxis(5), vec![x])?;
    let x = ad::tensor::call(m, TOp::SumAxis(3), vec![x])?;
    m.prim2(Prim::Mul, x, Value::Float(1.0 / (k * k) as f64))
}

/// Nested lists of Floats, Ints or Bools to a float32, int64 or bool tensor
/// (`tensor [[1.0, 2.0], [3.0, 4.0]]`; the checker makes every leaf the same type). With perturbed
/// elements, the tensor is assembled from them by differentiable operations (each element
/// broadcast to [1], concatenated, reshaped), so derivatives flow through `tensor`.
/// Whether a Float is more than its number (differentiated, batched or traced): a tensor
/// built from it must be built by tensor operations, which carry that along.
fn symbolic(x: &Value) -> bool {
    is_ad(x) || stage::is_staged(x)
}

fn tensor_of(m: &mut Machine, v: &Value) -> FResult<Value> {
    let (shape, leaves) = nested(v)?;
    if !leaves.iter().any(symbolic) {
        return new(match leaves.first() {
            Some(Value::Int(_)) => {
                Tensor::from_i64s(&shape, leaves.iter().map(Value::as_int).collect::<FResult<_>>()?)?
            }
            Some(Value::Bool(_)) => {
                Tensor::from_bools(&shape, leaves.iter().map(|b| matches!(b, Value::Bool(true))).collect())?
            }
            _ => Tensor::from_vec(&shape, leaves.iter().map(|x| Ok(x.as_float()? as f32)).collect::<FResult<_>>()?)?,
        });
    }
    // Each element as a [1] tensor of its dtype: a plain one made directly, a symbolic one
    // by a broadcast (which carries its perturbation, batch or trace).
    let parts = leaves
        .into_iter()
        .map(|x| match x {
            Value::Int(n) => new(Tensor::from_i64s(&[1], vec![n])?),
            Value::Bool(b) => new(Tensor::from_bools(&[1], vec![b])?),
            Value::Float(f) => new(Tensor::from_vec(&[1], vec![f as f32])?),
            x => ad::tensor::call(m, TOp::BroadcastTo(vec![1]), vec![x]),
        })
        .collect::<FResult<Vec<_>>>()?;
    let flat = ad::tensor::call(m, TOp::Concat(0), parts)?;
    ad::tensor::call(m, TOp::Reshape(shape), vec![flat])
}

/// The shape of a nested list of Floats, Ints or Bools and its elements in row-major order.
fn nested(v: &Value) -> FResult<(Vec<usize>, Vec<Value>)> {
    let mut shape = Vec::new();
    let mut cur = v.clone();
    while let Value::Nil | Value::Cons(_) = cur {
        let n = cur.iter_list().count();
        shape.push(n);
        let first = cur.iter_list().next().cloned();
        match first {
            Some(f) => cur = f,
            None => break,
        }
    }
    let mut data = Vec::new();
    fn walk(v: &Value, depth: usize, shape: &[usize], data: &mut Vec<Value>) -> FResult<()> {
        if depth == shape.len() {
            return match strip(v) {
                // (A batch of Floats, inside `vmap`: one Float per example.)
                // (A traced Float, inside `jit`: the tensor is built by staged operations.)
                Value::Float(_) | Value::Int(_) | Value::Bool(_) | Value::Staged(_) | Value::StagedFloat(_) => {
                    data.push(v.clone());
                    Ok(())
                }
                // (A batch of a rank-1 tensor's elements, where `vmap`'s function takes a Float.)
                Value::Batched(b)
                    if b.kind != crate::runtime::perturbed::Example::Tensor || crate::ad::shape_of(v).is_empty() =>
                {
                    data.push(v.clone());
                    Ok(())
                }
                other => {
                    Err(Fault::new(format!("tensor: expected a Float, Int or Bool, found a {}", other.type_name())))
                }
            };
        }
        let n = v.iter_list().count();
        if n != shape[depth] {
            return Err(Fault::new(format!(
                "tensor: ragged nested list (a row of length {n} where {} was expected)",
                shape[depth]
            )));
        }
        v.iter_list().try_for_each(|x| walk(x, depth + 1, shape, data))
    }
    walk(v, 0, &shape, &mut data)?;
    Ok((shape, data))
}

/// `to_list` of a perturbed tensor: each element read as a differentiable Float (flattened,
/// then `Row` i and `Item`). Each element's reverse rule scatters into a tensor of the whole
/// shape, so the backward pass costs O(n²) for n elements: fine for the small tensors this is
/// used on inside a derivative.
fn to_list_ad(m: &mut Machine, t: Value) -> FResult<Value> {
    let n = ad::shape_of(&t).iter().product::<usize>();
    let flat = ad::tensor::call(m, TOp::Reshape(vec![n]), vec![t])?;
    let items = (0..n)
        .map(|i| {
            let r = ad::tensor::call(m, TOp::Row(i), vec![flat.clone()])?;
            ad::tensor::call(m, TOp::Item, vec![r])
        })
        .collect::<FResult<Vec<_>>>()?;
    Ok(Value::list(items.into_iter()))
}

/// Uniform numbers `values = lo + (hi - lo) · u` as a value that carries `lo`'s and `hi`'s
/// perturbations: `values + dlo + (dhi - dlo) · u`, where `dlo = lo - (lo's value)` is 0
/// carrying lo's perturbation — the same numbers, with ∂/∂lo = 1 - u and ∂/∂hi = u.
/// `u` (the unit draws, float32) is built only when a bound is perturbed.
pub(super) fn spread_uniform(
    m: &mut Machine,
    lo_v: Value,
    hi_v: Value,
    values: Tensor,
    u: impl FnOnce() -> Vec<f32>,
) -> FResult<Value> {
    let values = new(values)?;
    if !is_ad(&lo_v) && !is_ad(&hi_v) {
        return Ok(values);
    }
    let shape = values.as_tensor()?.shape().to_vec();
    let (lo, hi) = (lo_v.as_float()?, hi_v.as_float()?);
    let dlo = m.prim2(Prim::Sub, lo_v, Value::Float(lo))?;
    let dhi = m.prim2(Prim::Sub, hi_v, Value::Float(hi))?;
    let u = new(Tensor::from_vec(&shape, u())?)?;
    let span = m.prim2(Prim::Sub, dhi, dlo.clone())?;
    let spread = m.prim2(Prim::Mul, span, u)?;
    let shifted = m.prim2(Prim::Add, values, dlo)?;
    m.prim2(Prim::Add, shifted, spread)
}

pub fn call(m: &mut Machine, b: B, arg: &mut dyn FnMut() -> Value) -> FResult<Value> {
    Ok(match b {
        B::TensorOf => tensor_of(m, &arg())?,
        B::Zeros => new_full(&shape_arg(&arg())?, 0.0)?,
        B::Ones => new_full(&shape_arg(&arg())?, 1.0)?,
        B::Full => {
            let s = shape_arg(&arg())?;
            match arg() {
                v if symbolic(&v) => ad::tensor::call(m, TOp::BroadcastTo(s), vec![v])?,
                v => new_full(&s, v.as_float()? as f32)?,
            }
        }
        B::Arange => {
            let n = checked_shape(vec![index(&arg(), "arange's length")?])?[0];
            new(Tensor::from_vec(&[n], (0..n).map(|i| i as f32).collect())?)?
        }
        B::Randn => {
            let seed = arg().as_int()?;
            let s = shape_arg(&arg())?;
            let mut rng = Rng::new(seed as u64);
            let n = s.iter().product();
            new(Tensor::from_vec(&s, (0..n).map(|_| rng.normal() as f32).collect())?)?
        }
        B::Uniform => {
            let seed = arg().as_int()?;
            let (lo_v, hi_v) = (arg(), arg());
            let (lo, hi) = (lo_v.as_float()?, hi_v.as_float()?);
            let s = shape_arg(&arg())?;
            let n = s.iter().product();
            let mut rng = Rng::new(seed as u64);
            let u: Vec<f64> = (0..n).map(|_| rng.uniform()).collect();
            let values = Tensor::from_vec(&s, u.iter().map(|&u| (lo + (hi - lo) * u) as f32).collect())?;
            spread_uniform(m, lo_v, hi_v, values, || u.iter().map(|&u| u as f32).collect())?
        }
        B::LoadNpy => new(npy::load(&arg().as_str()?)?)?,
        B::SaveNpy => {
            let path = arg().as_str()?;
            let t = arg().as_tensor()?;
            npy::save(&path, &t)?;
            Value::Unit
        }
        B::Shape => {
            // (Through `ad::shape_of`: a traced tensor's shape is part of its signature.)
            let t = arg();
            if !ad::is_tensor(&t) {
                return Err(Fault::internal(format!("shape of a {}", t.type_name())));
            }
            Value::list(ad::shape_of(&t).iter().map(|&d| Value::Int(d as i64)).collect::<Vec<_>>().into_iter())
        }
        B::Reshape => {
            let t = arg();
            let s = shape_arg(&arg())?;
            ad::tensor::call(m, TOp::Reshape(s), vec![t])?
        }
        B::Transpose => ad::tensor::call(m, TOp::Transpose, vec![arg()])?,
        B::Concat => {
            let axis = arg();
            let ts: Vec<Value> = arg().iter_list().cloned().collect();
            // No tensor to give the result's shape and dtype (NumPy refuses it too).
            let Some(first) = ts.first() else { return Err(Fault::new("concat of an empty list")) };
            let axis = axis_of(&axis, &ad::shape_of(first), false, "concat")?;
            ad::tensor::call(m, TOp::Concat(axis), ts)?
        }
        B::Slice => {
            let t = arg();
            let axis = axis_of(&arg(), &ad::shape_of(&t), false, "slice")?;
            let lo = index(&arg(), "slice's start")?;
            let hi = index(&arg(), "slice's end")?;
            ad::tensor::call(m, TOp::Slice(axis, lo, hi), vec![t])?
        }
        B::Row => {
            let t = arg();
            let i = arg();
            if let Value::Batched(_) = strip(&i) {
                return ad::batch::row_at(m, t, &i);
            }
            let i = index(&i, "a row index")?;
            ad::tensor::call(m, TOp::Row(i), vec![t])?
        }
        B::Onehot => {
            let n = index(&arg(), "onehot's size")?;
            let i = index(&arg(), "onehot's index")?;
            if i >= n {
                return Err(Fault::new(format!("onehot {n} {i}: the index must be below {n}")));
            }
            let mut v = vec![0.0; n];
            v[i] = 1.0;
            new(Tensor::from_vec(&[n], v)?)?
        }
        B::Sum => ad::tensor::call(m, TOp::Sum, vec![arg()])?,
        B::Mean => ad::tensor::call(m, TOp::Mean, vec![arg()])?,
        B::Max => ad::tensor::call(m, TOp::Max, vec![arg()])?,
        B::SumAxis => {
            let t = arg();
            let a = axis_of(&arg(), &ad::shape_of(&t), false, "sum_axis")?;
            ad::tensor::call(m, TOp::SumAxis(a), vec![t])?
        }
        B::MeanAxis => {
            let t = arg();
            let a = axis_of(&arg(), &ad::shape_of(&t), false, "mean_axis")?;
            ad::tensor::call(m, TOp::MeanAxis(a), vec![t])?
        }
        B::Conv2d => {
            let x = arg();
            ad::tensor::call(m, TOp::Conv2d(Conv::VALID), vec![x, arg()])?
        }
        B::Conv2dWith => {
            let stride = index(&arg(), "conv2d_with's stride")?;
            let pad = index(&arg(), "conv2d_with's padding")?;
            let x = arg();
            ad::tensor::call(m, TOp::Conv2d(Conv { stride, pad }), vec![x, arg()])?
        }
        B::AvgPool2d => {
            let k = index(&arg(), "the pooling size")?;
            avg_pool2d(m, k, arg())?
        }
        B::MaxPool2d => {
            let k = index(&arg(), "the pooling size")?;
            ad::tensor::call(m, TOp::MaxPool2d(k), vec![arg()])?
        }
        B::Argmax => {
            let t = arg();
            if let Value::Batched(_) = strip(&t) {
                return ad::batch::arg_extreme(m, &t, false);
            }
            let t = t.as_tensor()?;
            match t.argmax()? {
                Some(i) => Value::Int(i as i64),
                None => return Err(Fault::new("argmax of an empty tensor")),
            }
        }
        B::Softmax => ad::tensor::call(m, TOp::Softmax, vec![arg()])?,
        B::LogSoftmax => ad::tensor::call(m, TOp::LogSoftmax, vec![arg()])?,
        B::Logsumexp => ad::tensor::call(m, TOp::Logsumexp, vec![arg()])?,
        B::Item => ad::tensor::call(m, TOp::Item, vec![arg()])?,
        B::ToList => {
            let t = arg();
            if is_ad(&t) {
                return to_list_ad(m, t);
            }
            let t = t.as_tensor()?;
            Value::list(t.to_f64s()?.into_iter().map(Value::Float).collect::<Vec<_>>().into_iter())
        }
        B::Dtype => Value::Str(std::rc::Rc::new(dtype_of(&arg())?.name().to_string())),
        B::Astype => {
            let name = arg().as_str()?;
            let Some(d) = DType::parse(&name) else {
                return Err(Fault::new(format!("unknown dtype `{name}` (known: float32, float64, int64, bool)")));
            };
            let t = arg();
            let from = dtype_of(&t)?;
            let r = ad::tensor::call(m, TOp::AsType(d), vec![t])?;
            // An int64 or bool tensor stays on the CPU whatever the default device (the GPU
            // holds float32 only); made float32 it goes to the default device, as a
            // constructed tensor does, so a program that turns indices or masks into numbers
            // (`equal (astype "float32" labels) (arange n)`) runs unchanged under `--device gpu`.
            if d == DType::F32 && matches!(from, DType::I64 | DType::Bool) && gpu::default_device()? == Device::Gpu {
                ad::tensor::call(m, TOp::ToDevice(Device::Gpu), vec![r])?
            } else {
                r
            }
        }
        B::ToDevice => {
            let dev = arg().as_str()?;
            let t = arg();
            let d = match dev.as_str() {
                "cpu" => Device::Cpu,
                "gpu" => {
                    gpu::context()?;
                    Device::Gpu
                }
                other => return Err(Fault::new(format!("unknown device `{other}` (known: cpu, gpu)"))),
            };
            ad::tensor::call(m, TOp::ToDevice(d), vec![t])?
        }
        other => return Err(Fault::internal(format!("{other:?} is not a tensor builtin"))),
    })
}

/// A tensor value's dtype: a batch's examples share the stack's dtype, and a traced tensor
/// has its example's.
fn dtype_of(t: &Value) -> FResult<DType> {
    Ok(match ad::dtype_of(t) {
        Some(d) => d,
        None => t.as_tensor()?.dtype(),
    })
}
