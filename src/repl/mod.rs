//! The REPL: rustyline with history and multi-line input; each entry is checked, then run;
//! Ctrl-C interrupts a running evaluation and keeps every definition.

use crate::session::{Echo, Session};
use crate::syntax::ast::ItemKind;
use crate::syntax::parser;
use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Context, Editor, Helper};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

/// Multi-line validation and completion of keywords and names.
struct DpHelper {
    names: Vec<String>,
}

impl Completer for DpHelper {
    type Candidate = Pair;
    fn complete(&self, line: &str, pos: usize, _: &Context<'_>) -> rustyline::Result<(usize, Vec<Pair>)> {
        let start = line[..pos].rfind(|c: char| !(c.is_alphanumeric() || c == '_' || c == '\'')).map_or(0, |i| i + 1);
        let word = &line[start..pos];
        if word.is_empty() {
            return Ok((pos, Vec::new()));
        }
        let found = self
            .names
            .iter()
            .filter(|n| n.starts_with(word))
            .map(|n| Pair { display: n.clone(), replacement: n.clone() })
            .collect();
        Ok((start, found))
    }
}

impl Hinter for DpHelper {
    type Hint = String;
}
impl Highlighter for DpHelper {
    /// The prompt in bold green when colour is on (rustyline calls this only then).
    fn highlight_prompt<'b, 's: 'b, 'p: 'b>(&'s self, prompt: &'p str, _default: bool) -> std::borrow::Cow<'b, str> {
        std::borrow::Cow::Owned(format!("\x1b[1;32m{prompt}\x1b[0m"))
    }
}
impl Helper for DpHelper {}

impl Validator for DpHelper {
    fn validate(&self, ctx: &mut ValidationContext) -> rustyline::Result<ValidationResult> {
        Ok(match entry_state(ctx.input()) {
            Entry::Submit => ValidationResult::Valid(None),
            Entry::Continue => ValidationResult::Incomplete,
        })
    }
}

/// What Enter does with the text typed so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Entry {
    Submit,
    Continue,
}

/// The multi-line rule, Python's: an entry typed on one line runs at once when it is complete
/// (or has a syntax error that more text cannot fix) and continues when it stops too early;
/// a one-line `let rec` definition waits for a possible `and` line, as Python's one-line
/// `def` waits for a blank line (a `let rec … in` expression runs at once).
/// Once an entry spans several lines, Enter adds a line, however complete the entry already
/// is, since the next line may add a `match` arm, an `else`, a `|>` stage or an `and`; a blank
/// line submits it. A blank line does not submit an entry that still stops too early (an
/// unclosed bracket, `let x =`): pasted code with blank lines inside a definition still works,
/// and Ctrl-C abandons an entry. A syntax error that no more text can fix is reported at once.
pub fn entry_state(input: &str) -> Entry {
    let trimmed = input.trim();
    if trimmed.is_empty() || trimmed.starts_with(':') {
        return Entry::Submit;
    }
    let parsed = parser::parse_program(input, 0);
    let incomplete = matches!(&parsed, Err(d) if parser::is_incomplete(d));
    let multi_line = input.trim_end_matches([' ', '\t']).contains('\n');
    let blank_last_line = input.rsplit('\n').next().is_some_and(|l| l.trim().is_empty());
    let let_rec = matches!(&parsed, Ok(items) if items.iter().any(|i| matches!(i.kind, ItemKind::LetRec(_))));
    match (multi_line, incomplete, parsed.is_ok()) {
        (_, true, _) => Entry::Continue,
        (false, false, true) if let_rec => Entry::Continue,
        (false, false, _) => Entry::Submit,
        // Several lines: a blank line submits; a hard syntax error is reported now.
        (true, false, true) if !blank_last_line => Entry::Continue,
        (true, false, _) => Entry::Submit,
    }
}

const HELP: &str = "\
dp REPL — enter expressions or top-level items.
  Entering lines: a complete one-line entry runs at once; an unfinished one continues on the
  next line. Once an entry spans several lines (match arms, else, |> stages, `and` groups),
  a blank line submits it; so does one after a one-line `let rec` (it may get an `and`).
  Ctrl-C abandons the entry being typed.
  :type e      show the type of expression e (with its constraints) without running it
  :load file   check and run a file in this session
  :help        this text
  :quit        leave (Ctrl-D works too)
