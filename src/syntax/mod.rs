//! Lexing and parsing: source text to a spanned AST.

pub mod ast;
pub mod keywords;
pub mod lexer;
pub mod parser;
