//! The action log: Fishtest's `actions` documents about runs, tasks and workers.
//!
//! Owns: the document's shape (`action_doc`, `run_fields`, the `run` label) and the two ways
//! to write one: at once (`log_action`, with no run lock held) or, from inside a run's lock,
//! through the journal's next group commit (`locked_action`, `task_action`).
//! Must not: call any other layer of `rundb` (it is below the cache); insert into the store
//! while a run's lock is held.

use serde_json::{Value, json};

use super::model::Run;
use super::{DbResult, RunDb};
use crate::store::{Collection, Doc};

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
