//! The net store: net files in Fishtest's layout and their `nns` records.
//!
//! Owns: the `nns` collection's documents ({name, user, downloads, is_master?, first_test?,
//! last_test?}), the net directory (`nn_dir`, by default `<data_dir>/nn`) and its layout, the
//! name rule and the content check, an upload's temporary file ([`NetWriter`]: compressed and
//! hashed one piece at a time) and its exclusive installation ([`install`]), adding a file
//! from the command line ([`add`]), moving a Fishtest net file in ([`import_file`]), the
//! download count ([`count_download`]) and the list of nets ([`list`]).
//!
//! The layout is Fishtest's: net `nn-<12 hex>.nnue` is the file `<dir>/nn-<12 hex>.nnue.gz`,
//! gzipped; the name's 12 hex digits begin the SHA-256 of the *decoded* content, which is what
//! a worker checks after its HTTP client decodes `Content-Encoding: gzip`. nginx with
//! `gzip_static always` serves the directory as it is, and so does shoal (`GET /nn/<name>`).
//! A plain `<dir>/nn-<12 hex>.nnue` (the layout shoal used before it kept nets gzipped) is
//! still found ([`locate`]) and served as it is; new nets are always written gzipped.
//!
//! Every file is written under a temporary name in the same directory (`.<what>-<random>.part`)
//! and then linked to its final name exclusively: a net that exists is never replaced, and a
//! reader (shoal, nginx) never sees half a net. A crash leaves only a `.part` file, which
//! [`sweep_stale_parts`] removes at the next start.
//!
//! Must not: be called from the event loop (file and store I/O); leave a refused net's bytes
//! behind; replace a net that exists; hold a net in memory (everything streams); look at a
//! path that is not `<dir>/<valid net name>[.gz]`.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufReader, Read, Write as _};
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::store::{Collection, Cond, Date, Doc, Query, SharedStore, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("{0:?} is not a net name (nn-<12 hex digits>.nnue, or .nnue.gz for a gzipped file)")]
    BadName(String),
    #[error("the content's sha256 starts with {found}, but the name says {expected}")]
    WrongContent { expected: String, found: String },
    #[error("not a readable gzip file: {0}")]
    BadGzip(std::io::Error),
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

/// The file name of net `name` in the gzipped layout: `<name>.gz`.
pub fn gz_file_name(name: &str) -> String {
    format!("{name}.gz")
}

/// The net a file name holds and whether it is gzipped: `nn-<12 hex>.nnue.gz` (gzipped) or
/// `nn-<12 hex>.nnue` (plain). Anything else is not a net file.
pub fn net_of_file(file: &str) -> Option<(&str, bool)> {
    match file.strip_suffix(".gz") {
        Some(net) if valid_name(net) => Some((net, true)),
        _ if valid_name(file) => Some((file, false)),
        _ => None,
    }
}

/// A net's file in the net directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetFile {
    /// `<name>.gz`: sent as it is with `Content-Encoding: gzip`.
    Gzip(PathBuf),
    /// `<name>`, the older plain layout: sent as it is.
    Plain(PathBuf),
}

impl NetFile {
    pub fn path(&self) -> &Path {
        match self {
            NetFile::Gzip(p) | NetFile::Plain(p) => p,
        }
    }

    pub fn is_gzip(&self) -> bool {
        matches!(self, NetFile::Gzip(_))
    }
}

/// The file of net `name` in `dir`: the gzipped layout first, then the plain one; `None`
/// when neither is a regular file, or when `name` is not a net name (so nothing outside
/// `dir` is ever looked at).
pub fn locate(dir: &Path, name: &str) -> std::io::Result<Option<NetFile>> {
    if !valid_name(name) {
        return Ok(None);
    }
    for (file, gzipped) in [(gz_file_name(name), true), (name.to_string(), false)] {
        let path = dir.join(file);
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => {
                return Ok(Some(if gzipped {
                    NetFile::Gzip(path)
                } else {
                    NetFile::Plain(path)
                }));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// The names of the nets with a file in `dir`, in either layout (one directory listing). A
/// directory that does not exist holds none.
pub fn present(dir: &Path) -> std::io::Result<HashSet<String>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HashSet::new()),
        Err(e) => return Err(e),
    };
    let mut names = HashSet::new();
    for entry in entries {
        let entry = entry?;
        let file = entry.file_name();
        if let Some((net, _)) = file.to_str().and_then(net_of_file)
            && entry
                .file_type()
                .is_ok_and(|t| t.is_file() || t.is_symlink())
        {
            names.insert(net.to_string());
        }
    }
    Ok(names)
}

