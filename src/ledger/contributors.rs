//! The contributors table: per user, the CPU hours and games their workers contributed, the
//! tests they submitted and when they last contributed — all time (Fishtest's: the finished
//! runs only), and for "top month" (Fishtest's: the unfinished runs, whenever they started,
//! plus the finished runs started in the last 30 days): one bucket per unfinished run the
//! user took part in, which counts for the month at once and joins the all-time totals and a
//! bucket per start day when the run finishes ([`Ledger::run_finished`]), so the month is a
//! sum of a few buckets and days older than the month can be dropped.
//!
//! Maintained incrementally, never by scanning runs on a view: a task set inactive adds its
//! games and hours (under its run's lock: memory only), a run created adds a test; the
//! write-behind ([`Ledger::persist_contributors`]) writes each changed user's document to
//! `shoal_kvstore` (`contrib:<user>`, kind `contributor`). The primary reads the documents once at
//! start; when the marker `contributors:built:3` is missing (a store from before this table)
//! it rebuilds them from the stored runs once ([`StoredRuns`]), then writes the marker. A
//! secondary reads the documents again when its copy is older than [`SECONDARY_RELOAD`].
//! Games per hour come from the active tasks, recomputed by the `update_nps_gpm` job.
//! Must not: write the store under a run's lock (the `add_*` calls touch memory only); read
//! runs anywhere but the one-time rebuild at start-up.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Ledger, LedgerResult};
use crate::store::{Collection, Cond, Date, Doc, Query};

/// The `kind` and `_id` prefix of the stored documents.
const KIND: &str = "contributor";
/// Written once the table has been built from the stored runs.
/// (`:3`: all time counts finished runs only; a table built before is rebuilt once.)
const MARKER: &str = "contributors:built:3";
/// "Top month": finished runs started within this many days (and every unfinished run).
pub const MONTH_DAYS: i64 = 30;
/// A secondary re-reads the stored table when its copy is older than this.
pub const SECONDARY_RELOAD: Duration = Duration::from_secs(60);

/// One day's contribution (by the start day of the runs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DayTotals {
    pub cpu_hours: f64,
    pub games: u64,
    pub tests: u64,
}

/// One user's stored row.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Contributor {
    pub username: String,
    pub cpu_hours: f64,
    pub games: u64,
    pub tests: u64,
    /// The end of their newest task in a finished run.
    pub last_updated: Option<Date>,
    /// `YYYY-MM-DD` (a finished run's start day) → that day's totals, the last
    /// [`MONTH_DAYS`] + 1.
    #[serde(default)]
    pub days: BTreeMap<String, DayTotals>,
    /// Run id → what the user contributed to that run while it is unfinished (all of it
    /// counts for the month, however old the run; none of it for all time until it ends).
    #[serde(default)]
    pub open: BTreeMap<String, OpenRun>,
}

/// A user's contribution to one unfinished run, and the run's start day (where it goes when
/// the run finishes).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OpenRun {
    pub day: String,
    #[serde(flatten)]
    pub totals: DayTotals,
    /// The end of the user's newest task in the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<Date>,
}

/// A row as the contributors pages show it.
#[derive(Debug, Clone, PartialEq)]
pub struct ContributorRow {
    pub username: String,
    pub cpu_hours: f64,
    pub games: u64,
    pub tests: u64,
    pub games_per_hour: f64,
    pub last_updated: Option<Date>,
}

/// What a task set inactive contributed, as the run database figures it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskContribution {
    /// The worker's user.
    pub username: String,
    pub games: u64,
    /// Games × game duration × threads (0 when the time control does not parse).
    pub cpu_hours: f64,
    /// The task's last update.
    pub ended: Date,
    /// The start of its run: the day the contribution counts for.
    pub run_started: Date,
    /// Its run, and whether the run is finished (else the contribution counts for the month
    /// until it is).
    pub run_id: String,
    pub run_finished: bool,
}

/// A stored run as the one-time rebuild counts it: a test submitted by `username` on the day
/// of `started`, and its inactive tasks.
#[derive(Debug, Clone, PartialEq)]
pub struct RunContribution {
    pub username: String,
    pub started: Date,
    pub run_id: String,
    pub finished: bool,
    pub tasks: Vec<TaskContribution>,
}

/// The stored runs, read once to build the table on a store that never had it.
pub trait StoredRuns {
    /// Calls `each` with every stored run (unreadable ones skipped); returns how many were
    /// read.
    fn each_stored_run(&self, each: &mut dyn FnMut(RunContribution)) -> LedgerResult<usize>;
}

