//! Fishtest's document schemas, checked on the test side, as `/work/shared/spec/collections.md`
//! states them (written from its words, not from Fishtest's code): every stored object strict
//! at every level, exact BSON types (an int is no double, a boolean no int, an ObjectId no
//! string, a datetime no string), each action kind's closed field list, the value formats
//! (names, time controls, shas, e-mail, addresses, worker names) and the cross-field rules
//! (a run's aggregates, flags and finished state; a net's test records; a PGN's size).
//!
//! [`check`] answers every problem of one document of a collection, in words naming the
//! field; [`check_database`] every problem of every document of Fishtest's collections in a
//! MongoDB database. The unit tests below feed it Fishtest's own sample database (all pass)
//! and edited copies (each edit is refused), so the checker itself can fail.

use std::sync::LazyLock;

use bson::{Bson, Document, doc};
use regex::Regex;

/// Fishtest's collections, each checked by [`check`].
pub const SHARED: [&str; 10] = [
    "runs",
    "users",
    "nns",
    "actions",
    "workers",
    "pgns",
    "kvstore",
    "deltas",
    "user_cache",
    "top_month",
];

/// What a check needs beyond the document: the names `legacy_usernames` lists.
#[derive(Default, Clone)]
pub struct Ctx {
    pub legacy: Vec<String>,
}

fn re(p: &str) -> Regex {
    Regex::new(&format!("^(?:{p})$")).expect("pattern")
}

static USERNAME: LazyLock<Regex> = LazyLock::new(|| re("[A-Za-z0-9]{2,}"));
static RUN_ID: LazyLock<Regex> = LazyLock::new(|| re("[0-9a-fA-F]{24}"));
static RUN_ID_PGNS: LazyLock<Regex> = LazyLock::new(|| re("[a-f0-9]{24}-(0|[1-9][0-9]*)"));
static RUN_NAME: LazyLock<Regex> = LazyLock::new(|| re(".*-[a-f0-9]{7}"));
static NET_NAME: LazyLock<Regex> = LazyLock::new(|| re("nn-[a-f0-9]{12}.nnue"));
static TC: LazyLock<Regex> =
    LazyLock::new(|| re(r"([1-9][0-9]*/)?[0-9]+(\.[0-9]+)?(\+[0-9]+(\.[0-9]+)?)?"));
static STR_INT: LazyLock<Regex> = LazyLock::new(|| re("[1-9][0-9]*"));
static SHA: LazyLock<Regex> = LazyLock::new(|| re("[a-f0-9]{40}"));
static SRI384: LazyLock<Regex> = LazyLock::new(|| re("(sha384-)?[0-9A-Za-z+/]{64}"));
static UUID: LazyLock<Regex> =
    LazyLock::new(|| re("[0-9a-zA-Z]{2,8}(-[a-f0-9]{4}){3}-[a-f0-9]{12}"));
static COUNTRY: LazyLock<Regex> = LazyLock::new(|| re(r"[A-Z][A-Z]|\?"));
static GITHUB_REPO: LazyLock<Regex> =
    LazyLock::new(|| re(r"https://(www\.)?github\.com/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+"));
static OPTION_LIST: LazyLock<Regex> = LazyLock::new(|| re(r"|([^\s=]+=[^\s=]+ )*[^\s=]+=[^\s=]+"));
static SHORT_WORKER: LazyLock<Regex> = LazyLock::new(|| re(".*-[0-9]+cores-[a-zA-Z0-9]{2,8}"));
static LONG_WORKER: LazyLock<Regex> =
    LazyLock::new(|| re(r".*-[0-9]+cores-[a-zA-Z0-9]{2,8}-[a-f0-9]{4}\*?"));
static EMAIL: LazyLock<Regex> = LazyLock::new(|| {
    re(r"[^@\s.\[\]\x22]+(\.[^@\s.\[\]\x22]+)*@([A-Za-z0-9-]+\.)+[A-Za-z][A-Za-z0-9-]*[A-Za-z0-9]")
});

const WORKER_ARCHS: [&str; 29] = [
    "apple-silicon",
    "armv7",
    "armv7-neon",
    "armv8",
    "armv8-dotprod",
    "e2k",
    "general-32",
    "general-64",
    "loongarch64",
    "loongarch64-lasx",
    "loongarch64-lsx",
    "ppc-32",
    "ppc-64",
    "ppc-64-altivec",
    "ppc-64-vsx",
    "riscv64",
    "x86-32",
    "x86-32-sse2",
    "x86-32-sse41-popcnt",
    "x86-64",
    "x86-64-avx2",
    "x86-64-avx512",
    "x86-64-avxvnni",
    "x86-64-bmi2",
    "x86-64-sse3-popcnt",
    "x86-64-sse41-popcnt",
    "x86-64-ssse3",
    "x86-64-vnni512",
    "x86-64-avx512icl",
];

/// The problems found so far, each naming its field.
struct Errs(Vec<String>);

impl Errs {
    fn add(&mut self, path: &str, what: impl std::fmt::Display) {
        self.0.push(format!("{path}: {what}"));
    }
}

fn int(b: &Bson) -> Option<i64> {
    match b {
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        _ => None,
    }
}

