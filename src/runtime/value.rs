//! Run-time values: small, cheap to clone (DESIGN.md principle 5). Heap data sits behind `Rc`;
//! long lists and deep variant trees are dropped iteratively so no drop recursion can
//! overflow the Rust stack.

use super::code::Function;
use super::fault::{FResult, Fault};
use super::perturbed::{strip, Batched, Dual, Example, Tracked};
use super::stack::Segment;
use std::cell::RefCell;
use std::fmt::Write;
use std::rc::Rc;

#[derive(Default)]
pub enum Value {
    #[default]
    Unit,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Rc<String>),
    Tuple(Rc<Vec<Value>>),
    Nil,
    Cons(Rc<ConsCell>),
    Record(Rc<RecordVal>),
    Con(Rc<ConVal>),
    Ref(Rc<RefCell<Value>>),
    Closure(Rc<Closure>),
    Builtin(u32),
    Pap(Rc<Pap>),
    Cont(Rc<Cont>),
    /// A value tracked by a reverse-mode `grad` (see `ad`).
    Tracked(Rc<Tracked>),
    /// A forward-mode dual number of a `jvp`.
    Dual(Rc<Dual>),
    /// The values of a `vmap`'s examples stacked along an axis (see `ad::batch`).
    Batched(Rc<Batched>),
    Tensor(Rc<crate::tensor::Tensor>),
    /// A tensor traced by `jit` (see `stage`), with its example.
    Staged(Rc<super::staged::Staged>),
    /// A Float traced by `jit`, its example kept by the trace.
    StagedFloat(super::staged::StagedFloat),
}

// Written out (rather than derived) so the immediate cases inline into the machine's hot loop.
impl Clone for Value {
    #[inline(always)]
    fn clone(&self) -> Value {
        match self {
            Value::Unit => Value::Unit,
            Value::Bool(b) => Value::Bool(*b),
            Value::Int(n) => Value::Int(*n),
            Value::Float(x) => Value::Float(*x),
            Value::Nil => Value::Nil,
            Value::Builtin(i) => Value::Builtin(*i),
            Value::StagedFloat(s) => Value::StagedFloat(*s),
            other => other.clone_heap(),
        }
    }
}

/// Drops a value, testing inline for an immediate (which needs nothing): the generic drop
/// glue is an out-of-line call even for an Int.
#[inline(always)]
pub fn discard(v: Value) {
    if v.is_immediate() {
        std::mem::forget(v)
    } else {
        drop(v)
    }
}

impl Value {
    /// Holds no heap reference.
    #[inline(always)]
    pub fn is_immediate(&self) -> bool {
        matches!(
            self,
            Value::Unit
                | Value::Bool(_)
                | Value::Int(_)
                | Value::Float(_)
                | Value::Nil
                | Value::Builtin(_)
                | Value::StagedFloat(_)
        )
    }

    #[inline(never)]
    fn clone_heap(&self) -> Value {
        match self {
            Value::Str(r) => Value::Str(r.clone()),
            Value::Tuple(r) => Value::Tuple(r.clone()),
            Value::Cons(r) => Value::Cons(r.clone()),
            Value::Record(r) => Value::Record(r.clone()),
            Value::Con(r) => Value::Con(r.clone()),
            Value::Ref(r) => Value::Ref(r.clone()),
            Value::Closure(r) => Value::Closure(r.clone()),
            Value::Pap(r) => Value::Pap(r.clone()),
            Value::Cont(r) => Value::Cont(r.clone()),
            Value::Tracked(r) => Value::Tracked(r.clone()),
            Value::Dual(r) => Value::Dual(r.clone()),
            Value::Batched(r) => Value::Batched(r.clone()),
            Value::Tensor(r) => Value::Tensor(r.clone()),
            Value::Staged(r) => Value::Staged(r.clone()),
            immediate => immediate.clone(),
        }
    }
}

pub struct ConsCell {
    pub head: Value,
    pub tail: Value,
}

impl Drop for ConsCell {
    fn drop(&mut self) {
        let mut next = std::mem::take(&mut self.tail);
        while let Value::Cons(rc) = next {
            match Rc::try_unwrap(rc) {
                Ok(mut cell) => next = std::mem::take(&mut cell.tail),
                Err(_) => break,
            }
        }
    }
}

#[derive(Clone)]
pub struct RecordVal {
    /// Sorted field names.
    pub names: Rc<[Rc<str>]>,
    pub values: Vec<Value>,
}

impl RecordVal {
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.names.iter().position(|n| &**n == name).map(|i| &self.values[i])
    }
}

pub struct ConVal {
    pub tag: u32,
    pub name: Rc<str>,
    pub args: Vec<Value>,
}

