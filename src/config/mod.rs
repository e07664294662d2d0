//! Settings: `settings.toml` + `SHOAL_<KEY>` environment overrides -> a validated, typed [`Config`].
//!
//! Owns: the list of knobs, their defaults, parsing and every validation rule. An invalid value
//! stops start-up with a [`ConfigError`] that names the key and the rule it broke.
//! Must not: open files other than the settings file, touch the network, or start anything.
//! The data directory and the secret file are handled by `app` at start-up.
//!
//! Files:
//! - `mod.rs`: the keys, [`Config`] with its defaults and derived values, [`ConfigError`].
//! - `load.rs`: the settings file and the environment overrides, parsed.
//! - `validate.rs`: every rule a value must satisfy.
//! - `tests.rs`: unit tests (the shipped `settings.toml` included).

mod groups;
mod load;
mod validate;

pub use groups::{GroupRule, GroupSettings};

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::secret::{Secret, SecretUri};

/// Every top-level key, in the order `settings.toml` lists them. The environment override of a
/// key is `SHOAL_` + the key in upper case. A test checks that this list, the struct and
/// `settings.toml` agree.
pub const KEYS: &[&str] = &[
    "host",
    "port",
    "primary_port",
    "data_dir",
    "store",
    "mongodb_uri",
    "sqlite_synchronous",
    "threadpool_tokens",
    "task_semaphore_size",
    "admission_queue",
    "admission_timeout_s",
    "request_task_batch",
    "max_concurrent_requests",
    "listen_backlog",
    "worker_threads",
    "api_body_limit_bytes",
    "pgn_body_limit_bytes",
    "pgn_inflated_limit_bytes",
    "pgn_upload_concurrency",
    "nn_upload_limit_bytes",
    "header_read_timeout_s",
    "body_read_timeout_s",
    "keepalive_timeout_s",
    "auth_throttle_window_s",
    "auth_throttle_per_user_ip",
    "auth_throttle_per_ip",
    "auth_throttle_per_user",
    "signup_per_ip_per_hour",
    "signup_per_hour",
    "forgot_per_ip_per_hour",
    "signup_min_form_age_s",
    "signup_max_form_age_s",
    "shutdown_grace_s",
    "books_file",
    "nn_url",
    "nn_dir",
    "public_url",
    "page_render_concurrency",
    "page_render_nice",
    "trusted_proxies",
    "dead_task_timeout_s",
    "scavenge_interval_s",
    "flush_runs_per_tick",
    "cache_keep_s",
    "session_recheck_s",
    "pgn_retention_days",
    "pgn_retention_ltc_days",
    "pgn_retention_deleted_days",
    "pgn_retention_unfinished_days",
    "pgn_retention_lookback_days",
    "secret",
    "log",
    "debug_endpoints",
    "periodic_jobs",
    "limits_wait_s",
    "limits",
    "groups",
    "github_api_url",
    "github_raw_url",
    "github_token",
    "github_timeout_s",
    "github_official_repo",
    "smtp_url",
    "smtp_from",
];

/// Which `Store` implementation backs the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    Sqlite,
    Mongodb,
}

impl StoreKind {
    /// The setting's value (`"sqlite"`, `"mongodb"`).
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Sqlite => "sqlite",
            StoreKind::Mongodb => "mongodb",
        }
    }
}

/// A new user's `machine_limit` (Fishtest's 16), and the built-in machine limit's default.
/// The settings hold it because both the accounts and the limits' defaults read it.
pub const DEFAULT_MACHINE_LIMIT: u32 = 16;

/// The `sqlite_synchronous` setting's values belong to the SQLite store, which the settings
/// name (never the reverse).
pub use crate::store::sqlite::SqliteSync;

