//! dp: a statically typed functional differentiable-programming language.

// Diagnostics are large but only ever on the cold error path; boxing them buys nothing.
#![allow(clippy::result_large_err)]

pub mod ad;
pub mod builtins;
pub mod cli;
pub mod core;
pub mod diagnostic;
pub mod docs;
pub mod eval;
pub mod format;
pub mod jupyter;
pub mod lsp;
pub mod memory;
pub mod plot;
pub mod progress;
pub mod repl;
pub mod runtime;
pub mod session;
pub mod source;
pub mod stage;
pub mod syntax;
pub mod types;

/// The tensor library (crates/dp-tensor), under the name the interpreter uses for it.
pub use dp_tensor as tensor;

pub use session::Session;
