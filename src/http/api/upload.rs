//! POST /api/upload_pgn: a large body, read only after its sender is known.
//!
//! Owns: reading the upload's JSON body incrementally ([`Members`], a splitter of the top-level
//! object's members), checking the credentials and the task as soon as the members that carry
//! them have arrived (the official worker sends `password`, `run_id`, `task_id`, `message`
//! and `worker_info` before `pgn`), and only then reading the rest of the body, in one of
//! `pgn_upload_concurrency` turns. At most `api_body_limit_bytes` of a body are read before the
//! check; a client that puts `pgn` first can upload no more than that. The gzip is inflated in
//! the pool with a cap (`pgn_inflated_limit_bytes`) and is never held inflated.
//! Must not: parse a member's value on the loop beyond `serde_json` of a small member, inflate
//! on the loop, or hold an upload turn while waiting for credentials.

use std::io::Read as _;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse as _, Response};
use base64::Engine as _;
use futures::StreamExt as _;
use serde_json::{Map, Value};

use super::call::{Call, WorkerRequest, validate_upload};
use crate::http::auth::{Login, credentials};
use crate::http::middleware::BodyLimit;
use crate::http::reply::{ApiError, ApiReply, ApiResult};
use crate::http::state::AppState;

/// Where the splitter is in the top-level object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Start,
    BeforeKey {
        first: bool,
    },
    InKey {
        escaped: bool,
    },
    AfterKey,
    BeforeValue,
    /// A member's value other than `pgn`: depth of brackets, inside a string, after a `\`.
    InValue {
        depth: u32,
        in_str: bool,
        escaped: bool,
    },
    /// The `pgn` string's content.
    InPgn {
        escaped: bool,
    },
    AfterValue,
    End,
}

/// Splits a JSON object arriving in pieces into its members: every member but `pgn` is parsed
/// with `serde_json` when complete; `pgn`'s string content (base64) is collected as it comes.
pub struct Members {
    state: Phase,
    key: Vec<u8>,
    value: Vec<u8>,
    /// Completed members other than `pgn`.
    pub members: Map<String, Value>,
    /// The base64 text of `pgn` so far.
    pub pgn: Vec<u8>,
    /// Whether a `pgn` member was seen (complete or not).
    pub has_pgn: bool,
    /// Bytes of members other than `pgn` so far.
    pub other_bytes: usize,
}

impl Default for Members {
    fn default() -> Self {
        Members {
            state: Phase::Start,
            key: Vec::new(),
            value: Vec::new(),
            members: Map::new(),
            pgn: Vec::new(),
            has_pgn: false,
            other_bytes: 0,
        }
    }
}

