//! Line charts (`plot`, `plot_with`): one layout, drawn as SVG text or rasterised to PNG.
//!
//! The layout turns series of numbers into a display list (`Mark`s in pixels: lines, text,
//! rectangles); `svg` writes the list as text and `raster` paints it with an embedded 8×8
//! bitmap font (so a PNG needs no font on the machine) and encodes the pixels. Text is laid
//! out with that font's metrics; the SVG names a monospace font of the same advance.
//!
//! Readability decisions: tick values are "nice" (1, 2 or 5 times a power of ten) and their
//! labels get as many digits as it takes to tell them apart, in scientific notation when the
//! numbers are tiny or huge; NaN and infinite values (and, on a log axis, values ≤ 0) are gaps
//! in the line, and a point between two gaps is a dot; a series with more points than the
//! chart has pixel columns is reduced to each column's first, lowest, highest and last point,
//! which draws the same picture as every point would.

mod raster;
mod svg;

/// The chart's size in pixels.
pub const WIDTH: u32 = 800;
pub const HEIGHT: u32 = 500;
/// The bitmap font's advance and height, in pixels, at scale 1.
pub const GLYPH: f64 = 8.0;

/// `plot_with`'s options (the record type of its first argument).
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub title: String,
    pub xlabel: String,
    pub ylabel: String,
    pub log_y: bool,
}

/// One line of the chart: its legend entry and its values, drawn against their index.
pub struct Series {
    pub name: String,
    pub values: Vec<f64>,
}

pub type Rgb = [u8; 3];

/// Series colours (Tableau's ten, which stay distinct for most colour-blind readers).
const PALETTE: [Rgb; 10] = [
    [0x1f, 0x77, 0xb4],
    [0xff, 0x7f, 0x0e],
    [0x2c, 0xa0, 0x2c],
    [0xd6, 0x27, 0x28],
    [0x94, 0x67, 0xbd],
    [0x8c, 0x56, 0x4b],
    [0xe3, 0x77, 0xc2],
    [0x7f, 0x7f, 0x7f],
    [0xbc, 0xbd, 0x22],
    [0x17, 0xbe, 0xcf],
];
const BLACK: Rgb = [0, 0, 0];
const GRID: Rgb = [0xdd, 0xdd, 0xdd];
const WHITE: Rgb = [0xff, 0xff, 0xff];

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Anchor {
    Start,
    Middle,
    End,
}

/// What the backends draw, in pixels with y downwards.
#[derive(Clone, Debug)]
pub enum Mark {
    /// A polyline; one point is a dot.
    Line {
        points: Vec<(f64, f64)>,
        color: Rgb,
        width: f64,
    },
    /// Text whose baseline-left, -middle or -end is at (x, y); `vertical` reads bottom to top.
    Text {
        x: f64,
        y: f64,
        text: String,
        scale: u32,
        anchor: Anchor,
        vertical: bool,
    },
    Rect {
        x: f64,
        y: f64,
        w: f64,
        h: f64,
        fill: Rgb,
        stroke: Option<Rgb>,
    },
}

/// Draws `series` to `path`, as SVG or PNG by its extension.
pub fn render(path: &str, options: &Options, series: &[Series]) -> Result<(), String> {
    let ext = std::path::Path::new(path).extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    let marks = layout(options, series);
    let bytes = match ext.as_str() {
        "svg" => svg::encode(&marks).into_bytes(),
        "png" => raster::encode(&marks),
        _ => return Err(format!("cannot plot to `{path}`: the file must end in .svg or .png")),
    };
    std::fs::write(path, bytes).map_err(|e| format!("cannot plot to `{path}`: {e}"))
}

/// An axis: the value range shown, its ticks and how values map to it.
struct Axis {
    lo: f64,
    hi: f64,
    ticks: Vec<(f64, String)>,
    log: bool,
}

impl Axis {
    fn new(lo: f64, hi: f64, log: bool) -> Axis {
        let (lo, hi) = if log { (lo.log10(), hi.log10()) } else { (lo, hi) };
        let (lo, hi) = widen(lo, hi);
        let ticks = if log { log_ticks(lo, hi) } else { linear_ticks(lo, hi) };
        Axis { lo, hi, ticks, log }
    }
    /// Where `v` lies along the axis, 0 at `lo` and 1 at `hi` (None for a gap).
    fn frac(&self, v: f64) -> Option<f64> {
        let v = if self.log { v.log10() } else { v };
        v.is_finite().then(|| {
            if (self.hi - self.lo).is_finite() {
                (v - self.lo) / (self.hi - self.lo)
            } else {
                // A span beyond f64's range (values near ±1.8e308): the same ratio of halves.
                (v * 0.5 - self.lo * 0.5) / (self.hi * 0.5 - self.lo * 0.5)
            }
        })
    }
}

