//! The action log: Fishtest's `actions` documents about runs, tasks and workers.
//!
//! Owns: the document's shape (`action_doc`, `run_fields`, the `run` label) and the two ways
//! to write one: at once (`log_action`, with no run lock held) or, from inside a run's lock,
//! through the journal's next group commit (`locked_action`, `task_action`).
//! Reading it: [`ActionFilter`] (the `/actions` page's filters, or the subset of MongoDB
//! query operators `/api/actions` accepts, [`ActionFilter::from_mongo`]), newest first.
//! Must not: call any other layer of `rundb` (it is below the cache); insert into the store
//! while a run's lock is held.

use serde_json::{Value, json};

use super::model::Run;
use super::{DbResult, RunDb};
use crate::store::{Collection, Cond, Doc, Order, Query};

/// The action kinds Fishtest writes.
pub const ACTION_KINDS: [&str; 18] = [
    "new_run",
    "approve_run",
    "modify_run",
    "stop_run",
    "delete_run",
    "purge_run",
    "finished_run",
    "block_user",
    "block_worker",
    "accept_user",
    "upload_nn",
    "failed_task",
    "crash_or_time",
    "log_message",
    "worker_log",
    "dead_task",
    "system_event",
    "update_stats",
];

/// Kinds the log hides unless asked for by name.
pub const HIDDEN_KINDS: [&str; 3] = ["system_event", "update_stats", "dead_task"];

/// Fields of an action document a query may name (`/api/actions`).
const QUERY_FIELDS: [&str; 10] = [
    "action", "username", "worker", "run_id", "run", "task_id", "message", "user", "nn", "time",
];

/// The most values one `$in` may list.
pub const MAX_IN: usize = 1000;

/// Which actions to read: every condition must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ActionFilter {
    conds: Vec<Cond>,
}

impl ActionFilter {
    /// No condition: every action.
    pub fn all() -> Self {
        ActionFilter::default()
    }

    /// Only these kinds.
    pub fn kinds(mut self, kinds: &[&str]) -> Self {
        self.conds.push(Cond::In(
            "action".into(),
            kinds.iter().map(|k| json!(k)).collect(),
        ));
        self
    }

    /// Only actions by one of these users (none: nothing matches).
    pub fn usernames(mut self, names: Vec<String>) -> Self {
        self.conds.push(Cond::In(
            "username".into(),
            names.into_iter().map(Value::String).collect(),
        ));
        self
    }

    /// Only actions about one run.
    pub fn run_id(mut self, run_id: &str) -> Self {
        self.conds.push(Cond::Eq("run_id".into(), json!(run_id)));
        self
    }

    /// Only actions at or before `time` (seconds since the epoch).
    pub fn before(mut self, time: f64) -> Self {
        self.conds.push(Cond::Lte("time".into(), json!(time)));
        self
    }

