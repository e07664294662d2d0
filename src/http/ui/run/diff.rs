//! The run page's diff: the diff GitHub gave between the run's base and new commits, kept with
//! the run when it was created (`github::StoredDiff`), drawn on the server: one foldable part
//! per file with its added and removed lines coloured, the whole folded when long, and a link
//! to the same comparison on GitHub.
//!
//! Must not: ask GitHub (the page shows what was kept, so it works while GitHub is down), or
//! put a line of the diff in the page but as text (askama escapes it).

use crate::github::StoredDiff;
use crate::rundb::model::Run;

/// A diff folded by default above this many lines; a file part above this many, too.
const FOLD_LINES: usize = 400;
const FOLD_FILE_LINES: usize = 150;

pub struct DiffLine {
    /// `add`, `del`, `hunk` or `ctx`.
    pub class: &'static str,
    pub text: String,
}

pub struct DiffFile {
    pub name: String,
    pub added: usize,
    pub removed: usize,
    pub lines: Vec<DiffLine>,
    pub open: bool,
}

/// What the page shows of a run's diff.
pub struct DiffView {
    pub files: Vec<DiffFile>,
    pub added: usize,
    pub removed: usize,
    pub open: bool,
    pub truncated: bool,
}

/// The comparison on GitHub (`https://github.com/<repo>/compare/<base>...<new>`), when the run
/// names a GitHub repository and both commits.
pub fn compare_url(run: &Run) -> Option<String> {
    let a = &run.args;
    let repo = crate::github::parse::repo_from_url(&a.tests_repo)?;
    if a.resolved_base.is_empty() || a.resolved_new.is_empty() {
        return None;
    }
    Some(format!(
        "{}/compare/{}...{}",
        repo.url(),
        a.resolved_base,
        a.resolved_new
    ))
}

/// Official master compared with a run's base on GitHub
/// (`<official>/compare/<master>...<owner>:<base>`), shown with the warning that the base is
/// not an ancestor of master; `None` while master is not known.
pub fn base_diff_url(
    run: &Run,
    official: &crate::github::RepoName,
    master: Option<&crate::github::Master>,
) -> Option<String> {
    let a = &run.args;
    let repo = crate::github::parse::repo_from_url(&a.tests_repo)?;
    if a.resolved_base.is_empty() {
        return None;
    }
    Some(format!(
        "{}/compare/{}...{}:{}",
        official.url(),
        master?.sha,
        repo.owner,
        a.resolved_base
    ))
}

/// The kept diff, drawn.
pub fn view(d: &StoredDiff) -> DiffView {
    let mut files: Vec<DiffFile> = Vec::new();
    for line in d.diff.lines() {
        if let Some(rest) = line.strip_prefix("diff --git ") {
            let name = rest
                .split_whitespace()
                .last()
                .map(|b| b.trim_start_matches("b/").to_string())
                .unwrap_or_default();
            files.push(DiffFile {
                name,
                added: 0,
                removed: 0,
                lines: Vec::new(),
                open: true,
            });
            continue;
        }
        let Some(file) = files.last_mut() else {
            continue;
        };
        if line.starts_with("index ")
            || line.starts_with("--- ")
            || line.starts_with("+++ ")
            || line.starts_with("new file mode")
            || line.starts_with("deleted file mode")
            || line.starts_with("similarity index")
            || line.starts_with("rename ")
        {
            continue;
        }
        let class = if line.starts_with("@@") {
            "hunk"
        } else if line.starts_with('+') {
            file.added += 1;
            "add"
        } else if line.starts_with('-') {
            file.removed += 1;
            "del"
        } else {
            "ctx"
        };
        file.lines.push(DiffLine {
            class,
            text: line.to_string(),
        });
    }
    let total: usize = files.iter().map(|f| f.lines.len()).sum();
    for f in &mut files {
        f.open = f.lines.len() <= FOLD_FILE_LINES;
    }
    DiffView {
        added: files.iter().map(|f| f.added).sum(),
        removed: files.iter().map(|f| f.removed).sum(),
        open: total <= FOLD_LINES,
        truncated: d.truncated,
        files,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_lines_and_counts() {
        let d = StoredDiff {
            repo: "a/b".into(),
            base: "1".into(),
            new: "2".into(),
            diff: "diff --git a/src/x.cpp b/src/x.cpp\nindex 1..2 100644\n--- a/src/x.cpp\n+++ b/src/x.cpp\n@@ -1,2 +1,2 @@\n ctx\n-old\n+new\n+more\ndiff --git a/README b/README\n@@ -1 +1 @@\n-a\n+<b>\n".into(),
            truncated: false,
            fetched_at: 0,
            ancestry: None,
        };
        let v = view(&d);
        assert_eq!(v.files.len(), 2);
        assert_eq!(v.files[0].name, "src/x.cpp");
        assert_eq!((v.files[0].added, v.files[0].removed), (2, 1));
        let classes: Vec<&str> = v.files[0].lines.iter().map(|l| l.class).collect();
        assert_eq!(classes, ["hunk", "ctx", "del", "add", "add"]);
        assert_eq!((v.added, v.removed), (3, 2));
        assert!(v.open && v.files.iter().all(|f| f.open));
        assert_eq!(v.files[1].lines[2].text, "+<b>");
    }

    #[test]
    fn a_long_diff_is_folded() {
        let mut diff = String::from("diff --git a/x b/x\n@@ -1 +1 @@\n");
        for i in 0..500 {
            diff.push_str(&format!("+line {i}\n"));
        }
        let v = view(&StoredDiff {
            repo: "a/b".into(),
            base: "1".into(),
            new: "2".into(),
            diff,
            truncated: true,
            fetched_at: 0,
            ancestry: None,
        });
        assert!(!v.open && !v.files[0].open && v.truncated);
        assert_eq!(v.added, 500);
    }
}
