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
use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

/// What Tab completes: keywords, builtins, the prelude, the session's own definitions and
/// imported module names, and after `module.` that standard-library module's members.
#[derive(Default)]
pub struct Completions {
    /// Every name in scope and every keyword, sorted.
    pub names: Vec<String>,
    /// Standard-library module name to its top-level names.
    pub members: HashMap<String, Vec<String>>,
}

const COMMANDS: [&str; 9] = [":browse", ":doc", ":help", ":ir", ":load", ":quit", ":reload", ":type", ":t"];

impl Completions {
    /// The names in scope of `session` (refreshed after each entry), with the keywords and the
    /// members of every standard-library module.
    pub fn of(session: &Session) -> Completions {
        let mut members = HashMap::new();
        for m in crate::session::stdlib_names() {
            // Parsing is enough for the names (no checking): completion must be instant.
            let src = crate::session::stdlib_source(m).unwrap_or("");
            let items = parser::parse_program(src, 0).unwrap_or_default();
            let mut ns: Vec<String> = crate::docs::top_level_names(&items).into_iter().map(|(n, _)| n).collect();
            ns.sort();
            ns.dedup();
            members.insert(m.to_string(), ns);
        }
        Completions { names: Completions::names_in(session), members }
    }

    /// The keywords and every name in scope of `session`, sorted.
    pub fn names_in(session: &Session) -> Vec<String> {
        let mut names: Vec<String> = crate::syntax::keywords::KEYWORDS.iter().map(|k| k.to_string()).collect();
        names.extend(session.checker().names_in_scope().into_iter().map(|(n, _)| n.to_string()));
        names.sort();
        names.dedup();
        names
    }

    /// The start of the word before `pos` and the candidates that complete it.
    pub fn complete(&self, line: &str, pos: usize) -> (usize, Vec<String>) {
        let before = &line[..pos];
        if before.starts_with(':') && !before.contains(char::is_whitespace) {
            return (0, COMMANDS.iter().filter(|c| c.starts_with(before)).map(|c| c.to_string()).collect());
        }
        let start = word_start(before);
        let word = &before[start..];
        // `module.` then part of a member's name.
        if let Some(module_text) = before[..start].strip_suffix('.') {
            let module = &module_text[word_start(module_text)..];
            let found = self.members.get(module).into_iter().flatten().filter(|n| n.starts_with(word)).cloned();
            return (start, found.collect());
        }
        if word.is_empty() {
            return (pos, Vec::new());
        }
        (start, self.names.iter().filter(|n| n.starts_with(word)).cloned().collect())
    }
}

/// Where the identifier that `text` ends with begins (a byte offset on a char boundary).
fn word_start(text: &str) -> usize {
    let is_word = |c: char| c.is_alphanumeric() || c == '_' || c == '\'';
    text.char_indices().rev().take_while(|(_, c)| is_word(*c)).last().map_or(text.len(), |(i, _)| i)
}

/// Multi-line validation and completion.
struct DpHelper {
    completions: Completions,
}

impl Completer for DpHelper {
    type Candidate = Pair;
    fn complete(&self, line: &str, pos: usize, _: &Context<'_>) -> rustyline::Result<(usize, Vec<Pair>)> {
        let (start, found) = self.completions.complete(line, pos);
        Ok((start, found.into_iter().map(|n| Pair { display: n.clone(), replacement: n }).collect()))
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
/// `def` waits for a blank line (a `let rec … in` expression runs at once), and so does a line
/// holding only a comment (a `///` doc comment above the definition to come).
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
    // Only comments so far (a `///` doc comment above the definition to come): continue, as
    // Python does after a comment line.
    let only_comments = matches!(&parsed, Ok(items) if items.is_empty());
    let let_rec = matches!(&parsed, Ok(items) if items.iter().any(|i| matches!(i.kind, ItemKind::LetRec(_))));
    match (multi_line, incomplete, parsed.is_ok()) {
        (_, true, _) => Entry::Continue,
        (false, false, true) if let_rec || only_comments => Entry::Continue,
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
  :reload      load again every file loaded so far
  :browse      list your definitions with their types;
  :browse m    list module m (prelude, nn, optim or builtins) with types
  :doc name    show a name's type and doc comment (`map`, `nn.linear`, your own `///` docs)
  :ir          show the program `jit` staged last (its optimised IR)
  :help        this text
  Tab completes keywords, names in scope, `:commands` and `nn.`/`optim.` members.
  :quit        leave (Ctrl-D works too)
An entry takes effect whole or not at all: after an error nothing of it stays bound.
Ctrl-C interrupts a running evaluation; definitions are kept.";

fn history_path() -> Option<PathBuf> {
    std::env::var_os("DP_HISTORY")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".dp_history")))
}

