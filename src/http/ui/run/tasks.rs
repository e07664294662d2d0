//! The run page's tasks table and chi² box (`run_tasks.html`, inside the page and as the
//! `/tests/tasks/{id}` fragment): a row per task (purged tasks from their `bad_tasks` copy, as
//! Fishtest shows them), Fishtest's "Stats" box (chi², dof, p-value over the run's workers)
//! and each task's residual in Fishtest's colours, with words beside a yellow or red one.
//!
//! Owns: turning a run copy into those rows (each with its worker's details) and that box;
//! the residuals' display rule. The residuals are computed over every task, as cheap
//! entries ([`Entry`]); the page of the table (search, sort, paging) is cut afterwards by
//! `run_tasks_view.rs`, and only its rows are drawn.
//! Must not: compute the chi² or the residuals itself (`crate::purge` does, exactly as a purge
//! does), take locks or read the store (it gets a copy of the run, in the page job).

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt::{self, Display, Formatter};

use crate::http::ui::kit::Href;
use crate::purge::{PurgeTask, ResidualColor, get_chi2, task_residual};
use crate::rundb::model::{PurgeView as _, Run, Task, WorkerInfo};

/// One row of the tasks table (the worker's details are written from its `worker_info`, with
/// no string made for them).
pub struct TaskRow<'a> {
    pub idx: usize,
    /// The long worker name (`user-Ncores-uuid1-uuid2[*]`).
    pub worker: String,
    /// `/workers/{short name}`, the worker's page, for approvers; empty for others and for
    /// an unknown worker.
    pub worker_href: String,
    /// The worker's owner and details as Fishtest's Info column gives them (`os: …`,
    /// `ram: …MiB`, `compiler: …`, `python: …`, `worker: …`, `arch: …`, `features: …`)
    /// plus its cores.
    pub w: &'a WorkerInfo,
    pub played: u64,
    pub num_games: u64,
    pub wins: u64,
    pub losses: u64,
    pub draws: u64,
    /// The pentanomial counts (Fishtest's "Pentanomial [0-2]" column).
    pub pentanomial: [u64; 5],
    pub crashes: u64,
    pub time_losses: u64,
    pub last_updated: Stamp,
    /// `active`, `dead`, `bad`, `purged` or empty (done).
    pub mark: &'static str,
    /// The residual with 3 decimals, or `-` when the worker is not in the chi² table.
    pub residual: String,
    /// `green`, `yellow`, `red`, or empty (no residual).
    pub residual_colour: &'static str,
    /// The words beside a residual that is out of line (the colour is not the only cue).
    pub residual_note: &'static str,
    /// The task `show_task` names (highlighted).
    pub shown: bool,
}

impl TaskRow<'_> {
    /// The state the table shows: the mark, or `done`.
    pub fn state(&self) -> &'static str {
        state_label(self.mark)
    }

    /// The worker's details, written out as the row shows them.
    pub fn details(&self) -> Details<'_> {
        Details(self.w)
    }
}

/// The state a table shows for a task's mark: the mark, or `done`.
pub fn state_label(mark: &'static str) -> &'static str {
    if mark.is_empty() { "done" } else { mark }
}

/// A worker's details as Fishtest's Info column gives them, `label: value` joined by `; `,
/// the empty ones left out (`os`, `ram`, `compiler`, `python`, `worker`, `cores`, `arch`,
/// `features`): the one rule for what a row shows and what the search looks in.
pub struct Details<'a>(pub &'a WorkerInfo);

impl Details<'_> {
    /// Calls `each` with every detail shown, in order.
    fn each(&self, mut each: impl FnMut(fmt::Arguments<'_>) -> fmt::Result) -> fmt::Result {
        let w = self.0;
        let compiler = Compiler(w);
        if !w.uname.is_empty() {
            each(format_args!("os: {}", w.uname))?;
        }
        if w.max_memory > 0 {
            each(format_args!("ram: {}MiB", w.max_memory))?;
        }
        if !compiler.is_empty() {
            each(format_args!("compiler: {compiler}"))?;
        }
        if !w.python_version.is_empty() {
            each(format_args!("python: {}", Dotted(&w.python_version)))?;
        }
        if w.version > 0 {
            each(format_args!("worker: {}", w.version))?;
        }
        each(format_args!("cores: {}", w.concurrency))?;
        if !w.worker_arch.is_empty() {
            each(format_args!("arch: {}", w.worker_arch))?;
        }
        if !w.arch.is_empty() {
            each(format_args!("features: {}", w.arch))?;
        }
        Ok(())
    }

    /// Each detail as a string (for the search).
    pub fn strings(&self) -> Vec<String> {
        let mut out = Vec::with_capacity(8);
        let _ = self.each(|d| {
            out.push(d.to_string());
            Ok(())
        });
        out
    }
}

