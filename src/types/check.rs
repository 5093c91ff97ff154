//! Type inference (HM with levels, let-polymorphism with the value restriction) that also
//! elaborates the AST to core IR: names become slots, lambdas list their captures.

use super::ty::{class, free_vars, Constraint, Printer, Rule, Scheme, Subst, Ty, UnifyError};
use crate::builtins::TABLE;
use crate::core::{Const, Core, Lambda, Pattern, Prim, VarRef};
use crate::diagnostic::{Diagnostic, Phase};
use crate::source::Span;
use crate::syntax::ast::*;
use std::collections::HashMap;
use std::rc::Rc;

type R<T> = Result<T, Diagnostic>;

#[derive(Clone, Debug)]
pub struct ConInfo {
    pub name: Rc<str>,
    pub type_name: Rc<str>,
    pub tag: u32,
    pub arity: u32,
    /// The constructor's curried function type (or the type itself when nullary).
    pub scheme: Scheme,
    /// Every constructor of the type, by tag.
    pub siblings: Rc<[Rc<str>]>,
}

#[derive(Clone, Debug)]
enum TypeBodyInfo {
    Builtin,
    /// A declared variant type, known to the type system by its identity: the declared name
    /// for the first declaration of that name, `Name/2`, `Name/3`… for later ones (as OCaml
    /// shows shadowed types), so two declarations are never the same type.
    Variants(Rc<str>),
    Alias(Vec<u32>, Ty),
}

#[derive(Clone, Debug)]
struct TypeInfo {
    arity: usize,
    body: TypeBodyInfo,
}

#[derive(Clone, Debug)]
enum Loc {
    Global(u32),
    Local { depth: usize, slot: u32, boxed: bool },
    Builtin(u32),
    Module(usize),
}

/// A name's binding, opaque outside the checker.
pub type BindingRef = Binding;

#[derive(Clone, Debug)]
pub struct Binding {
    scheme: Scheme,
    loc: Loc,
    /// For a local `let rec f`: the function depth of f's own body, where f is `SelfRef`.
    self_depth: Option<usize>,
    span: Span,
}

#[derive(Clone)]
pub struct Module {
    pub name: Rc<str>,
    exports: HashMap<Rc<str>, Binding>,
}

#[derive(Clone, Default)]
struct FunCtx {
    next_slot: u32,
    max_slots: u32,
    /// (key of the captured binding, where the creator finds it)
    captures: Vec<((usize, u32), VarRef)>,
}

/// One checked top-level item, ready to compile and run.
pub struct CheckedItem {
    pub code: Core,
    pub nlocals: u32,
    pub span: Span,
    /// Names this item defined, with their types rendered (for the REPL).
    pub defined: Vec<(Rc<str>, String)>,
    /// For a bare expression: its type rendered (the REPL echoes it).
    pub expr_type: Option<String>,
}

/// Clone: the session snapshots the checker before each entry and puts the snapshot back when
/// the entry fails (see `Session`'s transaction model).
#[derive(Clone)]
pub struct Checker {
    pub subst: Subst,
    level: u32,
    scope: HashMap<Rc<str>, Vec<Binding>>,
    undo: Vec<Rc<str>>,
    pub global_count: u32,
    pub global_names: Vec<Rc<str>>,
    funs: Vec<FunCtx>,
    pub cons: HashMap<Rc<str>, ConInfo>,
    types: HashMap<Rc<str>, TypeInfo>,
    pub modules: Vec<Module>,
    pub warnings: Vec<Diagnostic>,
    /// The answer type of the context being checked: what the nearest `reset` around the
    /// running code produces (a variable where nothing constrains it).
    answer: Ty,
    /// Whether the code being checked runs at the top level of an item (in no function body):
    /// no `reset` can be around it there (a `shift` is a located run-time error), so a call
    /// there constrains no answer type.
    at_top: bool,
    /// Names of the non-recursive `let`s whose right-hand sides are being checked (for the
    /// `let rec` hint).
    defining: Vec<Rc<str>>,
    /// Set while a `type` declaration's constructor arguments are converted: their arrows
    /// get one answer type that is never generalised (see `convert_type`).
    in_declaration: bool,
    tyvars: HashMap<String, Ty>,
    /// How many types of each name have been declared (for the identities of later ones).
    declared: HashMap<Rc<str>, u32>,
    /// Set while the checker infers its own rewriting of a `printf`/`sprintf` use, whose call
    /// of the builtin takes the packed arguments (see `infer_format`).
    raw_format: bool,
    /// When set, every binding site is recorded in `binding_sites` (the language server's hover).
    pub record_bindings: bool,
    /// Name, binding span and type (render with `show` once checking is done) of each binding.
    pub binding_sites: Vec<(Rc<str>, Span, Scheme)>,
}

/// What a `Broadcast` rule's operation accepts, for its errors.
fn broadcast_note(op: &str) -> String {
    if crate::types::ty::ordering_op(op) {
        format!("`{op}` takes two Ints, two Floats, two Strings, two Tensors, or a Float with a Tensor")
    } else if op.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
        format!("`{op}` takes two Tensors, or a Float with a Tensor")
    } else {
        "arithmetic combines two Ints, two Floats, two Tensors, or a Float with a Tensor".to_string()
    }
}

fn builtin_scheme(sub: &mut Subst, name: &'static str, spec: &str) -> Scheme {
    let (constraints, body) = match spec.split_once("=>") {
        Some((c, b)) => (c.trim(), b.trim()),
        None => ("", spec),
    };
    let tokens = crate::syntax::lexer::lex(body, u32::MAX).expect("builtin type lexes");
    let te = crate::syntax::parser::parse_type(tokens).expect("builtin type parses");
    let mut vars = HashMap::new();
    // `Broadcast a b c`: the arithmetic rule, for the builtins that mix a Float with a Tensor
    // as `+` does (its result a variable or `Tensor`).
    let mut broadcast = None;
    // `Batch b c`: `vmap`'s result type, `c` made of `b` leaf by leaf (`Rule::Batch`);
    // `Slice d a`: its argument `d` and one example `a` of it (`Rule::Slice`).
    let mut batch = None;
    let mut slice = None;
    for c in constraints.split(',').filter(|c| !c.trim().is_empty()) {
        let mut it = c.split_whitespace();
        if c.trim_start().starts_with("Broadcast") {
            broadcast = Some(it.skip(1).map(str::to_string).collect::<Vec<_>>());
            continue;
        }
        if c.trim_start().starts_with("Batch") {
            batch = Some(it.skip(1).map(str::to_string).collect::<Vec<_>>());
            continue;
        }
        if c.trim_start().starts_with("Slice") {
            slice = Some(it.skip(1).map(str::to_string).collect::<Vec<_>>());
            continue;
        }
        let cls = match it.next() {
            Some("Num") => class::NUM,
            Some("Diff") => class::DIFF,
            Some("Real") => class::REAL | class::NUM,
            Some("TensorData") => class::TENSOR_DATA,
            _ => 0,
        };
        let v = it.next().unwrap_or("a").to_string();
        vars.insert(v, sub.fresh_with(1, cls));
    }
    // A builtin calls the functions it is given where it is called (`grad f x` runs `f`
    // in the caller's context: a `shift` in `f` reaches the caller's `reset`), so all the
    // arrows of its type share one answer type.
    let answer = sub.fresh(1);
    let mut term = |sub: &mut Subst, n: &str| match n {
        "Tensor" => Ty::tensor(),
        v => vars.entry(v.to_string()).or_insert_with(|| sub.fresh(1)).clone(),
    };
    let rule = broadcast.map(|names| {
        let [a, b, c] = [0, 1, 2].map(|i| term(sub, names.get(i).map_or("c", String::as_str)));
        Rule::Broadcast { a, b, c, op: name }
    });
    let batch = batch.map(|names| {
        let [elem, out] = [0, 1].map(|i| term(sub, names.get(i).map_or("c", String::as_str)));
        Rule::Batch { elem, out }
    });
    let slice = slice.map(|names| {
        let [whole, example] = [0, 1].map(|i| term(sub, names.get(i).map_or("d", String::as_str)));
        Rule::Slice { whole, example }
    });
    let ty = convert_simple(sub, &te, &mut vars, &answer);
    let mut qs: Vec<u32> = vars.values().map(|t| if let Ty::Var(v) = t { *v } else { 0 }).collect();
    if let Ty::Var(r) = answer {
        qs.push(r);
    }
    // The rule's origin is filled in at each use (`instantiate_at`).
    let constraints = [rule, slice, batch]
        .into_iter()
        .flatten()
        .map(|rule| Constraint { rule, origin: Span::default(), solved: false })
        .collect();
    Scheme { vars: qs, ty, constraints }
}

/// The types of `reset` and `shift`, which say how answer effects flow (`-[a]->` is the
/// effect `Ty::shifts(a)`):
/// `reset : (Unit -[a]-> a) -> a` runs its body in a context producing `a`;
/// `shift : ((b -> a) -[a]-> a) -[a]-> b` must be called where the enclosing `reset`
/// produces `a`, its body runs there too, and the captured continuation `k`, itself
/// delimited when resumed, shifts to no outer `reset`. Functions passed as arguments may
/// have any lesser effect (a pure `reset` body is fine).
fn control_scheme(sub: &mut Subst, name: &str) -> Scheme {
    let v = |sub: &mut Subst| sub.fresh(1);
    let var_id = |t: &Ty| if let Ty::Var(v) = t { *v } else { 0 };
    if name == "reset" {
        let (a, r) = (v(sub), v(sub));
        let ty = Ty::fun(Ty::fun(Ty::unit(), a.clone(), Ty::shifts(a.clone())), a.clone(), r.clone());
        Scheme { vars: vec![var_id(&a), var_id(&r)], ty, constraints: Vec::new() }
    } else {
        let (a, b, r1) = (v(sub), v(sub), v(sub));
        let k = Ty::fun(b.clone(), a.clone(), r1.clone());
        let ty = Ty::fun(Ty::fun(k, a.clone(), Ty::shifts(a.clone())), b.clone(), Ty::shifts(a.clone()));
        Scheme { vars: vec![var_id(&a), var_id(&b), var_id(&r1)], ty, constraints: Vec::new() }
    }
}

/// Converts builtin type expressions (only builtin type names, no aliases).
fn convert_simple(sub: &mut Subst, te: &TypeExpr, vars: &mut HashMap<String, Ty>, answer: &Ty) -> Ty {
    match &te.kind {
        TypeExprKind::Var(v) => vars.entry(v.clone()).or_insert_with(|| sub.fresh(1)).clone(),
        TypeExprKind::Con(n, args) => {
            Ty::Con(n.as_str().into(), args.iter().map(|a| convert_simple(sub, a, vars, answer)).collect())
        }
        TypeExprKind::Fun(a, b) => {
            Ty::fun(convert_simple(sub, a, vars, answer), convert_simple(sub, b, vars, answer), answer.clone())
        }
        TypeExprKind::Tuple(ts) => Ty::Tuple(ts.iter().map(|a| convert_simple(sub, a, vars, answer)).collect()),
        // A closed record (`plot_with`'s options): exactly these fields.
        TypeExprKind::Record(fs) => Ty::Record(Rc::new(fs.iter().rev().fold(Ty::RowEmpty, |row, f| {
            Ty::RowExt(f.name.as_str().into(), Rc::new(convert_simple(sub, &f.value, vars, answer)), Rc::new(row))
        }))),
    }
}

