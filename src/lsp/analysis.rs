//! One checked version of a document and the editor features computed from it.
//!
//! Each version is checked by a fresh `Session` (it loads the prelude), exactly as `dp check`
//! would check the file; nothing runs. The parsed items feed a lexical resolver (`resolve`)
//! for go-to-definition, and the checker's recorded binding sites give the types for hover.

use super::position::LineIndex;
use super::resolve::{Def, DefKind, Index, OccKind};
use crate::diagnostic::{Diagnostic, Severity};
use crate::docs::{doc_before, top_level_names};
use crate::session::{stdlib_source, Session};
use crate::source::Span;
use crate::syntax::ast::*;
use crate::syntax::keywords::KEYWORDS;
use crate::syntax::lexer::{lex, Tok};
use crate::syntax::parser::parse_program;
use lsp_types as lsp;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// Hover text with a doc comment after it, when there is one.
fn with_doc(text: String, doc: Option<String>) -> String {
    match doc {
        Some(d) => format!("{text}\n\n{d}"),
        None => text,
    }
}

/// A standard-library module's source and the span of `name`'s (last) top-level definition.
fn stdlib_definition(module: &str, name: &str) -> Option<(&'static str, Span)> {
    let text = stdlib_source(module)?;
    let items = parse_program(text, 0).ok()?;
    top_level_names(&items).into_iter().rev().find(|(n, _)| n == name).map(|(_, span)| (text, span))
}

/// Where go-to-definition finds `name` of a standard-library module. The library is embedded
/// in the binary, so the server writes each module's source to a file the editor can open:
/// one per dp version under the user's cache directory (`$XDG_CACHE_HOME/dp`, else
/// `~/.cache/dp`, else the temporary directory), rewritten only when it differs. A stable
/// path lets an editor keep the file open across sessions.
fn stdlib_target(module: &str, name: &str) -> Option<Target> {
    let (text, span) = stdlib_definition(module, name)?;
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join("dp").join(format!("stdlib-{}", env!("CARGO_PKG_VERSION")));
    let path = dir.join(format!("{module}.dp"));
    if std::fs::read_to_string(&path).ok().as_deref() != Some(text) {
        std::fs::create_dir_all(&dir).ok()?;
        std::fs::write(&path, text).ok()?;
    }
    let lines = LineIndex::new(text);
    Some(Target { path: Some(path), range: lines.range(text, span.start as usize, span.end as usize) })
}

/// The names one top-level item defined, with their rendered types.
type Defined = Vec<(Rc<str>, String)>;

pub struct Analysis {
    pub text: String,
    pub lines: LineIndex,
    /// The session that checked this version (None only if the standard library failed to load).
    pub session: Option<Session>,
    /// The document's file id in the session's source map.
    pub file: u32,
    pub dir: PathBuf,
    /// The items that parsed (all of them unless `syntax_ok` is false); None before analysis.
    pub items: Option<Vec<Item>>,
    /// Whether the whole document parsed: with a syntax error, `items` (and the index and
    /// checked names) are those of the items that parsed.
    syntax_ok: bool,
    pub index: Index,
    /// When the whole program checked: the names each item defined, with their types.
    pub top_types: Option<Vec<Defined>>,
    pub diagnostics: Vec<lsp::Diagnostic>,
}

/// What hover shows: markdown text and the range of the name.
pub struct HoverInfo {
    pub markdown: String,
    pub span: (usize, usize),
}

/// A resolved definition site: the document itself (`path` None) or another file.
pub struct Target {
    pub path: Option<PathBuf>,
    pub range: lsp::Range,
}

