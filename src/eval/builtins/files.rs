//! Files of tensors: checkpoints (`save_params`, `load_params`: a differentiable structure as a
//! safetensors file, each leaf named by its path) and NumPy `.npz` archives (`load_npz`,
//! `save_npz`). The formats themselves are the tensor library's (`tensor::safetensors`,
//! `tensor::npz`); this module maps the interpreter's values onto them.
//!
//! A leaf's name is its path from the root: record fields by name, tuple and list elements by
//! index, joined by dots (`w`, `layers.0.b`, `pair.1`). A Float leaf is a 0-d float64 tensor
//! (so it round-trips unrounded), a Tensor leaf a tensor of its dtype; a structure that is one leaf
//! names it `value`.

use crate::builtins::B;
use crate::runtime::perturbed::strip;
use crate::runtime::tensor::wrap;
use crate::runtime::value::{RecordVal, Value};
use crate::runtime::{FResult, Fault};
use crate::tensor::safetensors::{self, Entry, Leaf};
use crate::tensor::{fmt_shape, npz, Tensor};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

/// The name of the one leaf of a structure that is a single Float or Tensor.
const ROOT: &str = "value";

pub fn call(b: B, arg: &mut dyn FnMut() -> Value) -> FResult<Value> {
    Ok(match b {
        B::SaveParams => {
            let path = arg().as_str()?;
            let mut held = Vec::new();
            leaves(&arg(), &mut String::new(), &mut held)?;
            let leaves: Vec<(String, Leaf)> = held
                .iter()
                .map(|(name, h)| {
                    let leaf = match h {
                        Held::Float(x) => Leaf::Scalar(*x),
                        Held::Tensor(t) => Leaf::Tensor(t),
                    };
                    (name.clone(), leaf)
                })
                .collect();
            safetensors::write(&path, &leaves, &[("format", "dp")])?;
            Value::Unit
        }
        B::LoadParams => {
            let path = arg().as_str()?;
            let template = arg();
            let file = safetensors::read(&path)?;
            let by_name: HashMap<&str, &Entry> = file.entries.iter().map(|e| (e.name.as_str(), e)).collect();
            let mut load = Load { path: &path, file: &file, by_name, used: HashSet::new() };
            let out = load.rebuild(&template, &mut String::new())?;
            // Extra tensors: the first by name (the order the format keeps them in).
            if let Some(e) = file.entries.iter().find(|e| !load.used.contains(e.name.as_str())) {
                return Err(Fault::new(format!(
                    "load_params: `{path}` has a tensor `{}` that the template has no leaf for",
                    e.name
                )));
            }
            out
        }
        B::LoadNpz => {
            let arrays = npz::load(&arg().as_str()?)?;
            let items = arrays
                .into_iter()
                .map(|(name, t)| Ok(Value::Tuple(Rc::new(vec![Value::str(name), wrap(t.place()?)]))))
                .collect::<FResult<Vec<_>>>()?;
            Value::list(items.into_iter())
        }
        B::SaveNpz => {
            let path = arg().as_str()?;
            let list = arg();
            let mut arrays: Vec<(String, Rc<Tensor>)> = Vec::new();
            for item in list.iter_list() {
                let Value::Tuple(pair) = item else { return Err(Fault::internal("save_npz: not a pair")) };
                arrays.push((pair[0].as_str()?.to_string(), pair[1].as_tensor()?));
            }
            let refs: Vec<(String, &Tensor)> = arrays.iter().map(|(n, t)| (n.clone(), &**t)).collect();
            npz::save(&path, &refs)?;
            Value::Unit
        }
        other => return Err(Fault::internal(format!("{other:?} is not a tensor-file builtin"))),
    })
}

/// A leaf's data, held while the file is written.
enum Held {
    Float(f64),
    Tensor(Rc<Tensor>),
}

/// `path` extended by one step (`layers` then `0`: `layers.0`); returns the old length.
fn push(path: &mut String, step: &str) -> usize {
    let len = path.len();
    if len > 0 {
        path.push('.');
    }
    path.push_str(step);
    len
}

fn leaf_name(path: &str) -> String {
    if path.is_empty() {
        ROOT.to_string()
    } else {
        path.to_string()
    }
}

