//! The raw statistics page's content: Fishtest's tables (order, labels, decimals) with every
//! number named by its `data-field` (the field names of `crate::stats::raw`), for the page and
//! its live-refresh fragment (`stats.rs`).
//!
//! Must not: compute statistics itself (`crate::stats::raw` does).

use crate::http::ui::kit::results::{Piece, pentanomial_of};
use crate::rundb::model::Run;
use crate::stats::Results;
use crate::stats::raw::{
    Bounds, Counts, EloLos, Llrs, Pentanomial, RawStats, SprtParams, Trinomial, raw_stats,
};

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

pub(in crate::http::ui) fn fixed(x: f64, decimals: usize) -> String {
    if x.is_finite() {
        format!("{x:.decimals$}")
    } else {
        "-".into()
    }
}

/// A number with its field name; "-" when it could not be computed.
fn num(field: &str, x: Option<f64>, decimals: usize) -> Piece {
    Piece::num(field, x.map_or_else(|| "-".into(), |x| fixed(x, decimals)))
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
    xs.iter().map(|x| fixed(*x, decimals)).collect()
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
        cell.push(Piece::num(format!("{prefix}.{i}"), fixed(*p, 5)));
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

pub(in crate::http::ui) fn stats_content(run: &Run) -> StatsContent {
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
