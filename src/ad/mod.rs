//! Differentiation as delimited-continuation handlers (DESIGN.md principle 3).
//!
//! `grad f x` (see `Machine::control`) makes a fresh tag, wraps `x` in values tracked by it,
//! and runs `f` in a `GradPrompt(tag)` segment sitting on a `GradHandler(tag)` segment. A
//! primitive meeting a tracked value shifts to that prompt: it computes the primal, pushes an
//! adjoint frame onto the handler segment (below every frame of `f`), and resumes the rest of
//! `f` with a new tracked result. Since the continuation it captured is put back exactly where
//! it was, capture-and-resume is fused into one O(1) push. When `f` returns, the prompt pops,
//! the output's adjoint is seeded with 1, and the machine returns through the adjoint frames
//! in reverse order: that return path *is* the backward pass. Nested `grad`s have larger
//! tags, so a value carries perturbations of each level separately (no confusion).

mod matmul;
pub mod rules;
pub mod tensor;

use crate::core::Prim;
use crate::eval::machine::{FResult, Fault, Machine};
use crate::eval::tensor::forward;
use crate::eval::value::{RecordVal, Value};
use crate::tensor::{cpu::elementwise, TOp, Tensor, Un};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::Ordering;

pub struct Tracked {
    pub tag: u32,
    pub primal: Value,
    /// None means zero (nothing has flowed back yet).
    pub adj: RefCell<Option<Value>>,
}

pub struct Dual {
    pub tag: u32,
    pub primal: Value,
    pub tangent: Value,
}

/// An adjoint frame, run on the way back.
#[derive(Clone)]
pub enum AdjFrame {
    /// Elementwise: `a.adj += out.adj * da` (and the same for `b`), unbroadcast to a's shape.
    Scale { out: Rc<Tracked>, a: Option<(Rc<Tracked>, Value)>, b: Option<(Rc<Tracked>, Value)> },
    /// A tensor operation: its reverse rule maps `out.adj` to each input's contribution.
    /// (Boxed: keeps the common scalar frame small.)
    Op(Box<OpFrame>),
}

#[derive(Clone)]
pub struct OpFrame {
    out: Rc<Tracked>,
    op: TOp,
    inputs: Vec<Option<Rc<Tracked>>>,
    primals: Vec<Value>,
}

#[derive(Clone)]
pub struct GradState {
    tag: u32,
    input: Value,
    with_value: bool,
    frames: Vec<AdjFrame>,
}

impl GradState {
    /// `frames` is an empty vector whose capacity a previous `grad` left behind (see
    /// `Machine::spare_adjoint_frames`): a loop of `grad` calls grows it only once.
    pub fn new(tag: u32, input: Value, with_value: bool, frames: Vec<AdjFrame>) -> GradState {
        GradState { tag, input, with_value, frames }
    }
}

pub fn tag_of(v: &Value) -> u32 {
    match v {
        Value::Tracked(t) => t.tag,
        Value::Dual(d) => d.tag,
        _ => 0,
    }
}

pub fn is_ad(v: &Value) -> bool {
    matches!(v, Value::Tracked(_) | Value::Dual(_))
}

/// The plain value under every perturbation (scalars only).
pub fn strip(v: &Value) -> Value {
    let mut v = v.clone();
    loop {
        v = match v {
            Value::Tracked(t) => t.primal.clone(),
            Value::Dual(d) => d.primal.clone(),
            other => return other,
        }
    }
}

/// `stop_gradient`: strips perturbations throughout a structure.
pub fn strip_deep(v: &Value) -> Value {
    map_leaves(v.clone(), &mut |x| Ok(strip(&x))).unwrap_or_else(|_| v.clone())
}

/// Maps the differentiable leaves (Floats and perturbed values) of a structure. The structure
/// comes by value: parts only this caller holds are taken apart rather than copied, so leaves
/// reach `f` uniquely owned when they can (the tree builtins then update tensors in place).
pub fn map_leaves(v: Value, f: &mut dyn FnMut(Value) -> FResult<Value>) -> FResult<Value> {
    Ok(match v {
        Value::Float(_) | Value::Tracked(_) | Value::Dual(_) | Value::Tensor(_) => f(v)?,
        Value::Tuple(vs) => {
            Value::Tuple(Rc::new(take(vs).into_iter().map(|x| map_leaves(x, f)).collect::<FResult<_>>()?))
        }
        Value::Record(r) => {
            let RecordVal { names, values } = take(r);
            Value::Record(Rc::new(RecordVal {
                names,
                values: values.into_iter().map(|x| map_leaves(x, f)).collect::<FResult<_>>()?,
            }))
        }
        Value::Nil | Value::Cons(_) => {
            let items = take_list(v).into_iter().map(|x| map_leaves(x, f)).collect::<FResult<Vec<_>>>()?;
            Value::list(items.into_iter())
        }
        other => other,
    })
}