impl Drop for ConVal {
    fn drop(&mut self) {
        // Deep trees: move children into a worklist instead of recursing.
        if self.args.iter().all(|a| !matches!(a, Value::Con(_))) {
            return;
        }
        let mut work: Vec<Value> = std::mem::take(&mut self.args);
        while let Some(v) = work.pop() {
            if let Value::Con(rc) = v {
                if let Ok(mut c) = Rc::try_unwrap(rc) {
                    work.append(&mut c.args);
                }
            }
        }
    }
}

pub struct Closure {
    pub func: Rc<Function>,
    pub env: Vec<Value>,
}

pub struct Pap {
    pub callee: Value,
    pub args: Vec<Value>,
}

/// A captured delimited continuation: the segments above the delimiter, bottom first.
pub struct Cont {
    pub segments: Vec<Segment>,
}

impl Value {
    pub fn str(s: impl Into<String>) -> Value {
        Value::Str(Rc::new(s.into()))
    }
    /// The prelude's `Some v` (its `Option` declares `None` first, so `Some` is tag 1).
    pub fn some(v: Value) -> Value {
        Value::Con(Rc::new(ConVal { tag: 1, name: "Some".into(), args: vec![v] }))
    }
    pub fn none() -> Value {
        Value::Con(Rc::new(ConVal { tag: 0, name: "None".into(), args: vec![] }))
    }
    pub fn list(items: impl DoubleEndedIterator<Item = Value>) -> Value {
        let mut l = Value::Nil;
        for v in items.rev() {
            l = Value::Cons(Rc::new(ConsCell { head: v, tail: l }));
        }
        l
    }
    pub fn cons(h: Value, t: Value) -> Value {
        Value::Cons(Rc::new(ConsCell { head: h, tail: t }))
    }
    /// Iterates a list's elements.
    pub fn iter_list(&self) -> ListIter<'_> {
        ListIter { cur: self }
    }
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Unit => "Unit",
            Value::Bool(_) => "Bool",
            Value::Int(_) => "Int",
            Value::Float(_) | Value::Tracked(_) | Value::Dual(_) => "Float",
            Value::Str(_) => "String",
            Value::Tuple(_) => "tuple",
            Value::Nil | Value::Cons(_) => "List",
            Value::Record(_) => "record",
            Value::Con(_) => "variant",
            Value::Ref(_) => "Ref",
            Value::Closure(_) | Value::Builtin(_) | Value::Pap(_) | Value::Cont(_) => "function",
            Value::Tensor(_) => "Tensor",
            Value::Batched(b) => match b.kind {
                Example::Tensor => "Tensor",
                Example::Float(_) => "Float",
                Example::Bool => "Bool",
                Example::Int => "Int",
            },
            Value::Staged(_) => "Tensor",
            Value::StagedFloat(_) => "Float",
        }
    }
}

pub struct ListIter<'a> {
    cur: &'a Value,
}

impl<'a> Iterator for ListIter<'a> {
    type Item = &'a Value;
    fn next(&mut self) -> Option<&'a Value> {
        match self.cur {
            Value::Cons(c) => {
                self.cur = &c.tail;
                Some(&c.head)
            }
            _ => None,
        }
    }
}

/// Shortest decimal that round-trips, always with a `.` or an exponent.
pub fn fmt_float(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "infinity".into() } else { "-infinity".into() };
    }
    let a = x.abs();
    let s = if a != 0.0 && !(1e-5..1e16).contains(&a) {
        let e = format!("{x:e}");
        // Rust writes 1e-8 / 1.5e21; keep that form.
        e
    } else {
        format!("{x}")
    };
    if s.contains('.') || s.contains('e') || s.contains("inf") || s.contains("NaN") {
        s
    } else {
        format!("{s}.0")
    }
}

/// Renders a value. Strings are quoted when nested inside a structure (`top` false).
pub fn show(v: &Value, top: bool) -> String {
    let mut out = String::new();
    show_into(v, top, &mut Out { text: &mut out, open_refs: std::collections::HashSet::new() }, 0);
    out
}

/// Where `show` writes, and the reference cells it is inside of: a cell met again while it is
/// still open is a cycle (built by assignment) and prints as `<cycle>`, as OCaml's toplevel
/// does; a cell shared but not cyclic prints in full at each place.
struct Out<'a> {
    text: &'a mut String,
    open_refs: std::collections::HashSet<*const RefCell<Value>>,
}

impl std::ops::Deref for Out<'_> {
    type Target = String;
    fn deref(&self) -> &String {
        self.text
    }
}

impl std::ops::DerefMut for Out<'_> {
    fn deref_mut(&mut self) -> &mut String {
        self.text
    }
}

impl std::fmt::Write for Out<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.text.push_str(s);
        Ok(())
    }
}

