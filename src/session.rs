//! The session facade: loads the prelude, checks whole programs (imports included) before
//! anything runs, compiles and runs them. The CLI, the REPL and the tests all go through it.

use crate::diagnostic::{Diagnostic, Phase};
use crate::eval::compile::compile_toplevel;
use crate::eval::machine::Machine;
use crate::runtime::code::Function;
use crate::runtime::value::{show, Value};
use crate::source::{SourceMap, Span};
use crate::syntax::ast::{ImportTarget, Item};
use crate::syntax::parser;
use crate::types::check::Checker;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

include!(concat!(env!("OUT_DIR"), "/stdlib_table.rs"));

/// One checked, compiled top-level item waiting to run.
struct Unit {
    func: Rc<Function>,
    /// For bare expressions: the rendered type (the REPL echoes value and type).
    expr_type: Option<String>,
    defined: Vec<(Rc<str>, String)>,
    from_user: bool,
}

/// A checked entry (a program, a file, a REPL entry) waiting for `Session::run`.
///
/// It is valid until the session checks something else: a later `check` or `eval` first
/// abandons the pending entry (its bindings are undone), and running a stale `Checked` is
/// refused. (`type_of` leaves the pending entry alone: it changes nothing.)
pub struct Checked {
    units: Vec<Unit>,
    generation: u64,
}

impl Checked {
    /// For each of the entry's own top-level items (imports left out): the names it defines,
    /// with their rendered types.
    pub fn defined(&self) -> Vec<Vec<(Rc<str>, String)>> {
        self.units.iter().filter(|u| u.from_user).map(|u| u.defined.clone()).collect()
    }
}

/// What the REPL shows after evaluating an input.
pub enum Echo {
    Value { value: String, ty: String },
    Defined { name: String, ty: String },
}

/// The state an entry can change, as it was before the entry: put back when it fails.
struct Snapshot {
    checker: Checker,
    modules: HashMap<String, usize>,
}

/// A dp session: the prelude, then every entry that took effect.
///
/// **Transactions.** An entry (a REPL input, a `:load`ed file, a `dp run` program) either takes
/// effect whole or leaves the session's bindings as they were: `check` snapshots the checker,
/// and a type error, a run-time error, an interrupt or `exit` in any of the entry's items puts
/// the snapshot back, so none of the entry's names (nor its types or imports) stays bound.
/// What a failed run has already done outside the bindings is not undone (output, files,
/// assignments to reference cells of earlier entries); for soundness the solved type variables,
/// the used global slots and the count of declared types survive a failed run (see
/// `Checker::restore_after_run`). The fields are private so that no caller can bypass this.
pub struct Session {
    sources: SourceMap,
    checker: Checker,
    machine: Machine,
    modules: HashMap<String, usize>,
    base_scope: Option<HashMap<Rc<str>, Vec<crate::types::check::BindingRef>>>,
    loading: Vec<String>,
    /// The snapshot of the entry checked but not yet run (see `Checked`).
    pending: Option<Snapshot>,
    /// Counts `check`s, so that a stale `Checked` is recognised.
    generation: u64,
    /// Set by `check_only`: the checker's bindings no longer match what has run.
    check_only: bool,
}

/// A standard-library module's source by name.
pub fn stdlib_source(name: &str) -> Option<&'static str> {
    STDLIB.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

pub fn stdlib_names() -> Vec<&'static str> {
    STDLIB.iter().map(|(n, _)| *n).filter(|n| *n != "prelude").collect()
}

impl Session {
    /// A session with the prelude loaded.
    pub fn new() -> Result<Session, Diagnostic> {
        let mut s = Session {
            sources: SourceMap::default(),
            checker: Checker::new(),
            machine: Machine::new(),
            modules: HashMap::new(),
            base_scope: None,
            loading: Vec::new(),
            pending: None,
            generation: 0,
            check_only: false,
        };
        // The session shows a training loop's progress; the machine only reports it.
        s.machine.reporter = Box::new(crate::progress::Bar::default());
        if let Some(prelude) = stdlib_source("prelude") {
            let id = s.sources.add("<stdlib/prelude.dp>", prelude);
            let items = parser::parse_program(prelude, id)?;
            let units = s.check_items(&items, Path::new("."), false)?;
            s.checker.warnings.clear();
            s.run_units(&units)?;
        }
        s.base_scope = Some(s.checker.scope_snapshot());
        Ok(s)
    }

