//! The REPL driven through a pseudo-terminal, as a person would use it.

use expectrl::{ControlCode, Session};
use std::process::Command;
use std::time::Duration;

fn start() -> Session {
    start_in("dumb")
}

/// The REPL under `TERM=term`: "dumb" reads plain lines; a real terminal name gets rustyline's
/// line editor in raw mode (keys, completion, history).
fn start_in(term: &str) -> Session {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dp"));
    let hist = std::env::temp_dir().join(format!("dp_repl_test_history_{}", std::process::id()));
    cmd.env("DP_HISTORY", hist).env("TERM", term).env("NO_COLOR", "1");
    let mut p = Session::spawn(cmd).expect("spawn dp in a pty");
    p.set_expect_timeout(Some(Duration::from_secs(30)));
    p.expect("dp> ").expect("the first prompt");
    p
}

#[test]
fn repl_echoes_values_with_types_and_keeps_definitions() {
    let mut p = start();
    p.send_line("1 + 2").unwrap();
    p.expect("- : Int = 3").unwrap();
    p.send_line("let sq x = x * x").unwrap();
    p.expect("val sq : ").unwrap();
    p.send_line("sq 1.5").unwrap();
    p.expect("- : Float = 2.25").unwrap();
    p.send_line(":quit").unwrap();
    p.expect(expectrl::Eof).unwrap();
}

#[test]
fn repl_multi_line_input_continues_until_complete() {
    let mut p = start();
    // Once an entry spans several lines, a blank line submits it (see `repl_multi_line_*`).
    p.send_line("let f x =").unwrap();
    p.send_line("  x + 1").unwrap();
    p.send_line("").unwrap();
    p.expect("val f : Int -> Int").unwrap();
    p.send_line("(f").unwrap();
    p.send_line("  41)").unwrap();
    p.send_line("").unwrap();
    p.expect("- : Int = 42").unwrap();
    p.send_line(":quit").unwrap();
}

#[test]
fn repl_type_command() {
    let mut p = start();
    // Principal types: `x + 1.0` is Float or Tensor arithmetic, and `:type` shows the constraint.
    p.send_line(":type fun x -> x + 1.0").unwrap();
    p.expect("Real a => a -> a").unwrap();
    p.send_line(":type fun p g -> p - 0.1 * g").unwrap();
    p.expect("Broadcast a b c) => a -> b -> c").unwrap();
    p.send_line(":type grad").unwrap();
    p.expect("(a -> Float) -> a -> a").unwrap();
    p.send_line(":quit").unwrap();
}

#[test]
fn repl_survives_errors() {
    let mut p = start();
    p.send_line("1 + \"a\"").unwrap();
    p.expect("type mismatch").unwrap();
    p.send_line("1 / 0").unwrap();
    p.expect("division by zero").unwrap();
    p.send_line("let ok = 5").unwrap();
    p.expect("val ok : Int").unwrap();
    p.send_line("ok * 2").unwrap();
    p.expect("- : Int = 10").unwrap();
    p.send_line(":quit").unwrap();
}

#[test]
fn repl_ctrl_c_interrupts_a_running_evaluation() {
    let mut p = start();
    p.send_line("let kept = 7").unwrap();
    p.expect("val kept : Int").unwrap();
    p.send_line("let rec spin x = spin x in spin 0").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    p.send(ControlCode::EndOfText).unwrap();
    p.expect("interrupted").unwrap();
    p.send_line("kept + 1").unwrap();
    p.expect("- : Int = 8").unwrap();
    p.send(ControlCode::EndOfTransmission).unwrap();
    p.expect(expectrl::Eof).unwrap();
}

