//! The code the machine runs: bytecode instructions and compiled functions. The compiler
//! (eval/compile.rs) writes it; closures (runtime/value.rs) carry it; the machine reads it.
//! It sits in the run-time layer because values hold it, and values are below the evaluator.

use crate::core::{Pattern, Prim, VarRef};
use crate::runtime::value::Value;
use crate::source::Span;
use std::rc::Rc;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    Const(u32),
    Local(u32),
    StoreLocal(u32),
    Capture(u32),
    SelfRef,
    Global(u32),
    SetGlobal(u32),
    Builtin(u32),
    Closure(u32),
    Call(u32),
    TailCall(u32),
    /// The running function calling itself with all its arguments (see `Builder::self_ref`).
    CallSelf(u32),
    TailSelf(u32),
    /// A builtin applied to exactly its arity.
    CallBuiltin(u32),
    Return,
    Jump(u32),
    JumpIfFalse(u32),
    Pop,
    /// Pops a value; if it does not match pattern `pats[.0]`, jumps to `.1`.
    MatchOrJump(u32, u32),
    MatchFail,
    /// Pops two Ints; jumps to the target unless the comparison holds.
    IntBranch(Cmp, u32),
    /// Pops one Int; jumps to the target unless `top cmp k` holds.
    IntBranchK(Cmp, i32, u32),
    /// A unary math builtin applied in place to the top of the stack.
    Math(crate::tensor::Un),
    /// `float` in place.
    IntToFloat,
    /// Adds a constant to the Int on top of the stack.
    AddIntK(i32),
    // Fused forms of the commonest sequences that read locals: each saves a dispatch and the
    // push and pop of the value read.
    /// `Local(s); AddIntK(k)`.
    LocalAddK(u32, i32),
    /// `Local(s); IntBranchK(cmp, k, target)`.
    LocalBranchK(u32, Cmp, i32, u32),
    /// `Local(a); Local(b)` and an Int operation.
    IntLocals(IntOp, u32, u32),
    /// `Local(s); Return`.
    ReturnLocal(u32),
    /// `Local(s); MatchOrJump(pat, target)`, matching the local in place.
    MatchLocal(u32, u32, u32),
    AddInt,
    SubInt,
    MulInt,
    LtInt,
    LeInt,
    GtInt,
    GeInt,
    EqInt,
    AddFloat,
    SubFloat,
    MulFloat,
    DivFloat,
    LtFloat,
    GtFloat,
    Prim1(Prim),
    Prim2(Prim),
    MakeTuple(u32),
    MakeList(u32),
    /// Field-name table index, field count.
    MakeRecord(u32, u32),
    /// Field-name constant (a Str) index.
    Field(u32),
    /// Field-name table index (the updated fields, in order), count.
    Update(u32, u32),
    /// Constructor info index, argument count.
    MakeCon(u32, u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntOp {
    Add,
    Sub,
    Mul,
}

impl IntOp {
    pub fn of(p: Prim) -> Option<IntOp> {
        Some(match p {
            Prim::Add => IntOp::Add,
            Prim::Sub => IntOp::Sub,
            Prim::Mul => IntOp::Mul,
            _ => return None,
        })
    }
    #[inline]
    pub fn apply(self, a: i64, b: i64) -> i64 {
        match self {
            IntOp::Add => a.wrapping_add(b),
            IntOp::Sub => a.wrapping_sub(b),
            IntOp::Mul => a.wrapping_mul(b),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

impl Cmp {
    #[inline]
    pub fn holds(self, a: i64, b: i64) -> bool {
        match self {
            Cmp::Lt => a < b,
            Cmp::Le => a <= b,
            Cmp::Gt => a > b,
            Cmp::Ge => a >= b,
            Cmp::Eq => a == b,
            Cmp::Ne => a != b,
        }
    }
    pub fn of(p: Prim) -> Option<Cmp> {
        Some(match p {
            Prim::Lt => Cmp::Lt,
            Prim::Le => Cmp::Le,
            Prim::Gt => Cmp::Gt,
            Prim::Ge => Cmp::Ge,
            Prim::Eq => Cmp::Eq,
            Prim::Ne => Cmp::Ne,
            _ => return None,
        })
    }
}

pub struct ConDesc {
    pub tag: u32,
    pub name: Rc<str>,
}

pub struct Function {
    pub name: Rc<str>,
    pub arity: u32,
    pub nlocals: u32,
    pub code: Vec<Op>,
    pub spans: Vec<Span>,
    pub consts: Vec<Value>,
    pub protos: Vec<(Rc<Function>, Vec<VarRef>)>,
    pub pats: Vec<Pattern>,
    pub names: Vec<Rc<[Rc<str>]>>,
    pub cons: Vec<ConDesc>,
    pub span: Span,
}
