//! The nets pages through real HTTP: `/upload` takes a multipart net from a logged-in user,
//! refuses bad tokens, anonymous visitors, wrong names, wrong hashes, oversized and duplicate
//! nets with a message and without storing anything (no record, no file, no temporary file);
//! an accepted net is stored gzipped (`<name>.gz`), is listed on `/nns` and downloads from
//! `/api/nn/{name}` intact (as the worker decodes and checks it).

use sha2::{Digest, Sha256};

use crate::fleet::add_user;
use crate::harness::{Opts, TestServer};
use crate::ui_workers::{logged_in, stored, unescape};
use crate::web::{Browser, Page};

const BOUNDARY: &str = "----shoal-test-boundary-7d1f";
/// The test servers' upload limit.
const LIMIT: usize = 64 * 1024;

/// A net's bytes and its proper name.
pub fn net(seed: u8, len: usize) -> (Vec<u8>, String) {
    let bytes: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    let name = format!("nn-{}.nnue", &hex::encode(Sha256::digest(&bytes))[..12]);
    (bytes, name)
}

/// A multipart body: the token first (when given), then the file field `network`.
fn multipart(token: Option<&str>, file: Option<(&str, &[u8])>) -> Vec<u8> {
    let mut body = Vec::new();
    if let Some(t) = token {
        body.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"csrf_token\"\r\n\r\n{t}\r\n"
            )
            .as_bytes(),
        );
    }
    if let Some((name, bytes)) = file {
        body.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"network\"; \
                 filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    body
}

pub(crate) async fn upload(
    b: &mut Browser<'_>,
    token: Option<&str>,
    file: Option<(&str, &[u8])>,
) -> Page {
    let req = b
        .client
        .post(b.server.url("/upload"))
        .header(
            "content-type",
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )
        .body(multipart(token, file));
    b.send(req).await
}

/// The files in the net directory (temporary ones included).
fn net_files(server: &TestServer) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(server.data_dir.join("nn"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn net_records(server: &TestServer) -> usize {
    stored(server, shoal::store::Collection::Nns).len()
}

async fn server() -> TestServer {
    let server = TestServer::start_with(Opts::new().set("nn_upload_limit_bytes", LIMIT)).await;
    add_user(&server, "alice", &[]);
    server
}

#[tokio::test]
async fn an_uploaded_net_is_listed_and_downloads_intact() {
    let server = server().await;
    let (bytes, name) = net(1, 40_000);

    // Anonymous visitors are sent to the login page, and store nothing.
    let (mut anon, anon_token) = logged_in(&server, None).await;
    let page = anon.get("/upload").await;
    assert_eq!(
        (page.status, page.location.as_str()),
        (302, "/login?next=/upload")
    );
    let page = upload(&mut anon, Some(&anon_token), Some((&name, &bytes))).await;
    assert_eq!(
        (page.status, page.location.as_str()),
        (302, "/login?next=/upload")
    );

    // A bad token, or none, is refused before the file is read.
    let (mut alice, token) = logged_in(&server, Some("alice")).await;
    for t in [Some("forged"), Some(""), None] {
        let page = upload(&mut alice, t, Some((&name, &bytes))).await;
        assert_eq!(page.status, 403, "{t:?}");
        assert!(page.body.contains("security token"));
    }
    assert_eq!(net_records(&server), 0);
    assert!(net_files(&server).is_empty(), "{:?}", net_files(&server));

    // The form, then the upload.
    let page = alice.get("/upload").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("enctype=\"multipart/form-data\""));
    assert!(page.body.contains("name=\"network\""));
    let page = upload(&mut alice, Some(&token), Some((&name, &bytes))).await;
    assert_eq!(page.status, 302, "{}", page.body);
    assert_eq!(page.location, "/nns");
    assert_eq!(net_files(&server), vec![format!("{name}.gz")]);

    let page = anon.get("/nns").await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains(&format!("href=\"/api/nn/{name}\"")),
        "{}",
        page.body
    );
    assert!(page.body.contains("<td>alice</td>"));
    // The Time column shows when it was uploaded.
    let today = chrono::Utc::now().format("<td>%y-%m-%d ").to_string();
    assert!(page.body.contains(&today), "{today}: {}", page.body);

    // Downloadable, byte for byte, and counted.
    let got = crate::nets_store::download_as_worker(&server, &name).await;
    assert_eq!(got, bytes);
    let records = stored(&server, shoal::store::Collection::Nns);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["user"], "alice");
    assert_eq!(records[0]["downloads"], 1);
    let page = anon.get("/nns").await;
    assert!(
        page.body.contains("<td class=\"num\">1</td>"),
        "{}",
        page.body
    );
    let actions: Vec<_> = stored(&server, shoal::store::Collection::Actions)
        .into_iter()
        .filter(|a| a["action"] == "upload_nn")
        .collect();
    assert_eq!(actions.len(), 1);
    assert_eq!(actions[0]["nn"], serde_json::json!(name));

    // Filters.
    let page = anon.get("/nns?network_name=zzzz").await;
    assert!(page.body.contains("No nets available"));
    let page = anon
        .get(&format!("/nns?network_name={}&user=ALI", &name[3..9]))
        .await;
    assert!(page.body.contains(&name));
    let page = anon.get("/nns?master_only=1").await;
    assert!(page.body.contains("No nets available"));
    for q in ["sort=downloads&order=asc", "sort=bogus&page=-3", "view=all"] {
        let page = anon.get(&format!("/nns?{q}")).await;
        assert_eq!(page.status, 200, "{q}");
        assert!(page.body.contains(&name), "{q}");
    }

    // The same net again is refused, and nothing changes.
    let page = upload(&mut alice, Some(&token), Some((&name, &bytes))).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body
            .contains(&format!("Network {name} already exists"))
    );
    assert_eq!(net_records(&server), 1);
    assert_eq!(net_files(&server), vec![format!("{name}.gz")]);
}

