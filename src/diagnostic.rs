//! One error type for every phase, rendered in one place with ariadne (DESIGN.md principle 7).

use crate::source::{SourceMap, Span};
use ariadne::{Color, Config, Label, Report, ReportKind};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Lex,
    Parse,
    Type,
    Runtime,
    /// A broken invariant of dp found at run time (`runtime::FaultKind::Internal`): reported
    /// as dp's bug, never as an error of the program.
    Internal,
    Io,
}

#[derive(Clone, Debug)]
pub struct Diagnostic {
    pub severity: Severity,
    pub phase: Phase,
    pub message: String,
    /// The first label is the primary location.
    pub labels: Vec<(Span, String)>,
    pub notes: Vec<String>,
    pub help: Option<String>,
    /// Run-time errors: the dp call stack, innermost first (function name, call site).
    pub trace: Vec<(String, Span)>,
    /// Further independent errors of the same check (a file's later items), shown after it.
    pub more: Vec<Diagnostic>,
}

impl Diagnostic {
    pub fn error(phase: Phase, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            phase,
            message: message.into(),
            labels: Vec::new(),
            notes: Vec::new(),
            help: None,
            trace: Vec::new(),
            more: Vec::new(),
        }
    }

    /// The first of `ds` carrying the others as `more` (None when `ds` is empty).
    pub fn collect(mut ds: Vec<Diagnostic>) -> Option<Diagnostic> {
        if ds.is_empty() {
            return None;
        }
        let mut first = ds.remove(0);
        first.more = ds;
        Some(first)
    }

    /// This diagnostic and those it carries, each on its own.
    pub fn flatten(mut self) -> Vec<Diagnostic> {
        let more = std::mem::take(&mut self.more);
        let mut v = vec![self];
        v.extend(more.into_iter().flat_map(Diagnostic::flatten));
        v
    }
    pub fn warning(phase: Phase, message: impl Into<String>) -> Diagnostic {
        Diagnostic { severity: Severity::Warning, ..Diagnostic::error(phase, message) }
    }
    pub fn label(mut self, span: Span, text: impl Into<String>) -> Diagnostic {
        self.labels.push((span, text.into()));
        self
    }
    pub fn note(mut self, text: impl Into<String>) -> Diagnostic {
        self.notes.push(text.into());
        self
    }
    pub fn help(mut self, text: impl Into<String>) -> Diagnostic {
        self.help = Some(text.into());
        self
    }
    pub fn primary_span(&self) -> Option<Span> {
        self.labels.first().map(|l| l.0)
    }

    fn title(&self) -> String {
        let phase = match self.phase {
            Phase::Lex => "lexical error",
            Phase::Parse => "syntax error",
            Phase::Type => "type error",
            Phase::Runtime => "run-time error",
            Phase::Internal => "internal error",
            Phase::Io => "error",
        };
        match self.severity {
            Severity::Error => format!("{phase}: {}", self.message),
            Severity::Warning => self.message.clone(),
        }
    }

    /// Renders the report; `color` only when writing to a terminal.
    pub fn render(&self, sources: &SourceMap, color: bool) -> String {
        let mut text = self.render_one(sources, color);
        for d in &self.more {
            text.push_str(&d.render(sources, color));
        }
        text
    }

    fn render_one(&self, sources: &SourceMap, color: bool) -> String {
        let mut out = Vec::new();
        let kind = match self.severity {
            Severity::Error => ReportKind::Error,
            Severity::Warning => ReportKind::Warning,
        };
        let name = |id: u32| sources.get(id).name.clone();
        let Some(primary) = self.primary_span() else {
            let mut s =
                format!("{}: {}\n", if self.severity == Severity::Error { "Error" } else { "Warning" }, self.title());
            for n in &self.notes {
                s.push_str(&format!("  note: {n}\n"));
            }
            if let Some(h) = &self.help {
                s.push_str(&format!("  help: {h}\n"));
            }
            return s;
        };
        let range = |sp: Span| {
            let len = sources.get(sp.file).text.len();
            let start = (sp.start as usize).min(len);
            start..(sp.end as usize).clamp(start, len)
        };
        let mut report = Report::build(kind, (name(primary.file), range(primary)))
            .with_config(Config::default().with_color(color).with_index_type(ariadne::IndexType::Byte))
            .with_message(self.title());
        let colors = [Color::Red, Color::Blue, Color::Magenta, Color::Green];
        for (i, (sp, text)) in self.labels.iter().enumerate() {
            let mut label = Label::new((name(sp.file), range(*sp))).with_message(text);
            if color {
                label = label.with_color(colors[i % colors.len()]);
            }
            report = report.with_label(label);
        }
        for n in &self.notes {
            report = report.with_note(n);
        }
        if let Some(h) = &self.help {
            report = report.with_help(h);
        }
        if !self.trace.is_empty() {
            let mut t = String::from("dp call stack (innermost first):");
            for (f, sp) in self.trace.iter().take(20) {
                let (l, c) = sources.line_col(*sp);
                t.push_str(&format!("\n    in {f} at {}:{l}:{c}", sources.get(sp.file).name));
            }
            if self.trace.len() > 20 {
                t.push_str(&format!("\n    … {} more frames", self.trace.len() - 20));
            }
            report = report.with_note(t);
        }
        let cache = ariadne::sources(sources.files().iter().map(|f| (f.name.clone(), f.text.to_string())));
        if report.finish().write(cache, &mut out).is_err() {
            return format!("{}\n", self.title());
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

pub type Result<T> = std::result::Result<T, Diagnostic>;
