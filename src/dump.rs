//! Moving a Fishtest database into the configured store and back out: `shoal import
//! --fishtest DIR` and `shoal export --fishtest DIR`.
//!
//! A dump directory holds one file per collection, `<collection>.json`, in MongoDB Extended
//! JSON: a JSON array (`mongoexport --jsonArray`, `bson.json_util`) or one document per line
//! (`mongoexport`'s default). Both directions stream: a document is read, mapped
//! (`store::bson_map`) and written in batches, so a large `runs` collection is never held
//! whole. Import upserts by `_id` (PGNs by their ObjectId), so importing twice adds nothing;
//! into a store that holds data it refuses unless told to merge.
//!
//! `--nets DIR` ([`import_nets`]) moves the net files of Fishtest's net directory
//! (`nn-<12 hex>.nnue.gz`) into shoal's (`nn_dir`), each checked first (`crate::nets`: a
//! readable gzip whose decoded SHA-256 matches its name, streamed); the summary lists what
//! moved, what was refused and why, nets recorded without a file, and files no record names
//! (those are left where they are). Without `--nets` the summary still lists the recorded nets
//! that have no file.
//!
//! Owns: the file format of a dump directory, the batching, the summary and the progress
//! bar; which files of a net directory are moved. Must not: run on the event loop (it blocks; it is a CLI command), interpret
//! documents (the mapping does), or write a document it could not map (it is skipped and
//! reported).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use bson::Document;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::de::{DeserializeSeed, SeqAccess, Visitor};
use serde_json::Value;

use crate::nets;
use crate::store::bson_map::{self, MapError, PgnDoc};
use crate::store::{Collection, Cond, Doc, Order, Query, Store, StoreError};

/// The files of a dump, in the order they are imported and exported.
pub const DUMP_COLLECTIONS: [&str; 10] = [
    "users",
    "nns",
    "workers",
    "kvstore",
    "runs",
    "pgns",
    "actions",
    "user_cache",
    "top_month",
    "deltas",
];

/// How many skipped documents a summary names per collection (all are counted).
const SKIPS_NAMED: usize = 20;

/// What went wrong moving a dump.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error(
        "the store already holds data ({count} documents in `{collection}`): import into an empty store, or pass --merge to add to it"
    )]
    NotEmpty { collection: String, count: u64 },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a Fishtest dump file: {message}")]
    Format { path: PathBuf, message: String },
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

/// One collection's line of the summary.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CollectionSummary {
    pub collection: String,
    /// Documents written (import: into the store; export: into the file).
    pub written: u64,
    /// PGNs already in the store (import with `--merge`): not stored twice.
    pub unchanged: u64,
    /// How many documents were skipped, and the first few with why.
    pub skipped: u64,
    pub skips: Vec<String>,
    /// Documents stored as they are that shoal cannot use as they are (e.g. a run its model
    /// does not read): kept for the way back, listed so an operator can look.
    pub warnings: Vec<String>,
}

impl CollectionSummary {
    fn new(collection: &str) -> Self {
        CollectionSummary {
            collection: collection.to_string(),
            ..Default::default()
        }
    }

    fn skip(&mut self, what: String) {
        self.skipped = self.skipped.saturating_add(1);
        if self.skips.len() < SKIPS_NAMED {
            self.skips.push(what);
        }
    }
}

/// What an import or export did, per collection; files it did not read are listed too.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub collections: Vec<CollectionSummary>,
    /// Files of the directory that are not collections shoal keeps (e.g. `indexes.json`).
    pub ignored_files: Vec<String>,
    /// Collections with no file in the directory.
    pub missing: Vec<String>,
    /// The nets' files (`import_nets`), when looked at.
    pub nets: Option<NetsSummary>,
}

impl Summary {
    /// Total documents skipped.
    pub fn skipped(&self) -> u64 {
        self.collections.iter().map(|c| c.skipped).sum()
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for c in &self.collections {
            write!(f, "{:<11} {:>9} documents", c.collection, c.written)?;
            if c.unchanged > 0 {
                write!(f, ", {} already stored", c.unchanged)?;
            }
            if c.skipped > 0 {
                write!(f, ", {} skipped", c.skipped)?;
            }
            writeln!(f)?;
            for s in &c.skips {
                writeln!(f, "    skipped {s}")?;
            }
            for w in &c.warnings {
                writeln!(f, "    warning {w}")?;
            }
        }
        if !self.missing.is_empty() {
            writeln!(f, "no file for: {}", self.missing.join(", "))?;
        }
        if !self.ignored_files.is_empty() {
            writeln!(f, "not read: {}", self.ignored_files.join(", "))?;
        }
        if let Some(nets) = &self.nets {
            write!(f, "{nets}")?;
        }
        Ok(())
    }
}

