//! Small SVG charts for `novafs bench`, written as text so that `novafs`
//! needs no plotting library: a log-log line chart (`--aged`, Fig. 7), one
//! stacked bar (`--aged`, Fig. 12) and stacked bars on one scale
//! (`--breakdown`, NOVA Fig. 6c and NOVA-Fortis Fig. 10).

use std::fmt::Write as _;

/// One line of a chart: its name, its points, dashed or not. Points with
/// a zero or negative coordinate are left out, as the paper's log scale
/// leaves them out.
pub struct Line<'a> {
    pub name: &'a str,
    pub points: Vec<(f64, f64)>,
    pub dashed: bool,
}

const COLOURS: [&str; 12] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#393b79", "#ad494a",
];
/// The picture, and the plot's place in it.
const W: f64 = 900.0;
const H: f64 = 460.0;
const LEFT: f64 = 80.0;
const TOP: f64 = 40.0;
const PLOT_W: f64 = 460.0;
const PLOT_H: f64 = 360.0;

/// Whole decades covering the positive values of `v`.
fn decades(v: impl Iterator<Item = f64>) -> (i32, i32) {
    let (lo, hi) = v
        .filter(|x| *x > 0.0)
        .fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    if lo > hi {
        return (0, 1);
    }
    let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    (a, b.max(a + 1))
}

/// A log-log chart of `lines`; each colour is used by two lines in a row
/// (a solid maximum and a dashed average of one scheme).
pub fn loglog(title: &str, x_label: &str, y_label: &str, lines: &[Line]) -> String {
    let pts = || lines.iter().flat_map(|l| l.points.iter());
    let (x0, x1) = decades(pts().map(|p| p.0));
    let (y0, y1) = decades(pts().map(|p| p.1));
    let x = |v: f64| LEFT + (v.log10() - f64::from(x0)) / f64::from(x1 - x0) * PLOT_W;
    let y = |v: f64| TOP + PLOT_H - (v.log10() - f64::from(y0)) / f64::from(y1 - y0) * PLOT_H;
    let mut s = header(title);
    for d in x0..=x1 {
        let px = x(10f64.powi(d));
        let _ = write!(
            s,
            r##"<line x1="{px}" y1="{TOP}" x2="{px}" y2="{}" stroke="#ddd"/><text x="{px}" y="{}" text-anchor="middle">1e{d}</text>"##,
            TOP + PLOT_H,
            TOP + PLOT_H + 18.0
        );
    }
    for d in y0..=y1 {
        let py = y(10f64.powi(d));
        let _ = write!(
            s,
            r##"<line x1="{LEFT}" y1="{py}" x2="{}" y2="{py}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">1e{d}</text>"##,
            LEFT + PLOT_W,
            LEFT - 6.0,
            py + 4.0
        );
    }
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{x_label}</text><text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">{y_label}</text>"#,
        LEFT + PLOT_W / 2.0,
        TOP + PLOT_H + 40.0,
        TOP + PLOT_H / 2.0,
        TOP + PLOT_H / 2.0
    );
    for (i, l) in lines.iter().enumerate() {
        let colour = COLOURS[(i / 2) % COLOURS.len()];
        let dash = if l.dashed { r#" stroke-dasharray="6 4""# } else { "" };
        let path: Vec<String> = l
            .points
            .iter()
            .filter(|p| p.0 > 0.0 && p.1 > 0.0)
            .map(|&(a, b)| format!("{:.1},{:.1}", x(a), y(b)))
            .collect();
        let _ = write!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>"#,
            path.join(" ")
        );
        legend(&mut s, i, l.name, colour, dash);
    }
    s + "</svg>\n"
}

/// One horizontal bar of `parts` (name, value), stacked, with a legend.
pub fn stacked_bar(title: &str, parts: &[(&str, f64)]) -> String {
    let total: f64 = parts.iter().map(|p| p.1).sum::<f64>().max(f64::MIN_POSITIVE);
    let mut s = header(title);
    let mut at = LEFT;
    for (i, &(name, v)) in parts.iter().enumerate() {
        let w = v / total * PLOT_W;
        let fill = COLOURS[i % COLOURS.len()];
        let _ = write!(
            s,
            r#"<rect x="{at:.1}" y="{TOP}" width="{w:.1}" height="60" fill="{fill}"/>"#
        );
        let label = format!("{name}: {:.2}%", 100.0 * v / total);
        legend(&mut s, i, &label, fill, "");
        at += w;
    }
    s + "</svg>\n"
}

