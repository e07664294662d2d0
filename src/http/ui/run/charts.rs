//! Server-rendered SVG charts of a run (plotters' SVG backend): its LLR against games played
//! with the SPRT's bounds, its Elo with the 95% confidence band against games played (both
//! from the run's recorded history, `rundb/trajectory.rs`), and the SPSA parameter histories
//! (from `args.spsa.param_history`).
//!
//! Owns: turning a run copy into chart series (the statistics through `crate::stats`) and
//! drawing them; the state of a run's history ([`History`]: no games, none recorded, or the
//! samples and where they begin) and the words for the first two; the axis labels (games as
//! `40k`, `1.2M`; values with the decimals their span needs). Called from a page job, so it
//! runs in the offload pool.
//! Must not: read the store or take locks (it gets a copy of the run), use inline `style`
//! attributes (the page's CSP forbids them; plotters writes presentation attributes only),
//! invent samples: a run without recorded history gets words, not a line from zero, and a
//! history that begins mid-run is drawn from where it begins.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::charts_look::{Look, settled};
pub use super::charts_look::{games_label, value_label};
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

    /// The chart and its look from the URL's last segment (`elo.svg`, `elo-phone-dark.svg`).
    pub fn parse_with_look(name: &str) -> Option<(Chart, Look)> {
        let stem = name.strip_suffix(".svg")?;
        let (chart, suffixes) = stem.split_at(stem.find('-').unwrap_or(stem.len()));
        Some((
            Chart::parse(&format!("{chart}.svg"))?,
            Look::from_suffixes(suffixes)?,
        ))
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

/// A wide screen's chart (a phone's is [`Look::size`]'s).
const SIZE: (u32, u32) = (720, 360);

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Draws `chart` of `run` as an SVG document for a wide screen in the light theme.
pub fn render(run: &Run, chart: Chart) -> Result<String, String> {
    render_as(run, chart, Look::default())
}

/// Draws `chart` of `run` as an SVG document in `look` (`Err` with plotters' message).
pub fn render_as(run: &Run, chart: Chart, look: Look) -> Result<String, String> {
    let mut svg = String::new();
    match chart {
        Chart::Llr => draw_llr(&mut svg, run, look)?,
        Chart::Elo => draw_elo(&mut svg, run, look)?,
        Chart::Spsa => draw_spsa(&mut svg, run, look)?,
    }
    Ok(svg)
}

/// What the LLR and Elo charts have to draw.
#[derive(Debug, Clone, PartialEq)]
pub enum History {
    /// No game played yet.
    NoGames,
    /// Games were played but none recorded here (a run imported from Fishtest, which keeps
    /// no such history): said in words, never a line from zero.
    NotRecorded,
    /// The samples, the run's current totals last; `since` > 0 when the record began that
    /// many games into the run (drawn from there).
    Points { points: Vec<Point>, since: u64 },
}

impl History {
    /// The state of a run's history.
    pub fn of(run: &Run) -> History {
        let r = &run.results;
        if r.games() == 0 {
            return History::NoGames;
        }
        let t = &run.trajectory;
        if t.is_empty() {
            return History::NotRecorded;
        }
        let now = Point {
            g: r.games(),
            w: r.wins,
            l: r.losses,
            d: r.draws,
            p: r.pentanomial,
            llr: run.args.sprt.as_ref().map(|s| s.llr),
        };
        let mut points = t.points.clone();
        // A purge lowers the totals; until the next update the samples past them are stale.
        points.retain(|p| p.g <= now.g);
        if points.last().is_none_or(|l| l.g < now.g) {
            points.push(now);
        }
        let since = t.since.min(points.first().map_or(0, |p| p.g));
        History::Points { points, since }
    }

    /// The sentence the page shows instead of the chart, if there is no chart to draw.
    pub fn missing(&self) -> Option<&'static str> {
        match self {
            History::NoGames => Some("No games played yet."),
            History::NotRecorded => Some(NOT_RECORDED),
            History::Points { .. } => None,
        }
    }
}

/// The words for a run with games but no recorded history.
pub const NOT_RECORDED: &str = "No recorded history for this run: its games were played \
                                before this server recorded them (for example in Fishtest).";

