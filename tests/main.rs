//! The one integration-test binary: golden programs, error snapshots, AD properties, REPL.

mod ad;
mod docs;
mod dtypes;
mod editors;
mod format;
mod gen;
mod golden;
mod gpu;
mod layers;
mod lsp;
mod python;
mod repl;
mod run;
mod session;
mod snapshots;
mod tensors;
mod types;
