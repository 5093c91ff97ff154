//! CSV files (RFC 4180): `read_csv` (every field as a String) and `load_csv` (a numeric
//! table as a `[rows, columns]` tensor).
//!
//! One reader serves both. It works on the file's bytes and copies each record's fields into
//! one reused buffer (`Record`), so a record costs no allocation once the buffer has grown.
//! `load_csv` first tries a plainer parse that reads each number where it stands in the
//! file's bytes, with no buffer and no String per field (see `load_numeric`), which is what
//! makes it faster than `numpy.loadtxt` (bench/io/csv.sh).
//!
//! The dialect is RFC 4180's, read as Python's `csv` module reads it (the tests compare the
//! two): fields separated by `,`; a record ends at `\r\n`, `\n` or a lone `\r`; a field that
//! starts with `"` is quoted, runs to the next lone `"`, and holds `""` as one `"`, commas and
//! line breaks; a missing final line break is fine; an empty line is a record with no fields.
//! Two things are refused with the line they start on, where Python's default guesses: a
//! quoted field that never closes, and anything but `,` or a line break right after a closing
//! quote (`"ab"c`). A `"` inside an unquoted field is an ordinary character, as in Python.

use crate::builtins::B;
use crate::runtime::value::Value;
use crate::runtime::{FResult, Fault};
use crate::tensor::Tensor;

pub fn call(b: B, arg: &mut dyn FnMut() -> Value) -> FResult<Value> {
    let path = arg().as_str()?;
    let bytes = std::fs::read(path.as_str()).map_err(|e| Fault::new(format!("cannot read `{path}`: {e}")))?;
    let located = |e: CsvError| Fault::new(format!("`{path}`, {e}"));
    match b {
        B::ReadCsv => {
            let rows = read_strings(&bytes).map_err(located)?;
            let rows = rows.into_iter().map(|r| Value::list(r.into_iter().map(Value::str)));
            Ok(Value::list(rows))
        }
        B::LoadCsv => {
            let t = load_numeric(&bytes).map_err(located)?;
            // On the default device (`--device`), as `load_npy`'s tensors are.
            super::tensor::new(Tensor::from_vec(&[t.rows, t.cols], t.values)?)
        }
        other => Err(Fault::internal(format!("{other:?} is not a CSV builtin"))),
    }
}

/// A malformed file: the line (1-based) where the trouble starts, and what it is.
#[derive(Debug, PartialEq)]
pub struct CsvError {
    pub line: usize,
    pub msg: String,
}

impl std::fmt::Display for CsvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.msg)
    }
}

/// One record's fields, unquoted, end to end in one buffer.
#[derive(Default)]
pub struct Record {
    /// The line the record starts on (1-based).
    pub line: usize,
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Record {
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn field(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    pub fn fields(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.len()).map(|i| self.field(i))
    }
}

/// Reads records one at a time from a whole file's bytes.
pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    line: usize,
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Reader<'a> {
        Reader { data, pos: 0, line: 1 }
    }

    /// Fills `rec` with the next record; `false` at the end of the data.
    pub fn next_record(&mut self, rec: &mut Record) -> Result<bool, CsvError> {
        rec.bytes.clear();
        rec.ends.clear();
        rec.line = self.line;
        let data = self.data;
        if self.pos >= data.len() {
            return Ok(false);
        }
        if self.end_of_line() {
            return Ok(true);
        }
        loop {
            if data.get(self.pos) == Some(&b'"') {
                self.quoted(rec)?;
            } else {
                let start = self.pos;
                let len =
                    data[start..].iter().position(|&c| matches!(c, b',' | b'\n' | b'\r')).unwrap_or(data.len() - start);
                rec.bytes.extend_from_slice(&data[start..start + len]);
                self.pos += len;
            }
            rec.ends.push(rec.bytes.len());
            match data.get(self.pos) {
                Some(b',') => self.pos += 1,
                _ => {
                    self.end_of_line();
                    return Ok(true);
                }
            }
        }
    }

    /// Consumes a line break at the cursor, if there is one (or the end of the data).
    fn end_of_line(&mut self) -> bool {
        match self.data.get(self.pos) {
            None => true,
            Some(b'\n') => {
                self.pos += 1;
                self.line += 1;
                true
            }
            Some(b'\r') => {
                self.pos += 1;
                if self.data.get(self.pos) == Some(&b'\n') {
                    self.pos += 1;
                }
                self.line += 1;
                true
            }
            _ => false,
        }
    }

    /// A quoted field, the cursor on its opening quote; leaves the cursor after the closing one.
    fn quoted(&mut self, rec: &mut Record) -> Result<(), CsvError> {
        let opened = self.line;
        self.pos += 1;
        let data = self.data;
        loop {
            let rest = &data[self.pos..];
            let Some(q) = rest.iter().position(|&c| c == b'"') else {
                return Err(CsvError { line: opened, msg: "a quoted field starts here and is never closed".into() });
            };
            let run = &rest[..q];
            self.line += line_breaks(run);
            rec.bytes.extend_from_slice(run);
            self.pos += q + 1;
            match data.get(self.pos) {
                Some(b'"') => {
                    rec.bytes.push(b'"');
                    self.pos += 1;
                }
                None | Some(b',' | b'\n' | b'\r') => return Ok(()),
                Some(&c) => {
                    let shown =
                        if c.is_ascii_graphic() { format!("`{}`", c as char) } else { format!("byte {c:#04x}") };
                    return Err(CsvError {
                        line: self.line,
                        msg: format!(
                            "a closing quote is followed by {shown}; expected `,` or the end of the line (write `\"\"` for a quote inside a quoted field)"
                        ),
                    });
                }
            }
        }
    }
}

