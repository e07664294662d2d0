//! A posted new-test form read into `rundb::create::CreateArgs` in the form's own syntax
//! (integers, numbers, the stop rule, the bounds preset, the checkboxes), and each refusal of
//! an argument mapped to the form field it shows next to.
//!
//! Must not: check a run's arguments itself: the run is created by `RunDb::submit_run`, the
//! same code as `/api/create_run`, whose refusals name the argument.

use std::collections::BTreeMap;

use super::form::{BOUNDS, RunForm};
use crate::http::run_id::RunId;
use crate::rundb::create::{CreateArgs, SprtIn, SpsaIn};

/// Refusals by form field (the page shows each next to its field).
pub type FieldErrors = BTreeMap<String, String>;

/// The form field where a refusal of argument `arg` (`rundb::create::ArgError::field`) shows.
pub fn form_field(arg: &str) -> &'static str {
    match arg {
        "base_tag" => "base_tag",
        "new_tag" => "new_tag",
        "resolved_base" => "resolved_base",
        "resolved_new" => "resolved_new",
        "base_signature" => "base_signature",
        "new_signature" => "new_signature",
        "base_nets" => "base_nets",
        "new_nets" => "new_nets",
        "base_options" => "base-options",
        "new_options" => "new-options",
        "tests_repo" | "master_repo" => "tests_repo",
        "tc" => "tc",
        "new_tc" => "new_tc",
        "book" => "book",
        "book_depth" => "book-depth",
        "threads" => "threads",
        "priority" => "priority",
        "throughput" => "throughput",
        "max_active_tasks" => "max_active_tasks",
        "compiler" => "compiler",
        "arch_filter" => "arch-filter",
        "num_games" => "num-games",
        "stop_rule" => "stop_rule",
        "sprt" | "sprt.elo_model" => "bounds",
        "spsa.A" => "spsa_A",
        "spsa.alpha" => "spsa_alpha",
        "spsa.gamma" => "spsa_gamma",
        "spsa.raw_params" => "spsa_raw_params",
        _ => "",
    }
}

/// A refusal of argument `arg` in words for the form: the argument's name at the start of
/// `/api/create_run`'s message (`resolved_base must be …`) becomes what the form calls it
/// (`The base commit must be …`).
pub fn in_words(arg: &str, message: &str) -> String {
    let label = match arg {
        "base_tag" => "The base branch",
        "new_tag" => "The test branch",
        "resolved_base" => "The base commit",
        "resolved_new" => "The test commit",
        "msg_base" => "The base commit's subject",
        "msg_new" => "The test commit's subject",
        "base_signature" => "The base bench",
        "new_signature" => "The test bench",
        "base_nets" => "The base nets",
        "new_nets" => "The test nets",
        "base_options" => "The base options",
        "new_options" => "The test options",
        "tests_repo" => "The tests repository",
        "master_repo" => "The master repository",
        "book_depth" => "The book depth",
        "threads" => "Threads",
        "priority" => "Priority",
        "throughput" => "Throughput",
        "max_active_tasks" => "Max active tasks",
        "compiler" => "The compiler",
        "arch_filter" => "The arch filter",
        "num_games" => "The number of games",
        _ => return message.to_string(),
    };
    match message.strip_prefix(arg) {
        // A refusal in Fishtest's own words after the name: the words alone.
        Some(rest) if arg == "arch_filter" && rest.starts_with(": ") => rest[2..].to_string(),
        Some(rest) if rest.starts_with(' ') || rest.starts_with(':') => format!("{label}{rest}"),
        _ => message.to_string(),
    }
}

