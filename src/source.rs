//! Source files and spans. Every AST node and every diagnostic points into a `SourceMap`.

use std::rc::Rc;

/// A byte range in one source file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Span {
    pub file: u32,
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(file: u32, start: usize, end: usize) -> Span {
        Span { file, start: start as u32, end: end as u32 }
    }
    /// The smallest span covering both (same file assumed).
    pub fn to(self, other: Span) -> Span {
        Span { file: self.file, start: self.start.min(other.start), end: self.end.max(other.end) }
    }
}

pub struct SourceFile {
    pub name: String,
    pub text: Rc<str>,
}

#[derive(Default)]
pub struct SourceMap {
    files: Vec<SourceFile>,
}

impl SourceMap {
    pub fn add(&mut self, name: impl Into<String>, text: impl Into<Rc<str>>) -> u32 {
        self.files.push(SourceFile { name: name.into(), text: text.into() });
        (self.files.len() - 1) as u32
    }
    pub fn get(&self, id: u32) -> &SourceFile {
        &self.files[id as usize]
    }
    pub fn files(&self) -> &[SourceFile] {
        &self.files
    }
    /// 1-based line and column of a byte offset.
    pub fn line_col(&self, span: Span) -> (usize, usize) {
        let text = &self.get(span.file).text;
        let upto = &text[..(span.start as usize).min(text.len())];
        let line = upto.matches('\n').count() + 1;
        let col = upto.rfind('\n').map_or(upto.chars().count(), |i| upto[i + 1..].chars().count()) + 1;
        (line, col)
    }
}

/// Reads a source file. Source is UTF-8: a file that is not says where, as `line:column` of
/// the first byte that is not (columns count characters, as in reports).
pub fn read_source(path: &std::path::Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|e| {
        let bytes = e.as_bytes();
        let at = e.utf8_error().valid_up_to();
        let good = std::str::from_utf8(&bytes[..at]).unwrap_or_default();
        let line = good.matches('\n').count() + 1;
        let column = good.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        format!(
            "not valid UTF-8 at {line}:{column} (byte 0x{:02x}): dp source files are UTF-8 (re-save the file as UTF-8)",
            bytes[at]
        )
    })
}
