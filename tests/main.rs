//! The one integration-test binary: golden programs, error snapshots, AD properties, REPL.

mod ad;
mod csv;
mod docs;
mod dtypes;
mod editors;
mod files;
mod format;
mod fuzz_bodies;
mod gen;
mod golden;
mod gpu;
mod jax;
mod jupyter;
mod layers;
mod lsp;
mod plots;
mod products;
mod python;
mod random;
mod repl;
mod run;
mod session;
mod snapshots;
mod tensor_ops;
mod tensors;
mod types;
