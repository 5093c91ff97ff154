//! Running a staged program: each node's operation called directly on the tensor library's
//! kernels (through the run-time layer's plain-value entry points, the ones the machine
//! uses), with no evaluator in between; the outputs are put back into the function's output
//! structure. `apply` is also what the tracer computes each node's example with, so a traced
//! call and a compiled one run the same code on the same numbers.

use super::ir::{Chained, Kind, Node, Op, Program, Template};
use super::native;
use crate::core::Prim;
use crate::runtime::value::{ConVal, RecordVal, Value};
use crate::runtime::{tensor, FResult, Fault};
use crate::tensor::chain::{self as fused, Arg, Operand};
use crate::tensor::ops::Out;
use crate::tensor::{cpu, DType, Real, TOp, Tensor};
use ndarray::ArrayD;
use std::cell::RefCell;
use std::rc::Rc;

/// One operation on plain Floats and tensors.
/// The machine's own Float arithmetic (Machine::prim2), operation for operation.
#[inline]
pub(super) fn float_bin(p: Prim, x: f64, y: f64) -> FResult<f64> {
    Ok(match p {
        Prim::Add => x + y,
        Prim::Sub => x - y,
        Prim::Mul => x * y,
        Prim::Div => x / y,
        Prim::Pow => x.powf(y),
        _ => return Err(Fault::internal(format!("staged `{p:?}`"))),
    })
}

pub fn apply(op: &Op, args: Vec<Value>) -> FResult<Value> {
    // Read without allocating: the tracer computes every traced node's example here.
    let mut fs = [0.0; 2];
    let all_floats = args.len() <= 2
        && args.iter().zip(&mut fs).all(|(a, f)| match a {
            Value::Float(x) => {
                *f = *x;
                true
            }
            _ => false,
        });
    match (op, all_floats.then(|| &fs[..args.len()])) {
        (Op::Bin(p), Some(&[x, y])) => Ok(Value::Float(float_bin(*p, x, y)?)),
        (Op::Un(u), Some(&[x])) => Ok(Value::Float(u.eval(x))),
        // The derivative rules' masks on a traced Float (on a plain Float the rules decide
        // them directly, as the scalar rules in ad/rules.rs do; these are those decisions).
        (Op::T(t), Some(&[x])) if **t == TOp::Step => Ok(Value::Float(if x > 0.0 { 1.0 } else { 0.0 })),
        (Op::T(t), Some(&[x])) if **t == TOp::Sign => Ok(Value::Float(if x >= 0.0 { 1.0 } else { -1.0 })),
        (Op::T(t), Some(&[x, mask])) if **t == TOp::Mask => Ok(Value::Float(if mask > 0.0 { x } else { 0.0 })),
        (Op::Bin(p), _) => {
            let mut args = args.into_iter();
            let (a, b) = (args.next().unwrap_or_default(), args.next().unwrap_or_default());
            tensor::elementwise(*p, a, b)
        }
        (Op::Un(u), _) => match args.into_iter().next() {
            Some(Value::Tensor(t)) => Ok(tensor::wrap(cpu::elementwise::unary(*u, t)?)),
            other => Err(Fault::internal(format!("staged `{u:?}` on {}", other.unwrap_or_default().type_name()))),
        },
        (Op::T(t), _) if matches!(**t, TOp::Reshape(_)) => reshape(t, args),
        (Op::T(t), _) => tensor::forward(t, &args),
        (Op::Product { tx, ty, acc }, _) => product(*tx, *ty, *acc, args),
        (Op::AddRow(k), _) => add_row(*k as usize, args),
        (Op::Chain(c), _) => chain(c, args),
    }
}

/// A reshape of a tensor that only this node holds (the executor moves a tensor into its
/// last reader) takes the tensor's elements as they are (`ops::reshape_owned`); the tensor
/// library's reshape of a borrowed operand copies them. Attention's head split and merge are
/// such reshapes of activation-sized tensors.
fn reshape(op: &TOp, args: Vec<Value>) -> FResult<Value> {
    if let (TOp::Reshape(shape), [Value::Tensor(_)]) = (op, args.as_slice()) {
        if let Some(Value::Tensor(x)) = args.into_iter().next() {
            return match Rc::try_unwrap(x) {
                Ok(t) => Ok(tensor::wrap(crate::tensor::ops::reshape_owned(t, shape)?)),
                Err(shared) => tensor::forward(op, &[Value::Tensor(shared)]),
            };
        }
        return Err(Fault::internal("a reshape without its operand"));
    }
    tensor::forward(op, &args)
}

