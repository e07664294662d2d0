//! The nets as the web UI uses them: the list (`/nns`), whether a name is taken, and an
//! upload's installation with its `upload_nn` action.
//!
//! Owns: only the calls into `nets` that need the run database's store and action log.
//! Must not: hold file or hashing logic (that is `nets`); run on the event loop.

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

    /// Whether a net of this name is recorded or on disk.
    pub fn net_known(&self, data_dir: &Path, name: &str) -> Result<bool, NetError> {
        nets::known(&self.store, data_dir, name)
    }

    /// Installs a checked upload (`nets::install`: nothing is left behind on failure) and
    /// logs `upload_nn`.
    pub fn install_net(
        &self,
        data_dir: &Path,
        tmp: &Path,
        name: &str,
        user: &str,
    ) -> Result<(), NetError> {
        nets::install(&self.store, data_dir, tmp, name, user)?;
        tracing::info!(net = name, user, "net uploaded");
        let mut f = Doc::new();
        f.insert("nn".into(), json!(name));
        if let Err(e) = self.log_action("upload_nn", user, f) {
            tracing::warn!(error = %e, net = name, "upload_nn not logged");
        }
        Ok(())
    }
}
