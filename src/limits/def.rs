//! Limit definitions: what `[[limits]]` in settings.toml may say, checked into [`LimitDef`]s.
//!
//! Owns: the settings shape of one limit ([`LimitSpec`]), the typed definition ([`LimitDef`]:
//! kind, key, max, unit, rate scope and window, floating source and refresh), every validation
//! rule (each message names the entry), and the built-in limits that carry Fishtest's special
//! cases (the per-address machine limit, the per-run window, the SPSA core cap) and guard the
//! signup form (per address and for everybody).
//! Must not: hold state, do I/O or know HTTP.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Name of the built-in machine limit: active tasks per address, the user's `machine_limit`.
pub const MACHINE: &str = "machine";
/// Name of the built-in per-run window: active tasks per run, the run's `max_active_tasks`.
pub const WINDOW: &str = "run_window";
/// Name of the built-in SPSA core cap: cores per SPSA run, `200000 / √params`, floating.
pub const SPSA_CORES: &str = "spsa_core_cap";

/// Names of the built-in signup rate limits: sign-ups per client address, and for everybody.
pub const SIGNUP_IP: &str = "signup_ip";
pub const SIGNUP_ALL: &str = "signup_all";
/// Name of the built-in `/forgot` rate limit: password-reset requests per client address.
pub const FORGOT_IP: &str = "forgot_ip";

/// Largest `max` a limit may have (the seed's `uint32` bound).
pub const MAX_MAX: u64 = u32::MAX as u64;
/// Longest rate window and floating refresh period.
pub const MAX_PERIOD_S: f64 = 86_400.0;

/// The API endpoints a rate limit may be scoped to by name (the rest: scope `api`).
pub const ENDPOINTS: &[&str] = &["request_task", "create_run", "api_token", "password_reset"];

/// One `[[limits]]` entry as written in settings.toml.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct LimitSpec {
    /// A unique name (default: `<kind>:<key>[:<scope>]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub kind: String,
    pub key: String,
    /// concurrency: units per key; rate: calls per window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
    /// `tasks` (default) or `cores` (a task holds its worker's concurrency).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// rate: what is counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_s: Option<f64>,
    /// floating: the built-in computation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_max: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_s: Option<f64>,
}

/// The three kinds of the seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Concurrency,
    Floating,
    Rate,
}

/// What a limit's key is made of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyKind {
    User,
    Ip,
    UserIp,
    Worker,
    Run,
    /// A fixed resource every holder shares.
    Resource(String),
}

impl fmt::Display for KeyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyKind::User => f.write_str("user"),
            KeyKind::Ip => f.write_str("ip"),
            KeyKind::UserIp => f.write_str("user_ip"),
            KeyKind::Worker => f.write_str("worker"),
            KeyKind::Run => f.write_str("run"),
            KeyKind::Resource(r) => write!(f, "resource:{r}"),
        }
    }
}

/// What one grant counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Tasks,
    Cores,
}

/// Where a rate limit counts calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// One API endpoint (`request_task`, `create_run`, …).
    Endpoint(String),
    /// Every `/api` call.
    Api,
    /// `POST /login`.
    Login,
    /// `POST /signup` (a form that got past the cheap bot checks).
    Signup,
    /// Every page outside `/api`.
    Ui,
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Endpoint(e) => f.write_str(e),
            Scope::Api => f.write_str("api"),
            Scope::Login => f.write_str("login"),
            Scope::Signup => f.write_str("signup"),
            Scope::Ui => f.write_str("ui"),
        }
    }
}

/// The built-in computations of floating limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Per run: `200000 / √params` cores for an SPSA run (no cap for other runs).
    SpsaCoreCap,
    /// Per run: its share of the fleet's active cores, in proportion to its throughput.
    FairShare,
    /// One resource: active tasks allowed while the write-behind lags (shrinks as the
    /// journal's backlog grows, back to `default_max` once it drains).
    WriteBehindLag,
}

impl Source {
    fn parse(s: &str) -> Option<Source> {
        match s {
            "spsa_core_cap" => Some(Source::SpsaCoreCap),
            "fair_share" => Some(Source::FairShare),
            "write_behind_lag" => Some(Source::WriteBehindLag),
            _ => None,
        }
    }
}

/// A checked limit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LimitDef {
    pub name: String,
    pub kind: Kind,
    pub key: KeyKind,
    /// concurrency: units per key (a key may carry its own, e.g. the user's machine limit);
    /// rate: calls per window; floating: the value before the first refresh.
    pub max: u64,
    pub unit: Unit,
    pub scope: Option<Scope>,
    #[serde(with = "secs")]
    pub window: Duration,
    pub source: Option<Source>,
    #[serde(with = "secs")]
    pub refresh: Duration,
    /// Shipped with shoal rather than configured.
    pub builtin: bool,
}