/// What [`import_nets`] found and did. File names are those of the source directory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NetsSummary {
    /// shoal's net directory.
    pub dir: PathBuf,
    /// Fishtest's net directory, when `--nets` named one.
    pub source: Option<PathBuf>,
    /// Files moved into the net directory.
    pub moved: Vec<String>,
    /// Nets whose file was already in the net directory (their source files are left).
    pub already: Vec<String>,
    /// Files refused by the check, with why (left where they are).
    pub bad: Vec<(String, String)>,
    /// Nets recorded in the database that have no file in the net directory afterwards.
    pub missing: Vec<String>,
    /// Net files no record names (left where they are).
    pub unrecorded: Vec<String>,
    /// Other entries of the source directory (left where they are).
    pub ignored: Vec<String>,
    /// Moved files whose source could not be removed, with why.
    pub warnings: Vec<String>,
}

impl std::fmt::Display for NetsSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dir = self.dir.display();
        write!(
            f,
            "{:<11} {:>9} files moved into {dir}",
            "nets",
            self.moved.len()
        )?;
        for (n, what) in [
            (self.already.len(), "already there"),
            (self.bad.len(), "refused"),
            (self.missing.len(), "recorded without a file"),
            (self.unrecorded.len(), "not in the database"),
        ] {
            if n > 0 {
                write!(f, ", {n} {what}")?;
            }
        }
        writeln!(f)?;
        let source = self
            .source
            .as_ref()
            .map_or_else(String::new, |s| s.display().to_string());
        for (file, why) in &self.bad {
            writeln!(f, "    refused {file}: {why} (left in {source})")?;
        }
        for w in &self.warnings {
            writeln!(f, "    warning {w}")?;
        }
        for name in &self.missing {
            writeln!(f, "    missing {name}: in the database, no file in {dir}")?;
        }
        for file in &self.unrecorded {
            writeln!(f, "    not in the database {file} (left in {source})")?;
        }
        for file in &self.ignored {
            writeln!(f, "    not a net file {file} (left in {source})")?;
        }
        if self.source.is_none() && !self.missing.is_empty() {
            writeln!(
                f,
                "    (pass --nets DIR, Fishtest's net directory, to move the net files in)"
            )?;
        }
        Ok(())
    }
}

