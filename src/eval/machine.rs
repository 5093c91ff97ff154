//! The abstract machine (DESIGN.md principles 1–2). Its continuation is data: a segmented
//! stack. The running segment's frames and values live in `frames`/`stack`; the segments
//! below it (each ended by a delimiter) wait in `segs`. `reset` starts a segment, `shift`
//! detaches the segments above the nearest `reset` in O(number of segments), and resuming a
//! continuation pushes them back (copying only when the continuation is shared, so multi-shot
//! use stays correct). The Rust stack never grows with the dp program.

use crate::ad;
use crate::builtins::{B, TABLE};
use crate::core::{Const, Pattern, Prim, VarRef};
use crate::diagnostic::{Diagnostic, Phase};
use crate::runtime::code::{Function, IntOp, Op};
use crate::runtime::perturbed::{is_ad, strip, AdjFrame, CustomCall, GradState, Rule, RuleCall};
use crate::runtime::stack::{Delim, Frame, Segment};
use crate::runtime::value::{self, Closure, ConVal, Cont, Pap, RecordVal, Value};
use crate::runtime::{FResult, Fault, FaultKind};
use crate::source::Span;
use crate::stage;
use crate::tensor::{TOp, Un};
use std::io::Write;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What the machine does next.
enum Action {
    Apply(Value, Vec<Value>, Span),
    Return(Value),
}

enum Next {
    /// Closure, pc, base, floor.
    Run(Rc<Closure>, usize, usize, usize),
    Done(Value),
}

/// What a builtin produced: a value, or a transfer of control.
pub enum BuiltinOut {
    Value(Value),
    Control(Control),
}

pub enum Control {
    Reset(Value),
    Shift(Value),
    Grad {
        f: Value,
        x: Value,
        with_value: bool,
    },
    Jvp {
        f: Value,
        x: Value,
        v: Value,
    },
    Vmap {
        f: Value,
        x: Value,
    },
    /// `custom_vjp`, `custom_jvp`, `checkpoint`.
    Custom {
        f: Value,
        rule: Rule,
        x: Value,
    },
    Exit(i32),
    Catch {
        body: Value,
        handler: Value,
    },
    Jit {
        f: Value,
        x: Value,
    },
}

/// A running `grad` (its prompt), `jvp` or `vmap` on the segmented stack.
#[derive(Clone, Copy)]
struct Level {
    tag: u32,
    /// The index of the segment this level's delimiter ends (`segs.len()`: the running one).
    pos: usize,
    grad: bool,
    /// A `vmap`'s level (its values are batched, not perturbed).
    batch: bool,
}

/// The message of a branch on a value that differs across a `vmap`'s examples.
const BATCHED_BRANCH: &str = "cannot branch on a condition batched by `vmap`: each example may take another way";

/// Raised when the program calls `exit`.
pub struct ExitRequest(pub i32);

pub struct Machine {
    pub globals: Vec<Value>,
    stack: Vec<Value>,
    frames: Vec<Frame>,
    delim: Delim,
    segs: Vec<Segment>,
    /// Frames held by the segments in `segs`.
    seg_frames: usize,
    /// The running differentiation levels, bottom first: each `grad` prompt or `jvp` delimiter
    /// on the stack with the position of its segment (`segs.len()` for the running one). Kept
    /// beside the segments so that finding a level's handler, whether it is live and which of
    /// two is inner cost O(levels), however many `reset`s lie between them.
    levels: Vec<Level>,
    pub stack_limit: usize,
    pub interrupt: Arc<AtomicBool>,
    pub fuel: Option<u64>,
    pub next_tag: u32,
    pub args: Vec<String>,
    pub out: Box<dyn Write>,
    pub exit_code: Option<i32>,
    /// Where the progress builtins report; the session chooses it (the machine draws nothing).
    pub reporter: Box<dyn super::builtins::progress::Reporter>,
    /// The emptied adjoint-frame vector of the last finished `grad`, kept for its capacity.
    pub spare_adjoint_frames: Vec<AdjFrame>,
    /// `jit`'s trace and compiled programs (src/stage/).
    pub jit: stage::Jit,
}

/// Default limit on dp call depth: a frame costs ~150 bytes with its values, so this keeps a
/// runaway recursion well under 4 GiB.
pub const DEFAULT_STACK_LIMIT: usize = 10_000_000;

impl Default for Machine {
    fn default() -> Self {
        Self::new()
    }
}

impl Machine {
    pub fn new() -> Machine {
        Machine {
            globals: Vec::new(),
            stack: Vec::new(),
            frames: Vec::new(),
            delim: Delim::Base,
            segs: Vec::new(),
            seg_frames: 0,
            levels: Vec::new(),
            stack_limit: DEFAULT_STACK_LIMIT,
            interrupt: Arc::new(AtomicBool::new(false)),
            fuel: None,
            next_tag: 1,
            args: Vec::new(),
            out: Box::new(std::io::stdout()),
            exit_code: None,
            reporter: Box::new(super::builtins::progress::Silent),
            spare_adjoint_frames: Vec::new(),
            jit: stage::Jit::new(),
        }
    }

    /// Runs a compiled top-level item.
    pub fn run(&mut self, func: Rc<Function>, nglobals: usize) -> Result<Value, Diagnostic> {
        if self.globals.len() < nglobals {
            self.globals.resize(nglobals, Value::Unit);
        }
        self.stack.clear();
        self.frames.clear();
        self.segs.clear();
        self.levels.clear();
        self.seg_frames = 0;
        self.delim = Delim::Base;
        self.jit.abort();
        let clo = Rc::new(Closure { func, env: Vec::new() });
        self.stack.push(Value::Closure(clo.clone()));
        let nlocals = clo.func.nlocals as usize;
        self.stack.resize(1 + nlocals, Value::Unit);
        let r = self.exec(clo, 0, 1, 0);
        let _ = self.out.flush();
        if r.is_err() {
            self.stack.clear();
            self.frames.clear();
            self.segs.clear();
            self.levels.clear();
            self.seg_frames = 0;
        }
        r
    }

    fn depth(&self) -> usize {
        self.frames.len() + self.seg_frames
    }

    fn locate(&self, fault: Fault, clo: &Rc<Closure>, pc: usize) -> Diagnostic {
        let span = clo.func.spans.get(pc.saturating_sub(1)).copied().unwrap_or(clo.func.span);
        let phase = if fault.is_internal() { Phase::Internal } else { Phase::Runtime };
        let mut d = Diagnostic::error(phase, fault.message()).label(span, "raised here");
        if let Some(h) = fault.help {
            d = d.help(h);
        }
        d.trace = self.trace(clo, span);
        d
    }

    /// The dp call stack, innermost first; runs of identical frames (deep recursion) fold
    /// into one entry that says how many times it repeats.
    fn trace(&self, clo: &Rc<Closure>, span: Span) -> Vec<(String, Span)> {
        let mut out: Vec<(Rc<str>, Span, usize)> = vec![(clo.func.name.clone(), span, 1)];
        let below = self.segs.iter().rev().flat_map(|s| s.frames.iter().rev());
        for f in self.frames.iter().rev().chain(below) {
            let Frame::Dp { clo, pc, .. } = f else { continue };
            let sp = clo.func.spans.get((*pc as usize).saturating_sub(1)).copied().unwrap_or(clo.func.span);
            let n = out.len();
            match out.last_mut() {
                Some(last) if Rc::ptr_eq(&last.0, &clo.func.name) && last.1 == sp => last.2 += 1,
                _ if n >= 40 => break,
                _ => out.push((clo.func.name.clone(), sp, 1)),
            }
        }
        out.into_iter()
            .map(|(n, sp, k)| (if k > 1 { format!("{n} (this call repeated {k} times)") } else { n.to_string() }, sp))
            .collect()
    }

    #[inline]
    fn pop(&mut self) -> Value {
        self.stack.pop().unwrap_or_default()
    }

    /// Shortens the value stack to `len`. Immediates on top go without a call to the drop
    /// glue of `Value` (out of line, and returns and tail calls mostly drop Ints); the rest
    /// are dropped by `truncate`, oldest first, the order in which the allocator best reuses
    /// what they free.
    #[inline]
    fn cut(&mut self, len: usize) {
        while self.stack.len() > len && self.stack.last().is_some_and(Value::is_immediate) {
            if let Some(v) = self.stack.pop() {
                std::mem::forget(v);
            }
        }
        if self.stack.len() > len {
            self.stack.truncate(len);
        }
    }

    /// Makes room for a frame's locals beyond its arguments (most functions have none).
    #[inline]
    fn grow_locals(&mut self, len: usize) {
        let missing = len.saturating_sub(self.stack.len());
        if missing > 0 {
            // Not `resize`, an out-of-line call.
            self.stack.extend(std::iter::repeat_n(Value::Unit, missing));
        }
    }

