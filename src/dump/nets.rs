//! `shoal import --nets DIR`: the net files of Fishtest's net directory moved into shoal's,
//! each checked first, and the recorded nets that have no file.
//!
//! Must not: move a file no record names, or a file that fails its check (both are left
//! where they are); replace a net file the net directory already has.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use indicatif::ProgressStyle;
use serde_json::Value;

use super::{DumpError, NetsSummary, io_err, progress};
use crate::nets;
use crate::store::{Collection, Query, Store};

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
