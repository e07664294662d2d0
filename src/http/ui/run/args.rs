//! The run page's arguments table and SPSA parameter table, computed from a run's copy.
//!
//! Owns: which argument rows the page shows, in the order an approver reads them top to
//! bottom (who and what: the submitter, the repository, both commits with their subjects and
//! benches, the diff; the nets; the test itself: time control, threads, options, book, games,
//! SPRT bounds or SPSA settings; how it is scheduled: itp, priority, throughput, adjudication,
//! auto-purge, arch filter, compiler; then its state: approval, dates, info, the document's
//! size and the links), each section starting with a heading row; links only to web
//! addresses (commit and diff links to the tests repository only). Every argument Fishtest's
//! run page shows is here (web-ui.md §4.7), with the same values (itp with 2 decimals, the
//! SPRT's state, SPSA's `iter: i, A: a, alpha: x.xxx, gamma: x.xxx`).
//! The SPSA table has Fishtest's columns: value, start, min, max, the current `c` and `R` (as
//! the next iteration uses them) and the wanted `c_end` and `r_end`.
//!
//! Must not: compute statistics (`crate::stats` does), read the store or take a lock; the
//! document's size is the run core's (`RunDb::document_size_recent`: at most 10 s old).

use crate::http::ui::kit::Href;
use crate::rundb::model::Run;

/// One line of the arguments table; `href` empty when the value is not a link; `section`
/// non-empty on the first row of a group (drawn as a heading row above it).
pub struct ArgRow {
    pub section: &'static str,
    pub name: &'static str,
    pub value: String,
    pub href: String,
}

/// One SPSA parameter, as Fishtest's table shows it.
pub struct SpsaRow {
    pub name: String,
    /// The current estimate, 2 decimals.
    pub value: String,
    pub start: String,
    pub min: String,
    pub max: String,
    /// The perturbation the next iteration uses, 3 decimals.
    pub c: String,
    /// The perturbation wanted at the last iteration, 3 decimals.
    pub c_end: String,
    /// The learning rate the next iteration uses, scientific notation.
    pub r: String,
    /// The learning rate wanted at the last iteration, scientific notation.
    pub r_end: String,
}

/// The SPSA section: the run-wide settings and the parameters.
pub struct SpsaView {
    /// `iter: i, A: a, alpha: x.xxx, gamma: x.xxx`, as Fishtest's page writes it (`i` being
    /// the iteration the current `c` and `R` are for).
    pub summary: String,
    /// `done / planned` iterations.
    pub progress: String,
    pub rows: Vec<SpsaRow>,
}

/// A link only to a web address (never `javascript:` or the like).
fn web(url: String) -> String {
    if url.starts_with("https://") || url.starts_with("http://") {
        url
    } else {
        String::new()
    }
}

fn short(sha: &str) -> &str {
    sha.get(..10).unwrap_or(sha)
}

/// A number as Python prints it for an integral float (`100`, not `100.0`), else as is.
fn num(v: f64) -> String {
    format!("{v}")
}

/// The rows, grouped; [`Rows::section`] marks where the next group starts.
struct Rows {
    rows: Vec<ArgRow>,
    section: &'static str,
}

impl Rows {
    fn section(&mut self, name: &'static str) {
        self.section = name;
    }

    fn link(&mut self, name: &'static str, value: impl Into<String>, href: String) {
        let section = std::mem::take(&mut self.section);
        self.rows.push(ArgRow {
            section,
            name,
            value: value.into(),
            href,
        });
    }

    fn row(&mut self, name: &'static str, value: impl Into<String>) {
        self.link(name, value, String::new());
    }
}

/// The nets of one side: the `*_nets` list, else a legacy `*_net` string; `(none)` when the
/// run names none.
fn nets(list: &[String], legacy: Option<&serde_json::Value>) -> String {
    if !list.is_empty() {
        return list.join(", ");
    }
    match legacy.and_then(serde_json::Value::as_str) {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => "(none)".into(),
    }
}