mod secs {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
}

fn period(what: &str, v: Option<f64>) -> Result<Duration, String> {
    let v = v.ok_or_else(|| format!("`{what}` is required"))?;
    if !v.is_finite() || v <= 0.0 || v > MAX_PERIOD_S {
        return Err(format!("`{what}` must be > 0 and at most {MAX_PERIOD_S}"));
    }
    Ok(Duration::from_secs_f64(v))
}

fn positive_max(what: &str, v: Option<u64>) -> Result<u64, String> {
    let v = v.ok_or_else(|| format!("`{what}` is required"))?;
    if v == 0 || v > MAX_MAX {
        return Err(format!("`{what}` must be between 1 and {MAX_MAX}"));
    }
    Ok(v)
}

fn forbid(what: &str, present: bool, kind: &str) -> Result<(), String> {
    if present {
        return Err(format!("`{what}` does not apply to a {kind} limit"));
    }
    Ok(())
}

impl KeyKind {
    /// Parses `user | ip | user_ip | worker | run | resource:<name>`.
    pub fn parse(s: &str) -> Result<KeyKind, String> {
        Ok(match s {
            "user" => KeyKind::User,
            "ip" => KeyKind::Ip,
            "user_ip" => KeyKind::UserIp,
            "worker" => KeyKind::Worker,
            "run" => KeyKind::Run,
            other => match other.strip_prefix("resource:") {
                Some(name)
                    if !name.is_empty()
                        && name.len() <= 64
                        && name
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) =>
                {
                    KeyKind::Resource(name.to_string())
                }
                _ => {
                    return Err(format!(
                        "key `{other}` is not user, ip, user_ip, worker, run or \
                         resource:<name> (letters, digits, - _ .; at most 64)"
                    ));
                }
            },
        })
    }
}

impl Scope {
    fn parse(s: &str) -> Result<Scope, String> {
        Ok(match s {
            "api" => Scope::Api,
            "login" => Scope::Login,
            "signup" => Scope::Signup,
            "ui" => Scope::Ui,
            e if ENDPOINTS.contains(&e) => Scope::Endpoint(e.to_string()),
            other => {
                return Err(format!(
                    "scope `{other}` is not api, login, signup, ui or one of {}",
                    ENDPOINTS.join(", ")
                ));
            }
        })
    }
}

