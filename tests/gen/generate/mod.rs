//! Type-directed generation: pick a type, build an expression of that type from the
//! variables, functions and declarations in scope. Every program is well typed by
//! construction and, by the invariants below, runs to completion without a run-time error.
//!
//! Invariants that keep programs inside the behaviour dp and OCaml share:
//! - **Bounded numbers.** Every Int that is stored (bound to a name, put in a structure,
//!   returned from a function, assigned to a cell) is below `INT_STORE` in magnitude, every
//!   Float below `FLOAT_STORE`; arithmetic tracks a bound for its intermediate values and
//!   wraps them (`% 997` for Ints, division by a power of ten for Floats) before they could
//!   overflow OCaml's 63-bit ints or reach infinity. Division and `%` take only nonzero
//!   literal divisors.
//! - **Ordered effects.** OCaml evaluates arguments, operands and tuple components right to
//!   left and dp left to right, so effects (printing, assignment, calling a function whose body
//!   has effects) appear only where both languages agree on the order: a `let`'s right-hand
//!   side, a sequence, a branch, a top-level item. `Cx::fx` says whether that is the case here.
//! - **Bounded recursion.** A recursive function takes a counter first, and every call passes
//!   a small literal there.
//!
//! Int and Float arithmetic (the bounds) is in `numbers`; the forms outside the subset dp shares
//! with OCaml (AD, tensors, shift/reset) are in `dp_only`.

mod dp_only;
mod numbers;

use super::ast::*;
use super::rng::Rng;
use numbers::{FLOAT_STORE, INT_STORE};

#[derive(Clone, Copy)]
struct Cx {
    depth: u32,
    /// Effects are allowed here (the evaluation order is the same in dp and OCaml).
    fx: bool,
}

impl Cx {
    /// A child in an argument or operand position: smaller, no effects.
    fn arg(self) -> Cx {
        Cx { depth: self.depth.saturating_sub(1), fx: false }
    }
    /// A child evaluated in order (a `let` body, a branch): smaller, effects as here.
    fn ordered(self) -> Cx {
        Cx { depth: self.depth.saturating_sub(1), fx: self.fx }
    }
}

struct Binding {
    name: String,
    /// How many `Ty::Var`s the type quantifies (0: monomorphic).
    vars: u32,
    ty: Ty,
    /// Calling it has effects: it may only be called, fully applied, where `Cx::fx` holds.
    effectful: bool,
    /// A recursive function whose first argument is its counter: only called with a small literal.
    counter: bool,
    /// Shadowed by a later binding of the same name (which records it in `shadows`).
    hidden: bool,
    shadows: Option<usize>,
}

impl Binding {
    /// A visible, monomorphic top-level name.
    fn top_level(name: String, ty: Ty, effectful: bool) -> Binding {
        Binding { name, vars: 0, ty, effectful, counter: false, hidden: false, shadows: None }
    }

    /// Visible, monomorphic, and usable anywhere by name (not a counter-bounded recursion,
    /// not a function with effects).
    fn plain(&self) -> bool {
        !(self.hidden || self.vars != 0 || self.counter || (self.effectful && is_fun(&self.ty)))
    }
}

pub struct Generator {
    rng: Rng,
    core_only: bool,
    variants: Vec<VariantDecl>,
    records: Vec<RecordDecl>,
    env: Vec<Binding>,
    fresh: usize,
    /// The type parameters of the polymorphic functions whose bodies are being generated.
    opaque: Vec<u32>,
    next_opaque: u32,
    /// Set when an effect is generated; read around a lambda body to know whether calling the
    /// lambda has effects.
    effect_seen: bool,
}

/// Prelude functions the generator calls, with their types (`Var`s quantified). The OCaml
/// printer's prelude defines each with dp's semantics.
fn prelude() -> Vec<(&'static str, u32, Ty)> {
    use Ty::*;
    let (a, b) = (Var(0), Var(1));
    vec![
        ("map", 2, fun(fun(a.clone(), b.clone()), fun(list(a.clone()), list(b.clone())))),
        ("filter", 1, fun(fun(a.clone(), Bool), fun(list(a.clone()), list(a.clone())))),
        (
            "fold_left",
            2,
            fun(fun(b.clone(), fun(a.clone(), b.clone())), fun(b.clone(), fun(list(a.clone()), b.clone()))),
        ),
        ("length", 1, fun(list(a.clone()), Int)),
        ("reverse", 1, fun(list(a.clone()), list(a.clone()))),
        ("take", 1, fun(Int, fun(list(a.clone()), list(a.clone())))),
        ("drop", 1, fun(Int, fun(list(a.clone()), list(a.clone())))),
        ("head", 1, fun(list(a.clone()), option(a.clone()))),
        ("zip", 2, fun(list(a.clone()), fun(list(b.clone()), list(Tuple(vec![a.clone(), b.clone()]))))),
        ("fst", 2, fun(Tuple(vec![a.clone(), b.clone()]), a.clone())),
        ("snd", 2, fun(Tuple(vec![a.clone(), b.clone()]), b.clone())),
        ("option_default", 1, fun(a.clone(), fun(option(a.clone()), a.clone()))),
        ("is_some", 1, fun(option(a.clone()), Bool)),
        ("exists", 1, fun(fun(a.clone(), Bool), fun(list(a.clone()), Bool))),
        ("for_all", 1, fun(fun(a.clone(), Bool), fun(list(a.clone()), Bool))),
        ("flatten", 1, fun(list(list(a.clone())), list(a.clone()))),
        ("id", 1, fun(a.clone(), a.clone())),
        ("string_of_int", 0, fun(Int, Str)),
        ("string_length", 0, fun(Str, Int)),
        ("join", 0, fun(Str, fun(list(Str), Str))),
        ("sort_ints", 0, fun(list(Int), list(Int))),
        ("string_of_float", 0, fun(Float, Str)),
        ("concat_strings", 0, fun(list(Str), Str)),
        ("chars", 0, fun(Str, list(Str))),
    ]
}

/// Polymorphic function types the generator writes bodies for (`Var`s quantified). Each type
/// variable of a result is reachable from a parameter, so a body can always be built.
fn poly_templates() -> Vec<(u32, Ty)> {
    use Ty::*;
    let (a, b) = (Var(0), Var(1));
    vec![
        (1, fun(a.clone(), a.clone())),
        (1, fun(a.clone(), Tuple(vec![a.clone(), a.clone()]))),
        (1, fun(a.clone(), list(a.clone()))),
        (2, fun(a.clone(), fun(b.clone(), Tuple(vec![b.clone(), a.clone()])))),
        (2, fun(fun(a.clone(), b.clone()), fun(a.clone(), b.clone()))),
        (1, fun(fun(a.clone(), a.clone()), fun(a.clone(), a.clone()))),
        (1, fun(list(a.clone()), list(a.clone()))),
        (2, fun(a.clone(), fun(b.clone(), a.clone()))),
        (2, fun(fun(a.clone(), b.clone()), fun(list(a.clone()), list(b.clone())))),
        (1, fun(option(a.clone()), fun(a.clone(), a.clone()))),
        (2, fun(Tuple(vec![a.clone(), b.clone()]), Tuple(vec![b.clone(), a.clone()]))),
        (1, fun(list(a.clone()), option(a.clone()))),
        (1, fun(a.clone(), option(a.clone()))),
        (1, fun(fun(a.clone(), Bool), fun(list(a.clone()), Int))),
    ]
}

