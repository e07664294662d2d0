//! Submitting tests: `GET /tests/run` (the new-test form: its defaults, a preset with
//! `?preset=<key>`, or a rerun of run `?id=<run>` pre-filled from it) and `POST /tests/run`
//! (create the run).
//!
//! The form uses Fishtest's field names (`test-branch`, `base-signature`, `num-games`,
//! `sprt_elo0`, …) plus what shoal asks for because it does not call GitHub: the resolved
//! commits (`resolved_new`, `resolved_base`), their subjects (`msg_new`, `msg_base`) and the
//! nets (`new_nets`, `base_nets`), as `/api/create_run` takes them. A later GitHub resolver
//! can fill those fields before the form is shown.
//!
//! Owns: the form's values (defaults, presets, a run's values for a rerun), turning a posted
//! form into `rundb::create::CreateArgs` (the form's own syntax: integers, numbers, the stop
//! rule, the bounds preset, the checkboxes), and placing each refusal next to its field with
//! the user's input kept.
//! Must not: check a run's arguments itself. The run is created by `RunDb::submit_run`, the
//! same code as `/api/create_run`; its refusals name the argument, which this module maps to
//! a form field.

use std::collections::BTreeMap;
use std::sync::Arc;

use askama::Template;
use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Deserialize;

use super::kit::{
    Flash, Href, Input, Layout, OrInternal, Page, PageError, PageResult, form_or_default, page,
};
use super::session::Ctx;
use crate::http::run_id::RunId;
use crate::http::state::AppState;
use crate::rundb::create::{CreateArgs, SprtIn, SpsaIn};
use crate::rundb::model::Run;
use crate::rundb::{RunDb, RunDbError, SubmitError};

/// The default book (Fishtest's).
pub const DEFAULT_BOOK: &str = "UHO_Lichess_4852_v1.epd";
/// Shown once a run is created (Fishtest's words).
pub const MSG_SUBMITTED: &str = "The test was submitted to the queue. Please wait for approval.";

/// The posted form, and the values the page shows (all text, as typed; a checkbox is present
/// when ticked).
#[derive(Deserialize, Default, Clone, Debug)]
#[serde(default)]
pub struct RunForm {
    #[serde(rename = "tests-repo")]
    pub tests_repo: String,
    #[serde(rename = "test-branch")]
    pub test_branch: String,
    #[serde(rename = "base-branch")]
    pub base_branch: String,
    #[serde(rename = "test-signature")]
    pub test_signature: String,
    #[serde(rename = "base-signature")]
    pub base_signature: String,
    pub resolved_new: String,
    pub resolved_base: String,
    pub msg_new: String,
    pub msg_base: String,
    pub new_nets: String,
    pub base_nets: String,
    #[serde(rename = "new-options")]
    pub new_options: String,
    #[serde(rename = "base-options")]
    pub base_options: String,
    #[serde(rename = "run-info")]
    pub run_info: String,
    /// `sprt`, `games` or `spsa`.
    pub stop_rule: String,
    #[serde(rename = "num-games")]
    pub num_games: String,
    /// A [`BOUNDS`] key.
    pub bounds: String,
    pub sprt_elo0: String,
    pub sprt_elo1: String,
    pub elo_model: String,
    #[serde(rename = "spsa_A")]
    pub spsa_a: String,
    pub spsa_alpha: String,
    pub spsa_gamma: String,
    pub spsa_raw_params: String,
    pub threads: String,
    pub tc: String,
    pub new_tc: String,
    /// "Time odds": `new_tc` is used only when ticked.
    pub odds: Option<String>,
    pub priority: String,
    pub throughput: String,
    /// The run's sliding window: at most this many active tasks (empty: no window).
    pub max_active_tasks: String,
    pub book: String,
    #[serde(rename = "book-depth")]
    pub book_depth: String,
    #[serde(rename = "arch-filter")]
    pub arch_filter: String,
    #[serde(rename = "checkbox-arch-filter")]
    pub use_arch_filter: Option<String>,
    pub compiler: String,
    #[serde(rename = "checkbox-compiler")]
    pub use_compiler: Option<String>,
    #[serde(rename = "auto-purge")]
    pub auto_purge: Option<String>,
    /// Labelled "No adjudication": ticked means adjudication is off.
    pub adjudication: Option<String>,
    pub master_repo: String,
    pub rescheduled_from: String,
    pub csrf_token: Option<String>,
}

