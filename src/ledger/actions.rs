//! The action log: Fishtest's `actions` documents about runs, tasks, workers, users and nets.
//!
//! Owns: the document's shape ([`document`]: the action, the user, the time, a message cut at
//! 5,120 characters), writing one at once ([`Ledger::log_action`], with no run lock held: the
//! kinds Fishtest does not know, `store::SHOAL_ACTION_KINDS`, into shoal's own log
//! `shoal_actions`, never into Fishtest's `actions`), and reading both logs as one, paged
//! without reading Fishtest's log from its start: [`ActionFilter`] (the `/actions` page's
//! filters, or the subset of MongoDB
//! query operators `/api/actions` accepts, [`ActionFilter::from_mongo`]), newest first.
//! Must not: know what a run is (the run database adds a run's fields and sends the actions it
//! makes under a run's lock through its journal); insert into the store while a run's lock is
//! held.

use serde_json::{Value, json};

use super::{Ledger, LedgerResult};
use crate::store::{Collection, Cond, Doc, Order, Query, SHOAL_ACTION_KINDS};

/// The action kinds Fishtest writes, then shoal's own (`api_token`, `password_reset`).
pub const ACTION_KINDS: [&str; 20] = [
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
    "api_token",
    "password_reset",
];

/// Kinds the log hides unless asked for by name.
pub const HIDDEN_KINDS: [&str; 3] = ["system_event", "update_stats", "dead_task"];

/// Fields of an action document a query may name (`/api/actions`).
const QUERY_FIELDS: [&str; 10] = [
    "action", "username", "worker", "run_id", "run", "task_id", "message", "user", "nn", "time",
];

/// Fields the `/actions` text search looks in (those of Fishtest's text index on actions):
/// the event, the user, the worker, the message, the run's name, the target user, the net.
pub const TEXT_FIELDS: [&str; 7] = [
    "action", "username", "worker", "message", "run", "user", "nn",
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

    /// A text search over [`TEXT_FIELDS`] (substrings, case ignored): actions containing
    /// every one of `all`, and (when `all` is empty) any of `any`, and none of `none`.
    pub fn text(mut self, any: Vec<String>, all: Vec<String>, none: Vec<String>) -> Self {
        let fields = || {
            TEXT_FIELDS
                .iter()
                .map(|f| f.to_string())
                .collect::<Vec<_>>()
        };
        if all.is_empty() && !any.is_empty() {
            self.conds.push(Cond::ContainsAny(fields(), any));
        }
        for phrase in all {
            self.conds.push(Cond::ContainsAny(fields(), vec![phrase]));
        }
        if !none.is_empty() {
            self.conds.push(Cond::ContainsNone(fields(), none));
        }
        self
    }

    /// Only actions at or before `time` (seconds since the epoch).
    pub fn before(mut self, time: f64) -> Self {
        self.conds.push(Cond::Lte("time".into(), json!(time)));
        self
    }

    /// Which logs the filter can match: (Fishtest's `actions`, shoal's `shoal_actions`), by
    /// its conditions on `action` (shoal's log holds only `SHOAL_ACTION_KINDS`).
    fn logs(&self) -> (bool, bool) {
        let (mut fishtest, mut shoal) = (true, true);
        for c in &self.conds {
            let kinds: Vec<&Value> = match c {
                Cond::Eq(p, v) if p == "action" => vec![v],
                Cond::In(p, vs) if p == "action" => vs.iter().collect(),
                _ => continue,
            };
            let own = |v: &&Value| v.as_str().is_some_and(|k| SHOAL_ACTION_KINDS.contains(&k));
            shoal &= kinds.iter().any(own);
            fishtest &= kinds.iter().any(|v| !own(v));
        }
        (fishtest, shoal)
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

/// The order of a query's sort keys over documents.
fn sort_order(sort: &[(String, Order)]) -> impl Fn(&Doc, &Doc) -> std::cmp::Ordering + '_ {
    let key = |d: &Doc, path: &str| -> Option<Value> {
        let mut v = d.get(path.split('.').next()?)?;
        for part in path.split('.').skip(1) {
            v = v.get(part)?;
        }
        Some(v.clone())
    };
    move |x: &Doc, y: &Doc| {
        for (path, order) in sort {
            let o = compare(key(x, path).as_ref(), key(y, path).as_ref());
            let o = if *order == Order::Desc {
                o.reverse()
            } else {
                o
            };
            if o.is_ne() {
                return o;
            }
        }
        std::cmp::Ordering::Equal
    }
}

/// Two lists each sorted by `cmp` merged into one sorted list (ties: `a` first).
fn merge_sorted(
    a: Vec<Doc>,
    b: Vec<Doc>,
    cmp: &impl Fn(&Doc, &Doc) -> std::cmp::Ordering,
) -> Vec<Doc> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        let next = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if cmp(y, x).is_lt() => b.next(),
            (Some(_), _) => a.next(),
            (None, Some(_)) => b.next(),
            (None, None) => break,
        };
        out.extend(next);
    }
    out
}

