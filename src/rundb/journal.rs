//! The journal: acknowledged run changes made durable in group commits.
//!
//! Owns: sequence numbers, the queue of entries waiting to be written, and the writer loop
//! that takes everything queued, writes it in one store transaction through the offload pool,
//! and then wakes every waiter. A request that changed a run gets a [`Ticket`] and awaits it
//! *after* leaving its critical section and giving back its pool token, so a slow fsync never
//! holds the scheduler slot or a thread. Transient store errors are retried with exponential
//! backoff and jitter, the batch retried as a whole.
//! Must not: decide what a patch contains (`rundb` does) or block the caller: `submit` only
//! enqueues.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable as _};
use tokio::sync::{mpsc, oneshot};

use crate::ledger::Ledger;
use crate::offload::Offload;
use crate::store::{Doc, JournalEntry, SharedStore};

/// Largest batch written in one transaction.
const MAX_BATCH: usize = 4096;
/// Attempts for a batch that keeps failing with a transient error.
const MAX_ATTEMPTS: u32 = 8;

/// Why a change could not be made durable.
#[derive(Debug, Clone, thiserror::Error)]
#[error("journal write failed: {0}")]
pub struct JournalError(pub String);

struct Pending {
    item: Item,
    done: oneshot::Sender<Result<(), JournalError>>,
}

/// What a group commit writes.
enum Item {
    /// A run change.
    Entry(JournalEntry),
    /// An action document made while a run was locked (failed_task, dead_task, …): written in
    /// the same commit as the changes around it instead of by a store call under the lock.
    Action(Doc),
}

/// Resolves once the change is durable.
#[derive(Debug)]
pub struct Ticket(oneshot::Receiver<Result<(), JournalError>>);

impl Ticket {
    pub async fn wait(self) -> Result<(), JournalError> {
        self.0
            .await
            .unwrap_or_else(|_| Err(JournalError("journal writer stopped".into())))
    }
}

/// The journal handle (cheap to share).
pub struct Journal {
    seq: AtomicU64,
    tx: mpsc::UnboundedSender<Pending>,
}

impl Journal {
    /// Starts the writer loop on the current runtime. `first_seq` must exceed every seq
    /// already in the store. The ledger is told of the action documents each commit made
    /// durable ([`Ledger::note_actions`]: the followers' notices).
    pub fn start(
        store: SharedStore,
        offload: Offload,
        first_seq: u64,
        ledger: Arc<Ledger>,
    ) -> Arc<Journal> {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(writer(rx, store, offload, ledger));
        Arc::new(Journal {
            seq: AtomicU64::new(first_seq),
            tx,
        })
    }

    /// The next sequence number. Call under the run's lock so that a run's seqs follow the
    /// order of its changes.
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Queues an entry; never blocks.
    pub fn submit(&self, entry: JournalEntry) -> Ticket {
        self.enqueue(Item::Entry(entry))
    }

    /// Queues an action document (it must carry its `_id`); never blocks. Items are written
    /// in submission order, so the ticket of any change submitted after it resolves only
    /// once the action is durable too.
    pub fn submit_action(&self, action: Doc) -> Ticket {
        self.enqueue(Item::Action(action))
    }

    fn enqueue(&self, item: Item) -> Ticket {
        let (done, rx) = oneshot::channel();
        if let Err(e) = self.tx.send(Pending { item, done }) {
            let _ =
                e.0.done
                    .send(Err(JournalError("journal writer stopped".into())));
        }
        Ticket(rx)
    }
}

async fn writer(
    mut rx: mpsc::UnboundedReceiver<Pending>,
    store: SharedStore,
    offload: Offload,
    ledger: Arc<Ledger>,
) {
    let mut batch: Vec<Pending> = Vec::new();
    while let Some(first) = rx.recv().await {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        let mut entries = Vec::with_capacity(batch.len());
        let mut actions = Vec::new();
        for p in &batch {
            match &p.item {
                Item::Entry(e) => entries.push(e.clone()),
                Item::Action(a) => actions.push(a.clone()),
            }
        }
        let entries = Arc::new(entries);
        let actions = Arc::new(actions);
        let started = Instant::now();
        let (store, entries_ref, actions_ref, offload) = (&store, &entries, &actions, &offload);
        let mut attempt = 0;
        // Transient store errors are retried (`backon`): 10 ms doubling to 2 s, each wait
        // plus up to as much again at random, at most MAX_ATTEMPTS attempts in all.
        let appended = (|| async move {
            let (store, entries, actions) =
                (store.clone(), entries_ref.clone(), actions_ref.clone());
            // A reserved token: the journal writer is one serial task that every acknowledged
            // change waits for; it must not queue behind the traffic that waits for it.
            match offload
                .run_reserved(move || store.journal_append(&entries, &actions))
                .await
            {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err((e.is_transient(), e.to_string())),
                Err(e) => Err((false, e.to_string())),
            }
        })
        .retry(
            ExponentialBuilder::new()
                .with_min_delay(Duration::from_millis(10))
                .with_max_delay(Duration::from_secs(2))
                .with_jitter()
                .with_max_times(MAX_ATTEMPTS as usize - 1),
        )
        .sleep(tokio::time::sleep)
        .when(|(transient, _)| *transient)
        .notify(|(_, e), _| {
            attempt += 1;
            tracing::warn!(error = %e, attempt, "journal write failed; retrying");
        })
        .await;
        let outcome = appended.map_err(|(_, e)| {
            tracing::error!(error = %e, "journal write failed");
            JournalError(e)
        });
        if outcome.is_ok() {
            ledger.note_actions(&actions);
        }
        metrics::histogram!("shoal_journal_commit_seconds").record(started.elapsed().as_secs_f64());
        metrics::histogram!("shoal_journal_batch_entries").record(batch.len() as f64);
        for p in batch.drain(..) {
            let _ = p.done.send(outcome.clone());
        }
    }
}