fn number(b: &Bson) -> Option<f64> {
    match b {
        Bson::Double(x) => Some(*x),
        other => int(other).map(|n| n as f64),
    }
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

/// A strict object: only `required` and `optional` keys, every required one present.
fn strict(d: &Document, path: &str, required: &[&str], optional: &[&str], e: &mut Errs) {
    for k in d.keys() {
        if !required.contains(&k.as_str()) && !optional.contains(&k.as_str()) {
            e.add(&format!("{path}.{k}"), "is not in the schema");
        }
    }
    for k in required {
        if !d.contains_key(*k) {
            e.add(&format!("{path}.{k}"), "is missing");
        }
    }
}

/// One field's value, checked by `rule` when present (presence is [`strict`]'s business).
fn field(
    d: &Document,
    path: &str,
    key: &str,
    e: &mut Errs,
    rule: impl FnOnce(&Bson) -> Result<(), String>,
) {
    if let Some(v) = d.get(key)
        && let Err(why) = rule(v)
    {
        e.add(&format!("{path}.{key}"), format!("{why} (found {v})"));
    }
}

type Rule = Result<(), String>;

fn is(ok: bool, what: &str) -> Rule {
    if ok {
        Ok(())
    } else {
        Err(format!("not {what}"))
    }
}

fn t_int(v: &Bson) -> Rule {
    is(int(v).is_some(), "an int")
}
fn t_uint(v: &Bson) -> Rule {
    is(int(v).is_some_and(|n| n >= 0), "an int ≥ 0")
}
fn t_suint(v: &Bson) -> Rule {
    is(int(v).is_some_and(|n| n > 0), "an int > 0")
}
fn t_even(v: &Bson) -> Rule {
    is(
        int(v).is_some_and(|n| n >= 0 && n % 2 == 0),
        "an even int ≥ 0",
    )
}
fn t_number(v: &Bson) -> Rule {
    is(number(v).is_some(), "a number")
}
fn t_unumber(v: &Bson) -> Rule {
    is(number(v).is_some_and(|x| x >= 0.0), "a number ≥ 0")
}
fn t_sunumber(v: &Bson) -> Rule {
    is(number(v).is_some_and(|x| x > 0.0), "a number > 0")
}
fn t_bool(v: &Bson) -> Rule {
    is(matches!(v, Bson::Boolean(_)), "a boolean")
}
fn t_str(v: &Bson) -> Rule {
    is(matches!(v, Bson::String(_)), "a string")
}
fn t_oid(v: &Bson) -> Rule {
    is(matches!(v, Bson::ObjectId(_)), "an ObjectId")
}
fn t_date(v: &Bson) -> Rule {
    is(matches!(v, Bson::DateTime(_)), "a BSON datetime")
}
fn t_bytes(v: &Bson) -> Rule {
    is(
        matches!(v, Bson::Binary(b) if b.subtype == bson::spec::BinarySubtype::Generic),
        "binary data (subtype 0)",
    )
}
fn t_match(re: &Regex, what: &str) -> impl Fn(&Bson) -> Rule {
    move |v| is(matches!(v, Bson::String(s) if re.is_match(s)), what)
}
fn t_literal_f(x: f64) -> impl Fn(&Bson) -> Rule {
    move |v| {
        let ok = number(v).is_some_and(|y| y == x || (y - x).abs() <= 1e-9 * y.abs().max(x.abs()));
        is(ok, &format!("{x}"))
    }
}
fn t_one_of(set: &'static [&'static str]) -> impl Fn(&Bson) -> Rule {
    move |v| {
        is(
            matches!(v, Bson::String(s) if set.contains(&s.as_str())),
            &format!("one of {set:?}"),
        )
    }
}
fn t_username(ctx: &Ctx) -> impl Fn(&Bson) -> Rule + '_ {
    move |v| {
        is(
            matches!(v, Bson::String(s) if USERNAME.is_match(s) || ctx.legacy.contains(s)),
            "a user name",
        )
    }
}
fn t_run_name(v: &Bson) -> Rule {
    is(
        matches!(v, Bson::String(s) if RUN_NAME.is_match(s) && chars(s) <= 31),
        "a run name",
    )
}
fn t_message(max: usize) -> impl Fn(&Bson) -> Rule {
    move |v| {
        is(
            matches!(v, Bson::String(s) if chars(s) <= max),
            &format!("a string of at most {max} characters"),
        )
    }
}
fn t_ip(v: &Bson) -> Rule {
    is(
        matches!(v, Bson::String(s)
            if s.split('%').next().is_some_and(|a| a.parse::<std::net::IpAddr>().is_ok())),
        "an IP address",
    )
}
fn t_email(v: &Bson) -> Rule {
    const SPECIAL: [&str; 6] = [
        ".test",
        ".local",
        ".localhost",
        ".invalid",
        ".onion",
        ".arpa",
    ];
    is(
        matches!(v, Bson::String(s) if EMAIL.is_match(s)
            && !SPECIAL.iter().any(|t| s.to_ascii_lowercase().ends_with(t))),
        "an e-mail address",
    )
}
fn t_book(v: &Bson) -> Rule {
    is(
        matches!(v, Bson::String(s) if s.ends_with(".epd") || s.ends_with(".pgn")),
        "a book (*.epd or *.pgn)",
    )
}
fn t_array(n: Option<usize>, each: impl Fn(&Bson) -> Rule) -> impl Fn(&Bson) -> Rule {
    move |v| {
        let Bson::Array(a) = v else {
            return Err("not a list".into());
        };
        if let Some(n) = n
            && a.len() != n
        {
            return Err(format!("not exactly {n} entries"));
        }
        a.iter().try_for_each(&each)
    }
}
fn unique(v: &Bson) -> bool {
    match v {
        Bson::Array(a) => a.iter().enumerate().all(|(i, x)| !a[..i].contains(x)),
        _ => true,
    }
}

/// The problems of one document of `coll` (empty: Fishtest's schema accepts it).
pub fn check(coll: &str, d: &Document, ctx: &Ctx) -> Vec<String> {
    let mut e = Errs(Vec::new());
    match coll {
        "runs" => run(d, ctx, &mut e),
        "users" => user(d, ctx, &mut e),
        "nns" => net(d, ctx, &mut e),
        "actions" => action(d, ctx, &mut e),
        "workers" => worker(d, &mut e),
        "pgns" => pgn(d, &mut e),
        "kvstore" => kv(d, &mut e),
        "user_cache" | "top_month" => contributors(d, coll, &mut e),
        "deltas" => deltas(d, &mut e),
        other => e.add(other, "not one of Fishtest's collections"),
    }
    e.0
}

fn user(d: &Document, ctx: &Ctx, e: &mut Errs) {
    let p = "users";
    strict(
        d,
        p,
        &[
            "username",
            "password",
            "registration_time",
            "pending",
            "blocked",
            "email",
            "groups",
            "tests_repo",
            "machine_limit",
        ],
        &["_id"],
        e,
    );
    field(d, p, "_id", e, t_oid);
    field(d, p, "username", e, t_username(ctx));
    field(d, p, "password", e, t_message(72));
    field(d, p, "registration_time", e, t_date);
    field(d, p, "pending", e, t_bool);
    field(d, p, "blocked", e, t_bool);
    field(d, p, "email", e, t_email);
    field(d, p, "groups", e, |v| {
        t_array(None, t_str)(v)?;
        is(unique(v), "unique")
    });
    field(d, p, "tests_repo", e, |v| {
        is(
            matches!(v, Bson::String(s) if s.is_empty() || GITHUB_REPO.is_match(s)),
            "a GitHub repository or \"\"",
        )
    });
    field(d, p, "machine_limit", e, t_uint);
}