const STRINGS: &[&str] = &["", "a", "bc", "dp", "hello", "x y", "Zed", "q\"t", "back\\slash", "tab\tbed", "two\nlines"];
const SHAPES: &[&[usize]] = &[&[2], &[3], &[2, 2], &[2, 3], &[3, 2]];

/// The parameters and final result of a curried function type.
fn uncurry(t: &Ty) -> (Vec<Ty>, Ty) {
    let mut params = Vec::new();
    let mut t = t;
    while let Ty::Fun(a, b) = t {
        params.push((**a).clone());
        t = b;
    }
    (params, t.clone())
}

fn curry(params: &[Ty], res: Ty) -> Ty {
    params.iter().rev().fold(res, |acc, p| fun(p.clone(), acc))
}

/// One-way matching of a scheme's type against a concrete type, binding the scheme's `Var`s.
fn match_ty(p: &Ty, t: &Ty, s: &mut [Option<Ty>]) -> bool {
    match (p, t) {
        (Ty::Var(i), _) => match &s[*i as usize] {
            Some(bound) => bound == t,
            None => {
                s[*i as usize] = Some(t.clone());
                true
            }
        },
        (Ty::List(a), Ty::List(b)) | (Ty::Option(a), Ty::Option(b)) | (Ty::Ref(a), Ty::Ref(b)) => match_ty(a, b, s),
        (Ty::Fun(a1, b1), Ty::Fun(a2, b2)) => match_ty(a1, a2, s) && match_ty(b1, b2, s),
        (Ty::Tuple(xs), Ty::Tuple(ys)) => xs.len() == ys.len() && xs.iter().zip(ys).all(|(x, y)| match_ty(x, y, s)),
        (Ty::Variant(i, xs), Ty::Variant(j, ys)) => i == j && xs.iter().zip(ys).all(|(x, y)| match_ty(x, y, s)),
        _ => p == t,
    }
}

fn subst(t: &Ty, s: &[Ty]) -> Ty {
    t.map(&|t| match t {
        Ty::Var(i) => Some(s[*i as usize].clone()),
        _ => None,
    })
}

pub fn printable(t: &Ty, core_only: bool) -> bool {
    !t.any(&|t| matches!(t, Ty::Fun(..) | Ty::Opaque(_) | Ty::Var(_)) || (core_only && matches!(t, Ty::Tensor(_))))
}

/// `==` is defined (and means the same in both languages) on these.
fn comparable(t: &Ty) -> bool {
    !t.any(&|t| matches!(t, Ty::Fun(..) | Ty::Opaque(_) | Ty::Var(_) | Ty::Ref(_) | Ty::Tensor(_)))
}

fn has_opaque(t: &Ty) -> bool {
    t.any(&|t| matches!(t, Ty::Opaque(_) | Ty::Var(_)))
}

fn is_fun(t: &Ty) -> bool {
    matches!(t, Ty::Fun(..))
}

impl Generator {
    /// `core_only`: only the language OCaml shares (no AD, tensors, shift/reset).
    pub fn new(seed: u64, core_only: bool) -> Generator {
        let mut g = Generator {
            rng: Rng::new(seed),
            core_only,
            variants: Vec::new(),
            records: Vec::new(),
            env: Vec::new(),
            fresh: 0,
            opaque: Vec::new(),
            next_opaque: 0,
            effect_seen: false,
        };
        let mut builtins = prelude();
        if !core_only {
            builtins.push(("stop_gradient", 1, fun(Ty::Var(0), Ty::Var(0))));
        }
        for (name, vars, ty) in builtins {
            g.env.push(Binding {
                name: name.into(),
                vars,
                ty,
                effectful: false,
                counter: false,
                hidden: false,
                shadows: None,
            });
        }
        g
    }

    fn name(&mut self, prefix: &str) -> String {
        self.fresh += 1;
        format!("{prefix}{}", self.fresh)
    }

    /// Adds a binding, hiding an earlier one of the same name.
    fn push(&mut self, mut b: Binding) {
        if let Some(i) = self.env.iter().rposition(|o| !o.hidden && o.name == b.name) {
            self.env[i].hidden = true;
            b.shadows = Some(i);
        }
        self.env.push(b);
    }

    /// Leaves the scopes opened since `mark`, showing what their bindings hid.
    fn truncate(&mut self, mark: usize) {
        while self.env.len() > mark {
            if let Some(i) = self.env.pop().and_then(|b| b.shadows) {
                self.env[i].hidden = false;
            }
        }
    }

    /// A name for a `let` or a parameter: usually fresh, sometimes one in scope (shadowing it,
    /// as both languages allow). Only the generator's own local names are reused, never a
    /// prelude or builtin name or a top-level one, and never one of an opaque type (the only
    /// way to make a value of that type may be that variable).
    fn local_name(&mut self, prefix: &str) -> String {
        if self.rng.chance(0.12) {
            let locals: Vec<String> = self
                .env
                .iter()
                .filter(|b| !b.hidden && b.vars == 0 && !b.counter && !has_opaque(&b.ty))
                .filter(|b| b.name.starts_with('v') || b.name.starts_with('x'))
                .map(|b| b.name.clone())
                .collect();
            if !locals.is_empty() {
                return self.rng.pick(&locals).clone();
            }
        }
        self.name(prefix)
    }

    fn bind(&mut self, name: &str, ty: Ty) {
        self.push(Binding {
            name: name.into(),
            vars: 0,
            ty,
            effectful: false,
            counter: false,
            hidden: false,
            shadows: None,
        });
    }

    // ------------------------------------------------------------------ programs

    pub fn program(mut self) -> Program {
        self.declare_types();
        let mut items = Vec::new();
        let n = self.rng.range(6, 12);
        for _ in 0..n {
            self.item(&mut items);
        }
        // Print every printable top-level value at the end: state left in cells, values that
        // were only bound.
        let globals: Vec<(String, Ty)> = self
            .env
            .iter()
            .filter(|b| b.name.starts_with('g') && b.vars == 0 && printable(&b.ty, self.core_only))
            .map(|b| (b.name.clone(), b.ty.clone()))
            .collect();
        for (name, ty) in globals {
            items.push(Item::Let(Pat::Tuple(vec![]), Expr::Print(bx(Expr::Var(name)), ty, true)));
        }
        Program { variants: self.variants, records: self.records, items }
    }

