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
//! refused with a located error (`Fault::unstageable`, a `FaultKind::Staging` fault).
//!
//! Modules: `ir` (the program), `trace` (emitting it), `opt` (simplification, common
//! subexpressions, dead code), `fuse` (matrix products as single GEMM calls), `exec` (running
//! it).

mod chains;
pub mod exec;
mod fuse;
pub mod ir;
mod native;
pub mod opt;
mod reroll;
mod trace;
mod vjp;

use crate::runtime::perturbed::{is_ad, strip, AdjFrame, Tracked};
use crate::runtime::stack::Frame;
use crate::runtime::value::{ConVal, RecordVal, Value};
use crate::runtime::{FResult, Fault};
use crate::tensor::{DType, Device, TOp, Un};
use ir::Op;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::rc::Rc;
use std::time::Instant;
use trace::Trace;

pub use trace::escaped;

/// At most this many signatures are kept per staged function (the least recently used goes
/// first) ...
const SIGNATURES_PER_FUNCTION: usize = 8;
/// ... and this many staged functions.
const FUNCTIONS: usize = 64;
/// A staged function traced this many times whose calls have hit its cache fewer than half
/// as many times runs unstaged from then on: its signatures keep changing (a recursive function over
/// many different trees, say), and tracing and compiling each call cost far more than running
/// it (300 trees: 36 s staged, 0.3 s unstaged, before this rule).
const TRACES_BEFORE_UNSTAGED: u64 = 32;

/// Why a call runs unstaged when the staged function captures a perturbed value
/// (`DP_JIT_LOG`).
const CAPTURES: &str = "the staged function captures a value a `grad`, `jvp` or `vmap` outside the jit perturbs";

/// Why a call whose argument is perturbed runs unstaged (`DP_JIT_LOG`), but for a capture.
const UNSTAGED: &str = "the argument is differentiated by nested levels or a `jvp`, or batched, outside the jit";

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
    /// A constructor: its tag, its number of arguments, and its name (for the log).
    Con(u32, usize, Rc<str>),
}

struct Compiled {
    sig: Vec<Sig>,
    plan: Rc<exec::Plan>,
}

/// A signature's programs for calls an outer `grad` differentiates (vjp.rs); `mask` says
/// which of the argument's leaves it tracks.
struct CompiledVjp {
    sig: Vec<Sig>,
    mask: Vec<bool>,
    vjp: Rc<vjp::Vjp>,
}

struct Function {
    /// Held so its address, the cache's key, is not reused while the entry lives.
    _f: Value,
    id: usize,
    used: u64,
    compiled: VecDeque<Compiled>,
    vjps: VecDeque<CompiledVjp>,
    /// Whether `f` is known to capture no value an outer level perturbs (it captures no
    /// reference, so that cannot change).
    captures_plain: bool,
    /// Signatures traced and calls that found theirs compiled (`TRACES_BEFORE_UNSTAGED`).
    traces: u64,
    hits: u64,
    /// Why every call runs `f` as it is, once that is decided: the cache does not pay
    /// (`CHANGING`), or a trace met what a compiled program cannot repeat (`Pending::effect`).
    unstaged: Option<&'static str>,
}

/// Why a function whose cache does not pay runs unstaged.
const CHANGING: &str = "its signatures keep changing";

impl Function {
    /// After a trace: `keep` stores its program in a cache unless the trace met an effect
    /// (then its program serves that call only); says whether the function runs unstaged
    /// from now on.
    fn traced(&mut self, effect: Option<&'static str>, keep: impl FnOnce(&mut Function)) -> GaveUp {
        if let Some(what) = effect {
            self.unstaged = Some(what);
            return GaveUp::Effect(what);
        }
        keep(self);
        self.traces += 1;
        if self.unstaged.is_none() && self.traces >= TRACES_BEFORE_UNSTAGED && self.hits * 2 < self.traces {
            self.unstaged = Some(CHANGING);
            return GaveUp::Changing { traces: self.traces, hits: self.hits };
        }
        GaveUp::No
    }
}

