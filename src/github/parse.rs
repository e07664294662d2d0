//! What shoal reads out of GitHub's texts, as pure functions: the bench in a commit message,
//! the run's info made from a message, the nets a commit's sources name, a tests repository's
//! URL. Kept apart from the client so the rules can be tested without a server.
//!
//! Must not: do I/O or know the HTTP client.

use std::sync::LazyLock;

use regex::Regex;

/// `Bench: N` in a commit message: `Bench` or `bench`, then spaces or colons, then 6 to 8
/// digits (the node count Stockfish's `bench` prints). The last one in the message counts.
static BENCH: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?:^|\s)[Bb]ench[ :]+([1-9][0-9]{5,7})\b").ok());

/// A net's default name in `src/evaluate.h`: `#define EvalFileDefaultName[Big|Small] "nn-….nnue"`.
static EVAL_DEFINE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r#"(?m)^\s*#define\s+EvalFileDefaultName(?:Big|Small)?\s+"(nn-[a-f0-9]{12}\.nnue)""#)
        .ok()
});

/// A net name anywhere in a file (the fallback in `src/ucioption.cpp`, older sources).
static NET_NAME: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r#""(nn-[a-f0-9]{12}\.nnue)""#).ok());

/// A tests repository: `https://github.com/<owner>/<repo>` (or `www.github.com`), with an
/// optional trailing slash.
static REPO_URL: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"^https://(?:www\.)?github\.com/([A-Za-z0-9](?:[A-Za-z0-9-]{0,38}))/([A-Za-z0-9._-]{1,100})/?$")
        .ok()
});

/// The bench a commit message states: the last `Bench: N` in it.
pub fn bench_of(message: &str) -> Option<u64> {
    let re = BENCH.as_ref()?;
    re.captures_iter(message)
        .last()
        .and_then(|c| c.get(1))
        .and_then(|m| m.as_str().parse().ok())
}

