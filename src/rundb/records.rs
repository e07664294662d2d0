//! What the run database tells the ledger: the fields of an action about a run, the actions
//! it makes under a run's lock, a finished task's figures, and the stored runs for the
//! ledger's one-time rebuild of the contributors table.
//!
//! Owns: `run_fields` and the `run` label (`new_tag[:23]-md5(run_id)[:7]`), the messages of
//! `new_run` (Fishtest's summary line, [`new_run_message`]) and `finished_run` (the result,
//! Elo and LOS, [`finished_run_message`]), `locked_action`
//! and `task_action` (the document goes to the journal's next group commit, ahead of the
//! change the same request then commits and awaits), `record_finished_task` (the CPU hours
//! and the contribution of a task set inactive), and [`StoredRuns`] over the `runs`
//! collection.
//! Must not: call any other layer of `rundb` (it is below the cache); write the store under a
//! run's lock (the ledger's `add_*` calls touch memory only).

use serde_json::{Value, json};

use super::model::Run;
use super::schedule;
use super::{DbResult, RunDb};
use crate::ledger::{LedgerResult, RunContribution, StoredRuns, TaskContribution};
use crate::store::{Collection, Cond, Doc, Order, Query};

/// Runs read per page by the contributors table's one-time rebuild.
const REBUILD_PAGE: u64 = 500;

/// A run whose time control's base is at least this many seconds is LTC in the `new_run`
/// summary (Fishtest's `ltc_lower_bound`).
pub const LTC_LOWER_BOUND: f64 = 40.0;

/// The `new_run` message: Fishtest's one-line summary of a new run,
/// `SPRT<0.00,2.00>` (the bounds in the Elo model's brackets), `SPSA[games]` or
/// `NumGames[games]`, then ` TC:tc`, `[new_tc]` when it differs, `(LTC)`, ` Book:book`,
/// ` Threads:n`, `(SMP)` above one thread, and ` Hash:base/new` (each side's `Hash=` value,
/// 0 when absent). (Fishtest adds `(PT:…)` to a progression test's; shoal has none.)
pub fn new_run_message(run: &Run) -> String {
    let a = &run.args;
    let mut m = match (&a.sprt, &a.spsa) {
        (Some(sprt), _) => format!("SPRT{}", sprt.bounds_text()),
        (None, Some(_)) => format!("SPSA[{}]", a.num_games),
        (None, None) => format!("NumGames[{}]", a.num_games),
    };
    m.push_str(&format!(" TC:{}", a.tc));
    if a.new_tc != a.tc {
        m.push_str(&format!("[{}]", a.new_tc));
    }
    if run.tc_base >= LTC_LOWER_BOUND {
        m.push_str("(LTC)");
    }
    m.push_str(&format!(" Book:{} Threads:{}", a.book, a.threads));
    if a.threads > 1 {
        m.push_str("(SMP)");
    }
    m.push_str(&format!(
        " Hash:{}/{}",
        hash_option(&a.base_options),
        hash_option(&a.new_options)
    ));
    m
}

/// The value of the first `Hash=<digits>` in engine options, as Fishtest reads it (a search
/// for the pattern anywhere, leading zeros dropped); `0` when there is none.
fn hash_option(options: &str) -> String {
    let mut rest = options;
    while let Some(at) = rest.find("Hash=") {
        let after = &rest[at + "Hash=".len()..];
        let digits: &str = &after[..after.bytes().take_while(u8::is_ascii_digit).count()];
        if !digits.is_empty() {
            let trimmed = digits.trim_start_matches('0');
            return if trimmed.is_empty() { "0" } else { trimmed }.to_string();
        }
        rest = after;
    }
    "0".into()
}

