//! The logos lexer, plus the layout pass that marks where top-level items begin.

use crate::diagnostic::{Diagnostic, Phase};
use crate::source::Span;
use logos::Logos;

#[derive(Debug, Clone, PartialEq, Default)]
pub enum LexError {
    #[default]
    Unexpected,
    IntTooLarge,
    UnterminatedComment,
    UnterminatedString,
    BadEscape(char),
}

#[derive(Logos, Debug, Clone, PartialEq)]
#[logos(error = LexError)]
#[logos(skip r"[ \t\r\n\f]+")]
pub enum Tok {
    #[regex(r"//[^\n]*", logos::skip, allow_greedy = true)]
    #[token("/*", block_comment)]
    Comment,

    #[regex(r"[0-9]+", |lex| lex.slice().parse::<i64>().map_err(|_| LexError::IntTooLarge))]
    Int(i64),
    #[regex(r"[0-9]+\.[0-9]*([eE][+-]?[0-9]+)?", |lex| lex.slice().parse::<f64>().ok())]
    #[regex(r"[0-9]+[eE][+-]?[0-9]+", |lex| lex.slice().parse::<f64>().ok())]
    Float(f64),
    #[token("\"", string_literal)]
    Str(String),
    #[regex(r"[a-z_][A-Za-z0-9_']*", |lex| lex.slice().to_string())]
    Ident(String),
    #[regex(r"[A-Z][A-Za-z0-9_']*", |lex| lex.slice().to_string())]
    UIdent(String),

    #[token("let")]
    Let,
    #[token("rec")]
    Rec,
    #[token("and")]
    And,
    #[token("in")]
    In,
    #[token("fun")]
    Fun,
    #[token("if")]
    If,
    #[token("then")]
    Then,
    #[token("else")]
    Else,
    #[token("match")]
    Match,
    #[token("with")]
    With,
    #[token("type")]
    Type,
    #[token("import")]
    Import,
    #[token("true")]
    True,
    #[token("false")]
    False,
    #[token("not")]
    Not,
    #[token("ref")]
    Ref,

    #[token("_", priority = 3)]
    Underscore,
    #[token("(")]
    LParen,
    #[token(")")]
    RParen,
    #[token("[")]
    LBracket,
    #[token("]")]
    RBracket,
    #[token("{")]
    LBrace,
    #[token("}")]
    RBrace,
    #[token(",")]
    Comma,
    #[token(";")]
    Semi,
    #[token(":")]
    Colon,
    #[token(".")]
    Dot,
    #[token("->")]
    Arrow,
    #[token("|")]
    Bar,
    #[token("=")]
    Eq,
    #[token(":=")]
    Assign,
    #[token("::")]
    ColonColon,
    #[token("++")]
    PlusPlus,
    #[token("+")]
    Plus,
    #[token("-")]
    Minus,
    #[token("*")]
    Star,
    #[token("/")]
    Slash,
    #[token("%")]
    Percent,
    #[token("**")]
    StarStar,
    #[token("@")]
    At,
    #[token("==")]
    EqEq,
    #[token("!=")]
    NotEq,
    #[token("<")]
    Lt,
    #[token("<=")]
    Le,
    #[token(">")]
    Gt,
    #[token(">=")]
    Ge,
    #[token("&&")]
    AndAnd,
    #[token("||")]
    OrOr,
    #[token("|>")]
    Pipe,
    #[token("!")]
    Bang,

    /// Inserted by the layout pass before a token that starts a new top-level item.
    ItemSep,
}

fn block_comment(lex: &mut logos::Lexer<Tok>) -> logos::FilterResult<(), LexError> {
    let rest = lex.remainder().as_bytes();
    let mut depth = 1usize;
    let mut i = 0;
    while i < rest.len() {
        if rest[i] == b'/' && rest.get(i + 1) == Some(&b'*') {
            depth += 1;
            i += 2;
        } else if rest[i] == b'*' && rest.get(i + 1) == Some(&b'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                lex.bump(i);
                return logos::FilterResult::Skip;
            }
        } else {
            i += 1;
        }
    }
    lex.bump(rest.len());
    logos::FilterResult::Error(LexError::UnterminatedComment)
}