impl Analysis {
    /// Checks one version of a document. `name` is what reports call the file (its path).
    pub fn new(uri: &lsp::Uri, name: &str, text: &str, dir: &Path) -> Analysis {
        let lines = LineIndex::new(text);
        let mut a = Analysis {
            text: text.to_string(),
            lines,
            session: None,
            file: 0,
            dir: dir.to_path_buf(),
            items: None,
            syntax_ok: false,
            index: Index::default(),
            top_types: None,
            diagnostics: Vec::new(),
        };
        let mut session = match Session::new() {
            Ok(s) => s,
            Err(d) => {
                a.diagnostics.push(lsp::Diagnostic {
                    range: lsp::Range::default(),
                    severity: Some(lsp::DiagnosticSeverity::ERROR),
                    source: Some("dp".into()),
                    message: format!("the standard library failed to load: {}", d.message),
                    ..Default::default()
                });
                return a;
            }
        };
        session.record_bindings();
        // Nothing runs, but should anything print, keep it off the protocol's standard output.
        session.set_output(Box::new(std::io::sink()));
        a.file = session.sources().files().len() as u32;
        let (checked, items, syntax) = session.check_only_recovering(name, text, dir);
        let warnings = session.take_warnings();
        a.index = Index::build(&items, text.len());
        a.items = Some(items);
        a.syntax_ok = syntax.is_none();
        let mut diags = warnings;
        match checked {
            Ok(units) => {
                a.top_types = Some(units.defined());
            }
            // While the file has a syntax error only those are reported: the items that parsed
            // are still checked (for hover and definitions), but their errors may be echoes of
            // the broken item (a name it would have defined).
            Err(d) if syntax.is_none() => diags.extend(d.flatten()),
            Err(_) => {}
        }
        diags.extend(syntax.into_iter().flat_map(|d| d.flatten()));
        a.diagnostics = diags.iter().map(|d| a.to_lsp(uri, &session, d)).collect();
        a.session = Some(session);
        a
    }

    /// Whether the whole document parsed (else its items are those that did).
    pub fn parsed(&self) -> bool {
        self.syntax_ok
    }

    pub fn range(&self, span: Span) -> lsp::Range {
        self.lines.range(&self.text, span.start as usize, span.end as usize)
    }

    /// The range in this document that a diagnostic located at `span` is shown at: the span
    /// itself, or for a span in an imported file, the `import` that brought that file in.
    fn anchor(&self, session: &Session, span: Span) -> lsp::Range {
        if span.file == self.file {
            return self.range(span);
        }
        let name = &session.sources().get(span.file).name;
        let imports: Vec<&Item> =
            self.items.iter().flatten().filter(|i| matches!(i.kind, ItemKind::Import(_))).collect();
        let matching = imports.iter().find(|i| match &i.kind {
            ItemKind::Import(ImportTarget::File(p)) => p == name,
            ItemKind::Import(ImportTarget::Stdlib(n)) => *name == format!("<stdlib/{n}.dp>"),
            _ => false,
        });
        match matching.or(imports.first()) {
            Some(i) => self.range(i.span),
            None => lsp::Range::default(),
        }
    }

    /// An LSP diagnostic: range from the primary label, `message` is the diagnostic's message,
    /// then a blank line, then the full report exactly as `dp check` prints it (without colour).
    /// Secondary labels in this document also become `relatedInformation`.
    fn to_lsp(&self, uri: &lsp::Uri, session: &Session, d: &Diagnostic) -> lsp::Diagnostic {
        let range = d.primary_span().map_or_else(lsp::Range::default, |s| self.anchor(session, s));
        let rendered = d.render(session.sources(), false);
        let related: Vec<_> = d
            .labels
            .iter()
            .skip(1)
            .filter(|(s, _)| s.file == self.file)
            .map(|(s, text)| lsp::DiagnosticRelatedInformation {
                location: lsp::Location { uri: uri.clone(), range: self.range(*s) },
                message: text.clone(),
            })
            .collect();
        lsp::Diagnostic {
            range,
            severity: Some(match d.severity {
                Severity::Error => lsp::DiagnosticSeverity::ERROR,
                Severity::Warning => lsp::DiagnosticSeverity::WARNING,
            }),
            source: Some("dp".into()),
            message: format!("{}\n\n{}", d.message, rendered.trim_end()),
            related_information: (!related.is_empty()).then_some(related),
            ..Default::default()
        }
    }

    // ------------------------------------------------------------ types of names

    /// The rendered type recorded by the checker for the binding at `def_span`.
    fn binding_type(&self, name: &str, def_span: Span) -> Option<String> {
        let session = self.session.as_ref()?;
        let ch = session.checker();
        ch.binding_sites
            .iter()
            .rev()
            .find(|(n, s, _)| &**n == name && s.file == self.file && s.start <= def_span.start && def_span.end <= s.end)
            .map(|(_, _, t)| ch.show_scheme(t))
    }