/// `Op::Chain`: one pass on the operands' device where it takes them (the CPU's blocked loop
/// on float tensors, a generated shader on GPU tensors: `tensor::chain::run`), else the steps
/// one by one.
fn chain(c: &Chained, args: Vec<Value>) -> FResult<Value> {
    let mut operands = Vec::with_capacity(args.len());
    for a in args {
        operands.push(match a {
            Value::Tensor(t) => Operand::Tensor(t),
            Value::Float(x) => Operand::Float(x),
            other => return Err(Fault::internal(format!("a chain's operand is {}", other.type_name()))),
        });
    }
    if let Some(op) = &c.reduce {
        // Reduced as it goes where the device has such a pass; else the chain, then the
        // reduction of its result.
        let operands = match fused::Reduce::of(op, &c.shape) {
            Some(reduce) => match fused::run_reduced(&c.chain, &c.shape, reduce, operands) {
                Ok(Out::Float(x)) => return Ok(Value::Float(x)),
                Ok(Out::Tensor(t)) => return Ok(tensor::wrap(t)),
                Err(operands) => operands,
            },
            None => operands,
        };
        let elements = run_chain(c, operands)?;
        return tensor::forward(op, &[elements]);
    }
    run_chain(c, operands)
}

/// The chain's elements, as a tensor: one pass where the device takes the operands, else the
/// steps one by one.
fn run_chain(c: &Chained, operands: Vec<Operand>) -> FResult<Value> {
    let operands = match fused::run(&c.chain, &c.shape, operands) {
        Ok(t) => return Ok(tensor::wrap(t)),
        Err(operands) => operands,
    };
    let value = |o: &Operand| match o {
        Operand::Tensor(t) => Value::Tensor(t.clone()),
        Operand::Float(x) => Value::Float(*x),
    };
    let mut results: Vec<Value> = Vec::with_capacity(c.chain.steps().len());
    for &(step, [x, y]) in c.chain.steps() {
        let arg = |a: Arg| match a {
            Arg::In(k) => value(&operands[k as usize]),
            Arg::At(j) => results[j as usize].clone(),
        };
        let args = [x, y][..step.arity()].iter().map(|&a| arg(a)).collect();
        let r = apply(&super::chains::op_of(step), args)?;
        results.push(r);
    }
    results.pop().ok_or_else(|| Fault::internal("an empty chain"))
}

/// `Op::AddRow`: x added into row k of the accumulator's own buffer (copied first if something
/// else holds it) where both are CPU floats of one dtype, else the two operations it fuses.
/// Row k's elements are acc + x as the unfused add computes them; the other rows are acc's,
/// where the add computed acc + 0 (the same number, but that -0 became +0).
fn add_row(k: usize, args: Vec<Value>) -> FResult<Value> {
    let mut args = args.into_iter();
    let (acc, x) = (args.next().unwrap_or_default(), args.next().unwrap_or_default());
    let (acc, x) = match (acc, x) {
        (Value::Tensor(a), Value::Tensor(x)) => {
            let fused = match a.dtype() {
                DType::F32 => add_row_real::<f32>(k, a, &x),
                DType::F64 => add_row_real::<f64>(k, a, &x),
                _ => Err(a),
            };
            match fused {
                Ok(t) => return Ok(tensor::wrap(t)),
                Err(a) => (Value::Tensor(a), Value::Tensor(x)),
            }
        }
        other => other,
    };
    let shape = match &acc {
        Value::Tensor(t) => t.shape().to_vec(),
        other => return Err(Fault::internal(format!("a row added into {}", other.type_name()))),
    };
    let spread = tensor::forward(&TOp::ScatterRow(k, shape), &[x])?;
    tensor::elementwise(Prim::Add, acc, spread)
}

/// `add_row` on `T`'s CPU arrays, or the accumulator back when an operand is of another dtype
/// or device, or the row's shape is not x's.
fn add_row_real<T: Real>(k: usize, acc: Rc<Tensor>, x: &Tensor) -> Result<Tensor, Rc<Tensor>> {
    let fits = |a: &ArrayD<T>| a.ndim() >= 1 && k < a.shape()[0] && a.shape()[1..] == *x.shape();
    if !T::of(&acc).is_some_and(fits) {
        return Err(acc);
    }
    let Some(xs) = T::of(x) else { return Err(acc) };
    let owned = Rc::try_unwrap(acc).unwrap_or_else(|shared| (*shared).clone());
    let mut a = T::take(owned.storage).map_err(|storage| Rc::new(Tensor { storage }))?;
    // row + 1·x: the multiplication by one is exact, so each element is row + x.
    a.index_axis_mut(ndarray::Axis(0), k).scaled_add(T::one(), xs);
    Ok(Tensor::from_real(a))
}