/// The validated configuration. Field names are the settings keys.
///
/// Durations are kept as the settings file writes them (seconds, `*_s`) but are private: the
/// rest of the program reads them as [`Duration`]s through the accessors, which validation
/// makes total. The secret and the MongoDB URI (which may carry a password) are wrapped: they
/// never show in `Debug`, in logs or in `shoal check-config` (which prints the serialization).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub host: String,
    pub port: u16,
    pub primary_port: Option<u16>,
    pub data_dir: PathBuf,
    pub store: StoreKind,
    pub mongodb_uri: SecretUri,
    pub sqlite_synchronous: SqliteSync,
    pub threadpool_tokens: usize,
    pub task_semaphore_size: usize,
    pub admission_queue: usize,
    admission_timeout_s: f64,
    /// request_task critical sections the slot holder serves between giving the slot back and
    /// taking it again (see `scheduler::admission::Batches`).
    pub request_task_batch: usize,
    pub max_concurrent_requests: Option<usize>,
    pub listen_backlog: u32,
    pub worker_threads: Option<usize>,
    pub api_body_limit_bytes: usize,
    pub pgn_body_limit_bytes: usize,
    pub pgn_inflated_limit_bytes: u64,
    pub pgn_upload_concurrency: usize,
    /// Largest net a person may upload through `/upload`, in bytes (a net must be smaller).
    pub nn_upload_limit_bytes: u64,
    header_read_timeout_s: f64,
    body_read_timeout_s: f64,
    keepalive_timeout_s: f64,
    auth_throttle_window_s: f64,
    pub auth_throttle_per_user_ip: u32,
    pub auth_throttle_per_ip: u32,
    pub auth_throttle_per_user: u32,
    /// Sign-ups (forms past the CSRF, bot and field checks) per client address per hour, and
    /// for everybody (where a signup that creates nothing is not counted).
    pub signup_per_ip_per_hour: u32,
    pub signup_per_hour: u32,
    /// `/forgot` requests per client address per hour (the built-in `forgot_ip`).
    pub forgot_per_ip_per_hour: u32,
    /// A signup form sent sooner than this after it was shown is answered only once it is
    /// this old (a script waits, a person does not notice); one sent later than
    /// `signup_max_form_age_s` is refused.
    pub signup_min_form_age_s: f64,
    pub signup_max_form_age_s: f64,
    shutdown_grace_s: f64,
    pub books_file: Option<PathBuf>,
    /// Where `/api/nn/<name>` sends workers: a 302 to `<nn_url>/nn/<name>` (Fishtest's
    /// `FISHTEST_NN_URL`); unset, to this server's own `/nn/<name>`.
    pub nn_url: Option<String>,
    /// The net directory (Fishtest's layout, `nn-<12 hex>.nnue.gz`); unset, `<data_dir>/nn`.
    /// Read it through [`Config::nets_dir`].
    pub nn_dir: Option<PathBuf>,
    /// The address people use to reach the server (`https://…` makes the session cookie
    /// `Secure`). The only base of links that leave the server (mail, reset links, the feed);
    /// required with `smtp_url`. Read for links through [`Config::public_base`].
    pub public_url: Option<String>,
    /// Web pages rendered at once (0: one per CPU core); further page requests wait.
    pub page_render_concurrency: usize,
    /// The nice value of the page-render threads (0–19; 0 keeps the default priority).
    pub page_render_nice: i32,
    pub trusted_proxies: Vec<String>,
    dead_task_timeout_s: f64,
    scavenge_interval_s: f64,
    pub flush_runs_per_tick: usize,
    /// How long a finished run stays in the cache after it was last loaded or written (the
    /// `clean_cache` job evicts it then). Read through [`Config::cache_keep`].
    cache_keep_s: f64,
    session_recheck_s: f64,
    /// PGN retention (Fishtest's `purge_pgns.py`), in days since a run's `last_updated` (0:
    /// that class keeps its PGNs): finished short-time-control runs, finished
    /// long-time-control ones, deleted ones, unfinished ones. Read through
    /// [`Config::pgn_retention`].
    pgn_retention_days: i64,
    pgn_retention_ltc_days: i64,
    pgn_retention_deleted_days: i64,
    pgn_retention_unfinished_days: i64,
    /// How many days back a retention pass looks at runs (Fishtest's job: 60; 0: no limit).
    pgn_retention_lookback_days: i64,
    pub secret: Option<Secret>,
    pub log: String,
    pub debug_endpoints: bool,
    /// Whether the primary runs its periodic jobs. `false` only for tests (which then run
    /// each job with `POST /debug/job/{name}`); refused unless `debug_endpoints` is on.
    pub periodic_jobs: bool,
    /// How long a request_task refused only by a full configured limit waits in that key's
    /// queue (0: refuse at once).
    limits_wait_s: f64,
    /// Operator limits (`[[limits]]`, checked by `limits::LimitDef::from_specs`).
    pub limits: Vec<crate::limits::LimitSpec>,
    /// Test groups (`[groups]`): how a group's games are shared among its takes.
    pub groups: GroupSettings,
    /// GitHub's REST API (a stand-in's address in tests).
    pub github_api_url: String,
    /// Where GitHub serves raw files.
    pub github_raw_url: String,
    /// A GitHub token: 5,000 calls an hour instead of 60. A secret: never logged or printed.
    pub github_token: Option<Secret>,
    /// How long one GitHub call may take. Read through [`Config::github`].
    github_timeout_s: f64,
    /// The official repository, `owner/name`: the base of every test, and the root of the
    /// fork network tests repositories must belong to.
    pub github_official_repo: String,
    /// The SMTP relay for password-reset mail (`smtp://host:port`, `?tls=required` for
    /// STARTTLS, `smtps://` for TLS, a user and password in the URL); empty: off (approvers
    /// still issue reset links). A secret: its password is never printed. Needs `public_url`.
    pub smtp_url: SecretUri,
    /// The sender of that mail.
    pub smtp_from: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            host: "127.0.0.1".into(),
            port: 8000,
            primary_port: None,
            data_dir: PathBuf::from("data"),
            store: StoreKind::Sqlite,
            mongodb_uri: SecretUri::new("mongodb://localhost:27017/fishtest_new"),
            sqlite_synchronous: SqliteSync::Normal,
            threadpool_tokens: 200,
            task_semaphore_size: 5,
            admission_queue: DEFAULT_ADMISSION_QUEUE,
            admission_timeout_s: 5.0,
            request_task_batch: 32,
            max_concurrent_requests: None,
            listen_backlog: 16384,
            worker_threads: None,
            api_body_limit_bytes: 1024 * 1024,
            pgn_body_limit_bytes: 32 * 1024 * 1024,
            pgn_inflated_limit_bytes: 512 * 1024 * 1024,
            pgn_upload_concurrency: 4,
            nn_upload_limit_bytes: 200_000_000,
            header_read_timeout_s: 10.0,
            body_read_timeout_s: 60.0,
            keepalive_timeout_s: 30.0,
            auth_throttle_window_s: 300.0,
            auth_throttle_per_user_ip: 10,
            auth_throttle_per_ip: 100,
            auth_throttle_per_user: 100,
            signup_per_ip_per_hour: 10,
            signup_per_hour: 100,
            forgot_per_ip_per_hour: 10,
            signup_min_form_age_s: 3.0,
            signup_max_form_age_s: 21_600.0,
            shutdown_grace_s: 10.0,
            books_file: None,
            nn_url: None,
            nn_dir: None,
            public_url: None,
            page_render_concurrency: 0,
            page_render_nice: 10,
            trusted_proxies: Vec::new(),
            dead_task_timeout_s: 360.0,
            scavenge_interval_s: 60.0,
            flush_runs_per_tick: 8,
            cache_keep_s: 300.0,
            session_recheck_s: 5.0,
            pgn_retention_days: 1,
            pgn_retention_ltc_days: 10,
            pgn_retention_deleted_days: 10,
            pgn_retention_unfinished_days: 50,
            pgn_retention_lookback_days: 60,
            secret: None,
            log: "info".into(),
            debug_endpoints: false,
            periodic_jobs: true,
            limits_wait_s: 10.0,
            limits: Vec::new(),
            groups: GroupSettings::default(),
            github_api_url: "https://api.github.com".into(),
            github_raw_url: "https://raw.githubusercontent.com".into(),
            github_token: None,
            github_timeout_s: 5.0,
            github_official_repo: "official-stockfish/Stockfish".into(),
            smtp_url: SecretUri::new(""),
            smtp_from: "shoal <noreply@localhost>".into(),
        }
    }
}