/// Zips the leaves of two structures of the same shape (by value, as `map_leaves`).
pub fn zip_leaves(a: Value, b: Value, f: &mut dyn FnMut(Value, Value) -> FResult<Value>) -> FResult<Value> {
    Ok(match (a, b) {
        (Value::Tuple(x), Value::Tuple(y)) if x.len() == y.len() => Value::Tuple(Rc::new(
            take(x).into_iter().zip(take(y)).map(|(p, q)| zip_leaves(p, q, f)).collect::<FResult<_>>()?,
        )),
        (Value::Record(x), Value::Record(y)) if x.names == y.names => {
            let (RecordVal { names, values: xs }, ys) = (take(x), take(y).values);
            Value::Record(Rc::new(RecordVal {
                names,
                values: xs.into_iter().zip(ys).map(|(p, q)| zip_leaves(p, q, f)).collect::<FResult<_>>()?,
            }))
        }
        (a @ (Value::Nil | Value::Cons(_)), b @ (Value::Nil | Value::Cons(_))) => {
            let (xs, ys) = (take_list(a), take_list(b));
            if xs.len() != ys.len() {
                return Err(Fault::new(format!(
                    "jvp: the tangent list has {} elements, the point {}",
                    ys.len(),
                    xs.len()
                )));
            }
            let items = xs.into_iter().zip(ys).map(|(p, q)| zip_leaves(p, q, f)).collect::<FResult<Vec<_>>>()?;
            Value::list(items.into_iter())
        }
        (a, b) => f(a, b)?,
    })
}

/// The contents of a shared node: moved out when this is the only holder, copied otherwise.
fn take<T: Clone>(r: Rc<T>) -> T {
    Rc::try_unwrap(r).unwrap_or_else(|shared| (*shared).clone())
}

/// A list's elements, taking cells apart where this is their only holder.
fn take_list(mut l: Value) -> Vec<Value> {
    let mut out = Vec::new();
    while let Value::Cons(cell) = l {
        l = match Rc::try_unwrap(cell) {
            // ConsCell's Drop unlinks long tails iteratively, so the fields are swapped out.
            Ok(mut c) => {
                out.push(std::mem::take(&mut c.head));
                std::mem::take(&mut c.tail)
            }
            Err(shared) => {
                out.push(shared.head.clone());
                shared.tail.clone()
            }
        };
    }
    out
}

/// `grad`'s argument: every differentiable leaf tracked by `tag`.
pub fn wrap(_m: &mut Machine, x: &Value, tag: u32) -> FResult<Value> {
    map_leaves(x.clone(), &mut |leaf| {
        Ok(Value::Tracked(Rc::new(Tracked { tag, primal: leaf, adj: RefCell::new(None) })))
    })
}

/// `jvp`'s argument: dual numbers pairing each leaf of `x` with the leaf of `v`.
pub fn dual(_m: &mut Machine, x: &Value, v: &Value, tag: u32) -> FResult<Value> {
    zip_leaves(x.clone(), v.clone(), &mut |primal, tangent| Ok(Value::Dual(Rc::new(Dual { tag, primal, tangent }))))
}

/// The value at `tag`'s level: its primal if it is perturbed by `tag`, itself otherwise.
fn primal_at(v: &Value, tag: u32) -> Value {
    match v {
        Value::Tracked(t) if t.tag == tag => t.primal.clone(),
        Value::Dual(d) if d.tag == tag => d.primal.clone(),
        other => other.clone(),
    }
}

pub fn apply_un(m: &mut Machine, op: Un, x: Value) -> FResult<Value> {
    match x {
        Value::Float(f) => Ok(Value::Float(op.eval(f))),
        Value::Tensor(t) => Ok(Value::Tensor(Rc::new(elementwise::unary(op, t)?))),
        other => unary(m, op, other),
    }
}

/// The shape of a (possibly perturbed) value: [] for Floats.
pub fn shape_of(v: &Value) -> Vec<usize> {
    match strip(v) {
        Value::Tensor(t) => t.shape().to_vec(),
        _ => Vec::new(),
    }
}

/// A zero of the same shape as `v`.
pub fn zero_like(v: &Value) -> Value {
    match strip(v) {
        Value::Tensor(t) => Value::Tensor(Rc::new(t.zeros_like().unwrap_or_else(|_| Tensor::zeros(t.shape())))),
        _ => Value::Float(0.0),
    }
}

