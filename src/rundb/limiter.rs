//! The run database's side of the limits engine (`crate::limits`): which grants a task takes,
//! and the inputs of the floating limits' computations.
//!
//! Owns: `LimitIds` (the engine's ids of the built-ins and of the limits keyed by the worker
//! or by the run, fixed at start), a task's grants (`worker_grants`, `run_grants`: the
//! machine limit with the user's `machine_limit`, the run's `max_active_tasks` window, every
//! configured concurrency and floating limit), the holders rebuilt from the active tasks at
//! start (`rebuild_holders`), and `refresh_floating` (the built-in computations fed from the
//! cached runs, their results or failures handed to the engine).
//! Must not: call the operations or recovery; take `sched`; hold a run's lock while calling
//! the engine in a way that takes another run's (the engine is a leaf lock).

use std::time::Instant;

use serde_json::{Map, Value, json};

use super::model::{Run, WorkerInfo};
use super::users::User;
use super::{DbResult, RunDb, RunDbError};
use crate::limits::compute::{self, RunLoad};
use crate::limits::def::{MACHINE, SPSA_CORES, WINDOW};
use crate::limits::{Engine, Grant, Holder, KeyCtx, KeyKind, LimitId, Source};
use crate::store::{Collection, Doc};

/// The `kvstore` document with the maxima approvers set.
const LIMITS_DOC: &str = "limits";

/// The engine's ids that request_task needs, computed once.
#[derive(Debug, Clone, Default)]
pub(super) struct LimitIds {
    pub(super) machine: Option<LimitId>,
    pub(super) window: Option<LimitId>,
    pub(super) spsa: Option<LimitId>,
    /// Configured limits keyed by something of the worker (user, ip, user_ip, worker,
    /// resource).
    pub(super) worker_keyed: Vec<LimitId>,
    /// Configured limits keyed by run (concurrency and floating).
    pub(super) run_keyed: Vec<LimitId>,
}

impl LimitIds {
    pub(super) fn of(engine: &Engine) -> LimitIds {
        let configured = |pred: fn(&KeyKind) -> bool| -> Vec<LimitId> {
            engine
                .concurrency_ids(pred)
                .into_iter()
                .filter(|i| engine.defs().get(*i).is_some_and(|d| !d.builtin))
                .collect()
        };
        LimitIds {
            machine: engine.id(MACHINE),
            window: engine.id(WINDOW),
            spsa: engine.id(SPSA_CORES),
            worker_keyed: configured(|k| *k != KeyKind::Run),
            run_keyed: configured(|k| *k == KeyKind::Run),
        }
    }
}

/// The key context of a task: its worker, and its run if known.
pub(super) fn ctx<'a>(wi: &'a WorkerInfo, short: &'a str, run: Option<&'a str>) -> KeyCtx<'a> {
    KeyCtx {
        user: Some(&wi.username),
        ip: Some(&wi.remote_addr),
        worker: Some(short),
        run,
    }
}

impl RunDb {
    /// The grants keyed by the worker: the machine limit (against `machine_limit`, the user's)
    /// first, then the configured limits in order.
    pub(super) fn worker_grants(
        &self,
        wi: &WorkerInfo,
        short: &str,
        machine_limit: Option<u32>,
    ) -> Vec<Grant> {
        let ids = &self.limit_ids;
        let ctx = ctx(wi, short, None);
        let mut grants = Vec::with_capacity(1 + ids.worker_keyed.len());
        if let Some(m) = ids.machine {
            grants.push(Grant {
                limit: m,
                key: wi.remote_addr.clone(),
                units: 1,
                max: machine_limit.map(u64::from),
            });
        }
        for id in &ids.worker_keyed {
            let Some(def) = self.limits.defs().get(*id) else {
                continue;
            };
            if let Some(key) = def.key.value(&ctx) {
                grants.push(Grant {
                    limit: *id,
                    key: key.into_owned(),
                    units: self.limits.units(*id, wi.concurrency),
                    max: None,
                });
            }
        }
        grants
    }

    /// The grants keyed by the run: its window (always held, so that a window set later by
    /// `/tests/modify` counts the tasks already running), the SPSA core cap for SPSA runs,
    /// then the configured run-keyed limits. `checked_only` leaves out what cannot refuse
    /// (a run without a window), for request_task's per-candidate check.
    pub(super) fn run_grants(&self, run: &Run, concurrency: u32, checked_only: bool) -> Vec<Grant> {
        let ids = &self.limit_ids;
        let mut grants = Vec::with_capacity(2 + ids.run_keyed.len());
        let window = run.args.max_active_tasks;
        if let Some(w) = ids.window
            && (!checked_only || window.is_some())
        {
            grants.push(Grant {
                limit: w,
                key: run.id.clone(),
                units: 1,
                max: window.map(u64::from),
            });
        }
        if let Some(s) = ids.spsa
            && run.args.spsa.is_some()
        {
            grants.push(Grant {
                limit: s,
                key: run.id.clone(),
                units: u64::from(concurrency),
                max: None,
            });
        }
        for id in &ids.run_keyed {
            grants.push(Grant {
                limit: *id,
                key: run.id.clone(),
                units: self.limits.units(*id, concurrency),
                max: None,
            });
        }
        grants
    }

    /// What `run_grants(run, concurrency, true)` would check, without building grants:
    /// `(tag, run id, limit, units, max)` pushed onto `out`.
    pub(super) fn push_run_checks<'a>(
        &self,
        run: &Run,
        id: &'a str,
        concurrency: u32,
        tag: usize,
        out: &mut Vec<(usize, &'a str, LimitId, u64, Option<u64>)>,
    ) {
        let ids = &self.limit_ids;
        if let (Some(w), Some(max)) = (ids.window, run.args.max_active_tasks) {
            out.push((tag, id, w, 1, Some(u64::from(max))));
        }
        if let Some(s) = ids.spsa
            && run.args.spsa.is_some()
        {
            out.push((tag, id, s, u64::from(concurrency), None));
        }
        for l in &ids.run_keyed {
            out.push((tag, id, *l, self.limits.units(*l, concurrency), None));
        }
    }

