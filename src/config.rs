//! Settings: `settings.toml` + `SHOAL_<KEY>` environment overrides -> a validated, typed [`Config`].
//!
//! Owns: the list of knobs, their defaults, parsing and every validation rule. An invalid value
//! stops start-up with a [`ConfigError`] that names the key and the rule it broke.
//! Must not: open files other than the settings file, touch the network, or start anything.
//! The data directory and the secret file are handled by `app` at start-up.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
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
    "pgn_retention_days",
    "secret",
    "log",
    "debug_endpoints",
    "periodic_jobs",
    "limits_wait_s",
    "limits",
];

/// Which `Store` implementation backs the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    Sqlite,
    Mongodb,
}

/// SQLite's `synchronous` pragma. `normal` (with WAL) survives a killed process; `full` also
/// survives a power cut at the cost of one fsync per commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SqliteSync {
    Normal,
    Full,
}

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
    shutdown_grace_s: f64,
    pub books_file: Option<PathBuf>,
    /// Where `/api/nn/<name>` sends workers: a 302 to `<nn_url>/nn/<name>` (Fishtest's
    /// `FISHTEST_NN_URL`); unset, to this server's own `/nn/<name>`.
    pub nn_url: Option<String>,
    /// The net directory (Fishtest's layout, `nn-<12 hex>.nnue.gz`); unset, `<data_dir>/nn`.
    /// Read it through [`Config::nets_dir`].
    pub nn_dir: Option<PathBuf>,
    /// The address people use to reach the server (`https://…` makes the session cookie
    /// `Secure`).
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
    /// PGNs of runs finished more than this many days ago are deleted (0: kept for ever).
    /// Read through [`Config::pgn_retention_days`].
    pgn_retention_days: i64,
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
            pgn_retention_days: 0,
            secret: None,
            log: "info".into(),
            debug_endpoints: false,
            periodic_jobs: true,
            limits_wait_s: 10.0,
            limits: Vec::new(),
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

/// Keys whose values no message may quote.
/// The default `admission_queue`: queue mode, sized from the official worker's 30 s HTTP
/// timeout and the scheduler's service rate. At the slowest rate measured for a saturated
/// 2-core server (about 1,000 request_task/s, before batching) a full queue drains in 20 s,
/// inside the timeout; at the batched rate (BENCHMARKS.md) in a few seconds. docs/capacity.md
/// explains the choice.
pub const DEFAULT_ADMISSION_QUEUE: usize = 20_000;

const SECRET_KEYS: &[&str] = &["secret", "mongodb_uri"];

/// The longest `pgn_retention_days` (100 years): anything longer is a typo, not a policy.
pub const MAX_PGN_RETENTION_DAYS: i64 = 36_500;

/// A parse error. TOML's messages quote the offending line; when that line sets a secret key,
/// the message names the key and says nothing of the value.
fn parse_error(origin: &str, message: String) -> ConfigError {
    let secret_key = message.lines().find_map(|line| {
        // Quoted lines look like ` 3 | key = value`.
        let (gutter, content) = line.split_once('|')?;
        if !gutter.trim().chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let content = content.trim_start().trim_start_matches(['"', '\'']);
        SECRET_KEYS.iter().copied().find(|key| {
            content.strip_prefix(key).is_some_and(|rest| {
                rest.trim_start_matches(['"', '\''])
                    .trim_start()
                    .starts_with('=')
            })
        })
    });
    let message = match secret_key {
        Some(key) => {
            let header = message.lines().next().unwrap_or_default();
            format!("{header}\ninvalid value for `{key}` (not shown: the setting is secret)")
        }
        None => message,
    };
    ConfigError::Parse {
        path: origin.to_string(),
        message,
    }
}

fn invalid(key: &'static str, rule: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        rule: rule.into(),
    }
}