fn net(d: &Document, ctx: &Ctx, e: &mut Errs) {
    let p = "nns";
    strict(
        d,
        p,
        &["name", "user", "downloads"],
        &["_id", "is_master", "first_test", "last_test"],
        e,
    );
    field(d, p, "_id", e, t_oid);
    field(d, p, "name", e, t_match(&NET_NAME, "a net name"));
    field(d, p, "user", e, t_username(ctx));
    field(d, p, "downloads", e, t_uint);
    field(d, p, "is_master", e, |v| {
        is(v == &Bson::Boolean(true), "true")
    });
    for k in ["first_test", "last_test"] {
        if let Some(v) = d.get(k) {
            let path = format!("{p}.{k}");
            match v {
                Bson::Document(t) => {
                    strict(t, &path, &["date", "id"], &[], e);
                    field(t, &path, "date", e, t_date);
                    field(t, &path, "id", e, t_match(&RUN_ID, "a run id string"));
                }
                other => e.add(&path, format!("not an object (found {other})")),
            }
        }
    }
    let any = ["is_master", "first_test", "last_test"]
        .iter()
        .any(|k| d.contains_key(*k));
    if any && !(d.contains_key("first_test") && d.contains_key("last_test")) {
        e.add(
            p,
            "is_master/first_test/last_test without both test records",
        );
    }
    let date = |k: &str| {
        d.get_document(k)
            .ok()
            .and_then(|t| t.get_datetime("date").ok().copied())
    };
    if let (Some(a), Some(b)) = (date("first_test"), date("last_test"))
        && a > b
    {
        e.add(p, "first_test.date after last_test.date");
    }
}

fn worker(d: &Document, e: &mut Errs) {
    let p = "workers";
    strict(
        d,
        p,
        &["worker_name", "blocked", "message", "last_updated"],
        &["_id"],
        e,
    );
    field(d, p, "_id", e, t_oid);
    field(
        d,
        p,
        "worker_name",
        e,
        t_match(&SHORT_WORKER, "a short worker name"),
    );
    field(d, p, "blocked", e, t_bool);
    field(d, p, "message", e, t_message(500));
    field(d, p, "last_updated", e, t_date);
}

fn pgn(d: &Document, e: &mut Errs) {
    let p = "pgns";
    strict(d, p, &["run_id", "pgn_zip", "size"], &["_id"], e);
    field(d, p, "_id", e, t_oid);
    field(
        d,
        p,
        "run_id",
        e,
        t_match(&RUN_ID_PGNS, "<run id>-<task id>"),
    );
    field(d, p, "pgn_zip", e, |v| {
        t_bytes(v)?;
        is(
            matches!(v, Bson::Binary(b) if b.bytes.starts_with(&[0x1f, 0x8b])),
            "gzip data",
        )
    });
    field(d, p, "size", e, t_uint);
    if let (Ok(b), Some(n)) = (d.get_binary_generic("pgn_zip"), d.get("size").and_then(int))
        && i64::try_from(b.len()).ok() != Some(n)
    {
        e.add(p, "size is not the byte length of pgn_zip");
    }
}

fn kv(d: &Document, e: &mut Errs) {
    let p = "kvstore";
    strict(d, p, &["_id", "value"], &[], e);
    field(d, p, "_id", e, t_str);
    let Some(value) = d.get("value") else { return };
    let path = format!("{p}.{}.value", d.get_str("_id").unwrap_or("?"));
    match d.get_str("_id").unwrap_or_default() {
        "legacy_usernames" => {
            if let Err(w) = t_array(None, t_str)(value) {
                e.add(&path, w);
            }
        }
        "official_master_sha" => {
            if let Err(w) = t_match(&SHA, "a sha")(value) {
                e.add(&path, w);
            }
        }
        "worker_runs" => match value {
            Bson::Document(m) => {
                for (name, runs) in m {
                    let wp = format!("{path}.{name}");
                    if !SHORT_WORKER.is_match(name) {
                        e.add(&wp, "not a short worker name");
                    }
                    let Bson::Document(runs) = runs else {
                        e.add(&wp, "not an object");
                        continue;
                    };
                    if !runs.contains_key("last_run") {
                        e.add(&format!("{wp}.last_run"), "is missing");
                    }
                    for (k, v) in runs {
                        let ok = if k == "last_run" {
                            t_match(&RUN_ID, "a run id")(v).is_ok()
                        } else {
                            RUN_ID.is_match(k) && v == &Bson::Boolean(true)
                        };
                        if !ok {
                            e.add(&format!("{wp}.{k}"), format!("not a run id → true ({v})"));
                        }
                    }
                }
            }
            other => e.add(&path, format!("not an object ({other})")),
        },
        "books" => match value {
            Bson::Document(m) => {
                for (book, b) in m {
                    let bp = format!("{path}.{book}");
                    if t_book(&Bson::String(book.clone())).is_err() {
                        e.add(&bp, "not a book name");
                    }
                    let Bson::Document(b) = b else {
                        e.add(&bp, "not an object");
                        continue;
                    };
                    strict(
                        b,
                        &bp,
                        &["total", "white", "black", "min_depth", "max_depth", "sri"],
                        &[],
                        e,
                    );
                    for k in ["total", "white", "black"] {
                        field(b, &bp, k, e, t_uint);
                    }
                    for k in ["min_depth", "max_depth"] {
                        field(b, &bp, k, e, |v| {
                            is(*v == Bson::Null || t_uint(v).is_ok(), "an int ≥ 0 or null")
                        });
                    }
                    field(b, &bp, "sri", e, t_match(&SRI384, "an SRI"));
                    let n = |k| b.get(k).and_then(int);
                    if let (Some(t), Some(w), Some(bl)) = (n("total"), n("white"), n("black"))
                        && t != w + bl
                    {
                        e.add(&bp, "total is not white + black");
                    }
                }
            }
            other => e.add(&path, format!("not an object ({other})")),
        },
        _ => {}
    }
}

fn contributors(d: &Document, p: &str, e: &mut Errs) {
    strict(
        d,
        p,
        &[
            "_id",
            "username",
            "cpu_hours",
            "games",
            "games_per_hour",
            "tests",
            "tests_repo",
            "last_updated",
        ],
        &[],
        e,
    );
    field(d, p, "_id", e, t_oid);
    field(d, p, "username", e, t_str);
    field(d, p, "cpu_hours", e, t_number);
    field(d, p, "games", e, t_int);
    field(d, p, "games_per_hour", e, t_number);
    field(d, p, "tests", e, t_int);
    field(d, p, "tests_repo", e, t_str);
    field(d, p, "last_updated", e, t_date);
}

fn deltas(d: &Document, e: &mut Errs) {
    for (k, v) in d {
        if k == "_id" {
            if let Err(w) = t_oid(v) {
                e.add("deltas._id", w);
            }
        } else if !RUN_ID.is_match(k) || *v != Bson::Null {
            e.add(&format!("deltas.{k}"), "not a run id → null");
        }
    }
}