fn string_literal(lex: &mut logos::Lexer<Tok>) -> Result<String, LexError> {
    let rest = lex.remainder();
    let mut out = String::new();
    let mut chars = rest.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => {
                lex.bump(i + 1);
                return Ok(out);
            }
            '\\' => {
                let Some((_, e)) = chars.next() else { break };
                out.push(match e {
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    '0' => '\0',
                    '\\' => '\\',
                    '"' => '"',
                    other => {
                        lex.bump(i + 1 + other.len_utf8());
                        return Err(LexError::BadEscape(other));
                    }
                });
            }
            c => out.push(c),
        }
    }
    lex.bump(rest.len());
    Err(LexError::UnterminatedString)
}

pub type Spanned = (usize, Tok, usize);

impl Tok {
    /// Tokens that, at the start of a line in column 1, continue the previous item.
    fn continues_item(&self) -> bool {
        use Tok::*;
        matches!(
            self,
            RParen
                | RBracket
                | RBrace
                | Comma
                | Semi
                | Colon
                | Dot
                | Arrow
                | Bar
                | Eq
                | Assign
                | ColonColon
                | PlusPlus
                | Plus
                | Minus
                | Star
                | Slash
                | Percent
                | StarStar
                | At
                | EqEq
                | NotEq
                | Lt
                | Le
                | Gt
                | Ge
                | AndAnd
                | OrOr
                | Pipe
                | In
                | And
                | Then
                | Else
                | With
        )
    }
}

/// Lexes a whole file and inserts `ItemSep` where a new top-level item starts.
pub fn lex(src: &str, file: u32) -> Result<Vec<Spanned>, Diagnostic> {
    let mut out: Vec<Spanned> = Vec::new();
    let mut depth: i64 = 0;
    let mut lexer = Tok::lexer(src);
    while let Some(res) = lexer.next() {
        let range = lexer.span();
        let tok = match res {
            Ok(t) => t,
            Err(e) => return Err(lex_error(e, Span::new(file, range.start, range.end), src)),
        };
        let at_line_start = range.start == 0 || src.as_bytes()[range.start - 1] == b'\n';
        if at_line_start && depth <= 0 && !out.is_empty() && !tok.continues_item() {
            out.push((range.start, Tok::ItemSep, range.start));
        }
        match tok {
            Tok::LParen | Tok::LBracket | Tok::LBrace => depth += 1,
            Tok::RParen | Tok::RBracket | Tok::RBrace => depth -= 1,
            _ => {}
        }
        out.push((range.start, tok, range.end));
    }
    Ok(out)
}

fn lex_error(e: LexError, span: Span, src: &str) -> Diagnostic {
    let text = src.get(span.start as usize..span.end as usize).unwrap_or("");
    match e {
        LexError::Unexpected => {
            let c = text.chars().next().unwrap_or(' ');
            let d = Diagnostic::error(Phase::Lex, format!("unexpected character `{}`", c.escape_debug()))
                .label(span, "not part of any dp token");
            match c {
                '\'' => d.help("strings use double quotes: \"text\""),
                '&' => d.help("logical and is `&&`"),
                _ => d,
            }
        }
        LexError::IntTooLarge => Diagnostic::error(Phase::Lex, "integer literal too large")
            .label(span, "does not fit in a 64-bit Int")
            .help("use a Float literal such as 1e20"),
        LexError::UnterminatedComment => Diagnostic::error(Phase::Lex, "unterminated block comment")
            .label(Span { end: span.start + 2, ..span }, "this comment is never closed")
            .help("block comments nest: every `/*` needs its own `*/`"),
        LexError::UnterminatedString => Diagnostic::error(Phase::Lex, "unterminated string literal")
            .label(Span { end: span.start + 1, ..span }, "this string is never closed"),
        LexError::BadEscape(c) => Diagnostic::error(Phase::Lex, format!("unknown escape `\\{c}` in string"))
            .label(span, "in this string")
            .help("known escapes: \\n \\t \\r \\0 \\\\ \\\""),
    }
}
