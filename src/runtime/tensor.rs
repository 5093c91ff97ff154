//! Where interpreter values meet the tensor library (crates/dp-tensor, which knows nothing of
//! `Value` or `Fault`): tensor operations on plain values, and its errors as faults.

use super::fault::{FResult, Fault};
use super::value::Value;
use crate::core::Prim;
use crate::tensor::ops::{self, Out};
use crate::tensor::{gpu, Bin, TOp, Tensor};
use std::rc::Rc;

pub fn wrap(t: Tensor) -> Value {
    Value::Tensor(Rc::new(t))
}

pub fn tensor_of(v: &Value) -> FResult<&Tensor> {
    match v {
        Value::Tensor(t) => Ok(t),
        other => Err(Fault::internal(format!("expected a Tensor, got {}", other.type_name()))),
    }
}

/// The forward definition of `op` on plain values (no perturbations).
pub fn forward(op: &TOp, args: &[Value]) -> FResult<Value> {
    match (op, args.first()) {
        // A Float moved to a device is still a Float.
        (TOp::ToDevice(_), Some(v)) if !matches!(v, Value::Tensor(_)) => return Ok(v.clone()),
        // A Float spread over a shape, on the default device (`--device`).
        (TOp::SumTo(shape) | TOp::BroadcastTo(shape), Some(Value::Float(x))) => {
            return Ok(wrap(Tensor::full_on(gpu::default_device()?, shape, *x as f32)?))
        }
        _ => {}
    }
    // The operands as tensors, on the stack for the usual one to three (no allocation per op).
    let t = |i: usize| tensor_of(&args[i]);
    let out = match args.len() {
        1 => ops::forward(op, &[t(0)?]),
        2 => ops::forward(op, &[t(0)?, t(1)?]),
        3 => ops::forward(op, &[t(0)?, t(1)?, t(2)?]),
        _ => ops::forward(op, &args.iter().map(tensor_of).collect::<FResult<Vec<_>>>()?),
    };
    Ok(match out? {
        Out::Tensor(t) => wrap(t),
        Out::Float(x) => Value::Float(x),
    })
}

/// The tensor library's name for an arithmetic primitive.
pub fn bin_of(p: Prim) -> Option<Bin> {
    Some(match p {
        Prim::Add => Bin::Add,
        Prim::Sub => Bin::Sub,
        Prim::Mul => Bin::Mul,
        Prim::Div => Bin::Div,
        Prim::Pow => Bin::Pow,
        _ => return None,
    })
}

/// Elementwise arithmetic on plain tensors and Floats (broadcasting). Operands come by value
/// so a tensor only this call holds is reused for the result.
pub fn elementwise(p: Prim, a: Value, b: Value) -> FResult<Value> {
    let Some(op) = bin_of(p) else { return Err(Fault::internal(format!("`{p:?}` on tensors"))) };
    Ok(wrap(match (a, b) {
        (Value::Tensor(x), Value::Tensor(y)) => ops::binary(op, x, y)?,
        (Value::Tensor(x), Value::Float(y)) => ops::binary_scalar(op, x, y, false)?,
        (Value::Float(x), Value::Tensor(y)) => ops::binary_scalar(op, y, x, true)?,
        (a, b) => return Err(Fault::internal(format!("`{p:?}` on {} and {}", a.type_name(), b.type_name()))),
    }))
}
