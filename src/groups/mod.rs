//! Test groups (issue 39, docs/test-groups.md): several takes of one idea submitted together,
//! each an ordinary run; the group's games spent preferentially on the takes most likely to
//! pass; the others stopped as superseded when one passes.
//!
//! Owns: the groups, kept in shoal's own collection (`shoal_kvstore`, documents
//! `test_group:<id>` of kind `test_group`; never a field in Fishtest's run documents); their
//! creation (every take checked before any run is created); [`Groups::tick`], which reads each
//! active group's takes, decides with `alloc.rs` and applies the decision: the shares handed
//! to the scheduler (`scheduler::group_shares`), the takes stopped through the run core
//! (`RunDb::stop_for_group`), the group's state.
//! Must not: pass or fail a take (each take's own SPRT does, in the run core), write into a
//! run document, hold its own lock while it calls the run core, or name `http`.
//!
//! Files: `alloc.rs` (the pure rules), `simulate.rs` (`shoal simulate-groups`).

pub mod alloc;
pub mod simulate;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::accounts::User;
use crate::config::GroupSettings;
use crate::rundb::create::{ArgError, CreateArgs, build_run};
use crate::rundb::model::Run;
use crate::rundb::{RunDb, RunDbError};
use crate::scheduler::Scheduler;
use crate::stats::SprtState;
use crate::store::{Collection, Cond, Date, Query, StoreError};
use alloc::{Decision, StopWhy, TakeState, TakeView};

/// The fewest and the most takes a group has.
pub const MIN_TAKES: usize = 2;
pub const MAX_TAKES: usize = 8;

/// The `kind` of a group's document in `shoal_kvstore`.
const KIND: &str = "test_group";

/// Why a group was not created or read.
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    #[error("a group has {MIN_TAKES} to {MAX_TAKES} takes, not {0}")]
    TakeCount(usize),
    /// A take's arguments are refused (`take` counts from 1).
    #[error("take {take}: {error}")]
    Take { take: usize, error: ArgError },
    #[error("no test group {0}")]
    Unknown(String),
    #[error(transparent)]
    Runs(#[from] RunDbError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Where a group stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupState {
    /// Some take still runs and none passed.
    Active,
    /// A take passed (`winner`).
    Passed,
    /// Every take ended and none passed.
    Ended,
}

impl GroupState {
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Active => "active",
            GroupState::Passed => "passed",
            GroupState::Ended => "ended",
        }
    }
}

/// A group as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Group {
    pub group_id: String,
    pub username: String,
    pub created: Date,
    pub run_ids: Vec<String>,
    pub state: GroupState,
    #[serde(default)]
    pub winner: Option<String>,
    /// The takes the group stopped, and the message their `stop_run` logged.
    #[serde(default)]
    pub stopped: BTreeMap<String, String>,
}

/// One take as the group's page and API show it.
#[derive(Debug, Clone)]
pub struct TakeInfo {
    /// The run, without its tasks.
    pub run: Run,
    pub state: TakeState,
    /// Its part of the games the group's takes played (0..=1).
    pub share_played: f64,
    /// Its share of the group's next games (0 once it ended).
    pub share_target: f64,
    /// The posterior probability that it is the best of the running takes.
    pub p_best: f64,
    /// Why the group stopped it, if it did.
    pub stopped: Option<String>,
}

/// A group with its takes.
#[derive(Debug, Clone)]
pub struct GroupView {
    pub group: Group,
    pub takes: Vec<TakeInfo>,
}

/// The groups component (module docs).
pub struct Groups {
    runs: Arc<RunDb>,
    scheduler: Arc<Scheduler>,
    settings: GroupSettings,
    /// Every group, by id.
    groups: RwLock<HashMap<String, Group>>,
    /// Run id → its group's id.
    by_run: RwLock<HashMap<String, String>>,
    /// The last decision of each active group.
    decisions: RwLock<HashMap<String, Decision>>,
    /// One tick at a time (a take is stopped once).
    ticking: Mutex<()>,
}

fn doc_id(group_id: &str) -> String {
    format!("{KIND}:{group_id}")
}

/// A take's state as its run says.
pub fn take_state(run: &Run) -> TakeState {
    if !run.finished {
        return TakeState::Running;
    }
    match run.args.sprt.as_ref().map(|s| s.state) {
        Some(SprtState::Accepted) if !run.deleted => TakeState::Passed,
        Some(SprtState::Rejected) => TakeState::Failed,
        _ if run.failed => TakeState::Failed,
        _ => TakeState::Stopped,
    }
}

/// A take's view for the rules.
fn take_view(run: &Run) -> TakeView {
    TakeView {
        state: take_state(run),
        pentanomial: run.results.pairs().unwrap_or([0; 5]),
    }
}