/// Whether a function just traced runs unstaged from now on, and why.
enum GaveUp {
    No,
    /// Its trace met an effect (`Pending::effect`).
    Effect(&'static str),
    /// Its cache does not pay (`TRACES_BEFORE_UNSTAGED`).
    Changing {
        traces: u64,
        hits: u64,
    },
}

/// The argument of a call an outer `grad` differentiates: its values at that level, and the
/// cells of the leaves it tracks.
pub struct VjpSite {
    tag: u32,
    x: Value,
    cells: Vec<Rc<Tracked>>,
    mask: Vec<bool>,
}

/// The trace of such a call: the inner level `f` runs under, its cells for the tracked
/// leaves, and `f`'s result once it has returned.
struct PendingVjp {
    site: VjpSite,
    level: u32,
    inner: Vec<Rc<Tracked>>,
    result: Option<Value>,
}

/// The call being traced: its trace and what the cache entry needs when it ends.
struct Pending {
    trace: Trace,
    key: usize,
    f: Value,
    sig: Vec<Sig>,
    leaves: Vec<Value>,
    started: Instant,
    vjp: Option<PendingVjp>,
    /// The first thing the traced call did that its compiled program would not do again:
    /// read or write a reference made before the trace, or run a `catch` (whose handler
    /// would run, or not, on other data). Its program then serves this call only.
    effect: Option<&'static str>,
    /// The references made during the trace (their addresses): the call's own state, which
    /// each run of the program makes afresh.
    own_refs: HashSet<usize>,
}

/// What `jit f x` does on this call.
pub enum Call {
    /// Runs `f x` as it is: inside a staged function (its operations join that trace), or
    /// with an argument that nested levels, a `jvp` or a `vmap` outside perturb.
    Inline,
    /// A compiled program ran: its result.
    Done(Value),
    /// A staged call the outer `grad` of `tag` differentiates ran its forward program: its
    /// result (tracked at `tag`) and the record to push onto that level.
    Record { y: Value, tag: u32, frame: AdjFrame },
    /// `f` must be traced on this argument (`begin`).
    Trace,
    /// `f` must be traced on this argument under a `grad` (`begin_vjp`).
    TraceVjp(VjpSite),
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
    /// The last programs compiled, with their headings (the REPL's `:ir` prints them).
    last: Vec<(String, Rc<exec::Plan>)>,
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
    let traced = |v: &Value| matches!(v, Value::Staged(_) | Value::StagedFloat(_));
    traced(v) || (is_ad(v) && traced(&strip(v)))
}

/// Whether a traced value lies anywhere in `v` (a reference's contents and a closure's
/// captures included).
pub fn holds_staged(v: &Value) -> bool {
    match v {
        Value::Staged(_) | Value::StagedFloat(_) => true,
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
            sig.push(Sig::Con(c.tag, c.args.len(), c.name.clone()));
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

/// `x` at the `grad` of `tag` (its leaves tracked there replaced by their values), with the
/// cells of those leaves and which leaves they are, in `flatten`'s order; `None` when another
/// level perturbs a leaf, or a leaf's value at `tag` is perturbed itself (nested levels).
fn peel(x: &Value, tag: u32, cells: &mut Vec<Rc<Tracked>>, mask: &mut Vec<bool>) -> Option<Value> {
    let mut all = |vs: &[Value]| vs.iter().map(|v| peel(v, tag, cells, mask)).collect::<Option<Vec<_>>>();
    Some(match x {
        Value::Float(_) | Value::Tensor(_) => {
            mask.push(false);
            x.clone()
        }
        Value::Tracked(t) if t.tag == tag && matches!(t.primal, Value::Float(_) | Value::Tensor(_)) => {
            mask.push(true);
            cells.push(t.clone());
            t.primal.clone()
        }
        Value::Tracked(_) | Value::Dual(_) | Value::Batched(_) | Value::Staged(_) | Value::StagedFloat(_) => {
            return None
        }
        Value::Tuple(vs) => Value::Tuple(Rc::new(all(vs)?)),
        Value::Record(r) => Value::Record(Rc::new(RecordVal { names: r.names.clone(), values: all(&r.values)? })),
        Value::Cons(_) => {
            let items: Vec<Value> = x.iter_list().cloned().collect();
            Value::list(all(&items)?.into_iter())
        }
        Value::Con(c) => Value::Con(Rc::new(ConVal { tag: c.tag, name: c.name.clone(), args: all(&c.args)? })),
        other => other.clone(),
    })
}

/// Whether a perturbed value lies anywhere in `v` (in a closure's captures too), noting in
/// `refs` whether a reference does (whose contents may change).
fn holds_perturbed(v: &Value, refs: &mut bool) -> bool {
    match v {
        Value::Tracked(_) | Value::Dual(_) | Value::Batched(_) => true,
        Value::Tuple(vs) => vs.iter().any(|v| holds_perturbed(v, refs)),
        Value::Record(r) => r.values.iter().any(|v| holds_perturbed(v, refs)),
        Value::Cons(_) => v.iter_list().any(|v| holds_perturbed(v, refs)),
        Value::Con(c) => c.args.iter().any(|v| holds_perturbed(v, refs)),
        Value::Ref(r) => {
            *refs = true;
            r.try_borrow().is_ok_and(|x| holds_perturbed(&x, refs))
        }
        Value::Closure(c) => c.env.iter().any(|v| holds_perturbed(v, refs)),
        Value::Pap(p) => p.args.iter().any(|v| holds_perturbed(v, refs)),
        // A captured continuation holds what its frames do: their values and closures.
        Value::Cont(k) => k.segments.iter().any(|seg| {
            seg.stack.iter().any(|v| holds_perturbed(v, refs))
                || seg.frames.iter().any(|fr| match fr {
                    Frame::Dp { clo, .. } => clo.env.iter().any(|v| holds_perturbed(v, refs)),
                    Frame::ApplyRest(rest) => rest.0.iter().any(|v| holds_perturbed(v, refs)),
                })
        }),
        _ => false,
    }
}

/// `y` at `level` (see `Jit::seed`), walked in the order `Trace::finish` numbers outputs in.
fn seed_leaves(y: &Value, level: u32, trace: &mut Trace, seeds: &mut Vec<(Rc<Tracked>, Value)>) -> FResult<Value> {
    let mut all = |vs: &[Value]| vs.iter().map(|v| seed_leaves(v, level, trace, seeds)).collect::<FResult<Vec<_>>>();
    Ok(match y {
        Value::Tracked(t) if t.tag == level => {
            if let Some(zero) = trace.zero_of(&t.primal) {
                let adjoint = trace.input(zero)?;
                seeds.push((t.clone(), adjoint));
            }
            t.primal.clone()
        }
        Value::Staged(_) | Value::StagedFloat(_) => {
            if let Some(zero) = trace.zero_of(y) {
                // An output no tracked leaf reaches: its adjoint is an input nothing reads.
                trace.input(zero)?;
            }
            y.clone()
        }
        Value::Tuple(vs) => Value::Tuple(Rc::new(all(vs)?)),
        Value::Record(r) => Value::Record(Rc::new(RecordVal { names: r.names.clone(), values: all(&r.values)? })),
        Value::Nil | Value::Cons(_) => {
            let items: Vec<Value> = y.iter_list().cloned().collect();
            Value::list(all(&items)?.into_iter())
        }
        Value::Con(c) => Value::Con(Rc::new(ConVal { tag: c.tag, name: c.name.clone(), args: all(&c.args)? })),
        other => other.clone(),
    })
}

fn native_note(plan: &exec::Plan) -> String {
    match plan.native_note.as_str() {
        "" => String::new(),
        note => format!("; {note}"),
    }
}

/// The longest signature `DP_JIT_LOG` shows before cutting it short.
const SHOWN_SIG: usize = 240;

/// Which of a call's Float and tensor leaves (numbered from 1, in the signature's order) the
/// outer `grad` differentiates: two traces of one signature differ in that alone.
fn show_mask(mask: &[bool]) -> String {
    let on: Vec<String> = mask.iter().enumerate().filter(|(_, &d)| d).map(|(i, _)| (i + 1).to_string()).collect();
    let leaves = if on.len() == 1 { "leaf" } else { "leaves" };
    format!("of {leaves} {} of {}", on.join(", "), mask.len())
}

/// A signature as `DP_JIT_LOG` shows it: the argument's structure in dp's syntax with its
/// Floats and tensors by kind (`(Float, Node (Leaf Float) (Leaf Float))`), so that two
/// traces differing only in a constructor, a list's length or an Int read differently.
fn show_sig(sig: &[Sig]) -> String {
    let mut out = String::new();
    let mut at = 0;
    match sig.first() {
        // A tuple argument's parentheses are the line's own.
        Some(Sig::Tuple(n)) => {
            at = 1;
            show_items(sig, &mut at, *n, &mut out);
        }
        _ => show_item(sig, &mut at, false, &mut out),
    }
    if out.chars().count() > SHOWN_SIG {
        out = out.chars().take(SHOWN_SIG).collect::<String>() + "…";
    }
    format!("({out})")
}

fn show_items(sig: &[Sig], at: &mut usize, n: usize, out: &mut String) {
    for i in 0..n {
        if i > 0 {
            out.push_str(", ");
        }
        show_item(sig, at, false, out);
    }
}

/// The item at `at` and those it holds; `arg`: it is a constructor's argument, so an item of
/// several words goes in parentheses.
fn show_item(sig: &[Sig], at: &mut usize, arg: bool, out: &mut String) {
    let Some(item) = sig.get(*at) else { return };
    *at += 1;
    let (open, close) = if arg { ("(", ")") } else { ("", "") };
    match item {
        Sig::Unit => out.push_str("()"),
        Sig::Bool(b) => out.push_str(&b.to_string()),
        Sig::Int(n) if *n < 0 && arg => out.push_str(&format!("({n})")),
        Sig::Int(n) => out.push_str(&n.to_string()),
        Sig::Str(s) => out.push_str(&format!("{:?}", s.as_str())),
        Sig::Float => out.push_str("Float"),
        Sig::Tensor(d, shape, _) => {
            out.push_str(&format!("{open}{} {}{close}", d.name(), crate::tensor::fmt_shape(shape)))
        }
        Sig::Tuple(n) => {
            out.push('(');
            show_items(sig, at, *n, out);
            out.push(')');
        }
        Sig::Record(names) => {
            out.push('{');
            for (i, name) in names.iter().enumerate() {
                out.push_str(if i > 0 { ", " } else { "" });
                out.push_str(&format!("{name} = "));
                show_item(sig, at, false, out);
            }
            out.push('}');
        }
        Sig::Nil => out.push_str("[]"),
        Sig::Cons => {
            out.push('[');
            show_item(sig, at, false, out);
            while let Some(Sig::Cons) = sig.get(*at) {
                *at += 1;
                out.push_str(", ");
                show_item(sig, at, false, out);
            }
            *at += 1; // the list's Nil
            out.push(']');
        }
        Sig::Con(_, 0, name) => out.push_str(name),
        Sig::Con(_, n, name) => {
            out.push_str(open);
            out.push_str(name);
            for _ in 0..*n {
                out.push(' ');
                show_item(sig, at, true, out);
            }
            out.push_str(close);
        }
    }
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
            last: Vec::new(),
        }
    }

    /// The program compiled last, as `DP_DUMP_IR` prints it (the REPL's `:ir`).
    pub fn last_ir(&self) -> Option<String> {
        let shown: Vec<String> = self.last.iter().map(|(heading, plan)| format!("{heading}\n{}", plan.prog)).collect();
        (!shown.is_empty()).then(|| shown.concat())
    }

    /// Under `DP_JIT_PROFILE`, drops the compiled programs so that each prints its profile
    /// (a session whose process ends leaves its memory to the system, plans included).
    pub fn print_profiles(&mut self) {
        if env_flag("DP_JIT_PROFILE") {
            self.functions.clear();
            self.last.clear();
        }
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
    /// `grad` is the running level when it is the only one and a `grad`.
    pub fn call(&mut self, f: &Value, x: &Value, grad: Option<u32>) -> FResult<Call> {
        if self.tracing() {
            return Ok(Call::Inline);
        }
        self.clock += 1;
        let clock = self.clock;
        let unstaged = self.functions.get_mut(&key_of(f)).and_then(|func| {
            let why = func.unstaged?;
            func.used = clock;
            Some((func.id, why))
        });
        if let Some((id, why)) = unstaged {
            self.note(|| format!("inline #{id} (unstaged: {why})"));
            return Ok(Call::Inline);
        }
        if perturbed(x) {
            return match grad.ok_or(UNSTAGED).and_then(|tag| self.vjp_site(f, x, tag)) {
                Ok(site) => self.call_vjp(f, site),
                Err(why) => {
                    self.note(|| format!("inline ({why})"));
                    Ok(Call::Inline)
                }
            };
        }
        if self.captures_perturbed(f) {
            self.note(|| format!("inline ({CAPTURES})"));
            return Ok(Call::Inline);
        }
        let (mut sig, mut leaves) = (Vec::new(), Vec::new());
        flatten(x, &mut sig, &mut leaves)?;
        let Some(func) = self.functions.get_mut(&key_of(f)) else { return Ok(Call::Trace) };
        func.used = self.clock;
        let Some(at) = func.compiled.iter().position(|c| c.sig == sig) else { return Ok(Call::Trace) };
        func.hits += 1;
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
        self.begin_with(f, x, None)
    }

    /// `begin`, with the traced leaves `vjp.site.mask` marks tracked at `vjp.level`.
    fn begin_with(&mut self, f: &Value, x: &Value, mut vjp: Option<PendingVjp>) -> FResult<Value> {
        let (mut sig, mut leaves) = (Vec::new(), Vec::new());
        flatten(x, &mut sig, &mut leaves)?;
        let mut trace = Trace::new(self.next_trace);
        self.next_trace += 1;
        let mut traced: Vec<Value> = leaves.iter().map(|l| trace.input(l.clone())).collect::<FResult<_>>()?;
        if let Some(v) = vjp.as_mut() {
            for (leaf, _) in traced.iter_mut().zip(&v.site.mask).filter(|(_, &tracked)| tracked) {
                let cell = Rc::new(Tracked { tag: v.level, primal: std::mem::take(leaf), adj: RefCell::new(None) });
                v.inner.push(cell.clone());
                *leaf = Value::Tracked(cell);
            }
        }
        let arg = rebuild(x, &mut traced.into_iter());
        self.pending = Some(Pending {
            trace,
            key: key_of(f),
            f: f.clone(),
            sig,
            leaves,
            started: Instant::now(),
            vjp,
            effect: None,
            own_refs: HashSet::new(),
        });
        Ok(arg)
    }

    /// The traced function returned `out`: compiles the trace, keeps it and runs it on the
    /// call's own argument.
    pub fn end(&mut self, out: &Value) -> FResult<Call> {
        let mut pending =
            self.pending.take().ok_or_else(|| Fault::internal("a staged call ended with no trace running"))?;
        if let Some(vjp) = pending.vjp.take() {
            return self.end_vjp(pending, vjp);
        }
        let Pending { trace, key, f, sig, leaves, started, effect, .. } = pending;
        let traced = trace.finish(out)?;
        let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
        let (traced_in, optimising) = (ms(started), Instant::now());
        let before = traced.work();
        let prog = fuse::fuse(opt::optimise(traced));
        let (optimised_in, compiling) = (ms(optimising), Instant::now());
        let plan = exec::Plan::new(prog);
        let compiled_in = ms(compiling);
        let func = self.function(key, f);
        let id = func.id;
        let heading = format!("jit #{id} {}:", show_sig(&sig));
        let result = plan.run(leaves);
        let after = plan.prog.work();
        let elapsed = started.elapsed().as_secs_f64() * 1e3;
        let line = format!(
            "trace #{id} {} in {elapsed:.2} ms (traced in {traced_in:.2} ms, optimised in {optimised_in:.2} ms, compiled in {compiled_in:.2} ms{}): {before} operations, {after} after optimisation",
            show_sig(&sig),
            native_note(&plan)
        );
        let plan = Rc::new(plan);
        let gave_up = func.traced(effect, |func| {
            if func.compiled.len() >= SIGNATURES_PER_FUNCTION {
                func.compiled.pop_front();
            }
            func.compiled.push_back(Compiled { sig, plan: plan.clone() });
        });
        self.show(vec![(heading, plan)]);
        self.note(|| line);
        self.note_unstaged(id, gave_up);
        Ok(Call::Done(result?))
    }

    /// Says in the log when function `id`, just traced, runs unstaged from now on.
    fn note_unstaged(&self, id: usize, gave_up: GaveUp) {
        match gave_up {
            GaveUp::Effect(what) => self
                .note(|| format!("#{id}: {what}; its program served this call only, and its later calls run unstaged")),
            GaveUp::Changing { traces, hits } => self.note(|| {
                format!("#{id}: {traces} signatures traced and {hits} calls hit; its later calls run unstaged")
            }),
            GaveUp::No => {}
        }
    }

    /// The traced call read or wrote reference `r` (`write` says which): an effect unless
    /// the trace made `r`.
    pub fn touch_ref(&mut self, r: &Rc<RefCell<Value>>, write: bool) {
        if let Some(p) = self.pending.as_mut() {
            if p.effect.is_none() && !p.own_refs.contains(&(Rc::as_ptr(r) as usize)) {
                p.effect = Some(if write {
                    "it writes a reference made outside it"
                } else {
                    "it reads a reference made outside it"
                });
            }
        }
    }

    /// Whether reference `r` is the traced call's own state, which may hold its traced values:
    /// the call (the innermost) made it, and has touched no reference made outside it, through
    /// which `r` could have escaped (`cell := [r]`, then `r := x`).
    pub fn owns(&self, r: &Rc<RefCell<Value>>) -> bool {
        self.pending.as_ref().is_some_and(|p| p.effect.is_none() && p.own_refs.contains(&(Rc::as_ptr(r) as usize)))
    }

    /// The traced call made reference `r`.
    pub fn made_ref(&mut self, r: &Rc<RefCell<Value>>) {
        if let Some(p) = self.pending.as_mut() {
            p.own_refs.insert(Rc::as_ptr(r) as usize);
        }
    }

    /// The traced call ran a `catch`.
    pub fn ran_catch(&mut self) {
        if let Some(p) = self.pending.as_mut() {
            p.effect.get_or_insert("it runs a `catch`");
        }
    }

    /// The cache entry of the function keyed `key`, made (and another evicted) if need be.
    fn function(&mut self, key: usize, f: Value) -> &mut Function {
        if !self.functions.contains_key(&key) {
            if self.functions.len() >= FUNCTIONS {
                // The function used longest ago goes.
                if let Some(&old) = self.functions.iter().min_by_key(|(_, f)| f.used).map(|(k, _)| k) {
                    self.functions.remove(&old);
                }
            }
            self.next_function += 1;
        }
        let id = self.next_function - 1;
        let func = self.functions.entry(key).or_insert_with(|| Function {
            _f: f,
            id,
            used: 0,
            compiled: VecDeque::new(),
            vjps: VecDeque::new(),
            captures_plain: false,
            traces: 0,
            hits: 0,
            unstaged: None,
        });
        func.used = self.clock;
        func
    }

    /// Keeps the programs just compiled for `:ir`, and prints them under `DP_DUMP_IR`.
    fn show(&mut self, programs: Vec<(String, Rc<exec::Plan>)>) {
        if self.dump {
            for (heading, plan) in &programs {
                eprint!("{heading}\n{}", plan.prog);
            }
        }
        self.last = programs;
    }

    /// The argument's values at the `grad` of `tag` and its cells there, when staging can
    /// differentiate the call: that level alone perturbs the argument, each perturbed leaf
    /// directly, and `f` captures nothing perturbed (its records would go to that level, not
    /// into the program).
    fn vjp_site(&mut self, f: &Value, x: &Value, tag: u32) -> Result<VjpSite, &'static str> {
        let (mut cells, mut mask) = (Vec::new(), Vec::new());
        let x = peel(x, tag, &mut cells, &mut mask).ok_or(UNSTAGED)?;
        if self.captures_perturbed(f) {
            return Err(CAPTURES);
        }
        Ok(VjpSite { tag, x, cells, mask })
    }

    /// Whether `f` captures a value a level outside the `jit` perturbs (a `grad`, `jvp` or
    /// `vmap` running there): its trace would hand that level traced values. A function found
    /// to capture none, and no reference, is remembered as such (its captures cannot change).
    fn captures_perturbed(&mut self, f: &Value) -> bool {
        let key = key_of(f);
        if self.functions.get(&key).is_some_and(|func| func.captures_plain) {
            return false;
        }
        let mut refs = false;
        if holds_perturbed(f, &mut refs) {
            return true;
        }
        if let (false, Some(func)) = (refs, self.functions.get_mut(&key)) {
            func.captures_plain = true;
        }
        false
    }

    /// A call the outer `grad` differentiates: its compiled programs' forward run and record,
    /// or a trace.
    fn call_vjp(&mut self, f: &Value, site: VjpSite) -> FResult<Call> {
        let (mut sig, mut leaves) = (Vec::new(), Vec::new());
        flatten(&site.x, &mut sig, &mut leaves)?;
        let Some(func) = self.functions.get_mut(&key_of(f)) else { return Ok(Call::TraceVjp(site)) };
        func.used = self.clock;
        let Some(at) = func.vjps.iter().position(|c| c.sig == sig && c.mask == site.mask) else {
            return Ok(Call::TraceVjp(site));
        };
        func.hits += 1;
        if let Some(c) = func.vjps.remove(at) {
            func.vjps.push_back(c);
        }
        let id = func.id;
        let Some(c) = func.vjps.back() else { return Ok(Call::TraceVjp(site)) };
        let (y, frame) = c.vjp.call(leaves, site.cells, site.tag)?;
        self.note(|| format!("hit #{id} {} under grad {}", show_sig(&sig), show_mask(&site.mask)));
        Ok(Call::Record { y, tag: site.tag, frame })
    }

    /// Starts tracing `f` at a call the outer `grad` differentiates: the argument to apply
    /// `f` to, its leaves traced, and those that level tracks tracked again at `level`, a
    /// `grad` the machine runs inside the trace (its prompt's end calls `seed`).
    pub fn begin_vjp(&mut self, f: &Value, site: VjpSite, level: u32) -> FResult<Value> {
        let x = site.x.clone();
        self.begin_with(f, &x, Some(PendingVjp { site, level, inner: Vec::new(), result: None }))
    }

    /// The level of the `grad` running inside the trace of a differentiated call.
    pub fn vjp_level(&self) -> Option<u32> {
        self.pending.as_ref()?.vjp.as_ref().map(|v| v.level)
    }

    /// `f` returned `y` under that level: each traced leaf of `y` gets a new input of the
    /// trace, its adjoint, which seeds the level's cell the leaf is (the pairs returned, for
    /// the machine to add). The level's backward pass runs next, traced.
    pub fn seed(&mut self, y: &Value) -> FResult<Vec<(Rc<Tracked>, Value)>> {
        let p = self.pending.as_mut().ok_or_else(escaped)?;
        let vjp = p.vjp.as_mut().ok_or_else(|| Fault::internal("seeding a staged call that no grad differentiates"))?;
        let mut seeds = Vec::new();
        let result = seed_leaves(y, vjp.level, &mut p.trace, &mut seeds)?;
        vjp.result = Some(result);
        Ok(seeds)
    }

    /// The traced backward pass has run: splits the program of (x, ȳ) ↦ (y, x̄) (vjp.rs),
    /// keeps the two programs and runs the forward one on the call's argument.
    fn end_vjp(&mut self, pending: Pending, vjp: PendingVjp) -> FResult<Call> {
        let Pending { trace, key, f, sig, leaves, started, effect, .. } = pending;
        let PendingVjp { site, inner, result, .. } = vjp;
        let y = result.ok_or_else(|| Fault::internal("a staged call's grad ended unseeded"))?;
        // Read off the cells (not `grad`'s result, which leaves out the leaves inside
        // variants); `()` where nothing reaches a leaf, so that its cell is left alone rather
        // than added a zero on every call (a weight the cell does not use).
        let grads: Vec<Value> = inner.iter().map(|c| c.adj.borrow_mut().take().unwrap_or(Value::Unit)).collect();
        let traced = trace.finish(&Value::Tuple(Rc::new(vec![y, Value::Tuple(Rc::new(grads))])))?;
        let traced_in = started.elapsed().as_secs_f64() * 1e3;
        let before = traced.work();
        let vjp = Rc::new(vjp::split(opt::optimise(traced), leaves.len())?);
        let func = self.function(key, f);
        let id = func.id;
        let called = vjp.call(leaves, site.cells, site.tag);
        let elapsed = started.elapsed().as_secs_f64() * 1e3;
        let (fw, bw) = (&vjp.forward, &vjp.backward);
        let line = format!(
            "trace #{id} {} under grad {} in {elapsed:.2} ms (traced in {traced_in:.2} ms{}{}): {before} operations, {} forward and {} backward after optimisation, {} residuals",
            show_sig(&sig),
            show_mask(&site.mask),
            native_note(fw),
            native_note(bw),
            fw.prog.work(),
            bw.prog.work(),
            vjp.residuals
        );
        let shown = vec![
            (format!("jit #{id} {} forward:", show_sig(&sig)), vjp.forward.clone()),
            (format!("jit #{id} {} backward:", show_sig(&sig)), vjp.backward.clone()),
        ];
        let gave_up = func.traced(effect, |func| {
            if func.vjps.len() >= SIGNATURES_PER_FUNCTION {
                func.vjps.pop_front();
            }
            func.vjps.push_back(CompiledVjp { sig, mask: site.mask, vjp });
        });
        self.show(shown);
        self.note(|| line);
        self.note_unstaged(id, gave_up);
        let (y, frame) = called?;
        Ok(Call::Record { y, tag: site.tag, frame })
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
