//! Builtins that reach outside the program: standard output, files, the command line, and
//! `error`, which ends the program with a message.

use crate::builtins::B;
use crate::eval::machine::Machine;
use crate::runtime::value::{show, Value};
use crate::runtime::{FResult, Fault};
use std::io::Write;

pub fn call(m: &mut Machine, b: B, arg: &mut dyn FnMut() -> Value) -> FResult<Value> {
    Ok(match b {
        B::Print | B::Println => {
            let s = show(&arg(), true);
            write_out(m, &s, b == B::Println)?;
            Value::Unit
        }
        B::Printf => {
            let format = arg().as_str()?;
            let s = super::strings::sprintf(&format, arg())?;
            write_out(m, &s, false)?;
            Value::Unit
        }
        B::ReadFile => Value::str(read(&arg().as_str()?)?),
        B::ReadLines => {
            let text = read(&arg().as_str()?)?;
            let lines: Vec<Value> = text.lines().map(Value::str).collect();
            Value::list(lines.into_iter())
        }
        B::WriteFile => {
            let path = arg().as_str()?;
            let text = arg().as_str()?;
            std::fs::write(path.as_str(), text.as_bytes())
                .map_err(|e| Fault::new(format!("cannot write `{path}`: {e}")))?;
            Value::Unit
        }
        B::Clock => {
            // Seconds on a monotonic clock, counted from the first call: differences time code.
            static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
            let _ = arg();
            Value::Float(START.get_or_init(std::time::Instant::now).elapsed().as_secs_f64())
        }
        B::ReadLine => {
            let _ = arg();
            let mut line = String::new();
            match std::io::stdin().read_line(&mut line) {
                Ok(0) => Value::none(),
                Ok(_) => {
                    let end = line.trim_end_matches('\n').trim_end_matches('\r').len();
                    line.truncate(end);
                    Value::some(Value::str(line))
                }
                Err(e) => return Err(Fault::new(format!("cannot read standard input: {e}"))),
            }
        }
        B::Getenv => match std::env::var(arg().as_str()?.as_str()) {
            Ok(v) => Value::some(Value::str(v)),
            Err(_) => Value::none(),
        },
        B::Args => Value::list(m.args.iter().map(|a| Value::str(a.clone())).collect::<Vec<_>>().into_iter()),
        B::Error => return Err(Fault::new(arg().as_str()?.to_string())),
        other => return Err(Fault::internal(format!("{other:?} is not an input/output builtin"))),
    })
}

fn write_out(m: &mut Machine, s: &str, newline: bool) -> FResult<()> {
    let r = if newline { writeln!(m.out, "{s}") } else { write!(m.out, "{s}") };
    if let Err(e) = r {
        // A closed pipe (`dp run f.dp | head`) ends the program quietly, as in other tools.
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            m.exit_code = Some(0);
        }
        return Err(Fault::new(format!("cannot write to standard output: {e}")));
    }
    Ok(())
}

/// A text file's contents; a file that is not UTF-8 is refused with the place of the first
/// bad byte.
fn read(path: &str) -> FResult<String> {
    let bytes = std::fs::read(path).map_err(|e| Fault::new(format!("cannot read `{path}`: {e}")))?;
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let before = &e.as_bytes()[..at];
        let line = 1 + before.iter().filter(|&&c| c == b'\n').count();
        let col = 1 + at - before.iter().rposition(|&c| c == b'\n').map_or(0, |i| i + 1);
        Fault::new(format!("cannot read `{path}`: it is not UTF-8 text (line {line}, byte {col} of the line)"))
    })
}