    /// Runs `clo` from `pc`. Its locals (arguments first) start at `stack[base]`; when it
    /// returns, the stack is cut back to `floor`, which is `base - 1` when the callee slot
    /// below the arguments belongs to the frame and `base` for self calls, which have none.
    fn exec(
        &mut self,
        mut clo: Rc<Closure>,
        mut pc: usize,
        mut base: usize,
        mut floor: usize,
    ) -> Result<Value, Diagnostic> {
        // Goes on as `Next` says: run a dp function from a place, or finish the run. Its
        // `continue` is the dispatch loop's: never use these macros inside an inner loop.
        macro_rules! jump {
            ($next:expr) => {
                match $next {
                    Next::Run(c, p, b, f) => {
                        clo = c;
                        pc = p;
                        base = b;
                        floor = f;
                        continue;
                    }
                    Next::Done(v) => return Ok(v),
                }
            };
        }
        // A fault goes to the innermost running `catch` when there is one (the machine then
        // runs its handler), and otherwise ends the run, located here.
        macro_rules! fault {
            ($e:expr) => {
                match self.recover($e) {
                    Ok(next) => jump!(next),
                    Err(f) => return Err(self.locate(f, &clo, pc)),
                }
            };
        }
        macro_rules! tryf {
            ($e:expr) => {
                match $e {
                    Ok(v) => v,
                    Err(f) => fault!(f),
                }
            };
        }
        macro_rules! goto {
            ($next:expr) => {
                match $next {
                    Ok(next) => jump!(next),
                    Err(f) => fault!(f),
                }
            };
        }
        // The running function's state, saved while a callee runs.
        macro_rules! frame {
            ($clo:expr) => {
                Frame::Dp { clo: $clo, pc: pc as u32, base: base as u32, floor: floor as u32 }
            };
        }
        // Every call checks for Ctrl-C and spends fuel, so any loop can be interrupted.
        macro_rules! budget {
            () => {
                if self.interrupt.load(Ordering::Relaxed) {
                    self.interrupt.store(false, Ordering::Relaxed);
                    fault!(Fault::abort("interrupted"));
                }
                if let Some(f) = &mut self.fuel {
                    if *f == 0 {
                        fault!(Fault::abort("out of fuel"));
                    }
                    *f -= 1;
                }
            };
        }
        macro_rules! depth_limit {
            () => {
                if self.depth() >= self.stack_limit {
                    fault!(Fault::abort(format!("stack limit exceeded ({} nested calls)", self.stack_limit))
                        .help("a recursion that never ends? otherwise raise the limit with `--stack-limit`"));
                }
            };
        }
        // The Int operations the compiler specialises: an operand that is not an Int is an Int
        // batched by `vmap` (`argmax` of a batch), which the generic primitive batches.
        macro_rules! int2 {
            ($p:expr, $f:expr) => {{
                let n = self.stack.len();
                match self.stack.get(n.wrapping_sub(2)..) {
                    Some(&[Value::Int(x), Value::Int(y)]) => {
                        self.cut(n - 1);
                        if let Some(top) = self.stack.last_mut() {
                            value::discard(std::mem::replace(top, $f(x, y)));
                        }
                    }
                    _ => {
                        let b = self.pop();
                        let a = self.pop();
                        let v = tryf!(self.prim2($p, a, b));
                        self.stack.push(v)
                    }
                }
            }};
        }
        macro_rules! float2 {
            ($p:expr, $f:expr) => {{
                let n = self.stack.len();
                match self.stack.get(n.wrapping_sub(2)..) {
                    Some(&[Value::Float(x), Value::Float(y)]) => {
                        self.cut(n - 1);
                        if let Some(top) = self.stack.last_mut() {
                            value::discard(std::mem::replace(top, $f(x, y)));
                        }
                    }
                    _ => {
                        let b = self.pop();
                        let a = self.pop();
                        let v = tryf!(self.prim2($p, a, b));
                        self.stack.push(v)
                    }
                }
            }};
        }
        loop {
            let op = clo.func.code[pc];
            pc += 1;
            match op {
                Op::Const(k) => self.stack.push(clo.func.consts[k as usize].clone()),
                Op::Local(s) => {
                    let v = self.stack[base + s as usize].clone();
                    self.stack.push(v);
                }
                Op::StoreLocal(s) => {
                    let v = self.pop();
                    self.stack[base + s as usize] = v;
                }
                Op::Capture(i) => self.stack.push(clo.env[i as usize].clone()),
                Op::SelfRef => self.stack.push(Value::Closure(clo.clone())),
                Op::Global(g) => self.stack.push(self.globals[g as usize].clone()),
                Op::SetGlobal(g) => {
                    let v = self.pop();
                    self.globals[g as usize] = v;
                }
                Op::Builtin(i) => self.stack.push(Value::Builtin(i)),
                Op::Closure(i) => {
                    let (func, caps) = &clo.func.protos[i as usize];
                    let env = caps
                        .iter()
                        .map(|c| match *c {
                            VarRef::Local(s) => self.stack[base + s as usize].clone(),
                            VarRef::Capture(j) => clo.env[j as usize].clone(),
                            VarRef::SelfRef => Value::Closure(clo.clone()),
                            VarRef::Global(g) => self.globals[g as usize].clone(),
                        })
                        .collect();
                    self.stack.push(Value::Closure(Rc::new(Closure { func: func.clone(), env })));
                }
                Op::Call(n) | Op::TailCall(n) => {
                    let n = n as usize;
                    let tail = matches!(op, Op::TailCall(_));
                    budget!();
                    let fpos = self.stack.len() - n - 1;
                    if matches!(&self.stack[fpos], Value::Closure(c) if c.func.arity as usize == n) {
                        // The callee slot is never read again: take the closure out of it.
                        let Value::Closure(c) = std::mem::take(&mut self.stack[fpos]) else { unreachable!() };
                        {
                            if tail {
                                // Reuse the frame: slide callee and arguments down over it.
                                let dst = floor;
                                for i in 0..=n {
                                    self.stack.swap(dst + i, fpos + i);
                                }
                                self.cut(dst + n + 1);
                                base = dst + 1;
                            } else {
                                depth_limit!();
                                push_fresh(&mut self.frames, || frame!(clo));
                                floor = fpos;
                                base = fpos + 1;
                            }
                            self.grow_locals(base + c.func.nlocals as usize);
                            clo = c;
                            pc = 0;
                            continue;
                        }
                    }
                    let args: Vec<Value> = self.stack.drain(fpos + 1..).collect();
                    let f = self.pop();
                    let span = clo.func.spans[pc - 1];
                    if tail {
                        self.cut(floor);
                    } else {
                        self.frames.push(frame!(clo.clone()));
                    }
                    goto!(self.resume(Action::Apply(f, args, span)));
                }
                Op::TailSelf(n) => {
                    budget!();
                    // The arguments become the parameters; the rest of the frame is reset.
                    let n = n as usize;
                    let first = self.stack.len() - n;
                    for i in 0..n {
                        self.stack.swap(base + i, first + i);
                    }
                    let top = base + clo.func.nlocals as usize;
                    self.cut(top);
                    for v in &mut self.stack[base + n..] {
                        value::discard(std::mem::take(v));
                    }
                    self.grow_locals(top);
                    pc = 0;
                }
                Op::CallSelf(n) => {
                    budget!();
                    depth_limit!();
                    push_fresh(&mut self.frames, || frame!(clo.clone()));
                    base = self.stack.len() - n as usize;
                    floor = base;
                    self.grow_locals(base + clo.func.nlocals as usize);
                    pc = 0;
                }
                Op::CallBuiltin(i) => {
                    let arity = crate::builtins::arity_of(i);
                    let mut args: [Value; crate::builtins::MAX_ARITY] = Default::default();
                    for k in (0..arity).rev() {
                        args[k] = self.pop();
                    }
                    match tryf!(self.builtin(i, args)) {
                        BuiltinOut::Value(v) => self.stack.push(v),
                        BuiltinOut::Control(c) => {
                            self.frames.push(frame!(clo.clone()));
                            let span = clo.func.spans[pc - 1];
                            goto!(self.control(c, span));
                        }
                    }
                }
                Op::Return | Op::ReturnLocal(_) => {
                    let v = match op {
                        Op::ReturnLocal(s) => std::mem::take(&mut self.stack[base + s as usize]),
                        _ => self.pop(),
                    };
                    self.cut(floor);
                    if let Some(Frame::Dp { .. }) = self.frames.last() {
                        let Some(Frame::Dp { clo: c, pc: p, base: b, floor: f }) = self.frames.pop() else {
                            unreachable!()
                        };
                        self.stack.push(v);
                        clo = c;
                        pc = p as usize;
                        base = b as usize;
                        floor = f as usize;
                        continue;
                    }
                    goto!(self.resume(Action::Return(v)));
                }
                Op::Jump(t) => pc = t as usize,
                Op::JumpIfFalse(t) => match self.pop() {
                    Value::Bool(false) => pc = t as usize,
                    Value::Batched(_) => fault!(Fault::new(BATCHED_BRANCH).help(
                        "this `if` (or `&&`, `||`) tests a Bool computed from a batched value; select elementwise with `where` instead"
                    )),
                    _ => {}
                },
                Op::Pop => {
                    self.stack.pop();
                }
                Op::MatchOrJump(p, t) => {
                    let v = self.pop();
                    let pat = &clo.func.pats[p as usize];
                    if reads_batched(pat, &v) {
                        fault!(batched_match());
                    }
                    if !match_pattern(pat, &v, &mut self.stack, base) {
                        if self.jit.tracing() && float_pattern_on_staged(pat, &v) {
                            fault!(Fault::unstageable("`match` on a Float pattern"));
                        }
                        pc = t as usize;
                    }
                }
                Op::MatchLocal(s, p, t) => {
                    // Taken out while matching rather than cloned: no reference count traffic.
                    // The pattern's bindings never land in the scrutinee's own slot (the
                    // checker never reuses a slot within a function).
                    let slot = base + s as usize;
                    let v = std::mem::take(&mut self.stack[slot]);
                    if reads_batched(&clo.func.pats[p as usize], &v) {
                        self.stack[slot] = v;
                        fault!(batched_match());
                    }
                    let ok = match_pattern(&clo.func.pats[p as usize], &v, &mut self.stack, base);
                    if !ok && self.jit.tracing() && float_pattern_on_staged(&clo.func.pats[p as usize], &v) {
                        fault!(Fault::unstageable("`match` on a Float pattern"));
                    }
                    value::discard(std::mem::replace(&mut self.stack[slot], v));
                    if !ok {
                        pc = t as usize;
                    }
                }
                Op::MatchFail => {
                    fault!(Fault::new("no match: the value did not match any pattern")
                        .help("the checker warned that this match is not exhaustive"))
                }
                Op::IntBranch(cmp, t) => {
                    let b = self.pop();
                    let a = self.pop();
                    match (a, b) {
                        (Value::Int(x), Value::Int(y)) => {
                            if !cmp.holds(x, y) {
                                pc = t as usize;
                            }
                        }
                        (a, b) => fault!(int_fault(&[&a, &b], "integer comparison on non-integers")),
                    }
                }
                Op::IntBranchK(cmp, k, t) => match self.pop() {
                    Value::Int(x) => {
                        if !cmp.holds(x, k as i64) {
                            pc = t as usize;
                        }
                    }
                    a => fault!(int_fault(&[&a], "integer comparison on a non-integer")),
                },
                Op::Math(un) => match self.stack.last_mut() {
                    Some(Value::Float(x)) => *x = un.eval(*x),
                    _ => {
                        let x = self.pop();
                        let v = tryf!(ad::apply_un(self, un, x));
                        self.stack.push(v);
                    }
                },
                Op::IntToFloat => match self.stack.last_mut() {
                    Some(top @ Value::Int(_)) => {
                        let Value::Int(n) = *top else { unreachable!() };
                        *top = Value::Float(n as f64);
                    }
                    _ => {
                        let x = self.pop();
                        if !matches!(x, Value::Batched(_)) {
                            fault!(Fault::internal("`float` of a non-integer"))
                        }
                        let v = tryf!(ad::batch::float_of(self, &x));
                        self.stack.push(v);
                    }
                },
                Op::AddIntK(k) => match self.stack.last_mut() {
                    Some(Value::Int(x)) => *x = x.wrapping_add(k as i64),
                    _ => {
                        let x = self.pop();
                        let v = tryf!(self.prim2(Prim::Add, x, Value::Int(k as i64)));
                        self.stack.push(v);
                    }
                },
                Op::LocalAddK(s, k) => match self.stack[base + s as usize] {
                    Value::Int(x) => push_fresh(&mut self.stack, || Value::Int(x.wrapping_add(k as i64))),
                    _ => {
                        let x = self.stack[base + s as usize].clone();
                        let v = tryf!(self.prim2(Prim::Add, x, Value::Int(k as i64)));
                        self.stack.push(v);
                    }
                },
                Op::LocalBranchK(s, cmp, k, t) => match self.stack[base + s as usize] {
                    Value::Int(x) => {
                        if !cmp.holds(x, k as i64) {
                            pc = t as usize;
                        }
                    }
                    ref a => fault!(int_fault(&[a], "integer comparison on a non-integer")),
                },
                Op::IntLocals(iop, a, b) => match (&self.stack[base + a as usize], &self.stack[base + b as usize]) {
                    (&Value::Int(x), &Value::Int(y)) => push_fresh(&mut self.stack, || Value::Int(iop.apply(x, y))),
                    (x, y) => {
                        let (x, y) = (x.clone(), y.clone());
                        let p = match iop {
                            IntOp::Add => Prim::Add,
                            IntOp::Sub => Prim::Sub,
                            IntOp::Mul => Prim::Mul,
                        };
                        let v = tryf!(self.prim2(p, x, y));
                        self.stack.push(v);
                    }
                },
                Op::AddInt => int2!(Prim::Add, |x: i64, y: i64| Value::Int(x.wrapping_add(y))),
                Op::SubInt => int2!(Prim::Sub, |x: i64, y: i64| Value::Int(x.wrapping_sub(y))),
                Op::MulInt => int2!(Prim::Mul, |x: i64, y: i64| Value::Int(x.wrapping_mul(y))),
                Op::LtInt => int2!(Prim::Lt, |x, y| Value::Bool(x < y)),
                Op::LeInt => int2!(Prim::Le, |x, y| Value::Bool(x <= y)),
                Op::GtInt => int2!(Prim::Gt, |x, y| Value::Bool(x > y)),
                Op::GeInt => int2!(Prim::Ge, |x, y| Value::Bool(x >= y)),
                Op::EqInt => int2!(Prim::Eq, |x, y| Value::Bool(x == y)),
                Op::AddFloat => float2!(Prim::Add, |x, y| Value::Float(x + y)),
                Op::SubFloat => float2!(Prim::Sub, |x, y| Value::Float(x - y)),
                Op::MulFloat => float2!(Prim::Mul, |x, y| Value::Float(x * y)),
                Op::DivFloat => float2!(Prim::Div, |x, y| Value::Float(x / y)),
                Op::LtFloat => float2!(Prim::Lt, |x, y| Value::Bool(x < y)),
                Op::GtFloat => float2!(Prim::Gt, |x, y| Value::Bool(x > y)),
                Op::Prim1(p) => {
                    let a = self.pop();
                    let v = tryf!(self.prim1(p, a));
                    self.stack.push(v);
                }
                Op::Prim2(p) => {
                    let b = self.pop();
                    let a = self.pop();
                    let v = tryf!(self.prim2(p, a, b));
                    self.stack.push(v);
                }
                Op::MakeTuple(n) => {
                    let vs: Vec<Value> = self.stack.drain(self.stack.len() - n as usize..).collect();
                    self.stack.push(Value::Tuple(Rc::new(vs)));
                }
                Op::MakeList(n) => {
                    let vs: Vec<Value> = self.stack.drain(self.stack.len() - n as usize..).collect();
                    self.stack.push(Value::list(vs.into_iter()));
                }
                Op::MakeRecord(ni, n) => {
                    let values: Vec<Value> = self.stack.drain(self.stack.len() - n as usize..).collect();
                    let names = clo.func.names[ni as usize].clone();
                    self.stack.push(Value::Record(Rc::new(RecordVal { names, values })));
                }
                Op::Field(k) => {
                    let Value::Str(name) = &clo.func.consts[k as usize] else { unreachable!() };
                    let r = self.pop();
                    match &r {
                        Value::Record(rec) => match rec.get(name) {
                            Some(v) => {
                                let v = v.clone();
                                self.stack.push(v)
                            }
                            None => fault!(Fault::new(format!("record has no field `{name}`"))),
                        },
                        other => fault!(Fault::internal(format!("field access on {}", other.type_name()))),
                    }
                }
                Op::Update(ni, n) => {
                    let vals: Vec<Value> = self.stack.drain(self.stack.len() - n as usize..).collect();
                    let base_rec = self.pop();
                    let v = tryf!(update_record(base_rec, &clo.func.names[ni as usize], vals));
                    self.stack.push(v);
                }
                Op::MakeCon(ci, n) => {
                    let args: Vec<Value> = self.stack.drain(self.stack.len() - n as usize..).collect();
                    let c = &clo.func.cons[ci as usize];
                    self.stack.push(Value::Con(Rc::new(ConVal { tag: c.tag, name: c.name.clone(), args })));
                }
            }
        }
    }