    /// The type of a definition of this document, if it was checked.
    pub fn def_type(&self, d: &Def) -> Option<String> {
        if d.kind == DefKind::TopLevel {
            if let Some(t) = self
                .top_types
                .as_ref()
                .and_then(|tt| tt.get(d.item))
                .and_then(|names| names.iter().rev().find(|(n, _)| **n == *d.name))
            {
                return Some(t.1.clone());
            }
        }
        match d.kind {
            DefKind::TopLevel | DefKind::Local => self.binding_type(&d.name, d.span),
            DefKind::Constructor => self.constructor_type(&d.name, None),
            DefKind::Type | DefKind::Module => None,
        }
    }

    fn constructor_type(&self, name: &str, base: Option<&Session>) -> Option<String> {
        [self.session.as_ref(), base]
            .into_iter()
            .flatten()
            .find_map(|s| s.checker().constructor(name).map(|c| s.checker().show(&c.scheme.ty)))
    }

    /// `module.name`'s type, by checking that expression in the document's final scope.
    fn member_type(&mut self, module: &str, name: &str) -> Option<String> {
        let sp = Span::default();
        let e = Expr {
            kind: ExprKind::Dot(Box::new(Expr { kind: ExprKind::Var(module.into()), span: sp }), name.into(), sp),
            span: sp,
        };
        self.session.as_mut()?.type_of_expr(&e).ok()
    }

    // ------------------------------------------------------------ hover

    pub fn hover(&mut self, offset: usize, base: Option<&Session>) -> Option<HoverInfo> {
        let code = |s: String| format!("```dp\n{s}\n```");
        let Some(occ) = self.index.at(offset).cloned() else {
            // No syntax tree (a syntax error): fall back on the word under the cursor and the
            // names the checker saw.
            if self.parsed() {
                return None;
            }
            let (lo, hi) = word_at(&self.text, offset)?;
            let w = &self.text[lo..hi];
            let session = self.session.as_ref()?;
            let ty = if w.starts_with(char::is_uppercase) {
                self.constructor_type(w, base)?
            } else {
                session.checker().type_of_name(w).or_else(|| base.and_then(|b| b.checker().type_of_name(w)))?
            };
            return Some(HoverInfo { markdown: code(format!("{w} : {ty}")), span: (lo, hi) });
        };
        let span = (occ.span.start as usize, occ.span.end as usize);
        let def = occ.def.map(|d| self.index.defs[d].clone());
        let text = match (&occ.kind, &def) {
            (_, Some(d)) if d.kind == DefKind::Module => code(format!("module {}", d.name)),
            (_, Some(d)) if d.kind == DefKind::Type => {
                let decl = self
                    .items
                    .as_ref()
                    .and_then(|items| items.get(d.item))
                    .map(|i| self.text[i.span.start as usize..i.span.end as usize].to_string())
                    .unwrap_or_else(|| d.name.clone());
                code(decl)
            }
            (OccKind::Type, None) => code(format!("type {} (built in)", occ.name)),
            (OccKind::Field, _) => return None,
            (OccKind::Member { module }, _) => {
                let ty = self.member_type(module, &occ.name)?;
                with_doc(code(format!("{module}.{} : {ty}", occ.name)), self.member_doc(module, &occ.name))
            }
            (OccKind::Constructor, _) => code(format!("{} : {}", occ.name, self.constructor_type(&occ.name, base)?)),
            (_, Some(d)) => {
                let ty = self.def_type(d)?;
                let what = if d.kind == DefKind::Local { "local" } else { "top-level" };
                let doc =
                    (d.kind == DefKind::TopLevel).then(|| doc_before(&self.text, d.span.start as usize)).flatten();
                with_doc(format!("{}\n\n*{what}*", code(format!("{} : {ty}", d.name))), doc)
            }
            (_, None) => {
                // Not bound in this document: a builtin or a prelude function.
                let ty = base
                    .and_then(|b| b.checker().type_of_name(&occ.name))
                    .or_else(|| self.session.as_ref().and_then(|s| s.checker().type_of_name(&occ.name)))?;
                let doc = stdlib_definition("prelude", &occ.name)
                    .and_then(|(text, span)| doc_before(text, span.start as usize));
                with_doc(format!("{}\n\n*prelude*", code(format!("{} : {ty}", occ.name))), doc)
            }
        };
        Some(HoverInfo { markdown: text, span })
    }

