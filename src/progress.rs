//! The progress bar a session gives its machine (`eval::builtins::progress::Reporter`): drawn
//! on standard error only when that is a terminal, with an exponential moving average of the
//! reported losses.

use crate::eval::builtins::progress::Reporter;
use crate::runtime::value::fmt_float;
use indicatif::{ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

#[derive(Default)]
pub struct Bar {
    running: Option<Running>,
}

struct Running {
    bar: indicatif::ProgressBar,
    /// Exponential moving average of the reported losses.
    smooth: Option<f64>,
}

impl Reporter for Bar {
    fn start(&mut self, total: u64, label: &str) {
        let target =
            if std::io::stderr().is_terminal() { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() };
        let bar = indicatif::ProgressBar::with_draw_target(Some(total), target);
        // The template is a constant: it parses, but a bar without style is no reason to fail.
        if let Ok(style) = ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg} ({elapsed}, eta {eta})")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(label.to_string());
        self.running = Some(Running { bar, smooth: None });
    }

    fn tick(&mut self, loss: f64) {
        if let Some(p) = &mut self.running {
            let s = p.smooth.map_or(loss, |s| 0.9 * s + 0.1 * loss);
            p.smooth = Some(s);
            p.bar.set_message(format!("loss {}", fmt_float((s * 1e4).round() / 1e4)));
            p.bar.inc(1);
        }
    }

    fn finish(&mut self) {
        if let Some(p) = self.running.take() {
            p.bar.finish_and_clear();
        }
    }
}