/// Each action kind: (required fields besides the common ones, optional fields).
fn action_fields(kind: &str) -> Option<(&'static [&'static str], &'static [&'static str])> {
    const RUN: &[&str] = &["run_id", "run", "message"];
    Some(match kind {
        "failed_task" | "crash_or_time" => {
            (&["worker", "run_id", "run", "task_id", "message"], &[])
        }
        "dead_task" => (&["worker", "run_id", "run", "task_id"], &[]),
        "system_event" => (&["message"], &[]),
        "new_run" | "modify_run" | "finished_run" | "approve_run" | "purge_run" => (RUN, &[]),
        "upload_nn" => (&["nn"], &[]),
        "delete_run" => (&["run_id", "run"], &[]),
        "stop_run" => (RUN, &["worker", "task_id"]),
        "block_user" | "accept_user" => (&["user", "message"], &[]),
        "block_worker" => (&["worker", "message"], &[]),
        "log_message" => (&["message"], &["worker"]),
        "worker_log" => (&["worker", "message"], &["run_id", "run", "task_id"]),
        _ => return None,
    })
}

fn action(d: &Document, ctx: &Ctx, e: &mut Errs) {
    let p = "actions";
    let kind = d.get_str("action").unwrap_or_default();
    let Some((required, optional)) = action_fields(kind) else {
        e.add(
            &format!("{p}.action"),
            format!("{kind:?} is not a kind Fishtest knows"),
        );
        return;
    };
    let p = &format!("actions[{kind}]");
    let mut req = vec!["_id", "time", "action", "username"];
    req.extend_from_slice(required);
    strict(d, p, &req, optional, e);
    field(d, p, "_id", e, t_oid);
    field(d, p, "time", e, t_unumber);
    if kind == "system_event" {
        field(d, p, "username", e, |v| {
            is(v == &Bson::from("fishtest.system"), "fishtest.system")
        });
    } else {
        field(d, p, "username", e, |v| {
            is(
                v == &Bson::from("fishtest.system") || t_username(ctx)(v).is_ok(),
                "a user name",
            )
        });
    }
    let worker = if kind == "block_worker" {
        t_match(&SHORT_WORKER, "a short worker name")
    } else {
        t_match(&LONG_WORKER, "a long worker name")
    };
    field(d, p, "worker", e, worker);
    field(d, p, "run_id", e, t_match(&RUN_ID, "a run id string"));
    field(d, p, "run", e, t_run_name);
    field(d, p, "task_id", e, t_uint);
    field(d, p, "nn", e, t_match(&NET_NAME, "a net name"));
    field(d, p, "user", e, t_str);
    let fixed: Option<&'static [&'static str]> = match kind {
        "approve_run" => Some(&["approved", "unapproved"]),
        "block_user" | "block_worker" => Some(&["blocked", "unblocked"]),
        "accept_user" => Some(&["accepted"]),
        _ => None,
    };
    match fixed {
        Some(set) => field(d, p, "message", e, t_one_of(set)),
        None => field(d, p, "message", e, t_message(5120)),
    }
    if kind == "stop_run" && d.contains_key("worker") != d.contains_key("task_id") {
        e.add(p, "worker and task_id: both or neither");
    }
    if kind == "worker_log"
        && ["run_id", "run", "task_id"]
            .iter()
            .any(|k| d.contains_key(*k))
        && !(d.contains_key("run_id") && d.contains_key("run"))
    {
        e.add(p, "a run context needs run_id and run");
    }
}

/// The five counters and the pentanomial of a results/stats object, if well typed.
type Stats = ([i64; 5], [i64; 5]);

fn stats(d: &Document, path: &str, e: &mut Errs) -> Option<Stats> {
    const KEYS: [&str; 5] = ["wins", "losses", "draws", "crashes", "time_losses"];
    let mut req = KEYS.to_vec();
    req.push("pentanomial");
    strict(d, path, &req, &[], e);
    for k in KEYS {
        field(d, path, k, e, t_uint);
    }
    field(d, path, "pentanomial", e, t_array(Some(5), t_uint));
    let mut c = [0i64; 5];
    for (i, k) in KEYS.iter().enumerate() {
        c[i] = d.get(*k).and_then(int)?;
    }
    let mut p = [0i64; 5];
    for (i, x) in d.get_array("pentanomial").ok()?.iter().enumerate() {
        *p.get_mut(i)? = int(x)?;
    }
    let (w, l, dr) = (c[0], c[1], c[2]);
    let pairs: i64 = p.iter().sum();
    if w + l + dr != 2 * pairs {
        e.add(path, "W+L+D is not 2·Σ pentanomial");
    }
    if w - l != 2 * p[4] + p[3] - p[1] - 2 * p[0] {
        e.add(path, "W−L does not match the pentanomial");
    }
    if !(p[3] + p[1] <= dr && dr <= p[3] + 2 * p[2] + p[1]) {
        e.add(path, "draws out of the pentanomial's range");
    }
    Some((c, p))
}

fn worker_info(d: &Document, path: &str, ctx: &Ctx, e: &mut Errs) {
    strict(
        d,
        path,
        &[
            "uname",
            "architecture",
            "concurrency",
            "max_memory",
            "min_threads",
            "username",
            "version",
            "python_version",
            "gcc_version",
            "compiler",
            "unique_key",
            "modified",
            "worker_arch",
            "ARCH",
            "nps",
            "near_github_api_limit",
            "remote_addr",
            "country_code",
        ],
        &[],
        e,
    );
    field(d, path, "uname", e, t_str);
    field(d, path, "architecture", e, t_array(Some(2), t_str));
    field(d, path, "concurrency", e, t_suint);
    field(d, path, "max_memory", e, t_uint);
    field(d, path, "min_threads", e, t_suint);
    field(d, path, "username", e, t_username(ctx));
    field(d, path, "version", e, t_uint);
    field(d, path, "python_version", e, t_array(Some(3), t_uint));
    field(d, path, "gcc_version", e, t_array(Some(3), t_uint));
    field(d, path, "compiler", e, t_one_of(&["clang++", "g++"]));
    field(d, path, "unique_key", e, t_match(&UUID, "a worker key"));
    field(d, path, "modified", e, t_bool);
    field(d, path, "worker_arch", e, |v| {
        is(
            matches!(v, Bson::String(s) if s == "unknown" || WORKER_ARCHS.contains(&s.as_str())),
            "a worker arch",
        )
    });
    field(d, path, "ARCH", e, t_str);
    field(d, path, "nps", e, t_unumber);
    field(d, path, "near_github_api_limit", e, t_bool);
    field(d, path, "remote_addr", e, t_ip);
    field(
        d,
        path,
        "country_code",
        e,
        t_match(&COUNTRY, "a country code or ?"),
    );
}

