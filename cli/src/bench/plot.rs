//! `--plot FILE.svg`: bus bandwidth against message size (log scale), one
//! line per collective and placement, with each collective's copy bound
//! (expressed as the busbw it would give) as a dashed line. Plain SVG written
//! here: a few dozen elements do not need a plotting library.

use super::Report;
use std::fmt::Write;

const W: f64 = 900.0;
const H: f64 = 520.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 230.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
];

/// One line: label, colour, dashed, points (size, busbw).
type Series = (String, &'static str, bool, Vec<(f64, f64)>);

/// `8`, `1K`, `64M`, `1G`
pub fn size_label(b: f64) -> String {
    let units = [("G", 1u64 << 30), ("M", 1 << 20), ("K", 1 << 10)];
    for (u, v) in units {
        if b >= v as f64 {
            return format!("{}{u}", (b / v as f64).round());
        }
    }
    format!("{}", b.round())
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The SVG document for `rep`.
pub fn svg(rep: &Report) -> String {
    let sizes: Vec<f64> = rep.rows.iter().map(|r| r.size as f64).collect();
    let (xmin, xmax) = sizes
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(a, b), s| (a.min(*s), b.max(*s)));
    let (lx0, lx1) = if sizes.is_empty() {
        (0.0, 1.0)
    } else {
        (xmin.log2(), xmax.log2().max(xmin.log2() + 1.0))
    };
    let mut series: Vec<Series> = Vec::new();
    let mut funcs: Vec<_> = rep.rows.iter().map(|r| r.func).collect();
    funcs.dedup();
    let n = rep.options.nranks;
    for (i, f) in funcs.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let rows: Vec<_> = rep.rows.iter().filter(|r| r.func == *f).collect();
        let pts = |get: &dyn Fn(&super::Row) -> Option<f64>| {
            rows.iter()
                .filter_map(|r| get(r).map(|y| (r.size as f64, y)))
                .collect::<Vec<_>>()
        };
        series.push((
            format!("{f} out-of-place"),
            color,
            false,
            pts(&|r| Some(r.oop.busbw)),
        ));
        let ip = pts(&|r| r.ip.map(|m| m.busbw));
        if !ip.is_empty() {
            series.push((format!("{f} in-place"), color, false, ip));
        }
        let bound = pts(&|r| {
            let b = r.oop.bound_us?;
            Some(r.size as f64 / (b * 1e-6) * f.bus_factor(n) / 1e9)
        });
        if !bound.is_empty() {
            series.push((format!("{f} copy bound"), color, true, bound));
        }
    }
    let ymax = series
        .iter()
        .flat_map(|s| s.3.iter().map(|p| p.1))
        .filter(|y| y.is_finite())
        .fold(0.0f64, f64::max);
    let ytop = nice_ceil(ymax.max(1e-3) * 1.08);
    let px = |x: f64| LEFT + (x.log2() - lx0) / (lx1 - lx0) * (W - LEFT - RIGHT);
    let py = |y: f64| H - BOTTOM - (y / ytop).clamp(0.0, 1.0) * (H - TOP - BOTTOM);

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let title = format!(
        "rankwise bench, {} engine, {n} ranks, {} cores, copy bandwidth {:.1} GB/s",
        rep.options.engine.name(),
        rep.machine.cores,
        rep.machine.copy_all() / 1e9
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{}</text>"#,
        (LEFT + W - RIGHT) / 2.0,
        esc(&title)
    );
    // axes and grid
    let (x0, x1, y0, y1) = (LEFT, W - RIGHT, TOP, H - BOTTOM);
    let _ = writeln!(
        s,
        r#"<rect x="{x0}" y="{y0}" width="{}" height="{}" fill="none" stroke="black"/>"#,
        x1 - x0,
        y1 - y0
    );
    let step = ((lx1 - lx0) / 10.0).ceil().max(1.0) as i64;
    let mut e = lx0.ceil() as i64;
    while e as f64 <= lx1 + 1e-9 {
        let x = px(2f64.powi(e as i32));
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{y0}" x2="{x:.1}" y2="{y1}" stroke="#ddd"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"##,
            y1 + 16.0,
            size_label(2f64.powi(e as i32))
        );
        e += step;
    }
    for k in 0..=5 {
        let v = ytop * k as f64 / 5.0;
        let y = py(v);
        let _ = writeln!(
            s,
            r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            x0 - 6.0,
            y + 4.0,
            trim(v)
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">message size (bytes, nccl-tests' size, log scale)</text>"#,
        (x0 + x1) / 2.0,
        H - 18.0
    );
    let _ = writeln!(
        s,
        r#"<text x="18" y="{}" text-anchor="middle" transform="rotate(-90 18 {})">busbw (GB/s)</text>"#,
        (y0 + y1) / 2.0,
        (y0 + y1) / 2.0
    );
    // lines and legend
    for (i, (label, color, dashed, pts)) in series.iter().enumerate() {
        let path: Vec<String> = pts
            .iter()
            .filter(|p| p.1.is_finite())
            .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
            .collect();
        let dash = if *dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let width = if label.ends_with("in-place") {
            1.2
        } else {
            2.0
        };
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="{width}"{dash} points="{}"/>"#,
            path.join(" ")
        );
        if !dashed {
            for p in &path {
                let (cx, cy) = p.split_once(',').unwrap_or(("0", "0"));
                let _ = writeln!(s, r#"<circle cx="{cx}" cy="{cy}" r="2.5" fill="{color}"/>"#);
            }
        }
        let ly = TOP + 14.0 + 18.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="{width}"{dash}/><text x="{}" y="{}">{}</text>"#,
            x1 + 12.0,
            x1 + 40.0,
            x1 + 46.0,
            ly + 4.0,
            esc(label)
        );
    }
    s += "</svg>\n";
    s
}

fn trim(v: f64) -> String {
    let t = format!("{v:.2}");
    t.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The smallest of 1, 2, 2.5, 5 × 10^k at or above `v`.
fn nice_ceil(v: f64) -> f64 {
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_ticks() {
        assert_eq!(size_label(8.0), "8");
        assert_eq!(size_label(65536.0), "64K");
        assert_eq!(size_label((64u64 << 20) as f64), "64M");
        assert_eq!(nice_ceil(7.3), 10.0);
        assert_eq!(nice_ceil(2.1), 2.5);
        assert_eq!(trim(2.5), "2.5");
    }
}
