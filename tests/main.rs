//! The one integration-test binary: golden programs, error snapshots, AD properties, REPL.

mod golden;
mod repl;
mod snapshots;
