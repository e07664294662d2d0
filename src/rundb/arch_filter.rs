//! A run's `arch_filter`: a regular expression in Fishtest's dialect (Python's `re`, so
//! look-ahead, look-behind and back-references included), searched for in the worker's
//! `worker_arch`. Compiled with `fancy-regex` under limits: the pattern's length, the size of
//! what it compiles to, and the backtracking one search may do, so a hostile filter costs
//! request_task a bounded amount of work.
//!
//! Owns: compiling a filter for the scheduler (lenient: an invalid one excludes nothing, as in
//! Fishtest, which logs and ignores it) and checking one at submission (strict: a filter that
//! does not compile, or matches no supported arch, is refused with the reason).
//! Must not: do I/O or lock.

use fancy_regex::{Regex, RegexBuilder};

/// The longest `arch_filter` accepted, in characters (real ones are a few alternatives:
/// "avx2|bmi2|vnni").
pub const MAX_ARCH_FILTER_LEN: usize = 256;

/// The most backtracking steps one search may take (a `worker_arch` is a few dozen
/// characters: an honest filter needs a few hundred).
const BACKTRACK_LIMIT: usize = 20_000;
/// The most memory a compiled filter's automata may take.
const SIZE_LIMIT: usize = 1 << 18;

/// A compiled `arch_filter`. An invalid pattern excludes nothing (Fishtest logs and ignores it).
#[derive(Debug, Clone)]
pub enum ArchFilter {
    Regex(Regex),
    Invalid,
}

/// Compiles `pattern` under the limits; the error in words.
fn build(pattern: &str) -> Result<Regex, String> {
    let len = pattern.chars().count();
    if len > MAX_ARCH_FILTER_LEN {
        return Err(format!("longer than {MAX_ARCH_FILTER_LEN} characters"));
    }
    RegexBuilder::new(pattern)
        .backtrack_limit(BACKTRACK_LIMIT)
        .delegate_size_limit(SIZE_LIMIT)
        .delegate_dfa_size_limit(SIZE_LIMIT)
        .build()
        .map_err(|e| e.to_string())
}

impl ArchFilter {
    /// Compiles a stored filter for the scheduler; one that does not compile is logged and
    /// excludes nothing.
    pub fn compile(pattern: &str) -> ArchFilter {
        match build(pattern) {
            Ok(r) => ArchFilter::Regex(r),
            Err(e) => {
                tracing::warn!(pattern, error = %e, "invalid arch_filter ignored");
                ArchFilter::Invalid
            }
        }
    }

    /// Checks a submitted filter: it must compile, and match at least one of `arches`.
    pub fn check(pattern: &str, arches: &[&str]) -> Result<ArchFilter, String> {
        let re = build(pattern).map_err(|e| format!("Invalid arch filter: {e}"))?;
        let mut any = false;
        for arch in arches {
            // A search that runs out of its backtracking budget is refused as such (the
            // scheduler would let every worker of that arch take the run).
            match re.is_match(arch) {
                Ok(m) => any |= m,
                Err(e) => {
                    return Err(format!(
                        "Invalid arch filter: the search of {arch} ran out of its backtracking budget ({e})"
                    ));
                }
            }
        }
        if !any {
            return Err(format!("filter {pattern} has no compatible arches"));
        }
        Ok(ArchFilter::Regex(re))
    }

    /// Whether a worker of `worker_arch` may take the run: the pattern is searched for
    /// anywhere in it (Python's `re.search`). A search that runs out of its backtracking
    /// budget excludes nothing, as Fishtest treats a search that times out.
    pub fn allows(&self, worker_arch: &str) -> bool {
        match self {
            ArchFilter::Regex(r) => r.is_match(worker_arch).unwrap_or_else(|e| {
                tracing::warn!(pattern = r.as_str(), error = %e, "arch_filter search failed");
                true
            }),
            ArchFilter::Invalid => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_dialect_with_look_around() {
        let arches = ["x86-64-avx2", "x86-64-bmi2", "x86-64-vnni512", "armv8"];
        // Look-ahead: x86-64 but not the AVX-512 builds.
        let f = ArchFilter::check(r"^x86-64-(?!vnni|avx512)", &arches).unwrap();
        assert!(f.allows("x86-64-avx2"));
        assert!(!f.allows("x86-64-vnni512"));
        assert!(!f.allows("armv8"));
        // Look-behind and a search anywhere in the name.
        let f = ArchFilter::check(r"(?<=64-)bmi2", &arches).unwrap();
        assert!(f.allows("x86-64-bmi2") && !f.allows("x86-64-avx2"));
        // A back-reference, and Python's named group.
        assert!(ArchFilter::check(r"(?P<d>\d)\k<d>", &["x86-64-vnni512", "x86-66"]).is_ok());
    }

    #[test]
    fn a_bad_filter_is_refused_at_submission_and_ignored_by_the_scheduler() {
        let e = ArchFilter::check("(unclosed", &["x86-64"]).unwrap_err();
        assert!(e.starts_with("Invalid arch filter: "), "{e}");
        let e = ArchFilter::check("sparc", &["x86-64", "armv8"]).unwrap_err();
        assert_eq!(e, "filter sparc has no compatible arches");
        assert!(ArchFilter::check(&"a".repeat(300), &["a"]).is_err());
        assert!(ArchFilter::compile("(unclosed").allows("x86-64"));
    }

    #[test]
    fn a_catastrophic_pattern_stops_at_its_budget() {
        // Exponential backtracking: a look-ahead keeps the repetition in the backtracking
        // engine, and each `a` can be taken two ways.
        let f = ArchFilter::compile("^(?:(?=a)a|a)*b");
        let started = std::time::Instant::now();
        // Out of budget: the search excludes nothing, as Fishtest treats a search that
        // times out.
        assert!(f.allows(&"a".repeat(64)));
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        // At submission it is refused as such, even when another alternative would match.
        let long = "a".repeat(64);
        let e = ArchFilter::check("^(?:(?=a)a|a)*b|x86", &[long.as_str(), "x86-64"]).unwrap_err();
        assert!(
            e.starts_with("Invalid arch filter: ") && e.contains("backtracking budget"),
            "{e}"
        );
    }
}
