//! The statistics pages: `/tests/stats/{id}` (a run's raw statistics, as a page or, for the
//! live refresh, its content alone), `/tests/live_elo/{id}` and `/tests/live_elo_update/{id}`
//! (an SPRT's gauges and details, server-rendered SVG), `/sprt_calc` (the SPRT calculator,
//! computed on the server from the form's GET fields) and `/tests/chart/{id}/{name}` (a run's
//! SVG charts, `image/svg+xml`).
//!
//! Owns: those handlers, their template structs and the formatting of the numbers.
//! Must not: compute statistics itself (`crate::stats::raw`, `crate::stats::sprt_calc`,
//! `sprt_elo` do), read a run but through `RunDb::get_run` inside a page job, or render
//! outside the pool.
//!
//! Live refresh (`static/refresh.js` sends `HX-Request: true`): a fragment answers 286 once
//! nothing will change any more (a finished run, a decided SPRT), 204 while the run waits
//! (pending or paused; the stats page only) and 200 with the new content otherwise. Without
//! the header the same URL is the full page; every answer carries `Vary: HX-Request`.

use std::collections::HashMap;
use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;

use super::charts::{self, Chart};
use super::run::{load, page_title};
use super::{Input, Layout, Out, asset, errors, page};
use crate::http::AppState;
use crate::rundb::model::Run;
use crate::stats::raw::{Bounds, RawStats, SprtParams, View, raw_stats};
use crate::stats::sprt_calc::{self, CalcInput};
use crate::stats::{Results, SprtState, sprt_elo};

/// htmx's "stop polling" status.
fn stop_polling() -> StatusCode {
    StatusCode::from_u16(286).unwrap_or(StatusCode::OK)
}

/// One table: a caption, column heads (may be empty) and rows whose first cell is a heading.
pub struct Table {
    pub title: String,
    pub head: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    fn new(title: &str) -> Self {
        Table {
            title: title.into(),
            head: Vec::new(),
            rows: Vec::new(),
        }
    }

    fn row(&mut self, name: &str, value: impl Into<String>) {
        self.rows.push(vec![name.into(), value.into()]);
    }
}

/// A group of tables under a heading, with an optional note.
pub struct Section {
    pub heading: String,
    pub note: String,
    pub tables: Vec<Table>,
}

/// The refreshed part of the stats page.
pub struct StatsContent {
    pub id: String,
    pub sections: Vec<Section>,
    /// Which charts to show (`llr.svg`, `elo.svg`), with the games as a cache-buster.
    pub charts: Vec<String>,
    pub games: u64,
}

#[derive(Template)]
#[template(path = "stats.html")]
pub struct StatsPage {
    pub l: Layout,
    pub id: String,
    pub heading: String,
    pub spsa: bool,
    pub live: bool,
    pub c: StatsContent,
    pub script: String,
}

#[derive(Template)]
#[template(source = "{% include \"stats_content.html\" %}", ext = "html")]
pub struct StatsFragment {
    pub c: StatsContent,
}

/// One gauge: a bar from `lo` to `hi` with the value's position (0–300 px) and the marks.
pub struct Gauge {
    pub label: &'static str,
    pub value: String,
    pub lo: String,
    pub hi: String,
    /// The value's x position in the 300-px bar.
    pub x: i64,
    /// The zero mark (Elo) or the midpoint, in px.
    pub mark: i64,
}

/// The live Elo gauges and details.
pub struct LiveElo {
    pub id: String,
    pub gauges: Vec<Gauge>,
    pub rows: Vec<(String, String, String)>,
}

#[derive(Template)]
#[template(path = "live_elo.html")]
pub struct LiveEloPage {
    pub l: Layout,
    pub id: String,
    pub live: bool,
    pub e: LiveElo,
    pub script: String,
}

#[derive(Template)]
#[template(source = "{% include \"live_elo_content.html\" %}", ext = "html")]
pub struct LiveEloFragment {
    pub e: LiveElo,
}

/// One line of the calculator's table.
pub struct CalcRow {
    pub elo: String,
    pub pass: String,
    pub games: String,
}