    /// Applies values and delivers returns until a dp function is ready to run.
    fn resume(&mut self, mut action: Action) -> FResult<Next> {
        loop {
            action = match action {
                Action::Return(v) => match self.frames.pop() {
                    Some(Frame::Dp { clo, pc, base, floor }) => {
                        self.stack.push(v);
                        return Ok(Next::Run(clo, pc as usize, base as usize, floor as usize));
                    }
                    Some(Frame::ApplyRest(rest)) => {
                        let (args, span) = *rest;
                        Action::Apply(v, args, span)
                    }
                    None => match self.pop_segment(v)? {
                        Some(a) => a,
                        None => return Ok(Next::Done(self.stack.pop().unwrap_or_default())),
                    },
                },
                Action::Apply(f, mut args, span) => match f {
                    Value::Closure(c) => {
                        let arity = c.func.arity as usize;
                        if args.len() < arity {
                            Action::Return(Value::Pap(Rc::new(Pap { callee: Value::Closure(c), args })))
                        } else {
                            if args.len() > arity {
                                let rest = args.split_off(arity);
                                self.frames.push(Frame::ApplyRest(Box::new((rest, span))));
                            }
                            if self.depth() >= self.stack_limit {
                                return Err(Fault::abort(format!(
                                    "stack limit exceeded ({} nested calls)",
                                    self.stack_limit
                                )));
                            }
                            self.stack.push(Value::Closure(c.clone()));
                            let base = self.stack.len();
                            self.stack.extend(args);
                            self.grow_locals(base + c.func.nlocals as usize);
                            // The callee returns through a Dp frame of its caller, already pushed.
                            return Ok(Next::Run(c, 0, base, base - 1));
                        }
                    }
                    Value::Builtin(i) => {
                        let arity = crate::builtins::arity_of(i);
                        if args.len() < arity {
                            Action::Return(Value::Pap(Rc::new(Pap { callee: f, args })))
                        } else {
                            if args.len() > arity {
                                let rest = args.split_off(arity);
                                self.frames.push(Frame::ApplyRest(Box::new((rest, span))));
                            }
                            let mut fixed: [Value; crate::builtins::MAX_ARITY] = Default::default();
                            for (k, a) in args.into_iter().enumerate() {
                                fixed[k] = a;
                            }
                            match self.builtin(i, fixed)? {
                                BuiltinOut::Value(v) => Action::Return(v),
                                BuiltinOut::Control(c) => match self.control(c, span)? {
                                    n @ Next::Run(..) => return Ok(n),
                                    Next::Done(v) => return Ok(Next::Done(v)),
                                },
                            }
                        }
                    }
                    Value::Pap(p) => {
                        let mut all = p.args.clone();
                        all.extend(args);
                        Action::Apply(p.callee.clone(), all, span)
                    }
                    Value::Cont(k) => {
                        let mut args = args.into_iter();
                        let v = args.next().unwrap_or_default();
                        let rest: Vec<Value> = args.collect();
                        if !rest.is_empty() {
                            self.frames.push(Frame::ApplyRest(Box::new((rest, span))));
                        }
                        let segments = match Rc::try_unwrap(k) {
                            Ok(c) => c.segments,
                            Err(shared) => shared.segments.clone(),
                        };
                        for s in segments {
                            self.push_segment(s.delim);
                            self.stack = s.stack;
                            self.frames = s.frames;
                        }
                        Action::Return(v)
                    }
                    other => return Err(Fault::internal(format!("applying a {} as a function", other.type_name()))),
                },
            };
        }
    }

