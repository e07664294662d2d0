//! `shoal user`: the accounts on the configured store from the command line (add, list,
//! change, the legacy names, the end of a trial beside Fishtest); the end of a trial and a
//! user's changes are logged as actions, as the server logs them. A refusal is printed in the
//! server's words (`http::error::user_error_text`).
//!
//! Must not: echo or log a password (each is a `Secret` from the moment it is parsed).

use clap::Subcommand;

use shoal::accounts::UserError;
use shoal::config::Config;
use shoal::http::error::user_error_text;
use shoal::secret::Secret;

#[derive(Debug, Subcommand)]
pub enum UserAction {
    /// Create an approved user.
    Add {
        name: String,
        /// Never echoed or logged (a `Secret`).
        #[arg(long, value_parser = secret_arg)]
        password: Secret,
        #[arg(long, default_value = "")]
        email: String,
        /// Put the user in group:approvers.
        #[arg(long)]
        approver: bool,
        #[arg(long)]
        machine_limit: Option<u32>,
    },
    /// List users.
    List,
    /// End a trial beside Fishtest on one MongoDB database: every password Fishtest keeps in
    /// plaintext gets its argon2id hash in shoal's `password_hash` field and the plaintext is
    /// removed, so Fishtest can no longer log these users in. Logged as a `system_event`
    /// action. Safe to run again (it finishes what an interrupted run left).
    FinalizePasswords,
    /// List the legacy user names (accepted from workers although they break the name rule),
    /// or add and remove some. The list is kvstore's `legacy_usernames`, as in Fishtest.
    LegacyNames {
        /// A name to accept (repeatable).
        #[arg(long)]
        add: Vec<String>,
        /// A name to stop accepting (repeatable).
        #[arg(long)]
        remove: Vec<String>,
    },
    /// Change a user.
    Set {
        name: String,
        /// Accept a pending user.
        #[arg(long)]
        approve: bool,
        /// Mark the user pending again.
        #[arg(long, conflicts_with = "approve")]
        pending: bool,
        #[arg(long)]
        block: bool,
        #[arg(long, conflicts_with = "block")]
        unblock: bool,
        #[arg(long)]
        machine_limit: Option<u32>,
        /// Never echoed or logged (a `Secret`).
        #[arg(long, value_parser = secret_arg)]
        password: Option<Secret>,
        /// Add to group:approvers.
        #[arg(long)]
        approver: bool,
        /// Remove from group:approvers.
        #[arg(long, conflicts_with = "approver")]
        no_approver: bool,
    },
}

/// An account operation's failure in the words the server gives it (`http::error`), so the
/// CLI and the server never word one refusal twice.
fn text(e: UserError) -> String {
    user_error_text(&e)
}

/// A password from the command line, wrapped at once so that no `Debug` of the parsed
/// arguments can show it.
fn secret_arg(text: &str) -> Result<Secret, std::convert::Infallible> {
    Ok(Secret::new(text))
}