impl LimitDef {
    /// Checks one settings entry.
    pub fn from_spec(spec: &LimitSpec) -> Result<LimitDef, String> {
        let key = KeyKind::parse(&spec.key)?;
        let unit = match spec.unit.as_deref() {
            None | Some("tasks") => Unit::Tasks,
            Some("cores") => Unit::Cores,
            Some(u) => return Err(format!("unit `{u}` is not tasks or cores")),
        };
        let (kind, max, scope, window, source, refresh) = match spec.kind.as_str() {
            "concurrency" => {
                forbid("scope", spec.scope.is_some(), "concurrency")?;
                forbid("window_s", spec.window_s.is_some(), "concurrency")?;
                forbid("source", spec.source.is_some(), "concurrency")?;
                forbid("default_max", spec.default_max.is_some(), "concurrency")?;
                forbid("refresh_s", spec.refresh_s.is_some(), "concurrency")?;
                let max = positive_max("max", spec.max)?;
                (
                    Kind::Concurrency,
                    max,
                    None,
                    Duration::ZERO,
                    None,
                    Duration::ZERO,
                )
            }
            "rate" => {
                forbid("unit", spec.unit.is_some(), "rate")?;
                forbid("source", spec.source.is_some(), "rate")?;
                forbid("default_max", spec.default_max.is_some(), "rate")?;
                forbid("refresh_s", spec.refresh_s.is_some(), "rate")?;
                let max = positive_max("max", spec.max)?;
                let scope_text = spec
                    .scope
                    .as_deref()
                    .ok_or_else(|| "`scope` is required".to_string())?;
                let scope = Scope::parse(scope_text)?;
                let window = period("window_s", spec.window_s)?;
                match (&scope, &key) {
                    (_, KeyKind::Run) => {
                        return Err("a rate limit cannot be keyed by run".into());
                    }
                    (Scope::Api | Scope::Ui, KeyKind::Ip | KeyKind::Resource(_)) => {}
                    (Scope::Api | Scope::Ui, _) => {
                        return Err(format!(
                            "scope `{scope}` is counted before the body is read: key must be \
                             ip or resource:<name>"
                        ));
                    }
                    (Scope::Signup, KeyKind::Ip | KeyKind::Resource(_)) => {}
                    (Scope::Signup, _) => {
                        return Err("scope `signup` has no user yet: key must be ip or \
                                    resource:<name>"
                            .into());
                    }
                    (Scope::Login, KeyKind::Worker) => {
                        return Err("scope `login` has no worker: key must be user, ip, \
                                    user_ip or resource:<name>"
                            .into());
                    }
                    (Scope::Endpoint(e), KeyKind::Worker)
                        if e == "create_run" || e == "api_token" || e == "password_reset" =>
                    {
                        return Err(format!("scope `{e}` has no worker"));
                    }
                    _ => {}
                }
                (Kind::Rate, max, Some(scope), window, None, Duration::ZERO)
            }
            "floating" => {
                forbid("scope", spec.scope.is_some(), "floating")?;
                forbid("window_s", spec.window_s.is_some(), "floating")?;
                forbid("max", spec.max.is_some(), "floating (use default_max)")?;
                let source_text = spec
                    .source
                    .as_deref()
                    .ok_or_else(|| "`source` is required".to_string())?;
                let source = Source::parse(source_text).ok_or_else(|| {
                    format!(
                        "source `{source_text}` is not spsa_core_cap, fair_share or \
                         write_behind_lag"
                    )
                })?;
                let default_max = positive_max("default_max", spec.default_max)?;
                let refresh = period("refresh_s", spec.refresh_s)?;
                match (source, &key) {
                    (Source::SpsaCoreCap | Source::FairShare, KeyKind::Run) => {}
                    (Source::WriteBehindLag, KeyKind::Resource(_)) => {}
                    (Source::WriteBehindLag, _) => {
                        return Err("source `write_behind_lag` needs key resource:<name>".into());
                    }
                    _ => return Err(format!("source `{source_text}` needs key run")),
                }
                (
                    Kind::Floating,
                    default_max,
                    None,
                    Duration::ZERO,
                    Some(source),
                    refresh,
                )
            }
            other => {
                return Err(format!(
                    "kind `{other}` is not concurrency, floating or rate"
                ));
            }
        };
        let name = match &spec.name {
            Some(n) => {
                if n.is_empty()
                    || n.len() > 64
                    || !n
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c))
                {
                    return Err(format!(
                        "name `{n}` must be 1-64 letters, digits, - _ . or :"
                    ));
                }
                n.clone()
            }
            None => match &scope {
                Some(s) => format!("{}:{key}:{s}", spec.kind),
                None => format!("{}:{key}", spec.kind),
            },
        };
        Ok(LimitDef {
            name,
            kind,
            key,
            max,
            unit,
            scope,
            window,
            source,
            refresh,
            builtin: false,
        })
    }

    /// The built-in limits, first in every engine.
    pub fn builtins(machine_default: u64) -> Vec<LimitDef> {
        vec![
            LimitDef {
                name: MACHINE.into(),
                kind: Kind::Concurrency,
                key: KeyKind::Ip,
                max: machine_default,
                unit: Unit::Tasks,
                scope: None,
                window: Duration::ZERO,
                source: None,
                refresh: Duration::ZERO,
                builtin: true,
            },
            LimitDef {
                name: WINDOW.into(),
                kind: Kind::Concurrency,
                key: KeyKind::Run,
                max: MAX_MAX,
                unit: Unit::Tasks,
                scope: None,
                window: Duration::ZERO,
                source: None,
                refresh: Duration::ZERO,
                builtin: true,
            },
            LimitDef {
                name: SPSA_CORES.into(),
                kind: Kind::Floating,
                key: KeyKind::Run,
                max: crate::spsa::SPSA_CORE_BUDGET as u64,
                unit: Unit::Cores,
                scope: None,
                window: Duration::ZERO,
                source: Some(Source::SpsaCoreCap),
                refresh: Duration::from_secs(60),
                builtin: true,
            },
        ]
    }

    /// The built-in signup rate limits: at most `per_ip` sign-ups from one client address and
    /// `all` from everybody per `window` (scope `signup`).
    pub fn signup_builtins(per_ip: u64, all: u64, window: Duration) -> Vec<LimitDef> {
        let rate = |name: &str, key: KeyKind, max: u64| LimitDef {
            name: name.into(),
            kind: Kind::Rate,
            key,
            max,
            unit: Unit::Tasks,
            scope: Some(Scope::Signup),
            window,
            source: None,
            refresh: Duration::ZERO,
            builtin: true,
        };
        vec![
            rate(SIGNUP_IP, KeyKind::Ip, per_ip),
            rate(SIGNUP_ALL, KeyKind::Resource("signup".into()), all),
        ]
    }

    /// The built-in `/forgot` rate limit: at most `per_ip` requests from one client address
    /// per `window` (scope `password_reset`, key `ip`).
    pub fn forgot_builtin(per_ip: u64, window: Duration) -> LimitDef {
        LimitDef {
            name: FORGOT_IP.into(),
            kind: Kind::Rate,
            key: KeyKind::Ip,
            max: per_ip,
            unit: Unit::Tasks,
            scope: Some(Scope::Endpoint("password_reset".into())),
            window,
            source: None,
            refresh: Duration::ZERO,
            builtin: true,
        }
    }

    /// Checks every entry and that names are unique (built-in names included).
    pub fn from_specs(specs: &[LimitSpec]) -> Result<Vec<LimitDef>, String> {
        let mut defs: Vec<LimitDef> = Vec::with_capacity(specs.len());
        for (i, spec) in specs.iter().enumerate() {
            let label = match &spec.name {
                Some(n) => format!("entry {} (`{n}`)", i + 1),
                None => format!("entry {}", i + 1),
            };
            let def = LimitDef::from_spec(spec).map_err(|e| format!("{label}: {e}"))?;
            if [
                MACHINE, WINDOW, SPSA_CORES, SIGNUP_IP, SIGNUP_ALL, FORGOT_IP,
            ]
            .contains(&def.name.as_str())
                || defs.iter().any(|d| d.name == def.name)
            {
                return Err(format!(
                    "{label}: the name `{}` is taken (give the entry a `name`)",
                    def.name
                ));
            }
            defs.push(def);
        }
        Ok(defs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: &str, key: &str) -> LimitSpec {
        LimitSpec {
            kind: kind.into(),
            key: key.into(),
            ..Default::default()
        }
    }

    #[test]
    fn good_entries_parse() {
        let mut c = spec("concurrency", "user");
        c.max = Some(64);
        let d = LimitDef::from_spec(&c).expect("valid");
        assert_eq!(d.name, "concurrency:user");
        assert_eq!(d.key, KeyKind::User);
        let mut r = spec("rate", "ip");
        r.max = Some(10);
        r.scope = Some("request_task".into());
        r.window_s = Some(60.0);
        let d = LimitDef::from_spec(&r).expect("valid");
        assert_eq!(d.name, "rate:ip:request_task");
        assert_eq!(d.window, Duration::from_secs(60));
        let mut f = spec("floating", "run");
        f.source = Some("fair_share".into());
        f.default_max = Some(10);
        f.refresh_s = Some(60.0);
        f.unit = Some("cores".into());
        let d = LimitDef::from_spec(&f).expect("valid");
        assert_eq!(d.source, Some(Source::FairShare));
        assert_eq!(d.unit, Unit::Cores);
        let mut res = spec("concurrency", "resource:gpu-box");
        res.max = Some(2);
        assert_eq!(
            LimitDef::from_spec(&res).expect("valid").key,
            KeyKind::Resource("gpu-box".into())
        );
    }

    #[test]
    fn bad_entries_name_themselves() {
        let mut bad = spec("concurrency", "user");
        bad.max = Some(0);
        let e = LimitDef::from_specs(&[bad]).expect_err("max 0");
        assert!(e.starts_with("entry 1: `max` must be"), "{e}");
        let mut named = spec("rate", "user");
        named.name = Some("api-users".into());
        named.max = Some(5);
        named.scope = Some("api".into());
        named.window_s = Some(1.0);
        let e = LimitDef::from_specs(&[named]).expect_err("api by user");
        assert!(e.starts_with("entry 1 (`api-users`)"), "{e}");
        assert!(LimitDef::from_spec(&spec("bogus", "user")).is_err());
        assert!(LimitDef::from_spec(&spec("concurrency", "resource:")).is_err());
        assert!(LimitDef::from_spec(&spec("concurrency", "host")).is_err());
        let mut f = spec("floating", "user");
        f.source = Some("fair_share".into());
        f.default_max = Some(1);
        f.refresh_s = Some(1.0);
        assert!(LimitDef::from_spec(&f).is_err());
        let mut w = spec("rate", "ip");
        w.max = Some(1);
        w.scope = Some("login".into());
        w.window_s = Some(f64::NAN);
        assert!(LimitDef::from_spec(&w).is_err());
        let mut c = spec("concurrency", "user");
        c.max = Some(1);
        c.window_s = Some(1.0);
        assert!(LimitDef::from_spec(&c).is_err());
        let mut dup = spec("concurrency", "user");
        dup.max = Some(1);
        let e = LimitDef::from_specs(&[dup.clone(), dup]).expect_err("duplicate");
        assert!(e.starts_with("entry 2"), "{e}");
        let mut taken = spec("concurrency", "ip");
        taken.max = Some(1);
        taken.name = Some(MACHINE.into());
        assert!(LimitDef::from_specs(&[taken]).is_err());
    }
}
