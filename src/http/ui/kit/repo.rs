//! A tests repository's URL: whether it is one shoal takes ([`valid_tests_repo`]) and its
//! `owner/repo` label ([`repo_label`]), for the signup form, the profile and the contributors.

/// `owner/repo` of a `https://github.com/owner/repo` URL; empty for anything else.
pub fn repo_label(url: &str) -> String {
    let rest = url
        .strip_prefix("https://github.com/")
        .or_else(|| url.strip_prefix("https://www.github.com/"));
    match rest {
        Some(r) if valid_tests_repo(url) => r.trim_end_matches('/').to_string(),
        _ => String::new(),
    }
}

/// Whether `repo` is `https://github.com/<owner>/<repo>` (or `www.github.com`), each part
/// letters, digits, `-`, `_` or `.`.
pub fn valid_tests_repo(repo: &str) -> bool {
    let rest = repo
        .strip_prefix("https://github.com/")
        .or_else(|| repo.strip_prefix("https://www.github.com/"));
    let Some(rest) = rest else { return false };
    let parts: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    let ok = |p: &str| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    parts.len() == 2 && parts.iter().all(|p| ok(p))
}
