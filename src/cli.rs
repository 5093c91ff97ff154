//! `dp run` and `dp check`.

use crate::diagnostic::Diagnostic;
use crate::session::Session;
use std::io::IsTerminal;
use std::path::Path;

pub fn report(session: &Session, d: &Diagnostic) {
    let color = std::io::stderr().is_terminal();
    eprint!("{}", session.render(d, color));
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
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot read `{file}`: {e}");
            return 1;
        }
    };
    let dir = Path::new(file).parent().map(Path::to_path_buf).unwrap_or_default();
    let checked = session.check(file, &text, &dir);
    for w in session.take_warnings() {
        report(&session, &w);
    }
    let checked = match checked {
        Ok(c) => c,
        Err(d) => {
            report(&session, &d);
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
                return code.clamp(0, 255) as u8;
            }
            report(&session, &d);
            1
        }
    }
}
