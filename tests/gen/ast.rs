//! The generated programs: one typed AST that both printers (dp and OCaml) read. Nodes carry
//! the types a printer needs where the two languages spell an operation differently
//! (`+` and `+.`, `++` and `^`/`@`) or print a value type-directedly (OCaml has no generic
//! `show`).

#[derive(Clone, Debug, PartialEq)]
pub enum Ty {
    Int,
    Float,
    Bool,
    Str,
    Unit,
    List(Box<Ty>),
    Tuple(Vec<Ty>),
    /// The prelude's `Option`.
    Option(Box<Ty>),
    Ref(Box<Ty>),
    Fun(Box<Ty>, Box<Ty>),
    /// One of the program's record shapes (`Program::records`).
    Record(usize),
    /// One of the program's variant declarations, with its type argument if it has a parameter.
    Variant(usize, Vec<Ty>),
    /// A tensor of a known shape (dp only; its dp type is just `Tensor`).
    Tensor(Vec<usize>),
    /// A quantified variable of a type scheme (only inside `Scheme`s).
    Var(u32),
    /// A type parameter of the polymorphic function whose body is being generated: nothing is
    /// known about its values, so only variables and calls produce them.
    Opaque(u32),
    /// The type parameter of a variant declaration (only in constructor argument types).
    Param,
}

pub fn list(t: Ty) -> Ty {
    Ty::List(Box::new(t))
}
pub fn option(t: Ty) -> Ty {
    Ty::Option(Box::new(t))
}
pub fn reference(t: Ty) -> Ty {
    Ty::Ref(Box::new(t))
}
pub fn fun(a: Ty, b: Ty) -> Ty {
    Ty::Fun(Box::new(a), Box::new(b))
}

impl Ty {
    pub fn any(&self, p: &dyn Fn(&Ty) -> bool) -> bool {
        p(self)
            || match self {
                Ty::List(t) | Ty::Option(t) | Ty::Ref(t) => t.any(p),
                Ty::Fun(a, b) => a.any(p) || b.any(p),
                Ty::Tuple(ts) | Ty::Variant(_, ts) => ts.iter().any(|t| t.any(p)),
                _ => false,
            }
    }

    /// Replaces `Param` (a constructor argument's type) by the variant's type argument.
    pub fn subst_param(&self, arg: Option<&Ty>) -> Ty {
        self.map(&|t| match (t, arg) {
            (Ty::Param, Some(a)) => Some(a.clone()),
            _ => None,
        })
    }

    /// Rebuilds the type bottom-up, replacing each node for which `f` answers.
    pub fn map(&self, f: &dyn Fn(&Ty) -> Option<Ty>) -> Ty {
        if let Some(t) = f(self) {
            return t;
        }
        match self {
            Ty::List(t) => list(t.map(f)),
            Ty::Option(t) => option(t.map(f)),
            Ty::Ref(t) => reference(t.map(f)),
            Ty::Fun(a, b) => fun(a.map(f), b.map(f)),
            Ty::Tuple(ts) => Ty::Tuple(ts.iter().map(|t| t.map(f)).collect()),
            Ty::Variant(i, ts) => Ty::Variant(*i, ts.iter().map(|t| t.map(f)).collect()),
            t => t.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct VariantDecl {
    pub name: String,
    pub has_param: bool,
    /// Constructor names and argument types (`Param` for the parameter; the declaration itself
    /// appears as `Variant(self, [Param])` or `Variant(self, [])`).
    pub ctors: Vec<(String, Vec<Ty>)>,
}

#[derive(Clone, Debug)]
pub struct RecordDecl {
    /// Field names are unique across the program (`r0a`, `r1b`, …), so OCaml infers the
    /// record type from any one field as dp does from its row. Sorted by name, as dp prints.
    pub fields: Vec<(String, Ty)>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    MatMul,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    /// `++` on lists or strings (the operand type tells which).
    Append,
    Cons,
}

#[derive(Clone, Debug)]
pub enum Pat {
    Wild,
    Var(String),
    Int(i64),
    Str(String),
    Bool(bool),
    Tuple(Vec<Pat>),
    Nil,
    Cons(Box<Pat>, Box<Pat>),
    /// `[p1, p2]`: a list of exactly these elements.
    List(Vec<Pat>),
    Ctor(usize, usize, Vec<Pat>),
    Some(Box<Pat>),
    None,
    /// Some of a record's fields, each bound to a pattern.
    Record(Vec<(String, Pat)>),
}

/// One function of a `let rec … and …` group.
#[derive(Clone, Debug)]
pub struct RecFn {
    pub name: String,
    pub params: Vec<Param>,
    pub body: Expr,
}

#[derive(Clone, Debug)]
pub struct Param {
    pub pat: Pat,
    /// Written as an annotation on the parameter when present.
    pub ann: Option<Ty>,
}

#[derive(Clone, Debug)]
pub enum Expr {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    Unit,
    Var(String),
    /// The operand type decides the OCaml operator (`+` or `+.`, `^` or `@`).
    Bin(BinOp, Box<Expr>, Box<Expr>, Ty),
    Neg(Box<Expr>, Ty),
    Not(Box<Expr>),
    /// A one-argument numeric builtin (`sin`, `sqrt`, `abs`, `floor`, `float`, `int`) at a type.
    Math(&'static str, Box<Expr>, Ty),
    If(Box<Expr>, Box<Expr>, Box<Expr>),
    Let(Pat, Box<Expr>, Box<Expr>),
    /// `let rec f … and g … in e`.
    LetRec(Vec<RecFn>, Box<Expr>),
    Fun(Vec<Param>, Box<Expr>),
    App(Box<Expr>, Vec<Expr>),
    Tuple(Vec<Expr>),
    List(Vec<Expr>),
    Record(Vec<(String, Expr)>),
    Field(Box<Expr>, String),
    With(Box<Expr>, Vec<(String, Expr)>),
    Ctor(usize, usize, Vec<Expr>),
    Some(Box<Expr>),
    None,
    Match(Box<Expr>, Vec<(Pat, Expr)>),
    Ref(Box<Expr>),
    Deref(Box<Expr>),
    Assign(Box<Expr>, Box<Expr>),
    Seq(Box<Expr>, Box<Expr>),
    /// `print`/`println` (newline true) of a value of the type.
    Print(Box<Expr>, Ty, bool),
    Show(Box<Expr>, Ty),
    /// `(e : T)`.
    Annot(Box<Expr>, Ty),
    /// dp only: `tensor [...]` of a shape, elements row-major.
    TensorLit(Vec<usize>, Vec<f64>),
    /// dp only: `reset (fun () -> body)`.
    Reset(Box<Expr>),
    /// dp only: `shift (fun k -> body)`.
    Shift(String, Box<Expr>),
}

pub enum Item {
    /// `let p = e` at top level (`let () = e` for effects).
    Let(Pat, Expr),
    /// `let rec f params = body and …`.
    LetRec(Vec<RecFn>),
}

pub struct Program {
    pub variants: Vec<VariantDecl>,
    pub records: Vec<RecordDecl>,
    pub items: Vec<Item>,
}

pub fn bx<T>(x: T) -> Box<T> {
    Box::new(x)
}