/// The SPRT bounds choices: key, label, elo0, elo1 (`custom` takes the two fields).
pub const BOUNDS: [(&str, &str, f64, f64); 4] = [
    ("standard_stc", "Standard STC {0.00, 2.00}", 0.0, 2.0),
    ("standard_ltc", "Standard LTC {0.50, 2.50}", 0.5, 2.5),
    (
        "nonreg_stc",
        "Non-regression STC {-1.75, 0.25}",
        -1.75,
        0.25,
    ),
    (
        "nonreg_ltc",
        "Non-regression LTC {-1.75, 0.25}",
        -1.75,
        0.25,
    ),
];

/// A test-type preset: tc, threads, Hash, throughput, bounds.
pub struct Preset {
    pub key: &'static str,
    pub label: &'static str,
    tc: &'static str,
    threads: u32,
    hash: u32,
    throughput: u32,
    bounds: &'static str,
}

/// Fishtest's presets that need no GitHub (its PT presets name master's latest commit).
pub const PRESETS: [Preset; 6] = [
    Preset {
        key: "stc",
        label: "STC",
        tc: "10+0.1",
        threads: 1,
        hash: 16,
        throughput: 100,
        bounds: "standard_stc",
    },
    Preset {
        key: "ltc",
        label: "LTC",
        tc: "60+0.6",
        threads: 1,
        hash: 64,
        throughput: 100,
        bounds: "standard_ltc",
    },
    Preset {
        key: "stc-smp",
        label: "STC SMP",
        tc: "5+0.05",
        threads: 8,
        hash: 64,
        throughput: 100,
        bounds: "standard_stc",
    },
    Preset {
        key: "ltc-smp",
        label: "LTC SMP",
        tc: "20+0.2",
        threads: 8,
        hash: 256,
        throughput: 100,
        bounds: "standard_ltc",
    },
    Preset {
        key: "vltc",
        label: "VLTC",
        tc: "180+1.8",
        threads: 1,
        hash: 192,
        throughput: 50,
        bounds: "standard_stc",
    },
    Preset {
        key: "vltc-smp",
        label: "VLTC SMP",
        tc: "60+0.6",
        threads: 8,
        hash: 512,
        throughput: 50,
        bounds: "standard_ltc",
    },
];

/// The throughput select's values (%).
const THROUGHPUTS: [&str; 5] = ["10", "25", "50", "100", "200"];

/// Replaces (or adds) the `Hash=N` option.
fn with_hash(options: &str, hash: u32) -> String {
    let mut found = false;
    let mut tokens: Vec<String> = options
        .split_whitespace()
        .map(|t| {
            if t.starts_with("Hash=") {
                found = true;
                format!("Hash={hash}")
            } else {
                t.to_string()
            }
        })
        .collect();
    if !found {
        tokens.push(format!("Hash={hash}"));
    }
    tokens.join(" ")
}

impl RunForm {
    /// The empty form: Fishtest's defaults, the user's tests repository.
    pub fn defaults(tests_repo: &str) -> Self {
        RunForm {
            tests_repo: tests_repo.to_string(),
            base_branch: "master".into(),
            new_options: "Hash=16".into(),
            base_options: "Hash=16".into(),
            stop_rule: "sprt".into(),
            num_games: "60000".into(),
            bounds: "standard_stc".into(),
            sprt_elo0: "0.0".into(),
            sprt_elo1: "2.0".into(),
            elo_model: "normalized".into(),
            spsa_a: "0.1".into(),
            spsa_alpha: "0.602".into(),
            spsa_gamma: "0.101".into(),
            threads: "1".into(),
            tc: "10+0.1".into(),
            new_tc: "10+0.1".into(),
            priority: "0".into(),
            throughput: "100".into(),
            book: DEFAULT_BOOK.into(),
            book_depth: "8".into(),
            compiler: "clang++".into(),
            ..RunForm::default()
        }
    }

