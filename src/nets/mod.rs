//! Nets: the neural-network files ("nets") the workers download while building engines.
//!
//! Owns: the net directory (`nn_dir`, by default `<data_dir>/nn`) and the `nns` collection,
//! through [`Nets`] (the list and which nets have a file, whether a name is taken, an upload's
//! installation with its `upload_nn` action in the ledger, the download count and the lock
//! that serialises it; an approval's bookkeeping: test records and `is_master`) and the net store's functions in `store.rs` (the layout, the name rule,
//! the streamed content check, the temporary files; `add` and `import_file` for the command
//! line and the dump import, which run without a server).
//! Must not: run on the event loop (file and store I/O); know HTTP, runs or another
//! component's state; replace a net that exists; hold a net in memory.
//!
//! Files:
//! - `mod.rs`: [`Nets`], the component the server holds.
//! - `store.rs`: the net directory's layout, the name rule, the streamed content check.

mod store;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::json;

pub use store::{
    Added, Imported, NetError, NetFile, NetRecord, NetWriter, STALE_PART, add, content_prefix,
    discard, gz_file_name, import_file, locate, net_of_file, present, sweep_stale_parts,
    valid_name, verify,
};

use crate::ledger::Ledger;
use crate::store::{Doc, SharedStore};

/// Serialises every read-modify-write of a net's document within this process (an approval's
/// test records, `is_master`): whole-document writes, so two at once would lose one's change.
/// Process-wide because approvals record tests from `rundb`, which holds no `Nets`; only the
/// primary approves. Download counts take no lock: they are the store's atomic increment,
/// which also holds across instances sharing one MongoDB database, and which a whole-document
/// write of an approval cannot undo for long (it rewrites the count it read a moment before,
/// a race of one approval against concurrent downloads, as in Fishtest).
static NNS_WRITES: Mutex<()> = Mutex::new(());

/// The net directory and the nets recorded in the store.
pub struct Nets {
    store: SharedStore,
    dir: PathBuf,
    /// Where uploads are logged (`upload_nn`).
    ledger: Arc<Ledger>,
}

impl Nets {
    /// The nets of a store, with their files in `dir`.
    pub fn new(store: SharedStore, dir: PathBuf, ledger: Arc<Ledger>) -> Nets {
        Nets { store, dir, ledger }
    }

    /// The net directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every recorded net.
    pub fn list(&self) -> Result<Vec<NetRecord>, NetError> {
        Ok(store::list(&self.store)?)
    }

    /// The names of the nets with a file in the net directory (either layout).
    pub fn files(&self) -> Result<HashSet<String>, NetError> {
        Ok(present(&self.dir)?)
    }

    /// Whether a net of this name is recorded or has a file in the net directory.
    pub fn known(&self, name: &str) -> Result<bool, NetError> {
        store::known(&self.store, &self.dir, name)
    }

    /// The file of net `name` in the net directory, if it has one.
    pub fn locate(&self, name: &str) -> std::io::Result<Option<NetFile>> {
        locate(&self.dir, name)
    }

    /// Installs a checked upload written to `tmp` (nothing is left behind on failure) and logs
    /// `upload_nn`.
    pub fn install(&self, tmp: &Path, name: &str, user: &str) -> Result<(), NetError> {
        store::install(&self.store, &self.dir, tmp, name, user)?;
        tracing::info!(net = name, user, "net uploaded");
        let mut f = Doc::new();
        f.insert("nn".into(), json!(name));
        if let Err(e) = self.ledger.log_action("upload_nn", user, f) {
            tracing::warn!(error = %e, net = name, "upload_nn not logged");
        }
        Ok(())
    }

    /// Marks the nets of a base on official master `is_master` (Fishtest's approval, see
    /// [`mark_master`]); returns the names skipped.
    pub fn mark_master(&self, names: &[String]) -> Result<Vec<String>, NetError> {
        mark_master(&self.store, names)
    }

    /// Counts one download of a net; `false` (and nothing counted) when no net of that name
    /// is recorded.
    pub fn count_download(&self, name: &str) -> Result<bool, NetError> {
        Ok(store::count_download(&self.store, name)?)
    }
}

/// An approved run's bookkeeping of the nets it tests (as Fishtest does on approval): each
/// net of `new_nets` that the base does not use gets `last_test` = this run, and
/// `first_test` too if it had none. A net without a record is skipped. Runs under nothing:
/// the caller has released the run's lock.
pub fn record_tests(
    store: &SharedStore,
    new_nets: &[String],
    base_nets: &[String],
    run_id: &str,
) -> Result<(), NetError> {
    let test = json!({"id": run_id, "date": crate::store::Date::now().to_value()});
    let _turn = NNS_WRITES.lock();
    for name in new_nets.iter().filter(|n| !base_nets.contains(n)) {
        let Some(mut doc) = store::find(store, name)? else {
            continue;
        };
        if !doc.contains_key("first_test") {
            doc.insert("first_test".into(), test.clone());
        }
        doc.insert("last_test".into(), test.clone());
        // An earlier shoal's upload-time field, which Fishtest refuses: dropped on rewrite.
        doc.remove("time");
        store.put(crate::store::Collection::Nns, &doc)?;
    }
    Ok(())
}

/// An approved run's base on official master: each of its nets gets `is_master: true` if it
/// has none. Fishtest's net schema allows `is_master` only beside both test records (and only
/// the literal `true`), so a net never tested (or without a record) is skipped and named in
/// the result, as Fishtest's attempt fails and is logged.
pub fn mark_master(store: &SharedStore, names: &[String]) -> Result<Vec<String>, NetError> {
    let mut skipped = Vec::new();
    let _turn = NNS_WRITES.lock();
    for name in names {
        let Some(mut doc) = store::find(store, name)? else {
            skipped.push(name.clone());
            continue;
        };
        if doc.get("is_master") == Some(&json!(true)) {
            continue;
        }
        if !(doc.contains_key("first_test") && doc.contains_key("last_test")) {
            tracing::warn!(net = %name, "not marked is_master: never tested");
            skipped.push(name.clone());
            continue;
        }
        doc.insert("is_master".into(), json!(true));
        store.put(crate::store::Collection::Nns, &doc)?;
    }
    Ok(skipped)
}