/// The `finished_run` message, Fishtest's: `SPSA tune finished` for a tune; otherwise
/// `Result:<state> Elo:<e>[<lo>,<hi>] LOS:<p>%` followed by ` Games:<n> Ptnml:[…]`.
/// An SPRT's state is its decision (empty when it ran out of games) and its Elo, interval
/// and LOS are `SPRT_elo`'s; a fixed-games run is `accepted` when green, else `rejected`, with
/// `get_elo`'s Elo ± its 95% half-width and LOS, from the pair counts when the run counts
/// pairs, else from W/L/D. Elo with two decimals, LOS as a whole percent. `Games` is twice
/// the pairs (W+L+D for a run without pair counts, which then has no `Ptnml`).
pub fn finished_run_message(run: &Run) -> String {
    if run.args.spsa.is_some() {
        return "SPSA tune finished".into();
    }
    let r = &run.results;
    let (state, estimate) = match &run.args.sprt {
        Some(s) => {
            let e = crate::stats::sprt_elo(
                &super::transitions::sprt_results(r),
                s.alpha,
                s.beta,
                0.05,
                s.elo0,
                s.elo1,
                s.elo_model,
            )
            .map(|a| (a.elo, a.ci[0], a.ci[1], a.los));
            (s.state.as_str(), e)
        }
        None => {
            let e = crate::stats::get_elo(&super::transitions::fixed_games_data(r))
                .map(|g| (g.elo, g.elo - g.elo95, g.elo + g.elo95, g.los));
            (if run.is_green { "accepted" } else { "rejected" }, e)
        }
    };
    let mut m = format!("Result:{state}");
    match estimate {
        Ok((elo, lo, hi, los)) => {
            m.push_str(&format!(
                " Elo:{elo:.2}[{lo:.2},{hi:.2}] LOS:{:.0}%",
                los * 100.0
            ));
        }
        Err(e) => {
            tracing::warn!(run = %run.id, error = %e, "finished_run: no Elo estimate");
        }
    }
    match r.pairs() {
        Some(p) => {
            let pairs: u64 = p.iter().fold(0u64, |a, c| a.saturating_add(*c));
            let cells: Vec<String> = p.iter().map(u64::to_string).collect();
            m.push_str(&format!(
                " Games:{} Ptnml:[{}]",
                pairs.saturating_mul(2),
                cells.join(",")
            ));
        }
        None => m.push_str(&format!(" Games:{}", r.games())),
    }
    m
}

/// The fields of an action about a run: its id and label, and the message if any.
pub(super) fn run_fields(run: &Run, message: Option<String>) -> Doc {
    let mut f = Doc::new();
    f.insert("run_id".into(), json!(run.id));
    f.insert("run".into(), json!(run_label(run)));
    if let Some(m) = message {
        f.insert("message".into(), json!(m));
    }
    f
}

/// Fishtest's action `run` label: `new_tag[:23]-md5(run_id)[:7]`.
pub(super) fn run_label(run: &Run) -> String {
    use md5::{Digest, Md5};
    let tag: String = run.args.new_tag.chars().take(23).collect();
    let digest = hex::encode(Md5::digest(run.id.as_bytes()));
    format!("{tag}-{}", &digest[..7])
}

/// What task `task_id` contributed: its games and CPU hours (games × game duration ×
/// threads, none when the time control does not parse).
fn contribution(run: &Run, task_id: usize) -> Option<TaskContribution> {
    let task = run.tasks.get(task_id)?;
    let games = task.stats.games();
    let hours = schedule::parse_tc(&run.args.tc).map_or(0.0, |tc| {
        games as f64 * schedule::tc_duration(&tc) * f64::from(run.args.threads) / 3600.0
    });
    Some(TaskContribution {
        username: task.worker_info.username.clone(),
        games,
        cpu_hours: hours.max(0.0),
        ended: task.last_updated,
        run_started: run.start_time,
        run_id: run.id.clone(),
        run_finished: run.finished,
    })
}

impl RunDb {
    /// Logs an action from inside a run's lock, where no store write may happen: the document
    /// goes to the journal's next group commit, ahead of (and so durable no later than) the
    /// change that the same request then commits and awaits.
    pub(super) fn locked_action(&self, action: &str, username: &str, mut fields: Doc) {
        fields.insert("_id".into(), json!(crate::store::new_object_id()));
        drop(
            self.journal
                .submit_action(crate::ledger::document(action, username, fields)),
        );
    }