/// Bytes read (and hashed) at a time.
const BUF: usize = 1 << 20;

/// The first 12 hex digits of the SHA-256 of everything `reader` gives, a buffer at a time.
fn sha256_prefix_of(mut reader: impl Read) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; BUF];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize())[..12].to_string())
}

/// The first 12 hex digits of the SHA-256 of a net file's content: a gzipped file decoded
/// (its CRC checked), a plain one as it is. Streams: bounded memory whatever the size.
pub fn content_prefix(path: &Path, gzipped: bool) -> Result<String, NetError> {
    let file = File::open(path)?;
    if gzipped {
        sha256_prefix_of(GzDecoder::new(BufReader::with_capacity(BUF, file)))
            .map_err(NetError::BadGzip)
    } else {
        Ok(sha256_prefix_of(file)?)
    }
}

/// Checks a net file's content against net `name`.
pub fn verify(path: &Path, name: &str, gzipped: bool) -> Result<(), NetError> {
    if !valid_name(name) {
        return Err(NetError::BadName(name.to_string()));
    }
    let found = content_prefix(path, gzipped)?;
    if found != name[3..15] {
        return Err(NetError::WrongContent {
            expected: name[3..15].to_string(),
            found,
        });
    }
    Ok(())
}

/// A new temporary file `<dir>/.<what>-<random>.part` (the directory created if needed),
/// created exclusively.
fn temp_file(dir: &Path, what: &str) -> std::io::Result<(File, PathBuf)> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!(".{what}-{:016x}.part", rand::random::<u64>()));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)?;
    Ok((file, path))
}

/// Whether a file name is one of this module's temporary files.
fn is_part(file: &str) -> bool {
    file.starts_with('.') && file.ends_with(".part")
}

/// Gives the complete, synced temporary file `tmp` the final name `target` with a hard link,
/// which fails if `target` exists (a net is never replaced, and of two writers of one net
/// only one wins). `tmp` is removed either way.
fn place(tmp: &Path, target: &Path, name: &str) -> Result<(), NetError> {
    let linked = std::fs::hard_link(tmp, target);
    discard(tmp);
    match linked {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            Err(NetError::Duplicate(name.to_string()))
        }
        Err(e) => Err(e.into()),
    }
}

/// Records net `name` in `nns` (`downloads: 0`), as Fishtest's schema has it: the upload
/// time is the creation time of the document's ObjectId (made here, so that both stores show
/// it), never a field of its own (Fishtest refuses one).
fn record(store: &SharedStore, name: &str, user: &str) -> Result<(), NetError> {
    let mut doc = Doc::new();
    doc.insert("_id".into(), json!(name));
    doc.insert(
        crate::store::bson_map::MONGO_ID.into(),
        json!({"$oid": crate::store::new_object_id()}),
    );
    doc.insert("name".into(), json!(name));
    doc.insert("user".into(), json!(user));
    doc.insert("downloads".into(), json!(0));
    match store.insert(Collection::Nns, doc) {
        Ok(_) => Ok(()),
        Err(StoreError::Duplicate(_)) => Err(NetError::Duplicate(name.to_string())),
        Err(e) => Err(e.into()),
    }
}

/// What [`add`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Added {
    pub name: String,
    /// The net was already recorded (e.g. imported from Fishtest) without a file: only the
    /// file was added, the record (uploader, downloads) kept.
    pub file_only: bool,
}

/// Checks a net file against its name (`nn-<12 hex>.nnue`, or `nn-<12 hex>.nnue.gz` for a
/// gzipped one), writes it gzipped into the net directory `dir` and records it; for a net
/// recorded without a file, adds the file only. A net whose file exists is refused. The
/// given file is left as it was.
pub fn add(store: &SharedStore, dir: &Path, file: &Path, user: &str) -> Result<Added, NetError> {
    let file_name = file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let Some((name, gzipped)) = net_of_file(file_name) else {
        return Err(NetError::BadName(file_name.to_string()));
    };
    let name = name.to_string();
    verify(file, &name, gzipped)?;
    if locate(dir, &name)?.is_some() {
        return Err(NetError::Duplicate(name));
    }
    let file_only = find(store, &name)?.is_some();
    let (out, tmp) = temp_file(dir, "add")?;
    let written = (|| -> std::io::Result<()> {
        let mut source = File::open(file)?;
        if gzipped {
            let mut out = out;
            std::io::copy(&mut source, &mut out)?;
            out.sync_all()
        } else {
            let mut encoder = GzEncoder::new(out, Compression::default());
            std::io::copy(&mut source, &mut encoder)?;
            encoder.finish()?.sync_all()
        }
    })();
    if let Err(e) = written {
        discard(&tmp);
        return Err(e.into());
    }
    if file_only {
        place(&tmp, &dir.join(gz_file_name(&name)), &name)?;
    } else {
        install(store, dir, &tmp, &name, user)?;
    }
    Ok(Added { name, file_only })
}