    fn declare_types(&mut self) {
        for i in 0..self.rng.below(4) {
            let has_param = self.rng.chance(0.4);
            let this = Ty::Variant(i, if has_param { vec![Ty::Param] } else { vec![] });
            let mut ctors = Vec::new();
            for c in 0..self.rng.range(2, 4) {
                let mut args = Vec::new();
                for _ in 0..self.rng.below(if c == 0 { 2 } else { 4 }) {
                    let choice = self.rng.below(10);
                    args.push(if has_param && choice < 3 {
                        Ty::Param
                    } else if c > 0 && choice < 5 {
                        this.clone()
                    } else if i > 0 && choice == 5 {
                        let j = self.rng.below(i);
                        let arg = if self.variants[j].has_param { vec![Ty::Int] } else { vec![] };
                        Ty::Variant(j, arg)
                    } else {
                        self.base_type()
                    });
                }
                ctors.push((format!("K{}{i}", (b'a' + c as u8) as char), args));
            }
            self.variants.push(VariantDecl { name: format!("T{i}"), has_param, ctors });
        }
        for i in 0..self.rng.below(4) {
            let mut fields = Vec::new();
            for f in 0..self.rng.range(1, 4) {
                let ty = match self.rng.below(8) {
                    0 => list(Ty::Int),
                    1 if !self.variants.is_empty() => self.variant_type(0),
                    2 if i > 0 => Ty::Record(self.rng.below(i)),
                    _ => self.base_type(),
                };
                fields.push((format!("r{i}{}", (b'a' + f as u8) as char), ty));
            }
            self.records.push(RecordDecl { fields });
        }
    }

    fn item(&mut self, items: &mut Vec<Item>) {
        let cx = Cx { depth: 4, fx: true };
        match self.rng.weighted(&[3.0, 2.0, 1.0, 1.0, 3.0, 1.5, 1.0]) {
            0 => {
                let ty = self.random_type(2);
                let name = self.name("g");
                let (e, effectful) = self.let_rhs(&ty, cx);
                self.push(Binding::top_level(name.clone(), ty, effectful));
                items.push(Item::Let(Pat::Var(name), e));
            }
            1 => {
                let ty = self.fun_type();
                let name = self.name("gf");
                let (e, effectful) = self.tracking(|g| g.lambda(&ty, cx));
                self.push(Binding::top_level(name.clone(), ty, effectful));
                items.push(Item::Let(Pat::Var(name), e));
            }
            2 => {
                let (name, vars, e) = self.poly_fun(cx.depth);
                items.push(Item::Let(Pat::Var(name.clone()), e));
                let bi = self.env.len() - 1;
                // Used at two types, so let-polymorphism is exercised for sure.
                for _ in 0..2 {
                    let (use_, ty) = self.instantiated_call(bi, vars, cx);
                    let g = self.name("g");
                    items.push(Item::Let(Pat::Var(g.clone()), use_));
                    self.bind(&g, ty);
                }
            }
            3 => {
                let (group, ty) = self.rec_group(cx.depth);
                let name = self.rng.pick(&group).name.clone();
                items.push(Item::LetRec(group));
                let call = self.call_counter(&name, &ty, cx);
                let g = self.name("g");
                let (_, res) = uncurry(&ty);
                items.push(Item::Let(Pat::Var(g.clone()), call));
                self.bind(&g, res);
            }
            4 => {
                let ty = self.printable_type();
                let e = self.expr(&ty, cx);
                items.push(Item::Let(Pat::Tuple(vec![]), Expr::Print(bx(e), ty, true)));
            }
            5 => {
                let e = self.expr(&Ty::Unit, cx);
                items.push(Item::Let(Pat::Tuple(vec![]), e));
            }
            _ => {
                let ty = self.random_type(1);
                let name = self.name("g");
                let e = self.expr(&ty, cx.arg());
                self.bind(&name, reference(ty));
                items.push(Item::Let(Pat::Var(name), Expr::Ref(bx(e))));
            }
        }
    }

    // ------------------------------------------------------------------ types

    fn base_type(&mut self) -> Ty {
        match self.rng.weighted(&[4.0, 2.0, 1.5, 1.5]) {
            0 => Ty::Int,
            1 => Ty::Float,
            2 => Ty::Bool,
            _ => Ty::Str,
        }
    }

    fn variant_type(&mut self, depth: u32) -> Ty {
        let i = self.rng.below(self.variants.len());
        let args = if self.variants[i].has_param { vec![self.random_type(depth.saturating_sub(1))] } else { vec![] };
        Ty::Variant(i, args)
    }

    fn random_type(&mut self, depth: u32) -> Ty {
        let opaque = self.inhabited_opaques();
        if depth == 0 {
            if !opaque.is_empty() && self.rng.chance(0.25) {
                return Ty::Opaque(*self.rng.pick(&opaque));
            }
            return self.base_type();
        }
        let has_records = if self.records.is_empty() { 0.0 } else { 1.2 };
        let has_variants = if self.variants.is_empty() { 0.0 } else { 1.5 };
        let has_opaque = if opaque.is_empty() { 0.0 } else { 1.5 };
        let tensors = if self.core_only { 0.0 } else { 0.8 };
        let d = depth - 1;
        match self.rng.weighted(&[6.0, 2.0, 1.2, 0.8, has_records, has_variants, 0.4, 0.6, has_opaque, tensors, 0.2]) {
            0 => self.base_type(),
            1 => list(self.random_type(d)),
            2 => {
                let n = self.rng.range(2, 3);
                Ty::Tuple((0..n).map(|_| self.random_type(d)).collect())
            }
            3 => option(self.random_type(d)),
            4 => Ty::Record(self.rng.below(self.records.len())),
            5 => self.variant_type(depth),
            6 => reference(self.random_type(d)),
            7 => self.fun_type(),
            8 => Ty::Opaque(*self.rng.pick(&opaque)),
            9 => Ty::Tensor(self.rng.pick(SHAPES).to_vec()),
            _ => Ty::Unit,
        }
    }

    fn fun_type(&mut self) -> Ty {
        let a = if self.rng.chance(0.15) { Ty::Unit } else { self.random_type(1) };
        let r = self.random_type(1);
        if self.rng.chance(0.3) {
            let b = self.random_type(0);
            fun(a, fun(b, r))
        } else {
            fun(a, r)
        }
    }

    fn printable_type(&mut self) -> Ty {
        loop {
            let t = self.random_type(2);
            if printable(&t, self.core_only) {
                return t;
            }
        }
    }

    /// A type to instantiate an unconstrained scheme variable with.
    fn small_type(&mut self) -> Ty {
        let opaque = self.inhabited_opaques();
        if !opaque.is_empty() && self.rng.chance(0.3) {
            return Ty::Opaque(*self.rng.pick(&opaque));
        }
        match self.rng.below(6) {
            0 => list(Ty::Int),
            1 => Ty::Tuple(vec![Ty::Int, Ty::Str]),
            _ => self.base_type(),
        }
    }