    /// Suspends the running segment and starts an empty one ended by `delim`.
    fn push_segment(&mut self, delim: Delim) {
        let level = match delim {
            Delim::GradPrompt(tag) => Some(Level { tag, pos: self.segs.len() + 1, grad: true, batch: false }),
            Delim::Jvp(tag) => Some(Level { tag, pos: self.segs.len() + 1, grad: false, batch: false }),
            Delim::Vmap { tag, .. } => Some(Level { tag, pos: self.segs.len() + 1, grad: false, batch: true }),
            _ => None,
        };
        self.levels.extend(level);
        let seg = Segment {
            stack: std::mem::take(&mut self.stack),
            frames: std::mem::take(&mut self.frames),
            delim: std::mem::replace(&mut self.delim, delim),
        };
        self.seg_frames += seg.frames.len();
        self.segs.push(seg);
    }

    /// Makes the segment below the running one current again; returns its delimiter's
    /// segment state that was running.
    fn restore_below(&mut self) -> FResult<Delim> {
        let seg = self.segs.pop().ok_or_else(|| Fault::internal("a delimiter with no segment below it"))?;
        if self.levels.last().is_some_and(|l| l.pos > self.segs.len()) {
            self.levels.pop();
        }
        self.seg_frames -= seg.frames.len();
        self.stack = seg.stack;
        self.frames = seg.frames;
        let ended = std::mem::replace(&mut self.delim, seg.delim);
        if matches!(ended, Delim::Stage) {
            // (A no-op after `Jit::end`; a fault unwinding a traced call drops its trace.)
            self.jit.abort();
        }
        Ok(ended)
    }

    /// The running segment finished with `v`: act on its delimiter. `None` ends `run`.
    fn pop_segment(&mut self, v: Value) -> FResult<Option<Action>> {
        match &self.delim {
            Delim::Base => {
                self.stack.push(v);
                Ok(None)
            }
            Delim::Reset | Delim::Catch(_) => {
                self.restore_below()?;
                Ok(Some(Action::Return(v)))
            }
            Delim::GradPrompt(_) => {
                // Settled while the levels that `f` ran under are all still live: a result that
                // escaped a finished inner level (through a reference cell) is seen as its
                // value at the running levels, this one included.
                let v = ad::settle(self, v)?;
                self.restore_below()?;
                // Now the handler segment is running: the backward pass is its work.
                let Delim::GradHandler(state) = std::mem::replace(&mut self.delim, Delim::Reset) else {
                    return Err(Fault::internal("grad prompt without its handler"));
                };
                let v = match self.jit.vjp_level() == Some(state.tag) {
                    // The `grad` inside the trace of a differentiated staged call: its result's
                    // adjoints are inputs of the trace (stage/vjp.rs), not 1.
                    true => {
                        for (cell, adjoint) in self.jit.seed(&v)? {
                            ad::seed_cell(self, &cell, adjoint)?;
                        }
                        Value::Unit
                    }
                    false => v,
                };
                let back = ad::backward(self, *state, v)?;
                self.backward_step(back)
            }
            Delim::Backward(_) => {
                // A custom rule's dp code returned the argument's adjoint: the paused backward
                // pass goes on.
                let v = ad::settle(self, v)?;
                let Delim::Backward(paused) = std::mem::replace(&mut self.delim, Delim::Reset) else {
                    unreachable!("matched above")
                };
                let back = ad::resume_backward(self, *paused, v)?;
                self.backward_step(back)
            }
            Delim::Custom(_) => {
                let v = ad::settle(self, v)?;
                let Delim::Custom(call) = self.restore_below()? else {
                    return Err(Fault::internal("a custom rule's delimiter vanished"));
                };
                let CustomCall { tag, grad, rule, f, inputs, x, y, span, batch } = *call;
                match (grad, y, rule) {
                    (true, _, rule) => {
                        let v = ad::spread_all(self, v, &batch)?;
                        Ok(Some(Action::Return(ad::record_custom(self, tag, rule, f, inputs, x, v, span, batch)?)))
                    }
                    // Forward mode: `f` has returned; its tangent is the rule's.
                    (false, None, Rule::Jvp(tan)) => {
                        let v = ad::spread_all(self, v, &batch)?;
                        let xdot = ad::tangents_at(self, &inputs, tag, &batch)?;
                        let rule = Rule::Jvp(tan.clone());
                        let call = CustomCall { tag, grad, rule, f, inputs, x: x.clone(), y: Some(v), span, batch };
                        self.push_segment(Delim::Custom(Box::new(call)));
                        Ok(Some(Action::Apply(tan, vec![x, xdot], span)))
                    }
                    (false, Some(y), _) => Ok(Some(Action::Return(ad::dual_result(self, y, v, tag, &batch)?))),
                    (false, None, _) => Err(Fault::internal("a forward-mode custom call without a tangent rule")),
                }
            }
            Delim::GradHandler(_) => Err(Fault::internal("returned into a grad handler")),
            &Delim::Jvp(tag) => {
                let v = ad::settle(self, v)?;
                self.restore_below()?;
                Ok(Some(Action::Return(ad::jvp_finish(tag, v)?)))
            }
            &Delim::Vmap { tag, size } => {
                // Stacked while the level is still running (the stacking is batched work of
                // the levels outside it, which record it).
                let v = ad::settle(self, v)?;
                let v = ad::batch::finish(self, tag, size, v)?;
                self.restore_below()?;
                Ok(Some(Action::Return(v)))
            }
            Delim::Stage => {
                let out = self.jit.end(&v);
                self.restore_below()?;
                Ok(Some(Action::Return(self.staged(out?)?)))
            }
        }
    }

