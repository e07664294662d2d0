//! The `shoal` binary: a thin command line over the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use shoal::config::Config;
use shoal::secret::Secret;

// mimalloc instead of glibc's malloc: under a storm the server allocates and frees many small
// objects on several threads plus megabyte-sized run documents, and glibc's allocator was
// about a tenth of the machine's CPU in the profile (`_int_malloc`, `malloc_consolidate`;
// BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(name = "shoal", version, about = "A Fishtest-compatible server")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the server (on the embedded SQLite store by default).
    Serve {
        /// Settings file (default: ./settings.toml if present, else built-in defaults).
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Manage users (works on the configured store; the server may be running).
    User {
        #[arg(long, short)]
        config: Option<PathBuf>,
        #[command(subcommand)]
        action: UserAction,
    },
    /// Add a net file to the server's net store, gzipped (workers download it via
    /// /api/nn/<name>); for a net recorded without a file, add the file.
    Nn {
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// The file, named nn-<first 12 hex digits of its sha256>.nnue (or .nnue.gz, gzipped).
        file: PathBuf,
        /// Recorded as the net's uploader.
        #[arg(long, default_value = "shoal-cli")]
        user: String,
    },
    /// Check a settings file and print the effective configuration.
    CheckConfig {
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Import a Fishtest database dump (one Extended JSON file per collection, as
    /// `mongoexport` writes them) into the configured store.
    Import {
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// The dump directory (`runs.json`, `users.json`, ...).
        #[arg(long, value_name = "DIR")]
        fishtest: PathBuf,
        /// Add to a store that already holds data (documents with the same `_id` are replaced).
        #[arg(long)]
        merge: bool,
        /// Fishtest's net directory (`nn-<12 hex>.nnue.gz` files): the files of the nets the
        /// dump records are checked and moved into the net directory (`nn_dir`).
        #[arg(long, value_name = "NETSDIR")]
        nets: Option<PathBuf>,
    },
    /// Export the configured store as a Fishtest database dump (for `mongoimport`).
    Export {
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// The directory to write (created if needed; its collection files are replaced).
        #[arg(long, value_name = "DIR")]
        fishtest: PathBuf,
    },
    /// Copy the SQLite store to FILE while the server runs (SQLite's online backup; restore
    /// steps: README.md). For store = "mongodb", use mongodump.
    Backup {
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Where to write the copy (mode 0600).
        file: PathBuf,
        /// Replace FILE if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Switch an existing SQLite store to incremental vacuum and compact it, so the space PGN
    /// retention frees goes back to the file system. Stop the server first.
    Vacuum {
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Simulate a fleet of official workers against a server and report what it saw.
    Sim(Box<shoal::sim::SimOptions>),
    /// Start a server with a seeded user, a few runs and a small simulated fleet.
    Demo(shoal::sim::DemoOptions),
}

/// Runs a client-side future (the simulator, the demo) on a fresh multi-threaded runtime.
fn run_client<F>(future: F) -> ExitCode
where
    F: std::future::Future<Output = Result<(), shoal::sim::SimError>>,
{
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("shoal-sim")
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("shoal: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(future) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shoal: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Debug, Subcommand)]
enum UserAction {
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

/// A password from the command line, wrapped at once so that no `Debug` of the parsed
/// arguments can show it.
fn secret_arg(text: &str) -> Result<Secret, std::convert::Infallible> {
    Ok(Secret::new(text))
}

fn user_command(config: &Config, action: UserAction) -> Result<String, String> {
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
                .map_err(|e| e.to_string())?;
            format!(
                "added user {} (machine limit {})",
                u.username, u.machine_limit
            )
        }
        UserAction::FinalizePasswords => {
            let mode = users.mode().map_err(|e| e.to_string())?;
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
            let progress = |done: usize, total: usize| {
                if done == total || done.is_multiple_of(100) {
                    eprintln!("finalize-passwords: {done}/{total} users");
                }
            };
            let report = users
                .finalize_passwords(threads, &progress)
                .map_err(|e| e.to_string())?;
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
                    "\nnot changed: {name}: {why} (run the command again)"
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
                users
                    .set_legacy_name(name, true)
                    .map_err(|e| e.to_string())?;
            }
            for name in &remove {
                users
                    .set_legacy_name(name, false)
                    .map_err(|e| e.to_string())?;
            }
            users.refresh_legacy_names().map_err(|e| e.to_string())?;
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
            for u in users.list().map_err(|e| e.to_string())? {
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
                .map_err(|e| e.to_string())?
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
                users
                    .set_password(&mut u, p.expose())
                    .map_err(|e| e.to_string())?;
            }
            if approver && !u.is_approver() {
                u.groups.push(APPROVERS.to_string());
            }
            if no_approver {
                u.groups.retain(|g| g != APPROVERS);
            }
            users.save(&u).map_err(|e| e.to_string())?;
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
                    log_action_doc(&store, action, "shoal-cli", f)?;
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

/// Runs an import or export on the configured store and prints its summary.
fn dump_command(
    config: Option<&PathBuf>,
    run: impl FnOnce(
        &dyn shoal::store::Store,
        &Config,
        bool,
    ) -> Result<shoal::dump::Summary, shoal::dump::DumpError>,
) -> ExitCode {
    use std::io::IsTerminal;
    let config = match load(config) {
        Ok(c) => c,
        Err(code) => return code,
    };
    shoal::telemetry::init_logging(&config.log);
    let store = match shoal::app::open_store(&config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("shoal: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = run(store.as_ref(), &config, std::io::stderr().is_terminal());
    let closed = store.close();
    match (result, closed) {
        (Ok(summary), Ok(())) => {
            print!("{summary}");
            ExitCode::SUCCESS
        }
        (Err(e), _) => {
            eprintln!("shoal: {e}");
            ExitCode::FAILURE
        }
        (Ok(_), Err(e)) => {
            eprintln!("shoal: closing the store: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A command on the embedded SQLite store's file (`backup`, `vacuum`); refused for MongoDB.
fn sqlite_command(
    config: Option<&PathBuf>,
    name: &str,
    run: impl FnOnce(&Config) -> Result<String, String>,
) -> ExitCode {
    let config = match load(config) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if config.store == shoal::config::StoreKind::Mongodb {
        eprintln!(
            "shoal: `shoal {name}` works on the embedded SQLite store; this configuration has \
             store = \"mongodb\": use MongoDB's own tools (backup: mongodump --uri \
             \"$MONGODB_URI\" --archive=FILE --gzip; restore: mongorestore --archive=FILE --gzip; \
             space: the compact command; see docs/migrating-from-fishtest.md)"
        );
        return ExitCode::from(2);
    }
    match run(&config) {
        Ok(out) => {
            println!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("shoal: {name}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn load(path: Option<&PathBuf>) -> Result<Config, ExitCode> {
    Config::load(path.map(PathBuf::as_path), std::env::vars()).map_err(|e| {
        eprintln!("shoal: {e}");
        ExitCode::from(2)
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve { config } => {
            let config = match load(config.as_ref()) {
                Ok(c) => c,
                Err(code) => return code,
            };
            shoal::telemetry::init_logging(&config.log);
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder
                .enable_all()
                .thread_name("shoal")
                .max_blocking_threads(config.max_blocking_threads());
            if let Some(n) = config.worker_threads {
                builder.worker_threads(n);
            }
            let runtime = match builder.build() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("shoal: cannot start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(shoal::app::serve(config, shoal::app::shutdown_signal())) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = %e, "shoal stopped with an error");
                    eprintln!("shoal: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::User { config, action } => {
            let config = match load(config.as_ref()) {
                Ok(c) => c,
                Err(code) => return code,
            };
            match user_command(&config, action) {
                Ok(out) => {
                    println!("{out}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("shoal: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Nn { config, file, user } => {
            let config = match load(config.as_ref()) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let result = shoal::app::open_store(&config)
                .map_err(|e| e.to_string())
                .and_then(|store| {
                    let added = shoal::nets::add(&store, &config.nets_dir(), &file, &user)
                        .map_err(|e| e.to_string());
                    store.close().map_err(|e| e.to_string())?;
                    added
                });
            match result {
                Ok(added) => {
                    if added.file_only {
                        println!("added the file of net {} (already recorded)", added.name);
                    } else {
                        println!("added net {}", added.name);
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("shoal: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Import {
            config,
            fishtest,
            merge,
            nets,
        } => dump_command(config.as_ref(), |store, config, progress| {
            let mut summary = shoal::dump::import(store, &fishtest, merge, progress)?;
            let dir = config.nets_dir();
            summary.nets = Some(shoal::nets::import::import_nets(
                store,
                nets.as_deref(),
                &dir,
                progress,
            )?);
            Ok(summary)
        }),
        Command::Export { config, fishtest } => {
            dump_command(config.as_ref(), |store, _, progress| {
                shoal::dump::export(store, &fishtest, progress)
            })
        }
        Command::Backup {
            config,
            file,
            force,
        } => sqlite_command(config.as_ref(), "backup", |c| {
            shoal::store::sqlite::backup::backup(&c.data_dir, &file, force)
                .map(|b| {
                    format!(
                        "backed up {} to {} ({} bytes, {} journal entries to replay)",
                        c.data_dir.join(shoal::store::sqlite::DB_FILE).display(),
                        b.file.display(),
                        b.bytes,
                        b.journal_entries
                    )
                })
                .map_err(|e| e.to_string())
        }),
        Command::Vacuum { config } => sqlite_command(config.as_ref(), "vacuum", |c| {
            shoal::store::sqlite::space::vacuum(&c.data_dir)
                .map(|v| {
                    format!(
                        "{}: {} -> {} bytes, incremental vacuum {}",
                        c.data_dir.join(shoal::store::sqlite::DB_FILE).display(),
                        v.before,
                        v.after,
                        if v.converted { "enabled" } else { "already on" }
                    )
                })
                .map_err(|e| e.to_string())
        }),
        Command::Sim(options) => {
            run_client(async move { shoal::sim::main(*options).await.map(|_| ()) })
        }
        Command::Demo(options) => run_client(shoal::sim::demo(options)),
        Command::CheckConfig { config } => match load(config.as_ref()) {
            Ok(c) => {
                match toml::to_string(&c) {
                    Ok(text) => print!("{text}"),
                    Err(e) => eprintln!("shoal: {e}"),
                }
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
    }
}
