//! Type terms, the substitution (union-find over variables with levels) and unification,
//! including row unification for structural records and the built-in classes.

use crate::source::Span;
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
    /// `tensor`'s argument: a Float, or lists of them nested to any depth.
    pub const TENSOR_DATA: u8 = 32;
    /// Every class, in the order constraints are shown.
    pub const ALL: [u8; 6] = [NUM, ORD, DIFF, REAL, APPEND, TENSOR_DATA];

    /// The name a constraint is shown with (`Num a => …`).
    pub fn name(c: u8) -> &'static str {
        match c {
            NUM => "Num",
            ORD => "Ord",
            DIFF => "Diff",
            REAL => "Real",
            APPEND => "Append",
            TENSOR_DATA => "TensorData",
            _ => "?",
        }
    }

    pub fn describe(c: u8) -> &'static str {
        match c {
            NUM => "a numeric type (Int, Float or Tensor)",
            ORD => "an ordered type (Int, Float or String)",
            DIFF => "a differentiable type (Float, Tensor, or tuples, records and lists of them)",
            REAL => "Float or Tensor",
            APPEND => "a String or a List",
            TENSOR_DATA => "a Float, Int or Bool, or nested lists of them",
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
    /// `a -> b` with an answer effect, the third component: either `Ty::shifts(t)` — the
    /// body may `shift` to an enclosing `reset` that produces a `t`, so the function can only
    /// be called where the `reset` around the call produces a `t` (Danvy and Filinski's
    /// typing, without answer-type modification) — or a variable, which stands for "shifts to
    /// no outer `reset`" unless a constraint makes it `shifts t`. Calls relate effects by
    /// `Rule::Answer` (subeffecting), not by equality, so a pure function can be called both
    /// inside and outside a `reset`. `Printer` hides variable effects.
    Fun(Rc<Ty>, Rc<Ty>, Rc<Ty>),
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
    /// The type of a name whose definition had a type error: it unifies with every type
    /// without binding anything, so the rest of the file is checked without a cascade.
    pub fn error() -> Ty {
        Ty::con(ERROR_TYPE)
    }
    pub fn is_error(&self) -> bool {
        self.is_con(ERROR_TYPE)
    }
    pub fn list(t: Ty) -> Ty {
        Ty::Con("List".into(), Rc::from([t]))
    }
    pub fn fun(a: Ty, b: Ty, answer: Ty) -> Ty {
        Ty::Fun(Rc::new(a), Rc::new(b), Rc::new(answer))
    }
    /// The effect of a function that `shift`s to a `reset` producing `t`.
    pub fn shifts(t: Ty) -> Ty {
        Ty::Con(SHIFTS.into(), Rc::from([t]))
    }
    /// The answer type of a `shifts` effect.
    pub fn shift_answer(&self) -> Option<&Ty> {
        match self {
            Ty::Con(n, args) if &**n == SHIFTS && args.len() == 1 => Some(&args[0]),
            _ => None,
        }
    }
    pub fn is_con(&self, name: &str) -> bool {
        matches!(self, Ty::Con(n, args) if &**n == name && args.is_empty())
    }
}

/// The name of `Ty::error()`, which no declared type can have.
const ERROR_TYPE: &str = "?";
/// The name of `Ty::shifts`'s effects, which no declared type can have either.
const SHIFTS: &str = "#shifts";

#[derive(Clone, Debug)]
struct VarInfo {
    link: Option<Ty>,
    level: u32,
    class: u8,
    /// Constraints to look at again when this variable is bound or constrained.
    waiting: Vec<u32>,
    /// Where the variable was bound to a type that is not a variable (for messages).
    fixed_at: Option<Span>,
}

/// Why unification failed; the checker turns it into a located diagnostic.
#[derive(Debug)]
pub enum UnifyError {
    Mismatch(Ty, Ty),
    Occurs(u32, Ty),
    MissingField(Rc<str>),
    Class(u8, Ty),
    /// A broadcast constraint (by index) has no solution: its operand types, as they stand.
    Broadcast(u32, Ty, Ty),
    /// An answer constraint (by index) fails: a `shift` reached from a call returns the
    /// first type, and the `reset` around the call produces the second.
    Answer(u32, Ty, Ty),
    /// A batch constraint (by index) meets a result leaf that cannot be stacked: its type.
    Batch(u32, Ty),
    /// A slice constraint (by index): a Tensor leaf of `vmap`'s argument where the function
    /// takes this type.
    Slice(u32, Ty),
}

/// A constraint that waits on its variables and is solved (or refined) as soon as what is
/// known of them decides it, so the result never depends on the order in which the checker
/// meets the program's parts. Undecided ones move into type schemes with their variables.
#[derive(Clone, Debug)]
pub struct Constraint {
    pub rule: Rule,
    /// The operator or call it comes from (for messages).
    pub origin: Span,
    pub solved: bool,
}

/// Whether a `Broadcast` rule is `max_of`'s or `min_of`'s, which also order Strings.
pub fn ordering_op(op: &str) -> bool {
    matches!(op, "max_of" | "min_of")
}