    /// The form of a rerun: every argument of `run`, so that submitting it unchanged creates
    /// an equivalent run (`rescheduled_from` names the old one).
    pub fn rerun(run: &Run) -> Self {
        let a = &run.args;
        let mut f = RunForm::defaults(&a.tests_repo);
        f.test_branch = a.new_tag.clone();
        f.base_branch = a.base_tag.clone();
        f.test_signature = a.new_signature.clone();
        f.base_signature = a.base_signature.clone();
        f.resolved_new = a.resolved_new.clone();
        f.resolved_base = a.resolved_base.clone();
        f.msg_new = a.msg_new.clone();
        f.msg_base = a.msg_base.clone();
        f.new_nets = a.new_nets.join(" ");
        f.base_nets = a.base_nets.join(" ");
        f.new_options = a.new_options.clone();
        f.base_options = a.base_options.clone();
        f.run_info = a.info.clone();
        f.tc = a.tc.clone();
        f.new_tc = if a.new_tc.is_empty() {
            a.tc.clone()
        } else {
            a.new_tc.clone()
        };
        f.odds = (f.new_tc != f.tc).then(|| "on".into());
        f.threads = a.threads.to_string();
        f.priority = a.priority.to_string();
        f.throughput = a.throughput.to_string();
        f.max_active_tasks = a
            .max_active_tasks
            .map(|n| n.to_string())
            .unwrap_or_default();
        f.book = a.book.clone();
        f.book_depth = a.book_depth.clone();
        if let Some(filter) = &a.arch_filter {
            f.arch_filter = filter.clone();
            f.use_arch_filter = Some("on".into());
        }
        if let Some(compiler) = &a.compiler {
            f.compiler = compiler.clone();
            f.use_compiler = Some("on".into());
        }
        f.auto_purge = a.auto_purge.then(|| "on".into());
        f.adjudication = (!a.adjudication).then(|| "on".into());
        f.master_repo = a.master_repo.clone().unwrap_or_default();
        f.rescheduled_from = run.id.clone();
        if let Some(s) = &a.sprt {
            f.stop_rule = "sprt".into();
            f.bounds = "custom".into();
            f.sprt_elo0 = s.elo0.to_string();
            f.sprt_elo1 = s.elo1.to_string();
            f.elo_model = s.elo_model.as_str().into();
        } else if let Some(s) = &a.spsa {
            f.stop_rule = "spsa".into();
            f.num_games = a.num_games.to_string();
            // The form gives A as a ratio of the iterations: A = int(ratio · games / 2).
            if a.num_games > 0 {
                f.spsa_a = (2.0 * s.stability / a.num_games as f64).to_string();
            }
            f.spsa_alpha = s.alpha.to_string();
            f.spsa_gamma = s.gamma.to_string();
            f.spsa_raw_params = s.raw_params.clone();
        } else {
            f.stop_rule = "games".into();
            f.num_games = a.num_games.to_string();
        }
        f
    }

    /// Applies a preset: time control, threads, Hash, throughput, bounds; clears auto-purge.
    pub fn apply(&mut self, p: &Preset) {
        self.tc = p.tc.into();
        self.new_tc = p.tc.into();
        self.odds = None;
        self.threads = p.threads.to_string();
        self.new_options = with_hash(&self.new_options, p.hash);
        self.base_options = with_hash(&self.base_options, p.hash);
        self.throughput = if self.stop_rule == "spsa" && p.key == "ltc" {
            "50".into()
        } else {
            p.throughput.to_string()
        };
        if self.stop_rule != "spsa" {
            self.stop_rule = "sprt".into();
        }
        if let Some((key, _, elo0, elo1)) = BOUNDS.iter().find(|b| b.0 == p.bounds) {
            self.bounds = (*key).into();
            self.sprt_elo0 = format!("{elo0:.2}");
            self.sprt_elo1 = format!("{elo1:.2}");
        }
        self.auto_purge = None;
    }

    /// The preset these values match (by time control and threads), for the highlight.
    fn preset(&self) -> Option<&'static str> {
        PRESETS
            .iter()
            .find(|p| p.tc == self.tc.trim() && p.threads.to_string() == self.threads.trim())
            .map(|p| p.key)
    }
}

/// Refusals by form field (the page shows each next to its field).
pub type FieldErrors = BTreeMap<String, String>;

