//! The run page through real HTTP: `/tests/view/{id}` after a scripted worker's update, its
//! two fragments, the HTML 404, the SPRT numbers against `/api/get_elo`, and the control
//! buttons per viewer.

use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::json;

use crate::fleet::{
    PASSWORD, Totals, Worker, add_user, approve, create_run, fixed_args, sprt_args,
};
use crate::harness::TestServer;

/// A browser that keeps the session cookie and follows nothing.
struct Browser<'a> {
    server: &'a TestServer,
    client: reqwest::Client,
    cookie: Option<String>,
}

impl<'a> Browser<'a> {
    fn new(server: &'a TestServer) -> Self {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30))
            .build()
            .expect("client");
        Browser {
            server,
            client,
            cookie: None,
        }
    }

    async fn send(&mut self, req: reqwest::RequestBuilder) -> (u16, String) {
        let req = match &self.cookie {
            Some(c) => req.header("cookie", c.clone()),
            None => req,
        };
        let r = req.send().await.expect("request");
        let status = r.status().as_u16();
        if let Some(set) = r.headers().get("set-cookie").and_then(|v| v.to_str().ok()) {
            self.cookie = Some(set.split(';').next().unwrap_or_default().to_string());
        }
        (status, r.text().await.expect("body"))
    }

    /// The page, with the results box's number markup (`<span data-field>`) reduced to its
    /// text so that the lines read as people see them.
    async fn get(&mut self, path: &str) -> (u16, String) {
        let req = self.client.get(self.server.url(path));
        let (status, body) = self.send(req).await;
        let numbers =
            regex::Regex::new(r#"<span data-field="[^"]*"(?: data-scale="\d+")?>([^<]*)</span>"#)
                .expect("regex");
        (status, numbers.replace_all(&body, "$1").into_owned())
    }

    async fn login(&mut self, user: &str) {
        let (_, body) = self.get("/login").await;
        let marker = "name=\"csrf_token\" value=\"";
        let at = body.find(marker).expect("token") + marker.len();
        let token = body[at..at + body[at..].find('"').expect("end")].to_string();
        let req = self.client.post(self.server.url("/login")).form(&[
            ("username", user),
            ("password", PASSWORD),
            ("csrf_token", &token),
        ]);
        let (status, body) = self.send(req).await;
        assert_eq!(status, 302, "login {user}: {body}");
    }
}

fn has_form(body: &str, action: &str) -> bool {
    body.contains(&format!("action=\"{action}\""))
}

#[tokio::test]
async fn the_run_page_shows_results_stats_tasks_and_controls() {
    let server = TestServer::start().await;
    add_user(&server, "owner", &[]);
    add_user(&server, "boss", &["--approver"]);
    let id = create_run(&server, "owner", sprt_args(0.0, 2.0)).await;
    let view = format!("/tests/view/{id}");

    // Anonymous: the page, no buttons, the live markers and the script.
    let mut anon = Browser::new(&server);
    let (status, body) = anon.get(&view).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("patch vs master"), "{body}");
    assert!(body.contains("pending approval"), "{body}");
    assert!(body.contains("/commit/aaaaaaaaaa"), "{body}");
    assert!(body.contains("/compare/aaaa"), "{body}");
    assert!(body.contains(&format!("data-refresh=\"/tests/view/{id}/detail\"")));
    assert!(body.contains(&format!("data-refresh=\"/tests/tasks/{id}\"")));
    assert!(body.contains("src=\"/static/refresh.js?v="), "{body}");
    // Link previews: the run's title, its status and results box.
    let title = regex::Regex::new(r#"<meta property="og:title" content="([^"]*)">"#).unwrap();
    let title = &title.captures(&body).expect("an og:title")[1];
    assert!(title.contains("patch vs master"), "{title}");
    let og = regex::Regex::new(r#"<meta property="og:description" content="([^"]*)">"#).unwrap();
    let description = &og.captures(&body).expect("an og:description")[1];
    assert!(
        description.starts_with("pending · ") && description.contains("Total: 0"),
        "{description}"
    );
    for action in [
        "/tests/approve",
        "/tests/stop",
        "/tests/purge",
        "/tests/delete",
    ] {
        assert!(!has_form(&body, action), "anonymous sees {action}");
    }
    let (status, js) = anon.get("/static/refresh.js").await;
    assert_eq!(status, 200);
    assert!(js.contains("data-refresh"));

    // An approver who does not own the run may approve it.
    let mut boss = Browser::new(&server);
    boss.login("boss").await;
    let (_, body) = boss.get(&view).await;
    assert!(has_form(&body, "/tests/approve"), "{body}");
    assert!(body.contains(&format!("name=\"run-id\" value=\"{id}\"")));
    assert!(body.contains("name=\"csrf_token\""));

    // The owner gets Stop (and Delete) but never Approve.
    let mut owner = Browser::new(&server);
    owner.login("owner").await;
    let (_, body) = owner.get(&view).await;
    assert!(has_form(&body, "/tests/stop"), "{body}");
    assert!(has_form(&body, "/tests/delete"), "{body}");
    assert!(!has_form(&body, "/tests/approve"), "{body}");
    assert!(!has_form(&body, "/tests/purge"), "{body}");

    // A worker plays 64 game pairs (a multiple of the SPRT batch) and reports them once.
    approve(&server, "boss", &id).await;
    let worker = Worker::new("owner", 4, 7);
    let reply = worker.request_task(&server).await;
    assert_eq!(reply["run"]["_id"].as_str(), Some(id.as_str()), "{reply}");
    let task_id = reply["task_id"].as_u64().expect("task id");
    let mut rng = StdRng::seed_from_u64(11);
    let mut totals = Totals::default();
    for _ in 0..64 {
        totals.play_pair(&mut rng, [0.05, 0.2, 0.45, 0.22, 0.08]);
    }
    let (status, v) = worker
        .call(
            &server,
            "/api/update_task",
            json!({"run_id": id, "task_id": task_id, "stats": totals.json()}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["task_alive"], true, "{v}");

    let (status, body) = anon.get(&view).await;
    assert_eq!(status, 200);
    let wld = format!(
        "W: {} L: {} D: {}",
        totals.wins, totals.losses, totals.draws
    );
    assert!(body.contains(&wld), "{wld} in {body}");
    let p = totals.pentanomial;
    let penta = format!("{}, {}, {}, {}, {}", p[0], p[1], p[2], p[3], p[4]);
    assert!(body.contains(&penta), "{penta} in {body}");

    // The SPRT numbers are those of /api/get_elo.
    let (status, elo) = server.get_json(&format!("/api/get_elo/{id}")).await;
    assert_eq!(status, 200, "{elo}");
    let e = &elo["elo"];
    let f = |k: &str| e[k].as_f64().unwrap_or_else(|| panic!("{k} in {elo}"));
    let llr = format!("LLR: {:.2} ({:.2},{:.2})", f("LLR"), f("a"), f("b"));
    let ci = e["ci"].as_array().expect("ci");
    let elo_text = format!(
        "Elo: {:.2} [{:.2}, {:.2}] (95%)",
        f("elo"),
        ci[0].as_f64().expect("lo"),
        ci[1].as_f64().expect("hi")
    );
    let los = format!("LOS: {:.1}%", f("LOS") * 100.0);
    for want in [&llr, &elo_text, &los] {
        assert!(body.contains(want.as_str()), "{want} in {body}");
    }
    assert!(body.contains("&#60;0.00,2.00&#62;"), "elo0/elo1 in {body}");

    // The tasks table lists the worker, active.
    assert!(body.contains("owner-4cores-"), "{body}");
    assert!(body.contains("task-active"), "{body}");

    // The fragments: the same parts, without the layout.
    let (status, detail) = anon.get(&format!("{view}/detail")).await;
    assert_eq!(status, 200, "{detail}");
    assert!(detail.contains(&llr) && detail.contains(&wld), "{detail}");
    assert!(
        !detail.contains("<html") && !detail.contains("topbar"),
        "{detail}"
    );
    let (status, tasks) = anon.get(&format!("/tests/tasks/{id}")).await;
    assert_eq!(status, 200, "{tasks}");
    assert!(tasks.contains("owner-4cores-"), "{tasks}");
    assert!(tasks.contains(&format!("{} / ", totals.games())), "{tasks}");
    assert!(
        !tasks.contains("<html") && !tasks.contains("topbar"),
        "{tasks}"
    );

    // Once approved, the approver no longer gets Approve; the owner still gets Stop.
    let (_, body) = boss.get(&view).await;
    assert!(!has_form(&body, "/tests/approve"), "{body}");
    assert!(has_form(&body, "/tests/stop"), "{body}");
}

#[tokio::test]
async fn an_unknown_run_is_the_html_404_page() {
    let server = TestServer::start().await;
    let mut b = Browser::new(&server);
    for path in [
        "/tests/view/0123456789abcdef01234567",
        "/tests/view/not-an-id",
        "/tests/view/0123456789abcdef01234567/detail",
        "/tests/tasks/0123456789abcdef01234567",
    ] {
        let r = b
            .client
            .get(server.url(path))
            .send()
            .await
            .expect("request");
        assert_eq!(r.status().as_u16(), 404, "{path}");
        let ct = r
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        assert!(ct.starts_with("text/html"), "{path}: {ct}");
        let body = r.text().await.expect("body");
        assert!(body.contains("Page not found"), "{path}: {body}");
    }
    let (status, _) = b.get("/tests").await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_fixed_games_spsa_run_shows_its_parameters_and_no_sprt() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    let mut args = fixed_args(4000);
    args["spsa"] = json!({
        "raw_params": "Alpha,50,0,100,5,0.002\nBeta,-20,-100,100,8,0.002",
    });
    let id = create_run(&server, "alice", args).await;
    let mut b = Browser::new(&server);
    let (status, body) = b.get(&format!("/tests/view/{id}")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("SPSA parameters"), "{body}");
    assert!(body.contains("iteration 0 / 2000"), "{body}");
    for cell in [
        "<td>Alpha</td><td>50.00</td><td>50</td><td>0</td><td>100</td>",
        "<td>Beta</td><td>-20.00</td><td>-20</td><td>-100</td><td>100</td>",
    ] {
        assert!(body.contains(cell), "{cell} in {body}");
    }
    assert!(body.contains("0/4000 games played"), "{body}");
    assert!(!body.contains("LLR:"), "{body}");
    assert!(body.contains("No tasks yet"), "{body}");
}

#[tokio::test]
async fn the_owner_gets_a_modify_form_with_the_runs_values() {
    let server = TestServer::start().await;
    add_user(&server, "owner", &[]);
    add_user(&server, "other", &[]);
    let id = create_run(&server, "owner", crate::fleet::fixed_args(3000)).await;
    let view = format!("/tests/view/{id}");
    let mut anon = Browser::new(&server);
    let (_, body) = anon.get(&view).await;
    assert!(
        !has_form(&body, "/tests/modify"),
        "anonymous sees no modify form"
    );
    let mut other = Browser::new(&server);
    other.login("other").await;
    let (_, body) = other.get(&view).await;
    assert!(
        !has_form(&body, "/tests/modify"),
        "another user sees no modify form"
    );
    let mut owner = Browser::new(&server);
    owner.login("owner").await;
    let (status, body) = owner.get(&view).await;
    assert_eq!(status, 200, "{body}");
    assert!(has_form(&body, "/tests/modify"), "{body}");
    assert!(
        body.contains(&format!("name=\"run\" value=\"{id}\"")),
        "{body}"
    );
    assert!(body.contains("name=\"num-games\""), "{body}");
    assert!(body.contains("value=\"3000\""), "{body}");
    assert!(body.contains("name=\"csrf_token\""), "{body}");
}

#[tokio::test]
async fn warnings_links_and_the_last_fragment() {
    let server = TestServer::start().await;
    add_user(&server, "owner", &[]);
    add_user(&server, "boss", &["--approver"]);
    let mut args = fixed_args(1000);
    args["throughput"] = 200.into();
    args["priority"] = 1.into();
    args["new_options"] = "Hash=16 Threads=1".into();
    args["base_options"] = "Threads=1 Hash=8".into();
    let odd = create_run(&server, "owner", args).await;
    let plain = create_run(&server, "owner", fixed_args(1000)).await;

    let mut boss = Browser::new(&server);
    boss.login("boss").await;
    let (status, body) = boss.get(&format!("/tests/view/{odd}")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("1000 games - patch vs master"), "{body}");
    for w in [
        "Warning: throughput exceeds the normal limit",
        "Warning: priority exceeds the normal limit",
        "Warning: base options differ from new options",
    ] {
        assert!(body.contains(w), "{w}: {body}");
    }
    assert!(
        body.contains("class=\"button warn\"><svg"),
        "amber with warnings"
    );
    assert!(body.contains(&format!("href=\"/actions?run_id={odd}\"")));
    assert!(body.contains(&format!("href=\"/tests/stats/{odd}\"")));
    assert!(
        body.contains(&format!("href=\"/tests/run?id={odd}\"")),
        "Reschedule"
    );
    assert!(body.contains("Tasks (0 active worker(s) with 0 core(s))"));
    assert!(body.contains(">pending</span>"), "the status label");

    // Options in another order are the same options: no warning, a green Approve.
    let mut same = fixed_args(1000);
    same["new_options"] = "Hash=8 Threads=1".into();
    same["base_options"] = "Threads=1 Hash=8".into();
    let same = create_run(&server, "owner", same).await;
    let (_, body) = boss.get(&format!("/tests/view/{same}")).await;
    assert!(!body.contains("Warning:"), "{body}");
    assert!(body.contains("class=\"button ok\"><svg") && body.contains("</svg> Approve</button>"));

    // The fragments answer 200 while the run is unfinished, 286 (stop polling) once it is.
    let (status, _) = boss.get(&format!("/tests/view/{plain}/detail")).await;
    assert_eq!(status, 200);
    let (status, _) = boss.get(&format!("/tests/tasks/{plain}")).await;
    assert_eq!(status, 200);
    approve(&server, "boss", &plain).await;
    let mut w = Worker::new("owner", 8, 1);
    for _ in 0..20 {
        let reply = w.request_task(&server).await;
        if reply.get("task_waiting").is_some() {
            break;
        }
        w.play(&server, &reply, 1000, [0.05, 0.2, 0.5, 0.2, 0.05])
            .await;
    }
    let (status, body) = boss.get(&format!("/tests/view/{plain}/detail")).await;
    assert_eq!(status, 286, "{body}");
    assert!(body.contains("Total: 1000"), "{body}");
    let (status, _) = boss.get(&format!("/tests/tasks/{plain}")).await;
    assert_eq!(status, 286);
    let (_, body) = boss.get(&format!("/tests/view/{plain}")).await;
    assert!(
        !body.contains("data-refresh"),
        "a finished run's page does not poll"
    );
}