impl Groups {
    /// The groups over the run core and the scheduler; every stored group read (blocking:
    /// call from the offload pool at start-up), the active ones' shares handed to the
    /// scheduler at the next tick.
    pub fn open(
        runs: Arc<RunDb>,
        scheduler: Arc<Scheduler>,
        settings: GroupSettings,
    ) -> Result<Groups, GroupError> {
        let docs = runs.store().find(
            Collection::ShoalKv,
            &Query::new().with(Cond::Eq("kind".into(), json!(KIND))),
        )?;
        let mut groups = HashMap::new();
        let mut by_run = HashMap::new();
        for doc in docs {
            match serde_json::from_value::<Group>(Value::Object(doc)) {
                Ok(g) => {
                    for r in &g.run_ids {
                        by_run.insert(r.clone(), g.group_id.clone());
                    }
                    groups.insert(g.group_id.clone(), g);
                }
                Err(e) => tracing::warn!(error = %e, "a stored test group does not read"),
            }
        }
        Ok(Groups {
            runs,
            scheduler,
            settings,
            groups: RwLock::new(groups),
            by_run: RwLock::new(by_run),
            decisions: Default::default(),
            ticking: Mutex::new(()),
        })
    }

    /// The settings the group rules read.
    pub fn settings(&self) -> &GroupSettings {
        &self.settings
    }

    /// Creates a group of `takes` (each a whole run's arguments), all by `user`: every take
    /// checked first (nothing is created if one is refused), then each created as an
    /// ordinary run, then the group stored. Blocking.
    pub fn create(
        &self,
        takes: Vec<CreateArgs>,
        user: &User,
    ) -> Result<(String, Vec<String>), GroupError> {
        if !(MIN_TAKES..=MAX_TAKES).contains(&takes.len()) {
            return Err(GroupError::TakeCount(takes.len()));
        }
        let books = self.runs.books();
        for (i, args) in takes.iter().enumerate() {
            build_run(args.clone(), &user.username, &books)
                .map_err(|error| GroupError::Take { take: i + 1, error })?;
        }
        let mut run_ids = Vec::with_capacity(takes.len());
        for (i, args) in takes.into_iter().enumerate() {
            match self.runs.submit_run(args, user) {
                Ok(id) => run_ids.push(id),
                Err(crate::rundb::SubmitError::Args(error)) => {
                    return Err(GroupError::Take { take: i + 1, error });
                }
                Err(crate::rundb::SubmitError::Db(e)) => return Err(e.into()),
            }
        }
        let group = Group {
            group_id: crate::store::new_object_id(),
            username: user.username.clone(),
            created: Date::now(),
            run_ids: run_ids.clone(),
            state: GroupState::Active,
            winner: None,
            stopped: BTreeMap::new(),
        };
        self.save(&group)?;
        let id = group.group_id.clone();
        {
            let mut by_run = self.by_run.write();
            for r in &run_ids {
                by_run.insert(r.clone(), id.clone());
            }
        }
        self.groups.write().insert(id.clone(), group);
        tracing::info!(group = %id, takes = run_ids.len(), user = %user.username, "test group created");
        self.tick_group(&id)?;
        Ok((id, run_ids))
    }

    fn save(&self, group: &Group) -> Result<(), GroupError> {
        let Value::Object(mut doc) = serde_json::to_value(group).unwrap_or_default() else {
            return Err(GroupError::Unknown(group.group_id.clone()));
        };
        doc.insert("_id".into(), json!(doc_id(&group.group_id)));
        doc.insert("kind".into(), json!(KIND));
        self.runs.store().put(Collection::ShoalKv, &doc)?;
        Ok(())
    }

    /// The group a run belongs to.
    pub fn group_of(&self, run_id: &str) -> Option<String> {
        self.by_run.read().get(run_id).cloned()
    }

    /// The active groups' ids, newest first.
    pub fn active(&self) -> Vec<Group> {
        let mut out: Vec<Group> = self
            .groups
            .read()
            .values()
            .filter(|g| g.state == GroupState::Active)
            .cloned()
            .collect();
        out.sort_by(|a, b| b.group_id.cmp(&a.group_id));
        out
    }

    /// A stored group (a secondary reads groups from the store: the primary writes them).
    fn stored(&self, group_id: &str) -> Result<Option<Group>, GroupError> {
        let Some(doc) = self
            .runs
            .store()
            .get(Collection::ShoalKv, &doc_id(group_id))?
        else {
            return Ok(None);
        };
        Ok(serde_json::from_value::<Group>(Value::Object(doc)).ok())
    }

