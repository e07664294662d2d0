//! `GET/POST /upload`: a logged-in person uploads a net as the multipart file field
//! `network`, after the hidden `csrf_token`.
//!
//! An upload is streamed: each piece of the body is hashed and gzipped into a temporary file
//! in the net directory (Fishtest's layout, `crate::nets`), in the pool, about a mebibyte at
//! a time, so a net is never held whole in memory. Checked before a byte is written: the CSRF
//! token, the login, the name (`nn-<12 hex>.nnue`) and that no net of that name exists (in
//! `nns` or on disk); while it arrives: the size (`nn_upload_limit_bytes`); at the end: that
//! the name's 12 digits begin its SHA-256. Only then is it installed (`Nets::install`:
//! linked to `<name>.gz`, exclusively). A refused upload leaves nothing behind: its temporary
//! file is removed on every path, a dropped connection included ([`TempFile`]). A body that
//! stops arriving for `body_read_timeout_s` is refused.
//! Owns: the form, the upload's reading, the refusal messages. Must not: write a net other
//! than through `crate::nets`; block the event loop (every file step runs in the pool); keep
//! reading a body past the limit (`middleware::upload_body_limit`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use askama::Template;
use axum::extract::multipart::{Field, MultipartRejection};
use axum::extract::{Multipart, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::http::middleware::UPLOAD_SLACK;
use crate::http::state::AppState;
use crate::http::ui::kit::session::{CookieKeys, Ctx};
use crate::http::ui::kit::{
    Flash, Input, Layout, Page, PageResult, continue_page, open_page, page, respond,
};
use crate::nets::{self, NetError, NetWriter};
use crate::offload::Offload;

/// Bytes gathered before each pool job that writes and hashes them.
const WRITE_BATCH: usize = 1024 * 1024;
/// The longest CSRF field read.
const MAX_TOKEN: usize = 256;

#[derive(Template)]
#[template(path = "upload.html")]
pub struct UploadPage {
    pub l: Layout,
    pub limit: String,
}

/// The limit as people read it: whole megabytes as `NMB`, else bytes.
fn limit_text(limit: u64) -> String {
    if limit.is_multiple_of(1_000_000) {
        format!("{}MB", limit / 1_000_000)
    } else {
        format!("{limit} bytes")
    }
}

/// The upload form, with an error if any (status 200, as Fishtest re-renders it).
fn upload_page(ctx: &Ctx, limit: u64, error: Option<String>) -> PageResult {
    let mut l = Layout::new(ctx, "Neural network upload");
    if let Some(e) = error {
        l = l.flash(Flash::error(e));
    }
    Page::render(
        StatusCode::OK,
        &UploadPage {
            l,
            limit: limit_text(limit),
        },
    )
}

const LOGIN_NEXT: &str = "/login?next=/upload";

/// `GET /upload`: the form (logged in; anonymous visitors go to `/login`).
pub async fn upload_form(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let limit = state.config.nn_upload_limit_bytes;
    page(&state, Input::get(&state, &headers), move |_, ctx, _| {
        if ctx.user.is_none() {
            return Page::redirect(LOGIN_NEXT);
        }
        upload_page(ctx, limit, None)
    })
    .await
}

/// A temporary upload file that is removed (in the pool) if the request ends before the
/// upload was installed or discarded, e.g. when the client goes away mid-upload.
struct TempFile {
    path: Option<PathBuf>,
    offload: Offload,
}

impl TempFile {
    /// The file is gone or installed: nothing to remove.
    fn release(&mut self) {
        self.path = None;
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let Some(path) = self.path.take() else {
            return;
        };
        let offload = self.offload.clone();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                if let Err(e) = offload.run(move || nets::discard(&path)).await {
                    tracing::warn!(error = %e, "temporary net not removed");
                }
            });
        } else {
            nets::discard(&path);
        }
    }
}

/// Why an upload was refused: the message shown, or a whole answer (403, login redirect).
enum Refusal {
    Message(String),
    Answer(Response),
}

impl From<String> for Refusal {
    fn from(m: String) -> Self {
        Refusal::Message(m)
    }
}

const NO_FILE: &str = "Specify a network file with the 'Choose File' button";
const UNREADABLE: &str = "Error reading the network file";

/// Reads a small text field (the CSRF token), refusing a long one.
async fn small_text(mut field: Field<'_>, idle: Duration) -> Result<String, String> {
    let mut out = Vec::new();
    while let Some(chunk) = tokio::time::timeout(idle, field.chunk())
        .await
        .map_err(|_| UNREADABLE.to_string())?
        .map_err(|_| UNREADABLE.to_string())?
    {
        if out.len().saturating_add(chunk.len()) > MAX_TOKEN {
            return Err(UNREADABLE.into());
        }
        out.extend_from_slice(&chunk);
    }
    String::from_utf8(out).map_err(|_| UNREADABLE.to_string())
}