/// An SVG that says in words why there is no chart.
fn draw_missing(out: &mut String, caption: &str, why: &str, look: Look) -> Result<(), String> {
    let size = look.size(SIZE);
    let root = SVGBackend::with_string(out, size).into_drawing_area();
    root.fill(&look.background()).map_err(err)?;
    let (w, h) = (size.0 as i32, size.1 as i32);
    let centred = |size: u32| look.font(size).pos(Pos::new(HPos::Center, VPos::Center));
    root.draw(&Text::new(
        caption.to_string(),
        (w / 2, 30),
        centred(look.caption()),
    ))
    .map_err(err)?;
    // The sentence on lines of at most ~60 characters (30 on a phone).
    let width = if look.phone { 30 } else { 60 };
    let mut lines: Vec<String> = Vec::new();
    for word in why.split_whitespace() {
        match lines.last_mut() {
            Some(line) if line.len() + word.len() < width => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    let top = h / 2 - (lines.len() as i32 - 1) * 14;
    for (i, line) in lines.into_iter().enumerate() {
        let y = top + i as i32 * 28;
        root.draw(&Text::new(line, (w / 2, y), centred(look.labels() + 3)))
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// The caption, saying where a history that began mid-run starts.
fn caption(title: &str, since: u64) -> String {
    if since > 0 {
        format!(
            "{title} (recorded from {} games)",
            games_label(since as f64)
        )
    } else {
        title.to_string()
    }
}

/// The chart images (the `charts` fragment).
pub struct RunCharts {
    pub id: String,
    pub spsa: bool,
    /// The LLR chart (SPRT runs).
    pub llr: bool,
    /// Why there is no chart to draw (no games, no recorded history), instead of the images.
    pub missing: Option<&'static str>,
    /// The run's games: part of the images' URLs, so a refreshed fragment fetches them anew.
    pub games: u64,
}

/// The chart images of the run page, or why there are none.
pub fn run_charts(run: &Run) -> RunCharts {
    let spsa = run.args.spsa.is_some();
    RunCharts {
        id: run.id.clone(),
        spsa,
        llr: run.args.sprt.is_some(),
        missing: if spsa {
            None
        } else {
            History::of(run).missing()
        },
        games: run.results.games(),
    }
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

/// The games axis: from the origin, or from where the record began.
fn x_range(pts: &[Point], since: u64) -> std::ops::Range<f64> {
    let x0 = since as f64;
    let x1 = (pts.last().map_or(0, |p| p.g) as f64).max(x0 + 2.0);
    x0..x1
}

fn draw_llr(out: &mut String, run: &Run, look: Look) -> Result<(), String> {
    const TITLE: &str = "LLR against games played";
    let history = History::of(run);
    let (pts, since) = match history {
        History::Points { points, since } => (points, since),
        other => return draw_missing(out, TITLE, other.missing().unwrap_or(NOT_RECORDED), look),
    };
    let root = SVGBackend::with_string(out, look.size(SIZE)).into_drawing_area();
    root.fill(&look.background()).map_err(err)?;
    let (a, b) = run
        .args
        .sprt
        .as_ref()
        .map_or((-2.94, 2.94), |s| (s.lower_bound, s.upper_bound));
    // The origin (0 games, LLR 0) only when the history covers the whole run.
    let origin = (since == 0).then_some((0.0, 0.0));
    let series: Vec<(f64, f64)> = origin
        .into_iter()
        .chain(pts.iter().filter_map(|p| Some((p.g as f64, p.llr?))))
        .filter(|(_, y)| y.is_finite())
        .collect();
    let lo = series.iter().map(|p| p.1).fold(a, f64::min) - 0.3;
    let hi = series.iter().map(|p| p.1).fold(b, f64::max) + 0.3;
    let xs = x_range(&pts, since);
    let (x0, x1) = (xs.start, xs.end);
    let span = hi - lo;
    let mut c = ChartBuilder::on(&root)
        .caption(caption(TITLE, since), look.font(look.caption()))
        .margin(12)
        .margin_right(if look.phone { 20 } else { 36 })
        .x_label_area_size(look.x_area())
        .y_label_area_size(look.y_area())
        .build_cartesian_2d(xs, lo..hi)
        .map_err(err)?;
    c.configure_mesh()
        .x_desc("games")
        .y_desc("LLR")
        .x_labels(look.ticks())
        .y_labels(look.ticks())
        .label_style(look.font(look.labels()))
        .axis_desc_style(look.font(look.labels()))
        .axis_style(look.text())
        .bold_line_style(look.text().mix(0.15))
        .light_line_style(look.text().mix(0.05))
        .x_label_formatter(&|x| games_label(*x))
        .y_label_formatter(&|y| value_label(*y, span))
        .draw()
        .map_err(err)?;
    for (y, color) in [(a, look.red()), (b, look.green())] {
        c.draw_series(LineSeries::new(
            [(x0, y), (x1, y)],
            color.mix(0.7).stroke_width(1),
        ))
        .map_err(err)?;
    }
    c.draw_series(LineSeries::new(series, look.line().stroke_width(2)))
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

fn draw_elo(out: &mut String, run: &Run, look: Look) -> Result<(), String> {
    const TITLE: &str = "Elo and its 95% band against games played";
    let history = History::of(run);
    let (pts, since) = match history {
        History::Points { points, since } => (points, since),
        other => return draw_missing(out, TITLE, other.missing().unwrap_or(NOT_RECORDED), look),
    };
    let root = SVGBackend::with_string(out, look.size(SIZE)).into_drawing_area();
    root.fill(&look.background()).map_err(err)?;
    let all: Vec<(f64, (f64, f64, f64))> = pts
        .iter()
        .filter_map(|p| Some((p.g as f64, elo_at(p)?)))
        .collect();
    let rows = settled(&all);
    // The scale covers every point drawn: the line and its band, nothing clamped.
    let lo = rows.iter().map(|r| r.1.1).fold(-2.0, f64::min) - 1.0;
    let hi = rows.iter().map(|r| r.1.2).fold(2.0, f64::max) + 1.0;
    let xs = x_range(&pts, since);
    let (x0, x1) = (xs.start, xs.end);
    let span = hi - lo;
    let mut c = ChartBuilder::on(&root)
        .caption(caption(TITLE, since), look.font(look.caption()))
        .margin(12)
        .margin_right(if look.phone { 20 } else { 36 })
        .x_label_area_size(look.x_area())
        .y_label_area_size(look.y_area())
        .build_cartesian_2d(xs, lo..hi)
        .map_err(err)?;
    c.configure_mesh()
        .x_desc("games")
        .y_desc("Elo")
        .x_labels(look.ticks())
        .y_labels(look.ticks())
        .label_style(look.font(look.labels()))
        .axis_desc_style(look.font(look.labels()))
        .axis_style(look.text())
        .bold_line_style(look.text().mix(0.15))
        .light_line_style(look.text().mix(0.05))
        .x_label_formatter(&|x| games_label(*x))
        .y_label_formatter(&|y| value_label(*y, span))
        .draw()
        .map_err(err)?;
    if rows.len() >= 2 {
        let mut band: Vec<(f64, f64)> = rows.iter().map(|r| (r.0, r.1.2)).collect();
        band.extend(rows.iter().rev().map(|r| (r.0, r.1.1)));
        c.draw_series(std::iter::once(Polygon::new(
            band,
            look.line().mix(0.2).filled(),
        )))
        .map_err(err)?;
    }
    c.draw_series(LineSeries::new(
        [(x0, 0.0), (x1, 0.0)],
        look.text().mix(0.5).stroke_width(1),
    ))
    .map_err(err)?;
    c.draw_series(LineSeries::new(
        rows.iter().map(|r| (r.0, r.1.0)),
        look.line().stroke_width(2),
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
fn draw_spsa(out: &mut String, run: &Run, look: Look) -> Result<(), String> {
    let root = SVGBackend::with_string(out, look.size((SIZE.0, SIZE.1 + 80))).into_drawing_area();
    root.fill(&look.background()).map_err(err)?;
    let Some(spsa) = &run.args.spsa else {
        return Ok(());
    };
    let history = spsa.param_history.as_deref().unwrap_or_default();
    let period = crate::spsa::history_period(spsa.num_iter, spsa.params.len());
    let xm = (spsa.num_iter.max(1)) as f64;
    let mut c = ChartBuilder::on(&root)
        .caption(
            if look.phone {
                "SPSA parameters (share of range)"
            } else {
                "SPSA parameters (share of each range) against iterations"
            },
            look.font(look.caption()),
        )
        .margin(10)
        .margin_right(if look.phone { 20 } else { 30 })
        .x_label_area_size(look.x_area())
        .y_label_area_size(look.y_area())
        .build_cartesian_2d(0f64..xm, 0f64..1f64)
        .map_err(err)?;
    c.configure_mesh()
        .x_desc("iteration")
        .y_desc("share of range")
        .x_labels(look.ticks())
        .y_labels(look.ticks())
        .label_style(look.font(look.labels()))
        .axis_desc_style(look.font(look.labels()))
        .axis_style(look.text())
        .bold_line_style(look.text().mix(0.15))
        .light_line_style(look.text().mix(0.05))
        .x_label_formatter(&|x| games_label(*x))
        .y_label_formatter(&|y| value_label(*y, 1.0))
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
        .background_style(look.background().mix(0.85))
        .border_style(look.text())
        .label_font(look.font(look.labels()))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rundb::trajectory::Trajectory;

    /// A new SPRT run (the run database's test fixture makes it).
    fn run() -> Run {
        let f = crate::rundb::testkit::fixture();
        let id = f.run(
            serde_json::json!({"sprt": {"elo0": 0.0, "elo1": 2.0}, "num_games": null}),
            true,
        );
        f.get(&id)
    }

    fn play(r: &mut Run, games: u64) {
        let before = Point::of(&r.results, r.args.sprt.as_ref().map(|s| s.llr));
        r.results.wins = games / 2 - games / 8;
        r.results.losses = games / 4 + games / 8 - games / 16;
        r.results.draws = games - r.results.wins - r.results.losses;
        let llr = games as f64 / 50_000.0;
        if let Some(s) = r.args.sprt.as_mut() {
            s.llr = llr;
        }
        let now = Point::of(&r.results, r.args.sprt.as_ref().map(|s| s.llr));
        r.trajectory.record(before, now);
    }

    #[test]
    fn games_and_values_read_as_people_write_them() {
        let dark_phone = Look {
            dark: true,
            phone: true,
        };
        assert_eq!(
            Chart::parse_with_look("llr-phone-dark.svg"),
            Some((Chart::Llr, dark_phone))
        );
        assert_eq!(Chart::parse_with_look("pie-dark.svg"), None);
        assert_eq!(games_label(0.0), "0");
        assert_eq!(games_label(950.0), "950");
        assert_eq!(games_label(1500.0), "1.5k");
        assert_eq!(games_label(40_000.0), "40k");
        assert_eq!(games_label(125_000.0), "125k");
        assert_eq!(games_label(1_200_000.0), "1.2M");
        assert_eq!(games_label(999_999.0), "1M");
        assert_eq!(value_label(-2.5, 6.0), "-2.5");
        assert_eq!(value_label(2.0, 6.0), "2");
        assert_eq!(value_label(-0.0001, 6.0), "0");
        assert_eq!(value_label(12.0, 40.0), "12");
        assert_eq!(value_label(-0.3, 40.0), "0");
        assert_eq!(value_label(0.25, 1.0), "0.25");
    }

    #[test]
    fn the_state_of_a_history() {
        let mut r = run();
        assert_eq!(History::of(&r), History::NoGames);
        // Games without samples: an imported run.
        r.results.wins = 10;
        r.results.losses = 10;
        assert_eq!(History::of(&r), History::NotRecorded);
        let svg = render(&r, Chart::Llr).expect("svg");
        assert!(svg.contains("No recorded history for this run"), "{svg}");
        assert!(!svg.contains("<polyline"), "no line drawn: {svg}");
        // Recording begins now: drawn from 20 games, not from zero.
        play(&mut r, 40_000);
        match History::of(&r) {
            History::Points { points, since } => {
                assert_eq!(since, 20);
                assert_eq!(points.first().map(|p| p.g), Some(20));
            }
            other => panic!("{other:?}"),
        }
        let svg = render(&r, Chart::Elo).expect("svg");
        assert!(svg.contains("recorded from 20 games"), "{svg}");
    }

    /// The words of an SVG's `<text>` elements.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                let body = t.split_once('>')?.1;
                Some(body.split_once("</text>")?.0.trim().to_string())
            })
            .collect()
    }

    #[test]
    fn axes_label_games_in_thousands_and_millions() {
        let mut r = run();
        r.trajectory = Trajectory::default();
        for k in 1..=60u64 {
            play(&mut r, k * 20_000);
        }
        for chart in [Chart::Llr, Chart::Elo] {
            let svg = render(&r, chart).expect("svg");
            let words = texts(&svg);
            assert!(words.iter().any(|w| w == "500k"), "{words:?}");
            assert!(words.iter().any(|w| w == "1M"), "{words:?}");
            assert!(
                words
                    .iter()
                    .all(|w| !w.ends_with(".0") && !w.contains("000")),
                "raw numbers on an axis: {words:?}"
            );
            assert!(svg.contains("<polyline"), "a line: {svg}");
        }
    }
}