/// Why the configuration was refused. Every variant names the key at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read settings file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("settings file {path}: {message}")]
    Parse { path: String, message: String },
    #[error("invalid setting `{key}`: {rule}")]
    Invalid { key: &'static str, rule: String },
}

/// The default `admission_queue`: queue mode, sized from the official worker's 30 s HTTP
/// timeout and the scheduler's service rate. At the slowest rate measured for a saturated
/// 2-core server (about 1,000 request_task/s, before batching) a full queue drains in 20 s,
/// inside the timeout; at the batched rate (BENCHMARKS.md) in a few seconds. docs/capacity.md
/// explains the choice.
pub const DEFAULT_ADMISSION_QUEUE: usize = 20_000;

/// The longest PGN retention window (100 years): anything longer is a typo, not a policy.
pub const MAX_PGN_RETENTION_DAYS: i64 = 36_500;

/// PGN retention's windows in days, 0 where a class keeps its PGNs (Fishtest's defaults: 1,
/// 10, 10, 50).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PgnRetentionDays {
    /// Finished, not deleted, short time control (`pgn_retention_days`).
    pub stc: u32,
    /// Finished, not deleted, long time control (`pgn_retention_ltc_days`).
    pub ltc: u32,
    /// Finished and deleted (`pgn_retention_deleted_days`).
    pub deleted: u32,
    /// Not finished (`pgn_retention_unfinished_days`).
    pub unfinished: u32,
    /// Only runs last updated within this many days are looked at
    /// (`pgn_retention_lookback_days`, Fishtest's 60; 0: every run).
    pub lookback: u32,
}