#[tokio::test]
async fn bad_uploads_are_refused_and_leave_nothing() {
    let server = server().await;
    let (mut alice, token) = logged_in(&server, Some("alice")).await;
    let (bytes, name) = net(2, 1000);
    let refusals: Vec<(String, Vec<u8>, String)> = vec![
        (
            "foo.nnue".into(),
            bytes.clone(),
            r#"Name must match "nn-[SHA256 first 12 digits].nnue""#.into(),
        ),
        (
            "NN-ABCDEF012345.nnue".into(),
            bytes.clone(),
            r#"Name must match "nn-[SHA256 first 12 digits].nnue""#.into(),
        ),
        (
            "nn-000000000000.nnue".into(),
            bytes.clone(),
            format!("Wrong SHA256 hash: {} Filename: 000000000000", &name[3..15]),
        ),
        {
            // Over the limit (by a little: read up to the limit, then refused).
            let (big, big_name) = net(3, LIMIT + 10);
            (big_name, big, format!("Network must be < {LIMIT} bytes"))
        },
        {
            // Exactly the limit: a net must be smaller.
            let (big, big_name) = net(4, LIMIT);
            (big_name, big, format!("Network must be < {LIMIT} bytes"))
        },
        {
            // Far over the limit: refused from its declared length, unread.
            let (big, big_name) = net(5, LIMIT * 4);
            (big_name, big, format!("Network must be < {LIMIT} bytes"))
        },
        (
            "".into(),
            Vec::new(),
            "Specify a network file with the 'Choose File' button".into(),
        ),
    ];
    for (file, content, message) in &refusals {
        let page = upload(&mut alice, Some(&token), Some((file, content))).await;
        assert_eq!(page.status, 200, "{file}: {}", page.body);
        assert!(
            unescape(&page.body).contains(message.as_str()),
            "{file}: want {message:?} in {}",
            page.body
        );
        assert_eq!(net_records(&server), 0, "{file}");
        assert!(
            net_files(&server).is_empty(),
            "{file}: {:?}",
            net_files(&server)
        );
    }
    // No file field at all; a body that is not multipart.
    let page = upload(&mut alice, Some(&token), None).await;
    assert_eq!(page.status, 200);
    assert!(unescape(&page.body).contains("Specify a network file"));
    let req = alice
        .client
        .post(server.url("/upload"))
        .header("x-csrf-token", token.clone())
        .form(&[("network", "nn-000000000000.nnue")]);
    let page = alice.send(req).await;
    assert_eq!(page.status, 200);
    assert!(unescape(&page.body).contains("Specify a network file"));
    // A truncated body (the client stops mid-file).
    let mut cut = multipart(Some(&token), Some((&name, &bytes)));
    cut.truncate(cut.len() - 300);
    let req = alice
        .client
        .post(server.url("/upload"))
        .header(
            "content-type",
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )
        .body(cut);
    let page = alice.send(req).await;
    assert_eq!(page.status, 200);
    assert!(
        unescape(&page.body).contains("Error reading the network file"),
        "{}",
        page.body
    );
    assert_eq!(net_records(&server), 0);
    assert!(net_files(&server).is_empty(), "{:?}", net_files(&server));

    // The good net still goes in afterwards.
    let page = upload(&mut alice, Some(&token), Some((&name, &bytes))).await;
    assert_eq!((page.status, page.location.as_str()), (302, "/nns"));
    assert_eq!(net_files(&server), vec![format!("{name}.gz")]);
}

#[tokio::test]
async fn a_stalled_upload_is_refused_and_leaves_nothing() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let server = TestServer::start_with(
        Opts::new()
            .set("nn_upload_limit_bytes", LIMIT)
            .set("body_read_timeout_s", 1),
    )
    .await;
    add_user(&server, "alice", &[]);
    let (alice, token) = logged_in(&server, Some("alice")).await;
    let (bytes, name) = net(6, 20_000);
    let body = multipart(Some(&token), Some((&name, &bytes)));
    // Half the body is sent, then nothing more: the server stops waiting.
    let mut conn = tokio::net::TcpStream::connect(server.addr)
        .await
        .expect("connect");
    let head = format!(
        "POST /upload HTTP/1.1\r\nHost: {}\r\nCookie: {}\r\n\
         Content-Type: multipart/form-data; boundary={BOUNDARY}\r\nContent-Length: {}\r\n\r\n",
        server.addr,
        alice.cookie.clone().expect("session cookie"),
        body.len()
    );
    conn.write_all(head.as_bytes()).await.expect("head");
    conn.write_all(&body[..body.len() / 2]).await.expect("half");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        conn.read_to_end(&mut answer),
    )
    .await;
    assert!(read.is_ok(), "the server never answered the stalled upload");
    let text = unescape(&String::from_utf8_lossy(&answer));
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("Error reading the network file"), "{text}");
    assert_eq!(net_records(&server), 0);
    assert!(net_files(&server).is_empty(), "{:?}", net_files(&server));
}
