//! Keyed random numbers (LANGUAGE.md "Random keys"): `key`, `split_key`, `split_keys` and the
//! samplers that take a key. The generator is the tensor crate's (`random`, JAX's Threefry);
//! this module only moves keys in and out of values. A key is the value `Key n` of an opaque
//! type — a constructor no program can name, so keys are made only by `key` and the splits.

use super::tensor::{index, new, shape_arg, spread_uniform};
use crate::builtins::B;
use crate::eval::machine::Machine;
use crate::runtime::value::{ConVal, Value};
use crate::runtime::{FResult, Fault};
use crate::tensor::random::Key;
use std::rc::Rc;

fn key_value(k: Key) -> Value {
    Value::Con(Rc::new(ConVal { tag: 0, name: "Key".into(), args: vec![Value::Int(k.0 as i64)] }))
}

fn key_arg(v: &Value) -> FResult<Key> {
    match v {
        Value::Con(c) if &*c.name == "Key" && c.args.len() == 1 => Ok(Key(c.args[0].as_int()? as u64)),
        _ => Err(Fault::internal("a random key was expected")),
    }
}

pub fn call(m: &mut Machine, b: B, arg: &mut dyn FnMut() -> Value) -> FResult<Value> {
    Ok(match b {
        B::Key => key_value(Key::from_seed(arg().as_int()?)),
        B::SplitKey => {
            let ks = key_arg(&arg())?.split(2);
            Value::Tuple(Rc::new(vec![key_value(ks[0]), key_value(ks[1])]))
        }
        B::SplitKeys => {
            let k = key_arg(&arg())?;
            let n = index(&arg(), "split_keys's count")?;
            if n > 1 << 24 {
                return Err(Fault::new(format!("split_keys: {n} keys is too many (at most 2^24)")));
            }
            Value::list(k.split(n).into_iter().map(key_value))
        }
        B::Normal => {
            let k = key_arg(&arg())?;
            new(k.normal(&shape_arg(&arg())?)?)?
        }
        B::UniformKey => {
            let k = key_arg(&arg())?;
            let (lo_v, hi_v) = (arg(), arg());
            let s = shape_arg(&arg())?;
            let (lo, hi) = (lo_v.as_float()? as f32, hi_v.as_float()? as f32);
            let (values, unit) = k.uniform(&s, lo, hi)?;
            spread_uniform(m, lo_v, hi_v, values, || unit)?
        }
        B::Randint => {
            let k = key_arg(&arg())?;
            let (lo, hi) = (arg().as_int()?, arg().as_int()?);
            let s = shape_arg(&arg())?;
            if lo >= hi {
                return Err(Fault::new(format!("randint: the range [{lo}, {hi}) is empty")));
            }
            new(k.randint(lo, hi, &s)?)?
        }
        B::Permutation => {
            let k = key_arg(&arg())?;
            let n = index(&arg(), "permutation's length")?;
            if n > 1 << 31 {
                return Err(Fault::new(format!("permutation: length {n} is too large")));
            }
            new(k.permutation(n)?)?
        }
        B::Bernoulli => {
            let k = key_arg(&arg())?;
            let p = arg().as_float()?;
            if !(0.0..=1.0).contains(&p) {
                return Err(Fault::new(format!("bernoulli: the probability must be in [0, 1] (got {p})")));
            }
            new(k.bernoulli(p, &shape_arg(&arg())?)?)?
        }
        other => return Err(Fault::internal(format!("{other:?} is not a random-number builtin"))),
    })
}
