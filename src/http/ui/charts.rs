//! Server-rendered SVG charts of a run (plotters' SVG backend): its LLR against games played
//! with the SPRT's bounds, its Elo with the 95% confidence band against games played (both
//! from the run's trajectory, `rundb/trajectory.rs`), and the SPSA parameter histories (from
//! `args.spsa.param_history`).
//!
//! Owns: turning a run copy into chart series (the statistics through `crate::stats`) and
//! drawing them. Called from a page job, so it runs in the offload pool.
//! Must not: read the store or take locks (it gets a copy of the run), use inline `style`
//! attributes (the page's CSP forbids them; plotters writes presentation attributes only).

use plotters::prelude::*;

use crate::rundb::model::Run;
use crate::rundb::trajectory::Point;
use crate::stats::get_elo;

/// Which chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chart {
    Llr,
    Elo,
    Spsa,
}

impl Chart {
    /// From the URL's last segment.
    pub fn parse(name: &str) -> Option<Chart> {
        match name {
            "llr.svg" => Some(Chart::Llr),
            "elo.svg" => Some(Chart::Elo),
            "spsa.svg" => Some(Chart::Spsa),
            _ => None,
        }
    }

    /// Whether the run has this chart: LLR for an SPRT, Elo for any run but SPSA, the
    /// parameter history for SPSA.
    pub fn applies(self, run: &Run) -> bool {
        match self {
            Chart::Llr => run.args.sprt.is_some(),
            Chart::Elo => run.args.spsa.is_none(),
            Chart::Spsa => run.args.spsa.is_some(),
        }
    }
}