/// A tensor operation applied to perturbed arguments (see `tensor::call`).
pub fn tensor_op(m: &mut Machine, op: TOp, args: Vec<Value>) -> FResult<Value> {
    let args: Vec<Value> = args.into_iter().map(|a| live(m, a)).collect();
    if !args.iter().any(is_ad) {
        return forward(&op, &args);
    }
    let tag = args.iter().map(tag_of).fold(0, |t, u| innermost(m, t, u));
    let primals: Vec<Value> = args.iter().map(|a| primal_at(a, tag)).collect();
    let y = tensor::call(m, op.clone(), primals.clone())?;
    if args.iter().any(|a| matches!(a, Value::Dual(d) if d.tag == tag)) {
        // A zero tangent may be a plain 0.0; tensor rules want tensors (or None for zero).
        let tangents: Vec<Option<Value>> = args
            .iter()
            .map(|a| match a {
                Value::Dual(d) if d.tag == tag => match (&d.tangent, strip(&d.primal)) {
                    (Value::Float(z), Value::Tensor(_)) if *z == 0.0 => None,
                    (Value::Float(z), Value::Tensor(p)) => {
                        Some(Value::Tensor(Rc::new(Tensor::full(p.shape(), *z as f32))))
                    }
                    (t, _) => Some(t.clone()),
                },
                _ => None,
            })
            .collect();
        let tangent = tensor::jvp(m, &op, &primals, &y, &tangents)?;
        return Ok(Value::Dual(Rc::new(Dual { tag, primal: y, tangent })));
    }
    let inputs: Vec<Option<Rc<Tracked>>> = args
        .iter()
        .map(|a| match a {
            Value::Tracked(t) if t.tag == tag => Some(t.clone()),
            _ => None,
        })
        .collect();
    let out = Rc::new(Tracked { tag, primal: y.clone(), adj: RefCell::new(None) });
    match m.grad_handler(tag) {
        Some(h) => h.frames.push(AdjFrame::Op(Box::new(OpFrame { out: out.clone(), op, inputs, primals }))),
        None => return Ok(out.primal.clone()),
    }
    Ok(Value::Tracked(out))
}

/// Of two live levels, the one nested inside the other: its delimiter sits higher on the
/// machine's stack. Usually that is the newer tag, but a continuation captured inside an older
/// `grad` and resumed inside a newer one reinstates the older level above the newer.
fn innermost(m: &Machine, a: u32, b: u32) -> u32 {
    if a == 0 || b == 0 || a == b {
        return a.max(b);
    }
    m.inner_level(a, b).unwrap_or(a.max(b))
}

/// Strips the perturbations of handlers that are no longer running: a value that escaped its
/// `grad` or `jvp` (through a reference cell, say) is a plain value of the levels still live.
fn live(m: &mut Machine, v: Value) -> Value {
    let mut v = v;
    loop {
        v = match v {
            Value::Tracked(t) if m.grad_handler(t.tag).is_none() => t.primal.clone(),
            Value::Dual(d) if !m.level_is_live(d.tag) => d.primal.clone(),
            other => return other,
        }
    }
}

pub fn unary(m: &mut Machine, op: Un, x: Value) -> FResult<Value> {
    let x = live(m, x);
    if !is_ad(&x) {
        return apply_un(m, op, x);
    }
    let tag = tag_of(&x);
    if tag == 0 {
        return Err(Fault::internal(format!("`{op:?}` on {}", x.type_name())));
    }
    let p = primal_at(&x, tag);
    let y = apply_un(m, op, p.clone())?;
    match &x {
        Value::Dual(d) => {
            let dy = rules::un_deriv(op, m, &p, &y)?;
            let tangent = m.prim2(Prim::Mul, dy, d.tangent.clone())?;
            Ok(Value::Dual(Rc::new(Dual { tag, primal: y, tangent })))
        }
        Value::Tracked(t) => {
            // `live` has just found this tag's handler: no need to look twice.
            let dy = rules::un_deriv(op, m, &p, &y)?;
            let out = Rc::new(Tracked { tag, primal: y, adj: RefCell::new(None) });
            let frame = AdjFrame::Scale { out: out.clone(), a: Some((t.clone(), dy)), b: None };
            match m.grad_handler(tag) {
                Some(h) => h.frames.push(frame),
                None => return Ok(out.primal.clone()),
            }
            Ok(Value::Tracked(out))
        }
        _ => unreachable!("tag_of said perturbed"),
    }
}

