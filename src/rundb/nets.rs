//! Neural-network files ("nets") the workers download while building engines.
//!
//! Owns: the `nns` collection's documents ({name, user, downloads, is_master?, first_test?,
//! last_test?}), the net directory `<data_dir>/nn`, name rules and the content check (the
//! first 12 hex digits of the file's SHA-256 are the name's `nn-<12 hex>.nnue`), the upload's
//! temporary file ([`NetWriter`]: written and hashed one piece at a time) and its atomic,
//! exclusive installation ([`install`]), the list of nets ([`list`]).
//! Must not: be called from the event loop (file and store I/O); leave a refused upload's
//! bytes behind; replace a net that exists.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::store::{Collection, Cond, Date, Doc, Query, SharedStore, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("{0:?} is not a net name (nn-<12 hex digits>.nnue)")]
    BadName(String),
    #[error("the file's sha256 starts with {found}, but its name says {expected}")]
    WrongContent { expected: String, found: String },
    #[error("net {0} is already known")]
    Duplicate(String),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// `nn-<12 lowercase hex>.nnue`.
pub fn valid_name(name: &str) -> bool {
    name.len() == 20
        && name.starts_with("nn-")
        && name.ends_with(".nnue")
        && name[3..15]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

pub fn net_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("nn")
}

fn sha256_prefix(path: &Path) -> Result<String, NetError> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize())[..12].to_string())
}

/// Checks a net file against its name, copies it into the net directory and records it.
pub fn add(
    store: &SharedStore,
    data_dir: &Path,
    file: &Path,
    user: &str,
) -> Result<String, NetError> {
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    if !valid_name(&name) {
        return Err(NetError::BadName(name));
    }
    let found = sha256_prefix(file)?;
    if found != name[3..15] {
        return Err(NetError::WrongContent {
            expected: name[3..15].to_string(),
            found,
        });
    }
    if !store
        .find(
            Collection::Nns,
            &Query::new().with(Cond::Eq("name".into(), json!(name))),
        )?
        .is_empty()
    {
        return Err(NetError::Duplicate(name));
    }
    let dir = net_dir(data_dir);
    std::fs::create_dir_all(&dir)?;
    // Copy to a temporary name, then rename: a reader never sees half a net.
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::copy(file, &tmp)?;
    std::fs::rename(&tmp, dir.join(&name))?;
    let mut doc = Doc::new();
    doc.insert("_id".into(), json!(name));
    doc.insert("name".into(), json!(name));
    doc.insert("user".into(), json!(user));
    doc.insert("downloads".into(), json!(0));
    doc.insert("time".into(), Date::now().to_value());
    store.insert(Collection::Nns, doc)?;
    Ok(name)
}

/// Whether a net of this name is recorded in `nns` or present in the net directory.
pub fn known(store: &SharedStore, data_dir: &Path, name: &str) -> Result<bool, NetError> {
    Ok(store.get(Collection::Nns, name)?.is_some()
        || !store
            .find(
                Collection::Nns,
                &Query::new().with(Cond::Eq("name".into(), json!(name))),
            )?
            .is_empty()
        || net_dir(data_dir).join(name).exists())
}

/// An upload being written: a temporary file in the net directory (a name no net can have),
/// created exclusively, and the SHA-256 of what was written so far. Blocking: call its
/// methods in the pool. The caller removes the file ([`discard`]) unless [`install`] took it.
pub struct NetWriter {
    file: std::fs::File,
    hasher: Sha256,
    path: PathBuf,
    written: u64,
}

impl NetWriter {
    /// Creates `<data_dir>/nn/.upload-<random>.part`.
    pub fn create(data_dir: &Path) -> std::io::Result<NetWriter> {
        let dir = net_dir(data_dir);
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(format!(".upload-{:016x}.part", rand::random::<u64>()));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        Ok(NetWriter {
            file,
            hasher: Sha256::new(),
            path,
            written: 0,
        })
    }