impl Display for Details<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let mut first = true;
        self.each(|d| {
            if !first {
                f.write_str("; ")?;
            }
            first = false;
            f.write_fmt(d)
        })
    }
}

/// A version as dotted numbers, written out (`[11, 4, 0]` is `11.4.0`).
struct Dotted<'a>(&'a [i64]);

impl Display for Dotted<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        for (i, n) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            write!(f, "{n}")?;
        }
        Ok(())
    }
}

/// A worker's compiler and its version (`g++ 12.2.0`), written out.
struct Compiler<'a>(&'a WorkerInfo);

impl Compiler<'_> {
    fn is_empty(&self) -> bool {
        self.0.compiler.trim().is_empty() && self.0.gcc_version.is_empty()
    }
}

impl Display for Compiler<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let name = self.0.compiler.trim();
        f.write_str(name)?;
        if !name.is_empty() && !self.0.gcc_version.is_empty() {
            f.write_str(" ")?;
        }
        Dotted(&self.0.gcc_version).fmt(f)
    }
}

/// A time as the table shows it, `YYYY-MM-DD HH:MM:SS` (UTC), written out.
#[derive(Clone, Copy)]
pub struct Stamp(pub chrono::DateTime<chrono::Utc>);

impl Display for Stamp {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        use chrono::{Datelike, Timelike};
        let t = &self.0;
        write!(
            f,
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
            t.year(),
            t.month(),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        )
    }
}

/// Every task of the run and the chi² box: what a page of the table is cut from
/// (`run_tasks_view.rs`).
pub struct Tasks<'a> {
    pub id: String,
    pub entries: Vec<Entry<'a>>,
    /// The chi² box and the residual column (runs that are not SPSA, with tasks).
    pub chi2: Option<Chi2Box>,
}

impl Tasks<'_> {
    /// Every task's row, in task order (the page draws only its own: [`Entry::row`]).
    pub fn rows(&self) -> Vec<TaskRow<'_>> {
        self.entries.iter().map(|e| e.row(false)).collect()
    }
}

/// One task before its row is drawn: what sorting and counting need, cheap to make for
/// every task of a run (a row's strings are made for the rows of the page alone).
pub struct Entry<'a> {
    pub idx: usize,
    task: Cow<'a, Task>,
    purged: bool,
    /// The residual and its colour, when the table shows one.
    residual: Option<(f64, ResidualColor)>,
}

impl Entry<'_> {
    /// Games played.
    pub fn played(&self) -> u64 {
        self.task.stats.games()
    }

    /// `active`, `dead`, `bad`, `purged` or empty (done), as [`TaskRow::mark`].
    pub fn mark(&self) -> &'static str {
        let t = &self.task;
        if self.purged {
            "purged"
        } else if t.bad {
            "bad"
        } else if t.active {
            "active"
        } else if self.played() < t.num_games {
            "dead"
        } else {
            ""
        }
    }

    /// The last update in whole seconds (the table shows no finer).
    pub fn updated(&self) -> i64 {
        self.task.last_updated.0.timestamp()
    }

    /// The task's counts.
    pub fn stats(&self) -> &crate::rundb::model::Stats {
        &self.task.stats
    }

    /// The residual the row shows, if it shows a number.
    pub fn shown_residual(&self) -> Option<f64> {
        self.residual.map(|(r, _)| r).filter(|r| r.is_finite())
    }

    /// The worker's information, as the task holds it.
    pub fn info(&self) -> &WorkerInfo {
        &self.task.worker_info
    }

    /// The long worker name, as the row shows it.
    pub fn worker(&self) -> String {
        self.task.worker_info.long_name()
    }

    /// The residual's colour as the row shows it (none for a residual that is not finite).
    fn colour(&self) -> Option<ResidualColor> {
        self.residual.filter(|(r, _)| r.is_finite()).map(|(_, c)| c)
    }

    /// The row drawn; `approver`: its worker links to the worker's page.
    pub fn row(&self, approver: bool) -> TaskRow<'_> {
        let mut row = task_row(self.idx, &self.task, self.mark(), approver);
        if let Some((residual, colour)) = self.residual {
            set_residual(&mut row, residual, colour, self.task.stats.crash_or_time());
        }
        row
    }
}