/// The form field where a refusal of argument `arg` (`rundb::create::ArgError::field`) shows.
pub fn form_field(arg: &str) -> &'static str {
    match arg {
        "base_tag" => "base-branch",
        "new_tag" => "test-branch",
        "resolved_base" => "resolved_base",
        "resolved_new" => "resolved_new",
        "base_signature" => "base-signature",
        "new_signature" => "test-signature",
        "base_nets" => "base_nets",
        "new_nets" => "new_nets",
        "base_options" => "base-options",
        "new_options" => "new-options",
        "tests_repo" | "master_repo" => "tests-repo",
        "tc" => "tc",
        "new_tc" => "new_tc",
        "book" => "book",
        "book_depth" => "book-depth",
        "threads" => "threads",
        "priority" => "priority",
        "throughput" => "throughput",
        "max_active_tasks" => "max_active_tasks",
        "compiler" => "compiler",
        "arch_filter" => "arch-filter",
        "num_games" => "num-games",
        "sprt" | "sprt.elo_model" => "bounds",
        "spsa.A" => "spsa_A",
        "spsa.alpha" => "spsa_alpha",
        "spsa.gamma" => "spsa_gamma",
        "spsa.raw_params" => "spsa_raw_params",
        _ => "",
    }
}

/// The form's values as `/api/create_run`'s arguments; what cannot be read (a number that is
/// not one, an unknown stop rule) is refused by field.
pub fn to_args(f: &RunForm) -> Result<CreateArgs, FieldErrors> {
    let mut errors = FieldErrors::new();
    let mut integer = |field: &str, value: &str, what: &str| -> i64 {
        value.trim().parse::<i64>().unwrap_or_else(|_| {
            errors.insert(field.into(), format!("{what} must be an integer"));
            0
        })
    };
    let threads = integer("threads", &f.threads, "Threads");
    let priority = integer("priority", &f.priority, "Priority");
    let throughput = integer("throughput", &f.throughput, "Throughput");
    let max_active_tasks = match f.max_active_tasks.trim() {
        "" => None,
        text => match text.parse::<u32>() {
            Ok(n) => Some(n),
            Err(_) => {
                errors.insert(
                    "max_active_tasks".into(),
                    "Max active tasks must be a positive integer (or empty)".into(),
                );
                None
            }
        },
    };
    let rule = f.stop_rule.trim();
    let num_games = if rule == "sprt" {
        None
    } else {
        match f.num_games.trim().parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                errors.insert(
                    "num-games".into(),
                    "Number of games must be a whole number".into(),
                );
                None
            }
        }
    };
    let mut number = |field: &str, value: &str, what: &str| -> f64 {
        value.trim().parse::<f64>().unwrap_or_else(|_| {
            errors.insert(field.into(), format!("{what} must be a number"));
            0.0
        })
    };
    let (sprt, spsa) = match rule {
        "sprt" => {
            let bounds = f.bounds.trim();
            let (elo0, elo1) = match BOUNDS.iter().find(|b| b.0 == bounds) {
                Some(b) => (b.2, b.3),
                None if bounds == "custom" => (
                    number("sprt_elo0", &f.sprt_elo0, "elo0"),
                    number("sprt_elo1", &f.sprt_elo1, "elo1"),
                ),
                None => {
                    errors.insert("bounds".into(), "Choose SPRT bounds".into());
                    (0.0, 0.0)
                }
            };
            let model = f.elo_model.trim();
            let sprt = SprtIn {
                elo0,
                elo1,
                elo_model: (!model.is_empty()).then(|| model.to_string()),
            };
            (Some(sprt), None)
        }
        "spsa" => {
            let spsa = SpsaIn {
                raw_params: f.spsa_raw_params.clone(),
                a_ratio: Some(number("spsa_A", &f.spsa_a, "A")),
                a: None,
                alpha: Some(number("spsa_alpha", &f.spsa_alpha, "alpha")),
                gamma: Some(number("spsa_gamma", &f.spsa_gamma, "gamma")),
            };
            (None, Some(spsa))
        }
        "games" => (None, None),
        _ => {
            errors.insert(
                "stop_rule".into(),
                "Choose a stop rule: SPRT, a number of games or SPSA".into(),
            );
            (None, None)
        }
    };
    let rescheduled = f.rescheduled_from.trim();
    if !rescheduled.is_empty() && rescheduled.parse::<RunId>().is_err() {
        errors.insert(
            "rescheduled_from".into(),
            "The run to reschedule is not a run id".into(),
        );
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let nets = |s: &str| -> Vec<String> {
        s.split(|c: char| c.is_whitespace() || c == ',')
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect()
    };
    let options = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let text = |s: &str| s.trim().to_string();
    let optional = |s: &str| Some(s.trim().to_string()).filter(|s| !s.is_empty());
    let mut info = text(&f.run_info);
    if info.is_empty() {
        info = text(&f.msg_new);
    }
    let new_signature = text(&f.test_signature);
    // An SPSA run plays the same engine on both sides: Fishtest copies the test signature.
    let base_signature = if rule == "spsa" {
        new_signature.clone()
    } else {
        text(&f.base_signature)
    };
    Ok(CreateArgs {
        base_tag: text(&f.base_branch),
        new_tag: text(&f.test_branch),
        base_nets: nets(&f.base_nets),
        new_nets: nets(&f.new_nets),
        resolved_base: text(&f.resolved_base),
        resolved_new: text(&f.resolved_new),
        msg_base: text(&f.msg_base),
        msg_new: text(&f.msg_new),
        base_signature,
        new_signature,
        base_options: options(&f.base_options),
        new_options: options(&f.new_options),
        num_games,
        tc: text(&f.tc),
        new_tc: f.odds.as_ref().map(|_| text(&f.new_tc)),
        book: text(&f.book),
        book_depth: Some(text(&f.book_depth)),
        // Page of range (negative, huge) becomes 0, which the run rules refuse.
        threads: u32::try_from(threads).unwrap_or(0),
        info,
        tests_repo: text(&f.tests_repo),
        master_repo: optional(&f.master_repo),
        auto_purge: f.auto_purge.is_some(),
        throughput: throughput as f64,
        max_active_tasks,
        priority: priority as f64,
        adjudication: f.adjudication.is_none(),
        arch_filter: f
            .use_arch_filter
            .as_ref()
            .and_then(|_| optional(&f.arch_filter)),
        compiler: f.use_compiler.as_ref().and_then(|_| optional(&f.compiler)),
        sprt,
        spsa,
        rescheduled_from: optional(&f.rescheduled_from),
    })
}

