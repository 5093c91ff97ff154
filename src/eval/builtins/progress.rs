//! Showing long work: the progress builtins report to the session's `Reporter` (the machine
//! draws nothing; src/progress.rs is the terminal's bar), and `plot` writes a line chart as
//! SVG.

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
        B::Plot => {
            let path = arg().as_str()?;
            let values: Vec<f64> =
                arg().iter_list().filter_map(|v| if let Value::Float(x) = strip(v) { Some(x) } else { None }).collect();
            plot(&path, &values).map_err(|e| Fault::new(format!("cannot plot to `{path}`: {e}")))?;
            m.reporter.plotted(&path);
        }
        other => return Err(Fault::internal(format!("{other:?} is not a reporting builtin"))),
    }
    Ok(Value::Unit)
}
fn plot(path: &str, values: &[f64]) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let finite: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    let (lo, hi) = finite.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
    let (lo, hi) = if !lo.is_finite() {
        (0.0, 1.0) // nothing finite to draw: an empty chart, not an infinite axis
    } else if hi > lo {
        (lo, hi)
    } else {
        let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        (lo - pad, hi + pad)
    };
    let root = SVGBackend::new(path, (640, 400)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .margin(20)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..(values.len().max(2) - 1) as f64, lo..hi)?;
    chart.configure_mesh().draw()?;
    // NaN and infinite values are gaps in the line, not points.
    let mut run: Vec<(f64, f64)> = Vec::new();
    for (i, &v) in values.iter().enumerate() {
        if v.is_finite() {
            run.push((i as f64, v));
        }
        if (!v.is_finite() || i + 1 == values.len()) && !run.is_empty() {
            chart.draw_series(LineSeries::new(std::mem::take(&mut run), &BLUE))?;
        }
    }
    root.present()?;
    Ok(())
}