/// The arguments table, in an approver's reading order.
pub(in crate::http::ui) fn arg_rows(run: &Run, size: Option<u64>) -> Vec<ArgRow> {
    let a = &run.args;
    let repo = a.tests_repo.trim_end_matches('/');
    let to_repo = |href: String| {
        if repo.is_empty() {
            String::new()
        } else {
            web(href)
        }
    };
    let mut r = Rows {
        rows: Vec::new(),
        section: "",
    };

    r.section("Who and what");
    r.row("id", run.id.clone());
    if let Some(from) = &run.rescheduled_from {
        r.link(
            "rescheduled_from",
            from.clone(),
            Href::new("/tests/view").seg(from).to_string(),
        );
    }
    r.link(
        "username",
        a.username.clone(),
        Href::new("/tests/user").seg(&a.username).to_string(),
    );
    r.link(
        "tests_repo",
        a.tests_repo.clone(),
        web(a.tests_repo.clone()),
    );
    if let Some(m) = a.master_repo.as_deref().filter(|m| !m.is_empty()) {
        r.link("master_repo", m, web(m.to_string()));
    }
    for (name, tag, sha, msg, msg_name, sig, sig_name) in [
        (
            "new_tag",
            &a.new_tag,
            &a.resolved_new,
            &a.msg_new,
            "msg_new",
            &a.new_signature,
            "new_signature",
        ),
        (
            "base_tag",
            &a.base_tag,
            &a.resolved_base,
            &a.msg_base,
            "msg_base",
            &a.base_signature,
            "base_signature",
        ),
    ] {
        r.link(
            name,
            format!("{tag} ({})", short(sha)),
            to_repo(format!("{repo}/commit/{sha}")),
        );
        // The commit's subject, as GitHub gave it (or the submitter typed it).
        if !msg.is_empty() {
            r.row(msg_name, msg.clone());
        }
        r.row(sig_name, if sig.is_empty() { "-" } else { sig.as_str() });
    }
    r.link(
        "diff",
        format!("{}...{}", short(&a.resolved_base), short(&a.resolved_new)),
        to_repo(format!(
            "{repo}/compare/{}...{}",
            a.resolved_base, a.resolved_new
        )),
    );

    r.section("Nets");
    r.row("new_nets", nets(&a.new_nets, a.extra.get("new_net")));
    r.row("base_nets", nets(&a.base_nets, a.extra.get("base_net")));

    r.section("Test");
    r.row("tc", a.tc.clone());
    if !a.new_tc.is_empty() && a.new_tc != a.tc {
        r.row("new_tc", a.new_tc.clone());
    }
    r.row("threads", a.threads.to_string());
    r.row("new_options", a.new_options.clone());
    r.row("base_options", a.base_options.clone());
    r.row("book", a.book.clone());
    r.row("book_depth", a.book_depth.clone());
    r.row("num_games", a.num_games.to_string());
    if let Some(sprt) = &a.sprt {
        let state = match sprt.state.as_str() {
            "" => "-",
            s => s,
        };
        r.link(
            "sprt",
            format!(
                "elo0: {:.2} alpha: {:.2} elo1: {:.2} beta: {:.2} state: {state} ({})",
                sprt.elo0,
                sprt.alpha,
                sprt.elo1,
                sprt.beta,
                sprt.elo_model.as_str()
            ),
            Href::new("/tests/live_elo").seg(&run.id).to_string(),
        );
    }
    if let Some(v) = spsa_view(run) {
        r.link("spsa", v.summary, "#spsa".into());
    }

    r.section("Scheduling");
    r.row("itp", format!("{:.2}", a.itp));
    r.row("priority", num(a.priority));
    r.row("throughput", format!("{}%", num(a.throughput)));
    if let Some(w) = a.max_active_tasks {
        r.row("max_active_tasks", w.to_string());
    }
    r.row("adjudication", a.adjudication.to_string());
    r.row("auto_purge", a.auto_purge.to_string());
    if let Some(f) = a.arch_filter.as_deref().filter(|f| !f.is_empty()) {
        r.row("arch_filter", f);
    }
    if let Some(c) = a.compiler.as_deref().filter(|c| !c.is_empty()) {
        r.row("compiler", c);
    }

    r.section("State");
    if run.approved {
        r.link(
            "approver",
            run.approver.clone(),
            Href::new("/tests/user").seg(&run.approver).to_string(),
        );
    } else {
        r.row("approved", "no");
    }
    const TIME: &str = "%Y-%m-%d %H:%M:%S";
    r.row("start_time", run.start_time.0.format(TIME).to_string());
    r.row("last_updated", run.last_updated.0.format(TIME).to_string());
    r.row("info", a.info.clone());
    r.row(
        "document size",
        size.map_or_else(|| "-".into(), |n| format!("{n} bytes")),
    );
    r.link(
        "events",
        "events",
        Href::new("/actions").param("run_id", &run.id).to_string(),
    );
    if a.spsa.is_none() {
        r.link(
            "raw statistics",
            "raw statistics",
            Href::new("/tests/stats").seg(&run.id).to_string(),
        );
    }
    r.rows
}

/// The SPSA section of an SPSA run: Fishtest's summary and its parameter table, with the
/// current `c` and `R` computed for the next iteration (`iter + 1`) as Fishtest does:
/// `c = c_1 / k^γ`, `R = a / (A + k)^α / c²`.
pub(in crate::http::ui) fn spsa_view(run: &Run) -> Option<SpsaView> {
    let s = run.args.spsa.as_ref()?;
    let next = s.iter.saturating_add(1);
    let k = next as f64;
    let rows = s
        .params
        .iter()
        .map(|p| {
            let c = p.c / k.powf(s.gamma);
            let a = p.a / (s.stability + k).powf(s.alpha);
            let r = if c != 0.0 { a / (c * c) } else { 0.0 };
            SpsaRow {
                name: p.name.clone(),
                value: format!("{:.2}", p.theta),
                start: num(p.start),
                min: num(p.min),
                max: num(p.max),
                c: format!("{c:.3}"),
                c_end: format!("{:.3}", p.c_end),
                r: format!("{r:.2e}"),
                r_end: format!("{:.2e}", p.r_end),
            }
        })
        .collect();
    Some(SpsaView {
        summary: format!(
            "iter: {next}, A: {}, alpha: {:.3}, gamma: {:.3}",
            num(s.stability),
            s.alpha,
            s.gamma
        ),
        progress: format!("{} / {}", s.iter, s.num_iter),
        rows,
    })
}
