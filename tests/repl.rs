//! The REPL driven through a pseudo-terminal, as a person would use it.

use expectrl::{ControlCode, Session};
use std::process::Command;
use std::time::Duration;

fn start() -> Session {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dp"));
    let hist = std::env::temp_dir().join(format!("dp_repl_test_history_{}", std::process::id()));
    cmd.env("DP_HISTORY", hist).env("TERM", "dumb").env("NO_COLOR", "1");
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
    p.send_line("let f x =").unwrap();
    p.send_line("  x + 1").unwrap();
    p.expect("val f : Int -> Int").unwrap();
    p.send_line("(f").unwrap();
    p.send_line("  41)").unwrap();
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