    /// Start-up: every active task of `run` holds its grants again, whatever the maxima.
    pub(super) fn rebuild_holders(&self, run: &Run) {
        for (i, t) in run.tasks.iter().enumerate() {
            if !t.active {
                continue;
            }
            let short = t.worker_info.short_name();
            let mut grants = self.worker_grants(&t.worker_info, &short, None);
            grants.extend(self.run_grants(run, t.worker_info.concurrency, false));
            self.limits.rebuild(Holder::Task(run.id.clone(), i), grants);
        }
    }

    /// An approver sets a configured limit's max: applied at once (waiters of its keys are
    /// served), kept in the `kvstore` document `limits` (applied again at every start, over
    /// settings.toml) and logged as a `set_limit` action. Returns the old max.
    pub fn set_limit_max(&self, name: &str, max: u64, by: &User) -> DbResult<u64> {
        if !by.is_approver() {
            return Err(RunDbError::Unauthorized(
                "Only approvers may change limits".into(),
            ));
        }
        let id = self
            .limits
            .id(name)
            .ok_or_else(|| RunDbError::Invalid(format!("No limit named {name}")))?;
        let old = self.limits.set_max(id, max).map_err(RunDbError::Invalid)?;
        let mut value = self
            .store
            .get(Collection::Kvstore, LIMITS_DOC)?
            .and_then(|d| d.get("value").and_then(Value::as_object).cloned())
            .unwrap_or_default();
        value.insert(name.to_string(), json!(max));
        let mut doc = Doc::new();
        doc.insert("_id".into(), json!(LIMITS_DOC));
        doc.insert("value".into(), Value::Object(value));
        self.store.put(Collection::Kvstore, &doc)?;
        let mut fields = Map::new();
        fields.insert("limit".into(), json!(name));
        fields.insert(
            "message".into(),
            json!(format!("{name}: max {old} -> {max}")),
        );
        self.log_action("set_limit", &by.username, fields)?;
        Ok(old)
    }

    /// Start-up: the maxima approvers set (a limit no longer configured is ignored).
    pub(super) fn load_limit_maxima(&self) -> DbResult<()> {
        let Some(doc) = self.store.get(Collection::Kvstore, LIMITS_DOC)? else {
            return Ok(());
        };
        let Some(map) = doc.get("value").and_then(Value::as_object) else {
            return Ok(());
        };
        for (name, v) in map {
            if let (Some(id), Some(max)) = (self.limits.id(name), v.as_u64())
                && let Err(e) = self.limits.set_max(id, max)
            {
                tracing::warn!(limit = %name, error = %e, "stored limit max ignored");
            }
        }
        Ok(())
    }

    /// The limits engine (views, rate checks, waiting, edits).
    pub fn limits(&self) -> &std::sync::Arc<Engine> {
        &self.limits
    }

    /// Runs the due floating refreshes: the inputs are read from the cached runs (each run's
    /// lock briefly, one at a time), the computation is pure; a failure keeps the old value
    /// and backs off (the engine's rule).
    pub fn refresh_floating(&self) -> DbResult<usize> {
        let now = Instant::now();
        let due = self.limits.due(now);
        if due.is_empty() {
            return Ok(0);
        }
        let loads = self.run_loads();
        for (id, source) in &due {
            let default_max = self.limits.defs().get(*id).map_or(1, |d| d.max);
            let result = match source {
                Source::SpsaCoreCap => compute::spsa_core_cap(&loads).map(|v| (None, v)),
                Source::FairShare => compute::fair_share(&loads, default_max).map(|v| (None, v)),
                Source::WriteBehindLag => {
                    compute::write_behind_lag(self.write_behind_lag(), default_max)
                        .map(|v| (Some(v), Vec::new()))
                }
            };
            match result {
                Ok((global, per_key)) => self.limits.refreshed(*id, global, per_key, now),
                Err(e) => {
                    tracing::warn!(limit = *id, error = %e, "floating limit refresh failed");
                    self.limits.refresh_failed(*id, e, now);
                }
            }
        }
        Ok(due.len())
    }

    /// Publishes each limit's max, holders, waiters and rejections as Prometheus series
    /// (`shoal_limit_*{limit="<name>"}`).
    pub fn publish_limit_metrics(&self) {
        for (name, max, held, waiters, rejected) in self.limits.totals() {
            metrics::gauge!("shoal_limit_max", "limit" => name.clone()).set(max as f64);
            metrics::gauge!("shoal_limit_holders", "limit" => name.clone()).set(held as f64);
            metrics::gauge!("shoal_limit_waiters", "limit" => name.clone()).set(waiters as f64);
            metrics::counter!("shoal_limit_rejected_total", "limit" => name).absolute(rejected);
        }
    }

    fn run_loads(&self) -> Vec<RunLoad> {
        let ids = self.unfinished.read().clone();
        let entries: Vec<_> = {
            let cache = self.cache.read();
            ids.iter().filter_map(|id| cache.get(id).cloned()).collect()
        };
        entries
            .iter()
            .map(|e| {
                let run = e.run.lock();
                RunLoad {
                    id: run.id.clone(),
                    spsa_params: run.args.spsa.as_ref().map(|s| s.params.len()),
                    throughput: run.args.throughput,
                    cores: run.cores,
                    active: run.approved && !run.finished && run.remaining_games() > 0,
                }
            })
            .collect()
    }
}
