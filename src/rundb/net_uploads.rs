//! The nets as the web UI uses them: the list (`/nns`) and which of them have a file,
//! whether a name is taken, and an upload's installation with its `upload_nn` action.
//!
//! Owns: only the calls into `nets` that need the run database's store and action log.
//! Must not: hold file or hashing logic (that is `nets`); run on the event loop.

use std::collections::HashSet;
use std::path::Path;

use serde_json::json;

use super::nets::{self, NetError, NetRecord};
use super::{DbResult, RunDb};
use crate::store::Doc;

impl RunDb {
    /// Every recorded net.
    pub fn nets(&self) -> DbResult<Vec<NetRecord>> {
        Ok(nets::list(&self.store)?)
    }

    /// The names of the nets with a file in the net directory `dir` (either layout).
    pub fn net_files(&self, dir: &Path) -> Result<HashSet<String>, NetError> {
        Ok(nets::present(dir)?)
    }

    /// Whether a net of this name is recorded or has a file in the net directory `dir`.
    pub fn net_known(&self, dir: &Path, name: &str) -> Result<bool, NetError> {
        nets::known(&self.store, dir, name)
    }

    /// Installs a checked upload (`nets::install`: nothing is left behind on failure) and
    /// logs `upload_nn`.
    pub fn install_net(
        &self,
        dir: &Path,
        tmp: &Path,
        name: &str,
        user: &str,
    ) -> Result<(), NetError> {
        nets::install(&self.store, dir, tmp, name, user)?;
        tracing::info!(net = name, user, "net uploaded");
        let mut f = Doc::new();
        f.insert("nn".into(), json!(name));
        if let Err(e) = self.ledger.log_action("upload_nn", user, f) {
            tracing::warn!(error = %e, net = name, "upload_nn not logged");
        }
        Ok(())
    }
}
