//! Builtins on strings: showing values, conversions between strings and numbers, and the
//! string operations of LANGUAGE.md.

use crate::builtins::B;
use crate::runtime::value::{fmt_float, show, ConVal, Value};
use crate::runtime::{FResult, Fault};
use std::rc::Rc;

fn some(v: Value) -> Value {
    Value::Con(Rc::new(ConVal { tag: 1, name: "Some".into(), args: vec![v] }))
}
fn none() -> Value {
    Value::Con(Rc::new(ConVal { tag: 0, name: "None".into(), args: vec![] }))
}

pub fn call(b: B, arg: &mut dyn FnMut() -> Value) -> FResult<Value> {
    Ok(match b {
        B::Show => Value::str(show(&arg(), false)),
        B::StringOfInt => Value::str(arg().as_int()?.to_string()),
        B::StringOfFloat => Value::str(fmt_float(arg().as_float()?)),
        B::IntOfString => match arg().as_str()?.trim().parse::<i64>() {
            Ok(n) => some(Value::Int(n)),
            Err(_) => none(),
        },
        B::FloatOfString => match arg().as_str()?.trim().parse::<f64>() {
            Ok(x) => some(Value::Float(x)),
            Err(_) => none(),
        },
        B::StringLength => Value::Int(arg().as_str()?.chars().count() as i64),
        B::Substring => {
            let s = arg().as_str()?;
            let (start, len) = (arg().as_int()?, arg().as_int()?);
            let n = s.chars().count() as i64;
            if start < 0 || len < 0 || start.checked_add(len).is_none_or(|end| end > n) {
                return Err(Fault::new(format!("substring {start} {len} is out of range for a string of length {n}")));
            }
            Value::str(s.chars().skip(start as usize).take(len as usize).collect::<String>())
        }
        B::Chars => {
            let s = arg().as_str()?;
            Value::list(s.chars().map(|c| Value::str(c.to_string())).collect::<Vec<_>>().into_iter())
        }
        B::ConcatStrings => {
            let l = arg();
            let mut out = String::new();
            for v in l.iter_list() {
                if let Value::Str(s) = v {
                    out.push_str(s);
                }
            }
            Value::str(out)
        }
        B::Split => {
            let sep = arg().as_str()?;
            let s = arg().as_str()?;
            if sep.is_empty() {
                return Err(Fault::new("split: the separator is empty"));
            }
            Value::list(s.split(sep.as_str()).map(Value::str).collect::<Vec<_>>().into_iter())
        }
        other => return Err(Fault::internal(format!("{other:?} is not a string builtin"))),
    })
}