/// The in-memory table.
#[derive(Default)]
pub(super) struct Table {
    /// When the stored documents were last read; `None` before the first read.
    loaded: Option<Instant>,
    rows: HashMap<String, Contributor>,
    /// Users whose document must be written.
    dirty: HashSet<String>,
    /// Games per hour of each user's active machines.
    games_per_hour: HashMap<String, f64>,
    /// Unfinished run id → the users with an `open` bucket for it (from `rows`).
    open_runs: HashMap<String, HashSet<String>>,
}

pub(super) type ContributorTable = Mutex<Table>;

fn day_of(d: &Date) -> String {
    d.0.format("%Y-%m-%d").to_string()
}

fn month_start() -> String {
    day_of(&Date(
        chrono::Utc::now() - chrono::Duration::days(MONTH_DAYS),
    ))
}

impl Table {
    /// Takes freshly read rows, and indexes their unfinished runs.
    fn set_rows(&mut self, rows: HashMap<String, Contributor>) {
        self.open_runs.clear();
        for c in rows.values() {
            for run_id in c.open.keys() {
                self.open_runs
                    .entry(run_id.clone())
                    .or_default()
                    .insert(c.username.clone());
            }
        }
        self.rows = rows;
        self.loaded = Some(Instant::now());
    }

    /// The bucket a contribution to `run_id` (started on `day`) goes to.
    fn bucket(
        &mut self,
        username: &str,
        run_id: &str,
        finished: bool,
        day: String,
    ) -> &mut DayTotals {
        if !finished {
            self.open_runs
                .entry(run_id.to_string())
                .or_default()
                .insert(username.to_string());
        }
        let row = self.row(username);
        if finished {
            row.days.entry(day).or_default()
        } else {
            &mut row
                .open
                .entry(run_id.to_string())
                .or_insert_with(|| OpenRun {
                    day,
                    totals: DayTotals::default(),
                    last_updated: None,
                })
                .totals
        }
    }

    /// A run finished: its buckets join the all-time totals and move to their start day.
    fn finish(&mut self, run_id: &str) {
        for user in self.open_runs.remove(run_id).unwrap_or_default() {
            let Some(row) = self.rows.get_mut(&user) else {
                continue;
            };
            let Some(open) = row.open.remove(run_id) else {
                continue;
            };
            row.cpu_hours += open.totals.cpu_hours;
            row.games = row.games.saturating_add(open.totals.games);
            row.tests = row.tests.saturating_add(open.totals.tests);
            if let Some(at) = open.last_updated {
                newest(&mut row.last_updated, at);
            }
            let d = row.days.entry(open.day).or_default();
            d.cpu_hours += open.totals.cpu_hours;
            d.games = d.games.saturating_add(open.totals.games);
            d.tests = d.tests.saturating_add(open.totals.tests);
            self.dirty.insert(user);
        }
    }

    fn row(&mut self, username: &str) -> &mut Contributor {
        self.dirty.insert(username.to_string());
        self.rows
            .entry(username.to_string())
            .or_insert_with(|| Contributor {
                username: username.to_string(),
                ..Contributor::default()
            })
    }

    /// A task's games and hours: all time at once when its run is finished, else when the
    /// run finishes ([`Table::finish`]); the month at once either way.
    fn add_task(&mut self, task: &TaskContribution) {
        let (games, hours, at) = (task.games, task.cpu_hours, task.ended);
        if games == 0 {
            return;
        }
        let day = day_of(&task.run_started);
        if task.run_finished {
            let row = self.row(&task.username);
            row.cpu_hours += hours;
            row.games = row.games.saturating_add(games);
            newest(&mut row.last_updated, at);
        }
        let d = self.bucket(&task.username, &task.run_id, task.run_finished, day);
        d.cpu_hours += hours;
        d.games = d.games.saturating_add(games);
        if !task.run_finished
            && let Some(open) = self
                .rows
                .get_mut(&task.username)
                .and_then(|r| r.open.get_mut(&task.run_id))
        {
            newest(&mut open.last_updated, at);
        }
    }

    /// A test submitted: all time once its run is finished, the month at once.
    fn add_test(&mut self, username: &str, started: &Date, run_id: &str, finished: bool) {
        let day = day_of(started);
        if finished {
            let row = self.row(username);
            row.tests = row.tests.saturating_add(1);
        }
        let d = self.bucket(username, run_id, finished, day);
        d.tests = d.tests.saturating_add(1);
    }
}

/// Keeps the later of `slot` and `at`.
fn newest(slot: &mut Option<Date>, at: Date) {
    if slot.as_ref().is_none_or(|l| l.0 < at.0) {
        *slot = Some(at);
    }
}