/// Fishtest's "Stats" box over the run's workers: chi², degrees of freedom, p-value.
pub struct Chi2Box {
    /// 2 decimals, or `-` when there is no table.
    pub chi2: String,
    pub dof: usize,
    /// A percentage with 2 decimals, or `-`.
    pub p: String,
    /// Workers in the table (those with enough games).
    pub workers: usize,
    /// The residual thresholds (2 decimals): yellow from `z95`, red from `z99`.
    pub z95: String,
    pub z99: String,
    /// Tasks whose residual is yellow, and red.
    pub yellow: usize,
    pub red: usize,
}

fn task_row<'a>(idx: usize, t: &'a Task, mark: &'static str, approver: bool) -> TaskRow<'a> {
    let w = &t.worker_info;
    TaskRow {
        idx,
        worker: w.long_name(),
        worker_href: if !approver || w.username.is_empty() || w.username == "Unknown_worker" {
            String::new()
        } else {
            Href::new("/workers").seg(&w.short_name()).to_string()
        },
        w,
        played: t.stats.games(),
        num_games: t.num_games,
        wins: t.stats.wins,
        losses: t.stats.losses,
        draws: t.stats.draws,
        pentanomial: t.stats.pentanomial,
        crashes: t.stats.crashes,
        time_losses: t.stats.time_losses,
        last_updated: Stamp(t.last_updated.0),
        mark,
        residual: "-".into(),
        residual_colour: "",
        residual_note: "",
        shown: false,
    }
}

/// A residual as the table shows it: 3 decimals on its colour, with words for the colours
/// that mean "look at this worker"; `-` for a worker outside the table (`inf`).
fn set_residual(row: &mut TaskRow, residual: f64, colour: ResidualColor, crashes: bool) {
    if !residual.is_finite() {
        return;
    }
    row.residual = format!("{residual:.3}");
    row.residual_colour = match colour {
        ResidualColor::Green => "green",
        ResidualColor::Yellow => "yellow",
        ResidualColor::Red => "red",
    };
    row.residual_note = match colour {
        _ if crashes => "crashes or time losses",
        ResidualColor::Green => "",
        ResidualColor::Yellow => "high",
        ResidualColor::Red => "out of line",
    };
}

/// A number of the chi² box, or `-` when the table is empty (NaN).
fn finite(v: f64, text: impl FnOnce(f64) -> String) -> String {
    if v.is_finite() { text(v) } else { "-".into() }
}

