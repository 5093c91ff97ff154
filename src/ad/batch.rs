//! Batching as a handler: `vmap f xs` (docs/grad.md §8). `vmap` takes a fresh tag, as `grad`
//! and `jvp` do, and runs `f` once, in a segment delimited by `Vmap`, on its argument with
//! every Tensor leaf made a *batched* value of that level (`Batched`: the stacked values of all
//! B examples and which axis holds them — JAX's BatchTracer). An operation meeting a batched
//! value at the innermost level does not run per example: its *batching rule* below turns it
//! into one operation on the whole stack (an elementwise operation broadcasts with the batch
//! axis in front, a reduction reduces the axes after it, a matrix–vector product with a batch of
//! vectors becomes one matrix product), and returns a batched value again. An operand that is
//! not batched at that level is the same for every example and stays as it is (no copies of it
//! are made). When `f` returns to the delimiter, each leaf of the result is stacked along a
//! new axis 0 (`finish`): a batched one is its stack with the batch axis moved to the front, one
//! that did not depend on the batch is broadcast.
//!
//! The rules compute with the host's operations on the stacked values, which may themselves be
//! perturbed or batched by levels outside this one (`grad (fun p -> sum (vmap (f p) xs))`), so
//! those levels record or batch the batched operation like any other: composition with `grad`,
//! `jvp` and other `vmap`s needs nothing more. A level inside this one (`vmap (grad f)`) sees
//! batched values as its primals, and its own rules, written with the host's arithmetic, come
//! back here for the batch. What has no rule yet is an error naming the operation, never a
//! wrong answer.

use super::tensor::call;
use super::{shape_of, Host};
use crate::core::Prim;
use crate::runtime::perturbed::{strip, Batched, Example};
use crate::runtime::value::Value;
use crate::runtime::{FResult, Fault};
use crate::tensor::{Cmp, DType, TOp, Un};
use std::rc::Rc;

/// An operand seen at the batching level `tag`.
enum At {
    /// Batched there: the stack, its batch axis and what one example is.
    Batch(Value, usize, Example),
    /// The same for every example.
    Plain(Value),
}

fn at(v: Value, tag: u32) -> At {
    match v {
        Value::Batched(b) if b.tag == tag => {
            let b = Rc::try_unwrap(b).unwrap_or_else(|shared| Batched {
                tag: shared.tag,
                value: shared.value.clone(),
                axis: shared.axis,
                kind: shared.kind,
            });
            At::Batch(b.value, b.axis, b.kind)
        }
        other => At::Plain(other),
    }
}

fn batched(tag: u32, value: Value, axis: usize, kind: Example) -> Value {
    Value::Batched(Rc::new(Batched { tag, value, axis, kind }))
}

/// Whether `tag` is the level of a batched operand (a tag belongs to one kind of level, and
/// only a `vmap` makes batched values).
pub fn is_batch_level<'a>(mut args: impl Iterator<Item = &'a Value>, tag: u32) -> bool {
    args.any(|a| matches!(a, Value::Batched(b) if b.tag == tag))
}

/// A batched value used after its `vmap` returned (kept in a reference cell or a closure): it
/// stands for B values at once, and no running `vmap` can say which.
fn check_live<H: Host>(m: &H, tag: u32) -> FResult<()> {
    if m.level_is_live(tag) {
        return Ok(());
    }
    Err(Fault::new("a value batched by a `vmap` that has returned is used here")
        .help("it escaped its `vmap` through a reference cell or a closure; return it from the function instead"))
}

/// The stack with its batch axis moved to the front.
fn front<H: Host>(m: &mut H, value: Value, axis: usize) -> FResult<Value> {
    if axis == 0 {
        return Ok(value);
    }
    let rank = shape_of(&value).len();
    let mut perm = vec![axis];
    perm.extend((0..rank).filter(|&i| i != axis));
    call(m, TOp::Permute(perm), vec![value])
}

/// Reshapes a batch-first stack of examples of shape `example` to rank `1 + rank`, with ones
/// inserted after the batch axis, so that it broadcasts against operands of that rank the way
/// one example would.
fn lift<H: Host>(m: &mut H, value: Value, example: &[usize], rank: usize) -> FResult<Value> {
    if example.len() >= rank {
        return Ok(value);
    }
    let b = shape_of(&value)[0];
    let mut shape = vec![b];
    shape.extend(std::iter::repeat_n(1, rank - example.len()));
    shape.extend_from_slice(example);
    call(m, TOp::Reshape(shape), vec![value])
}

/// The shape of one example of an operand at this level.
fn example_shape(a: &At) -> Vec<usize> {
    match a {
        At::Batch(v, axis, Example::Tensor) => {
            let mut s = shape_of(v);
            s.remove(*axis);
            s
        }
        At::Batch(..) => Vec::new(),
        At::Plain(v) => shape_of(v),
    }
}

/// Whether one example of the operand is a Tensor (rather than a Float or a Bool).
fn is_tensor_example(a: &At) -> bool {
    match a {
        At::Batch(_, _, k) => *k == Example::Tensor,
        At::Plain(v) => {
            // A traced value (`Value::Staged`) is always a tensor.
            matches!(strip(v), Value::Tensor(_) | Value::Staged(_))
                || matches!(strip(v), Value::Batched(b) if b.kind == Example::Tensor)
        }
    }
}

/// Whether one example of a batched operand is a Float: a batch of Floats, or of a rank-1
/// tensor's elements (`vmap f xs` where `f` takes a Float, as the checker's `Slice` allows).
/// Those examples are 0-d tensors, which compute as Floats do, in the tensor's dtype; the
/// rules that only Floats have (ordering, `int`, `floor`, …) take them as Floats.
fn is_float_example(a: &At) -> bool {
    match a {
        At::Batch(_, _, Example::Float(_)) => true,
        At::Batch(_, _, Example::Tensor) => example_shape(a).is_empty(),
        _ => false,
    }
}

/// A batched operand one example of which is a Float (`is_float_example`): its stack, batch
/// axis and kind.
fn float_batch(a: At, what: &str) -> FResult<(Value, usize, Example)> {
    match a {
        At::Batch(v, axis, kind) if is_float_example(&a) => Ok((v, axis, kind)),
        At::Batch(_, _, Example::Tensor) => Err(not_elements(&example_shape(&a))),
        _ => Err(Fault::unbatched(what)),
    }
}

/// A Float-only operation met examples that are tensors: the mapped function takes a Float
/// where `vmap`'s argument has a tensor of rank 2 or more (the checker cannot see ranks).
fn not_elements(example: &[usize]) -> Fault {
    Fault::new(format!(
        "a Float here holds examples of shape {}: `vmap` gives a function of a Float the elements of a rank-1 tensor",
        crate::tensor::fmt_shape(example)
    ))
    .help("make the mapped function take a Tensor, or map over the rows with a second `vmap`")
}

/// The dtype of an operand's tensor, under every layer (float32 for Floats).
fn dtype_under(v: &Value) -> DType {
    match strip(v) {
        Value::Tensor(t) => t.dtype(),
        Value::Staged(s) => s.example.dtype(),
        Value::Batched(b) => match b.kind {
            Example::Float(d) => d,
            _ => dtype_under(&b.value),
        },
        _ => DType::F32,
    }
}

/// Whether one example of the operand is an Int.
fn is_int(a: &At) -> bool {
    matches!(a, At::Batch(_, _, Example::Int) | At::Plain(Value::Int(_)))
}

/// An operator as written, for errors.
fn symbol(p: Prim) -> &'static str {
    match p {
        Prim::Add => "+",
        Prim::Sub => "-",
        Prim::Mul => "*",
        Prim::Div => "/",
        Prim::Rem => "%",
        Prim::Pow => "**",
        Prim::Eq => "==",
        Prim::Ne => "!=",
        Prim::Lt => "<",
        Prim::Le => "<=",
        Prim::Gt => ">",
        _ => ">=",
    }
}

/// A plain Int as a 0-d int64 tensor (Int batches are int64 stacks, on the CPU: no GPU dtype
/// holds int64).
fn int_scalar(n: i64) -> FResult<Value> {
    Ok(crate::runtime::tensor::wrap(crate::tensor::Tensor::from_i64s(&[], vec![n])?))
}

/// Int arithmetic with an operand an Int batch, as Int arithmetic does it per example: `+ - *`
/// and `**` wrap (and so do int64 tensors'); `/` and `%` truncate. A zero divisor or a
/// negative exponent in any example is the error one Int gives.
fn int_arith<H: Host>(m: &mut H, tag: u32, p: Prim, a: At, b: At) -> FResult<Value> {
    let operand = |m: &mut H, v: At| -> FResult<Value> {
        match v {
            At::Batch(v, axis, _) => front(m, v, axis),
            At::Plain(Value::Int(n)) => int_scalar(n),
            At::Plain(v) => Ok(v),
        }
    };
    let (x, y) = (operand(m, a)?, operand(m, b)?);
    // Every number of the stack under all its layers is some example's.
    let ints = |v: &Value| -> Vec<i64> {
        super::underlying(v).and_then(|t| t.i64s().map(|a| a.iter().copied().collect())).unwrap_or_default()
    };
    let out = match p {
        Prim::Add | Prim::Sub | Prim::Mul => m.prim2(p, x, y)?,
        Prim::Pow => {
            if let Some(e) = ints(&y).into_iter().find(|&e| e < 0) {
                return Err(Fault::new(format!("negative Int exponent {e}")).help("use Floats: `float x ** float y`"));
            }
            m.prim2(p, x, y)?
        }
        Prim::Div | Prim::Rem => {
            if ints(&y).contains(&0) {
                return Err(Fault::new("division by zero"));
            }
            // No tensor operation truncates int64s: the quotients are computed on the numbers,
            // with both operands first given one layout (each plus zero times the other:
            // exact, and the same broadcast for both).
            let zero = int_scalar(0)?;
            let (zx, zy) = (m.prim2(Prim::Mul, x.clone(), zero.clone())?, m.prim2(Prim::Mul, y.clone(), zero)?);
            let (x, y) = (m.prim2(Prim::Add, x, zy)?, m.prim2(Prim::Add, y, zx)?);
            let f = if p == Prim::Div { i64::wrapping_div } else { i64::wrapping_rem };
            zip_ints(&x, &y, f).ok_or_else(|| on_numbers(&[&x, &y], symbol(p)))?
        }
        _ => return Err(Fault::unbatched(symbol(p))),
    };
    Ok(batched(tag, out, 0, Example::Int))
}