/// Whether a net of this name is recorded in `nns` or has a file in the net directory.
pub(super) fn known(store: &SharedStore, dir: &Path, name: &str) -> Result<bool, NetError> {
    Ok(find(store, name)?.is_some() || locate(dir, name)?.is_some())
}

/// The `nns` document of net `name` (keyed by its name; a document stored under another
/// `_id` is found by its `name` field).
pub(super) fn find(store: &SharedStore, name: &str) -> Result<Option<Doc>, StoreError> {
    if let Some(doc) = store.get(Collection::Nns, name)? {
        return Ok(Some(doc));
    }
    Ok(store
        .find(
            Collection::Nns,
            &Query::new()
                .with(Cond::Eq("name".into(), json!(name)))
                .limit(1),
        )?
        .into_iter()
        .next())
}

/// An upload being written: a temporary file in the net directory (a name no net can have),
/// created exclusively, gzipped as it is written, and the SHA-256 of the bytes given so far
/// (the net's own, not the gzip's). Blocking: call its methods in the pool. The caller
/// removes the file ([`discard`]) unless [`install`] took it.
pub struct NetWriter {
    encoder: GzEncoder<File>,
    hasher: Sha256,
    path: PathBuf,
    written: u64,
}

impl NetWriter {
    /// Creates `<dir>/.upload-<random>.part`.
    pub fn create(dir: &Path) -> std::io::Result<NetWriter> {
        let (file, path) = temp_file(dir, "upload")?;
        Ok(NetWriter {
            encoder: GzEncoder::new(file, Compression::default()),
            hasher: Sha256::new(),
            path,
            written: 0,
        })
    }

    /// The temporary file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of the net written so far (before compression).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Appends (compressed) and hashes `bytes`.
    pub fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.encoder.write_all(bytes)?;
        self.hasher.update(bytes);
        self.written = self.written.saturating_add(bytes.len() as u64);
        Ok(())
    }

    /// Ends the gzip stream, flushes the file to disk and gives its path and the first 12
    /// hex digits of the net's SHA-256.
    pub fn finish(self) -> std::io::Result<(PathBuf, String)> {
        self.encoder.finish()?.sync_all()?;
        let digest = hex::encode(self.hasher.finalize());
        Ok((self.path, digest[..12].to_string()))
    }
}

/// Temporary files untouched for this long are abandoned (an upload in progress writes to
/// its file at least every `body_read_timeout_s`; an import or `shoal nn` copies steadily).
pub const STALE_PART: std::time::Duration = std::time::Duration::from_secs(3600);

/// Removes abandoned temporary files (a server or an import killed mid-write leaves one):
/// those in the net directory not written for [`STALE_PART`]. Other instances sharing the
/// directory may be writing, hence the age. Returns how many were removed.
pub fn sweep_stale_parts(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !is_part(&name.to_string_lossy()) {
            continue;
        }
        let stale = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age >= STALE_PART);
        if stale {
            discard(&entry.path());
            removed += 1;
        }
    }
    if removed > 0 {
        tracing::info!(removed, "abandoned temporary net files removed");
    }
    removed
}

/// Removes a temporary file (already gone is fine).
pub fn discard(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(path = %path.display(), error = %e, "temporary net not removed"),
    }
}