/// A range with room in it: an empty range becomes (0, 1), a single value gets a margin.
fn widen(lo: f64, hi: f64) -> (f64, f64) {
    if !(lo.is_finite() && hi.is_finite()) {
        (0.0, 1.0)
    } else if hi > lo {
        (lo, hi)
    } else {
        let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        ((lo - pad).max(f64::MIN), (hi + pad).min(f64::MAX))
    }
}

/// A "nice" step near a fifth of the span from `lo` to `hi`: 1, 2 or 5 times a power of ten.
fn nice_step(lo: f64, hi: f64) -> f64 {
    // Halved first, so that a span beyond f64's range (-1e308 to 1e308) still has a fifth.
    let raw = (hi * 0.5 - lo * 0.5) / 2.5;
    let p = 10f64.powf(raw.log10().floor());
    let m = raw / p;
    p * if m < 1.5 {
        1.0
    } else if m < 3.5 {
        2.0
    } else if m < 7.5 {
        5.0
    } else {
        10.0
    }
}

fn linear_ticks(lo: f64, hi: f64) -> Vec<(f64, String)> {
    let step = nice_step(lo, hi);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    let values: Vec<f64> =
        (first..=last.max(first)).map(|k| k as f64 * step).filter(|v| *v <= hi + step * 1e-9).collect();
    let labels = labels(&values, step);
    values.into_iter().zip(labels).collect()
}

/// Ticks of a log axis (positions are log10 values): the decades, or — within one decade —
/// the linear ticks of the values themselves.
fn log_ticks(lo: f64, hi: f64) -> Vec<(f64, String)> {
    let step = ((hi - lo) / 6.0).ceil().max(1.0);
    let decades: Vec<f64> = ((lo / step).ceil() as i64..=(hi / step).floor() as i64).map(|k| k as f64 * step).collect();
    if decades.len() >= 2 {
        // Exact powers of ten: `0.01`, `1`, `1000`, or `1e-5` and `1e6` beyond those.
        let label = |d: f64| {
            let d = d as i64;
            if (-3..6).contains(&d) {
                format!("{:.*}", (-d).max(0) as usize, 10f64.powi(d as i32))
            } else {
                format!("1e{d}")
            }
        };
        return decades.into_iter().map(|d| (d, label(d))).collect();
    }
    let (a, b) = (10f64.powf(lo), 10f64.powf(hi));
    linear_ticks(a, b).into_iter().filter(|(v, _)| *v > 0.0).map(|(v, l)| (v.log10(), l)).collect()
}

/// Labels for tick values `step` apart, distinct from one another: plain decimals with the
/// digits the step needs, or scientific notation when the numbers are tiny (below 1e-3) or huge
/// (1e6 and over).
fn labels(values: &[f64], step: f64) -> Vec<String> {
    let biggest = values.iter().fold(0f64, |m, v| m.max(v.abs()));
    let scientific = biggest >= 1e6 || (biggest > 0.0 && biggest < 1e-3);
    // A value within a rounding error of zero is zero (not `-0.0` or `1e-17`).
    let clean = |v: f64| if v.abs() < step * 1e-6 { 0.0 } else { v };
    for digits in 0..=12usize {
        let out: Vec<String> = values
            .iter()
            .map(|&v| {
                let v = clean(v);
                if scientific && v != 0.0 {
                    sci(v, digits)
                } else if scientific {
                    let fixed = format!("{v:.digits$}");
                    if digits == 0 {
                        fixed
                    } else {
                        fixed.trim_end_matches('0').trim_end_matches('.').to_string()
                    }
                } else {
                    let need = (-step.log10().floor()).max(0.0) as usize;
                    format!("{v:.*}", need + digits)
                }
            })
            .collect();
        let mut seen = out.clone();
        seen.sort();
        seen.dedup();
        if seen.len() == out.len() {
            return out;
        }
    }
    values.iter().map(|v| format!("{v:e}")).collect()
}

