//! Files: PGN uploads (`upload`) and the streamed downloads of PGNs and nets.
//!
//! Owns: streaming stored bytes one pool-read chunk at a time (never buffered whole, never on
//! the event loop), the download routes' name rules and content types.
//! Must not: read the store except through `RunDb`'s queries.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use super::call::is_hex;
use super::schema::{Binary, ErrorReply};
use crate::http::AppState;
use crate::http::auth::rundb;
use crate::http::reply::ApiError;

/// Uploads (any instance: Fishtest sends PGNs to a secondary) and downloads.
pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/upload_pgn", post(super::upload::upload_pgn))
        .route("/api/pgn/{name}", get(download_pgn))
        .route("/api/nn/{name}", get(download_net))
        .route("/api/run_pgns/{name}", get(download_run_pgns))
}

/// Chunk size for PGN downloads: each chunk is one pool job.
const CHUNK: usize = 256 * 1024;

/// Reads up to `CHUNK` bytes of one source from an offset (blocking; run in the pool).
type ReadChunk<T> = Arc<dyn Fn(&T, u64) -> std::io::Result<Vec<u8>> + Send + Sync>;

/// Streams a list of sources (stored PGNs, a net file) one pool-read chunk at a time, so a
/// download is never buffered whole and never blocks the event loop.
fn stream_chunks<T: Clone + Send + Sync + 'static>(
    state: &Arc<AppState>,
    sources: Vec<T>,
    read: ReadChunk<T>,
) -> Body {
    let offload = state.offload.clone();
    let stream = futures::stream::unfold(
        (sources.into_iter(), None::<(T, u64)>),
        move |(mut rest, mut current)| {
            let offload = offload.clone();
            let read = read.clone();
            async move {
                loop {
                    let (source, offset) = match current.take() {
                        Some(c) => c,
                        None => (rest.next()?, 0),
                    };
                    let (s, r) = (source.clone(), read.clone());
                    let chunk = offload
                        .run(move || r(&s, offset))
                        .await
                        .map_err(|e| std::io::Error::other(e.to_string()))
                        .and_then(|r| r);
                    match chunk {
                        Ok(bytes) if bytes.is_empty() => continue,
                        Ok(bytes) => {
                            let next = Some((source, offset + bytes.len() as u64));
                            return Some((Ok(bytes), (rest, next)));
                        }
                        Err(e) => return Some((Err(e), (rest, None))),
                    }
                }
            }
        },
    );
    Body::from_stream(stream)
}

fn stream_pgns(state: &Arc<AppState>, pgns: Vec<crate::rundb::queries::PgnInfo>) -> Body {
    let db = rundb(state);
    let read: ReadChunk<crate::rundb::queries::PgnInfo> = Arc::new(move |p, offset| {
        db.pgn_chunk(p, offset, CHUNK)
            .map_err(|e| std::io::Error::other(e.to_string()))
    });
    stream_chunks(state, pgns, read)
}

/// GET /api/nn/{name}: the net file (or a 302 to `nn_url`), counting the download.
#[utoipa::path(
    get,
    path = "/api/nn/{name}",
    tag = "files",
    params(("name" = String, Path, description = "The net's file name (`nn-<12 hex>.nnue`)")),
    responses(
        (status = 200, description = "The net file", content_type = "application/octet-stream", body = Binary),
        (status = 302, description = "The net at `nn_url` (when set)"),
        (status = 404, description = "No such net", body = ErrorReply),
    )
)]
pub async fn download_net(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    use crate::rundb::nets;
    if !nets::valid_name(&name) {
        return Err(ApiError::NotFound("Not Found".into()));
    }
    let path = nets::net_dir(&state.config.data_dir).join(&name);
    let db = rundb(&state);
    let (n, p) = (name.clone(), path.clone());
    let exists = state
        .offload
        .run(move || -> Result<bool, ApiError> {
            let exists = p.is_file();
            if exists {
                db.count_net_download(&n)?;
            }
            Ok(exists)
        })
        .await??;
    if let Some(base) = &state.config.nn_url {
        let location = format!("{}/{name}", base.trim_end_matches('/'));
        let mut r = StatusCode::FOUND.into_response();
        if let Ok(v) = HeaderValue::from_str(&location) {
            r.headers_mut().insert(header::LOCATION, v);
        }
        return Ok(r);
    }
    if !exists {
        return Err(ApiError::NotFound("Not Found".into()));
    }
    let read: ReadChunk<std::path::PathBuf> = Arc::new(|path, offset| {
        use std::os::unix::fs::FileExt as _;
        let file = std::fs::File::open(path)?;
        let mut buf = vec![0u8; CHUNK];
        let n = file.read_at(&mut buf, offset)?;
        buf.truncate(n);
        Ok(buf)
    });
    let mut r = (StatusCode::OK, stream_chunks(&state, vec![path], read)).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Ok(r)
}

fn gzip_response(body: Body, content_type: &'static str, encoded: bool) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if encoded {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    r
}

/// GET /api/pgn/{run_id}-{task_id}.pgn: the stored gzip, as `Content-Encoding: gzip`.
#[utoipa::path(
    get,
    path = "/api/pgn/{name}",
    tag = "files",
    params(("name" = String, Path, description = "`<run id>-<task index>.pgn`")),
    responses(
        (status = 200, description = "The task's latest PGN, sent with `Content-Encoding: gzip`",
            content_type = "application/x-chess-pgn", body = Binary),
        (status = 404, description = "No such PGN", body = ErrorReply),
    )
)]
pub async fn download_pgn(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let key = name
        .strip_suffix(".pgn")
        .filter(|k| {
            k.split_once('-').is_some_and(|(r, t)| {
                is_hex(r, 24) && !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())
            })
        })
        .ok_or_else(|| ApiError::NotFound("Not Found".into()))?
        .to_string();
    let db = rundb(&state);
    let found = state.offload.run(move || db.pgn_latest(&key)).await??;
    let Some(last) = found else {
        return Err(ApiError::NotFound("Not Found".into()));
    };
    Ok(gzip_response(
        stream_pgns(&state, vec![last]),
        "application/x-chess-pgn",
        true,
    ))
}

/// GET /api/run_pgns/{run_id}.pgn.gz: every task's gzip member, in task order.
#[utoipa::path(
    get,
    path = "/api/run_pgns/{name}",
    tag = "files",
    params(("name" = String, Path, description = "`<run id>.pgn.gz`")),
    responses(
        (status = 200, description = "Every task's PGN, one gzip member each, in task order",
            content_type = "application/gzip", body = Binary),
        (status = 404, description = "The run has no PGN", body = ErrorReply),
    )
)]
pub async fn download_run_pgns(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let run_id = name
        .strip_suffix(".pgn.gz")
        .filter(|r| is_hex(r, 24))
        .ok_or_else(|| ApiError::NotFound("Not Found".into()))?
        .to_string();
    let db = rundb(&state);
    let list = state.offload.run(move || db.pgns_of_run(&run_id)).await??;
    if list.is_empty() {
        return Err(ApiError::NotFound("Not Found".into()));
    }
    Ok(gzip_response(
        stream_pgns(&state, list),
        "application/gzip",
        false,
    ))
}
