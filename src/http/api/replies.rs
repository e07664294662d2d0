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

/// request_task's reply.
pub fn assignment(a: Assignment) -> Map<String, Value> {
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
        Assignment::Refused(r) => object(json!({"task_waiting": false, "error": refusal(&r)})),
    }
}

/// The message of a request_task refusal.
pub fn refusal(r: &Refusal) -> String {
    match r {
        Refusal::BlockedWorker { name } => format!(
            "Request_task: This worker has been blocked! See /actions?text=\"{name}\" \
             and /workers/{name} for details."
        ),
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
    fn messages_are_fishtests() {
        assert_eq!(
            refusal(&Refusal::MachineLimit {
                limit: 16,
                addr: "127.0.0.1".into()
            }),
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
        assert_eq!(assignment(Assignment::NoTask)["task_waiting"], false);
    }
}