fn ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl Members {
    /// Whether the whole object has been read.
    pub fn done(&self) -> bool {
        self.state == Phase::End
    }

    /// Feeds the next piece of the body.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), String> {
        let mut i = 0;
        while i < chunk.len() {
            let b = chunk[i];
            match self.state {
                Phase::Start if ws(b) => {}
                Phase::Start if b == b'{' => self.state = Phase::BeforeKey { first: true },
                Phase::Start => return Err("the body must be a JSON object".into()),
                Phase::BeforeKey { .. } if ws(b) => {}
                Phase::BeforeKey { first: true } if b == b'}' => self.state = Phase::End,
                Phase::BeforeKey { .. } if b == b'"' => {
                    self.key.clear();
                    self.key.push(b);
                    self.state = Phase::InKey { escaped: false };
                }
                Phase::BeforeKey { .. } => return Err("expected a member name".into()),
                Phase::InKey { escaped } => {
                    self.key.push(b);
                    self.other_bytes += 1;
                    if self.key.len() > 256 {
                        return Err("member name too long".into());
                    }
                    if escaped {
                        self.state = Phase::InKey { escaped: false };
                    } else if b == b'\\' {
                        self.state = Phase::InKey { escaped: true };
                    } else if b == b'"' {
                        self.state = Phase::AfterKey;
                    }
                }
                Phase::AfterKey if ws(b) => {}
                Phase::AfterKey if b == b':' => self.state = Phase::BeforeValue,
                Phase::AfterKey => return Err("expected ':' after a member name".into()),
                Phase::BeforeValue if ws(b) => {}
                Phase::BeforeValue => {
                    let key = self.key_name()?;
                    if self.members.contains_key(&key) || (key == "pgn" && self.has_pgn) {
                        return Err(format!("duplicate member {key:?}"));
                    }
                    if key == "pgn" {
                        if b != b'"' {
                            return Err("pgn must be a string".into());
                        }
                        self.has_pgn = true;
                        self.state = Phase::InPgn { escaped: false };
                    } else {
                        self.value.clear();
                        self.state = Phase::InValue {
                            depth: 0,
                            in_str: false,
                            escaped: false,
                        };
                        // Re-read this byte as the value's first.
                        continue;
                    }
                }
                Phase::InPgn { escaped: true } => {
                    // Only `\/` can occur in base64 text written by a JSON encoder.
                    if b != b'/' {
                        return Err("pgn must be base64 text".into());
                    }
                    self.pgn.push(b'/');
                    self.state = Phase::InPgn { escaped: false };
                }
                Phase::InPgn { escaped: false } => {
                    // Copy the run of plain bytes at once.
                    let rest = &chunk[i..];
                    let stop = rest
                        .iter()
                        .position(|&c| c == b'"' || c == b'\\')
                        .unwrap_or(rest.len());
                    self.pgn.extend_from_slice(&rest[..stop]);
                    i += stop;
                    match chunk.get(i) {
                        Some(b'"') => self.state = Phase::AfterValue,
                        Some(_) => self.state = Phase::InPgn { escaped: true },
                        None => return Ok(()),
                    }
                }
                Phase::InValue {
                    depth,
                    in_str,
                    escaped,
                } => {
                    if !in_str && depth == 0 && (b == b',' || b == b'}') {
                        self.finish_value()?;
                        self.state = if b == b',' {
                            Phase::BeforeKey { first: false }
                        } else {
                            Phase::End
                        };
                    } else {
                        self.value.push(b);
                        self.other_bytes += 1;
                        self.state = match (in_str, escaped, b) {
                            (true, true, _) => Phase::InValue {
                                depth,
                                in_str: true,
                                escaped: false,
                            },
                            (true, false, b'\\') => Phase::InValue {
                                depth,
                                in_str: true,
                                escaped: true,
                            },
                            (true, false, b'"') => Phase::InValue {
                                depth,
                                in_str: false,
                                escaped: false,
                            },
                            (true, false, _) => Phase::InValue {
                                depth,
                                in_str: true,
                                escaped: false,
                            },
                            (false, _, b'"') => Phase::InValue {
                                depth,
                                in_str: true,
                                escaped: false,
                            },
                            (false, _, b'{' | b'[') => Phase::InValue {
                                depth: depth.checked_add(1).ok_or("too deep")?,
                                in_str: false,
                                escaped: false,
                            },
                            (false, _, b'}' | b']') => Phase::InValue {
                                depth: depth.checked_sub(1).ok_or("unbalanced brackets")?,
                                in_str: false,
                                escaped: false,
                            },
                            (false, _, _) => Phase::InValue {
                                depth,
                                in_str: false,
                                escaped: false,
                            },
                        };
                    }
                }
                Phase::AfterValue if ws(b) => {}
                Phase::AfterValue if b == b',' => self.state = Phase::BeforeKey { first: false },
                Phase::AfterValue if b == b'}' => self.state = Phase::End,
                Phase::AfterValue => return Err("expected ',' or '}' after a member".into()),
                Phase::End if ws(b) => {}
                Phase::End => return Err("trailing characters after the JSON object".into()),
            }
            i += 1;
        }
        Ok(())
    }

    fn key_name(&self) -> Result<String, String> {
        serde_json::from_slice::<String>(&self.key).map_err(|e| format!("bad member name: {e}"))
    }

    fn finish_value(&mut self) -> Result<(), String> {
        let key = self.key_name()?;
        let value: Value =
            serde_json::from_slice(&self.value).map_err(|e| format!("member {key:?}: {e}"))?;
        self.members.insert(key, value);
        self.value.clear();
        Ok(())
    }

    /// Whether the members that identify the sender and the task have all arrived.
    fn identified(&self) -> bool {
        ["password", "worker_info", "run_id", "task_id"]
            .iter()
            .all(|k| self.members.contains_key(*k))
    }
}

/// The upload's request, once its members are known (pgn excluded).
fn request_of(members: &Map<String, Value>) -> ApiResult<WorkerRequest> {
    serde_json::from_value(Value::Object(members.clone()))
        .map_err(|e| ApiError::BadRequest(format!("invalid request body: {e}")))
}

/// An error reply with `Connection: close`, for a body that was not read to its end.
fn closing(e: ApiError) -> Response {
    let mut r = e.into_response();
    r.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    r
}