    /// Parses and checks a whole entry, with its imports; nothing runs yet (`run` does). On an
    /// error the session is as it was before.
    pub fn check(&mut self, name: &str, text: &str, dir: &Path) -> Result<Checked, Diagnostic> {
        self.abandon_pending();
        let snapshot = Snapshot { checker: self.checker.clone(), modules: self.modules.clone() };
        match self.check_program(name, text, dir) {
            Ok(units) => {
                self.pending = Some(snapshot);
                self.generation += 1;
                Ok(Checked { units, generation: self.generation })
            }
            Err(d) => {
                self.restore(snapshot, false);
                Err(d)
            }
        }
    }

    /// Checks a program and keeps its bindings, even those of a program with errors (whose
    /// failed items are bound to the error type): for tools that never run anything, such as
    /// the language server, which then asks about the checked names. A session that has done
    /// this refuses to run.
    pub fn check_only(&mut self, name: &str, text: &str, dir: &Path) -> Result<Checked, Diagnostic> {
        match self.check_only_recovering(name, text, dir) {
            (_, _, Some(syntax)) => Err(syntax),
            (checked, _, None) => checked,
        }
    }

    /// `check_only` that also checks the items around a syntax error (each top-level item is
    /// parsed on its own): the language server keeps hover and definitions for them. Returns
    /// the check of the items that parsed, those items, and the syntax errors.
    pub fn check_only_recovering(
        &mut self,
        name: &str,
        text: &str,
        dir: &Path,
    ) -> (Result<Checked, Diagnostic>, Vec<Item>, Option<Diagnostic>) {
        self.abandon_pending();
        self.check_only = true;
        self.generation += 1;
        let id = self.sources.add(name, text);
        let (items, syntax) = parser::parse_program_recovering(text, id);
        let checked = self.check_items(&items, dir, true).map(|units| Checked { units, generation: self.generation });
        (checked, items, syntax)
    }

    /// Runs a checked entry; on any error (run-time error, interrupt, `exit`) the entry's
    /// bindings are undone (see the transaction model above).
    pub fn run(&mut self, checked: Checked) -> Result<Vec<Echo>, Diagnostic> {
        // A stale entry leaves the pending one (if any) alone.
        let current = checked.generation == self.generation && !self.check_only;
        let Some(snapshot) = self.pending.take_if(|_| current) else {
            return Err(Diagnostic::error(
                Phase::Runtime,
                "this entry cannot run: the session changed after it was checked",
            ));
        };
        let r = self.run_units(&checked.units);
        if r.is_err() {
            self.restore(snapshot, true);
        }
        r
    }

    /// Check-then-run of one entry (a file's text or a REPL input), as one transaction.
    pub fn eval(&mut self, name: &str, text: &str, dir: &Path) -> Result<Vec<Echo>, Diagnostic> {
        let checked = self.check(name, text, dir)?;
        self.run(checked)
    }

    /// The type of an expression (the REPL's `:type`), rendered with its constraints. Nothing
    /// of the session changes: checking it could fix weak type variables of earlier bindings.
    pub fn type_of(&mut self, name: &str, text: &str) -> Result<String, Diagnostic> {
        let id = self.sources.add(name, text);
        let e = crate::syntax::lexer::lex(text, id).and_then(|toks| parser::parse_expr(toks, id))?;
        self.type_of_expr(&e)
    }

    /// `type_of` for an expression already parsed (the language server parses it itself).
    pub fn type_of_expr(&mut self, e: &crate::syntax::ast::Expr) -> Result<String, Diagnostic> {
        let before = self.checker.clone();
        let r = self.checker.type_of_expr(e);
        self.checker = before;
        r
    }

