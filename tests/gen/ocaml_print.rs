//! Generated core-language programs as OCaml, printing exactly what dp prints: a prelude of
//! printing helpers (dp's float format, quoting, constructor-argument parentheses) and the
//! dp prelude functions the generator calls, with dp's semantics.

use super::ast::*;
use super::dp_print::{float_lit, string_lit};

/// Compiled once per test run into `prelude.cmo` (module `Prelude`), which each program opens:
/// typing it is most of the toplevel's time on a program.
pub const PRELUDE: &str = r#"
(* dp prints a constructor's or a ref's argument in parentheses unless it is one token. *)
let paren_arg s =
  let n = String.length s in
  let needs =
    n > 0 && (s.[0] = '-'
              || (s.[0] >= 'A' && s.[0] <= 'Z' && String.contains s ' ')
              || (n > 4 && String.sub s 0 4 = "ref ")) in
  if needs then "(" ^ s ^ ")" else s

(* dp's float format: the shortest decimal that round-trips, positional between 1e-5 and
   1e16 (with ".0" when integral), Rust's exponent form (1e-8, 1.5e21) outside. *)
let pr_float x =
  if Float.is_nan x then "nan"
  else if x = Float.infinity then "infinity"
  else if x = Float.neg_infinity then "-infinity"
  else begin
    let rec shortest p =
      let s = Printf.sprintf "%.*e" (p - 1) x in
      if p >= 17 || float_of_string s = x then s else shortest (p + 1) in
    let s = shortest 1 in
    let neg = s.[0] = '-' in
    let s = if neg then String.sub s 1 (String.length s - 1) else s in
    let e = String.index s 'e' in
    let exp = int_of_string (String.sub s (e + 1) (String.length s - e - 1)) in
    let digits = String.concat "" (String.split_on_char '.' (String.sub s 0 e)) in
    let n = ref (String.length digits) in
    while !n > 1 && digits.[!n - 1] = '0' do decr n done;
    let digits = String.sub digits 0 !n in
    let nd = String.length digits in
    let a = Float.abs x in
    let body =
      if a <> 0.0 && (a < 1e-5 || a >= 1e16) then
        (if nd = 1 then digits else String.sub digits 0 1 ^ "." ^ String.sub digits 1 (nd - 1))
        ^ "e" ^ string_of_int exp
      else if a = 0.0 then "0.0"
      else if exp >= 0 then
        if exp + 1 >= nd then digits ^ String.make (exp + 1 - nd) '0' ^ ".0"
        else String.sub digits 0 (exp + 1) ^ "." ^ String.sub digits (exp + 1) (nd - exp - 1)
      else "0." ^ String.make (- exp - 1) '0' ^ digits in
    (if neg then "-" else "") ^ body
  end

let pr_int = string_of_int
let pr_bool b = if b then "true" else "false"
let pr_unit () = "()"
let pr_raw s = s
let pr_str s =
  let b = Buffer.create (String.length s + 2) in
  Buffer.add_char b '"';
  String.iter (fun c -> match c with
    | '"' -> Buffer.add_string b "\\\""
    | '\\' -> Buffer.add_string b "\\\\"
    | '\n' -> Buffer.add_string b "\\n"
    | '\t' -> Buffer.add_string b "\\t"
    | '\r' -> Buffer.add_string b "\\r"
    | c -> Buffer.add_char b c) s;
  Buffer.add_char b '"';
  Buffer.contents b
let pr_list p xs = "[" ^ String.concat ", " (List.map p xs) ^ "]"
let pr_tuple2 p1 p2 (a, b) = "(" ^ p1 a ^ ", " ^ p2 b ^ ")"
let pr_tuple3 p1 p2 p3 (a, b, c) = "(" ^ p1 a ^ ", " ^ p2 b ^ ", " ^ p3 c ^ ")"
let pr_option p o = match o with None -> "None" | Some x -> "Some " ^ paren_arg (p x)
let pr_ref p r = "ref " ^ paren_arg (p !r)

(* The dp prelude, as stdlib/prelude.dp defines it. *)
let map f xs = List.rev (List.fold_left (fun acc x -> f x :: acc) [] xs)
let filter p xs = List.filter p xs
let fold_left f acc xs = List.fold_left f acc xs
let length xs = List.length xs
let reverse xs = List.rev xs
let rec take n xs = match xs with [] -> [] | x :: rest -> if n <= 0 then [] else x :: take (n - 1) rest
let rec drop n xs = match xs with [] -> [] | _ :: rest -> if n <= 0 then xs else drop (n - 1) rest
let head xs = match xs with [] -> None | x :: _ -> Some x
let rec zip xs ys = match xs, ys with x :: xs', y :: ys' -> (x, y) :: zip xs' ys' | _ -> []
let option_default d o = match o with None -> d | Some x -> x
let is_some o = match o with None -> false | Some _ -> true
let exists p xs = List.exists p xs
let for_all p xs = List.for_all p xs
let flatten xss = List.concat xss
let id x = x
let string_length s = String.length s
let join sep xs = String.concat sep xs
let sort_ints xs = List.stable_sort compare xs
let sum_int xs = List.fold_left ( + ) 0 xs
let range a b = List.init (max 0 (b - a)) (fun i -> a + i)
let replicate n x = List.init (max 0 n) (fun _ -> x)
let iter f xs = List.iter f xs
let min_of a b = if a <= b then a else b
let max_of a b = if a >= b then a else b
let int = int_of_float
let string_of_float x = pr_float x
let concat_strings xs = String.concat "" xs
let chars s = List.init (String.length s) (fun i -> String.make 1 s.[i])
"#;

const OPEN: &str = "open Prelude\n";

/// The program, opening the compiled `Prelude` (run as `ocaml prelude.cmo FILE`).
pub fn program(p: &Program) -> String {
    let mut out = String::from(OPEN);
    // All declared types in one recursive group: variants may refer to records and back.
    let mut decls = Vec::new();
    for (i, v) in p.variants.iter().enumerate() {
        let ctors: Vec<String> = v
            .ctors
            .iter()
            .map(|(name, args)| {
                if args.is_empty() {
                    name.clone()
                } else {
                    format!("{name} of {}", args.iter().map(ty).collect::<Vec<_>>().join(" * "))
                }
            })
            .collect();
        let param = if v.has_param { "'a " } else { "" };
        decls.push(format!("{param}t{i} = {}", ctors.join(" | ")));
    }
    for (i, r) in p.records.iter().enumerate() {
        let fs: Vec<String> = r.fields.iter().map(|(n, t)| format!("{n} : {}", ty(t))).collect();
        decls.push(format!("r{i} = {{ {} }}", fs.join("; ")));
    }
    if !decls.is_empty() {
        out.push_str(&format!("type {}\n", decls.join("\nand ")));
    }
    // One printer per declaration, each its own `let rec` in declaration order (a variant
    // refers only to earlier types, a record to variants and earlier records), so each is
    // generalised before the next uses it at some instance.
    let mut printers = Vec::new();
    for (i, v) in p.variants.iter().enumerate() {
        let pa = if v.has_param { "pa " } else { "" };
        let arms: Vec<String> = v
            .ctors
            .iter()
            .map(|(name, args)| {
                if args.is_empty() {
                    return format!("| {name} -> \"{name}\"");
                }
                let vars: Vec<String> = (0..args.len()).map(|k| format!("x{k}")).collect();
                let parts: Vec<String> =
                    args.iter().zip(&vars).map(|(a, x)| format!("\" \" ^ paren_arg ({} {x})", printer(a))).collect();
                format!("| {name} ({}) -> \"{name}\" ^ {}", vars.join(", "), parts.join(" ^ "))
            })
            .collect();
        printers.push(format!("pr_t{i} {pa}v = match v with {}", arms.join(" ")));
    }
    for (i, r) in p.records.iter().enumerate() {
        let parts: Vec<String> = r.fields.iter().map(|(n, t)| format!("\"{n} = \" ^ {} v.{n}", printer(t))).collect();
        printers.push(format!("pr_r{i} v = \"{{ \" ^ {} ^ \" }}\"", parts.join(" ^ \", \" ^ ")));
    }
    for pr in printers {
        out.push_str(&format!("let rec {pr}\n"));
    }
    for item in &p.items {
        match item {
            Item::Let(pat, e) => out.push_str(&format!("let {} = {}\n", pattern(p, pat), expr(p, e))),
            Item::LetRec(group) => out.push_str(&format!("let rec {}\n", rec_group(p, group))),
        }
    }
    out
}

/// The program with the prelude's text in place of `open Prelude`: one file that runs alone.
pub fn standalone(program: &str) -> String {
    format!("{PRELUDE}{}", program.strip_prefix(OPEN).unwrap_or(program))
}

fn ty(t: &Ty) -> String {
    match t {
        Ty::Int => "int".into(),
        Ty::Float => "float".into(),
        Ty::Bool => "bool".into(),
        Ty::Str => "string".into(),
        Ty::Unit => "unit".into(),
        Ty::List(t) => format!("({}) list", ty(t)),
        Ty::Option(t) => format!("({}) option", ty(t)),
        Ty::Ref(t) => format!("({}) ref", ty(t)),
        Ty::Tuple(ts) => format!("({})", ts.iter().map(ty).collect::<Vec<_>>().join(" * ")),
        Ty::Fun(a, b) => format!("({} -> {})", ty(a), ty(b)),
        Ty::Record(i) => format!("r{i}"),
        Ty::Variant(i, args) => match args.first() {
            Some(a) => format!("({}) t{i}", ty(a)),
            None => format!("t{i}"),
        },
        Ty::Param => "'a".into(),
        Ty::Tensor(_) | Ty::Var(_) | Ty::Opaque(_) => panic!("generator bug: {t:?} in an OCaml annotation"),
    }
}

/// The OCaml printing function for values of a type.
fn printer(t: &Ty) -> String {
    match t {
        Ty::Int => "pr_int".into(),
        Ty::Float => "pr_float".into(),
        Ty::Bool => "pr_bool".into(),
        Ty::Str => "pr_str".into(),
        Ty::Unit => "pr_unit".into(),
        Ty::List(t) => format!("(pr_list {})", printer(t)),
        Ty::Option(t) => format!("(pr_option {})", printer(t)),
        Ty::Ref(t) => format!("(pr_ref {})", printer(t)),
        Ty::Tuple(ts) => {
            format!("(pr_tuple{} {})", ts.len(), ts.iter().map(printer).collect::<Vec<_>>().join(" "))
        }
        Ty::Record(i) => format!("pr_r{i}"),
        Ty::Variant(i, args) => match args.first() {
            Some(a) => format!("(pr_t{i} {})", printer(a)),
            None => format!("pr_t{i}"),
        },
        Ty::Param => "pa".into(),
        _ => panic!("generator bug: printing a {t:?}"),
    }
}

fn op(o: BinOp, t: &Ty) -> &'static str {
    let float = *t == Ty::Float;
    match o {
        BinOp::Add if float => "+.",
        BinOp::Sub if float => "-.",
        BinOp::Mul if float => "*.",
        BinOp::Div if float => "/.",
        BinOp::Add => "+",
        BinOp::Sub => "-",
        BinOp::Mul => "*",
        BinOp::Div => "/",
        BinOp::Rem => "mod",
        BinOp::Eq => "=",
        BinOp::Ne => "<>",
        BinOp::Lt => "<",
        BinOp::Le => "<=",
        BinOp::Gt => ">",
        BinOp::Ge => ">=",
        BinOp::And => "&&",
        BinOp::Or => "||",
        BinOp::Append if *t == Ty::Str => "^",
        BinOp::Append => "@",
        BinOp::Cons => "::",
        BinOp::MatMul => panic!("generator bug: @ in a core program"),
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
            Some(t) => format!("({} : {})", pattern(p, &pa.pat), ty(t)),
            None => format!("({})", pattern(p, &pa.pat)),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn pattern(p: &Program, pat: &Pat) -> String {
    match pat {
        Pat::Wild => "_".into(),
        Pat::Var(n) => n.clone(),
        Pat::Int(n) => n.to_string(),
        Pat::Str(s) => string_lit(s),
        Pat::Bool(b) => b.to_string(),
        Pat::Tuple(ps) => format!("({})", ps.iter().map(|q| pattern(p, q)).collect::<Vec<_>>().join(", ")),
        Pat::Nil => "[]".into(),
        Pat::Cons(h, t) => format!("({} :: {})", pattern(p, h), pattern(p, t)),
        Pat::List(ps) => format!("[{}]", ps.iter().map(|q| pattern(p, q)).collect::<Vec<_>>().join("; ")),
        Pat::Ctor(d, c, args) => {
            let name = &p.variants[*d].ctors[*c].0;
            if args.is_empty() {
                // A constructor declared with arguments but matched with none is not generated.
                name.clone()
            } else {
                format!("({name} ({}))", args.iter().map(|q| pattern(p, q)).collect::<Vec<_>>().join(", "))
            }
        }
        Pat::Some(q) => format!("(Some {})", pattern(p, q)),
        Pat::None => "None".into(),
        Pat::Record(fs) => {
            format!(
                "{{ {}; _ }}",
                fs.iter().map(|(f, q)| format!("{f} = {}", pattern(p, q))).collect::<Vec<_>>().join("; ")
            )
        }
    }
}

fn expr(p: &Program, e: &Expr) -> String {
    let x = |e: &Expr| expr(p, e);
    match e {
        Expr::Int(n) if *n < 0 => format!("({n})"),
        Expr::Int(n) => n.to_string(),
        Expr::Float(f) => float_lit(*f),
        Expr::Bool(b) => b.to_string(),
        Expr::Str(s) => string_lit(s),
        Expr::Unit => "()".into(),
        Expr::Var(n) => n.clone(),
        Expr::Bin(o, a, b, t) => format!("({} {} {})", x(a), op(*o, t), x(b)),
        Expr::Neg(a, t) => format!("({} ({}))", if *t == Ty::Float { "~-." } else { "~-" }, x(a)),
        Expr::Not(a) => format!("(not {})", x(a)),
        Expr::Math(f, a, t) => {
            let f = match (*f, t) {
                ("abs", Ty::Float) => "abs_float",
                ("float", _) => "float_of_int",
                ("int", _) => "int_of_float",
                (f, _) => f,
            };
            format!("({f} {})", x(a))
        }
        Expr::If(c, a, b) => format!("(if {} then {} else {})", x(c), x(a), x(b)),
        Expr::Let(pat, r, b) => format!("(let {} = {} in {})", pattern(p, pat), x(r), x(b)),
        Expr::LetRec(group, rest) => format!("(let rec {} in {})", rec_group(p, group), x(rest)),
        Expr::Fun(ps, body) => format!("(fun {} -> {})", params_(p, ps), x(body)),
        Expr::App(f, args) => format!("({} {})", x(f), args.iter().map(x).collect::<Vec<_>>().join(" ")),
        Expr::Tuple(es) => format!("({})", es.iter().map(x).collect::<Vec<_>>().join(", ")),
        Expr::List(es) => format!("[{}]", es.iter().map(x).collect::<Vec<_>>().join("; ")),
        Expr::Record(fs) => {
            format!("{{ {} }}", fs.iter().map(|(f, v)| format!("{f} = {}", x(v))).collect::<Vec<_>>().join("; "))
        }
        Expr::Field(r, f) => format!("({}).{f}", x(r)),
        Expr::With(r, fs) => format!(
            "{{ ({}) with {} }}",
            x(r),
            fs.iter().map(|(f, v)| format!("{f} = {}", x(v))).collect::<Vec<_>>().join("; ")
        ),
        Expr::Ctor(d, c, args) => {
            let name = &p.variants[*d].ctors[*c].0;
            if args.is_empty() {
                name.clone()
            } else {
                format!("({name} ({}))", args.iter().map(x).collect::<Vec<_>>().join(", "))
            }
        }
        Expr::Some(a) => format!("(Some {})", x(a)),
        Expr::None => "None".into(),
        Expr::Match(s, arms) => {
            let arms: Vec<String> = arms.iter().map(|(pat, b)| format!("| {} -> {}", pattern(p, pat), x(b))).collect();
            format!("(match {} with {})", x(s), arms.join(" "))
        }
        Expr::Ref(a) => format!("(ref {})", x(a)),
        Expr::Deref(a) => format!("(!({}))", x(a)),
        Expr::Assign(r, v) => format!("({} := {})", x(r), x(v)),
        Expr::Seq(a, b) => format!("({}; {})", x(a), x(b)),
        Expr::Print(a, t, nl) => {
            let pr = if *t == Ty::Str { "pr_raw".to_string() } else { printer(t) };
            format!("({} ({pr} {}))", if *nl { "print_endline" } else { "print_string" }, x(a))
        }
        Expr::Show(a, t) => format!("({} {})", printer(t), x(a)),
        Expr::Annot(a, t) => format!("({} : {})", x(a), ty(t)),
        Expr::TensorLit(..) | Expr::Reset(_) | Expr::Shift(..) => {
            panic!("generator bug: dp-only {e:?} in a core program")
        }
    }
}
