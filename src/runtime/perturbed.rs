//! The data of differentiation that values and the stack hold: perturbed values (a `grad`'s
//! tracked values, a `jvp`'s dual numbers) and the state a `grad` handler keeps in its
//! delimiter — the adjoint records of the operations it saw, run backwards when `f` returns.
//! What is *done* with them (the rules, recording, the backward pass) is the `ad` layer's.

use super::value::Value;
use crate::tensor::TOp;
use std::cell::RefCell;
use std::rc::Rc;

/// A value followed by the reverse-mode level `tag`: its primal and its adjoint cell.
pub struct Tracked {
    pub tag: u32,
    pub primal: Value,
    /// None means zero (nothing has flowed back yet).
    pub adj: RefCell<Option<Value>>,
}

/// A dual number of the forward-mode level `tag`.
pub struct Dual {
    pub tag: u32,
    pub primal: Value,
    pub tangent: Value,
}

/// An adjoint record: one recorded operation's after-code, defunctionalised (what remains
/// to be done with its output's adjoint once the rest of `f` has run).
#[derive(Clone)]
pub enum AdjFrame {
    /// Elementwise: `a.adj += out.adj * da` (and the same for `b`), unbroadcast to a's shape.
    Scale { out: Rc<Tracked>, a: Option<(Rc<Tracked>, Value)>, b: Option<(Rc<Tracked>, Value)> },
    /// A tensor operation: its reverse rule maps `out.adj` to each input's contribution.
    /// (Boxed: keeps the common scalar frame small.)
    Op(Box<OpFrame>),
    /// An elementwise operation on tensors whose partials cost tensor work (`sin`, `tanh`,
    /// `/`, `**`, …): they are computed in the backward pass from the saved primals, and only
    /// if an adjoint reaches the record.
    Deferred(Box<DeferredFrame>),
}

#[derive(Clone)]
pub struct DeferredFrame {
    pub out: Rc<Tracked>,
    pub op: Deferred,
}

/// What a deferred record saved of its operation.
#[derive(Clone)]
pub enum Deferred {
    /// `out = op x`, with `x` tracked at the record's level (its primal is the saved input).
    Un(crate::tensor::Un, Rc<Tracked>),
    /// `out = a p b`, each operand tracked at the record's level or a constant there.
    Bin(crate::core::Prim, Operand, Operand),
}

#[derive(Clone)]
pub enum Operand {
    Tracked(Rc<Tracked>),
    Const(Value),
}

impl Operand {
    /// The operand's value at the record's level.
    pub fn primal(&self) -> Value {
        match self {
            Operand::Tracked(t) => t.primal.clone(),
            Operand::Const(v) => v.clone(),
        }
    }
}

#[derive(Clone)]
pub struct OpFrame {
    pub out: Rc<Tracked>,
    pub op: TOp,
    pub inputs: Vec<Option<Rc<Tracked>>>,
    pub primals: Vec<Value>,
}

#[derive(Clone)]
pub struct GradState {
    pub tag: u32,
    /// The argument as `f` received it: its leaves are the cells the gradient is read from.
    pub input: Value,
    /// `value_and_grad`: return the primal result beside the gradient.
    pub with_value: bool,
    /// The adjoint records of the operations recorded so far, oldest first.
    pub frames: Vec<AdjFrame>,
}

impl GradState {
    /// `frames` is an empty vector whose capacity a previous `grad` left behind (see
    /// `Machine::spare_adjoint_frames`): a loop of `grad` calls grows it only once.
    pub fn new(tag: u32, input: Value, with_value: bool, frames: Vec<AdjFrame>) -> GradState {
        GradState { tag, input, with_value, frames }
    }
}

/// The level of a perturbed value (0 for a plain one).
pub fn tag_of(v: &Value) -> u32 {
    match v {
        Value::Tracked(t) => t.tag,
        Value::Dual(d) => d.tag,
        _ => 0,
    }
}

/// Whether a value is perturbed by some level.
pub fn is_ad(v: &Value) -> bool {
    matches!(v, Value::Tracked(_) | Value::Dual(_))
}

/// The plain value under every perturbation (scalars only).
pub fn strip(v: &Value) -> Value {
    let mut v = v.clone();
    loop {
        v = match v {
            Value::Tracked(t) => t.primal.clone(),
            Value::Dual(d) => d.primal.clone(),
            other => return other,
        }
    }
}
