//! Creating a run: validating submitted arguments and building the run document.
//!
//! Owns: Fishtest's new-run rules (its submit form's server checks and game counts,
//! docs/fishtest-compatibility.md#runs) that do not need GitHub (the caller supplies resolved
//! SHAs, signatures and nets), and the computed fields (SPRT record and batch size, SPSA
//! set-up, itp, tc_base, LTC prefix).
//! Must not: do I/O. The same code serves `/api/create_run` and the submit form
//! (`/tests/run`): each refusal is an [`ArgError`] naming the argument it is about, so the form
//! can show it next to its field while the API sends the same message.

use serde::Deserialize;

use super::books::Books;
use super::model::{RUN_VERSION, Run, RunArgs, Stats};
use super::schedule::{ArchFilter, parse_tc, sprt_batch_pairs, tc_base, tc_ratio};
use crate::spsa::{SpsaSettings, Stability, setup_spsa};
use crate::stats::{EloModel, SprtRecord};
use crate::store::{Date, new_object_id};

pub use crate::protocol::{MAX_GAMES, SPRT_MAX_GAMES};

/// Largest sliding window a run may ask for (`max_active_tasks`).
pub const MAX_ACTIVE_TASKS: u32 = 100_000;

/// Stockfish's `ARCH` names (what `worker_arch` reports), used to check that an arch filter
/// can match something.
pub const SUPPORTED_ARCHES: &[&str] = &[
    "x86-64-vnni512",
    "x86-64-vnni256",
    "x86-64-avx512icl",
    "x86-64-avx512",
    "x86-64-avxvnni",
    "x86-64-bmi2",
    "x86-64-avx2",
    "x86-64-sse41-popcnt",
    "x86-64-modern",
    "x86-64-ssse3",
    "x86-64-sse3-popcnt",
    "x86-64",
    "x86-32-sse41-popcnt",
    "x86-32-sse2",
    "x86-32",
    "ppc-64",
    "ppc-64-altivec",
    "ppc-64-vsx",
    "ppc-32",
    "armv7",
    "armv7-neon",
    "armv8",
    "armv8-dotprod",
    "e2k",
    "apple-silicon",
    "general-64",
    "general-32",
    "riscv64",
    "loongarch64",
    "loongarch64-lsx",
    "loongarch64-lasx",
];

/// The SPRT part of a submission.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SprtIn {
    pub elo0: f64,
    pub elo1: f64,
    #[serde(default)]
    pub elo_model: Option<String>,
}

/// The SPSA part of a submission.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SpsaIn {
    pub raw_params: String,
    /// The stability constant as a fraction of the iterations (default 0.1).
    #[serde(default)]
    pub a_ratio: Option<f64>,
    /// Or the stability constant itself.
    #[serde(default, rename = "A")]
    pub a: Option<f64>,
    #[serde(default)]
    pub alpha: Option<f64>,
    #[serde(default)]
    pub gamma: Option<f64>,
}

/// What a submitter sends: the run's `args` minus what the server computes.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateArgs {
    pub base_tag: String,
    pub new_tag: String,
    #[serde(default)]
    pub base_nets: Vec<String>,
    #[serde(default)]
    pub new_nets: Vec<String>,
    pub resolved_base: String,
    pub resolved_new: String,
    #[serde(default)]
    pub msg_base: String,
    #[serde(default)]
    pub msg_new: String,
    pub base_signature: String,
    pub new_signature: String,
    #[serde(default)]
    pub base_options: String,
    #[serde(default)]
    pub new_options: String,
    /// Required for fixed-games and SPSA runs; SPRT runs get 800,000.
    #[serde(default)]
    pub num_games: Option<u64>,
    pub tc: String,
    #[serde(default)]
    pub new_tc: Option<String>,
    pub book: String,
    #[serde(default)]
    pub book_depth: Option<String>,
    #[serde(default = "one")]
    pub threads: u32,
    #[serde(default)]
    pub info: String,
    pub tests_repo: String,
    #[serde(default)]
    pub master_repo: Option<String>,
    #[serde(default)]
    pub auto_purge: bool,
    #[serde(default = "hundred")]
    pub throughput: f64,
    #[serde(default)]
    pub priority: f64,
    #[serde(default = "yes")]
    pub adjudication: bool,
    #[serde(default)]
    pub arch_filter: Option<String>,
    #[serde(default)]
    pub compiler: Option<String>,
    /// The sliding window: at most this many active tasks at once (1..=100000).
    #[serde(default)]
    pub max_active_tasks: Option<u32>,
    #[serde(default)]
    pub sprt: Option<SprtIn>,
    #[serde(default)]
    pub spsa: Option<SpsaIn>,
    #[serde(default)]
    pub rescheduled_from: Option<String>,
}