fn to_doc(c: &Contributor) -> Option<Doc> {
    let mut doc = match serde_json::to_value(c) {
        Ok(Value::Object(m)) => m,
        _ => return None,
    };
    doc.insert("_id".into(), json!(format!("{KIND}:{}", c.username)));
    doc.insert("kind".into(), json!(KIND));
    Some(doc)
}

impl Ledger {
    /// Adds a task just set inactive to its user's row (the caller may hold the run's lock:
    /// memory only).
    pub fn add_contribution(&self, task: &TaskContribution) {
        self.contributors.lock().add_task(task);
    }

    /// Counts a new run, started at `started`, as a test submitted by `username`.
    pub fn add_test_submitted(&self, username: &str, started: &Date, run_id: &str) {
        self.contributors
            .lock()
            .add_test(username, started, run_id, false);
    }

    /// A run finished (or was deleted): what it got stops counting for the month once its
    /// start day is older than the month (the caller may hold the run's lock: memory only).
    pub fn run_finished(&self, run_id: &str) {
        self.contributors.lock().finish(run_id);
    }

    /// Replaces the games per hour of every user (the `update_nps_gpm` job).
    pub fn set_games_per_hour(&self, gph: HashMap<String, f64>) {
        self.contributors.lock().games_per_hour = gph;
    }

    /// Reads the stored table (primary: at start, rebuilding it from `runs` once if it was
    /// never built).
    pub fn load_contributors(&self, runs: &dyn StoredRuns) -> LedgerResult<()> {
        if self.primary && self.store.get(Collection::ShoalKv, MARKER)?.is_none() {
            self.rebuild_contributors(runs)?;
        }
        let rows = self.read_contributors()?;
        self.contributors.lock().set_rows(rows);
        Ok(())
    }

    fn read_contributors(&self) -> LedgerResult<HashMap<String, Contributor>> {
        let docs = self.store.find(
            Collection::ShoalKv,
            &Query::new().with(Cond::Eq("kind".into(), json!(KIND))),
        )?;
        Ok(docs
            .into_iter()
            .filter_map(|d| serde_json::from_value::<Contributor>(Value::Object(d)).ok())
            .map(|c| (c.username.clone(), c))
            .collect())
    }

    /// Builds the table from every stored run (tasks already inactive; active ones are added
    /// when they end), writes it and the marker. Start-up only.
    fn rebuild_contributors(&self, stored: &dyn StoredRuns) -> LedgerResult<()> {
        let mut table = Table::default();
        let runs = stored.each_stored_run(&mut |run| {
            table.add_test(&run.username, &run.started, &run.run_id, run.finished);
            for task in &run.tasks {
                table.add_task(task);
            }
        })?;
        let docs: Vec<Doc> = table.rows.values().filter_map(to_doc).collect();
        self.store.put_many(Collection::ShoalKv, &docs)?;
        let mut marker = Doc::new();
        marker.insert("_id".into(), json!(MARKER));
        marker.insert("value".into(), json!(true));
        self.store.put(Collection::ShoalKv, &marker)?;
        tracing::info!(runs, users = docs.len(), "built the contributors table");
        Ok(())
    }

    /// Writes the rows that changed (write-behind job, shutdown); days older than the month
    /// are dropped first. Rows whose write fails stay dirty.
    pub fn persist_contributors(&self) -> LedgerResult<usize> {
        let start = month_start();
        let docs: Vec<(String, Doc)> = {
            let mut t = self.contributors.lock();
            let dirty: Vec<String> = t.dirty.drain().collect();
            dirty
                .into_iter()
                .filter_map(|u| {
                    let row = t.rows.get_mut(&u)?;
                    row.days.retain(|day, _| *day >= start);
                    Some((u, to_doc(row)?))
                })
                .collect()
        };
        if docs.is_empty() {
            return Ok(0);
        }
        let only: Vec<Doc> = docs.iter().map(|(_, d)| d.clone()).collect();
        match self.store.put_many(Collection::ShoalKv, &only) {
            Ok(()) => Ok(docs.len()),
            Err(e) => {
                self.contributors
                    .lock()
                    .dirty
                    .extend(docs.into_iter().map(|(u, _)| u));
                Err(e)
            }
        }
    }

