//! What differentiation needs from whatever runs it (DESIGN.md principle 3): the rules and
//! handlers of this layer are written against this trait, not against the machine. The
//! interpreter's machine is one host (eval/host.rs); a staging tracer would be another, whose
//! arithmetic builds IR, so the same rules become staged backward code. Everything in `ad` is
//! generic over the host (never `dyn Host`), so the rules monomorphise into the machine's
//! own arithmetic with no indirect calls on the scalar paths.

use crate::core::Prim;
use crate::runtime::perturbed::{AdjFrame, GradState};
use crate::runtime::value::Value;
use crate::runtime::FResult;
use crate::tensor::{TOp, Tensor, Un};
use std::rc::Rc;

pub trait Host {
    /// Arithmetic on any values, perturbed ones included (those come back to `ad::binary`).
    /// The derivative rules are written with it, so the derivatives they build are recorded by
    /// any outer level in turn: that is all that nested derivatives need.
    fn prim2(&mut self, p: Prim, a: Value, b: Value) -> FResult<Value>;

    /// The unary primitives (negation) on any value, as `prim2`.
    fn prim1(&mut self, p: Prim, a: Value) -> FResult<Value>;

    /// A tensor operation of the op table on plain (unperturbed) values.
    fn forward(&mut self, op: &TOp, args: &[Value]) -> FResult<Value>;

    /// A math function on every element of a plain tensor (reusing its buffer when nobody
    /// else holds it).
    fn unary(&mut self, op: Un, t: Rc<Tensor>) -> FResult<Tensor>;

    /// A math function of a value that is neither a Float, a tensor nor perturbed: a value
    /// `jit` traces, whose operations a staging host emits into its program.
    fn un_other(&mut self, op: Un, x: Value) -> FResult<Value>;

    /// `out = x' @ y' + beta · out` in place (x' is x, or its transpose with `tx`; likewise
    /// y'), for the fused reverse rule of `@` (ad/matmul.rs). `Ok(false)` means this host
    /// cannot (a staging host, whose tensors are symbolic), and the generic rule runs instead.
    fn product_into(
        &mut self,
        out: &mut Tensor,
        x: &Tensor,
        tx: bool,
        y: &Tensor,
        ty: bool,
        beta: f32,
    ) -> FResult<bool>;

    /// `x' @ y'` as a new tensor of `shape` (the product's), written without zeroing it
    /// first: the fused reverse rule's first contribution to an adjoint. `Ok(None)` where
    /// `product_into` would refuse.
    fn product(&mut self, shape: &[usize], x: &Tensor, tx: bool, y: &Tensor, ty: bool) -> FResult<Option<Tensor>>;

    /// The handler of the running `grad` of `tag` (the state in its delimiter), where the
    /// adjoint records of that level go; `None` when that `grad` is not running.
    fn handler(&mut self, tag: u32) -> Option<&mut GradState>;

    /// Whether the `grad` or `jvp` of `tag` is running.
    fn level_is_live(&self, tag: u32) -> bool;

    /// Of two levels, the one nested inside the other (`None` when neither is running).
    fn inner_level(&self, a: u32, b: u32) -> Option<u32>;

    /// Whether the user asked to stop (Ctrl-C) since the last time; asking clears the request.
    fn interrupted(&mut self) -> bool;

    /// Takes back a finished `grad`'s emptied vector of adjoint records, so that the next
    /// `grad` reuses its capacity (a loop of `grad` calls grows it once).
    fn recycle(&mut self, frames: Vec<AdjFrame>);
}