fn one() -> u32 {
    1
}
fn hundred() -> f64 {
    100.0
}
fn yes() -> bool {
    true
}

/// At most this many nets per side of a run (Stockfish names two).
pub const MAX_NETS: usize = 16;

fn is_sha(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// A refused submission: the argument it is about (`CreateArgs`' key, `sprt.*` or `spsa.*` for
/// the nested parts) and the message the submitter sees.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ArgError {
    pub field: &'static str,
    pub message: String,
}

/// Free text a person wrote (a run's `info`, a stop message): no control character but a
/// tab, a line feed or a carriage return.
pub fn text_without_controls(text: &str) -> bool {
    !text
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
}

fn refuse(field: &'static str, message: impl Into<String>) -> ArgError {
    ArgError {
        field,
        message: message.into(),
    }
}

/// Options must be ASCII `key=value` tokens separated by spaces.
fn check_options(field: &'static str, options: &str) -> Result<(), ArgError> {
    if !options.is_ascii() {
        return Err(refuse(field, format!("{field}: options must be ASCII")));
    }
    for token in options.split_whitespace() {
        if token.matches('=').count() != 1 || token.starts_with('=') {
            return Err(refuse(
                field,
                format!("{field}: option {token:?} is not of the form key=value"),
            ));
        }
    }
    Ok(())
}

fn check_repo(repo: &str) -> Result<(), String> {
    let rest = repo
        .strip_prefix("https://github.com/")
        .ok_or_else(|| format!("tests_repo {repo:?} must be https://github.com/<owner>/<repo>"))?;
    let parts: Vec<&str> = rest.split('/').collect();
    let ok = parts.len() == 2
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "tests_repo {repo:?} must be https://github.com/<owner>/<repo> without a trailing slash"
        ))
    }
}

/// An SPSA set-up refusal, named after the setting or the parameter list it is about.
fn spsa_refusal(e: crate::spsa::ParamsError) -> ArgError {
    use crate::spsa::ParamsError as P;
    let field = match &e {
        P::BadSetting { field: "alpha", .. } => "spsa.alpha",
        P::BadSetting { field: "gamma", .. } => "spsa.gamma",
        P::BadSetting { .. } => "spsa.A",
        P::TooFewGames(_) => "num_games",
        _ => "spsa.raw_params",
    };
    refuse(field, e.to_string())
}

/// The refusal of more than [`MAX_NETS`] nets on one side.
pub fn too_many_nets(field: &'static str, count: usize) -> ArgError {
    refuse(
        field,
        format!("{field} lists {count} nets: at most {MAX_NETS} per side"),
    )
}