/// `Op::Product`: one call of the GEMM where the operands are CPU floats of one dtype (the
/// accumulator's buffer reused when nothing else holds it), else the operations it fuses.
fn product(tx: bool, ty: bool, acc: bool, args: Vec<Value>) -> FResult<Value> {
    let mut args = args.into_iter();
    let mut acc = if acc { args.next() } else { None };
    let (x, y) = (args.next().unwrap_or_default(), args.next().unwrap_or_default());
    if let (Value::Tensor(a), Value::Tensor(b)) = (&x, &y) {
        let fused = match a.dtype() {
            DType::F32 => product_real::<f32>(tx, ty, &mut acc, a, b)?,
            DType::F64 => product_real::<f64>(tx, ty, &mut acc, a, b)?,
            _ => None,
        };
        if let Some(t) = fused {
            return Ok(tensor::wrap(t));
        }
    }
    // A flipped operand is read with its last two axes swapped (a stack's matrices each
    // transposed; `Transpose` would reverse every axis).
    let flip = |v: Value, on: bool| -> FResult<Value> {
        let rank = if on { v.as_tensor()?.shape().len() } else { 0 };
        if rank < 2 {
            return Ok(v);
        }
        let mut perm: Vec<usize> = (0..rank).collect();
        perm.swap(rank - 2, rank - 1);
        tensor::forward(&TOp::Permute(perm), &[v])
    };
    let p = tensor::forward(&TOp::MatMul, &[flip(x, tx)?, flip(y, ty)?])?;
    match acc {
        Some(a) => tensor::elementwise(Prim::Add, a, p),
        None => Ok(p),
    }
}

/// The fused product on `T`'s CPU arrays, or None (with `acc` untouched) when an operand is
/// of another dtype or on the GPU.
fn product_real<T: Real>(
    tx: bool,
    ty: bool,
    acc: &mut Option<Value>,
    a: &Tensor,
    b: &Tensor,
) -> FResult<Option<Tensor>> {
    let (Some(x), Some(y)) = (T::of(a), T::of(b)) else { return Ok(None) };
    match acc.take() {
        Some(Value::Tensor(t)) if T::of(&t).is_some() => {
            // The executor moves a value into its last reader, so this is usually the only
            // holder, and the product is added into the accumulator's own buffer.
            let owned = Rc::try_unwrap(t).unwrap_or_else(|shared| (*shared).clone());
            let mut c =
                T::take(owned.storage).map_err(|_| Fault::internal("a fused product's accumulator changed dtype"))?;
            cpu::product_into(&mut c, x, tx, y, ty, T::one())?;
            Ok(Some(Tensor::from_real(c)))
        }
        Some(other) => {
            *acc = Some(other);
            Ok(None)
        }
        None => {
            // Matrices (rows, columns) as read, and the batch axes of stacks of them.
            let dims = |t: &ArrayD<T>, flipped: bool| match t.shape() {
                [.., r, c] => Some(if flipped { (*c, *r) } else { (*r, *c) }),
                _ => None,
            };
            let shape = match (dims(x, tx), dims(y, ty)) {
                (Some((m, _)), Some((_, n))) => {
                    let batch = &x.shape()[..x.ndim() - 2];
                    batch.iter().copied().chain([m, n]).collect()
                }
                (Some((m, _)), None) if x.ndim() == 2 => vec![m],
                (None, Some((_, n))) if y.ndim() == 2 => vec![n],
                _ => return Ok(None),
            };
            Ok(Some(Tensor::from_real(cpu::product_new(&shape, x, tx, y, ty)?)))
        }
    }
}

/// The last node that reads each node (`None`: nothing does), so a value is moved into its
/// last reader — a tensor nobody else holds is then reused in place by elementwise kernels.
fn last_uses(p: &Program) -> Vec<Option<u32>> {
    let mut last = vec![None; p.nodes.len()];
    for (i, n) in p.nodes.iter().enumerate() {
        if let Node::Apply(_, args) = n {
            for &a in args {
                last[a as usize] = Some(i as u32);
            }
        }
    }
    for &o in &p.outputs {
        // An output is read at the end, after every node.
        last[o as usize] = Some(u32::MAX);
    }
    last
}