/// The children of a structure with their path steps, or None for a leaf.
fn children(v: &Value) -> Option<Vec<(Rc<str>, Value)>> {
    let index = |i: usize| -> Rc<str> { i.to_string().into() };
    match v {
        Value::Tuple(vs) => Some(vs.iter().enumerate().map(|(i, x)| (index(i), x.clone())).collect()),
        Value::Record(r) => {
            let RecordVal { names, values } = &**r;
            Some(names.iter().cloned().zip(values.iter().cloned()).collect())
        }
        Value::Nil | Value::Cons(_) => Some(v.iter_list().enumerate().map(|(i, x)| (index(i), x.clone())).collect()),
        _ => None,
    }
}

fn leaves(v: &Value, path: &mut String, out: &mut Vec<(String, Held)>) -> FResult<()> {
    if let Some(kids) = children(v) {
        for (step, kid) in kids {
            let len = push(path, &step);
            leaves(&kid, path, out)?;
            path.truncate(len);
        }
        return Ok(());
    }
    let held = match strip(v) {
        Value::Float(x) => Held::Float(x),
        Value::Tensor(t) => Held::Tensor(t),
        // The checker's `Diff` constraint admits nothing else.
        other => return Err(Fault::internal(format!("save_params: a {} leaf", other.type_name()))),
    };
    out.push((leaf_name(path), held));
    Ok(())
}

/// Rebuilding a template's structure from a file's tensors.
struct Load<'a> {
    path: &'a str,
    file: &'a safetensors::File,
    by_name: HashMap<&'a str, &'a Entry>,
    used: HashSet<&'a str>,
}

impl<'a> Load<'a> {
    fn rebuild(&mut self, template: &Value, path: &mut String) -> FResult<Value> {
        if let Some(kids) = children(template) {
            let mut values = Vec::with_capacity(kids.len());
            for (step, kid) in &kids {
                let len = push(path, step);
                values.push(self.rebuild(kid, path)?);
                path.truncate(len);
            }
            return Ok(match template {
                Value::Tuple(_) => Value::Tuple(Rc::new(values)),
                Value::Record(r) => Value::Record(Rc::new(RecordVal { names: r.names.clone(), values })),
                _ => Value::list(values.into_iter()),
            });
        }
        let name = leaf_name(path);
        let file = self.path;
        let Some(&e) = self.by_name.get(name.as_str()) else {
            return Err(Fault::new(format!("load_params: `{file}` has no tensor `{name}`, which the template has")));
        };
        self.used.insert(e.name.as_str());
        let (want, is_float) = match strip(template) {
            Value::Float(_) => (Vec::new(), true),
            Value::Tensor(t) => (t.shape().to_vec(), false),
            other => return Err(Fault::internal(format!("load_params: a {} leaf", other.type_name()))),
        };
        if !safetensors::loadable(&e.dtype) {
            return Err(Fault::new(format!(
                "load_params: `{file}`: tensor `{name}` has dtype {}, which dp cannot load (it loads BOOL, integers and F16/BF16/F32/F64)",
                e.dtype
            )));
        }
        if e.shape != want {
            let what = if is_float {
                "is a Float (a 0-d tensor, shape [])".to_string()
            } else {
                format!("has shape {}", fmt_shape(&want))
            };
            return Err(Fault::new(format!(
                "load_params: `{file}`: tensor `{name}` has shape {}, but the template's leaf {what}",
                fmt_shape(&e.shape)
            )));
        }
        Ok(if is_float {
            Value::Float(self.file.scalar(e)?)
        } else {
            let t = self.file.tensor(e)?;
            let tmpl = template.as_tensor()?;
            let (device, dtype) = (tmpl.device(), tmpl.dtype());
            // The template's dtype, as PyTorch's `load_state_dict` copies into a parameter's:
            // a float64 checkpoint (NumPy's default) into a float32 model stays float32. An
            // int64 or bool leaf takes only its own dtype, which no conversion could give back.
            let t = if t.dtype() == dtype {
                t
            } else if dtype.is_float() {
                t.astype(dtype)?
            } else {
                return Err(Fault::new(format!(
                    "load_params: `{file}`: tensor `{name}` has dtype {}, but the template's leaf is {}",
                    t.dtype().name(),
                    dtype.name()
                )));
            };
            // `to_device` copies even to the same device: skip it on the CPU.
            wrap(if t.device() == device {
                t
            } else {
                // (The GPU holds float32 only: a float64 file for a GPU template, say.)
                t.to_device(device).map_err(|e| Fault {
                    msg: format!("load_params: `{file}`: tensor `{name}`: {}", e.msg),
                    ..Fault::from(e)
                })?
            })
        })
    }
}
