//! Password reset through real HTTP: an approver's one-time link (shown once, stored hashed,
//! logged), used once to set a password checked as at signup, which ends every session of
//! the user; an expired link refused; and, with `smtp_url` set, the link asked for at
//! `/forgot` and mailed to a small SMTP receiver this test runs on loopback.

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::fleet::{PASSWORD, add_user, fixed_args};
use crate::harness::{Opts, TestServer};
use crate::tokens::code_of;
use crate::ui_users::{login_eventually, session, session_with, stored_actions};
use crate::web::Browser;

pub const NEW_PASSWORD: &str = "amber walrus paints seven kites";

/// The path (`/reset/<secret>`) of a link.
pub fn path_of(link: &str) -> String {
    let at = link
        .find("/reset/")
        .unwrap_or_else(|| panic!("no /reset/ in {link}"));
    let rest = &link[at..];
    let end = rest[7..]
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(rest.len(), |e| e + 7);
    rest[..end].to_string()
}

/// Whether a browser's session is still logged in.
async fn logged_in(b: &mut Browser<'_>) -> bool {
    b.get("/tests").await.body.contains("action=\"/logout\"")
}

#[tokio::test]
async fn an_approvers_link_works_once_and_ends_every_session() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &["--email", "alice@example.org"]);
    add_user(&server, "bob", &[]);
    add_user(&server, "boss", &["--approver"]);
    let (mut one, _) = session(&server, Some("alice")).await;
    let (mut two, _) = session(&server, Some("alice")).await;
    assert!(logged_in(&mut one).await && logged_in(&mut two).await);

    // Only an approver issues a link, from the user's page.
    let (mut bob, bob_csrf) = session(&server, Some("bob")).await;
    let refused = bob
        .post(
            "/user/alice/reset_link",
            &[("csrf_token", bob_csrf.as_str())],
        )
        .await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let (mut boss, boss_csrf) = session(&server, Some("boss")).await;
    assert!(
        boss.get("/user/alice")
            .await
            .body
            .contains("/user/alice/reset_link")
    );
    let forged = boss.post("/user/alice/reset_link", &[]).await;
    assert_eq!(forged.status, 403);
    let page = boss
        .post(
            "/user/alice/reset_link",
            &[("csrf_token", boss_csrf.as_str())],
        )
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    let link = code_of(&page, "reset-link");
    let path = path_of(&link);
    let secret = path.trim_start_matches("/reset/").to_string();
    assert!(secret.starts_with("shoal_"), "{link}");

    // Stored hashed, never in clear.
    let store = crate::harness::open_store(&server.data_dir).expect("open");
    let kv = serde_json::to_string(
        &store
            .find(
                shoal::store::Collection::ShoalKv,
                &shoal::store::Query::new(),
            )
            .expect("find"),
    )
    .expect("json");
    assert!(!kv.contains(&secret));
    assert!(kv.contains(&format!(
        "password_reset:{}",
        shoal::accounts::token_hash(&secret)
    )));

    // The user opens it (anonymous): a form; a weak or mismatched password is refused.
    let mut anon = Browser::new(&server);
    let form = anon.get(&path).await;
    assert_eq!(form.status, 200, "{}", form.body);
    assert!(form.body.contains("alice"));
    let csrf = form.csrf();
    let weak = anon
        .post(
            &path,
            &[
                ("password", "alice123"),
                ("password2", "alice123"),
                ("csrf_token", &csrf),
            ],
        )
        .await;
    assert!(weak.body.contains("Weak password"), "{}", weak.body);
    let mismatch = anon
        .post(
            &path,
            &[
                ("password", NEW_PASSWORD),
                ("password2", "x"),
                ("csrf_token", &csrf),
            ],
        )
        .await;
    assert!(
        mismatch.body.contains("Matching verify password"),
        "{}",
        mismatch.body
    );
    assert!(logged_in(&mut one).await, "a refused form changes nothing");

    let done = anon
        .post(
            &path,
            &[
                ("password", NEW_PASSWORD),
                ("password2", NEW_PASSWORD),
                ("csrf_token", &csrf),
            ],
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(done.body.contains("Password updated"), "{}", done.body);

    // Every session of alice ended; the new password logs in, the old one no longer does.
    assert!(!logged_in(&mut one).await);
    assert!(!logged_in(&mut two).await);
    login_eventually(&server, "alice", NEW_PASSWORD).await;
    let (status, _) = server
        .post_json(
            "/api/create_run",
            &json!({"username": "alice", "password": PASSWORD, "args": fixed_args(20_000)}),
        )
        .await;
    assert_eq!(status, 401);

    // Single use.
    assert_eq!(anon.get(&path).await.status, 404);
    let again = anon
        .post(
            &path,
            &[
                ("password", NEW_PASSWORD),
                ("password2", NEW_PASSWORD),
                ("csrf_token", &csrf),
            ],
        )
        .await;
    assert_eq!(again.status, 404);

    // Expired: a link whose 24 hours are over is refused.
    let page = boss
        .post(
            "/user/alice/reset_link",
            &[("csrf_token", boss_csrf.as_str())],
        )
        .await;
    let secret = path_of(&code_of(&page, "reset-link"))
        .trim_start_matches("/reset/")
        .to_string();
    let id = format!("password_reset:{}", shoal::accounts::token_hash(&secret));
    let mut doc = store
        .get(shoal::store::Collection::ShoalKv, &id)
        .expect("get")
        .expect("the link's document");
    assert_eq!(anon.get(&format!("/reset/{secret}")).await.status, 200);
    doc.insert(
        "expires".into(),
        json!({"$date": "2020-01-01T00:00:00.000Z"}),
    );
    store
        .put(shoal::store::Collection::ShoalKv, &doc)
        .expect("put");
    assert_eq!(anon.get(&format!("/reset/{secret}")).await.status, 404);

    // Logged: issued by the approver, used by the user.
    let log = stored_actions(&server, "password_reset");
    assert!(
        log.iter().any(|a| a["username"] == "boss"
            && a["user"] == "alice"
            && a["message"] == "reset link issued"),
        "{log:?}"
    );
    assert!(
        log.iter().any(
            |a| a["username"] == "alice" && a["message"] == "password set through a reset link"
        ),
        "{log:?}"
    );
    assert!(!serde_json::to_string(&log).expect("json").contains(&secret));

    // Without SMTP, /forgot only says whom to ask.
    let forgot = anon.get("/forgot").await;
    assert!(forgot.body.contains("Ask an approver"), "{}", forgot.body);
    assert!(anon.get("/login").await.body.contains("href=\"/forgot\""));
}

