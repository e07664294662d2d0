//! The statistics pages: `/tests/stats/{id}` (a run's raw statistics, as a page or, for the
//! live refresh, its content alone), `/tests/live_elo/{id}` and `/tests/live_elo_update/{id}`
//! (an SPRT's gauges and details, server-rendered SVG), `/sprt_calc` (the SPRT calculator,
//! computed on the server from the form's GET fields) and `/tests/chart/{id}/{name}` (a run's
//! SVG charts, `image/svg+xml`).
//!
//! Owns: those handlers, their template structs and the formatting of the numbers. The raw
//! statistics page lays out Fishtest's tables (order, labels, decimals) and names every number
//! with its `data-field` (the field names of `crate::stats::raw`).
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
use super::kit::{Input, Layout, Page, PageError, STOP_POLLING, asset, page};
use super::results::{Piece, pentanomial_of};
use super::run::{load, page_title};
use crate::http::run_id::{InvalidRunId, RunId};
use crate::http::state::AppState;
use crate::rundb::model::Run;
use crate::stats::raw::{
    Bounds, Counts, EloLos, Llrs, Pentanomial, RawStats, SprtParams, Trinomial, raw_stats,
};
use crate::stats::sprt_calc::{self, CalcInput};
use crate::stats::{Results, SprtState, sprt_elo};

/// One cell: text and numbers (each number a `<span data-field>`).
pub type Cell = Vec<Piece>;

/// One table: a caption, column heads (may be empty) and rows whose first cell is a heading.
pub struct Table {
    pub title: String,
    pub head: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
    /// A note after the table (may be empty).
    pub note: String,
}

impl Table {
    fn new(title: &str) -> Self {
        Table {
            title: title.into(),
            head: Vec::new(),
            rows: Vec::new(),
            note: String::new(),
        }
    }

    fn row(&mut self, name: &str, value: Cell) {
        self.rows.push(vec![vec![Piece::text(name)], value]);
    }
}

/// A group of tables under a heading, with an optional note before the tables.
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

/// A number with its field name; "-" when it could not be computed.
fn num(field: &str, x: Option<f64>, decimals: usize) -> Piece {
    Piece::num(field, x.map_or_else(|| "-".into(), |x| f(x, decimals)))
}

fn one(field: &str, x: Option<f64>, decimals: usize) -> Cell {
    vec![num(field, x, decimals)]
}

/// `v [l, u]`.
fn range(fields: [&str; 3], xs: [Option<f64>; 3], decimals: usize) -> Cell {
    vec![
        num(fields[0], xs[0], decimals),
        Piece::text(" ["),
        num(fields[1], xs[1], decimals),
        Piece::text(", "),
        num(fields[2], xs[2], decimals),
        Piece::text("]"),
    ]
}

/// `[a, b, …]`, the k-th number named `<prefix>.<k>`.
fn list(prefix: &str, xs: &[String]) -> Cell {
    let mut cell = vec![Piece::text("[")];
    for (i, x) in xs.iter().enumerate() {
        if i > 0 {
            cell.push(Piece::text(", "));
        }
        cell.push(Piece::num(format!("{prefix}.{i}"), x.clone()));
    }
    cell.push(Piece::text("]"));
    cell
}

fn floats(xs: &[f64], decimals: usize) -> Vec<String> {
    xs.iter().map(|x| f(*x, decimals)).collect()
}

/// A distribution as Fishtest prints it: `{0.00: p₀, 0.50: p₁, 1.00: p₂}` (the outcome's
/// score, then its probability).
fn distribution(prefix: &str, pdf: &[f64]) -> Cell {
    let k = pdf.len().saturating_sub(1).max(1) as f64;
    let mut cell = vec![Piece::text("{")];
    for (i, p) in pdf.iter().enumerate() {
        if i > 0 {
            cell.push(Piece::text(", "));
        }
        cell.push(Piece::text(format!("{:.2}: ", i as f64 / k)));
        cell.push(Piece::num(format!("{prefix}.{i}"), f(*p, 5)));
    }
    cell.push(Piece::text("}"));
    cell
}