/// One step of running a plan.
enum Step {
    /// A node the tensor library computes (or any operation native code does not cover).
    Node(u32),
    /// A native function (its index in the plan's `Code`).
    Native(usize),
}

/// A staged program ready to run: its operations in order, runs of Float operations
/// compiled to native code (`native`), and the values of its Float nodes in one `f64` array
/// indexed by node (constants written once, here), while tensors live in `Value` slots.
pub struct Plan {
    pub prog: Program,
    /// Each node's last reader (`u32::MAX` for an output); empty when no node is a tensor.
    last: Vec<Option<u32>>,
    steps: Vec<Step>,
    code: Option<native::Code>,
    /// The Float slots, kept between calls (no node writes a constant's slot, so the
    /// constants stay); taken while a call runs.
    floats: RefCell<Vec<f64>>,
    tensors: bool,
    /// The input nodes: (node, leaf of the argument).
    inputs: Vec<(u32, usize)>,
    /// The tensor constants, put in their slots before anything runs (a constant need not
    /// come right before its first reader: folding makes constants anywhere, even inside a
    /// run of native code).
    tensor_consts: Vec<u32>,
    /// What became of native compilation, for `DP_JIT_LOG`.
    pub native_note: String,
    /// Under `DP_JIT_PROFILE=1`: each node's time over every call, printed when the plan goes.
    profile: Option<Profile>,
}

/// Where a staged program's time goes (`DP_JIT_PROFILE=1`): the time of each step (a node
/// the tensor library computes, or a native function) summed over the calls, printed on
/// stderr when the plan is dropped (the function's cache evicts it, or the program ends),
/// the costliest steps first.
struct Profile {
    nanos: RefCell<Vec<u64>>,
    calls: std::cell::Cell<u64>,
}

/// How many steps a profile lists.
const PROFILE_LINES: usize = 25;

impl Plan {
    fn profile_report(&self, profile: &Profile) -> Option<String> {
        let (nanos, calls) = (profile.nanos.borrow(), profile.calls.get());
        let total: u64 = nanos.iter().sum();
        if calls == 0 || total == 0 {
            return None;
        }
        let ms = |ns: u64| ns as f64 / calls as f64 / 1e6;
        let mut order: Vec<usize> = (0..nanos.len()).filter(|&k| nanos[k] > 0).collect();
        order.sort_by_key(|&k| std::cmp::Reverse(nanos[k]));
        let mut lines = format!(
            "jit profile: {} nodes in {} steps, {calls} calls, {:.3} ms per call\n",
            self.prog.nodes.len(),
            self.steps.len(),
            ms(total)
        );
        // By operation: a chain counts as `chain`, a product by its BLAS name.
        let mut by_op: Vec<(String, u64, usize)> = Vec::new();
        for (k, step) in self.steps.iter().enumerate() {
            let name = match step {
                Step::Node(i) => match &self.prog.nodes[*i as usize] {
                    Node::Apply(Op::Chain(_), _) => "chain".to_string(),
                    Node::Apply(op, _) => op.to_string(),
                    _ => continue,
                },
                Step::Native(_) => "native code".to_string(),
            };
            match by_op.iter_mut().find(|(n, _, _)| *n == name) {
                Some(entry) => {
                    entry.1 += nanos[k];
                    entry.2 += 1;
                }
                None => by_op.push((name, nanos[k], 1)),
            }
        }
        by_op.sort_by_key(|e| std::cmp::Reverse(e.1));
        lines += "  by operation (ms per call, share, steps):\n";
        for (name, ns, count) in by_op.iter().take(PROFILE_LINES / 2) {
            lines += &format!("  {:>8.3} {:>5.1}%  {count:>4}  {name}\n", ms(*ns), 100.0 * *ns as f64 / total as f64);
        }
        lines += "  the costliest steps (ms per call, share):\n";
        for &k in order.iter().take(PROFILE_LINES) {
            let what = match self.steps[k] {
                Step::Node(i) => match &self.prog.nodes[i as usize] {
                    Node::Apply(op, _) => format!("%{i} = {op} : {}", self.prog.kinds[i as usize]),
                    _ => format!("%{i}"),
                },
                Step::Native(f) => format!("native function {f}"),
            };
            let what: String =
                if what.chars().count() > 110 { what.chars().take(107).chain("...".chars()).collect() } else { what };
            lines += &format!("  {:>8.3} {:>5.1}%  {what}\n", ms(nanos[k]), 100.0 * nanos[k] as f64 / total as f64);
        }
        Some(lines)
    }
}

