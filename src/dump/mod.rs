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
//! `--nets DIR` ([`import_nets`]) moves the net files of Fishtest's net
//! directory (`nn-<12 hex>.nnue.gz`) into shoal's (`nn_dir`), each checked first
//! (`crate::nets`: a readable gzip whose decoded SHA-256 matches its name, streamed); the
//! summary lists what moved, what was refused and why, nets recorded without a file, and files
//! no record names (those are left where they are). Without `--nets` the summary still lists
//! the recorded nets that have no file.
//!
//! Owns: the file format of a dump directory, the batching, the summary and the progress
//! bar (the nets component decides which files of a net directory are moved). Must not: run
//! on the event loop (it blocks; it is a CLI command), interpret documents (the mapping
//! does), or write a document it could not map (it is skipped and reported).
//!
//! Files:
//! - `mod.rs`: the collections of a dump, [`DumpError`], the progress bar.
//! - `summary.rs`: what an import or export did ([`Summary`], [`NetsSummary`]), printed.
//! - `read.rs`: a dump file read document by document.
//! - `import.rs`: a dump directory into the store ([`import`]).
//! - `nets.rs`: a Fishtest net directory's files moved into shoal's ([`import_nets`]).
//! - `export.rs`: the store into a dump directory ([`export`]).
//! - `tests.rs`: unit tests.

mod export;
mod import;
mod nets;
mod read;
mod summary;

use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::store::{Collection, StoreError};

pub use export::export;
pub use import::import;
pub use nets::import_nets;
pub use read::read_file;
pub use summary::{CollectionSummary, NetsSummary, Summary};

/// The files of a dump, in the order they are imported and exported.
/// The file beside the collections that carries shoal's own run fields
/// ([`crate::store::mongo::SHOAL_RUN_FIELDS`]: the charts' history), which Fishtest's run schema
/// refuses in `runs.json`: a JSON array of `{"_id": <run id>, <field>: …}`. Fishtest never
/// reads it; `shoal import` puts the fields back on their runs.
pub const RUN_EXTRAS_FILE: &str = "shoal_run_extras.json";

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

fn collection(name: &str) -> Option<Collection> {
    Collection::ALL.into_iter().find(|c| c.name() == name)
}

pub(crate) fn io_err(path: &Path) -> impl Fn(std::io::Error) -> DumpError + '_ {
    move |source| DumpError::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub(crate) fn progress(show: bool, len: u64, what: &str) -> ProgressBar {
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

#[cfg(test)]
mod tests;
