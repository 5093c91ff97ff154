//! Editor support (`editors/`): the word lists of the TextMate grammar, the Vim syntax file and
//! the Emacs mode agree with `src/syntax/keywords.rs`, and the editors' own headless tests pass:
//!
//! - `editors/vscode/test`: `npm ci` (when `node_modules` is missing), then
//!   `node --test grammar.test.js extension.test.js` (vscode-textmate + vscode-oniguruma, and the
//!   extension's client code against a fake `vscode` API);
//! - `editors/tests/vim_test.vim` under `vim -Nu NONE -i NONE -es` (and `nvim --headless` too
//!   when it is installed);
//! - `editors/emacs/dp-mode-tests.el` under `emacs --batch` with ERT.
//!
//! A missing tool (node/npm, vim, emacs) skips its test with a notice, unless the environment
//! variable `DP_REQUIRE_EDITORS=1` is set, in which case it is a failure.

use dp::syntax::keywords::{BUILTINS, KEYWORDS, TYPE_NAMES};
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn editors_dir() -> PathBuf {
    repo_root().join("editors")
}

fn read_editor_file(rel: &str) -> String {
    let path = editors_dir().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn word_set(words: &[&str]) -> BTreeSet<String> {
    words.iter().map(|w| w.to_string()).collect()
}

/// The identifiers in a TextMate (Oniguruma) regex, after dropping escapes such as `\b`, `\w`.
fn regex_words(re: &str) -> BTreeSet<String> {
    let mut words = BTreeSet::new();
    let mut current = String::new();
    let mut flush = |current: &mut String| {
        if current.chars().next().is_some_and(|c| c.is_ascii_alphabetic()) {
            words.insert(current.clone());
        }
        current.clear();
    };
    let mut chars = re.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            chars.next();
            flush(&mut current);
        } else if c.is_ascii_alphanumeric() || c == '_' {
            current.push(c);
        } else {
            flush(&mut current);
        }
    }
    flush(&mut current);
    words
}

/// The words of every `match` regex in `repository.<entry>.patterns` of the TextMate grammar.
fn grammar_words(grammar: &serde_json::Value, entry: &str) -> BTreeSet<String> {
    let patterns = grammar["repository"][entry]["patterns"]
        .as_array()
        .unwrap_or_else(|| panic!("dp.tmLanguage.json: repository.{entry}.patterns is missing"));
    let mut words = BTreeSet::new();
    for p in patterns {
        let re = p["match"]
            .as_str()
            .unwrap_or_else(|| panic!("dp.tmLanguage.json: a pattern of repository.{entry} has no `match`"));
        words.extend(regex_words(re));
    }
    words
}

fn load_grammar() -> serde_json::Value {
    let text = read_editor_file("vscode/syntaxes/dp.tmLanguage.json");
    serde_json::from_str(&text).expect("dp.tmLanguage.json is not valid JSON")
}

fn assert_same(what: &str, got: &BTreeSet<String>, want: &BTreeSet<String>) {
    let missing: Vec<_> = want.difference(got).collect();
    let extra: Vec<_> = got.difference(want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: missing {missing:?}, not in src/syntax/keywords.rs {extra:?}"
    );
}

fn assert_covers(what: &str, got: &BTreeSet<String>, want: &BTreeSet<String>) {
    let missing: Vec<_> = want.difference(got).collect();
    assert!(missing.is_empty(), "{what}: missing {missing:?}");
}

#[test]
fn textmate_grammar_word_lists_match_keywords_rs() {
    let grammar = load_grammar();
    assert_eq!(grammar["scopeName"], "source.dp");
    let keywords = grammar_words(&grammar, "keywords");
    assert_same("TextMate repository.keywords", &keywords, &word_set(KEYWORDS));
    let builtins = grammar_words(&grammar, "builtins");
    assert_covers("TextMate repository.builtins", &builtins, &word_set(BUILTINS));
    let in_both: Vec<_> = builtins.intersection(&keywords).collect();
    assert!(in_both.is_empty(), "TextMate builtins that are keywords: {in_both:?}");
    let types = grammar_words(&grammar, "builtin-types");
    assert_covers("TextMate repository.builtin-types", &types, &word_set(TYPE_NAMES));
    // `let <keyword>` must never highlight the keyword as a bound name.
    let binding = regex_words(grammar["repository"]["binding"]["begin"].as_str().expect("binding.begin"));
    assert_covers("TextMate repository.binding (its keyword exclusions)", &binding, &word_set(KEYWORDS));
}