/// LOS of a pentanomial (statistics.md §3.4, regularised: zeros become 0.001).
fn los(p: &[i64; 5]) -> f64 {
    let n: Vec<f64> = p
        .iter()
        .map(|&x| if x == 0 { 0.001 } else { x as f64 })
        .collect();
    let total: f64 = n.iter().sum();
    let games = total * 2.0;
    let mu: f64 = n
        .iter()
        .enumerate()
        .map(|(i, c)| c * (i as f64 / 2.0))
        .sum::<f64>()
        / games;
    let var: f64 = n
        .iter()
        .enumerate()
        .map(|(i, c)| c * (i as f64 / 2.0 - 2.0 * mu).powi(2))
        .sum::<f64>()
        / games;
    let se = var.sqrt() / games.sqrt();
    0.5 * libm::erfc(-((mu - 0.5) / se) / std::f64::consts::SQRT_2)
}

fn run(d: &Document, ctx: &Ctx, e: &mut Errs) {
    let p = "runs";
    strict(
        d,
        p,
        &[
            "_id",
            "version",
            "start_time",
            "last_updated",
            "tc_base",
            "approved",
            "approver",
            "finished",
            "deleted",
            "failed",
            "failures",
            "is_green",
            "is_yellow",
            "workers",
            "cores",
            "committed_games",
            "total_games",
            "results",
            "nps",
            "games_per_minute",
            "args",
            "tasks",
            "bad_tasks",
        ],
        &["rescheduled_from"],
        e,
    );
    field(d, p, "_id", e, t_oid);
    field(d, p, "version", e, t_uint);
    field(d, p, "start_time", e, t_date);
    field(d, p, "last_updated", e, t_date);
    field(d, p, "tc_base", e, t_unumber);
    field(
        d,
        p,
        "rescheduled_from",
        e,
        t_match(&RUN_ID, "a run id string"),
    );
    for k in [
        "approved",
        "finished",
        "deleted",
        "failed",
        "is_green",
        "is_yellow",
    ] {
        field(d, p, k, e, t_bool);
    }
    for k in [
        "failures",
        "workers",
        "cores",
        "committed_games",
        "total_games",
    ] {
        field(d, p, k, e, t_uint);
    }
    field(d, p, "nps", e, t_unumber);
    field(d, p, "games_per_minute", e, t_unumber);
    field(d, p, "approver", e, |v| {
        is(
            matches!(v, Bson::String(s) if s.is_empty()) || t_username(ctx)(v).is_ok(),
            "a user name or \"\"",
        )
    });
    let results = match d.get("results") {
        Some(Bson::Document(r)) => stats(r, "runs.results", e),
        Some(other) => {
            e.add("runs.results", format!("not an object ({other})"));
            None
        }
        None => None,
    };
    let args = d.get_document("args").ok();
    match d.get("args") {
        Some(Bson::Document(a)) => run_args(a, ctx, e),
        Some(other) => e.add("runs.args", format!("not an object ({other})")),
        None => {}
    }
    let boolean = |k: &str| d.get_bool(k).ok();
    let num = |k: &str| d.get(k).and_then(number);
    // The tasks and their sums.
    let mut sum = ([0i64; 5], [0i64; 5]);
    let (mut cores, mut workers, mut committed, mut total) = (0i64, 0i64, 0i64, 0i64);
    let mut any_active = false;
    match d.get_array("tasks") {
        Ok(tasks) => {
            for (i, t) in tasks.iter().enumerate() {
                let tp = format!("runs.tasks[{i}]");
                let Bson::Document(t) = t else {
                    e.add(&tp, "not an object");
                    continue;
                };
                strict(
                    t,
                    &tp,
                    &[
                        "num_games",
                        "active",
                        "last_updated",
                        "start",
                        "stats",
                        "worker_info",
                    ],
                    &["bad", "spsa_params"],
                    e,
                );
                field(t, &tp, "num_games", e, t_even);
                field(t, &tp, "active", e, t_bool);
                field(t, &tp, "last_updated", e, t_date);
                field(t, &tp, "start", e, t_uint);
                field(t, &tp, "bad", e, |v| is(v == &Bson::Boolean(true), "true"));
                let active = t.get_bool("active").unwrap_or(false);
                if let Some(sp) = t.get("spsa_params") {
                    match sp {
                        Bson::Document(sp) => {
                            let spp = format!("{tp}.spsa_params");
                            strict(sp, &spp, &["iter", "packed_flips"], &[], e);
                            field(sp, &spp, "iter", e, t_uint);
                            field(sp, &spp, "packed_flips", e, t_bytes);
                        }
                        other => e.add(
                            &format!("{tp}.spsa_params"),
                            format!("not an object ({other})"),
                        ),
                    }
                    if !active {
                        e.add(&tp, "spsa_params on an inactive task");
                    }
                }
                let st = t
                    .get_document("stats")
                    .ok()
                    .and_then(|s| stats(s, &format!("{tp}.stats"), e));
                if t.contains_key("bad") && (active || st.is_some_and(|s| s != ([0; 5], [0; 5]))) {
                    e.add(&tp, "a bad task must be inactive with zero stats");
                }
                match t.get("worker_info") {
                    Some(Bson::Document(w)) => worker_info(w, &format!("{tp}.worker_info"), ctx, e),
                    Some(other) => e.add(
                        &format!("{tp}.worker_info"),
                        format!("not an object ({other})"),
                    ),
                    None => {}
                }
                let games = t.get("num_games").and_then(int).unwrap_or(0);
                if let Some((c, pt)) = st {
                    for k in 0..5 {
                        sum.0[k] += c[k];
                        sum.1[k] += pt[k];
                    }
                    committed += if active { games } else { c[0] + c[1] + c[2] };
                }
                total += games;
                if active {
                    any_active = true;
                    workers += 1;
                    cores += t
                        .get_document("worker_info")
                        .ok()
                        .and_then(|w| w.get("concurrency").and_then(int))
                        .unwrap_or(0);
                }
            }
        }
        Err(_) if d.contains_key("tasks") => e.add("runs.tasks", "not a list"),
        Err(_) => {}
    }
    match d.get_array("bad_tasks") {
        Ok(bad) => {
            for (i, t) in bad.iter().enumerate() {
                let tp = format!("runs.bad_tasks[{i}]");
                let Bson::Document(t) = t else {
                    e.add(&tp, "not an object");
                    continue;
                };
                strict(
                    t,
                    &tp,
                    &[
                        "num_games",
                        "active",
                        "last_updated",
                        "start",
                        "residual",
                        "residual_color",
                        "bad",
                        "task_id",
                        "stats",
                        "worker_info",
                    ],
                    &[],
                    e,
                );
                field(t, &tp, "num_games", e, t_even);
                field(t, &tp, "active", e, |v| {
                    is(v == &Bson::Boolean(false), "false")
                });
                field(t, &tp, "last_updated", e, t_date);
                field(t, &tp, "start", e, t_uint);
                field(t, &tp, "residual", e, t_number);
                field(
                    t,
                    &tp,
                    "residual_color",
                    e,
                    t_one_of(&["green", "yellow", "red"]),
                );
                field(t, &tp, "bad", e, |v| is(v == &Bson::Boolean(true), "true"));
                field(t, &tp, "task_id", e, t_uint);
                if let Ok(s) = t.get_document("stats") {
                    stats(s, &format!("{tp}.stats"), e);
                }
                if let Ok(w) = t.get_document("worker_info") {
                    worker_info(w, &format!("{tp}.worker_info"), ctx, e);
                }
            }
        }
        Err(_) => {
            if d.contains_key("bad_tasks") {
                e.add("runs.bad_tasks", "not a list");
            }
        }
    }
    // Cross-field rules (collections.md §3.9).
    if boolean("failed") == Some(true) && d.get("failures").and_then(int).unwrap_or(0) < 1 {
        e.add(p, "failed without failures ≥ 1");
    }
    match (boolean("approved"), d.get_str("approver").ok()) {
        (Some(true), Some(a)) if a.is_empty() || a == "fishtest.system" => {
            e.add(p, "approved without an approver")
        }
        (Some(false), Some(a)) if !a.is_empty() => e.add(p, "an approver on an unapproved run"),
        _ => {}
    }
    let (green, yellow) = (boolean("is_green"), boolean("is_yellow"));
    if green == Some(true) && yellow == Some(true) {
        e.add(p, "both green and yellow");
    }
    let finished = boolean("finished");
    if finished == Some(true) {
        if d.get("workers").and_then(int) != Some(0) || d.get("cores").and_then(int) != Some(0) {
            e.add(p, "finished with workers or cores");
        }
        if num("nps") != Some(0.0) || num("games_per_minute") != Some(0.0) {
            e.add(p, "finished with nps or games_per_minute ≠ 0");
        }
        if any_active {
            e.add(p, "finished with an active task");
        }
    }
    let sprt = args.and_then(|a| a.get_document("sprt").ok());
    if finished == Some(false) {
        for k in ["is_green", "is_yellow", "failed", "deleted"] {
            if boolean(k) == Some(true) {
                e.add(p, format!("unfinished but {k}"));
            }
        }
        let played = results.map(|(c, _)| c[0] + c[1] + c[2]).unwrap_or(0);
        let games = args
            .and_then(|a| a.get("num_games").and_then(int))
            .unwrap_or(i64::MAX);
        if played >= games {
            e.add(p, "unfinished but all its games are played");
        }
        if sprt.is_some_and(|s| s.get_str("state").is_ok_and(|st| !st.is_empty())) {
            e.add(p, "unfinished but its SPRT is decided");
        }
    }
    if let Some(r) = results
        && r != sum
    {
        e.add(
            "runs.results",
            format!("is not the sum of the tasks' stats ({sum:?})"),
        );
    }
    for (k, want) in [
        ("cores", cores),
        ("workers", workers),
        ("committed_games", committed),
        ("total_games", total),
    ] {
        if let Some(have) = d.get(k).and_then(int)
            && have != want
        {
            e.add(&format!("runs.{k}"), format!("{have}, recomputed {want}"));
        }
    }
    // The flags (rule 11).
    let state = if finished != Some(true) || args.is_some_and(|a| a.contains_key("spsa")) {
        String::new()
    } else if let Some(s) = sprt {
        s.get_str("state").unwrap_or_default().to_string()
    } else if let Some((_, pt)) = results {
        let l = los(&pt);
        if l < 0.05 {
            "rejected".into()
        } else if l > 0.95 {
            "accepted".into()
        } else {
            String::new()
        }
    } else {
        String::new()
    };
    let wins_gt_losses = results.is_some_and(|(c, _)| c[0] > c[1]);
    let flags = match state.as_str() {
        "accepted" => (true, false),
        "rejected" if wins_gt_losses => (false, true),
        _ => (false, false),
    };
    if let (Some(g), Some(y)) = (green, yellow)
        && (g, y) != flags
    {
        e.add(
            p,
            format!(
                "(is_green, is_yellow) = ({g}, {y}), computed {flags:?} (state {state:?}, results {results:?}, LOS {:?})",
                results.map(|(_, pt)| los(&pt))
            ),
        );
    }
}