/// POST /api/upload_pgn: base64 of a gzip stream, authenticated before its body is read.
#[utoipa::path(
    post,
    path = "/api/upload_pgn",
    tag = "files",
    request_body(content = WorkerRequest, description = "A worker call whose `pgn` is the base64 \
        of the task's gzipped PGN, sent after `password`, `run_id`, `task_id` and `worker_info`"),
    responses(
        (status = 200, description = "The PGN is stored", body = super::schema::EmptyReply),
        (status = 400, description = "A malformed call or PGN", body = super::schema::ErrorReply),
        (status = 401, description = "Wrong credentials", body = super::schema::ErrorReply),
        (status = 413, description = "The body or the inflated PGN is too large", body = super::schema::ErrorReply),
    )
)]
pub async fn upload_pgn(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    req: Request,
) -> Response {
    match upload(state, peer, headers, req).await {
        Ok(reply) => reply.into_response(),
        Err(response) => response,
    }
}

async fn upload(
    state: Arc<AppState>,
    peer: SocketAddr,
    headers: HeaderMap,
    req: Request,
) -> Result<ApiReply, Response> {
    let limit = req.extensions().get::<BodyLimit>().copied();
    let (deadline, timeout_s) = match limit {
        Some(l) => (l.deadline, l.timeout_s),
        None => (
            tokio::time::Instant::now() + state.config.body_read_timeout(),
            state.config.body_read_timeout().as_secs_f64(),
        ),
    };
    let unchecked_budget = state.config.api_body_limit_bytes;
    let pgn_limit = state.config.pgn_body_limit_bytes;
    let mut body = req.into_body().into_data_stream();
    let mut m = Members::default();
    let mut checked: Option<Call> = None;
    let mut turn = None;
    while !m.done() {
        let chunk = match tokio::time::timeout_at(deadline, body.next()).await {
            Err(_) => {
                metrics::counter!("shoal_body_timeouts_total").increment(1);
                return Err(closing(ApiError::BodyTimeout(timeout_s)));
            }
            Ok(None) => {
                return Err(closing(ApiError::BadRequest(
                    "invalid request body: the JSON object is incomplete".into(),
                )));
            }
            Ok(Some(Err(e))) => {
                let too_large = std::error::Error::source(&e)
                    .is_some_and(|s| s.is::<http_body_util::LengthLimitError>())
                    || e.to_string().contains("length limit");
                return Err(closing(if too_large {
                    ApiError::TooLarge { limit: pgn_limit }
                } else {
                    ApiError::BadRequest(format!("cannot read request body: {e}"))
                }));
            }
            Ok(Some(Ok(chunk))) => chunk,
        };
        m.feed(&chunk)
            .map_err(|e| closing(ApiError::BadRequest(format!("invalid request body: {e}"))))?;
        if m.other_bytes > unchecked_budget {
            return Err(closing(ApiError::TooLarge {
                limit: unchecked_budget,
            }));
        }
        if checked.is_none() && m.identified() {
            // Who is sending, and may they upload to this task? Asked before the rest of
            // the body is read; the body waits in the socket meanwhile.
            let call = check(&state, peer, &headers, &m.members)
                .await
                .map_err(closing)?;
            checked = Some(call);
            // A turn to read a large body (bounds the memory of concurrent uploads).
            let permit =
                tokio::time::timeout_at(deadline, state.pgn_uploads.clone().acquire_owned())
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .ok_or_else(|| {
                        closing(ApiError::Busy(
                            "too many PGN uploads at once; try again later".into(),
                        ))
                    })?;
            turn = Some(permit);
        }
        let allowed = if checked.is_some() {
            pgn_limit
        } else {
            unchecked_budget
        };
        if m.pgn.len() > allowed {
            return Err(closing(ApiError::TooLarge { limit: allowed }));
        }
    }
    let call = match checked {
        Some(call) => call,
        // Members after the pgn (only possible for a small body): check now.
        None => check(&state, peer, &headers, &m.members)
            .await
            .map_err(closing)?,
    };
    if !m.has_pgn {
        return Err(ApiError::BadRequest("missing pgn".into()).into_response());
    }
    let Some((run_id, task_id)) = call.task.clone() else {
        return Err(ApiError::BadRequest("missing run_id and task_id".into()).into_response());
    };
    let b64 = std::mem::take(&mut m.pgn);
    let inflated_cap = state.config.pgn_inflated_limit_bytes;
    let db = state.rundb.clone();
    let wi = call.wi;
    let stored = state
        .offload
        .run(move || -> Result<(), ApiError> {
            // The turn goes with the work: it bounds the uploads being decoded, inflated and
            // stored, not the handlers waiting for them (a sender that goes away once its body
            // is read drops its handler, while this work runs on).
            let _turn = turn;
            let gz = base64::engine::general_purpose::STANDARD
                .decode(&b64)
                .map_err(|e| ApiError::BadRequest(format!("pgn is not valid base64: {e}")))?;
            drop(b64);
            check_gzip(&gz, inflated_cap).map_err(ApiError::BadRequest)?;
            db.upload_pgn(&run_id, task_id, &gz, &wi)
                .map(|_| ())
                .map_err(ApiError::from)
        })
        .await
        .map_err(|e| ApiError::from(e).into_response())?;
    stored.map_err(|e| e.into_response())?;
    Ok(ApiReply::ok(Map::new()))
}

