//! Staging (LANGUAGE.md "Staging"; issue 17): `jit f x` traces `f` on the first call with a
//! given input signature, optimises the traced program and afterwards runs it directly on the
//! tensor library's kernels.
//!
//! **The tracer is the machine's arithmetic on traced values.** The leaves of `x` (Floats and
//! tensors) become `Value::Staged` leaves, and `f` runs in the machine as any code does. The
//! machine's primitives and its `ad::Host` entry points (`prim2`, `forward`, `un_other`)
//! hand an operation on a traced value to this module, which emits a node instead of only
//! computing. Differentiation is written against that host, so a `grad`, `value_and_grad` or
//! `jvp` running inside the staged function runs its one rule table on traced values: the
//! forward pass and the backward pass both end up in the IR (the backward pass is traced when
//! the handler runs it, at the end of the `grad`), with no second differentiator.
//!
//! Ints, Bools and Strings in `x` are part of the signature and stay plain, so control flow on
//! them is traced through (the trace is one path); what would branch on a traced value is
//! refused with a located error (see `refuse`).
//!
//! Modules: `ir` (the program), `trace` (emitting it), `opt` (simplification, common
//! subexpressions, dead code), `fuse` (matrix products as single GEMM calls), `exec` (running
//! it).

pub mod exec;
mod fuse;
pub mod ir;
mod native;
pub mod opt;
mod reroll;
mod trace;

use crate::runtime::perturbed::{is_ad, strip};
use crate::runtime::value::{ConVal, RecordVal, Value};
use crate::runtime::{FResult, Fault};
use crate::tensor::{DType, Device, TOp, Un};
use ir::Op;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::time::Instant;
use trace::Trace;

pub use trace::escaped;

/// At most this many signatures are kept per staged function (the least recently used goes
/// first) ...
const SIGNATURES_PER_FUNCTION: usize = 8;
/// ... and this many staged functions.
const FUNCTIONS: usize = 64;

/// One item of an argument's signature, in a pre-order walk of its structure. Float leaves
/// are traced (only their kind is part of the signature); Ints, Bools and Strings are part of
/// it by value.
#[derive(Clone, Debug, PartialEq)]
enum Sig {
    Unit,
    Bool(bool),
    Int(i64),
    Str(Rc<String>),
    Float,
    Tensor(DType, Vec<usize>, Device),
    Tuple(usize),
    Record(Rc<[Rc<str>]>),
    Nil,
    Cons,
    Con(u32, usize),
}

struct Compiled {
    sig: Vec<Sig>,
    plan: Rc<exec::Plan>,
}

struct Function {
    /// Held so its address, the cache's key, is not reused while the entry lives.
    _f: Value,
    id: usize,
    used: u64,
    compiled: VecDeque<Compiled>,
}

/// The call being traced: its trace and what the cache entry needs when it ends.
struct Pending {
    trace: Trace,
    key: usize,
    f: Value,
    sig: Vec<Sig>,
    leaves: Vec<Value>,
    started: Instant,
}

/// What `jit f x` does on this call.
pub enum Call {
    /// Runs `f x` as it is: inside a staged function (its operations join that trace) or
    /// with an argument an outer `grad` or `jvp` differentiates.
    Inline,
    /// A compiled program ran: its result.
    Done(Value),
    /// `f` must be traced on this argument (`begin`).
    Trace,
}

/// The machine's staging state: the trace running (one at a time: a `jit` inside a staged
/// function is inlined) and the compiled programs.
pub struct Jit {
    pending: Option<Pending>,
    next_trace: u32,
    functions: HashMap<usize, Function>,
    /// The number the next staged function is shown with (`jit #n` in the logs).
    next_function: usize,
    clock: u64,
    log: bool,
    dump: bool,
    /// The last program compiled, with its heading (the REPL's `:ir` prints it).
    last: Option<(String, Rc<exec::Plan>)>,
}

