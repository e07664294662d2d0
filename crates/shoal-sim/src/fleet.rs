//! What every simulated worker of a fleet shares, and the one HTTP call they all make.
//!
//! Owns: [`Fleet`] (the client, the recorder, the time scale, the deadline, the game model)
//! and `Fleet::call`: a recorded `POST` whose reply is judged as the official worker judges
//! it (only the body counts: a JSON object with a numeric `duration`, then `error`), as a
//! `Reply`; transport failures and unusable replies are recorded by kind, and every reply is
//! shown to the limits ledger (`limits::Ledger`).
//! Must not: decide what a worker does next (that is `worker` and `heartbeat`), retry, or
//! start a call after the run's deadline.

use std::time::Instant;

use hyper::Method;
use serde_json::{Map, Value};

use super::client::Client;
use super::limits::{Ledger, Seen};
use super::measure::{Endpoint, ExitReason, Recorder};
use super::schedule::TimeScale;
use super::stats::GameModel;

/// What every worker of a fleet shares.
pub struct Fleet {
    pub client: Client,
    pub rec: Recorder,
    pub scale: TimeScale,
    pub deadline: Instant,
    pub password: String,
    pub model: GameModel,
    /// Probability that a task ends with failed_task.
    pub failed_rate: f64,
    pub seed: u64,
    /// The tasks the workers hold and what they saw of the limits (every call's reply).
    pub ledger: Ledger,
}

impl Fleet {
    /// One HTTP call, recorded. Err(Deadline) if the run is over before it starts.
    pub(super) async fn call(&self, ep: Endpoint, body: &Value) -> Result<Reply, ExitReason> {
        if Instant::now() >= self.deadline {
            return Err(ExitReason::Deadline);
        }
        let bytes = serde_json::to_vec(body).unwrap_or_default();
        let rec = &self.rec;
        let started = Instant::now();
        rec.call_started(started);
        let reply = match self
            .client
            .call(Method::POST, ep.path(), Some(bytes.into()))
            .await
        {
            Ok(r) => r,
            Err(e) => {
                rec.error(ep, e.kind(), Instant::now());
                rec.message(ep, &e.to_string());
                self.ledger.observe(ep, body, Seen::Transport);
                return Ok(Reply::Failed { no_duration: false });
            }
        };
        rec.reply(ep, started, started.elapsed(), reply.connect);
        let now = Instant::now();
        let parsed = serde_json::from_slice::<Value>(&reply.body);
        self.ledger.observe(
            ep,
            body,
            Seen::Reply {
                status: reply.status,
                object: parsed.as_ref().ok().and_then(Value::as_object),
            },
        );
        match parsed {
            Ok(Value::Object(m)) => {
                if !m.get("duration").is_some_and(Value::is_number) {
                    rec.error(ep, "no_duration", now);
                    return Ok(Reply::Failed { no_duration: true });
                }
                if let Some(e) = m.get("error") {
                    let text = e.as_str().map_or_else(|| e.to_string(), str::to_string);
                    rec.error(ep, &format!("error_{}", reply.status), now);
                    rec.message(ep, &text);
                    return Ok(Reply::Error(text));
                }
                Ok(Reply::Ok(m))
            }
            _ => {
                let kind = if reply.status >= 500 {
                    format!("http_{}", reply.status)
                } else {
                    "not_json".to_string()
                };
                rec.error(ep, &kind, now);
                Ok(Reply::Failed { no_duration: false })
            }
        }
    }
}

/// A reply, judged as the official worker judges it.
pub(super) enum Reply {
    /// A JSON object with a numeric `duration` and no `error`.
    Ok(Map<String, Value>),
    /// A JSON object with `duration` and an `error` (whatever the HTTP status).
    Error(String),
    /// No usable reply: a transport failure, a body that is not a JSON object, or an object
    /// without `duration`.
    Failed { no_duration: bool },
}
