//! A traced value of a `jit` being staged (src/stage/): a Float or tensor leaf of the staged
//! function whose operations emit nodes into the trace's IR instead of only computing. It
//! has the value it takes on the call being traced (its example), from which its shape and
//! dtype are read (a tracer by example: the first call's own numbers give every shape rule
//! its operands): a tensor's `Staged` cell holds it, a Float's number the trace keeps.
//! Nothing may branch on the example's numbers: the operations that would (a comparison, a
//! Float pattern, I/O) refuse a traced value instead, so the staged program cannot bake one
//! call's data into the next.

use crate::tensor::Tensor;
use std::rc::Rc;

/// A traced Float, held inline in its `Value` (`Value::StagedFloat`): no allocation per node.
/// Its example's number is kept by the trace (`Trace::floats`, src/stage/trace.rs). A scalar trace is
/// nearly all Floats (W1's first call makes 1.2M of them), where an `Rc` cell per traced
/// value was about a tenth of the call's instructions (its allocation and its release).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct StagedFloat {
    pub trace: u32,
    pub node: u32,
}

/// A traced tensor (`Value::Staged`).
pub struct Staged {
    /// The trace this value belongs to; a value of a finished trace is an escaped one.
    pub trace: u32,
    /// Its node in that trace's IR.
    pub node: u32,
    /// This call's value (its shape, dtype and device are the node's).
    pub example: Rc<Tensor>,
}