fn collection(name: &str) -> Option<Collection> {
    Collection::ALL.into_iter().find(|c| c.name() == name)
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> DumpError + '_ {
    move |source| DumpError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn progress(show: bool, len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(
        Some(len),
        if show {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        },
    );
    if let Ok(style) =
        ProgressStyle::with_template("{prefix:>11} [{bar:30}] {bytes}/{total_bytes} {msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(what.to_string());
    bar
}

// ---------------------------------------------------------------------------------------
// Import

/// True if any collection or the PGN store holds something, with the first such collection.
fn first_nonempty(store: &dyn Store) -> Result<Option<(String, u64)>, StoreError> {
    for c in Collection::ALL {
        let n = store.count(c, &[])?;
        if n > 0 {
            return Ok(Some((c.name().to_string(), n)));
        }
    }
    if !store.pgn_scan(None, 1)?.is_empty() {
        return Ok(Some(("pgns".to_string(), 1)));
    }
    Ok(None)
}

/// Imports the dump in `dir` into `store`. Refuses a store that holds data unless `merge`.
/// `show_progress` draws a bar per file on stderr (when it is a terminal).
pub fn import(
    store: &dyn Store,
    dir: &Path,
    merge: bool,
    show_progress: bool,
) -> Result<Summary, DumpError> {
    if !merge && let Some((collection, count)) = first_nonempty(store)? {
        return Err(DumpError::NotEmpty { collection, count });
    }
    let mut summary = Summary::default();
    let entries = std::fs::read_dir(dir).map_err(io_err(dir))?;
    for entry in entries {
        let entry = entry.map_err(io_err(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let known = name
            .strip_suffix(".json")
            .is_some_and(|stem| DUMP_COLLECTIONS.contains(&stem));
        if !known {
            summary.ignored_files.push(name);
        }
    }
    summary.ignored_files.sort();
    for name in DUMP_COLLECTIONS {
        let path = dir.join(format!("{name}.json"));
        if !path.exists() {
            summary.missing.push(name.to_string());
            continue;
        }
        let file = File::open(&path).map_err(io_err(&path))?;
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let bar = progress(show_progress, len, name);
        let reader = BufReader::new(bar.wrap_read(file));
        let mut sink = ImportSink::new(store, name);
        let read = for_each_document(reader, |v| sink.push(v));
        let flushed = sink.flush();
        bar.finish_and_clear();
        read.map_err(|e| match e {
            ReadError::Json(message) => DumpError::Format {
                path: path.clone(),
                message,
            },
            ReadError::Store(e) => DumpError::Store(e),
        })?;
        flushed?;
        tracing::info!(
            collection = name,
            written = sink.summary.written,
            skipped = sink.summary.skipped,
            "imported"
        );
        summary.collections.push(sink.summary);
    }
    Ok(summary)
}

/// Batches mapped documents into `put_many` calls (PGNs one by one: each is a blob).
struct ImportSink<'a> {
    store: &'a dyn Store,
    coll: Option<Collection>,
    batch: Vec<Doc>,
    batch_bytes: usize,
    summary: CollectionSummary,
}

/// A batch is written when it holds this many documents or about this many bytes.
const BATCH_DOCS: usize = 500;
const BATCH_BYTES: usize = 16 << 20;

impl<'a> ImportSink<'a> {
    fn new(store: &'a dyn Store, name: &str) -> Self {
        ImportSink {
            store,
            coll: collection(name),
            batch: Vec::new(),
            batch_bytes: 0,
            summary: CollectionSummary::new(name),
        }
    }

    fn push(&mut self, v: Value) -> Result<(), StoreError> {
        let ordinal = self
            .summary
            .written
            .saturating_add(self.summary.skipped)
            .saturating_add(self.summary.unchanged)
            .saturating_add(1);
        let doc = match bson_map::parse_extjson(v) {
            Ok(d) => d,
            Err(e) => {
                self.summary.skip(format!("document #{ordinal}: {e}"));
                return Ok(());
            }
        };
        let label = doc
            .get("_id")
            .map(|id| id.clone().into_relaxed_extjson().to_string())
            .unwrap_or_else(|| format!("document #{ordinal}"));
        let Some(coll) = self.coll else {
            // pgns
            match bson_map::pgn_from_bson(&doc) {
                Ok(PgnDoc { id, run_task, gz }) => {
                    if self.store.pgn_import(&id, &run_task, &gz)? {
                        self.summary.written = self.summary.written.saturating_add(1);
                    } else {
                        self.summary.unchanged = self.summary.unchanged.saturating_add(1);
                    }
                }
                Err(e) => self.summary.skip(format!("{label}: {e}")),
            }
            return Ok(());
        };
        match bson_map::to_doc(coll, doc) {
            Ok(d) => {
                if coll == Collection::Runs {
                    self.check_run(&label, d.clone());
                }
                self.batch_bytes = self.batch_bytes.saturating_add(approx_size(&d));
                self.batch.push(d);
                if self.batch.len() >= BATCH_DOCS || self.batch_bytes >= BATCH_BYTES {
                    self.flush()?;
                }
            }
            Err(e) => self.summary.skip(format!("{label}: {e}")),
        }
        Ok(())
    }

    /// A run that shoal's model cannot read is imported all the same (for the way back), and
    /// named in the summary.
    fn check_run(&mut self, label: &str, d: Doc) {
        if let Err(e) = serde_json::from_value::<crate::rundb::model::Run>(Value::Object(d)) {
            self.summary
                .warnings
                .push(format!("run {label} is not readable by shoal: {e}"));
        }
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        if let (Some(coll), false) = (self.coll, self.batch.is_empty()) {
            self.store.put_many(coll, &self.batch)?;
            let n = u64::try_from(self.batch.len()).unwrap_or(u64::MAX);
            self.summary.written = self.summary.written.saturating_add(n);
        }
        self.batch.clear();
        self.batch_bytes = 0;
        Ok(())
    }
}

/// A cheap estimate of a document's size, for batching (runs are large, actions small).
fn approx_size(d: &Doc) -> usize {
    d.get("tasks")
        .and_then(Value::as_array)
        .map_or(0, |t| t.len().saturating_mul(1024))
        .saturating_add(1024)
}

enum ReadError {
    Json(String),
    Store(StoreError),
}

/// Calls `f` on each document of a dump file as it is parsed: a JSON array, or a sequence
/// of documents (one per line), never holding more than one document.
fn for_each_document(
    mut reader: impl std::io::BufRead,
    mut f: impl FnMut(Value) -> Result<(), StoreError>,
) -> Result<(), ReadError> {
    // Peek at the first non-blank byte to tell an array from a sequence.
    let first = loop {
        let buf = reader
            .fill_buf()
            .map_err(|e| ReadError::Json(e.to_string()))?;
        match buf.iter().position(|b| !b.is_ascii_whitespace()) {
            Some(i) => {
                let b = buf[i];
                reader.consume(i);
                break Some(b);
            }
            None if buf.is_empty() => break None,
            None => {
                let n = buf.len();
                reader.consume(n);
            }
        }
    };
    let mut failure = None;
    match first {
        None => Ok(()),
        Some(b'[') => {
            let mut de = serde_json::Deserializer::from_reader(reader);
            let seed = EachSeed {
                f: &mut f,
                failure: &mut failure,
            };
            let parsed = seed.deserialize(&mut de).and_then(|()| de.end());
            match (failure, parsed) {
                (Some(e), _) => Err(ReadError::Store(e)),
                (None, Err(e)) => Err(ReadError::Json(e.to_string())),
                (None, Ok(())) => Ok(()),
            }
        }
        Some(_) => {
            for v in serde_json::Deserializer::from_reader(reader).into_iter::<Value>() {
                let v = v.map_err(|e| ReadError::Json(e.to_string()))?;
                f(v).map_err(ReadError::Store)?;
            }
            Ok(())
        }
    }
}

/// Visits a JSON array element by element.
struct EachSeed<'f, F> {
    f: &'f mut F,
    failure: &'f mut Option<StoreError>,
}

impl<'de, F: FnMut(Value) -> Result<(), StoreError>> DeserializeSeed<'de> for EachSeed<'_, F> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, F: FnMut(Value) -> Result<(), StoreError>> Visitor<'de> for EachSeed<'_, F> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON array of documents")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        use serde::de::Error;
        while let Some(v) = seq.next_element::<Value>()? {
            if let Err(e) = (self.f)(v) {
                *self.failure = Some(e);
                return Err(A::Error::custom("store failure"));
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Nets

/// Moves the net files of `source` (Fishtest's net directory, when given) into the net
/// directory `dir`, and lists the nets recorded in `nns` that have no file there. Only files
/// of recorded nets are moved, each after its check (`nets::import_file`: a readable
/// gzip, or a plain file, whose content's SHA-256 matches the name; streamed); a net whose
/// file `dir` already has is left alone. Nothing of a refused file changes.
pub fn import_nets(
    store: &dyn Store,
    source: Option<&Path>,
    dir: &Path,
    show_progress: bool,
) -> Result<NetsSummary, DumpError> {
    let recorded: BTreeSet<String> = store
        .find(Collection::Nns, &Query::new())?
        .iter()
        .filter_map(|d| d.get("name").and_then(Value::as_str).map(str::to_string))
        .collect();
    let mut summary = NetsSummary {
        dir: dir.to_path_buf(),
        source: source.map(Path::to_path_buf),
        ..Default::default()
    };
    if let Some(source) = source {
        move_nets(&recorded, source, dir, show_progress, &mut summary)?;
    }
    let present = nets::present(dir).map_err(io_err(dir))?;
    summary.missing = recorded
        .into_iter()
        .filter(|n| nets::valid_name(n) && !present.contains(n))
        .collect();
    tracing::info!(
        moved = summary.moved.len(),
        refused = summary.bad.len(),
        missing = summary.missing.len(),
        "nets imported"
    );
    Ok(summary)
}

fn move_nets(
    recorded: &BTreeSet<String>,
    source: &Path,
    dir: &Path,
    show_progress: bool,
    summary: &mut NetsSummary,
) -> Result<(), DumpError> {
    // The directory's net files by net (a net may be there gzipped and plain).
    let mut files: BTreeMap<String, Vec<(String, bool)>> = BTreeMap::new();
    for entry in std::fs::read_dir(source).map_err(io_err(source))? {
        let entry = entry.map_err(io_err(source))?;
        let file = entry.file_name().to_string_lossy().into_owned();
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        match nets::net_of_file(&file) {
            Some((net, gzipped)) if is_file => files
                .entry(net.to_string())
                .or_default()
                .push((file.clone(), gzipped)),
            _ => summary.ignored.push(file),
        }
    }
    summary.ignored.sort();
    let bar = progress(
        show_progress,
        files.values().map(|v| v.len() as u64).sum(),
        "nets",
    );
    if let Ok(style) = ProgressStyle::with_template("{prefix:>11} [{bar:30}] {pos}/{len} files") {
        bar.set_style(style.progress_chars("=> "));
    }
    for (net, mut candidates) in files {
        bar.inc(candidates.len() as u64);
        if !recorded.contains(&net) {
            summary
                .unrecorded
                .extend(candidates.into_iter().map(|(f, _)| f));
            continue;
        }
        if nets::locate(dir, &net).map_err(io_err(dir))?.is_some() {
            summary.already.push(net);
            continue;
        }
        // The gzipped file first: it is Fishtest's layout.
        candidates.sort_by_key(|(_, gzipped)| !*gzipped);
        for (file, gzipped) in candidates {
            match nets::import_file(&source.join(&file), &net, gzipped, dir) {
                Ok(done) => {
                    if let nets::Imported::SourceKept(why) = done {
                        summary.warnings.push(format!(
                            "{file} copied, but not removed from the source: {why}"
                        ));
                    }
                    summary.moved.push(file);
                    break;
                }
                Err(nets::NetError::Duplicate(_)) => {
                    summary.already.push(net.clone());
                    break;
                }
                Err(e) => {
                    tracing::warn!(file = %file, error = %e, "net file refused");
                    summary.bad.push((file, e.to_string()));
                }
            }
        }
    }
    bar.finish_and_clear();
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Export

/// Documents read per page (runs: fewer, they are large).
const PAGE: u64 = 500;
const RUN_PAGE: u64 = 20;

/// Exports the store into `dir` (created if needed): one `<collection>.json` per collection
/// in canonical Extended JSON, a JSON array with one document per line. Existing files of
/// those names are replaced (each is written under a temporary name, then renamed).
pub fn export(store: &dyn Store, dir: &Path, show_progress: bool) -> Result<Summary, DumpError> {
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let mut summary = Summary::default();
    for name in DUMP_COLLECTIONS {
        let path = dir.join(format!("{name}.json"));
        let tmp = dir.join(format!(".{name}.json.tmp"));
        // A leftover from an interrupted export would keep its old mode: start afresh.
        let _ = std::fs::remove_file(&tmp);
        let file = create_private(&tmp).map_err(io_err(&tmp))?;
        let mut out = BufWriter::new(file);
        let bar = progress(show_progress, 0, name);
        bar.set_style(
            ProgressStyle::with_template("{prefix:>11} {pos} documents")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        let mut s = CollectionSummary::new(name);
        let mut first = true;
        let mut emit = |d: &Document| -> std::io::Result<()> {
            out.write_all(if first { b"[\n" } else { b",\n" })?;
            first = false;
            bson_map::write_extjson(&mut out, d)?;
            bar.inc(1);
            Ok(())
        };
        match collection(name) {
            Some(coll) => export_collection(store, coll, &mut s, &mut emit, &tmp)?,
            None => export_pgns(store, &mut s, &mut emit, &tmp)?,
        }
        out.write_all(if first { b"[\n]\n" } else { b"\n]\n" })
            .and_then(|()| out.flush())
            .map_err(io_err(&tmp))?;
        drop(out);
        std::fs::rename(&tmp, &path).map_err(io_err(&path))?;
        bar.finish_and_clear();
        tracing::info!(collection = name, written = s.written, "exported");
        summary.collections.push(s);
    }
    Ok(summary)
}

/// A new file only its owner can read: a dump holds password hashes (and any legacy
/// plaintext passwords not yet re-hashed) and e-mail addresses.
fn create_private(path: &Path) -> std::io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}

fn export_collection(
    store: &dyn Store,
    coll: Collection,
    s: &mut CollectionSummary,
    emit: &mut impl FnMut(&Document) -> std::io::Result<()>,
    path: &Path,
) -> Result<(), DumpError> {
    let page = if coll == Collection::Runs {
        RUN_PAGE
    } else {
        PAGE
    };
    let mut after: Option<String> = None;
    let mut sessions = 0u64;
    let mut hashed_only = 0u64;
    loop {
        let mut q = Query::new().sort("_id", Order::Asc).limit(page);
        if let Some(last) = &after {
            q = q.with(Cond::Gt("_id".into(), Value::String(last.clone())));
        }
        let docs = store.find(coll, &q)?;
        let Some(last) = docs.last() else {
            if hashed_only > 0 {
                s.warnings.push(format!(
                    "{hashed_only} users have only shoal's argon2id password hash, written to \
                     Fishtest's password field: Fishtest cannot check it, so they need a new \
                     password there"
                ));
            }
            if sessions > 0 {
                s.warnings.push(format!(
                    "{sessions} login sessions of shoal's not exported (meaningless to Fishtest)"
                ));
            }
            return Ok(());
        };
        after = last.get("_id").and_then(Value::as_str).map(str::to_string);
        if after.is_none() {
            return Err(StoreError::MissingId.into());
        }
        for d in &docs {
            if coll == Collection::Kvstore && is_session(d) {
                sessions = sessions.saturating_add(1);
                continue;
            }
            let fishtest_user;
            let d = if coll == Collection::Users {
                let (user, hash_only) = for_fishtest_user(d);
                if hash_only {
                    hashed_only = hashed_only.saturating_add(1);
                }
                fishtest_user = user;
                &fishtest_user
            } else {
                d
            };
            match bson_map::to_bson(coll, d) {
                Ok(b) => {
                    emit(&b).map_err(io_err(path))?;
                    s.written = s.written.saturating_add(1);
                }
                Err(e) => s.skip(format!("{}: {e}", id_label(d))),
            }
        }
    }
}

/// A user document as Fishtest's schema wants it: `password` is required and
/// `password_hash` unknown to it, so a hash-only user gets the hash in `password` (which
/// Fishtest cannot check: `true` is returned for the summary) and `password_hash` goes.
fn for_fishtest_user(d: &Doc) -> (Doc, bool) {
    let mut d = d.clone();
    let hash = d.remove("password_hash");
    let mut hash_only = false;
    if !d.contains_key("password")
        && let Some(hash) = hash
    {
        d.insert("password".into(), hash);
        hash_only = true;
    }
    (d, hash_only)
}

/// A browser session's record (`accounts`, `sessions.rs`): shoal's own state, and a credential.
fn is_session(d: &Doc) -> bool {
    d.get("_id")
        .and_then(Value::as_str)
        .is_some_and(|id| id.starts_with("session:"))
}

fn id_label(d: &Doc) -> String {
    d.get("_id")
        .map_or_else(|| "?".to_string(), Value::to_string)
}

fn export_pgns(
    store: &dyn Store,
    s: &mut CollectionSummary,
    emit: &mut impl FnMut(&Document) -> std::io::Result<()>,
    path: &Path,
) -> Result<(), DumpError> {
    let mut after = None;
    loop {
        let page = store.pgn_scan(after.as_ref(), 100)?;
        let Some((_, last)) = page.last() else {
            return Ok(());
        };
        after = Some(last.handle.clone());
        for (id, info) in &page {
            let gz = read_pgn(store, info)?;
            let doc = PgnDoc {
                id: id.clone(),
                run_task: info.run_task.clone(),
                gz,
            };
            match bson_map::pgn_to_bson(&doc) {
                Ok(b) => {
                    emit(&b).map_err(io_err(path))?;
                    s.written = s.written.saturating_add(1);
                }
                Err(e) => s.skip(format!("pgn {id}: {e}")),
            }
        }
    }
}

fn read_pgn(store: &dyn Store, info: &crate::store::PgnInfo) -> Result<Vec<u8>, StoreError> {
    let mut out = Vec::with_capacity(usize::try_from(info.size).unwrap_or(0));
    loop {
        let offset = u64::try_from(out.len()).unwrap_or(u64::MAX);
        let chunk = store.pgn_read(&info.handle, offset, 1 << 20)?;
        if chunk.is_empty() {
            return Ok(out);
        }
        out.extend(chunk);
    }
}

/// Reads every document of one dump file (tests and checks; small files only).
pub fn read_file(path: &Path) -> Result<Vec<Document>, DumpError> {
    let file = File::open(path).map_err(io_err(path))?;
    let mut docs = Vec::new();
    let mut bad = None;
    let reader = BufReader::new(file);
    for_each_document(reader, |v| {
        match bson_map::parse_extjson(v) {
            Ok(d) => docs.push(d),
            Err(e) => {
                bad.get_or_insert(e);
            }
        }
        Ok(())
    })
    .map_err(|e| DumpError::Format {
        path: path.to_path_buf(),
        message: match e {
            ReadError::Json(m) => m,
            ReadError::Store(e) => e.to_string(),
        },
    })?;
    match bad {
        Some(MapError::ExtJson(m)) | Some(MapError::Value { message: m, .. }) => {
            Err(DumpError::Format {
                path: path.to_path_buf(),
                message: m,
            })
        }
        Some(other) => Err(DumpError::Format {
            path: path.to_path_buf(),
            message: other.to_string(),
        }),
        None => Ok(docs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SqliteSync;
    use crate::store::sqlite::SqliteStore;

    fn store() -> (tempfile::TempDir, SqliteStore) {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = SqliteStore::open(&dir.path().join("data"), SqliteSync::Normal).expect("open");
        (dir, s)
    }

    #[test]
    fn reads_arrays_and_one_document_per_line() {
        for text in [
            "[\n{\"a\": 1},\n{\"a\": 2}\n]\n",
            "{\"a\": 1}\n{\"a\": 2}\n",
            "  [ ]",
            "",
        ] {
            let mut seen = Vec::new();
            let r = for_each_document(text.as_bytes(), |v| {
                seen.push(v["a"].as_i64().unwrap_or(0));
                Ok(())
            });
            assert!(r.is_ok(), "{text:?}");
            let want: Vec<i64> = if text.contains('1') {
                vec![1, 2]
            } else {
                vec![]
            };
            assert_eq!(seen, want, "{text:?}");
        }
        for bad in ["[{\"a\": 1},", "{\"a\": 1} nope", "[1, 2"] {
            let r = for_each_document(bad.as_bytes(), |_| Ok(()));
            assert!(matches!(r, Err(ReadError::Json(_))), "{bad:?}");
        }
    }

    #[test]
    fn bad_documents_are_skipped_with_a_reason_and_the_rest_imported() {
        let (dir, s) = store();
        let dump = dir.path().join("dump");
        std::fs::create_dir_all(&dump).expect("mkdir");
        std::fs::write(
            dump.join("users.json"),
            concat!(
                r#"{"_id": {"$oid": "682df88022dfea1c9574079d"}, "username": "a", "password": "p", "registration_time": {"$date": {"$numberLong": "1747843200000"}}}"#,
                "\n",
                r#"{"username": "no-id"}"#,
                "\n",
                r#"[1]"#,
                "\n",
            ),
        )
        .expect("write");
        std::fs::write(
            dump.join("nns.json"),
            r#"[{"_id": {"$oid": "682df88022dfea1c9574079e"}, "user": "x"}]"#,
        )
        .expect("write");
        std::fs::write(dump.join("notes.txt"), "hello").expect("write");
        let summary = import(&s, &dump, false, false).expect("import");
        let users = &summary.collections[0];
        assert_eq!(
            (users.collection.as_str(), users.written, users.skipped),
            ("users", 1, 2)
        );
        assert!(users.skips[0].contains("no `_id`"), "{:?}", users.skips);
        let nns = &summary.collections[1];
        assert_eq!((nns.written, nns.skipped), (0, 1));
        assert!(nns.skips[0].contains("name"), "{:?}", nns.skips);
        assert_eq!(summary.ignored_files, vec!["notes.txt".to_string()]);
        assert!(summary.missing.contains(&"runs".to_string()));
        assert_eq!(summary.skipped(), 3);
        let text = summary.to_string();
        assert!(text.contains("users"), "{text}");
        assert!(text.contains("2 skipped"), "{text}");
        // Not empty any more: refused without --merge, and nothing changes.
        let again = import(&s, &dump, false, false);
        assert!(matches!(again, Err(DumpError::NotEmpty { .. })));
        assert_eq!(s.count(Collection::Users, &[]).expect("count"), 1);
    }
}