/// `syn keyword <group> [options] words...` lines of the Vim syntax file, for the given groups.
fn vim_keywords(syntax: &str, groups: &[&str]) -> BTreeSet<String> {
    let mut words = BTreeSet::new();
    for line in syntax.lines() {
        let mut tokens = line.split_whitespace();
        if !matches!(tokens.next(), Some("syn" | "syntax")) || tokens.next() != Some("keyword") {
            continue;
        }
        let Some(group) = tokens.next() else { continue };
        if !groups.contains(&group) {
            continue;
        }
        for t in tokens {
            let option = t.contains('=')
                || matches!(
                    t,
                    "contained"
                        | "skipwhite"
                        | "skipnl"
                        | "skipempty"
                        | "transparent"
                        | "fold"
                        | "display"
                        | "extend"
                        | "conceal"
                );
            if !option {
                words.insert(t.to_string());
            }
        }
    }
    words
}

#[test]
fn vim_syntax_word_lists_match_keywords_rs() {
    let syntax = read_editor_file("vim/syntax/dp.vim");
    let keywords = vim_keywords(&syntax, &["dpConditional", "dpImport", "dpKeyword", "dpOperatorKeyword", "dpBoolean"]);
    assert_same("Vim keyword groups", &keywords, &word_set(KEYWORDS));
    assert_covers("Vim dpBuiltin", &vim_keywords(&syntax, &["dpBuiltin"]), &word_set(BUILTINS));
    assert_covers("Vim dpBuiltinType", &vim_keywords(&syntax, &["dpBuiltinType"]), &word_set(TYPE_NAMES));
    let ftdetect = read_editor_file("vim/ftdetect/dp.vim");
    assert!(ftdetect.contains("*.dp"), "vim/ftdetect/dp.vim does not mention *.dp");
}

/// The strings of the quoted list in `(defconst NAME '("a" "b" ...)` of an Emacs Lisp file.
fn elisp_string_list(source: &str, name: &str) -> BTreeSet<String> {
    let head = format!("(defconst {name}");
    let start = source.find(&head).unwrap_or_else(|| panic!("dp-mode.el has no {head}")) + head.len();
    let rest = &source[start..];
    let open = rest.find("'(").unwrap_or_else(|| panic!("dp-mode.el: {name} is not a quoted list")) + 2;
    let close = rest[open..].find(')').unwrap_or_else(|| panic!("dp-mode.el: {name} is not closed")) + open;
    rest[open..close].split('"').skip(1).step_by(2).map(str::to_string).collect()
}

#[test]
fn emacs_mode_word_lists_match_keywords_rs() {
    let source = read_editor_file("emacs/dp-mode.el");
    assert_same("Emacs dp-keywords", &elisp_string_list(&source, "dp-keywords"), &word_set(KEYWORDS));
    assert_covers("Emacs dp-builtins", &elisp_string_list(&source, "dp-builtins"), &word_set(BUILTINS));
    assert_covers("Emacs dp-type-names", &elisp_string_list(&source, "dp-type-names"), &word_set(TYPE_NAMES));
    assert!(
        source.contains("(add-to-list 'eglot-server-programs '(dp-mode \"dp\" \"lsp\"))"),
        "dp-mode.el does not register `dp lsp` with eglot"
    );
}

#[test]
fn helper_regex_words() {
    assert_eq!(regex_words(r"\b(?:let|rec|and)\b(?!')"), word_set(&["let", "rec", "and"]));
    assert_eq!(regex_words(r"(?<![\w'.])(?:grad|is_nan)\b"), word_set(&["grad", "is_nan"]));
}

// ---- the editors' own test suites ------------------------------------------------------------

fn editors_required() -> bool {
    std::env::var("DP_REQUIRE_EDITORS").is_ok_and(|v| v == "1")
}

fn tool_works(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The standard output of `program args`, if it runs and succeeds.
fn tool_output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).stdin(Stdio::null()).stderr(Stdio::null()).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Writes to the real stderr, which the test harness does not capture, so the notice shows.
fn notice(msg: &str) {
    let _ = writeln!(std::io::stderr(), "note: {msg}");
}