/// Line breaks in a run of field text, counted as the reader counts them (`\r\n` once).
fn line_breaks(run: &[u8]) -> usize {
    let mut n = 0;
    for (i, &c) in run.iter().enumerate() {
        if c == b'\n' || (c == b'\r' && run.get(i + 1) != Some(&b'\n')) {
            n += 1;
        }
    }
    n
}

/// `read_csv`: every record, every field as text (which must be UTF-8).
pub fn read_strings(data: &[u8]) -> Result<Vec<Vec<String>>, CsvError> {
    let mut reader = Reader::new(data);
    let mut rec = Record::default();
    let mut rows = Vec::new();
    while reader.next_record(&mut rec)? {
        let row = rec
            .fields()
            .enumerate()
            .map(|(i, f)| {
                std::str::from_utf8(f)
                    .map(str::to_owned)
                    .map_err(|_| CsvError { line: rec.line, msg: format!("field {} is not valid UTF-8 text", i + 1) })
            })
            .collect::<Result<Vec<_>, _>>()?;
        rows.push(row);
    }
    Ok(rows)
}

fn columns(n: usize) -> String {
    if n == 1 {
        "1 column".into()
    } else {
        format!("{n} columns")
    }
}

/// A numeric table, row-major.
#[derive(Debug, PartialEq)]
pub struct Table {
    pub rows: usize,
    pub cols: usize,
    pub values: Vec<f32>,
}

/// A field as a number: surrounding spaces and tabs ignored; the spellings of Rust's float
/// parser (`1`, `-2.5`, `1e-3`, `.5`, `inf`, `nan`). Correctly rounded to float32 from the
/// decimal text itself, not through float64.
fn number(field: &[u8]) -> Option<f32> {
    let field = field.trim_ascii();
    std::str::from_utf8(field).ok()?.parse::<f32>().ok()
}

/// `load_csv`: a table of numbers. Empty lines are skipped; the first record is a header (and
/// skipped) when none of its fields is a number; after that every field must be a number and
/// every record as long as the first.
///
/// Two parses give that one result. The plain one reads each number where it stands in the
/// file's bytes (no record buffer), in parts on threads for a large file; it covers the common
/// file (no quotes after the header, `\n` or `\r\n` line ends, numbers in every field) and
/// gives up on anything else, errors included. The general one (`parse_numeric`) then reads
/// the file record by record and names the line, row and column of an error.
pub fn load_numeric(data: &[u8]) -> Result<Table, CsvError> {
    match load_plain(data) {
        Some(table) => Ok(table),
        None => parse_numeric(data),
    }
}

/// Parts of at least this many bytes are worth a thread of their own.
const PART_BYTES: usize = 4 << 20;