#[derive(Template)]
#[template(path = "sprt_calc.html")]
pub struct CalcPage {
    pub l: Layout,
    pub normalized: bool,
    pub elo0: String,
    pub elo1: String,
    pub draw_ratio: String,
    pub rms_bias: String,
    pub error: String,
    pub summary: Vec<String>,
    pub rows: Vec<CalcRow>,
    /// The two charts, SVG markup made here (numbers only).
    pub pass_svg: String,
    pub games_svg: String,
}

/// Whether the request is the live refresh's (`HX-Request: true`, not a navigation).
fn is_fragment(headers: &HeaderMap) -> bool {
    let hx = headers
        .get("hx-request")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let navigate = headers
        .get("sec-fetch-mode")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == "navigate");
    hx && !navigate
}

fn vary(mut r: Response) -> Response {
    r.headers_mut()
        .append(header::VARY, HeaderValue::from_static("HX-Request"));
    r
}

/// The results as `sprt_elo` and `update_SPRT` read them (a pentanomial only when counted).
pub fn results_of(run: &Run) -> Results {
    let r = &run.results;
    Results {
        wins: r.wins,
        losses: r.losses,
        draws: r.draws,
        pentanomial: Some(r.pentanomial).filter(|p| p.iter().any(|c| *c > 0)),
    }
}

fn f(x: f64, decimals: usize) -> String {
    if x.is_finite() {
        format!("{x:.decimals$}")
    } else {
        "-".into()
    }
}

fn opt(x: Option<f64>, decimals: usize) -> String {
    x.map_or_else(|| "-".into(), |x| f(x, decimals))
}

fn list(xs: &[f64], decimals: usize) -> String {
    let cells: Vec<String> = xs.iter().map(|x| f(*x, decimals)).collect();
    format!("[{}]", cells.join(", "))
}

fn view_section(title: &str, v: &View, bounds: Option<&Bounds>, note: &str) -> Section {
    let mut basic = Table::new("Basic");
    match v.elo {
        Some((e, ci, los)) => {
            basic.row(
                "Elo",
                format!("{} [{}, {}]", f(e, 2), f(ci[0], 2), f(ci[1], 2)),
            );
            basic.row("LOS(1-p)", format!("{}%", f(los * 100.0, 1)));
        }
        None => {
            basic.row("Elo", "-");
            basic.row("LOS(1-p)", "-");
        }
    }
    if let (Some(llr), Some(b)) = (v.llr, bounds) {
        basic.row(
            "LLR",
            format!("{} [{}, {}]", f(llr, 2), f(b.a, 2), f(b.b, 2)),
        );
    }
    let mut tables = vec![basic];
    if let Some(g) = &v.generalized {
        let mut t = Table::new("Generalized LLR");
        t.row("Logistic (exact)", f(g.logistic_exact, 4));
        t.row("Logistic (alt)", f(g.logistic_alt, 4));
        t.row("Logistic (alt2)", f(g.logistic_alt2, 4));
        t.row("Normalized (exact)", f(g.normalized_exact, 4));
        t.row("Normalized (alt)", f(g.normalized_alt, 4));
        if let Some(be) = v.bayeselo_llr {
            t.row("BayesElo", f(be, 4));
        }
        tables.push(t);
    }
    let mut aux = Table::new("Auxiliary");
    aux.row("Games", v.games.to_string());
    let counts: Vec<String> = v.results.iter().map(u64::to_string).collect();
    aux.row("Results", format!("[{}]", counts.join(", ")));
    aux.row("Distribution", list(&v.distribution, 4));
    aux.row("Expected value (score)", opt(v.score, 5));
    aux.row("Variance/game", opt(v.variance, 5));
    aux.row("Stdev/game", opt(v.stdev, 5));
    aux.row(
        "Skewness, excess kurtosis",
        format!("{}, {}", opt(v.skewness, 4), opt(v.exkurt, 4)),
    );
    aux.row(
        "Normalized Elo",
        v.nelo.map_or_else(
            || "-".into(),
            |(n, d)| format!("{} [{}, {}]", f(n, 2), f(n - d, 2), f(n + d, 2)),
        ),
    );
    if let Some(j) = &v.llr_jumps {
        aux.row("LLR jumps", list(j, 4));
    }
    if let Some(o) = v.overshoot {
        aux.row(
            "Expected overshoot [H0, H1]",
            format!("[{}, {}]", f(o[0], 4), f(o[1], 4)),
        );
    }
    tables.push(aux);
    Section {
        heading: title.into(),
        note: note.into(),
        tables,
    }
}

