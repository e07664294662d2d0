//! The flashes after a change succeeded: [`done_message`], what the dashboard says for
//! `?done=<code>` after a run control, and [`MSG_SUBMITTED`], after a submission.

use crate::http::run_id::RunId;

/// Shown once a run is created (Fishtest's words).
pub const MSG_SUBMITTED: &str = "The test was submitted to the queue. Please wait for approval.";

/// A flash after a control succeeded: `before`, then the run linked (when one is named),
/// then `after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    pub before: String,
    pub run: Option<String>,
    pub after: String,
}

impl Done {
    fn plain(text: &str) -> Self {
        Done {
            before: text.to_string(),
            run: None,
            after: String::new(),
        }
    }

    /// The message as plain text.
    pub fn text(&self) -> String {
        format!(
            "{}{}{}",
            self.before,
            self.run.as_deref().unwrap_or_default(),
            self.after
        )
    }
}

/// The message the dashboard flashes for `?done=<code>` (and `&run=<id>`) after a control
/// succeeded; `None` for an unknown code (a link cannot put words on the page). A run it
/// names is linked to its page.
pub fn done_message(code: &str, run: Option<&str>) -> Option<Done> {
    // The controls that name their run: the run linked.
    let named = match code {
        "approved" => Some(("Run approved", " approved")),
        "stopped" => Some(("Stopped run", " stopped")),
        "purged" => Some(("Purged run", " purged")),
        "deleted" => Some(("Deleted run", " deleted")),
        _ => None,
    };
    if let Some((plain, after)) = named {
        return Some(match run.and_then(|id| id.parse::<RunId>().ok()) {
            Some(id) => Done {
                before: "Run ".into(),
                run: Some(id.to_string()),
                after: after.into(),
            },
            None => Done::plain(plain),
        });
    }
    Some(Done::plain(match code {
        "stopped" => "Stopped run",
        "purged" => "Purged run",
        "purged-none" => "No bad workers",
        "deleted" => "Deleted run",
        "modified" => "The test was successfully modified!",
        "modified-unapproved" => {
            "The test was successfully modified but it will have to be reapproved..."
        }
        "modified-pending" => "The test was successfully modified. Please wait for approval.",
        _ => return None,
    }))
}