#[derive(Clone, Debug)]
pub enum Rule {
    /// `Broadcast a b c`: arithmetic (`op`: `+ - * / **`) on an `a` and a `b` gives a `c`.
    /// Its ground instances are `(Int, Int, Int)`, `(Float, Float, Float)`, `(Tensor, Tensor,
    /// Tensor)`, `(Float, Tensor, Tensor)` and `(Tensor, Float, Tensor)`.
    Broadcast { a: Ty, b: Ty, c: Ty, op: &'static str },
    /// `lower ⊑ upper` between answer effects: a call of a function with effect `lower`
    /// where the context's effect is `upper` (or a function of effect `lower` passed where
    /// one of effect `upper` is expected). Once `lower` is `shifts t`, `upper` must be
    /// `shifts t` too; while `lower` is a variable nothing is required, and a variable left
    /// at the end means "shifts to no outer `reset`", which satisfies every such constraint.
    Answer { lower: Ty, upper: Ty },
    /// `Batch elem out`: `out` is `elem` with every Float and Tensor leaf made a Tensor (the
    /// examples' results stacked by `vmap`), through tuples, records and lists. Solved from
    /// `elem` as it becomes known; any other leaf (an Int, a function, …) is an error.
    Batch { elem: Ty, out: Ty },
    /// `Slice whole example`: one example of `vmap`'s argument `whole`. A Tensor leaf of
    /// `whole` is mapped over its axis 0, so the example has a Tensor there, or a Float where
    /// the tensor has rank 1 (`vmap (grad f) xs` with `f : Float -> Float`); every other leaf
    /// goes to each example as it is, so the example has the same type there. Solved from
    /// whichever side's constructor is known first; a Tensor leaf whose example type stays
    /// unknown when its `let` closes is a Tensor (`default_slices`).
    Slice { whole: Ty, example: Ty },
}

impl Rule {
    /// The types the rule relates.
    pub fn types(&self) -> Vec<&Ty> {
        match self {
            Rule::Broadcast { a, b, c, .. } => vec![a, b, c],
            Rule::Answer { lower, upper } => vec![lower, upper],
            Rule::Batch { elem, out } => vec![elem, out],
            Rule::Slice { whole, example } => vec![whole, example],
        }
    }
    /// The same rule over other types (`f` maps each of `types()`).
    pub fn map(&self, mut f: impl FnMut(&Ty) -> Ty) -> Rule {
        match self {
            Rule::Broadcast { a, b, c, op } => Rule::Broadcast { a: f(a), b: f(b), c: f(c), op },
            Rule::Answer { lower, upper } => Rule::Answer { lower: f(lower), upper: f(upper) },
            Rule::Batch { elem, out } => Rule::Batch { elem: f(elem), out: f(out) },
            Rule::Slice { whole, example } => Rule::Slice { whole: f(whole), example: f(example) },
        }
    }
}

// Clone: the session snapshots the checker before each entry (transactional REPL entries).
#[derive(Clone, Default)]
pub struct Subst {
    vars: Vec<VarInfo>,
    constraints: Vec<Constraint>,
    /// Constraints woken by bindings, not yet looked at.
    woken: Vec<u32>,
    /// The `Slice` constraints not known to be solved (`default_slices` decides some).
    slices: Vec<u32>,
    /// The source position of the unification under way, recorded in the variables it binds.
    pub origin: Option<Span>,
}

impl Subst {
    pub fn fresh(&mut self, level: u32) -> Ty {
        self.fresh_with(level, 0)
    }
    pub fn fresh_with(&mut self, level: u32, class: u8) -> Ty {
        self.vars.push(VarInfo { link: None, level, class, waiting: Vec::new(), fixed_at: None });
        Ty::Var((self.vars.len() - 1) as u32)
    }
    pub fn level_of(&self, v: u32) -> u32 {
        self.vars[v as usize].level
    }
    pub fn class_of(&self, v: u32) -> u8 {
        self.vars[v as usize].class
    }
    /// Lowers the level of every variable of `t` to at most `level`, so that none of them is
    /// generalised by an enclosing `let` (the value restriction: a non-value's type is shared
    /// by every later use of its name, including uses inside closures).
    pub fn lower_levels(&mut self, t: &Ty, level: u32) {
        match self.prune(t) {
            Ty::Var(v) => {
                let vi = &mut self.vars[v as usize];
                vi.level = vi.level.min(level);
            }
            Ty::Con(_, args) | Ty::Tuple(args) => args.iter().for_each(|a| self.lower_levels(a, level)),
            Ty::Fun(a, b, r) => {
                self.lower_levels(&a, level);
                self.lower_levels(&b, level);
                self.lower_levels(&r, level)
            }
            Ty::Record(r) => self.lower_levels(&r, level),
            Ty::RowEmpty => {}
            Ty::RowExt(_, a, r) => {
                self.lower_levels(&a, level);
                self.lower_levels(&r, level)
            }
        }
    }

