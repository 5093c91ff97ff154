//! Showing long work: a progress bar with the running loss (drawn only on a terminal) and
//! line charts written as SVG.

use super::machine::{FResult, Fault, Machine};
use super::value::{fmt_float, Value};
use crate::builtins::B;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

pub struct Progress {
    bar: ProgressBar,
    /// Exponential moving average of the reported losses.
    smooth: Option<f64>,
}

fn text(v: Value) -> FResult<String> {
    match v {
        Value::Str(s) => Ok(s.to_string()),
        other => Err(Fault::internal(format!("expected a String, got {}", other.type_name()))),
    }
}

pub fn call(m: &mut Machine, b: B, arg: &mut dyn FnMut() -> Value) -> FResult<Value> {
    match b {
        B::ProgressStart => {
            let total = match arg() {
                Value::Int(n) => n.max(0) as u64,
                _ => 0,
            };
            let label = text(arg())?;
            let target = if std::io::stderr().is_terminal() {
                ProgressDrawTarget::stderr()
            } else {
                ProgressDrawTarget::hidden()
            };
            let bar = ProgressBar::with_draw_target(Some(total), target);
            let style = ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg} ({elapsed}, eta {eta})")
                .map_err(|e| Fault::new(e.to_string()))?
                .progress_chars("=> ");
            bar.set_style(style);
            bar.set_prefix(label);
            m.progress = Some(Progress { bar, smooth: None });
        }
        B::ProgressTick => {
            let loss = match crate::ad::strip(&arg()) {
                Value::Float(x) => x,
                _ => f64::NAN,
            };
            if let Some(p) = &mut m.progress {
                let s = p.smooth.map_or(loss, |s| 0.9 * s + 0.1 * loss);
                p.smooth = Some(s);
                p.bar.set_message(format!("loss {}", fmt_float((s * 1e4).round() / 1e4)));
                p.bar.inc(1);
            }
        }
        B::ProgressFinish => {
            let _ = arg();
            if let Some(p) = m.progress.take() {
                p.bar.finish_and_clear();
            }
        }
        B::Plot => {
            let path = text(arg())?;
            let values: Vec<f64> = arg()
                .iter_list()
                .filter_map(|v| if let Value::Float(x) = crate::ad::strip(v) { Some(x) } else { None })
                .collect();
            plot(&path, &values).map_err(|e| Fault::new(format!("cannot plot to `{path}`: {e}")))?;
        }
        other => return Err(Fault::internal(format!("{other:?} is not a reporting builtin"))),
    }
    Ok(Value::Unit)
}

fn plot(path: &str, values: &[f64]) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let finite: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    let (lo, hi) = finite.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
    let (lo, hi) = if lo.is_finite() && hi > lo { (lo, hi) } else { (lo.min(0.0), lo.max(0.0) + 1.0) };
    let root = SVGBackend::new(path, (640, 400)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .margin(20)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..(values.len().max(2) - 1) as f64, lo..hi)?;
    chart.configure_mesh().draw()?;
    chart.draw_series(LineSeries::new(values.iter().enumerate().map(|(i, &v)| (i as f64, v)), &BLUE))?;
    root.present()?;
    Ok(())
}
