//! The run-time layer under differentiation and the evaluator (docs/design.md, "Layers"):
//! values, the code closures carry, the segmented stack and its delimiters, the data of
//! differentiation those hold, faults, and values meeting the tensor library. It runs nothing:
//! `ad` (the rules and handlers) and `eval` (the compiler and the machine) are above it.

pub mod code;
pub mod fault;
pub mod perturbed;
pub mod stack;
pub mod staged;
pub mod tensor;
pub mod value;

pub use fault::{FResult, Fault, FaultKind};
