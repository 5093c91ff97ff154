//! printf-style format strings: parsing a format into literal text and directives (the type
//! checker reads the directives to type `printf`/`sprintf`'s arguments) and rendering each
//! directive as C's printf does (`%d %f %e %g %s %b %%`, flags `- 0 + space`, width and
//! precision).

/// What a directive formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conv {
    /// `%d`: an Int.
    Int,
    /// `%f`: a Float in fixed notation.
    Fixed,
    /// `%e`: a Float in exponent notation.
    Exp,
    /// `%g`: a Float in the shorter of the two, trailing zeros removed.
    General,
    /// `%s`: a String.
    Str,
    /// `%b`: a Bool, as `true` or `false` (OCaml's `%b`).
    Bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    pub left: bool,
    pub zero: bool,
    pub plus: bool,
    pub space: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Directive {
    pub flags: Flags,
    pub width: usize,
    pub precision: Option<usize>,
    pub conv: Conv,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    Arg(Directive),
}

/// A format's error: the byte offset of the `%` it concerns, and what is wrong.
#[derive(Debug, PartialEq, Eq)]
pub struct FormatError {
    pub at: usize,
    pub message: String,
}

/// Widths and precisions beyond this are refused (they would only allocate).
const MAX_FIELD: usize = 1000;

pub fn parse(fmt: &str) -> Result<Vec<Piece>, FormatError> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut chars = fmt.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if c != '%' {
            text.push(c);
            continue;
        }
        let mut flags = Flags::default();
        while let Some(&(_, f)) = chars.peek() {
            match f {
                '-' => flags.left = true,
                '0' => flags.zero = true,
                '+' => flags.plus = true,
                ' ' => flags.space = true,
                _ => break,
            }
            chars.next();
        }
        let number = |chars: &mut std::iter::Peekable<std::str::CharIndices>| -> Result<Option<usize>, FormatError> {
            let mut n: Option<usize> = None;
            while let Some(&(_, d)) = chars.peek() {
                let Some(v) = d.to_digit(10) else { break };
                let next = n.unwrap_or(0) * 10 + v as usize;
                if next > MAX_FIELD {
                    return Err(FormatError { at, message: format!("a width or precision above {MAX_FIELD}") });
                }
                n = Some(next);
                chars.next();
            }
            Ok(n)
        };
        let width = number(&mut chars)?.unwrap_or(0);
        let precision = if chars.peek().is_some_and(|&(_, c)| c == '.') {
            chars.next();
            Some(number(&mut chars)?.unwrap_or(0))
        } else {
            None
        };
        let conv = match chars.next() {
            Some((_, '%')) if flags == Flags::default() && width == 0 && precision.is_none() => {
                text.push('%');
                continue;
            }
            Some((_, 'd')) => Conv::Int,
            Some((_, 'f')) => Conv::Fixed,
            Some((_, 'e')) => Conv::Exp,
            Some((_, 'g')) => Conv::General,
            Some((_, 's')) => Conv::Str,
            Some((_, 'b')) => Conv::Bool,
            Some((_, other)) => {
                return Err(FormatError {
                    at,
                    message: format!("unknown directive `%{other}` (known: %d %f %e %g %s %b and %%)"),
                })
            }
            None => {
                return Err(FormatError { at, message: "a `%` at the end of the format (write `%%` for a `%`)".into() })
            }
        };
        if !text.is_empty() {
            pieces.push(Piece::Text(std::mem::take(&mut text)));
        }
        pieces.push(Piece::Arg(Directive { flags, width, precision, conv }));
    }
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(pieces)
}

/// The directives of a parsed format, in order.
pub fn directives(pieces: &[Piece]) -> impl Iterator<Item = &Directive> {
    pieces.iter().filter_map(|p| match p {
        Piece::Arg(d) => Some(d),
        Piece::Text(_) => None,
    })
}

/// One argument, as the directive that formats it expects.
pub enum Arg<'a> {
    Int(i64),
    Float(f64),
    Str(&'a str),
    Bool(bool),
}

