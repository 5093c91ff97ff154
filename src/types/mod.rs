//! Hindley–Milner type checking with levels, rows and built-in classes; elaboration to core IR.

pub mod check;
pub mod exhaust;
pub mod ty;