pub fn binary(m: &mut Machine, p: Prim, a: Value, b: Value) -> FResult<Value> {
    let (a, b) = (live(m, a), live(m, b));
    if !is_ad(&a) && !is_ad(&b) {
        return m.prim2(p, a, b);
    }
    let tag = innermost(m, tag_of(&a), tag_of(&b));
    let (pa, pb) = (primal_at(&a, tag), primal_at(&b, tag));
    let (a_in, b_in) = (tag_of(&a) == tag, tag_of(&b) == tag);
    let is_dual = matches!(if a_in { &a } else { &b }, Value::Dual(_));
    if !is_dual {
        if let Some((y, da, db)) = rules::scalar_partials(p, &pa, &pb) {
            return record(m, tag, Value::Float(y), (&a, a_in, Value::Float(da)), (&b, b_in, Value::Float(db)));
        }
    }
    let y = m.prim2(p, pa.clone(), pb.clone())?;
    if is_dual {
        let (da, db) = rules::partials(m, p, &pa, &pb, &y)?;
        let mut tangent = Value::Float(0.0);
        for (inp, d, on) in [(&a, da, a_in), (&b, db, b_in)] {
            if let (true, Value::Dual(x)) = (on, inp) {
                let c = m.prim2(Prim::Mul, d, x.tangent.clone())?;
                tangent = add(m, tangent, c)?;
            }
        }
        // The tangent has the output's kind and shape even where an input broadcast.
        let tangent = match (strip(&y), strip(&tangent)) {
            (Value::Tensor(ty), Value::Tensor(tt)) if ty.shape() != tt.shape() => {
                tensor::call(m, TOp::BroadcastTo(ty.shape().to_vec()), vec![tangent])?
            }
            (Value::Tensor(ty), Value::Float(_)) => {
                tensor::call(m, TOp::BroadcastTo(ty.shape().to_vec()), vec![tangent])?
            }
            _ => tangent,
        };
        return Ok(Value::Dual(Rc::new(Dual { tag, primal: y, tangent })));
    }
    let (da, db) = rules::partials(m, p, &pa, &pb, &y)?;
    record(m, tag, y, (&a, a_in, da), (&b, b_in, db))
}

/// Records y = a `p` b for reverse mode at `tag`: a tracked output and the adjoint frame that
/// scales its adjoint by each tracked operand's partial.
fn record(m: &mut Machine, tag: u32, y: Value, a: (&Value, bool, Value), b: (&Value, bool, Value)) -> FResult<Value> {
    // `live` has just found this tag's handler (the operand tracked by it is live).
    let out = Rc::new(Tracked { tag, primal: y, adj: RefCell::new(None) });
    let pick = |(v, on, d): (&Value, bool, Value)| match (on, v) {
        (true, Value::Tracked(t)) => Some((t.clone(), d)),
        _ => None,
    };
    let frame = AdjFrame::Scale { out: out.clone(), a: pick(a), b: pick(b) };
    match m.grad_handler(tag) {
        Some(h) => h.frames.push(frame),
        None => return Ok(out.primal.clone()),
    }
    Ok(Value::Tracked(out))
}

fn add(m: &mut Machine, a: Value, b: Value) -> FResult<Value> {
    match (a, b) {
        (Value::Float(x), Value::Float(y)) => Ok(Value::Float(x + y)),
        // Adjoints accumulate in place when this sum is the only owner of the tensor.
        (Value::Tensor(mut x), Value::Tensor(y)) if x.shape() == y.shape() => match Rc::get_mut(&mut x) {
            Some(t) => {
                t.add_assign(&y)?;
                Ok(Value::Tensor(x))
            }
            None => m.prim2(Prim::Add, Value::Tensor(x), Value::Tensor(y)),
        },
        (a, b) => m.prim2(Prim::Add, a, b),
    }
}

fn mul(m: &mut Machine, a: Value, b: Value) -> FResult<Value> {
    match (&a, &b) {
        (Value::Float(x), Value::Float(y)) => Ok(Value::Float(x * y)),
        _ => m.prim2(Prim::Mul, a, b),
    }
}

