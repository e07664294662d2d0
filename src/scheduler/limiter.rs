//! The scheduler's side of the limits engine (`crate::limits`): which grants a task takes,
//! the maxima approvers set, and the inputs of the floating limits' computations.
//!
//! Owns: `LimitIds` (the engine's ids of the built-ins and of the limits keyed by the worker
//! or by the run, fixed at start), a task's grants (`worker_grants`, `run_grants`: the
//! machine limit with the user's `machine_limit`, the run's `max_active_tasks` window, every
//! configured concurrency and floating limit; keys borrowed from the worker and the run, so
//! asking allocates nothing but the `user@ip` key), request_task's per-candidate check
//! (`RunLimits`, `run_full`: no engine call when no limit is keyed by the run and the run
//! has no window), the holders rebuilt from the active tasks at start (`rebuild_holders`),
//! and `refresh_floating` (the built-in computations fed from the cached runs, their results
//! or failures handed to the engine).
//! Must not: call the run core's operations; take `sched`; hold a run's lock while calling
//! the engine in a way that takes another run's (the engine is a leaf lock).

use std::borrow::Cow;
use std::time::Instant;

use serde_json::{Map, Value, json};

use super::Scheduler;
use crate::accounts::User;
use crate::limits::compute::{self, RunLoad};
use crate::limits::def::{MACHINE, SPSA_CORES, WINDOW};
use crate::limits::{Engine, GrantRef, Holder, KeyCtx, KeyKind, LimitId, Source};
use crate::rundb::model::{Run, WorkerInfo};
use crate::rundb::{DbResult, RunDbError};
use crate::store::{Collection, Doc};

/// The `shoal_kvstore` document with the maxima approvers set.
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

/// What request_task checks of one candidate run's limits, gathered under its lock.
#[derive(Debug, Clone, Copy)]
pub(super) struct RunLimits<'a> {
    pub(super) id: &'a str,
    /// The run's window (`max_active_tasks`), if any.
    pub(super) window: Option<u64>,
    /// An SPSA run (under the SPSA core cap).
    pub(super) spsa: bool,
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

impl Scheduler {
    /// Number of active tasks per remote address (for tests and metrics).
    pub fn connections(&self, addr: &str) -> u32 {
        let held = self
            .limit_ids
            .machine
            .map_or(0, |m| self.limits.held_by_key(m, addr));
        u32::try_from(held).unwrap_or(u32::MAX)
    }