fn show_into(v: &Value, top: bool, out: &mut Out, depth: usize) {
    if depth > 1_000_000 {
        out.push('…');
        return;
    }
    match v {
        Value::Unit => out.push_str("()"),
        Value::Bool(b) => {
            let _ = write!(out, "{b}");
        }
        Value::Int(n) => {
            let _ = write!(out, "{n}");
        }
        Value::Float(x) => out.push_str(&fmt_float(*x)),
        Value::Str(s) => {
            if top {
                out.push_str(s)
            } else {
                let _ = write!(out, "{:?}", s.as_str());
            }
        }
        Value::Tuple(vs) => show_seq(('(', ')'), vs.iter(), out, depth),
        Value::Nil | Value::Cons(_) => show_seq(('[', ']'), v.iter_list(), out, depth),
        Value::Record(r) => {
            out.push_str("{ ");
            for (i, (n, x)) in r.names.iter().zip(&r.values).enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                let _ = write!(out, "{n} = ");
                show_into(x, false, out, depth + 1);
            }
            out.push_str(" }");
        }
        Value::Con(c) => {
            out.push_str(&c.name);
            for a in &c.args {
                out.push(' ');
                show_arg(a, out, depth + 1);
            }
        }
        Value::Ref(r) => {
            out.push_str("ref ");
            let cell = Rc::as_ptr(r);
            if out.open_refs.contains(&cell) {
                out.push_str("<cycle>");
                return;
            }
            match r.try_borrow() {
                Ok(x) => {
                    out.open_refs.insert(cell);
                    show_arg(&x, out, depth + 1);
                    out.open_refs.remove(&cell);
                }
                Err(_) => out.push('…'),
            }
        }
        Value::Closure(_) | Value::Builtin(_) | Value::Pap(_) => out.push_str("<fun>"),
        Value::Cont(_) => out.push_str("<continuation>"),
        Value::Tracked(_) | Value::Dual(_) => show_into(&strip(v), top, out, depth),
        // Printed once for the whole batch (a `print` inside `vmap` runs once): the examples'
        // values stacked along axis 0, marked as such.
        Value::Batched(b) => {
            let _ = write!(out, "<batched along axis {}: ", b.axis);
            show_into(&strip(&b.value), false, out, depth + 1);
            out.push('>');
        }
        Value::Tensor(t) => show_tensor(t, out),
        // Only reached by a traced value that escaped its `jit` (printing one inside is
        // refused): its numbers belong to one call.
        Value::Staged(_) | Value::StagedFloat(_) => out.push_str("<traced>"),
    }
}

/// An argument of a constructor or `ref`: parenthesised unless it prints as one token.
fn show_arg(v: &Value, out: &mut Out, depth: usize) {
    let v = strip(v);
    let atomic = match &v {
        Value::Con(c) => c.args.is_empty(),
        Value::Int(n) => *n >= 0,
        Value::Float(x) => x.is_sign_positive() || x.is_nan(),
        Value::Ref(_) | Value::Tensor(_) => false,
        _ => true,
    };
    if !atomic {
        out.push('(');
    }
    show_into(&v, false, out, depth);
    if !atomic {
        out.push(')');
    }
}

/// `tensor [[1.0, 2.0], [3.0, 4.0]]`; large tensors show their shape and a summary.
/// The items of a tuple or list, comma-separated between `brackets`.
fn show_seq<'a>(brackets: (char, char), items: impl Iterator<Item = &'a Value>, out: &mut Out, depth: usize) {
    out.push(brackets.0);
    for (i, x) in items.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        show_into(x, false, out, depth + 1);
    }
    out.push(brackets.1);
}