/// `v` in scientific notation with `digits` decimals: `2.5e-7`, `1e6`.
fn sci(v: f64, digits: usize) -> String {
    let s = format!("{v:.digits$e}");
    match s.split_once('e') {
        Some((m, e)) if m.contains('.') => format!("{}e{e}", m.trim_end_matches('0').trim_end_matches('.')),
        _ => s,
    }
}

/// The chart's display list.
pub fn layout(options: &Options, series: &[Series]) -> Vec<Mark> {
    let mut marks = vec![Mark::Rect { x: 0.0, y: 0.0, w: WIDTH as f64, h: HEIGHT as f64, fill: WHITE, stroke: None }];
    let log = options.log_y;
    let drawable = |v: f64| v.is_finite() && (!log || v > 0.0);
    let (lo, hi) = series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .filter(|&v| drawable(v))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
    let y = if lo.is_finite() { Axis::new(lo, hi, log) } else { Axis::new(1.0, 10.0, log) };
    let n = series.iter().map(|s| s.values.len()).max().unwrap_or(0);
    let x = Axis::new(0.0, n.saturating_sub(1) as f64, false);

    let label_chars = y.ticks.iter().map(|(_, l)| l.len()).max().unwrap_or(1) as f64;
    let left = 14.0 + label_chars * GLYPH + if options.ylabel.is_empty() { 0.0 } else { 2.0 * GLYPH + 8.0 };
    let top = if options.title.is_empty() { 20.0 } else { 2.0 * (2.0 * GLYPH) + 8.0 };
    let bottom = 28.0 + if options.xlabel.is_empty() { 0.0 } else { 2.0 * GLYPH + 6.0 };
    let (x0, x1, y0, y1) = (left, WIDTH as f64 - 24.0, top, HEIGHT as f64 - bottom);
    let px = |f: f64| x0 + f * (x1 - x0);
    let py = |f: f64| y1 - f * (y1 - y0);

    // Grid and ticks.
    for (v, label) in &y.ticks {
        let yy = py((v - y.lo) / (y.hi - y.lo)).round();
        marks.push(Mark::Line { points: vec![(x0, yy), (x1, yy)], color: GRID, width: 1.0 });
        marks.push(text(x0 - 6.0, yy + GLYPH / 2.0, label, 1, Anchor::End));
    }
    for (v, label) in &x.ticks {
        let xx = px((v - x.lo) / (x.hi - x.lo)).round();
        marks.push(Mark::Line { points: vec![(xx, y0), (xx, y1)], color: GRID, width: 1.0 });
        marks.push(text(xx, y1 + 6.0 + GLYPH, label, 1, Anchor::Middle));
    }
    let frame = vec![(x0, y0), (x1, y0), (x1, y1), (x0, y1), (x0, y0)];
    marks.push(Mark::Line { points: frame, color: BLACK, width: 1.0 });

    for (i, s) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        for run in runs(&s.values, &drawable) {
            let points: Vec<(f64, f64)> =
                run.into_iter().filter_map(|(i, v)| Some((px(x.frac(i as f64)?), py(y.frac(v)?)))).collect();
            if let Some(points) = decimate(points) {
                marks.push(Mark::Line { points, color, width: 2.0 });
            }
        }
    }

    if !options.title.is_empty() {
        marks.push(text(WIDTH as f64 / 2.0, 8.0 + 2.0 * GLYPH, &options.title, 2, Anchor::Middle));
    }
    if !options.xlabel.is_empty() {
        marks.push(text((x0 + x1) / 2.0, HEIGHT as f64 - 8.0, &options.xlabel, 1, Anchor::Middle));
    }
    if !options.ylabel.is_empty() {
        marks.push(Mark::Text {
            x: 8.0 + GLYPH,
            y: (y0 + y1) / 2.0,
            text: options.ylabel.clone(),
            scale: 1,
            anchor: Anchor::Middle,
            vertical: true,
        });
    }
    if series.iter().any(|s| !s.name.is_empty()) {
        legend(&mut marks, series, x1);
    }
    if n == 0 || !lo.is_finite() {
        marks.push(text((x0 + x1) / 2.0, (y0 + y1) / 2.0, "no data", 1, Anchor::Middle));
    }
    marks
}

fn text(x: f64, y: f64, s: &str, scale: u32, anchor: Anchor) -> Mark {
    Mark::Text { x, y, text: s.to_string(), scale, anchor, vertical: false }
}