/// Python's `repr` of a float as Fishtest prints the SPRT parameters (`0.05`, `2.0`).
fn py_repr(x: f64) -> String {
    format!("{x:?}")
}

/// The "Basic statistics" and "Generalized Log Likelihood Ratio" tables of one view.
fn basic_tables(v: char, e: Option<EloLos>, l: Option<&Llrs>) -> Vec<Table> {
    let k = |name: &str| format!("sprt.{name}{v}");
    let mut basic = Table::new("Basic statistics");
    basic.row(
        "Elo",
        range(
            [
                &k("elo"),
                &format!("sprt.elo{v}_l"),
                &format!("sprt.elo{v}_u"),
            ],
            [e.map(|e| e.elo), e.map(|e| e.lower), e.map(|e| e.upper)],
            4,
        ),
    );
    basic.row("LOS(1-p)", one(&k("los"), e.map(|e| e.los), 5));
    let mut tables = vec![basic];
    if let Some(l) = l {
        tables[0].row(
            "LLR",
            range(
                [
                    &k("llr"),
                    &format!("sprt.llr{v}_l"),
                    &format!("sprt.llr{v}_u"),
                ],
                [l.llr, l.llr_l, l.llr_u],
                4,
            ),
        );
        let mut g = Table::new("Generalized Log Likelihood Ratio");
        let name = |s: &str| format!("sprt.llr{v}_{s}");
        g.row("Logistic (exact)", one(&name("exact"), l.exact, 5));
        g.row("Logistic (alt)", one(&name("alt"), l.alt, 5));
        g.row("Logistic (alt2)", one(&name("alt2"), l.alt2, 5));
        g.row(
            "Normalized (exact)",
            one(&name("normalized"), l.normalized, 5),
        );
        g.row(
            "Normalized (alt)",
            one(&name("normalized_alt"), l.normalized_alt, 5),
        );
        if v == '3' {
            g.row("BayesElo", one(&name("be"), l.be, 5));
            g.note = "Note: the BayesElo LLR is computed in the BayesElo model, which has no \
                      pentanomial counterpart."
                .into();
        } else {
            g.note = "Note: the alt and alt2 LLRs approximate the exact ones; in simulations \
                      the exact ones behave better under extreme conditions."
                .into();
        }
        tables.push(g);
    }
    tables
}

/// Fishtest shows the games as the integer part of the regularized total.
fn games_cell(field: &str, games: f64) -> Cell {
    vec![Piece::num(field, format!("{}", games.trunc() as u64))]
}

