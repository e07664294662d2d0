//! `shoal import --fishtest DIR`: a dump directory into the store, file by file, each
//! document mapped and written in batches (PGNs one by one).
//!
//! Must not: import into a store that holds data unless told to merge, or hold a whole
//! collection in memory.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use serde_json::Value;

use super::read::{ReadError, for_each_document};
use super::{
    CollectionSummary, DUMP_COLLECTIONS, DumpError, RUN_EXTRAS_FILE, Summary, collection, io_err,
    progress,
};
use crate::store::bson_map::{self, PgnDoc};
use crate::store::{Collection, Doc, FISHTEST_KV_KEYS, Store, StoreError};

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
        let known = name == RUN_EXTRAS_FILE
            || name
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
        read.map_err(read_err(&path))?;
        flushed?;
        tracing::info!(
            collection = name,
            written = sink.summary.written,
            skipped = sink.summary.skipped,
            "imported"
        );
        summary.collections.push(sink.summary);
    }
    import_run_extras(store, dir)?;
    Ok(summary)
}

/// A dump file's reading error, naming the file.
fn read_err(path: &Path) -> impl Fn(ReadError) -> DumpError + '_ {
    move |e| match e {
        ReadError::Json(message) => DumpError::Format {
            path: path.to_path_buf(),
            message,
        },
        ReadError::Store(e) => DumpError::Store(e),
    }
}

/// Puts shoal's own run fields from `shoal_run_extras.json` (written by `shoal export`) back
/// on their runs; a dump without the file (Fishtest's own) has nothing to put back, and an
/// entry whose run is not in the store is passed over.
fn import_run_extras(store: &dyn Store, dir: &Path) -> Result<(), DumpError> {
    let path = dir.join(RUN_EXTRAS_FILE);
    if !path.exists() {
        return Ok(());
    }
    let file = File::open(&path).map_err(io_err(&path))?;
    let mut restored = 0u64;
    let read = for_each_document(BufReader::new(file), |v| {
        let Value::Object(extra) = v else {
            return Ok(());
        };
        let Some(id) = extra.get("_id").and_then(Value::as_str) else {
            return Ok(());
        };
        let Some(mut run) = store.get(Collection::Runs, id)? else {
            return Ok(());
        };
        for field in crate::store::mongo::SHOAL_RUN_FIELDS {
            if let Some(value) = extra.get(*field) {
                run.insert((*field).to_string(), value.clone());
            }
        }
        store.put(Collection::Runs, &run)?;
        restored = restored.saturating_add(1);
        Ok(())
    });
    read.map_err(read_err(&path))?;
    tracing::info!(runs = restored, "shoal's own run fields restored");
    Ok(())
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
    pub(super) fn new(store: &'a dyn Store, name: &str) -> Self {
        ImportSink {
            store,
            coll: collection(name),
            batch: Vec::new(),
            batch_bytes: 0,
            summary: CollectionSummary::new(name),
        }
    }

    pub(super) fn push(&mut self, v: Value) -> Result<(), StoreError> {
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
                // A key of shoal's own (an export by an earlier shoal) goes to shoal's own
                // collection: Fishtest's `kvstore` keeps only its keys.
                if coll == Collection::Kvstore
                    && d.get("_id")
                        .and_then(Value::as_str)
                        .is_some_and(|id| !FISHTEST_KV_KEYS.contains(&id))
                {
                    self.store.put(Collection::ShoalKv, &d)?;
                    self.summary.written = self.summary.written.saturating_add(1);
                    return Ok(());
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

    pub(super) fn flush(&mut self) -> Result<(), StoreError> {
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
