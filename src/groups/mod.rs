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
    /// Some take runs (approved, unfinished) and none passed.
    Active,
    /// No take runs yet and none passed: the unfinished takes wait for approval. Not listed
    /// on the dashboard (it cannot play until an approver acts); it becomes `Active` at the
    /// first tick after a take is approved, and `Ended` if its waiting takes are deleted.
    Pending,
    /// A take passed (`winner`).
    Passed,
    /// Every take ended and none passed.
    Ended,
}

impl GroupState {
    /// Still decided at every tick (active or waiting for approval).
    pub fn live(self) -> bool {
        matches!(self, GroupState::Active | GroupState::Pending)
    }

    /// The live state the takes give: `Active` if one runs, else `Pending` if one waits for
    /// approval, else `Ended`.
    pub fn of_takes(states: impl IntoIterator<Item = TakeState>) -> GroupState {
        let mut out = GroupState::Ended;
        for s in states {
            match s {
                TakeState::Running => return GroupState::Active,
                TakeState::Pending => out = GroupState::Pending,
                _ => {}
            }
        }
        out
    }

    pub fn name(self) -> &'static str {
        match self {
            GroupState::Active => "active",
            GroupState::Pending => "pending",
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
    /// The take's run id.
    pub run_id: String,
    /// The run, without its tasks; `None` if it no longer exists (purged): shown as
    /// missing, in its place.
    pub run: Option<Run>,
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

/// A take's state as its run says (an unfinished run not yet approved is pending: it
/// cannot play).
pub fn take_state(run: &Run) -> TakeState {
    if !run.finished {
        return if run.approved {
            TakeState::Running
        } else {
            TakeState::Pending
        };
    }
    match run.args.sprt.as_ref().map(|s| s.state) {
        Some(SprtState::Accepted) if !run.deleted => TakeState::Passed,
        Some(SprtState::Rejected) => TakeState::Failed,
        _ if run.failed => TakeState::Failed,
        _ => TakeState::Stopped,
    }
}

/// A take refused for what makes a group (the arguments themselves are `build_run`'s): it must
/// be an SPRT test (a group stops its takes by their SPRTs; a fixed number of games or SPSA
/// has nothing to pass), and differ from every earlier take (`earlier`) in its commit, its
/// options or its nets (two identical takes would split one test's games in two).
fn check_take(earlier: &[CreateArgs], args: &CreateArgs) -> Result<(), ArgError> {
    if args.sprt.is_none() || args.spsa.is_some() {
        return Err(ArgError {
            field: "stop_rule",
            message: "a test group's takes are SPRT tests (each passes only by its own SPRT): \
                      submit a fixed number of games or SPSA as a single test"
                .into(),
        });
    }
    let key = |a: &CreateArgs| {
        let mut nets = a.new_nets.clone();
        nets.sort();
        (
            a.resolved_new.trim().to_string(),
            a.new_options.trim().to_string(),
            nets,
        )
    };
    let mine = key(args);
    if let Some(j) = earlier.iter().position(|e| key(e) == mine) {
        return Err(ArgError {
            field: "resolved_new",
            message: format!(
                "the same commit, options and nets as take {}: each take must differ",
                j + 1
            ),
        });
    }
    Ok(())
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
    /// checked first (an SPRT test, unlike the earlier takes, and `build_run`'s checks:
    /// nothing is created if one is refused), then each created as an ordinary run, then the
    /// group stored; if a run or the group cannot be stored, the runs already created are
    /// deleted again. Blocking.
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
            check_take(&takes[..i], args)
                .map_err(|error| GroupError::Take { take: i + 1, error })?;
            build_run(args.clone(), &user.username, &books)
                .map_err(|error| GroupError::Take { take: i + 1, error })?;
        }
        let mut run_ids = Vec::with_capacity(takes.len());
        for (i, args) in takes.into_iter().enumerate() {
            let error = match self.runs.submit_run(args, user) {
                Ok(id) => {
                    run_ids.push(id);
                    continue;
                }
                Err(crate::rundb::SubmitError::Args(error)) => {
                    GroupError::Take { take: i + 1, error }
                }
                Err(crate::rundb::SubmitError::Db(e)) => e.into(),
            };
            self.undo(&run_ids, user);
            return Err(error);
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
        if let Err(e) = self.save(&group) {
            self.undo(&run_ids, user);
            return Err(e);
        }
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

    /// The runs of a group whose creation failed part-way deleted again (as their submitter
    /// would: each logs `delete_run`), so a failed creation leaves no take behind.
    fn undo(&self, run_ids: &[String], user: &User) {
        for id in run_ids {
            if let Err(e) = self.runs.delete_run(id, user) {
                tracing::warn!(run = %id, error = %e, "a take of a group not created is left");
            }
        }
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

    /// The active groups (some take runs), newest first: the dashboard's list. A group whose
    /// takes all wait for approval is `Pending` and not listed.
    pub fn active(&self) -> Vec<Group> {
        self.with_state(|s| s == GroupState::Active)
    }

    /// The groups in a state `keep` accepts, newest first.
    fn with_state(&self, keep: impl Fn(GroupState) -> bool) -> Vec<Group> {
        let mut out: Vec<Group> = self
            .groups
            .read()
            .values()
            .filter(|g| keep(g.state))
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
        // One entry per take, in the group's order (a run no longer found stays in its place,
        // so the decision's per-take values stay aligned).
        let mut runs = Vec::with_capacity(group.run_ids.len());
        for id in &group.run_ids {
            runs.push(self.runs.run_head(id)?);
        }
        let total: u64 = runs.iter().flatten().map(|r| r.results.games()).sum();
        let mut group = group;
        if group.state.live() {
            // Read live: an approval shows at once, not at the next tick.
            let now = GroupState::of_takes(runs.iter().flatten().map(take_state));
            if now.live() {
                group.state = now;
            } else {
                // Every take ended since the last tick: what the tick will save (a passed
                // take is the winner), not the stale live state.
                let passed = group
                    .run_ids
                    .iter()
                    .zip(&runs)
                    .find(|(_, r)| r.as_ref().map(take_state) == Some(TakeState::Passed));
                match passed {
                    Some((id, _)) => {
                        group.state = GroupState::Passed;
                        group.winner = Some(id.clone());
                    }
                    None => group.state = GroupState::Ended,
                }
            }
        }
        let takes = group
            .run_ids
            .iter()
            .zip(runs)
            .enumerate()
            .map(|(i, (run_id, run))| {
                let state = run.as_ref().map_or(TakeState::Stopped, take_state);
                let running = state == TakeState::Running;
                let pick = |v: Option<&Vec<f64>>| {
                    v.and_then(|w| w.get(i).copied())
                        .filter(|_| running)
                        .unwrap_or(0.0)
                };
                let games = run.as_ref().map_or(0, |r| r.results.games());
                TakeInfo {
                    run_id: run_id.clone(),
                    share_played: if total == 0 {
                        0.0
                    } else {
                        games as f64 / total as f64
                    },
                    share_target: pick(decision.as_ref().map(|d| &d.weights)),
                    p_best: pick(decision.as_ref().map(|d| &d.p_best)),
                    stopped: group.stopped.get(run_id).cloned(),
                    state,
                    run,
                }
            })
            .collect();
        Ok(GroupView { group, takes })
    }

    /// Every live group (active or pending) decided again (the `groups` periodic job;
    /// blocking).
    pub fn tick(&self) -> Result<(), GroupError> {
        let ids: Vec<String> = self
            .with_state(GroupState::live)
            .into_iter()
            .map(|g| g.group_id)
            .collect();
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
        if !group.state.live() {
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
        } else {
            let now = GroupState::of_takes(views.iter().map(|v| v.state));
            changed |= now != group.state;
            group.state = now;
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
            if !group.state.live() {
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

/// A stop message the group logged, "superseded by <run>[rest]", split into the run and the
/// rest (both empty if the message is not one): the group's page links the run.
pub fn split_stop_message(message: &str) -> (String, String) {
    let Some(tail) = message.strip_prefix("superseded by ") else {
        return (String::new(), String::new());
    };
    let end = tail
        .find(|c: char| !c.is_ascii_hexdigit())
        .unwrap_or(tail.len());
    if end == 0 {
        return (String::new(), String::new());
    }
    (tail[..end].to_string(), tail[end..].to_string())
}

/// The run a stop names (the winner, or the leader).
fn why_run(group: &Group, why: StopWhy) -> String {
    let i = match why {
        StopWhy::Superseded(i) | StopWhy::Hopeless(i) => i,
    };
    group.run_ids.get(i).cloned().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::split_stop_message;

    #[test]
    fn a_group_stop_message_names_the_run_that_superseded_the_take() {
        assert_eq!(
            split_stop_message(
                "superseded by 0123456789abcdef01234567: it cannot realistically overtake it"
            ),
            (
                "0123456789abcdef01234567".to_string(),
                ": it cannot realistically overtake it".to_string()
            )
        );
        assert_eq!(
            split_stop_message("superseded by 0123456789abcdef01234567"),
            ("0123456789abcdef01234567".to_string(), String::new())
        );
        assert_eq!(
            split_stop_message("stopped"),
            (String::new(), String::new())
        );
    }
}
