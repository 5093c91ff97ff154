//! Documentation of dp code: `///` doc comments, and the standard library's reference (every
//! name with its type and doc comment), for the REPL's `:doc` and `:browse`, `dp doc` and the
//! language server's hover.
//!
//! A doc comment is a run of `///` lines directly above the line that defines a name. The lexer
//! skips it as the ordinary `//` comment it also is, so doc comments change nothing about
//! parsing; they are read from the source text here, by position, next to the parsed items.

use crate::builtins::TABLE;
use crate::diagnostic::Diagnostic;
use crate::session::{stdlib_source, Session};
use crate::source::Span;
use crate::syntax::ast::{Item, ItemKind, Pat, PatKind};
use crate::syntax::parser::parse_program;
use std::path::Path;

/// The `///` lines directly above the line holding byte `offset` of `src`, without their
/// markers (and one following space), joined by newlines; None when there are none.
pub fn doc_before(src: &str, offset: usize) -> Option<String> {
    let line_start = src[..offset.min(src.len())].rfind('\n').map_or(0, |i| i + 1);
    let mut lines: Vec<&str> = Vec::new();
    for line in src[..line_start].lines().rev() {
        let Some(text) = line.trim_start().strip_prefix("///") else { break };
        lines.push(text.strip_prefix(' ').unwrap_or(text).trim_end());
    }
    if lines.is_empty() {
        return None;
    }
    lines.reverse();
    Some(lines.join("\n"))
}

/// The names the top-level items define, each with the span of its defining occurrence.
pub fn top_level_names(items: &[Item]) -> Vec<(String, Span)> {
    fn pattern(p: &Pat, out: &mut Vec<(String, Span)>) {
        match &p.kind {
            PatKind::Var(x) => out.push((x.clone(), p.span)),
            PatKind::Annot(q, _) => pattern(q, out),
            PatKind::Tuple(ps) | PatKind::List(ps) => ps.iter().for_each(|q| pattern(q, out)),
            PatKind::Cons(h, t) => {
                pattern(h, out);
                pattern(t, out)
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for item in items {
        match &item.kind {
            ItemKind::Let(p, _) => pattern(p, &mut out),
            ItemKind::LetRec(defs) => out.extend(defs.iter().map(|d| (d.name.clone(), d.name_span))),
            _ => {}
        }
    }
    out
}

/// One documented name of the standard library.
pub struct DocEntry {
    /// `prelude`, `nn`, `optim`, or `builtins` (the primitives, which have no dp source).
    pub module: &'static str,
    pub name: String,
    /// The type, rendered with its constraints as `:type` shows it.
    pub ty: String,
    pub doc: Option<String>,
    /// Byte range of the defining name in the module's source (empty for builtins).
    pub span: (usize, usize),
}

impl DocEntry {
    /// The name as a program writes it: `nn.linear`, `map`.
    pub fn qualified(&self) -> String {
        match self.module {
            "prelude" | "builtins" => self.name.clone(),
            m => format!("{m}.{}", self.name),
        }
    }
}

/// The modules written in dp, in the order the reference lists them.
pub const MODULES: [&str; 3] = ["prelude", "nn", "optim"];

/// The whole standard library's reference.
pub struct Library {
    pub entries: Vec<DocEntry>,
}

impl Library {
    /// Checks the standard library in a scratch session (the prelude, `nn` and `optim`) and
    /// collects every top-level name with its type and doc comment.
    pub fn load() -> Result<Library, Diagnostic> {
        let mut s = Session::new()?;
        s.set_output(Box::new(std::io::sink()));
        s.eval("<doc>", "import nn\nimport optim\n", Path::new("."))?;
        let mut entries: Vec<DocEntry> = Vec::new();
        for module in MODULES {
            let Some(src) = stdlib_source(module) else { continue };
            let items = parse_program(src, 0)?;
            for (name, span) in top_level_names(&items) {
                let expr = if module == "prelude" { name.clone() } else { format!("{module}.{name}") };
                let Ok(ty) = s.type_of("<doc>", &expr) else { continue };
                let doc = doc_before(src, span.start as usize);
                let entry = DocEntry { module, name, ty, doc, span: (span.start as usize, span.end as usize) };
                // A name defined twice in one module: the later definition is the one in scope.
                match entries.iter_mut().find(|e| e.module == module && e.name == entry.name) {
                    Some(e) => *e = entry,
                    None => entries.push(entry),
                }
            }
        }
        for (name, _, _) in TABLE {
            // A builtin that the prelude redefines (none today) is documented there.
            if entries.iter().any(|e| e.module == "prelude" && e.name == *name) {
                continue;
            }
            if let Ok(ty) = s.type_of("<doc>", name) {
                entries.push(DocEntry { module: "builtins", name: name.to_string(), ty, doc: None, span: (0, 0) });
            }
        }
        Ok(Library { entries })
    }

    /// The entry of a name as a program writes it (`map`, `nn.linear`, `grad`).
    pub fn find(&self, qualified: &str) -> Option<&DocEntry> {
        let (module, name) = match qualified.split_once('.') {
            Some((m, n)) => (Some(m), n),
            None => (None, qualified),
        };
        self.entries.iter().find(|e| match module {
            Some(m) => e.module == m && e.name == name,
            None => (e.module == "prelude" || e.module == "builtins") && e.name == name,
        })
    }

    pub fn module<'a>(&'a self, module: &'a str) -> impl Iterator<Item = &'a DocEntry> + 'a {
        self.entries.iter().filter(move |e| e.module == module)
    }

    /// The reference page `dp doc` writes (docs/stdlib.md).
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "# The dp standard library\n\n\
             <!-- Generated by `dp doc` from the `///` comments of stdlib/*.dp and the builtin table;\n\
             do not edit: a test regenerates it and fails when it differs. -->\n\n\
             The prelude is in scope in every program; `import nn` and `import optim` bring in the\n\
             other modules, whose names are written qualified (`nn.linear`, `optim.adam`). The\n\
             builtins, at the end, are the primitives implemented in the interpreter.\n",
        );
        let intro = |m: &str| match m {
            "prelude" => "Lists, options, strings and small numeric helpers; always in scope.",
            "nn" => "Initialisers, layers, activations, losses and a training loop (`import nn`).",
            "optim" => "Optimisers over any differentiable structure of parameters (`import optim`).",
            _ => "",
        };
        for m in MODULES {
            out.push_str(&format!("\n## {m}\n\n{}\n", intro(m)));
            for e in self.module(m) {
                out.push_str(&format!("\n### `{}`\n\n```\n{} : {}\n```\n\n", e.qualified(), e.qualified(), e.ty));
                out.push_str(e.doc.as_deref().unwrap_or("(undocumented)"));
                out.push('\n');
            }
        }
        out.push_str("\n## builtins\n\nThe primitives (see docs/language.md for what each does).\n\n");
        out.push_str("| name | type |\n|---|---|\n");
        for e in self.module("builtins") {
            out.push_str(&format!("| `{}` | `{}` |\n", e.name, e.ty));
        }
        out
    }
}
