//! Byte offsets (what dp's spans hold) to LSP positions (line, UTF-16 code unit) and back.

use lsp_types::{Position, Range};

/// Where each line of a document starts.
pub struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub fn new(text: &str) -> LineIndex {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { starts }
    }

    /// The LSP position of a byte offset (clamped to the text, moved back to a char boundary).
    pub fn position(&self, text: &str, offset: usize) -> Position {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.starts.partition_point(|&s| s <= offset) - 1;
        let character = text[self.starts[line]..offset].encode_utf16().count();
        Position { line: line as u32, character: character as u32 }
    }

    pub fn range(&self, text: &str, start: usize, end: usize) -> Range {
        Range { start: self.position(text, start), end: self.position(text, end.max(start)) }
    }

    /// The byte offset of an LSP position; past the end of a line means its end.
    pub fn offset(&self, text: &str, pos: Position) -> usize {
        let Some(&start) = self.starts.get(pos.line as usize) else { return text.len() };
        let end = self.starts.get(pos.line as usize + 1).map_or(text.len(), |&e| e - 1);
        let line = &text[start..end];
        let line = line.strip_suffix('\r').unwrap_or(line);
        let mut units = 0u32;
        for (i, c) in line.char_indices() {
            if units >= pos.character {
                return start + i;
            }
            units += c.len_utf16() as u32;
        }
        start + line.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_utf16() {
        let text = "let a = 1\nlet é𝄞x = \"ü\"\r\nlast";
        let ix = LineIndex::new(text);
        let x = text.find('x').unwrap();
        let p = ix.position(text, x);
        assert_eq!(p, Position { line: 1, character: 7 }); // é is 1 unit, 𝄞 is 2
        assert_eq!(ix.offset(text, p), x);
        assert_eq!(ix.position(text, text.len()), Position { line: 2, character: 4 });
        assert_eq!(ix.offset(text, Position { line: 1, character: 99 }), text.find('\r').unwrap());
        assert_eq!(ix.offset(text, Position { line: 9, character: 0 }), text.len());
    }
}