/// Prints a notice and returns (the test is skipped), or fails under `DP_REQUIRE_EDITORS=1`.
fn missing_tool(tool: &str, test: &str) {
    assert!(
        !editors_required(),
        "{tool} is not installed, and DP_REQUIRE_EDITORS=1 requires the {test} editor test to run"
    );
    notice(&format!(
        "skipping the {test} editor test: {tool} is not installed (DP_REQUIRE_EDITORS=1 makes this an error)"
    ));
}

/// Runs a command with a time limit; panics with its output if it fails or runs too long.
fn run_checked(what: &str, cmd: &mut Command, limit: Duration) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let mut out_pipe = child.stdout.take().expect("stdout");
    let mut err_pipe = child.stderr.take().expect("stderr");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out_pipe.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for a child process") {
            break Some(status);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    println!("{what}:\n{stdout}{stderr}");
    match status {
        None => panic!("{what}: still running after {limit:?}; killed\n{stdout}\n{stderr}"),
        Some(s) if !s.success() => panic!("{what}: failed ({s})\n{stdout}\n{stderr}"),
        Some(_) => {}
    }
}

#[test]
fn vscode_textmate_grammar_tests() {
    // node:test needs Node.js 18 or later.
    let node_major = tool_output("node", &["--version"])
        .and_then(|v| v.trim().trim_start_matches('v').split('.').next()?.parse::<u32>().ok());
    if node_major.is_none_or(|m| m < 18) || !tool_works("npm", &["--version"]) {
        return missing_tool("node (18 or later) with npm", "VS Code grammar");
    }
    let dir = editors_dir().join("vscode").join("test");
    let installed = ["vscode-textmate", "vscode-oniguruma"]
        .iter()
        .all(|m| dir.join("node_modules").join(m).join("package.json").is_file());
    if !installed {
        run_checked(
            "npm ci (editors/vscode/test)",
            Command::new("npm").args(["ci", "--no-audit", "--no-fund"]).current_dir(&dir),
            Duration::from_secs(600),
        );
    }
    run_checked(
        "node --test grammar.test.js extension.test.js (editors/vscode/test)",
        Command::new("node").args(["--test", "grammar.test.js", "extension.test.js"]).current_dir(&dir),
        Duration::from_secs(300),
    );
}

fn vim_script() -> PathBuf {
    editors_dir().join("tests").join("vim_test.vim")
}

#[test]
fn vim_syntax_and_indent_tests() {
    // A vim built without syntax highlighting (Debian's vim-tiny) cannot run the test.
    let features = tool_output("vim", &["--version"]).unwrap_or_default();
    if !(features.contains("+syntax") && features.contains("+eval")) {
        return missing_tool("vim (with +syntax and +eval, e.g. Debian's `vim` package)", "Vim");
    }
    let script = vim_script();
    run_checked(
        "vim -Nu NONE -i NONE -es -S editors/tests/vim_test.vim",
        Command::new("vim").args(["-Nu", "NONE", "-i", "NONE", "-es", "-S"]).arg(&script).current_dir(repo_root()),
        Duration::from_secs(300),
    );
}

#[test]
fn neovim_syntax_and_indent_tests() {
    // Neovim is optional: the Vim files are meant to work in both, but CI only needs Vim.
    if !tool_works("nvim", &["--version"]) {
        notice("skipping the Neovim editor test: nvim is not installed");
        return;
    }
    run_checked(
        "nvim --headless -u NONE -i NONE -es -S editors/tests/vim_test.vim",
        Command::new("nvim")
            .args(["--headless", "-u", "NONE", "-i", "NONE", "-es", "-S"])
            .arg(vim_script())
            .current_dir(repo_root()),
        Duration::from_secs(300),
    );
}

#[test]
fn emacs_mode_ert_tests() {
    if !tool_works("emacs", &["--version"]) {
        return missing_tool("emacs", "Emacs");
    }
    let el = |name: &str| -> PathBuf { Path::new("editors").join("emacs").join(name) };
    run_checked(
        "emacs --batch ... -f ert-run-tests-batch-and-exit",
        Command::new("emacs")
            .arg("--batch")
            .arg("-l")
            .arg(el("dp-mode.el"))
            .arg("-l")
            .arg(el("dp-mode-tests.el"))
            .args(["-f", "ert-run-tests-batch-and-exit"])
            .current_dir(repo_root()),
        Duration::from_secs(300),
    );
}