/// The plain parse: the header (which may be quoted) by the record reader, the body by
/// `parse_plain`, split at line ends into parts on `DP_NUM_THREADS` threads when it is large
/// (with no quotes no record spans a `\n`, and a part that meets a quote gives up).
/// `None` where the plain parse gives up, or where the parts disagree on the number of columns.
fn load_plain(data: &[u8]) -> Option<Table> {
    let mut reader = Reader::new(data);
    let mut rec = Record::default();
    let (start, header) = loop {
        let at = reader.pos;
        if !reader.next_record(&mut rec).ok()? {
            return Some(Table { rows: 0, cols: 0, values: Vec::new() });
        }
        if is_blank(&rec) {
            continue;
        }
        if rec.fields().all(|f| number(f).is_none()) {
            break (reader.pos, Some(rec.len()));
        }
        break (at, None);
    };
    let body = &data[start..];
    let parts = dp_tensor::cpu::gemm::max_threads().min(body.len() / PART_BYTES);
    if parts < 2 {
        return parse_plain(body, header);
    }
    let mut bounds = vec![0];
    for k in 1..parts {
        let from = (body.len() * k / parts).max(*bounds.last()?);
        let end = body[from..].iter().position(|&c| c == b'\n').map_or(body.len(), |i| from + i + 1);
        bounds.push(end);
    }
    bounds.push(body.len());
    let tables: Vec<Option<Table>> = std::thread::scope(|scope| {
        let handles: Vec<_> = bounds
            .windows(2)
            .map(|w| {
                let part = &body[w[0]..w[1]];
                std::thread::Builder::new().spawn_scoped(scope, move || parse_plain(part, header))
            })
            .collect();
        handles.into_iter().map(|h| h.ok()?.join().ok().flatten()).collect()
    });
    let tables: Vec<Table> = tables.into_iter().collect::<Option<_>>()?;
    // Without a header each part takes its width from its own first row; they must agree.
    let cols = tables.iter().find(|t| t.rows > 0).map_or(0, |t| t.cols);
    if tables.iter().any(|t| t.rows > 0 && t.cols != cols) {
        return None;
    }
    let rows: usize = tables.iter().map(|t| t.rows).sum();
    let mut tables = tables.into_iter();
    // The first part's buffer grows to hold the rest, which saves one copy of it.
    let mut values = tables.next()?.values;
    values.reserve_exact((rows * cols).saturating_sub(values.len()));
    for t in tables {
        values.extend_from_slice(&t.values);
    }
    Some(Table { rows, cols: header.unwrap_or(cols), values })
}

/// An empty line, or one of spaces: skipped.
fn is_blank(rec: &Record) -> bool {
    rec.is_empty() || (rec.len() == 1 && rec.field(0).trim_ascii().is_empty())
}

/// A body of lines of numbers, read without a record buffer. `cols` is the header's width, if
/// there was one. `None` (give up) on a quote, a lone `\r`, a field that is not a number, a
/// number beyond float32's range or a row of another width: the general parse decides those.
fn parse_plain(body: &[u8], mut cols: Option<usize>) -> Option<Table> {
    let mut values: Vec<f32> = Vec::new();
    let (mut rows, mut pos) = (0usize, 0usize);
    while pos < body.len() {
        let (line_start, row_start) = (pos, values.len());
        loop {
            pos = match field_number(body, pos) {
                Some((x, end)) => {
                    values.push(x);
                    end
                }
                None => {
                    let end = body[pos..]
                        .iter()
                        .position(|&c| matches!(c, b',' | b'\n' | b'\r'))
                        .map_or(body.len(), |i| pos + i);
                    let field = &body[pos..end];
                    let alone = values.len() == row_start && body.get(end) != Some(&b',');
                    if !(alone && field.trim_ascii().is_empty()) {
                        // The general parse errs on a value out of range; `inf` is rare.
                        values.push(number(field).filter(|x| x.is_finite())?);
                    }
                    end
                }
            };
            match body.get(pos) {
                Some(b',') => pos += 1,
                Some(b'\n') => {
                    pos += 1;
                    break;
                }
                Some(b'\r') if body.get(pos + 1) == Some(&b'\n') => {
                    pos += 2;
                    break;
                }
                None => break,
                Some(_) => return None,
            }
        }
        let len = values.len() - row_start;
        if len == 0 {
            continue;
        }
        if len != *cols.get_or_insert(len) {
            return None;
        }
        if rows == 0 {
            // A guess from the first row's size (a sixteenth over); a wrong one costs a regrowth.
            let lines = body.len() / (pos - line_start).max(1);
            values.reserve(len * (lines + lines / 16 + 1));
        }
        rows += 1;
    }
    Some(Table { rows, cols: cols.unwrap_or(0), values })
}