    /// The handler's segment is running and its backward pass has stopped: return the `grad`'s
    /// result to its caller, or keep the pass in this segment's delimiter and run the custom
    /// rule's dp code above it.
    fn backward_step(&mut self, back: ad::Back) -> FResult<Option<Action>> {
        match back {
            ad::Back::Done(result) => {
                self.restore_below()?;
                Ok(Some(Action::Return(result)))
            }
            ad::Back::Call(paused, call) => {
                let batch = paused.batch.clone();
                self.delim = Delim::Backward(paused);
                // The record's `vmap` levels, reopened (outermost first) for the rule, which
                // runs batched as `f` did; their delimiters stack its result for the cells.
                for (tag, size) in batch {
                    self.push_segment(Delim::Vmap { tag, size });
                }
                Ok(Some(match call {
                    RuleCall::Apply(f, args, span) => Action::Apply(f, args, span),
                    RuleCall::Vjp { f, x, seed, span } => self.start_grad(f, x, false, Some(seed), span)?,
                }))
            }
        }
    }

    /// Sets up a `grad` of `f` at `x` (its handler and prompt segments) and returns the
    /// application of `f` to the tracked argument. `seed` is the result's adjoint for a
    /// vector–Jacobian product (default: 1).
    fn start_grad(&mut self, f: Value, x: Value, with_value: bool, seed: Option<Value>, span: Span) -> FResult<Action> {
        let tag = self.next_tag;
        self.next_tag += 1;
        let wrapped = ad::wrap(&x, tag)?;
        let frames = std::mem::take(&mut self.spare_adjoint_frames);
        let mut state = GradState::new(tag, wrapped.clone(), with_value, frames);
        state.seed = seed;
        self.push_segment(Delim::GradHandler(Box::new(state)));
        self.push_segment(Delim::GradPrompt(tag));
        Ok(Action::Apply(f, vec![wrapped], span))
    }

    /// A staged call's result; a differentiated one's record goes onto its level.
    fn staged(&mut self, call: stage::Call) -> FResult<Value> {
        match call {
            stage::Call::Done(v) => Ok(v),
            stage::Call::Record { y, tag, frame } => match self.grad_handler(tag) {
                Some(h) => {
                    h.frames.push(frame);
                    Ok(y)
                }
                // (The level was running at the call, and the call returns inside it.)
                None => Ok(ad::strip_deep(&y)),
            },
            _ => Err(Fault::internal("a staged call ended without its result")),
        }
    }

    fn control(&mut self, c: Control, span: Span) -> FResult<Next> {
        let action = match c {
            Control::Reset(f) => {
                self.push_segment(Delim::Reset);
                Action::Apply(f, vec![Value::Unit], span)
            }
            Control::Shift(f) => {
                // Capture every segment from the nearest reset up; the reset stays in place
                // and the shift's body runs in an empty segment above it.
                let first = if matches!(self.delim, Delim::Reset) {
                    self.segs.len()
                } else {
                    match (1..self.segs.len()).rev().find(|&i| matches!(self.segs[i].delim, Delim::Reset)) {
                        Some(i) => i,
                        None => {
                            return Err(Fault::new("`shift` without an enclosing `reset`")
                                .help("wrap the computation in `reset (fun () -> …)`"))
                        }
                    }
                };
                if matches!(self.delim, Delim::Stage)
                    || self.segs[first..].iter().any(|s| matches!(s.delim, Delim::Stage))
                {
                    return Err(Fault::staging("jit: a `shift` in a staged function captures beyond its `jit`")
                        .help("staging compiles the function alone; put the `reset` inside the staged function"));
                }
                let checkpointed = |d: &Delim| matches!(d, Delim::Custom(c) if matches!(c.rule, Rule::Checkpoint));
                if checkpointed(&self.delim) || self.segs[first..].iter().any(|s| checkpointed(&s.delim)) {
                    // The backward pass reruns `f` alone, without the continuation beyond it.
                    return Err(Fault::new("`shift` inside `checkpoint`'s function captures beyond it")
                        .help("the backward pass recomputes that function on its own; put the `reset` inside it"));
                }
                let mut captured: Vec<Segment> = self.segs.drain(first..).collect();
                // The captured levels stop running; resuming the continuation pushes them again.
                let live = self.levels.partition_point(|l| l.pos < first);
                self.levels.truncate(live);
                self.seg_frames -= captured.iter().map(|s| s.frames.len()).sum::<usize>();
                captured.push(Segment {
                    stack: std::mem::take(&mut self.stack),
                    frames: std::mem::take(&mut self.frames),
                    delim: std::mem::replace(&mut self.delim, Delim::Reset),
                });
                Action::Apply(f, vec![Value::Cont(Rc::new(Cont { segments: captured }))], span)
            }
            Control::Grad { f, x, with_value } => self.start_grad(f, x, with_value, None, span)?,
            Control::Jvp { f, x, v } => {
                let tag = self.next_tag;
                self.next_tag += 1;
                let dual = ad::dual(&x, &v, tag)?;
                self.push_segment(Delim::Jvp(tag));
                Action::Apply(f, vec![dual], span)
            }
            Control::Vmap { f, x } => {
                let tag = self.next_tag;
                self.next_tag += 1;
                let (batched, size) = ad::batch::start(self, &x, tag)?;
                self.push_segment(Delim::Vmap { tag, size });
                Action::Apply(f, vec![batched], span)
            }
            Control::Custom { f, rule, x } => match ad::custom_site(self, &x)? {
                // Nothing perturbs the argument (a `vmap` may batch it): the call is `f x`.
                None => Action::Apply(f, vec![x], span),
                Some(ad::Site { tag, batch }) => {
                    let grad = self.grad_handler(tag).is_some();
                    if !grad && !matches!(rule, Rule::Jvp(_)) {
                        // No forward rule (`custom_vjp`, `checkpoint`): the `jvp` differentiates
                        // `f` itself, as it would any code.
                        Action::Apply(f, vec![x], span)
                    } else {
                        let xp = ad::peel(self, &x, tag, &batch)?;
                        let call = CustomCall {
                            tag,
                            grad,
                            rule,
                            f: f.clone(),
                            inputs: x,
                            x: xp.clone(),
                            y: None,
                            span,
                            batch,
                        };
                        self.push_segment(Delim::Custom(Box::new(call)));
                        Action::Apply(f, vec![xp], span)
                    }
                }
            },
            Control::Catch { body, handler } => {
                self.push_segment(Delim::Catch(Box::new((handler, span))));
                Action::Apply(body, vec![Value::Unit], span)
            }
            Control::Jit { f, x } => {
                let grad = match self.levels[..] {
                    [level] if level.grad => Some(level.tag),
                    _ => None,
                };
                match self.jit.call(&f, &x, grad)? {
                    stage::Call::Inline => Action::Apply(f, vec![x], span),
                    stage::Call::Trace => {
                        let arg = self.jit.begin(&f, &x)?;
                        self.push_segment(Delim::Stage);
                        Action::Apply(f, vec![arg], span)
                    }
                    stage::Call::TraceVjp(site) => {
                        // `f` runs traced under a `grad` of the trace's own, which the
                        // handler seeds with the result's adjoints as inputs (`Jit::seed`).
                        let tag = self.next_tag;
                        self.next_tag += 1;
                        let arg = self.jit.begin_vjp(&f, site, tag)?;
                        self.push_segment(Delim::Stage);
                        let frames = std::mem::take(&mut self.spare_adjoint_frames);
                        let state = GradState::new(tag, Value::Unit, false, frames);
                        self.push_segment(Delim::GradHandler(Box::new(state)));
                        self.push_segment(Delim::GradPrompt(tag));
                        Action::Apply(f, vec![arg], span)
                    }
                    done => Action::Return(self.staged(done)?),
                }
            }
            Control::Exit(code) => {
                self.exit_code = Some(code);
                return Err(Fault::abort(format!("exit {code}")));
            }
        };
        self.resume(action)
    }

    /// `fault` was raised: when a `catch` is running and the fault is the program's own, cuts
    /// the stack back to the innermost `catch` (the segments above it, with whatever handlers
    /// of `grad`, `jvp` or `reset` ran there, are dropped: their levels are over) and calls
    /// its handler with the message. A fault raised by applying the handler itself (a builtin
    /// handler: `catch f error`) goes to the next `catch` out. `Err` when nothing catches it.
    fn recover(&mut self, mut fault: Fault) -> FResult<Next> {
        if fault.kind == FaultKind::Staging {
            // A refusal is the staged call's, not a `catch`'s inside it: unwind the traced
            // call first (dropping its trace); outside it the fault is the program's own.
            if self.delims().any(|d| matches!(d, Delim::Stage)) {
                while !matches!(self.restore_below()?, Delim::Stage) {}
            }
            fault.kind = FaultKind::User;
        }
        loop {
            if !fault.is_catchable() || !self.delims().any(|d| matches!(d, Delim::Catch(_))) {
                return Err(fault);
            }
            while !matches!(self.delim, Delim::Catch(_)) {
                self.restore_below()?;
            }
            let Delim::Catch(caught) = self.restore_below()? else {
                return Err(Fault::internal("a catch delimiter vanished while unwinding"));
            };
            let (handler, span) = *caught;
            let msg = Value::str(std::mem::take(&mut fault.msg));
            match self.resume(Action::Apply(handler, vec![msg], span)) {
                Ok(next) => return Ok(next),
                Err(f) => fault = f,
            }
        }
    }

