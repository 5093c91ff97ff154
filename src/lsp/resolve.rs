//! A lexical name resolver over the parsed program: every binding site (`Def`) and every use
//! (`Occurrence`) with the definition it refers to. It mirrors the checker's scoping rules:
//! top-level names are visible to later items, `let rec` names to their own bodies, `let`
//! patterns to the body after `in`, parameters and match-arm patterns to their bodies.

use crate::source::Span;
use crate::syntax::ast::*;
use std::collections::HashMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefKind {
    /// A top-level `let`/`let rec` name.
    TopLevel,
    /// A local `let`, parameter or pattern variable.
    Local,
    Constructor,
    Type,
    /// An `import`ed module's name.
    Module,
}

#[derive(Clone, Debug)]
pub struct Def {
    pub name: String,
    /// The name itself (what go-to-definition shows).
    pub span: Span,
    pub kind: DefKind,
    /// The top-level item it belongs to.
    pub item: usize,
    /// Byte range of the text where the name is visible (completion of locals).
    pub visible: (u32, u32),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OccKind {
    Value,
    Constructor,
    Type,
    /// `module.name`: the name part.
    Member {
        module: String,
    },
    /// A record field name (not resolved).
    Field,
}

#[derive(Clone, Debug)]
pub struct Occurrence {
    pub name: String,
    pub span: Span,
    pub kind: OccKind,
    /// Index into `Index::defs`; None for names from the prelude, builtins or nowhere.
    pub def: Option<usize>,
}

#[derive(Default)]
pub struct Index {
    pub defs: Vec<Def>,
    pub occs: Vec<Occurrence>,
}

impl Index {
    /// Resolves a parsed program. `len` is the text's length (top-level names stay visible to
    /// its end).
    pub fn build(items: &[Item], len: usize) -> Index {
        let mut r = Resolver {
            ix: Index::default(),
            env: Vec::new(),
            types: HashMap::new(),
            cons: HashMap::new(),
            item: 0,
            eof: len as u32,
        };
        for (i, it) in items.iter().enumerate() {
            r.item = i;
            r.item_(it);
        }
        r.ix
    }

    /// The occurrence (use or binding site) under a byte offset. A cursor just after a name
    /// still counts as on it.
    pub fn at(&self, offset: usize) -> Option<&Occurrence> {
        let o = offset as u32;
        let hit = |lo: u32, hi: u32| lo <= o && o <= hi;
        self.occs.iter().filter(|x| hit(x.span.start, x.span.end)).min_by_key(|x| {
            // Prefer a name that strictly contains the offset over one that merely ends there.
            (x.span.end == o && x.span.start != o, x.span.end - x.span.start)
        })
    }

    /// Local definitions visible at an offset, innermost last.
    pub fn locals_at(&self, offset: usize) -> impl Iterator<Item = &Def> {
        let o = offset as u32;
        self.defs.iter().filter(move |d| d.kind == DefKind::Local && d.visible.0 <= o && o <= d.visible.1)
    }
}

struct Resolver {
    ix: Index,
    /// Value names in scope (top-level, modules and locals), innermost last.
    env: Vec<(String, usize)>,
    types: HashMap<String, usize>,
    cons: HashMap<String, usize>,
    item: usize,
    eof: u32,
}

/// The span of a name at the start of a larger span (`Node l r`, a type application).
fn head_span(span: Span, name: &str) -> Span {
    Span { end: (span.start + name.len() as u32).min(span.end.max(span.start)), ..span }
}

impl Resolver {
    fn def(&mut self, name: &str, span: Span, kind: DefKind, visible: (u32, u32)) -> usize {
        self.ix.defs.push(Def { name: name.to_string(), span, kind, item: self.item, visible });
        let d = self.ix.defs.len() - 1;
        self.ix.occs.push(Occurrence { name: name.to_string(), span, kind: occ_kind(kind), def: Some(d) });
        d
    }

    fn bind(&mut self, name: &str, span: Span, kind: DefKind, visible: (u32, u32)) {
        let d = self.def(name, span, kind, visible);
        self.env.push((name.to_string(), d));
    }

    fn lookup(&self, name: &str) -> Option<usize> {
        self.env.iter().rev().find(|(n, _)| n == name).map(|(_, d)| *d)
    }

    fn use_(&mut self, name: &str, span: Span, kind: OccKind, def: Option<usize>) {
        self.ix.occs.push(Occurrence { name: name.to_string(), span, kind, def });
    }

    fn item_(&mut self, it: &Item) {
        let rest = (it.span.end, self.eof);
        match &it.kind {
            ItemKind::Let(p, e) => {
                self.expr(e);
                self.pat(p, DefKind::TopLevel, rest);
            }
            ItemKind::LetRec(defs) => {
                for d in defs {
                    self.bind(&d.name, d.name_span, DefKind::TopLevel, (it.span.start, self.eof));
                }
                for d in defs {
                    self.function(&d.params, &d.body);
                }
            }
            ItemKind::Type(ds) => {
                // The whole group is in scope in every body (`type A = … and B = …`).
                for d in ds {
                    let t = self.def(&d.name, head_span(d.span, &d.name), DefKind::Type, rest);
                    self.types.insert(d.name.clone(), t);
                }
                for d in ds {
                    self.type_body(&d.body, rest);
                }
            }
            ItemKind::Import(target) => {
                let name = match target {
                    ImportTarget::Stdlib(n) => n.clone(),
                    ImportTarget::File(p) => {
                        std::path::Path::new(p).file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_default()
                    }
                };
                self.bind(&name, it.span, DefKind::Module, rest);
            }
            ItemKind::Expr(e) => self.expr(e),
        }
    }

