//! Submitting tests through the web UI (`/tests/run`) over real HTTP: the login and the token
//! come first; every refusal is shown next to its field with the input kept and creates
//! nothing; a run created by the form equals one created by `/api/create_run` with the same
//! arguments; a rerun (`?id=`) pre-fills the form, and submitting it unchanged creates an
//! equivalent run.

use std::time::{Duration, Instant};

use regex::Regex;
use serde_json::{Value, json};

use crate::fleet::{PASSWORD, add_user, create_run, sha, user_cli};
use crate::harness::{Opts, TestServer};
use crate::web::{Browser, Page};

/// A browser logged in as `user`.
pub(crate) async fn logged_in<'a>(server: &'a TestServer, user: &str) -> Browser<'a> {
    let mut b = Browser::new(server);
    let token = b.get("/login").await.csrf();
    let page = b
        .post(
            "/login",
            &[
                ("username", user),
                ("password", PASSWORD),
                ("csrf_token", &token),
            ],
        )
        .await;
    assert_eq!(page.status, 302, "login {user}: {}", page.body);
    b
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#x27;", "'")
        .replace("&#39;", "'")
        .replace("&#x2f;", "/")
        .replace("&#34;", "\"")
        .replace("&#60;", "<")
        .replace("&#62;", ">")
        .replace("&#38;", "&")
        .replace("&amp;", "&")
}