    /// The delimiters of the segments, innermost (the running one) first.
    fn delims(&self) -> impl Iterator<Item = &Delim> {
        std::iter::once(&self.delim).chain(self.segs.iter().rev().map(|s| &s.delim))
    }

    /// Whether the `grad` or `jvp` of `tag` is running: its delimiter is on the stack. A
    /// value perturbed by a level that is not running has escaped it.
    pub fn level_is_live(&self, tag: u32) -> bool {
        self.levels.iter().rev().any(|l| l.tag == tag)
    }

    /// Of two running levels, the one nested inside the other: its delimiter is the higher
    /// of the two on the stack. `None` when neither is running. O(levels): the running levels
    /// are indexed beside the segments, so neither a deep recursion (frames) nor many
    /// `reset`s (segments) make it slower.
    pub fn inner_level(&self, a: u32, b: u32) -> Option<u32> {
        self.levels.iter().rev().find(|l| l.tag == a || l.tag == b).map(|l| l.tag)
    }

    /// Whether `tag` is a running `vmap`'s level.
    pub fn is_batch_level(&self, tag: u32) -> bool {
        self.levels.iter().rev().find(|l| l.tag == tag).is_some_and(|l| l.batch)
    }

    /// The handler segment collecting adjoints for `tag`, if that `grad` is still running: the
    /// segment just below its prompt.
    pub fn grad_handler(&mut self, tag: u32) -> Option<&mut GradState> {
        let level = self.levels.iter().rev().find(|l| l.tag == tag)?;
        if !level.grad {
            return None;
        }
        match &mut self.segs.get_mut(level.pos.checked_sub(1)?)?.delim {
            Delim::GradHandler(s) => Some(s),
            _ => None,
        }
    }

    // ------------------------------------------------------------ primitives

    pub fn prim1(&mut self, p: Prim, a: Value) -> FResult<Value> {
        match (p, &a) {
            (Prim::Neg, Value::Int(n)) => Ok(Value::Int(n.wrapping_neg())),
            (Prim::Neg, Value::Float(x)) => Ok(Value::Float(-x)),
            (Prim::Neg, _) => ad::apply_un(self, Un::Neg, a),
            (Prim::Not, Value::Bool(b)) => Ok(Value::Bool(!b)),
            (Prim::Not, Value::Batched(_)) => ad::tensor::call(self, TOp::Not, vec![a]),
            (Prim::Deref, Value::Ref(r)) => {
                if self.jit.tracing() {
                    self.jit.touch_ref(r, false);
                }
                Ok(r.borrow().clone())
            }
            _ => Err(Fault::internal(format!("`{p:?}` on {}", a.type_name()))),
        }
    }

    pub fn prim2(&mut self, p: Prim, a: Value, b: Value) -> FResult<Value> {
        use Value::*;
        Ok(match (p, &a, &b) {
            (Prim::Add, Int(x), Int(y)) => Int(x.wrapping_add(*y)),
            (Prim::Sub, Int(x), Int(y)) => Int(x.wrapping_sub(*y)),
            (Prim::Mul, Int(x), Int(y)) => Int(x.wrapping_mul(*y)),
            (Prim::Div | Prim::Rem, Int(_), Int(0)) => return Err(Fault::new("division by zero")),
            (Prim::Div, Int(x), Int(y)) => Int(x.wrapping_div(*y)),
            (Prim::Rem, Int(x), Int(y)) => Int(x.wrapping_rem(*y)),
            (Prim::Pow, Int(x), Int(y)) => {
                if *y < 0 {
                    return Err(
                        Fault::new(format!("negative Int exponent {y}")).help("use Floats: `float x ** float y`")
                    );
                }
                Int(x.wrapping_pow((*y).min(u32::MAX as i64) as u32))
            }
            (Prim::Add, Float(x), Float(y)) => Float(x + y),
            (Prim::Sub, Float(x), Float(y)) => Float(x - y),
            (Prim::Mul, Float(x), Float(y)) => Float(x * y),
            (Prim::Div, Float(x), Float(y)) => Float(x / y),
            (Prim::Pow, Float(x), Float(y)) => Float(x.powf(*y)),
            (Prim::Add | Prim::Sub | Prim::Mul | Prim::Div | Prim::Pow, _, _) if is_ad(&a) || is_ad(&b) => {
                return ad::binary(self, p, a, b)
            }
            // `%` of an Int batched by `vmap`: its batching rule says what it does.
            (Prim::Rem, Batched(_), _) | (Prim::Rem, _, Batched(_)) => return ad::binary(self, p, a, b),
            (Prim::Add | Prim::Sub | Prim::Mul | Prim::Div | Prim::Pow, Staged(_) | StagedFloat(_), _)
            | (Prim::Add | Prim::Sub | Prim::Mul | Prim::Div | Prim::Pow, _, Staged(_) | StagedFloat(_)) => {
                return self.jit.binary(p, a, b)
            }
            // (A comparison with a batched operand gives a batch of Bools, which stages: it
            // decides nothing until a `where` or a pick reads it per example.)
            (Prim::Eq | Prim::Ne | Prim::Lt | Prim::Le | Prim::Gt | Prim::Ge, _, _)
                if self.jit.tracing()
                    && !(batched_under(&a) || batched_under(&b))
                    && (stage::holds_staged(&a) || stage::holds_staged(&b)) =>
            {
                return Err(Fault::unstageable(&format!("a comparison (`{}`)", comparison(p))))
            }
            // (A reference the traced call made itself is its own state: it may hold traced values.)
            (Prim::Assign, Ref(r), _) if self.jit.tracing() && stage::holds_staged(&b) && !self.jit.owns(r) => {
                return Err(Fault::unstageable("storing in a reference (`:=`)"))
            }
            (Prim::Add | Prim::Sub | Prim::Mul | Prim::Div | Prim::Pow, Tensor(_), _)
            | (Prim::Add | Prim::Sub | Prim::Mul | Prim::Div | Prim::Pow, _, Tensor(_)) => {
                return crate::runtime::tensor::elementwise(p, a, b)
            }
            (Prim::MatMul, _, _) => return ad::tensor::call(self, TOp::MatMul, vec![a, b]),
            (Prim::Eq | Prim::Ne | Prim::Lt | Prim::Le | Prim::Gt | Prim::Ge, _, _)
                if batched_under(&a) || batched_under(&b) =>
            {
                return self.compare_batched(p, a, b)
            }
            (Prim::Eq, _, _) => Bool(values_equal(&a, &b)?),
            (Prim::Ne, _, _) => Bool(!values_equal(&a, &b)?),
            (Prim::Lt | Prim::Le | Prim::Gt | Prim::Ge, _, _) => Bool(ordered(p, &a, &b)?),
            (Prim::Cons, _, _) => Value::cons(a, b),
            (Prim::Append, Str(x), Str(y)) => Str(Rc::new(format!("{x}{y}"))),
            (Prim::Append, _, _) => {
                let items: Vec<Value> = a.iter_list().cloned().collect();
                let mut l = b;
                for v in items.into_iter().rev() {
                    l = Value::cons(v, l);
                }
                l
            }
            (Prim::Assign, Ref(r), _) => {
                if self.jit.tracing() {
                    self.jit.touch_ref(r, true);
                }
                *r.borrow_mut() = b;
                Unit
            }
            _ => return Err(Fault::internal(format!("`{p:?}` on {} and {}", a.type_name(), b.type_name()))),
        })
    }