impl Default for Checker {
    /// An empty checker (no builtins); `Checker::new` is the real constructor.
    fn default() -> Self {
        Checker {
            subst: Subst::default(),
            level: 0,
            scope: HashMap::new(),
            undo: Vec::new(),
            global_count: 0,
            global_names: Vec::new(),
            funs: Vec::new(),
            cons: HashMap::new(),
            types: HashMap::new(),
            modules: Vec::new(),
            warnings: Vec::new(),
            answer: Ty::unit(),
            at_top: true,
            in_declaration: false,
            defining: Vec::new(),
            tyvars: HashMap::new(),
            declared: HashMap::new(),
            raw_format: false,
            record_bindings: false,
            binding_sites: Vec::new(),
        }
    }
}

impl Checker {
    pub fn new() -> Checker {
        let mut c = Checker::default();
        for (n, a) in [
            ("Int", 0),
            ("Float", 0),
            ("Bool", 0),
            ("String", 0),
            ("Unit", 0),
            ("Tensor", 0),
            ("Key", 0),
            ("List", 1),
            ("Ref", 1),
        ] {
            c.types.insert(n.into(), TypeInfo { arity: a, body: TypeBodyInfo::Builtin });
            c.declared.insert(n.into(), 1);
        }
        for (i, (name, _, ty)) in TABLE.iter().enumerate() {
            let scheme = match *name {
                "reset" | "shift" => control_scheme(&mut c.subst, name),
                _ => builtin_scheme(&mut c.subst, name, ty),
            };
            c.scope.entry((*name).into()).or_default().push(Binding {
                scheme,
                loc: Loc::Builtin(i as u32),
                self_depth: None,
                span: Span::default(),
            });
        }
        c
    }

    // ------------------------------------------------------------ scopes and slots

    fn push_binding(&mut self, name: Rc<str>, b: Binding) {
        if self.record_bindings {
            self.binding_sites.push((name.clone(), b.span, b.scheme.clone()));
        }
        self.scope.entry(name.clone()).or_default().push(b);
        self.undo.push(name);
    }
    fn mark(&self) -> usize {
        self.undo.len()
    }
    fn pop_to(&mut self, mark: usize) {
        while self.undo.len() > mark {
            let n = self.undo.pop().unwrap();
            if let Some(v) = self.scope.get_mut(&n) {
                v.pop();
            }
        }
    }
    fn fun_depth(&self) -> usize {
        self.funs.len() - 1
    }
    fn new_slot(&mut self) -> u32 {
        let f = self.funs.last_mut().unwrap();
        let s = f.next_slot;
        f.next_slot += 1;
        f.max_slots = f.max_slots.max(f.next_slot);
        s
    }
    /// Resolves a local defined at `def_depth` (slot, or SelfRef when slot is None) from the
    /// current function, threading captures through every function in between.
    fn access(&mut self, def_depth: usize, slot: Option<u32>) -> VarRef {
        let here = self.fun_depth();
        let base = match slot {
            Some(s) => VarRef::Local(s),
            None => VarRef::SelfRef,
        };
        if def_depth == here {
            return base;
        }
        let key = (def_depth, slot.unwrap_or(u32::MAX));
        let mut src = base;
        for d in def_depth + 1..=here {
            let f = &mut self.funs[d];
            let idx = match f.captures.iter().position(|(k, _)| *k == key) {
                Some(i) => i,
                None => {
                    f.captures.push((key, src));
                    f.captures.len() - 1
                }
            };
            src = VarRef::Capture(idx as u32);
        }
        src
    }

    // ------------------------------------------------------------ types

    fn instantiate(&mut self, s: &Scheme) -> Ty {
        self.instantiate_at(s, Span::default())
    }
    /// `instantiate` at a use: a builtin's own constraints (which have no origin) report
    /// there.
    fn instantiate_at(&mut self, s: &Scheme, at: Span) -> Ty {
        if s.vars.is_empty() {
            return s.ty.clone();
        }
        let mut map = HashMap::new();
        for v in &s.vars {
            let cls = self.subst.class_of(*v);
            map.insert(*v, self.subst.fresh_with(self.level, cls));
        }
        for k in &s.constraints {
            let rule = k.rule.map(|t| self.copy_ty(t, &map));
            // A scheme's constraints were satisfiable when it was made, and instantiation
            // only renames their variables, so this cannot fail.
            let origin = if k.origin == Span::default() { at } else { k.origin };
            let _ = self.subst.add(rule, origin);
        }
        self.copy_ty(&s.ty, &map)
    }
    fn copy_ty(&mut self, t: &Ty, map: &HashMap<u32, Ty>) -> Ty {
        // A variable bound since the scheme was made, to a type with no variables, is kept
        // as it is: it means the same, and it remembers where it was fixed (for messages).
        if let Ty::Var(v) = t {
            if !map.contains_key(v) && !matches!(self.subst.prune(t), Ty::Var(_)) {
                let mut vars = Vec::new();
                free_vars(&self.subst, t, &mut vars);
                if vars.is_empty() {
                    return t.clone();
                }
            }
        }
        match self.subst.prune(t) {
            Ty::Var(v) => map.get(&v).cloned().unwrap_or(Ty::Var(v)),
            Ty::Con(n, a) => Ty::Con(n, a.iter().map(|x| self.copy_ty(x, map)).collect()),
            Ty::Fun(a, b, r) => Ty::fun(self.copy_ty(&a, map), self.copy_ty(&b, map), self.copy_ty(&r, map)),
            Ty::Tuple(ts) => Ty::Tuple(ts.iter().map(|x| self.copy_ty(x, map)).collect()),
            Ty::Record(r) => Ty::Record(Rc::new(self.copy_ty(&r, map))),
            Ty::RowEmpty => Ty::RowEmpty,
            Ty::RowExt(l, a, r) => Ty::RowExt(l, Rc::new(self.copy_ty(&a, map)), Rc::new(self.copy_ty(&r, map))),
        }
    }
    /// Quantifies the variables of `t` that belong to the `let` being closed (their level is
    /// above the current one), with the constraints that mention them: those move into the
    /// scheme, and every use gets its own copy.
    fn generalize(&mut self, t: &Ty) -> Scheme {
        let mut vars = Vec::new();
        free_vars(&self.subst, t, &mut vars);
        vars.retain(|v| self.subst.level_of(*v) > self.level);
        let mut ids = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut i = 0;
        while i < vars.len() {
            let pending: Vec<u32> = self.subst.pending_on(vars[i]).filter(|id| seen.insert(*id)).collect();
            for id in pending {
                let mut more = Vec::new();
                for t in self.subst.constraint(id).rule.types() {
                    free_vars(&self.subst, t, &mut more);
                }
                for v in more {
                    if self.subst.level_of(v) > self.level && !vars.contains(&v) {
                        vars.push(v);
                    }
                }
                ids.push(id);
            }
            i += 1;
        }
        // A constraint that also mentions outer variables moves into the scheme too: each
        // instance then relates its own copies to the same outer variables (`h`'s effect in
        // `let h = fun () -> g () in …` stays at least that of the enclosing function's `g`).
        let mut constraints = Vec::new();
        for id in ids {
            let k = self.subst.constraint(id);
            let k = Constraint { rule: k.rule.map(|t| self.subst.resolve(t)), ..k.clone() };
            self.subst.consume(id);
            constraints.push(k);
        }
        Scheme { vars, ty: self.subst.resolve(t), constraints }
    }

    /// The scheme of a `let`-bound name: generalised when the bound expression is a syntactic
    /// value; otherwise monomorphic, with its variables lowered to the current level so that
    /// no later `let` (a closure over the name, say) generalises them either.
    fn scheme_for(&mut self, t: Ty, is_value: bool) -> Scheme {
        self.close_slices(&t, self.level + 1);
        if is_value {
            self.generalize(&t)
        } else {
            self.subst.lower_levels(&t, self.level);
            Scheme::mono(t)
        }
    }
    fn fresh(&mut self) -> Ty {
        self.subst.fresh(self.level)
    }

    /// Decides the open `Slice` constraints of a type whose variables from level `from` up
    /// are being closed (`Subst::default_slices`: a mapped function's parameter left open is a
    /// Tensor).
    fn close_slices(&mut self, t: &Ty, from: u32) {
        if !self.subst.has_slices() {
            return;
        }
        let mut shown = Vec::new();
        free_vars(&self.subst, t, &mut shown);
        self.subst.default_slices(from, &shown);
    }
    pub fn show(&self, t: &Ty) -> String {
        Printer::default().show(&self.subst, t)
    }

    /// Unifies `found` (the type of the thing at `span`) with `expected`.
    fn unify_at(&mut self, expected: &Ty, found: &Ty, span: Span, other: Option<(Span, &str)>) -> R<()> {
        let outer = self.subst.origin.replace(span);
        let r = self.subst.unify(expected, found);
        self.subst.origin = outer;
        match r {
            Ok(()) => Ok(()),
            Err(e) => Err(self.unify_error(e, expected, found, span, other)),
        }
    }

    /// Labels the places that fixed `expected` and `found` (when they were type variables
    /// bound elsewhere): "`Int` because of this".
    fn provenance(&self, mut d: Diagnostic, expected: &Ty, found: &Ty, span: Span) -> Diagnostic {
        let mut seen = vec![span];
        for t in [expected, found] {
            if let Some(at) = self.subst.fixed_at(t) {
                if !seen.iter().any(|s| s.file == at.file && s.start < at.end && at.start < s.end) {
                    let shown = self.show(t);
                    d = d.label(at, format!("`{shown}` because of this"));
                    seen.push(at);
                }
            }
        }
        d
    }