/// `f` of the int64 stacks under two values of one layout, element by element, in that layout
/// (`None` when the layouts differ, or a stack is not a plain int64 tensor).
fn zip_ints(a: &Value, b: &Value, f: fn(i64, i64) -> i64) -> Option<Value> {
    match (a, b) {
        (Value::Batched(x), Value::Batched(y)) if x.tag == y.tag && x.axis == y.axis && x.kind == y.kind => {
            Some(batched(x.tag, zip_ints(&x.value, &y.value, f)?, x.axis, x.kind))
        }
        (Value::Tensor(s), Value::Tensor(t)) if s.shape() == t.shape() && s.device() == t.device() => {
            let (p, q) = (s.i64s()?, t.i64s()?);
            let data = p.iter().zip(q.iter()).map(|(&u, &v)| f(u, v)).collect();
            Some(crate::runtime::tensor::wrap(crate::tensor::Tensor::from_i64s(s.shape(), data).ok()?))
        }
        _ => None,
    }
}

/// `floor x` (`ceil` with `up`) for a batch of Floats: each example's, on the numbers of the
/// stack (rounding has derivative 0 almost everywhere, and `floor` of a Float is a plain
/// Float: the perturbations go, as there).
pub fn round<H: Host>(m: &mut H, x: &Value, up: bool) -> FResult<Value> {
    let name = if up { "ceil" } else { "floor" };
    let (tag, xs) = read_batch(m, x, name)?;
    let (v, axis, kind) = float_batch(xs, name)?;
    let f = if up { f64::ceil } else { f64::floor };
    let rounded = map_floats(&v, f).ok_or_else(|| on_numbers(&[&v], name))?;
    Ok(batched(tag, rounded?, axis, kind))
}

/// Whether the stack under `v`'s batching layers is traced (inside `jit`).
fn traced_under(v: &Value) -> bool {
    match strip(v) {
        Value::Batched(b) => traced_under(&b.value),
        Value::Staged(_) | Value::StagedFloat(_) => true,
        _ => false,
    }
}

/// Why `what`, which these rules compute on its operands' stacks' numbers, cannot run on
/// `operands`: staging cannot read a traced stack's numbers; otherwise there is no rule for
/// what is under them.
fn on_numbers(operands: &[&Value], what: &str) -> Fault {
    if operands.iter().any(|v| traced_under(v)) {
        Fault::unstageable(&format!("`{what}` of a batch"))
    } else {
        Fault::unbatched(what)
    }
}

/// `f` of every number of the stack under `v`'s batching layers, in `v`'s layout, dtype and
/// device (`None` when under them is no plain tensor).
fn map_floats(v: &Value, f: fn(f64) -> f64) -> Option<FResult<Value>> {
    match v {
        Value::Batched(b) => Some(map_floats(&b.value, f)?.map(|inner| batched(b.tag, inner, b.axis, b.kind))),
        Value::Tensor(t) => Some((|| {
            let data = t.to_f64s()?.into_iter().map(f).collect();
            let out = crate::tensor::Tensor::from_f64s(t.shape(), data)?.astype(t.dtype())?;
            let out = crate::runtime::tensor::wrap(out);
            if t.device() == crate::tensor::Device::Cpu {
                return Ok(out);
            }
            crate::runtime::tensor::forward(&TOp::ToDevice(t.device()), &[out])
        })()),
        _ => None,
    }
}

/// `v` as the stack of a batch of Floats: float64 on the CPU, so the examples compute in a
/// Float's precision; a GPU holds float32 only, and there the batch stays in float32 on the
/// device, beside the tensors it came from and meets.
fn floats<H: Host>(m: &mut H, v: Value) -> FResult<Value> {
    let d = if device_of(&v) == crate::tensor::Device::Cpu { DType::F64 } else { DType::F32 };
    call(m, TOp::AsType(d), vec![v])
}

/// A 0-d tensor holding `x` on `device`, in the dtype of a batch of Floats there (`floats`).
fn float_scalar<H: Host>(m: &mut H, x: f64, device: crate::tensor::Device) -> FResult<Value> {
    let t = crate::runtime::tensor::wrap(crate::tensor::Tensor::from_f64s(&[], vec![x])?);
    if device == crate::tensor::Device::Cpu {
        return Ok(t);
    }
    let t = call(m, TOp::AsType(DType::F32), vec![t])?;
    call(m, TOp::ToDevice(device), vec![t])
}

/// The floating dtype a batch of Floats reduced from a tensor of dtype `d` is stacked in.
fn float_origin(d: DType) -> DType {
    if d.is_float() {
        d
    } else {
        DType::F32
    }
}

/// Operands of an elementwise operation, made to broadcast as one example's would: batched
/// ones batch-first and lifted to the examples' common rank, a batch of Floats meeting tensors
/// converted to their dtype (as a Float meeting a tensor takes its dtype). With `full`, plain
/// operands are broadcast over the batch too (for the operations that do not broadcast).
/// Returns the operands and what one example of the result is.
fn align<H: Host>(m: &mut H, args: Vec<At>, full: bool) -> FResult<(Vec<Value>, Example)> {
    let tensors = args.iter().any(is_tensor_example);
    let rank = args.iter().map(|a| example_shape(a).len()).max().unwrap_or(0);
    let b = args.iter().find_map(|a| match a {
        At::Batch(v, axis, _) => Some(shape_of(v)[*axis]),
        At::Plain(_) => None,
    });
    let Some(b) = b else { return Err(Fault::internal("a batching rule with no batched operand")) };
    let tensor_dtype = args.iter().find_map(|a| match a {
        At::Batch(v, _, Example::Tensor) => Some(dtype_under(v)),
        At::Plain(v) if is_tensor_example(a) => Some(dtype_under(v)),
        _ => None,
    });
    let device = args
        .iter()
        .find_map(|a| match a {
            At::Batch(v, _, _) => Some(device_of(v)),
            At::Plain(_) => None,
        })
        .unwrap_or(crate::tensor::Device::Cpu);
    let kind = if tensors {
        Example::Tensor
    } else if args.iter().any(|a| matches!(a, At::Batch(_, _, Example::Bool))) {
        Example::Bool
    } else if args.iter().any(is_int) {
        Example::Int
    } else {
        // A Float's origin: float64 if any operand came from float64 data.
        let f64 = args.iter().any(|a| matches!(a, At::Batch(_, _, Example::Float(DType::F64))));
        Example::Float(if f64 { DType::F64 } else { DType::F32 })
    };
    let mut out = Vec::with_capacity(args.len());
    for a in args {
        let shape = example_shape(&a);
        out.push(match a {
            At::Batch(v, axis, k) => {
                let mut v = front(m, v, axis)?;
                if let (Example::Float(_) | Example::Int, true, Some(d)) = (k, tensors, tensor_dtype) {
                    v = call(m, TOp::AsType(d), vec![v])?;
                }
                lift(m, v, &shape, rank)?
            }
            At::Plain(v) if full && !tensors => {
                // Beside a batch of Floats (float64), a Float is one too: 1 · v as a float64
                // 0-d tensor (exact, and still perturbed if v is), spread over the batch.
                let one = float_scalar(m, 1.0, device)?;
                let v = match v {
                    Value::Int(n) => int_scalar(n)?,
                    v => m.prim2(Prim::Mul, one, v)?,
                };
                call(m, TOp::BroadcastTo(vec![b]), vec![v])?
            }
            At::Plain(v) if full => {
                let mut s = vec![b];
                s.extend(std::iter::repeat_n(1, rank - shape.len()));
                s.extend_from_slice(&shape);
                let mut v = v;
                if !shape.is_empty() {
                    let mut one = vec![1];
                    one.extend_from_slice(&s[1..]);
                    v = call(m, TOp::Reshape(one), vec![v])?;
                }
                call(m, TOp::BroadcastTo(s), vec![v])?
            }
            At::Plain(v) => v,
        });
    }
    Ok((out, kind))
}

/// `a p b` (arithmetic) with an operand batched at `tag`.
pub fn binary<H: Host>(m: &mut H, tag: u32, p: Prim, a: Value, b: Value) -> FResult<Value> {
    check_live(m, tag)?;
    let (a, b) = (at(a, tag), at(b, tag));
    if !is_tensor_example(&a) && !is_tensor_example(&b) && (is_int(&a) || is_int(&b)) {
        return int_arith(m, tag, p, a, b);
    }
    // The common case of one shape of examples, batched alike: nothing to move.
    if let (At::Batch(va, xa, ka), At::Batch(vb, xb, kb)) = (&a, &b) {
        if xa == xb && ka == kb && shape_of(va) == shape_of(vb) {
            let y = m.prim2(p, va.clone(), vb.clone())?;
            return Ok(batched(tag, y, *xa, *ka));
        }
    }
    if let (At::Batch(va, axis, Example::Tensor), At::Plain(vb))
    | (At::Plain(vb), At::Batch(va, axis, Example::Tensor)) = (&a, &b)
    {
        // A plain Float broadcasts against the stack wherever its batch axis is.
        if !is_tensor_example(&At::Plain(vb.clone())) {
            let (x, y) = if matches!(a, At::Batch(..)) { (va.clone(), vb.clone()) } else { (vb.clone(), va.clone()) };
            let out = m.prim2(p, x, y)?;
            return Ok(batched(tag, out, *axis, Example::Tensor));
        }
    }
    let (args, kind) = align(m, vec![a, b], false)?;
    let mut args = args.into_iter();
    let (x, y) = (args.next().unwrap_or_default(), args.next().unwrap_or_default());
    let out = m.prim2(p, x, y)?;
    Ok(batched(tag, out, 0, kind))
}

/// `op x` for a math function, with `x` batched at `tag`: elementwise, so the stack as it is.
pub fn unary<H: Host>(m: &mut H, tag: u32, op: Un, x: Value) -> FResult<Value> {
    check_live(m, tag)?;
    match at(x, tag) {
        At::Batch(_, _, Example::Bool) => Err(Fault::internal(format!("`{op:?}` of a batch of Bools"))),
        At::Batch(v, axis, kind) => Ok(batched(tag, super::apply_un(m, op, v)?, axis, kind)),
        At::Plain(v) => super::apply_un(m, op, v),
    }
}