    /// Where the type of `t` was fixed: the innermost variable in it (following links) that a
    /// located unification bound.
    pub fn fixed_at(&self, t: &Ty) -> Option<Span> {
        match t {
            Ty::Var(v) => {
                let vi = &self.vars[*v as usize];
                // The innermost fixing is the one that decided the type's leaves.
                vi.link.as_ref().and_then(|next| self.fixed_at(next)).or(vi.fixed_at)
            }
            Ty::Con(_, a) | Ty::Tuple(a) => a.iter().find_map(|x| self.fixed_at(x)),
            Ty::Fun(a, b, _) => self.fixed_at(a).or_else(|| self.fixed_at(b)),
            Ty::Record(r) => self.fixed_at(r),
            Ty::RowEmpty => None,
            Ty::RowExt(_, a, r) => self.fixed_at(a).or_else(|| self.fixed_at(r)),
        }
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
            Ty::Fun(a, b, r) => Ty::fun(self.resolve(&a), self.resolve(&b), self.resolve(&r)),
            Ty::Tuple(ts) => Ty::Tuple(ts.iter().map(|a| self.resolve(a)).collect()),
            Ty::Record(r) => Ty::Record(Rc::new(self.resolve(&r))),
            Ty::RowEmpty => Ty::RowEmpty,
            Ty::RowExt(l, t, r) => Ty::RowExt(l, Rc::new(self.resolve(&t)), Rc::new(self.resolve(&r))),
        }
    }

    fn wake(&mut self, v: u32) {
        let waiting = std::mem::take(&mut self.vars[v as usize].waiting);
        self.woken.extend(waiting);
    }

