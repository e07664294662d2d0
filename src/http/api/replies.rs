//! Fishtest's reply shapes and message strings for the worker protocol, built in one place
//! from the domain's typed outcomes (`rundb::outcome`).
//!
//! Owns: the JSON of request_task's answers (a task with its run's arguments and `book_sri`,
//! `task_waiting`, refusals) and of the task-bound calls (`task_alive`, `info`, `error`), and
//! every message, byte for byte as the official worker and Fishtest's users know them.
//! Must not: decide anything (the domain did), or do I/O.

use serde_json::{Map, Value, json};

use crate::rundb::outcome::{Assignment, Refusal, TaskReply, UpdateRejection};

/// What request_task (and the debug gate route) answers when the gate refuses a caller.
pub const TOO_BUSY_INFO: &str = "Request_task: the server is currently too busy...";

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// request_task's reply; `site` (`scheme://host`, Fishtest's `request.host_url`) is where the
/// links of a blocked worker's message point.
/// `site` gives the server's address for a blocked worker's message (called only then).
pub fn assignment(a: Assignment, site: impl FnOnce() -> String) -> Map<String, Value> {
    match a {
        Assignment::Task(t) => {
            let mut args = serde_json::to_value(&t.args).unwrap_or(Value::Null);
            if let (Value::Object(a), Some(sri)) = (&mut args, t.book_sri) {
                a.insert("book_sri".into(), json!(sri));
            }
            object(json!({
                "run": {
                    "_id": t.run_id,
                    "args": args,
                    "my_task": {
                        "num_games": t.num_games,
                        "start": t.start,
                        "stats": t.stats,
                    },
                },
                "task_id": t.task_id,
            }))
        }
        Assignment::NoTask => object(json!({"task_waiting": false})),
        Assignment::RunNoLongerNeedsGames => object(json!({
            "task_waiting": false,
            "info": "Request_task: the chosen run no longer needs games",
        })),
        Assignment::Refused(r) => object(json!({
            "task_waiting": false,
            "error": refusal(&r, &site()),
        })),
    }
}

/// The width Fishtest wraps a blocked worker's message to (`textwrap.fill`'s default).
const BLOCKED_WRAP: usize = 70;

/// The message of a request_task refusal (`site`: see [`assignment`]).
pub fn refusal(r: &Refusal, site: &str) -> String {
    match r {
        Refusal::BlockedWorker { name, message } => blocked_worker(name, message, site),
        Refusal::DuplicateName { name, seconds_ago } => format!(
            "Request_task: There is already a worker running with name {name} \
             which sent an update {seconds_ago} seconds ago"
        ),
        Refusal::MachineLimit { limit, addr } => format!(
            "Request_task: This user has reached the maximum number of connections \
             ({limit}) from the IP address {addr}."
        ),
        Refusal::Limit { name, key, max, .. } => format!(
            "Request_task: the limit {name} is full for {key} ({max} active); \
             try again later."
        ),
    }
}

/// Fishtest's message to a blocked worker, which the worker prints as it is: a banner of
/// stars around the approver's message (`Message: …`, wrapped at 70 characters as Python's
/// `textwrap.fill` wraps it: whitespace read as spaces, long words broken), where more is
/// said about the worker, and where to unblock it. Control characters (ESC, BEL, NUL…) are
/// left out, so the message cannot drive the worker's terminal.
fn blocked_worker(name: &str, message: &str, site: &str) -> String {
    let stars = "*".repeat(BLOCKED_WRAP);
    let text: String = format!("Message: {message}")
        .chars()
        .filter_map(|c| {
            if c.is_whitespace() {
                Some(' ')
            } else if c.is_control() {
                None
            } else {
                Some(c)
            }
        })
        .collect();
    let wrapped = fill(&text, BLOCKED_WRAP);
    format!(
        "\n\n{stars}\nRequest_task: This worker has been blocked!\n{wrapped}\n\
         You may possibly find more information at\n{site}/actions?text=%22{name}%22.\n\
         After fixing the issues you can unblock the worker at\n{site}/workers/{name}.\n\
         {stars}\n"
    )
}