fn run_args(a: &Document, ctx: &Ctx, e: &mut Errs) {
    let p = "runs.args";
    strict(
        a,
        p,
        &[
            "base_tag",
            "new_tag",
            "base_nets",
            "new_nets",
            "num_games",
            "tc",
            "new_tc",
            "book",
            "book_depth",
            "threads",
            "resolved_base",
            "resolved_new",
            "msg_base",
            "msg_new",
            "base_options",
            "new_options",
            "info",
            "base_signature",
            "new_signature",
            "username",
            "tests_repo",
            "auto_purge",
            "throughput",
            "itp",
            "priority",
            "adjudication",
        ],
        &["master_repo", "arch_filter", "compiler", "sprt", "spsa"],
        e,
    );
    for k in [
        "base_tag",
        "new_tag",
        "msg_base",
        "msg_new",
        "info",
        "arch_filter",
    ] {
        field(a, p, k, e, t_str);
    }
    for k in ["base_nets", "new_nets"] {
        field(a, p, k, e, |v| {
            t_array(None, t_match(&NET_NAME, "a net name"))(v)?;
            is(unique(v), "unique")
        });
    }
    field(a, p, "num_games", e, t_even);
    field(a, p, "tc", e, t_match(&TC, "a time control"));
    field(a, p, "new_tc", e, t_match(&TC, "a time control"));
    field(a, p, "book", e, t_book);
    field(
        a,
        p,
        "book_depth",
        e,
        t_match(&STR_INT, "a positive integer string"),
    );
    field(a, p, "threads", e, t_suint);
    field(a, p, "resolved_base", e, t_match(&SHA, "a sha"));
    field(a, p, "resolved_new", e, t_match(&SHA, "a sha"));
    field(
        a,
        p,
        "base_options",
        e,
        t_match(&OPTION_LIST, "an option list"),
    );
    field(
        a,
        p,
        "new_options",
        e,
        t_match(&OPTION_LIST, "an option list"),
    );
    field(
        a,
        p,
        "base_signature",
        e,
        t_match(&STR_INT, "a bench string"),
    );
    field(
        a,
        p,
        "new_signature",
        e,
        t_match(&STR_INT, "a bench string"),
    );
    field(a, p, "username", e, t_username(ctx));
    field(
        a,
        p,
        "tests_repo",
        e,
        t_match(&GITHUB_REPO, "a GitHub repository"),
    );
    field(
        a,
        p,
        "master_repo",
        e,
        t_match(&GITHUB_REPO, "a GitHub repository"),
    );
    field(a, p, "auto_purge", e, t_bool);
    field(a, p, "adjudication", e, t_bool);
    field(a, p, "throughput", e, t_unumber);
    field(a, p, "itp", e, t_unumber);
    field(a, p, "priority", e, t_number);
    field(a, p, "compiler", e, t_one_of(&["clang++", "g++"]));
    if a.contains_key("sprt") && a.contains_key("spsa") {
        e.add(p, "both sprt and spsa");
    }
    if let Some(s) = a.get("sprt") {
        let sp = "runs.args.sprt";
        let Bson::Document(s) = s else {
            return e.add(sp, "not an object");
        };
        strict(
            s,
            sp,
            &[
                "alpha",
                "beta",
                "elo0",
                "elo1",
                "elo_model",
                "state",
                "llr",
                "batch_size",
                "lower_bound",
                "upper_bound",
            ],
            &["lost_samples", "illegal_update", "overshoot"],
            e,
        );
        field(s, sp, "alpha", e, t_literal_f(0.05));
        field(s, sp, "beta", e, t_literal_f(0.05));
        field(s, sp, "elo0", e, t_number);
        field(s, sp, "elo1", e, t_number);
        field(s, sp, "elo_model", e, t_one_of(&["normalized"]));
        field(s, sp, "state", e, t_one_of(&["", "accepted", "rejected"]));
        field(s, sp, "llr", e, t_number);
        field(s, sp, "batch_size", e, t_suint);
        field(s, sp, "lower_bound", e, t_literal_f(-(19f64.ln())));
        field(s, sp, "upper_bound", e, t_literal_f(19f64.ln()));
        field(s, sp, "lost_samples", e, t_uint);
        field(s, sp, "illegal_update", e, t_uint);
        if s.contains_key("overshoot") == s.contains_key("lost_samples") {
            e.add(sp, "exactly one of overshoot and lost_samples");
        }
        if let Some(o) = s.get("overshoot") {
            let op = "runs.args.sprt.overshoot";
            match o {
                Bson::Document(o) => {
                    strict(
                        o,
                        op,
                        &[
                            "last_update",
                            "skipped_updates",
                            "ref0",
                            "m0",
                            "sq0",
                            "ref1",
                            "m1",
                            "sq1",
                        ],
                        &[],
                        e,
                    );
                    field(o, op, "last_update", e, t_uint);
                    field(o, op, "skipped_updates", e, t_uint);
                    for k in ["ref0", "m0", "ref1", "m1"] {
                        field(o, op, k, e, t_number);
                    }
                    field(o, op, "sq0", e, t_unumber);
                    field(o, op, "sq1", e, t_unumber);
                }
                other => e.add(op, format!("not an object ({other})")),
            }
        }
    }
    if let Some(s) = a.get("spsa") {
        let sp = "runs.args.spsa";
        let Bson::Document(s) = s else {
            return e.add(sp, "not an object");
        };
        strict(
            s,
            sp,
            &[
                "A",
                "alpha",
                "gamma",
                "raw_params",
                "iter",
                "num_iter",
                "params",
            ],
            &["algorithm", "param_history"],
            e,
        );
        field(s, sp, "algorithm", e, t_one_of(&["classic"]));
        for k in ["A", "alpha", "gamma"] {
            field(s, sp, k, e, t_unumber);
        }
        field(s, sp, "raw_params", e, t_str);
        field(s, sp, "iter", e, t_uint);
        field(s, sp, "num_iter", e, t_uint);
        if let Ok(params) = s.get_array("params") {
            if params.is_empty() {
                e.add(&format!("{sp}.params"), "empty");
            }
            for (i, x) in params.iter().enumerate() {
                let pp = format!("{sp}.params[{i}]");
                let Bson::Document(x) = x else {
                    e.add(&pp, "not an object");
                    continue;
                };
                strict(
                    x,
                    &pp,
                    &[
                        "name", "start", "min", "max", "c_end", "r_end", "c", "a_end", "a", "theta",
                    ],
                    &[],
                    e,
                );
                field(x, &pp, "name", e, t_str);
                for k in ["start", "min", "max", "theta"] {
                    field(x, &pp, k, e, t_number);
                }
                for k in ["c_end", "c"] {
                    field(x, &pp, k, e, t_sunumber);
                }
                for k in ["r_end", "a_end", "a"] {
                    field(x, &pp, k, e, t_unumber);
                }
            }
        } else if s.contains_key("params") {
            e.add(&format!("{sp}.params"), "not a list");
        }
        if let Some(h) = s.get("param_history") {
            let hp = format!("{sp}.param_history");
            let Bson::Array(rows) = h else {
                return e.add(&hp, "not a list");
            };
            for (i, row) in rows.iter().enumerate() {
                let Bson::Array(row) = row else {
                    e.add(&format!("{hp}[{i}]"), "not a list");
                    continue;
                };
                for (j, x) in row.iter().enumerate() {
                    let xp = format!("{hp}[{i}][{j}]");
                    let Bson::Document(x) = x else {
                        e.add(&xp, "not an object");
                        continue;
                    };
                    strict(x, &xp, &["theta", "R", "c"], &[], e);
                    field(x, &xp, "theta", e, t_number);
                    field(x, &xp, "R", e, t_unumber);
                    field(x, &xp, "c", e, t_unumber);
                }
            }
        }
    }
}

