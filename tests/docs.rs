//! Doc comments, the standard library's reference page and the REPL's completion.

use dp::docs::{doc_before, Library};
use dp::repl::Completions;
use std::path::Path;

#[test]
fn every_standard_library_function_has_a_doc_comment() {
    let lib = Library::load().expect("the standard library loads");
    let undocumented: Vec<String> =
        lib.entries.iter().filter(|e| e.module != "builtins" && e.doc.is_none()).map(|e| e.qualified()).collect();
    assert!(undocumented.is_empty(), "write a `///` doc comment above: {}", undocumented.join(", "));
    assert!(lib.module("prelude").count() > 40 && lib.module("nn").count() > 20 && lib.module("optim").count() > 10);
}

#[test]
fn the_committed_reference_page_is_up_to_date() {
    let out = std::env::temp_dir().join(format!("dp_stdlib_{}.md", std::process::id()));
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_dp")).arg("doc").arg(&out).status().unwrap();
    assert!(status.success());
    let fresh = std::fs::read_to_string(&out).unwrap();
    let committed =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/stdlib.md")).unwrap_or_default();
    assert!(fresh == committed, "docs/stdlib.md is stale: run `cargo run -- doc` and commit it");
    assert!(fresh.contains("### `nn.linear`") && fresh.contains("| `grad` |"));
}

#[test]
fn doc_comments_are_the_triple_slash_lines_right_above() {
    let src = "// ordinary\nlet a = 1\n/// One.\n/// Two.\nlet b = 2\n/// Detached.\n\nlet c = 3\n";
    let at = |name: &str| src.find(&format!("let {name}")).unwrap() + 4;
    assert_eq!(doc_before(src, at("a")), None, "an ordinary comment is no doc");
    assert_eq!(doc_before(src, at("b")).as_deref(), Some("One.\nTwo."));
    assert_eq!(doc_before(src, at("c")), None, "a blank line detaches a doc comment");
    // Doc comments are comments to the lexer: the program runs as before.
    let mut s = dp::Session::new().unwrap();
    s.set_output(Box::new(std::io::sink()));
    assert!(s.eval("t.dp", &format!("{src}let d = a + b + c // trailing\n/* block */\n"), Path::new(".")).is_ok());
}

#[test]
fn completion_of_keywords_builtins_prelude_user_names_and_members() {
    let mut s = dp::Session::new().unwrap();
    s.set_output(Box::new(std::io::sink()));
    s.eval("<t>", "let my_value = 1\nimport optim\n", Path::new(".")).unwrap();
    let c = Completions::of(&s);
    let has = |line: &str, want: &str| {
        let (start, found) = c.complete(line, line.len());
        assert!(found.iter().any(|f| f == want), "`{line}` offers {found:?}, not {want}");
        start
    };
    assert_eq!(has("mat", "match"), 0);
    has("gra", "grad");
    has("1 + fold_l", "fold_left");
    assert_eq!(has("let z = my_v", "my_value"), 8);
    assert_eq!(has("nn.li", "linear"), 3);
    has("(optim.ad", "adam");
    has(":br", ":browse");
    assert!(c.complete("nn.", 3).1.contains(&"linear".to_string()), "all members after `nn.`");
    // Not every character before a word is one byte wide.
    assert_eq!(has("\"→\" ++ jo", "join"), 9);
    assert_eq!(has("→nn.li", "linear"), 6);
    assert!(c.complete("é", 2).1.is_empty() && c.complete("", 0).1.is_empty());
}