    /// The opaque types in scope that a value can be made of: a variable has the type, or a
    /// function returns it from arguments that can be made. (In `(a -> b) -> List a -> List b`
    /// neither `a` nor `b` can be, short of matching on the list.)
    fn inhabited_opaques(&self) -> Vec<u32> {
        self.opaque.iter().copied().filter(|o| self.inhabited(&Ty::Opaque(*o), 3)).collect()
    }

    fn inhabited(&self, t: &Ty, fuel: u32) -> bool {
        match t {
            Ty::Opaque(_) => {
                fuel > 0
                    && self.env.iter().any(|b| {
                        let (params, res) = uncurry(&b.ty);
                        b.plain() && (b.ty == *t || (res == *t && params.iter().all(|p| self.inhabited(p, fuel - 1))))
                    })
            }
            Ty::Tuple(ts) => ts.iter().all(|t| self.inhabited(t, fuel)),
            Ty::Fun(_, r) | Ty::Ref(r) => self.inhabited(r, fuel),
            Ty::Variant(i, args) => {
                self.variants[*i].ctors[0].1.iter().all(|a| self.inhabited(&a.subst_param(args.first()), fuel))
            }
            _ => true,
        }
    }

    // ------------------------------------------------------------------ expressions

    fn expr(&mut self, ty: &Ty, cx: Cx) -> Expr {
        match ty {
            Ty::Int => {
                let (e, b) = self.int_expr(cx);
                Self::wrap_int(e, b, INT_STORE)
            }
            Ty::Float => {
                let (e, b) = self.float_expr(cx);
                self.wrap_float(e, b, FLOAT_STORE)
            }
            _ => self.general(ty, cx),
        }
    }

    /// Forms that work at any type, and the type-specific constructions.
    fn general(&mut self, ty: &Ty, cx: Cx) -> Expr {
        if cx.depth == 0 {
            return self.leaf(ty);
        }
        let fx = if cx.fx { 0.7 } else { 0.0 };
        let dp = if self.core_only { 0.0 } else { 0.4 };
        let annot = if has_opaque(ty) { 0.0 } else { 0.2 };
        let gradient = if self.core_only { 0.0 } else { 0.8 };

        for _ in 0..8 {
            let weights =
                [1.0, 3.0, 3.0, 1.0, 1.5, 0.3, 0.4, 1.2, 0.6, 0.5, 4.0, fx, dp, 0.3, annot, gradient, gradient];
            let e = match self.rng.weighted(&weights) {
                0 => Some(self.leaf(ty)),
                1 => self.call(ty, cx, true),
                2 => self.call(ty, cx, false),
                3 => Some(self.if_(ty, cx)),
                4 => Some(self.let_(ty, cx)),
                5 => Some(self.let_poly(ty, cx)),
                6 => Some(self.let_rec(ty, cx)),
                7 => self.match_(ty, cx),
                8 => self.field(ty, cx),
                9 => self.deref(ty, cx),
                10 => self.construct(ty, cx),
                11 => {
                    let stmt = self.statement(cx.ordered());
                    let rest = self.expr(ty, cx.ordered());
                    Some(Expr::Seq(bx(stmt), bx(rest)))
                }
                12 => Some(self.shift_reset(ty, cx)),
                15 => self.structured_gradient(ty, cx),
                16 => self.tree_op(ty, cx),

                13 => {
                    let a = self.random_type(1);
                    let f = self.lambda(&fun(a.clone(), ty.clone()), cx.arg());
                    let arg = self.expr(&a, cx.arg());
                    Some(Expr::App(bx(f), vec![arg]))
                }
                _ => Some(Expr::Annot(bx(self.expr(ty, cx.arg())), ty.clone())),
            };
            if let Some(e) = e {
                return e;
            }
        }
        self.leaf(ty)
    }

    /// An expression of the type with no further generation depth: literals and variables.
    fn leaf(&mut self, ty: &Ty) -> Expr {
        if self.rng.chance(0.5) || matches!(ty, Ty::Opaque(_)) {
            let vars: Vec<String> =
                self.env.iter().filter(|b| b.plain() && &b.ty == ty).map(|b| b.name.clone()).collect();
            if !vars.is_empty() {
                return Expr::Var(self.rng.pick(&vars).clone());
            }
        }
        match ty {
            Ty::Int => self.int_lit().0,
            Ty::Float => self.float_lit().0,
            Ty::Bool => Expr::Bool(self.rng.chance(0.5)),
            Ty::Str => Expr::Str(self.rng.pick(STRINGS).to_string()),
            Ty::Unit => Expr::Unit,
            Ty::List(t) => {
                if self.rng.chance(0.5) || !self.inhabited(t, 3) {
                    Expr::List(vec![])
                } else {
                    Expr::List(vec![self.leaf(t)])
                }
            }
            Ty::Tuple(ts) => Expr::Tuple(ts.iter().map(|t| self.leaf(t)).collect()),
            Ty::Option(t) => {
                if self.rng.chance(0.4) || !self.inhabited(t, 3) {
                    Expr::None
                } else {
                    Expr::Some(bx(self.leaf(t)))
                }
            }
            Ty::Ref(t) => Expr::Ref(bx(self.leaf(t))),
            Ty::Record(i) => {
                let fields = self.records[*i].fields.clone();
                let mut fs: Vec<(String, Expr)> = fields.iter().map(|(n, t)| (n.clone(), self.leaf(t))).collect();
                // Fields are written in any order (dp prints them sorted, OCaml's printer too).
                self.rng.shuffle(&mut fs);
                Expr::Record(fs)
            }
            Ty::Variant(i, args) => {
                // The first constructor never refers to its own type.
                let (_, arg_tys) = self.variants[*i].ctors[0].clone();
                let args = arg_tys.iter().map(|t| self.leaf(&t.subst_param(args.first()))).collect();
                Expr::Ctor(*i, 0, args)
            }
            Ty::Fun(a, b) => {
                let x = self.name("x");
                self.bind(&x, (**a).clone());
                let body = self.leaf(b);
                self.truncate(self.env.len() - 1);
                Expr::Fun(vec![self.param(x, a)], bx(body))
            }
            Ty::Tensor(shape) => self.tensor_lit(shape),
            Ty::Opaque(_) => self.opaque_value(ty, 3),
            Ty::Var(_) | Ty::Param => panic!("generator bug: leaf of {ty:?}"),
        }
    }

    /// A value of an opaque type with no variable of it in scope: a call of a function that
    /// returns one (a parameter `f : a -> b`), whose arguments are made within `fuel` such
    /// steps (as `inhabited` promised), so the search cannot cycle (`f : a -> b`, `g : b -> a`).
    fn opaque_value(&mut self, ty: &Ty, fuel: u32) -> Expr {
        let vars: Vec<String> = self.env.iter().filter(|b| b.plain() && b.ty == *ty).map(|b| b.name.clone()).collect();
        if !vars.is_empty() {
            return Expr::Var(self.rng.pick(&vars).clone());
        }
        let fns: Vec<usize> = (0..self.env.len())
            .filter(|&i| {
                let (params, res) = uncurry(&self.env[i].ty);
                self.env[i].plain() && res == *ty && fuel > 0 && params.iter().all(|p| self.inhabited(p, fuel - 1))
            })
            .collect();
        let Some(&i) = fns.first() else { panic!("generator bug: no way to make a value of {ty:?}") };
        let (params, _) = uncurry(&self.env[i].ty);
        let name = self.env[i].name.clone();
        let args = params
            .iter()
            .map(|p| if matches!(p, Ty::Opaque(_)) { self.opaque_value(p, fuel - 1) } else { self.leaf(p) })
            .collect();
        Expr::App(bx(Expr::Var(name)), args)
    }