An entry takes effect whole or not at all: after an error nothing of it stays bound.
Ctrl-C interrupts a running evaluation; definitions are kept.";

fn history_path() -> Option<PathBuf> {
    std::env::var_os("DP_HISTORY")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".dp_history")))
}

pub fn start(stack_limit: usize) -> u8 {
    let mut session = match crate::cli::new_session(stack_limit) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let flag = session.interrupt_flag();
    let _ = ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst));
    // `--color always` forces colour even off a terminal; `auto` leaves rustyline to colour
    // only a terminal, and only when `NO_COLOR`/`TERM=dumb` do not say otherwise.
    let color_mode = match crate::cli::color_for(std::io::stdout().is_terminal()) {
        false => rustyline::ColorMode::Disabled,
        true if std::io::stdout().is_terminal() => rustyline::ColorMode::Enabled,
        true => rustyline::ColorMode::Forced,
    };
    let config = rustyline::Config::builder().color_mode(color_mode).build();
    let mut rl: Editor<DpHelper, rustyline::history::DefaultHistory> = match Editor::with_config(config) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("dp: cannot start the line editor: {e}");
            return 1;
        }
    };
    let mut names: Vec<String> = crate::syntax::keywords::KEYWORDS.iter().map(|k| k.to_string()).collect();
    names.extend(session.checker().names_in_scope().into_iter().map(|(n, _)| n.to_string()));
    names.sort();
    names.dedup();
    rl.set_helper(Some(DpHelper { names }));
    let hist = history_path();
    if let Some(h) = &hist {
        let _ = rl.load_history(h);
    }
    println!("dp {} — :help for help, Ctrl-D to exit", env!("CARGO_PKG_VERSION"));
    let mut n = 0;
    loop {
        match rl.readline("dp> ") {
            Ok(line) => {
                if line.trim().is_empty() {
                    continue;
                }
                let _ = rl.add_history_entry(line.as_str());
                n += 1;
                session.interrupt_flag().store(false, Ordering::SeqCst);
                if !handle(&mut session, &line, n) {
                    break;
                }
            }
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => {
                eprintln!("dp: {e}");
                break;
            }
        }
    }
    if let Some(h) = &hist {
        let _ = rl.save_history(h);
    }
    0
}

/// Handles one entry; false means quit.
fn handle(session: &mut Session, line: &str, n: usize) -> bool {
    let color = crate::cli::stderr_color();
    let trimmed = line.trim();
    if let Some(cmd) = trimmed.strip_prefix(':') {
        let (name, rest) = cmd.split_once(char::is_whitespace).unwrap_or((cmd, ""));
        match name {
            "q" | "quit" => return false,
            "h" | "help" => println!("{HELP}"),
            "t" | "type" => match session.type_of(&format!("<repl {n}>"), rest) {
                Ok(t) => println!("{} : {t}", rest.trim()),
                Err(d) => eprint!("{}", session.render(&d, color)),
            },
            "l" | "load" => {
                let path = rest.trim();
                match std::fs::read_to_string(path) {
                    Ok(text) => {
                        let dir = Path::new(path).parent().map(Path::to_path_buf).unwrap_or_default();
                        let r = session.eval(path, &text, &dir);
                        for w in session.take_warnings() {
                            eprint!("{}", session.render(&w, color));
                        }
                        match r {
                            Ok(_) => println!("loaded {path}"),
                            Err(d) => eprint!("{}", session.render(&d, color)),
                        }
                    }
                    Err(e) => eprintln!("error: cannot read `{path}`: {e}"),
                }
            }
            other => eprintln!("unknown command `:{other}` (try :help)"),
        }
        return true;
    }
    let r = session.eval(&format!("<repl {n}>"), line, Path::new("."));
    for w in session.take_warnings() {
        eprint!("{}", session.render(&w, color));
    }
    match r {
        Ok(echoes) => {
            for e in echoes {
                match e {
                    Echo::Value { value, ty } => println!("- : {ty} = {value}"),
                    Echo::Defined { name, ty } => println!("val {name} : {ty}"),
                }
            }
        }
        Err(d) => {
            if session.take_exit_code().is_some() {
                return false;
            }
            eprint!("{}", session.render(&d, color))
        }
    }
    true
}