/// Values ordered as a sort needs them: absent first, then numbers, then strings.
fn compare(x: Option<&Value>, y: Option<&Value>) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (x, y) {
        (Some(Value::Number(a)), Some(Value::Number(b))) => a
            .as_f64()
            .partial_cmp(&b.as_f64())
            .unwrap_or(Ordering::Equal),
        (Some(Value::String(a)), Some(Value::String(b))) => a.cmp(b),
        (Some(Value::Number(_)), Some(Value::String(_))) => Ordering::Less,
        (Some(Value::String(_)), Some(Value::Number(_))) => Ordering::Greater,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        _ => Ordering::Equal,
    }
}

/// An action document: `fields` plus the action, the user and the time (seconds since the
/// epoch, as Fishtest); a message is cut at 5,120 characters. [`Ledger::log_action`] inserts
/// one at once; the run database sends the ones it makes under a run's lock through its
/// journal instead.
pub fn document(action: &str, username: &str, mut fields: Doc) -> Doc {
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

impl Ledger {
    /// Actions matching `filter`, newest first: `limit` of them after skipping `skip`.
    pub fn find_actions(
        &self,
        filter: &ActionFilter,
        skip: u64,
        limit: u64,
    ) -> LedgerResult<Vec<Doc>> {
        self.find_actions_sorted(filter, &[], false, skip, limit)
    }

    /// As [`Ledger::find_actions`], ordered by the document paths `by` first (descending or
    /// not), then newest first.
    pub fn find_actions_sorted(
        &self,
        filter: &ActionFilter,
        by: &[&str],
        descending: bool,
        skip: u64,
        limit: u64,
    ) -> LedgerResult<Vec<Doc>> {
        let order = if descending { Order::Desc } else { Order::Asc };
        let mut q = Query::new();
        for path in by {
            q = q.sort(path, order);
        }
        // Newest first breaks ties (a path sorted twice would be one key in MongoDB's sort).
        if !by.contains(&"time") {
            q = q.sort("time", Order::Desc);
        }
        let mut q = q.sort("_id", Order::Desc);
        q.filter = filter.conds.clone();
        let (fishtest, shoal) = filter.logs();
        if !shoal {
            return self
                .store
                .find(Collection::Actions, &q.skip(skip).limit(limit));
        }
        if !fishtest {
            return self
                .store
                .find(Collection::ShoalActions, &q.skip(skip).limit(limit));
        }
        // Both logs. shoal's is small (tokens, reset links): its first `skip + limit`
        // matches, all it can contribute to the page.
        let upto = skip.saturating_add(limit);
        let own = self
            .store
            .find(Collection::ShoalActions, &q.clone().limit(upto))?;
        if own.is_empty() {
            return self
                .store
                .find(Collection::Actions, &q.skip(skip).limit(limit));
        }
        let n_own = u64::try_from(own.len()).unwrap_or(u64::MAX);
        let cmp = sort_order(&q.sort);
        // Fishtest's log from `skip - n_own` on (at least as far back as the page can start):
        // the merge of that window with shoal's actions that sort after its first entry
        // starts at the first entry's place in the merged log.
        let from = skip.saturating_sub(n_own);
        let theirs = self.store.find(
            Collection::Actions,
            &q.clone().skip(from).limit(limit.saturating_add(n_own)),
        )?;
        let (start, theirs, own) = match theirs.first() {
            Some(first) if from > 0 => {
                let (before, after): (Vec<Doc>, Vec<Doc>) =
                    own.into_iter().partition(|d| cmp(d, first).is_lt());
                let before = u64::try_from(before.len()).unwrap_or(u64::MAX);
                (from.saturating_add(before), theirs, after)
            }
            Some(_) => (0, theirs, own),
            // Fishtest's log has at most `from` entries; `from > 0` means `own` holds all of
            // shoal's matches, so the page starts past both logs' ends: empty.
            None if from > 0 => return Ok(Vec::new()),
            None => (0, theirs, own),
        };
        let merged = merge_sorted(theirs, own, &cmp);
        let drop = usize::try_from(skip.saturating_sub(start)).unwrap_or(usize::MAX);
        Ok(merged
            .into_iter()
            .skip(drop)
            .take(usize::try_from(limit).unwrap_or(usize::MAX))
            .collect())
    }

    /// How many actions match `filter` (in both logs).
    pub fn count_actions(&self, filter: &ActionFilter) -> LedgerResult<u64> {
        let (fishtest, shoal) = filter.logs();
        let mut n = 0u64;
        if fishtest {
            n = n.saturating_add(self.store.count(Collection::Actions, &filter.conds)?);
        }
        if shoal {
            n = n.saturating_add(self.store.count(Collection::ShoalActions, &filter.conds)?);
        }
        Ok(n)
    }

    /// Inserts an action document now (Fishtest's `actions` shape: see [`document`]). Never
    /// with a run's lock held.
    pub fn log_action(&self, action: &str, username: &str, fields: Doc) -> LedgerResult<()> {
        let coll = if SHOAL_ACTION_KINDS.contains(&action) {
            Collection::ShoalActions
        } else {
            Collection::Actions
        };
        self.store
            .insert(coll, document(action, username, fields))?;
        self.note_kind(action);
        Ok(())
    }

    /// Logs a `system_event` by the server itself (`fishtest.system`), as Fishtest does for
    /// an instance's start and stop; shoal also for official master and the book list.
    pub fn log_system_event(&self, message: impl Into<String>) -> LedgerResult<()> {
        let mut fields = Doc::new();
        fields.insert("message".into(), Value::String(message.into()));
        self.log_action("system_event", "fishtest.system", fields)
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

#[cfg(test)]
mod shoal_log {
    use super::*;
    use crate::store::testkit::temp_store;

    fn fields(message: &str) -> Doc {
        let mut d = Doc::new();
        d.insert("message".into(), json!(message));
        d
    }

    /// shoal's own kinds go to its own log, never to Fishtest's `actions`, and read back with
    /// Fishtest's kinds as one log, newest first, paged and counted across both.
    #[test]
    fn own_kinds_in_own_log_read_as_one() {
        let (_dir, store) = temp_store();
        let ledger = Ledger::new(store.clone(), true);
        for (i, kind) in [
            "new_run",
            "api_token",
            "stop_run",
            "password_reset",
            "new_run",
        ]
        .iter()
        .enumerate()
        {
            ledger
                .log_action(kind, "alice", fields(&format!("m{i}")))
                .expect("log");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let kinds = |coll| -> Vec<String> {
            store
                .find(coll, &Query::new().sort("time", Order::Asc))
                .expect("find")
                .iter()
                .map(|d| d["action"].as_str().expect("kind").to_string())
                .collect()
        };
        assert_eq!(
            kinds(Collection::Actions),
            ["new_run", "stop_run", "new_run"]
        );
        assert_eq!(
            kinds(Collection::ShoalActions),
            ["api_token", "password_reset"]
        );
        let messages = |f: &ActionFilter, skip, limit| -> Vec<String> {
            ledger
                .find_actions(f, skip, limit)
                .expect("find")
                .iter()
                .map(|d| d["message"].as_str().expect("message").to_string())
                .collect()
        };
        let all = ActionFilter::all();
        assert_eq!(messages(&all, 0, 10), ["m4", "m3", "m2", "m1", "m0"]);
        assert_eq!(messages(&all, 1, 2), ["m3", "m2"]);
        assert_eq!(ledger.count_actions(&all).expect("count"), 5);
        let own = ActionFilter::all().kinds(&["api_token"]);
        assert_eq!(messages(&own, 0, 10), ["m1"]);
        assert_eq!(ledger.count_actions(&own).expect("count"), 1);
        // Every page of the merged log is the naive merge's (more actions, both logs
        // interleaved and in runs).
        for i in 0..25 {
            let kind = if i % 7 < 2 { "api_token" } else { "new_run" };
            ledger
                .log_action(kind, "bob", fields(&format!("n{i}")))
                .expect("log");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let everything = messages(&all, 0, 1000);
        assert_eq!(everything.len(), 30);
        for skip in 0..34u64 {
            for limit in 1..9u64 {
                let want: Vec<String> = everything
                    .iter()
                    .skip(skip as usize)
                    .take(limit as usize)
                    .cloned()
                    .collect();
                assert_eq!(
                    messages(&all, skip, limit),
                    want,
                    "skip {skip} limit {limit}"
                );
            }
        }
        let theirs = ActionFilter::all().kinds(&["new_run", "stop_run"]);
        assert_eq!(messages(&theirs, 0, 3), ["n24", "n23", "n20"]);
        assert_eq!(ledger.count_actions(&theirs).expect("count"), 20);
    }
}