/// Where the REPL's answers go: the terminal (`Terminal`) or a notebook (the Jupyter kernel),
/// so that both faces share one engine (`Repl`) and differ only in how they show things.
pub trait Console {
    /// Whether rendered diagnostics carry colour escapes.
    fn color(&self) -> bool;
    /// What a command answers (`:help`, `:browse`, `:doc`, `:type`, `loaded f`).
    fn say(&mut self, text: &str);
    /// An entry's echo of a value or a definition (`- : Int = 3`, `val f : Int -> Int`).
    fn echo(&mut self, text: &str);
    /// A complaint about the command itself (unknown command, missing argument).
    fn complain(&mut self, text: &str);
    /// A warning, rendered.
    fn warning(&mut self, rendered: &str);
    /// The entry's error (`d`), rendered: nothing of the entry took effect.
    fn error(&mut self, rendered: &str, d: &crate::diagnostic::Diagnostic);
}

/// The terminal's console: answers on standard output, problems on standard error.
struct Terminal;

impl Console for Terminal {
    fn color(&self) -> bool {
        crate::cli::stderr_color()
    }
    fn say(&mut self, text: &str) {
        println!("{text}");
    }
    fn echo(&mut self, text: &str) {
        println!("{text}");
    }
    fn complain(&mut self, text: &str) {
        eprintln!("{text}");
    }
    fn warning(&mut self, rendered: &str) {
        eprint!("{rendered}");
    }
    fn error(&mut self, rendered: &str, _: &crate::diagnostic::Diagnostic) {
        eprint!("{rendered}");
    }
}