    /// A group with its takes (blocking: reads the runs). The primary knows every group; a
    /// secondary reads it from the store.
    pub fn view(&self, group_id: &str) -> Result<GroupView, GroupError> {
        let known = if self.runs.is_primary() {
            self.groups.read().get(group_id).cloned()
        } else {
            self.stored(group_id)?
        };
        let group = known.ok_or_else(|| GroupError::Unknown(group_id.to_string()))?;
        let decision = self.decisions.read().get(group_id).cloned();
        let mut runs = Vec::with_capacity(group.run_ids.len());
        for id in &group.run_ids {
            if let Some(run) = self.runs.run_head(id)? {
                runs.push(run);
            }
        }
        let total: u64 = runs.iter().map(|r| r.results.games()).sum();
        let takes = runs
            .into_iter()
            .enumerate()
            .map(|(i, run)| {
                let state = take_state(&run);
                let running = state == TakeState::Running;
                let pick = |v: Option<&Vec<f64>>| {
                    v.and_then(|w| w.get(i).copied())
                        .filter(|_| running)
                        .unwrap_or(0.0)
                };
                TakeInfo {
                    share_played: if total == 0 {
                        0.0
                    } else {
                        run.results.games() as f64 / total as f64
                    },
                    share_target: pick(decision.as_ref().map(|d| &d.weights)),
                    p_best: pick(decision.as_ref().map(|d| &d.p_best)),
                    stopped: group.stopped.get(&run.id).cloned(),
                    state,
                    run,
                }
            })
            .collect();
        Ok(GroupView { group, takes })
    }

    /// Every active group decided again (the `groups` periodic job; blocking).
    pub fn tick(&self) -> Result<(), GroupError> {
        let ids: Vec<String> = self.active().into_iter().map(|g| g.group_id).collect();
        for id in ids {
            if let Err(e) = self.tick_group(&id) {
                tracing::warn!(group = %id, error = %e, "test group not decided");
            }
        }
        Ok(())
    }

    /// One group decided: its takes read, the rules applied, stops made, shares handed to
    /// the scheduler, its state saved when it changed.
    fn tick_group(&self, group_id: &str) -> Result<(), GroupError> {
        let _one = self.ticking.lock();
        let Some(mut group) = self.groups.read().get(group_id).cloned() else {
            return Err(GroupError::Unknown(group_id.to_string()));
        };
        if group.state != GroupState::Active {
            return Ok(());
        }
        let mut views = Vec::with_capacity(group.run_ids.len());
        for id in &group.run_ids {
            let view = match self.runs.run_head(id)? {
                Some(run) => take_view(&run),
                // A run that no longer exists ended.
                None => TakeView {
                    state: TakeState::Stopped,
                    pentanomial: [0; 5],
                },
            };
            views.push(view);
        }
        let decision = alloc::decide(&views, &self.settings);
        let mut changed = false;
        for (i, why) in &decision.stops {
            let (Some(run_id), other) = (group.run_ids.get(*i), why_run(&group, *why)) else {
                continue;
            };
            let message = match why {
                StopWhy::Superseded(_) => format!("superseded by {other}"),
                StopWhy::Hopeless(_) => {
                    format!("superseded by {other}: it cannot realistically overtake it")
                }
            };
            if self.runs.stop_for_group(run_id, &message)? {
                tracing::info!(group = %group_id, run = %run_id, %message, "take stopped by its group");
                group.stopped.insert(run_id.clone(), message);
                changed = true;
                if let Some(v) = views.get_mut(*i) {
                    v.state = TakeState::Stopped;
                }
            }
        }
        if let Some(w) = decision.winner {
            group.winner = group.run_ids.get(w).cloned();
            group.state = GroupState::Passed;
            changed = true;
        } else if views.iter().all(|v| v.state != TakeState::Running) {
            group.state = GroupState::Ended;
            changed = true;
        }
        let shares: Vec<(String, f64)> = if group.state == GroupState::Active {
            group
                .run_ids
                .iter()
                .cloned()
                .zip(decision.weights.iter().copied())
                .collect()
        } else {
            Vec::new()
        };
        self.scheduler.group_shares().set(group_id, &shares);
        if changed {
            self.save(&group)?;
            if group.state != GroupState::Active {
                tracing::info!(group = %group_id, state = group.state.name(), "test group ended");
            }
        }
        self.decisions
            .write()
            .insert(group_id.to_string(), decision);
        self.groups.write().insert(group_id.to_string(), group);
        Ok(())
    }
}

/// The run a stop names (the winner, or the leader).
fn why_run(group: &Group, why: StopWhy) -> String {
    let i = match why {
        StopWhy::Superseded(i) | StopWhy::Hopeless(i) => i,
    };
    group.run_ids.get(i).cloned().unwrap_or_default()
}