/// The form's values as `/api/create_run`'s arguments; what cannot be read (a number that is
/// not one, an unknown stop rule) is refused by field.
pub fn to_args(f: &RunForm) -> Result<CreateArgs, FieldErrors> {
    let mut errors = FieldErrors::new();
    let mut integer = |field: &str, value: &str, what: &str| -> i64 {
        value.trim().parse::<i64>().unwrap_or_else(|_| {
            errors.insert(field.into(), format!("{what} must be an integer"));
            0
        })
    };
    let threads = integer("threads", &f.threads, "Threads");
    let priority = integer("priority", &f.priority, "Priority");
    let throughput = integer("throughput", &f.throughput, "Throughput");
    let max_active_tasks = match f.max_active_tasks.trim() {
        "" => None,
        text => match text.parse::<u32>() {
            Ok(n) => Some(n),
            Err(_) => {
                errors.insert(
                    "max_active_tasks".into(),
                    "Max active tasks must be a positive integer (or empty)".into(),
                );
                None
            }
        },
    };
    let rule = f.stop_rule.trim();
    let num_games = if rule == "sprt" {
        None
    } else {
        match f.num_games.trim().parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                errors.insert(
                    "num-games".into(),
                    "Number of games must be a whole number".into(),
                );
                None
            }
        }
    };
    let mut number = |field: &str, value: &str, what: &str| -> f64 {
        value.trim().parse::<f64>().unwrap_or_else(|_| {
            errors.insert(field.into(), format!("{what} must be a number"));
            0.0
        })
    };
    let (sprt, spsa) = match rule {
        "sprt" => {
            let bounds = f.bounds.trim();
            let (elo0, elo1) = match BOUNDS.iter().find(|b| b.0 == bounds) {
                Some(b) => (b.2, b.3),
                None if bounds == "custom" => (
                    number("sprt_elo0", &f.sprt_elo0, "elo0"),
                    number("sprt_elo1", &f.sprt_elo1, "elo1"),
                ),
                None => {
                    errors.insert("bounds".into(), "Choose SPRT bounds".into());
                    (0.0, 0.0)
                }
            };
            let model = f.elo_model.trim();
            let sprt = SprtIn {
                elo0,
                elo1,
                elo_model: (!model.is_empty()).then(|| model.to_string()),
            };
            (Some(sprt), None)
        }
        "spsa" => {
            let spsa = SpsaIn {
                raw_params: f.spsa_raw_params.clone(),
                a_ratio: Some(number("spsa_A", &f.spsa_a, "A")),
                a: None,
                alpha: Some(number("spsa_alpha", &f.spsa_alpha, "alpha")),
                gamma: Some(number("spsa_gamma", &f.spsa_gamma, "gamma")),
            };
            (None, Some(spsa))
        }
        "games" => (None, None),
        _ => {
            errors.insert(
                "stop_rule".into(),
                "Choose a stop rule: SPRT, a number of games or SPSA".into(),
            );
            (None, None)
        }
    };
    let rescheduled = f.rescheduled_from.trim();
    if !rescheduled.is_empty() && rescheduled.parse::<RunId>().is_err() {
        errors.insert(
            "rescheduled_from".into(),
            "The run to reschedule is not a run id".into(),
        );
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let nets = |s: &str| -> Vec<String> {
        s.split(|c: char| c.is_whitespace() || c == ',')
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect()
    };
    let options = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let text = |s: &str| s.trim().to_string();
    let optional = |s: &str| Some(s.trim().to_string()).filter(|s| !s.is_empty());
    let mut info = text(&f.run_info);
    if info.is_empty() {
        info = text(&f.msg_new);
    }
    let new_signature = text(&f.test_signature);
    // An SPSA run plays the same engine on both sides: Fishtest copies the test signature.
    let base_signature = if rule == "spsa" {
        new_signature.clone()
    } else {
        text(&f.base_signature)
    };
    Ok(CreateArgs {
        base_tag: text(&f.base_branch),
        new_tag: text(&f.test_branch),
        base_nets: nets(&f.base_nets),
        new_nets: nets(&f.new_nets),
        resolved_base: text(&f.resolved_base),
        resolved_new: text(&f.resolved_new),
        msg_base: text(&f.msg_base),
        msg_new: text(&f.msg_new),
        base_signature,
        new_signature,
        base_options: options(&f.base_options),
        new_options: options(&f.new_options),
        num_games,
        tc: text(&f.tc),
        new_tc: f.odds.as_ref().map(|_| text(&f.new_tc)),
        book: text(&f.book),
        book_depth: Some(text(&f.book_depth)),
        // Page of range (negative, huge) becomes 0, which the run rules refuse.
        threads: u32::try_from(threads).unwrap_or(0),
        info,
        tests_repo: text(&f.tests_repo),
        master_repo: optional(&f.master_repo),
        auto_purge: f.auto_purge.is_some(),
        throughput: throughput as f64,
        max_active_tasks,
        priority: priority as f64,
        adjudication: f.adjudication.is_none(),
        arch_filter: f
            .use_arch_filter
            .as_ref()
            .and_then(|_| optional(&f.arch_filter)),
        compiler: f.use_compiler.as_ref().and_then(|_| optional(&f.compiler)),
        sprt,
        spsa,
        rescheduled_from: optional(&f.rescheduled_from),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::ui::submit::form::filled;

    #[test]
    fn a_form_reads_as_create_args() {
        let a = to_args(&filled()).unwrap();
        let sprt = a.sprt.unwrap();
        assert_eq!((sprt.elo0, sprt.elo1), (0.0, 2.0));
        assert_eq!(sprt.elo_model.as_deref(), Some("normalized"));
        assert_eq!(a.num_games, None);
        assert_eq!(a.new_tc, None);
        assert!(a.adjudication && !a.auto_purge);
        assert_eq!((a.arch_filter, a.compiler), (None, None));

        let mut f = filled();
        f.stop_rule = "games".into();
        f.num_games = "2000".into();
        f.odds = Some("on".into());
        f.new_tc = "20+0.2".into();
        f.adjudication = Some("on".into());
        f.new_options = "  Hash=16   Threads=1 ".into();
        let a = to_args(&f).unwrap();
        assert_eq!(a.num_games, Some(2000));
        assert_eq!(a.new_tc.as_deref(), Some("20+0.2"));
        assert!(!a.adjudication);
        assert_eq!(a.new_options, "Hash=16 Threads=1");
    }

    #[test]
    fn unreadable_values_are_refused_by_field() {
        let mut f = filled();
        f.threads = "two".into();
        f.priority = "1.5".into();
        f.bounds = "custom".into();
        f.sprt_elo0 = "x".into();
        let e = to_args(&f).unwrap_err();
        assert_eq!(e["threads"], "Threads must be an integer");
        assert_eq!(e["priority"], "Priority must be an integer");
        assert_eq!(e["sprt_elo0"], "elo0 must be a number");
        f.stop_rule = "forever".into();
        assert!(to_args(&f).unwrap_err().contains_key("stop_rule"));
    }

    #[test]
    fn every_argument_has_a_field() {
        for arg in [
            "base_tag",
            "new_tag",
            "resolved_base",
            "tests_repo",
            "master_repo",
            "sprt",
            "spsa.raw_params",
            "num_games",
        ] {
            assert!(!form_field(arg).is_empty(), "{arg}");
        }
        assert_eq!(form_field("unknown"), "");
    }
}