impl Config {
    /// Loads the settings: `path` if given (it must exist), else `./settings.toml` if present,
    /// else the built-in defaults; then applies `SHOAL_*` overrides from `env`; then validates.
    pub fn load(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let (text, origin) = match path {
            Some(p) => (
                Some(
                    std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                        path: p.to_path_buf(),
                        source,
                    })?,
                ),
                p.display().to_string(),
            ),
            None => {
                let default = Path::new("settings.toml");
                match std::fs::read_to_string(default) {
                    Ok(t) => (Some(t), "settings.toml".to_string()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        (None, "defaults".to_string())
                    }
                    Err(source) => {
                        return Err(ConfigError::Read {
                            path: default.to_path_buf(),
                            source,
                        });
                    }
                }
            }
        };
        Self::from_sources(text.as_deref(), &origin, env)
    }

    /// Parses settings text (or nothing) plus environment overrides, then validates.
    pub fn from_sources(
        text: Option<&str>,
        origin: &str,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let mut table: toml::Table = match text {
            Some(t) => t
                .parse()
                .map_err(|e: toml::de::Error| parse_error(origin, e.to_string()))?,
            None => toml::Table::new(),
        };
        for (name, value) in env {
            let Some(rest) = name.strip_prefix("SHOAL_") else {
                continue;
            };
            let key = rest.to_ascii_lowercase();
            // Only our own keys: other SHOAL_* variables (test knobs, tools) are not settings.
            if !KEYS.contains(&key.as_str()) {
                continue;
            }
            if value.is_empty() {
                // An empty override unsets an optional key (e.g. SHOAL_PRIMARY_PORT=).
                table.remove(&key);
                continue;
            }
            table.insert(key, env_value(&value));
        }
        // Round-trip through text so that type errors quote the offending `key = value` line,
        // whether the value came from the file or from the environment.
        let merged = toml::to_string(&table).map_err(|e| parse_error(origin, e.to_string()))?;
        let config: Config = toml::from_str(&merged)
            .map_err(|e| parse_error(origin, e.to_string().trim().to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// Every rule a value must satisfy. Each failure names its key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.host != "localhost" && self.host.parse::<IpAddr>().is_err() {
            return Err(invalid(
                "host",
                format!("`{}` is not an IP address or `localhost`", self.host),
            ));
        }
        if self.data_dir.as_os_str().is_empty() {
            return Err(invalid("data_dir", "must not be empty"));
        }
        if self.store == StoreKind::Mongodb && self.mongodb_uri.expose().trim().is_empty() {
            return Err(invalid(
                "mongodb_uri",
                "must be set when store = \"mongodb\"",
            ));
        }
        if !(3..=100_000).contains(&self.threadpool_tokens) {
            // Two tokens are reserved (request_task slot holder, journal writer): at least one
            // must remain for everything else.
            return Err(invalid("threadpool_tokens", "must be between 3 and 100000"));
        }
        if !(1..=100_000).contains(&self.task_semaphore_size) {
            return Err(invalid(
                "task_semaphore_size",
                "must be between 1 and 100000",
            ));
        }
        if self.admission_queue > 10_000_000 {
            return Err(invalid("admission_queue", "must be at most 10000000"));
        }
        if !(1..=10_000).contains(&self.request_task_batch) {
            return Err(invalid("request_task_batch", "must be between 1 and 10000"));
        }
        if !self.admission_timeout_s.is_finite()
            || self.admission_timeout_s <= 0.0
            || self.admission_timeout_s > 3600.0
        {
            return Err(invalid(
                "admission_timeout_s",
                "must be a number of seconds in (0, 3600]",
            ));
        }
        if let Some(max) = self.max_concurrent_requests {
            let floor = self.threadpool_tokens + self.gate_capacity();
            if max < floor {
                return Err(invalid(
                    "max_concurrent_requests",
                    format!(
                        "must be at least threadpool_tokens + gate capacity = {} + {} = {floor} \
                         (a lower cap would make requests wait at the front door while tokens are free)",
                        self.threadpool_tokens,
                        self.gate_capacity()
                    ),
                ));
            }
        }
        if self.listen_backlog == 0 {
            return Err(invalid("listen_backlog", "must be at least 1"));
        }
        if let Some(n) = self.worker_threads
            && !(1..=1024).contains(&n)
        {
            return Err(invalid("worker_threads", "must be between 1 and 1024"));
        }
        if self.api_body_limit_bytes < 1024 {
            return Err(invalid("api_body_limit_bytes", "must be at least 1024"));
        }
        if self.pgn_body_limit_bytes < 1024 {
            return Err(invalid("pgn_body_limit_bytes", "must be at least 1024"));
        }
        if self.pgn_inflated_limit_bytes < 1024 {
            return Err(invalid("pgn_inflated_limit_bytes", "must be at least 1024"));
        }
        if !(1024..=1 << 40).contains(&self.nn_upload_limit_bytes) {
            return Err(invalid(
                "nn_upload_limit_bytes",
                "must be between 1024 and 1099511627776 (1 TiB)",
            ));
        }
        if !(1..=10_000).contains(&self.pgn_upload_concurrency) {
            return Err(invalid(
                "pgn_upload_concurrency",
                "must be between 1 and 10000",
            ));
        }
        for (key, value) in [
            ("header_read_timeout_s", self.header_read_timeout_s),
            ("body_read_timeout_s", self.body_read_timeout_s),
            ("keepalive_timeout_s", self.keepalive_timeout_s),
            ("auth_throttle_window_s", self.auth_throttle_window_s),
        ] {
            if !value.is_finite() || !(0.1..=86_400.0).contains(&value) {
                return Err(invalid(key, "must be a number of seconds in [0.1, 86400]"));
            }
        }
        for (key, value) in [
            ("auth_throttle_per_user_ip", self.auth_throttle_per_user_ip),
            ("auth_throttle_per_ip", self.auth_throttle_per_ip),
            ("auth_throttle_per_user", self.auth_throttle_per_user),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be at least 1"));
            }
        }
        if !self.shutdown_grace_s.is_finite()
            || self.shutdown_grace_s < 0.0
            || self.shutdown_grace_s > 3600.0
        {
            return Err(invalid(
                "shutdown_grace_s",
                "must be a number of seconds in [0, 3600]",
            ));
        }
        if let Some(bad) = self
            .trusted_proxies
            .iter()
            .find(|p| p.parse::<IpAddr>().is_err())
        {
            return Err(invalid(
                "trusted_proxies",
                format!("`{bad}` is not an IP address"),
            ));
        }
        if !self.dead_task_timeout_s.is_finite() || self.dead_task_timeout_s < 1.0 {
            return Err(invalid("dead_task_timeout_s", "must be at least 1 second"));
        }
        if !self.scavenge_interval_s.is_finite()
            || !(0.1..=3600.0).contains(&self.scavenge_interval_s)
        {
            return Err(invalid(
                "scavenge_interval_s",
                "must be a number of seconds in [0.1, 3600]",
            ));
        }
        if !self.limits_wait_s.is_finite() || !(0.0..=25.0).contains(&self.limits_wait_s) {
            return Err(invalid(
                "limits_wait_s",
                "must be between 0 and 25 (inside the worker's 30 s timeout)",
            ));
        }
        crate::limits::LimitDef::from_specs(&self.limits).map_err(|e| invalid("limits", e))?;
        if self.flush_runs_per_tick == 0 {
            return Err(invalid("flush_runs_per_tick", "must be at least 1"));
        }
        if !self.cache_keep_s.is_finite() || !(0.0..=86_400.0).contains(&self.cache_keep_s) {
            return Err(invalid(
                "cache_keep_s",
                "must be a number of seconds in [0, 86400]",
            ));
        }
        if !self.periodic_jobs && !self.debug_endpoints {
            return Err(invalid(
                "periodic_jobs",
                "may be false only with debug_endpoints = true (tests run the jobs through \
                 /debug/job/{name}); a server without its jobs never writes runs behind or \
                 scavenges dead tasks",
            ));
        }
        if !(0..=MAX_PGN_RETENTION_DAYS).contains(&self.pgn_retention_days) {
            return Err(invalid(
                "pgn_retention_days",
                format!(
                    "must be 0 (keep every PGN) or a number of days from 1 to \
                     {MAX_PGN_RETENTION_DAYS}, not {}",
                    self.pgn_retention_days
                ),
            ));
        }
        if let Some(url) = &self.nn_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(invalid("nn_url", "must start with http:// or https://"));
        }
        if let Some(url) = &self.public_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(invalid("public_url", "must start with http:// or https://"));
        }
        if self.page_render_concurrency > 10_000 {
            return Err(invalid(
                "page_render_concurrency",
                "must be at most 10000 (0: one per CPU core)",
            ));
        }
        if !(0..=19).contains(&self.page_render_nice) {
            return Err(invalid(
                "page_render_nice",
                "must be between 0 (the default priority) and 19 (the lowest)",
            ));
        }
        if let Some(path) = &self.books_file
            && path.as_os_str().is_empty()
        {
            return Err(invalid("books_file", "must not be empty when set"));
        }
        if let Some(path) = &self.nn_dir
            && path.as_os_str().is_empty()
        {
            return Err(invalid("nn_dir", "must not be empty when set"));
        }
        if let Some(secret) = &self.secret
            && secret.expose().len() < 32
        {
            return Err(invalid(
                "secret",
                "must be at least 32 characters (leave it unset to generate one)",
            ));
        }
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log) {
            return Err(invalid("log", format!("not a valid log filter: {e}")));
        }
        Ok(())
    }

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

    /// `limits_wait_s`.
    pub fn limits_wait(&self) -> Duration {
        seconds(self.limits_wait_s)
    }

    /// The limits: the built-ins, then `[[limits]]` in order (validated at load).
    pub fn limit_defs(&self) -> Vec<crate::limits::LimitDef> {
        let mut defs =
            crate::limits::LimitDef::builtins(u64::from(crate::accounts::DEFAULT_MACHINE_LIMIT));
        defs.extend(crate::limits::LimitDef::from_specs(&self.limits).unwrap_or_default());
        defs
    }

    /// `pgn_retention_days`: `None` when PGN retention is off (0).
    pub fn pgn_retention_days(&self) -> Option<u32> {
        u32::try_from(self.pgn_retention_days)
            .ok()
            .filter(|d| *d > 0)
    }

    /// `cache_keep_s`.
    pub fn cache_keep(&self) -> Duration {
        seconds(self.cache_keep_s)
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

/// Interprets an environment value as a TOML value when it parses as one (numbers, booleans,
/// quoted strings), and as a bare string otherwise (`SHOAL_HOST=0.0.0.0`, `SHOAL_LOG=debug`).
fn env_value(raw: &str) -> toml::Value {
    let doc = format!("v = {raw}");
    match doc.parse::<toml::Table>() {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(raw.to_string())),
        Err(_) => toml::Value::String(raw.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::REDACTED;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn err_text(text: &str, e: &[(&str, &str)]) -> String {
        Config::from_sources(Some(text), "test.toml", env(e))
            .expect_err("config should be refused")
            .to_string()
    }

    #[test]
    fn shipped_settings_file_lists_every_key_with_its_default() {
        let text = include_str!("../settings.toml");
        let table: toml::Table = text.parse().expect("settings.toml parses");
        let config = Config::from_sources(Some(text), "settings.toml", Vec::new())
            .expect("settings.toml is valid");
        // Optional keys are documented as comments; the rest must be present.
        for key in KEYS {
            let listed = table.contains_key(*key) || text.contains(&format!("# {key} ="));
            assert!(listed, "settings.toml does not list `{key}`");
        }
        assert_eq!(config, Config::default(), "settings.toml defaults drift");
        let serialized = toml::to_string(&Config::default()).expect("serializes");
        let fields: toml::Table = serialized.parse().expect("parses");
        for field in fields.keys() {
            assert!(KEYS.contains(&field.as_str()), "KEYS misses `{field}`");
        }
    }

    #[test]
    fn env_overrides_file_and_ignores_foreign_variables() {
        let c = Config::from_sources(
            Some("port = 9000\nlog = \"warn\""),
            "t",
            env(&[
                ("SHOAL_PORT", "9100"),
                ("SHOAL_HOST", "0.0.0.0"),
                ("SHOAL_ADMISSION_QUEUE", "50"),
                ("SHOAL_STATS_CORPUS", "/tmp/x.json"),
                ("OTHER", "1"),
            ]),
        )
        .expect("valid");
        assert_eq!(c.port, 9100);
        assert_eq!(c.host, "0.0.0.0");
        assert_eq!(c.admission_queue, 50);
        assert_eq!(c.log, "warn");
    }

    #[test]
    fn empty_env_value_unsets_optional_key() {
        let c = Config::from_sources(
            Some("primary_port = 8000"),
            "t",
            env(&[("SHOAL_PRIMARY_PORT", "")]),
        )
        .expect("valid");
        assert_eq!(c.primary_port, None);
    }

    #[test]
    fn primary_rule() {
        let mut c = Config::default();
        assert!(c.is_primary());
        c.primary_port = Some(8000);
        assert!(c.is_primary());
        c.primary_port = Some(8001);
        assert!(!c.is_primary());
    }

    #[test]
    fn unknown_key_is_named() {
        assert!(err_text("threadpool_tokenz = 3", &[]).contains("threadpool_tokenz"));
    }

    #[test]
    fn wrong_type_is_named() {
        let e = err_text("port = \"eighty\"", &[]);
        assert!(e.contains("port"), "{e}");
        let e = err_text("", &[("SHOAL_THREADPOOL_TOKENS", "many")]);
        assert!(e.contains("threadpool_tokens"), "{e}");
    }

    #[test]
    fn each_rule_names_its_key() {
        let cases: &[(&str, &str)] = &[
            ("host = \"not a host\"", "host"),
            ("data_dir = \"\"", "data_dir"),
            ("store = \"mongodb\"\nmongodb_uri = \" \"", "mongodb_uri"),
            ("store = \"postgres\"", "store"),
            ("threadpool_tokens = 0", "threadpool_tokens"),
            ("task_semaphore_size = 0", "task_semaphore_size"),
            ("admission_queue = 20000000", "admission_queue"),
            ("admission_timeout_s = 0", "admission_timeout_s"),
            ("admission_timeout_s = -1.0", "admission_timeout_s"),
            ("max_concurrent_requests = 204", "max_concurrent_requests"),
            ("listen_backlog = 0", "listen_backlog"),
            ("worker_threads = 0", "worker_threads"),
            ("api_body_limit_bytes = 10", "api_body_limit_bytes"),
            ("pgn_body_limit_bytes = 10", "pgn_body_limit_bytes"),
            ("shutdown_grace_s = -2", "shutdown_grace_s"),
            ("trusted_proxies = [\"proxy\"]", "trusted_proxies"),
            ("dead_task_timeout_s = 0", "dead_task_timeout_s"),
            ("flush_runs_per_tick = 0", "flush_runs_per_tick"),
            ("cache_keep_s = -1", "cache_keep_s"),
            ("cache_keep_s = 86401", "cache_keep_s"),
            ("periodic_jobs = false", "periodic_jobs"),
            ("pgn_retention_days = -1", "pgn_retention_days"),
            ("pgn_retention_days = 36501", "pgn_retention_days"),
            ("pgn_retention_days = 1.5", "pgn_retention_days"),
            ("scavenge_interval_s = 0", "scavenge_interval_s"),
            ("books_file = \"\"", "books_file"),
            ("nn_dir = \"\"", "nn_dir"),
            ("nn_url = \"ftp://x\"", "nn_url"),
            ("public_url = \"example.org\"", "public_url"),
            ("secret = \"short\"", "secret"),
            ("log = \"info,[[\"", "log"),
            ("sqlite_synchronous = \"off\"", "sqlite_synchronous"),
            ("port = 70000", "port"),
        ];
        for (text, key) in cases {
            let e = err_text(text, &[]);
            assert!(
                e.contains(key),
                "`{text}` gave `{e}`, which does not name `{key}`"
            );
        }
    }

    #[test]
    fn secrets_stay_out_of_debug_printout_and_errors() {
        let secret = "s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t";
        let c = Config::from_sources(
            Some("mongodb_uri = \"mongodb://alice:pa55word@db:27017/ft\""),
            "t",
            env(&[("SHOAL_SECRET", secret)]),
        )
        .expect("valid");
        assert_eq!(c.secret.as_ref().map(Secret::expose), Some(secret));
        assert_eq!(
            c.mongodb_uri.expose(),
            "mongodb://alice:pa55word@db:27017/ft"
        );
        let debug = format!("{c:?}");
        let printed = toml::to_string(&c).expect("serializes");
        for shown in [&debug, &printed] {
            assert!(!shown.contains(secret), "{shown}");
            assert!(!shown.contains("pa55word"), "{shown}");
            assert!(shown.contains(REDACTED), "{shown}");
            assert!(
                shown.contains("mongodb://alice:[REDACTED]@db:27017/ft"),
                "{shown}"
            );
        }
        // Type and syntax errors quote the offending line; not when it holds a secret.
        for (text, e, key) in [
            (
                "",
                &[("SHOAL_SECRET", "12345678901234567890123456789.25")][..],
                "secret",
            ),
            (
                "secret = [\"s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t\"]",
                &[],
                "secret",
            ),
            (
                "secret = \"s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t",
                &[],
                "secret",
            ),
            ("mongodb_uri = 987654", &[], "mongodb_uri"),
        ] {
            let message = err_text(text, e);
            assert!(!message.contains("s3cr3t"), "{message}");
            assert!(!message.contains("123456789"), "{message}");
            assert!(!message.contains("987654"), "{message}");
            assert!(
                message.contains(&format!("invalid value for `{key}` (not shown")),
                "{message}"
            );
        }
        // Other keys are still quoted.
        assert!(err_text("port = \"eighty\"", &[]).contains("eighty"));
    }

    #[test]
    fn durations_are_typed() {
        let c = Config::from_sources(
            Some("shutdown_grace_s = 2.5\ndead_task_timeout_s = 90"),
            "t",
            env(&[("SHOAL_SCAVENGE_INTERVAL_S", "0.5")]),
        )
        .expect("valid");
        assert_eq!(c.shutdown_grace(), Duration::from_millis(2500));
        assert_eq!(c.dead_task_timeout(), Duration::from_secs(90));
        assert_eq!(c.scavenge_interval(), Duration::from_millis(500));
        assert_eq!(c.admission_timeout(), Duration::from_secs(5));
        assert_eq!(c.body_read_timeout(), Duration::from_secs(60));
    }

    #[test]
    fn pgn_retention_is_off_by_default_and_read_in_days() {
        assert_eq!(Config::default().pgn_retention_days(), None);
        let c = Config::from_sources(Some("pgn_retention_days = 0"), "t", env(&[])).expect("valid");
        assert_eq!(c.pgn_retention_days(), None);
        let c = Config::from_sources(None, "t", env(&[("SHOAL_PGN_RETENTION_DAYS", "90")]))
            .expect("valid");
        assert_eq!(c.pgn_retention_days(), Some(90));
        let e = err_text("pgn_retention_days = -7", &[]);
        assert!(e.contains("not -7"), "{e}");
    }

    #[test]
    fn max_concurrent_requests_floor_counts_queue() {
        let ok = "threadpool_tokens = 10\ntask_semaphore_size = 5\nadmission_queue = 100\n\
                  max_concurrent_requests = 115";
        Config::from_sources(Some(ok), "t", Vec::new()).expect("exactly the floor is fine");
        let e = err_text(
            "threadpool_tokens = 10\ntask_semaphore_size = 5\nadmission_queue = 100\n\
             max_concurrent_requests = 114",
            &[],
        );
        assert!(e.contains("115"), "{e}");
    }

    #[test]
    fn limits_entries_are_checked_and_named() {
        let text = "[[limits]]\nkind = \"concurrency\"\nkey = \"user\"\nmax = 64\n\n\
                    [[limits]]\nname = \"bad\"\nkind = \"rate\"\nkey = \"user\"\nmax = 5\n";
        let e = err_text(text, &[]);
        assert!(e.contains("`limits`"), "{e}");
        assert!(e.contains("entry 2 (`bad`)"), "{e}");
        let ok = "[[limits]]\nkind = \"concurrency\"\nkey = \"user\"\nmax = 64\n";
        let c = Config::from_sources(Some(ok), "t", env(&[])).expect("valid");
        assert_eq!(c.limit_defs().len(), 4);
        assert!(err_text("limits_wait_s = 30", &[]).contains("limits_wait_s"));
        assert!(
            err_text("[[limits]]\nkind = \"concurrency\"\nkey = \"user\"\n", &[])
                .contains("entry 1: `max` is required")
        );
    }
}