/// Every net a submission names must have been uploaded (`known`): the first side with nets
/// never uploaded is refused, naming them (Fishtest's words), whatever filled the arguments in
/// (GitHub, a person by hand, a rerun, a script through `/api/create_run`).
pub fn check_nets(args: &CreateArgs, known: impl Fn(&str) -> bool) -> Result<(), ArgError> {
    for (field, nets) in [("new_nets", &args.new_nets), ("base_nets", &args.base_nets)] {
        if nets.len() > MAX_NETS {
            return Err(too_many_nets(field, nets.len()));
        }
        let missing: Vec<&str> = nets
            .iter()
            .map(String::as_str)
            // A name that is not one is `build_run`'s refusal.
            .filter(|n| crate::nets::valid_name(n) && !known(n))
            .collect();
        if !missing.is_empty() {
            return Err(refuse(
                field,
                format!(
                    "Missing net(s). Please upload to this server the following net(s): {}",
                    missing.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// Validates a submission and builds the new run document (not yet approved).
pub fn build_run(args: CreateArgs, username: &str, books: &Books) -> Result<Run, ArgError> {
    for (name, value) in [("base_tag", &args.base_tag), ("new_tag", &args.new_tag)] {
        if value.trim().is_empty() {
            return Err(refuse(name, format!("{name} must not be empty")));
        }
        // A run's name goes into pages, the action log and followers' feeds (XML 1.0 has
        // no place for most control characters).
        if value.chars().any(char::is_control) {
            return Err(refuse(
                name,
                format!("{name} must not contain control characters"),
            ));
        }
    }
    if !text_without_controls(&args.info) {
        return Err(refuse(
            "info",
            "info must not contain control characters (other than tabs and line breaks)",
        ));
    }
    for (name, value) in [
        ("resolved_base", &args.resolved_base),
        ("resolved_new", &args.resolved_new),
    ] {
        if !is_sha(value) {
            return Err(refuse(
                name,
                format!("{name} must be a 40-digit hexadecimal commit SHA"),
            ));
        }
    }
    for (name, value) in [
        ("base_signature", &args.base_signature),
        ("new_signature", &args.new_signature),
    ] {
        if !is_digits(value) {
            return Err(refuse(
                name,
                format!("{name} must be the bench node count (digits)"),
            ));
        }
        // Fishtest compares benches as strings: one spelling only (no leading zeros), and a
        // node count that fits 64 bits.
        if value.len() > 1 && value.starts_with('0') {
            return Err(refuse(
                name,
                format!("{name} must be written without leading zeros"),
            ));
        }
        if value.parse::<u64>().is_err() {
            return Err(refuse(
                name,
                format!("{name} is too large for a bench node count"),
            ));
        }
    }
    for (name, nets) in [("base_nets", &args.base_nets), ("new_nets", &args.new_nets)] {
        if nets.len() > MAX_NETS {
            return Err(too_many_nets(name, nets.len()));
        }
        if let Some(bad) = nets.iter().find(|n| !crate::nets::valid_name(n)) {
            return Err(refuse(
                name,
                format!("{name}: {bad:?} is not a net name nn-<12 hex>.nnue"),
            ));
        }
        let mut sorted = nets.clone();
        sorted.sort();
        sorted.dedup();
        if sorted.len() != nets.len() {
            return Err(refuse(name, format!("{name} lists a net twice")));
        }
    }
    check_options("base_options", &args.base_options)?;
    check_options("new_options", &args.new_options)?;
    check_repo(&args.tests_repo).map_err(|e| refuse("tests_repo", e))?;
    if let Some(m) = &args.master_repo {
        check_repo(m).map_err(|e| refuse("master_repo", format!("master_repo: {e}")))?;
    }
    let tc = parse_tc(&args.tc)
        .ok_or_else(|| refuse("tc", format!("invalid time control {:?}", args.tc)))?;
    let new_tc_text = args.new_tc.clone().unwrap_or_else(|| args.tc.clone());
    parse_tc(&new_tc_text)
        .ok_or_else(|| refuse("new_tc", format!("invalid time control {new_tc_text:?}")))?;
    if !(args.book.ends_with(".epd") || args.book.ends_with(".pgn")) {
        return Err(refuse(
            "book",
            format!("book {:?} must be an .epd or .pgn file", args.book),
        ));
    }
    if books.get(&args.book).is_none() {
        return Err(refuse("book", format!("unknown book {:?}", args.book)));
    }
    let book_depth = args.book_depth.clone().unwrap_or_else(|| "8".to_string());
    if !is_digits(&book_depth) {
        return Err(refuse(
            "book_depth",
            "book_depth must be a non-negative integer",
        ));
    }
    if args.threads == 0 || args.threads > 1024 {
        return Err(refuse("threads", "threads must be between 1 and 1024"));
    }
    if !args.priority.is_finite() {
        return Err(refuse("priority", "priority must be a number"));
    }
    if !args.throughput.is_finite() || args.throughput <= 0.0 || args.throughput > 1000.0 {
        return Err(refuse("throughput", "throughput must be in (0, 1000]"));
    }
    if let Some(n) = args.max_active_tasks
        && !(1..=MAX_ACTIVE_TASKS).contains(&n)
    {
        return Err(refuse(
            "max_active_tasks",
            format!("max_active_tasks must be between 1 and {MAX_ACTIVE_TASKS}"),
        ));
    }
    if let Some(c) = &args.compiler
        && c != "g++"
        && c != "clang++"
    {
        return Err(refuse("compiler", "compiler must be g++ or clang++"));
    }
    if let Some(f) = &args.arch_filter
        && !f.is_empty()
    {
        // Fishtest's words, after the argument's name (the form shows the words alone).
        ArchFilter::check(f, SUPPORTED_ARCHES)
            .map_err(|e| refuse("arch_filter", format!("arch_filter: {e}")))?;
    }
    if args.sprt.is_some() && args.spsa.is_some() {
        return Err(refuse("sprt", "a run is either SPRT or SPSA, not both"));
    }
    let r = tc_ratio(&tc, args.threads);
    // Fishtest's LTC: tc_base (the time control's leading number) ≥ 40, or r > 4.
    let is_ltc = tc_base(&args.tc) >= 40.0 || r > 4.0;

    let num_games = if args.sprt.is_some() {
        if args.num_games.is_some_and(|n| n != SPRT_MAX_GAMES) {
            return Err(refuse(
                "num_games",
                "num_games is set by the server for SPRT runs",
            ));
        }
        SPRT_MAX_GAMES
    } else {
        let n = args.num_games.ok_or_else(|| {
            refuse(
                "num_games",
                "num_games is required for fixed-games and SPSA runs",
            )
        })?;
        if !(1000..=MAX_GAMES).contains(&n) || n % 1000 != 0 {
            return Err(refuse(
                "num_games",
                "num_games must be 1000 to 3200000, a multiple of 1000",
            ));
        }
        n
    };

    let sprt = match &args.sprt {
        None => None,
        Some(s) => {
            let model = match s.elo_model.as_deref() {
                None => EloModel::Normalized,
                Some(m) => EloModel::parse(m)
                    .ok_or_else(|| refuse("sprt.elo_model", format!("unknown elo_model {m:?}")))?,
            };
            if !(s.elo0.is_finite() && s.elo1.is_finite()) || s.elo0 >= s.elo1 {
                return Err(refuse("sprt", "SPRT bounds must satisfy elo0 < elo1"));
            }
            if s.elo0.abs() > 100.0 || s.elo1.abs() > 100.0 {
                return Err(refuse("sprt", "SPRT bounds must be within ±100"));
            }
            Some(
                SprtRecord::new(0.05, 0.05, s.elo0, s.elo1, model, sprt_batch_pairs(r))
                    .map_err(|e| refuse("sprt", format!("SPRT: {e}")))?,
            )
        }
    };
    let spsa = match &args.spsa {
        None => None,
        Some(s) => {
            let stability = match (s.a, s.a_ratio) {
                (Some(_), Some(_)) => return Err(refuse("spsa.A", "give A or a_ratio, not both")),
                (Some(a), None) => Stability::Absolute(a),
                (None, Some(r)) => Stability::Ratio(r),
                (None, None) => Stability::Ratio(crate::spsa::DEFAULT_A_RATIO),
            };
            let settings = SpsaSettings {
                stability,
                alpha: s.alpha.unwrap_or(crate::spsa::DEFAULT_ALPHA),
                gamma: s.gamma.unwrap_or(crate::spsa::DEFAULT_GAMMA),
            };
            Some(setup_spsa(&s.raw_params, &settings, num_games).map_err(spsa_refusal)?)
        }
    };
    let mut info = args.info.trim().to_string();
    if sprt.is_some() && is_ltc && !info.starts_with("LTC:") {
        info = format!("LTC: {info}");
    }
    let now = Date::now();
    Ok(Run {
        id: new_object_id(),
        version: RUN_VERSION,
        start_time: now,
        last_updated: now,
        rescheduled_from: args.rescheduled_from,
        tc_base: tc_base(&args.tc),
        approved: false,
        approver: String::new(),
        finished: false,
        deleted: false,
        failed: false,
        failures: 0,
        is_green: false,
        is_yellow: false,
        workers: 0,
        cores: 0,
        committed_games: 0,
        total_games: 0,
        nps: 0.0,
        games_per_minute: 0.0,
        results: Stats::default(),
        trajectory: Default::default(),
        args: RunArgs {
            base_tag: args.base_tag,
            new_tag: args.new_tag,
            base_nets: args.base_nets,
            new_nets: args.new_nets,
            resolved_base: args.resolved_base.to_ascii_lowercase(),
            resolved_new: args.resolved_new.to_ascii_lowercase(),
            msg_base: args.msg_base,
            msg_new: args.msg_new,
            base_signature: args.base_signature,
            new_signature: args.new_signature,
            base_options: args.base_options,
            new_options: args.new_options,
            num_games,
            tc: args.tc,
            new_tc: new_tc_text,
            book: args.book,
            book_depth,
            threads: args.threads,
            info,
            username: username.to_string(),
            tests_repo: args.tests_repo,
            master_repo: args.master_repo,
            auto_purge: args.auto_purge,
            throughput: args.throughput,
            itp: args.throughput.clamp(1.0, 500.0),
            priority: args.priority,
            adjudication: args.adjudication,
            arch_filter: args.arch_filter.filter(|f| !f.is_empty()),
            compiler: args.compiler,
            max_active_tasks: args.max_active_tasks,
            sprt,
            spsa,
            extra: Default::default(),
        },
        tasks: Vec::new(),
        bad_tasks: Vec::new(),
        extra: Default::default(),
    })
}
