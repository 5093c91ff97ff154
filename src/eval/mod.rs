//! The evaluator: the bytecode compiler, the abstract machine with native shift/reset (the
//! host of differentiation), and the builtins.

pub mod builtins;
pub mod compile;
pub mod host;
pub mod machine;
