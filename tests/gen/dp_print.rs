//! Generated programs as dp source. Every compound expression is parenthesised, so the
//! printer needs no precedence table, and every top-level item is one line (dp starts a new
//! item at column 1).

use super::ast::*;

pub fn program(p: &Program) -> String {
    let mut out = String::new();
    for v in &p.variants {
        let param = if v.has_param { " a" } else { "" };
        let ctors: Vec<String> = v
            .ctors
            .iter()
            .map(|(name, args)| {
                let mut s = name.clone();
                for a in args {
                    s.push(' ');
                    s.push_str(&atomic_ty(p, a));
                }
                s
            })
            .collect();
        out.push_str(&format!("type {}{param} = {}\n", v.name, ctors.join(" | ")));
    }
    for item in &p.items {
        match item {
            Item::Let(pat, e) => out.push_str(&format!("let {} = {}\n", pattern(p, pat), expr(p, e))),
            Item::LetRec(group) => out.push_str(&format!("let rec {}\n", rec_group(p, group))),
        }
    }
    out
}

pub fn ty(p: &Program, t: &Ty) -> String {
    match t {
        Ty::Int => "Int".into(),
        Ty::Float => "Float".into(),
        Ty::Bool => "Bool".into(),
        Ty::Str => "String".into(),
        Ty::Unit => "Unit".into(),
        Ty::List(t) => format!("List {}", atomic_ty(p, t)),
        Ty::Option(t) => format!("Option {}", atomic_ty(p, t)),
        Ty::Ref(t) => format!("Ref {}", atomic_ty(p, t)),
        Ty::Tuple(ts) => format!("({})", ts.iter().map(|t| ty(p, t)).collect::<Vec<_>>().join(", ")),
        Ty::Fun(a, b) => format!("{} -> {}", atomic_ty(p, a), ty(p, b)),
        Ty::Record(i) => {
            let fs: Vec<String> = p.records[*i].fields.iter().map(|(n, t)| format!("{n} : {}", ty(p, t))).collect();
            format!("{{ {} }}", fs.join(", "))
        }
        Ty::Variant(i, args) => {
            let mut s = p.variants[*i].name.clone();
            for a in args {
                s.push(' ');
                s.push_str(&atomic_ty(p, a));
            }
            s
        }
        Ty::Tensor(_) => "Tensor".into(),
        Ty::Param => "a".into(),
        Ty::Var(_) | Ty::Opaque(_) => panic!("generator bug: a type variable in an annotation"),
    }
}

fn atomic_ty(p: &Program, t: &Ty) -> String {
    let s = ty(p, t);
    let simple = matches!(t, Ty::Tuple(_) | Ty::Record(_)) || !s.contains(' ');
    if simple {
        s
    } else {
        format!("({s})")
    }
}

/// dp's own float syntax: Rust's shortest round-trip form (always with `.` or `e`).
pub fn float_lit(x: f64) -> String {
    let s = format!("{x:?}");
    if x < 0.0 || (x == 0.0 && x.is_sign_negative()) {
        format!("({s})")
    } else {
        s
    }
}

/// A string literal with the escapes both languages read the same way.
pub fn string_lit(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub fn op(o: BinOp) -> &'static str {
    match o {
        BinOp::Add => "+",
        BinOp::Sub => "-",
        BinOp::Mul => "*",
        BinOp::Div => "/",
        BinOp::Rem => "%",
        BinOp::MatMul => "@",
        BinOp::Eq => "==",
        BinOp::Ne => "!=",
        BinOp::Lt => "<",
        BinOp::Le => "<=",
        BinOp::Gt => ">",
        BinOp::Ge => ">=",
        BinOp::And => "&&",
        BinOp::Or => "||",
        BinOp::Append => "++",
        BinOp::Cons => "::",
    }
}

fn rec_group(p: &Program, group: &[RecFn]) -> String {
    let fs: Vec<String> =
        group.iter().map(|f| format!("{} {} = {}", f.name, params_(p, &f.params), expr(p, &f.body))).collect();
    fs.join(" and ")
}

