//! Builtins on strings: showing values, conversions between strings and numbers, and the
//! string operations of LANGUAGE.md.

use crate::builtins::B;
use crate::runtime::value::{fmt_float, show, Value};
use crate::runtime::{FResult, Fault};

/// A format (checked with the program) applied to its packed arguments: none is `()`, one is
/// itself, several are a tuple (the checker's rewriting of `printf`/`sprintf` packs them).
pub fn sprintf(format: &str, packed: Value) -> FResult<String> {
    use crate::format::{directives, parse, render, Arg, Piece};
    let pieces = parse(format).map_err(|e| Fault::internal(format!("a checked format fails: {}", e.message)))?;
    let args: Vec<Value> = match (directives(&pieces).count(), packed) {
        (0, _) => Vec::new(),
        (1, v) => vec![v],
        (_, Value::Tuple(vs)) => vs.to_vec(),
        (_, other) => return Err(Fault::internal(format!("format arguments packed as a {}", other.type_name()))),
    };
    let mut out = String::new();
    let mut args = args.iter();
    for p in &pieces {
        match p {
            Piece::Text(t) => out.push_str(t),
            Piece::Arg(d) => {
                let v = args.next().map(crate::runtime::perturbed::strip).unwrap_or_default();
                let arg = match &v {
                    Value::Int(n) => Arg::Int(*n),
                    Value::Float(x) => Arg::Float(*x),
                    Value::Str(s) => Arg::Str(s),
                    Value::Bool(b) => Arg::Bool(*b),
                    other => return Err(Fault::internal(format!("a format argument is a {}", other.type_name()))),
                };
                out.push_str(&render(d, arg).map_err(Fault::internal)?);
            }
        }
    }
    Ok(out)
}

pub fn call(b: B, arg: &mut dyn FnMut() -> Value) -> FResult<Value> {
    Ok(match b {
        B::Show => Value::str(show(&arg(), false)),
        B::Sprintf => {
            let format = arg().as_str()?;
            Value::str(sprintf(&format, arg())?)
        }
        B::StringOfInt => Value::str(arg().as_int()?.to_string()),
        B::StringOfFloat => Value::str(fmt_float(arg().as_float()?)),
        B::IntOfString => match arg().as_str()?.trim().parse::<i64>() {
            Ok(n) => Value::some(Value::Int(n)),
            Err(_) => Value::none(),
        },
        B::FloatOfString => match arg().as_str()?.trim().parse::<f64>() {
            Ok(x) => Value::some(Value::Float(x)),
            Err(_) => Value::none(),
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