fn pentanomial_section(raw: &RawStats, p: &Pentanomial, sprt: bool) -> Section {
    let mut tables = basic_tables('5', raw.elo5, raw.llr5.as_ref());
    let mut aux = Table::new("Auxiliary statistics");
    aux.row("Games", games_cell("pent.games5", p.games5));
    aux.row(
        "Results [0-2]",
        list("pent.results5", &p.results5.map(|c| c.to_string())),
    );
    aux.row("Distribution", distribution("pent.pdf5", &p.pdf5));
    aux.row(
        "(DD,WL) split",
        vec![
            Piece::text("("),
            num("pent.results5_dd_prob", Some(p.results5_dd_prob), 5),
            Piece::text(", "),
            num("pent.results5_wl_prob", Some(p.results5_wl_prob), 5),
            Piece::text(")"),
        ],
    );
    aux.row("Expected value", one("pent.avg5", Some(p.avg5), 5));
    aux.row("Variance", one("pent.var5", Some(p.var5), 5));
    aux.row("Skewness", one("pent.skewness5", Some(p.skewness5), 5));
    aux.row("Excess kurtosis", one("pent.exkurt5", Some(p.exkurt5), 5));
    if sprt {
        aux.row("Score", one("pent.avg5", Some(p.avg5), 5));
    } else {
        aux.row(
            "Score",
            range(
                ["pent.avg5", "pent.avg5_l", "pent.avg5_u"],
                [Some(p.avg5), Some(p.avg5_l), Some(p.avg5_u)],
                5,
            ),
        );
    }
    aux.row(
        "Variance/game",
        range(
            [
                "pent.var5_per_game",
                "pent.var5_per_game_l",
                "pent.var5_per_game_u",
            ],
            [
                Some(p.var5_per_game),
                Some(p.var5_per_game_l),
                Some(p.var5_per_game_u),
            ],
            5,
        ),
    );
    aux.row(
        "Stdev/game",
        range(
            [
                "pent.stdev5_per_game",
                "pent.stdev5_per_game_l",
                "pent.stdev5_per_game_u",
            ],
            [
                Some(p.stdev5_per_game),
                Some(p.stdev5_per_game_l),
                Some(p.stdev5_per_game_u),
            ],
            5,
        ),
    );
    if sprt {
        aux.row("Normalized Elo", one("pent.nelo5", p.nelo5, 2));
        let jumps = raw.llr5.as_ref().and_then(|l| l.jumps.as_deref());
        aux.row(
            "LLR jumps [0-2]",
            jumps.map_or_else(
                || vec![Piece::text("-")],
                |j| list("sprt.llrjumps5", &floats(j, 6)),
            ),
        );
        let o = raw.overshoot.unwrap_or([0.0, 0.0]);
        aux.row(
            "Expected overshoot [H0,H1]",
            vec![
                Piece::text("["),
                num("sprt.overshoot0", Some(o[0]), 5),
                Piece::text(", "),
                num("sprt.overshoot1", Some(o[1]), 5),
                Piece::text("]"),
            ],
        );
    } else {
        aux.row(
            "Normalized Elo",
            range(
                ["pent.nelo5", "pent.nelo5_l", "pent.nelo5_u"],
                [p.nelo5, p.nelo5_l, p.nelo5_u],
                2,
            ),
        );
    }
    tables.push(aux);
    Section {
        heading: "Pentanomial statistics".into(),
        note: String::new(),
        tables,
    }
}

fn trinomial_section(raw: &RawStats, t: &Trinomial, sprt: bool, pairs: bool) -> Section {
    let mut tables = basic_tables('3', raw.elo3, raw.llr3.as_ref());
    let mut aux = Table::new("Auxiliary statistics");
    aux.row("Games", games_cell("tri.games3", t.games3));
    aux.row(
        "Results [losses, draws, wins]",
        list("tri.results3", &t.results3.map(|c| c.to_string())),
    );
    aux.row(
        "Distribution {loss ratio, draw ratio, win ratio}",
        distribution("tri.pdf3", &t.pdf3),
    );
    aux.row("Expected value", one("tri.avg3", Some(t.avg3), 5));
    aux.row("Variance", one("tri.var3", Some(t.var3), 5));
    aux.row("Skewness", one("tri.skewness3", Some(t.skewness3), 5));
    aux.row("Excess kurtosis", one("tri.exkurt3", Some(t.exkurt3), 5));
    if sprt {
        aux.row("Score", one("tri.avg3", Some(t.avg3), 5));
    } else {
        aux.row(
            "Score",
            range(
                ["tri.avg3", "tri.avg3_l", "tri.avg3_u"],
                [Some(t.avg3), Some(t.avg3_l), Some(t.avg3_u)],
                5,
            ),
        );
    }
    aux.row(
        "Variance/game",
        range(
            ["tri.var3", "tri.var3_l", "tri.var3_u"],
            [Some(t.var3), Some(t.var3_l), Some(t.var3_u)],
            5,
        ),
    );
    aux.row(
        "Stdev/game",
        range(
            ["tri.stdev3", "tri.stdev3_l", "tri.stdev3_u"],
            [Some(t.stdev3), Some(t.stdev3_l), Some(t.stdev3_u)],
            5,
        ),
    );
    if sprt {
        aux.row("Normalized Elo", one("tri.nelo3", t.nelo3, 2));
        let jumps = raw.llr3.as_ref().and_then(|l| l.jumps.as_deref());
        aux.row(
            "LLR jumps [loss, draw, win]",
            jumps.map_or_else(
                || vec![Piece::text("-")],
                |j| list("sprt.llrjumps3", &floats(j, 6)),
            ),
        );
    } else {
        aux.row(
            "Normalized Elo",
            range(
                ["tri.nelo3", "tri.nelo3_l", "tri.nelo3_u"],
                [t.nelo3, t.nelo3_l, t.nelo3_u],
                2,
            ),
        );
    }
    tables.push(aux);
    let mut note = String::new();
    if pairs {
        note.push_str(
            "Note: the trinomial model treats the games of a pair as independent, which they \
             are not, so these numbers are only a sanity check of the pentanomial ones (and \
             their difference measures the opening bias, see the comparison below).",
        );
    }
    Section {
        heading: "Trinomial statistics".into(),
        note,
        tables,
    }
}

