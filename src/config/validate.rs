//! Every rule a setting must satisfy ([`Config::validate`]); each failure names its key.
//!
//! Must not: change a value (a wrong value stops start-up, it is never corrected).

use std::net::IpAddr;

use super::{Config, ConfigError, MAX_PGN_RETENTION_DAYS, StoreKind};

pub(super) fn invalid(key: &'static str, rule: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        rule: rule.into(),
    }
}

/// The placeholder `SHOAL_SECRET` of `deploy/settings/shoal.env.example`, refused as a secret.
const PLACEHOLDER_SECRET: &str = "replace-with-";

impl Config {
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
            ("signup_per_ip_per_hour", self.signup_per_ip_per_hour),
            ("signup_per_hour", self.signup_per_hour),
            ("forgot_per_ip_per_hour", self.forgot_per_ip_per_hour),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be at least 1"));
            }
        }
        // "A few seconds": long enough to stop a script, never long enough to refuse a person.
        if !self.signup_min_form_age_s.is_finite()
            || !(0.0..=3.0).contains(&self.signup_min_form_age_s)
        {
            return Err(invalid(
                "signup_min_form_age_s",
                "must be a number of seconds in [0, 3]",
            ));
        }
        if !self.signup_max_form_age_s.is_finite()
            || !(600.0..=604_800.0).contains(&self.signup_max_form_age_s)
        {
            return Err(invalid(
                "signup_max_form_age_s",
                "must be a number of seconds in [600, 604800]",
            ));
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
        self.groups
            .validate()
            .map_err(|(key, rule)| invalid(key, rule))?;
        if self.flush_runs_per_tick == 0 {
            return Err(invalid("flush_runs_per_tick", "must be at least 1"));
        }
        if !self.cache_keep_s.is_finite() || !(0.0..=86_400.0).contains(&self.cache_keep_s) {
            return Err(invalid(
                "cache_keep_s",
                "must be a number of seconds in [0, 86400]",
            ));
        }
        if !self.session_recheck_s.is_finite() || !(0.0..=3600.0).contains(&self.session_recheck_s)
        {
            return Err(invalid(
                "session_recheck_s",
                "must be a number of seconds in [0, 3600]",
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
        for (key, days) in [
            ("pgn_retention_days", self.pgn_retention_days),
            ("pgn_retention_ltc_days", self.pgn_retention_ltc_days),
            (
                "pgn_retention_deleted_days",
                self.pgn_retention_deleted_days,
            ),
            (
                "pgn_retention_unfinished_days",
                self.pgn_retention_unfinished_days,
            ),
        ] {
            if !(0..=MAX_PGN_RETENTION_DAYS).contains(&days) {
                return Err(invalid(
                    key,
                    format!(
                        "must be 0 (keep these PGNs) or a number of days from 1 to \
                         {MAX_PGN_RETENTION_DAYS}, not {days}"
                    ),
                ));
            }
        }
        let lookback = self.pgn_retention_lookback_days;
        if !(0..=MAX_PGN_RETENTION_DAYS).contains(&lookback) {
            return Err(invalid(
                "pgn_retention_lookback_days",
                format!(
                    "must be 0 (look at every run) or a number of days from 1 to \
                     {MAX_PGN_RETENTION_DAYS}, not {lookback}"
                ),
            ));
        }
        if let Some(url) = &self.nn_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(invalid("nn_url", "must start with http:// or https://"));
        }
        if let Some(url) = &self.public_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(invalid("public_url", "must start with http:// or https://"));
            }
            // Links are made by appending a path: a query, a fragment, a user or a space
            // would end up inside every link (or make it point elsewhere).
            if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(invalid("public_url", "must not contain spaces"));
            }
            match url::Url::parse(url) {
                Err(e) => return Err(invalid("public_url", format!("not a URL: {e}"))),
                Ok(u) if u.query().is_some() || u.fragment().is_some() => {
                    return Err(invalid(
                        "public_url",
                        "must have no query (?…) or fragment (#…): only scheme, host, port \
                         and path",
                    ));
                }
                Ok(u) if !u.username().is_empty() || u.password().is_some() => {
                    return Err(invalid("public_url", "must have no user or password (…@)"));
                }
                Ok(u) if u.host_str().is_none_or(str::is_empty) => {
                    return Err(invalid("public_url", "must name a host"));
                }
                Ok(_) => {}
            }
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
            && secret.expose().starts_with(PLACEHOLDER_SECRET)
        {
            return Err(invalid(
                "secret",
                "is the placeholder of deploy/settings/shoal.env.example: set it to the output \
                 of `openssl rand -hex 32`",
            ));
        }
        if let Some(secret) = &self.secret
            && secret.expose().len() < 32
        {
            return Err(invalid(
                "secret",
                "must be at least 32 characters (leave it unset to generate one)",
            ));
        }
        for (key, url) in [
            ("github_api_url", &self.github_api_url),
            ("github_raw_url", &self.github_raw_url),
        ] {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(invalid(key, "must start with http:// or https://"));
            }
        }
        if !(self.github_timeout_s.is_finite()
            && self.github_timeout_s >= 1.0
            && self.github_timeout_s <= 120.0)
        {
            return Err(invalid(
                "github_timeout_s",
                "must be a number of seconds from 1 to 120",
            ));
        }
        if crate::github::RepoName::from_full(&self.github_official_repo).is_none() {
            return Err(invalid(
                "github_official_repo",
                "must be a GitHub repository as owner/name",
            ));
        }
        if self
            .github_token
            .as_ref()
            .is_some_and(|t| t.expose().trim().is_empty() || t.expose().len() > 1000)
        {
            return Err(invalid(
                "github_token",
                "must be a GitHub token (unset it to call GitHub without one)",
            ));
        }
        if !self.smtp_url.expose().is_empty()
            && let Err(e) = crate::mail::Mailer::new(self.smtp_url.expose(), &self.smtp_from)
        {
            // The URL is not quoted: it may carry a password.
            let key = match e {
                crate::mail::MailError::From(_) => "smtp_from",
                _ => "smtp_url",
            };
            return Err(invalid(
                key,
                "must be smtp://host[:port][?tls=required|opportunistic] or smtps://host[:port], \
                 and smtp_from an address",
            ));
        }
        // Mail carries links to this server; without `public_url` the only address a request
        // offers is its `Host` header, which the requester chooses (a poisoned reset link).
        if !self.smtp_url.expose().is_empty() && self.public_url.is_none() {
            return Err(invalid(
                "public_url",
                "must be set when smtp_url is set: mailed reset links are built from \
                 public_url only (never from a request's Host header)",
            ));
        }
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log) {
            return Err(invalid("log", format!("not a valid log filter: {e}")));
        }
        Ok(())
    }
}
