//! `plot` and `plot_with` render each hard case readably: the SVG's text is read back (tick
//! labels distinct, legend and title present) and the PNG is decoded with the `png` crate.

use crate::run::{run_ok, temp_path};
use std::path::{Path, PathBuf};

fn dp_str(p: &Path) -> String {
    format!("{:?}", p.to_string_lossy())
}

/// The text elements of an SVG with their `text-anchor` (`end`: a y tick, `middle`: an x tick,
/// the title or an axis label, `start`: a legend entry).
fn texts(svg: &str) -> Vec<(String, String)> {
    svg.split("<text ")
        .skip(1)
        .map(|t| {
            let anchor = t.split("text-anchor=\"").nth(1).and_then(|a| a.split('"').next()).unwrap_or("").to_string();
            let body = t.split_once('>').map(|(_, b)| b.split("</text>").next().unwrap_or("")).unwrap_or("");
            (anchor, body.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
        })
        .collect()
}

fn y_ticks(svg: &str) -> Vec<String> {
    texts(svg).into_iter().filter(|(a, _)| a == "end").map(|(_, t)| t).collect()
}

fn assert_distinct(labels: &[String], what: &str) {
    let mut d = labels.to_vec();
    d.sort();
    d.dedup();
    assert!(labels.len() >= 3 && d.len() == labels.len(), "{what}: tick labels {labels:?}");
}

/// Renders `cases` (file extension, dp expression for `plot`'s or `plot_with`'s arguments)
/// in one program; returns the files.
fn render(cases: &[(&str, &str)]) -> Vec<PathBuf> {
    let mut src = String::new();
    let mut files = Vec::new();
    for (ext, call) in cases {
        let p = temp_path(ext);
        src += &format!("let () = {}\n", call.replace("PATH", &dp_str(&p)));
        files.push(p);
    }
    run_ok(&src);
    files
}

const OPTIONS: &str = "{ title = \"Loss curves\", xlabel = \"step\", ylabel = \"loss\", log_y = false }";

#[test]
fn svg_charts_of_the_hard_cases() {
    let two = format!(
        "plot_with {OPTIONS} PATH [(\"train\", map (fun x -> 1.0 / (x + 1.0)) (to_list (arange 100))), (\"val\", map (fun x -> 1.2 / (x + 1.0)) (to_list (arange 80)))]"
    );
    let log = "plot_with { title = \"log\", xlabel = \"\", ylabel = \"\", log_y = true } PATH [(\"loss\", map (fun x -> exp (0.0 - x / 5.0)) (to_list (arange 60)))]";
    let files = render(&[
        ("svg", "plot PATH []"),
        ("svg", "plot PATH [2.0, 2.0, 2.0]"),
        ("svg", "plot PATH (map (fun x -> (x + 1.0) * 1e-6) (to_list (arange 50)))"),
        ("svg", "plot PATH (map (fun x -> (x + 1.0) * 1e9) (to_list (arange 50)))"),
        ("svg", "plot PATH [1.0, nan, 2.0, 3.0, nan, infinity, 4.0, 5.0, nan, 6.0]"),
        ("svg", "plot PATH (map (fun x -> sin (x / 1000.0)) (to_list (arange 1000000)))"),
        ("svg", two.as_str()),
        ("svg", log),
        ("svg", "plot PATH [1e308, -1e308, 1.7e308, 0.0]"),
    ]);
    let svg: Vec<String> = files.iter().map(|f| std::fs::read_to_string(f).unwrap()).collect();
    let [empty, constant, tiny, huge, gaps, million, two, log, extreme] = &svg[..] else { unreachable!() };

    assert!(empty.contains(">no data</text>"), "{empty}");
    assert_distinct(&y_ticks(constant), "constant");
    let t = y_ticks(tiny);
    assert_distinct(&t, "1e-6 scale");
    assert!(t.iter().all(|l| l == "0" || l.contains("e-")), "tiny values in scientific notation: {t:?}");
    let h = y_ticks(huge);
    assert_distinct(&h, "1e10 scale");
    assert!(h.iter().all(|l| l == "0" || l.contains('e')), "{h:?}");
    // NaN and infinity are gaps: lines [1], [2, 3], [4, 5], [6] (single points are dots).
    let lines =
        gaps.split("<polyline").filter(|l| l.split('>').next().unwrap_or("").contains("stroke-width=\"2\"")).count();
    assert_eq!((lines, gaps.matches("<circle").count()), (2, 2), "{gaps}");
    assert!(!gaps.contains("NaN") && !gaps.contains("inf"), "{gaps}");
    // A million points become a few per pixel column.
    assert!(million.len() < 200_000, "the 1e6-point SVG is {} bytes", million.len());
    assert_distinct(&y_ticks(million), "1e6 points");
    let all = texts(two);
    for want in ["Loss curves", "step", "loss", "train", "val"] {
        assert!(all.iter().any(|(_, t)| t == want), "`{want}` missing from {all:?}");
    }
    let legend: Vec<&str> = all.iter().filter(|(a, _)| a == "start").map(|(_, t)| t.as_str()).collect();
    assert_eq!(legend, ["train", "val"]);
    assert!(two.contains("#1f77b4") && two.contains("#ff7f0e"), "two colours");
    // A log axis labels decades: each tick ten times (or a power of ten times) the last.
    let l: Vec<f64> = y_ticks(log).iter().map(|s| s.parse().unwrap()).collect();
    assert!(l.len() >= 3, "{l:?}");
    let ratio = l[1] / l[0];
    assert!(l.windows(2).all(|w| ((w[1] / w[0]) / ratio - 1.0).abs() < 1e-9) && ratio >= 10.0, "{l:?}");
    // Values spanning nearly all of f64 (the span itself overflows): labelled ticks, and every
    // point of the line inside the frame (y from 20 to 472, the grid lines' extent).
    assert_distinct(&y_ticks(extreme), "±1e308");
    let data = extreme.split("<polyline").find(|l| l.contains("stroke-width=\"2\"")).expect("the data line");
    let points = data.split("points=\"").nth(1).and_then(|p| p.split('"').next()).unwrap_or("");
    let ys: Vec<f64> = points.split_whitespace().filter_map(|xy| xy.split(',').nth(1)?.parse().ok()).collect();
    assert!(ys.len() == 4 && ys.iter().all(|y| (20.0..=472.0).contains(y)), "{points}");
    for f in files {
        let _ = std::fs::remove_file(f);
    }
}

/// Decodes a PNG with the `png` crate: (width, height, RGB pixels).
fn decode(path: &Path) -> (u32, u32, Vec<[u8; 3]>) {
    let file = std::fs::File::open(path).unwrap();
    let mut reader = png::Decoder::new(std::io::BufReader::new(file)).read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb);
    let pixels = buf[..info.buffer_size()].chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect();
    (info.width, info.height, pixels)
}