    // ------------------------------------------------------------ definition

    pub fn definition(&self, offset: usize) -> Option<Target> {
        let occ = self.index.at(offset)?;
        if let Some(d) = occ.def {
            return Some(Target { path: None, range: self.range(self.index.defs[d].span) });
        }
        let OccKind::Member { module } = &occ.kind else {
            // Not bound in this document: a prelude function's definition is in the prelude.
            return stdlib_target("prelude", &occ.name);
        };
        if self.imports().iter().any(|t| matches!(t, ImportTarget::Stdlib(n) if n == module)) {
            return stdlib_target(module, &occ.name);
        }
        // A member of an imported file: find its top-level definition there.
        let path = self.items.iter().flatten().find_map(|i| match &i.kind {
            ItemKind::Import(ImportTarget::File(p)) if module_name(p) == *module => Some(self.dir.join(p)),
            _ => None,
        })?;
        let text = std::fs::read_to_string(&path).ok()?;
        let items = parse_program(&text, 0).ok()?;
        let ix = Index::build(&items, text.len());
        let d = ix.defs.iter().rev().find(|d| d.kind == DefKind::TopLevel && d.name == occ.name)?;
        let lines = LineIndex::new(&text);
        let path = std::fs::canonicalize(&path).unwrap_or(path);
        Some(Target { path: Some(path), range: lines.range(&text, d.span.start as usize, d.span.end as usize) })
    }

    // ------------------------------------------------------------ completion

    /// Completions at `offset`. `text` is the document's current text (this analysis may be
    /// of an older version that parsed).
    pub fn completion(&mut self, text: &str, offset: usize) -> Vec<lsp::CompletionItem> {
        let item = |label: &str, kind: lsp::CompletionItemKind, detail: Option<String>| lsp::CompletionItem {
            label: label.to_string(),
            kind: Some(kind),
            detail,
            ..Default::default()
        };
        let value_kind = |t: &Option<String>| {
            if t.as_deref().is_some_and(|t| t.contains("->")) {
                lsp::CompletionItemKind::FUNCTION
            } else {
                lsp::CompletionItemKind::VARIABLE
            }
        };
        let mut out = Vec::new();
        let mut seen = HashSet::new();

        // After `module.`: that module's top-level names.
        let offset = offset.min(text.len());
        let word_start = text[..offset]
            .char_indices()
            .rev()
            .take_while(|(_, c)| is_ident_char(*c))
            .last()
            .map_or(offset, |(i, _)| i);
        if text[..word_start].ends_with('.') {
            let before = &text[..word_start - 1];
            let m_start = before.char_indices().rev().take_while(|(_, c)| is_ident_char(*c)).last().map(|(i, _)| i);
            let Some(m) = m_start.map(|i| &before[i..]) else { return out };
            for (name, ty) in self.module_members(m) {
                if seen.insert(name.clone()) {
                    let k = value_kind(&ty);
                    out.push(item(&name, k, ty));
                }
            }
            return out;
        }

        let locals: Vec<Def> = self.index.locals_at(offset).cloned().collect();
        for d in locals.iter().rev() {
            if seen.insert(d.name.clone()) {
                let ty = self.def_type(d);
                out.push(item(&d.name, value_kind(&ty), ty));
            }
        }
        let modules: Vec<String> =
            self.index.defs.iter().filter(|d| d.kind == DefKind::Module).map(|d| d.name.clone()).collect();
        for m in &modules {
            if seen.insert(m.clone()) {
                out.push(item(m, lsp::CompletionItemKind::MODULE, Some(format!("module {m}"))));
            }
        }
        if let Some(s) = &self.session {
            for (n, t) in s.checker().names_in_scope() {
                if seen.insert(n.to_string()) {
                    let t = Some(t);
                    out.push(item(&n, value_kind(&t), t));
                }
            }
            let mut cons: Vec<_> = s.checker().cons.values().collect();
            cons.sort_by(|a, b| a.name.cmp(&b.name));
            for c in cons {
                if seen.insert(c.name.to_string()) {
                    out.push(item(&c.name, lsp::CompletionItemKind::CONSTRUCTOR, Some(s.checker().show(&c.scheme.ty))));
                }
            }
        }
        // Top-level names after a type error were never checked: offer them untyped.
        for d in &self.index.defs {
            if matches!(d.kind, DefKind::TopLevel | DefKind::Constructor) && seen.insert(d.name.clone()) {
                let k = if d.kind == DefKind::Constructor {
                    lsp::CompletionItemKind::CONSTRUCTOR
                } else {
                    lsp::CompletionItemKind::VARIABLE
                };
                out.push(item(&d.name, k, None));
            }
        }
        for k in KEYWORDS {
            if seen.insert(k.to_string()) {
                out.push(item(k, lsp::CompletionItemKind::KEYWORD, None));
            }
        }
        // Order: locals, then this document's names, then the prelude's, then keywords.
        let local: HashSet<&str> = locals.iter().map(|d| d.name.as_str()).collect();
        let mine: HashSet<&str> = self.index.defs.iter().map(|d| d.name.as_str()).collect();
        for i in &mut out {
            let rank = if i.kind == Some(lsp::CompletionItemKind::KEYWORD) {
                3
            } else if local.contains(i.label.as_str()) {
                0
            } else if mine.contains(i.label.as_str()) {
                1
            } else {
                2
            };
            i.sort_text = Some(format!("{rank}{}", i.label));
        }
        out
    }

