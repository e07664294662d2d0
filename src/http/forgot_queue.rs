//! `/forgot`'s queue: the requests answered and not yet handled, and the one background task
//! that drains it (below the handlers and `AppState`, which holds the queue).
//!
//! Owns: the bounded queue ([`FORGOT_QUEUE`]; a full queue drops a request, logged), the
//! delay before a request is looked up ([`FORGOT_DELAY`] after it was queued: by then its
//! answer has long been written), the look-up in the pool, and the mail's words.
//! Must not: answer anything, or log a link.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::accounts::Accounts;
use crate::mail::Mailer;
use crate::offload::Offload;

/// How long after it was queued a request is looked up, at the earliest.
pub const FORGOT_DELAY: Duration = Duration::from_secs(1);
/// The most requests waiting in the queue.
pub const FORGOT_QUEUE: usize = 1024;

/// The requests `/forgot` has answered and not yet handled.
pub struct ForgotQueue {
    tx: mpsc::Sender<(Instant, String)>,
}

impl ForgotQueue {
    /// Starts the one task that drains the queue: each request, no sooner than
    /// [`FORGOT_DELAY`] after it was queued, is looked up in the pool and, when it names an
    /// account to mail, gets its link mailed on `base` (`public_url`).
    pub fn start(
        accounts: Arc<Accounts>,
        offload: Offload,
        mailer: Arc<Mailer>,
        base: String,
    ) -> ForgotQueue {
        let (tx, mut rx) = mpsc::channel::<(Instant, String)>(FORGOT_QUEUE);
        tokio::spawn(async move {
            while let Some((queued, asked)) = rx.recv().await {
                tokio::time::sleep_until(queued + FORGOT_DELAY).await;
                mail_link(&accounts, &offload, &mailer, &base, asked).await;
            }
        });
        ForgotQueue { tx }
    }

    /// Queues a request (the same work for every input); a full queue drops it.
    pub fn push(&self, asked: String) {
        if self.tx.try_send((Instant::now(), asked)).is_err() {
            tracing::warn!("password-reset queue full: a /forgot request was dropped");
        }
    }
}

/// A queued request: a link for the account `asked` names, if there is one to mail
/// (`Accounts::reset_request`, in the pool), mailed on `base` (`public_url`).
async fn mail_link(
    accounts: &Arc<Accounts>,
    offload: &Offload,
    mailer: &Mailer,
    base: &str,
    asked: String,
) {
    let accounts = Arc::clone(accounts);
    let found = match offload.run(move || accounts.reset_request(&asked)).await {
        Ok(Ok(found)) => found,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "reset request failed");
            return;
        }
        Err(e) => {
            tracing::warn!(error = %e, "reset request not handled");
            return;
        }
    };
    let Some((user, secret)) = found else { return };
    let body = format!(
        "Hello {},\n\nsomeone (hopefully you) asked for a new password on {base}.\n\
         Set one here within 24 hours; the link works once:\n\n\
         {base}/reset/{secret}\n\n\
         If you did not ask, ignore this mail: your password stays as it is.\n",
        user.username
    );
    if let Err(e) = mailer
        .send(&user.email, "Your password reset link", body)
        .await
    {
        tracing::warn!(error = %e, user = %user.username, "reset mail not sent");
    }
}