fn attr(tag: &str, name: &str) -> Option<String> {
    let re = Regex::new(&format!(r#"\s{name}="([^"]*)""#)).unwrap();
    re.captures(tag).map(|c| unescape(&c[1]))
}

/// What a browser would submit from the page's `/tests/run` form: the inputs (ticked
/// checkboxes and radios only), the selected options and the text areas, in order.
pub(crate) fn form_fields(body: &str) -> Vec<(String, String)> {
    let start = body
        .find("action=\"/tests/run\"")
        .expect("the /tests/run form");
    let end = start + body[start..].find("</form>").expect("end of form");
    let form = &body[start..end];
    let tags =
        Regex::new(r#"(?s)<input[^>]*>|<select name="([^"]+)">(.*?)</select>|<textarea name="([^"]+)"[^>]*>(.*?)</textarea>"#)
            .unwrap();
    let selected = Regex::new(r#"<option value="([^"]*)" selected>"#).unwrap();
    let mut out = Vec::new();
    for c in tags.captures_iter(form) {
        if let Some(name) = c.get(1) {
            if let Some(o) = selected.captures(&c[2]) {
                out.push((name.as_str().to_string(), unescape(&o[1])));
            }
        } else if let Some(name) = c.get(3) {
            out.push((name.as_str().to_string(), unescape(&c[4])));
        } else {
            let tag = &c[0];
            let Some(name) = attr(tag, "name") else {
                continue;
            };
            let kind = attr(tag, "type").unwrap_or_default();
            if (kind == "checkbox" || kind == "radio") && !tag.contains(" checked") {
                continue;
            }
            out.push((name, attr(tag, "value").unwrap_or_default()));
        }
    }
    out
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// `fields` with `changes` applied (an empty value for a checkbox removes it).
pub(crate) fn with(fields: &[(String, String)], changes: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = fields.to_vec();
    for (name, value) in changes {
        out.retain(|(n, _)| n != name);
        out.push((name.to_string(), value.to_string()));
    }
    out
}

pub(crate) async fn post_form(b: &mut Browser<'_>, fields: &[(String, String)]) -> Page {
    let pairs: Vec<(&str, &str)> = fields
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    b.post("/tests/run", &pairs).await
}

/// The form as the page shows it, filled in with a valid SPRT test, without nets (none
/// typed, none read: no GitHub) and so confirmed as the "Create without nets" button does
/// (`confirm_no_nets=1`; see [`a_test_without_nets_is_created_only_once_confirmed`]).
async fn filled_form(b: &mut Browser<'_>) -> Vec<(String, String)> {
    with(&unconfirmed_form(b).await, &[("confirm_no_nets", "1")])
}

/// [`filled_form`] without the confirmation that it has no nets.
async fn unconfirmed_form(b: &mut Browser<'_>) -> Vec<(String, String)> {
    let page = b.get("/tests/run").await;
    assert_eq!(page.status, 200, "{}", page.body);
    with(
        &form_fields(&page.body),
        &[
            (
                "tests_repo",
                "https://github.com/official-stockfish/Stockfish",
            ),
            ("new_tag", "patch"),
            ("resolved_new", &sha('b')),
            ("resolved_base", &sha('a')),
            ("new_signature", "1234568"),
            ("base_signature", "1234567"),
            ("run-info", "a test run"),
        ],
    )
}

/// Records a net as uploaded (every net a run names must be).
pub(crate) fn record_net(server: &TestServer, name: &str) {
    let store = crate::harness::open_store(&server.data_dir).expect("open");
    let doc = json!({"_id": name, "name": name, "user": "alice", "downloads": 0});
    store
        .put(
            shoal::store::Collection::Nns,
            doc.as_object().expect("object"),
        )
        .expect("put");
}

fn run_count(server: &TestServer) -> u64 {
    let store = crate::harness::open_store(&server.data_dir).expect("open");
    store
        .count(shoal::store::Collection::Runs, &[])
        .expect("count")
}

/// A run as `/api/get_run` gives it, without what differs between two equal submissions.
async fn comparable(server: &TestServer, run: &str) -> Value {
    let (status, mut v) = server.get_json(&format!("/api/get_run/{run}")).await;
    assert_eq!(status, 200, "{v}");
    let m = v.as_object_mut().expect("a run");
    for key in ["_id", "start_time", "last_updated"] {
        m.remove(key);
    }
    v
}

/// The new run's id from the answer to a successful submission.
fn created(page: &Page) -> String {
    assert_eq!(page.status, 302, "{}", page.body);
    let id = page
        .location
        .strip_prefix("/tests/view/")
        .and_then(|r| r.strip_suffix("?follow=1"))
        .unwrap_or_else(|| panic!("a run page: {}", page.location));
    id.to_string()
}

#[tokio::test]
async fn submitting_needs_a_login_a_token_and_an_active_account() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "bob", &[]);

    // Anonymous: to the login page, which comes back here.
    let mut anon = Browser::new(&server);
    let page = anon.get("/tests/run").await;
    assert_eq!(page.status, 302);
    assert_eq!(page.location, "/login?next=/tests/run");
    let page = anon.get(&format!("/tests/run?id={}", "a".repeat(24))).await;
    assert_eq!(
        page.location,
        format!("/login?next=/tests/run%3Fid%3D{}", "a".repeat(24))
    );

    let mut alice = logged_in(&server, "alice").await;
    let form = filled_form(&mut alice).await;
    let page = alice.get("/tests/run").await;
    assert!(page.body.contains("href=\"/tests/run\">New test</a>"));
    assert!(
        page.body
            .contains("<button type=\"submit\" name=\"submit-test\"")
    );

    // An anonymous visitor's valid token: still to the login page, nothing created.
    let anon_token = anon.get("/login").await.csrf();
    let page = post_form(&mut anon, &with(&form, &[("csrf_token", &anon_token)])).await;
    assert_eq!(page.status, 302);
    assert_eq!(page.location, "/login?next=/tests/run");
    // A forged, missing or another session's token: 403, nothing created.
    for token in ["forged", "", anon_token.as_str()] {
        let page = post_form(&mut alice, &with(&form, &[("csrf_token", token)])).await;
        assert_eq!(page.status, 403, "{token:?}");
        assert!(page.body.contains("security token"));
    }
    let page = alice.post("/tests/run", &[]).await;
    assert_eq!(page.status, 403);
    assert_eq!(run_count(&server), 0);

    // An unknown or malformed rerun id is a 404 page.
    for id in ["b".repeat(24), "nope".into()] {
        let page = alice.get(&format!("/tests/run?id={id}")).await;
        assert_eq!(page.status, 404, "{id}");
    }

    // A pending or blocked account holds no session: the form is gone and a post creates
    // nothing (the server sees the change within its 2-second user cache).
    let mut bob = logged_in(&server, "bob").await;
    let bob_form = filled_form(&mut bob).await;
    for (who, browser, form, flag) in [
        ("alice", &mut alice, &form, "--pending"),
        ("bob", &mut bob, &bob_form, "--block"),
    ] {
        user_cli(&server, &["set", who, flag]);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let page = browser.get("/tests/run").await;
            if page.status == 302 {
                assert_eq!(page.location, "/tests", "{who}");
                break;
            }
            assert!(Instant::now() < deadline, "{who}'s session never ended");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let page = post_form(browser, form).await;
        assert!(
            page.status == 403 || page.location.starts_with("/login"),
            "{who}: {} {}",
            page.status,
            page.location
        );
    }
    assert_eq!(run_count(&server), 0);
}

#[tokio::test]
async fn each_refusal_is_shown_next_to_its_field_with_the_input_kept() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    let mut alice = logged_in(&server, "alice").await;
    let form = filled_form(&mut alice).await;

    // (changes, the field where the message shows, the message)
    type Case<'a> = (Vec<(&'a str, &'a str)>, &'a str, &'a str);
    let cases: Vec<Case> = vec![
        (vec![("tc", "ten")], "tc", "invalid time control \"ten\""),
        (
            vec![("odds", "on"), ("new_tc", "1+x")],
            "new_tc",
            "invalid time control \"1+x\"",
        ),
        (
            vec![("resolved_new", "xyz")],
            "resolved_new",
            "The test commit must be a 40-digit hexadecimal commit SHA",
        ),
        (
            vec![("base_signature", "12a")],
            "base_signature",
            "The base bench must be the bench node count (digits)",
        ),
        (
            vec![("new_tag", " ")],
            "new_tag",
            "The test branch must not be empty",
        ),
        (
            vec![("new-options", "Hash16")],
            "new-options",
            "option \"Hash16\" is not of the form key=value",
        ),
        (
            vec![("tests_repo", "https://gitlab.com/x/y")],
            "tests_repo",
            "must be https://github.com/<owner>/<repo>",
        ),
        (
            vec![("new_nets", "nn-bad.nnue")],
            "new_nets",
            "is not a net name",
        ),
        (
            vec![("threads", "two")],
            "threads",
            "Threads must be an integer",
        ),
        (
            vec![("threads", "0")],
            "threads",
            "Threads must be between 1 and 1024",
        ),
        (
            vec![("throughput", "0")],
            "throughput",
            "Throughput must be in (0, 1000]",
        ),
        (
            vec![("priority", "1.5")],
            "priority",
            "Priority must be an integer",
        ),
        (
            vec![("book", "nope.epd")],
            "book",
            "unknown book \"nope.epd\"",
        ),
        (
            vec![("book-depth", "-1")],
            "book-depth",
            "The book depth must be a non-negative integer",
        ),
        (
            vec![("bounds", "custom"), ("sprt_elo0", "3"), ("sprt_elo1", "1")],
            "bounds",
            "SPRT bounds must satisfy elo0 < elo1",
        ),
        (
            vec![("bounds", "custom"), ("sprt_elo0", "zero")],
            "sprt_elo0",
            "elo0 must be a number",
        ),
        (
            vec![("stop_rule", "games"), ("num-games", "1500")],
            "num-games",
            "The number of games must be 1000 to 3200000, a multiple of 1000",
        ),
        (
            vec![("stop_rule", "games"), ("num-games", "many")],
            "num-games",
            "Number of games must be a whole number",
        ),
        (
            vec![
                ("stop_rule", "spsa"),
                ("num-games", "2000"),
                ("spsa_raw_params", "Tempo,1,0"),
            ],
            "spsa_raw_params",
            "line 1: expected 6 comma-separated fields, found 3",
        ),
        (
            vec![
                ("stop_rule", "spsa"),
                ("num-games", "2000"),
                ("spsa_raw_params", "Tempo,10,0,50,2,0.002"),
                ("spsa_alpha", "-1"),
            ],
            "spsa_alpha",
            "SPSA setting alpha must be a finite number >= 0",
        ),
        (
            vec![("checkbox-arch-filter", "on"), ("arch-filter", "(")],
            "arch-filter",
            "Invalid arch filter: ",
        ),
        (
            vec![("checkbox-arch-filter", "on"), ("arch-filter", "^sparc$")],
            "arch-filter",
            "filter ^sparc$ has no compatible arches",
        ),
        (
            vec![("stop_rule", "forever")],
            "stop_rule",
            "Choose a stop rule",
        ),
    ];
    let error = Regex::new(r#"id="error-([^"]+)" role="alert">([^<]*)</span>"#).unwrap();
    for (changes, at, message) in &cases {
        let sent = with(&form, changes);
        let page = post_form(&mut alice, &sent).await;
        assert_eq!(page.status, 200, "{changes:?}: {}", page.location);
        assert!(
            page.body.contains("The test was not submitted"),
            "{changes:?}"
        );
        let shown: Vec<(String, String)> = error
            .captures_iter(&page.body)
            .map(|c| (c[1].to_string(), unescape(&c[2])))
            .collect();
        assert_eq!(shown.len(), 1, "{changes:?}: {shown:?}");
        assert_eq!(shown[0].0, *at, "{changes:?}: {shown:?}");
        assert!(shown[0].1.contains(message), "{changes:?}: {shown:?}");
        // The form comes back as it was sent.
        let back = form_fields(&page.body);
        for (name, value) in changes {
            if *name == "stop_rule" && *value == "forever" {
                continue; // not one of the radio buttons
            }
            assert_eq!(field(&back, name), Some(*value), "{name} kept");
        }
        assert_eq!(field(&back, "new_tag"), field(&sent, "new_tag"));
    }
    assert_eq!(run_count(&server), 0, "no refused form created a run");

    // The corrected form is accepted; the run page says it waits for approval and offers a
    // rerun.
    let page = post_form(&mut alice, &form).await;
    let run = created(&page);
    assert_eq!(run_count(&server), 1);
    let page = alice.get(&page.location).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("Please wait for approval."),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains(&format!("href=\"/tests/run?id={run}\">"))
            && page.body.contains("</svg> Reschedule</a>")
    );
}

/// The API's arguments for the form [`filled_form`] gives, with `extra` merged in.
fn api_args(extra: Value) -> Value {
    let mut args = json!({
        "base_tag": "master", "new_tag": "patch",
        "resolved_base": sha('a'), "resolved_new": sha('b'),
        "base_signature": "1234567", "new_signature": "1234568",
        "base_options": "Hash=16", "new_options": "Hash=16",
        "tc": "10+0.1", "book": "UHO_Lichess_4852_v1.epd", "book_depth": "8", "threads": 1,
        "tests_repo": "https://github.com/official-stockfish/Stockfish",
        "info": "a test run",
    });
    let m = args.as_object_mut().unwrap();
    for (k, v) in extra.as_object().unwrap() {
        m.insert(k.clone(), v.clone());
    }
    args
}

#[tokio::test]
async fn a_run_from_the_form_equals_one_from_the_api() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    record_net(&server, "nn-0123456789ab.nnue");
    let mut alice = logged_in(&server, "alice").await;
    let form = filled_form(&mut alice).await;
    let params = "Tempo,10,0,50,2,0.002\nOther,5,0,20,1,0.002";
    let cases: Vec<(Vec<(&str, &str)>, Value)> = vec![
        (vec![], json!({"sprt": {"elo0": 0.0, "elo1": 2.0}})),
        (
            vec![
                ("bounds", "custom"),
                ("sprt_elo0", "-1.75"),
                ("sprt_elo1", "0.25"),
                ("tc", "60+0.6"),
                ("new-options", "Hash=64"),
                ("base-options", "Hash=64"),
            ],
            json!({"sprt": {"elo0": -1.75, "elo1": 0.25, "elo_model": "normalized"},
                   "tc": "60+0.6", "new_options": "Hash=64", "base_options": "Hash=64"}),
        ),
        (
            vec![
                ("stop_rule", "games"),
                ("num-games", "4000"),
                ("odds", "on"),
                ("new_tc", "20+0.2"),
                ("auto-purge", "on"),
                ("adjudication", "on"),
                ("checkbox-arch-filter", "on"),
                ("arch-filter", "avx2"),
                ("checkbox-compiler", "on"),
                ("compiler", "g++"),
                ("priority", "-1"),
                ("throughput", "50"),
                ("new_nets", "nn-0123456789ab.nnue"),
                ("msg_new", "Simplify"),
                ("threads", "2"),
            ],
            json!({"num_games": 4000, "new_tc": "20+0.2", "auto_purge": true,
                   "adjudication": false, "arch_filter": "avx2", "compiler": "g++",
                   "priority": -1, "throughput": 50, "new_nets": ["nn-0123456789ab.nnue"],
                   "msg_new": "Simplify", "threads": 2}),
        ),
        (
            vec![
                ("stop_rule", "spsa"),
                ("num-games", "20000"),
                ("spsa_raw_params", params),
                ("spsa_A", "0.2"),
            ],
            // SPSA plays the test engine on both sides: the form copies its signature.
            json!({"num_games": 20000, "base_signature": "1234568",
                   "spsa": {"raw_params": params, "a_ratio": 0.2, "alpha": 0.602, "gamma": 0.101}}),
        ),
    ];
    for (changes, extra) in cases {
        let page = post_form(&mut alice, &with(&form, &changes)).await;
        let from_form = created(&page);
        let from_api = create_run(&server, "alice", api_args(extra)).await;
        assert_eq!(
            comparable(&server, &from_form).await,
            comparable(&server, &from_api).await,
            "{changes:?}"
        );
    }
}

#[tokio::test]
async fn a_rerun_prefills_the_form_and_resubmits_an_equivalent_run() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "bob", &[]);
    record_net(&server, "nn-0123456789ab.nnue");
    let mut bob = logged_in(&server, "bob").await;
    let params = "Tempo,10,0,50,2,0.002";
    let runs = [
        // An LTC SPRT: the info got its "LTC: " prefix, which the rerun keeps once.
        api_args(json!({"sprt": {"elo0": 0.5, "elo1": 2.5}, "tc": "60+0.6",
                        "new_options": "Hash=64 Threads=1", "base_options": "Hash=64"})),
        api_args(
            json!({"num_games": 6000, "new_tc": "20+0.2", "auto_purge": true,
                        "adjudication": false, "arch_filter": "avx2", "compiler": "g++",
                        "priority": 2, "throughput": 75, "base_nets": ["nn-0123456789ab.nnue"],
                        "msg_base": "Base subject", "msg_new": "New subject",
                        "master_repo": "https://github.com/official-stockfish/Stockfish"}),
        ),
        api_args(json!({"num_games": 40000, "base_signature": "1234568",
                        "spsa": {"raw_params": params, "a_ratio": 0.1}})),
    ];
    for args in runs {
        let old = create_run(&server, "alice", args.clone()).await;
        let page = bob.get(&format!("/tests/run?id={old}")).await;
        assert_eq!(page.status, 200, "{}", page.body);
        assert!(page.body.contains("Reschedule test"));
        let fields = form_fields(&page.body);
        assert_eq!(field(&fields, "rescheduled_from"), Some(old.as_str()));
        assert_eq!(field(&fields, "tc"), args["tc"].as_str());
        assert_eq!(field(&fields, "new_tag"), Some("patch"));
        assert_eq!(field(&fields, "resolved_new"), Some(sha('b').as_str()));
        assert!(
            page.body
                .contains("name=\"new_tag\" value=\"patch\" readonly")
        );

        // A rerun of a run without nets on a side asks first too: confirmed here.
        let page = post_form(&mut bob, &with(&fields, &[("confirm_no_nets", "1")])).await;
        let new = created(&page);
        let mut was = comparable(&server, &old).await;
        let mut now = comparable(&server, &new).await;
        assert_eq!(now["rescheduled_from"], json!(old));
        // The rerun is bob's: the rest is the same.
        assert_eq!(now["args"]["username"], "bob");
        for run in [&mut was, &mut now] {
            let m = run.as_object_mut().unwrap();
            m.remove("rescheduled_from");
            m["args"].as_object_mut().unwrap().remove("username");
        }
        assert_eq!(was, now, "{args}");
    }
    assert_eq!(run_count(&server), 6);

    // A preset on top of a rerun, and on the empty form.
    let page = bob.get("/tests/run?preset=ltc").await;
    let fields = form_fields(&page.body);
    assert_eq!(field(&fields, "tc"), Some("60+0.6"));
    assert_eq!(field(&fields, "new-options"), Some("Hash=64"));
    assert_eq!(field(&fields, "bounds"), Some("standard_ltc"));
    // The one test-type control: buttons in the form, the applied one marked.
    assert!(
        page.body
            .contains("name=\"preset\" value=\"ltc\" formnovalidate class=\"secondary current\""),
        "{}",
        page.body
    );
    let page = bob.get("/tests/run?preset=nope").await;
    assert!(page.body.contains("Unknown preset"));
}

