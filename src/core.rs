//! The core IR: what the checker elaborates to and the compiler lowers to bytecode. Every
//! variable is resolved to a slot (DESIGN.md principle 4), every primitive is explicit, and
//! overloaded arithmetic carries the operand type so the compiler can specialise it.

use crate::source::Span;
use crate::types::ty::Ty;
use std::rc::Rc;

/// Where a variable lives at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VarRef {
    /// A slot of the current function's frame.
    Local(u32),
    /// Index into the current closure's captured values.
    Capture(u32),
    /// The closure currently running (a self-recursive reference).
    SelfRef,
    Global(u32),
}

#[derive(Clone, Debug)]
pub enum Const {
    Unit,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Rc<str>),
}

/// A primitive operation applied to all its arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prim {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Pow,
    MatMul,
    Neg,
    Not,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Cons,
    Append,
    Deref,
    Assign,
}

#[derive(Clone, Debug)]
pub struct Lambda {
    pub name: Rc<str>,
    pub arity: u32,
    /// Parameters occupy locals `0..arity`.
    pub nlocals: u32,
    /// How to fill the closure's captured values when it is created, in the creator's frame.
    pub captures: Vec<VarRef>,
    pub body: Core,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum Pattern {
    Wild,
    Bind(u32),
    Const(Const),
    Tuple(Vec<Pattern>),
    Nil,
    Cons(Box<Pattern>, Box<Pattern>),
    Con {
        tag: u32,
        args: Vec<Pattern>,
    },
    Record(Vec<(Rc<str>, Pattern)>),
    /// Binds the whole value and continues matching it.
    As(u32, Box<Pattern>),
}

#[derive(Clone, Debug)]
pub enum Core {
    Const(Const),
    Var(VarRef, Span),
    Lam(Rc<Lambda>),
    App(Box<Core>, Vec<Core>, Span),
    /// Binds a local slot.
    Let(u32, Box<Core>, Box<Core>),
    /// Destructures a value; a failed match is a run-time error at the span.
    LetPat(Pattern, Box<Core>, Box<Core>, Span),
    /// Local recursive functions: slots, lambdas, body.
    LetRec(Vec<(u32, Rc<Lambda>)>, Box<Core>),
    SetGlobal(u32, Box<Core>),
    If(Box<Core>, Box<Core>, Box<Core>),
    /// Scrutinee slot, scrutinee, arms.
    Match(u32, Box<Core>, Vec<(Pattern, Core)>, Span),
    Seq(Box<Core>, Box<Core>),
    And(Box<Core>, Box<Core>),
    Or(Box<Core>, Box<Core>),
    /// A primitive; the type is the first operand's, resolved by the compiler.
    Prim(Prim, Vec<Core>, Ty, Span),
    Tuple(Vec<Core>),
    List(Vec<Core>),
    /// Field names (sorted) and values in the same order.
    Record(Rc<[Rc<str>]>, Vec<Core>),
    Update(Box<Core>, Vec<(Rc<str>, Core)>, Span),
    Field(Box<Core>, Rc<str>, Span),
    Con {
        tag: u32,
        name: Rc<str>,
        arity: u32,
        args: Vec<Core>,
    },
    /// A built-in function by index into the builtin table.
    Builtin(u32, Span),
}
