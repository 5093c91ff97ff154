//! Fuzz target: lex -> parse -> check -> evaluate (with fuel), exactly as `dp run` does,
//! plus rendering of every diagnostic and warning (as the CLI prints them).
//!
//! Sandboxing: inputs that mention the file-system builtins (`write_file`, `read_file`,
//! `read_lines`) or that import a file (`import "path"`) are skipped, so the fuzzer never
//! touches the disk. `println` output goes to a sink.
//!
//! Like the CLI (src/main.rs), the pipeline runs on a thread with a 512 MiB stack, so a
//! crash here is a crash of `dp run` too. A panic on that thread aborts the process (the
//! libfuzzer-sys panic hook), which libFuzzer reports as a crash.
#![no_main]

use dp::session::Session;
use dp::syntax::ast::{ImportTarget, ItemKind};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

const MAX_LEN: usize = 4096;
const FUEL: u64 = 20_000;
const STACK_LIMIT: usize = 10_000;
const THREAD_STACK: usize = 512 << 20;

fn pipeline(text: &str) {
    // Skip file imports: they would read the disk.
    if let Ok(items) = dp::syntax::parser::parse_program(text, 0) {
        if items.iter().any(|i| matches!(i.kind, ItemKind::Import(ImportTarget::File(_)))) {
            return;
        }
    }
    let mut session = Session::new().expect("the prelude loads");
    session.set_fuel(Some(FUEL));
    session.set_stack_limit(STACK_LIMIT);
    session.set_output(Box::new(std::io::sink()));
    let checked = session.check("fuzz.dp", text, Path::new("/nonexistent-dp-fuzz-dir"));
    for w in session.take_warnings() {
        let _ = session.render(&w, false);
    }
    let checked = match checked {
        Ok(c) => c,
        Err(d) => {
            let _ = session.render(&d, false);
            return;
        }
    };
    if let Err(d) = session.run(checked) {
        let _ = session.render(&d, false);
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() > MAX_LEN {
        return;
    }
    let Ok(text) = std::str::from_utf8(data) else { return };
    if ["write_file", "read_file", "read_lines"].iter().any(|b| text.contains(b)) {
        return;
    }
    let text = text.to_owned();
    let handle = std::thread::Builder::new()
        .stack_size(THREAD_STACK)
        .spawn(move || pipeline(&text))
        .expect("spawn the pipeline thread");
    if handle.join().is_err() {
        // The libfuzzer-sys panic hook normally aborts before we get here.
        std::process::abort();
    }
});