    fn param(&mut self, name: String, ty: &Ty) -> Param {
        let ann = if !has_opaque(ty) && self.rng.chance(0.5) { Some(ty.clone()) } else { None };
        Param { pat: Pat::Var(name), ann }
    }

    /// A variable of the type (`values`) or a call of a function in scope whose result, after
    /// some arguments, has the type.
    fn call(&mut self, ty: &Ty, cx: Cx, values: bool) -> Option<Expr> {
        let mut cands: Vec<(usize, usize, Vec<Option<Ty>>)> = Vec::new();
        for (bi, b) in self.env.iter().enumerate().filter(|(_, b)| !b.hidden) {
            let (params, res) = uncurry(&b.ty);
            let arities: Vec<usize> = if values { vec![0] } else { (1..=params.len()).collect() };
            for k in arities {
                if (k == 0 && b.counter) || (b.effectful && (k != params.len() || !cx.fx)) {
                    continue;
                }
                let mut s = vec![None; b.vars as usize];
                if match_ty(&curry(&params[k..], res.clone()), ty, &mut s) {
                    // Variables left free are instantiated with inhabited types later.
                    let full: Vec<Ty> = s.iter().map(|t| t.clone().unwrap_or(Ty::Int)).collect();
                    if params[..k].iter().all(|p| self.inhabited(&subst(p, &full), 3)) {
                        cands.push((bi, k, s));
                    }
                }
            }
        }
        if cands.is_empty() {
            return None;
        }
        // Prefer the program's own functions to the prelude's.
        let prelude_len = prelude().len();
        let weights: Vec<f64> = cands.iter().map(|(bi, _, _)| if *bi < prelude_len { 1.0 } else { 3.0 }).collect();
        let (bi, k, s) = cands.swap_remove(self.rng.weighted(&weights));
        let s: Vec<Ty> = s.into_iter().map(|t| t.unwrap_or_else(|| self.small_type())).collect();
        let (params, _) = uncurry(&self.env[bi].ty);
        let (name, counter, effectful) = (self.env[bi].name.clone(), self.env[bi].counter, self.env[bi].effectful);
        if k == 0 {
            return Some(Expr::Var(name));
        }
        let args = (0..k)
            .map(|i| {
                if counter && i == 0 {
                    Expr::Int(self.rng.range(0, 5))
                } else {
                    self.expr(&subst(&params[i], &s), cx.arg())
                }
            })
            .collect();
        if effectful {
            self.effect_seen = true;
        }
        Some(Expr::App(bx(Expr::Var(name)), args))
    }

    /// A full call of binding `bi` with its type variables instantiated at random.
    fn instantiated_call(&mut self, bi: usize, vars: u32, cx: Cx) -> (Expr, Ty) {
        let s: Vec<Ty> = (0..vars).map(|_| self.small_type()).collect();
        let (params, res) = uncurry(&self.env[bi].ty);
        let name = self.env[bi].name.clone();
        let args = params.iter().map(|p| self.expr(&subst(p, &s), cx.arg())).collect();
        (Expr::App(bx(Expr::Var(name)), args), subst(&res, &s))
    }

    fn call_counter(&mut self, name: &str, ty: &Ty, cx: Cx) -> Expr {
        let (params, _) = uncurry(ty);
        let mut args = vec![Expr::Int(self.rng.range(0, 6))];
        for p in &params[1..] {
            args.push(self.expr(p, cx.arg()));
        }
        Expr::App(bx(Expr::Var(name.into())), args)
    }

    fn if_(&mut self, ty: &Ty, cx: Cx) -> Expr {
        let c = self.expr(&Ty::Bool, cx.ordered());
        let a = self.expr(ty, cx.ordered());
        let b = self.expr(ty, cx.ordered());
        Expr::If(bx(c), bx(a), bx(b))
    }

    /// Runs `f`, telling whether it generated an effect (restoring the flag for the caller: a
    /// lambda's body does not run where the lambda is written).
    fn tracking<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> (R, bool) {
        let saved = std::mem::replace(&mut self.effect_seen, false);
        let r = f(self);
        let seen = std::mem::replace(&mut self.effect_seen, saved);
        (r, seen)
    }

    /// The right-hand side of a `let`: a function written here may have effects (it is
    /// bound to a name, and calls through the name are checked).
    fn let_rhs(&mut self, ty: &Ty, cx: Cx) -> (Expr, bool) {
        if is_fun(ty) && self.rng.chance(0.7) {
            self.tracking(|g| g.lambda(ty, cx))
        } else {
            (self.expr(ty, cx), false)
        }
    }

    fn let_(&mut self, ty: &Ty, cx: Cx) -> Expr {
        let t = self.random_type(2);
        let (rhs, effectful) = self.let_rhs(&t, cx.ordered());
        let mark = self.env.len();
        let pat = match &t {
            Ty::Tuple(ts) if self.rng.chance(0.5) => {
                let names: Vec<String> = ts.iter().map(|_| self.name("v")).collect();
                for (n, t) in names.iter().zip(ts) {
                    self.bind(n, t.clone());
                }
                Pat::Tuple(names.into_iter().map(Pat::Var).collect())
            }
            _ => {
                let n = self.local_name("v");
                self.push(Binding {
                    name: n.clone(),
                    vars: 0,
                    ty: t,
                    effectful,
                    counter: false,
                    hidden: false,
                    shadows: None,
                });
                Pat::Var(n)
            }
        };
        let body = self.expr(ty, cx.ordered());
        self.truncate(mark);
        Expr::Let(pat, bx(rhs), bx(body))
    }

    /// A polymorphic function: its body is generated with its type variables opaque. Returns
    /// its name (bound in `env` with its scheme), the number of type variables and the lambda.
    fn poly_fun(&mut self, depth: u32) -> (String, u32, Expr) {
        let (vars, scheme) = self.rng.pick(&poly_templates()).clone();
        let ids: Vec<u32> = (0..vars).map(|i| self.next_opaque + i).collect();
        self.next_opaque += vars;
        let mark = self.opaque.len();
        self.opaque.extend(&ids);
        let concrete = subst(&scheme, &ids.iter().map(|i| Ty::Opaque(*i)).collect::<Vec<_>>());
        let lambda = self.lambda(&concrete, Cx { depth: depth.min(4), fx: false });
        self.opaque.truncate(mark);
        let name = self.name("poly");
        self.push(Binding {
            name: name.clone(),
            vars,
            ty: scheme,
            effectful: false,
            counter: false,
            hidden: false,
            shadows: None,
        });
        (name, vars, lambda)
    }