fn stats_content(run: &Run) -> StatsContent {
    let a = &run.args;
    let results = results_of(run);
    let sprt = a.sprt.as_ref().map(|s| SprtParams {
        alpha: s.alpha,
        beta: s.beta,
        elo0: s.elo0,
        elo1: s.elo1,
        elo_model: s.elo_model,
        batch_size: s.batch_size,
        overshoot: s.overshoot,
    });
    let raw: RawStats = raw_stats(&results, sprt.as_ref());
    let mut context = Table::new("Context");
    context.row("Base TC", a.tc.clone());
    context.row(
        "Test TC",
        if a.new_tc.is_empty() {
            a.tc.clone()
        } else {
            a.new_tc.clone()
        },
    );
    context.row("Book", a.book.clone());
    context.row("Threads", a.threads.to_string());
    context.row("Base options", a.base_options.clone());
    context.row("New options", a.new_options.clone());
    let mut first = vec![context];
    if let Some(s) = &a.sprt {
        let model = s.elo_model.as_str();
        let mut t = Table::new("SPRT parameters");
        t.row("Alpha", f(s.alpha, 3));
        t.row("Beta", f(s.beta, 3));
        t.row(&format!("Elo0 ({model})"), f(s.elo0, 2));
        t.row(&format!("Elo1 ({model})"), f(s.elo1, 2));
        t.row("Batch size (games)", run.batch_games().to_string());
        t.row(
            "State",
            match s.state {
                SprtState::Running => "running".into(),
                other => other.as_str().to_string(),
            },
        );
        first.push(t);
    }
    let mut draws = Table::new("Draws");
    draws.row("Draw ratio", f(raw.draw_ratio, 5));
    if let Some(p) = raw.pentanomial_draw_ratio {
        draws.row("Pentanomial draw ratio", f(p, 5));
    }
    if let Some((dd, wl)) = raw.dd_wl {
        draws.row("(DD, WL) pairs", format!("{}, {}", f(dd, 0), f(wl, 0)));
    }
    draws.row("DrawElo (BayesElo)", opt(raw.drawelo, 2));
    first.push(draws);
    let mut sections = vec![Section {
        heading: "Context".into(),
        note: String::new(),
        tables: first,
    }];
    if let Some(b) = &raw.bounds {
        let mut t = Table::new("SPRT bounds");
        t.head = ["", "Logistic", "Normalized", "BayesElo", "Score"]
            .map(String::from)
            .to_vec();
        for (name, h) in [("H0", b.h0), ("H1", b.h1)] {
            t.rows.push(vec![
                name.into(),
                // `+ 0.0` turns a negative zero (elo of exactly ½) into 0.
                f(h.logistic + 0.0, 3),
                f(h.normalized + 0.0, 3),
                f(h.bayeselo + 0.0, 3),
                f(h.score, 5),
            ]);
        }
        sections.push(Section {
            heading: "SPRT bounds".into(),
            note: "Normalized Elo is (score − ½)/σ per game, times 800/ln 10: it does not depend \
                   on the draw ratio or the opening bias."
                .into(),
            tables: vec![t],
        });
    }
    if let Some(p) = &raw.pentanomial {
        sections.push(view_section(
            "Pentanomial statistics",
            p,
            raw.bounds.as_ref(),
            "",
        ));
    }
    let tri_note = if raw.pentanomial.is_some() {
        "The pentanomial statistics above are the ones that count: the trinomial ones are \
         shown only as a sanity check."
    } else {
        ""
    };
    sections.push(view_section(
        "Trinomial statistics",
        &raw.trinomial,
        raw.bounds.as_ref(),
        tri_note,
    ));
    if let Some(c) = raw.comparison {
        let mut t = Table::new("Comparison");
        t.row(
            "Variance ratio (pentanomial/trinomial)",
            f(c.variance_ratio, 5),
        );
        t.row(
            "Variance difference (trinomial-pentanomial)",
            f(c.variance_difference, 6),
        );
        t.row("RMS bias", f(c.rms_bias, 5));
        t.row("RMS bias (Elo)", f(c.rms_bias_elo, 2));
        sections.push(Section {
            heading: "Comparison".into(),
            note: String::new(),
            tables: vec![t],
        });
    }
    let mut chart_names = Vec::new();
    if a.sprt.is_some() {
        chart_names.push("llr.svg".to_string());
    }
    chart_names.push("elo.svg".to_string());
    StatsContent {
        id: run.id.clone(),
        sections,
        charts: chart_names,
        games: run.results.games(),
    }
}