impl Default for Jit {
    fn default() -> Self {
        Self::new()
    }
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The cache's key for a function value: the address of its closure (or the builtin's index).
fn key_of(f: &Value) -> usize {
    match f {
        Value::Closure(c) => Rc::as_ptr(c) as *const u8 as usize,
        Value::Pap(p) => Rc::as_ptr(p) as *const u8 as usize,
        Value::Cont(k) => Rc::as_ptr(k) as *const u8 as usize,
        Value::Builtin(i) => *i as usize * 2 + 1,
        _ => 0,
    }
}

/// Whether a value is traced (under any perturbations).
pub fn is_staged(v: &Value) -> bool {
    matches!(v, Value::Staged(_)) || (is_ad(v) && matches!(strip(v), Value::Staged(_)))
}

/// Whether a traced value lies anywhere in `v` (a reference's contents and a closure's
/// captures included).
pub fn holds_staged(v: &Value) -> bool {
    match v {
        Value::Staged(_) => true,
        Value::Tracked(_) | Value::Dual(_) => is_staged(v),
        Value::Tuple(vs) => vs.iter().any(holds_staged),
        Value::Record(r) => r.values.iter().any(holds_staged),
        Value::Cons(_) => v.iter_list().any(holds_staged),
        Value::Con(c) => c.args.iter().any(holds_staged),
        Value::Ref(r) => r.try_borrow().is_ok_and(|x| holds_staged(&x)),
        Value::Closure(c) => c.env.iter().any(holds_staged),
        Value::Pap(p) => p.args.iter().any(holds_staged),
        _ => false,
    }
}

/// The located error for a construct staging cannot see through.
pub fn refuse(what: &str) -> Fault {
    Fault::new(format!("jit: cannot stage {what} on a traced value"))
        .help("a staged function may not branch on, print or store its traced Floats and tensors; use `where` for elementwise choices, or call it without `jit`")
}

/// Walks an argument: its signature and its Float and tensor leaves, in order.
fn flatten(x: &Value, sig: &mut Vec<Sig>, leaves: &mut Vec<Value>) -> FResult<()> {
    match x {
        Value::Unit => sig.push(Sig::Unit),
        Value::Bool(b) => sig.push(Sig::Bool(*b)),
        Value::Int(n) => sig.push(Sig::Int(*n)),
        Value::Str(s) => sig.push(Sig::Str(s.clone())),
        Value::Float(_) => {
            sig.push(Sig::Float);
            leaves.push(x.clone());
        }
        Value::Tensor(t) => {
            sig.push(Sig::Tensor(t.dtype(), t.shape().to_vec(), t.device()));
            leaves.push(x.clone());
        }
        Value::Tuple(vs) => {
            sig.push(Sig::Tuple(vs.len()));
            vs.iter().try_for_each(|v| flatten(v, sig, leaves))?;
        }
        Value::Record(r) => {
            sig.push(Sig::Record(r.names.clone()));
            r.values.iter().try_for_each(|v| flatten(v, sig, leaves))?;
        }
        Value::Nil => sig.push(Sig::Nil),
        Value::Cons(_) => {
            for v in x.iter_list() {
                sig.push(Sig::Cons);
                flatten(v, sig, leaves)?;
            }
            sig.push(Sig::Nil);
        }
        Value::Con(c) => {
            sig.push(Sig::Con(c.tag, c.args.len()));
            c.args.iter().try_for_each(|v| flatten(v, sig, leaves))?;
        }
        other => {
            let what = if matches!(other, Value::Ref(_)) { "a reference" } else { "a function" };
            return Err(Fault::new(format!("jit: the argument holds {what}, which staging cannot trace"))
                .help("pass a staged function data (Floats, tensors, Ints, Bools, Strings and structures of them); capture functions in its closure instead"));
        }
    }
    Ok(())
}