/// A number at `pos` in the common spelling, with spaces or tabs around it, that ends its
/// field: its value and the position after it. `None` where `number` must decide.
fn field_number(body: &[u8], mut pos: usize) -> Option<(f32, usize)> {
    while matches!(body.get(pos), Some(b' ' | b'\t')) {
        pos += 1;
    }
    let (x, used) = short_decimal(&body[pos..])?;
    pos += used;
    while matches!(body.get(pos), Some(b' ' | b'\t')) {
        pos += 1;
    }
    matches!(body.get(pos), None | Some(b',' | b'\n' | b'\r')).then_some((x, pos))
}

/// Powers of ten that float32 holds exactly (5^10 < 2^24).
const POW10: [f32; 11] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10];

/// A decimal `[+-]digits[.digits][(e|E)[+-]digits]` at the start of `s` whose significand
/// (its digits as an integer) is at most 2^24 and whose power of ten is within ±10: its
/// float32 value and length. Both are exact in float32, so one multiplication or division
/// rounds correctly, to the value `str::parse::<f32>` gives (Clinger's fast path, which std
/// takes too, but here without a separate pass to find the field and check its UTF-8).
/// `None` for anything else (more digits, `inf`, `nan`, ...), which std's parser handles.
fn short_decimal(s: &[u8]) -> Option<(f32, usize)> {
    let digit = |i: usize| s.get(i).map(|c| c.wrapping_sub(b'0')).filter(|&d| d <= 9);
    let neg = s.first() == Some(&b'-');
    let mut i = usize::from(matches!(s.first(), Some(b'-' | b'+')));
    let (mut m, mut digits, mut frac) = (0u64, 0u32, 0i32);
    while let Some(d) = digit(i) {
        // More than 19 digits may wrap; they are refused below before `m` is used.
        m = m.wrapping_mul(10).wrapping_add(u64::from(d));
        digits += 1;
        i += 1;
    }
    if s.get(i) == Some(&b'.') {
        i += 1;
        while let Some(d) = digit(i) {
            m = m.wrapping_mul(10).wrapping_add(u64::from(d));
            digits += 1;
            frac += 1;
            i += 1;
        }
    }
    if digits == 0 || digits > 19 {
        return None;
    }
    let mut exp = 0i32;
    if matches!(s.get(i), Some(b'e' | b'E')) {
        i += 1;
        let eneg = s.get(i) == Some(&b'-');
        i += usize::from(matches!(s.get(i), Some(b'-' | b'+')));
        let start = i;
        while let Some(d) = digit(i) {
            if i - start == 4 {
                return None;
            }
            exp = exp * 10 + i32::from(d);
            i += 1;
        }
        if i == start {
            return None;
        }
        if eneg {
            exp = -exp;
        }
    }
    let e = exp - frac;
    if m > 1 << 24 || !(-10..=10).contains(&e) {
        return None;
    }
    let x = m as f32;
    let x = if e >= 0 { x * POW10[e as usize] } else { x / POW10[e.unsigned_abs() as usize] };
    Some((if neg { -x } else { x }, i))
}