pub fn user_command(config: &Config, action: UserAction) -> Result<String, String> {
    use shoal::accounts::{APPROVERS, Users};
    let store = shoal::app::open_store(config).map_err(|e| e.to_string())?;
    let users = Users::new(store.clone());
    let out = match action {
        UserAction::Add {
            name,
            password,
            email,
            approver,
            machine_limit,
        } => {
            let u = users
                .add(&name, password.expose(), &email, approver, machine_limit)
                .map_err(text)?;
            format!(
                "added user {} (machine limit {})",
                u.username, u.machine_limit
            )
        }
        UserAction::FinalizePasswords => {
            let mode = users.mode().map_err(text)?;
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
            let progress = |done: usize, total: usize| {
                if done == total || done.is_multiple_of(100) {
                    eprintln!("finalize-passwords: {done}/{total} users");
                }
            };
            let report = users.finalize_passwords(threads, &progress).map_err(text)?;
            let mut message = format!(
                "shoal user finalize-passwords: {} passwords moved to password_hash, \
                 Fishtest's plaintext removed",
                report.hashed
            );
            if !report.failed.is_empty() {
                message.push_str(&format!("; {} failed", report.failed.len()));
            }
            log_cli_action(
                &store,
                "system_event",
                "fishtest.system",
                &[("message", &message)],
            )?;
            let mut out = match mode {
                shoal::accounts::PasswordMode::Beside => {
                    "the trial beside Fishtest is over: passwords are shoal's alone now\n"
                        .to_string()
                }
                shoal::accounts::PasswordMode::Own => String::new(),
            };
            out.push_str(&format!(
                "{} passwords moved to password_hash",
                report.hashed
            ));
            for (name, why) in &report.failed {
                out.push_str(&format!(
                    "\nnot changed: {name}: {} (run the command again)",
                    user_error_text(why)
                ));
            }
            if !report.failed.is_empty() {
                store.close().map_err(|e| e.to_string())?;
                return Err(out);
            }
            out
        }
        UserAction::LegacyNames { add, remove } => {
            for name in &add {
                users.set_legacy_name(name, true).map_err(text)?;
            }
            for name in &remove {
                users.set_legacy_name(name, false).map_err(text)?;
            }
            users.refresh_legacy_names().map_err(text)?;
            let names = users.legacy_names();
            if names.is_empty() {
                "no legacy user names".to_string()
            } else {
                format!("legacy user names: {}", names.join(", "))
            }
        }
        UserAction::List => {
            let mut out = format!(
                "{:<20} {:<8} {:<8} {:<9} {:>7}  {}\n",
                "username", "pending", "blocked", "approver", "limit", "email"
            );
            for u in users.list().map_err(text)? {
                out.push_str(&format!(
                    "{:<20} {:<8} {:<8} {:<9} {:>7}  {}\n",
                    u.username,
                    u.pending,
                    u.blocked,
                    u.is_approver(),
                    u.machine_limit,
                    u.email
                ));
            }
            out.trim_end().to_string()
        }
        UserAction::Set {
            name,
            approve,
            pending,
            block,
            unblock,
            machine_limit,
            password,
            approver,
            no_approver,
        } => {
            let mut u = users
                .load(&name)
                .map_err(text)?
                .ok_or_else(|| format!("no such user: {name}"))?;
            if approve {
                u.pending = false;
            }
            if pending {
                u.pending = true;
            }
            if block {
                u.blocked = true;
            }
            if unblock {
                u.blocked = false;
            }
            if let Some(n) = machine_limit {
                u.machine_limit = n;
            }
            if let Some(p) = password {
                users.set_password(&mut u, p.expose()).map_err(text)?;
            }
            if approver && !u.is_approver() {
                u.groups.push(APPROVERS.to_string());
            }
            if no_approver {
                u.groups.retain(|g| g != APPROVERS);
            }
            users.save(&u).map_err(text)?;
            // The action log records administrative decisions, as Fishtest's UI does.
            for (done, action) in [(block || unblock, "block_user"), (approve, "accept_user")] {
                if done {
                    let mut f = shoal::store::Doc::new();
                    f.insert("user".into(), serde_json::json!(u.username));
                    let message = match (action, u.blocked) {
                        ("accept_user", _) => "accepted",
                        (_, true) => "blocked",
                        _ => "unblocked",
                    };
                    f.insert("message".into(), serde_json::json!(message));
                    // Fishtest's actions name a user or the system itself: the operator's
                    // command is the system's decision.
                    log_action_doc(&store, action, "fishtest.system", f)?;
                }
            }
            format!(
                "updated user {}: pending={} blocked={} approver={} machine_limit={}",
                u.username,
                u.pending,
                u.blocked,
                u.is_approver(),
                u.machine_limit
            )
        }
    };
    store.close().map_err(|e| e.to_string())?;
    Ok(out)
}

/// Writes an action document as the server does (`time` in seconds, a float).
fn log_action_doc(
    store: &shoal::store::SharedStore,
    action: &str,
    username: &str,
    mut fields: shoal::store::Doc,
) -> Result<(), String> {
    fields.insert("action".into(), serde_json::json!(action));
    fields.insert("username".into(), serde_json::json!(username));
    let time = chrono::Utc::now().timestamp_micros() as f64 / 1e6;
    fields.insert("time".into(), serde_json::json!(time));
    store
        .insert(shoal::store::Collection::Actions, fields)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// [`log_action_doc`] with string fields.
fn log_cli_action(
    store: &shoal::store::SharedStore,
    action: &str,
    username: &str,
    fields: &[(&str, &str)],
) -> Result<(), String> {
    let mut f = shoal::store::Doc::new();
    for (k, v) in fields {
        f.insert((*k).into(), serde_json::json!(v));
    }
    log_action_doc(store, action, username, f)
}