/// Renders one directive. The argument must be of the kind the directive formats (the type
/// checker sees to it); another kind is an error naming both.
pub fn render(d: &Directive, arg: Arg) -> Result<String, String> {
    let (sign, body, numeric) = match (d.conv, arg) {
        (Conv::Int, Arg::Int(n)) => {
            let mut digits = n.unsigned_abs().to_string();
            if let Some(p) = d.precision {
                if digits.len() < p {
                    digits = "0".repeat(p - digits.len()) + &digits;
                }
                if p == 0 && n == 0 {
                    digits.clear();
                }
            }
            (sign_of(n < 0, &d.flags), digits, d.precision.is_none())
        }
        (Conv::Fixed | Conv::Exp | Conv::General, Arg::Float(x)) => {
            let p = d.precision.unwrap_or(6);
            let sign = sign_of(x.is_sign_negative() && !x.is_nan(), &d.flags);
            if !x.is_finite() {
                let body = if x.is_nan() { "nan" } else { "inf" };
                (sign, body.to_string(), false)
            } else {
                let a = x.abs();
                let body = match d.conv {
                    Conv::Fixed => format!("{a:.p$}"),
                    Conv::Exp => exp_notation(a, p),
                    _ => general(a, p),
                };
                (sign, body, true)
            }
        }
        (Conv::Str, Arg::Str(s)) => {
            let s = match d.precision {
                Some(p) => s.chars().take(p).collect(),
                None => s.to_string(),
            };
            ("", s, false)
        }
        (Conv::Bool, Arg::Bool(b)) => ("", b.to_string(), false),
        (conv, _) => return Err(format!("the directive for {conv:?} was given another kind of value")),
    };
    let len = sign.chars().count() + body.chars().count();
    if len >= d.width {
        return Ok(format!("{sign}{body}"));
    }
    let pad = d.width - len;
    Ok(if d.flags.left {
        format!("{sign}{body}{}", " ".repeat(pad))
    } else if d.flags.zero && numeric {
        format!("{sign}{}{body}", "0".repeat(pad))
    } else {
        format!("{}{sign}{body}", " ".repeat(pad))
    })
}

fn sign_of(negative: bool, f: &Flags) -> &'static str {
    if negative {
        "-"
    } else if f.plus {
        "+"
    } else if f.space {
        " "
    } else {
        ""
    }
}

/// `a` (finite, not negative) as `d.ddde±XX`, with `p` digits after the point.
fn exp_notation(a: f64, p: usize) -> String {
    let s = format!("{a:.p$e}");
    let (mantissa, exp) = split_exp(&s);
    format!("{mantissa}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.unsigned_abs())
}

fn split_exp(s: &str) -> (&str, i32) {
    match s.split_once('e') {
        Some((m, e)) => (m, e.parse().unwrap_or(0)),
        None => (s, 0),
    }
}

/// C's `%g`: `p` significant digits (at least 1); exponent notation when the exponent is below
/// -4 or at least `p`; trailing zeros (and a trailing point) removed.
fn general(a: f64, p: usize) -> String {
    let p = p.max(1);
    let (_, exp) = split_exp(&format!("{a:.prec$e}", prec = p - 1));
    let trim = |s: String| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if exp < -4 || exp >= p as i32 {
        let s = exp_notation(a, p - 1);
        let (m, e) = s.split_once('e').unwrap_or((&s, ""));
        format!("{}e{e}", trim(m.to_string()))
    } else {
        let decimals = (p as i32 - 1 - exp) as usize;
        trim(format!("{a:.decimals$}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(fmt: &str, arg: Arg) -> String {
        let pieces = parse(fmt).unwrap();
        let d = directives(&pieces).next().unwrap();
        render(d, arg).unwrap()
    }

    #[test]
    fn directives_render_as_c_does() {
        assert_eq!(one("%d", Arg::Int(-42)), "-42");
        assert_eq!(one("%05d", Arg::Int(-42)), "-0042");
        assert_eq!(one("%-5d|", Arg::Int(7)), "7    ");
        assert_eq!(one("%+d", Arg::Int(7)), "+7");
        assert_eq!(one("%.3d", Arg::Int(7)), "007");
        assert_eq!(one("%8.3f", Arg::Float(1.23456)), "   1.235");
        assert_eq!(one("%f", Arg::Float(-0.0)), "-0.000000");
        assert_eq!(one("%e", Arg::Float(1234.5)), "1.234500e+03");
        assert_eq!(one("%.2e", Arg::Float(1e-10)), "1.00e-10");
        assert_eq!(one("%g", Arg::Float(0.0001)), "0.0001");
        assert_eq!(one("%g", Arg::Float(0.00001)), "1e-05");
        assert_eq!(one("%g", Arg::Float(123456789.0)), "1.23457e+08");
        assert_eq!(one("%g", Arg::Float(100.0)), "100");
        // Where Python's `%` departs from C (tests/format.rs compares the rest with it).
        assert_eq!(one("%05f", Arg::Float(f64::INFINITY)), "  inf");
        assert_eq!(one("%07.2d", Arg::Int(25085)), "  25085");
        assert_eq!(one("%.0d", Arg::Int(0)), "");
        assert_eq!(one("%.2s", Arg::Str("hello")), "he");
        assert_eq!(one("%6b", Arg::Bool(true)), "  true");
    }

    #[test]
    fn bad_formats_are_refused() {
        assert!(parse("%q").unwrap_err().message.contains("unknown directive `%q`"));
        assert_eq!(parse("50%").unwrap_err().at, 2);
        assert_eq!(parse("100%% sure").unwrap(), vec![Piece::Text("100% sure".into())]);
    }
}
