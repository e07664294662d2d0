//! `shoal export --fishtest DIR`: the store into a dump directory, one file per collection
//! in canonical Extended JSON, read page by page.
//!
//! Must not: leave a half-written file under a collection's name, or write a file others
//! can read (a dump holds password hashes and e-mail addresses).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use bson::Document;
use indicatif::ProgressStyle;
use serde_json::Value;

use super::{
    CollectionSummary, DUMP_COLLECTIONS, DumpError, RUN_EXTRAS_FILE, Summary, collection, io_err,
    progress,
};
use crate::store::bson_map::{self, PgnDoc};
use crate::store::mongo::SHOAL_RUN_FIELDS;
use crate::store::{Collection, Cond, Doc, Order, Query, Store, StoreError};

/// Documents read per page (runs: fewer, they are large).
const PAGE: u64 = 500;
const RUN_PAGE: u64 = 20;

/// Exports the store into `dir` (created if needed): one `<collection>.json` per collection
/// in canonical Extended JSON, a JSON array with one document per line. Existing files of
/// those names are replaced (each is written under a temporary name, then renamed).
pub fn export(store: &dyn Store, dir: &Path, show_progress: bool) -> Result<Summary, DumpError> {
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let mut summary = Summary::default();
    // shoal's own run fields go to a file of their own, written beside `runs.json`.
    let extras_path = dir.join(RUN_EXTRAS_FILE);
    let extras_tmp = dir.join(format!(".{RUN_EXTRAS_FILE}.tmp"));
    let _ = std::fs::remove_file(&extras_tmp);
    let mut extras = Extras {
        out: BufWriter::new(create_private(&extras_tmp).map_err(io_err(&extras_tmp))?),
        first: true,
    };
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
            Some(coll) => export_collection(store, coll, &mut s, &mut emit, &mut extras, &tmp)?,
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
    extras
        .out
        .write_all(if extras.first { b"[\n]\n" } else { b"\n]\n" })
        .and_then(|()| extras.out.flush())
        .map_err(io_err(&extras_tmp))?;
    drop(extras);
    std::fs::rename(&extras_tmp, &extras_path).map_err(io_err(&extras_path))?;
    Ok(summary)
}

/// The open `shoal_run_extras.json`: one `{"_id", <field>…}` line per run that has any of
/// shoal's own run fields.
struct Extras {
    out: BufWriter<File>,
    first: bool,
}

impl Extras {
    fn write(&mut self, doc: &Doc) -> std::io::Result<()> {
        self.out
            .write_all(if self.first { b"[\n" } else { b",\n" })?;
        self.first = false;
        serde_json::to_writer(&mut self.out, doc)?;
        Ok(())
    }
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
    extras: &mut Extras,
    path: &Path,
) -> Result<(), DumpError> {
    let page = if coll == Collection::Runs {
        RUN_PAGE
    } else {
        PAGE
    };
    let mut after: Option<String> = None;
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
            if coll == Collection::Kvstore {
                // shoal's own key-value documents live in a collection of their own, never
                // exported: say so for the one kind a reader may look for.
                let sessions = store.count(
                    Collection::ShoalKv,
                    &[Cond::Eq("kind".into(), Value::String("session".into()))],
                )?;
                if sessions > 0 {
                    s.warnings.push(format!(
                        "{sessions} login sessions of shoal's not exported (meaningless to \
                         Fishtest), nor shoal's other own documents (API tokens, follows, \
                         caches: `shoal_kvstore`, `shoal_actions`)"
                    ));
                }
            }
            return Ok(());
        };
        after = last.get("_id").and_then(Value::as_str).map(str::to_string);
        if after.is_none() {
            return Err(StoreError::MissingId.into());
        }
        for d in &docs {
            let fishtest_doc;
            let d = if coll == Collection::Users {
                let (user, hash_only) = for_fishtest_user(d);
                if hash_only {
                    hashed_only = hashed_only.saturating_add(1);
                }
                fishtest_doc = user;
                &fishtest_doc
            } else if coll == Collection::Runs
                && SHOAL_RUN_FIELDS.iter().any(|f| d.contains_key(*f))
            {
                // shoal's own run fields (the trajectory the charts draw): Fishtest's run
                // schema refuses them, so they go to the extras file instead.
                let mut run = d.clone();
                let mut extra = Doc::new();
                if let Some(id) = d.get("_id") {
                    extra.insert("_id".into(), id.clone());
                }
                for f in SHOAL_RUN_FIELDS {
                    if let Some(v) = run.remove(*f) {
                        extra.insert((*f).to_string(), v);
                    }
                }
                let extras_err = |e| DumpError::Io {
                    path: path.with_file_name(RUN_EXTRAS_FILE),
                    source: e,
                };
                extras.write(&extra).map_err(extras_err)?;
                fishtest_doc = run;
                &fishtest_doc
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