    /// The top-level names of the module this document imports as `m`, with their types.
    fn module_members(&mut self, m: &str) -> Vec<(String, Option<String>)> {
        let target = self.imports().into_iter().find(|t| match t {
            ImportTarget::Stdlib(n) => n == m,
            ImportTarget::File(p) => module_name(p) == m,
        });
        let text = match target {
            Some(ImportTarget::Stdlib(n)) => stdlib_source(&n).map(str::to_string),
            Some(ImportTarget::File(p)) => std::fs::read_to_string(self.dir.join(p)).ok(),
            None => None,
        };
        let Some(items) = text.as_deref().and_then(|t| parse_program(t, 0).ok()) else { return Vec::new() };
        let ix = Index::build(&items, text.map_or(0, |t| t.len()));
        let mut names: Vec<String> =
            ix.defs.iter().filter(|d| d.kind == DefKind::TopLevel).map(|d| d.name.clone()).collect();
        names.sort();
        names.dedup();
        names.into_iter().map(|n| (n.clone(), self.member_type(m, &n))).collect()
    }

    /// The doc comment of `module.name`, a member of an imported standard-library module or file.
    fn member_doc(&self, module: &str, name: &str) -> Option<String> {
        let target = self.imports().into_iter().find(|t| match t {
            ImportTarget::Stdlib(n) => n == module,
            ImportTarget::File(p) => module_name(p) == module,
        })?;
        match target {
            ImportTarget::Stdlib(n) => {
                stdlib_definition(&n, name).and_then(|(text, span)| doc_before(text, span.start as usize))
            }
            ImportTarget::File(p) => {
                let text = std::fs::read_to_string(self.dir.join(p)).ok()?;
                let items = parse_program(&text, 0).ok()?;
                let (_, span) = top_level_names(&items).into_iter().rev().find(|(n, _)| n == name)?;
                doc_before(&text, span.start as usize)
            }
        }
    }

    /// The document's imports: from the syntax tree, or while it has a syntax error, from its
    /// tokens.
    fn imports(&self) -> Vec<ImportTarget> {
        if let Some(items) = &self.items {
            return items
                .iter()
                .filter_map(|i| match &i.kind {
                    ItemKind::Import(t) => Some(t.clone()),
                    _ => None,
                })
                .collect();
        }
        let Ok(toks) = lex(&self.text, self.file) else { return Vec::new() };
        toks.windows(2)
            .filter_map(|w| match (&w[0].1, &w[1].1) {
                (Tok::Import, Tok::Ident(n)) => Some(ImportTarget::Stdlib(n.clone())),
                (Tok::Import, Tok::Str(p)) => Some(ImportTarget::File(p.clone())),
                _ => None,
            })
            .collect()
    }