    fn let_poly(&mut self, ty: &Ty, cx: Cx) -> Expr {
        let mark = self.env.len();
        let (name, vars, lambda) = self.poly_fun(cx.depth);
        let bi = self.env.len() - 1;
        let (use1, t1) = self.instantiated_call(bi, vars, cx);
        let (use2, t2) = self.instantiated_call(bi, vars, cx);
        let (u1, u2) = (self.name("v"), self.name("v"));
        self.bind(&u1, t1);
        self.bind(&u2, t2);
        let body = self.expr(ty, cx.ordered());
        self.truncate(mark);
        Expr::Let(
            Pat::Var(name),
            bx(lambda),
            bx(Expr::Let(Pat::Var(u1), bx(use1), bx(Expr::Let(Pat::Var(u2), bx(use2), bx(body))))),
        )
    }

    /// `let rec f n acc = if n <= 0 then acc else …f (n - 1) …`: a recursion bounded by its
    /// counter, tail-recursive or not; sometimes two functions calling each other
    /// (`let rec f … and g …`). Returns the group and the functions' common type, bound in `env`.
    fn rec_group(&mut self, depth: u32) -> (Vec<RecFn>, Ty) {
        let t = loop {
            let t = self.random_type(1);
            if !is_fun(&t) {
                break t;
            }
        };
        let names: Vec<String> = (0..if self.rng.chance(0.3) { 2 } else { 1 }).map(|_| self.name("f")).collect();
        let mut group = Vec::new();
        for (i, f) in names.iter().enumerate() {
            let callee = names[(i + 1) % names.len()].clone();
            let (n, acc) = (self.name("n"), self.name("acc"));
            let mark = self.env.len();
            self.bind(&n, Ty::Int);
            self.bind(&acc, t.clone());
            let cx = Cx { depth: depth.saturating_sub(1).min(3), fx: false };
            let pred = Expr::Bin(BinOp::Le, bx(Expr::Var(n.clone())), bx(Expr::Int(0)), Ty::Int);
            let down = Expr::Bin(BinOp::Sub, bx(Expr::Var(n.clone())), bx(Expr::Int(1)), Ty::Int);
            let step = if self.rng.chance(0.5) {
                let next = self.expr(&t, cx);
                Expr::App(bx(Expr::Var(callee)), vec![down, next])
            } else {
                let arg = self.expr(&t, cx);
                let r = self.name("rec");
                self.bind(&r, t.clone());
                let combine = self.expr(&t, cx);
                self.truncate(self.env.len() - 1);
                Expr::Let(Pat::Var(r), bx(Expr::App(bx(Expr::Var(callee)), vec![down, arg])), bx(combine))
            };
            let base = if self.rng.chance(0.7) {
                Expr::Var(acc.clone())
            } else {
                self.expr(&t, Cx { depth: cx.depth.min(2), fx: false })
            };
            self.truncate(mark);
            let body = Expr::If(bx(pred), bx(base), bx(step));
            let params = vec![Param { pat: Pat::Var(n), ann: Some(Ty::Int) }, self.param(acc, &t)];
            group.push(RecFn { name: f.clone(), params, body });
        }
        let ty = fun(Ty::Int, fun(t.clone(), t));
        for f in names {
            self.push(Binding {
                name: f,
                vars: 0,
                ty: ty.clone(),
                effectful: false,
                counter: true,
                hidden: false,
                shadows: None,
            });
        }
        (group, ty)
    }

    fn let_rec(&mut self, ty: &Ty, cx: Cx) -> Expr {
        let mark = self.env.len();
        let (group, fty) = self.rec_group(cx.depth);
        let f = self.rng.pick(&group).name.clone();
        let call = self.call_counter(&f, &fty, cx);
        let r = self.name("v");
        self.bind(&r, uncurry(&fty).1);
        let rest = self.expr(ty, cx.ordered());
        self.truncate(mark);
        Expr::LetRec(group, bx(Expr::Let(Pat::Var(r), bx(call), bx(rest))))
    }

    fn destructurable(t: &Ty) -> bool {
        matches!(
            t,
            Ty::List(_) | Ty::Option(_) | Ty::Tuple(_) | Ty::Variant(..) | Ty::Record(_) | Ty::Int | Ty::Bool | Ty::Str
        )
    }

    fn match_(&mut self, ty: &Ty, cx: Cx) -> Option<Expr> {
        let vars: Vec<(String, Ty)> = self
            .env
            .iter()
            .filter(|b| {
                !b.hidden && b.vars == 0 && Self::destructurable(&b.ty) && !matches!(b.ty, Ty::Int | Ty::Bool | Ty::Str)
            })
            .map(|b| (b.name.clone(), b.ty.clone()))
            .collect();
        let (scrut, st) = if !vars.is_empty() && self.rng.chance(0.6) {
            let (n, t) = self.rng.pick(&vars).clone();
            (Expr::Var(n), t)
        } else {
            let t = loop {
                let t = self.random_type(2);
                if Self::destructurable(&t) {
                    break t;
                }
            };
            (self.expr(&t, cx.ordered()), t)
        };
        let mut arms = Vec::new();
        let mark = self.env.len();
        let mut arm = |g: &mut Self, pat: Pat, binds: Vec<(String, Ty)>| {
            for (n, t) in binds {
                g.bind(&n, t);
            }
            let body = g.expr(ty, cx.ordered());
            g.truncate(mark);
            arms.push((pat, body));
        };
        let nested = self.rng.chance(0.35);
        match &st {
            // A few random nested patterns, then a catch-all (first match wins in both languages).
            _ if nested => {
                for _ in 0..self.rng.range(1, 3) {
                    let mut binds = Vec::new();
                    let pat = self.random_pattern(&st, 3, &mut binds);
                    arm(self, pat, binds);
                }
                arm(self, Pat::Wild, vec![]);
            }
            Ty::List(t) => {
                let (h, tl) = (self.name("h"), self.name("t"));
                if self.rng.chance(0.3) {
                    let x = self.name("h");
                    arm(self, Pat::Cons(bx(Pat::Var(x.clone())), bx(Pat::Nil)), vec![(x, (**t).clone())]);
                }
                arm(self, Pat::Nil, vec![]);
                arm(
                    self,
                    Pat::Cons(bx(Pat::Var(h.clone())), bx(Pat::Var(tl.clone()))),
                    vec![(h, (**t).clone()), (tl, st.clone())],
                );
            }
            Ty::Option(t) => {
                let x = self.name("x");
                arm(self, Pat::None, vec![]);
                arm(self, Pat::Some(bx(Pat::Var(x.clone()))), vec![(x, (**t).clone())]);
            }
            Ty::Tuple(ts) => {
                let names: Vec<String> = ts.iter().map(|_| self.name("p")).collect();
                let pat = Pat::Tuple(names.iter().map(|n| Pat::Var(n.clone())).collect());
                arm(self, pat, names.into_iter().zip(ts.iter().cloned()).collect());
            }
            Ty::Variant(i, targs) => {
                let ctors = self.variants[*i].ctors.clone();
                let wild_from = if self.rng.chance(0.3) { self.rng.below(ctors.len()) } else { ctors.len() };
                for (ci, (_, args)) in ctors.iter().enumerate().take(wild_from) {
                    let mut pats = Vec::new();
                    let mut binds = Vec::new();
                    for a in args {
                        if self.rng.chance(0.2) {
                            pats.push(Pat::Wild);
                        } else {
                            let n = self.name("c");
                            pats.push(Pat::Var(n.clone()));
                            binds.push((n, a.subst_param(targs.first())));
                        }
                    }
                    arm(self, Pat::Ctor(*i, ci, pats), binds);
                }
                if wild_from < ctors.len() {
                    arm(self, Pat::Wild, vec![]);
                }
            }
            Ty::Record(i) => {
                let fields = self.records[*i].fields.clone();
                let mut pats = Vec::new();
                let mut binds = Vec::new();
                for (f, t) in fields {
                    if self.rng.chance(0.6) || pats.is_empty() {
                        let n = self.name("f");
                        pats.push((f, Pat::Var(n.clone())));
                        binds.push((n, t));
                    }
                }
                self.rng.shuffle(&mut pats);
                arm(self, Pat::Record(pats), binds);
            }
            Ty::Int => {
                for _ in 0..self.rng.range(1, 3) {
                    let n = self.rng.range(0, 4);
                    arm(self, Pat::Int(n), vec![]);
                }
                arm(self, Pat::Wild, vec![]);
            }
            Ty::Str => {
                let s = self.rng.pick(STRINGS).to_string();
                arm(self, Pat::Str(s), vec![]);
                let x = self.name("s");
                arm(self, Pat::Var(x.clone()), vec![(x, Ty::Str)]);
            }
            Ty::Bool => {
                arm(self, Pat::Bool(true), vec![]);
                arm(self, Pat::Bool(false), vec![]);
            }
            _ => return None,
        }
        Some(Expr::Match(bx(scrut), arms))
    }