/// Every problem of every document of Fishtest's collections in the database at `uri`, each
/// with the document's collection and `_id`.
pub async fn check_database(uri: &str) -> Vec<String> {
    let legacy: Vec<String> = crate::mongo::docs(uri, "kvstore", doc! {"_id": "legacy_usernames"})
        .await
        .first()
        .and_then(|d| d.get_array("value").ok().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    let ctx = Ctx { legacy };
    let mut all = Vec::new();
    for coll in SHARED {
        for d in crate::mongo::docs(uri, coll, doc! {}).await {
            let id = d
                .get("_id")
                .map_or_else(|| "?".to_string(), |i| i.to_string());
            for problem in check(coll, &d, &ctx) {
                all.push(format!("{coll} {id}: {problem}"));
            }
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dump(name: &str) -> Vec<Document> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/fishtest-db")
            .join(format!("{name}.json"));
        shoal::dump::read_file(&path).expect("dump file")
    }

    fn ctx() -> Ctx {
        Ctx::default()
    }

    /// Fishtest's own sample database passes (collections.md: every fixture document does).
    #[test]
    fn fishtests_own_documents_pass() {
        for coll in SHARED {
            for d in dump(coll) {
                let problems = check(coll, &d, &ctx());
                assert!(problems.is_empty(), "{coll}: {problems:?}\n{d}");
            }
        }
    }

    /// Edits each copy so that Fishtest's schema refuses it; the checker must say so.
    fn refused(coll: &str, pick: usize, edit: impl FnOnce(&mut Document), want: &str) {
        let mut d = dump(coll).swap_remove(pick);
        edit(&mut d);
        let problems = check(coll, &d, &ctx());
        assert!(
            problems.iter().any(|p| p.contains(want)),
            "{coll}: wanted {want:?}, got {problems:?}"
        );
    }

    fn first_of(coll: &str, f: impl Fn(&Document) -> bool) -> usize {
        dump(coll).iter().position(f).expect("a fixture document")
    }

    #[test]
    fn edited_documents_are_refused() {
        refused(
            "nns",
            0,
            |d| {
                d.insert("time", bson::DateTime::now());
            },
            "nns.time: is not in the schema",
        );
        refused(
            "nns",
            0,
            |d| {
                d.insert("downloads", 3.0);
            },
            "nns.downloads: not an int",
        );
        refused(
            "nns",
            0,
            |d| {
                d.remove("first_test");
                d.remove("last_test");
                d.insert("is_master", true);
            },
            "without both test records",
        );
        refused(
            "nns",
            0,
            |d| {
                d.insert("is_master", false);
            },
            "nns.is_master: not true",
        );
        let dead = first_of("actions", |a| a.get_str("action").ok() == Some("dead_task"));
        refused(
            "actions",
            dead,
            |d| {
                d.insert("message", "gone");
            },
            "actions[dead_task].message: is not in the schema",
        );
        refused(
            "actions",
            0,
            |d| {
                d.insert("action", "api_token");
            },
            "not a kind Fishtest knows",
        );
        refused(
            "actions",
            0,
            |d| {
                d.insert("time", bson::DateTime::now());
            },
            ".time: not a number",
        );
        let stop = first_of("actions", |a| {
            a.get_str("action").ok() == Some("stop_run") && !a.contains_key("worker")
        });
        refused(
            "actions",
            stop,
            |d| {
                d.insert("task_id", 3);
            },
            "both or neither",
        );
        refused(
            "kvstore",
            0,
            |d| {
                d.remove("value");
            },
            "kvstore.value: is missing",
        );
        refused(
            "kvstore",
            0,
            |d| {
                d.insert("kind", "session");
            },
            "kvstore.kind: is not in the schema",
        );
        refused(
            "users",
            0,
            |d| {
                d.insert("password_hash", "$argon2id$x");
            },
            "users.password_hash: is not in the schema",
        );
        refused(
            "users",
            0,
            |d| {
                d.insert("machine_limit", 16.0);
            },
            "users.machine_limit: not an int",
        );
        refused(
            "users",
            0,
            |d| {
                d.insert("email", "a@b.test");
            },
            "users.email",
        );
        refused(
            "workers",
            0,
            |d| {
                d.insert("message", "x".repeat(501));
            },
            "workers.message",
        );
        refused(
            "pgns",
            0,
            |d| {
                d.insert("size", 1);
            },
            "size is not the byte length",
        );
        refused(
            "runs",
            0,
            |d| {
                d.insert("stats", doc! {});
            },
            "runs.stats: is not in the schema",
        );
        refused(
            "runs",
            0,
            |d| {
                d.insert("_id", "6a8c4e6022dfea1c957409db");
            },
            "runs._id: not an ObjectId",
        );
        refused(
            "runs",
            0,
            |d| {
                d.insert("total_games", 12345);
            },
            "runs.total_games",
        );
        let with_tasks = first_of("runs", |r| {
            r.get_array("tasks").is_ok_and(|t| !t.is_empty())
        });
        refused(
            "runs",
            with_tasks,
            |d| {
                let tasks = d.get_array_mut("tasks").expect("tasks");
                let Bson::Document(t) = &mut tasks[0] else {
                    panic!()
                };
                t.get_document_mut("worker_info")
                    .expect("wi")
                    .insert("host_url", "https://x");
            },
            "worker_info.host_url: is not in the schema",
        );
        refused(
            "runs",
            with_tasks,
            |d| {
                let tasks = d.get_array_mut("tasks").expect("tasks");
                let Bson::Document(t) = &mut tasks[0] else {
                    panic!()
                };
                t.insert("bad", false);
            },
            ".bad: not true",
        );
        let finished = first_of("runs", |r| r.get_bool("finished").ok() == Some(true));
        refused(
            "runs",
            finished,
            |d| {
                d.insert("nps", 12.5);
            },
            "finished with nps",
        );
        refused(
            "runs",
            finished,
            |d| {
                let g = d.get_bool("is_green").expect("green");
                d.insert("is_green", !g);
            },
            "is_green",
        );
        refused(
            "runs",
            0,
            |d| {
                d.get_document_mut("args")
                    .expect("args")
                    .insert("book_depth", 8);
            },
            "runs.args.book_depth",
        );
        let sprt = first_of("runs", |r| {
            r.get_document("args").is_ok_and(|a| a.contains_key("sprt"))
        });
        refused(
            "runs",
            sprt,
            |d| {
                let s = d
                    .get_document_mut("args")
                    .expect("args")
                    .get_document_mut("sprt")
                    .expect("sprt");
                s.insert("lost_samples", 0);
                s.insert("overshoot", doc! {"last_update": 0, "skipped_updates": 0, "ref0": 0, "m0": 0, "sq0": 0, "ref1": 0, "m1": 0, "sq1": 0});
            },
            "exactly one of overshoot and lost_samples",
        );
    }
}