#[test]
fn repl_ctrl_c_is_not_caught_by_catch() {
    let mut p = start();
    // The handler would print "caught"; Ctrl-C ends the evaluation instead.
    // (Spelled in two parts so that the terminal's echo of the line does not contain it.)
    p.send_line("catch (fun () -> let rec spin x = spin x in spin 0) (fun m -> println (\"ca\" ++ \"ught \" ++ m); 1)")
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    p.send(ControlCode::EndOfText).unwrap();
    let seen = p.expect("interrupted").unwrap();
    assert!(!String::from_utf8_lossy(seen.before()).contains("caught"), "the handler ran");
    // The REPL goes on: a caught error is a value, an uncaught one a report.
    p.send_line("catch (fun () -> 1 / 0) (fun m -> string_length m)").unwrap();
    p.expect("- : Int = 16").unwrap();
    p.send_line("catch (fun () -> error \"a\") (fun m -> error (m ++ \"b\"))").unwrap();
    p.expect("ab").unwrap();
    p.send_line("2 + 2").unwrap();
    p.expect("- : Int = 4").unwrap();
    p.send(ControlCode::EndOfTransmission).unwrap();
    p.expect(expectrl::Eof).unwrap();
}

#[test]
fn repl_help_and_load() {
    let mut p = start();
    p.send_line(":help").unwrap();
    p.expect(":type e").unwrap();
    let file = std::env::temp_dir().join(format!("dp_repl_load_{}.dp", std::process::id()));
    std::fs::write(&file, "let loaded_value = 40 + 2\n").unwrap();
    p.send_line(format!(":load {}", file.display())).unwrap();
    p.expect("loaded").unwrap();
    p.send_line("loaded_value").unwrap();
    p.expect("- : Int = 42").unwrap();
    p.send_line(":quit").unwrap();
}

// ---------------------------------------------------------------- transactional entries
// An entry takes effect whole or not at all: after a failed entry its names are unbound (or
// keep their earlier binding), never bound to a value that was not computed.

/// Sends each line and waits for what it must print ("" waits for nothing: a line that only
/// continues an entry).
fn talk(p: &mut Session, exchange: &[(&str, &str)]) {
    for (line, reply) in exchange {
        p.send_line(line).unwrap();
        if !reply.is_empty() {
            p.expect(*reply).unwrap_or_else(|e| panic!("after `{line}`, no `{reply}`: {e}"));
        }
    }
}

#[test]
fn repl_type_error_leaves_names_unbound_or_as_before() {
    let mut p = start();
    talk(
        &mut p,
        &[
            // A one-line `let rec` waits for a possible `and` line; the blank line submits it.
            ("let rec q n = q + 1", ""),
            ("", "type mismatch"),
            ("q", "unbound variable `q`"),
            ("let q = 5", "val q : Int"),
            ("let rec q n = q + 1", ""),
            ("", "type mismatch"),
            ("q * 2", "- : Int = 10"),
            (":quit", ""),
        ],
    );
}

#[test]
fn repl_run_time_error_undoes_the_whole_entry() {
    let mut p = start();
    talk(
        &mut p,
        &[
            ("let x = error \"boom\"", "boom"),
            ("x + 1", "unbound variable `x`"),
            // A pattern `let` whose right-hand side prints, then fails: nothing is bound.
            ("let (a, b) = (println \"ran\"; (1, 1 / 0))", "division by zero"),
            ("a", "unbound variable `a`"),
            ("let after = 3", "val after : Int"),
            (":quit", ""),
        ],
    );
}

#[test]
fn repl_interrupted_entry_binds_nothing() {
    let mut p = start();
    talk(&mut p, &[("let kept = 7", "val kept : Int"), ("let spun = let rec spin x = spin x in spin 0", "")]);
    std::thread::sleep(Duration::from_millis(500));
    p.send(ControlCode::EndOfText).unwrap();
    p.expect("interrupted").unwrap();
    talk(&mut p, &[("spun", "unbound variable `spun`"), ("kept + 1", "- : Int = 8"), (":quit", "")]);
}

#[test]
fn repl_failed_load_keeps_earlier_definitions() {
    let dir = std::env::temp_dir();
    let typo = dir.join(format!("dp_repl_bad_load_{}.dp", std::process::id()));
    std::fs::write(&typo, "let good = 2\nlet bad = 1 + \"a\"\n").unwrap();
    let crash = dir.join(format!("dp_repl_crash_load_{}.dp", std::process::id()));
    std::fs::write(&crash, "let good = 3\nlet also = 4\nlet () = error \"late failure\"\n").unwrap();
    let mut p = start();
    talk(
        &mut p,
        &[
            ("let good = 1", "val good : Int"),
            (&format!(":load {}", typo.display()), "type mismatch"),
            ("good", "- : Int = 1"),
            (&format!(":load {}", crash.display()), "late failure"),
            ("good + 10", "- : Int = 11"),
            ("also", "unbound variable `also`"),
            (":quit", ""),
        ],
    );
}