    fn unify_error(
        &self,
        e: UnifyError,
        expected: &Ty,
        found: &Ty,
        span: Span,
        other: Option<(Span, &str)>,
    ) -> Diagnostic {
        let mut p = Printer::default();
        let (exp, fnd) = (p.show(&self.subst, expected), p.show(&self.subst, found));
        let mut d = match e {
            UnifyError::Class(c, t) => {
                let shown = p.show(&self.subst, &t);
                let mut d = Diagnostic::error(Phase::Type, format!("type `{shown}` is not {}", class::describe(c)))
                    .label(span, format!("this has type `{fnd}`"));
                if c == class::NUM || c == class::REAL {
                    if shown == "Int" && fnd.contains("Int") {
                        d = d.help("Int and Float never mix: convert with `float n` (or `int x`)");
                    }
                } else if c == class::TENSOR_DATA {
                    d = d.help(
                        "`tensor` takes Floats, Ints or Bools in nested lists, such as `tensor [[1.0, 2.0], [3.0, 4.0]]` (float32), `tensor [1, 2]` (int64) or `tensor [true, false]` (bool)",
                    );
                } else if c == class::DIFF {
                    d = d.note("grad, value_and_grad, jvp, custom_vjp, custom_jvp, checkpoint, the tree_ functions and save_params/load_params take Float, Tensor, or tuples, records and lists of them");
                }
                return d;
            }
            UnifyError::Answer(id, callee, context) => {
                let k = self.subst.constraint(id);
                return answer_mismatch(&mut p, &self.subst, k.origin, &callee, &context)
                    .label(span, format!("this has type `{fnd}`, which fixes them"));
            }
            UnifyError::Batch(id, leaf) => {
                let k = self.subst.constraint(id);
                let shown = p.show(&self.subst, &leaf);
                return Diagnostic::error(Phase::Type, format!("`vmap` cannot stack results of type `{shown}`"))
                    .label(k.origin, format!("the result of the function given to this `vmap` holds values of type `{shown}`"))
                    .label(span, format!("this has type `{fnd}`, which fixes it"))
                    .note("vmap stacks Floats and Tensors into Tensors with a new axis 0, through tuples, records and lists; an Int, Bool, String or function result has no batched form")
                    .help("return a Float (or a Tensor) from the mapped function, or keep that part of the result outside `vmap`");
            }
            UnifyError::Slice(id, example) => {
                let k = self.subst.constraint(id);
                let shown = p.show(&self.subst, &example);
                return Diagnostic::error(Phase::Type, format!("`vmap` cannot give a function of `{shown}` the examples of a Tensor"))
                    .label(k.origin, format!("this `vmap` maps over a Tensor where its function takes `{shown}`"))
                    .label(span, format!("this has type `{fnd}`, which fixes it"))
                    .note("vmap slices every Tensor of its argument along axis 0: the function gets a Tensor there, or a Float where the Tensor has rank 1; other values go to every example as they are")
                    .help("make the function take a Tensor (or a Float) in that place, or pass that part of the argument outside `vmap`");
            }
            UnifyError::Broadcast(id, x, y) => {
                let k = self.subst.constraint(id);
                let op = match k.rule {
                    Rule::Broadcast { op, .. } => op,
                    Rule::Answer { .. } | Rule::Batch { .. } | Rule::Slice { .. } => "arithmetic",
                };
                let (sx, sy) = (p.show(&self.subst, &x), p.show(&self.subst, &y));
                let mut d = Diagnostic::error(Phase::Type, format!("`{op}` cannot combine `{sx}` with `{sy}`"))
                    .label(k.origin, format!("this `{op}` has operands of types `{sx}` and `{sy}`"))
                    .label(span, format!("this has type `{fnd}`, which fixes them"))
                    .note(broadcast_note(op));
                if (sx == "Int" && sy == "Float") || (sx == "Float" && sy == "Int") {
                    d = d.help("Int and Float never mix: convert with `float n` or `int x`");
                }
                return d;
            }
            UnifyError::Occurs(_, _) => {
                Diagnostic::error(Phase::Type, "infinite type: a value would have to contain itself")
                    .label(span, format!("this has type `{fnd}`, which would have to equal `{exp}`"))
            }
            UnifyError::MissingField(l) => Diagnostic::error(Phase::Type, format!("record has no field `{l}`"))
                .label(span, format!("this has type `{fnd}`"))
                .note(format!("expected a record of type `{exp}`")),
            UnifyError::Mismatch(..) => {
                Diagnostic::error(Phase::Type, format!("type mismatch: expected `{exp}`, found `{fnd}`"))
                    .label(span, format!("this has type `{fnd}`"))
            }
        };
        if let Some((s2, text)) = other {
            d = d.label(s2, format!("{text} `{exp}`"));
        }
        d = self.provenance(d, expected, found, span);
        if (exp == "Int" && fnd == "Float") || (exp == "Float" && fnd == "Int") {
            d = d.help("Int and Float never mix: convert with `float n` or `int x`");
        }
        let is_ref = |t: &str| t.starts_with("Ref ");
        if is_ref(&exp) != is_ref(&fnd) {
            d = d.help("`!r` reads a reference cell and `r := v` writes it; `ref v` makes one");
        }
        if let Some(later) = [&exp, &fnd].into_iter().find_map(|t| shadowed_type_name(t)) {
            d = d.note(format!(
                "`{later}` is a later declaration of `{}`: each `type` declaration is a new type, distinct from every other of the same name",
                later.split('/').next().unwrap_or_default()
            ));
        }
        d
    }

    fn convert_type(&mut self, te: &TypeExpr) -> R<Ty> {
        Ok(match &te.kind {
            TypeExprKind::Var(v) => {
                if let Some(t) = self.tyvars.get(v) {
                    t.clone()
                } else {
                    let t = self.fresh();
                    self.tyvars.insert(v.clone(), t.clone());
                    t
                }
            }
            TypeExprKind::Con(n, args) => {
                let Some(info) = self.types.get(n.as_str()).cloned() else {
                    return Err(Diagnostic::error(Phase::Type, format!("unknown type `{n}`"))
                        .label(te.span, "not a declared type"));
                };
                if info.arity != args.len() {
                    return Err(Diagnostic::error(
                        Phase::Type,
                        format!("type `{n}` takes {} argument(s), given {}", info.arity, args.len()),
                    )
                    .label(te.span, "wrong number of type arguments"));
                }
                let args = args.iter().map(|a| self.convert_type(a)).collect::<R<Vec<_>>>()?;
                match info.body {
                    TypeBodyInfo::Alias(params, body) => {
                        let map = params.into_iter().zip(args).collect();
                        self.copy_ty(&body, &map)
                    }
                    TypeBodyInfo::Variants(ident) => Ty::Con(ident, args.into()),
                    TypeBodyInfo::Builtin => Ty::Con(n.as_str().into(), args.into()),
                }
            }
            TypeExprKind::Fun(a, b) => {
                // An annotation says nothing of answer types: a fresh variable. In a `type`
                // declaration the arrow's answer type is one variable that is never
                // generalised: a function stored in a variant may shift, and every such
                // function of that constructor must then agree on what it shifts to.
                let answer = if self.in_declaration { self.subst.fresh(0) } else { self.fresh() };
                Ty::fun(self.convert_type(a)?, self.convert_type(b)?, answer)
            }
            TypeExprKind::Tuple(ts) => Ty::Tuple(ts.iter().map(|a| self.convert_type(a)).collect::<R<_>>()?),
            TypeExprKind::Record(fs) => {
                let mut row = Ty::RowEmpty;
                let mut seen: Vec<&str> = Vec::new();
                for f in fs.iter().rev() {
                    if seen.contains(&f.name.as_str()) {
                        return Err(Diagnostic::error(Phase::Type, format!("field `{}` appears twice", f.name))
                            .label(f.span, "duplicate field"));
                    }
                    seen.push(&f.name);
                    row = Ty::RowExt(f.name.as_str().into(), Rc::new(self.convert_type(&f.value)?), Rc::new(row));
                }
                Ty::Record(Rc::new(row))
            }
        })
    }

    // ------------------------------------------------------------ items

    /// A `type … and …` group: every variant type of the group is registered before any body
    /// is read, so they may refer to each other (a record alias may refer to the group's
    /// variant types and to aliases declared before it).
    pub fn declare_types(&mut self, ds: &[TypeDecl]) -> R<()> {
        for (i, d) in ds.iter().enumerate() {
            if self.types.get(d.name.as_str()).is_some_and(|t| matches!(t.body, TypeBodyInfo::Builtin)) {
                return Err(Diagnostic::error(
                    Phase::Type,
                    format!("`{}` is a built-in type and cannot be redefined", d.name),
                )
                .label(d.span, "here"));
            }
            if let Some(first) = ds[..i].iter().find(|e| e.name == d.name) {
                return Err(Diagnostic::error(Phase::Type, format!("type `{}` declared twice in one group", d.name))
                    .label(d.span, "again here")
                    .label(first.span, "first here"));
            }
        }
        let mut idents = Vec::new();
        for d in ds {
            let name: Rc<str> = d.name.as_str().into();
            let n = self.declared.entry(name.clone()).or_insert(0);
            *n += 1;
            let ident: Rc<str> = if *n == 1 { name.clone() } else { format!("{name}/{n}").into() };
            if matches!(d.body, TypeBody::Variants(_)) {
                self.types
                    .insert(name, TypeInfo { arity: d.params.len(), body: TypeBodyInfo::Variants(ident.clone()) });
            }
            idents.push(ident);
        }
        ds.iter().zip(idents).try_for_each(|(d, ident)| self.declare_type(d, ident))
    }

    fn declare_type(&mut self, d: &TypeDecl, ident: Rc<str>) -> R<()> {
        self.tyvars.clear();
        let params: Vec<Ty> = d
            .params
            .iter()
            .map(|p| {
                let t = self.subst.fresh(u32::MAX);
                self.tyvars.insert(p.clone(), t.clone());
                t
            })
            .collect();
        let pvars: Vec<u32> = params.iter().map(|t| if let Ty::Var(v) = t { *v } else { 0 }).collect();
        match &d.body {
            TypeBody::Alias(te) => {
                let ty = self.convert_type(te)?;
                self.types.insert(
                    d.name.as_str().into(),
                    TypeInfo { arity: d.params.len(), body: TypeBodyInfo::Alias(pvars, ty) },
                );
            }
            TypeBody::Variants(vs) => {
                let result = Ty::Con(ident.clone(), params.clone().into());
                let siblings: Rc<[Rc<str>]> = vs.iter().map(|v| Rc::from(v.name.as_str())).collect();
                let mut infos = Vec::new();
                for (tag, v) in vs.iter().enumerate() {
                    if vs[..tag].iter().any(|w| w.name == v.name) {
                        return Err(Diagnostic::error(Phase::Type, format!("constructor `{}` declared twice", v.name))
                            .label(v.span, "duplicate"));
                    }
                    let mut arg_tys = Vec::new();
                    for a in &v.args {
                        self.in_declaration = true;
                        let at = self.convert_type(a);
                        self.in_declaration = false;
                        arg_tys.push(at?);
                    }
                    let mut extra = Vec::new();
                    for at in &arg_tys {
                        free_vars(&self.subst, at, &mut extra);
                    }
                    // The never-generalised answer types of arrows among the arguments.
                    extra.retain(|x| self.subst.level_of(*x) != 0);
                    // A constructor is a pure function: its own arrows' answer types are free.
                    let mut vars = pvars.clone();
                    let mut ty = result.clone();
                    for at in arg_tys.into_iter().rev() {
                        let answer = self.subst.fresh(u32::MAX);
                        if let Ty::Var(r) = answer {
                            vars.push(r);
                        }
                        ty = Ty::fun(at, ty, answer);
                    }
                    if let Some(bad) = extra.iter().find(|x| !pvars.contains(x)) {
                        let _ = bad;
                        return Err(Diagnostic::error(
                            Phase::Type,
                            format!(
                                "constructor `{}` uses a type variable that is not a parameter of `{}`",
                                v.name, d.name
                            ),
                        )
                        .label(v.span, "declare it after the type name, e.g. `type Box a = Box a`"));
                    }
                    infos.push(ConInfo {
                        name: v.name.as_str().into(),
                        type_name: ident.clone(),
                        tag: tag as u32,
                        arity: v.args.len() as u32,
                        scheme: Scheme { vars, ty, constraints: Vec::new() },
                        siblings: siblings.clone(),
                    });
                }
                for i in infos {
                    self.cons.insert(i.name.clone(), i);
                }
            }
        }
        Ok(())
    }

