//! Run and task documents as Fishtest's read API shows them: dates as Python's `str()` of an
//! aware datetime, task lists absent or emptied ([`RunView`]), shoal's own `trajectory` never
//! shown, a task's worker key shortened and address hidden. Built in the pool, where the
//! run was read (`public.rs`).

use base64::Engine as _;
use serde_json::{Value, json};

use crate::http::reply::ApiError;
use crate::rundb::model::{Date, Run};

/// Python's `str(datetime)` for an aware UTC datetime: `YYYY-MM-DD HH:MM:SS.ffffff+00:00`,
/// or `YYYY-MM-DD HH:MM:SS+00:00` when the microseconds are 0 (Python then omits the
/// fraction; with MongoDB's millisecond dates that is one date in a thousand).
pub fn python_date(d: &Date) -> String {
    if d.0.timestamp_subsec_micros() == 0 {
        d.0.format("%Y-%m-%d %H:%M:%S+00:00").to_string()
    } else {
        d.0.format("%Y-%m-%d %H:%M:%S%.6f+00:00").to_string()
    }
}

/// Replaces every `{"$date": ...}` object by Python's string form.
fn render_dates(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if m.len() == 1
                && m.contains_key("$date")
                && let Ok(d) = serde_json::from_value::<Date>(Value::Object(m.clone()))
            {
                *v = Value::String(python_date(&d));
                return;
            }
            for x in m.values_mut() {
                render_dates(x);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(render_dates),
        _ => {}
    }
}

/// The two ways Fishtest shows a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunView {
    /// active_runs and finished_runs: Fishtest reads the runs with a projection, so `tasks`,
    /// `bad_tasks` and `args.spsa.param_history` are absent.
    Listed,
    /// get_run and get_elo (Fishtest's `strip_run`): `tasks` and `bad_tasks` are `[]`, and
    /// `args.spsa.param_history` is `[]` when the run has one.
    Stripped,
}

/// A run as the API shows it (`view`): `_id` a string, `start_time` and `last_updated` (and
/// any other date) as Python prints them, shoal's `trajectory` left out.
pub fn api_run(mut run: Run, view: RunView) -> Result<Value, ApiError> {
    run.tasks = Vec::new();
    run.bad_tasks = Vec::new();
    // shoal's own field (the charts' samples): not Fishtest's, never shown.
    run.trajectory = Default::default();
    let had_history = run
        .args
        .spsa
        .as_mut()
        .is_some_and(|spsa| spsa.param_history.take().is_some());
    let mut v = serde_json::to_value(&run)
        .map_err(|e| ApiError::Internal(format!("rendering run {}: {e}", run.id)))?;
    if let Value::Object(m) = &mut v {
        m.remove("trajectory");
        match view {
            RunView::Listed => {
                m.remove("tasks");
                m.remove("bad_tasks");
            }
            RunView::Stripped => {
                if had_history
                    && let Some(Value::Object(spsa)) =
                        m.get_mut("args").and_then(|a| a.get_mut("spsa"))
                {
                    spsa.insert("param_history".into(), json!([]));
                }
            }
        }
    }
    render_dates(&mut v);
    Ok(v)
}

/// A task as get_task shows it: the worker's `unique_key` cut to 8 characters and `...`, its
/// `remote_addr` hidden as `?.?.?.?`, dates as Python prints them, an infinite `residual` as
/// `"inf"` and `spsa_params.packed_flips` as a list of byte values.
pub fn api_task(mut task: Value) -> Value {
    if let Some(wi) = task.get_mut("worker_info").and_then(Value::as_object_mut) {
        if let Some(Value::String(k)) = wi.get_mut("unique_key") {
            *k = format!("{}...", k.chars().take(8).collect::<String>());
        }
        if let Some(addr) = wi.get_mut("remote_addr") {
            *addr = json!("?.?.?.?");
        }
    }
    // A residual written by Fishtest may be an infinity, which a shoal document holds as
    // Extended JSON (shoal's own purge writes "inf" already).
    if let Some(r) = task.get_mut("residual")
        && r.get("$numberDouble").and_then(Value::as_str) == Some("Infinity")
    {
        *r = json!("inf");
    }
    // packed_flips is an array of bytes in shoal's typed tasks; a copy kept as Fishtest's
    // binary (in `bad_tasks`) is turned into the same list.
    if let Some(flips) = task
        .get_mut("spsa_params")
        .and_then(|p| p.get_mut("packed_flips"))
        && let Some(b64) = flips
            .get("$binary")
            .and_then(|b| b.get("base64"))
            .and_then(Value::as_str)
        && let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(b64)
    {
        *flips = json!(bytes);
    }
    render_dates(&mut task);
    task
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_dates() {
        let d = Date(
            chrono::DateTime::parse_from_rfc3339("2026-11-22T03:57:26.123Z")
                .expect("date")
                .with_timezone(&chrono::Utc),
        );
        assert_eq!(python_date(&d), "2026-11-22 03:57:26.123000+00:00");
        // Python omits a zero fraction.
        let whole = Date(
            chrono::DateTime::parse_from_rfc3339("2026-11-22T03:57:26.000Z")
                .expect("date")
                .with_timezone(&chrono::Utc),
        );
        assert_eq!(python_date(&whole), "2026-11-22 03:57:26+00:00");
    }

    #[test]
    fn a_task_as_get_task_shows_it() {
        let task = json!({
            "last_updated": {"$date": "2026-08-24T16:00:00.500Z"},
            "residual": {"$numberDouble": "Infinity"},
            "worker_info": {"unique_key": "0123456789-abcdef", "remote_addr": "192.0.2.1"},
            "spsa_params": {"iter": 3, "packed_flips": {"$binary": {"base64": "gAE=", "subType": "00"}}},
        });
        let t = api_task(task);
        assert_eq!(t["last_updated"], "2026-08-24 16:00:00.500000+00:00");
        assert_eq!(t["residual"], "inf");
        assert_eq!(t["worker_info"]["unique_key"], "01234567...");
        assert_eq!(t["worker_info"]["remote_addr"], "?.?.?.?");
        assert_eq!(t["spsa_params"]["packed_flips"], json!([128, 1]));
        // Nothing is added that was not there.
        let t = api_task(json!({"worker_info": {}}));
        assert_eq!(t, json!({"worker_info": {}}));
    }
}