/// One option of a select.
pub struct Choice {
    pub value: String,
    pub label: String,
    pub selected: bool,
}

/// One preset link.
pub struct PresetLink {
    pub href: String,
    pub label: &'static str,
    pub active: bool,
}

#[derive(Template)]
#[template(path = "tests_run.html")]
pub struct RunFormPage {
    pub l: Layout,
    pub f: RunForm,
    pub errors: FieldErrors,
    /// A rerun: the commits are fixed (read-only).
    pub rerun: bool,
    pub presets: Vec<PresetLink>,
    pub books: Vec<Choice>,
    pub bounds: Vec<Choice>,
    pub throughputs: Vec<Choice>,
    pub compilers: Vec<Choice>,
}

fn choices<'a>(items: impl IntoIterator<Item = (&'a str, &'a str)>, current: &str) -> Vec<Choice> {
    let mut out: Vec<Choice> = items
        .into_iter()
        .map(|(value, label)| Choice {
            value: value.to_string(),
            label: label.to_string(),
            selected: value == current,
        })
        .collect();
    // A value from elsewhere (a rerun, another client) stays selectable.
    if !current.is_empty() && !out.iter().any(|c| c.selected) {
        out.push(Choice {
            value: current.to_string(),
            label: current.to_string(),
            selected: true,
        });
    }
    out
}

