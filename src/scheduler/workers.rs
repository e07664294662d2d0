//! The `workers` collection as people edit it: a worker (by its short name,
//! `<user>-<N>cores-<uuid prefix>`) blocked or unblocked with a message, and the list of
//! worker records the blocked-workers page shows.
//!
//! Owns: the short-name rules ([`valid_short_name`], [`editable_name`], [`owner_of`]), who may
//! change a worker (its owner or an approver), the record's shape ({worker_name, blocked,
//! message, last_updated}), the `block_worker` action, the blocked set request_task checks
//! (updated here at once; the periodic `refresh_blocked` brings other instances along), and
//! the machines page's list of workers holding an active task (`active_machines`).
//! Must not: call the run core's operations; run on the event loop (store I/O); change
//! anything when the caller may not.

use serde_json::{Value, json};

use super::Scheduler;
use crate::accounts::User;
use crate::rundb::{DbResult, RunDbError};
use crate::store::{Collection, Cond, Date, Doc, Query};

/// The longest issue message kept (longer ones are cut, as Fishtest does).
pub const MESSAGE_MAX_CHARS: usize = 500;

/// One `workers` record.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerRecord {
    pub worker_name: String,
    pub blocked: bool,
    pub message: String,
    /// When a person (or a refused request_task) last touched it; `None`: never.
    pub last_updated: Option<Date>,
}

impl WorkerRecord {
    fn of(doc: &Doc) -> Option<WorkerRecord> {
        let name = doc
            .get("worker_name")
            .or_else(|| doc.get("_id"))
            .and_then(Value::as_str)?;
        Some(WorkerRecord {
            worker_name: name.to_string(),
            blocked: doc.get("blocked").and_then(Value::as_bool).unwrap_or(false),
            message: doc
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            last_updated: doc
                .get("last_updated")
                .and_then(|v| serde_json::from_value(v.clone()).ok()),
        })
    }
}

/// What [`Scheduler::set_worker`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerChange {
    /// The blocked state changed (and was logged as `block_worker`).
    pub toggled: bool,
    pub blocked: bool,
    /// The message was longer than [`MESSAGE_MAX_CHARS`] and was cut.
    pub truncated: bool,
}

/// One machine: a worker holding an active task.
#[derive(Debug, Clone, PartialEq)]
pub struct Machine {
    pub username: String,
    pub short_name: String,
    pub concurrency: u32,
    pub worker_arch: String,
    pub country_code: String,
    pub version: u32,
    pub modified: bool,
    pub nps: f64,
    pub max_memory: u64,
    pub uname: String,
    /// The compiler as people read it (`g++ 13.2.0`), and its name and version for sorting.
    pub compiler: String,
    pub compiler_name: String,
    pub compiler_version: Vec<i64>,
    /// The Python version as people read it (`3.11.4`), and its numbers for sorting.
    pub python: String,
    pub python_version: Vec<i64>,
    pub run_id: String,
    pub new_tag: String,
    pub task_id: usize,
    pub last_updated: Date,
}

/// A version's numbers joined by dots (`[3, 11, 4]` → `3.11.4`).
fn dotted(v: &[i64]) -> String {
    v.iter().map(i64::to_string).collect::<Vec<_>>().join(".")
}

/// A short worker name: `<anything>-<digits>cores-<2 to 8 ASCII letters or digits>`.
pub fn valid_short_name(name: &str) -> bool {
    let Some((head, suffix)) = name.rsplit_once('-') else {
        return false;
    };
    let Some((_, cores)) = head.rsplit_once('-') else {
        return false;
    };
    let Some(digits) = cores.strip_suffix("cores") else {
        return false;
    };
    (2..=8).contains(&suffix.len())
        && suffix.bytes().all(|b| b.is_ascii_alphanumeric())
        && !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && name.len() <= 200
}

/// A name that can be edited: a valid short name of exactly three dash-separated parts.
pub fn editable_name(name: &str) -> bool {
    valid_short_name(name) && name.split('-').count() == 3
}

/// The worker's owner: the part before the first dash.
pub fn owner_of(name: &str) -> &str {
    name.split('-').next().unwrap_or_default()
}

/// The message as stored: line endings as `\n`, trailing whitespace stripped, at most
/// [`MESSAGE_MAX_CHARS`] characters (and whether it was cut).
pub fn normalize_message(message: &str) -> (String, bool) {
    let text = message.replace("\r\n", "\n").replace('\r', "\n");
    let truncated = text.chars().count() > MESSAGE_MAX_CHARS;
    let cut: String = text.chars().take(MESSAGE_MAX_CHARS).collect();
    (cut.trim_end().to_string(), truncated)
}

impl Scheduler {
    /// Re-reads the blocked workers.
    pub fn refresh_blocked(&self) -> DbResult<()> {
        let docs = self.runs.store().find(
            Collection::Workers,
            &Query::new().with(Cond::Eq("blocked".into(), json!(true))),
        )?;
        let set = docs
            .iter()
            .filter_map(|d| d.get("worker_name").and_then(Value::as_str))
            .map(String::from)
            .collect();
        *self.blocked.write() = set;
        Ok(())
    }