/// The general parse, record by record, which locates every error.
fn parse_numeric(data: &[u8]) -> Result<Table, CsvError> {
    let mut reader = Reader::new(data);
    let mut rec = Record::default();
    let mut values: Vec<f32> = Vec::new();
    let (mut rows, mut cols) = (0usize, None::<usize>);
    let mut first = true;
    while reader.next_record(&mut rec)? {
        if is_blank(&rec) {
            continue;
        }
        if std::mem::take(&mut first) && rec.fields().all(|f| number(f).is_none()) {
            cols = Some(rec.len());
            continue;
        }
        let want = *cols.get_or_insert(rec.len());
        if rec.len() != want {
            return Err(CsvError {
                line: rec.line,
                msg: format!("row {} has {}, the first row has {want}", rows + 1, columns(rec.len())),
            });
        }
        if values.is_empty() {
            // A guess from the first record's size; a wrong one only costs a regrowth.
            values.reserve(want * (data.len() / (reader.pos.max(1))).max(1));
        }
        for (i, f) in rec.fields().enumerate() {
            let Some(x) = number(f) else {
                return Err(CsvError {
                    line: rec.line,
                    msg: format!(
                        "row {}, column {}: `{}` is not a number",
                        rows + 1,
                        i + 1,
                        String::from_utf8_lossy(&f[..f.len().min(40)])
                    ),
                });
            };
            if x.is_infinite() && !f.trim_ascii().iter().any(|c| c.is_ascii_alphabetic() && !matches!(c, b'e' | b'E')) {
                return Err(CsvError {
                    line: rec.line,
                    msg: format!(
                        "row {}, column {}: {} is beyond float32's range: dp's tensors are float32",
                        rows + 1,
                        i + 1,
                        String::from_utf8_lossy(f.trim_ascii())
                    ),
                });
            }
            values.push(x);
        }
        rows += 1;
    }
    Ok(Table { rows, cols: cols.unwrap_or(0), values })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(s: &str) -> Vec<Vec<String>> {
        read_strings(s.as_bytes()).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    fn rows(v: &[&[&str]]) -> Vec<Vec<String>> {
        v.iter().map(|r| r.iter().map(|f| f.to_string()).collect()).collect()
    }

    #[test]
    fn quoting_as_rfc_4180_says() {
        assert_eq!(strings("a,b\r\n1,2\r\n"), rows(&[&["a", "b"], &["1", "2"]]));
        assert_eq!(strings("a,b\n1,2"), rows(&[&["a", "b"], &["1", "2"]]));
        assert_eq!(strings("\"x, y\",\"say \"\"hi\"\"\"\n"), rows(&[&["x, y", "say \"hi\""]]));
        assert_eq!(strings("\"two\nlines\",z\n"), rows(&[&["two\nlines", "z"]]));
        assert_eq!(strings("a,\n,\n\"\"\n"), rows(&[&["a", ""], &["", ""], &[""]]));
        assert_eq!(strings("a\n\nb\n"), rows(&[&["a"], &[], &["b"]]));
        assert_eq!(strings("a\rb\r"), rows(&[&["a"], &["b"]]));
        assert_eq!(strings(""), rows(&[]));
        assert_eq!(strings("ab\"c\n"), rows(&[&["ab\"c"]]));
    }

    #[test]
    fn malformed_files_name_the_line() {
        let e = read_strings(b"a,b\n1,\"open\n\nrest").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.msg.contains("never closed"), "{e}");
        let e = read_strings(b"x\n\"a\nb\"c,d\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.msg.contains("`c`"), "{e}");
        let e = read_strings(b"ok\n\xff\xfe\n").unwrap_err();
        assert_eq!(e.line, 2);
    }

    #[test]
    fn numeric_tables() {
        let t = load_numeric(b"x,y\n1,2.5\r\n-3,\" 4e1 \"\n\n").unwrap();
        assert_eq!(t, Table { rows: 2, cols: 2, values: vec![1.0, 2.5, -3.0, 40.0] });
        let t = load_numeric(b"1,2\n").unwrap();
        assert_eq!((t.rows, t.cols), (1, 2));
        assert_eq!(load_numeric(b"").unwrap(), Table { rows: 0, cols: 0, values: vec![] });
        assert_eq!(load_numeric(b"a,b,c\n").unwrap(), Table { rows: 0, cols: 3, values: vec![] });
        // 0.1 rounded once, to float32, from the text.
        assert_eq!(load_numeric(b"0.1").unwrap().values, vec![0.1f32]);
        assert!(load_numeric(b"inf,-nan\n").unwrap().values[0].is_infinite());
    }

    #[test]
    fn bad_numeric_tables_name_row_and_column() {
        let e = load_numeric(b"a,b\n1,2\n3,4,5\n").unwrap_err();
        assert_eq!((e.line, e.msg.as_str()), (3, "row 2 has 3 columns, the first row has 2"));
        let e = load_numeric(b"1,2\n3,x\n").unwrap_err();
        assert_eq!((e.line, e.msg.as_str()), (2, "row 2, column 2: `x` is not a number"));
        // A first row with some numbers is data, not a header: its text is an error.
        let e = load_numeric(b"id,2\n").unwrap_err();
        assert_eq!(e.msg, "row 1, column 1: `id` is not a number");
        let e = load_numeric(b"1e39\n").unwrap_err();
        assert!(e.msg.contains("beyond float32's range"), "{e}");
        assert!(load_numeric(b"1,\n").is_err());
    }

    #[test]
    fn a_large_file_in_parts_is_the_sequential_parse() {
        // 3 × PART_BYTES of rows, so the parallel path splits it wherever threads allow.
        let mut text = String::from("a,b,c\n");
        let mut i = 0u32;
        while text.len() < 3 * PART_BYTES {
            text += &format!("{}.5,{}e-3,-{}\r\n", i, i % 977, i % 13);
            if i.is_multiple_of(1000) {
                text += "\n";
            }
            i += 1;
        }
        let data = text.as_bytes();
        let whole = load_numeric(data).unwrap();
        assert_eq!(whole, parse_numeric(data).unwrap());
        assert_eq!((whole.rows, whole.cols), (i as usize, 3));
        assert_eq!(whole.values[3 * (i as usize - 1)], (i - 1) as f32 + 0.5);
        // An error late in the file names its line and row, as the sequential parse does.
        let bad = text.replacen(&format!("{}.5,", i - 2), &format!("{}.5,x", i - 2), 1);
        let (a, b) = (load_numeric(bad.as_bytes()).unwrap_err(), parse_numeric(bad.as_bytes()).unwrap_err());
        assert_eq!((a.line, a.msg.clone()), (b.line, b.msg));
        assert!(a.msg.contains(&format!("row {}, column 2", i - 1)), "{a}");
        // A quote anywhere sends the file to the sequential parse, which reads it the same way.
        let quoted = text.replacen(&format!("{}.5,", i - 2), &format!("\"{}.5\",", i - 2), 1);
        assert_ne!(quoted, text);
        assert_eq!(load_numeric(quoted.as_bytes()).unwrap(), whole);
        // So does a row of another length.
        let short = text.replacen(&format!("{}.5,", i - 3), "", 1);
        assert_eq!(load_numeric(short.as_bytes()).unwrap_err().msg, parse_numeric(short.as_bytes()).unwrap_err().msg);
    }

    /// A small deterministic generator (xorshift), so the test needs no crate.
    fn next(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn short_decimals_round_as_std_does() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut taken = 0;
        for n in 0..400_000 {
            let r = next(&mut state);
            // Significands around 2^24 (the limit) and of every length up to 20 digits.
            let m = match n % 4 {
                0 => (1 << 24) - 64 + r % 128,
                1 => r % 10u64.pow(1 + (r >> 40) as u32 % 8),
                _ => r >> (r % 64),
            };
            let digits = m.to_string();
            let point = (r >> 20) as usize % (digits.len() + 2);
            let mut text = String::new();
            if r & 1 == 1 {
                text.push('-');
            } else if r & 2 == 2 {
                text.push('+');
            }
            match point {
                0 => text += &digits,
                p if p > digits.len() => text += &format!("{digits}."),
                p => text += &format!("{}.{}", &digits[..p - 1], &digits[p - 1..]),
            }
            if r & 4 == 4 {
                let e = (r >> 8) as i64 % 31 - 15;
                text += &format!(
                    "{}{}{e:0w$}",
                    if r & 8 == 8 { 'e' } else { 'E' },
                    if e >= 0 && r & 16 == 16 { "+" } else { "" },
                    w = (r >> 50) as usize % 4
                );
            }
            let want: f32 = text.parse().unwrap();
            if let Some((x, len)) = short_decimal(text.as_bytes()) {
                assert_eq!((x.to_bits(), len), (want.to_bits(), text.len()), "{text}");
                taken += 1;
            }
        }
        assert!(taken > 100_000, "{taken}");
        for (text, taken) in [
            (".5", true),
            ("5.", true),
            (".", false),
            ("-", false),
            ("e5", false),
            ("1e", false),
            ("1e+", false),
            ("1e99999", false),
            ("inf", false),
            ("16777217", false),
            ("1e11", false),
        ] {
            assert_eq!(short_decimal(text.as_bytes()).is_some(), taken, "{text}");
        }
    }

    #[test]
    fn the_plain_parse_gives_up_where_the_general_one_decides() {
        // Each of these leaves the plain parse; the result (or error) is the general parse's.
        for text in [
            "1,2\r3,4\n",
            "1\r,2\n",
            "1,2\n\"3\",4\n",
            "a,b\n1,\"2,5\"\n",
            "1,inf\n",
            "1,2\n3\n",
            "1,,2\n",
            "1,2,\n",
            " , \n",
            "1,2\n\x0c3,4\n",
        ] {
            assert!(load_plain(text.as_bytes()).is_none_or(|t| Ok(t) == parse_numeric(text.as_bytes())), "{text:?}");
            assert_eq!(load_numeric(text.as_bytes()), parse_numeric(text.as_bytes()), "{text:?}");
        }
        // A quoted header, blank lines, spaces and `\r\n` stay on the plain parse.
        let text = "\"x, 1\",y\r\n\r\n 1.5 ,\t-2e-3\r\n  \n3,4";
        let t = load_plain(text.as_bytes()).unwrap();
        assert_eq!(t, Table { rows: 2, cols: 2, values: vec![1.5, -2e-3, 3.0, 4.0] });
        assert_eq!(Ok(t), parse_numeric(text.as_bytes()));
    }
}