    /// The grants keyed by the worker: the machine limit (against `machine_limit`, the user's)
    /// first, then the configured limits in order.
    pub(super) fn worker_grants<'a>(
        &'a self,
        wi: &'a WorkerInfo,
        short: &'a str,
        machine_limit: Option<u32>,
    ) -> Vec<GrantRef<'a>> {
        let ids = &self.limit_ids;
        let ctx = ctx(wi, short, None);
        let mut grants = Vec::with_capacity(1 + ids.worker_keyed.len());
        if let Some(m) = ids.machine {
            grants.push(GrantRef {
                limit: m,
                key: Cow::Borrowed(&wi.remote_addr),
                units: 1,
                max: machine_limit.map(u64::from),
            });
        }
        for id in &ids.worker_keyed {
            let Some(def) = self.limits.defs().get(*id) else {
                continue;
            };
            if let Some(key) = def.key.value(&ctx) {
                grants.push(GrantRef {
                    limit: *id,
                    key,
                    units: self.limits.units(*id, wi.concurrency),
                    max: None,
                });
            }
        }
        grants
    }

    /// The grants keyed by the run: its window (always held, so that a window set later by
    /// `/tests/modify` counts the tasks already running), the SPSA core cap for SPSA runs,
    /// then the configured run-keyed limits.
    pub(super) fn run_grants<'a>(
        &self,
        run: &'a Run,
        concurrency: u32,
    ) -> impl Iterator<Item = GrantRef<'a>> + use<'a, '_> {
        let ids = &self.limit_ids;
        let id = run.id.as_str();
        let window = ids.window.map(|w| GrantRef {
            limit: w,
            key: Cow::Borrowed(id),
            units: 1,
            max: run.args.max_active_tasks.map(u64::from),
        });
        let spsa = ids
            .spsa
            .filter(|_| run.args.spsa.is_some())
            .map(|s| GrantRef {
                limit: s,
                key: Cow::Borrowed(id),
                units: u64::from(concurrency),
                max: None,
            });
        let configured = ids.run_keyed.iter().map(move |l| GrantRef {
            limit: *l,
            key: Cow::Borrowed(id),
            units: self.limits.units(*l, concurrency),
            max: None,
        });
        window.into_iter().chain(spsa).chain(configured)
    }

    /// What request_task checks of `run`'s limits (read under its lock).
    pub(super) fn run_limits<'a>(&self, run: &Run, id: &'a str) -> RunLimits<'a> {
        RunLimits {
            id,
            window: run.args.max_active_tasks.map(u64::from),
            spsa: run.args.spsa.is_some(),
        }
    }

    /// Whether a run-keyed limit of the candidate `r` is full for a worker of `concurrency`
    /// cores: its window, the SPSA core cap, the configured run-keyed limits (what
    /// `run_grants` would take, less a window that is not set). No engine call when none
    /// applies.
    pub(super) fn run_full(&self, r: &RunLimits<'_>, concurrency: u32) -> bool {
        let ids = &self.limit_ids;
        let window = ids
            .window
            .zip(r.window)
            .map(|(w, max)| (r.id, w, 1, Some(max)));
        let spsa = ids
            .spsa
            .filter(|_| r.spsa)
            .map(|s| (r.id, s, u64::from(concurrency), None));
        if window.is_none() && spsa.is_none() && ids.run_keyed.is_empty() {
            return false;
        }
        let configured = ids
            .run_keyed
            .iter()
            .map(|l| (r.id, *l, self.limits.units(*l, concurrency), None));
        self.limits
            .any_full(window.into_iter().chain(spsa).chain(configured))
    }

    /// Start-up: every active task of `run` holds its grants again, whatever the maxima.
    pub(super) fn rebuild_holders(&self, run: &Run) {
        for (i, t) in run.tasks.iter().enumerate() {
            if !t.active {
                continue;
            }
            let short = t.worker_info.short_name();
            let mut grants = self.worker_grants(&t.worker_info, &short, None);
            grants.extend(self.run_grants(run, t.worker_info.concurrency));
            self.limits
                .rebuild(Holder::Task(run.id.clone(), i), &grants);
        }
    }

    /// An approver sets a configured limit's max: applied at once (waiters of its keys are
    /// served), kept in the `shoal_kvstore` document `limits` (applied again at every start, over
    /// settings.toml) and logged as a `set_limit` action. Returns the old max.
    pub fn set_limit_max(&self, name: &str, max: u64, by: &User) -> DbResult<u64> {
        if !by.is_approver() {
            return Err(RunDbError::LimitsNeedApprover {
                username: by.username.clone(),
            });
        }
        let id = self
            .limits
            .id(name)
            .ok_or_else(|| RunDbError::UnknownLimit {
                name: name.to_string(),
            })?;
        let old = self
            .limits
            .set_max(id, max)
            .map_err(|reason| RunDbError::BadLimitMax {
                name: name.to_string(),
                reason,
            })?;
        let store = self.runs.store();
        let mut value = store
            .get(Collection::ShoalKv, LIMITS_DOC)?
            .and_then(|d| d.get("value").and_then(Value::as_object).cloned())
            .unwrap_or_default();
        value.insert(name.to_string(), json!(max));
        let mut doc = Doc::new();
        doc.insert("_id".into(), json!(LIMITS_DOC));
        doc.insert("value".into(), Value::Object(value));
        store.put(Collection::ShoalKv, &doc)?;
        let mut fields = Map::new();
        fields.insert("limit".into(), json!(name));
        fields.insert(
            "message".into(),
            json!(format!("{name}: max {old} -> {max}")),
        );
        self.runs
            .ledger()
            .log_action("set_limit", &by.username, fields)?;
        Ok(old)
    }

    /// Start-up: the maxima approvers set (a limit no longer configured is ignored).
    pub(super) fn load_limit_maxima(&self) -> DbResult<()> {
        let Some(doc) = self.runs.store().get(Collection::ShoalKv, LIMITS_DOC)? else {
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
                    compute::write_behind_lag(self.runs.write_behind_lag(), default_max)
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
        let ids = self.runs.unfinished_ids();
        let mut loads = Vec::with_capacity(ids.len());
        self.runs.scan_cached(&ids, |_, seen| {
            let run = seen.run;
            loads.push(RunLoad {
                id: run.id.clone(),
                spsa_params: run.args.spsa.as_ref().map(|s| s.params.len()),
                throughput: run.args.throughput,
                cores: run.cores,
                active: run.approved && !run.finished && run.remaining_games() > 0,
            });
        });
        loads
    }
}