#[test]
fn png_charts_decode() {
    let two = format!(
        "plot_with {OPTIONS} PATH [(\"train\", map (fun x -> 1.0 / (x + 1.0)) (to_list (arange 100))), (\"val\", [1.0, nan, 0.5, 0.25])]"
    );
    let files = render(&[
        ("png", two.as_str()),
        ("png", "plot PATH []"),
        ("PNG", "plot PATH (map (fun x -> sin (x / 1000.0)) (to_list (arange 1000000)))"),
    ]);
    for (i, f) in files.iter().enumerate() {
        let bytes = std::fs::read(f).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        let (w, h, px) = decode(f);
        assert_eq!((w, h), (800, 500));
        let inked = px.iter().filter(|p| **p != [255, 255, 255]).count();
        assert!(inked > 2_000, "chart {i} has only {inked} non-white pixels");
        let blue = px.iter().filter(|p| **p == [0x1f, 0x77, 0xb4]).count();
        if i != 1 {
            assert!(blue > 500, "chart {i}: the first series is drawn ({blue} pixels)");
        }
        if i == 0 {
            assert!(px.iter().filter(|p| **p == [0xff, 0x7f, 0x0e]).count() > 50, "the second series");
        }
    }
    let r = crate::run::run_dp("let () = plot \"/tmp/dp-plot-test.gif\" [1.0]\n");
    assert!(!r.ok && r.stderr.contains("must end in .svg or .png"), "{}", r.stderr);
    for f in files {
        let _ = std::fs::remove_file(f);
    }
}
