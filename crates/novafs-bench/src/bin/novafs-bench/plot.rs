//! The throughput comparison as a PNG: one panel per metric, a bar per
//! target at its median with a line spanning min–max.

use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use novafs_bench::report::{self, Panel};

/// DejaVu Sans, where Debian and Ubuntu put it; plotters' ab_glyph text
/// needs a font registered at run time.
const FONTS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

fn register_font() -> Result<()> {
    let path = FONTS
        .iter()
        .find(|p| Path::new(p).is_file())
        .context("no DejaVuSans.ttf found (install fonts-dejavu-core)")?;
    let bytes = std::fs::read(path).with_context(|| format!("read {path}"))?;
    // The font lives for the rest of the process, as plotters requires.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| anyhow!("{path} is not a usable font"))
}

const COLS: usize = 4;
const PANEL_W: u32 = 520;
const PANEL_H: u32 = 380;

pub fn bars(path: &Path, panels: &[Panel]) -> Result<()> {
    if panels.is_empty() {
        bail!("nothing to plot");
    }
    register_font()?;
    let rows = panels.len().div_ceil(COLS);
    let root = BitMapBackend::new(path, (PANEL_W * COLS as u32, PANEL_H * rows as u32)).into_drawing_area();
    let draw = |e: String| anyhow!("draw {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| draw(e.to_string()))?;
    for (area, panel) in root.split_evenly((rows, COLS)).iter().zip(panels) {
        let n = panel.bars.len();
        let top = panel.bars.iter().map(|(_, s)| s.max).fold(0.0f64, f64::max) * 1.1;
        let top = if top > 0.0 { top } else { 1.0 };
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(55)
            // Discrete coordinates include the range's end: 0..n-1 gives n slots.
            .build_cartesian_2d((0..n.saturating_sub(1)).into_segmented(), 0.0..top)
            .map_err(|e| draw(e.to_string()))?;
        let names: Vec<&str> = panel.bars.iter().map(|(t, _)| t.as_str()).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .y_desc(panel.unit)
            .x_labels(n)
            .x_label_style(("sans-serif", 10))
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => names.get(*i).map_or(String::new(), |s| s.to_string()),
                _ => String::new(),
            })
            .draw()
            .map_err(|e| draw(e.to_string()))?;
        chart
            .draw_series(panel.bars.iter().enumerate().map(|(i, (t, s))| {
                let color = if t.starts_with("novafs") {
                    RED.mix(0.7)
                } else {
                    BLUE.mix(0.5)
                };
                let mut bar = Rectangle::new(
                    [(SegmentValue::Exact(i), 0.0), (SegmentValue::Exact(i + 1), s.median)],
                    color.filled(),
                );
                bar.set_margin(0, 0, 6, 6);
                bar
            }))
            .map_err(|e| draw(e.to_string()))?;
        chart
            .draw_series(panel.bars.iter().enumerate().map(|(i, (_, s))| {
                PathElement::new(
                    vec![(SegmentValue::CenterOf(i), s.min), (SegmentValue::CenterOf(i), s.max)],
                    BLACK.stroke_width(2),
                )
            }))
            .map_err(|e| draw(e.to_string()))?;
        // The median as a number at the foot of each bar: some bars are too
        // small to see beside the others.
        chart
            .draw_series(panel.bars.iter().enumerate().map(|(i, (_, s))| {
                Text::new(
                    report::fmt_num(s.median),
                    (SegmentValue::CenterOf(i), top * 0.02),
                    ("sans-serif", 11)
                        .into_font()
                        .color(&BLACK)
                        .pos(Pos::new(HPos::Center, VPos::Bottom)),
                )
            }))
            .map_err(|e| draw(e.to_string()))?;
    }
    root.present().map_err(|e| draw(e.to_string()))?;
    Ok(())
}

/// One panel of a time series plot: named lines of (x, y) points.
pub struct LinePanel {
    pub title: String,
    pub x_desc: &'static str,
    pub y_desc: &'static str,
    pub lines: Vec<(String, Vec<(f64, f64)>)>,
}

const LINE_COLORS: [RGBColor; 4] = [RED, BLUE, GREEN, MAGENTA];

/// Panels side by side, each with its lines and a legend.
pub fn lines(path: &Path, panels: &[LinePanel]) -> Result<()> {
    if panels.iter().all(|p| p.lines.iter().all(|(_, l)| l.is_empty())) {
        bail!("nothing to plot");
    }
    register_font()?;
    let root = BitMapBackend::new(path, (640 * panels.len() as u32, 420)).into_drawing_area();
    let draw = |e: String| anyhow!("draw {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| draw(e.to_string()))?;
    for (area, panel) in root.split_evenly((1, panels.len())).iter().zip(panels) {
        let points = panel.lines.iter().flat_map(|(_, l)| l.iter());
        let (x_max, y_max) = points.fold((0.0f64, 0.0f64), |(x, y), &(px, py)| (x.max(px), y.max(py)));
        let x_max = if x_max > 0.0 { x_max } else { 1.0 };
        let y_max = if y_max > 0.0 { y_max * 1.1 } else { 1.0 };
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)
            .map_err(|e| draw(e.to_string()))?;
        chart
            .configure_mesh()
            .x_desc(panel.x_desc)
            .y_desc(panel.y_desc)
            .y_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .map_err(|e| draw(e.to_string()))?;
        for (k, (name, pts)) in panel.lines.iter().enumerate() {
            let color = LINE_COLORS[k % LINE_COLORS.len()];
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
                .map_err(|e| draw(e.to_string()))?
                .label(name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(|e| draw(e.to_string()))?;
    }
    root.present().map_err(|e| draw(e.to_string()))?;
    Ok(())
}
