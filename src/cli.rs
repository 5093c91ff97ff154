//! `dp run` and `dp check`.

use crate::diagnostic::Diagnostic;
use crate::session::Session;
use std::io::IsTerminal;
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};

/// `--color`: whether reports and prompts are coloured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColorChoice {
    /// Colour on a terminal, unless `NO_COLOR` is set (to anything but the empty string, as
    /// no-color.org says) or `TERM=dumb` (Emacs's compile buffers, which do not parse escapes).
    Auto,
    Always,
    Never,
}

impl ColorChoice {
    pub fn parse(s: &str) -> Option<ColorChoice> {
        match s {
            "auto" => Some(ColorChoice::Auto),
            "always" => Some(ColorChoice::Always),
            "never" => Some(ColorChoice::Never),
            _ => None,
        }
    }
}

/// The process's `--color` choice (one per process, set once by `main`): a global, so that
/// every face (run, check, REPL) asks the same question without threading it through.
static COLOR: AtomicU8 = AtomicU8::new(0);

pub fn set_color(choice: ColorChoice) {
    COLOR.store(choice as u8, Ordering::Relaxed);
}

/// Whether to colour what goes to a stream that is (`terminal`) or is not a terminal.
pub fn color_for(terminal: bool) -> bool {
    match COLOR.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
            let dumb = std::env::var_os("TERM").is_some_and(|t| t == "dumb");
            terminal && !no_color && !dumb
        }
    }
}

/// Whether reports on standard error are coloured.
pub fn stderr_color() -> bool {
    color_for(std::io::stderr().is_terminal())
}

pub fn report(session: &Session, d: &Diagnostic) {
    eprint!("{}", session.render(d, stderr_color()));
}

/// A session for the command line with the prelude loaded, or the exit code to stop with
/// (70, EX_SOFTWARE: the embedded standard library itself failed).
pub fn new_session(stack_limit: usize) -> Result<Session, u8> {
    let mut session = Session::new().map_err(|d| {
        eprintln!("dp: the standard library failed to load: {}", d.message);
        70
    })?;
    session.set_stack_limit(stack_limit);
    Ok(session)
}

/// Runs (or only checks) a file; returns the process exit code.
pub fn run_file(file: &str, args: Vec<String>, stack_limit: usize, check_only: bool) -> u8 {
    let mut session = match new_session(stack_limit) {
        Ok(s) => s,
        Err(code) => return code,
    };
    session.set_args(args);
    let code = run_in(&mut session, file, check_only);
    session.finish();
    code
}

fn run_in(session: &mut Session, file: &str, check_only: bool) -> u8 {
    let text = match crate::source::read_source(Path::new(file)) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot read `{file}`: {e}");
            return 1;
        }
    };
    let dir = Path::new(file).parent().map(Path::to_path_buf).unwrap_or_default();
    let checked = session.check(file, &text, &dir);
    for w in session.take_warnings() {
        report(session, &w);
    }
    let checked = match checked {
        Ok(c) => c,
        Err(d) => {
            report(session, &d);
            return 1;
        }
    };
    if check_only {
        return 0;
    }
    match session.run(checked) {
        Ok(_) => 0,
        Err(d) => {
            if let Some(code) = session.take_exit_code() {
                // As a C or OCaml program exits: the status is the code modulo 256 (`exit (-1)` is 255).
                return (code & 0xff) as u8;
            }
            report(session, &d);
            1
        }
    }
}

/// `dp doc [OUT]`: writes the standard library's Markdown reference (default docs/stdlib.md).
pub fn doc(out: &str) -> u8 {
    let lib = match crate::docs::Library::load() {
        Ok(l) => l,
        Err(d) => {
            eprintln!("dp: the standard library failed to load: {}", d.message);
            return 70;
        }
    };
    match std::fs::write(out, lib.markdown()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: cannot write `{out}`: {e}");
            1
        }
    }
}
