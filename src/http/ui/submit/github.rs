//! The new-test form and GitHub: what the form asks the `github` component (a submission by
//! branch name), the resolved values written back into the form (so the page shows, and the
//! run records, exactly what was tested), GitHub's problems shown at their fields, and the
//! nets checked against the ones uploaded.
//!
//! Must not: call GitHub itself or decide what a problem means (the component does); block
//! (the resolution is awaited on the event loop before the page job, a network wait holding
//! no token and no lock).

use super::args::FieldErrors;
use super::form::RunForm;
use crate::accounts::User;
use crate::github::{Field, Given, Problem, Resolved, Vetted, Wanted, parse};
use crate::http::ui::kit::Flash;

/// Whether the form needs GitHub: not a rerun (its commits are fixed) and no commit given by
/// hand in the "advanced" fields.
pub fn needs_github(f: &RunForm) -> bool {
    f.rescheduled_from.trim().is_empty()
        && f.resolved_new.trim().is_empty()
        && f.resolved_base.trim().is_empty()
}

/// What the developer asked for; the tests repository defaults to their profile's.
pub fn wanted(f: &RunForm, user: &User) -> Wanted {
    let repo = match f.tests_repo.trim() {
        "" => user.tests_repo.trim(),
        typed => typed,
    };
    Wanted {
        tests_repo: repo.to_string(),
        new_tag: f.test_branch.clone(),
        base_tag: f.base_branch.clone(),
        new_signature: f.test_signature.trim().parse().ok(),
        base_signature: f.base_signature.trim().parse().ok(),
        registered_at: user.registration_time.0.timestamp(),
    }
}

/// The tests repository of a form whose commits were given by hand (or a rerun's): the one
/// typed, else the profile's, else the official repository (the field's hint says it may be
/// left empty).
pub fn default_repo(f: &mut RunForm, user: &User, official: &str) {
    if f.tests_repo.trim().is_empty() {
        f.tests_repo = match user.tests_repo.trim().trim_end_matches('/') {
            "" => official.to_string(),
            profile => profile.to_string(),
        };
    }
}

/// The resolved values written into the form: the repository as GitHub spells it, both SHAs
/// and subjects, the benches and nets the developer left empty, the info from the message.
pub fn apply(f: &mut RunForm, r: &Resolved) {
    f.tests_repo = r.tests_repo.clone();
    f.master_repo = r.master_repo.clone().unwrap_or_default();
    f.test_branch = r.new.tag.clone();
    f.base_branch = r.base.tag.clone();
    f.resolved_new = r.new.commit.sha.clone();
    f.resolved_base = r.base.commit.sha.clone();
    f.msg_new = r.new.commit.subject().to_string();
    f.msg_base = r.base.commit.subject().to_string();
    if f.test_signature.trim().is_empty() {
        f.test_signature = r.new.bench.to_string();
    }
    if f.base_signature.trim().is_empty() {
        f.base_signature = r.base.bench.to_string();
    }
    if f.new_nets.trim().is_empty() {
        f.new_nets = r.new.nets.join(" ");
    }
    if f.base_nets.trim().is_empty() {
        f.base_nets = r.base.nets.join(" ");
    }
    if f.run_info.trim().is_empty() {
        f.run_info = parse::info_of(&r.new.commit.message);
    }
}

/// The commits given by hand (or a rerun's), as GitHub is asked to check them: the nets of
/// a side left empty are read from its commit.
pub fn given(f: &RunForm, user: &User) -> Given {
    let base = f.base_branch.trim();
    Given {
        tests_repo: f.tests_repo.trim().to_string(),
        new_sha: f.resolved_new.trim().to_string(),
        base_sha: f.resolved_base.trim().to_string(),
        base_is_master: base.is_empty() || base == "master",
        base_bench: f.base_signature.trim().to_string(),
        read_new_nets: f.new_nets.trim().is_empty(),
        read_base_nets: f.base_nets.trim().is_empty(),
        registered_at: user.registration_time.0.timestamp(),
    }
}

/// What GitHub said of commits given by hand written into the form: the `master_repo` it
/// computed, the nets read for the sides left empty.
pub fn apply_vetted(f: &mut RunForm, v: &Vetted) {
    f.master_repo = v.master_repo.clone().unwrap_or_default();
    if let Some(n) = &v.new_nets {
        f.new_nets = n.join(" ");
    }
    if let Some(n) = &v.base_nets {
        f.base_nets = n.join(" ");
    }
}

/// The form field a problem shows next to.
fn field(f: Field) -> &'static str {
    match f {
        Field::TestsRepo => "tests_repo",
        Field::NewTag => "new_tag",
        Field::BaseTag => "base_tag",
        Field::NewSignature => "new_signature",
        Field::BaseSignature => "base_signature",
        Field::NewCommit => "resolved_new",
        Field::BaseCommit => "resolved_base",
    }
}

/// GitHub's problems at their fields (two at one field are joined), and, when GitHub itself
/// failed, a message saying how to submit anyway; `true` when the advanced fields should open.
pub fn problems(problems: &[Problem]) -> (FieldErrors, Vec<Flash>, bool) {
    let mut errors = FieldErrors::new();
    // GitHub failing (down, timed out, its quota spent) says nothing of the field it was
    // asked about: said above the form, never at a field that is fine.
    let github: Vec<&str> = problems
        .iter()
        .filter(|p| p.outage)
        .map(|p| p.message.as_str())
        .collect();
    for p in problems.iter().filter(|p| !p.outage) {
        errors
            .entry(field(p.field).to_string())
            .and_modify(|e: &mut String| {
                e.push_str("; ");
                e.push_str(&p.message);
            })
            .or_insert_with(|| p.message.clone());
    }
    let outage = problems.iter().any(|p| p.outage);
    let mut flashes = Vec::new();
    if outage {
        let mut said: Vec<&str> = Vec::new();
        for m in github {
            if !said.contains(&m) {
                said.push(m);
            }
        }
        flashes.push(Flash::error(format!(
            "GitHub could not answer ({}). You can still submit the test: give both \
             commits' SHAs, their benches and their nets under \"Advanced\".",
            said.join("; ")
        )));
    }
    (errors, flashes, outage)
}

/// The refusal of nets never uploaded, at the field that names them (Fishtest's words).
pub fn missing_nets(f: &RunForm, known: impl Fn(&str) -> bool) -> FieldErrors {
    let mut errors = FieldErrors::new();
    for (key, value) in [("new_nets", &f.new_nets), ("base_nets", &f.base_nets)] {
        let count = value
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|n| !n.is_empty())
            .count();
        if count > crate::rundb::create::MAX_NETS {
            let e = crate::rundb::create::too_many_nets(key, count);
            errors.insert(key.to_string(), e.message);
            continue;
        }
        let missing: Vec<&str> = value
            .split(|c: char| c.is_whitespace() || c == ',')
            // A name that is not one is refused with the other arguments.
            .filter(|n| crate::nets::valid_name(n) && !known(n))
            .collect();
        if !missing.is_empty() {
            errors.insert(
                key.to_string(),
                format!(
                    "Missing net(s). Please upload to this server the following net(s): {}",
                    missing.join(", ")
                ),
            );
        }
    }
    errors
}