/// Installs a checked, gzipped net as `<dir>/<name>.gz` and records it (`downloads: 0`): the
/// temporary file is linked to its final name, which fails if a net of that name exists
/// (two uploads of one net cannot both win), then unlinked. On any failure nothing of the
/// net is left.
pub(super) fn install(
    store: &SharedStore,
    dir: &Path,
    tmp: &Path,
    name: &str,
    user: &str,
) -> Result<(), NetError> {
    if !valid_name(name) {
        discard(tmp);
        return Err(NetError::BadName(name.to_string()));
    }
    match known(store, dir, name) {
        Ok(false) => {}
        Ok(true) => {
            discard(tmp);
            return Err(NetError::Duplicate(name.to_string()));
        }
        Err(e) => {
            discard(tmp);
            return Err(e);
        }
    }
    let target = dir.join(gz_file_name(name));
    place(tmp, &target, name)?;
    if let Err(e) = record(store, name, user) {
        discard(&target);
        return Err(e);
    }
    Ok(())
}

/// What [`import_file`] did with a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Imported {
    /// Renamed into the net directory.
    Moved,
    /// Copied into the net directory (another file system), then removed from the source.
    Copied,
    /// In the net directory, but the source could not be removed (why): it is still there.
    SourceKept(String),
}

/// Moves the net file `src` (gzipped or plain, as `gzipped` says) into the net directory
/// `dir` under its own file name, after checking its content against net `name` (streamed).
/// A file that fails the check is left where it is. The target is never replaced
/// ([`NetError::Duplicate`] when it exists). Across file systems the file is copied to a
/// temporary file, synced, linked to its name, and only then removed from the source.
pub fn import_file(
    src: &Path,
    name: &str,
    gzipped: bool,
    dir: &Path,
) -> Result<Imported, NetError> {
    verify(src, name, gzipped)?;
    std::fs::create_dir_all(dir)?;
    let file_name = if gzipped {
        gz_file_name(name)
    } else {
        name.to_string()
    };
    let target = dir.join(file_name);
    let remove_source = |done: Imported| match std::fs::remove_file(src) {
        Ok(()) => done,
        Err(e) => Imported::SourceKept(e.to_string()),
    };
    // A hard link is an exclusive rename on one file system: it fails if the target exists,
    // where rename(2) would replace it.
    match std::fs::hard_link(src, &target) {
        Ok(()) => return Ok(remove_source(Imported::Moved)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(NetError::Duplicate(name.to_string()));
        }
        // Another file system (or one without hard links): copy.
        Err(_) => {}
    }
    let (mut out, tmp) = temp_file(dir, "import")?;
    let copied = (|| -> std::io::Result<()> {
        std::io::copy(&mut File::open(src)?, &mut out)?;
        out.sync_all()
    })();
    if let Err(e) = copied {
        discard(&tmp);
        return Err(e.into());
    }
    place(&tmp, &target, name)?;
    Ok(remove_source(Imported::Copied))
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

/// When a record made by Fishtest was added: the seconds its MongoDB ObjectId starts with
/// (kept as `{"$oid": …}` under `_mongo_id`, or `_id` in a raw dump); `None` for any other id.
fn oid_time(doc: &Doc) -> Option<Date> {
    let hex = [crate::store::bson_map::MONGO_ID, "_id"]
        .iter()
        .find_map(|k| doc.get(*k)?.get("$oid")?.as_str())?;
    let secs = i64::from_str_radix(hex.get(..8)?, 16).ok()?;
    (hex.len() == 24).then_some(())?;
    chrono::DateTime::from_timestamp(secs, 0).map(Date)
}

fn test_of(v: Option<&Value>) -> Option<(String, Option<Date>)> {
    let v = v?;
    let id = v.get("id").and_then(Value::as_str)?;
    Some((id.to_string(), date_of(v.get("date"))))
}

/// Every recorded net (unreadable records are skipped).
pub(super) fn list(store: &SharedStore) -> Result<Vec<NetRecord>, StoreError> {
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
                time: oid_time(doc).or_else(|| date_of(doc.get("time"))),
                first_test: test_of(doc.get("first_test")),
                last_test: test_of(doc.get("last_test")),
            })
        })
        .collect())
}

/// Counts a download of net `name` (Fishtest increments `downloads` on every request).
/// `false` when no net of that name is recorded (nothing changes). The count is the store's
/// atomic increment, so instances counting the same net at once (secondaries sharing one
/// MongoDB database) lose no download; only the look-up of the record's id is a read.
pub(super) fn count_download(store: &SharedStore, name: &str) -> Result<bool, StoreError> {
    let Some(doc) = find(store, name)? else {
        return Ok(false);
    };
    let id = doc.get("_id").and_then(Value::as_str).unwrap_or(name);
    store.increment(Collection::Nns, id, "downloads", 1)
}

#[cfg(test)]
mod tests;
