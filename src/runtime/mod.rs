//! The run-time layer under differentiation and the evaluator (docs/design.md, "Layers"):
//! what both of them share and neither owns.

pub mod fault;

pub use fault::{FResult, Fault, FaultKind};
