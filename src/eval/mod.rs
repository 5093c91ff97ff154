//! The evaluator: bytecode compiler, abstract machine with native shift/reset, values.

pub mod builtins;
pub mod compile;
pub mod machine;
pub mod prims;
pub mod report;
pub mod tensor;
pub mod value;