/// A run's info from a commit message: the bench text taken out, runs of spaces and tabs
/// made one space, blank lines dropped.
pub fn info_of(message: &str) -> String {
    let without = match BENCH.as_ref() {
        Some(re) => re.replace_all(message, " ").into_owned(),
        None => message.to_string(),
    };
    without
        .lines()
        .map(|l| {
            l.split([' ', '\t'])
                .filter(|w| !w.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A commit's subject: its message's first line.
pub fn subject_of(message: &str) -> &str {
    message.lines().next().unwrap_or_default().trim()
}

/// The nets `src/evaluate.h` names as its defaults, in order, without repeats.
pub fn nets_in_evaluate_h(text: &str) -> Vec<String> {
    collect(EVAL_DEFINE.as_ref(), text)
}

/// Every net name a file quotes (the fallback for sources whose `evaluate.h` names none).
pub fn nets_quoted(text: &str) -> Vec<String> {
    collect(NET_NAME.as_ref(), text)
}

fn collect(re: Option<&Regex>, text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in re.into_iter().flat_map(|re| re.captures_iter(text)) {
        if let Some(m) = c.get(1)
            && !out.iter().any(|n| n == m.as_str())
        {
            out.push(m.as_str().to_string());
        }
    }
    out
}

/// A repository named on GitHub: its owner and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoName {
    pub owner: String,
    pub name: String,
}

impl RepoName {
    /// `owner/name`.
    pub fn full(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }

    /// The repository's page, as the form and the run page show it.
    pub fn url(&self) -> String {
        format!("https://github.com/{}/{}", self.owner, self.name)
    }

    /// `owner/name` read back (the official repository's setting).
    pub fn from_full(full: &str) -> Option<RepoName> {
        let (owner, name) = full.split_once('/')?;
        repo_from_url(&format!("https://github.com/{owner}/{name}"))
    }
}

/// The owner and name in a tests repository's URL, if it is one.
pub fn repo_from_url(url: &str) -> Option<RepoName> {
    let c = REPO_URL.as_ref()?.captures(url.trim())?;
    let name = c.get(2)?.as_str().trim_end_matches(".git");
    if name.is_empty() || name == "." || name == ".." {
        return None;
    }
    Some(RepoName {
        owner: c.get(1)?.as_str().to_string(),
        name: name.to_string(),
    })
}

/// A branch, tag or SHA as a developer may type it: no spaces, no `..`, no control
/// characters, at most 200 characters (GitHub's refs are shorter). It goes into a URL path,
/// so anything else is refused before a request is made.
pub fn valid_ref(r: &str) -> bool {
    !r.is_empty()
        && r.chars().count() <= 200
        && !r.contains("..")
        && !r.starts_with('/')
        && !r.ends_with('/')
        && r.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./+@".contains(c))
}

/// A full commit SHA (40 hex).
pub fn is_sha(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_bench_counts() {
        assert_eq!(bench_of("Simplify search\n\nBench: 2050811"), Some(2050811));
        assert_eq!(
            bench_of("bench 1234567\nfix\nBench: 7654321\n"),
            Some(7654321)
        );
        assert_eq!(bench_of("Bench:1234567"), Some(1234567));
        assert_eq!(bench_of("no bench here"), None);
        // Too short, too long, a word that merely ends in "bench".
        assert_eq!(bench_of("Bench: 12345"), None);
        assert_eq!(bench_of("Bench: 123456789"), None);
        assert_eq!(bench_of("workbench: 1234567"), None);
    }

    #[test]
    fn info_drops_the_bench_and_blank_lines() {
        let msg = "Tweak  LMR\t reduction\n\nPassed STC\n\nBench: 2050811\n";
        assert_eq!(info_of(msg), "Tweak LMR reduction\nPassed STC");
        assert_eq!(subject_of(msg), "Tweak  LMR\t reduction");
    }

    #[test]
    fn nets_from_sources() {
        let h = "#define EvalFileDefaultNameBig \"nn-1c0000000000.nnue\"\n\
                 #define EvalFileDefaultNameSmall \"nn-37f18f62d772.nnue\"\n";
        assert_eq!(
            nets_in_evaluate_h(h),
            vec!["nn-1c0000000000.nnue", "nn-37f18f62d772.nnue"]
        );
        assert!(nets_in_evaluate_h("// nothing").is_empty());
        let cpp = "o[\"EvalFile\"] << Option(\"nn-62ef826d1a6d.nnue\"); \"nn-62ef826d1a6d.nnue\"";
        assert_eq!(nets_quoted(cpp), vec!["nn-62ef826d1a6d.nnue"]);
    }

    #[test]
    fn repository_urls() {
        let r = repo_from_url("https://github.com/vdbergh/Stockfish/").expect("repo");
        assert_eq!(r.full(), "vdbergh/Stockfish");
        assert_eq!(
            repo_from_url("https://www.github.com/a-b/Stockfish.git").map(|r| r.full()),
            Some("a-b/Stockfish".into())
        );
        for bad in [
            "http://github.com/a/b",
            "https://gitlab.com/a/b",
            "https://github.com/a",
            "https://github.com/a/b/c",
            "https://github.com/a/..",
            "https://github.com/-a/b",
        ] {
            assert_eq!(repo_from_url(bad), None, "{bad}");
        }
        assert_eq!(
            RepoName::from_full("official-stockfish/Stockfish").map(|r| r.url()),
            Some("https://github.com/official-stockfish/Stockfish".into())
        );
    }

    #[test]
    fn refs_that_may_go_into_a_path() {
        for ok in ["master", "feature/lmr-2", "v17.1", "a1b2c3", "user@fix+1"] {
            assert!(valid_ref(ok), "{ok}");
        }
        for bad in ["", "a b", "../x", "a..b", "/x", "x/", "a?b", "a#b", "é"] {
            assert!(!valid_ref(bad), "{bad}");
        }
        assert!(is_sha(&"a".repeat(40)));
        assert!(!is_sha(&"g".repeat(40)));
    }
}