    /// Puts back `before` (a snapshot taken before an entry whose run failed) but keeps what the
    /// failed run may have made permanent: the solved type variables (the run may have stored
    /// values of those types in reference cells of earlier bindings, whose weak type variables
    /// its checking fixed), the global slots it used (closures it stored may refer to them) and
    /// the count of declared types (a later declaration must not take a used identity).
    pub fn restore_after_run(&mut self, before: Checker) {
        let ran = std::mem::replace(self, before);
        self.subst = ran.subst;
        self.global_count = ran.global_count;
        self.global_names = ran.global_names;
        self.declared = ran.declared;
        self.warnings = ran.warnings;
    }

    /// Binds the names that `item` (which failed to check) defines to the error type.
    pub fn poison_item(&mut self, item: &Item) {
        let names: Vec<(Rc<str>, Span)> = match &item.kind {
            ItemKind::Let(p, _) => {
                let mut v = Vec::new();
                pattern_names(p, &mut v);
                v
            }
            ItemKind::LetRec(defs) => defs.iter().map(|d| (Rc::from(d.name.as_str()), d.name_span)).collect(),
            _ => Vec::new(),
        };
        for (name, span) in names {
            let g = self.new_global(&name);
            let b = Binding { scheme: Scheme::mono(Ty::error()), loc: Loc::Global(g), self_depth: None, span };
            self.scope.entry(name).or_default().push(b);
        }
    }

    /// Checks one top-level item. Top-level names become globals. On an error, the scope is
    /// as it was before the item.
    pub fn check_item(
        &mut self,
        item: &Item,
        resolve_import: &mut dyn FnMut(&mut Checker, &ImportTarget, Span) -> R<usize>,
    ) -> R<CheckedItem> {
        let r = self.check_item_inner(item, resolve_import);
        if r.is_err() {
            self.pop_to(0);
        }
        r
    }

    fn check_item_inner(
        &mut self,
        item: &Item,
        resolve_import: &mut dyn FnMut(&mut Checker, &ImportTarget, Span) -> R<usize>,
    ) -> R<CheckedItem> {
        self.tyvars.clear();
        self.funs = vec![FunCtx::default()];
        self.level = 0;
        // A top-level item runs under no `reset` of the program's (a `shift` there is a
        // run-time error), so its answer type is unconstrained.
        self.answer = self.fresh();
        self.at_top = true;
        let mut defined = Vec::new();
        let mut expr_type = None;
        let code = match &item.kind {
            ItemKind::Type(ds) => {
                self.declare_types(ds)?;
                Core::Const(Const::Unit)
            }
            ItemKind::Import(target) => {
                let m = resolve_import(self, target, item.span)?;
                let name = self.modules[m].name.clone();
                self.push_binding(
                    name,
                    Binding {
                        scheme: Scheme::mono(Ty::unit()),
                        loc: Loc::Module(m),
                        self_depth: None,
                        span: item.span,
                    },
                );
                Core::Const(Const::Unit)
            }
            ItemKind::Expr(e) => {
                let (c, t) = self.infer(e)?;
                self.close_slices(&t, self.level);
                expr_type = Some(self.show(&t));
                c
            }
            ItemKind::Let(p, e) => {
                let simple = simple_var(p);
                let is_value = is_syntactic_value(e);
                self.level += 1;
                let (mut c, t) = self.infer_defining(simple, e)?;
                self.level -= 1;
                if let (Some(name), Core::Lam(l)) = (simple, &mut c) {
                    name_lambda(l, name);
                }
                match simple {
                    Some(name) => {
                        if let PatKind::Annot(_, te) = &p.kind {
                            let at = self.convert_type(te)?;
                            self.unify_at(&at, &t, e.span, Some((te.span, "annotated as")))?;
                        }
                        let scheme = self.scheme_for(t, is_value);
                        let g = self.new_global(name);
                        defined.push((Rc::from(name), self.show_scheme(&scheme)));
                        self.push_binding(
                            name.into(),
                            Binding { scheme, loc: Loc::Global(g), self_depth: None, span: p.span },
                        );
                        Core::SetGlobal(g, Box::new(c))
                    }
                    None => {
                        let mut binds = Vec::new();
                        let pat = self.infer_pat(p, &t, &mut binds)?;
                        self.warn_exhaustive(std::slice::from_ref(p), &t, p.span, "this `let` pattern");
                        let mut sets = Vec::new();
                        for (name, ty, slot, span) in binds {
                            let scheme = self.scheme_for(ty, is_value);
                            let g = self.new_global(&name);
                            defined.push((name.clone(), self.show_scheme(&scheme)));
                            self.push_binding(name, Binding { scheme, loc: Loc::Global(g), self_depth: None, span });
                            sets.push(Core::SetGlobal(g, Box::new(Core::Var(VarRef::Local(slot), span))));
                        }
                        let body = sets
                            .into_iter()
                            .rev()
                            .fold(Core::Const(Const::Unit), |acc, s| Core::Seq(Box::new(s), Box::new(acc)));
                        Core::LetPat(pat, Box::new(c), Box::new(body), p.span)
                    }
                }
            }
            ItemKind::LetRec(defs) => {
                check_distinct(defs)?;
                self.level += 1;
                let mut tys = Vec::new();
                let mut globals = Vec::new();
                let m = self.mark();
                for d in defs {
                    let t = self.fresh();
                    let g = self.new_global(&d.name);
                    self.push_binding(
                        d.name.as_str().into(),
                        Binding {
                            scheme: Scheme::mono(t.clone()),
                            loc: Loc::Global(g),
                            self_depth: None,
                            span: d.name_span,
                        },
                    );
                    tys.push(t);
                    globals.push(g);
                }
                let mut lams = Vec::new();
                for (d, t) in defs.iter().zip(&tys) {
                    let (lam, lt) = self.infer_fundef(d)?;
                    self.unify_at(t, &lt, d.name_span, None)?;
                    lams.push(lam);
                }
                self.level -= 1;
                self.pop_to(m);
                let mut code = Core::Const(Const::Unit);
                for ((d, t), (g, lam)) in defs.iter().zip(&tys).zip(globals.iter().zip(lams)).rev() {
                    let scheme = self.generalize(t);
                    defined.push((Rc::from(d.name.as_str()), self.show_scheme(&scheme)));
                    self.push_binding(
                        d.name.as_str().into(),
                        Binding { scheme, loc: Loc::Global(*g), self_depth: None, span: d.name_span },
                    );
                    code = Core::Seq(Box::new(Core::SetGlobal(*g, Box::new(Core::Lam(lam)))), Box::new(code));
                }
                defined.reverse();
                code
            }
        };
        // Top-level bindings stay in scope for the rest of the program.
        self.undo.clear();
        let nlocals = self.funs[0].max_slots;
        Ok(CheckedItem { code, nlocals, span: item.span, defined, expr_type })
    }

    /// A scheme rendered with its constraints (`Real a => a -> a`).
    pub fn show_scheme(&self, s: &Scheme) -> String {
        Printer::default().show_constrained(&self.subst, &s.ty, &s.constraints)
    }

    fn new_global(&mut self, name: &str) -> u32 {
        self.global_count += 1;
        self.global_names.push(name.into());
        self.global_count - 1
    }

    /// Registers a checked module: `names` are its top-level names (looked up now).
    pub fn add_module(&mut self, name: &str, names: &[Rc<str>]) -> usize {
        let mut exports = HashMap::new();
        for n in names {
            if let Some(b) = self.scope.get(n).and_then(|v| v.last()) {
                exports.insert(n.clone(), b.clone());
            }
        }
        self.modules.push(Module { name: name.into(), exports });
        self.modules.len() - 1
    }

    /// Scope snapshot support for checking a module in isolation: hides the current
    /// top-level names and restores them afterwards.
    pub fn enter_module(&mut self, base: &HashMap<Rc<str>, Vec<Binding>>) -> HashMap<Rc<str>, Vec<Binding>> {
        std::mem::replace(&mut self.scope, base.clone())
    }
    pub fn leave_module(&mut self, saved: HashMap<Rc<str>, Vec<Binding>>) {
        self.scope = saved;
    }
    pub fn scope_snapshot(&self) -> HashMap<Rc<str>, Vec<Binding>> {
        self.scope.clone()
    }

    /// Names and rendered types of every value in scope (for the REPL's completion and the LSP).
    pub fn names_in_scope(&self) -> Vec<(Rc<str>, String)> {
        let mut v: Vec<_> = self
            .scope
            .iter()
            .filter_map(|(n, bs)| bs.last().map(|b| (n.clone(), self.show_scheme(&b.scheme))))
            .collect();
        v.sort();
        v
    }

    /// The type of a name in scope, rendered.
    pub fn type_of_name(&self, name: &str) -> Option<String> {
        self.scope.get(name).and_then(|v| v.last()).map(|b| self.show_scheme(&b.scheme))
    }

    /// Infers the type of a standalone expression (REPL `:type`), without running it.
    pub fn type_of_expr(&mut self, e: &Expr) -> R<String> {
        self.funs = vec![FunCtx::default()];
        self.tyvars.clear();
        self.level = 1;
        self.answer = self.fresh();
        self.at_top = true;
        let r = self.infer(e);
        self.level = 0;
        let (_, t) = r?;
        self.close_slices(&t, 1);
        Ok(Printer::default().show_constrained(&self.subst, &t, &[]))
    }

    // ------------------------------------------------------------ expressions

    /// Infers an expression's type and elaborates it. The forms that nest deeply in real
    /// programs (`let … in`, operator chains, applications) go straight to their own
    /// functions, so each level of nesting costs a small stack frame.
    fn infer(&mut self, e: &Expr) -> R<(Core, Ty)> {
        match &e.kind {
            ExprKind::Let(p, e1, e2) => self.infer_let(p, e1, e2),
            ExprKind::Bin(op, opspan, a, b) => self.infer_bin(*op, *opspan, a, b, e.span),
            ExprKind::App(..) => {
                let (head, args) = spine(e);
                self.infer_app(head, &args, e.span)
            }
            _ => self.infer_other(e),
        }
    }

    /// `let p = e1 in e2`, outside `infer` so that deeply nested `let`s cost a small frame each.
    #[inline(never)]
    fn infer_let(&mut self, p: &Pat, e1: &Expr, e2: &Expr) -> R<(Core, Ty)> {
        let simple = simple_var(p);
        let is_value = is_syntactic_value(e1);
        self.level += 1;
        let (mut c1, t1) = self.infer_defining(simple, e1)?;
        self.level -= 1;
        let m = self.mark();
        if let Some(name) = simple {
            if let Core::Lam(l) = &mut c1 {
                name_lambda(l, name);
            }
            if let PatKind::Annot(_, te) = &p.kind {
                let at = self.convert_type(te)?;
                self.unify_at(&at, &t1, e1.span, Some((te.span, "annotated as")))?;
            }
            let scheme = self.scheme_for(t1, is_value);
            let slot = self.new_slot();
            let depth = self.fun_depth();
            self.push_binding(
                name.into(),
                Binding { scheme, loc: Loc::Local { depth, slot, boxed: false }, self_depth: None, span: p.span },
            );
            let (c2, t2) = self.infer(e2)?;
            self.pop_to(m);
            Ok((Core::Let(slot, Box::new(c1), Box::new(c2)), t2))
        } else {
            let mut binds = Vec::new();
            let pat = self.infer_pat(p, &t1, &mut binds)?;
            self.warn_exhaustive(std::slice::from_ref(p), &t1, p.span, "this `let` pattern");
            for (name, ty, slot, span) in binds {
                let depth = self.fun_depth();
                let scheme = self.scheme_for(ty, is_value);
                self.push_binding(
                    name,
                    Binding { scheme, loc: Loc::Local { depth, slot, boxed: false }, self_depth: None, span },
                );
            }
            let (c2, t2) = self.infer(e2)?;
            self.pop_to(m);
            Ok((Core::LetPat(pat, Box::new(c1), Box::new(c2), p.span), t2))
        }
    }

