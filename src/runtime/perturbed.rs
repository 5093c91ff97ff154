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

/// A value of the batching level `tag` (a `vmap`): the values of all B examples stacked into
/// one tensor `value` along its axis `axis` (JAX's BatchTracer: a value and its batch
/// dimension). `value` may itself be perturbed or batched by levels outside this one. What
/// one example's value is — a Tensor of `value`'s shape without that axis, a Float, or a Bool
/// — is `kind`.
pub struct Batched {
    pub tag: u32,
    pub value: Value,
    pub axis: usize,
    pub kind: Example,
}

/// What a batched value holds per example.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Example {
    Tensor,
    /// A Float: `value` has shape [B], float64, so the examples compute in a Float's
    /// precision; the dtype of the tensor it was reduced from is what the result of `vmap`
    /// stacks it in (as JAX's scalar of that dtype).
    Float(crate::tensor::DType),
    /// A Bool (a comparison of batched Floats): `value` is a bool tensor of shape [B].
    Bool,
    /// An Int (`int`, `argmax` of a batch): `value` is an int64 tensor of shape [B].
    Int,
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
    /// A call of `custom_vjp`, `custom_jvp` or `checkpoint` at this level: its after-code is dp
    /// code (the rule, or the recomputation), which the backward pass hands to the machine.
    Custom(Box<CustomFrame>),
    /// A call of a staged function (`jit f x`) whose argument this level differentiates: one
    /// primitive, whose reverse rule is a staged program (src/stage/vjp.rs).
    Staged(Box<StagedFrame>),
}

/// The record of a staged call: its result's leaves as this level's cells, the argument's
/// cells at this level, and what the staged backward program reads besides the result's
/// adjoints (the residuals its forward program kept).
#[derive(Clone)]
pub struct StagedFrame {
    pub outs: Vec<Rc<Tracked>>,
    pub inputs: Vec<Rc<Tracked>>,
    pub residuals: Vec<Value>,
    pub backward: Rc<dyn StagedBackward>,
}

/// The backward program of a staged call (a compiled `stage` plan, which sits above this
/// layer): (residuals, the result's adjoints) ↦ a tuple of the argument's adjoints.
pub trait StagedBackward {
    fn run(&self, inputs: Vec<Value>) -> super::FResult<Value>;
}

/// Where a custom rule's input adjoint comes from.
#[derive(Clone)]
pub enum Rule {
    /// `custom_vjp f bwd`: `bwd x y ybar`.
    Vjp(Value),
    /// `custom_jvp f tan`: the transpose of the linear map `tan x`, as the gradient of
    /// `xdot ↦ ⟨tan x xdot, ybar⟩` (exact when `tan x` is linear, as a tangent map is).
    Jvp(Value),
    /// `checkpoint f`: `f` run again under a `grad` seeded with `ybar` (its intermediates were
    /// not kept in the forward pass).
    Checkpoint,
}

#[derive(Clone)]
pub struct CustomFrame {
    pub rule: Rule,
    pub f: Value,
    /// The argument as the call received it (leaves tracked at the record's level or not):
    /// the cells the rule's result is added to.
    pub inputs: Value,
    /// The argument's and the result's values at the record's level.
    pub x: Value,
    pub y: Value,
    /// The result's leaves as this level's tracked cells, whose adjoints are the rule's `ybar`.
    pub outputs: Value,
    /// The result as `f` returned it: a leaf tracked at this level came from a value `f`
    /// captured (not from its argument), and takes its share of `ybar` through `f`'s records.
    pub returned: Value,
    /// The call's place, for faults raised applying the rule.
    pub span: crate::source::Span,
    /// The `vmap` levels inside this one that batch the call (see `Rebatch`).
    pub batch: Rebatch,
}

/// The `vmap` levels running inside a custom call's level that batch its argument, outermost
/// first, each with its batch size: `f` ran batched by them, so the values a record keeps are
/// batched by them too, and its rule runs under those levels again, reopened by the machine
/// in the backward pass (after the `vmap`s themselves have returned). Empty in the common case.
pub type Rebatch = Vec<(u32, usize)>;

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
    /// The adjoint the result is seeded with, leaf by leaf (a vector–Jacobian product, which
    /// `checkpoint` and `custom_jvp` run in the backward pass); `None` seeds a Float with 1.
    pub seed: Option<Value>,
}