/// A tiny SMTP receiver on loopback: accepts connections one at a time and sends each
/// message's DATA on the channel.
pub async fn smtp_receiver() -> (u16, mpsc::UnboundedReceiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let (read, mut write) = socket.into_split();
            let mut lines = BufReader::new(read).lines();
            let _ = write.write_all(b"220 test ESMTP\r\n").await;
            let mut data: Option<String> = None;
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(body) = data.as_mut() {
                    if line == "." {
                        let _ = tx.send(std::mem::take(body));
                        data = None;
                        let _ = write.write_all(b"250 queued\r\n").await;
                    } else {
                        body.push_str(&line);
                        body.push('\n');
                    }
                    continue;
                }
                let verb = line.get(..4).unwrap_or_default().to_ascii_uppercase();
                let reply: &[u8] = match verb.as_str() {
                    "EHLO" | "HELO" => b"250 test\r\n",
                    "DATA" => {
                        data = Some(String::new());
                        b"354 go on\r\n"
                    }
                    "QUIT" => {
                        let _ = write.write_all(b"221 bye\r\n").await;
                        break;
                    }
                    _ => b"250 ok\r\n",
                };
                let _ = write.write_all(reply).await;
            }
        }
    });
    (port, rx)
}

#[tokio::test]
async fn a_mailed_link_resets_the_password_and_nothing_tells_who_exists() {
    let (port, mut mails) = smtp_receiver().await;
    let server = TestServer::start_with(
        Opts::new()
            .set("smtp_url", format!("smtp://127.0.0.1:{port}"))
            .set("smtp_from", "shoal <noreply@example.org>")
            .set("public_url", "https://tests.example.org"),
    )
    .await;
    add_user(&server, "alice", &["--email", "alice@example.org"]);
    let (mut alice, _) = session(&server, Some("alice")).await;

    let mut anon = Browser::new(&server);
    let form = anon.get("/forgot").await;
    assert!(form.body.contains("action=\"/forgot\""), "{}", form.body);
    let csrf = form.csrf();
    let nobody = anon
        .post(
            "/forgot",
            &[("username", "nobody@example.org"), ("csrf_token", &csrf)],
        )
        .await;
    let somebody = anon
        .post(
            "/forgot",
            &[("username", "alice@example.org"), ("csrf_token", &csrf)],
        )
        .await;
    assert_eq!((nobody.status, somebody.status), (200, 200));
    assert_eq!(
        nobody.body, somebody.body,
        "the answer tells whether the account exists"
    );
    assert!(
        somebody
            .body
            .contains("If an account has this name or address")
    );

    // Only alice's mail arrives (nobody's asked for none), addressed to her.
    let mail = tokio::time::timeout(Duration::from_secs(30), mails.recv())
        .await
        .expect("a mail within 30 s")
        .expect("mail");
    assert!(mail.contains("alice@example.org"), "{mail}");
    // And no second one: not for the unknown address, not alice's twice.
    if let Ok(second) = tokio::time::timeout(Duration::from_secs(3), mails.recv()).await {
        panic!("a second mail arrived: {second:?}");
    }
    // Undo quoted-printable soft line breaks before reading the link.
    let text = mail.replace("=\n", "").replace("=3D", "=");
    let path = path_of(&text);

    let mut b = Browser::new(&server);
    let form = b.get(&path).await;
    assert_eq!(form.status, 200, "{}", form.body);
    let csrf = form.csrf();
    let done = b
        .post(
            &path,
            &[
                ("password", NEW_PASSWORD),
                ("password2", NEW_PASSWORD),
                ("csrf_token", &csrf),
            ],
        )
        .await;
    assert!(done.body.contains("Password updated"), "{}", done.body);
    assert!(!logged_in(&mut alice).await, "the other session ended");
    let (mut again, _) = session_with(&server, Some("alice"), NEW_PASSWORD).await;
    assert!(logged_in(&mut again).await);
    assert_eq!(b.get(&path).await.status, 404, "used once");
    // The request itself is in no public log (it would tell who has an account); the use is.
    let log = stored_actions(&server, "password_reset");
    assert!(
        !log.iter()
            .any(|a| a["message"] == "reset link sent by email"),
        "{log:?}"
    );
    assert!(
        log.iter()
            .any(|a| a["message"] == "password set through a reset link"),
        "{log:?}"
    );
}
