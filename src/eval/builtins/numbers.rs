//! Builtins on plain numbers (conversions, rounding, constants) and reference cells: the
//! plain functions of their arguments that are not differentiable.

use crate::builtins::B;
use crate::runtime::value::{fmt_float, Value};
use crate::runtime::{FResult, Fault};
use std::cell::RefCell;
use std::rc::Rc;

pub fn call(b: B, arg: &mut dyn FnMut() -> Value) -> FResult<Value> {
    Ok(match b {
        B::Float => Value::Float(arg().as_int()? as f64),
        B::Int => {
            let x = arg().as_float()?;
            // Every float in [-2^63, 2^63) truncates to an Int.
            if !(-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&x) {
                return Err(Fault::new(format!("cannot convert {} to Int", fmt_float(x))));
            }
            Value::Int(x.trunc() as i64)
        }
        B::Floor => Value::Float(arg().as_float()?.floor()),
        B::Ceil => Value::Float(arg().as_float()?.ceil()),
        B::Pi => Value::Float(std::f64::consts::PI),
        B::Infinity => Value::Float(f64::INFINITY),
        B::Nan => Value::Float(f64::NAN),
        B::IsNan => Value::Bool(arg().as_float()?.is_nan()),
        B::Ref => Value::Ref(Rc::new(RefCell::new(arg()))),
        other => return Err(Fault::internal(format!("{other:?} is not a number builtin"))),
    })
}
