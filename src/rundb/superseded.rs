//! A take of a test group stopped by its group (issue 39, docs/test-groups.md): superseded
//! by another take that passed, or unable to overtake the leader. The run is finished as a
//! person's stop finishes it (neither passed nor failed: its SPRT keeps its own state), and
//! the action log says why in a `stop_run` by the server (no worker, no task, as a user stop,
//! which Fishtest's schema accepts).
//!
//! Must not: mark the run passed or failed, or touch another run.

use super::records::run_fields;
use super::{DbResult, Op, RunDb};

/// The server's own name in the action log.
const SYSTEM: &str = "fishtest.system";

impl RunDb {
    /// Stops an unfinished run for its group with `message` (e.g. "Superseded by <run>"):
    /// finished (saved at once), `stop_run` logged by the server. `Ok(false)`: the run was
    /// already finished (nothing done).
    pub fn stop_for_group(&self, run_id: &str, message: &str) -> DbResult<bool> {
        let entry = self.control_entry(run_id, Op::UserStop)?;
        let mut run = entry.run.lock();
        if run.finished {
            return Ok(false);
        }
        self.finish_run(&entry, &mut run)?;
        let fields = run_fields(&run, Some(message.to_string()));
        drop(run);
        self.ledger.log_action("stop_run", SYSTEM, fields)?;
        Ok(true)
    }
}