    /// The temporary file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Appends and hashes `bytes`.
    pub fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.file.write_all(bytes)?;
        self.hasher.update(bytes);
        self.written = self.written.saturating_add(bytes.len() as u64);
        Ok(())
    }

    /// Flushes the file to disk and gives its path and the first 12 hex digits of its
    /// SHA-256.
    pub fn finish(self) -> std::io::Result<(PathBuf, String)> {
        self.file.sync_all()?;
        let digest = hex::encode(self.hasher.finalize());
        Ok((self.path, digest[..12].to_string()))
    }
}

/// Temporary upload files untouched for this long are abandoned (an upload in progress
/// writes to its file at least every `body_read_timeout_s`).
pub const STALE_UPLOAD: std::time::Duration = std::time::Duration::from_secs(3600);

/// Removes abandoned temporary upload files (a server killed mid-upload leaves one): those
/// in the net directory not written for [`STALE_UPLOAD`]. Other instances sharing the data
/// directory may be uploading, hence the age. Returns how many were removed.
pub fn sweep_stale_uploads(data_dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(net_dir(data_dir)) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with(".upload-") && name.ends_with(".part")) {
            continue;
        }
        let stale = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age >= STALE_UPLOAD);
        if stale {
            discard(&entry.path());
            removed += 1;
        }
    }
    if removed > 0 {
        tracing::info!(removed, "abandoned net uploads removed");
    }
    removed
}

/// Removes a temporary upload file (already gone is fine).
pub fn discard(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(path = %path.display(), error = %e, "temporary net not removed"),
    }
}

/// Installs a checked upload as net `name` and records it (`downloads: 0`): the temporary
/// file is linked to its final name, which fails if a net of that name exists (two uploads
/// of one net cannot both win), then unlinked. On any failure nothing of the upload is left.
pub fn install(
    store: &SharedStore,
    data_dir: &Path,
    tmp: &Path,
    name: &str,
    user: &str,
) -> Result<(), NetError> {
    let result = install_inner(store, data_dir, tmp, name, user);
    discard(tmp);
    result
}

fn install_inner(
    store: &SharedStore,
    data_dir: &Path,
    tmp: &Path,
    name: &str,
    user: &str,
) -> Result<(), NetError> {
    if !valid_name(name) {
        return Err(NetError::BadName(name.to_string()));
    }
    if known(store, data_dir, name)? {
        return Err(NetError::Duplicate(name.to_string()));
    }
    let target = net_dir(data_dir).join(name);
    match std::fs::hard_link(tmp, &target) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(NetError::Duplicate(name.to_string()));
        }
        Err(e) => return Err(e.into()),
    }
    let mut doc = Doc::new();
    doc.insert("_id".into(), json!(name));
    doc.insert("name".into(), json!(name));
    doc.insert("user".into(), json!(user));
    doc.insert("downloads".into(), json!(0));
    doc.insert("time".into(), Date::now().to_value());
    if let Err(e) = store.insert(Collection::Nns, doc) {
        discard(&target);
        return Err(match e {
            StoreError::Duplicate(_) => NetError::Duplicate(name.to_string()),
            other => other.into(),
        });
    }
    Ok(())
}

/// One recorded net, as the nets page lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct NetRecord {
    pub name: String,
    pub user: String,
    pub downloads: u64,
    pub is_master: bool,
    /// When it was added (`None` for records that do not say).
    pub time: Option<Date>,
    /// The first and last runs that used it as a default net: (run id, date).
    pub first_test: Option<(String, Option<Date>)>,
    pub last_test: Option<(String, Option<Date>)>,
}

fn date_of(v: Option<&Value>) -> Option<Date> {
    v.and_then(|v| serde_json::from_value(v.clone()).ok())
}

fn test_of(v: Option<&Value>) -> Option<(String, Option<Date>)> {
    let v = v?;
    let id = v.get("id").and_then(Value::as_str)?;
    Some((id.to_string(), date_of(v.get("date"))))
}