    #[inline(never)]
    fn infer_other(&mut self, e: &Expr) -> R<(Core, Ty)> {
        let sp = e.span;
        Ok(match &e.kind {
            ExprKind::Lit(l) => lit(l),
            ExprKind::Var(x) => self.infer_var(x, sp)?,
            ExprKind::Con(c) => self.infer_con_app(c, sp, &[], sp)?,
            ExprKind::App(..) | ExprKind::Let(..) | ExprKind::Bin(..) => return self.infer(e),
            ExprKind::Lam(params, body) => {
                let (lam, t) = self.infer_lambda("fun", params, body, sp, None)?;
                (Core::Lam(lam), t)
            }
            ExprKind::LetRec(defs, body) => self.infer_letrec(defs, body)?,
            ExprKind::If(c, a, b) => {
                let (cc, ct) = self.infer(c)?;
                self.unify_at(&Ty::bool(), &ct, c.span, None)?;
                let (ca, ta) = self.infer(a)?;
                match b {
                    Some(b) => {
                        let (cb, tb) = self.infer(b)?;
                        self.unify_at(&ta, &tb, b.span, Some((a.span, "the `then` branch has type")))?;
                        (Core::If(Box::new(cc), Box::new(ca), Box::new(cb)), ta)
                    }
                    None => {
                        self.unify_at(&Ty::unit(), &ta, a.span, None)
                            .map_err(|d| d.help("an `if` without `else` must have a Unit `then` branch"))?;
                        (Core::If(Box::new(cc), Box::new(ca), Box::new(Core::Const(Const::Unit))), Ty::unit())
                    }
                }
            }
            ExprKind::Match(scrut, arms) => {
                let (cs, ts) = self.infer(scrut)?;
                let slot = self.new_slot();
                let result = self.fresh();
                let mut carms = Vec::new();
                let mut first_span = None;
                for (p, body) in arms {
                    let m = self.mark();
                    let mut binds = Vec::new();
                    let pat = self.infer_pat(p, &ts, &mut binds)?;
                    for (name, ty, s, span) in binds {
                        let depth = self.fun_depth();
                        self.push_binding(
                            name,
                            Binding {
                                scheme: Scheme::mono(ty),
                                loc: Loc::Local { depth, slot: s, boxed: false },
                                self_depth: None,
                                span,
                            },
                        );
                    }
                    let (cb, tb) = self.infer(body)?;
                    match first_span {
                        None => {
                            self.unify_at(&result, &tb, body.span, None)?;
                            first_span = Some(body.span);
                        }
                        Some(fs) => self.unify_at(&result, &tb, body.span, Some((fs, "the first arm has type")))?,
                    }
                    self.pop_to(m);
                    carms.push((pat, cb));
                }
                let pats: Vec<Pat> = arms.iter().map(|(p, _)| p.clone()).collect();
                self.warn_exhaustive(&pats, &ts, sp, "this `match`");
                (Core::Match(slot, Box::new(cs), carms, sp), result)
            }
            ExprKind::Seq(a, b) => {
                let (ca, ta) = self.infer(a)?;
                if self.subst.unify(&Ty::unit(), &ta).is_err() {
                    let shown = self.show(&ta);
                    self.warnings.push(
                        Diagnostic::warning(
                            Phase::Type,
                            format!("this expression's value of type `{shown}` is discarded"),
                        )
                        .label(a.span, "its value is dropped by `;`")
                        .help("use `let _ = e in …` to discard a value on purpose"),
                    );
                }
                let (cb, tb) = self.infer(b)?;
                (Core::Seq(Box::new(ca), Box::new(cb)), tb)
            }
            ExprKind::Un(op, a) => {
                let (ca, ta) = self.infer(a)?;
                match op {
                    UnOp::Neg => {
                        self.require(class::NUM, &ta, a.span)?;
                        (Core::Prim(Prim::Neg, vec![ca], ta.clone(), sp), ta)
                    }
                    UnOp::Not => {
                        self.unify_at(&Ty::bool(), &ta, a.span, None)?;
                        (Core::Prim(Prim::Not, vec![ca], ta, sp), Ty::bool())
                    }
                    UnOp::Deref => {
                        let inner = self.fresh();
                        self.unify_at(&Ty::Con("Ref".into(), Rc::from([inner.clone()])), &ta, a.span, None)
                            .map_err(|d| d.help("`!r` reads a reference cell made with `ref`"))?;
                        (Core::Prim(Prim::Deref, vec![ca], ta, sp), inner)
                    }
                }
            }
            ExprKind::Tuple(es) => {
                let mut cs = Vec::new();
                let mut ts = Vec::new();
                for x in es {
                    let (c, t) = self.infer(x)?;
                    cs.push(c);
                    ts.push(t);
                }
                (Core::Tuple(cs), Ty::Tuple(ts.into()))
            }
            ExprKind::List(es) => {
                let elem = self.fresh();
                let mut cs = Vec::new();
                let mut first: Option<Span> = None;
                for x in es {
                    let (c, t) = self.infer(x)?;
                    self.unify_at(&elem, &t, x.span, first.map(|s| (s, "the first element has type")))?;
                    first.get_or_insert(x.span);
                    cs.push(c);
                }
                (Core::List(cs), Ty::list(elem))
            }
            ExprKind::Record(fields) => {
                let mut sorted: Vec<&Field<Expr>> = fields.iter().collect();
                sorted.sort_by(|a, b| a.name.cmp(&b.name));
                for w in sorted.windows(2) {
                    if w[0].name == w[1].name {
                        return Err(Diagnostic::error(Phase::Type, format!("field `{}` appears twice", w[1].name))
                            .label(w[1].span, "duplicate field")
                            .label(w[0].span, "first here"));
                    }
                }
                let mut row = Ty::RowEmpty;
                let mut cs = Vec::new();
                let mut tys = Vec::new();
                for f in &sorted {
                    let (c, t) = self.infer(&f.value)?;
                    cs.push(c);
                    tys.push(t);
                }
                for (f, t) in sorted.iter().zip(tys).rev() {
                    row = Ty::RowExt(f.name.as_str().into(), Rc::new(t), Rc::new(row));
                }
                let names: Rc<[Rc<str>]> = sorted.iter().map(|f| Rc::from(f.name.as_str())).collect();
                (Core::Record(names, cs), Ty::Record(Rc::new(row)))
            }
            ExprKind::Update(base, fields) => {
                let (cb, tb) = self.infer(base)?;
                let mut cs = Vec::new();
                for f in fields {
                    let (c, t) = self.infer(&f.value)?;
                    let rest = self.fresh();
                    let want =
                        Ty::Record(Rc::new(Ty::RowExt(f.name.as_str().into(), Rc::new(t.clone()), Rc::new(rest))));
                    self.unify_at(&want, &tb, base.span, None)
                        .map_err(|d| d.label(f.span, format!("updating field `{}`", f.name)))?;
                    cs.push((Rc::from(f.name.as_str()), c));
                }
                (Core::Update(Box::new(cb), cs, sp), tb)
            }
            ExprKind::Dot(base, field, fspan) => {
                if let ExprKind::Var(m) = &base.kind {
                    if let Some(Loc::Module(mi)) =
                        self.scope.get(m.as_str()).and_then(|v| v.last()).map(|b| b.loc.clone())
                    {
                        let Some(b) = self.modules[mi].exports.get(field.as_str()).cloned() else {
                            return Err(Diagnostic::error(Phase::Type, format!("module `{m}` has no value `{field}`"))
                                .label(*fspan, "not defined in that module"));
                        };
                        let t = self.instantiate(&b.scheme);
                        let core = match b.loc {
                            Loc::Global(g) => Core::Var(VarRef::Global(g), sp),
                            Loc::Builtin(i) => Core::Builtin(i, sp),
                            _ => {
                                return Err(Diagnostic::error(Phase::Type, "modules can only export top-level values")
                                    .label(sp, "here"))
                            }
                        };
                        return Ok((core, t));
                    }
                }
                let (cb, tb) = self.infer(base)?;
                let ft = self.fresh();
                let rest = self.fresh();
                let want = Ty::Record(Rc::new(Ty::RowExt(field.as_str().into(), Rc::new(ft.clone()), Rc::new(rest))));
                self.unify_at(&want, &tb, base.span, None)
                    .map_err(|d| d.label(*fspan, format!("field `{field}` is read here")))?;
                (Core::Field(Box::new(cb), field.as_str().into(), *fspan), ft)
            }
            ExprKind::Annot(x, te) => {
                let (c, t) = self.infer(x)?;
                let at = self.convert_type(te)?;
                self.unify_at(&at, &t, x.span, Some((te.span, "annotated as")))?;
                (c, at)
            }
        })
    }

    /// The right-hand side of `let name = e`, with `name` noted as being defined.
    fn infer_defining(&mut self, name: Option<&str>, e: &Expr) -> R<(Core, Ty)> {
        let Some(name) = name else { return self.infer(e) };
        self.defining.push(name.into());
        let r = self.infer(e);
        self.defining.pop();
        r
    }

    /// An arithmetic operation whose operand types cannot be combined, found when it is met.
    fn arith_error(&self, e: UnifyError, op: &str, opspan: Span, a: (Span, &Ty), b: (Span, &Ty)) -> Diagnostic {
        let mut p = Printer::default();
        let (ra, rb) = (self.subst.resolve(a.1), self.subst.resolve(b.1));
        let (sa, sb) = (p.show(&self.subst, &ra), p.show(&self.subst, &rb));
        let numeric = |t: &Ty| matches!(t, Ty::Var(_)) || ["Int", "Float", "Tensor"].iter().any(|n| t.is_con(n));
        if !matches!(e, UnifyError::Broadcast(..)) {
            return self.unify_error(e, a.1, a.1, opspan, None);
        }
        // One non-numeric type on both sides (or beside a variable): say that it is not numeric.
        let lone = match (numeric(&ra), numeric(&rb)) {
            (false, true) if matches!(rb, Ty::Var(_)) => Some((a.0, &sa)),
            (true, false) if matches!(ra, Ty::Var(_)) => Some((b.0, &sb)),
            (false, false) if ra == rb => Some((a.0, &sa)),
            // A reference cell used as its contents.
            (false, _) if sa.starts_with("Ref ") => Some((a.0, &sa)),
            (_, false) if sb.starts_with("Ref ") => Some((b.0, &sb)),
            _ => None,
        };
        if let Some((span, shown)) = lone {
            let d = Diagnostic::error(Phase::Type, format!("type `{shown}` is not {}", class::describe(class::NUM)))
                .label(span, format!("this has type `{shown}`"))
                .label(opspan, format!("`{op}` is arithmetic"));
            return match shown.as_str() {
                "String" => d.help("to join strings, use `++`"),
                s if s.starts_with("List") && op == "+" => d.help("to append lists, use `++`"),
                s if s.starts_with("Ref ") => d.help("`!r` reads a reference cell"),
                _ => d,
            };
        }
        let mut d = Diagnostic::error(Phase::Type, format!("type mismatch: expected `{sa}`, found `{sb}`"))
            .label(b.0, format!("this has type `{sb}`"))
            .label(a.0, format!("the left operand has type `{sa}`"))
            .label(opspan, format!("`{op}` needs two operands of one numeric type"));
        if (sa == "Int" && sb == "Float") || (sa == "Float" && sb == "Int") {
            d = d.help("Int and Float never mix: convert with `float n` or `int x`");
        } else if numeric(&ra) && numeric(&rb) {
            d = d.note("arithmetic combines two Ints, two Floats, two Tensors, or a Float with a Tensor");
        }
        d
    }