pub(in crate::http::ui) fn tasks(run: &Run) -> Tasks<'_> {
    let spsa = run.args.spsa.is_some();
    // The purge's view of the counts: the pairs when the run counts them, as the run core's.
    let pairs = run.counts_pairs();
    let view: Vec<PurgeTask<'_>> = run
        .tasks
        .iter()
        .map(|t| PurgeTask {
            unique_key: &t.worker_info.unique_key,
            stats: t.stats.to_purge(pairs),
            bad: t.bad,
        })
        .collect();
    let table = (!spsa && !run.tasks.is_empty()).then(|| get_chi2(&view, &HashSet::new()));
    let purged_ids: HashSet<u64> = run
        .bad_tasks
        .iter()
        .filter_map(|v| v.get("task_id").and_then(serde_json::Value::as_u64))
        .collect();
    let mut entries = Vec::with_capacity(run.tasks.len() + run.bad_tasks.len());
    for (i, t) in run.tasks.iter().enumerate() {
        // A purged task is shown from its copy in bad_tasks (as Fishtest does).
        if t.bad && purged_ids.contains(&(i as u64)) {
            continue;
        }
        let residual = match (&table, view.get(i)) {
            (Some(chi2), Some(task)) if !t.bad => Some(task_residual(task, chi2)),
            _ => None,
        };
        entries.push(Entry {
            idx: i,
            task: Cow::Borrowed(t),
            purged: false,
            residual,
        });
    }
    for v in &run.bad_tasks {
        let idx = v
            .get("task_id")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or_default() as usize;
        if let Ok(t) = serde_json::from_value::<Task>(v.clone()) {
            // Frozen at purge time: `residual` a number or "inf", `residual_color` a name.
            let residual = v.get("residual").and_then(serde_json::Value::as_f64);
            let colour = v
                .get("residual_color")
                .and_then(|c| serde_json::from_value::<ResidualColor>(c.clone()).ok());
            entries.push(Entry {
                idx,
                task: Cow::Owned(t),
                purged: true,
                residual: residual.zip(colour).filter(|_| !spsa),
            });
        }
    }
    let count = |c: ResidualColor| entries.iter().filter(|e| e.colour() == Some(c)).count();
    let chi2 = table.map(|c| Chi2Box {
        chi2: finite(c.chi2, |v| format!("{v:.2}")),
        dof: c.dof,
        p: finite(c.p, |v| format!("{:.2}%", v * 100.0)),
        workers: c.residuals.len(),
        z95: finite(c.z_95, |v| format!("{v:.2}")),
        z99: finite(c.z_99, |v| format!("{v:.2}")),
        yellow: count(ResidualColor::Yellow),
        red: count(ResidualColor::Red),
    });
    Tasks {
        id: run.id.clone(),
        entries,
        chi2,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::rundb::model::Stats;
    use crate::rundb::outcome::Assignment;
    use crate::rundb::testkit::{fixture, worker};

    fn pairs(p: [u64; 5], crashes: u64) -> Stats {
        Stats {
            wins: 2 * p[4] + p[3],
            losses: 2 * p[0] + p[1],
            draws: p[1] + 2 * p[2] + p[3],
            crashes,
            time_losses: 0,
            pentanomial: p,
        }
    }

    /// Three workers, the third with crashes; then the first purged (its copy in bad_tasks).
    #[test]
    fn residuals_of_crashed_and_purged_tasks_and_none_for_spsa() {
        let f = fixture();
        let id = f.run(json!({}), true);
        for (n, crashes) in [(1, 0), (2, 0), (3, 5)] {
            let Assignment::Task(t) = f.request(n) else {
                panic!("no task");
            };
            let (_, ticket) =
                f.db.update_task(
                    &id,
                    t.task_id,
                    pairs([5, 20, 50, 20, 5], crashes),
                    None,
                    worker(n),
                )
                .expect("update");
            f.durable(ticket);
        }
        let mut run = f.get(&id);
        let t = tasks(&run);
        let rows = t.rows();
        let c = t.chi2.as_ref().expect("a chi² box");
        assert_eq!(c.dof, 4);
        assert_eq!(c.workers, 3);
        let crashed = &rows[2];
        assert_eq!(
            (crashed.residual.as_str(), crashed.residual_colour),
            ("10.000", "red")
        );
        assert_eq!(crashed.residual_note, "crashes or time losses");
        // Identical results: residual 0, green, no words.
        assert_eq!(
            (rows[0].residual.as_str(), rows[0].residual_colour),
            ("0.000", "green")
        );
        assert_eq!(rows[0].residual_note, "");
        assert_eq!(c.red, 1);

        // A purge's copy shows its frozen residual, once; "inf" shows as "-".
        let mut copy = serde_json::to_value(&run.tasks[0]).expect("json");
        copy["task_id"] = json!(0);
        copy["bad"] = json!(true);
        copy["residual"] = json!(5.5);
        copy["residual_color"] = json!("yellow");
        run.bad_tasks.push(copy.clone());
        copy["task_id"] = json!(1);
        copy["residual"] = json!("inf");
        copy["residual_color"] = json!("red");
        run.bad_tasks.push(copy);
        run.tasks[0].bad = true;
        run.tasks[0].stats = Stats::default();
        run.tasks[1].bad = true;
        let t = tasks(&run);
        let rows = t.rows();
        let zero: Vec<&TaskRow> = rows.iter().filter(|r| r.idx == 0).collect();
        assert_eq!(zero.len(), 1);
        assert_eq!(zero[0].mark, "purged");
        assert_eq!(
            (
                zero[0].residual.as_str(),
                zero[0].residual_colour,
                zero[0].residual_note
            ),
            ("5.500", "yellow", "high")
        );
        let one: Vec<&TaskRow> = rows.iter().filter(|r| r.idx == 1).collect();
        assert_eq!(
            (one[0].residual.as_str(), one[0].residual_colour),
            ("-", "")
        );
        // One worker left: no table, and the box says so rather than printing NaN.
        let c = t.chi2.as_ref().expect("a box");
        assert_eq!((c.workers, c.chi2.as_str(), c.p.as_str()), (0, "-", "-"));

        // SPSA: neither box nor residuals.
        let spsa = f.run(
            json!({"spsa": {"raw_params": "Foo,100,0,200,10,0.002"}}),
            true,
        );
        assert!(tasks(&f.get(&spsa)).chi2.is_none());
    }
}