    /// Logs an action about a task (called with the run locked).
    pub(super) fn task_action(
        &self,
        action: &str,
        run: &Run,
        task_id: usize,
        message: &str,
    ) -> DbResult<()> {
        let Some(task) = run.tasks.get(task_id) else {
            return Ok(());
        };
        let mut f = run_fields(run, Some(message.to_string()));
        f.insert("worker".into(), json!(task.worker_info.long_name()));
        f.insert("task_id".into(), json!(task_id));
        self.locked_action(action, &task.worker_info.username, f);
        Ok(())
    }

    /// Gives a task just set inactive to the ledger (under the run's lock: memory only): its
    /// CPU hours (the figure stop_run's 1000-hour rule reads) and its contribution.
    pub(super) fn record_finished_task(&self, run: &Run, task_id: usize) {
        if let Some(task) = run.tasks.get(task_id)
            && let Some(tc) = schedule::parse_tc(&run.args.tc)
        {
            let hours = task.stats.games() as f64
                * schedule::tc_duration(&tc)
                * f64::from(run.args.threads)
                / 3600.0;
            if hours > 0.0 {
                self.ledger.add_cpu_hours(&task.worker_info.username, hours);
            }
        }
        if let Some(c) = contribution(run, task_id) {
            self.ledger.add_contribution(&c);
        }
    }
}

impl StoredRuns for RunDb {
    fn each_stored_run(&self, each: &mut dyn FnMut(RunContribution)) -> LedgerResult<usize> {
        let mut after: Option<String> = None;
        let mut runs = 0usize;
        loop {
            // Keyset paging (by `_id`), so each page costs the same however far in it is.
            let mut q = Query::new().sort("_id", Order::Asc).limit(REBUILD_PAGE);
            if let Some(last) = &after {
                q = q.with(Cond::Gt("_id".into(), json!(last)));
            }
            let docs = self.store.find(Collection::Runs, &q)?;
            let n = docs.len() as u64;
            if let Some(last) = docs
                .last()
                .and_then(|d| d.get("_id"))
                .and_then(Value::as_str)
            {
                after = Some(last.to_string());
            }
            for doc in docs {
                let run = match serde_json::from_value::<Run>(Value::Object(doc)) {
                    Ok(run) => run,
                    Err(e) => {
                        tracing::warn!(error = %e, "contributors: an unreadable run skipped");
                        continue;
                    }
                };
                runs += 1;
                let tasks = (0..run.tasks.len())
                    .filter(|&i| !run.tasks[i].active)
                    .filter_map(|i| contribution(&run, i))
                    .collect();
                each(RunContribution {
                    username: run.args.username.clone(),
                    started: run.start_time,
                    run_id: run.id.clone(),
                    finished: run.finished,
                    tasks,
                });
            }
            if n < REBUILD_PAGE || after.is_none() {
                break;
            }
        }
        Ok(runs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Collection;
    use crate::store::bson_map::to_doc;

    /// A collection of the sample database Fishtest's code wrote (`tests/data/fishtest-db`).
    fn sample(coll: Collection) -> Vec<Doc> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("tests/data/fishtest-db/{}.json", coll.name()));
        crate::dump::read_file(&path)
            .expect("sample")
            .into_iter()
            .map(|d| to_doc(coll, d).expect("mapped"))
            .collect()
    }

    fn runs() -> Vec<Run> {
        sample(Collection::Runs)
            .into_iter()
            .map(|d| serde_json::from_value(Value::Object(d)).expect("run"))
            .collect()
    }

    /// The `(run_id, message)` of the sample's actions of one kind.
    fn logged(kind: &str) -> Vec<(String, String)> {
        sample(Collection::Actions)
            .into_iter()
            .filter(|a| a.get("action").and_then(Value::as_str) == Some(kind))
            .map(|a| {
                let s = |k: &str| a.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                (s("run_id"), s("message"))
            })
            .collect()
    }

    #[test]
    fn new_run_messages_are_fishtests_summary_lines() {
        let runs = runs();
        let mut compared = 0;
        for (id, message) in logged("new_run") {
            let run = runs.iter().find(|r| r.id == id).expect("the run");
            assert_eq!(new_run_message(run), message, "{id}");
            compared += 1;
        }
        assert_eq!(compared, 16, "every new_run of the sample");
    }

