//! Built-in functions that are plain functions of their arguments (no control effects).

use super::machine::{FResult, Fault, Machine};
use super::value::{fmt_float, show, ConVal, Value};
use crate::builtins::B;
use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;

fn some(v: Value) -> Value {
    Value::Con(Rc::new(ConVal { tag: 1, name: "Some".into(), args: vec![v] }))
}
fn none() -> Value {
    Value::Con(Rc::new(ConVal { tag: 0, name: "None".into(), args: vec![] }))
}

fn string(v: Value) -> FResult<Rc<String>> {
    match v {
        Value::Str(s) => Ok(s),
        other => Err(Fault::internal(format!("expected a String, got {}", other.type_name()))),
    }
}
fn int(v: Value) -> FResult<i64> {
    match v {
        Value::Int(n) => Ok(n),
        other => Err(Fault::internal(format!("expected an Int, got {}", other.type_name()))),
    }
}
fn float(v: Value) -> FResult<f64> {
    match crate::ad::strip(&v) {
        Value::Float(x) => Ok(x),
        other => Err(Fault::internal(format!("expected a Float, got {}", other.type_name()))),
    }
}

pub fn pure(m: &mut Machine, b: B, arg: &mut dyn FnMut() -> Value) -> FResult<Value> {
    Ok(match b {
        B::Print | B::Println => {
            let s = show(&arg(), true);
            let r = if b == B::Println { writeln!(m.out, "{s}") } else { write!(m.out, "{s}") };
            if let Err(e) = r {
                // A closed pipe (`dp run f.dp | head`) ends the program quietly, as in other tools.
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    m.exit_code = Some(0);
                }
                return Err(Fault::new(format!("cannot write to standard output: {e}")));
            }
            Value::Unit
        }
        B::Show => Value::str(show(&arg(), false)),
        B::ReadFile => {
            let path = string(arg())?;
            let text =
                std::fs::read_to_string(path.as_str()).map_err(|e| Fault::new(format!("cannot read `{path}`: {e}")))?;
            Value::str(text)
        }
        B::ReadLines => {
            let path = string(arg())?;
            let text =
                std::fs::read_to_string(path.as_str()).map_err(|e| Fault::new(format!("cannot read `{path}`: {e}")))?;
            let lines: Vec<Value> = text.lines().map(Value::str).collect();
            Value::list(lines.into_iter())
        }
        B::WriteFile => {
            let path = string(arg())?;
            let text = string(arg())?;
            std::fs::write(path.as_str(), text.as_bytes())
                .map_err(|e| Fault::new(format!("cannot write `{path}`: {e}")))?;
            Value::Unit
        }
        B::Args => Value::list(m.args.iter().map(|a| Value::str(a.clone())).collect::<Vec<_>>().into_iter()),
        B::Error => return Err(Fault::new(string(arg())?.to_string())),
        B::Float => Value::Float(int(arg())? as f64),
        B::Int => {
            let x = float(arg())?;
            // Every float in [-2^63, 2^63) truncates to an Int.
            if !(-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&x) {
                return Err(Fault::new(format!("cannot convert {} to Int", fmt_float(x))));
            }
            Value::Int(x.trunc() as i64)
        }
        B::StringOfInt => Value::str(int(arg())?.to_string()),
        B::StringOfFloat => Value::str(fmt_float(float(arg())?)),
        B::IntOfString => match string(arg())?.trim().parse::<i64>() {
            Ok(n) => some(Value::Int(n)),
            Err(_) => none(),
        },
        B::FloatOfString => match string(arg())?.trim().parse::<f64>() {
            Ok(x) => some(Value::Float(x)),
            Err(_) => none(),
        },
        B::StringLength => Value::Int(string(arg())?.chars().count() as i64),
        B::Substring => {
            let s = string(arg())?;
            let (start, len) = (int(arg())?, int(arg())?);
            let n = s.chars().count() as i64;
            if start < 0 || len < 0 || start.checked_add(len).is_none_or(|end| end > n) {
                return Err(Fault::new(format!("substring {start} {len} is out of range for a string of length {n}")));
            }
            Value::str(s.chars().skip(start as usize).take(len as usize).collect::<String>())
        }
        B::Chars => {
            let s = string(arg())?;
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
            let sep = string(arg())?;
            let s = string(arg())?;
            if sep.is_empty() {
                return Err(Fault::new("split: the separator is empty"));
            }
            Value::list(s.split(sep.as_str()).map(Value::str).collect::<Vec<_>>().into_iter())
        }
        B::Floor => Value::Float(float(arg())?.floor()),
        B::Ceil => Value::Float(float(arg())?.ceil()),
        B::Pi => Value::Float(std::f64::consts::PI),
        B::Infinity => Value::Float(f64::INFINITY),
        B::Nan => Value::Float(f64::NAN),
        B::IsNan => Value::Bool(float(arg())?.is_nan()),
        B::Ref => Value::Ref(Rc::new(RefCell::new(arg()))),
        other => return Err(Fault::internal(format!("builtin {other:?} dispatched as pure"))),
    })
}