    fn require(&mut self, c: u8, t: &Ty, span: Span) -> R<()> {
        self.subst.require_class(c, t).map_err(|e| self.unify_error(e, t, t, span, None))
    }

    fn infer_var(&mut self, x: &str, sp: Span) -> R<(Core, Ty)> {
        let Some(b) = self.scope.get(x).and_then(|v| v.last()).cloned() else {
            let mut d = Diagnostic::error(Phase::Type, format!("unbound variable `{x}`")).label(sp, "not defined here");
            if self.defining.iter().any(|n| &**n == x) {
                return Err(d.help(format!(
                    "`{x}` is not in scope inside its own definition: write `let rec {x} …` for a recursive function"
                )));
            }
            if let Some(s) = self.suggest(x) {
                d = d.help(format!("did you mean `{s}`?"));
            }
            return Err(d);
        };
        if let Loc::Builtin(i) = b.loc {
            let name = TABLE[i as usize].0;
            if !self.raw_format && matches!(name, "printf" | "sprintf") {
                return Err(Diagnostic::error(Phase::Type, format!("`{name}` must be applied to its format string"))
                    .label(sp, format!("`{name}` without a format"))
                    .note("the format's directives (%d, %f, %s, …) give the types of the arguments")
                    .help(format!(
                        "write `{name} \"%d items\"` (a function of the arguments: `map ({name} \"%d\") xs`)"
                    )));
            }
        }
        let t = self.instantiate_at(&b.scheme, sp);
        let core = match b.loc {
            Loc::Global(g) => Core::Var(VarRef::Global(g), sp),
            Loc::Builtin(i) => Core::Builtin(i, sp),
            Loc::Module(_) => {
                return Err(Diagnostic::error(Phase::Type, format!("`{x}` is a module, not a value"))
                    .label(sp, "use a member, e.g. `module.name`"));
            }
            Loc::Local { depth, slot, boxed } => {
                let r = match b.self_depth {
                    Some(k) if k <= self.fun_depth() => self.access(k, None),
                    _ => self.access(depth, Some(slot)),
                };
                let v = Core::Var(r, sp);
                if boxed {
                    Core::Prim(Prim::Deref, vec![v], Ty::unit(), sp)
                } else {
                    v
                }
            }
        };
        Ok((core, t))
    }

    fn suggest(&self, x: &str) -> Option<String> {
        let mut best: Option<(usize, &str)> = None;
        for (n, bs) in &self.scope {
            if bs.is_empty() {
                continue;
            }
            let d = edit_distance(x, n);
            if d <= if x.chars().count() <= 4 { 1 } else { 2 }
                && d < x.len()
                && best.is_none_or(|(bd, bn)| d < bd || (d == bd && &**n < bn))
            {
                best = Some((d, n));
            }
        }
        best.map(|(_, n)| n.to_string())
    }

    fn infer_con_app(&mut self, c: &str, cspan: Span, args: &[&Expr], sp: Span) -> R<(Core, Ty)> {
        let Some(info) = self.cons.get(c).cloned() else {
            return Err(Diagnostic::error(Phase::Type, format!("unknown constructor `{c}`"))
                .label(cspan, "not declared by any `type`"));
        };
        let mut ft = self.instantiate(&info.scheme);
        let n = args.len().min(info.arity as usize);
        let mut cargs = Vec::new();
        for a in &args[..n] {
            let (ca, ta) = self.infer(a)?;
            let Ty::Fun(p, r, _) = self.subst.prune(&ft) else { unreachable!("constructor type has arity arrows") };
            self.unify_arg(&p, &ta, a.span, Some((cspan, &format!("`{c}` expects"))), false)?;
            cargs.push(ca);
            ft = (*r).clone();
        }
        let core = if n == info.arity as usize {
            Core::Con { tag: info.tag, name: info.name.clone(), arity: info.arity, args: cargs }
        } else {
            // A partially applied constructor is a function of the remaining arguments.
            let missing = info.arity - n as u32;
            let body_args: Vec<Core> = (0..missing).map(|i| Core::Var(VarRef::Local(i), sp)).collect();
            let lam = Rc::new(Lambda {
                name: info.name.clone(),
                arity: missing,
                nlocals: missing,
                captures: Vec::new(),
                body: Core::Con { tag: info.tag, name: info.name.clone(), arity: info.arity, args: body_args },
                span: sp,
            });
            if cargs.is_empty() {
                Core::Lam(lam)
            } else {
                // Bind the given arguments first, then apply the remaining-argument function.
                let full_lam = Rc::new(Lambda {
                    name: info.name.clone(),
                    arity: info.arity,
                    nlocals: info.arity,
                    captures: Vec::new(),
                    body: Core::Con {
                        tag: info.tag,
                        name: info.name.clone(),
                        arity: info.arity,
                        args: (0..info.arity).map(|i| Core::Var(VarRef::Local(i), sp)).collect(),
                    },
                    span: sp,
                });
                Core::App(Box::new(Core::Lam(full_lam)), cargs, sp)
            }
        };
        if args.len() > info.arity as usize {
            return Err(Diagnostic::error(
                Phase::Type,
                format!("constructor `{c}` takes {} argument(s), given {}", info.arity, args.len()),
            )
            .label(sp, "too many arguments"));
        }
        Ok((core, ft))
    }

    #[inline(never)]
    fn infer_app(&mut self, head: &Expr, args: &[&Expr], sp: Span) -> R<(Core, Ty)> {
        if let ExprKind::Con(c) = &head.kind {
            return self.infer_con_app(c, head.span, args, sp);
        }
        if !self.raw_format && (self.is_builtin(head, "printf") || self.is_builtin(head, "sprintf")) {
            let (chead, ft) = self.infer_format(head, args[0])?;
            return self.apply_args(chead, ft, head, &args[1..], sp);
        }
        let (chead, ft) = self.infer(head)?;
        self.apply_args(chead, ft, head, args, sp)
    }

    /// `printf "…" a b` and `sprintf "…" a b`: the literal format's directives give the types of
    /// the arguments. The use is rewritten into `fun (%0 : T0) (%1 : T1) -> sprintf "…" (%0, %1)`
    /// (names no program can write), which the rest of the checker handles as any function:
    /// partial application, mismatched arguments and all.
    fn infer_format(&mut self, head: &Expr, format: &Expr) -> R<(Core, Ty)> {
        use crate::format::{directives, parse, Conv};
        use crate::syntax::ast::{Lit, Pat, PatKind, TypeExpr, TypeExprKind};
        let name = if self.is_builtin(head, "printf") { "printf" } else { "sprintf" };
        let ExprKind::Lit(Lit::Str(text)) = &format.kind else {
            return Err(Diagnostic::error(Phase::Type, format!("the format of `{name}` must be a string literal"))
                .label(format.span, "not a string literal")
                .note("the format's directives (%d, %f, %s, …) give the types of the arguments, so the checker must see it")
                .help("to print a computed string `s`, write `print s`, or `printf \"%s\" s`"));
        };
        let pieces = parse(text).map_err(|e| {
            Diagnostic::error(Phase::Type, format!("bad format string: {}", e.message)).label(format.span, e.message)
        })?;
        let at = format.span;
        let node = |kind: ExprKind| Expr { kind, span: at };
        let mut params = Vec::new();
        let mut vars = Vec::new();
        for (i, d) in directives(&pieces).enumerate() {
            let ty = match d.conv {
                Conv::Int => "Int",
                Conv::Fixed | Conv::Exp | Conv::General => "Float",
                Conv::Str => "String",
                Conv::Bool => "Bool",
            };
            let var = Pat { kind: PatKind::Var(format!("%{i}")), span: at };
            let annot = TypeExpr { kind: TypeExprKind::Con(ty.into(), Vec::new()), span: at };
            params.push(Pat { kind: PatKind::Annot(Box::new(var), annot), span: at });
            vars.push(node(ExprKind::Var(format!("%{i}"))));
        }
        let packed = match vars.len() {
            0 => node(ExprKind::Lit(Lit::Unit)),
            1 => vars.remove(0),
            _ => node(ExprKind::Tuple(vars)),
        };
        let raw = node(ExprKind::Var(name.into()));
        let call = node(ExprKind::App(
            Box::new(node(ExprKind::App(Box::new(raw), Box::new(format.clone())))),
            Box::new(packed),
        ));
        let rewritten = if params.is_empty() { call } else { node(ExprKind::Lam(params, Box::new(call))) };
        let outer = std::mem::replace(&mut self.raw_format, true);
        let r = self.infer(&rewritten);
        self.raw_format = outer;
        r
    }

    /// Applies a function (elaborated as `chead`, of type `ft`) to arguments, one at a time.
    fn apply_args(&mut self, chead: Core, mut ft: Ty, head: &Expr, args: &[&Expr], sp: Span) -> R<(Core, Ty)> {
        let mut cargs = Vec::new();
        if args.is_empty() {
            return Ok((chead, ft));
        }
        for a in args {
            let (ca, ta) = self.infer(a)?;
            let fpruned = self.subst.prune(&ft);
            if let Ty::Fun(p, res, effect) = &fpruned {
                let reset = cargs.is_empty() && self.is_builtin(head, "reset");
                self.unify_arg(p, &ta, a.span, Some((head.span, "this function expects")), reset)?;
                self.call_effect(effect, head, sp)?;
                ft = (**res).clone();
                cargs.push(ca);
                continue;
            }
            let (r, effect) = (self.fresh(), self.fresh());
            let want = Ty::fun(ta.clone(), r.clone(), effect.clone());
            if let Err(e) = self.subst.unify(&fpruned, &want) {
                let shown = self.show(&fpruned);
                if matches!(fpruned, Ty::Var(_)) {
                    return Err(self.unify_error(e, &want, &fpruned, head.span, None));
                }
                return Err(Diagnostic::error(Phase::Type, format!("this is not a function: it has type `{shown}`"))
                    .label(head.span, format!("has type `{shown}`"))
                    .label(a.span, "but it is applied to this argument"));
            }
            self.call_effect(&effect, head, sp)?;
            ft = r;
            cargs.push(ca);
        }
        Ok((Core::App(Box::new(chead), cargs, sp), ft))
    }