    /// The subset of a MongoDB filter `/api/actions` accepts: an object whose keys are action
    /// fields (`action`, `username`, `worker`, `run_id`, `run`, `task_id`, `message`, `user`,
    /// `nn`, `time`) and whose values are a scalar (equality) or an object of operators
    /// (`$eq`, `$ne`, `$gt`, `$gte`, `$lt`, `$lte` with a scalar; `$in` with up to
    /// [`MAX_IN`] scalars; `$exists` with a bool). Anything else is refused with the reason.
    pub fn from_mongo(query: &Value) -> Result<Self, String> {
        let Value::Object(map) = query else {
            return Err("the query must be an object".into());
        };
        let scalar = |v: &Value| matches!(v, Value::String(_) | Value::Number(_) | Value::Bool(_));
        let mut conds = Vec::new();
        for (field, v) in map {
            if !QUERY_FIELDS.contains(&field.as_str()) {
                return Err(format!("unsupported field {field}"));
            }
            let f = field.clone();
            match v {
                v if scalar(v) => conds.push(Cond::Eq(f, v.clone())),
                Value::Object(ops) if !ops.is_empty() => {
                    for (op, arg) in ops {
                        let f = f.clone();
                        let cond = match (op.as_str(), arg) {
                            ("$in", Value::Array(items))
                                if items.len() <= MAX_IN && items.iter().all(scalar) =>
                            {
                                Cond::In(f, items.clone())
                            }
                            ("$exists", Value::Bool(b)) => Cond::Exists(f, *b),
                            (op, a) if scalar(a) => match op {
                                "$eq" => Cond::Eq(f, a.clone()),
                                "$ne" => Cond::Ne(f, a.clone()),
                                "$gt" => Cond::Gt(f, a.clone()),
                                "$gte" => Cond::Gte(f, a.clone()),
                                "$lt" => Cond::Lt(f, a.clone()),
                                "$lte" => Cond::Lte(f, a.clone()),
                                _ => return Err(format!("unsupported operator {op}")),
                            },
                            (op, _) => return Err(format!("unsupported use of {op} on {field}")),
                        };
                        conds.push(cond);
                    }
                }
                _ => return Err(format!("unsupported value for {field}")),
            }
        }
        Ok(ActionFilter { conds })
    }
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

/// An action document: `fields` plus the action, the user and the time (seconds since the
/// epoch, as Fishtest); a message is cut at 5,120 characters.
fn action_doc(action: &str, username: &str, mut fields: Doc) -> Doc {
    fields.insert("action".into(), json!(action));
    fields.insert("username".into(), json!(username));
    let time = chrono::Utc::now().timestamp_micros() as f64 / 1e6;
    fields.insert("time".into(), json!(time));
    if let Some(Value::String(m)) = fields.get_mut("message")
        && m.chars().count() > 5120
    {
        *m = m.chars().take(5120).collect();
    }
    fields
}

/// Fishtest's action `run` label: `new_tag[:23]-md5(run_id)[:7]`.
pub(super) fn run_label(run: &Run) -> String {
    use md5::{Digest, Md5};
    let tag: String = run.args.new_tag.chars().take(23).collect();
    let digest = hex::encode(Md5::digest(run.id.as_bytes()));
    format!("{tag}-{}", &digest[..7])
}

impl RunDb {
    /// Actions matching `filter`, newest first: `limit` of them after skipping `skip`.
    pub fn find_actions(&self, filter: &ActionFilter, skip: u64, limit: u64) -> DbResult<Vec<Doc>> {
        let mut q = Query::new()
            .sort("time", Order::Desc)
            .sort("_id", Order::Desc)
            .skip(skip)
            .limit(limit);
        q.filter = filter.conds.clone();
        Ok(self.store.find(Collection::Actions, &q)?)
    }

    /// How many actions match `filter`.
    pub fn count_actions(&self, filter: &ActionFilter) -> DbResult<u64> {
        Ok(self.store.count(Collection::Actions, &filter.conds)?)
    }

    /// Inserts an action document now (Fishtest's `actions` shape: see `action_doc`).
    pub fn log_action(&self, action: &str, username: &str, fields: Doc) -> DbResult<()> {
        self.store
            .insert(Collection::Actions, action_doc(action, username, fields))?;
        Ok(())
    }

    /// Logs an action from inside a run's lock, where no store write may happen: the document
    /// goes to the journal's next group commit, ahead of (and so durable no later than) the
    /// change that the same request then commits and awaits.
    pub(super) fn locked_action(&self, action: &str, username: &str, mut fields: Doc) {
        fields.insert("_id".into(), json!(crate::store::new_object_id()));
        drop(
            self.journal
                .submit_action(action_doc(action, username, fields)),
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mongo_subset() {
        let f = ActionFilter::from_mongo(&json!({
            "action": {"$in": ["finished_run", "stop_run"]},
            "time": {"$gte": 5.0},
            "run_id": "abc",
        }))
        .expect("valid");
        assert_eq!(f.conds.len(), 3);
        for bad in [
            json!([1]),
            json!({"password": "x"}),
            json!({"action": {"$regex": "x"}}),
            json!({"action": {"$in": "x"}}),
            json!({"action": {"$in": [{"a": 1}]}}),
            json!({"action": {}}),
            json!({"$where": "1"}),
            json!({"time": {"$gte": [1]}}),
        ] {
            assert!(ActionFilter::from_mongo(&bad).is_err(), "{bad}");
        }
        let many: Vec<u64> = (0..=MAX_IN as u64).collect();
        assert!(ActionFilter::from_mongo(&json!({"task_id": {"$in": many}})).is_err());
    }
}
