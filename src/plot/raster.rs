//! The display list painted into pixels and encoded as PNG. Glyphs are the `font8x8` crate's 8×8
//! bitmaps (MIT; Daniel Hepper's public-domain font) (embedded: no font need be installed); lines are drawn with a square brush.
//! The PNG encoder is the format's few chunks around a zlib stream from `miniz_oxide`.

use super::{Anchor, Mark, Rgb, GLYPH, HEIGHT, WIDTH};

struct Canvas {
    w: usize,
    h: usize,
    rgb: Vec<u8>,
}

impl Canvas {
    fn set(&mut self, x: i64, y: i64, c: Rgb) {
        if x >= 0 && y >= 0 && (x as usize) < self.w && (y as usize) < self.h {
            let i = 3 * (y as usize * self.w + x as usize);
            self.rgb[i..i + 3].copy_from_slice(&c);
        }
    }

    fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, c: Rgb) {
        let (x0, y0) = (x.round() as i64, y.round() as i64);
        let (x1, y1) = ((x + w).round() as i64, (y + h).round() as i64);
        for yy in y0.max(0)..y1.min(self.h as i64) {
            for xx in x0.max(0)..x1.min(self.w as i64) {
                self.set(xx, yy, c);
            }
        }
    }

    /// A segment with a square brush `width` pixels wide (Bresenham's walk).
    fn segment(&mut self, (ax, ay): (f64, f64), (bx, by): (f64, f64), width: f64, c: Rgb) {
        let brush = width.round().max(1.0) as i64;
        let off = (brush - 1) / 2;
        let (mut x, mut y) = (ax.round() as i64, ay.round() as i64);
        let (x1, y1) = (bx.round() as i64, by.round() as i64);
        let (dx, dy) = ((x1 - x).abs(), -(y1 - y).abs());
        let (sx, sy) = (if x < x1 { 1 } else { -1 }, if y < y1 { 1 } else { -1 });
        let mut err = dx + dy;
        // Segments run off the canvas only through bugs in the layout; bound the walk anyway.
        for _ in 0..=(dx - dy).min(4 * (self.w + self.h) as i64) {
            for i in 0..brush {
                for j in 0..brush {
                    self.set(x - off + i, y - off + j, c);
                }
            }
            if x == x1 && y == y1 {
                break;
            }
            let e2 = 2 * err;
            if e2 >= dy {
                err += dy;
                x += sx;
            }
            if e2 <= dx {
                err += dx;
                y += sy;
            }
        }
    }

    fn text(&mut self, x: f64, y: f64, s: &str, scale: u32, anchor: Anchor, vertical: bool) {
        let k = i64::from(scale.max(1));
        let advance = GLYPH as i64 * k;
        let len = s.chars().count() as i64 * advance;
        let start = match anchor {
            Anchor::Start => 0,
            Anchor::Middle => -len / 2,
            Anchor::End => -len,
        };
        let (x, y) = (x.round() as i64, y.round() as i64);
        for (n, ch) in s.chars().enumerate() {
            let glyph = font8x8::legacy::BASIC_LEGACY
                .get(ch as usize)
                .copied()
                .unwrap_or(font8x8::legacy::BASIC_LEGACY[b'?' as usize]);
            let along = start + n as i64 * advance;
            for (row, bits) in glyph.iter().enumerate() {
                for col in 0..8 {
                    if bits >> col & 1 == 0 {
                        continue;
                    }
                    for i in 0..k {
                        for j in 0..k {
                            // Along the text, and up from the baseline (row 7 sits on it).
                            let (u, v) = (along + col * k + i, (row as i64 - 7) * k + j);
                            if vertical {
                                self.set(x + v, y - u, [0, 0, 0]);
                            } else {
                                self.set(x + u, y + v, [0, 0, 0]);
                            }
                        }
                    }
                }
            }
        }
    }
}

pub fn encode(marks: &[Mark]) -> Vec<u8> {
    let (w, h) = (WIDTH as usize, HEIGHT as usize);
    let mut c = Canvas { w, h, rgb: vec![0xff; w * h * 3] };
    for m in marks {
        match m {
            Mark::Rect { x, y, w, h, fill, stroke } => {
                c.rect(*x, *y, *w, *h, *fill);
                if let Some(s) = stroke {
                    let corners = [(*x, *y), (x + w, *y), (x + w, y + h), (*x, y + h), (*x, *y)];
                    for p in corners.windows(2) {
                        c.segment(p[0], p[1], 1.0, *s);
                    }
                }
            }
            Mark::Line { points, color, width } if points.len() == 1 => {
                c.rect(points[0].0 - width, points[0].1 - width, 2.0 * width, 2.0 * width, *color)
            }
            Mark::Line { points, color, width } => {
                for p in points.windows(2) {
                    c.segment(p[0], p[1], *width, *color);
                }
            }
            Mark::Text { x, y, text, scale, anchor, vertical } => c.text(*x, *y, text, *scale, *anchor, *vertical),
        }
    }
    png(w as u32, h as u32, &c.rgb)
}

/// An 8-bit RGB PNG: signature, IHDR, one IDAT (each row behind filter byte 0), IEND.
fn png(w: u32, h: u32, rgb: &[u8]) -> Vec<u8> {
    let row = w as usize * 3;
    let mut raw = Vec::with_capacity((row + 1) * h as usize);
    for line in rgb.chunks_exact(row) {
        raw.push(0);
        raw.extend_from_slice(line);
    }
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8 bits, RGB, deflate, no filter choice, no interlace
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", &miniz_oxide::deflate::compress_to_vec_zlib(&raw, 6));
    chunk(&mut out, b"IEND", &[]);
    out
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let mut crc = crc32fast::Hasher::new();
    crc.update(kind);
    crc.update(data);
    out.extend_from_slice(&crc.finalize().to_be_bytes());
}