    fn is_builtin(&self, e: &Expr, name: &str) -> bool {
        match &e.kind {
            ExprKind::Var(x) => matches!(
                self.scope.get(x.as_str()).and_then(|v| v.last()).map(|b| &b.loc),
                Some(Loc::Builtin(i)) if TABLE[*i as usize].0 == name
            ),
            _ => false,
        }
    }

    /// Unifies an argument's type with the parameter's, except that a function argument may
    /// have a lesser answer effect than the parameter's (a function that shifts to no outer
    /// `reset` is accepted where one that may shift is expected). For `reset`'s argument a
    /// mismatch of effects is said in `reset`'s words.
    fn unify_arg(&mut self, param: &Ty, arg: &Ty, span: Span, other: Option<(Span, &str)>, reset: bool) -> R<()> {
        let (Ty::Fun(p, r, upper), Ty::Fun(_, _, lower)) = (self.subst.prune(param), self.subst.prune(arg)) else {
            return self.unify_at(param, arg, span, other);
        };
        let same_effect = Ty::Fun(p, r, lower.clone());
        self.unify_at(&same_effect, arg, span, other)?;
        let rule = Rule::Answer { lower: (*lower).clone(), upper: (*upper).clone() };
        match self.subst.add(rule, span) {
            Ok(()) => Ok(()),
            Err(UnifyError::Answer(_, shifted, produced)) if reset => {
                let mut p = Printer::default();
                let (sp, ss) = (p.show(&self.subst, &produced), p.show(&self.subst, &shifted));
                Err(Diagnostic::error(
                    Phase::Type,
                    format!(
                        "answer type mismatch: this `reset`'s body produces `{sp}`, but a `shift` in it returns `{ss}`"
                    ),
                )
                .label(span, format!("this produces `{sp}`, and a `shift` reached from it returns `{ss}`"))
                .note("the body of a `shift` must return the type that its enclosing `reset` produces"))
            }
            Err(e) => Err(self.unify_error(e, param, arg, span, other)),
        }
    }

    /// A call runs the callee's body in the current context: once the callee's effect says
    /// its `shift`s expect a `reset` producing some type, the `reset` around this call must
    /// produce that type (a call at the top level of a file is under no `reset`, and a
    /// `shift` reached from it is a run-time error).
    fn call_effect(&mut self, effect: &Ty, head: &Expr, sp: Span) -> R<()> {
        if self.at_top {
            return Ok(());
        }
        let here = self.answer.clone();
        match self.subst.add(Rule::Answer { lower: effect.clone(), upper: here.clone() }, sp) {
            Ok(()) => Ok(()),
            Err(UnifyError::Answer(_, want, have)) => {
                let mut p = Printer::default();
                let (want, have) = (p.show(&self.subst, &want), p.show(&self.subst, &have));
                Err(Diagnostic::error(
                    Phase::Type,
                    format!("answer type mismatch: a `shift` in this call returns `{want}`, but the `reset` around it produces `{have}`"),
                )
                .label(head.span, format!("this call may `shift` to a `reset` that produces `{want}`"))
                .label(sp, format!("the `reset` around this call produces `{have}`"))
                .note("the body of a `shift` must return the type that its enclosing `reset` produces"))
            }
            Err(e) => Err(self.unify_error(e, effect, &here, sp, None)),
        }
    }

    #[inline(never)]
    fn infer_bin(&mut self, op: BinOp, opspan: Span, a: &Expr, b: &Expr, sp: Span) -> R<(Core, Ty)> {
        if op == BinOp::Pipe {
            return self.infer_app(b, &[a], sp);
        }
        let (ca, ta) = self.infer(a)?;
        let (cb, tb) = self.infer(b)?;
        let left = Some((a.span, "the left operand has type"));
        let prim = |p: Prim, t: Ty, ca: Core, cb: Core| Core::Prim(p, vec![ca, cb], t, sp);
        Ok(match op {
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Pow => {
                let p = match op {
                    BinOp::Add => Prim::Add,
                    BinOp::Sub => Prim::Sub,
                    BinOp::Mul => Prim::Mul,
                    BinOp::Div => Prim::Div,
                    _ => Prim::Pow,
                };
                let result = self.fresh();
                let rule = Rule::Broadcast { a: ta.clone(), b: tb.clone(), c: result.clone(), op: op.symbol() };
                if let Err(e) = self.subst.add(rule, opspan) {
                    return Err(self.arith_error(e, op.symbol(), opspan, (a.span, &ta), (b.span, &tb)));
                }
                (prim(p, result.clone(), ca, cb), result)
            }
            BinOp::Rem => {
                self.unify_at(&Ty::int(), &ta, a.span, None)?;
                self.unify_at(&Ty::int(), &tb, b.span, None)?;
                (prim(Prim::Rem, Ty::int(), ca, cb), Ty::int())
            }
            BinOp::MatMul => {
                self.unify_at(&Ty::tensor(), &ta, a.span, None)?;
                self.unify_at(&Ty::tensor(), &tb, b.span, None)?;
                (prim(Prim::MatMul, Ty::tensor(), ca, cb), Ty::tensor())
            }
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                self.unify_at(&ta, &tb, b.span, left)?;
                let p = match op {
                    BinOp::Eq => Prim::Eq,
                    BinOp::Ne => Prim::Ne,
                    BinOp::Lt => Prim::Lt,
                    BinOp::Le => Prim::Le,
                    BinOp::Gt => Prim::Gt,
                    _ => Prim::Ge,
                };
                if !matches!(op, BinOp::Eq | BinOp::Ne) {
                    self.require(class::ORD, &ta, a.span)
                        .map_err(|d| d.label(opspan, "ordering compares Int, Float or String"))?;
                }
                (prim(p, ta, ca, cb), Ty::bool())
            }
            BinOp::And | BinOp::Or => {
                self.unify_at(&Ty::bool(), &ta, a.span, None)?;
                self.unify_at(&Ty::bool(), &tb, b.span, None)?;
                let c = if op == BinOp::And {
                    Core::And(Box::new(ca), Box::new(cb))
                } else {
                    Core::Or(Box::new(ca), Box::new(cb))
                };
                (c, Ty::bool())
            }
            BinOp::Cons => {
                let lt = Ty::list(ta.clone());
                self.unify_at(&lt, &tb, b.span, Some((a.span, "the head makes the list type")))?;
                (prim(Prim::Cons, ta, ca, cb), lt)
            }
            BinOp::Append => {
                self.unify_at(&ta, &tb, b.span, left)?;
                self.require(class::APPEND, &ta, a.span)?;
                (prim(Prim::Append, ta.clone(), ca, cb), ta)
            }
            BinOp::Assign => {
                self.unify_at(
                    &Ty::Con("Ref".into(), Rc::from([tb.clone()])),
                    &ta,
                    a.span,
                    Some((b.span, "the assigned value makes it")),
                )?;
                (prim(Prim::Assign, ta, ca, cb), Ty::unit())
            }
            BinOp::Pipe => unreachable!("handled above"),
        })
    }

    /// A lambda with (pattern) parameters; `self_rec` names the binding it may call as SelfRef.
    fn infer_lambda(
        &mut self,
        name: &str,
        params: &[Pat],
        body: &Expr,
        sp: Span,
        self_rec: Option<(&str, Ty, Span)>,
    ) -> R<(Rc<Lambda>, Ty)> {
        self.funs.push(FunCtx::default());
        let m = self.mark();
        if let Some((n, t, nsp)) = &self_rec {
            let depth = self.fun_depth();
            self.push_binding(
                (*n).into(),
                Binding {
                    scheme: Scheme::mono(t.clone()),
                    loc: Loc::Local { depth, slot: u32::MAX, boxed: false },
                    self_depth: Some(depth),
                    span: *nsp,
                },
            );
        }
        let arity = params.len() as u32;
        for _ in 0..arity {
            self.new_slot();
        }
        let mut ptys = Vec::new();
        let mut wrappers = Vec::new();
        for (i, p) in params.iter().enumerate() {
            let t = self.fresh();
            match simple_var(p) {
                Some(x) => {
                    if let PatKind::Annot(_, te) = &p.kind {
                        let at = self.convert_type(te)?;
                        self.unify_at(&at, &t, p.span, None)?;
                    }
                    let depth = self.fun_depth();
                    self.push_binding(
                        x.into(),
                        Binding {
                            scheme: Scheme::mono(t.clone()),
                            loc: Loc::Local { depth, slot: i as u32, boxed: false },
                            self_depth: None,
                            span: p.span,
                        },
                    );
                }
                None => {
                    let mut binds = Vec::new();
                    let pat = self.infer_pat(p, &t, &mut binds)?;
                    self.warn_exhaustive(std::slice::from_ref(p), &t, p.span, "this parameter pattern");
                    for (n, ty, s, span) in binds {
                        let depth = self.fun_depth();
                        self.push_binding(
                            n,
                            Binding {
                                scheme: Scheme::mono(ty),
                                loc: Loc::Local { depth, slot: s, boxed: false },
                                self_depth: None,
                                span,
                            },
                        );
                    }
                    wrappers.push((pat, i as u32, p.span));
                }
            }
            ptys.push(t);
        }
        // The body runs where the function is finally applied: a context of its own. Taking
        // the earlier arguments of a curried function runs nothing, so those arrows' answer
        // types are free.
        let body_answer = self.fresh();
        let outer_answer = std::mem::replace(&mut self.answer, body_answer.clone());
        let outer_top = std::mem::replace(&mut self.at_top, false);
        let r = self.infer(body);
        self.answer = outer_answer;
        self.at_top = outer_top;
        self.pop_to(m);
        let ctx = self.funs.pop().unwrap();
        let (mut cbody, tbody) = r?;
        for (pat, slot, psp) in wrappers.into_iter().rev() {
            cbody = Core::LetPat(pat, Box::new(Core::Var(VarRef::Local(slot), psp)), Box::new(cbody), psp);
        }
        let mut ty = tbody;
        for (i, p) in ptys.into_iter().enumerate().rev() {
            let innermost = i + 1 == arity as usize;
            let answer = if innermost { body_answer.clone() } else { self.fresh() };
            ty = Ty::fun(p, ty, answer);
        }
        let lam = Lambda {
            name: name.into(),
            arity,
            nlocals: ctx.max_slots,
            captures: ctx.captures.iter().map(|(_, v)| *v).collect(),
            body: cbody,
            span: sp,
        };
        Ok((Rc::new(lam), ty))
    }

    fn infer_fundef(&mut self, d: &FunDef) -> R<(Rc<Lambda>, Ty)> {
        let sp = d.name_span.to(d.body.span);
        self.infer_lambda(&d.name, &d.params, &d.body, sp, None)
    }

    fn infer_letrec(&mut self, defs: &[FunDef], body: &Expr) -> R<(Core, Ty)> {
        check_distinct(defs)?;
        self.level += 1;
        let m = self.mark();
        let depth = self.fun_depth();
        let mutual = defs.len() > 1;
        let mut tys = Vec::new();
        let mut slots = Vec::new();
        for d in defs {
            let t = self.fresh();
            let slot = self.new_slot();
            self.push_binding(
                d.name.as_str().into(),
                Binding {
                    scheme: Scheme::mono(t.clone()),
                    loc: Loc::Local { depth, slot, boxed: mutual },
                    self_depth: None,
                    span: d.name_span,
                },
            );
            tys.push(t);
            slots.push(slot);
        }
        let mut lams = Vec::new();
        for (d, t) in defs.iter().zip(&tys) {
            let sp = d.name_span.to(d.body.span);
            let self_rec = if mutual { None } else { Some((d.name.as_str(), t.clone(), d.name_span)) };
            let (lam, lt) = self.infer_lambda(&d.name, &d.params, &d.body, sp, self_rec)?;
            self.unify_at(t, &lt, d.name_span, None)?;
            lams.push(lam);
        }
        self.level -= 1;
        self.pop_to(m);
        let m = self.mark();
        for ((d, t), slot) in defs.iter().zip(&tys).zip(&slots) {
            let scheme = self.generalize(t);
            self.push_binding(
                d.name.as_str().into(),
                Binding {
                    scheme,
                    loc: Loc::Local { depth, slot: *slot, boxed: mutual },
                    self_depth: None,
                    span: d.name_span,
                },
            );
        }
        let (cb, tb) = self.infer(body)?;
        self.pop_to(m);
        let core = if !mutual {
            Core::LetRec(vec![(slots[0], lams.pop().unwrap())], Box::new(cb))
        } else {
            // Mutually recursive local functions reach each other through reference cells.
            let ref_builtin = TABLE.iter().position(|(n, _, _)| *n == "ref").unwrap() as u32;
            let sp = defs[0].name_span;
            let mut code = cb;
            for (slot, lam) in slots.iter().zip(lams).rev() {
                let assign =
                    Core::Prim(Prim::Assign, vec![Core::Var(VarRef::Local(*slot), sp), Core::Lam(lam)], Ty::unit(), sp);
                code = Core::Seq(Box::new(assign), Box::new(code));
            }
            for slot in slots.iter().rev() {
                let cell = Core::App(Box::new(Core::Builtin(ref_builtin, sp)), vec![Core::Const(Const::Unit)], sp);
                code = Core::Let(*slot, Box::new(cell), Box::new(code));
            }
            code
        };
        Ok((core, tb))
    }

    // ------------------------------------------------------------ patterns

    fn infer_pat(&mut self, p: &Pat, t: &Ty, binds: &mut Vec<(Rc<str>, Ty, u32, Span)>) -> R<Pattern> {
        Ok(match &p.kind {
            PatKind::Wild => Pattern::Wild,
            PatKind::Var(x) => {
                if binds.iter().any(|(n, ..)| &**n == x) {
                    return Err(Diagnostic::error(Phase::Type, format!("`{x}` is bound twice in this pattern"))
                        .label(p.span, "second binding"));
                }
                let slot = self.new_slot();
                binds.push((x.as_str().into(), t.clone(), slot, p.span));
                Pattern::Bind(slot)
            }
            PatKind::Lit(l) => {
                let (c, lt) = lit(l);
                self.unify_at(t, &lt, p.span, None)?;
                match c {
                    Core::Const(k) => Pattern::Const(k),
                    _ => unreachable!(),
                }
            }
            PatKind::Tuple(ps) => {
                let ts: Vec<Ty> = ps.iter().map(|_| self.fresh()).collect();
                self.unify_at(t, &Ty::Tuple(ts.clone().into()), p.span, None)?;
                Pattern::Tuple(ps.iter().zip(&ts).map(|(q, qt)| self.infer_pat(q, qt, binds)).collect::<R<_>>()?)
            }
            PatKind::List(ps) => {
                let elem = self.fresh();
                self.unify_at(t, &Ty::list(elem.clone()), p.span, None)?;
                let mut pat = Pattern::Nil;
                let mut items = Vec::new();
                for q in ps {
                    items.push(self.infer_pat(q, &elem, binds)?);
                }
                for q in items.into_iter().rev() {
                    pat = Pattern::Cons(Box::new(q), Box::new(pat));
                }
                pat
            }
            PatKind::Cons(h, tl) => {
                let elem = self.fresh();
                self.unify_at(t, &Ty::list(elem.clone()), p.span, None)?;
                let hp = self.infer_pat(h, &elem, binds)?;
                let tp = self.infer_pat(tl, t, binds)?;
                Pattern::Cons(Box::new(hp), Box::new(tp))
            }
            PatKind::Con(c, args) => {
                let Some(info) = self.cons.get(c.as_str()).cloned() else {
                    return Err(Diagnostic::error(Phase::Type, format!("unknown constructor `{c}`"))
                        .label(p.span, "not declared by any `type`"));
                };
                if args.len() != info.arity as usize {
                    return Err(Diagnostic::error(
                        Phase::Type,
                        format!(
                            "constructor `{c}` takes {} argument(s), but the pattern gives {}",
                            info.arity,
                            args.len()
                        ),
                    )
                    .label(p.span, "wrong number of arguments"));
                }
                let mut ft = self.instantiate(&info.scheme);
                let mut pargs = Vec::new();
                for q in args {
                    let Ty::Fun(a, r, _) = self.subst.prune(&ft) else { unreachable!() };
                    pargs.push(self.infer_pat(q, &a, binds)?);
                    ft = (*r).clone();
                }
                self.unify_at(t, &ft, p.span, None)?;
                Pattern::Con { tag: info.tag, args: pargs }
            }
            PatKind::Record(fields) => {
                let mut row = self.fresh();
                let mut subs = Vec::new();
                for f in fields.iter().rev() {
                    let ft = self.fresh();
                    row = Ty::RowExt(f.name.as_str().into(), Rc::new(ft.clone()), Rc::new(row));
                    subs.push((f, ft));
                }
                self.unify_at(t, &Ty::Record(Rc::new(row)), p.span, None)?;
                let mut out = Vec::new();
                for (f, ft) in subs.into_iter().rev() {
                    let q = match &f.value {
                        Some(q) => self.infer_pat(q, &ft, binds)?,
                        None => {
                            self.infer_pat(&Pat { kind: PatKind::Var(f.name.clone()), span: f.span }, &ft, binds)?
                        }
                    };
                    out.push((Rc::from(f.name.as_str()), q));
                }
                Pattern::Record(out)
            }
            PatKind::Annot(q, te) => {
                let at = self.convert_type(te)?;
                self.unify_at(&at, t, p.span, Some((te.span, "annotated as")))?;
                self.infer_pat(q, t, binds)?
            }
        })
    }

    fn warn_exhaustive(&mut self, pats: &[Pat], t: &Ty, span: Span, what: &str) {
        if let Some(missing) = super::exhaust::missing_case(self, pats, t) {
            self.warnings.push(
                Diagnostic::warning(Phase::Type, format!("non-exhaustive patterns: {what} does not cover `{missing}`"))
                    .label(span, format!("`{missing}` is not matched"))
                    .help("add an arm for it (or `_ -> …`); an unmatched value is a run-time error"),
            );
        }
    }

    pub fn constructor(&self, name: &str) -> Option<&ConInfo> {
        self.cons.get(name)
    }
}