    /// A pattern of the type, nested up to `depth`, adding the variables it binds to `binds`.
    fn random_pattern(&mut self, t: &Ty, depth: u32, binds: &mut Vec<(String, Ty)>) -> Pat {
        let r = self.rng.below(10);
        if depth == 0 || r < 2 {
            return Pat::Wild;
        }
        if r < 4 {
            let n = self.name("q");
            binds.push((n.clone(), t.clone()));
            return Pat::Var(n);
        }
        let d = depth - 1;
        match t {
            Ty::Int => Pat::Int(self.rng.range(0, 3)),
            Ty::Bool => Pat::Bool(self.rng.chance(0.5)),
            Ty::Str => Pat::Str(self.rng.pick(STRINGS).to_string()),
            Ty::Tuple(ts) => Pat::Tuple(ts.iter().map(|t| self.random_pattern(t, d, binds)).collect()),
            Ty::List(e) => match self.rng.below(3) {
                0 => Pat::Nil,
                1 => {
                    let h = self.random_pattern(e, d, binds);
                    Pat::Cons(bx(h), bx(self.random_pattern(t, d, binds)))
                }
                _ => Pat::List((0..self.rng.range(1, 2)).map(|_| self.random_pattern(e, d, binds)).collect()),
            },
            Ty::Option(e) => {
                if self.rng.chance(0.3) {
                    Pat::None
                } else {
                    Pat::Some(bx(self.random_pattern(e, d, binds)))
                }
            }
            Ty::Variant(i, targs) => {
                let c = self.rng.below(self.variants[*i].ctors.len());
                let args = self.variants[*i].ctors[c].1.clone();
                Pat::Ctor(
                    *i,
                    c,
                    args.iter().map(|a| self.random_pattern(&a.subst_param(targs.first()), d, binds)).collect(),
                )
            }
            Ty::Record(i) => {
                let fields = self.records[*i].fields.clone();
                let (f, ft) = self.rng.pick(&fields).clone();
                Pat::Record(vec![(f, self.random_pattern(&ft, d, binds))])
            }
            _ => Pat::Wild,
        }
    }

    fn field(&mut self, ty: &Ty, cx: Cx) -> Option<Expr> {
        let cands: Vec<(usize, String)> = (0..self.records.len())
            .flat_map(|i| self.records[i].fields.iter().filter(|(_, t)| t == ty).map(move |(n, _)| (i, n.clone())))
            .collect();
        if cands.is_empty() {
            return None;
        }
        let (i, f) = self.rng.pick(&cands).clone();
        let r = self.expr(&Ty::Record(i), cx.arg());
        Some(Expr::Field(bx(r), f))
    }

    fn deref(&mut self, ty: &Ty, cx: Cx) -> Option<Expr> {
        let cell = self.call(&reference(ty.clone()), cx, true).or_else(|| {
            let e = self.expr(ty, cx.arg());
            Some(Expr::Ref(bx(e)))
        })?;
        Some(Expr::Deref(bx(cell)))
    }

    /// A Unit expression with an effect where effects are allowed.
    fn statement(&mut self, cx: Cx) -> Expr {
        if !cx.fx {
            return Expr::Unit;
        }
        self.effect_seen = true;
        let nested = if cx.depth > 0 { 0.5 } else { 0.0 };
        match self.rng.weighted(&[3.0, 2.0, 1.0, nested]) {
            0 => {
                let t = self.printable_type();
                let e = self.expr(&t, cx.arg());
                Expr::Print(bx(e), t, self.rng.chance(0.8))
            }
            1 => {
                let cells: Vec<(String, Ty)> = self
                    .env
                    .iter()
                    .filter_map(|b| match &b.ty {
                        Ty::Ref(t) if !b.hidden && b.vars == 0 => Some((b.name.clone(), (**t).clone())),
                        _ => None,
                    })
                    .collect();
                if cells.is_empty() {
                    return self.statement(cx);
                }
                let (r, t) = self.rng.pick(&cells).clone();
                let v = self.expr(&t, cx.arg());
                Expr::Assign(bx(Expr::Var(r)), bx(v))
            }
            2 => {
                // `iter` calls its function in list order in both languages.
                let t = self.printable_type();
                let x = self.name("x");
                let xs = self.expr(&list(t.clone()), cx.arg());
                let f = Expr::Fun(
                    vec![Param { pat: Pat::Var(x.clone()), ann: None }],
                    bx(Expr::Print(bx(Expr::Var(x)), t, true)),
                );
                Expr::App(bx(Expr::Var("iter".into())), vec![f, xs])
            }
            _ => {
                let a = self.statement(cx.ordered());
                let b = self.statement(cx.ordered());
                Expr::Seq(bx(a), bx(b))
            }
        }
    }