impl Config {
    /// The net directory: `nn_dir`, or `<data_dir>/nn` when it is unset.
    pub fn nets_dir(&self) -> PathBuf {
        self.nn_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("nn"))
    }

    /// An instance is primary when its port equals the primary port, or when no primary port
    /// is configured (Fishtest's rule).
    pub fn is_primary(&self) -> bool {
        self.primary_port.is_none_or(|p| p == self.port)
    }

    /// How many request_task callers the gate admits at once (running + queued).
    pub fn gate_capacity(&self) -> usize {
        self.task_semaphore_size + self.admission_queue
    }

    /// `admission_timeout_s`.
    pub fn admission_timeout(&self) -> Duration {
        seconds(self.admission_timeout_s)
    }

    /// `header_read_timeout_s`.
    pub fn header_read_timeout(&self) -> Duration {
        seconds(self.header_read_timeout_s)
    }

    /// `body_read_timeout_s`.
    pub fn body_read_timeout(&self) -> Duration {
        seconds(self.body_read_timeout_s)
    }

    /// `keepalive_timeout_s`.
    pub fn keepalive_timeout(&self) -> Duration {
        seconds(self.keepalive_timeout_s)
    }

    /// `auth_throttle_window_s`.
    pub fn auth_throttle_window(&self) -> Duration {
        seconds(self.auth_throttle_window_s)
    }

    /// `shutdown_grace_s`.
    /// How many web pages may render at once: the setting, or one per CPU core for 0.
    pub fn page_renders(&self) -> usize {
        match self.page_render_concurrency {
            0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
            n => n,
        }
    }

    pub fn shutdown_grace(&self) -> Duration {
        seconds(self.shutdown_grace_s)
    }

    /// `dead_task_timeout_s`.
    pub fn dead_task_timeout(&self) -> Duration {
        seconds(self.dead_task_timeout_s)
    }

    /// The base of links that leave the server: `public_url` without its trailing `/`;
    /// `None` when unset (a request's `Host` header is never a base: the requester picks it).
    pub fn public_base(&self) -> Option<&str> {
        self.public_url.as_deref().map(|u| u.trim_end_matches('/'))
    }

    /// `signup_min_form_age_s` and `signup_max_form_age_s`.
    pub fn signup_form_ages(&self) -> (Duration, Duration) {
        (
            seconds(self.signup_min_form_age_s),
            seconds(self.signup_max_form_age_s),
        )
    }

    /// `limits_wait_s`.
    pub fn limits_wait(&self) -> Duration {
        seconds(self.limits_wait_s)
    }

    /// The limits: the built-ins, then `[[limits]]` in order (validated at load).
    pub fn limit_defs(&self) -> Vec<crate::limits::LimitDef> {
        let mut defs = crate::limits::LimitDef::builtins(u64::from(DEFAULT_MACHINE_LIMIT));
        defs.extend(crate::limits::LimitDef::signup_builtins(
            u64::from(self.signup_per_ip_per_hour),
            u64::from(self.signup_per_hour),
            Duration::from_secs(3600),
        ));
        defs.push(crate::limits::LimitDef::forgot_builtin(
            u64::from(self.forgot_per_ip_per_hour),
            Duration::from_secs(3600),
        ));
        defs.extend(crate::limits::LimitDef::from_specs(&self.limits).unwrap_or_default());
        defs
    }

    /// PGN retention's windows (validated: each from 0 to [`MAX_PGN_RETENTION_DAYS`]).
    pub fn pgn_retention(&self) -> PgnRetentionDays {
        let days = |d: i64| u32::try_from(d).unwrap_or(0);
        PgnRetentionDays {
            stc: days(self.pgn_retention_days),
            ltc: days(self.pgn_retention_ltc_days),
            deleted: days(self.pgn_retention_deleted_days),
            unfinished: days(self.pgn_retention_unfinished_days),
            lookback: days(self.pgn_retention_lookback_days),
        }
    }

    /// `cache_keep_s`.
    pub fn cache_keep(&self) -> Duration {
        seconds(self.cache_keep_s)
    }

    /// `session_recheck_s` when other instances may share the store (MongoDB, or a
    /// `primary_port` set: a primary with secondaries); `None` for one process on its SQLite
    /// store, whose session table is the truth.
    pub fn session_recheck(&self) -> Option<Duration> {
        (self.store == StoreKind::Mongodb || self.primary_port.is_some())
            .then(|| seconds(self.session_recheck_s))
    }

    /// The GitHub component's settings (`github_*`).
    pub fn github(&self) -> crate::github::GithubConfig {
        crate::github::GithubConfig {
            api_url: self.github_api_url.clone(),
            raw_url: self.github_raw_url.clone(),
            token: self.github_token.clone(),
            timeout: seconds(self.github_timeout_s),
            official_repo: self.github_official_repo.clone(),
        }
    }

    /// `scavenge_interval_s`.
    pub fn scavenge_interval(&self) -> Duration {
        seconds(self.scavenge_interval_s)
    }

    /// tokio's blocking-thread cap: one thread per pool token, plus a few for the runtime's own
    /// blocking needs (file I/O of `tokio::fs`, DNS). Tokens, not threads, bound the work.
    pub fn max_blocking_threads(&self) -> usize {
        self.threadpool_tokens + 8
    }
}

/// A validated number of seconds as a [`Duration`]. Validation refuses what `Duration` cannot
/// hold (negative, NaN, infinite); a value that never went through it (a `Config` deserialized
/// directly) gives zero rather than a panic.
fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests;