/// The first `Name/2`-style identity (a later declaration of a type name) in a rendered type.
fn shadowed_type_name(shown: &str) -> Option<String> {
    let i = shown.find('/')?;
    let start = shown[..i].rfind(|c: char| !(c.is_alphanumeric() || c == '_')).map_or(0, |j| j + 1);
    let end = shown[i + 1..].find(|c: char| !c.is_ascii_digit()).map_or(shown.len(), |j| i + 1 + j);
    Some(shown[start..end].to_string())
}

/// The variables a pattern binds, with their spans.
fn pattern_names(p: &Pat, out: &mut Vec<(Rc<str>, Span)>) {
    match &p.kind {
        PatKind::Var(x) => out.push((x.as_str().into(), p.span)),
        PatKind::Tuple(ps) | PatKind::List(ps) | PatKind::Con(_, ps) => ps.iter().for_each(|q| pattern_names(q, out)),
        PatKind::Cons(h, t) => {
            pattern_names(h, out);
            pattern_names(t, out)
        }
        PatKind::Record(fs) => {
            for f in fs {
                match &f.value {
                    Some(q) => pattern_names(q, out),
                    None => out.push((f.name.as_str().into(), f.span)),
                }
            }
        }
        PatKind::Annot(q, _) => pattern_names(q, out),
        PatKind::Wild | PatKind::Lit(_) => {}
    }
}

fn name_lambda(l: &mut Rc<Lambda>, name: &str) {
    if &*l.name == "fun" {
        Rc::make_mut(l).name = name.into();
    }
}

/// The functions of one `let rec … and …` must have distinct names.
fn check_distinct(defs: &[FunDef]) -> R<()> {
    for (i, d) in defs.iter().enumerate() {
        if let Some(first) = defs[..i].iter().find(|e| e.name == d.name) {
            return Err(Diagnostic::error(Phase::Type, format!("`{}` is defined twice in this `let rec`", d.name))
                .label(d.name_span, "second definition")
                .label(first.name_span, "first definition"));
        }
    }
    Ok(())
}

fn lit(l: &Lit) -> (Core, Ty) {
    match l {
        Lit::Int(n) => (Core::Const(Const::Int(*n)), Ty::int()),
        Lit::Float(x) => (Core::Const(Const::Float(*x)), Ty::float()),
        Lit::Str(s) => (Core::Const(Const::Str(s.as_str().into())), Ty::string()),
        Lit::Bool(b) => (Core::Const(Const::Bool(*b)), Ty::bool()),
        Lit::Unit => (Core::Const(Const::Unit), Ty::unit()),
    }
}

fn spine(e: &Expr) -> (&Expr, Vec<&Expr>) {
    let mut args = Vec::new();
    let mut cur = e;
    while let ExprKind::App(f, a) = &cur.kind {
        args.push(&**a);
        cur = f;
    }
    args.reverse();
    (cur, args)
}

fn simple_var(p: &Pat) -> Option<&str> {
    match &p.kind {
        PatKind::Var(x) => Some(x),
        PatKind::Annot(q, _) => simple_var(q),
        _ => None,
    }
}

/// The value restriction: only these are generalised.
fn is_syntactic_value(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Lit(_) | ExprKind::Var(_) | ExprKind::Lam(..) | ExprKind::Con(_) => true,
        ExprKind::Tuple(es) | ExprKind::List(es) => es.iter().all(is_syntactic_value),
        ExprKind::Record(fs) => fs.iter().all(|f| is_syntactic_value(&f.value)),
        ExprKind::Annot(x, _) => is_syntactic_value(x),
        ExprKind::App(..) => {
            let (h, args) = spine(e);
            matches!(h.kind, ExprKind::Con(_)) && args.iter().all(|a| is_syntactic_value(a))
        }
        _ => false,
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut cur = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + usize::from(a[i - 1] != b[j - 1]));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// A deferred answer constraint that failed: a `shift` reached from `at` returns `callee`,
/// but the `reset` around it produces `context`.
fn answer_mismatch(p: &mut Printer, s: &Subst, at: Span, callee: &Ty, context: &Ty) -> Diagnostic {
    let (want, have) = (p.show(s, callee), p.show(s, context));
    Diagnostic::error(
        Phase::Type,
        format!("answer type mismatch: a `shift` reached from here returns `{want}`, but the `reset` around it produces `{have}`"),
    )
    .label(at, format!("a `shift` reached from here returns `{want}`; the `reset` around it produces `{have}`"))
    .note("the body of a `shift` must return the type that its enclosing `reset` produces")
}
