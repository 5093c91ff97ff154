//! Lowers core IR to bytecode for the abstract machine. Arithmetic whose operand type the
//! checker resolved to Int or Float is specialised here; the rest dispatches at run time.

use crate::builtins::TABLE;
use crate::core::{Const, Core, Lambda, Pattern, Prim, VarRef};
use crate::runtime::code::{Cmp, ConDesc, Function, IntOp, Op};
use crate::runtime::value::Value;
use crate::source::Span;
use crate::types::ty::{Subst, Ty};
use std::rc::Rc;

/// Builtins cheap enough to be instructions of their own.
fn inline_builtin(i: u32) -> Option<Op> {
    use crate::builtins::B;
    use crate::tensor::Un;
    Some(match TABLE[i as usize].1 {
        B::Float => Op::IntToFloat,
        B::Sin => Op::Math(Un::Sin),
        B::Cos => Op::Math(Un::Cos),
        B::Tan => Op::Math(Un::Tan),
        B::Exp => Op::Math(Un::Exp),
        B::Log => Op::Math(Un::Log),
        B::Sqrt => Op::Math(Un::Sqrt),
        B::Tanh => Op::Math(Un::Tanh),
        B::Sigmoid => Op::Math(Un::Sigmoid),
        B::Erf => Op::Math(Un::Erf),
        B::Gelu => Op::Math(Un::Gelu),
        B::Relu => Op::Math(Un::Relu),
        _ => return None,
    })
}

/// An Int literal small enough to live inside an instruction (and to negate).
fn small_int(c: &Core) -> Option<i32> {
    match c {
        Core::Const(Const::Int(n)) if (-(i32::MAX as i64)..=i32::MAX as i64).contains(n) => Some(*n as i32),
        _ => None,
    }
}

/// The slot of an expression that just reads a local.
fn local_slot(c: &Core) -> Option<u32> {
    match c {
        Core::Var(VarRef::Local(s), _) => Some(*s),
        _ => None,
    }
}

struct Builder<'a> {
    f: Function,
    subst: &'a Subst,
    /// How this function refers to itself (a top-level `let rec` global, or `SelfRef`), so
    /// its own saturated calls skip the closure dispatch.
    self_ref: Option<VarRef>,
}

pub fn compile_toplevel(code: &Core, nlocals: u32, span: Span, subst: &Subst) -> Rc<Function> {
    let lam = Lambda { name: "<top>".into(), arity: 0, nlocals, captures: Vec::new(), body: code.clone(), span };
    compile_lambda(&lam, subst, None)
}

fn compile_lambda(l: &Lambda, subst: &Subst, self_ref: Option<VarRef>) -> Rc<Function> {
    let mut b = Builder {
        f: Function {
            name: l.name.clone(),
            arity: l.arity,
            nlocals: l.nlocals.max(l.arity),
            code: Vec::new(),
            spans: Vec::new(),
            consts: Vec::new(),
            protos: Vec::new(),
            pats: Vec::new(),
            names: Vec::new(),
            cons: Vec::new(),
            span: l.span,
        },
        subst,
        self_ref,
    };
    b.expr(&l.body, true, l.span);
    b.emit(Op::Return, l.span);
    Rc::new(b.f)
}

#[derive(PartialEq)]
enum NumKind {
    Int,
    Float,
    Other,
}

