//! The surface syntax tree. Every node carries its span.

use crate::source::Span;

#[derive(Clone, Debug, PartialEq)]
pub enum Lit {
    Int(i64),
    Float(f64),
    Str(String),
    Bool(bool),
    Unit,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Pow,
    MatMul,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    Cons,
    Append,
    Pipe,
    Assign,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        use BinOp::*;
        match self {
            Add => "+",
            Sub => "-",
            Mul => "*",
            Div => "/",
            Rem => "%",
            Pow => "**",
            MatMul => "@",
            Eq => "==",
            Ne => "!=",
            Lt => "<",
            Le => "<=",
            Gt => ">",
            Ge => ">=",
            And => "&&",
            Or => "||",
            Cons => "::",
            Append => "++",
            Pipe => "|>",
            Assign => ":=",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Not,
    Deref,
}

#[derive(Clone, Debug)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct Field<T> {
    pub name: String,
    pub span: Span,
    pub value: T,
}

#[derive(Clone, Debug)]
pub enum ExprKind {
    Lit(Lit),
    Var(String),
    Con(String),
    App(Box<Expr>, Box<Expr>),
    Lam(Vec<Pat>, Box<Expr>),
    Let(Box<Pat>, Box<Expr>, Box<Expr>),
    LetRec(Vec<FunDef>, Box<Expr>),
    If(Box<Expr>, Box<Expr>, Option<Box<Expr>>),
    Match(Box<Expr>, Vec<(Pat, Expr)>),
    Seq(Box<Expr>, Box<Expr>),
    Bin(BinOp, Span, Box<Expr>, Box<Expr>),
    Un(UnOp, Box<Expr>),
    Tuple(Vec<Expr>),
    List(Vec<Expr>),
    Record(Vec<Field<Expr>>),
    Update(Box<Expr>, Vec<Field<Expr>>),
    Dot(Box<Expr>, String, Span),
    Annot(Box<Expr>, TypeExpr),
}

#[derive(Clone, Debug)]
pub struct FunDef {
    pub name: String,
    pub name_span: Span,
    pub params: Vec<Pat>,
    pub body: Expr,
}

#[derive(Clone, Debug)]
pub struct Pat {
    pub kind: PatKind,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum PatKind {
    Wild,
    Var(String),
    Lit(Lit),
    Tuple(Vec<Pat>),
    List(Vec<Pat>),
    Cons(Box<Pat>, Box<Pat>),
    Con(String, Vec<Pat>),
    Record(Vec<Field<Option<Pat>>>),
    Annot(Box<Pat>, TypeExpr),
}

#[derive(Clone, Debug)]
pub struct TypeExpr {
    pub kind: TypeExprKind,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum TypeExprKind {
    Var(String),
    Con(String, Vec<TypeExpr>),
    Fun(Box<TypeExpr>, Box<TypeExpr>),
    Tuple(Vec<TypeExpr>),
    Record(Vec<Field<TypeExpr>>),
}

#[derive(Clone, Debug)]
pub struct Variant {
    pub name: String,
    pub span: Span,
    pub args: Vec<TypeExpr>,
}

#[derive(Clone, Debug)]
pub enum TypeBody {
    Variants(Vec<Variant>),
    Alias(TypeExpr),
}

#[derive(Clone, Debug)]
pub struct TypeDecl {
    pub name: String,
    pub params: Vec<String>,
    pub body: TypeBody,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum ImportTarget {
    Stdlib(String),
    File(String),
}

#[derive(Clone, Debug)]
pub enum ItemKind {
    Let(Pat, Expr),
    LetRec(Vec<FunDef>),
    /// One `type … and …` group (usually of one declaration).
    Type(Vec<TypeDecl>),
    Import(ImportTarget),
    Expr(Expr),
}

#[derive(Clone, Debug)]
pub struct Item {
    pub kind: ItemKind,
    pub span: Span,
}
