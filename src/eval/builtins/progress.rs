//! Showing long work: the progress builtins report to the session's `Reporter` (the machine
//! draws nothing; src/progress.rs is the terminal's bar).

use crate::builtins::B;
use crate::eval::machine::Machine;
use crate::runtime::perturbed::strip;
use crate::runtime::value::Value;
use crate::runtime::{FResult, Fault};

/// Where a training loop's progress goes. The session chooses it (a bar on a terminal); the
/// machine's default shows nothing.
pub trait Reporter {
    /// A loop of `total` steps starts.
    fn start(&mut self, total: u64, label: &str);
    /// One step is done; `loss` is its loss (NaN when it was not a number).
    fn tick(&mut self, loss: f64);
    /// The loop is over.
    fn finish(&mut self);
    /// `plot` wrote an SVG chart to `path` (a notebook shows it inline; a terminal does not).
    fn plotted(&mut self, _path: &str) {}
}

/// Shows nothing: the machine's reporter until the session gives it another.
pub struct Silent;

impl Reporter for Silent {
    fn start(&mut self, _total: u64, _label: &str) {}
    fn tick(&mut self, _loss: f64) {}
    fn finish(&mut self) {}
}

pub fn call(m: &mut Machine, b: B, arg: &mut dyn FnMut() -> Value) -> FResult<Value> {
    match b {
        B::ProgressStart => {
            let total = match arg() {
                Value::Int(n) => n.max(0) as u64,
                _ => 0,
            };
            let label = arg().as_str()?;
            m.reporter.start(total, &label);
        }
        B::ProgressTick => {
            let loss = match strip(&arg()) {
                Value::Float(x) => x,
                _ => f64::NAN,
            };
            m.reporter.tick(loss);
        }
        B::ProgressFinish => {
            let _ = arg();
            m.reporter.finish();
        }
        other => return Err(Fault::internal(format!("{other:?} is not a reporting builtin"))),
    }
    Ok(Value::Unit)
}