impl Builder<'_> {
    fn emit(&mut self, op: Op, span: Span) -> usize {
        self.f.code.push(op);
        self.f.spans.push(span);
        self.f.code.len() - 1
    }
    fn here(&self) -> u32 {
        self.f.code.len() as u32
    }
    fn patch(&mut self, at: usize, target: u32) {
        match &mut self.f.code[at] {
            Op::Jump(t)
            | Op::JumpIfFalse(t)
            | Op::MatchOrJump(_, t)
            | Op::MatchLocal(_, _, t)
            | Op::IntBranch(_, t)
            | Op::IntBranchK(_, _, t)
            | Op::LocalBranchK(_, _, _, t) => *t = target,
            _ => unreachable!("patching a non-jump"),
        }
    }
    fn konst(&mut self, v: Value) -> u32 {
        self.f.consts.push(v);
        (self.f.consts.len() - 1) as u32
    }
    fn num_kind(&self, t: &Ty) -> NumKind {
        match self.subst.prune(t) {
            Ty::Con(n, _) if &*n == "Int" => NumKind::Int,
            Ty::Con(n, _) if &*n == "Float" => NumKind::Float,
            _ => NumKind::Other,
        }
    }

    fn var(&mut self, r: VarRef, span: Span) {
        let op = match r {
            VarRef::Local(s) => Op::Local(s),
            VarRef::Capture(i) => Op::Capture(i),
            VarRef::SelfRef => Op::SelfRef,
            VarRef::Global(g) => Op::Global(g),
        };
        self.emit(op, span);
    }

    /// Emits code leaving the value of `e` on the stack; in tail position, calls become
    /// tail calls and the function returns.
    fn expr(&mut self, e: &Core, tail: bool, span: Span) {
        match e {
            Core::Const(c) => {
                let v = match c {
                    Const::Unit => Value::Unit,
                    Const::Bool(b) => Value::Bool(*b),
                    Const::Int(n) => Value::Int(*n),
                    Const::Float(x) => Value::Float(*x),
                    Const::Str(s) => Value::Str(Rc::new(s.to_string())),
                };
                let k = self.konst(v);
                self.emit(Op::Const(k), span);
            }
            // The span is the return's, as that is what a fault after it reports (a `grad`'s
            // backward pass runs when its function returns).
            Core::Var(VarRef::Local(s), _) if tail => {
                self.emit(Op::ReturnLocal(*s), span);
                return;
            }
            Core::Var(r, sp) => self.var(*r, *sp),
            Core::Builtin(i, sp) => {
                if crate::builtins::arity_of(*i) == 0 {
                    self.emit(Op::CallBuiltin(*i), *sp);
                } else {
                    self.emit(Op::Builtin(*i), *sp);
                }
            }
            Core::Lam(l) => self.closure(l, span),
            Core::App(f, args, sp) => {
                if let Core::Builtin(i, _) = **f {
                    let arity = crate::builtins::arity_of(i);
                    if arity > 0 && args.len() >= arity {
                        for a in &args[..arity] {
                            self.expr(a, false, *sp);
                        }
                        self.emit(inline_builtin(i).unwrap_or(Op::CallBuiltin(i)), *sp);
                        if args.len() > arity {
                            for a in &args[arity..] {
                                self.expr(a, false, *sp);
                            }
                            let n = (args.len() - arity) as u32;
                            self.emit(if tail { Op::TailCall(n) } else { Op::Call(n) }, *sp);
                        } else if tail {
                            self.emit(Op::Return, *sp);
                        }
                        return;
                    }
                }
                let n = args.len() as u32;
                if let Core::Var(r, _) = **f {
                    if Some(r) == self.self_ref && n == self.f.arity {
                        // A saturated call of the function to itself: a loop when in tail
                        // position, a frame push without a callee slot otherwise.
                        for a in args {
                            self.expr(a, false, *sp);
                        }
                        self.emit(if tail { Op::TailSelf(n) } else { Op::CallSelf(n) }, *sp);
                        return;
                    }
                }
                self.expr(f, false, *sp);
                for a in args {
                    self.expr(a, false, *sp);
                }
                self.emit(if tail { Op::TailCall(n) } else { Op::Call(n) }, *sp);
                return;
            }
            Core::Let(slot, v, body) => {
                self.expr(v, false, span);
                self.emit(Op::StoreLocal(*slot), span);
                self.expr(body, tail, span);
                return;
            }
            Core::LetPat(p, v, body, sp) => {
                self.expr(v, false, *sp);
                let pi = self.pat(p);
                let j = self.emit(Op::MatchOrJump(pi, 0), *sp);
                self.expr(body, tail, span);
                let done = self.emit(Op::Jump(0), *sp);
                let fail = self.here();
                self.patch(j, fail);
                self.emit(Op::MatchFail, *sp);
                let end = self.here();
                self.patch(done, end);
                return;
            }
            Core::LetRec(binds, body) => {
                for (slot, l) in binds {
                    self.closure_with(l, l.span, Some(VarRef::SelfRef));
                    self.emit(Op::StoreLocal(*slot), l.span);
                }
                self.expr(body, tail, span);
                return;
            }
            Core::SetGlobal(g, v) => {
                match &**v {
                    Core::Lam(l) => self.closure_with(l, span, Some(VarRef::Global(*g))),
                    v => self.expr(v, false, span),
                }
                self.emit(Op::SetGlobal(*g), span);
                let k = self.konst(Value::Unit);
                self.emit(Op::Const(k), span);
            }
            Core::If(c, a, b) => {
                let j = self.condition(c, span);
                self.expr(a, tail, span);
                let done = self.emit(Op::Jump(0), span);
                let l = self.here();
                self.patch(j, l);
                self.expr(b, tail, span);
                let end = self.here();
                self.patch(done, end);
                return;
            }
            Core::Match(slot, scrut, arms, sp) => {
                self.expr(scrut, false, *sp);
                self.emit(Op::StoreLocal(*slot), *sp);
                let mut ends = Vec::new();
                for (p, body) in arms {
                    let pi = self.pat(p);
                    let j = self.emit(Op::MatchLocal(*slot, pi, 0), *sp);
                    self.expr(body, tail, *sp);
                    ends.push(self.emit(Op::Jump(0), *sp));
                    let next = self.here();
                    self.patch(j, next);
                }
                self.emit(Op::MatchFail, *sp);
                let end = self.here();
                for j in ends {
                    self.patch(j, end);
                }
                return;
            }
            Core::Seq(a, b) => {
                self.expr(a, false, span);
                self.emit(Op::Pop, span);
                self.expr(b, tail, span);
                return;
            }
            Core::And(a, b) | Core::Or(a, b) => {
                let is_and = matches!(e, Core::And(..));
                self.expr(a, false, span);
                if !is_and {
                    self.emit(Op::Prim1(Prim::Not), span);
                }
                let j = self.emit(Op::JumpIfFalse(0), span);
                self.expr(b, tail, span);
                let done = self.emit(Op::Jump(0), span);
                let l = self.here();
                self.patch(j, l);
                let k = self.konst(Value::Bool(!is_and));
                self.emit(Op::Const(k), span);
                let end = self.here();
                self.patch(done, end);
                return;
            }
            Core::Prim(p, args, ty, sp) => {
                let kind = self.num_kind(ty);
                if kind != NumKind::Int || !self.fused_int(*p, args, *sp) {
                    self.prim(*p, args, kind, *sp);
                }
            }
            Core::Tuple(es) => {
                for a in es {
                    self.expr(a, false, span);
                }
                self.emit(Op::MakeTuple(es.len() as u32), span);
            }
            Core::List(es) => {
                for a in es {
                    self.expr(a, false, span);
                }
                self.emit(Op::MakeList(es.len() as u32), span);
            }
            Core::Record(names, es) => {
                for a in es {
                    self.expr(a, false, span);
                }
                self.f.names.push(names.clone());
                let ni = (self.f.names.len() - 1) as u32;
                self.emit(Op::MakeRecord(ni, es.len() as u32), span);
            }
            Core::Update(base, fields, sp) => {
                self.expr(base, false, *sp);
                for (_, v) in fields {
                    self.expr(v, false, *sp);
                }
                self.f.names.push(fields.iter().map(|(n, _)| n.clone()).collect());
                let ni = (self.f.names.len() - 1) as u32;
                self.emit(Op::Update(ni, fields.len() as u32), *sp);
            }
            Core::Field(base, name, sp) => {
                self.expr(base, false, *sp);
                let k = self.konst(Value::Str(Rc::new(name.to_string())));
                self.emit(Op::Field(k), *sp);
            }
            Core::Con { tag, name, args, .. } => {
                for a in args {
                    self.expr(a, false, span);
                }
                self.f.cons.push(ConDesc { tag: *tag, name: name.clone() });
                let ci = (self.f.cons.len() - 1) as u32;
                self.emit(Op::MakeCon(ci, args.len() as u32), span);
            }
        }
        if tail {
            self.emit(Op::Return, span);
        }
    }

    /// Int arithmetic on a local and a small constant, or on two locals, as one instruction.
    /// Returns false, emitting nothing, for anything else.
    fn fused_int(&mut self, p: Prim, args: &[Core], sp: Span) -> bool {
        let [a, b] = args else { return false };
        match (p, local_slot(a), local_slot(b), small_int(b)) {
            (Prim::Add | Prim::Sub, slot, _, Some(k)) => {
                let k = if p == Prim::Sub { -k } else { k };
                match slot {
                    Some(s) => self.emit(Op::LocalAddK(s, k), sp),
                    None => {
                        self.expr(a, false, sp);
                        self.emit(Op::AddIntK(k), sp)
                    }
                };
                true
            }
            (_, Some(x), Some(y), _) => match IntOp::of(p) {
                Some(op) => {
                    self.emit(Op::IntLocals(op, x, y), sp);
                    true
                }
                None => false,
            },
            _ => false,
        }
    }

    fn prim(&mut self, p: Prim, args: &[Core], kind: NumKind, sp: Span) {
        for a in args {
            self.expr(a, false, sp);
        }
        let op = match (p, kind) {
            (Prim::Add, NumKind::Int) => Op::AddInt,
            (Prim::Sub, NumKind::Int) => Op::SubInt,
            (Prim::Mul, NumKind::Int) => Op::MulInt,
            (Prim::Lt, NumKind::Int) => Op::LtInt,
            (Prim::Le, NumKind::Int) => Op::LeInt,
            (Prim::Gt, NumKind::Int) => Op::GtInt,
            (Prim::Ge, NumKind::Int) => Op::GeInt,
            (Prim::Eq, NumKind::Int) => Op::EqInt,
            (Prim::Add, NumKind::Float) => Op::AddFloat,
            (Prim::Sub, NumKind::Float) => Op::SubFloat,
            (Prim::Mul, NumKind::Float) => Op::MulFloat,
            (Prim::Div, NumKind::Float) => Op::DivFloat,
            (Prim::Lt, NumKind::Float) => Op::LtFloat,
            (Prim::Gt, NumKind::Float) => Op::GtFloat,
            _ if args.len() == 1 => Op::Prim1(p),
            _ => Op::Prim2(p),
        };
        self.emit(op, sp);
    }

    /// Emits a condition and a jump taken when it is false; returns the jump to patch.
    /// Int comparisons fuse with the branch.
    fn condition(&mut self, c: &Core, span: Span) -> usize {
        if let Core::Prim(p, args, ty, sp) = c {
            if let (Some(cmp), NumKind::Int) = (Cmp::of(*p), self.num_kind(ty)) {
                if let (Some(s), Some(k)) = (local_slot(&args[0]), small_int(&args[1])) {
                    return self.emit(Op::LocalBranchK(s, cmp, k, 0), *sp);
                }
                self.expr(&args[0], false, *sp);
                if let Some(k) = small_int(&args[1]) {
                    return self.emit(Op::IntBranchK(cmp, k, 0), *sp);
                }
                self.expr(&args[1], false, *sp);
                return self.emit(Op::IntBranch(cmp, 0), *sp);
            }
        }
        self.expr(c, false, span);
        // The branch is located at its condition where that has a place of its own (a fault
        // there names the `if`: a condition batched by `vmap`).
        let at = match c {
            Core::Prim(_, _, _, sp) | Core::App(_, _, sp) | Core::Var(_, sp) | Core::Field(_, _, sp) => *sp,
            _ => span,
        };
        self.emit(Op::JumpIfFalse(0), at)
    }

    fn closure(&mut self, l: &Rc<Lambda>, span: Span) {
        self.closure_with(l, span, None)
    }

    fn closure_with(&mut self, l: &Rc<Lambda>, span: Span, self_ref: Option<VarRef>) {
        let f = compile_lambda(l, self.subst, self_ref);
        self.f.protos.push((f, l.captures.clone()));
        let i = (self.f.protos.len() - 1) as u32;
        self.emit(Op::Closure(i), span);
    }

    fn pat(&mut self, p: &Pattern) -> u32 {
        self.f.pats.push(p.clone());
        (self.f.pats.len() - 1) as u32
    }
}
