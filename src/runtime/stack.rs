//! The machine's continuation as data: segments, each a value stack and a frame stack ended
//! by a delimiter (DESIGN.md principles 1–2). Every running handler — `reset`, a `grad`'s
//! prompt and handler, a `jvp`, a `catch` — is a delimiter, so what is live and in which order is read
//! off the delimiters alone. The machine (eval/machine.rs) runs them.

use super::perturbed::{CustomCall, GradState, Suspended};
use super::value::{Closure, Value};
use crate::source::Span;
use std::rc::Rc;

/// Frames of a segment's control stack.
#[derive(Clone)]
pub enum Frame {
    /// A dp function waiting for a callee to return: where it resumes, and its `base` and
    /// `floor` (see `Machine::exec`).
    Dp { clo: Rc<Closure>, pc: u32, base: u32, floor: u32 },
    /// Over-application: apply the returned function to these arguments.
    ApplyRest(Box<(Vec<Value>, Span)>),
}

#[derive(Clone)]
pub enum Delim {
    /// The bottom of a `Machine::run`.
    Base,
    Reset,
    /// Where the function differentiated by `grad` runs; AD primitives of this tag shift here.
    GradPrompt(u32),
    /// Just below a prompt: the handler's state, including the adjoint frames it collects.
    GradHandler(Box<GradState>),
    /// Where the function given to `jvp` runs: when it returns, its result is split into the
    /// primal and the tangent of this tag. A delimiter rather than a frame, so that every
    /// running level is a segment boundary and their order is found without reading frames.
    Jvp(u32),
    /// Where the function given to `vmap` runs, once for the whole batch (`size` examples):
    /// when it returns, its result's leaves are stacked along a new axis 0 (`ad::batch`).
    Vmap {
        tag: u32,
        size: usize,
    },
    /// Where `catch`'s body runs, holding its handler: a fault of the program raised above it
    /// cuts the stack back to here and calls the handler with the message (the span is the
    /// `catch` call's). A delimiter, so a
    /// `shift` between a `reset` and the body captures it with the rest of the continuation.
    Catch(Box<(Value, Span)>),
    /// Where the `f` of a `custom_vjp`, `custom_jvp` or `checkpoint` runs on its argument's
    /// values at the level the rule is for; when it returns, the call is recorded there
    /// (reverse mode) or its tangent rule runs (forward mode).
    Custom(Box<CustomCall>),
    /// A `grad` handler's segment while its backward pass waits for a custom rule's dp code,
    /// which runs above it: when that returns, the pass goes on from where it paused.
    Backward(Box<Suspended>),
    /// Where a function `jit` is tracing runs (the trace itself is the machine's staging
    /// state): when it returns, its result ends the trace.
    Stage,
}

#[derive(Clone)]
pub struct Segment {
    pub stack: Vec<Value>,
    pub frames: Vec<Frame>,
    pub delim: Delim,
}