/// Runs one blocking step of the upload in the pool.
async fn pool<R: Send + 'static>(
    state: &AppState,
    work: impl FnOnce() -> R + Send + 'static,
) -> Result<R, Refusal> {
    state.offload.run(work).await.map_err(|e| {
        tracing::warn!(error = %e, "upload step not run");
        Refusal::Answer((StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable").into_response())
    })
}

/// Streams the `network` field of a logged-in user into the net store.
async fn receive_net(state: &Arc<AppState>, field: Field<'_>, user: String) -> Result<(), Refusal> {
    let raw_name = field.file_name().unwrap_or_default().to_string();
    // Some browsers send a path; the name is its last part.
    let name = raw_name
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or_default()
        .to_string();
    if name.is_empty() {
        return Err(NO_FILE.to_string().into());
    }
    if !nets::valid_name(&name) {
        return Err(r#"Name must match "nn-[SHA256 first 12 digits].nnue""#
            .to_string()
            .into());
    }
    let store = state.nets.clone();
    let n = name.clone();
    let known = pool(state, move || store.known(&n)).await?;
    match known {
        Ok(false) => {}
        Ok(true) => return Err(format!("Network {name} already exists").into()),
        Err(e) => {
            tracing::error!(error = %e, "net lookup");
            return Err(format!("Failed to write network {name}").into());
        }
    }
    let d = state.nets.dir().to_path_buf();
    let writer = pool(state, move || NetWriter::create(&d))
        .await?
        .map_err(|e| {
            tracing::error!(error = %e, "temporary net not created");
            format!("Failed to write network {name}")
        })?;
    let mut temp = TempFile {
        path: Some(writer.path().to_path_buf()),
        offload: state.offload.clone(),
    };
    let result = write_and_install(state, field, writer, &name, user).await;
    // Installed, or refused: either way the temporary file goes before the answer (on
    // success `Nets::install` already took it; removing it again is harmless).
    if let Some(path) = temp.path.clone()
        && state
            .offload
            .run(move || nets::discard(&path))
            .await
            .is_ok()
    {
        temp.release();
    }
    result
}

/// Writes the field's bytes through `writer` (checking the size as they arrive), checks the
/// hash against `name`, and installs the net.
async fn write_and_install(
    state: &Arc<AppState>,
    mut field: Field<'_>,
    mut writer: NetWriter,
    name: &str,
    user: String,
) -> Result<(), Refusal> {
    let idle = state.config.body_read_timeout();
    let limit = state.config.nn_upload_limit_bytes;
    let too_big = || format!("Network must be < {}", limit_text(limit));
    let mut received: u64 = 0;
    let mut batch: Vec<u8> = Vec::with_capacity(WRITE_BATCH);
    loop {
        let chunk = tokio::time::timeout(idle, field.chunk())
            .await
            .map_err(|_| {
                tracing::info!("upload body stalled");
                UNREADABLE.to_string()
            })?
            .map_err(|e| {
                tracing::info!(error = %e, "upload body not read");
                UNREADABLE.to_string()
            })?;
        let done = chunk.is_none();
        if let Some(c) = &chunk {
            received = received
                .checked_add(c.len() as u64)
                .filter(|n| *n < limit)
                .ok_or_else(too_big)?;
            batch.extend_from_slice(c);
        }
        if batch.len() >= WRITE_BATCH || (done && !batch.is_empty()) {
            let bytes = std::mem::take(&mut batch);
            let w = writer;
            let (w, wrote) = pool(state, move || {
                let mut w = w;
                let r = w.write(&bytes);
                (w, r)
            })
            .await?;
            writer = w;
            wrote.map_err(|e| {
                tracing::error!(error = %e, "net not written");
                format!("Failed to write network {name}")
            })?;
            batch = Vec::with_capacity(WRITE_BATCH);
        }
        if done {
            break;
        }
    }
    let (path, sha) = pool(state, move || writer.finish()).await?.map_err(|e| {
        tracing::error!(error = %e, "net not written");
        format!("Failed to write network {name}")
    })?;
    if sha != name[3..15] {
        return Err(format!("Wrong SHA256 hash: {sha} Filename: {}", &name[3..15]).into());
    }
    let store = state.nets.clone();
    let n = name.to_string();
    let installed = pool(state, move || store.install(&path, &n, &user)).await?;
    match installed {
        Ok(()) => Ok(()),
        Err(NetError::Duplicate(_)) => Err(format!("Network {name} already uploaded").into()),
        Err(e) => {
            tracing::error!(error = %e, net = %name, "net not installed");
            Err(format!("Failed to write network {name}").into())
        }
    }
}

/// Renders the upload form with `message` in the pool, for the session `ctx`.
async fn refuse(state: &Arc<AppState>, keys: CookieKeys, ctx: Ctx, message: String) -> Response {
    let limit = state.config.nn_upload_limit_bytes;
    continue_page(state, keys, ctx, move |_, ctx, _| {
        upload_page(ctx, limit, Some(message))
    })
    .await
}

/// Reads what is left of an upload's body and drops it (at most the route's body limit, as
/// the middleware caps the stream), so the client, still sending, receives the answer instead
/// of a reset connection. A body that cannot be read to its end closes the connection.
async fn drain(mut multipart: Multipart, idle: Duration, mut answer: Response) -> Response {
    let clean = loop {
        match tokio::time::timeout(idle, multipart.next_field()).await {
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None)) => break true,
            Ok(Err(_)) | Err(_) => break false,
        }
    };
    if !clean {
        close(&mut answer);
    }
    answer
}