    /// The contributors, all time or over the last month (users with games or tests only).
    /// Reads memory (a secondary re-reads the store when its copy is stale).
    pub fn contributors(&self, monthly: bool) -> LedgerResult<Vec<ContributorRow>> {
        let stale = self
            .contributors
            .lock()
            .loaded
            .is_none_or(|at| !self.primary && at.elapsed() > SECONDARY_RELOAD);
        if stale {
            let rows = self.read_contributors()?;
            self.contributors.lock().set_rows(rows);
        }
        let start = month_start();
        let t = self.contributors.lock();
        Ok(t.rows
            .values()
            .filter_map(|c| {
                let (cpu_hours, games, tests) = if monthly {
                    c.days
                        .range(start.clone()..)
                        .map(|(_, d)| d)
                        .chain(c.open.values().map(|o| &o.totals))
                        .fold((0.0, 0u64, 0u64), |(h, g, n), d| {
                            (
                                h + d.cpu_hours,
                                g.saturating_add(d.games),
                                n.saturating_add(d.tests),
                            )
                        })
                } else {
                    (c.cpu_hours, c.games, c.tests)
                };
                (games > 0 || tests > 0).then(|| ContributorRow {
                    username: c.username.clone(),
                    cpu_hours,
                    games,
                    tests,
                    games_per_hour: t.games_per_hour.get(&c.username).copied().unwrap_or(0.0),
                    last_updated: c.last_updated,
                })
            })
            .collect())
    }

    /// One user's all-time row, if they contributed.
    pub fn contributor(&self, username: &str) -> LedgerResult<Option<ContributorRow>> {
        let loaded = self.contributors.lock().loaded.is_some();
        if !loaded || !self.primary {
            // The same freshness rules as the list.
            return Ok(self
                .contributors(false)?
                .into_iter()
                .find(|r| r.username == username));
        }
        let t = self.contributors.lock();
        Ok(t.rows.get(username).map(|c| ContributorRow {
            username: c.username.clone(),
            cpu_hours: c.cpu_hours,
            games: c.games,
            tests: c.tests,
            games_per_hour: t.games_per_hour.get(username).copied().unwrap_or(0.0),
            last_updated: c.last_updated,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_outside_the_month_are_not_summed() {
        let mut c = Contributor {
            username: "a".into(),
            ..Contributor::default()
        };
        let old = day_of(&Date(chrono::Utc::now() - chrono::Duration::days(40)));
        let new = day_of(&Date::now());
        c.days.insert(
            old.clone(),
            DayTotals {
                cpu_hours: 5.0,
                games: 10,
                tests: 1,
            },
        );
        c.days.insert(
            new,
            DayTotals {
                cpu_hours: 1.0,
                games: 2,
                tests: 0,
            },
        );
        let start = month_start();
        let sum: u64 = c.days.range(start..).map(|(_, d)| d.games).sum();
        assert_eq!(sum, 2);
        assert!(old < month_start());
    }

    fn task(run_id: &str, started: Date, finished: bool, games: u64) -> TaskContribution {
        TaskContribution {
            username: "w".into(),
            games,
            cpu_hours: games as f64,
            ended: Date::now(),
            run_started: started,
            run_id: run_id.into(),
            run_finished: finished,
        }
    }

    #[test]
    fn an_unfinished_run_counts_for_the_month_however_old_until_it_finishes() {
        let old = Date(chrono::Utc::now() - chrono::Duration::days(45));
        let mut t = Table::default();
        t.add_test("w", &old, "old-open", false);
        t.add_task(&task("old-open", old, false, 10));
        t.add_task(&task("old-done", old, true, 100));
        t.add_task(&task("new", Date::now(), false, 1));
        let month = |t: &Table| -> (u64, u64) {
            let c = &t.rows["w"];
            let start = month_start();
            let days = c.days.range(start..).map(|(_, d)| d);
            let all = days.chain(c.open.values().map(|o| &o.totals));
            all.fold((0, 0), |(g, n), d| (g + d.games, n + d.tests))
        };
        assert_eq!(month(&t), (11, 1), "the old unfinished run and the new one");
        let w = &t.rows["w"];
        assert_eq!(
            (w.games, w.tests),
            (100, 0),
            "all time counts finished runs only (Fishtest's)"
        );
        t.finish("old-open");
        assert_eq!(month(&t), (1, 0), "finished, it is as old as its start");
        let w = &t.rows["w"];
        assert_eq!(
            (w.games, w.tests),
            (110, 1),
            "the finished run joins all time"
        );
        assert!(t.rows["w"].open.contains_key("new"));
        assert!(!t.open_runs.contains_key("old-open"));
        // Read back, the index is rebuilt from the rows.
        let rows = t.rows.clone();
        let mut again = Table::default();
        again.set_rows(rows);
        again.finish("new");
        assert_eq!(month(&again), (1, 0));
        assert!(again.rows["w"].open.is_empty());
        assert_eq!(again.rows["w"].games, 111);
    }
}