    /// Undoes a checked entry that was never run.
    fn abandon_pending(&mut self) {
        if let Some(s) = self.pending.take() {
            self.restore(s, false);
        }
    }

    /// Puts a snapshot back, keeping the warnings found since (they are still reported). After
    /// a run, what the run may have made permanent stays (`Checker::restore_after_run`).
    fn restore(&mut self, s: Snapshot, after_run: bool) {
        if after_run {
            self.checker.restore_after_run(s.checker);
        } else {
            let warnings = std::mem::take(&mut self.checker.warnings);
            self.checker = s.checker;
            self.checker.warnings = warnings;
        }
        self.modules = s.modules;
        self.loading.clear();
    }

    /// Parses and checks a whole program, with its imports; nothing runs.
    fn check_program(&mut self, name: &str, text: &str, dir: &Path) -> Result<Vec<Unit>, Diagnostic> {
        let id = self.sources.add(name, text);
        let items = parser::parse_program(text, id)?;
        self.check_items(&items, dir, true)
    }
    /// Checks every item; an item with a type error is reported and its names are bound to
    /// the error type (so later items are still checked without a cascade of errors), up to
    /// `MAX_ERRORS` errors.
    fn check_items(&mut self, items: &[Item], dir: &Path, from_user: bool) -> Result<Vec<Unit>, Diagnostic> {
        const MAX_ERRORS: usize = 20;
        let mut units = Vec::new();
        let mut errors = Vec::new();
        for item in items {
            let mut imported = Vec::new();
            let checked = {
                // The checker is moved out while it resolves imports through the session.
                let mut ch = std::mem::take(&mut self.checker);
                let mut resolver = |ch: &mut Checker, target: &ImportTarget, span: Span| -> Result<usize, Diagnostic> {
                    self.import(ch, target, span, dir, &mut imported)
                };
                let r = ch.check_item(item, &mut resolver);
                self.checker = ch;
                match r {
                    Ok(c) => c,
                    Err(d) => {
                        errors.push(d);
                        self.checker.poison_item(item);
                        if errors.len() >= MAX_ERRORS {
                            break;
                        }
                        continue;
                    }
                }
            };
            if !errors.is_empty() {
                continue;
            }
            units.append(&mut imported);
            let func = compile_toplevel(&checked.code, checked.nlocals, checked.span, &self.checker.subst);
            units.push(Unit { func, expr_type: checked.expr_type, defined: checked.defined, from_user });
        }
        match Diagnostic::collect(errors) {
            Some(d) => Err(d),
            None => Ok(units),
        }
    }

    fn import(
        &mut self,
        ch: &mut Checker,
        target: &ImportTarget,
        span: Span,
        dir: &Path,
        out: &mut Vec<Unit>,
    ) -> Result<usize, Diagnostic> {
        let (key, name, text, display, mdir) = match target {
            ImportTarget::Stdlib(n) => {
                let Some(src) = stdlib_source(n).filter(|_| n != "prelude") else {
                    return Err(Diagnostic::error(Phase::Type, format!("no standard-library module `{n}`"))
                        .label(span, "unknown module")
                        .note(format!("available: {}", stdlib_names().join(", ")))
                        .help("to import a file, quote its path: import \"path/file.dp\""));
                };
                (format!("std:{n}"), n.clone(), src.to_string(), format!("<stdlib/{n}.dp>"), PathBuf::from("."))
            }
            ImportTarget::File(p) => {
                let path = dir.join(p);
                let text = crate::source::read_source(&path).map_err(|e| {
                    Diagnostic::error(Phase::Io, format!("cannot import `{}`: {e}", path.display()))
                        .label(span, "imported here")
                })?;
                let canon = std::fs::canonicalize(&path).unwrap_or(path.clone());
                let stem = path.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_default();
                let mdir = canon.parent().map(Path::to_path_buf).unwrap_or_default();
                (canon.display().to_string(), stem, text, p.clone(), mdir)
            }
        };
        if let Some(&m) = self.modules.get(&key) {
            return Ok(m);
        }
        if self.loading.contains(&key) {
            return Err(Diagnostic::error(Phase::Type, format!("import cycle: `{name}` imports itself"))
                .label(span, "imported here"));
        }
        let id = self.sources.add(display, text.as_str());
        let items = parser::parse_program(&text, id)?;
        self.loading.push(key.clone());
        std::mem::swap(&mut self.checker, ch);
        let saved = self.base_scope.as_ref().map(|b| self.checker.enter_module(b));
        let r = self.check_items(&items, &mdir, false);
        let names: Vec<Rc<str>> = match &r {
            Ok(units) => units.iter().flat_map(|u| u.defined.iter().map(|(n, _)| n.clone())).collect(),
            Err(_) => Vec::new(),
        };
        let m = self.checker.add_module(&name, &names);
        if let Some(s) = saved {
            self.checker.leave_module(s);
        }
        std::mem::swap(&mut self.checker, ch);
        self.loading.pop();
        out.extend(r?);
        self.modules.insert(key, m);
        Ok(m)
    }