fn close(r: &mut Response) {
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
}

/// `POST /upload`: see the module docs. Success → `/nns`; a refusal re-renders the form
/// with its message and stores nothing; a missing or wrong token → 403; anonymous →
/// `/login`.
pub async fn upload(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    multipart: Result<Multipart, MultipartRejection>,
) -> Response {
    let limit = state.config.nn_upload_limit_bytes;
    let idle = state.config.body_read_timeout();
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let mut token: Option<String> = None;
    let early_refusal = if declared.is_some_and(|n| n > limit.saturating_add(UPLOAD_SLACK)) {
        // Nothing is read: the answer is the form and its message (nothing changes, so the
        // token need not be checked first).
        Some(format!("Network must be < {}", limit_text(limit)))
    } else {
        None
    };
    let mut multipart = match (multipart, early_refusal) {
        (Ok(m), None) => m,
        (_, early) => {
            let message = early.unwrap_or_else(|| NO_FILE.to_string());
            let input = if message == NO_FILE {
                Input::post(&state, &headers, None)
            } else {
                Input::get(&state, &headers)
            };
            let mut r = with_session(&state, input, message).await;
            // The body was not read (too large, or not a multipart form).
            close(&mut r);
            return r;
        }
    };
    loop {
        let field = match tokio::time::timeout(idle, multipart.next_field()).await {
            Ok(Ok(Some(f))) => f,
            Ok(Ok(None)) => break,
            Ok(Err(e)) => {
                tracing::info!(error = %e, "upload form not read");
                let input = Input::post(&state, &headers, token.take());
                let mut r = with_session(&state, input, UNREADABLE.into()).await;
                close(&mut r);
                return r;
            }
            Err(_) => {
                tracing::info!("upload form stalled");
                let input = Input::post(&state, &headers, token.take());
                let mut r = with_session(&state, input, UNREADABLE.into()).await;
                close(&mut r);
                return r;
            }
        };
        match field.name() {
            Some("csrf_token") => match small_text(field, idle).await {
                Ok(t) => token = Some(t),
                Err(m) => {
                    let input = Input::post(&state, &headers, None);
                    let r = with_session(&state, input, m).await;
                    return drain(multipart, idle, r).await;
                }
            },
            Some("network") => {
                let input = Input::post(&state, &headers, token.take());
                let keys = input.keys.clone();
                let answer = match open_page(&state, input).await {
                    Err(answer) => {
                        drop(field);
                        answer
                    }
                    Ok(ctx) => match ctx.username() {
                        None => {
                            drop(field);
                            let cookie = ctx.set_cookie.clone();
                            respond(&keys, cookie, Page::Redirect(LOGIN_NEXT.into()))
                        }
                        Some(user) => match receive_net(&state, field, user).await {
                            Ok(()) => {
                                let cookie = ctx.set_cookie.clone();
                                respond(&keys, cookie, Page::Redirect("/nns".into()))
                            }
                            Err(Refusal::Message(m)) => refuse(&state, keys, ctx, m).await,
                            Err(Refusal::Answer(r)) => r,
                        },
                    },
                };
                return drain(multipart, idle, answer).await;
            }
            // Other fields (the licence box has no name; anything else) are skipped.
            _ => {}
        }
    }
    let input = Input::post(&state, &headers, token);
    with_session(&state, input, NO_FILE.into()).await
}

/// Answers with the upload form and `message` after resolving the session (and, for a POST
/// input, checking its token: a bad one is the 403 page); anonymous visitors go to `/login`.
async fn with_session(state: &Arc<AppState>, input: Input, message: String) -> Response {
    let limit = state.config.nn_upload_limit_bytes;
    page(state, input, move |_, ctx, _| {
        if ctx.user.is_none() {
            return Page::redirect(LOGIN_NEXT);
        }
        upload_page(ctx, limit, Some(message))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_as_people_read_them() {
        assert_eq!(limit_text(200_000_000), "200MB");
        assert_eq!(limit_text(4096), "4096 bytes");
        assert_eq!(
            crate::http::middleware::upload_body_limit(u64::MAX),
            usize::MAX
        );
    }
}