impl Drop for Plan {
    fn drop(&mut self) {
        if let Some(report) = self.profile.as_ref().and_then(|p| self.profile_report(p)) {
            eprint!("{report}");
        }
    }
}

/// Whether staged programs get native code: `DP_JIT_NATIVE=0` keeps them on the executor's
/// kernels alone (to compare the two, or on a host Cranelift cannot target).
fn native_enabled() -> bool {
    std::env::var("DP_JIT_NATIVE").map_or(true, |v| v != "0")
}

impl Plan {
    pub fn new(prog: Program) -> Plan {
        let n = prog.nodes.len();
        let floats = Plan::new_floats(&prog);
        let tensors = prog.has_tensors();
        // Last readers decide when a tensor's slot may be moved out; a program of Floats
        // alone keeps its values in `floats` and never asks (W1: a pass over 1.35M nodes and
        // a 10 MB table saved).
        let last = if tensors { last_uses(&prog) } else { Vec::new() };
        // Runs of native operations (constants and inputs between them do not break a run).
        let mut runs: Vec<(usize, usize)> = Vec::new();
        let mut open: Option<usize> = None;
        let mut end = 0;
        let use_native = native_enabled();
        for (i, node) in prog.nodes.iter().enumerate() {
            if !matches!(node, Node::Apply(..)) {
                continue;
            }
            if use_native && native::is_native(&prog, i) {
                open.get_or_insert(i);
                end = i + 1;
            } else if let Some(s) = open.take() {
                runs.push((s, end));
            }
        }
        if let Some(s) = open {
            runs.push((s, end));
        }
        let (code, spans, native_note) = match runs.is_empty() {
            true => (None, Vec::new(), String::new()),
            false => match native::compile(&prog, &runs) {
                Ok((code, spans)) => {
                    let note = format!(
                        "native: {} functions, {} loops over {} of {} nodes",
                        code.functions.len(),
                        code.loops,
                        code.looped_nodes,
                        n
                    );
                    (Some(code), spans, note)
                }
                Err(e) => (None, Vec::new(), format!("no native code ({e})")),
            },
        };
        // The steps: each run's functions at its first node, every other operation itself.
        let mut steps = Vec::new();
        let mut runs_at = runs.iter().zip(&spans).peekable();
        let mut i = 0;
        while i < n {
            if let Some(&(&(s, e), &(first, count))) = runs_at.peek() {
                if i == s && code.is_some() {
                    steps.extend((first..first + count).map(Step::Native));
                    runs_at.next();
                    i = e;
                    continue;
                }
            }
            if let Node::Apply(..) = &prog.nodes[i] {
                steps.push(Step::Node(i as u32));
            }
            i += 1;
        }
        let tensor_consts = (0..n as u32)
            .filter(|&i| matches!(&prog.nodes[i as usize], Node::Const(v) if !matches!(v, Value::Float(_))))
            .collect();
        let inputs = prog
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| if let Node::Input(k) = n { Some((i as u32, *k)) } else { None })
            .collect();
        let profile = super::env_flag("DP_JIT_PROFILE")
            .then(|| Profile { nanos: RefCell::new(vec![0; steps.len()]), calls: std::cell::Cell::new(0) });
        Plan {
            prog,
            last,
            steps,
            code,
            floats: RefCell::new(floats),
            tensors,
            inputs,
            tensor_consts,
            native_note,
            profile,
        }
    }

    /// Runs the program on the argument's leaves (in the signature's order) and builds the
    /// result.
    pub fn run(&self, inputs: Vec<Value>) -> FResult<Value> {
        let mut floats = self.floats.replace(Vec::new());
        if floats.len() != self.prog.nodes.len() {
            // A call running inside another (not reachable today: a program does not call
            // back into the machine) gets a fresh array.
            floats = Plan::new_floats(&self.prog);
        }
        let result = self.run_with(&mut floats, inputs);
        self.floats.replace(floats);
        result
    }

    /// The Float slots with the constants written in.
    fn new_floats(p: &Program) -> Vec<f64> {
        p.nodes.iter().map(|n| if let Node::Const(Value::Float(x)) = n { *x } else { 0.0 }).collect()
    }

    fn run_with(&self, floats: &mut [f64], mut inputs: Vec<Value>) -> FResult<Value> {
        let p = &self.prog;
        let mut slots: Vec<Value> = if self.tensors { vec![Value::Unit; p.nodes.len()] } else { Vec::new() };
        for &i in &self.tensor_consts {
            if let Node::Const(v) = &p.nodes[i as usize] {
                slots[i as usize] = v.clone();
            }
        }
        for &(i, k) in &self.inputs {
            match std::mem::take(&mut inputs[k]) {
                Value::Float(x) => floats[i as usize] = x,
                v => slots[i as usize] = v,
            }
        }
        if let Some(profile) = &self.profile {
            profile.calls.set(profile.calls.get() + 1);
        }
        for (k, step) in self.steps.iter().enumerate() {
            let started = self.profile.as_ref().map(|_| std::time::Instant::now());
            match step {
                Step::Native(f) => {
                    let code = self.code.as_ref().ok_or_else(|| Fault::internal("a native step with no code"))?;
                    // SAFETY: the function reads and writes slots of nodes of this program
                    // only, and `floats` has one per node.
                    unsafe { code.functions[*f](floats.as_mut_ptr()) }
                }
                Step::Node(i) => {
                    let i = *i as usize;
                    let v = match &p.nodes[i] {
                        Node::Apply(Op::Bin(b), args) if p.kinds[i] == Kind::Float && floats_in(p, args) => {
                            Value::Float(float_bin(*b, floats[args[0] as usize], floats[args[1] as usize])?)
                        }
                        Node::Apply(Op::Un(u), args) if p.kinds[i] == Kind::Float && floats_in(p, args) => {
                            Value::Float(u.eval(floats[args[0] as usize]))
                        }
                        Node::Apply(op, args) => {
                            let vals = args
                                .iter()
                                .map(|&a| {
                                    let a = a as usize;
                                    if p.kinds[a] == Kind::Float {
                                        Value::Float(floats[a])
                                    } else if self.last[a] == Some(i as u32) && !args_repeat(args, a) {
                                        std::mem::take(&mut slots[a])
                                    } else {
                                        slots[a].clone()
                                    }
                                })
                                .collect();
                            apply(op, vals)?
                        }
                        // Set before the steps run.
                        Node::Input(_) | Node::Const(_) => continue,
                    };
                    match v {
                        Value::Float(x) => floats[i] = x,
                        v => slots[i] = v,
                    }
                }
            }
            if let (Some(profile), Some(started)) = (&self.profile, started) {
                profile.nanos.borrow_mut()[k] += started.elapsed().as_nanos() as u64;
            }
        }
        let outs: Vec<Value> = p
            .outputs
            .iter()
            .map(|&o| {
                let o = o as usize;
                if p.kinds[o] == Kind::Float {
                    Value::Float(floats[o])
                } else {
                    slots[o].clone()
                }
            })
            .collect();
        Ok(build(&p.template, &outs))
    }
}