    /// `fun p1 p2 -> body` for a function type (one or two parameters).
    fn lambda(&mut self, ty: &Ty, cx: Cx) -> Expr {
        let Ty::Fun(a, rest) = ty else { panic!("generator bug: lambda of {ty:?}") };
        let mut params = vec![((**a).clone())];
        let mut res = (**rest).clone();
        if let Ty::Fun(b, r) = &res {
            if self.rng.chance(0.7) {
                params.push((**b).clone());
                res = (**r).clone();
            }
        }
        let mark = self.env.len();
        let mut ps = Vec::new();
        for p in &params {
            match p {
                // A tuple of opaque values is taken apart here: its components are otherwise
                // out of reach (`inhabited` looks only at variables and calls).
                Ty::Tuple(ts) if has_opaque(p) || self.rng.chance(0.4) => {
                    let names: Vec<String> = ts.iter().map(|_| self.name("x")).collect();
                    for (n, t) in names.iter().zip(ts) {
                        self.bind(n, t.clone());
                    }
                    ps.push(Param { pat: Pat::Tuple(names.into_iter().map(Pat::Var).collect()), ann: None });
                }
                Ty::Unit if self.rng.chance(0.5) => ps.push(Param { pat: Pat::Tuple(vec![]), ann: None }),
                _ if params.len() == 1 => {
                    let n = self.local_name("x");
                    self.bind(&n, p.clone());
                    ps.push(self.param(n, p));
                }
                _ => {
                    let n = self.name("x");
                    self.bind(&n, p.clone());
                    ps.push(self.param(n, p));
                }
            }
        }
        let body = self.expr(&res, Cx { depth: cx.depth.saturating_sub(1), fx: cx.fx });
        self.truncate(mark);
        Expr::Fun(ps, bx(body))
    }

    /// The constructions specific to each type.
    fn construct(&mut self, ty: &Ty, cx: Cx) -> Option<Expr> {
        let sub = cx.arg();
        match ty {
            // No element can be made (an opaque type only a list of it holds).
            Ty::List(t) if !self.inhabited(t, 3) => return Some(Expr::List(vec![])),
            Ty::Option(t) if !self.inhabited(t, 3) => return Some(Expr::None),
            _ => {}
        }
        Some(match ty {
            Ty::Int => self.int_lit().0,
            Ty::Float => self.float_lit().0,
            Ty::Bool => match self.rng.below(6) {
                0 | 1 => {
                    let t = self.rng.pick(&[Ty::Int, Ty::Int, Ty::Float, Ty::Str]).clone();
                    let op = *self.rng.pick(&[BinOp::Lt, BinOp::Le, BinOp::Gt, BinOp::Ge]);
                    let (a, b) = (self.expr(&t, sub), self.expr(&t, sub));
                    Expr::Bin(op, bx(a), bx(b), t)
                }
                2 => {
                    let t = loop {
                        let t = self.random_type(2);
                        if comparable(&t) {
                            break t;
                        }
                    };
                    let op = *self.rng.pick(&[BinOp::Eq, BinOp::Ne]);
                    let (a, b) = (self.expr(&t, sub), self.expr(&t, sub));
                    Expr::Bin(op, bx(a), bx(b), t)
                }
                3 => {
                    let op = *self.rng.pick(&[BinOp::And, BinOp::Or]);
                    let (a, b) = (self.expr(&Ty::Bool, sub), self.expr(&Ty::Bool, sub));
                    Expr::Bin(op, bx(a), bx(b), Ty::Bool)
                }
                4 => Expr::Not(bx(self.expr(&Ty::Bool, sub))),
                _ => Expr::Bool(self.rng.chance(0.5)),
            },
            Ty::Str => match self.rng.below(5) {
                0 | 1 => {
                    let (a, b) = (self.expr(&Ty::Str, sub), self.expr(&Ty::Str, sub));
                    Expr::Bin(BinOp::Append, bx(a), bx(b), Ty::Str)
                }
                2 => {
                    let t = self.printable_type();
                    Expr::Show(bx(self.expr(&t, sub)), t)
                }
                _ => Expr::Str(self.rng.pick(STRINGS).to_string()),
            },
            Ty::Unit if cx.fx => self.statement(cx),
            Ty::Unit => Expr::Unit,
            Ty::List(t) => match self.rng.below(6) {
                0 | 1 => Expr::List((0..self.rng.below(4)).map(|_| self.expr(t, sub)).collect()),
                2 => {
                    let (h, tl) = (self.expr(t, sub), self.expr(ty, sub));
                    Expr::Bin(BinOp::Cons, bx(h), bx(tl), ty.clone())
                }
                3 => {
                    let (a, b) = (self.expr(ty, sub), self.expr(ty, sub));
                    Expr::Bin(BinOp::Append, bx(a), bx(b), ty.clone())
                }
                4 if **t == Ty::Int => {
                    let lo = self.rng.range(-2, 3);
                    let hi = lo + self.rng.range(0, 6);
                    Expr::App(bx(Expr::Var("range".into())), vec![Expr::Int(lo), Expr::Int(hi)])
                }
                _ => {
                    let n = Expr::Int(self.rng.range(0, 3));
                    let x = self.expr(t, sub);
                    Expr::App(bx(Expr::Var("replicate".into())), vec![n, x])
                }
            },
            Ty::Tuple(ts) => Expr::Tuple(ts.iter().map(|t| self.expr(t, sub)).collect()),
            Ty::Option(t) => {
                if self.rng.chance(0.25) {
                    Expr::None
                } else {
                    Expr::Some(bx(self.expr(t, sub)))
                }
            }
            Ty::Record(i) => {
                let fields = self.records[*i].fields.clone();
                if self.rng.chance(0.3) {
                    let r = self.expr(ty, sub);
                    let mut updated = fields.clone();
                    self.rng.shuffle(&mut updated);
                    updated.truncate(self.rng.range(1, 2) as usize);
                    let fs = updated.into_iter().map(|(f, t)| (f, self.expr(&t, sub))).collect();
                    Expr::With(bx(r), fs)
                } else {
                    let mut fs: Vec<(String, Expr)> =
                        fields.iter().map(|(n, t)| (n.clone(), self.expr(t, sub))).collect();
                    self.rng.shuffle(&mut fs);
                    Expr::Record(fs)
                }
            }
            Ty::Variant(i, targs) => {
                let n = self.variants[*i].ctors.len();
                let ci = if cx.depth <= 1 { 0 } else { self.rng.below(n) };
                let arg_tys = self.variants[*i].ctors[ci].1.clone();
                let args = arg_tys.iter().map(|t| self.expr(&t.subst_param(targs.first()), sub)).collect();
                Expr::Ctor(*i, ci, args)
            }
            Ty::Ref(t) => Expr::Ref(bx(self.expr(t, sub))),
            Ty::Fun(..) => self.lambda(ty, sub),
            Ty::Tensor(shape) => self.tensor(shape, cx),
            Ty::Opaque(_) => return None,
            Ty::Var(_) | Ty::Param => panic!("generator bug: construct {ty:?}"),
        })
    }
}