/// `x` with its leaves replaced, in order, by `leaves`.
fn rebuild(x: &Value, leaves: &mut impl Iterator<Item = Value>) -> Value {
    match x {
        Value::Float(_) | Value::Tensor(_) => leaves.next().unwrap_or_default(),
        Value::Tuple(vs) => Value::Tuple(Rc::new(vs.iter().map(|v| rebuild(v, leaves)).collect())),
        Value::Record(r) => Value::Record(Rc::new(RecordVal {
            names: r.names.clone(),
            values: r.values.iter().map(|v| rebuild(v, leaves)).collect(),
        })),
        Value::Cons(_) => {
            let items: Vec<Value> = x.iter_list().map(|v| rebuild(v, leaves)).collect();
            Value::list(items.into_iter())
        }
        Value::Con(c) => Value::Con(Rc::new(ConVal {
            tag: c.tag,
            name: c.name.clone(),
            args: c.args.iter().map(|v| rebuild(v, leaves)).collect(),
        })),
        other => other.clone(),
    }
}

/// Whether any leaf of the argument is differentiated or batched (a `grad`, `jvp` or `vmap`
/// outside the `jit`).
fn perturbed(x: &Value) -> bool {
    match x {
        Value::Tracked(_) | Value::Dual(_) | Value::Batched(_) => true,
        Value::Tuple(vs) => vs.iter().any(perturbed),
        Value::Record(r) => r.values.iter().any(perturbed),
        Value::Cons(_) => x.iter_list().any(perturbed),
        Value::Con(c) => c.args.iter().any(perturbed),
        _ => false,
    }
}

fn show_sig(sig: &[Sig]) -> String {
    let leaves: Vec<String> = sig
        .iter()
        .filter_map(|s| match s {
            Sig::Float => Some("Float".to_string()),
            Sig::Tensor(d, s, _) => Some(format!("{} {}", d.name(), crate::tensor::fmt_shape(s))),
            Sig::Int(n) => Some(n.to_string()),
            Sig::Bool(b) => Some(b.to_string()),
            _ => None,
        })
        .collect();
    format!("({})", leaves.join(", "))
}

impl Jit {
    pub fn new() -> Jit {
        Jit {
            pending: None,
            next_trace: 1,
            functions: HashMap::new(),
            next_function: 1,
            clock: 0,
            log: env_flag("DP_JIT_LOG"),
            dump: env_flag("DP_DUMP_IR"),
            last: None,
        }
    }

    /// The program compiled last, as `DP_DUMP_IR` prints it (the REPL's `:ir`).
    pub fn last_ir(&self) -> Option<String> {
        self.last.as_ref().map(|(heading, plan)| format!("{heading}\n{}", plan.prog))
    }

    /// Whether a staged function is being traced.
    #[inline]
    pub fn tracing(&self) -> bool {
        self.pending.is_some()
    }

    fn note(&self, msg: impl FnOnce() -> String) {
        if self.log {
            eprintln!("jit: {}", msg());
        }
    }

    /// `jit f x`: runs the program compiled for `x`'s signature when there is one.
    pub fn call(&mut self, f: &Value, x: &Value) -> FResult<Call> {
        if self.tracing() {
            return Ok(Call::Inline);
        }
        if perturbed(x) {
            self.note(|| "inline (the argument is differentiated or batched outside the jit)".to_string());
            return Ok(Call::Inline);
        }
        let (mut sig, mut leaves) = (Vec::new(), Vec::new());
        flatten(x, &mut sig, &mut leaves)?;
        self.clock += 1;
        let Some(func) = self.functions.get_mut(&key_of(f)) else { return Ok(Call::Trace) };
        func.used = self.clock;
        let Some(at) = func.compiled.iter().position(|c| c.sig == sig) else { return Ok(Call::Trace) };
        // Least recently used last out: the hit moves to the back.
        if let Some(c) = func.compiled.remove(at) {
            func.compiled.push_back(c);
        }
        let id = func.id;
        let Some(c) = func.compiled.back() else { return Ok(Call::Trace) };
        let v = c.plan.run(leaves)?;
        self.note(|| format!("hit #{id} {}", show_sig(&sig)));
        Ok(Call::Done(v))
    }