impl GradState {
    /// `frames` is an empty vector whose capacity a previous `grad` left behind (see
    /// `Machine::spare_adjoint_frames`): a loop of `grad` calls grows it only once.
    pub fn new(tag: u32, input: Value, with_value: bool, frames: Vec<AdjFrame>) -> GradState {
        GradState { tag, input, with_value, frames, seed: None }
    }

    /// Records an operation's adjoint work (a long-running level's records grow without
    /// copies: `memory::push_long`).
    #[inline]
    pub fn record(&mut self, frame: AdjFrame) {
        crate::memory::push_long(&mut self.frames, frame);
    }
}

/// A backward pass paused at a custom rule's record while the machine runs the rule's dp code
/// (held by the `Backward` delimiter of the handler's segment): the rest of the level's
/// records, the result that was seeded, and the record's argument, into whose cells the
/// rule's result goes.
#[derive(Clone)]
pub struct Suspended {
    pub state: GradState,
    pub y: Value,
    pub inputs: Value,
    /// The levels the rule runs under (the record's `batch`).
    pub batch: Rebatch,
}

/// What a paused backward pass asks the machine to run.
pub enum RuleCall {
    /// Apply a dp function (a `custom_vjp`'s `bwd`).
    Apply(Value, Vec<Value>, crate::source::Span),
    /// The vector–Jacobian product of `f` at `x` with the output adjoint `seed`: a `grad`
    /// seeded with it.
    Vjp { f: Value, x: Value, seed: Value, span: crate::source::Span },
}

/// A call of `custom_vjp`, `custom_jvp` or `checkpoint` in progress at level `tag`: the
/// state its `Custom` delimiter keeps while `f` (then, in forward mode, the tangent rule)
/// runs on the argument's values at that level.
#[derive(Clone)]
pub struct CustomCall {
    pub tag: u32,
    /// Whether `tag` is a `grad` level (else a `jvp`'s).
    pub grad: bool,
    pub rule: Rule,
    pub f: Value,
    pub inputs: Value,
    pub x: Value,
    /// `Some(y)` once `f` has returned and the tangent rule runs.
    pub y: Option<Value>,
    pub span: crate::source::Span,
    pub batch: Rebatch,
}

/// The level of a perturbed value (0 for a plain one).
pub fn tag_of(v: &Value) -> u32 {
    match v {
        Value::Tracked(t) => t.tag,
        Value::Dual(d) => d.tag,
        Value::Batched(b) => b.tag,
        _ => 0,
    }
}

/// Whether a value is perturbed or batched by some level: the operations on it go through
/// `ad`, which dispatches to the handler of its innermost level.
pub fn is_ad(v: &Value) -> bool {
    matches!(v, Value::Tracked(_) | Value::Dual(_) | Value::Batched(_))
}

/// The value under every perturbation. A batched value is data, not a perturbation: it stays
/// batched, with the perturbations inside it stripped (so a comparison or a builtin that is
/// not differentiable meets the batch, and refuses it, rather than one example's worth of
/// numbers that are really B).
pub fn strip(v: &Value) -> Value {
    let mut v = v.clone();
    loop {
        v = match v {
            Value::Tracked(t) => t.primal.clone(),
            Value::Dual(d) => d.primal.clone(),
            Value::Batched(b) if nested_ad(&b.value) => {
                Value::Batched(Rc::new(Batched { tag: b.tag, value: strip(&b.value), axis: b.axis, kind: b.kind }))
            }
            other => return other,
        }
    }
}

/// Whether a batched value's stacked value carries a perturbation somewhere under its
/// batching layers.
fn nested_ad(v: &Value) -> bool {
    match v {
        Value::Tracked(_) | Value::Dual(_) => true,
        Value::Batched(b) => nested_ad(&b.value),
        _ => false,
    }
}