    fn function(&mut self, params: &[Pat], body: &Expr) {
        let m = self.env.len();
        let vis = (params.first().map_or(body.span.start, |p| p.span.start), body.span.end);
        for p in params {
            self.pat(p, DefKind::Local, vis);
        }
        self.expr(body);
        self.env.truncate(m);
    }

    fn pat(&mut self, p: &Pat, kind: DefKind, vis: (u32, u32)) {
        match &p.kind {
            PatKind::Wild | PatKind::Lit(_) => {}
            PatKind::Var(x) => self.bind(x, p.span, kind, vis),
            PatKind::Tuple(ps) | PatKind::List(ps) => ps.iter().for_each(|q| self.pat(q, kind, vis)),
            PatKind::Cons(a, b) => {
                self.pat(a, kind, vis);
                self.pat(b, kind, vis);
            }
            PatKind::Con(c, args) => {
                let def = self.cons.get(c).copied();
                self.use_(c, head_span(p.span, c), OccKind::Constructor, def);
                args.iter().for_each(|q| self.pat(q, kind, vis));
            }
            PatKind::Record(fields) => {
                for f in fields {
                    match &f.value {
                        Some(q) => {
                            self.use_(&f.name, f.span, OccKind::Field, None);
                            self.pat(q, kind, vis);
                        }
                        None => self.bind(&f.name, f.span, kind, vis),
                    }
                }
            }
            PatKind::Annot(q, t) => {
                self.pat(q, kind, vis);
                self.ty(t);
            }
        }
    }

    /// A type declaration's constructors (defined, visible in `rest`) and the types it uses.
    fn type_body(&mut self, body: &TypeBody, rest: (u32, u32)) {
        match body {
            TypeBody::Variants(vs) => {
                for v in vs {
                    let c = self.def(&v.name, head_span(v.span, &v.name), DefKind::Constructor, rest);
                    self.cons.insert(v.name.clone(), c);
                    for a in &v.args {
                        self.ty(a);
                    }
                }
            }
            TypeBody::Alias(t) => self.ty(t),
        }
    }

    fn ty(&mut self, t: &TypeExpr) {
        match &t.kind {
            TypeExprKind::Var(_) => {}
            TypeExprKind::Con(n, args) => {
                let def = self.types.get(n).copied();
                self.use_(n, head_span(t.span, n), OccKind::Type, def);
                args.iter().for_each(|a| self.ty(a));
            }
            TypeExprKind::Fun(a, b) => {
                self.ty(a);
                self.ty(b);
            }
            TypeExprKind::Tuple(ts) => ts.iter().for_each(|a| self.ty(a)),
            TypeExprKind::Record(fs) => fs.iter().for_each(|f| self.ty(&f.value)),
        }
    }

    fn expr(&mut self, e: &Expr) {
        match &e.kind {
            ExprKind::Lit(_) => {}
            ExprKind::Var(x) => {
                let def = self.lookup(x);
                self.use_(x, e.span, OccKind::Value, def);
            }
            ExprKind::Con(c) => {
                let def = self.cons.get(c).copied();
                self.use_(c, e.span, OccKind::Constructor, def);
            }
            ExprKind::App(f, a) => {
                self.expr(f);
                self.expr(a);
            }
            ExprKind::Lam(ps, body) => self.function(ps, body),
            ExprKind::Let(p, e1, e2) => {
                self.expr(e1);
                let m = self.env.len();
                self.pat(p, DefKind::Local, (e2.span.start, e2.span.end));
                self.expr(e2);
                self.env.truncate(m);
            }
            ExprKind::LetRec(defs, body) => {
                let m = self.env.len();
                for d in defs {
                    self.bind(&d.name, d.name_span, DefKind::Local, (e.span.start, e.span.end));
                }
                for d in defs {
                    self.function(&d.params, &d.body);
                }
                self.expr(body);
                self.env.truncate(m);
            }
            ExprKind::If(c, a, b) => {
                self.expr(c);
                self.expr(a);
                if let Some(b) = b {
                    self.expr(b);
                }
            }
            ExprKind::Match(s, arms) => {
                self.expr(s);
                for (p, body) in arms {
                    let m = self.env.len();
                    self.pat(p, DefKind::Local, (p.span.start, body.span.end));
                    self.expr(body);
                    self.env.truncate(m);
                }
            }
            ExprKind::Seq(a, b) | ExprKind::Bin(_, _, a, b) => {
                self.expr(a);
                self.expr(b);
            }
            ExprKind::Un(_, a) => self.expr(a),
            ExprKind::Tuple(es) | ExprKind::List(es) => es.iter().for_each(|x| self.expr(x)),
            ExprKind::Record(fs) => {
                for f in fs {
                    self.use_(&f.name, f.span, OccKind::Field, None);
                    self.expr(&f.value);
                }
            }
            ExprKind::Update(base, fs) => {
                self.expr(base);
                for f in fs {
                    self.use_(&f.name, f.span, OccKind::Field, None);
                    self.expr(&f.value);
                }
            }
            ExprKind::Dot(base, field, fspan) => {
                if let ExprKind::Var(m) = &base.kind {
                    if let Some(d) = self.lookup(m).filter(|&d| self.ix.defs[d].kind == DefKind::Module) {
                        self.use_(m, base.span, OccKind::Value, Some(d));
                        self.use_(field, *fspan, OccKind::Member { module: m.clone() }, None);
                        return;
                    }
                }
                self.expr(base);
                self.use_(field, *fspan, OccKind::Field, None);
            }
            ExprKind::Annot(x, t) => {
                self.expr(x);
                self.ty(t);
            }
        }
    }
}

fn occ_kind(k: DefKind) -> OccKind {
    match k {
        DefKind::Constructor => OccKind::Constructor,
        DefKind::Type => OccKind::Type,
        _ => OccKind::Value,
    }
}