/// `GET /tests/stats/{id}`: the page, or its content for the live refresh.
pub async fn stats_page(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let fragment = is_fragment(&headers);
    let r = page(&state, Input::get(&state, &headers), move |db, ctx, _| {
        let run = match load(db, ctx, &id) {
            Ok(run) => run,
            Err(out) => return out,
        };
        let spsa = run.args.spsa.is_some();
        if fragment {
            if spsa || run.finished {
                let c = stats_content(&run);
                return Out::render(stop_polling(), &StatsFragment { c });
            }
            if run.workers == 0 {
                return Out::Html(StatusCode::NO_CONTENT, String::new());
            }
            return Out::render(
                StatusCode::OK,
                &StatsFragment {
                    c: stats_content(&run),
                },
            );
        }
        let title = page_title(&run);
        let p = StatsPage {
            l: Layout::new(ctx, &format!("Statistics - {title}")),
            id: run.id.clone(),
            heading: title,
            spsa,
            live: !spsa && !run.finished,
            c: stats_content(&run),
            script: asset("refresh.js"),
        };
        Out::render(StatusCode::OK, &p)
    })
    .await;
    vary(r)
}

/// The position of `value` on a 300-px bar from `lo` to `hi`.
fn px(value: f64, lo: f64, hi: f64) -> i64 {
    if !(value.is_finite() && hi > lo) {
        return 0;
    }
    ((value - lo) / (hi - lo) * 300.0).clamp(0.0, 300.0).round() as i64
}

fn live_elo(run: &Run) -> Option<LiveElo> {
    let s = run.args.sprt.as_ref()?;
    let a = &run.args;
    let results = results_of(run);
    let e = sprt_elo(&results, s.alpha, s.beta, 0.05, s.elo0, s.elo1, s.elo_model).ok();
    let (lower, upper) = (s.lower_bound, s.upper_bound);
    let llr = e.as_ref().map_or(s.llr, |e| e.llr);
    let mut gauges = vec![Gauge {
        label: "LLR",
        value: f(llr, 2),
        lo: f(lower, 2),
        hi: f(upper, 2),
        x: px(llr, lower, upper),
        mark: px(0.0, lower, upper),
    }];
    let games = run.results.games();
    if let Some(e) = &e {
        gauges.push(Gauge {
            label: "LOS",
            value: format!("{}%", f(e.los * 100.0, 1)),
            lo: "0%".into(),
            hi: "100%".into(),
            x: px(e.los, 0.0, 1.0),
            mark: 150,
        });
        // Fixed ±4 Elo, widened to hold the interval.
        let reach = e.ci[0].abs().max(e.ci[1].abs()).clamp(4.0, 1000.0).ceil();
        gauges.push(Gauge {
            label: "Elo",
            value: f(e.elo, 2),
            lo: f(-reach, 0),
            hi: f(reach, 0),
            x: px(e.elo, -reach, reach),
            mark: 150,
        });
    }
    let repo = a.tests_repo.trim_end_matches('/');
    let compare = if repo.starts_with("https://") || repo.starts_with("http://") {
        format!("{repo}/compare/{}...{}", a.resolved_base, a.resolved_new)
    } else {
        String::new()
    };
    let commit = if a.msg_new.is_empty() {
        a.new_tag.clone()
    } else {
        format!("{} ({})", a.new_tag, a.msg_new)
    };
    let decided = match s.state {
        SprtState::Running => String::new(),
        other => format!(" ({})", other.as_str()),
    };
    let r = &run.results;
    let pct = |x: u64| {
        if games == 0 {
            0.0
        } else {
            x as f64 * 100.0 / games as f64
        }
    };
    let row = |name: &str, value: String| (name.to_string(), value, String::new());
    let mut rows = vec![
        (String::from("Commit"), commit, compare),
        row("Info", a.info.clone()),
        (
            "Submitter".into(),
            a.username.clone(),
            format!("/tests/user/{}", a.username),
        ),
        row("TC", a.tc.clone()),
        row(
            "SPRT",
            format!(
                "elo0: {} alpha: {} elo1: {} beta: {} ({})",
                f(s.elo0, 2),
                f(s.alpha, 2),
                f(s.elo1, 2),
                f(s.beta, 2),
                s.elo_model.as_str()
            ),
        ),
        row(
            "LLR",
            format!("{} [{}, {}]{decided}", f(llr, 2), f(lower, 2), f(upper, 2)),
        ),
    ];
    match &e {
        Some(e) if games > 0 => {
            rows.push(row(
                "Elo",
                format!(
                    "{} [{}, {}] (95%)",
                    f(e.elo, 2),
                    f(e.ci[0], 2),
                    f(e.ci[1], 2)
                ),
            ));
            rows.push(row("LOS", format!("{}%", f(e.los * 100.0, 1))));
        }
        _ => {
            rows.push(row("Elo", "-".into()));
            rows.push(row("LOS", "-".into()));
        }
    }
    rows.push(row(
        "Games",
        format!(
            "{games} [w:{}%, l:{}%, d:{}%]",
            f(pct(r.wins), 1),
            f(pct(r.losses), 1),
            f(pct(r.draws), 1)
        ),
    ));
    if let Some(p) = results.pentanomial {
        rows.push(row(
            "Pentanomial",
            format!("[{}, {}, {}, {}, {}]", p[0], p[1], p[2], p[3], p[4]),
        ));
    }
    Some(LiveElo {
        id: run.id.clone(),
        gauges,
        rows,
    })
}