// ---------------------------------------------------------------- multi-line input
// Typed key by key: each character is its own write to the terminal, then Enter.

fn type_line(p: &mut Session, line: &str) {
    for c in line.chars() {
        p.send(c.to_string()).unwrap();
    }
    p.send("\r").unwrap();
}

/// Types `lines` key by key, then waits for `reply`.
fn type_lines(p: &mut Session, lines: &[&str], reply: &str) {
    for line in lines {
        type_line(p, line);
    }
    p.expect(reply).unwrap_or_else(|e| panic!("after {lines:?}, no `{reply}`: {e}"));
}

#[test]
fn repl_multi_line_match_if_pipe_and_let_and() {
    multi_line_forms(start());
}

#[test]
fn repl_multi_line_in_the_line_editor() {
    multi_line_forms(start_in("xterm"));
}

fn multi_line_forms(mut p: Session) {
    let p = &mut p;
    type_lines(p, &["let f x = match x with", "| 0 -> \"zero\"", "| _ -> \"other\"", ""], "val f : Int -> String");
    type_lines(p, &["f 3"], "- : String = \"other\"");
    type_lines(p, &["let sign x =", "  if x < 0 then -1", "  else 1", ""], "val sign : Int -> Int");
    let pipe = ["let total =", "  [1, 2, 3]", "  |> map (fun x -> x * 10)", "  |> sum_int", ""];
    type_lines(p, &pipe, "val total : Int");
    let group = [
        "let rec even n = if n == 0 then true else odd (n - 1)",
        "and odd n = if n == 0 then false else even (n - 1)",
        "",
    ];
    type_lines(p, &group, "val odd : Int -> Bool");
    type_lines(p, &["(sign (-4), total, even 10)"], "- : (Int, Int, Bool) = (-1, 60, true)");
    p.send_line(":quit").unwrap();
}

#[test]
fn repl_ctrl_c_abandons_the_entry_being_typed() {
    // In the line editor (raw mode) Ctrl-C is a key: the unfinished entry is dropped.
    let mut p = start_in("xterm");
    type_line(&mut p, "let abandoned x =");
    type_line(&mut p, "  x +");
    p.send(ControlCode::EndOfText).unwrap();
    // Give the editor time to start the next line: it drops keys typed ahead of it.
    std::thread::sleep(Duration::from_millis(300));
    type_lines(&mut p, &["20 + 22"], "- : Int = 42");
    type_lines(&mut p, &["abandoned"], "unbound variable `abandoned`");
    p.send_line(":quit").unwrap();
}

#[test]
fn repl_multi_line_blank_line_rules() {
    let mut p = start();
    // A blank line does not submit an entry that still stops too early.
    type_lines(&mut p, &["let g =", "", "  (1 +", "", "  2)", ""], "val g : Int");
    // A syntax error that more lines cannot fix is reported at once.
    type_lines(&mut p, &["let h x =", "  x + )"], "syntax error");
    type_lines(&mut p, &["g + 1"], "- : Int = 4");
    p.send_line(":quit").unwrap();
}

// ---------------------------------------------------------------- colour

/// What `dp ARGS bad.dp` writes to a pseudo-terminal (so stderr is a terminal), with `env`.
fn on_a_terminal(args: &[&str], env: &[(&str, &str)], until: &str) -> String {
    let file = std::env::temp_dir().join(format!("dp_colour_{}.dp", std::process::id()));
    std::fs::write(&file, "let x = 1 + \"a\"\n").unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dp"));
    cmd.args(args).arg(&file).env_remove("NO_COLOR").env("TERM", "xterm-256color").envs(env.iter().copied());
    let mut p = Session::spawn(cmd).expect("spawn dp in a pty");
    p.set_expect_timeout(Some(Duration::from_secs(30)));
    let found = p.expect(until).expect("the report");
    String::from_utf8_lossy(found.before()).into_owned()
}