pub(super) fn accumulate(m: &mut Machine, cell: &Tracked, contribution: Value) -> FResult<()> {
    // A broadcast input receives the sum of its copies' adjoints, in its own kind (Float or
    // Tensor) and shape.
    if let (Value::Float(_), Value::Float(c)) = (&cell.primal, &contribution) {
        // The scalar case: no shapes to reconcile.
        let mut adj = cell.adj.borrow_mut();
        *adj = Some(match adj.take() {
            Some(Value::Float(old)) => Value::Float(old + c),
            None => Value::Float(*c),
            Some(old) => {
                drop(adj);
                let sum = add(m, old, Value::Float(*c))?;
                *cell.adj.borrow_mut() = Some(sum);
                return Ok(());
            }
        });
        return Ok(());
    }
    let target_is_tensor = matches!(strip(&cell.primal), Value::Tensor(_));
    let have_tensor = matches!(strip(&contribution), Value::Tensor(_));
    let (want, have) = (shape_of(&cell.primal), shape_of(&contribution));
    let contribution = match (target_is_tensor, have_tensor) {
        (false, true) => tensor::call(m, TOp::Sum, vec![contribution])?,
        (true, false) => tensor::call(m, TOp::BroadcastTo(want), vec![contribution])?,
        (true, true) if want != have => tensor::call(m, TOp::SumTo(want), vec![contribution])?,
        _ => contribution,
    };
    let old = cell.adj.borrow_mut().take();
    let new = match old {
        None => contribution,
        Some(o) => add(m, o, contribution)?,
    };
    *cell.adj.borrow_mut() = Some(new);
    Ok(())
}

/// The handler's work once `f` has returned `y`: seed, return through the adjoint frames,
/// read the argument's adjoints.
pub fn backward(m: &mut Machine, mut state: GradState, y: Value) -> FResult<Value> {
    let tag = state.tag;
    match &y {
        Value::Tracked(o) if o.tag == tag => *o.adj.borrow_mut() = Some(Value::Float(1.0)),
        _ => {}
    }
    let mut n = 0u32;
    let mut outer = matmul::OuterSums::default();
    while let Some(frame) = state.frames.pop() {
        n = n.wrapping_add(1);
        if n.is_multiple_of(4096) && m.interrupt.load(Ordering::Relaxed) {
            m.interrupt.store(false, Ordering::Relaxed);
            return Err(Fault::new("interrupted"));
        }
        match frame {
            AdjFrame::Scale { out, a, b } => {
                outer.flush(m, &out)?;
                let Some(g) = out.adj.borrow_mut().take() else { continue };
                if let Some((a, da)) = a {
                    let c = mul(m, g.clone(), da)?;
                    accumulate(m, &a, c)?;
                }
                if let Some((b, db)) = b {
                    let c = mul(m, g, db)?;
                    accumulate(m, &b, c)?;
                }
            }
            AdjFrame::Op(frame) => {
                let OpFrame { out, op, inputs, primals } = *frame;
                outer.flush(m, &out)?;
                let Some(g) = out.adj.borrow_mut().take() else { continue };
                let mut needs: Vec<bool> = inputs.iter().map(Option::is_some).collect();
                if op == TOp::MatMul {
                    for (i, inp) in inputs.iter().enumerate() {
                        if inp.as_ref().is_some_and(|cell| matmul::adjoint_into(&primals, &g, i, cell, &mut outer)) {
                            needs[i] = false;
                        }
                    }
                    if !needs.contains(&true) {
                        continue;
                    }
                }
                let contributions = tensor::vjp(m, &op, &primals, &out.primal, g, &needs)?;
                for (inp, c) in inputs.iter().zip(contributions) {
                    if let (Some(inp), Some(c)) = (inp, c) {
                        accumulate(m, inp, c)?;
                    }
                }
            }
        }
    }
    outer.flush_all(m)?;
    m.spare_adjoint_frames = std::mem::take(&mut state.frames);
    // Reading an input's adjoint also clears it, so a continuation that re-enters this
    // `grad` (multi-shot) starts its next backward pass from zero.
    let grads = map_leaves(state.input.clone(), &mut |leaf| {
        Ok(match leaf {
            Value::Tracked(t) if t.tag == tag => t.adj.borrow_mut().take().unwrap_or_else(|| zero_like(&t.primal)),
            other => zero_like(&other),
        })
    })?;
    if state.with_value {
        Ok(Value::Tuple(Rc::new(vec![primal_at(&y, tag), grads])))
    } else {
        Ok(grads)
    }
}

/// `jvp`'s result: (primal output, tangent output) at `tag`.
pub fn jvp_finish(tag: u32, y: Value) -> FResult<Value> {
    let primal = map_leaves(y.clone(), &mut |leaf| Ok(primal_at(&leaf, tag)))?;
    let tangent = map_leaves(y, &mut |leaf| {
        Ok(match leaf {
            Value::Dual(d) if d.tag == tag => match (&d.tangent, strip(&d.primal)) {
                (Value::Float(z), Value::Tensor(p)) => Value::Tensor(Rc::new(Tensor::full(p.shape(), *z as f32))),
                (t, _) => t.clone(),
            },
            other => zero_like(&other),
        })
    })?;
    Ok(Value::Tuple(Rc::new(vec![primal, tangent])))
}
