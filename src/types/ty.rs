//! Type terms, the substitution (union-find over variables with levels) and unification,
//! including row unification for structural records and the built-in classes.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::rc::Rc;

/// Class constraints carried by unbound type variables (a tiny, closed set of type classes).
pub mod class {
    /// `+ - * /`, negation: Int, Float, Tensor.
    pub const NUM: u8 = 1;
    /// `< <= > >=`: Int, Float, String.
    pub const ORD: u8 = 2;
    /// The argument of `grad`: Float, Tensor, and tuples, records and lists of them.
    pub const DIFF: u8 = 4;
    /// `sin`, `exp`, …: Float, Tensor.
    pub const REAL: u8 = 8;
    /// `++`: String and lists.
    pub const APPEND: u8 = 16;

    pub fn describe(c: u8) -> &'static str {
        match c {
            NUM => "a numeric type (Int, Float or Tensor)",
            ORD => "an ordered type (Int, Float or String)",
            DIFF => "a differentiable type (Float, Tensor, or tuples, records and lists of them)",
            REAL => "Float or Tensor",
            APPEND => "a String or a List",
            _ => "constrained",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
/// Children are shared (`Rc`), so cloning a type — which unification and `prune` do
/// constantly — is O(1) rather than a copy of the whole tree.
pub enum Ty {
    Var(u32),
    Con(Rc<str>, Rc<[Ty]>),
    Fun(Rc<Ty>, Rc<Ty>),
    Tuple(Rc<[Ty]>),
    /// A record: its argument is a row.
    Record(Rc<Ty>),
    RowEmpty,
    RowExt(Rc<str>, Rc<Ty>, Rc<Ty>),
}

impl Ty {
    pub fn con(name: &str) -> Ty {
        Ty::Con(name.into(), Rc::from([]))
    }
    pub fn int() -> Ty {
        Ty::con("Int")
    }
    pub fn float() -> Ty {
        Ty::con("Float")
    }
    pub fn bool() -> Ty {
        Ty::con("Bool")
    }
    pub fn string() -> Ty {
        Ty::con("String")
    }
    pub fn unit() -> Ty {
        Ty::con("Unit")
    }
    pub fn tensor() -> Ty {
        Ty::con("Tensor")
    }
    pub fn list(t: Ty) -> Ty {
        Ty::Con("List".into(), Rc::from([t]))
    }
    pub fn fun(a: Ty, b: Ty) -> Ty {
        Ty::Fun(Rc::new(a), Rc::new(b))
    }
    pub fn is_con(&self, name: &str) -> bool {
        matches!(self, Ty::Con(n, args) if &**n == name && args.is_empty())
    }
}

#[derive(Clone, Debug)]
struct VarInfo {
    link: Option<Ty>,
    level: u32,
    class: u8,
}

/// Why unification failed; the checker turns it into a located diagnostic.
#[derive(Debug)]
pub enum UnifyError {
    Mismatch(Ty, Ty),
    Occurs(u32, Ty),
    MissingField(Rc<str>),
    Class(u8, Ty),
}

#[derive(Default)]
pub struct Subst {
    vars: Vec<VarInfo>,
}

impl Subst {
    pub fn fresh(&mut self, level: u32) -> Ty {
        self.fresh_with(level, 0)
    }
    pub fn fresh_with(&mut self, level: u32, class: u8) -> Ty {
        self.vars.push(VarInfo { link: None, level, class });
        Ty::Var((self.vars.len() - 1) as u32)
    }
    pub fn level_of(&self, v: u32) -> u32 {
        self.vars[v as usize].level
    }
    pub fn class_of(&self, v: u32) -> u8 {
        self.vars[v as usize].class
    }

    /// Follows links at the top of a type.
    pub fn prune(&self, t: &Ty) -> Ty {
        let mut t = t.clone();
        while let Ty::Var(v) = t {
            match &self.vars[v as usize].link {
                Some(next) => t = next.clone(),
                None => break,
            }
        }
        t
    }

    /// Fully substitutes a type (for display and for the compiler's specialisation).
    pub fn resolve(&self, t: &Ty) -> Ty {
        match self.prune(t) {
            Ty::Var(v) => Ty::Var(v),
            Ty::Con(n, args) => Ty::Con(n, args.iter().map(|a| self.resolve(a)).collect()),
            Ty::Fun(a, b) => Ty::fun(self.resolve(&a), self.resolve(&b)),
            Ty::Tuple(ts) => Ty::Tuple(ts.iter().map(|a| self.resolve(a)).collect()),
            Ty::Record(r) => Ty::Record(Rc::new(self.resolve(&r))),
            Ty::RowEmpty => Ty::RowEmpty,
            Ty::RowExt(l, t, r) => Ty::RowExt(l, Rc::new(self.resolve(&t)), Rc::new(self.resolve(&r))),
        }
    }

    fn bind(&mut self, v: u32, t: Ty) -> Result<(), UnifyError> {
        if let Ty::Var(w) = t {
            if w == v {
                return Ok(());
            }
            let (lv, cv) = (self.vars[v as usize].level, self.vars[v as usize].class);
            let wi = &mut self.vars[w as usize];
            wi.level = wi.level.min(lv);
            wi.class |= cv;
            self.vars[v as usize].link = Some(t);
            return Ok(());
        }
        let level = self.vars[v as usize].level;
        self.occurs_adjust(v, level, &t)?;
        let class = self.vars[v as usize].class;
        self.vars[v as usize].link = Some(t.clone());
        self.require_class(class, &t)
    }

    fn occurs_adjust(&mut self, v: u32, level: u32, t: &Ty) -> Result<(), UnifyError> {
        match self.prune(t) {
            Ty::Var(w) => {
                if w == v {
                    return Err(UnifyError::Occurs(v, t.clone()));
                }
                let wi = &mut self.vars[w as usize];
                wi.level = wi.level.min(level);
                Ok(())
            }
            Ty::Con(_, args) | Ty::Tuple(args) => args.iter().try_for_each(|a| self.occurs_adjust(v, level, a)),
            Ty::Fun(a, b) => {
                self.occurs_adjust(v, level, &a)?;
                self.occurs_adjust(v, level, &b)
            }
            Ty::Record(r) => self.occurs_adjust(v, level, &r),
            Ty::RowEmpty => Ok(()),
            Ty::RowExt(_, t, r) => {
                self.occurs_adjust(v, level, &t)?;
                self.occurs_adjust(v, level, &r)
            }
        }
    }

    /// Checks (and propagates, for DIFF) a class constraint on a type.
    pub fn require_class(&mut self, class: u8, t: &Ty) -> Result<(), UnifyError> {
        if class == 0 {
            return Ok(());
        }
        let t = self.prune(t);
        let fail = |c: u8| Err(UnifyError::Class(c, t.clone()));
        for c in [class::NUM, class::ORD, class::DIFF, class::REAL, class::APPEND] {
            if class & c == 0 {
                continue;
            }
            match &t {
                Ty::Var(v) => self.vars[*v as usize].class |= c,
                Ty::Con(n, args) => {
                    let ok = match (&**n, c) {
                        ("Int", class::NUM | class::ORD) => true,
                        ("Float", _) => c != class::APPEND,
                        ("Tensor", class::NUM | class::DIFF | class::REAL) => true,
                        ("String", class::ORD | class::APPEND) => true,
                        ("List", class::APPEND) => true,
                        ("List", class::DIFF) => {
                            let a = args[0].clone();
                            self.require_class(class::DIFF, &a)?;
                            true
                        }
                        _ => false,
                    };
                    if !ok {
                        return fail(c);
                    }
                }
                Ty::Tuple(ts) if c == class::DIFF => {
                    for a in ts.iter() {
                        self.require_class(c, a)?;
                    }
                }
                Ty::Record(r) if c == class::DIFF => {
                    let r = (**r).clone();
                    self.require_class(c, &r)?;
                }
                Ty::RowExt(_, f, r) if c == class::DIFF => {
                    let (f, r) = ((**f).clone(), (**r).clone());
                    self.require_class(c, &f)?;
                    self.require_class(c, &r)?;
                }
                Ty::RowEmpty if c == class::DIFF => {}
                _ => return fail(c),
            }
        }
        Ok(())
    }

    pub fn unify(&mut self, a: &Ty, b: &Ty) -> Result<(), UnifyError> {
        let (a, b) = (self.prune(a), self.prune(b));
        match (&a, &b) {
            (Ty::Var(v), _) => self.bind(*v, b.clone()),
            (_, Ty::Var(v)) => self.bind(*v, a.clone()),
            (Ty::Con(n1, a1), Ty::Con(n2, a2)) if n1 == n2 && a1.len() == a2.len() => {
                a1.iter().zip(a2.iter()).try_for_each(|(x, y)| self.unify(x, y))
            }
            (Ty::Fun(a1, r1), Ty::Fun(a2, r2)) => {
                self.unify(a1, a2)?;
                self.unify(r1, r2)
            }
            (Ty::Tuple(t1), Ty::Tuple(t2)) if t1.len() == t2.len() => {
                t1.iter().zip(t2.iter()).try_for_each(|(x, y)| self.unify(x, y))
            }
            (Ty::Record(r1), Ty::Record(r2)) => self.unify(r1, r2).map_err(|e| match e {
                UnifyError::Mismatch(x, y) if is_row(&x) || is_row(&y) => UnifyError::Mismatch(a.clone(), b.clone()),
                e => e,
            }),
            (Ty::RowEmpty, Ty::RowEmpty) => Ok(()),
            (Ty::RowExt(l, t, rest), _) => {
                let tail = row_tail(self, rest);
                let (t2, rest2) = self.rewrite_row(&b, l)?;
                if let Some(tv) = tail {
                    if matches!(self.prune(&Ty::Var(tv)), Ty::RowExt(..)) {
                        return Err(UnifyError::Occurs(tv, b.clone()));
                    }
                }
                self.unify(t, &t2)?;
                self.unify(rest, &rest2)
            }
            (Ty::RowEmpty, Ty::RowExt(l, _, _)) => Err(UnifyError::MissingField(l.clone())),
            _ => Err(UnifyError::Mismatch(a, b)),
        }
    }

    /// Rewrites `row` so that it starts with `label`: returns the field's type and the rest.
    fn rewrite_row(&mut self, row: &Ty, label: &Rc<str>) -> Result<(Ty, Ty), UnifyError> {
        match self.prune(row) {
            Ty::RowEmpty => Err(UnifyError::MissingField(label.clone())),
            Ty::RowExt(l, t, rest) if &l == label => Ok(((*t).clone(), (*rest).clone())),
            Ty::RowExt(l, t, rest) => {
                let (ft, rest2) = self.rewrite_row(&rest, label)?;
                Ok((ft, Ty::RowExt(l, t, Rc::new(rest2))))
            }
            Ty::Var(v) => {
                let level = self.vars[v as usize].level;
                let class = self.vars[v as usize].class;
                let ft = self.fresh_with(level, class & class::DIFF);
                let rest = self.fresh_with(level, class & class::DIFF);
                self.vars[v as usize].link =
                    Some(Ty::RowExt(label.clone(), Rc::new(ft.clone()), Rc::new(rest.clone())));
                Ok((ft, rest))
            }
            other => {
                Err(UnifyError::Mismatch(other, Ty::RowExt(label.clone(), Rc::new(Ty::unit()), Rc::new(Ty::RowEmpty))))
            }
        }
    }

    /// Fields of a record row (resolved), and its open tail variable if any.
    pub fn row_fields(&self, row: &Ty) -> (BTreeMap<Rc<str>, Ty>, Option<u32>) {
        let mut fields = BTreeMap::new();
        let mut r = self.prune(row);
        loop {
            match r {
                Ty::RowExt(l, t, rest) => {
                    fields.insert(l, (*t).clone());
                    r = self.prune(&rest);
                }
                Ty::Var(v) => return (fields, Some(v)),
                _ => return (fields, None),
            }
        }
    }
}

fn is_row(t: &Ty) -> bool {
    matches!(t, Ty::RowEmpty | Ty::RowExt(..))
}

fn row_tail(s: &Subst, r: &Ty) -> Option<u32> {
    match s.prune(r) {
        Ty::RowExt(_, _, rest) => row_tail(s, &rest),
        Ty::Var(v) => Some(v),
        _ => None,
    }
}

/// A polymorphic type: `vars` are the quantified variables.
#[derive(Clone, Debug)]
pub struct Scheme {
    pub vars: Vec<u32>,
    pub ty: Ty,
}

impl Scheme {
    pub fn mono(ty: Ty) -> Scheme {
        Scheme { vars: Vec::new(), ty }
    }
}

/// Renders types with variables named a, b, c… in order of appearance (stable within one
/// `Printer`, so two types in one message share names).
#[derive(Default)]
pub struct Printer {
    names: HashMap<u32, String>,
}

impl Printer {
    pub fn show(&mut self, s: &Subst, t: &Ty) -> String {
        let mut out = String::new();
        self.go(s, &s.resolve(t), &mut out, 0);
        out
    }

    fn var_name(&mut self, s: &Subst, v: u32) -> String {
        let n = self.names.len();
        let base = self.names.entry(v).or_insert_with(|| {
            let letter = (b'a' + (n % 26) as u8) as char;
            if n >= 26 {
                format!("{letter}{}", n / 26)
            } else {
                letter.to_string()
            }
        });
        let _ = s;
        base.clone()
    }

    // prec: 0 = top, 1 = function argument, 2 = type-constructor argument
    fn go(&mut self, s: &Subst, t: &Ty, out: &mut String, prec: u8) {
        match t {
            Ty::Var(v) => {
                let name = self.var_name(s, *v);
                out.push_str(&name);
            }
            Ty::Con(n, args) if args.is_empty() => out.push_str(n),
            Ty::Con(n, args) => {
                if prec >= 2 {
                    out.push('(');
                }
                out.push_str(n);
                for a in args.iter() {
                    out.push(' ');
                    self.go(s, a, out, 2);
                }
                if prec >= 2 {
                    out.push(')');
                }
            }
            Ty::Fun(a, b) => {
                if prec >= 1 {
                    out.push('(');
                }
                self.go(s, a, out, 1);
                out.push_str(" -> ");
                self.go(s, b, out, 0);
                if prec >= 1 {
                    out.push(')');
                }
            }
            Ty::Tuple(ts) => {
                out.push('(');
                for (i, a) in ts.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    self.go(s, a, out, 0);
                }
                out.push(')');
            }
            Ty::Record(r) => {
                let (fields, tail) = s.row_fields(r);
                out.push_str("{ ");
                for (i, (l, ft)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    let _ = write!(out, "{l} : ");
                    self.go(s, ft, out, 0);
                }
                if let Some(v) = tail {
                    let name = self.var_name(s, v);
                    let _ = write!(out, "{}| {name}", if fields.is_empty() { "" } else { " " });
                }
                out.push_str(" }");
            }
            Ty::RowEmpty | Ty::RowExt(..) => out.push_str("<row>"),
        }
    }
}
