//! What an import or export did, as the command prints it: per collection, the files it did
//! not read, and the nets' files.
//!
//! Must not: decide anything (the import, the export and the net import fill these in).

use std::path::PathBuf;

use super::SKIPS_NAMED;

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
    pub(super) fn new(collection: &str) -> Self {
        CollectionSummary {
            collection: collection.to_string(),
            ..Default::default()
        }
    }

    pub(super) fn skip(&mut self, what: String) {
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

/// What [`import_nets`](super::import_nets) found and did. File names are those
/// of the source directory.
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
