//! Reading the settings: the file (or the defaults), the `SHOAL_<KEY>` overrides, then the
//! validation; parse errors that never quote a secret.
//!
//! Must not: read any file but the settings file, or put a secret value in a message.

use std::path::Path;

use super::{Config, ConfigError, KEYS};

/// Keys whose values no message may quote.
const SECRET_KEYS: &[&str] = &["secret", "mongodb_uri", "github_token", "smtp_url"];

/// A parse error. TOML's messages quote the offending line; when that line sets a secret key,
/// the message names the key and says nothing of the value.
pub(super) fn parse_error(origin: &str, message: String) -> ConfigError {
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
}

/// Interprets an environment value as a TOML value when it parses as one (numbers, booleans,
/// quoted strings), and as a bare string otherwise (`SHOAL_HOST=0.0.0.0`, `SHOAL_LOG=debug`).
pub(super) fn env_value(raw: &str) -> toml::Value {
    let doc = format!("v = {raw}");
    match doc.parse::<toml::Table>() {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(raw.to_string())),
        Err(_) => toml::Value::String(raw.to_string()),
    }
}
