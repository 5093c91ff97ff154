//! Fuzz target: `load_params` (the body is in fuzz/src/lib.rs, shared with `cargo test`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| dp_fuzz::load_params(data));