fn params_(p: &Program, ps: &[Param]) -> String {
    ps.iter()
        .map(|pa| match &pa.ann {
            Some(t) => format!("({} : {})", pattern(p, &pa.pat), ty(p, t)),
            None => atomic_pattern(p, &pa.pat),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn atomic_pattern(p: &Program, pat: &Pat) -> String {
    let s = pattern(p, pat);
    match pat {
        Pat::Cons(..) | Pat::Some(_) => format!("({s})"),
        Pat::Ctor(_, _, args) if !args.is_empty() => format!("({s})"),
        _ => s,
    }
}

pub fn pattern(p: &Program, pat: &Pat) -> String {
    match pat {
        Pat::Wild => "_".into(),
        Pat::Var(n) => n.clone(),
        Pat::Int(n) => n.to_string(),
        Pat::Str(s) => string_lit(s),
        Pat::Bool(b) => b.to_string(),
        Pat::Tuple(ps) => format!("({})", ps.iter().map(|q| pattern(p, q)).collect::<Vec<_>>().join(", ")),
        Pat::Nil => "[]".into(),
        Pat::Cons(h, t) => format!("{} :: {}", atomic_pattern(p, h), atomic_pattern(p, t)),
        Pat::List(ps) => format!("[{}]", ps.iter().map(|q| pattern(p, q)).collect::<Vec<_>>().join(", ")),
        Pat::Ctor(d, c, args) => {
            let mut s = p.variants[*d].ctors[*c].0.clone();
            for a in args {
                s.push(' ');
                s.push_str(&atomic_pattern(p, a));
            }
            s
        }
        Pat::Some(q) => format!("Some {}", atomic_pattern(p, q)),
        Pat::None => "None".into(),
        Pat::Record(fs) => {
            format!(
                "{{ {} }}",
                fs.iter().map(|(f, q)| format!("{f} = {}", pattern(p, q))).collect::<Vec<_>>().join(", ")
            )
        }
    }
}

fn tensor_rows(shape: &[usize], xs: &[f64]) -> String {
    if shape.len() == 1 {
        return format!("[{}]", xs.iter().map(|x| format!("{x:?}")).collect::<Vec<_>>().join(", "));
    }
    let step = xs.len() / shape[0];
    let rows: Vec<String> = xs.chunks(step).map(|c| tensor_rows(&shape[1..], c)).collect();
    format!("[{}]", rows.join(", "))
}

pub fn expr(p: &Program, e: &Expr) -> String {
    let x = |e: &Expr| expr(p, e);
    match e {
        Expr::Int(n) if *n < 0 => format!("({n})"),
        Expr::Int(n) => n.to_string(),
        Expr::Float(f) => float_lit(*f),
        Expr::Bool(b) => b.to_string(),
        Expr::Str(s) => string_lit(s),
        Expr::Unit => "()".into(),
        Expr::Var(n) => n.clone(),
        Expr::Bin(o, a, b, _) => format!("({} {} {})", x(a), op(*o), x(b)),
        Expr::Neg(a, _) => format!("(-{})", x(a)),
        Expr::Not(a) => format!("(not {})", x(a)),
        Expr::Math(f, a, _) => format!("({f} {})", x(a)),
        Expr::If(c, a, b) => format!("(if {} then {} else {})", x(c), x(a), x(b)),
        Expr::Let(pat, r, b) => format!("(let {} = {} in {})", pattern(p, pat), x(r), x(b)),
        Expr::LetRec(group, rest) => format!("(let rec {} in {})", rec_group(p, group), x(rest)),
        Expr::Fun(ps, body) => format!("(fun {} -> {})", params_(p, ps), x(body)),
        Expr::App(f, args) => {
            format!("({} {})", x(f), args.iter().map(x).collect::<Vec<_>>().join(" "))
        }
        Expr::Tuple(es) => format!("({})", es.iter().map(x).collect::<Vec<_>>().join(", ")),
        Expr::List(es) => format!("[{}]", es.iter().map(x).collect::<Vec<_>>().join(", ")),
        Expr::Record(fs) => {
            format!("{{ {} }}", fs.iter().map(|(f, v)| format!("{f} = {}", x(v))).collect::<Vec<_>>().join(", "))
        }
        Expr::Field(r, f) => format!("{}.{f}", paren(x(r))),
        Expr::With(r, fs) => format!(
            "{{ {} with {} }}",
            paren(x(r)),
            fs.iter().map(|(f, v)| format!("{f} = {}", x(v))).collect::<Vec<_>>().join(", ")
        ),
        Expr::Ctor(d, c, args) => {
            let name = &p.variants[*d].ctors[*c].0;
            if args.is_empty() {
                name.clone()
            } else {
                format!("({name} {})", args.iter().map(x).collect::<Vec<_>>().join(" "))
            }
        }
        Expr::Some(a) => format!("(Some {})", x(a)),
        Expr::None => "None".into(),
        Expr::Match(s, arms) => {
            let arms: Vec<String> = arms.iter().map(|(pat, b)| format!("| {} -> {}", pattern(p, pat), x(b))).collect();
            format!("(match {} with {})", x(s), arms.join(" "))
        }
        Expr::Ref(a) => format!("(ref {})", x(a)),
        Expr::Deref(a) => format!("(!{})", x(a)),
        Expr::Assign(r, v) => format!("({} := {})", x(r), x(v)),
        Expr::Seq(a, b) => format!("({}; {})", x(a), x(b)),
        Expr::Print(a, _, nl) => format!("({} {})", if *nl { "println" } else { "print" }, x(a)),
        Expr::Show(a, _) => format!("(show {})", x(a)),
        Expr::Annot(a, t) => format!("({} : {})", x(a), ty(p, t)),
        Expr::TensorLit(shape, xs) => format!("(tensor {})", tensor_rows(shape, xs)),
        Expr::Reset(b) => format!("(reset (fun () -> {}))", x(b)),
        Expr::Shift(k, b) => format!("(shift (fun {k} -> {}))", x(b)),
    }
}

/// Wraps a printed expression in parentheses unless it already is one token or group.
fn paren(s: String) -> String {
    if s.starts_with('(') || s.chars().all(|c| c.is_alphanumeric() || c == '_') {
        s
    } else {
        format!("({s})")
    }
}
