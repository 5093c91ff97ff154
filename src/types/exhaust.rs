//! Exhaustiveness of matches (Maranget's usefulness algorithm, specialised to dp's patterns).
//! Produces a witness: a value shape that no arm matches.

use super::check::Checker;
use super::ty::Ty;
use crate::syntax::ast::{Lit, Pat, PatKind};
use std::rc::Rc;

#[derive(Clone, Debug, PartialEq)]
enum Key {
    Con(Rc<str>),
    Bool(bool),
    Nil,
    Cons,
    Tuple(usize),
    Record(Vec<String>),
    Unit,
    Lit(String),
}

#[derive(Clone, Debug)]
enum P {
    Wild,
    K(Key, Vec<P>),
}

fn simplify(p: &Pat) -> P {
    match &p.kind {
        PatKind::Wild | PatKind::Var(_) => P::Wild,
        PatKind::Annot(q, _) => simplify(q),
        PatKind::Lit(Lit::Bool(b)) => P::K(Key::Bool(*b), vec![]),
        PatKind::Lit(Lit::Unit) => P::K(Key::Unit, vec![]),
        PatKind::Lit(l) => P::K(Key::Lit(format!("{l:?}")), vec![]),
        PatKind::Tuple(ps) => P::K(Key::Tuple(ps.len()), ps.iter().map(simplify).collect()),
        PatKind::List(ps) => {
            ps.iter().rev().fold(P::K(Key::Nil, vec![]), |acc, q| P::K(Key::Cons, vec![simplify(q), acc]))
        }
        PatKind::Cons(h, t) => P::K(Key::Cons, vec![simplify(h), simplify(t)]),
        PatKind::Con(c, args) => P::K(Key::Con(c.as_str().into()), args.iter().map(simplify).collect()),
        PatKind::Record(fs) => {
            let mut fs: Vec<_> = fs.iter().collect();
            fs.sort_by(|a, b| a.name.cmp(&b.name));
            let names = fs.iter().map(|f| f.name.clone()).collect();
            let args = fs.iter().map(|f| f.value.as_ref().map_or(P::Wild, simplify)).collect();
            P::K(Key::Record(names), args)
        }
    }
}

/// The first value shape that none of `pats` matches, if any.
pub fn missing_case(ch: &Checker, pats: &[Pat], _ty: &Ty) -> Option<String> {
    // Record patterns need not list every field: `specialise` pads each to the widest.
    let rows: Vec<Vec<P>> = pats.iter().map(|p| vec![simplify(p)]).collect();
    let w = missing(ch, &rows, 1, 0)?;
    Some(show(&w[0]))
}

fn arity(k: &Key) -> usize {
    match k {
        Key::Cons => 2,
        Key::Tuple(n) => *n,
        Key::Record(f) => f.len(),
        _ => 0,
    }
}

/// All constructors of the type `k` belongs to, with arities; None for infinite domains.
fn signature(ch: &Checker, k: &Key) -> Option<Vec<(Key, usize)>> {
    Some(match k {
        Key::Con(c) => {
            let info = ch.constructor(c)?;
            info.siblings
                .iter()
                .map(|s| (Key::Con(s.clone()), ch.constructor(s).map_or(0, |i| i.arity as usize)))
                .collect()
        }
        Key::Bool(_) => vec![(Key::Bool(false), 0), (Key::Bool(true), 0)],
        Key::Nil | Key::Cons => vec![(Key::Nil, 0), (Key::Cons, 2)],
        Key::Tuple(n) => vec![(Key::Tuple(*n), *n)],
        Key::Record(f) => vec![(Key::Record(f.clone()), f.len())],
        Key::Unit => vec![(Key::Unit, 0)],
        Key::Lit(_) => return None,
    })
}

fn specialise(rows: &[Vec<P>], k: &Key, a: usize) -> Vec<Vec<P>> {
    let mut out = Vec::new();
    for r in rows {
        match &r[0] {
            P::Wild => {
                let mut nr = vec![P::Wild; a];
                nr.extend_from_slice(&r[1..]);
                out.push(nr);
            }
            P::K(k2, args) if same_ctor(k2, k) => {
                let mut nr = args.clone();
                nr.resize(a, P::Wild);
                nr.extend_from_slice(&r[1..]);
                out.push(nr);
            }
            _ => {}
        }
    }
    out
}

fn same_ctor(a: &Key, b: &Key) -> bool {
    match (a, b) {
        (Key::Record(_), Key::Record(_)) => true,
        _ => a == b,
    }
}

fn missing(ch: &Checker, rows: &[Vec<P>], n: usize, depth: usize) -> Option<Vec<P>> {
    if n == 0 {
        return if rows.is_empty() { Some(vec![]) } else { None };
    }
    if depth > 64 {
        return None;
    }
    let heads: Vec<Key> =
        rows.iter().filter_map(|r| if let P::K(k, _) = &r[0] { Some(k.clone()) } else { None }).collect();
    let sig = heads.first().and_then(|k| signature(ch, k));
    if let Some(sig) = &sig {
        if sig.iter().all(|(k, _)| heads.iter().any(|h| same_ctor(h, k))) {
            for (k, a) in sig {
                let a = if let Key::Record(_) = k { heads.iter().map(arity).max().unwrap_or(0) } else { *a };
                let spec = specialise(rows, k, a);
                if let Some(w) = missing(ch, &spec, a + n - 1, depth + 1) {
                    let mut out = vec![P::K(k.clone(), w[..a].to_vec())];
                    out.extend_from_slice(&w[a..]);
                    return Some(out);
                }
            }
            return None;
        }
    }
    let default: Vec<Vec<P>> = rows.iter().filter(|r| matches!(r[0], P::Wild)).map(|r| r[1..].to_vec()).collect();
    let w = missing(ch, &default, n - 1, depth + 1)?;
    let head = match &sig {
        Some(sig) => sig
            .iter()
            .find(|(k, _)| !heads.iter().any(|h| same_ctor(h, k)))
            .map_or(P::Wild, |(k, a)| P::K(k.clone(), vec![P::Wild; *a])),
        None => P::Wild,
    };
    let mut out = vec![head];
    out.extend(w);
    Some(out)
}

fn show(p: &P) -> String {
    match p {
        P::Wild => "_".into(),
        P::K(k, args) => {
            let arg = |p: &P| {
                let s = show(p);
                if s.contains(' ') && !s.starts_with('(') && !s.starts_with('{') {
                    format!("({s})")
                } else {
                    s
                }
            };
            match k {
                Key::Con(c) if args.is_empty() => c.to_string(),
                Key::Con(c) => {
                    format!("{c} {}", args.iter().map(arg).collect::<Vec<_>>().join(" "))
                }
                Key::Bool(b) => b.to_string(),
                Key::Nil => "[]".into(),
                Key::Cons => format!("{} :: {}", arg(&args[0]), show(&args[1])),
                Key::Tuple(_) => {
                    format!("({})", args.iter().map(show).collect::<Vec<_>>().join(", "))
                }
                Key::Record(fs) => format!(
                    "{{ {} }}",
                    fs.iter().zip(args).map(|(f, a)| format!("{f} = {}", show(a))).collect::<Vec<_>>().join(", ")
                ),
                Key::Unit => "()".into(),
                Key::Lit(_) => "_".into(),
            }
        }
    }
}
