//! The lalrpop parser (generated at build time) and the mapping of its errors to diagnostics.

use crate::diagnostic::{Diagnostic, Phase};
use crate::source::Span;
use crate::syntax::ast::Item;
use crate::syntax::lexer::{self, LexError, Tok};
use lalrpop_util::ParseError;

lalrpop_util::lalrpop_mod!(
    #[allow(clippy::all, unused_parens, dead_code)]
    grammar,
    "/dp.rs"
);

/// Whether a syntax error means the input simply stopped too early (the REPL then asks for
/// another line instead of reporting it).
pub fn is_incomplete(d: &Diagnostic) -> bool {
    d.message.starts_with("unexpected end of input") || d.message.starts_with("unterminated")
}

/// Parses a file. Each top-level item (the lexer marks where one starts) is parsed on its
/// own, so a syntax error in one item does not hide those of the others: every item with an
/// error is reported (up to `MAX_SYNTAX_ERRORS`), the first carrying the rest.
pub fn parse_program(src: &str, file: u32) -> Result<Vec<Item>, Diagnostic> {
    match parse_program_recovering(src, file) {
        (items, None) => Ok(items),
        (_, Some(d)) => Err(d),
    }
}

/// The items that parse, and the syntax errors of those that do not (each top-level item is
/// parsed on its own, so one broken item leaves the others intact). A lexical error leaves
/// no items.
pub fn parse_program_recovering(src: &str, file: u32) -> (Vec<Item>, Option<Diagnostic>) {
    const MAX_SYNTAX_ERRORS: usize = 20;
    let tokens = match lexer::lex(src, file) {
        Ok(t) => t,
        Err(d) => return (Vec::new(), Some(d)),
    };
    let eof = src.len();
    let parser = grammar::ProgramParser::new();
    let mut items = Vec::new();
    let mut errors = Vec::new();
    let mut rest = &tokens[..];
    while !rest.is_empty() && errors.len() < MAX_SYNTAX_ERRORS {
        // An item's tokens and the separator after it (which the grammar accepts at the end
        // of a program, and which an unfinished item reports as unexpected, as before).
        let end = rest.iter().position(|(_, t, _)| *t == Tok::ItemSep).map_or(rest.len(), |i| i + 1);
        let (chunk, after) = rest.split_at(end);
        rest = after;
        match parser.parse(file, chunk.iter().cloned()) {
            Ok(mut v) => items.append(&mut v),
            Err(e) => errors.push(parse_error(e, file, eof)),
        }
    }
    (items, Diagnostic::collect(errors))
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Int(n) => format!("integer `{n}`"),
        Tok::Float(x) => format!("float `{x}`"),
        Tok::Str(_) => "a string".into(),
        Tok::Ident(x) => format!("name `{x}`"),
        Tok::UIdent(x) => format!("`{x}`"),
        Tok::ItemSep => "start of a new item (a line beginning in column 1)".into(),
        other => format!("`{}`", token_text(other)),
    }
}

fn token_text(t: &Tok) -> &'static str {
    use Tok::*;
    match t {
        Let => "let",
        Rec => "rec",
        And => "and",
        In => "in",
        Fun => "fun",
        If => "if",
        Then => "then",
        Else => "else",
        Match => "match",
        With => "with",
        Type => "type",
        Import => "import",
        True => "true",
        False => "false",
        Not => "not",
        Ref => "ref",
        Underscore => "_",
        LParen => "(",
        RParen => ")",
        LBracket => "[",
        RBracket => "]",
        LBrace => "{",
        RBrace => "}",
        Comma => ",",
        Semi => ";",
        Colon => ":",
        Dot => ".",
        Arrow => "->",
        Bar => "|",
        Eq => "=",
        Assign => ":=",
        ColonColon => "::",
        PlusPlus => "++",
        Plus => "+",
        Minus => "-",
        Star => "*",
        Slash => "/",
        Percent => "%",
        StarStar => "**",
        At => "@",
        EqEq => "==",
        NotEq => "!=",
        Lt => "<",
        Le => "<=",
        Gt => ">",
        Ge => ">=",
        AndAnd => "&&",
        OrOr => "||",
        Pipe => "|>",
        Bang => "!",
        _ => "token",
    }
}

fn expected_list(expected: &[String]) -> String {
    let mut names: Vec<String> = expected
        .iter()
        .map(|e| match e.trim_matches('"') {
            "int" => "an integer".to_string(),
            "float" => "a float".to_string(),
            "string" => "a string".to_string(),
            "ident" => "a name".to_string(),
            "Ident" => "a constructor".to_string(),
            "item" => "a new item".to_string(),
            other => format!("`{other}`"),
        })
        .collect();
    names.dedup();
    if names.len() > 8 {
        names.truncate(8);
        names.push("…".into());
    }
    names.join(", ")
}

fn parse_error(e: ParseError<usize, Tok, LexError>, file: u32, eof: usize) -> Diagnostic {
    match e {
        ParseError::InvalidToken { location } => {
            Diagnostic::error(Phase::Parse, "invalid token").label(Span::new(file, location, location + 1), "here")
        }
        ParseError::UnrecognizedEof { location, expected } => {
            let at = location.min(eof);
            Diagnostic::error(Phase::Parse, "unexpected end of input")
                .label(Span::new(file, at, at), "the program stops here")
                .note(format!("expected one of: {}", expected_list(&expected)))
        }
        ParseError::UnrecognizedToken { token: (l, t, r), expected } => {
            let mut d = Diagnostic::error(Phase::Parse, format!("unexpected {}", describe(&t)))
                .label(Span::new(file, l, r.max(l + 1)), "not expected here")
                .note(format!("expected one of: {}", expected_list(&expected)));
            if t == Tok::ItemSep {
                d = d.help(
                    "lines that continue an item must be indented; a line starting in column 1 begins a new item",
                );
            } else if t == Tok::Eq && expected.iter().any(|e| e == "\"==\"") {
                d = d.help("equality is `==`; `=` only appears in `let` bindings and records");
            }
            d
        }
        ParseError::ExtraToken { token: (l, t, r) } => {
            Diagnostic::error(Phase::Parse, format!("unexpected {}", describe(&t)))
                .label(Span::new(file, l, r), "extra token")
        }
        ParseError::User { error } => Diagnostic::error(Phase::Lex, format!("{error:?}")),
    }
}

/// Parses a type from tokens (used for the builtin table's type strings).
pub fn parse_type(tokens: Vec<lexer::Spanned>) -> Result<crate::syntax::ast::TypeExpr, Diagnostic> {
    grammar::TypeParser::new().parse(u32::MAX, tokens).map_err(|e| parse_error(e, u32::MAX, 0))
}

/// Parses a single expression (the REPL's `:type`).
pub fn parse_expr(tokens: Vec<lexer::Spanned>, file: u32) -> Result<crate::syntax::ast::Expr, Diagnostic> {
    let eof = tokens.last().map_or(0, |t| t.2);
    let tokens: Vec<_> = tokens.into_iter().filter(|t| t.1 != Tok::ItemSep).collect();
    grammar::TopExprParser::new().parse(file, tokens).map_err(|e| parse_error(e, file, eof))
}