    // ------------------------------------------------------------ document symbols

    #[allow(deprecated)]
    pub fn symbols(&self) -> Vec<lsp::DocumentSymbol> {
        let sym = |name: &str, detail: Option<String>, kind, range, sel, children| lsp::DocumentSymbol {
            name: name.to_string(),
            detail,
            kind,
            tags: None,
            deprecated: None,
            range,
            selection_range: sel,
            children,
        };
        let mut out = Vec::new();
        let Some(items) = &self.items else { return out };
        for (i, it) in items.iter().enumerate() {
            let range = self.range(it.span);
            let defs: Vec<&Def> = self.index.defs.iter().filter(|d| d.item == i).collect();
            match &it.kind {
                ItemKind::Let(p, e) => {
                    let function = matches!(e.kind, ExprKind::Lam(..)) && pat_is_name(p);
                    for d in defs.iter().filter(|d| d.kind == DefKind::TopLevel) {
                        let kind = if function { lsp::SymbolKind::FUNCTION } else { lsp::SymbolKind::VARIABLE };
                        out.push(sym(&d.name, self.def_type(d), kind, range, self.range(d.span), None));
                    }
                }
                ItemKind::LetRec(fs) => {
                    for f in fs {
                        let Some(d) = defs.iter().find(|d| d.kind == DefKind::TopLevel && d.span == f.name_span) else {
                            continue;
                        };
                        let r = self.range(f.name_span.to(f.body.span));
                        out.push(sym(
                            &f.name,
                            self.def_type(d),
                            lsp::SymbolKind::FUNCTION,
                            r,
                            self.range(d.span),
                            None,
                        ));
                    }
                }
                ItemKind::Type(ts) => {
                    for t in ts {
                        let Some(d) = defs.iter().find(|d| d.kind == DefKind::Type && d.name == t.name) else {
                            continue;
                        };
                        let (kind, children) = match &t.body {
                            TypeBody::Variants(vs) => {
                                let children = defs
                                    .iter()
                                    .filter(|c| c.kind == DefKind::Constructor && vs.iter().any(|v| v.name == c.name))
                                    .map(|c| {
                                        let r = self.range(c.span);
                                        sym(&c.name, self.def_type(c), lsp::SymbolKind::ENUM_MEMBER, r, r, None)
                                    })
                                    .collect();
                                (lsp::SymbolKind::ENUM, Some(children))
                            }
                            TypeBody::Alias(_) => (lsp::SymbolKind::STRUCT, None),
                        };
                        let r = if ts.len() == 1 { range } else { self.range(t.span) };
                        out.push(sym(&t.name, None, kind, r, self.range(d.span), children));
                    }
                }
                ItemKind::Import(_) => {
                    if let Some(d) = defs.first() {
                        out.push(sym(&d.name, None, lsp::SymbolKind::MODULE, range, range, None));
                    }
                }
                ItemKind::Expr(_) => {}
            }
        }
        out
    }
}

fn pat_is_name(p: &Pat) -> bool {
    match &p.kind {
        PatKind::Var(_) => true,
        PatKind::Annot(q, _) => pat_is_name(q),
        _ => false,
    }
}

/// The module name an `import "path"` binds: the file stem.
fn module_name(path: &str) -> String {
    Path::new(path).file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_default()
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '\''
}

/// The identifier around a byte offset (a cursor just after it counts).
fn word_at(text: &str, offset: usize) -> Option<(usize, usize)> {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let lo =
        text[..offset].char_indices().rev().take_while(|(_, c)| is_ident_char(*c)).last().map_or(offset, |(i, _)| i);
    let hi = text[offset..].char_indices().find(|(_, c)| !is_ident_char(*c)).map_or(text.len(), |(i, _)| offset + i);
    let w = &text[lo..hi];
    (lo < hi && !w.starts_with(|c: char| c.is_ascii_digit() || c == '\'')).then_some((lo, hi))
}