fn render(
    db: &RunDb,
    ctx: &Ctx,
    f: RunForm,
    errors: FieldErrors,
    flashes: Vec<Flash>,
) -> PageResult {
    let rerun = !f.rescheduled_from.is_empty();
    let title = if rerun { "Reschedule test" } else { "New test" };
    let mut l = Layout::new(ctx, title);
    for flash in flashes {
        l = l.flash(flash);
    }
    let base = if rerun {
        Href::new("/tests/run").path_param("id", &f.rescheduled_from)
    } else {
        Href::new("/tests/run")
    };
    let active = f.preset();
    let presets = PRESETS
        .iter()
        .map(|p| PresetLink {
            href: base.clone().param("preset", p.key).build(),
            label: p.label,
            active: active == Some(p.key),
        })
        .collect();
    let mut names: Vec<&str> = db.books.0.keys().map(String::as_str).collect();
    names.sort_unstable();
    let books = choices(names.iter().map(|n| (*n, *n)), f.book.trim());
    let bounds = choices(
        BOUNDS
            .iter()
            .map(|b| (b.0, b.1))
            .chain([("custom", "Custom bounds…")]),
        f.bounds.trim(),
    );
    let throughputs = choices(THROUGHPUTS.iter().map(|t| (*t, *t)), f.throughput.trim());
    let compilers = choices([("clang++", "clang++"), ("g++", "g++")], f.compiler.trim());
    let page = RunFormPage {
        l,
        errors,
        rerun,
        presets,
        books,
        bounds,
        throughputs,
        compilers,
        f,
    };
    Page::ok(&page)
}

/// The query of `GET /tests/run`.
#[derive(Deserialize, Default)]
pub struct RunQuery {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    preset: Option<String>,
}

fn login_first(next: &str) -> PageResult {
    Page::redirect(Href::new("/login").path_param("next", next).build())
}

/// `GET /tests/run`: the form (logged-in users), at its defaults, a rerun's values
/// (`?id=`), with a preset applied (`?preset=`).
pub async fn form(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    query: Result<Query<RunQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let q = query.map(|Query(q)| q).unwrap_or_default();
    let rerun = q.id.as_deref().map(str::parse::<RunId>);
    page(&state, Input::get(&state, &headers), move |db, ctx, _| {
        let Some(user) = ctx.user.clone() else {
            let mut next = "/tests/run".to_string();
            if let Some(id) = &q.id {
                next = Href::new(next).path_param("id", id).build();
            }
            return login_first(&next);
        };
        let mut f = match rerun {
            None => RunForm::defaults(&user.tests_repo),
            Some(id) => {
                let run = db
                    .get_run(id?.as_str())
                    .or_internal("rerun form")?
                    .ok_or(PageError::NotFound)?;
                RunForm::rerun(&run)
            }
        };
        let mut flashes = Vec::new();
        if let Some(key) = &q.preset {
            match PRESETS.iter().find(|p| p.key == key) {
                Some(p) => f.apply(p),
                None => flashes.push(Flash::error(format!("Unknown preset {key:?}"))),
            }
        }
        render(db, ctx, f, FieldErrors::new(), flashes)
    })
    .await
}

