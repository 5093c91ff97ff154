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
pub struct Unit {
    pub func: Rc<Function>,
    /// For bare expressions: the rendered type (the REPL echoes value and type).
    pub expr_type: Option<String>,
    pub defined: Vec<(Rc<str>, String)>,
    pub from_user: bool,
}

/// What the REPL shows after evaluating an input.
pub enum Echo {
    Value { value: String, ty: String },
    Defined { name: String, ty: String },
}

pub struct Session {
    pub sources: SourceMap,
    pub checker: Checker,
    pub machine: Machine,
    modules: HashMap<String, usize>,
    base_scope: Option<HashMap<Rc<str>, Vec<crate::types::check::BindingRef>>>,
    loading: Vec<String>,
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

    /// Parses and checks a whole program, with its imports; nothing runs.
    pub fn check_program(&mut self, name: &str, text: &str, dir: &Path) -> Result<Vec<Unit>, Diagnostic> {
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
                let text = std::fs::read_to_string(&path).map_err(|e| {
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

    pub fn run_units(&mut self, units: &[Unit]) -> Result<Vec<Echo>, Diagnostic> {
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

    /// Check-then-run of one input (a file's text or a REPL entry).
    pub fn eval(&mut self, name: &str, text: &str, dir: &Path) -> Result<Vec<Echo>, Diagnostic> {
        let units = self.check_program(name, text, dir)?;
        self.run_units(&units)
    }

    pub fn take_warnings(&mut self) -> Vec<Diagnostic> {
        std::mem::take(&mut self.checker.warnings)
    }

    pub fn render(&self, d: &Diagnostic, color: bool) -> String {
        d.render(&self.sources, color)
    }
}
