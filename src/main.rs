//! The `shoal` binary: a thin command line over the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use shoal::config::Config;

mod cli;

use cli::user::{UserAction, user_command};

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
        /// The net's uploader: an existing account (Fishtest's username rule,
        /// `[A-Za-z0-9]{2,}`, as every net record needs).
        #[arg(long)]
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
    Sim(Box<shoal_sim::SimOptions>),
    /// Start a server with a seeded user, a few runs and a small simulated fleet.
    Demo(shoal_sim::DemoOptions),
    /// Test groups against independent tests on simulated games (docs/test-groups.md).
    SimulateGroups(cli::simulate_groups::SimulateGroups),
}

/// Runs a client-side future (the simulator, the demo) on a fresh multi-threaded runtime.
fn run_client<F>(future: F) -> ExitCode
where
    F: std::future::Future<Output = Result<(), shoal_sim::SimError>>,
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
    let config = Config::load(path.map(PathBuf::as_path), std::env::vars()).map_err(|e| {
        eprintln!("shoal: {e}");
        ExitCode::from(2)
    })?;
    expect_store(&config, std::env::var("SHOAL_EXPECT_STORE").ok().as_deref())?;
    Ok(config)
}

/// `SHOAL_EXPECT_STORE=sqlite|mongodb` (not a setting: a guard for scripts and the test suite)
/// refuses to run a command whose configuration names another store, so a lost
/// `SHOAL_STORE` cannot quietly put the data in a fresh SQLite file.
fn expect_store(config: &Config, expected: Option<&str>) -> Result<(), ExitCode> {
    let Some(expected) = expected.filter(|e| !e.is_empty()) else {
        return Ok(());
    };
    let actual = config.store.name();
    if expected == actual {
        return Ok(());
    }
    eprintln!(
        "shoal: SHOAL_EXPECT_STORE={expected} but this configuration's store is \"{actual}\": \
         not running"
    );
    Err(ExitCode::from(2))
}

/// `SHOAL_EXIT_WITH_PARENT=<pid>` (set by `shoal demo` and `shoal sim` for the server they
/// start): the kernel sends this process SIGTERM (an orderly shutdown) when its parent dies,
/// however it dies; a parent already gone by now means exit at once.
fn exit_with_parent() -> Result<(), ExitCode> {
    let Some(parent) = std::env::var("SHOAL_EXIT_WITH_PARENT")
        .ok()
        .and_then(|p| p.parse::<i32>().ok())
    else {
        return Ok(());
    };
    let signal = rustix::process::Signal::TERM;
    if let Err(e) = rustix::process::set_parent_process_death_signal(Some(signal)) {
        eprintln!("shoal: cannot follow the parent process: {e}");
        return Err(ExitCode::FAILURE);
    }
    let now = rustix::process::Pid::as_raw(rustix::process::getppid());
    if now != parent {
        eprintln!("shoal: the parent process {parent} is gone");
        return Err(ExitCode::FAILURE);
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(code) = exit_with_parent() {
        return code;
    }
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
                    let added = uploader_exists(&store, &user).and_then(|()| {
                        shoal::nets::add(&store, &config.nets_dir(), &file, &user)
                            .map_err(|e| e.to_string())
                    });
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
            summary.nets = Some(shoal::dump::import_nets(
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
            run_client(async move { shoal_sim::main(*options).await.map(|_| ()) })
        }
        Command::Demo(options) => run_client(shoal_sim::demo(options)),
        Command::SimulateGroups(options) => cli::simulate_groups::simulate_groups(options),
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

/// `shoal nn --user`: an existing account whose name keeps Fishtest's rule (a net's `user`
/// must).
fn uploader_exists(store: &shoal::store::SharedStore, user: &str) -> Result<(), String> {
    if !shoal::accounts::valid_username(user) {
        return Err(format!(
            "--user {user:?}: not a username (letters and digits, at least two: Fishtest's net \
             records require one)"
        ));
    }
    let q = shoal::store::Query::new()
        .with(shoal::store::Cond::Eq(
            "username".into(),
            serde_json::json!(user),
        ))
        .limit(1);
    let found = store
        .find(shoal::store::Collection::Users, &q)
        .map_err(|e| e.to_string())?;
    if found.is_empty() {
        return Err(format!("--user {user:?}: no such user"));
    }
    Ok(())
}