/// Horizontal bars, one per `(name, values)`, each stacked from its
/// values in the order of `parts` (which the legend names) and drawn as
/// shares of its own total, which ends the bar in `unit`: the bars'
/// totals may differ a hundredfold (write windows by mprotect) and still
/// show what each is made of.
pub fn stacked_bars(title: &str, unit: &str, parts: &[&str], bars: &[(&str, Vec<f64>)]) -> String {
    let pitch = PLOT_H / bars.len().max(1) as f64;
    let width = PLOT_W - 70.0; // Room for the total after each bar.
    let mut s = header(title);
    for (b, (name, values)) in bars.iter().enumerate() {
        let total: f64 = values.iter().map(|v| v.max(0.0)).sum();
        let y = TOP + pitch * b as f64;
        let h = (pitch * 0.7).min(50.0);
        let _ = write!(
            s,
            r#"<text x="{}" y="{:.1}" text-anchor="end">{name}</text>"#,
            LEFT - 6.0,
            y + h / 2.0 + 4.0
        );
        let mut at = LEFT;
        for (i, v) in values.iter().enumerate() {
            let w = v.max(0.0) / total.max(f64::MIN_POSITIVE) * width;
            let fill = COLOURS[i % COLOURS.len()];
            let _ = write!(
                s,
                r#"<rect x="{at:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{fill}"/>"#
            );
            at += w;
        }
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}">{total:.2} {unit}</text>"#,
            LEFT + width + 4.0,
            y + h / 2.0 + 4.0
        );
    }
    for (i, part) in parts.iter().enumerate() {
        legend(&mut s, i, part, COLOURS[i % COLOURS.len()], "");
    }
    s + "</svg>\n"
}

fn header(title: &str) -> String {
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/><text x="{}" y="22" text-anchor="middle" font-size="14">{title}</text>"#,
        W / 2.0
    )
}

fn legend(s: &mut String, i: usize, name: &str, colour: &str, dash: &str) {
    let ly = TOP + 10.0 + 18.0 * i as f64;
    let lx = LEFT + PLOT_W + 20.0;
    let _ = write!(
        s,
        r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{colour}" stroke-width="6"{dash}/><text x="{}" y="{}">{name}</text>"#,
        lx + 24.0,
        lx + 30.0,
        ly + 4.0
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decades_cover_the_positive_values() {
        assert_eq!(decades([0.0, 3.0, 250.0].into_iter()), (0, 3));
        assert_eq!(decades([0.0].into_iter()), (0, 1));
        assert_eq!(decades([0.05, 0.5].into_iter()), (-2, 0));
    }

    #[test]
    fn stacked_bars_show_shares_of_their_own_totals_and_end_with_them() {
        let svg = stacked_bars(
            "t",
            "µs",
            &["a", "b"],
            &[("x", vec![1.0, 3.0]), ("y", vec![20.0, 20.0])],
        );
        let widths: Vec<f64> = svg
            .split(r#"" width=""#)
            .skip(2) // up to the picture's own width
            .map(|w| w.split('"').next().unwrap_or_default().parse().unwrap())
            .collect();
        assert_eq!(widths.len(), 4);
        assert!((widths[1] - 3.0 * widths[0]).abs() < 0.2, "{widths:?}");
        assert!((widths[2] - widths[3]).abs() < 0.2, "{widths:?}");
        assert!(
            (widths[0] + widths[1] - widths[2] - widths[3]).abs() < 0.2,
            "full width each: {widths:?}"
        );
        assert!(svg.contains(">4.00 µs<") && svg.contains(">40.00 µs<"), "{svg}");
        assert!(svg.contains(">a<") && svg.contains(">b<"), "the legend names the parts");
    }

    #[test]
    fn zero_points_are_left_out() {
        let l = Line {
            name: "a",
            points: vec![(1.0, 0.0), (10.0, 5.0), (100.0, 50.0)],
            dashed: false,
        };
        let svg = loglog("t", "x", "y", &[l]);
        let line = svg.split("<polyline points=\"").nth(1).unwrap_or_default();
        assert_eq!(line.split('"').next().unwrap_or_default().split(' ').count(), 2);
    }
}