/// Every recorded net (unreadable records are skipped).
pub fn list(store: &SharedStore) -> Result<Vec<NetRecord>, StoreError> {
    Ok(store
        .find(Collection::Nns, &Query::new())?
        .iter()
        .filter_map(|doc| {
            Some(NetRecord {
                name: doc.get("name").and_then(Value::as_str)?.to_string(),
                user: doc
                    .get("user")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                downloads: doc.get("downloads").and_then(Value::as_u64).unwrap_or(0),
                is_master: doc
                    .get("is_master")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                time: date_of(doc.get("time")),
                first_test: test_of(doc.get("first_test")),
                last_test: test_of(doc.get("last_test")),
            })
        })
        .collect())
}

/// Counts a download (Fishtest increments `downloads` on every request).
pub fn count_download(store: &SharedStore, name: &str) -> Result<(), StoreError> {
    if let Some(mut doc) = store.get(Collection::Nns, name)? {
        let n = doc.get("downloads").and_then(Value::as_u64).unwrap_or(0);
        doc.insert("downloads".into(), json!(n + 1));
        store.put(Collection::Nns, &doc)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rundb::testkit::temp_store;

    #[test]
    fn add_checks_name_and_content() {
        let (dir, store) = temp_store();
        let content = b"not really a net, but bytes all the same";
        let prefix = &hex::encode(Sha256::digest(content))[..12];
        let good = dir.path().join(format!("nn-{prefix}.nnue"));
        std::fs::write(&good, content).expect("write");
        let name = add(&store, dir.path(), &good, "alice").expect("add");
        assert!(net_dir(dir.path()).join(&name).exists());
        assert!(matches!(
            add(&store, dir.path(), &good, "alice"),
            Err(NetError::Duplicate(_))
        ));
        let liar = dir.path().join("nn-000000000000.nnue");
        std::fs::write(&liar, content).expect("write");
        assert!(matches!(
            add(&store, dir.path(), &liar, "alice"),
            Err(NetError::WrongContent { .. })
        ));
        assert!(!valid_name("nn-ABCDEF123456.nnue"));
        assert!(!valid_name("../../etc/passwd"));
        count_download(&store, &name).expect("count");
        let doc = store
            .get(Collection::Nns, &name)
            .expect("get")
            .expect("doc");
        assert_eq!(doc["downloads"], 1);
    }

    #[test]
    fn upload_writer_install_and_sweep() {
        let (dir, store) = temp_store();
        let content = b"an uploaded net";
        let prefix = &hex::encode(Sha256::digest(content))[..12];
        let name = format!("nn-{prefix}.nnue");
        let mut w = NetWriter::create(dir.path()).expect("create");
        w.write(&content[..5]).expect("write");
        w.write(&content[5..]).expect("write");
        assert_eq!(w.written(), content.len() as u64);
        let (tmp, sha) = w.finish().expect("finish");
        assert_eq!(sha, prefix);
        // A fresh temporary file is not swept.
        assert_eq!(sweep_stale_uploads(dir.path()), 0);
        assert!(tmp.exists());
        install(&store, dir.path(), &tmp, &name, "alice").expect("install");
        assert!(!tmp.exists(), "the temporary file is gone");
        assert_eq!(
            std::fs::read(net_dir(dir.path()).join(&name)).expect("net"),
            content
        );
        assert!(known(&store, dir.path(), &name).expect("known"));
        // A second installation of the same name is refused and leaves nothing.
        let mut w = NetWriter::create(dir.path()).expect("create");
        w.write(content).expect("write");
        let (tmp2, _) = w.finish().expect("finish");
        assert!(matches!(
            install(&store, dir.path(), &tmp2, &name, "bob"),
            Err(NetError::Duplicate(_))
        ));
        assert!(!tmp2.exists());
        let listed = list(&store).expect("list");
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].user.as_str(), listed[0].downloads), ("alice", 0));
        assert!(listed[0].time.is_some());
    }
}