/// Python's `textwrap.fill(text, width)` on a text whose whitespace is spaces, widths in
/// characters: words (split after a hyphen inside a word too) and runs of spaces fill each
/// line greedily; a word longer than a whole line fills what is left of the current one and
/// goes on in the next; spaces at the start and end of each line are dropped.
fn fill(text: &str, width: usize) -> String {
    let width = width.max(1);
    // The chunks, each a run of spaces or a piece of a word, as chars.
    let mut chunks: Vec<Vec<char>> = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let space = chars[i] == ' ';
        let mut j = i + 1;
        while j < chars.len() && (chars[j] == ' ') == space {
            // A word is split after a hyphen between letters or digits.
            if !space
                && chars[j - 1] == '-'
                && j >= 2
                && chars[j - 2].is_alphanumeric()
                && chars[j].is_alphanumeric()
            {
                break;
            }
            j += 1;
        }
        chunks.push(chars[i..j].to_vec());
        i = j;
    }
    chunks.reverse();
    let is_space = |c: &[char]| c.iter().all(|&x| x == ' ');
    let mut lines: Vec<String> = Vec::new();
    while !chunks.is_empty() {
        let mut line: Vec<Vec<char>> = Vec::new();
        let mut len = 0usize;
        if !lines.is_empty() && chunks.last().is_some_and(|c| is_space(c)) {
            chunks.pop();
        }
        while let Some(c) = chunks.last() {
            if len + c.len() <= width {
                len += c.len();
                line.extend(chunks.pop());
            } else {
                break;
            }
        }
        if let Some(c) = chunks.last_mut()
            && c.len() > width
        {
            // Python's `space_left`: nothing when the line is full (the word then starts
            // the next line).
            let take = width.saturating_sub(len);
            if take > 0 {
                let rest = c.split_off(take);
                line.push(std::mem::replace(c, rest));
            }
        }
        if line.last().is_some_and(|c| is_space(c)) {
            line.pop();
        }
        if !line.is_empty() {
            lines.push(line.concat().into_iter().collect());
        }
    }
    lines.join("\n")
}

/// The message of an update Fishtest's rules refuse.
pub fn rejection(run_id: &str, task_id: usize, r: UpdateRejection) -> String {
    let task = format!("Update_task: task {run_id}/{task_id}");
    match r {
        UpdateRejection::GamesWentDown { from, to } => {
            format!("{task}: the number of games went down from {from} to {to}")
        }
        UpdateRejection::SpsaMustAddGames { from, to } => {
            format!("{task}: SPSA updates must add games ({from} -> {to})")
        }
        UpdateRejection::OddIncrement(n) => format!("{task}: odd number of new games ({n})"),
        UpdateRejection::NotBatchMultiple { games, batch } => {
            format!("{task}: {games} games is not a multiple of the SPRT batch ({batch})")
        }
        UpdateRejection::CountWentDown => format!("{task}: a result count went down"),
    }
}