/// `POST /tests/run`: the token (a bad one is a 403 and creates nothing), then a secondary
/// answers 503 and an anonymous visitor goes to `/login`; then the run is created through
/// `RunDb::submit_run` and the browser goes to its page, or the form comes back (200) with
/// each refusal next to its field and the input kept.
pub async fn submit(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<RunForm>, FormRejection>,
) -> Response {
    // A body that is not this form is an empty one: its missing token refuses it.
    let f = form_or_default(form);
    let token = f.csrf_token.clone();
    let primary = state.primary;
    page(
        &state,
        Input::post(&state, &headers, token),
        move |db, ctx, _| {
            if !primary {
                return Err(PageError::NotPrimary);
            }
            let Some(user) = ctx.user.clone() else {
                return login_first("/tests/run");
            };
            let refused = |errors: FieldErrors, general: Option<String>| {
                let mut flashes = vec![Flash::error(
                    "The test was not submitted: see the messages below.",
                )];
                flashes.extend(general.map(Flash::error));
                render(db, ctx, f.clone(), errors, flashes)
            };
            let args = match to_args(&f) {
                Ok(args) => args,
                Err(errors) => {
                    let general = errors.get("rescheduled_from").cloned();
                    return refused(errors, general);
                }
            };
            match db.submit_run(args, &user) {
                Ok(id) => {
                    tracing::info!(run = %id, user = %user.username, "run submitted");
                    Page::redirect(format!("/tests/view/{id}?follow=1"))
                }
                Err(SubmitError::Args(e)) => {
                    let field = form_field(e.field);
                    if field.is_empty() {
                        refused(FieldErrors::new(), Some(e.message))
                    } else {
                        refused(FieldErrors::from([(field.to_string(), e.message)]), None)
                    }
                }
                Err(SubmitError::Db(RunDbError::NotPrimary)) => Err(PageError::NotPrimary),
                Err(SubmitError::Db(
                    e @ (RunDbError::Invalid(_)
                    | RunDbError::Unauthorized(_)
                    | RunDbError::NotFound(_)),
                )) => refused(FieldErrors::new(), Some(e.to_string())),
                Err(SubmitError::Db(e)) => Err(PageError::internal("run not submitted", e)),
            }
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled() -> RunForm {
        let mut f = RunForm::defaults("https://github.com/alice/Stockfish");
        f.test_branch = "patch".into();
        f.resolved_new = "b".repeat(40);
        f.resolved_base = "a".repeat(40);
        f.test_signature = "1234568".into();
        f.base_signature = "1234567".into();
        f.run_info = "info".into();
        f
    }

    #[test]
    fn a_form_reads_as_create_args() {
        let a = to_args(&filled()).unwrap();
        let sprt = a.sprt.unwrap();
        assert_eq!((sprt.elo0, sprt.elo1), (0.0, 2.0));
        assert_eq!(sprt.elo_model.as_deref(), Some("normalized"));
        assert_eq!(a.num_games, None);
        assert_eq!(a.new_tc, None);
        assert!(a.adjudication && !a.auto_purge);
        assert_eq!((a.arch_filter, a.compiler), (None, None));

        let mut f = filled();
        f.stop_rule = "games".into();
        f.num_games = "2000".into();
        f.odds = Some("on".into());
        f.new_tc = "20+0.2".into();
        f.adjudication = Some("on".into());
        f.new_options = "  Hash=16   Threads=1 ".into();
        let a = to_args(&f).unwrap();
        assert_eq!(a.num_games, Some(2000));
        assert_eq!(a.new_tc.as_deref(), Some("20+0.2"));
        assert!(!a.adjudication);
        assert_eq!(a.new_options, "Hash=16 Threads=1");
    }

    #[test]
    fn unreadable_values_are_refused_by_field() {
        let mut f = filled();
        f.threads = "two".into();
        f.priority = "1.5".into();
        f.bounds = "custom".into();
        f.sprt_elo0 = "x".into();
        let e = to_args(&f).unwrap_err();
        assert_eq!(e["threads"], "Threads must be an integer");
        assert_eq!(e["priority"], "Priority must be an integer");
        assert_eq!(e["sprt_elo0"], "elo0 must be a number");
        f.stop_rule = "forever".into();
        assert!(to_args(&f).unwrap_err().contains_key("stop_rule"));
    }

    #[test]
    fn presets_set_the_time_control_hash_and_bounds() {
        let mut f = filled();
        f.auto_purge = Some("on".into());
        f.new_options = "Hash=16 Foo=1".into();
        let ltc = PRESETS.iter().find(|p| p.key == "ltc-smp").unwrap();
        f.apply(ltc);
        assert_eq!((f.tc.as_str(), f.threads.as_str()), ("20+0.2", "8"));
        assert_eq!(f.new_options, "Hash=256 Foo=1");
        assert_eq!(f.base_options, "Hash=256");
        assert_eq!(
            (f.bounds.as_str(), f.sprt_elo0.as_str()),
            ("standard_ltc", "0.50")
        );
        assert!(f.auto_purge.is_none());
        assert_eq!(f.preset(), Some("ltc-smp"));
        assert_eq!(with_hash("", 64), "Hash=64");
    }

    #[test]
    fn every_argument_has_a_field() {
        for arg in [
            "base_tag",
            "new_tag",
            "resolved_base",
            "tests_repo",
            "master_repo",
            "sprt",
            "spsa.raw_params",
            "num_games",
        ] {
            assert!(!form_field(arg).is_empty(), "{arg}");
        }
        assert_eq!(form_field("unknown"), "");
    }
}
