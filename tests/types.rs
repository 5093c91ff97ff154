//! The type checker's promises that need generated programs: no fixed nesting limit.

use crate::run::run_dp;

fn assert_prints(src: &str, want: &str) {
    let r = run_dp(src);
    assert!(r.ok && r.stdout == want, "expected {want:?}, got {:?} / {}", r.stdout, r.stderr);
}

#[test]
fn nesting_has_no_fixed_limit() {
    let n = 100_000;
    let lets: String = (0..n).map(|i| format!("  let x{i} = {i} in\n")).collect();
    assert_prints(&format!("let r =\n{lets}  x{}\nprintln r\n", n - 1), &format!("{}\n", n - 1));
    let sum = vec!["1"; n].join(" + ");
    assert_prints(&format!("let r = {sum}\nprintln r\n"), &format!("{n}\n"));
    // A generic sum: one `Broadcast` constraint per `+`, solved as it is met.
    let xs = vec!["x"; n].join(" + ");
    assert_prints(&format!("let f x = {xs}\nprintln (f 1.0)\n"), &format!("{n}.0\n"));
    let seq: String = (0..3000).map(|_| "  print 1;\n").collect();
    assert_prints(&format!("let () =\n{seq}  println 2\n"), &format!("{}2\n", "1".repeat(3000)));
}