#[test]
fn colour_follows_the_terminal_no_color_term_dumb_and_the_flag() {
    let esc = '\u{1b}';
    assert!(on_a_terminal(&["run"], &[], "type mismatch").contains(esc), "a terminal gets colour");
    assert!(!on_a_terminal(&["run"], &[("NO_COLOR", "1")], "type mismatch").contains(esc), "NO_COLOR");
    assert!(!on_a_terminal(&["run"], &[("TERM", "dumb")], "type mismatch").contains(esc), "TERM=dumb");
    assert!(!on_a_terminal(&["--color", "never", "run"], &[], "type mismatch").contains(esc), "--color never");
    // Off a terminal: no colour unless forced.
    let piped = |args: &[&str]| {
        let file = std::env::temp_dir().join(format!("dp_colour_piped_{}.dp", std::process::id()));
        std::fs::write(&file, "let x = 1 + \"a\"\n").unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_dp")).args(args).arg(&file).env_remove("NO_COLOR").output().unwrap();
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(!piped(&["check"]).contains(esc), "a pipe gets no colour");
    assert!(piped(&["check", "--color", "always"]).contains(esc), "--color always");
    assert!(piped(&["check", "--color", "always"]).contains("type mismatch"));
}

#[test]
fn colour_of_the_repl_prompt() {
    let prompt = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_dp"));
        let hist = std::env::temp_dir().join(format!("dp_repl_colour_history_{}", std::process::id()));
        cmd.args(args).env("DP_HISTORY", hist).env_remove("NO_COLOR").env("TERM", "xterm-256color");
        cmd.envs(env.iter().copied());
        let mut p = Session::spawn(cmd).expect("spawn dp in a pty");
        p.set_expect_timeout(Some(Duration::from_secs(30)));
        let found = p.expect("dp> ").expect("the prompt");
        let text = String::from_utf8_lossy(found.before()).into_owned();
        p.send_line(":quit").unwrap();
        text
    };
    assert!(prompt(&[], &[]).contains("\u{1b}[1;32m"), "a coloured prompt on a terminal");
    assert!(!prompt(&[], &[("NO_COLOR", "1")]).contains("\u{1b}[1;32m"), "NO_COLOR");
    assert!(!prompt(&["--color", "never"], &[]).contains("\u{1b}[1;32m"), "--color never");
}

// ---------------------------------------------------------------- discoverability

#[test]
fn repl_browse_doc_and_reload() {
    let file = std::env::temp_dir().join(format!("dp_repl_reload_{}.dp", std::process::id()));
    std::fs::write(&file, "let version = 1\n").unwrap();
    let mut p = start();
    talk(
        &mut p,
        &[
            (":browse nn", "linear : "),
            (":browse prelude", "minimum : Ord a => List a -> Option a"),
            (":doc map", "applies `f` to each element"),
            (":doc optim.adam", "Kingma & Ba"),
            // A user's own `///` comment, typed before the definition (the comment line waits).
            ("/// Triples.", ""),
            ("let triple x = 3 * x", ""),
            ("", "val triple"),
            (":doc triple", "Triples."),
            (":browse", "triple : Int -> Int"),
            (&format!(":load {}", file.display()), "loaded"),
        ],
    );
    std::fs::write(&file, "let version = 2\n").unwrap();
    talk(
        &mut p,
        &[
            (":reload", "loaded"),
            ("version", "- : Int = 2"),
            (":doc no_such_name", "no documentation for `no_such_name`"),
            (":quit", ""),
        ],
    );
}

#[test]
fn repl_tab_completes_user_names_and_members() {
    let mut p = start_in("xterm");
    p.send_line("let my_counter = 41").unwrap();
    p.expect("val my_counter : Int").unwrap();
    p.send("my_cou").unwrap();
    p.send("\t").unwrap();
    p.send(" + 1\r").unwrap();
    p.expect("- : Int = 42").unwrap();
    // Wait for the import to finish (its echo, then the next prompt): in raw mode the line
    // editor does not reliably keep keys typed ahead while an entry runs.
    p.send_line("import nn").unwrap();
    p.expect("import nn").unwrap();
    p.expect("dp> ").unwrap();
    p.send("nn.batch_si").unwrap();
    p.send("\t").unwrap();
    p.send(" (zeros [3, 2])\r").unwrap();
    p.expect("- : Int = 3").unwrap();
    p.send_line(":quit").unwrap();
}