/// A tensor as the constructor call that makes it: `tensor [[1.0, 2.0]]` (float32, the
/// default), `tensor [1, 2]` (int64), `tensor [true]` (bool), `astype "float64" (tensor [0.1])`;
/// more than 1000 elements print as a summary.
fn show_tensor(t: &crate::tensor::Tensor, out: &mut String) {
    use crate::tensor::DType;
    let shape = t.shape();
    let dtype = t.dtype();
    let element = |x: f64| -> String {
        match dtype {
            DType::F32 => fmt_f32(x as f32),
            DType::F64 => fmt_float(x),
            DType::I64 => format!("{}", x as i64),
            DType::Bool => format!("{}", x != 0.0),
        }
    };
    // The numbers as f64s where they print from them: a summary, or float elements (int64 and
    // bool elements print from their own data). Only a GPU tensor's read-back can fail; the
    // value still prints, saying why it could not.
    let from_f64s = t.len() > 1000 || (t.i64s().is_none() && t.bools().is_none());
    let values = match from_f64s.then(|| t.to_f64s()).transpose() {
        Ok(values) => values.unwrap_or_default(),
        Err(e) => {
            let _ = write!(out, "<tensor {}: {e}>", crate::tensor::fmt_shape(shape));
            return;
        }
    };
    if t.len() > 1000 {
        let (mut lo, mut hi, mut sum) = (f64::INFINITY, f64::NEG_INFINITY, 0f64);
        for &x in &values {
            lo = lo.min(x);
            hi = hi.max(x);
            sum += x;
        }
        let kind = if dtype == DType::F32 { String::new() } else { format!(" {}", dtype.name()) };
        let mean = sum / t.len() as f64;
        let mean = if dtype == DType::F32 { fmt_f32(mean as f32) } else { fmt_float(mean) };
        let _ = write!(
            out,
            "<tensor {}{kind} min {} max {} mean {mean}>",
            crate::tensor::fmt_shape(shape),
            element(lo),
            element(hi),
        );
        return;
    }
    let f64_wrapper = dtype == DType::F64;
    if f64_wrapper {
        out.push_str("astype \"float64\" (");
    }
    out.push_str("tensor ");
    let data: Vec<String> = match (t.i64s(), t.bools()) {
        // int64 beyond 2^53 prints exactly.
        (Some(a), _) => a.iter().map(|x| x.to_string()).collect(),
        (_, Some(a)) => a.iter().map(|x| x.to_string()).collect(),
        _ => values.into_iter().map(element).collect(),
    };
    if let ([], Some(x)) = (shape, data.first()) {
        // A 0-d tensor reads like a constructor argument: `tensor (-0.5)`.
        out.push_str(&if x.starts_with('-') { format!("({x})") } else { x.clone() });
    } else {
        fn rec(data: &[String], shape: &[usize], out: &mut String) {
            match shape.split_first() {
                None => out.push_str(data.first().map_or("0.0", |s| s.as_str())),
                Some((&n, rest)) => {
                    let stride: usize = rest.iter().product();
                    out.push('[');
                    for i in 0..n {
                        if i > 0 {
                            out.push_str(", ");
                        }
                        rec(&data[i * stride..(i + 1) * stride], rest, out);
                    }
                    out.push(']');
                }
            }
        }
        rec(&data, shape, out);
    }
    if f64_wrapper {
        out.push(')');
    }
}

/// Shortest float32 text that round-trips, with a `.0` where it would look like an Int.
pub fn fmt_f32(x: f32) -> String {
    if !x.is_finite() {
        return fmt_float(x as f64);
    }
    let a = x.abs();
    if a != 0.0 && !(1e-5..1e16).contains(&a) {
        return format!("{x:e}");
    }
    let s = format!("{x}");
    if s.contains('.') {
        s
    } else {
        format!("{s}.0")
    }
}

/// Reading a builtin's argument as the type the checker gave it. A value of another kind here
/// means the checker and the builtin table disagree: an internal fault, not the program's.
impl Value {
    pub fn as_int(&self) -> FResult<i64> {
        match self {
            Value::Int(n) => Ok(*n),
            other => Err(expected("an Int", other)),
        }
    }

    /// A Float, under any perturbations (a builtin that is not differentiable reads the primal).
    pub fn as_float(&self) -> FResult<f64> {
        match strip(self) {
            Value::Float(x) => Ok(x),
            other => Err(expected("a Float", &other)),
        }
    }

    pub fn as_str(&self) -> FResult<Rc<String>> {
        match self {
            Value::Str(s) => Ok(s.clone()),
            other => Err(expected("a String", other)),
        }
    }

    /// A Tensor, under any perturbations.
    pub fn as_tensor(&self) -> FResult<Rc<crate::tensor::Tensor>> {
        match strip(self) {
            Value::Tensor(t) => Ok(t),
            other => Err(expected("a Tensor", &other)),
        }
    }
}

fn expected(what: &str, got: &Value) -> Fault {
    if let Value::Batched(_) = got {
        // A builtin with no batching rule reading a batched argument as one plain value.
        return Fault::unbatched(super::fault::UNBATCHED_OP);
    }
    Fault::internal(format!("expected {what}, got {}", got.type_name()))
}

#[cfg(test)]
mod tests {
    /// The sizes docs/design.md and bench/RESULTS.md quote (per value, per recorded operation).
    #[test]
    fn sizes_quoted_in_the_docs() {
        assert_eq!(std::mem::size_of::<super::Value>(), 16);
        assert_eq!(std::mem::size_of::<crate::runtime::stack::Frame>(), 24);
        // A recorded scalar operation: one tracked value (with its Rc counts) + one adjoint frame.
        assert_eq!(std::mem::size_of::<crate::runtime::perturbed::Tracked>() + 2 * std::mem::size_of::<usize>(), 64);
        assert_eq!(std::mem::size_of::<crate::runtime::perturbed::AdjFrame>(), 56);
    }
}