    fn bind(&mut self, v: u32, t: Ty) -> Result<(), UnifyError> {
        if let Ty::Var(w) = t {
            if w == v {
                return Ok(());
            }
            // The younger variable links to the older, which keeps chains of links short
            // (a result variable made for each `+` of a long sum links to its operand's).
            let (from, to) = (v.max(w), v.min(w));
            let (lv, cv) = (self.vars[from as usize].level, self.vars[from as usize].class);
            let ti = &mut self.vars[to as usize];
            ti.level = ti.level.min(lv);
            self.vars[from as usize].link = Some(Ty::Var(to));
            self.wake(from);
            return self.require_class_inner(cv, &Ty::Var(to));
        }
        let level = self.vars[v as usize].level;
        self.occurs_adjust(v, level, &t)?;
        let class = self.vars[v as usize].class;
        self.vars[v as usize].link = Some(t.clone());
        self.vars[v as usize].fixed_at = self.origin;
        self.wake(v);
        self.require_class_inner(class, &t)
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
            Ty::Fun(a, b, r) => {
                self.occurs_adjust(v, level, &a)?;
                self.occurs_adjust(v, level, &b)?;
                self.occurs_adjust(v, level, &r)
            }
            Ty::Record(r) => self.occurs_adjust(v, level, &r),
            Ty::RowEmpty => Ok(()),
            Ty::RowExt(_, t, r) => {
                self.occurs_adjust(v, level, &t)?;
                self.occurs_adjust(v, level, &r)
            }
        }
    }

    /// Checks (and propagates, for DIFF and TENSOR_DATA) a class constraint on a type. A
    /// variable whose classes leave one possible type is bound to it (`Real` and `Ord`:
    /// Float), and one whose classes leave none is an error.
    pub fn require_class(&mut self, class: u8, t: &Ty) -> Result<(), UnifyError> {
        let r = self.require_class_inner(class, t);
        r.and_then(|()| self.flush())
    }

    fn require_class_inner(&mut self, class: u8, t: &Ty) -> Result<(), UnifyError> {
        if class == 0 {
            return Ok(());
        }
        let t = self.prune(t);
        if let Ty::Var(v) = t {
            let old = self.vars[v as usize].class;
            let mut new = old | class;
            if new & class::NUM != 0 && new & (class::DIFF | class::TENSOR_DATA) != 0 {
                new |= class::REAL;
            }
            if new & class::REAL != 0 {
                new |= class::NUM;
            }
            if new == old {
                return Ok(());
            }
            self.vars[v as usize].class = new;
            self.wake(v);
            // Classes whose only common member is Float.
            let float_only = (new & (class::REAL | class::DIFF) != 0 && new & class::ORD != 0)
                || (new & class::REAL != 0 && new & class::TENSOR_DATA != 0);
            if new & class::NUM != 0 && new & class::APPEND != 0 {
                let c = if old & class::NUM != 0 { class::APPEND } else { class::NUM };
                return Err(UnifyError::Class(c, t.clone()));
            }
            if float_only {
                self.vars[v as usize].class = 0;
                return self.bind(v, Ty::float());
            }
            return Ok(());
        }
        if t.is_error() {
            return Ok(());
        }
        let fail = |c: u8| Err(UnifyError::Class(c, t.clone()));
        for c in class::ALL {
            if class & c == 0 {
                continue;
            }
            match &t {
                Ty::Var(_) => unreachable!("handled above"),
                Ty::Con(n, args) => {
                    let ok = match (&**n, c) {
                        ("Int", class::NUM | class::ORD | class::TENSOR_DATA) => true,
                        ("Bool", class::TENSOR_DATA) => true,
                        ("Float", _) => c != class::APPEND,
                        ("Tensor", class::NUM | class::DIFF | class::REAL) => true,
                        ("String", class::ORD | class::APPEND) => true,
                        ("List", class::APPEND) => true,
                        ("List", class::DIFF | class::TENSOR_DATA) => {
                            let a = args[0].clone();
                            self.require_class_inner(c, &a)?;
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
                        self.require_class_inner(c, a)?;
                    }
                }
                Ty::Record(r) if c == class::DIFF => {
                    let r = (**r).clone();
                    self.require_class_inner(c, &r)?;
                }
                Ty::RowExt(_, f, r) if c == class::DIFF => {
                    let (f, r) = ((**f).clone(), (**r).clone());
                    self.require_class_inner(c, &f)?;
                    self.require_class_inner(c, &r)?;
                }
                Ty::RowEmpty if c == class::DIFF => {}
                _ => return fail(c),
            }
        }
        Ok(())
    }

    // ------------------------------------------------------------ deferred constraints

    /// Adds a constraint and solves as much of it as is known now.
    pub fn add(&mut self, rule: Rule, origin: Span) -> Result<(), UnifyError> {
        self.push(rule, origin);
        self.flush()
    }

    /// Records a new constraint, to be looked at by the next `flush`.
    fn push(&mut self, rule: Rule, origin: Span) {
        let id = self.constraints.len() as u32;
        if matches!(rule, Rule::Slice { .. }) {
            self.slices.push(id);
        }
        self.constraints.push(Constraint { rule, origin, solved: false });
        self.woken.push(id);
    }

    /// Leaves constraint `id` waiting on every variable of `tys`: binding any of them wakes it,
    /// and a type scheme quantifying one of them takes the constraint along.
    fn wait_on(&mut self, id: u32, tys: [&Ty; 2]) {
        let mut vars = vec![];
        for t in tys {
            free_vars(self, t, &mut vars);
        }
        for v in vars {
            self.vars[v as usize].waiting.push(id);
        }
    }

    /// The shape of a tuple, list or record type `t` (or of a row of one) with a fresh variable
    /// for each part, the pairs (part, fresh variable) added to `parts`; `None` for a leaf.
    /// Fresh parts are joined to the other side at once, and binding lowers their level to
    /// its: generalisation sees them where that side is.
    fn split_parts(&mut self, t: &Ty, parts: &mut Vec<(Ty, Ty)>) -> Option<Ty> {
        let fresh = |s: &mut Self| s.fresh(u32::MAX / 2);
        Some(match t {
            Ty::Con(n, args) if &**n == "List" && args.len() == 1 => {
                let o = fresh(self);
                parts.push((args[0].clone(), o.clone()));
                Ty::list(o)
            }
            Ty::Tuple(ts) => {
                let os: Vec<Ty> = ts.iter().map(|_| fresh(self)).collect();
                parts.extend(ts.iter().cloned().zip(os.iter().cloned()));
                Ty::Tuple(os.into())
            }
            Ty::Record(row) => {
                let o = fresh(self);
                parts.push(((**row).clone(), o.clone()));
                Ty::Record(Rc::new(o))
            }
            Ty::RowEmpty => Ty::RowEmpty,
            Ty::RowExt(l, t, rest) => {
                let (o, orest) = (fresh(self), fresh(self));
                parts.push(((**t).clone(), o.clone()));
                parts.push(((**rest).clone(), orest.clone()));
                Ty::RowExt(l.clone(), Rc::new(o), Rc::new(orest))
            }
            _ => return None,
        })
    }

    pub fn constraint(&self, id: u32) -> &Constraint {
        &self.constraints[id as usize]
    }

    /// The unsolved constraints that mention variable `v`.
    pub fn pending_on(&self, v: u32) -> impl Iterator<Item = u32> + '_ {
        self.vars[v as usize].waiting.iter().copied().filter(|&i| !self.constraints[i as usize].solved)
    }

    /// Marks a constraint as taken over by a type scheme (its instances carry it from now on).
    pub fn consume(&mut self, id: u32) {
        self.constraints[id as usize].solved = true;
    }

    /// Looks at every woken constraint again until none is left.
    fn flush(&mut self) -> Result<(), UnifyError> {
        while let Some(id) = self.woken.pop() {
            // What a constraint decides, its operator decided.
            let outer = self.origin.replace(self.constraints[id as usize].origin);
            let r = match self.constraints[id as usize].rule.clone() {
                _ if self.constraints[id as usize].solved => Ok(()),
                Rule::Broadcast { a, b, c, .. } => self.solve_broadcast(id, &a, &b, &c),
                Rule::Answer { lower, upper } => self.solve_answer(id, &lower, &upper),
                Rule::Batch { elem, out } => self.solve_batch(id, &elem, &out),
                Rule::Slice { whole, example } => self.solve_slice(id, &whole, &example),
            };
            self.origin = outer;
            if let Err(e) = r {
                self.woken.clear();
                return Err(e);
            }
        }
        Ok(())
    }

    fn solve_answer(&mut self, id: u32, lower: &Ty, upper: &Ty) -> Result<(), UnifyError> {
        let (lower, upper) = (self.prune(lower), self.prune(upper));
        match &lower {
            Ty::Var(_) if upper == lower => {
                self.constraints[id as usize].solved = true;
                Ok(())
            }
            Ty::Var(_) => {
                // It waits on `lower`, and is found from every variable of `upper` too.
                self.wait_on(id, [&lower, &upper]);
                Ok(())
            }
            _ => {
                self.constraints[id as usize].solved = true;
                if lower.shift_answer().is_none() {
                    return Ok(()); // the error type
                }
                self.unify_inner(&upper, &lower).map_err(|e| match e {
                    UnifyError::Mismatch(..) | UnifyError::Occurs(..) => {
                        let answer = |t: &Ty| t.shift_answer().map_or_else(|| self.resolve(t), |a| self.resolve(a));
                        UnifyError::Answer(id, answer(&lower), answer(&upper))
                    }
                    e => e,
                })
            }
        }
    }

    /// `Batch elem out` (see `Rule::Batch`): decided one constructor of `elem` at a time, the
    /// parts of a tuple, record or list becoming constraints of their own.
    fn solve_batch(&mut self, id: u32, elem: &Ty, out: &Ty) -> Result<(), UnifyError> {
        let elem = self.prune(elem);
        let mut parts: Vec<(Ty, Ty)> = Vec::new();
        let shaped = match &elem {
            Ty::Var(_) => {
                // Waits on `elem`, and is found from `out`'s variables too (for schemes).
                self.wait_on(id, [&elem, out]);
                return Ok(());
            }
            t if t.is_con("Float") || t.is_con("Tensor") => Ty::tensor(),
            t if t.is_error() => Ty::error(),
            t => self.split_parts(t, &mut parts).ok_or_else(|| UnifyError::Batch(id, t.clone()))?,
        };
        self.constraints[id as usize].solved = true;
        let origin = self.constraints[id as usize].origin;
        for (elem, out) in parts {
            self.push(Rule::Batch { elem, out }, origin);
        }
        self.unify_inner(out, &shaped)
    }

    /// `Slice whole example` (see `Rule::Slice`): decided one constructor at a time, from
    /// `whole` (the argument, usually known) or else from `example` (the function's parameter),
    /// the parts of a tuple, record or list becoming constraints of their own.
    fn solve_slice(&mut self, id: u32, whole: &Ty, example: &Ty) -> Result<(), UnifyError> {
        let (whole, example) = (self.prune(whole), self.prune(example));
        if whole.is_error() || example.is_error() {
            self.constraints[id as usize].solved = true;
            return Ok(());
        }
        if whole.is_con("Tensor") {
            return match &example {
                Ty::Var(_) => {
                    self.wait_on(id, [&whole, &example]);
                    Ok(())
                }
                t if t.is_con("Tensor") || t.is_con("Float") => {
                    self.constraints[id as usize].solved = true;
                    Ok(())
                }
                other => Err(UnifyError::Slice(id, other.clone())),
            };
        }
        // The side whose constructor decides the other's; a Float parameter takes a Float or a
        // rank-1 Tensor's elements, so it decides nothing.
        let from_whole = !matches!(whole, Ty::Var(_));
        let (known, other) = match (&whole, &example) {
            (Ty::Var(_), e) if matches!(e, Ty::Var(_)) || e.is_con("Float") => {
                self.wait_on(id, [&whole, &example]);
                return Ok(());
            }
            (Ty::Var(_), _) => (&example, &whole),
            _ => (&whole, &example),
        };
        let mut parts: Vec<(Ty, Ty)> = Vec::new();
        // A leaf that is not mapped over is the same in every example.
        let shaped = self.split_parts(known, &mut parts).unwrap_or_else(|| known.clone());
        self.constraints[id as usize].solved = true;
        let origin = self.constraints[id as usize].origin;
        for (k, o) in parts {
            let (whole, example) = if from_whole { (k, o) } else { (o, k) };
            self.push(Rule::Slice { whole, example }, origin);
        }
        self.unify_inner(other, &shaped)
    }

    /// Whether some `Slice` constraint may still wait on its example type.
    pub fn has_slices(&self) -> bool {
        !self.slices.is_empty()
    }

    /// Decides the `Slice` constraints still waiting on an example type where the argument has
    /// a Tensor, when the example's variable belongs to the `let` being closed (its level is
    /// `from` or above) and does not show in the bound type (`shown`, its free variables): the
    /// mapped function's parameter was left open (`vmap (fun x -> x) xs`), and it is a Tensor,
    /// as the examples are at run time (a Float where a class asks for one that Tensors lack).
    /// A variable that shows stays open, with the constraint in the `let`'s type scheme.
    pub fn default_slices(&mut self, from: u32, shown: &[u32]) {
        let mut decide = Vec::new();
        let ids = std::mem::take(&mut self.slices);
        for &id in &ids {
            let k = &self.constraints[id as usize];
            let (false, Rule::Slice { whole, example }) = (k.solved, &k.rule) else { continue };
            if let (true, Ty::Var(v)) = (self.prune(whole).is_con("Tensor"), self.prune(example)) {
                if self.level_of(v) >= from && !shown.contains(&v) {
                    decide.push(v);
                }
            }
        }
        self.slices = ids.into_iter().filter(|&id| !self.constraints[id as usize].solved).collect();
        if decide.is_empty() {
            return;
        }
        // A default that contradicts another constraint leaves every variable open.
        let before = self.clone();
        for v in decide {
            if !matches!(self.prune(&Ty::Var(v)), Ty::Var(_)) {
                continue;
            }
            let class = self.class_of(v);
            let ty = if class & !(class::NUM | class::DIFF | class::REAL) == 0 {
                Ty::tensor()
            } else if class & class::APPEND == 0 {
                Ty::float()
            } else {
                continue;
            };
            if self.unify(&Ty::Var(v), &ty).is_err() {
                *self = before;
                return;
            }
        }
    }

    fn solve_broadcast(&mut self, id: u32, a: &Ty, b: &Ty, c: &Ty) -> Result<(), UnifyError> {
        let (a, b, c) = (self.prune(a), self.prune(b), self.prune(c));
        let fail = |s: &Self| Err(UnifyError::Broadcast(id, s.resolve(&a), s.resolve(&b)));
        let op = match &self.constraints[id as usize].rule {
            Rule::Broadcast { op, .. } => *op,
            Rule::Answer { .. } | Rule::Batch { .. } | Rule::Slice { .. } => "",
        };
        // `max_of`/`min_of` also take two values of another ordered type (Strings).
        let orders = ordering_op(op);
        let head = |t: &Ty| match t {
            Ty::Var(_) => Some(None),
            Ty::Con(n, args)
                if args.is_empty()
                    && (matches!(&**n, "Int" | "Float" | "Tensor" | ERROR_TYPE) || (orders && &**n == "String")) =>
            {
                Some(Some(n.clone()))
            }
            _ => None,
        };
        let (Some(ha), Some(hb), Some(hc)) = (head(&a), head(&b), head(&c)) else {
            // An operand or the result is not numeric at all.
            let bad = [&a, &b, &c].into_iter().find(|t| head(t).is_none()).cloned().unwrap_or(Ty::unit());
            if head(&a).is_none() || head(&b).is_none() {
                return fail(self);
            }
            return Err(UnifyError::Class(class::NUM, bad));
        };
        let is = |h: &Option<Rc<str>>, n: &str| h.as_deref() == Some(n);
        self.constraints[id as usize].solved = true;
        if a.is_error() || b.is_error() || c.is_error() {
            return Ok(());
        }
        let r = if orders && [&ha, &hb, &hc].iter().any(|h| is(h, "String")) {
            let string = Ty::string();
            self.unify_inner(&a, &string)
                .and_then(|_| self.unify_inner(&b, &string))
                .and_then(|_| self.unify_inner(&c, &string))
        } else if is(&ha, "Int") || is(&hb, "Int") || is(&hc, "Int") {
            let int = Ty::int();
            self.unify_inner(&a, &int).and_then(|_| self.unify_inner(&b, &int)).and_then(|_| self.unify_inner(&c, &int))
        } else if is(&ha, "Float") {
            self.unify_inner(&b, &c).and_then(|_| self.require_class_inner(class::REAL, &b))
        } else if is(&hb, "Float") {
            self.unify_inner(&a, &c).and_then(|_| self.require_class_inner(class::REAL, &a))
        } else if is(&ha, "Tensor") || is(&hb, "Tensor") {
            self.unify_inner(&c, &Ty::tensor())
                .and_then(|_| self.require_class_inner(class::REAL, &a))
                .and_then(|_| self.require_class_inner(class::REAL, &b))
        } else if is(&hc, "Float") {
            self.unify_inner(&a, &Ty::float()).and_then(|_| self.unify_inner(&b, &Ty::float()))
        } else if a == b && !orders {
            self.unify_inner(&a, &c).and_then(|_| self.require_class_inner(class::NUM, &a))
        } else if orders {
            // Undecided between the ordered types and Tensor: no class says that, so wait.
            self.constraints[id as usize].solved = false;
            for t in [&a, &b, &c] {
                if let Ty::Var(v) = t {
                    self.vars[*v as usize].waiting.push(id);
                }
            }
            return Ok(());
        } else {
            // Not decided yet: refine the classes and wait for the variables.
            self.constraints[id as usize].solved = false;
            let real = [&a, &b, &c].iter().any(|t| match t {
                Ty::Var(v) => self.vars[*v as usize].class & class::REAL != 0,
                _ => true, // a Tensor result
            });
            let cls = if real { class::REAL } else { class::NUM };
            for t in [&a, &b, &c] {
                self.require_class_inner(cls, t)?;
            }
            // Refining a class may itself have bound a variable: look again if so.
            let still = [&a, &b, &c].iter().all(|t| self.prune(t) == **t);
            if !still {
                self.woken.push(id);
                return Ok(());
            }
            for t in [&a, &b, &c] {
                if let Ty::Var(v) = t {
                    self.vars[*v as usize].waiting.push(id);
                }
            }
            return Ok(());
        };
        match r {
            Err(UnifyError::Mismatch(..)) => fail(self),
            other => other,
        }
    }

    pub fn unify(&mut self, a: &Ty, b: &Ty) -> Result<(), UnifyError> {
        let r = self.unify_inner(a, b);
        r.and_then(|()| self.flush()).inspect_err(|_| self.woken.clear())
    }

    fn unify_inner(&mut self, a: &Ty, b: &Ty) -> Result<(), UnifyError> {
        let (a, b) = (self.prune(a), self.prune(b));
        if a.is_error() || b.is_error() {
            return Ok(());
        }
        match (&a, &b) {
            (Ty::Var(v), _) => self.bind(*v, b.clone()),
            (_, Ty::Var(v)) => self.bind(*v, a.clone()),
            (Ty::Con(n1, a1), Ty::Con(n2, a2)) if n1 == n2 && a1.len() == a2.len() => {
                a1.iter().zip(a2.iter()).try_for_each(|(x, y)| self.unify_inner(x, y))
            }
            (Ty::Fun(a1, r1, k1), Ty::Fun(a2, r2, k2)) => {
                self.unify_inner(a1, a2)?;
                self.unify_inner(r1, r2)?;
                self.unify_inner(k1, k2)
            }
            (Ty::Tuple(t1), Ty::Tuple(t2)) if t1.len() == t2.len() => {
                t1.iter().zip(t2.iter()).try_for_each(|(x, y)| self.unify_inner(x, y))
            }
            (Ty::Record(r1), Ty::Record(r2)) => self.unify_inner(r1, r2).map_err(|e| match e {
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
                self.unify_inner(t, &t2)?;
                self.unify_inner(rest, &rest2)
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

/// The unbound variables of a type, in order of first appearance, appended to `out`.
pub fn free_vars(s: &Subst, t: &Ty, out: &mut Vec<u32>) {
    match s.prune(t) {
        Ty::Var(v) => {
            if !out.contains(&v) {
                out.push(v)
            }
        }
        Ty::Con(_, a) | Ty::Tuple(a) => a.iter().for_each(|x| free_vars(s, x, out)),
        Ty::Fun(a, b, r) => {
            free_vars(s, &a, out);
            free_vars(s, &b, out);
            free_vars(s, &r, out)
        }
        Ty::Record(r) => free_vars(s, &r, out),
        Ty::RowEmpty => {}
        Ty::RowExt(_, a, r) => {
            free_vars(s, &a, out);
            free_vars(s, &r, out)
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
    /// Constraints among the quantified variables (copied at each instantiation).
    pub constraints: Vec<Constraint>,
}

impl Scheme {
    pub fn mono(ty: Ty) -> Scheme {
        Scheme { vars: Vec::new(), ty, constraints: Vec::new() }
    }
}

/// Renders types with variables named a, b, c… in order of appearance (stable within one
/// `Printer`, so two types in one message share names).
#[derive(Default)]
pub struct Printer {
    names: HashMap<u32, String>,
    /// Answer constraints `lower ⊑ upper` whose lower side is a variable, by that variable:
    /// an effect variable bounded by `shifts t` is shown as `-[t]->` (the function may shift
    /// to a `reset` producing a `t`, and to no other).
    bounds: HashMap<u32, Vec<Ty>>,
}

impl Printer {
    pub fn show(&mut self, s: &Subst, t: &Ty) -> String {
        self.show_with(s, t, &[])
    }

    fn show_with(&mut self, s: &Subst, t: &Ty, own: &[Constraint]) -> String {
        let t = s.resolve(t);
        self.learn_bounds(s, &t, own);
        let mut out = String::new();
        self.go(s, &t, &mut out, 0);
        out
    }

    /// Records the answer constraints on the effect variables of `t` (and of their bounds).
    fn learn_bounds(&mut self, s: &Subst, t: &Ty, own: &[Constraint]) {
        let add = |bounds: &mut HashMap<u32, Vec<Ty>>, k: &Constraint| {
            if let Rule::Answer { lower, upper } = &k.rule {
                if let Ty::Var(l) = s.prune(lower) {
                    let ups = bounds.entry(l).or_default();
                    let u = s.resolve(upper);
                    if !ups.contains(&u) {
                        ups.push(u);
                    }
                }
            }
        };
        for k in own {
            add(&mut self.bounds, k);
        }
        let mut vars = Vec::new();
        free_vars(s, t, &mut vars);
        let mut i = 0;
        // Bounded: a message about a huge type needs no more than the first bounds.
        while i < vars.len() && i < 256 {
            for id in s.pending_on(vars[i]) {
                let k = s.constraint(id);
                add(&mut self.bounds, k);
                for t in k.rule.types() {
                    free_vars(s, t, &mut vars);
                }
            }
            i += 1;
        }
    }

    /// The answer type an effect variable is bounded by, following chains of variables.
    fn bound_of(&self, v: u32, seen: &mut Vec<u32>) -> Option<Ty> {
        if seen.contains(&v) {
            return None;
        }
        seen.push(v);
        for u in self.bounds.get(&v)? {
            match u {
                Ty::Var(w) => {
                    if let Some(t) = self.bound_of(*w, seen) {
                        return Some(t);
                    }
                }
                other => {
                    if let Some(a) = other.shift_answer() {
                        return Some(a.clone());
                    }
                }
            }
        }
        None
    }

    /// A type with the constraints on its variables in front: `Real a => a -> a`. The
    /// broadcast constraints shown are `own` (a scheme's) and those still pending on the
    /// type's variables.
    pub fn show_constrained(&mut self, s: &Subst, t: &Ty, own: &[Constraint]) -> String {
        let body = self.show_with(s, t, own);
        let mut vars = Vec::new();
        free_vars(s, &s.resolve(t), &mut vars);
        let mut shown: Vec<(Ty, Ty, Ty)> = Vec::new();
        // Answer constraints go unsaid, as effect variables do.
        let add = |k: &Constraint, shown: &mut Vec<(Ty, Ty, Ty)>| {
            let Rule::Broadcast { a, b, c, .. } = &k.rule else { return };
            let key = (s.resolve(a), s.resolve(b), s.resolve(c));
            if !shown.contains(&key) {
                shown.push(key);
            }
        };
        // `Slice d a` and `Batch b c` (vmap's argument and result) are shown as written.
        let mut batches: Vec<(&str, Ty, Ty)> = Vec::new();
        let add_batch = |k: &Constraint, batches: &mut Vec<(&str, Ty, Ty)>| {
            let key = match &k.rule {
                Rule::Slice { whole, example } => ("Slice", s.resolve(whole), s.resolve(example)),
                Rule::Batch { elem, out } => ("Batch", s.resolve(elem), s.resolve(out)),
                _ => return,
            };
            if !batches.contains(&key) {
                batches.push(key);
            }
        };
        for k in own {
            add(k, &mut shown);
            add_batch(k, &mut batches);
        }
        let mut i = 0;
        while i < vars.len() {
            let v = vars[i];
            for id in s.pending_on(v) {
                add(s.constraint(id), &mut shown);
                add_batch(s.constraint(id), &mut batches);
            }
            for (a, b, c) in shown.clone() {
                for t in [a, b, c] {
                    free_vars(s, &t, &mut vars);
                }
            }
            i += 1;
        }
        let in_broadcast = |v: u32| shown.iter().any(|(a, b, c)| [a, b, c].iter().any(|t| **t == Ty::Var(v)));
        let real = |t: &Ty| match t {
            Ty::Var(v) => s.class_of(*v) & class::REAL != 0,
            _ => true,
        };
        // `Broadcast a b c` with a real operand has a real result: `Real c` goes unsaid.
        let real_result = |v: u32| shown.iter().any(|(a, b, c)| *c == Ty::Var(v) && (real(a) || real(b)));
        let mut constraints = Vec::new();
        for &v in &vars {
            let c = s.class_of(v);
            for k in class::ALL {
                let implied = (k == class::NUM && (c & class::REAL != 0 || in_broadcast(v)))
                    || (k == class::REAL && real_result(v))
                    || (k == class::DIFF && c & class::REAL != 0 && c & class::NUM != 0);
                if c & k != 0 && !implied {
                    constraints.push(format!("{} {}", class::name(k), self.var_name(s, v)));
                }
            }
        }
        for (a, b, c) in &shown {
            constraints.push(format!("Broadcast {} {} {}", self.arg(s, a), self.arg(s, b), self.arg(s, c)));
        }
        for (rule, x, y) in &batches {
            constraints.push(format!("{rule} {} {}", self.arg(s, x), self.arg(s, y)));
        }
        match constraints.len() {
            0 => body,
            1 => format!("{} => {body}", constraints[0]),
            _ => format!("({}) => {body}", constraints.join(", ")),
        }
    }

    fn arg(&mut self, s: &Subst, t: &Ty) -> String {
        let mut out = String::new();
        self.go(s, t, &mut out, 2);
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
            Ty::Fun(a, b, r) => {
                if prec >= 1 {
                    out.push('(');
                }
                self.go(s, a, out, 1);
                let answer = match &**r {
                    Ty::Var(v) => self.bound_of(*v, &mut Vec::new()),
                    other => other.shift_answer().cloned(),
                };
                match answer {
                    Some(answer) => {
                        out.push_str(" -[");
                        self.go(s, &answer, out, 0);
                        out.push_str("]-> ");
                    }
                    None => out.push_str(" -> "),
                }
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