    /// Starts tracing `f` at `x`: the argument to apply `f` to, its leaves traced.
    pub fn begin(&mut self, f: &Value, x: &Value) -> FResult<Value> {
        let (mut sig, mut leaves) = (Vec::new(), Vec::new());
        flatten(x, &mut sig, &mut leaves)?;
        let mut trace = Trace::new(self.next_trace);
        self.next_trace += 1;
        let traced: Vec<Value> = leaves.iter().map(|l| trace.input(l.clone())).collect();
        let arg = rebuild(x, &mut traced.into_iter());
        self.pending = Some(Pending { trace, key: key_of(f), f: f.clone(), sig, leaves, started: Instant::now() });
        Ok(arg)
    }

    /// The traced function returned `out`: compiles the trace, keeps it and runs it on the
    /// call's own argument.
    pub fn end(&mut self, out: &Value) -> FResult<Value> {
        let Pending { trace, key, f, sig, leaves, started } =
            self.pending.take().ok_or_else(|| Fault::internal("a staged call ended with no trace running"))?;
        let traced = trace.finish(out)?;
        let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
        let (traced_in, optimising) = (ms(started), Instant::now());
        let before = traced.work();
        let prog = fuse::fuse(opt::optimise(traced));
        let (optimised_in, compiling) = (ms(optimising), Instant::now());
        let plan = exec::Plan::new(prog);
        let compiled_in = ms(compiling);
        let n = self.functions.len();
        if !self.functions.contains_key(&key) && n >= FUNCTIONS {
            // The function used longest ago goes.
            if let Some(&old) = self.functions.iter().min_by_key(|(_, f)| f.used).map(|(k, _)| k) {
                self.functions.remove(&old);
            }
        }
        let next_id = self.next_function;
        if !self.functions.contains_key(&key) {
            self.next_function += 1;
        }
        let func = self.functions.entry(key).or_insert_with(|| Function {
            _f: f,
            id: next_id,
            used: 0,
            compiled: VecDeque::new(),
        });
        func.used = self.clock;
        let id = func.id;
        let heading = format!("jit #{id} {}:", show_sig(&sig));
        if self.dump {
            eprint!("{heading}\n{}", plan.prog);
        }
        let result = plan.run(leaves);
        let after = plan.prog.work();
        if func.compiled.len() >= SIGNATURES_PER_FUNCTION {
            func.compiled.pop_front();
        }
        let elapsed = started.elapsed().as_secs_f64() * 1e3;
        let native = match plan.native_note.as_str() {
            "" => String::new(),
            note => format!("; {note}"),
        };
        let line = format!(
            "trace #{id} {} in {elapsed:.2} ms (traced in {traced_in:.2} ms, optimised in {optimised_in:.2} ms, compiled in {compiled_in:.2} ms{native}): {before} operations, {after} after optimisation",
            show_sig(&sig)
        );
        let plan = Rc::new(plan);
        self.last = Some((heading, plan.clone()));
        func.compiled.push_back(Compiled { sig, plan });
        self.note(|| line);
        result
    }

    /// The traced call was unwound by a fault: its trace is dropped.
    pub fn abort(&mut self) {
        self.pending = None;
    }

    fn trace(&mut self) -> FResult<&mut Trace> {
        self.pending.as_mut().map(|p| &mut p.trace).ok_or_else(escaped)
    }

    /// `a p b` with a traced operand.
    pub fn binary(&mut self, p: crate::core::Prim, a: Value, b: Value) -> FResult<Value> {
        self.trace()?.emit(Op::Bin(p), [a, b])
    }

    /// A math function of a traced value.
    pub fn unary(&mut self, op: Un, x: Value) -> FResult<Value> {
        self.trace()?.emit(Op::Un(op), [x])
    }

    /// A tensor operation with a traced operand.
    pub fn forward(&mut self, op: &TOp, args: &[Value]) -> FResult<Value> {
        self.trace()?.emit(Op::T(Box::new(op.clone())), args.to_vec())
    }
}