/// A task-bound call's reply. `call` is the endpoint's name as Fishtest spells it in its
/// messages (`Update_task`, `Request_spsa`, `Failed_task`, …).
pub fn task_reply(call: &str, run_id: &str, task_id: usize, r: TaskReply) -> Map<String, Value> {
    match r {
        TaskReply::Alive(alive) => object(json!({"task_alive": alive})),
        TaskReply::NotActive => object(json!({
            "task_alive": false,
            "info": format!("{call}: task {run_id}/{task_id} is not active"),
        })),
        TaskReply::Rejected(why) => object(json!({
            "task_alive": false,
            "error": rejection(run_id, task_id, why),
        })),
        TaskReply::Spsa(s) => object(serde_json::to_value(s).unwrap_or(Value::Null)),
        TaskReply::Done => Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocked_worker_is_told_the_approvers_message() {
        let r = Refusal::BlockedWorker {
            name: "bob-4cores-1234abcd".into(),
            message: "Your worker loses\nmany games on time; please check its load before \
                      starting it again (it runs other work)."
                .into(),
        };
        let stars = "*".repeat(70);
        assert_eq!(
            refusal(&r, "https://tests.example.org"),
            format!(
                "\n\n{stars}\nRequest_task: This worker has been blocked!\n\
                 Message: Your worker loses many games on time; please check its load\n\
                 before starting it again (it runs other work).\n\
                 You may possibly find more information at\n\
                 https://tests.example.org/actions?text=%22bob-4cores-1234abcd%22.\n\
                 After fixing the issues you can unblock the worker at\n\
                 https://tests.example.org/workers/bob-4cores-1234abcd.\n{stars}\n"
            )
        );
        // No message: the label alone, as Fishtest's.
        let r = Refusal::BlockedWorker {
            name: "w".into(),
            message: String::new(),
        };
        assert!(refusal(&r, "http://h").contains("blocked!\nMessage:\nYou may"));
    }

    #[test]
    fn messages_are_fishtests() {
        assert_eq!(
            refusal(
                &Refusal::MachineLimit {
                    limit: 16,
                    addr: "127.0.0.1".into()
                },
                "http://h"
            ),
            "Request_task: This user has reached the maximum number of connections (16) from \
             the IP address 127.0.0.1."
        );
        let r = task_reply("Update_task", "abc", 3, TaskReply::NotActive);
        assert_eq!(r["info"], "Update_task: task abc/3 is not active");
        assert_eq!(r["task_alive"], false);
        let r = task_reply(
            "Update_task",
            "abc",
            3,
            TaskReply::Rejected(UpdateRejection::OddIncrement(3)),
        );
        assert_eq!(
            r["error"],
            "Update_task: task abc/3: odd number of new games (3)"
        );
        assert!(task_reply("Failed_task", "abc", 3, TaskReply::Done).is_empty());
        assert_eq!(
            assignment(Assignment::NoTask, String::new)["task_waiting"],
            false
        );
    }
}

#[cfg(test)]
mod wrap_tests {
    use super::*;

    /// The message part of the banner.
    fn wrapped(message: &str) -> String {
        let all = blocked_worker("w-1cores-ab12", message, "https://x");
        let start = all.find("Message: ").expect("message");
        let end = all.find("\nYou may possibly").expect("end");
        all[start..end].to_string()
    }

    #[test]
    fn long_words_are_broken_where_pythons_textwrap_breaks_them() {
        // Python: textwrap.fill("Message: see " + "x" * 100 + " end"), and with 80 "é".
        let x = "x".repeat(100);
        assert_eq!(
            wrapped(&format!("see {x} end")),
            format!("Message: see {}\n{} end", "x".repeat(57), "x".repeat(43))
        );
        // A full line: the long word starts the next one.
        let full = "y".repeat(61);
        assert_eq!(
            wrapped(&format!("{full} {x}")),
            format!("Message: {full}\n{}\n{}", "x".repeat(70), "x".repeat(30))
        );
        // Hyphenated words may break after a hyphen.
        assert_eq!(
            wrapped(&format!("{} well-known", "z".repeat(55))),
            format!("Message: {} well-\nknown", "z".repeat(55))
        );
        let e = "é".repeat(80);
        assert_eq!(
            wrapped(&format!("{e} fin")),
            format!("Message: {}\n{} fin", "é".repeat(61), "é".repeat(19))
        );
    }

    #[test]
    fn control_characters_do_not_reach_the_workers_terminal() {
        let w = wrapped("a\u{1b}[31mRED\u{1b}[0m\u{7}bell\u{0}nul\tend");
        assert!(!w.chars().any(|c| c.is_control() && c != '\n'), "{w:?}");
        assert_eq!(w, "Message: a[31mRED[0mbellnul end");
    }
}