impl crate::runtime::perturbed::StagedBackward for Plan {
    fn run(&self, inputs: Vec<Value>) -> FResult<Value> {
        Plan::run(self, inputs)
    }
}

fn floats_in(p: &Program, args: &[u32]) -> bool {
    args.iter().all(|&a| p.kinds[a as usize] == Kind::Float)
}

/// Whether a node reads operand `a` twice (`x * x`): it is then cloned, not moved.
fn args_repeat(args: &[u32], a: usize) -> bool {
    args.iter().filter(|&&x| x as usize == a).count() > 1
}

pub(super) fn build(t: &Template, outs: &[Value]) -> Value {
    match t {
        Template::Out(k) => outs[*k].clone(),
        Template::Value(v) => v.clone(),
        Template::Tuple(ts) => Value::Tuple(Rc::new(ts.iter().map(|t| build(t, outs)).collect())),
        Template::Record(names, ts) => Value::Record(Rc::new(RecordVal {
            names: names.clone(),
            values: ts.iter().map(|t| build(t, outs)).collect(),
        })),
        Template::List(ts) => Value::list(ts.iter().map(|t| build(t, outs)).collect::<Vec<_>>().into_iter()),
        Template::Con(tag, name, ts) => Value::Con(Rc::new(ConVal {
            tag: *tag,
            name: name.clone(),
            args: ts.iter().map(|t| build(t, outs)).collect(),
        })),
    }
}