/// A comparison of Floats (`<`, `==`, …) with an operand batched at `tag`: a batch of Bools.
pub fn compare<H: Host>(m: &mut H, tag: u32, p: Prim, a: Value, b: Value) -> FResult<Value> {
    check_live(m, tag)?;
    let (a, b) = (at(a, tag), at(b, tag));
    // A 0-d example compares as a Float (for two 0-d tensors `==` is the same question).
    let tensor = |a: &At| is_tensor_example(a) && !example_shape(a).is_empty();
    // A Float compared with examples that are tensors: the function takes a Float where the
    // argument's tensor has rank 2 or more.
    let float = |a: &At| !is_tensor_example(a) && !is_int(a);
    for (x, y) in [(&a, &b), (&b, &a)] {
        if tensor(x) && float(y) {
            return Err(not_elements(&example_shape(x)));
        }
    }
    if tensor(&a) || tensor(&b) {
        if !matches!(p, Prim::Eq | Prim::Ne) {
            return Err(Fault::unbatched(symbol(p)));
        }
        return tensors_equal(m, tag, p == Prim::Ne, a, b);
    }
    let c = match p {
        Prim::Lt => Cmp::Less,
        Prim::Le => Cmp::LessEqual,
        Prim::Gt => Cmp::Greater,
        Prim::Ge => Cmp::GreaterEqual,
        Prim::Eq => Cmp::Equal,
        Prim::Ne => Cmp::NotEqual,
        other => return Err(Fault::internal(format!("`{other:?}` is not a comparison"))),
    };
    // Compared as plain numbers (comparisons are not differentiated), a plain Float as a 0-d
    // tensor of the batch's dtype.
    let template = match (&a, &b) {
        (At::Batch(v, _, _), _) | (_, At::Batch(v, _, _)) => super::underlying(v),
        _ => None,
    };
    let plain = |m: &mut H, v: At| -> FResult<Value> {
        Ok(match v {
            At::Batch(v, _, _) => strip(&v),
            At::Plain(v) => match (strip(&v), &template) {
                (Value::Int(n), _) => int_scalar(n)?,
                (Value::Float(x), Some(t)) => crate::runtime::tensor::wrap(t.full_like(&[], x)?),
                // A traced Float (inside `jit`): a 0-d tensor by a traced product, compared
                // by the staged program on every call.
                (x @ Value::StagedFloat(_), Some(t)) => {
                    m.prim2(Prim::Mul, crate::runtime::tensor::wrap(t.full_like(&[], 1.0)?), x)?
                }
                (other, _) => other,
            },
        })
    };
    let (x, y) = (plain(m, a)?, plain(m, b)?);
    let out = m.forward(&TOp::Cmp(c), &[x, y])?;
    Ok(batched(tag, out, 0, Example::Bool))
}

/// `a == b` (`!=` with `negate`) on tensors with an operand batched at `tag`, per example as
/// `==` compares two tensors: the same shape and equal elements (by value, whatever the
/// dtypes). The examples of a batch share a shape, so a shape that differs is false for all.
fn tensors_equal<H: Host>(m: &mut H, tag: u32, negate: bool, a: At, b: At) -> FResult<Value> {
    let (sa, sb) = (example_shape(&a), example_shape(&b));
    if sa != sb || !is_tensor_example(&a) || !is_tensor_example(&b) {
        return Ok(Value::Bool(negate));
    }
    // Compared as values: perturbations are not compared, as `==` strips them.
    let plain = |v: At| match v {
        At::Batch(v, axis, k) => At::Batch(strip(&v), axis, k),
        At::Plain(v) => At::Plain(strip(&v)),
    };
    let (parts, _) = align(m, vec![plain(a), plain(b)], true)?;
    let n = sa.iter().product::<usize>();
    let bsz = shape_of(&parts[0])[0];
    let differ = call(m, TOp::Cmp(Cmp::NotEqual), parts)?;
    let differ = call(m, TOp::AsType(DType::F32), vec![differ])?;
    let differ = call(m, TOp::Reshape(vec![bsz, n]), vec![differ])?;
    // How many elements differ, per example (exact in float32 below 2^24, and any count
    // above is as nonzero).
    let count = call(m, TOp::SumAxis(1), vec![differ])?;
    let zero = crate::runtime::tensor::wrap(crate::tensor::Tensor::full(&[], 0.0));
    let device = super::underlying(&count).map_or(crate::tensor::Device::Cpu, |t| t.device());
    let zero = call(m, TOp::ToDevice(device), vec![zero])?;
    let c = if negate { Cmp::NotEqual } else { Cmp::Equal };
    let out = call(m, TOp::Cmp(c), vec![count, zero])?;
    Ok(batched(tag, out, 0, Example::Bool))
}

/// An operand of a builtin that reads values (`int`, `argmax`, …), batched at its innermost
/// level: that level's tag and the operand seen there, perturbations stripped.
fn read_batch<H: Host>(m: &H, x: &Value, what: &str) -> FResult<(u32, At)> {
    let x = strip(x);
    let Value::Batched(b) = &x else { return Err(Fault::internal(format!("`{what}` of an unbatched value"))) };
    let tag = b.tag;
    check_live(m, tag)?;
    Ok((tag, at(x, tag)))
}

/// The device of the tensor under a batched operand's stack.
fn device_of(v: &Value) -> crate::tensor::Device {
    super::underlying(v).map_or(crate::tensor::Device::Cpu, |t| t.device())
}

