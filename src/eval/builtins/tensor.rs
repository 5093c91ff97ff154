//! The tensor builtins of LANGUAGE.md "Tensors": construction, shape operations, reductions,
//! conversions. Differentiable ones go through `ad::tensor::call`.

use crate::ad;
use crate::builtins::B;
use crate::eval::machine::Machine;
use crate::runtime::perturbed::strip;
use crate::runtime::tensor::wrap;
use crate::runtime::value::Value;
use crate::runtime::{FResult, Fault};
use crate::tensor::{fmt_shape, gpu, npy, DType, Device, Rng, TOp, Tensor};

/// A new tensor, on the default device (`--device`).
fn new(t: Tensor) -> FResult<Value> {
    Ok(wrap(t.place()?))
}

/// A new tensor of `shape` filled with `v`, made directly on the default device.
fn new_full(shape: &[usize], v: f32) -> FResult<Value> {
    Ok(wrap(Tensor::full_on(gpu::default_device()?, shape, v)?))
}

fn index(v: &Value, what: &str) -> FResult<usize> {
    let n = v.as_int()?;
    usize::try_from(n).map_err(|_| Fault::new(format!("{what} must not be negative (got {n})")))
}

fn shape_arg(v: &Value) -> FResult<Vec<usize>> {
    let dims = v.iter_list().map(|d| index(d, "a dimension")).collect::<FResult<Vec<_>>>()?;
    let n = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    match n {
        Some(n) if n <= 1 << 31 => Ok(dims),
        _ => Err(Fault::new(format!("shape {} is too large", fmt_shape(&dims)))),
    }
}

/// Nested lists of Floats, Ints or Bools to a float32, int64 or bool tensor
/// (`tensor [[1.0, 2.0], [3.0, 4.0]]`); the checker makes every leaf the same type.
fn from_nested(v: &Value) -> FResult<Tensor> {
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
                leaf @ (Value::Float(_) | Value::Int(_) | Value::Bool(_)) => {
                    data.push(leaf);
                    Ok(())
                }
                other => Err(Fault::new(format!("tensor: expected a Float, Int or Bool, found a {}", other.type_name()))),
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
    Ok(match data.first() {
        Some(Value::Int(_)) => Tensor::from_i64s(&shape, data.iter().map(Value::as_int).collect::<FResult<_>>()?)?,
        Some(Value::Bool(_)) => Tensor::from_bools(&shape, data.iter().map(|b| matches!(b, Value::Bool(true))).collect())?,
        _ => Tensor::from_vec(&shape, data.iter().map(|x| x.as_float().map(|x| x as f32)).collect::<FResult<_>>()?)?,
    })
}

pub fn call(m: &mut Machine, b: B, arg: &mut dyn FnMut() -> Value) -> FResult<Value> {
    Ok(match b {
        B::TensorOf => new(from_nested(&arg())?)?,
        B::Zeros => new_full(&shape_arg(&arg())?, 0.0)?,
        B::Ones => new_full(&shape_arg(&arg())?, 1.0)?,
        B::Full => {
            let s = shape_arg(&arg())?;
            new_full(&s, arg().as_float()? as f32)?
        }
        B::Arange => {
            let n = index(&arg(), "arange's length")?;
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
            let (lo, hi) = (arg().as_float()?, arg().as_float()?);
            let s = shape_arg(&arg())?;
            let mut rng = Rng::new(seed as u64);
            let n = s.iter().product();
            new(Tensor::from_vec(&s, (0..n).map(|_| (lo + (hi - lo) * rng.uniform()) as f32).collect())?)?
        }
        B::LoadNpy => new(npy::load(&arg().as_str()?)?)?,
        B::SaveNpy => {
            let path = arg().as_str()?;
            let t = arg().as_tensor()?;
            npy::save(&path, &t)?;
            Value::Unit
        }
        B::Shape => {
            let t = arg().as_tensor()?;
            Value::list(t.shape().iter().map(|&d| Value::Int(d as i64)).collect::<Vec<_>>().into_iter())
        }
        B::Reshape => {
            let t = arg();
            let s = shape_arg(&arg())?;
            ad::tensor::call(m, TOp::Reshape(s), vec![t])?
        }
        B::Transpose => ad::tensor::call(m, TOp::Transpose, vec![arg()])?,
        B::Concat => {
            let axis = index(&arg(), "concat's axis")?;
            let ts: Vec<Value> = arg().iter_list().cloned().collect();
            ad::tensor::call(m, TOp::Concat(axis), ts)?
        }
        B::Slice => {
            let t = arg();
            let axis = index(&arg(), "slice's axis")?;
            let lo = index(&arg(), "slice's start")?;
            let hi = index(&arg(), "slice's end")?;
            ad::tensor::call(m, TOp::Slice(axis, lo, hi), vec![t])?
        }
        B::Row => {
            let t = arg();
            let i = index(&arg(), "a row index")?;
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
            let a = index(&arg(), "an axis")?;
            ad::tensor::call(m, TOp::SumAxis(a), vec![t])?
        }
        B::MeanAxis => {
            let t = arg();
            let a = index(&arg(), "an axis")?;
            ad::tensor::call(m, TOp::MeanAxis(a), vec![t])?
        }
        B::Conv2d => {
            let x = arg();
            ad::tensor::call(m, TOp::Conv2d, vec![x, arg()])?
        }
        B::MaxPool2d => {
            let k = index(&arg(), "the pooling size")?;
            ad::tensor::call(m, TOp::MaxPool2d(k), vec![arg()])?
        }
        B::Argmax => {
            let t = arg().as_tensor()?;
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
            let t = arg().as_tensor()?;
            Value::list(t.to_f64s().into_iter().map(Value::Float).collect::<Vec<_>>().into_iter())
        }
        B::Dtype => Value::Str(std::rc::Rc::new(arg().as_tensor()?.dtype().name().to_string())),
        B::Astype => {
            let name = arg().as_str()?;
            let Some(d) = DType::parse(&name) else {
                return Err(Fault::new(format!("unknown dtype `{name}` (known: float32, float64, int64, bool)")));
            };
            ad::tensor::call(m, TOp::AsType(d), vec![arg()])?
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