    fn run_units(&mut self, units: &[Unit]) -> Result<Vec<Echo>, Diagnostic> {
        let mut echoes = Vec::new();
        for u in units {
            let v = self.machine.run(u.func.clone(), self.checker.global_count as usize)?;
            if !u.from_user {
                continue;
            }
            if let Some(ty) = &u.expr_type {
                if !matches!(v, Value::Unit) || ty != "Unit" {
                    echoes.push(Echo::Value { value: show(&v, false), ty: ty.clone() });
                }
            }
            for (n, t) in &u.defined {
                echoes.push(Echo::Defined { name: n.to_string(), ty: t.clone() });
            }
        }
        Ok(echoes)
    }

    pub fn take_warnings(&mut self) -> Vec<Diagnostic> {
        std::mem::take(&mut self.checker.warnings)
    }

    pub fn render(&self, d: &Diagnostic, color: bool) -> String {
        d.render(&self.sources, color)
    }

    /// The checker, to ask about names and types in scope.
    pub fn checker(&self) -> &Checker {
        &self.checker
    }

    /// Every source the session has read (reports point into them).
    pub fn sources(&self) -> &SourceMap {
        &self.sources
    }

    /// Records every binding site while checking (the language server's hover).
    pub fn record_bindings(&mut self) {
        self.checker.record_bindings = true;
    }

    pub fn set_stack_limit(&mut self, limit: usize) {
        self.machine.stack_limit = limit;
    }

    /// Bounds the number of calls a run may make (the fuzzer's guard against endless loops).
    pub fn set_fuel(&mut self, fuel: Option<u64>) {
        self.machine.fuel = fuel;
    }

    /// The program `jit` compiled last, as `DP_DUMP_IR` prints it (the REPL's `:ir`).
    pub fn last_ir(&self) -> Option<String> {
        self.machine.jit.last_ir()
    }

    /// The script's arguments (`args`).
    pub fn set_args(&mut self, args: Vec<String>) {
        self.machine.args = args;
    }

    /// Ends a session whose process ends next: flushes its output and leaves its memory to the
    /// operating system (freeing a large program's types, code and snapshot one by one takes
    /// seconds: `dp check` of a 500,000-definition file took 14.7 s with it, 8.8–9.2 s without).
    pub fn finish(mut self) {
        let _ = self.machine.out.flush();
        self.machine.jit.print_profiles();
        std::mem::forget(self);
    }

    /// Where `print` writes.
    pub fn set_output(&mut self, out: Box<dyn std::io::Write>) {
        self.machine.out = out;
    }

    /// Where a training loop's progress and plots are reported (a terminal's bar by default;
    /// the Jupyter kernel shows plots inline).
    pub fn set_reporter(&mut self, reporter: Box<dyn crate::eval::builtins::progress::Reporter>) {
        self.machine.reporter = reporter;
    }

    /// The flag that interrupts a running evaluation when set (Ctrl-C).
    pub fn interrupt_flag(&self) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
        self.machine.interrupt.clone()
    }

    /// The status a run asked to exit with (`exit n`), once.
    pub fn take_exit_code(&mut self) -> Option<i32> {
        self.machine.exit_code.take()
    }
}
