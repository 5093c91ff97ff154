//! The session's transaction model, through its API (the REPL tests drive the same through a
//! terminal).

use dp::session::Echo;
use dp::Session;
use std::path::Path;

fn session() -> Session {
    let mut s = Session::new().expect("the prelude loads");
    s.set_output(Box::new(std::io::sink()));
    s
}

/// Checks and runs one entry in the current directory: whether it took effect.
fn took_effect(s: &mut Session, text: &str) -> bool {
    s.eval("<entry>", text, Path::new(".")).is_ok()
}

fn ty(s: &mut Session, e: &str) -> String {
    s.type_of("<t>", e).unwrap_or_else(|d| format!("error: {}", d.message))
}

#[test]
fn a_failed_entry_leaves_the_bindings_as_before() {
    let mut s = session();
    assert!(took_effect(&mut s, "let a = 1\ntype T = A | B"));
    // A type error in the second item: the first item's new `a` and `b` are not bound.
    assert!(!took_effect(&mut s, "let a = \"shadow\"\nlet b = 1 + \"x\""));
    assert_eq!(ty(&mut s, "a"), "Int");
    assert!(ty(&mut s, "b").contains("unbound"));
    // A run-time error after a type declaration and an import: neither stays.
    assert!(!took_effect(&mut s, "import nn\ntype U = C\nlet c = C\nlet () = error \"late\""));
    assert!(ty(&mut s, "C").starts_with("error"));
    assert!(ty(&mut s, "nn.linear").starts_with("error"));
    // The same entry, fixed, takes effect.
    let echoes = s.eval("<entry>", "import nn\ntype U = C\nlet c = C", Path::new(".")).unwrap();
    assert!(echoes.iter().any(|e| matches!(e, Echo::Defined { name, .. } if name == "c")));
    // The failed run may have left values of its `U` in cells, so this `U` is another type
    // (shown as OCaml shows a redeclared type).
    assert_eq!(ty(&mut s, "c"), "U/2");
}

#[test]
fn what_a_failed_run_fixed_stays_fixed() {
    // The cell received an Int list before the entry failed, so its weak type variable must
    // stay Int: putting it back would let a later entry store a String in an Int list.
    let mut s = session();
    assert!(took_effect(&mut s, "let r = ref []"));
    assert!(!took_effect(&mut s, "let () = r := [1]; error \"x\""));
    assert_eq!(ty(&mut s, "r"), "Ref (List Int)");
    assert!(!took_effect(&mut s, "r := [\"s\"]"), "the cell holds Ints");
    // `:type` changes nothing, even where checking would fix a weak type variable.
    assert!(took_effect(&mut s, "let q = ref []"));
    assert_eq!(ty(&mut s, "q := [1.5]"), "Unit");
    assert_eq!(ty(&mut s, "q"), "Ref (List a)");
}

#[test]
fn only_the_latest_checked_entry_runs() {
    let mut s = session();
    let first = s.check("<1>", "let x = 1", Path::new(".")).unwrap();
    let second = s.check("<2>", "let y = 2", Path::new(".")).unwrap();
    assert!(s.run(first).is_err(), "a stale entry is refused");
    assert!(ty(&mut s, "x").contains("unbound"), "checking again abandoned the first entry");
    s.run(second).unwrap();
    assert_eq!(ty(&mut s, "y"), "Int");
    // A session that only checks (the language server's) never runs.
    let checked = s.check_only("<3>", "let z = 3", Path::new(".")).unwrap();
    assert!(s.run(checked).is_err());
}
