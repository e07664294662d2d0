//! Files: PGN uploads (`upload`) and the streamed downloads of PGNs and nets: `/api/nn/{name}`
//! (counts and redirects, as Fishtest) and `/nn/{name}` (the net directory served as nginx
//! serves Fishtest's, for a shoal without a proxy in front).
//!
//! Owns: streaming stored bytes one pool-read chunk at a time (never buffered whole, never on
//! the event loop), the download routes' name rules, content types and encodings.
//! Must not: read the store except through `RunDb`'s queries; open a path but through
//! `nets::locate` (a name that is not `nn-<12 hex>.nnue` never reaches the disk).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use super::schema::{Binary, ErrorReply};
use crate::http::auth::rundb;
use crate::http::reply::ApiError;
use crate::http::run_id::RunId;
use crate::http::state::AppState;
use crate::nets::{self, NetFile};

/// Uploads (any instance: Fishtest sends PGNs to a secondary) and downloads.
pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/upload_pgn", post(super::upload::upload_pgn))
        .route("/api/pgn/{name}", get(download_pgn))
        .route("/api/nn/{name}", get(download_net))
        .route("/nn/{name}", get(serve_net))
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

/// GET /api/nn/{name}: counts the download and redirects, as Fishtest does, to
/// `<nn_url>/nn/<name>`, or to this server's own `/nn/<name>` when `nn_url` is unset (so the
/// download is counted whether shoal or a proxy such as nginx sends the bytes). A net not
/// recorded in `nns` is a 404 and counts nothing; a recorded net whose file is missing is
/// counted and redirected all the same (the file server answers 404), as in Fishtest.
#[utoipa::path(
    get,
    path = "/api/nn/{name}",
    tag = "files",
    params(("name" = String, Path, description = "The net's file name (`nn-<12 hex>.nnue`)")),
    responses(
        (status = 302, description = "The download counted; `Location` is `<nn_url>/nn/<name>`, \
            or this server's `/nn/<name>` (the net, gzipped, sent with `Content-Encoding: gzip`)"),
        (status = 404, description = "No such net", body = ErrorReply),
    )
)]
pub async fn download_net(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    req: Request,
) -> Result<Response, ApiError> {
    if !nets::valid_name(&name) {
        return Err(ApiError::NotFound("Not Found".into()));
    }
    let store = state.nets.clone();
    let n = name.clone();
    let known = state
        .offload
        .run(move || store.count_download(&n))
        .await??;
    if !known {
        return Err(ApiError::NotFound("Not Found".into()));
    }
    let base = match &state.config.nn_url {
        Some(url) => url.trim_end_matches('/').to_string(),
        None => own_base(&state, &req),
    };
    let mut r = StatusCode::FOUND.into_response();
    let location = HeaderValue::from_str(&format!("{base}/nn/{name}"))
        .map_err(|e| ApiError::Internal(format!("net location: {e}")))?;
    r.headers_mut().insert(header::LOCATION, location);
    Ok(r)
}

/// This server's address as the client named it, `scheme://host[:port]` (Fishtest's
/// `request.host_url`): the host from the request's URI or `Host` header, the scheme `https`
/// when a trusted proxy (`trusted_proxies`) says so in `X-Forwarded-Proto`, else `http`. A
/// request without a usable host gets a relative redirect (empty base).
fn own_base(state: &AppState, req: &Request) -> String {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    host_url(
        state,
        req.uri().authority().map(|a| a.as_str()),
        req.headers(),
        peer,
    )
}

/// [`own_base`] from the request's parts: the URI's authority if any, the headers, the socket
/// peer (whose trust decides `X-Forwarded-Proto`). Empty without a usable host.
pub(crate) fn host_url(
    state: &AppState,
    authority: Option<&str>,
    headers: &axum::http::HeaderMap,
    peer: Option<SocketAddr>,
) -> String {
    let host = authority
        .map(str::to_string)
        .or_else(|| {
            headers
                .get(header::HOST)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        })
        .filter(|h| {
            !h.is_empty()
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-:[]_".contains(&b))
        });
    let Some(host) = host else {
        return String::new();
    };
    let peer_trusted = peer.is_some_and(|p| {
        state
            .config
            .trusted_proxies
            .iter()
            .any(|t| t.parse::<IpAddr>().is_ok_and(|ip| ip == p.ip()))
    });
    let https = peer_trusted
        && headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"));
    format!("{}://{host}", if https { "https" } else { "http" })
}

/// GET /nn/{name}: the net file from the net directory, as nginx's `gzip_static always`
/// serves Fishtest's: a gzipped net (`<name>.gz`) as its stored bytes with
/// `Content-Encoding: gzip`, a plain one (the older layout) as it is. Counts nothing (the
/// count is `/api/nn/{name}`'s). Not an API route: a missing net is a plain 404.
pub async fn serve_net(State(state): State<Arc<AppState>>, Path(name): Path<String>) -> Response {
    if !nets::valid_name(&name) {
        return (StatusCode::NOT_FOUND, "Not Found").into_response();
    }
    let store = state.nets.clone();
    let found = state
        .offload
        .run(move || -> std::io::Result<Option<(NetFile, u64)>> {
            match store.locate(&name)? {
                Some(file) => {
                    let len = std::fs::metadata(file.path())?.len();
                    Ok(Some((file, len)))
                }
                None => Ok(None),
            }
        })
        .await;
    let (file, len) = match found {
        Ok(Ok(Some(found))) => found,
        Ok(Ok(None)) => return (StatusCode::NOT_FOUND, "Not Found").into_response(),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "net file not read");
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        }
        Err(e) => {
            tracing::warn!(error = %e, "net file not looked up");
            return StatusCode::SERVICE_UNAVAILABLE.into_response();
        }
    };
    let gzipped = file.is_gzip();
    let read: ReadChunk<std::path::PathBuf> = Arc::new(|path, offset| {
        use std::os::unix::fs::FileExt as _;
        let file = std::fs::File::open(path)?;
        let mut buf = vec![0u8; CHUNK];
        let n = file.read_at(&mut buf, offset)?;
        buf.truncate(n);
        Ok(buf)
    });
    let body = stream_chunks(&state, vec![file.path().to_path_buf()], read);
    let mut r = (StatusCode::OK, body).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    if gzipped {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    r
}

/// A PGN download: `filename` (the name asked for, checked to be a run id and task index:
/// nothing a header could not carry) as Fishtest's `Content-Disposition: attachment`.
fn gzip_response(
    body: Body,
    content_type: &'static str,
    encoded: bool,
    filename: &str,
) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if encoded {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{filename}\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    r
}

/// GET /api/pgn/{run_id}-{task_id}.pgn: the stored gzip, as `Content-Encoding: gzip`, named
/// `<run_id>-<task_id>.pgn` (`Content-Disposition`, Fishtest's).
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
                r.parse::<RunId>().is_ok() && !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())
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
        &name,
    ))
}

/// GET /api/run_pgns/{run_id}.pgn.gz: every task's gzip member, in task order, named
/// `<run_id>.pgn.gz` (`Content-Disposition`, Fishtest's).
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
        .and_then(|r| r.parse::<RunId>().ok())
        .ok_or_else(|| ApiError::NotFound("Not Found".into()))?;
    let db = rundb(&state);
    let list = state
        .offload
        .run(move || db.pgns_of_run(run_id.as_str()))
        .await??;
    if list.is_empty() {
        return Err(ApiError::NotFound("Not Found".into()));
    }
    Ok(gzip_response(
        stream_pgns(&state, list),
        "application/gzip",
        false,
        &name,
    ))
}
