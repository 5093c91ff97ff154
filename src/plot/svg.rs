//! The display list as SVG text. Text is monospace at the size whose advance matches the
//! layout's 8-pixel glyphs, so labels fit the room the layout gave them.

use super::{Anchor, Mark, Rgb, GLYPH, HEIGHT, WIDTH};
use std::fmt::Write;

fn color(c: Rgb) -> String {
    format!("#{:02x}{:02x}{:02x}", c[0], c[1], c[2])
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

pub fn encode(marks: &[Mark]) -> String {
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\">\n"
    );
    for m in marks {
        // Writing to a String cannot fail.
        let _ = match m {
            Mark::Rect { x, y, w, h, fill, stroke } => {
                let stroke = stroke.map_or("none".to_string(), color);
                writeln!(
                    out,
                    "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{h:.1}\" fill=\"{}\" stroke=\"{stroke}\"/>",
                    color(*fill)
                )
            }
            Mark::Line { points, color: c, width } if points.len() == 1 => {
                let (x, y) = points[0];
                writeln!(out, "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"{:.1}\" fill=\"{}\"/>", width * 0.75, color(*c))
            }
            Mark::Line { points, color: c, width } => {
                out.push_str("<polyline fill=\"none\" stroke-linejoin=\"round\" points=\"");
                for (x, y) in points {
                    let _ = write!(out, "{x:.1},{y:.1} ");
                }
                writeln!(out, "\" stroke=\"{}\" stroke-width=\"{width}\"/>", color(*c))
            }
            Mark::Text { x, y, text, scale, anchor, vertical } => {
                let anchor = match anchor {
                    Anchor::Start => "start",
                    Anchor::Middle => "middle",
                    Anchor::End => "end",
                };
                // Monospace fonts advance about 0.6 em per character.
                let size = GLYPH * f64::from(*scale) / 0.6;
                let rotate =
                    if *vertical { format!(" transform=\"rotate(-90 {x:.1} {y:.1})\"") } else { String::new() };
                writeln!(
                    out,
                    "<text x=\"{x:.1}\" y=\"{y:.1}\" font-family=\"monospace\" font-size=\"{size:.1}\" text-anchor=\"{anchor}\"{rotate}>{}</text>",
                    escape(text)
                )
            }
        };
    }
    out.push_str("</svg>\n");
    out
}
