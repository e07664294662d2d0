//! `shoal simulate-groups`: test groups against independent tests, on simulated games
//! (`groups::simulate`); a table on standard output, the whole report as JSON with `--json`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use shoal::config::{Config, GroupRule};
use shoal::groups::simulate::{ModeReport, SimSpec, run};

/// The command's options.
#[derive(Debug, Args)]
pub struct SimulateGroups {
    /// The number of takes (2-8); with --elo, it must match the values given.
    #[arg(long)]
    takes: Option<usize>,
    /// The true logistic Elo of each take against the base, comma-separated (e.g. 0,0,2,0);
    /// without it, every take is at 0. A list starting with a minus needs `=`:
    /// `--elo=-1,0,1,2`.
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    elo: Vec<f64>,
    /// The SPRT's lower bound.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    elo0: f64,
    /// The SPRT's upper bound.
    #[arg(long, default_value_t = 2.0, allow_negative_numbers = true)]
    elo1: f64,
    #[arg(long, default_value_t = 0.05)]
    alpha: f64,
    #[arg(long, default_value_t = 0.05)]
    beta: f64,
    /// The bounds' model: normalized or logistic.
    #[arg(long, default_value = "normalized")]
    elo_model: String,
    /// Draws among all games.
    #[arg(long, default_value_t = 0.56)]
    draw_ratio: f64,
    /// Groups played (each both ways).
    #[arg(long, default_value_t = 200)]
    groups: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Workers (8 cores each) playing one group.
    #[arg(long, default_value_t = 16)]
    workers: usize,
    /// Games per task.
    #[arg(long, default_value_t = 400)]
    task_games: u64,
    /// A take undecided after this many games is stopped.
    #[arg(long, default_value_t = 2_000_000)]
    max_games: u64,
    /// The allocation rule (default: the settings' `[groups] rule`).
    #[arg(long)]
    rule: Option<String>,
    /// The settings file whose `[groups]` the grouped tests use.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Also write the whole report here, as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

fn row(name: &str, r: &ModeReport) -> String {
    let opt = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or("-".to_string(), f);
    format!(
        "| {name} | {:.0} | {} | {} | {} |",
        r.games_per_group,
        opt(r.games_to_first_pass, &|v| format!("{v:.0}")),
        opt(r.pass_is_best, &|v| format!("{:.1} %", 100.0 * v)),
        match (r.false_positive_rate, r.false_positive_ci95) {
            (Some(p), Some((lo, hi))) => format!(
                "{:.2} % ({} / {}; 95 %: {:.2}-{:.2} %)",
                100.0 * p,
                r.null_passes,
                r.null_takes,
                100.0 * lo,
                100.0 * hi
            ),
            _ => "- (no take at or below elo0)".into(),
        }
    )
}

/// Runs the command.
pub fn simulate_groups(o: SimulateGroups) -> ExitCode {
    let config = match Config::load(o.config.as_deref(), std::env::vars()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("shoal: {e}");
            return ExitCode::from(2);
        }
    };
    let mut settings = config.groups.clone();
    match o.rule.as_deref() {
        None => {}
        Some("best") => settings.rule = GroupRule::Best,
        Some("equal") => settings.rule = GroupRule::Equal,
        Some(other) => {
            eprintln!("shoal: --rule: `best` or `equal`, not {other:?}");
            return ExitCode::from(2);
        }
    }
    let elo = match (o.takes, o.elo.is_empty()) {
        (Some(n), true) => vec![0.0; n],
        (None, true) => vec![0.0; 4],
        (Some(n), false) if n != o.elo.len() => {
            eprintln!("shoal: --takes {n} but --elo gives {} values", o.elo.len());
            return ExitCode::from(2);
        }
        _ => o.elo.clone(),
    };
    let spec = SimSpec {
        elo,
        elo0: o.elo0,
        elo1: o.elo1,
        alpha: o.alpha,
        beta: o.beta,
        elo_model: o.elo_model,
        draw_ratio: o.draw_ratio,
        groups: o.groups,
        seed: o.seed,
        workers: o.workers,
        task_games: o.task_games,
        max_games: o.max_games,
    };
    let report = match run(&spec, &settings) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("shoal: {e}");
            return ExitCode::from(2);
        }
    };
    println!(
        "{} groups of {} takes (true Elo {:?}), SPRT({}, {}) {} alpha {} beta {}, seed {}, rule {}",
        spec.groups,
        spec.elo.len(),
        spec.elo,
        spec.elo0,
        spec.elo1,
        spec.elo_model,
        spec.alpha,
        spec.beta,
        spec.seed,
        report.rule
    );
    println!(
        "| tests | games per group | games to first pass | passing take is best | false positives (true Elo <= elo0) |"
    );
    println!("|---|---|---|---|---|");
    println!("{}", row("grouped", &report.grouped));
    println!("{}", row("independent", &report.independent));
    if let Some(path) = o.json {
        let text = match serde_json::to_string_pretty(&report) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("shoal: {e}");
                return ExitCode::FAILURE;
            }
        };
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("shoal: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
