//! The machine's builtins that work on tensors: the tensor builtins of LANGUAGE.md "Tensors"
//! (`tensor`) and arithmetic over whole parameter structures (`tree`).

pub mod tensor;
pub mod tree;