/// The run of a live Elo route, its gauges and whether nothing will change any more (decided,
/// or stopped undecided); the HTML 404 unless an SPRT run.
fn load_live(
    db: &crate::rundb::RunDb,
    ctx: &super::Ctx,
    id: &str,
) -> Result<(Run, LiveElo, bool), Out> {
    let run = load(db, ctx, id)?;
    let Some(e) = live_elo(&run) else {
        return Err(errors::missing(ctx));
    };
    let decided = run.finished
        || run
            .args
            .sprt
            .as_ref()
            .is_some_and(|s| s.state != SprtState::Running);
    Ok((run, e, decided))
}

/// `GET /tests/live_elo/{id}`: 404 unless an SPRT run.
pub async fn live_elo_page(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let r = page(&state, Input::get(&state, &headers), move |db, ctx, _| {
        let (run, e, decided) = match load_live(db, ctx, &id) {
            Ok(loaded) => loaded,
            Err(out) => return out,
        };
        let live = !decided;
        let p = LiveEloPage {
            l: Layout::new(ctx, &format!("Live Elo - {}", page_title(&run))),
            id: run.id.clone(),
            live,
            e,
            script: asset("refresh.js"),
        };
        Out::render(StatusCode::OK, &p)
    })
    .await;
    vary(r)
}

/// `GET /tests/live_elo_update/{id}`: the gauges and the table; 286 once decided (or the run
/// finished undecided).
pub async fn live_elo_update(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let r = page(&state, Input::get(&state, &headers), move |db, ctx, _| {
        let (_, e, decided) = match load_live(db, ctx, &id) {
            Ok(loaded) => loaded,
            Err(out) => return out,
        };
        let status = if decided {
            stop_polling()
        } else {
            StatusCode::OK
        };
        Out::render(status, &LiveEloFragment { e })
    })
    .await;
    vary(r)
}