const SIZE: (u32, u32) = (720, 360);

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Draws `chart` of `run` as an SVG document (`Err` with plotters' message).
pub fn render(run: &Run, chart: Chart) -> Result<String, String> {
    let mut svg = String::new();
    match chart {
        Chart::Llr => draw_llr(&mut svg, run)?,
        Chart::Elo => draw_elo(&mut svg, run)?,
        Chart::Spsa => draw_spsa(&mut svg, run)?,
    }
    Ok(svg)
}

/// The trajectory with the origin first and the run's current totals last.
fn points(run: &Run) -> Vec<Point> {
    let mut pts = run.trajectory.points.clone();
    let r = &run.results;
    let now = Point {
        g: r.games(),
        w: r.wins,
        l: r.losses,
        d: r.draws,
        p: r.pentanomial,
        llr: run.args.sprt.as_ref().map(|s| s.llr),
    };
    // A purge lowers the totals; until the next update the samples past them are stale.
    pts.retain(|p| p.g <= now.g);
    if pts.last().is_none_or(|l| l.g < now.g) {
        pts.push(now);
    }
    pts
}

/// Elo, lower and upper 95% bound at a point (pentanomial when the run has it).
fn elo_at(p: &Point) -> Option<(f64, f64, f64)> {
    if p.g == 0 {
        return None;
    }
    let data: Vec<f64> = if p.p.iter().any(|c| *c > 0) {
        p.p.iter().map(|c| *c as f64).collect()
    } else {
        vec![p.l as f64, p.d as f64, p.w as f64]
    };
    let e = get_elo(&data).ok()?;
    let ok = e.elo.is_finite() && e.elo95.is_finite();
    ok.then_some((e.elo, e.elo - e.elo95, e.elo + e.elo95))
}

fn x_max(pts: &[Point]) -> f64 {
    pts.last().map_or(0, |p| p.g).max(2) as f64
}

fn draw_llr(out: &mut String, run: &Run) -> Result<(), String> {
    let root = SVGBackend::with_string(out, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (a, b) = run
        .args
        .sprt
        .as_ref()
        .map_or((-2.94, 2.94), |s| (s.lower_bound, s.upper_bound));
    let pts = points(run);
    let series: Vec<(f64, f64)> = std::iter::once((0.0, 0.0))
        .chain(pts.iter().filter_map(|p| Some((p.g as f64, p.llr?))))
        .filter(|(_, y)| y.is_finite())
        .collect();
    let lo = series.iter().map(|p| p.1).fold(a, f64::min) - 0.3;
    let hi = series.iter().map(|p| p.1).fold(b, f64::max) + 0.3;
    let xm = x_max(&pts);
    let mut c = ChartBuilder::on(&root)
        .caption("LLR against games played", ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..xm, lo..hi)
        .map_err(err)?;
    c.configure_mesh()
        .x_desc("games")
        .y_desc("LLR")
        .draw()
        .map_err(err)?;
    for (y, color) in [(a, RED), (b, GREEN)] {
        c.draw_series(LineSeries::new(
            [(0.0, y), (xm, y)],
            color.mix(0.7).stroke_width(1),
        ))
        .map_err(err)?;
    }
    c.draw_series(LineSeries::new(series, BLUE.stroke_width(2)))
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

fn draw_elo(out: &mut String, run: &Run) -> Result<(), String> {
    let root = SVGBackend::with_string(out, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let pts = points(run);
    let rows: Vec<(f64, (f64, f64, f64))> = pts
        .iter()
        .filter_map(|p| Some((p.g as f64, elo_at(p)?)))
        .collect();
    // The first few games give huge intervals: the scale follows the last half of the run.
    let tail = &rows[rows.len() / 2..];
    let lo = tail.iter().map(|r| r.1.1).fold(-2.0, f64::min).max(-100.0) - 1.0;
    let hi = tail.iter().map(|r| r.1.2).fold(2.0, f64::max).min(100.0) + 1.0;
    let xm = x_max(&pts);
    let mut c = ChartBuilder::on(&root)
        .caption(
            "Elo with its 95% confidence band against games played",
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..xm, lo..hi)
        .map_err(err)?;
    c.configure_mesh()
        .x_desc("games")
        .y_desc("Elo")
        .draw()
        .map_err(err)?;
    let clamp = |y: f64| y.clamp(lo, hi);
    if rows.len() >= 2 {
        let mut band: Vec<(f64, f64)> = rows.iter().map(|r| (r.0, clamp(r.1.2))).collect();
        band.extend(rows.iter().rev().map(|r| (r.0, clamp(r.1.1))));
        c.draw_series(std::iter::once(Polygon::new(band, BLUE.mix(0.15).filled())))
            .map_err(err)?;
    }
    c.draw_series(LineSeries::new(
        [(0.0, 0.0), (xm, 0.0)],
        BLACK.mix(0.5).stroke_width(1),
    ))
    .map_err(err)?;
    c.draw_series(LineSeries::new(
        rows.iter().map(|r| (r.0, clamp(r.1.0))),
        BLUE.stroke_width(2),
    ))
    .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Each parameter's value as a share of its range (0 = min, 1 = max), so that parameters
/// of any scale share one chart; the legend names them (the first 16).
fn draw_spsa(out: &mut String, run: &Run) -> Result<(), String> {
    let root = SVGBackend::with_string(out, (SIZE.0, SIZE.1 + 80)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let Some(spsa) = &run.args.spsa else {
        return Ok(());
    };
    let history = spsa.param_history.as_deref().unwrap_or_default();
    let period = crate::spsa::history_period(spsa.num_iter, spsa.params.len());
    let xm = (spsa.num_iter.max(1)) as f64;
    let mut c = ChartBuilder::on(&root)
        .caption(
            "SPSA parameters (share of each range) against iterations",
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..xm, 0f64..1f64)
        .map_err(err)?;
    c.configure_mesh()
        .x_desc("iteration")
        .y_desc("(value − min) / (max − min)")
        .draw()
        .map_err(err)?;
    for (i, p) in spsa.params.iter().enumerate() {
        let span = p.max - p.min;
        if span <= 0.0 || !span.is_finite() {
            continue;
        }
        let share = move |v: f64| ((v - p.min) / span).clamp(0.0, 1.0);
        let line: Vec<(f64, f64)> = std::iter::once((0.0, share(p.start)))
            .chain(history.iter().enumerate().filter_map(|(k, sample)| {
                Some(((k + 1) as f64 * period, share(sample.get(i)?.theta)))
            }))
            .collect();
        let color = PALETTE[i % PALETTE.len()];
        let drawn = c
            .draw_series(LineSeries::new(line, color.stroke_width(2)))
            .map_err(err)?;
        if i < 16 {
            drawn.label(p.name.clone()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
        }
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// A plain curve (the SPRT calculator's), as an SVG document sized for inline use.
pub fn curve(points: &[(f64, f64)], x_desc: &str, y_desc: &str) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (480, 300)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let x0 = points.first().map_or(0.0, |p| p.0);
        let x1 = points.last().map_or(1.0, |p| p.0).max(x0 + 1e-9);
        let y1 = points.iter().map(|p| p.1).fold(1e-9, f64::max) * 1.05;
        let mut c = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..x1, 0f64..y1)
            .map_err(err)?;
        c.configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .draw()
            .map_err(err)?;
        c.draw_series(LineSeries::new(
            points.iter().copied(),
            BLUE.stroke_width(2),
        ))
        .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}