    #[test]
    fn finished_run_messages_are_fishtests_result_lines() {
        let runs = runs();
        let mut compared = 0;
        for (id, message) in logged("finished_run") {
            let run = runs.iter().find(|r| r.id == id).expect("the run");
            // A run purged after it finished (and finished again) was logged twice: the
            // run as stored now is the last one's.
            let p = run.results.pentanomial.map(|c| c.to_string());
            if !message.ends_with(&format!(" Ptnml:[{}]", p.join(","))) {
                continue;
            }
            assert_eq!(finished_run_message(run), message, "{id}");
            compared += 1;
        }
        assert!(compared >= 7, "{compared} compared");
    }

    /// The rule the run core follows (`RunDb::auto_purge_locked`'s callers), as the sample
    /// shows it: an auto-purge is logged under the run's owner, a manual one under whoever
    /// purged.
    #[test]
    fn the_samples_auto_purges_are_under_the_runs_owner() {
        let runs = runs();
        let mut auto = 0;
        for a in sample(Collection::Actions) {
            let s = |k: &str| a.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            if s("action") != "purge_run" || !s("message").starts_with("Auto purge") {
                continue;
            }
            let run = runs.iter().find(|r| r.id == s("run_id")).expect("the run");
            assert_eq!(s("username"), run.args.username);
            assert!(run.args.auto_purge);
            auto += 1;
        }
        assert_eq!(auto, 2);
    }

    #[test]
    fn summary_line_variants() {
        let mut run = runs()
            .into_iter()
            .find(|r| r.args.sprt.is_some())
            .expect("an SPRT run");
        run.args.new_tc = "20+0.2".into();
        run.args.tc = "60+0.6".into();
        run.tc_base = 60.0;
        run.args.threads = 8;
        run.args.base_options = "Threads=8 Hash=0064".into();
        run.args.new_options = "Threads=8".into();
        if let Some(s) = run.args.sprt.as_mut() {
            s.elo_model = crate::stats::EloModel::BayesElo;
            s.elo0 = -1.5;
            s.elo1 = 0.5;
        }
        let book = run.args.book.clone();
        assert_eq!(
            new_run_message(&run),
            format!("SPRT[-1.50,0.50] TC:60+0.6[20+0.2](LTC) Book:{book} Threads:8(SMP) Hash:64/0")
        );
        if let Some(s) = run.args.sprt.as_mut() {
            s.elo_model = crate::stats::EloModel::Logistic;
        }
        assert!(new_run_message(&run).starts_with("SPRT{-1.50,0.50} TC:"));
        assert_eq!(hash_option("XHash=x Hash=000"), "0");
        assert_eq!(hash_option("Hash=16abc"), "16");
    }

    #[test]
    fn a_tune_and_a_run_without_pair_counts() {
        let runs = runs();
        let mut spsa = runs
            .iter()
            .find(|r| r.args.spsa.is_some())
            .expect("an SPSA run")
            .clone();
        assert_eq!(finished_run_message(&spsa), "SPSA tune finished");
        assert!(new_run_message(&spsa).starts_with(&format!("SPSA[{}] TC:", spsa.args.num_games)));
        // A fixed-games run imported from before pairs were counted: W/L/D, no Ptnml.
        spsa.args.spsa = None;
        spsa.results = crate::rundb::model::Stats {
            wins: 600,
            losses: 400,
            draws: 1000,
            ..Default::default()
        };
        spsa.is_green = true;
        let m = finished_run_message(&spsa);
        let e = crate::stats::get_elo(&[400.0, 1000.0, 600.0]).expect("elo");
        assert_eq!(
            m,
            format!(
                "Result:accepted Elo:{:.2}[{:.2},{:.2}] LOS:100% Games:2000",
                e.elo,
                e.elo - e.elo95,
                e.elo + e.elo95
            )
        );
        spsa.is_green = false;
        assert!(finished_run_message(&spsa).starts_with("Result:rejected Elo:"));
    }
}