fn stats_content(run: &Run) -> StatsContent {
    let a = &run.args;
    let counts = Counts {
        trinomial: [run.results.losses, run.results.draws, run.results.wins],
        pentanomial: pentanomial_of(run),
    };
    let pairs = counts.pentanomial.is_some();
    let sprt = a.sprt.as_ref().map(|s| SprtParams {
        alpha: s.alpha,
        beta: s.beta,
        elo0: s.elo0,
        elo1: s.elo1,
        elo_model: s.elo_model,
        batch_size: s.batch_size,
        overshoot: s.overshoot,
    });
    let raw = raw_stats(&counts, sprt.as_ref());
    let text = |s: String| vec![Piece::text(s)];
    let mut context = Table::new("");
    context.row("Base TC", text(a.tc.clone()));
    context.row(
        "Test TC",
        text(if a.new_tc.is_empty() {
            a.tc.clone()
        } else {
            a.new_tc.clone()
        }),
    );
    context.row("Book", text(a.book.clone()));
    context.row(
        "Threads",
        vec![Piece::num("args.threads", a.threads.to_string())],
    );
    context.row("Base options", text(a.base_options.clone()));
    context.row("New options", text(a.new_options.clone()));
    let mut sections = vec![Section {
        heading: "Context".into(),
        note: String::new(),
        tables: vec![context],
    }];
    let bounds = raw.as_ref().and_then(|r| r.bounds);
    if let Some(s) = &a.sprt {
        let model = s.elo_model.as_str();
        let mut t = Table::new("");
        t.row("Alpha", vec![Piece::num("sprt.alpha", py_repr(s.alpha))]);
        t.row("Beta", vec![Piece::num("sprt.beta", py_repr(s.beta))]);
        t.row(
            &format!("Elo0 ({model})"),
            vec![Piece::num("sprt.elo0", py_repr(s.elo0))],
        );
        t.row(
            &format!("Elo1 ({model})"),
            vec![Piece::num("sprt.elo1", py_repr(s.elo1))],
        );
        let batch = if pairs {
            s.batch_size.saturating_mul(2)
        } else {
            1
        };
        t.row(
            "Batch size (games)",
            vec![Piece::num("sprt.batch_size_games", batch.to_string())],
        );
        sections.push(Section {
            heading: "SPRT parameters".into(),
            note: String::new(),
            tables: vec![t],
        });
    }
    if let Some(raw) = &raw {
        let mut draws = Table::new("");
        draws.row(
            "Draw ratio",
            one("tri.draw_ratio", Some(raw.trinomial.draw_ratio), 5),
        );
        if let Some(p) = &raw.pentanomial {
            draws.row(
                "Pentanomial draw ratio",
                one("pent.draw_ratio", Some(p.draw_ratio), 5),
            );
        }
        draws.row("DrawElo (BayesElo)", one("drawelo", raw.drawelo, 2));
        sections.push(Section {
            heading: "Draws".into(),
            note: String::new(),
            tables: vec![draws],
        });
    }
    if a.sprt.is_some() {
        let mut t = Table::new("");
        t.head = ["", "Logistic", "Normalized", "BayesElo", "Score"]
            .map(String::from)
            .to_vec();
        for (name, k) in [("H0", 0), ("H1", 1)] {
            let b = bounds.as_ref();
            let pick = |x: fn(&Bounds) -> [Option<f64>; 2]| b.and_then(|b| x(b)[k]);
            t.rows.push(vec![
                vec![Piece::text(name)],
                one(
                    &format!("sprt.lelo{k}"),
                    pick(|b| [Some(b.lelo0), Some(b.lelo1)]),
                    3,
                ),
                one(
                    &format!("sprt.nelo{k}"),
                    pick(|b| [Some(b.nelo0), Some(b.nelo1)]),
                    3,
                ),
                one(&format!("sprt.belo{k}"), pick(|b| [b.belo0, b.belo1]), 3),
                one(
                    &format!("sprt.score{k}"),
                    pick(|b| [Some(b.score0), Some(b.score1)]),
                    5,
                ),
            ]);
        }
        t.note = "Note: normalized Elo is logistic Elo divided by twice the standard deviation \
                   of a game's score (in the limit of small Elo differences). The number of \
                   games an SPRT needs to detect a given difference is inversely proportional \
                   to its square; without draws, normalized and logistic Elo coincide."
            .into();
        sections.push(Section {
            heading: "SPRT bounds".into(),
            note: String::new(),
            tables: vec![t],
        });
    }
    if let Some(raw) = &raw {
        let sprt = a.sprt.is_some();
        if let Some(p) = &raw.pentanomial {
            sections.push(pentanomial_section(raw, p, sprt));
        }
        sections.push(trinomial_section(raw, &raw.trinomial, sprt, pairs));
        if let Some(p) = &raw.pentanomial {
            let mut t = Table::new("");
            t.row(
                "Variance ratio (pentanomial/trinomial)",
                one("pent.ratio", Some(p.ratio), 5),
            );
            t.row(
                "Variance difference (trinomial-pentanomial)",
                one("pent.var_diff", Some(p.var_diff), 5),
            );
            t.row("RMS bias", one("pent.rms_bias", Some(p.rms_bias), 5));
            t.row(
                "RMS bias (Elo)",
                one("pent.rms_bias_elo", Some(p.rms_bias_elo), 3),
            );
            sections.push(Section {
                heading: "Comparison".into(),
                note: String::new(),
                tables: vec![t],
            });
        }
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
    let id = id.parse::<RunId>();
    let r = page(&state, Input::get(&state, &headers), move |db, ctx, _| {
        let run = load(db, id?)?;
        let spsa = run.args.spsa.is_some();
        if fragment {
            if spsa || run.finished {
                let c = stats_content(&run);
                return Page::render(STOP_POLLING, &StatsFragment { c });
            }
            if run.workers == 0 {
                return Ok(Page::Html(StatusCode::NO_CONTENT, String::new()));
            }
            return Page::render(
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
        Page::render(StatusCode::OK, &p)
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
    id: Result<RunId, InvalidRunId>,
) -> Result<(Run, LiveElo, bool), PageError> {
    let run = load(db, id?)?;
    let e = live_elo(&run).ok_or(PageError::NotFound)?;
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
    let id = id.parse::<RunId>();
    let r = page(&state, Input::get(&state, &headers), move |db, ctx, _| {
        let (run, e, decided) = load_live(db, id)?;
        let live = !decided;
        let p = LiveEloPage {
            l: Layout::new(ctx, &format!("Live Elo - {}", page_title(&run))),
            id: run.id.clone(),
            live,
            e,
            script: asset("refresh.js"),
        };
        Page::render(StatusCode::OK, &p)
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
    let id = id.parse::<RunId>();
    let r = page(&state, Input::get(&state, &headers), move |db, _, _| {
        let (_, e, decided) = load_live(db, id)?;
        let status = if decided {
            STOP_POLLING
        } else {
            StatusCode::OK
        };
        Page::render(status, &LiveEloFragment { e })
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
    let id = id.parse::<RunId>();
    let mut r = page(&state, Input::get(&state, &headers), move |db, _, _| {
        let run = load(db, id?)?;
        let kind = kind
            .filter(|k| k.applies(&run))
            .ok_or(PageError::NotFound)?;
        let svg = charts::render(&run, kind)
            .map_err(|e| PageError::internal("chart", format!("run {}: {e}", run.id)))?;
        Ok(Page::Html(StatusCode::OK, svg))
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
        Page::render(status, &p)
    })
    .await
}