/// The warnings (`id="warning-<field>"`) a page shows, by field.
fn warnings(body: &str) -> Vec<(String, String)> {
    Regex::new(r#"id="warning-([^"]+)" role="status">([^<]*)</span>"#)
        .unwrap()
        .captures_iter(body)
        .map(|c| (c[1].to_string(), unescape(&c[2])))
        .collect()
}

#[tokio::test]
async fn a_test_without_nets_is_created_only_once_confirmed() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    record_net(&server, "nn-0123456789ab.nnue");
    let mut alice = logged_in(&server, "alice").await;
    let form = unconfirmed_form(&mut alice).await;
    let button = "<button type=\"submit\" name=\"confirm_no_nets\" value=\"1\"";

    // No nets on either side (none typed, none read: GitHub is not reachable): the form
    // comes back with a warning at each nets field and the button, nothing created.
    let page = post_form(&mut alice, &form).await;
    assert_eq!(page.status, 200, "{}", page.location);
    assert_eq!(
        run_count(&server),
        0,
        "nothing created before the confirmation"
    );
    assert!(
        page.body.contains("The test was not created yet"),
        "{}",
        page.body
    );
    assert!(page.body.contains(button), "{}", page.body);
    assert!(
        !page.body.contains("id=\"error-"),
        "a warning, not a refusal"
    );
    let shown = warnings(&page.body);
    assert_eq!(
        shown.iter().map(|(f, _)| f.as_str()).collect::<Vec<_>>(),
        ["new_nets", "base_nets"],
        "{shown:?}"
    );
    assert!(shown[0].1.starts_with("No test nets"), "{shown:?}");
    assert!(shown[1].1.starts_with("No base nets"), "{shown:?}");
    assert!(
        page.body.contains("<details class=\"advanced\" open>"),
        "the nets fields shown"
    );
    // The form comes back as sent; posted again with the button, the run is created.
    let back = form_fields(&page.body);
    for name in [
        "new_tag",
        "resolved_new",
        "resolved_base",
        "tests_repo",
        "tc",
    ] {
        assert_eq!(field(&back, name), field(&form, name), "{name} kept");
    }
    let run = created(&post_form(&mut alice, &with(&back, &[("confirm_no_nets", "1")])).await);
    assert_eq!(run_count(&server), 1);
    let (_, v) = server.get_json(&format!("/api/get_run/{run}")).await;
    assert_eq!(v["args"]["new_nets"], json!([]), "{v}");

    // Nets on one side only: the warning at the other side alone.
    let page = post_form(
        &mut alice,
        &with(&form, &[("new_nets", "nn-0123456789ab.nnue")]),
    )
    .await;
    assert_eq!(page.status, 200, "{}", page.location);
    let shown = warnings(&page.body);
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(shown[0].0, "base_nets");
    assert!(shown[0].1.starts_with("No base nets"), "{shown:?}");
    assert_eq!(run_count(&server), 1);

    // Nets on both sides: created at once, no question asked.
    let both = with(
        &form,
        &[
            ("new_nets", "nn-0123456789ab.nnue"),
            ("base_nets", "nn-0123456789ab.nnue"),
        ],
    );
    created(&post_form(&mut alice, &both).await);
    assert_eq!(run_count(&server), 2);

    // A refusal still comes first: the warning only before a run that would be created.
    let page = post_form(&mut alice, &with(&form, &[("tc", "ten")])).await;
    assert!(page.body.contains("id=\"error-tc\""), "{}", page.body);
    assert!(warnings(&page.body).is_empty());
    assert_eq!(run_count(&server), 2);
}