    fn builtin(&mut self, i: u32, mut args: [Value; crate::builtins::MAX_ARITY]) -> FResult<BuiltinOut> {
        let b = TABLE[i as usize].1;
        if self.jit.tracing() {
            stage_guard(i, b, &args)?;
            if b == B::Catch {
                self.jit.ran_catch();
            }
        }
        let mut next = 0;
        let mut arg = || {
            next += 1;
            std::mem::take(&mut args[next - 1])
        };
        let v = match b {
            B::Reset => return Ok(BuiltinOut::Control(Control::Reset(arg()))),
            B::Catch => {
                let (body, handler) = (arg(), arg());
                return Ok(BuiltinOut::Control(Control::Catch { body, handler }));
            }
            B::Shift => return Ok(BuiltinOut::Control(Control::Shift(arg()))),
            B::Grad | B::ValueAndGrad => {
                let (f, x) = (arg(), arg());
                return Ok(BuiltinOut::Control(Control::Grad { f, x, with_value: b == B::ValueAndGrad }));
            }
            B::Jvp => {
                let (f, x, v) = (arg(), arg(), arg());
                return Ok(BuiltinOut::Control(Control::Jvp { f, x, v }));
            }
            B::CustomVjp | B::CustomJvp => {
                let (f, r, x) = (arg(), arg(), arg());
                let rule = if b == B::CustomVjp { Rule::Vjp(r) } else { Rule::Jvp(r) };
                return Ok(BuiltinOut::Control(Control::Custom { f, rule, x }));
            }
            B::Checkpoint => {
                let (f, x) = (arg(), arg());
                return Ok(BuiltinOut::Control(Control::Custom { f, rule: Rule::Checkpoint, x }));
            }
            B::Vmap => {
                let (f, x) = (arg(), arg());
                return Ok(BuiltinOut::Control(Control::Vmap { f, x }));
            }
            B::Jit => {
                let (f, x) = (arg(), arg());
                return Ok(BuiltinOut::Control(Control::Jit { f, x }));
            }
            B::Exit => match arg() {
                Value::Int(n) => return Ok(BuiltinOut::Control(Control::Exit(n as i32))),
                _ => return Err(Fault::internal("exit")),
            },
            B::StopGradient => ad::strip_deep(&arg()),
            B::Sin => self.math(Un::Sin, arg())?,
            B::Cos => self.math(Un::Cos, arg())?,
            B::Tan => self.math(Un::Tan, arg())?,
            B::Exp => self.math(Un::Exp, arg())?,
            B::Log => self.math(Un::Log, arg())?,
            B::Sqrt => self.math(Un::Sqrt, arg())?,
            B::Tanh => self.math(Un::Tanh, arg())?,
            B::Sigmoid => self.math(Un::Sigmoid, arg())?,
            B::Erf => self.math(Un::Erf, arg())?,
            B::Gelu => self.math(Un::Gelu, arg())?,
            B::Relu => self.math(Un::Relu, arg())?,
            B::Abs => match arg() {
                Value::Int(n) => Value::Int(n.wrapping_abs()),
                x => self.math(Un::Abs, x)?,
            },
            other => super::builtins::call(self, other, &mut arg).map_err(|e| e.naming(TABLE[i as usize].0))?,
        };
        if let (B::Ref, Value::Ref(r), true) = (b, &v, self.jit.tracing()) {
            self.jit.made_ref(r);
        }
        Ok(BuiltinOut::Value(v))
    }

    /// A comparison with a batched operand: a batch of Bools at the innermost level among the
    /// operands (comparisons read values, not derivatives, so perturbations above it go).
    #[inline(never)]
    fn compare_batched(&mut self, p: Prim, a: Value, b: Value) -> FResult<Value> {
        let (a, b) = (strip(&a), strip(&b));
        let tag = match (crate::runtime::perturbed::tag_of(&a), crate::runtime::perturbed::tag_of(&b)) {
            (0, t) | (t, 0) => t,
            (s, t) => self.inner_level(s, t).unwrap_or(s.max(t)),
        };
        ad::batch::compare(self, tag, p, a, b)
    }

    fn math(&mut self, op: Un, x: Value) -> FResult<Value> {
        match x {
            Value::Float(f) => Ok(Value::Float(op.eval(f))),
            other => ad::apply_un(self, op, other),
        }
    }
}

/// While a function is being staged: I/O is refused (it would happen only on the call that
/// traces), and so is a traced value given to a builtin that would read its numbers (a
/// conversion, a string, a reference); the builtins listed here take traced values and
/// stage their work.
fn stage_guard(i: u32, b: B, args: &[Value]) -> FResult<()> {
    let name = TABLE[i as usize].0;
    let io = matches!(
        b,
        B::Print
            | B::Println
            | B::Printf
            | B::ReadFile
            | B::ReadLines
            | B::WriteFile
            | B::Args
            | B::Clock
            | B::ReadLine
            | B::Getenv
            | B::Exit
            | B::ProgressStart
            | B::ProgressTick
            | B::ProgressFinish
            | B::Plot
            | B::PlotWith
            | B::SaveParams
            | B::LoadParams
            | B::LoadNpz
            | B::SaveNpz
            | B::LoadNpy
            | B::SaveNpy
            | B::ReadCsv
            | B::LoadCsv
    );
    if io {
        return Err(Fault::staging(format!("jit: cannot stage I/O (`{name}`) in a staged function"))
            .help("staging runs the function once, when it traces it; do the I/O outside the `jit`"));
    }
    let stages = matches!(
        b,
        B::Reset
            | B::Shift
            | B::Catch
            | B::Grad
            | B::ValueAndGrad
            | B::Jvp
            | B::CustomVjp
            | B::CustomJvp
            | B::Checkpoint
            | B::Vmap
            | B::Jit
            | B::StopGradient
            | B::TreeClip
            | B::Error
            | B::Sin
            | B::Cos
            | B::Tan
            | B::Exp
            | B::Log
            | B::Sqrt
            | B::Tanh
            | B::Sigmoid
            | B::Erf
            | B::Gelu
            | B::Relu
            | B::Abs
            | B::Shape
            | B::Reshape
            | B::Transpose
            | B::Concat
            | B::Slice
            | B::Row
            | B::Sum
            | B::Mean
            | B::Max
            | B::SumAxis
            | B::MeanAxis
            | B::Conv2d
            | B::Conv2dWith
            | B::AvgPool2d
            | B::MaxPool2d
            | B::Softmax
            | B::LogSoftmax
            | B::Logsumexp
            | B::Item
            | B::Astype
            | B::Less
            | B::LessEqual
            | B::Greater
            | B::GreaterEqual
            | B::Equal
            | B::NotEqual
            | B::LogicalAnd
            | B::LogicalOr
            | B::LogicalNot
            | B::Where
            | B::Clip
            | B::MaxOf
            | B::MinOf
            | B::MaxAxis
            | B::MinAxis
            | B::Cumsum
            | B::Normalize
            | B::SoftmaxAxis
            | B::LogSoftmaxAxis
            | B::ExpandDims
            | B::Squeeze
            | B::Stack
            | B::BroadcastTo
            | B::Ravel
            | B::Get
            | B::TreeAdd
            | B::TreeSub
            | B::TreeMul
            | B::TreeDiv
            | B::TreeScale
            | B::TreeAddScalar
            | B::TreeSqrt
            | B::TreeZeros
            | B::TreeSumSquares
            | B::TensorOf
            | B::Full
            | B::Einsum
            | B::Min
            | B::Var
            | B::Gather
            | B::ArgmaxAxis
            | B::ArgminAxis
            | B::Dtype
            | B::Ref
    );
    if !stages && args.iter().any(stage::holds_staged) {
        return Err(Fault::unstageable(&format!("`{name}`")));
    }
    Ok(())
}

/// A comparison's operator as written.
fn comparison(p: Prim) -> &'static str {
    match p {
        Prim::Eq => "==",
        Prim::Ne => "!=",
        Prim::Lt => "<",
        Prim::Le => "<=",
        Prim::Gt => ">",
        _ => ">=",
    }
}

/// Whether a failed match met a traced value with a Float pattern: the match would decide on
/// one call's number.
fn float_pattern_on_staged(p: &Pattern, v: &Value) -> bool {
    match (p, v) {
        (Pattern::Const(Const::Float(_)), v) => stage::is_staged(v),
        (Pattern::As(_, q), v) => float_pattern_on_staged(q, v),
        (Pattern::Tuple(ps), Value::Tuple(vs)) => ps.iter().zip(vs.iter()).any(|(p, x)| float_pattern_on_staged(p, x)),
        (Pattern::Cons(h, t), Value::Cons(c)) => {
            float_pattern_on_staged(h, &c.head) || float_pattern_on_staged(t, &c.tail)
        }
        (Pattern::Con { args, .. }, Value::Con(c)) => {
            args.iter().zip(&c.args).any(|(p, x)| float_pattern_on_staged(p, x))
        }
        (Pattern::Record(fs), Value::Record(r)) => {
            fs.iter().any(|(n, p)| r.get(n).is_some_and(|x| float_pattern_on_staged(p, x)))
        }
        _ => false,
    }
}

/// `Vec::push` of a value built only once there is room for it. A value built beforehand
/// lives in a stack temporary, as it must be dropped should growing panic: written by parts
/// and read back whole at once, which the CPU cannot forward from its store buffer, a stall
/// on every push.
#[inline(always)]
fn push_fresh<T>(v: &mut Vec<T>, f: impl FnOnce() -> T) {
    v.extend(std::iter::once_with(f))
}

/// `{ r with names = vals }`. (Out of `exec`'s loop: a fault raised inside a loop there would
/// resume the inner loop when a `catch` recovers from it.)
fn update_record(r: Value, names: &[Rc<str>], vals: Vec<Value>) -> FResult<Value> {
    let Value::Record(rec) = r else { return Err(Fault::internal("update of a non-record")) };
    let mut values = rec.values.clone();
    for (name, v) in names.iter().zip(vals) {
        match rec.names.iter().position(|x| x == name) {
            Some(i) => values[i] = v,
            None => return Err(Fault::new(format!("record has no field `{name}`"))),
        }
    }
    Ok(Value::Record(Rc::new(RecordVal { names: rec.names.clone(), values })))
}