    /// A worker's record (`None`: never blocked nor described).
    pub fn worker_record(&self, name: &str) -> DbResult<Option<WorkerRecord>> {
        Ok(self
            .runs
            .store()
            .get(Collection::Workers, name)?
            .as_ref()
            .and_then(WorkerRecord::of))
    }

    /// Every worker record (the collection holds only workers someone blocked or described).
    pub fn worker_records(&self) -> DbResult<Vec<WorkerRecord>> {
        Ok(self
            .runs
            .store()
            .find(Collection::Workers, &Query::new())?
            .iter()
            .filter_map(WorkerRecord::of)
            .collect())
    }

    /// The workers holding an active task of an unfinished run, the most recently heard
    /// from first (one run's lock at a time, for a copy of its active tasks' worker fields).
    pub fn active_machines(&self) -> DbResult<Vec<Machine>> {
        let mut out = Vec::new();
        for id in self.runs.unfinished_ids() {
            self.runs.read_run(&id, |run| {
                for (task_id, t) in run.tasks.iter().enumerate().filter(|(_, t)| t.active) {
                    let w = &t.worker_info;
                    out.push(Machine {
                        username: w.username.clone(),
                        short_name: w.short_name(),
                        concurrency: w.concurrency,
                        worker_arch: w.worker_arch.clone(),
                        country_code: w.country_code.clone(),
                        version: w.version,
                        modified: w.modified,
                        nps: w.nps,
                        max_memory: w.max_memory,
                        uname: w.uname.clone(),
                        compiler: format!("{} {}", w.compiler, dotted(&w.gcc_version))
                            .trim()
                            .to_string(),
                        compiler_name: w.compiler.clone(),
                        compiler_version: w.gcc_version.clone(),
                        python: dotted(&w.python_version),
                        python_version: w.python_version.clone(),
                        run_id: run.id.clone(),
                        new_tag: run.args.new_tag.clone(),
                        task_id,
                        last_updated: t.last_updated,
                    });
                }
            })?;
        }
        out.sort_by(|a, b| {
            b.last_updated
                .cmp(&a.last_updated)
                .then_with(|| a.short_name.cmp(&b.short_name))
        });
        Ok(out)
    }

    /// Blocks or unblocks a worker and sets its issue message. Only the worker's owner or an
    /// approver may; a refusal changes nothing. A change of the blocked state is logged as
    /// `block_worker` and applies to request_task at once on this instance.
    pub fn set_worker(
        &self,
        name: &str,
        blocked: bool,
        message: &str,
        by: &User,
    ) -> DbResult<WorkerChange> {
        if !editable_name(name) {
            return Err(RunDbError::NotAWorkerName {
                name: name.to_string(),
            });
        }
        if owner_of(name) != by.username && !by.is_approver() {
            return Err(RunDbError::NotWorkerOwner {
                worker: name.to_string(),
                username: by.username.clone(),
            });
        }
        let (message, truncated) = normalize_message(message);
        // The blocked set's write lock is held across the record's read and write, so the
        // scheduler's touch of a blocked worker's record (done under the read lock) cannot
        // write back a blocked state from before this change.
        let mut set = self.blocked.write();
        let store = self.runs.store();
        let before = store.get(Collection::Workers, name)?.unwrap_or_default();
        let was_blocked = before
            .get("blocked")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let mut doc = before;
        doc.insert("_id".into(), json!(name));
        doc.insert("worker_name".into(), json!(name));
        doc.insert("blocked".into(), json!(blocked));
        doc.insert("message".into(), json!(message));
        doc.insert("last_updated".into(), Date::now().to_value());
        store.put(Collection::Workers, &doc)?;
        if blocked {
            set.insert(name.to_string());
        } else {
            set.remove(name);
        }
        drop(set);
        let toggled = was_blocked != blocked;
        if toggled {
            let mut f = Doc::new();
            f.insert("worker".into(), json!(name));
            f.insert(
                "message".into(),
                json!(if blocked { "blocked" } else { "unblocked" }),
            );
            self.runs
                .ledger()
                .log_action("block_worker", &by.username, f)?;
            tracing::info!(worker = name, blocked, by = %by.username, "worker block changed");
        }
        Ok(WorkerChange {
            toggled,
            blocked,
            truncated,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names() {
        assert!(valid_short_name("alice-8cores-1a2b3c4d"));
        assert!(valid_short_name("a-b-16cores-ab"));
        assert!(editable_name("alice-8cores-1a2b3c4d"));
        assert!(!editable_name("a-b-16cores-ab"));
        for bad in [
            "show",
            "alice",
            "alice-8cores",
            "alice-cores-abcd",
            "alice-8cores-a",
            "alice-8cores-abcdefghi",
            "alice-8cores-ab/cd",
            "alice-x8cores-abcd",
            "",
        ] {
            assert!(!valid_short_name(bad), "{bad}");
        }
        assert_eq!(owner_of("alice-8cores-1a2b3c4d"), "alice");
    }

    #[test]
    fn messages_are_normalized_and_cut() {
        assert_eq!(normalize_message("a\r\nb \r\n"), ("a\nb".into(), false));
        let long = "é".repeat(600);
        let (m, cut) = normalize_message(&long);
        assert!(cut);
        assert_eq!(m.chars().count(), MESSAGE_MAX_CHARS);
    }
}