#[tokio::test]
async fn commits_by_hand_with_the_tests_repository_left_empty() {
    // Issue 37: the field's hint says it may be left empty (the profile's repository, else
    // the official one), and a test whose commits are typed by hand was refused
    // (`The tests repository "" must be …`).
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    let mut alice = logged_in(&server, "alice").await;
    let form = with(&filled_form(&mut alice).await, &[("tests_repo", "")]);

    // No repository in the profile: the official one.
    let run = created(&post_form(&mut alice, &form).await);
    let (_, v) = server.get_json(&format!("/api/get_run/{run}")).await;
    assert_eq!(
        v["args"]["tests_repo"], "https://github.com/official-stockfish/Stockfish",
        "{v}"
    );

    // A repository in the profile: that one.
    let token = alice.get("/user").await.csrf();
    let page = alice
        .post(
            "/user",
            &[
                ("user", "alice"),
                ("email", "alice@example.org"),
                ("old_password", PASSWORD),
                ("password", ""),
                ("password2", ""),
                ("tests_repo", "https://github.com/alice/Stockfish"),
                ("csrf_token", &token),
            ],
        )
        .await;
    assert!(page.status == 302 || page.status == 200, "{}", page.body);
    // The new form starts from the profile's repository once the server sees the change.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let page = alice.get("/tests/run").await;
        if field(&form_fields(&page.body), "tests_repo")
            == Some("https://github.com/alice/Stockfish")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the profile's repository never showed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let form = with(&filled_form(&mut alice).await, &[("tests_repo", "")]);
    let run = created(&post_form(&mut alice, &form).await);
    let (_, v) = server.get_json(&format!("/api/get_run/{run}")).await;
    assert_eq!(
        v["args"]["tests_repo"], "https://github.com/alice/Stockfish",
        "{v}"
    );
    assert_eq!(run_count(&server), 2);
}