/// `int x` for a batch of Floats: each truncated into an Int batch; a value no Int holds is
/// the error `int` gives for it.
pub fn int_of<H: Host>(m: &mut H, x: &Value) -> FResult<Value> {
    let (tag, x) = read_batch(m, x, "int")?;
    let (v, axis, _) = float_batch(x, "int")?;
    // The whole stack (with any outer batch levels) holds exactly the examples' values.
    if let Some(t) = super::underlying(&v) {
        let fits = |x: &f64| (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(x);
        if let Some(bad) = t.to_f64s()?.into_iter().find(|x| !fits(x)) {
            return Err(Fault::new(format!("cannot convert {} to Int", crate::runtime::value::fmt_float(bad))));
        }
    }
    let v = front(m, v, axis)?;
    let v = call(m, TOp::ToDevice(crate::tensor::Device::Cpu), vec![v])?;
    // int64 conversion truncates toward zero, as `int` does.
    Ok(batched(tag, call(m, TOp::AsType(DType::I64), vec![v])?, 0, Example::Int))
}

/// `float n` for a batch of Ints: a batch of Floats (exact below 2^53, as `float`).
pub fn float_of<H: Host>(m: &mut H, x: &Value) -> FResult<Value> {
    let (tag, x) = read_batch(m, x, "float")?;
    let At::Batch(v, axis, Example::Int) = x else { return Err(Fault::unbatched("float")) };
    let v = front(m, v, axis)?;
    Ok(batched(tag, call(m, TOp::AsType(DType::F64), vec![v])?, 0, Example::Float(DType::F32)))
}

/// `is_nan x` for a batch of Floats: a batch of Bools (NaN is the one value unequal to itself).
pub fn is_nan<H: Host>(m: &mut H, x: &Value) -> FResult<Value> {
    let (tag, x) = read_batch(m, x, "is_nan")?;
    let (v, axis, _) = float_batch(x, "is_nan")?;
    let v = front(m, v, axis)?;
    Ok(batched(tag, call(m, TOp::Cmp(Cmp::NotEqual), vec![v.clone(), v])?, 0, Example::Bool))
}

/// `argmax x` (`argmin` with `min`) for a batch of tensors: each example's position of its
/// first largest (smallest) element among its elements in order, an Int batch — one
/// `argmax_axis` on the stack with each example flattened.
pub fn arg_extreme<H: Host>(m: &mut H, x: &Value, min: bool) -> FResult<Value> {
    let name = if min { "argmin" } else { "argmax" };
    let (tag, x) = read_batch(m, x, name)?;
    let shape = example_shape(&x);
    let At::Batch(v, axis, Example::Tensor) = x else { return Err(Fault::unbatched(name)) };
    let n = shape.iter().product::<usize>();
    if n == 0 {
        return Err(Fault::new(format!("{name} of an empty tensor")));
    }
    let v = front(m, v, axis)?;
    let b = shape_of(&v)[0];
    let mut flat = call(m, TOp::Reshape(vec![b, n]), vec![v])?;
    if min {
        flat = super::apply_un(m, Un::Neg, flat)?;
    }
    let at = call(m, TOp::ArgmaxAxis(1), vec![flat])?;
    // The GPU's positions are float32 (exact below 2^24): Ints are int64, on the CPU.
    let at = call(m, TOp::ToDevice(crate::tensor::Device::Cpu), vec![at])?;
    Ok(batched(tag, call(m, TOp::AsType(DType::I64), vec![at])?, 0, Example::Int))
}

/// `row t i` with `i` a batch of Ints: each example's row — one `gather` along axis 0 with
/// the examples' indices (the tensor batched or not), differentiable in `t` as `row` is. An
/// index `row` would refuse is its error.
pub fn row_at<H: Host>(m: &mut H, t: Value, i: &Value) -> FResult<Value> {
    let (tag, ix) = read_batch(m, i, "row")?;
    let At::Batch(v, axis, Example::Int) = ix else { return Err(Fault::unbatched("row")) };
    let shape = shape_of(&t);
    let values = super::underlying(&v).and_then(|u| u.i64s().map(|a| a.iter().copied().collect::<Vec<_>>()));
    let Some(values) = values else { return Err(Fault::unbatched("row")) };
    if let Some(&n) = values.iter().find(|&&n| n < 0) {
        return Err(Fault::new(format!("a row index must not be negative (got {n})")));
    }
    // `row` of a rank-1 tensor is one element (a 0-d tensor), as without `vmap`.
    if let Some(&n) = values.iter().find(|&&n| shape.is_empty() || n as usize >= shape[0]) {
        return Err(Fault::new(format!(
            "row {n} is out of range for a tensor of shape {}",
            crate::tensor::fmt_shape(&shape)
        )));
    }
    // The Ints as 0-d int64 examples: a `gather` with them drops the row axis, as `row` does.
    let idx = batched(tag, v, axis, Example::Tensor);
    call(m, TOp::Gather(0), vec![t, idx])
}

/// `any x` (`all x` with `all`) for a batch of tensors: a batch of Bools, from how many of
/// each example's elements are nonzero (NaN is, as `any` counts it) or zero.
pub fn any_all<H: Host>(m: &mut H, x: &Value, all: bool) -> FResult<Value> {
    let name = if all { "all" } else { "any" };
    let (tag, x) = read_batch(m, x, name)?;
    let shape = example_shape(&x);
    let At::Batch(v, axis, Example::Tensor) = x else { return Err(Fault::unbatched(name)) };
    let n = shape.iter().product::<usize>();
    let v = front(m, v, axis)?;
    let b = shape_of(&v)[0];
    let flat = call(m, TOp::Reshape(vec![b, n]), vec![v])?;
    let zero = zero_scalar(m, &flat, DType::F32)?;
    let zero_of = call(m, TOp::AsType(super::dtype_of(&flat).unwrap_or(DType::F32)), vec![zero.clone()])?;
    let hit = call(m, TOp::Cmp(if all { Cmp::Equal } else { Cmp::NotEqual }), vec![flat, zero_of])?;
    let hit = call(m, TOp::AsType(DType::F32), vec![hit])?;
    let count = call(m, TOp::SumAxis(1), vec![hit])?;
    // any: some element is nonzero; all: no element is zero.
    let c = if all { Cmp::Equal } else { Cmp::Greater };
    Ok(batched(tag, call(m, TOp::Cmp(c), vec![count, zero])?, 0, Example::Bool))
}

/// A 0-d zero of dtype `d` on the device of `like`'s tensor.
fn zero_scalar<H: Host>(m: &mut H, like: &Value, d: DType) -> FResult<Value> {
    let zero = crate::runtime::tensor::wrap(crate::tensor::Tensor::full(&[], 0.0));
    let zero = call(m, TOp::AsType(d), vec![zero])?;
    call(m, TOp::ToDevice(device_of(like)), vec![zero])
}

/// `max_of`/`min_of` of two Floats or Ints, one batched: each example's own pick, as one
/// Float's would be — `a` where `keep` (a batch of Bools) holds, else `b`. For Floats a
/// select, differentiable in both operands (the one not picked gets no adjoint, not a zero
/// times it).
pub fn pick<H: Host>(m: &mut H, keep: Value, a: Value, b: Value) -> FResult<Value> {
    let Value::Batched(k) = &keep else { return Err(Fault::internal("a pick with an unbatched choice")) };
    let tag = k.tag;
    check_live(m, tag)?;
    let At::Batch(keep, axis, _) = at(keep, tag) else { return Err(Fault::internal("a pick's choice")) };
    let keep = front(m, keep, axis)?;
    let ints = [&a, &b].iter().any(|v| is_int(&at(strip(v), tag)));
    if ints {
        let operand = |m: &mut H, v: Value| -> FResult<Value> {
            match at(v, tag) {
                At::Batch(v, axis, _) => front(m, v, axis),
                At::Plain(Value::Int(n)) => int_scalar(n),
                At::Plain(v) => Ok(v),
            }
        };
        let (x, y) = (operand(m, a)?, operand(m, b)?);
        return Ok(batched(tag, call(m, TOp::Where, vec![keep, x, y])?, 0, Example::Int));
    }
    let kept = batched(tag, floats(m, keep)?, 0, Example::Float(DType::F32));
    let rest = m.prim2(Prim::Sub, Value::Float(1.0), kept.clone())?;
    let a = super::tensor::select(m, a, kept)?;
    let b = super::tensor::select(m, b, rest)?;
    m.prim2(Prim::Add, a, b)
}

/// `tree_clip lo hi x` for a batch of Floats `x`: per example what a Float's clip is (jnp.clip:
/// the value clamped, derivative 1 strictly inside, 0 outside, 1/2 for each bound it sits on),
/// with that weight w a batch too: `select(x, w) · w + select(clamped, 1 - w) · (1 - w)`.
pub fn clip_floats<H: Host>(m: &mut H, x: Value, lo: f64, hi: f64) -> FResult<Value> {
    let (tag, xs) = read_batch(m, &x, "tree_clip")?;
    let (s, axis, kind) = float_batch(xs, "tree_clip")?;
    let s = front(m, s, axis)?;
    let device = device_of(&s);
    let scalar = |m: &mut H, v: f64| float_scalar(m, v, device);
    let (l, h) = (scalar(m, lo)?, scalar(m, hi)?);
    // 1 where `above`, 1/2 where `on`, else 0 (the two never hold together).
    let side = |m: &mut H, x: &Value, bound: &Value, above: Cmp| -> FResult<Value> {
        let a = call(m, TOp::Cmp(above), vec![x.clone(), bound.clone()])?;
        let a = floats(m, a)?;
        let on = call(m, TOp::Cmp(Cmp::Equal), vec![x.clone(), bound.clone()])?;
        let on = floats(m, on)?;
        let half = m.prim2(Prim::Mul, on, Value::Float(0.5))?;
        m.prim2(Prim::Add, a, half)
    };
    let w_lo = side(m, &s, &l, Cmp::Greater)?;
    let at_lo = call(m, TOp::Cmp(Cmp::Max), vec![s, l])?;
    // Below the upper bound (`at_lo < hi`), or on it.
    let w_hi = side(m, &at_lo, &h, Cmp::Less)?;
    let w = m.prim2(Prim::Mul, w_lo, w_hi)?;
    let clamped = call(m, TOp::Cmp(Cmp::Min), vec![h, at_lo])?;
    let w = batched(tag, w, 0, kind);
    let clamped = batched(tag, clamped, 0, kind);
    super::tensor::blend(m, x, clamped, w)
}

/// A tensor operation of the op table with an operand batched at `tag`: its batching rule.
pub fn tensor_op<H: Host>(m: &mut H, tag: u32, op: TOp, args: Vec<Value>) -> FResult<Value> {
    check_live(m, tag)?;
    let mut args: Vec<At> = args.into_iter().map(|a| at(a, tag)).collect();
    let no_rule = |op: &TOp| Err(Fault::unbatched(&op.name()));
    // The single operand, batch-first: (stack, batch size, one example's shape, kind).
    let first = |m: &mut H, args: &mut Vec<At>| -> FResult<(Value, usize, Vec<usize>, Example)> {
        let a = args.remove(0);
        let shape = example_shape(&a);
        match a {
            At::Batch(v, axis, kind) => {
                let v = front(m, v, axis)?;
                let b = shape_of(&v)[0];
                Ok((v, b, shape, kind))
            }
            At::Plain(_) => Err(Fault::internal("a batching rule's batched operand is plain")),
        }
    };
    let with_batch = |b: usize, s: &[usize]| -> Vec<usize> {
        let mut out = vec![b];
        out.extend_from_slice(s);
        out
    };
    Ok(match op {
        TOp::MatMul => {
            let b = args.pop().unwrap_or(At::Plain(Value::Unit));
            let a = args.pop().unwrap_or(At::Plain(Value::Unit));
            matmul(m, tag, a, b)?
        }
        TOp::Sum | TOp::Mean | TOp::Max | TOp::Logsumexp | TOp::Item if args.len() == 1 => {
            let (v, b, shape, kind) = first(m, &mut args)?;
            if kind != Example::Tensor {
                return no_rule(&op);
            }
            let d = float_origin(dtype_under(&v));
            let n = shape.iter().product::<usize>();
            let flat = call(m, TOp::Reshape(vec![b, n]), vec![v])?;
            let reduced = match op {
                TOp::Sum => call(m, TOp::SumAxis(1), vec![flat])?,
                TOp::Mean => call(m, TOp::MeanAxis(1), vec![flat])?,
                TOp::Max => call(m, TOp::MaxAxis(1), vec![flat])?,
                TOp::Item if n == 1 => call(m, TOp::Reshape(vec![b]), vec![flat])?,
                TOp::Item => {
                    return Err(Fault::new(format!(
                        "item: expected a tensor with one element, got shape {}",
                        crate::tensor::fmt_shape(&shape)
                    )))
                }
                _ => {
                    // log Σ exp x = c + log Σ exp (x - c), c each example's maximum (held
                    // constant: the identity holds for any c, so derivatives are unchanged).
                    let c = strip(&call(m, TOp::MaxAxis(1), vec![strip(&flat)])?);
                    let c2 = call(m, TOp::Reshape(vec![b, 1]), vec![c.clone()])?;
                    let shifted = m.prim2(Prim::Sub, flat, c2)?;
                    let e = super::apply_un(m, Un::Exp, shifted)?;
                    let s = call(m, TOp::SumAxis(1), vec![e])?;
                    let l = super::apply_un(m, Un::Log, s)?;
                    m.prim2(Prim::Add, l, c)?
                }
            };
            // One example's reduction is a Float: computed on as float64.
            let reduced = floats(m, reduced)?;
            batched(tag, reduced, 0, Example::Float(d))
        }
        TOp::SumAxis(ax) | TOp::MeanAxis(ax) | TOp::MaxAxis(ax) | TOp::ArgmaxAxis(ax) | TOp::Cumsum(ax)
            if args.len() == 1 =>
        {
            let At::Batch(v, axis, Example::Tensor) = args.remove(0) else { return no_rule(&op) };
            let here = if ax >= axis { ax + 1 } else { ax };
            let moved = match op {
                TOp::SumAxis(_) => TOp::SumAxis(here),
                TOp::MeanAxis(_) => TOp::MeanAxis(here),
                TOp::MaxAxis(_) => TOp::MaxAxis(here),
                TOp::ArgmaxAxis(_) => TOp::ArgmaxAxis(here),
                _ => TOp::Cumsum(here),
            };
            let removes = !matches!(op, TOp::Cumsum(_));
            let axis_after = if removes && here < axis { axis - 1 } else { axis };
            // An out-of-range axis is reported as one example's shape would report it.
            check_axis(&op, ax, &example_shape(&At::Batch(v.clone(), axis, Example::Tensor)))?;
            batched(tag, call(m, moved, vec![v])?, axis_after, Example::Tensor)
        }
        TOp::Softmax
        | TOp::LogSoftmax
        | TOp::Normalize(_)
        | TOp::Step
        | TOp::Sign
        | TOp::Not
        | TOp::ToDevice(_)
        | TOp::AsType(_)
            if args.len() == 1 =>
        {
            let At::Batch(v, axis, kind) = args.remove(0) else { return no_rule(&op) };
            if let (TOp::AsType(d), Example::Float(_) | Example::Int | Example::Bool) = (&op, kind) {
                return as_scalar_type(m, tag, *d, v, axis);
            }
            // Elementwise on a batch of Floats (relu's and abs's derivatives) or of Bools too;
            // a Float or Int stays on the CPU's float64 or int64 stack.
            let elementwise = match kind {
                Example::Tensor => true,
                Example::Float(_) => matches!(op, TOp::Step | TOp::Sign | TOp::ToDevice(_)),
                Example::Bool => matches!(op, TOp::Not | TOp::ToDevice(_)),
                Example::Int => matches!(op, TOp::ToDevice(_)),
            };
            if matches!(op, TOp::ToDevice(_)) && kind != Example::Tensor {
                // A Float moved to a device is still a Float (as `to_device` of one is).
                return Ok(batched(tag, v, axis, kind));
            }
            if !elementwise {
                return no_rule(&op);
            }
            if kind != Example::Tensor {
                return Ok(batched(tag, call(m, op, vec![v])?, axis, kind));
            }
            if matches!(op, TOp::Softmax | TOp::LogSoftmax | TOp::Normalize(_)) {
                // Checked as one example is: a batch of 0-d examples has no axis of its own
                // (the stack's one axis is the batch's, not to be normalised across).
                op.check(&[&example_shape(&At::Batch(v.clone(), axis, kind))[..]])?;
            }
            let last = shape_of(&v).len().saturating_sub(1);
            // The softmaxes work on the last axis: it must be an example's.
            let (v, axis) =
                if matches!(op, TOp::Softmax | TOp::LogSoftmax | TOp::Normalize(_)) && axis == last && last > 0 {
                    (front(m, v, axis)?, 0)
                } else {
                    (v, axis)
                };
            batched(tag, call(m, op, vec![v])?, axis, Example::Tensor)
        }
        TOp::Reshape(s) => {
            let (v, b, _, kind) = first(m, &mut args)?;
            if kind != Example::Tensor {
                return no_rule(&TOp::Reshape(s));
            }
            batched(tag, call(m, TOp::Reshape(with_batch(b, &s)), vec![v])?, 0, Example::Tensor)
        }
        TOp::Transpose | TOp::Permute(_) => {
            let (v, _, shape, kind) = first(m, &mut args)?;
            if kind != Example::Tensor {
                return no_rule(&op);
            }
            let r = shape.len();
            let perm: Vec<usize> = match &op {
                TOp::Transpose => (0..r).rev().collect(),
                TOp::Permute(p) => p.clone(),
                _ => unreachable!("matched above"),
            };
            if perm.len() != r {
                // One example's operation would refuse it: let it say why.
                return call(m, op, vec![v]).and(Err(Fault::internal("a permutation of another rank")));
            }
            let mut full = vec![0];
            full.extend(perm.iter().map(|p| p + 1));
            batched(tag, call(m, TOp::Permute(full), vec![v])?, 0, Example::Tensor)
        }
        TOp::Row(i) => {
            let At::Batch(v, axis, Example::Tensor) = args.remove(0) else { return no_rule(&TOp::Row(i)) };
            if axis > 0 {
                // The row axis is before the batch axis: take the row of the stack.
                batched(tag, call(m, TOp::Row(i), vec![v])?, axis - 1, Example::Tensor)
            } else {
                let shape = shape_of(&v);
                if shape.len() < 2 || i >= shape[1] {
                    return Err(Fault::new(format!(
                        "row {i} is out of range for a tensor of shape {}",
                        crate::tensor::fmt_shape(&shape[1..])
                    )));
                }
                let sliced = call(m, TOp::Slice(1, i, i + 1), vec![v])?;
                let mut rest = shape.clone();
                rest.remove(1);
                batched(tag, call(m, TOp::Reshape(rest), vec![sliced])?, 0, Example::Tensor)
            }
        }
        TOp::ScatterRow(i, s) => {
            let (v, b, shape, _) = first(m, &mut args)?;
            let mut one = vec![b, 1];
            one.extend_from_slice(&shape);
            let v = call(m, TOp::Reshape(one), vec![v])?;
            batched(tag, call(m, TOp::Unslice(1, i, with_batch(b, &s)), vec![v])?, 0, Example::Tensor)
        }
        TOp::Slice(ax, lo, hi) => {
            let At::Batch(v, axis, Example::Tensor) = args.remove(0) else { return no_rule(&op) };
            let here = if ax >= axis { ax + 1 } else { ax };
            check_axis(&op, ax, &example_shape(&At::Batch(v.clone(), axis, Example::Tensor)))?;
            batched(tag, call(m, TOp::Slice(here, lo, hi), vec![v])?, axis, Example::Tensor)
        }
        TOp::Unslice(ax, lo, s) => {
            let (v, b, _, _) = first(m, &mut args)?;
            batched(tag, call(m, TOp::Unslice(ax + 1, lo, with_batch(b, &s)), vec![v])?, 0, Example::Tensor)
        }
        TOp::BroadcastTo(ref s) | TOp::SumTo(ref s) => {
            let is_sum = matches!(op, TOp::SumTo(_));
            let s = s.clone();
            let (mut v, b, shape, kind) = first(m, &mut args)?;
            if let Example::Float(_) = kind {
                // A Float spread over a shape is a float32 tensor, as `full` makes it.
                v = call(m, TOp::AsType(DType::F32), vec![v])?;
            } else if kind == Example::Bool && is_sum {
                return no_rule(&op);
            }
            if is_sum {
                // Axes an example has beyond the target's rank are summed first: `SumTo` of
                // the stack aligns shapes from the right, where the batch axis would meet them.
                for _ in s.len()..shape.len() {
                    v = call(m, TOp::SumAxis(1), vec![v])?;
                }
                let kept = shape.len().min(s.len());
                let rest = &shape[shape.len() - kept..];
                v = lift(m, v, rest, s.len())?;
                batched(tag, call(m, TOp::SumTo(with_batch(b, &s)), vec![v])?, 0, Example::Tensor)
            } else {
                if shape.len() > s.len() {
                    return Err(Fault::new(format!(
                        "cannot broadcast shape {} to {}",
                        crate::tensor::fmt_shape(&shape),
                        crate::tensor::fmt_shape(&s)
                    )));
                }
                let v = lift(m, v, &shape, s.len())?;
                batched(tag, call(m, TOp::BroadcastTo(with_batch(b, &s)), vec![v])?, 0, Example::Tensor)
            }
        }
        TOp::Concat(ax) => {
            let (parts, _) = align_parts(m, args)?;
            batched(tag, call(m, TOp::Concat(ax + 1), parts)?, 0, Example::Tensor)
        }
        // Elementwise, broadcasting: the operands lined up as one example's would be.
        TOp::Cmp(_) | TOp::Where => {
            let (parts, _) = align(m, args, false)?;
            batched(tag, call(m, op, parts)?, 0, Example::Tensor)
        }
        // Elementwise on operands of one shape.
        TOp::Mask => {
            let (parts, kind) = align(m, args, true)?;
            batched(tag, call(m, op, parts)?, 0, kind)
        }
        // On image stacks: one call on all the examples' images.
        TOp::MaxPool2d(_) | TOp::MaxPool2dGrad(_) | TOp::MaxPool2dPick(_) => {
            let (parts, _) = align(m, args, true)?;
            per_image(m, tag, &op, parts)?
        }
        TOp::Conv2d(cv) if matches!(args.get(1), Some(At::Plain(_))) => {
            // A misfit is reported with one example's shapes, not the flattened stack's.
            conv_check(&op, cv, &args)?;
            let w = args.remove(1);
            let (mut parts, _) = align(m, args, true)?;
            if let At::Plain(w) = w {
                parts.insert(1, w);
            }
            per_image(m, tag, &op, parts)?
        }
        // Batched weights (per-example weights, or per-example weight gradients), and the
        // weight adjoint of batched images.
        TOp::Conv2d(cv) => conv_weights(m, tag, cv, args)?,
        TOp::Conv2dInputGrad(cv) => conv_input_grad(m, tag, cv, args)?,
        TOp::Conv2dWeightGrad(cv) => conv_weight_grad(m, tag, cv, args)?,
        TOp::Gather(ax) if matches!(args[1], At::Plain(_)) => {
            let idx = args.remove(1);
            let At::Batch(v, axis, Example::Tensor) = args.remove(0) else { return no_rule(&op) };
            let At::Plain(idx) = idx else { return no_rule(&op) };
            let v = front(m, v, axis)?;
            batched(tag, call(m, TOp::Gather(ax + 1), vec![v, idx])?, 0, Example::Tensor)
        }
        TOp::ScatterAdd(ax, s) if matches!(args[1], At::Plain(_)) => {
            let idx = args.remove(1);
            let (v, b, _, _) = first(m, &mut args)?;
            let At::Plain(idx) = idx else { return no_rule(&TOp::ScatterAdd(ax, s)) };
            batched(tag, call(m, TOp::ScatterAdd(ax + 1, with_batch(b, &s)), vec![v, idx])?, 0, Example::Tensor)
        }
        // Per-example indices (`gather` with batched indices, and its adjoint).
        TOp::Gather(ax) => gather_indices(m, tag, ax, args)?,
        TOp::ScatterAdd(ax, s) => scatter_indices(m, tag, ax, s, args)?,
        TOp::ArgmaxMask => {
            // 1 at each example's first maximum: its position along the flattened example,
            // compared with every position.
            let (v, b, shape, kind) = first(m, &mut args)?;
            if kind != Example::Tensor {
                return no_rule(&TOp::ArgmaxMask);
            }
            let d = dtype_under(&v);
            let n = shape.iter().product::<usize>();
            let flat = call(m, TOp::Reshape(vec![b, n]), vec![strip(&v)])?;
            let at = call(m, TOp::ArgmaxAxis(1), vec![flat])?;
            let at = call(m, TOp::Reshape(vec![b, 1]), vec![at])?;
            let at = call(m, TOp::AsType(DType::I64), vec![at])?;
            let positions =
                crate::runtime::tensor::wrap(crate::tensor::Tensor::from_i64s(&[n], (0..n as i64).collect())?);
            let device = super::underlying(&v).map_or(crate::tensor::Device::Cpu, |t| t.device());
            let positions = call(m, TOp::ToDevice(device), vec![positions])?;
            let hot = call(m, TOp::Cmp(Cmp::Equal), vec![at, positions])?;
            let hot = call(m, TOp::AsType(d), vec![hot])?;
            batched(tag, call(m, TOp::Reshape(with_batch(b, &shape)), vec![hot])?, 0, Example::Tensor)
        }
        other => return no_rule(&other),
    })
}

/// An axis argument beyond one example's rank: the error one example's operation gives.
fn check_axis(op: &TOp, ax: usize, example: &[usize]) -> FResult<()> {
    if ax < example.len() {
        return Ok(());
    }
    Err(Fault::new(format!(
        "{}: axis {ax} is out of range for a tensor of shape {}",
        op.name(),
        crate::tensor::fmt_shape(example)
    )))
}

/// `concat`'s parts, batch-first, the plain ones broadcast over the batch (a concatenation
/// has no broadcasting of its own).
fn align_parts<H: Host>(m: &mut H, args: Vec<At>) -> FResult<(Vec<Value>, Example)> {
    if args.iter().any(|a| !is_tensor_example(a)) {
        return Err(Fault::unbatched("concat"));
    }
    // Parts keep their own shapes: each is lined up on its own, not to a common rank.
    let b = args
        .iter()
        .find_map(|a| match a {
            At::Batch(v, axis, _) => Some(shape_of(v)[*axis]),
            At::Plain(_) => None,
        })
        .unwrap_or(0);
    let mut out = Vec::new();
    for a in args {
        out.push(match a {
            At::Batch(v, axis, _) => front(m, v, axis)?,
            At::Plain(v) => tile(m, v, b)?,
        });
    }
    Ok((out, Example::Tensor))
}

/// The image operations (convolution, pooling and their adjoints) on a batch of image stacks
/// [B, N, C, H, W]: one call on the B·N images, shaped back. `parts` are batch-first, the
/// weights (never batched here) plain.
fn per_image<H: Host>(m: &mut H, tag: u32, op: &TOp, parts: Vec<Value>) -> FResult<Value> {
    let mut flat = Vec::with_capacity(parts.len());
    let mut b = 0;
    for (i, p) in parts.into_iter().enumerate() {
        let is_weights = i == 1 && matches!(op, TOp::Conv2d(_) | TOp::Conv2dInputGrad(_));
        if is_weights {
            flat.push(p);
            continue;
        }
        let s = shape_of(&p);
        if s.len() != 5 {
            // One example's operation would refuse a non-NCHW operand: let it say why.
            let mut one = s.clone();
            one.remove(0);
            return Err(Fault::new(format!(
                "{}: expected an image stack of rank 4 (N, C, H, W), got shape {}",
                op.name(),
                crate::tensor::fmt_shape(&one)
            )));
        }
        b = s[0];
        flat.push(call(m, TOp::Reshape(vec![s[0] * s[1], s[2], s[3], s[4]]), vec![p])?);
    }
    let out = call(m, op.clone(), flat)?;
    let s = shape_of(&out);
    let n = s[0] / b.max(1);
    let shaped = call(m, TOp::Reshape(vec![b, n, s[1], s[2], s[3]]), vec![out])?;
    Ok(batched(tag, shaped, 0, Example::Tensor))
}

/// `astype` of a batch of scalars: per example what a 0-d tensor's conversion keeps — a
/// floating dtype keeps the value (a Float of that dtype's origin: `vmap` stacks it in it), an
/// int64 one truncates to an Int (refusing what no int64 holds), bool is `x != 0`.
fn as_scalar_type<H: Host>(m: &mut H, tag: u32, d: DType, v: Value, axis: usize) -> FResult<Value> {
    let v = front(m, v, axis)?;
    Ok(match d {
        DType::Bool => batched(tag, call(m, TOp::AsType(DType::Bool), vec![v])?, 0, Example::Bool),
        DType::I64 => {
            let v = call(m, TOp::ToDevice(crate::tensor::Device::Cpu), vec![v])?;
            batched(tag, call(m, TOp::AsType(DType::I64), vec![v])?, 0, Example::Int)
        }
        d => batched(tag, floats(m, v)?, 0, Example::Float(d)),
    })
}

/// A convolution's three operands (input, weights, output adjoint — the ones it has), checked
/// as one example's would be, with its sizes.
fn conv_check(op: &TOp, cv: crate::tensor::op::Conv, args: &[At]) -> FResult<crate::tensor::op::ConvDims> {
    if args.len() < 2 || args.iter().any(|a| !is_tensor_example(a)) {
        return Err(Fault::unbatched(&op.name()));
    }
    Ok(crate::tensor::op::conv_dims(&example_shape(&args[0]), &example_shape(&args[1]), cv)?)
}

/// A stack with its batch axis in front, or None for an operand the same for every example.
fn stack_of<H: Host>(m: &mut H, a: At) -> FResult<(Option<Value>, Value)> {
    Ok(match a {
        At::Batch(v, axis, _) => {
            let v = front(m, v, axis)?;
            (Some(v.clone()), v)
        }
        At::Plain(v) => (None, v),
    })
}

/// A zero tensor of `shape` in `like`'s dtype and device: an operand the convolution adjoints
/// read only for its shape.
fn shape_only<H: Host>(m: &mut H, like: &Value, shape: Vec<usize>) -> FResult<Value> {
    let z = zero_scalar(m, like, dtype_under(like))?;
    call(m, TOp::BroadcastTo(shape), vec![z])
}

/// The patches of a stack of image stacks [B, N, C, H, W] as `[B, N, C·KH·KW, OH·OW]`, in the
/// order the weights [O, C, KH, KW] flatten to: one convolution of all B·N images with the
/// identity kernel (output channel (c, i, j) reads input channel c at offset (i, j)). A
/// convolution with per-example weights is then one batched matrix product with them.
fn patches<H: Host>(
    m: &mut H,
    x: Value,
    d: &crate::tensor::op::ConvDims,
    cv: crate::tensor::op::Conv,
) -> FResult<Value> {
    let b = shape_of(&x)[0];
    let q = d.c * d.kh * d.kw;
    let flat = call(m, TOp::Reshape(vec![b * d.n, d.c, d.h, d.w]), vec![x])?;
    let eye = identity_kernel(m, &flat, d)?;
    let p = call(m, TOp::Conv2d(cv), vec![flat, eye])?;
    call(m, TOp::Reshape(vec![b, d.n, q, d.oh * d.ow]), vec![p])
}

/// The kernel [C·KH·KW, C, KH, KW] whose convolution copies each patch into channels.
fn identity_kernel<H: Host>(m: &mut H, like: &Value, d: &crate::tensor::op::ConvDims) -> FResult<Value> {
    let q = d.c * d.kh * d.kw;
    let mut data = vec![0.0f64; q * q];
    for k in 0..q {
        // Row k of [Q, C·KH·KW] is 1 at column k: the flattening of (c, i, j) is row-major.
        data[k * q + k] = 1.0;
    }
    let eye = crate::runtime::tensor::wrap(crate::tensor::Tensor::from_f64s(&[q, d.c, d.kh, d.kw], data)?);
    let eye = call(m, TOp::AsType(dtype_under(like)), vec![eye])?;
    call(m, TOp::ToDevice(device_of(like)), vec![eye])
}

/// `conv2d x w` with the weights batched (the input may be too): with one input for all, one
/// convolution with the B weight stacks as B·O output channels; with batched inputs, their
/// patches times each example's weights, one batched product.
fn conv_weights<H: Host>(m: &mut H, tag: u32, cv: crate::tensor::op::Conv, mut args: Vec<At>) -> FResult<Value> {
    let d = conv_check(&TOp::Conv2d(cv), cv, &args)?;
    let w = args.remove(1);
    let x = args.remove(0);
    let (_, w) = stack_of(m, w)?;
    let b = shape_of(&w)[0];
    let q = d.c * d.kh * d.kw;
    match stack_of(m, x)? {
        (None, x) => {
            let w = call(m, TOp::Reshape(vec![b * d.o, d.c, d.kh, d.kw]), vec![w])?;
            let y = call(m, TOp::Conv2d(cv), vec![x, w])?;
            let y = call(m, TOp::Reshape(vec![d.n, b, d.o, d.oh, d.ow]), vec![y])?;
            Ok(batched(tag, y, 1, Example::Tensor))
        }
        (Some(x), _) => {
            let p = patches(m, x, &d, cv)?;
            let w = call(m, TOp::Reshape(vec![b, 1, d.o, q]), vec![w])?;
            let y = call(m, TOp::MatMul, vec![w, p])?;
            let y = call(m, TOp::Reshape(vec![b, d.n, d.o, d.oh, d.ow]), vec![y])?;
            Ok(batched(tag, y, 0, Example::Tensor))
        }
    }
}

/// The weights' adjoint of a convolution, (x, w, g) ↦ [O, C, KH, KW], with x or g batched (w
/// is read for its shape only). One of them batched folds the batch into channels of one
/// adjoint convolution; both batched is the batched product of g with x's patches — the
/// per-example weight gradients of a CNN (`vmap (grad loss)`), never a loop over examples.
fn conv_weight_grad<H: Host>(m: &mut H, tag: u32, cv: crate::tensor::op::Conv, mut args: Vec<At>) -> FResult<Value> {
    let op = TOp::Conv2dWeightGrad(cv);
    let d = conv_check(&op, cv, &args)?;
    if args.len() != 3 {
        return Err(Fault::unbatched(&op.name()));
    }
    let (g, _w, x) = (args.remove(2), args.remove(1), args.remove(0));
    let (xs, x) = stack_of(m, x)?;
    let (gs, g) = stack_of(m, g)?;
    let q = d.c * d.kh * d.kw;
    let l = d.oh * d.ow;
    Ok(match (xs, gs) {
        (Some(x), None) => {
            let b = shape_of(&x)[0];
            let x = call(m, TOp::Permute(vec![1, 0, 2, 3, 4]), vec![x])?;
            let x = call(m, TOp::Reshape(vec![d.n, b * d.c, d.h, d.w]), vec![x])?;
            let w = shape_only(m, &x, vec![d.o, b * d.c, d.kh, d.kw])?;
            let gw = call(m, op, vec![x, w, g])?;
            let gw = call(m, TOp::Reshape(vec![d.o, b, d.c, d.kh, d.kw]), vec![gw])?;
            batched(tag, gw, 1, Example::Tensor)
        }
        (None, Some(g)) => {
            let b = shape_of(&g)[0];
            let g = call(m, TOp::Permute(vec![1, 0, 2, 3, 4]), vec![g])?;
            let g = call(m, TOp::Reshape(vec![d.n, b * d.o, d.oh, d.ow]), vec![g])?;
            let w = shape_only(m, &g, vec![b * d.o, d.c, d.kh, d.kw])?;
            let gw = call(m, op, vec![x, w, g])?;
            let gw = call(m, TOp::Reshape(vec![b, d.o, d.c, d.kh, d.kw]), vec![gw])?;
            batched(tag, gw, 0, Example::Tensor)
        }
        (Some(x), Some(g)) => {
            let b = shape_of(&x)[0];
            let p = patches(m, x, &d, cv)?;
            let p = call(m, TOp::Permute(vec![0, 1, 3, 2]), vec![p])?;
            let p = call(m, TOp::Reshape(vec![b, d.n * l, q]), vec![p])?;
            let g = call(m, TOp::Reshape(vec![b, d.n, d.o, l]), vec![g])?;
            let g = call(m, TOp::Permute(vec![0, 2, 1, 3]), vec![g])?;
            let g = call(m, TOp::Reshape(vec![b, d.o, d.n * l]), vec![g])?;
            let gw = call(m, TOp::MatMul, vec![g, p])?;
            let gw = call(m, TOp::Reshape(vec![b, d.o, d.c, d.kh, d.kw]), vec![gw])?;
            batched(tag, gw, 0, Example::Tensor)
        }
        // Only the weights, read for their shape, are batched: the same for every example.
        (None, None) => {
            let w = shape_only(m, &x, vec![d.o, d.c, d.kh, d.kw])?;
            call(m, op, vec![x, w, g])?
        }
    })
}

/// The input's adjoint of a convolution, (x, w, g) ↦ [N, C, H, W] (x read for its shape
/// only), with the weights batched: g the same for all folds the batch into input channels of
/// one adjoint convolution; g batched too is the patches' adjoint of the batched product
/// wᵀ g. (Plain weights are `per_image`'s.)
fn conv_input_grad<H: Host>(m: &mut H, tag: u32, cv: crate::tensor::op::Conv, mut args: Vec<At>) -> FResult<Value> {
    let op = TOp::Conv2dInputGrad(cv);
    if matches!(args.get(1), Some(At::Plain(_))) {
        let w = args.remove(1);
        let (mut parts, _) = align(m, args, true)?;
        if let At::Plain(w) = w {
            parts.insert(1, w);
        }
        return per_image(m, tag, &op, parts);
    }
    let d = conv_check(&op, cv, &args)?;
    if args.len() != 3 {
        return Err(Fault::unbatched(&op.name()));
    }
    let (g, w, x) = (args.remove(2), args.remove(1), args.remove(0));
    let (_, w) = stack_of(m, w)?;
    let b = shape_of(&w)[0];
    let q = d.c * d.kh * d.kw;
    let l = d.oh * d.ow;
    let like = match &x {
        At::Batch(v, _, _) | At::Plain(v) => v.clone(),
    };
    Ok(match stack_of(m, g)? {
        (None, g) => {
            let w = call(m, TOp::Permute(vec![1, 0, 2, 3, 4]), vec![w])?;
            let w = call(m, TOp::Reshape(vec![d.o, b * d.c, d.kh, d.kw]), vec![w])?;
            let x = shape_only(m, &like, vec![d.n, b * d.c, d.h, d.w])?;
            let dx = call(m, op, vec![x, w, g])?;
            let dx = call(m, TOp::Reshape(vec![d.n, b, d.c, d.h, d.w]), vec![dx])?;
            batched(tag, dx, 1, Example::Tensor)
        }
        (Some(g), _) => {
            let w = call(m, TOp::Reshape(vec![b, d.o, q]), vec![w])?;
            let wt = call(m, TOp::Permute(vec![0, 2, 1]), vec![w])?;
            let wt = call(m, TOp::Reshape(vec![b, 1, q, d.o]), vec![wt])?;
            let g = call(m, TOp::Reshape(vec![b, d.n, d.o, l]), vec![g])?;
            let dp = call(m, TOp::MatMul, vec![wt, g])?;
            let dp = call(m, TOp::Reshape(vec![b * d.n, q, d.oh, d.ow]), vec![dp])?;
            let x = shape_only(m, &like, vec![b * d.n, d.c, d.h, d.w])?;
            let eye = identity_kernel(m, &x, &d)?;
            let dx = call(m, op, vec![x, eye, dp])?;
            let dx = call(m, TOp::Reshape(vec![b, d.n, d.c, d.h, d.w]), vec![dx])?;
            batched(tag, dx, 0, Example::Tensor)
        }
    })
}

/// Per-example indices into per-example tensors, as positions in the stack of all examples
/// flattened along the indexed axis: example b's index i (negative ones counting from the
/// end, as `gather`'s) becomes b·len + i. An index out of range is the error `gather` gives
/// for it — checked here, on the indices' values, since an offset index out of its example's
/// range could land in another example's.
fn offset_indices<H: Host>(m: &mut H, idx: Value, len: usize, ax: usize, example: &[usize]) -> FResult<Value> {
    let Some(t) = super::underlying(&idx) else { return Err(Fault::unbatched("gather")) };
    let Some(ix) = t.i64s() else {
        return Err(Fault::new(format!("gather: the indices must be an int64 tensor, got {}", t.dtype().name()))
            .help("make them with `tensor [0, 2]`, or convert with `astype \"int64\" i`"));
    };
    let n = len as i64;
    if let Some(&i) = ix.iter().find(|&&i| !(-n..n).contains(&i)) {
        return Err(Fault::new(format!(
            "gather: index {i} is out of range for axis {ax} of a tensor of shape {}",
            crate::tensor::fmt_shape(example)
        )));
    }
    let b = shape_of(&idx)[0];
    let rank = shape_of(&idx).len();
    let zero = int_scalar(0)?;
    let negative = call(m, TOp::Cmp(Cmp::Less), vec![idx.clone(), zero])?;
    let negative = call(m, TOp::AsType(DType::I64), vec![negative])?;
    let wrap = m.prim2(Prim::Mul, negative, int_scalar(n)?)?;
    let idx = m.prim2(Prim::Add, idx, wrap)?;
    let mut shape = vec![b];
    shape.extend(std::iter::repeat_n(1, rank - 1));
    let offsets = crate::tensor::Tensor::from_i64s(&shape, (0..b as i64).map(|k| k * n).collect())?;
    m.prim2(Prim::Add, idx, crate::runtime::tensor::wrap(offsets))
}

/// `gather t idx ax` with the indices batched: with one tensor for all, one `gather` with all
/// the examples' indices (the batch lands where the indexed axis was); with per-example
/// tensors, one `gather` from the stack flattened along the indexed axis at offset indices.
fn gather_indices<H: Host>(m: &mut H, tag: u32, ax: usize, mut args: Vec<At>) -> FResult<Value> {
    let op = TOp::Gather(ax);
    if args.len() != 2 || !is_tensor_example(&args[0]) || !is_tensor_example(&args[1]) {
        return Err(Fault::unbatched(&op.name()));
    }
    let te = example_shape(&args[0]);
    check_axis(&op, ax, &te)?;
    let ie = example_shape(&args[1]);
    let (idx, t) = (args.remove(1), args.remove(0));
    let (_, idx) = stack_of(m, idx)?;
    match stack_of(m, t)? {
        (None, t) => Ok(batched(tag, call(m, op, vec![t, idx])?, ax, Example::Tensor)),
        (Some(t), _) => {
            let b = shape_of(&t)[0];
            let len = te[ax];
            let idx = offset_indices(m, idx, len, ax, &te)?;
            // The indexed axis first after the batch, then folded into it.
            let mut perm = vec![0, ax + 1];
            perm.extend((1..=te.len()).filter(|&i| i != ax + 1));
            let t = call(m, TOp::Permute(perm), vec![t])?;
            let mut flat = vec![b * len];
            flat.extend(te.iter().enumerate().filter(|&(i, _)| i != ax).map(|(_, &n)| n));
            let t = call(m, TOp::Reshape(flat), vec![t])?;
            // [B, I…, pre…, post…] back to one example's order [B, pre…, I…, post…].
            let y = call(m, TOp::Gather(0), vec![t, idx])?;
            let (ni, rest) = (ie.len(), te.len() - 1);
            let mut perm = vec![0];
            perm.extend(1 + ni..1 + ni + ax);
            perm.extend(1..1 + ni);
            perm.extend(1 + ni + ax..1 + ni + rest);
            Ok(batched(tag, call(m, TOp::Permute(perm), vec![y])?, 0, Example::Tensor))
        }
    }
}

/// The adjoint of `gather` with batched indices: the slices of g (per example, or the same
/// for all) added at each example's indices — one scatter-add into the stack flattened along
/// the indexed axis, at the offset indices `gather` used.
fn scatter_indices<H: Host>(m: &mut H, tag: u32, ax: usize, s: Vec<usize>, mut args: Vec<At>) -> FResult<Value> {
    let op = TOp::ScatterAdd(ax, s.clone());
    if args.len() != 2 || ax >= s.len() || !is_tensor_example(&args[0]) {
        return Err(Fault::unbatched(&op.name()));
    }
    let ie = example_shape(&args[1]);
    let (idx, g) = (args.remove(1), args.remove(0));
    let (_, idx) = stack_of(m, idx)?;
    let b = shape_of(&idx)[0];
    let g = match g {
        At::Batch(v, axis, _) => front(m, v, axis)?,
        At::Plain(v) => tile(m, v, b)?,
    };
    let len = s[ax];
    let idx = offset_indices(m, idx, len, ax, &s)?;
    // g as [B, pre…, I…, post…] to `gather`'s layout of the flattened stack, [B, I…, pre…, post…].
    let (ni, rest) = (ie.len(), s.len() - 1);
    let mut perm = vec![0];
    perm.extend(1 + ax..1 + ax + ni);
    perm.extend(1..1 + ax);
    perm.extend(1 + ax + ni..1 + ni + rest);
    let g = call(m, TOp::Permute(perm), vec![g])?;
    let mut flat = vec![b * len];
    flat.extend(s.iter().enumerate().filter(|&(i, _)| i != ax).map(|(_, &n)| n));
    let y = call(m, TOp::ScatterAdd(0, flat), vec![g, idx])?;
    // [B·len, pre…, post…] to [B, pre…, len, post…].
    let mut unfolded = vec![b, len];
    unfolded.extend(s.iter().enumerate().filter(|&(i, _)| i != ax).map(|(_, &n)| n));
    let y = call(m, TOp::Reshape(unfolded), vec![y])?;
    let mut perm = vec![0];
    perm.extend(2..2 + ax);
    perm.push(1);
    perm.extend(2 + ax..1 + s.len());
    Ok(batched(tag, call(m, TOp::Permute(perm), vec![y])?, 0, Example::Tensor))
}

/// `a @ b` with an operand batched at `tag`: one product on the stacks (a batch of vectors
/// against a plain matrix is one matrix product).
fn matmul<H: Host>(m: &mut H, tag: u32, a: At, b: At) -> FResult<Value> {
    let (sa, sb) = (example_shape(&a), example_shape(&b));
    if sa.is_empty() || sb.is_empty() || !is_tensor_example(&a) || !is_tensor_example(&b) {
        return Err(Fault::new(format!(
            "`@` multiplies matrices and vectors (rank 1 or more); got shapes {} and {}",
            crate::tensor::fmt_shape(&sa),
            crate::tensor::fmt_shape(&sb)
        )));
    }
    // One example's product decides the shape (and reports a mismatch as it would).
    let out = crate::tensor::op::matmul_shape(&sa, &sb)?;
    let dtype = match (&a, &b) {
        (At::Batch(v, _, _), _) | (_, At::Batch(v, _, _)) => dtype_under(v),
        _ => DType::F32,
    };
    // A product of two vectors is a Float per example.
    let result = |m: &mut H, v: Value, axis: usize| -> FResult<Value> {
        if out.is_empty() {
            let v = floats(m, v)?;
            Ok(batched(tag, v, 0, Example::Float(float_origin(dtype))))
        } else {
            Ok(batched(tag, v, axis, Example::Tensor))
        }
    };
    match (a, b) {
        (At::Batch(va, xa, _), At::Plain(w)) => {
            let va = front(m, va, xa)?;
            if sa.len() == 1 {
                // A batch of row vectors is a matrix [B, n]: x @ w for each row at once. Against
                // a stack of matrices the batch lands on the second-to-last axis.
                let y = call(m, TOp::MatMul, vec![va, w])?;
                let axis = if sb.len() >= 3 { sb.len() - 2 } else { 0 };
                return result(m, y, axis);
            }
            // Stacks of matrices: the batch is one more stack axis, in front of w's.
            let va = lift(m, va, &sa, sb.len().max(sa.len()))?;
            let y = call(m, TOp::MatMul, vec![va, w])?;
            result(m, y, 0)
        }
        (At::Plain(w), At::Batch(vb, xb, _)) => {
            let vb = front(m, vb, xb)?;
            if sb.len() == 1 {
                if sa.len() == 2 {
                    // W x for every x: X Wᵀ, [B, n] by [n, m], one matrix product.
                    let wt = call(m, TOp::Transpose, vec![w])?;
                    let y = call(m, TOp::MatMul, vec![vb, wt])?;
                    return result(m, y, 0);
                }
                if sa.len() == 1 {
                    // w · x for every x: X w.
                    let y = call(m, TOp::MatMul, vec![vb, w])?;
                    return result(m, y, 0);
                }
                // A stack of matrices times each x: W Xᵀ, the batch on the last axis.
                let xt = call(m, TOp::Transpose, vec![vb])?;
                let y = call(m, TOp::MatMul, vec![w, xt])?;
                let axis = shape_of(&y).len() - 1;
                return result(m, y, axis);
            }
            let vb = lift(m, vb, &sb, sa.len().max(sb.len()))?;
            let y = call(m, TOp::MatMul, vec![w, vb])?;
            result(m, y, 0)
        }
        (At::Batch(va, xa, _), At::Batch(vb, xb, _)) => {
            // Both batched: a product of stacks, vectors made single rows and columns.
            let (va, vb) = (front(m, va, xa)?, front(m, vb, xb)?);
            let bsz = shape_of(&va)[0];
            let as_matrix = |m: &mut H, v: Value, s: &[usize], row: bool| -> FResult<(Value, Vec<usize>)> {
                if s.len() != 1 {
                    return Ok((v, s.to_vec()));
                }
                let s2 = if row { vec![1, s[0]] } else { vec![s[0], 1] };
                let v = call(m, TOp::Reshape(vec![bsz, s2[0], s2[1]]), vec![v])?;
                Ok((v, s2))
            };
            let (va, sa2) = as_matrix(m, va, &sa, true)?;
            let (vb, sb2) = as_matrix(m, vb, &sb, false)?;
            let rank = sa2.len().max(sb2.len());
            let va = lift(m, va, &sa2, rank)?;
            let vb = lift(m, vb, &sb2, rank)?;
            let y = call(m, TOp::MatMul, vec![va, vb])?;
            // Back to one example's result shape per example: only where a vector operand
            // made it differ (a reshape to the same shape would copy the stack — for the
            // per-example outer products of `vmap (grad …)`, the whole gradient).
            let shape: Vec<usize> = std::iter::once(bsz).chain(out.iter().copied()).collect();
            let y = if shape_of(&y) == shape { y } else { call(m, TOp::Reshape(shape), vec![y])? };
            result(m, y, 0)
        }
        (At::Plain(_), At::Plain(_)) => Err(Fault::internal("a batching rule with no batched operand")),
    }
}

/// `vmap`'s argument: every Tensor leaf of `x` batched at `tag` along its axis 0 (its length,
/// the batch size, the same for all); other leaves are the same for every example.
pub fn start<H: Host>(m: &mut H, x: &Value, tag: u32) -> FResult<(Value, usize)> {
    let mut size: Option<(usize, Vec<usize>)> = None;
    let v = super::map_leaves(x.clone(), &mut |leaf| {
        let leaf = super::live(m, leaf);
        // A Tensor leaf: plain, batched by an outer `vmap`, or traced by `jit`.
        if !super::is_tensor(&leaf) {
            return Ok(leaf);
        }
        let s = shape_of(&leaf);
        let Some(&n) = s.first() else {
            return Err(Fault::new("vmap maps over axis 0 of every Tensor of its argument, but one has shape []")
                .help("a 0-d tensor has no axis to map over: pass it inside a Float, or give it an axis"));
        };
        match &size {
            Some((b, other)) if *b != n => {
                return Err(Fault::new(format!(
                    "vmap: the argument's tensors disagree on the batch size: axis 0 of shape {} is {b}, of shape {} is {n}",
                    crate::tensor::fmt_shape(other),
                    crate::tensor::fmt_shape(&s)
                )))
            }
            Some(_) => {}
            None => size = Some((n, s)),
        }
        Ok(batched(tag, leaf, 0, Example::Tensor))
    })?;
    let Some((b, _)) = size else {
        return Err(Fault::new("vmap: the argument holds no Tensor to map over")
            .help("vmap maps over axis 0 of the argument's tensors; Floats and other values are passed to every example as they are"));
    };
    Ok((v, b))
}

/// `vmap`'s result: each leaf of `f`'s result stacked along a new axis 0 — a batched one its
/// stack batch-first (a batch of Floats in the dtype of the data it came from), one that is
/// the same for every example broadcast over the `size` examples.
pub fn finish<H: Host>(m: &mut H, tag: u32, size: usize, y: Value) -> FResult<Value> {
    super::map_leaves(y, &mut |leaf| match leaf {
        Value::Batched(ref b) if b.tag == tag => match b.kind {
            Example::Float(d) => {
                let v = stack_leaf(m, tag, size, leaf)?;
                call(m, TOp::AsType(d), vec![v])
            }
            _ => stack_leaf(m, tag, size, leaf),
        },
        leaf => stack_leaf(m, tag, size, leaf),
    })
}

/// One leaf stacked along a new axis 0 over the `size` examples of level `tag` (a batch of
/// Floats stays in its float64 stack).
pub(super) fn stack_leaf<H: Host>(m: &mut H, tag: u32, size: usize, leaf: Value) -> FResult<Value> {
    match at(leaf, tag) {
        At::Batch(v, axis, _) => front(m, v, axis),
        At::Plain(v) => tile(m, v, size),
    }
}

/// `v` batched at every level of `levels` (innermost first, with their batch sizes), layered
/// in that order: a layer it lacks is added with `v` repeated along a new axis, as the same
/// value for every example of that level. (A custom call's result, so that its rule gets
/// each example's own output adjoint.)
pub(super) fn spread<H: Host>(m: &mut H, v: Value, levels: &[(u32, usize)]) -> FResult<Value> {
    let Some((&(tag, size), rest)) = levels.split_first() else { return Ok(v) };
    Ok(match v {
        Value::Batched(b) if b.tag == tag => {
            let inner = spread(m, b.value.clone(), rest)?;
            batched(tag, inner, b.axis, b.kind)
        }
        v if super::is_tensor(&v) => {
            let tiled = tile(m, v, size)?;
            batched(tag, spread(m, tiled, rest)?, 0, Example::Tensor)
        }
        v => {
            // A batch of Floats is a float64 stack: 1 · v as a float64 0-d tensor (exact, and
            // still perturbed if v is), spread over the batch.
            let one = crate::runtime::tensor::wrap(crate::tensor::Tensor::from_f64s(&[], vec![1.0])?);
            let v = m.prim2(Prim::Mul, one, v)?;
            let tiled = call(m, TOp::BroadcastTo(vec![size]), vec![v])?;
            batched(tag, spread(m, tiled, rest)?, 0, Example::Float(DType::F32))
        }
    })
}

/// `v` repeated `b` times along a new front axis: a plain value lined up with batch-first
/// stacks (a Float becomes a [b] tensor).
fn tile<H: Host>(m: &mut H, v: Value, b: usize) -> FResult<Value> {
    let s = shape_of(&v);
    let mut full = vec![b];
    full.extend_from_slice(&s);
    if !super::is_tensor(&strip(&v)) {
        return call(m, TOp::BroadcastTo(full), vec![v]);
    }
    let mut one = vec![1];
    one.extend_from_slice(&s);
    let v = call(m, TOp::Reshape(one), vec![v])?;
    call(m, TOp::BroadcastTo(full), vec![v])
}