/// Validates the identifying members, checks the credentials (throttled, cached) and that
/// the task is this worker's.
async fn check(
    state: &Arc<AppState>,
    peer: SocketAddr,
    headers: &HeaderMap,
    members: &Map<String, Value>,
) -> ApiResult<Call> {
    let req = request_of(members)?;
    let call = validate_upload(state, req, peer, headers)?;
    let Some((run_id, task_id)) = call.task.clone() else {
        return Err(ApiError::BadRequest("missing run_id and task_id".into()));
    };
    let login = Login {
        ip: call.wi.remote_addr.clone(),
        username: call.wi.username.clone(),
        password: call.password.clone(),
    };
    credentials(state, login).await?;
    let db = state.rundb.clone();
    let wi = call.wi.clone();
    state
        .offload
        .run(move || db.check_upload(&run_id, task_id, &wi))
        .await??;
    Ok(call)
}

/// A PGN must be a complete gzip stream that inflates to at most `cap` bytes: check the
/// magic, then inflate it to the end into a small buffer (never held inflated).
pub fn check_gzip(gz: &[u8], cap: u64) -> Result<(), String> {
    if gz.len() < 18 || gz[0] != 0x1f || gz[1] != 0x8b {
        return Err("pgn is not gzip data".into());
    }
    let mut decoder = flate2::read::MultiGzDecoder::new(gz);
    let mut buf = vec![0u8; 64 * 1024];
    let mut total: u64 = 0;
    loop {
        match decoder.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                total = total.saturating_add(n as u64);
                if total > cap {
                    return Err(format!("pgn inflates to more than {cap} bytes"));
                }
            }
            Err(e) => return Err(format!("pgn is not valid gzip: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(body: &[u8], piece: usize) -> Result<Members, String> {
        let mut m = Members::default();
        for c in body.chunks(piece.max(1)) {
            m.feed(c)?;
        }
        Ok(m)
    }

    #[test]
    fn members_split_in_any_piece_size() {
        let body = br#" { "password" : "p\"w", "worker_info": {"a": [1, {"b": "}"}]}, "run_id":"x",
            "task_id": 3, "pgn": "QUJD\/ZA==", "message": "" } "#;
        for piece in [1, 2, 3, 7, 64, 10_000] {
            let m = split(body, piece).expect("valid");
            assert!(m.done());
            assert_eq!(m.pgn, b"QUJD/ZA==");
            assert_eq!(m.members["password"], "p\"w");
            assert_eq!(m.members["worker_info"]["a"][1]["b"], "}");
            assert_eq!(m.members["task_id"], 3);
            assert_eq!(m.members["message"], "");
        }
    }

    #[test]
    fn malformed_bodies_are_refused() {
        for bad in [
            &b"[1]"[..],
            b"{\"a\" 1}",
            b"{\"pgn\": 5}",
            b"{\"pgn\": \"a\\nb\"}",
            b"{\"a\": 1, \"a\": 2}",
            b"{\"a\": 1} x",
            b"{\"a\": ]}",
            b"{\"a\": tru}",
        ] {
            assert!(split(bad, 3).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        assert!(!split(b"{\"a\": 1", 3).expect("so far valid").done());
    }

    #[test]
    fn gzip_check_caps_the_inflated_size() {
        use std::io::Write as _;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(&vec![b'a'; 1 << 20]).expect("write");
        let gz = e.finish().expect("finish");
        assert!(check_gzip(&gz, 1 << 20).is_ok());
        assert!(check_gzip(&gz, (1 << 20) - 1).is_err());
        assert!(check_gzip(&gz[..gz.len() - 4], 1 << 30).is_err());
        assert!(check_gzip(b"plain text, not gzip at all", 1 << 30).is_err());
    }
}