pub fn start(stack_limit: usize) -> u8 {
    let session = match crate::cli::new_session(stack_limit) {
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
    rl.set_helper(Some(DpHelper { completions: Completions::of(&session) }));
    let hist = history_path();
    if let Some(h) = &hist {
        let _ = rl.load_history(h);
    }
    println!("dp {} — :help for help, Ctrl-D to exit", env!("CARGO_PKG_VERSION"));
    let mut repl = Repl::new(session);
    let mut n = 0;
    loop {
        match rl.readline("dp> ") {
            Ok(line) => {
                if line.trim().is_empty() {
                    continue;
                }
                let _ = rl.add_history_entry(line.as_str());
                n += 1;
                if !repl.entry(&format!("<repl {n}>"), &line, &mut Terminal) {
                    break;
                }
                if let Some(h) = rl.helper_mut() {
                    h.completions.names = Completions::names_in(&repl.session);
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

/// The REPL's engine: the session and what the REPL knows beside it (the user's definitions
/// and their doc comments, the loaded files). The terminal and the Jupyter kernel both drive
/// it, each with its own `Console`.
pub struct Repl {
    session: Session,
    /// The standard library's reference, built on the first `:doc` or `:browse` that needs it.
    library: Option<crate::docs::Library>,
    /// The names the user's entries defined, in order, each once.
    defined: Vec<String>,
    /// Doc comments of the user's definitions (from entries and loaded files).
    docs: HashMap<String, String>,
    /// Files loaded with `:load`, in order (what `:reload` loads again).
    loaded: Vec<String>,
}

impl Repl {
    pub fn new(session: Session) -> Repl {
        Repl { session, library: None, defined: Vec::new(), docs: HashMap::new(), loaded: Vec::new() }
    }

    pub fn session(&self) -> &Session {
        &self.session
    }

    pub fn session_mut(&mut self) -> &mut Session {
        &mut self.session
    }

    /// Handles one entry (an input or a `:command`), named `name` in reports; false means
    /// quit (`:quit`, or the entry called `exit`). An interrupt requested before the entry
    /// began is forgotten: Ctrl-C stops the evaluation it interrupts, not the next one.
    pub fn entry(&mut self, name: &str, line: &str, console: &mut dyn Console) -> bool {
        self.session.interrupt_flag().store(false, Ordering::SeqCst);
        self.handle(name, line, console)
    }

    fn handle(&mut self, entry: &str, line: &str, console: &mut dyn Console) -> bool {
        let trimmed = line.trim();
        let Some(cmd) = trimmed.strip_prefix(':') else {
            return self.eval(entry, line, Path::new("."), true, console);
        };
        let (name, rest) = cmd.split_once(char::is_whitespace).unwrap_or((cmd, ""));
        let rest = rest.trim();
        match name {
            "q" | "quit" => return false,
            "h" | "help" => console.say(HELP),
            "t" | "type" => match self.session.type_of(entry, rest) {
                Ok(t) => console.say(&format!("{rest} : {t}")),
                Err(d) => console.error(&self.session.render(&d, console.color()), &d),
            },
            "l" | "load" if rest.is_empty() => console.complain("usage: :load file.dp"),
            "l" | "load" => return self.load(rest, console),
            "r" | "reload" => {
                if self.loaded.is_empty() {
                    console.say("nothing to reload (no :load yet)");
                }
                for path in self.loaded.clone() {
                    if !self.load(&path, console) {
                        return false;
                    }
                }
            }
            "b" | "browse" => self.browse(rest, console),
            "ir" => match self.session.last_ir() {
                Some(ir) => console.say(ir.trim_end()),
                None => console.say("no function has been staged yet (`jit f x` stages f)"),
            },
            "d" | "doc" => match self.doc(rest) {
                Ok(text) => console.say(&text),
                Err(complaint) => console.complain(&complaint),
            },
            other => console.complain(&format!("unknown command `:{other}` (try :help)")),
        }
        true
    }

    /// `:load path`; false means quit (the file called `exit`).
    fn load(&mut self, path: &str, console: &mut dyn Console) -> bool {
        match crate::source::read_source(Path::new(path)) {
            Ok(text) => {
                let dir = Path::new(path).parent().map(Path::to_path_buf).unwrap_or_default();
                if !self.loaded.iter().any(|p| p == path) {
                    self.loaded.push(path.to_string());
                }
                self.eval(path, &text, &dir, false, console)
            }
            Err(e) => {
                console.complain(&format!("error: cannot read `{path}`: {e}"));
                true
            }
        }
    }

    /// Checks and runs one entry, reports it, and on success records its definitions and
    /// their doc comments. `echo`: echo values and definitions (an entry), or say `loaded
    /// path` (a file). False means quit (the entry called `exit`).
    fn eval(&mut self, name: &str, text: &str, dir: &Path, echo: bool, console: &mut dyn Console) -> bool {
        let color = console.color();
        let r = self.session.eval(name, text, dir);
        for w in self.session.take_warnings() {
            console.warning(&self.session.render(&w, color));
        }
        let echoes = match r {
            Ok(echoes) => echoes,
            Err(d) => {
                if self.session.take_exit_code().is_some() {
                    return false;
                }
                console.error(&self.session.render(&d, color), &d);
                return true;
            }
        };
        for e in &echoes {
            match e {
                Echo::Value { value, ty } if echo => console.echo(&format!("- : {ty} = {value}")),
                Echo::Defined { name, ty } => {
                    if echo {
                        console.echo(&format!("val {name} : {ty}"));
                    }
                    self.defined.retain(|d| d != name);
                    self.defined.push(name.clone());
                }
                Echo::Value { .. } => {}
            }
        }
        if !echo {
            console.say(&format!("loaded {name}"));
        }
        // The entry took effect: its `///` comments document the names it defined.
        let items = parser::parse_program(text, 0).unwrap_or_default();
        for (def, span) in crate::docs::top_level_names(&items) {
            match crate::docs::doc_before(text, span.start as usize) {
                Some(doc) => self.docs.insert(def, doc),
                None => self.docs.remove(&def),
            };
        }
        true
    }

    fn library(&mut self) -> Result<&crate::docs::Library, String> {
        if self.library.is_none() {
            match crate::docs::Library::load() {
                Ok(l) => self.library = Some(l),
                Err(d) => {
                    return Err(format!("error: the standard library's documentation failed to load: {}", d.message))
                }
            }
        }
        self.library.as_ref().ok_or_else(String::new)
    }

    /// `:browse` (the user's definitions) or `:browse module`.
    fn browse(&mut self, module: &str, console: &mut dyn Console) {
        if module.is_empty() {
            if self.defined.is_empty() {
                console.say("nothing defined yet; :browse prelude, nn, optim or builtins lists a module");
            }
            for name in &self.defined {
                if let Some(ty) = self.session.checker().type_of_name(name) {
                    console.say(&format!("{name} : {ty}"));
                }
            }
            return;
        }
        if !crate::docs::MODULES.contains(&module) && module != "builtins" {
            console.complain(&format!("no module `{module}` to browse (prelude, nn, optim or builtins)"));
            return;
        }
        match self.library() {
            Ok(lib) => {
                let listing: Vec<String> = lib.module(module).map(|e| format!("{} : {}", e.name, e.ty)).collect();
                console.say(&listing.join("\n"));
            }
            Err(complaint) => console.complain(&complaint),
        }
    }

    /// `:doc name`: the type and doc comment of a user definition or a library name (the
    /// Jupyter kernel's inspection too), or why there is none.
    pub fn doc(&mut self, name: &str) -> Result<String, String> {
        if name.is_empty() {
            return Err("usage: :doc name (for example :doc map, :doc nn.linear)".to_string());
        }
        if let Some(doc) = self.docs.get(name) {
            let ty = self.session.checker().type_of_name(name).unwrap_or_default();
            return Ok(format!("{name} : {ty}\n\n{doc}"));
        }
        let user_ty =
            if self.defined.iter().any(|d| d == name) { self.session.checker().type_of_name(name) } else { None };
        if let Some(ty) = user_ty {
            return Ok(format!("{name} : {ty}\n\n(no doc comment: write `///` lines above a definition)"));
        }
        let lib = self.library()?;
        match lib.find(name) {
            Some(e) => {
                let doc = match (&e.doc, e.module) {
                    (Some(d), _) => d.clone(),
                    (None, "builtins") => "A builtin: docs/language.md describes it.".to_string(),
                    (None, _) => "(no doc comment)".to_string(),
                };
                Ok(format!("{} : {}\n\n{doc}", e.qualified(), e.ty))
            }
            None => Err(format!("no documentation for `{name}`")),
        }
    }
}