/// A box in the top right corner naming each series in its colour.
fn legend(marks: &mut Vec<Mark>, series: &[Series], right: f64) {
    let chars = series.iter().map(|s| s.name.chars().count()).max().unwrap_or(0) as f64;
    let (w, row) = (chars * GLYPH + 44.0, GLYPH + 8.0);
    let (x, y) = (right - w - 8.0, 28.0 + 2.0 * GLYPH);
    let h = row * series.len() as f64 + 8.0;
    marks.push(Mark::Rect { x, y, w, h, fill: WHITE, stroke: Some(GRID) });
    for (i, s) in series.iter().enumerate() {
        let yy = y + 4.0 + row * i as f64 + row / 2.0;
        let color = PALETTE[i % PALETTE.len()];
        marks.push(Mark::Line { points: vec![(x + 8.0, yy), (x + 30.0, yy)], color, width: 2.0 });
        marks.push(text(x + 36.0, yy + GLYPH / 2.0, &s.name, 1, Anchor::Start));
    }
}

/// The runs of drawable values between gaps, as (index, value) pairs.
fn runs(values: &[f64], drawable: &dyn Fn(f64) -> bool) -> Vec<Vec<(usize, f64)>> {
    let mut out = Vec::new();
    let mut run = Vec::new();
    for (i, &v) in values.iter().enumerate() {
        if drawable(v) {
            run.push((i, v));
        } else if !run.is_empty() {
            out.push(std::mem::take(&mut run));
        }
    }
    if !run.is_empty() {
        out.push(run);
    }
    out
}

/// A polyline with at most four points per pixel column (the first, lowest, highest and last
/// in the column, in their order), which draws what every point would. A run that is one
/// point stays one (a dot).
fn decimate(points: Vec<(f64, f64)>) -> Option<Vec<(f64, f64)>> {
    if points.len() <= 2 * WIDTH as usize {
        return (!points.is_empty()).then_some(points);
    }
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(4 * WIDTH as usize);
    let mut i = 0;
    while i < points.len() {
        let column = points[i].0.floor();
        let mut j = i;
        let (mut lo, mut hi) = (i, i);
        while j < points.len() && points[j].0.floor() == column {
            if points[j].1 < points[lo].1 {
                lo = j;
            }
            if points[j].1 > points[hi].1 {
                hi = j;
            }
            j += 1;
        }
        let mut keep = [i, lo.min(hi), lo.max(hi), j - 1];
        keep.sort_unstable();
        for (n, &k) in keep.iter().enumerate() {
            if n == 0 || k != keep[n - 1] {
                out.push(points[k]);
            }
        }
        i = j;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick_labels(lo: f64, hi: f64) -> Vec<String> {
        linear_ticks(lo, hi).into_iter().map(|(_, l)| l).collect()
    }

    #[test]
    fn tick_labels_are_distinct_at_any_scale() {
        assert_eq!(tick_labels(0.0, 10.0), ["0", "2", "4", "6", "8", "10"]);
        assert_eq!(tick_labels(0.0, 1.0), ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]);
        let tiny = tick_labels(1e-6, 5e-6);
        assert_eq!(tiny, ["1e-6", "2e-6", "3e-6", "4e-6", "5e-6"]);
        let huge = tick_labels(0.0, 3e9);
        assert_eq!(huge, ["0", "5e8", "1e9", "1.5e9", "2e9", "2.5e9", "3e9"]);
        // Close values far from zero need more digits than the step alone would give.
        let near = tick_labels(1.0, 1.0 + 4e-7);
        let mut d = near.clone();
        d.dedup();
        assert_eq!(d.len(), near.len(), "{near:?}");
        // A span beyond f64's range still has ticks, all finite.
        let whole = linear_ticks(-1e308, 1.7e308);
        assert!(whole.len() >= 3 && whole.iter().all(|(v, _)| v.is_finite()), "{whole:?}");
        let axis = Axis::new(-1e308, 1.7e308, false);
        assert_eq!((axis.frac(-1e308), axis.frac(1.7e308)), (Some(0.0), Some(1.0)));
    }

    #[test]
    fn decimation_keeps_the_envelope() {
        let points: Vec<(f64, f64)> = (0..100_000).map(|i| (i as f64 / 1000.0, (i % 7) as f64)).collect();
        let d = decimate(points).unwrap();
        assert!(d.len() <= 400, "{}", d.len());
        assert!(d.iter().any(|p| p.1 == 0.0) && d.iter().any(|p| p.1 == 6.0));
    }
}