#[tokio::test]
async fn a_secondary_shows_the_form_but_creates_nothing() {
    // Port 0 is not primary_port 1: a secondary.
    let server = TestServer::start_with(Opts::new().set("primary_port", 1)).await;
    add_user(&server, "alice", &[]);
    let mut alice = logged_in(&server, "alice").await;
    let form = filled_form(&mut alice).await;
    let page = post_form(&mut alice, &with(&form, &[("csrf_token", "forged")])).await;
    assert_eq!(page.status, 403, "the token is checked first");
    let page = post_form(&mut alice, &form).await;
    assert_eq!(page.status, 503);
    assert!(page.body.contains("Primary instance required."));
    assert_eq!(run_count(&server), 0);
}

#[tokio::test]
async fn arch_filters_in_fishtests_regex_dialect() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    // Look-ahead, as Python's `re` takes it.
    let id = create_run(
        &server,
        "alice",
        api_args(json!({"num_games": 4000, "arch_filter": "^x86-64-(?!vnni|avx512)"})),
    )
    .await;
    let (_, run) = server.get_json(&format!("/api/get_run/{id}")).await;
    assert_eq!(run["args"]["arch_filter"], "^x86-64-(?!vnni|avx512)");
    // One that does not compile, or matches no arch, is refused and creates nothing.
    for (filter, says) in [
        ("(?<=x86", "Invalid arch filter: "),
        (
            "^(?!x86|arm|ppc|e2k|apple|general|riscv|loongarch)",
            "has no compatible arches",
        ),
    ] {
        let (status, v) = server
            .post_json(
                "/api/create_run",
                &json!({"username": "alice", "password": PASSWORD,
                        "args": api_args(json!({"num_games": 4000, "arch_filter": filter}))}),
            )
            .await;
        assert_eq!(status, 400, "{filter}: {v}");
        assert!(
            v["error"].as_str().unwrap_or_default().contains(says),
            "{filter}: {v}"
        );
    }
    assert_eq!(run_count(&server), 1);
}