/// Whether matching `v` against `p` would test a batched value against a constant: one
/// example's Float or Bool, really B of them, which may match differently. (Binding a batched
/// value to a name is fine.) Only the constants of a pattern look, so the common match costs a
/// walk of the pattern.
fn reads_batched(p: &Pattern, v: &Value) -> bool {
    match p {
        Pattern::Wild | Pattern::Bind(_) | Pattern::Const(Const::Unit) => false,
        Pattern::As(_, q) => reads_batched(q, v),
        Pattern::Const(_) => matches!(v, Value::Batched(_)),
        Pattern::Tuple(ps) => match v {
            Value::Tuple(vs) => ps.iter().zip(vs.iter()).any(|(p, x)| reads_batched(p, x)),
            _ => false,
        },
        Pattern::Nil => false,
        Pattern::Cons(h, t) => match v {
            Value::Cons(c) => reads_batched(h, &c.head) || reads_batched(t, &c.tail),
            _ => false,
        },
        Pattern::Con { args, .. } => match v {
            Value::Con(c) => args.iter().zip(&c.args).any(|(p, x)| reads_batched(p, x)),
            _ => false,
        },
        Pattern::Record(fs) => match v {
            Value::Record(r) => fs.iter().any(|(n, p)| r.get(n).is_some_and(|x| reads_batched(p, x))),
            _ => false,
        },
    }
}

/// Whether a value is batched by a `vmap` under its perturbations (a comparison reads values,
/// so a batch under a `grad` inside the `vmap` is compared per example too).
fn batched_under(v: &Value) -> bool {
    match v {
        Value::Batched(_) => true,
        Value::Tracked(t) => batched_under(&t.primal),
        Value::Dual(d) => batched_under(&d.primal),
        _ => false,
    }
}

/// A specialised Int comparison that branches met a non-Int: an Int batched by `vmap` is a
/// condition each example may decide otherwise; anything else is dp's bug.
fn int_fault(operands: &[&Value], what: &str) -> Fault {
    if operands.iter().any(|v| matches!(v, Value::Batched(_))) {
        return Fault::new(BATCHED_BRANCH)
            .help("this test of a batched Int decides a branch; select elementwise with `where` instead");
    }
    Fault::internal(what)
}

fn batched_match() -> Fault {
    Fault::new(format!("{BATCHED_BRANCH} (this `match` tests a batched value against a constant)"))
        .help("select elementwise with `where`, or move the `match` outside the `vmap`")
}

fn match_pattern(p: &Pattern, v: &Value, stack: &mut [Value], base: usize) -> bool {
    match p {
        Pattern::Wild => true,
        Pattern::Bind(s) => {
            stack[base + *s as usize] = v.clone();
            true
        }
        Pattern::As(s, q) => {
            stack[base + *s as usize] = v.clone();
            match_pattern(q, v, stack, base)
        }
        Pattern::Const(c) => match (c, v) {
            (Const::Unit, _) => true,
            (Const::Bool(a), Value::Bool(b)) => a == b,
            (Const::Int(a), Value::Int(b)) => a == b,
            (Const::Float(a), Value::Float(b)) => a == b,
            (Const::Float(a), Value::Tracked(_) | Value::Dual(_)) => {
                matches!(strip(v), Value::Float(b) if *a == b)
            }
            (Const::Str(a), Value::Str(b)) => **a == ***b,
            _ => false,
        },
        Pattern::Tuple(ps) => match v {
            Value::Tuple(vs) => ps.iter().zip(vs.iter()).all(|(p, x)| match_pattern(p, x, stack, base)),
            _ => false,
        },
        Pattern::Nil => matches!(v, Value::Nil),
        Pattern::Cons(h, t) => match v {
            Value::Cons(c) => match_pattern(h, &c.head, stack, base) && match_pattern(t, &c.tail, stack, base),
            _ => false,
        },
        Pattern::Con { tag, args } => match v {
            Value::Con(c) => c.tag == *tag && args.iter().zip(&c.args).all(|(p, x)| match_pattern(p, x, stack, base)),
            _ => false,
        },
        Pattern::Record(fs) => match v {
            Value::Record(r) => fs.iter().all(|(n, p)| r.get(n).is_some_and(|x| match_pattern(p, x, stack, base))),
            _ => false,
        },
    }
}

/// Structural equality without recursion on the Rust stack. Reference cells compare by
/// contents, as OCaml's `=` does; a pair of cells met again while being compared is taken as
/// equal (the coinductive reading: nothing found so far tells them apart), so equality of
/// cyclic structures terminates and agrees with OCaml wherever OCaml's does.
pub fn values_equal(a: &Value, b: &Value) -> FResult<bool> {
    let mut work: Vec<(Value, Value)> = vec![(a.clone(), b.clone())];
    let mut cells: std::collections::HashSet<(*const std::cell::RefCell<Value>, *const std::cell::RefCell<Value>)> =
        std::collections::HashSet::new();
    while let Some((x, y)) = work.pop() {
        use Value::*;
        match (&x, &y) {
            (Unit, Unit) | (Nil, Nil) => {}
            (Bool(p), Bool(q)) if p == q => {}
            (Int(p), Int(q)) if p == q => {}
            (Float(p), Float(q)) if p == q => {}
            (Str(p), Str(q)) if p == q => {}
            (Tuple(p), Tuple(q)) => work.extend(p.iter().cloned().zip(q.iter().cloned())),
            (Cons(_), Cons(_)) => {
                let (mut p, mut q) = (x.clone(), y.clone());
                loop {
                    match (&p, &q) {
                        (Cons(c), Cons(d)) => {
                            work.push((c.head.clone(), d.head.clone()));
                            let (np, nq) = (c.tail.clone(), d.tail.clone());
                            p = np;
                            q = nq;
                        }
                        _ => {
                            work.push((p, q));
                            break;
                        }
                    }
                }
            }
            (Record(p), Record(q)) => {
                if p.names != q.names {
                    return Ok(false);
                }
                work.extend(p.values.iter().cloned().zip(q.values.iter().cloned()));
            }
            (Con(p), Con(q)) => {
                if p.tag != q.tag {
                    return Ok(false);
                }
                work.extend(p.args.iter().cloned().zip(q.args.iter().cloned()));
            }
            (Ref(p), Ref(q)) => {
                if !Rc::ptr_eq(p, q) && cells.insert((Rc::as_ptr(p), Rc::as_ptr(q))) {
                    let (pv, qv) = (p.borrow().clone(), q.borrow().clone());
                    work.push((pv, qv));
                }
            }
            (Tracked(_) | Dual(_), _) | (_, Tracked(_) | Dual(_)) => work.push((strip(&x), strip(&y))),
            // A batched leaf inside a structure: each example may compare otherwise, and one
            // Bool cannot say so.
            (Batched(_), _) | (_, Batched(_)) => {
                return Err(Fault::unbatched("==").help(
                    "compare the batched parts one by one (`==` on a batched Float or Tensor gives a batched Bool)",
                ))
            }
            (Tensor(p), Tensor(q)) => {
                // Equal values of any dtypes (`tensor [1] == tensor [1.0]`), as `==` on Floats.
                let same = match (p.f32s()?, q.f32s()?) {
                    (Some(a), Some(b)) => a == b,
                    _ => p.to_f64s()? == q.to_f64s()?,
                };
                if p.shape() != q.shape() || !same {
                    return Ok(false);
                }
            }
            (Closure(_) | Builtin(_) | Pap(_) | Cont(_), _) => {
                return Err(Fault::new("cannot compare functions for equality"));
            }
            _ => return Ok(false),
        }
    }
    Ok(true)
}

/// `a < b` (or `<=`, `>`, `>=`): false whenever either side is NaN (IEEE, as the unperturbed
/// fast path and JAX), so a perturbed NaN takes the branch a plain one takes. Out of line: it
/// keeps `prim2`, which the interpreter loop inlines, small.
#[inline(never)]
fn ordered(p: Prim, a: &Value, b: &Value) -> FResult<bool> {
    let nan = |v: &Value| matches!(strip(v), Value::Float(x) if x.is_nan());
    if nan(a) || nan(b) {
        return Ok(false);
    }
    let o = compare(a, b)?;
    Ok(match p {
        Prim::Lt => o.is_lt(),
        Prim::Le => o.is_le(),
        Prim::Gt => o.is_gt(),
        _ => o.is_ge(),
    })
}

pub fn compare(a: &Value, b: &Value) -> FResult<std::cmp::Ordering> {
    use Value::*;
    Ok(match (a, b) {
        (Int(x), Int(y)) => x.cmp(y),
        (Float(x), Float(y)) => x.partial_cmp(y).unwrap_or(std::cmp::Ordering::Greater),
        (Str(x), Str(y)) => x.cmp(y),
        (Tracked(_) | Dual(_), _) | (_, Tracked(_) | Dual(_)) => return compare(&strip(a), &strip(b)),
        _ => return Err(Fault::internal(format!("ordering {} and {}", a.type_name(), b.type_name()))),
    })
}