/// `GET /tests/chart/{id}/{name}`: `llr.svg`, `elo.svg` or `spsa.svg`, drawn in the pool;
/// the HTML 404 page for an unknown run or a chart the run does not have.
pub async fn chart(
    State(state): State<Arc<AppState>>,
    Path((id, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let kind = Chart::parse(&name);
    let mut r = page(&state, Input::get(&state, &headers), move |db, ctx, _| {
        let run = match load(db, ctx, &id) {
            Ok(run) => run,
            Err(out) => return out,
        };
        let Some(kind) = kind.filter(|k| k.applies(&run)) else {
            return errors::missing(ctx);
        };
        match charts::render(&run, kind) {
            Ok(svg) => Out::Html(StatusCode::OK, svg),
            Err(e) => {
                tracing::error!(run = %run.id, error = %e, "chart");
                errors::internal()
            }
        }
    })
    .await;
    if r.status() == StatusCode::OK {
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("image/svg+xml"),
        );
    }
    r
}

/// The calculator form's fields, as typed.
fn field(params: &HashMap<String, String>, key: &str, default: f64) -> (String, Option<f64>) {
    match params.get(key) {
        None => (default.to_string(), Some(default)),
        Some(v) => (
            v.clone(),
            v.trim().parse::<f64>().ok().filter(|x| x.is_finite()),
        ),
    }
}

/// `GET /sprt_calc`: the form, and with valid inputs the pass probability and expected
/// number of games against the true Elo (table and two charts).
pub async fn sprt_calc(
    State(state): State<Arc<AppState>>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    page(&state, Input::get(&state, &headers), move |_, ctx, _| {
        let d = CalcInput::default();
        let model = params.get("elo_model").map(String::as_str);
        let normalized = match model {
            None | Some("Normalized") | Some("normalized") => Some(true),
            Some("Logistic") | Some("logistic") => Some(false),
            Some(_) => None,
        };
        let (elo0_s, elo0) = field(&params, "elo0", d.elo0);
        let (elo1_s, elo1) = field(&params, "elo1", d.elo1);
        let (dr_s, dr) = field(&params, "draw_ratio", d.draw_ratio);
        let (bias_s, bias) = field(&params, "rms_bias", d.rms_bias);
        let mut p = CalcPage {
            l: Layout::new(ctx, "SPRT calculator"),
            normalized: normalized.unwrap_or(true),
            elo0: elo0_s,
            elo1: elo1_s,
            draw_ratio: dr_s,
            rms_bias: bias_s,
            error: String::new(),
            summary: Vec::new(),
            rows: Vec::new(),
            pass_svg: String::new(),
            games_svg: String::new(),
        };
        let input = match (normalized, elo0, elo1, dr, bias) {
            (None, ..) => Err("Unknown Elo model: choose Normalized or Logistic".to_string()),
            (Some(normalized), Some(elo0), Some(elo1), Some(draw_ratio), Some(rms_bias)) => {
                Ok(CalcInput {
                    normalized,
                    elo0,
                    elo1,
                    draw_ratio,
                    rms_bias,
                })
            }
            _ => Err("Unreadable input: every field must be a number".to_string()),
        };
        let out = input.and_then(|i| {
            sprt_calc::calculate(&i)
                .map(|o| (i, o))
                .map_err(|e| e.to_string())
        });
        let status = match out {
            Err(e) => {
                p.error = e;
                StatusCode::BAD_REQUEST
            }
            Ok((input, o)) => {
                let unit = if input.normalized { "nElo" } else { "Elo" };
                p.summary.push(format!(
                    "LLR bounds [{}, {}]; variance per game {}",
                    f(o.a, 2),
                    f(o.b, 2),
                    f(o.game_variance, 4)
                ));
                for (name, x) in [("Elo0", input.elo0), ("Elo1", input.elo1)] {
                    if let Ok(pt) = sprt_calc::at(&input, x) {
                        p.summary.push(format!(
                            "At {name} = {} {unit}: pass probability {}%, expected games {}",
                            f(x, 2),
                            f(pt.pass * 100.0, 1),
                            f(pt.games, 0)
                        ));
                    }
                }
                p.rows = o
                    .points
                    .iter()
                    .step_by(5)
                    .map(|pt| CalcRow {
                        elo: f(pt.elo, 2),
                        pass: format!("{}%", f(pt.pass * 100.0, 1)),
                        games: f(pt.games, 0),
                    })
                    .collect();
                let pass: Vec<(f64, f64)> = o
                    .points
                    .iter()
                    .map(|pt| (pt.elo, pt.pass * 100.0))
                    .collect();
                let games: Vec<(f64, f64)> = o.points.iter().map(|pt| (pt.elo, pt.games)).collect();
                let x = format!("true {unit}");
                p.pass_svg = charts::curve(&pass, &x, "pass probability (%)").unwrap_or_default();
                p.games_svg = charts::curve(&games, &x, "expected games").unwrap_or_default();
                StatusCode::OK
            }
        };
        Out::render(status, &p)
    })
    .await
}
