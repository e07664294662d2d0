//! The statistics pages through real HTTP: `/tests/stats/{id}` (page and live fragment),
//! `/tests/live_elo/{id}` and its update fragment, the SVG charts under `/tests/chart/`, and
//! `/sprt_calc`, for an SPRT, a fixed-games and an SPSA run; the numbers against
//! `/api/get_elo` and `shoal::stats`; the run's trajectory as a scripted worker plays
//! (growing, bounded, kept across a restart).

use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::{Value, json};

use crate::fleet::{
    PASSWORD, Totals, Worker, add_user, approve, create_run, fixed_args, sprt_args, stored_run,
};
use crate::harness::{Opts, TestServer};
use crate::web::{Browser, Page};
use shoal::rundb::trajectory::MAX_POINTS;

const EVEN: [f64; 5] = [0.05, 0.2, 0.5, 0.2, 0.05];

/// A minimal well-formedness check of an SVG document: one `<svg>` root with the SVG
/// namespace, every element closed in order, no script.
fn assert_valid_svg(svg: &str) {
    let body = svg.trim();
    let body = body.strip_prefix("<?xml").map_or(body, |rest| {
        rest.split_once("?>").map_or(rest, |(_, r)| r.trim())
    });
    assert!(
        body.starts_with("<svg"),
        "not an svg root: {}",
        &body[..body.len().min(80)]
    );
    assert!(body.contains("xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(
        !body.to_ascii_lowercase().contains("<script"),
        "script in svg"
    );
    let mut stack: Vec<String> = Vec::new();
    let mut rest = body;
    while let Some(at) = rest.find('<') {
        rest = &rest[at + 1..];
        let end = rest.find('>').expect("unterminated tag");
        let tag = &rest[..end];
        rest = &rest[end + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            let open = stack.pop().expect("close without open");
            assert_eq!(open, name.trim(), "mismatched tags");
        } else if !tag.ends_with('/') && !tag.starts_with('!') && !tag.starts_with('?') {
            let name = tag.split_whitespace().next().unwrap_or_default();
            stack.push(name.to_string());
        }
        if stack.is_empty() {
            assert!(rest.trim().is_empty(), "content after the root");
            return;
        }
    }
    panic!("unclosed elements: {stack:?}");
}

async fn get_svg(b: &mut Browser<'_>, path: &str) -> String {
    let p = b.get(path).await;
    assert_eq!(p.status, 200, "{path}: {}", p.body);
    assert_eq!(p.header("content-type"), "image/svg+xml", "{path}");
    assert_valid_svg(&p.body);
    p.body
}

async fn fragment(b: &mut Browser<'_>, path: &str) -> Page {
    let req = b
        .client
        .get(b.server.url(path))
        .header("HX-Request", "true");
    b.send(req).await
}

fn f2(v: &Value) -> String {
    format!("{:.2}", v.as_f64().unwrap_or_else(|| panic!("number: {v}")))
}

/// The first number of `body` displayed as the statistic `name` (`data-field`).
fn field(body: &str, name: &str) -> String {
    let mark = format!("<span data-field=\"{name}\">");
    let at = body
        .find(&mark)
        .unwrap_or_else(|| panic!("{name} not shown in {body}"));
    let rest = &body[at + mark.len()..];
    rest[..rest.find('<').expect("end of span")].to_string()
}

/// Plays `updates` SPRT batches (new tasks as needed); returns the totals over all tasks.
pub(crate) async fn play_batches(
    server: &TestServer,
    run: &str,
    worker: &mut Worker,
    updates: usize,
) -> Totals {
    let (_, r) = server.get_json(&format!("/api/get_run/{run}")).await;
    let batch = 2 * r["args"]["sprt"]["batch_size"].as_u64().unwrap_or(1);
    let mut all = Totals::default();
    let mut done = 0;
    while done < updates {
        let reply = worker.request_task(server).await;
        if reply["run"]["_id"].as_str() != Some(run) {
            break;
        }
        let task_id = reply["task_id"].as_u64().expect("task id");
        let num_games = reply["run"]["my_task"]["num_games"]
            .as_u64()
            .expect("num_games");
        let mut t = Totals::default();
        while t.games() < num_games && done < updates {
            let before = t;
            while t.games() < (before.games() + batch).min(num_games) {
                t.play_pair(&mut worker.rng, EVEN);
            }
            let (status, v) = worker
                .call(
                    server,
                    "/api/update_task",
                    json!({"run_id": run, "task_id": task_id, "stats": t.json()}),
                )
                .await;
            assert_eq!(status, 200, "{v}");
            done += 1;
            if v["task_alive"] != true {
                break;
            }
        }
        all.wins += t.wins;
        all.losses += t.losses;
        all.draws += t.draws;
        for i in 0..5 {
            all.pentanomial[i] += t.pentanomial[i];
        }
        if done < updates && stored_finished(server, run).await {
            break;
        }
    }
    all
}

async fn stored_finished(server: &TestServer, run: &str) -> bool {
    let (_, r) = server.get_json(&format!("/api/get_run/{run}")).await;
    r["finished"] == true
}

/// The stored run once the write-behind has written at least `games` games' trajectory.
async fn stored_trajectory(server: &TestServer, run: &str, games: u64) -> shoal::rundb::model::Run {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let stored = stored_run(server, run);
        // The run's results and its trajectory both caught up (on MongoDB the two are read
        // from the store one after the other, so one can be ahead of the other).
        if (stored.results.games() >= games
            && stored
                .trajectory
                .points
                .last()
                .is_some_and(|p| p.g >= games))
            || Instant::now() > deadline
        {
            return stored;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn an_sprt_run_has_stats_live_elo_charts_and_a_bounded_trajectory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    add_user(&server, "owner", &[]);
    add_user(&server, "boss", &["--approver"]);
    let id = create_run(&server, "owner", sprt_args(0.0, 2.0)).await;
    let mut anon = Browser::new(&server);

    // Unknown ids: the HTML 404 page everywhere.
    for path in [
        "/tests/stats/0123456789abcdef01234567",
        "/tests/stats/nothex",
        "/tests/live_elo/0123456789abcdef01234567",
        "/tests/live_elo_update/0123456789abcdef01234567",
        "/tests/chart/0123456789abcdef01234567/elo.svg",
        &format!("/tests/chart/{id}/nothing.svg"),
        &format!("/tests/chart/{id}/spsa.svg"),
    ] {
        let p = anon.get(path).await;
        assert_eq!(p.status, 404, "{path}");
        assert!(p.body.contains("Page not found"), "{path}: {}", p.body);
    }

    // Pending: the page renders with no games; the live fragment says "nothing changed".
    let p = anon.get(&format!("/tests/stats/{id}")).await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(
        p.body.contains("Statistics - SPRT patch vs master"),
        "{}",
        p.body
    );
    assert!(p.header("vary").contains("HX-Request"));
    let f = fragment(&mut anon, &format!("/tests/stats/{id}")).await;
    assert_eq!(f.status, 204, "{}", f.body);

    // A worker plays a few batches: the trajectory grows with them.
    approve(&server, "boss", &id).await;
    let mut worker = Worker::new("owner", 4, 3);
    let first = play_batches(&server, &id, &mut worker, 10).await;
    let stored = stored_trajectory(&server, &id, first.games()).await;
    let n10 = stored.trajectory.points.len();
    assert!(n10 >= 2, "{:?}", stored.trajectory);
    assert_eq!(
        stored.trajectory.points.last().map(|p| p.g),
        Some(stored.results.games())
    );
    assert!(stored.trajectory.points.iter().all(|p| p.llr.is_some()));

    // Many more: it stays bounded and keeps covering the whole run.
    let more = play_batches(&server, &id, &mut worker, 2 * MAX_POINTS + 20).await;
    let total_games = first.games() + more.games();
    let stored = stored_trajectory(&server, &id, total_games).await;
    let points = &stored.trajectory.points;
    assert!(
        points.len() > n10,
        "{} after 10 updates, {} now",
        n10,
        points.len()
    );
    assert!(points.len() <= MAX_POINTS, "{}", points.len());
    assert!(points.windows(2).all(|w| w[0].g < w[1].g));
    assert!(
        points[0].g < total_games / 8,
        "the start is kept: {:?}",
        points[0]
    );
    assert_eq!(points.last().map(|p| p.g), Some(stored.results.games()));

    // The LLR is /api/get_elo's (the run's exact LLR); the bounds a, b too.
    let (status, elo) = server.get_json(&format!("/api/get_elo/{id}")).await;
    assert_eq!(status, 200, "{elo}");
    let e = &elo["elo"];
    let page = anon.get(&format!("/tests/stats/{id}")).await;
    assert_eq!(page.status, 200);
    let body = &page.body;
    assert!(body.contains("Raw Statistics for test"), "{body}");
    let llr = field(body, "sprt.llr5");
    assert_eq!(llr, format!("{:.4}", e["LLR"].as_f64().expect("LLR")));
    assert_eq!(
        field(body, "sprt.llr5_u"),
        format!("{:.4}", e["b"].as_f64().expect("b"))
    );
    for section in [
        "Context",
        "SPRT parameters",
        "Draws",
        "SPRT bounds",
        "Pentanomial statistics",
        "Trinomial statistics",
        "Comparison",
        "Generalized Log Likelihood Ratio",
        "Expected overshoot [H0,H1]",
        "Elo0 (normalized)",
        "<th>LOS(1-p)</th>",
        "<th>Variance/game</th>",
    ] {
        assert!(body.contains(section), "{section} missing");
    }

    // …and src/stats' for the rest.
    let run = stored_run(&server, &id);
    let counts = shoal::stats::raw::Counts {
        trinomial: [run.results.losses, run.results.draws, run.results.wins],
        pentanomial: Some(run.results.pentanomial),
    };
    let s = run.args.sprt.as_ref().expect("sprt");
    let params = shoal::stats::raw::SprtParams {
        alpha: s.alpha,
        beta: s.beta,
        elo0: s.elo0,
        elo1: s.elo1,
        elo_model: s.elo_model,
        batch_size: s.batch_size,
        overshoot: s.overshoot,
    };
    let raw = shoal::stats::raw::raw_stats(&counts, Some(&params)).expect("raw stats");
    let e5 = raw.elo5.expect("elo5");
    let want = [
        ("tri.draw_ratio", format!("{:.5}", raw.trinomial.draw_ratio)),
        ("drawelo", format!("{:.2}", raw.drawelo.expect("drawelo"))),
        (
            "sprt.llr3_be",
            format!("{:.5}", raw.llr3.as_ref().and_then(|l| l.be).expect("be")),
        ),
        (
            "pent.rms_bias_elo",
            format!(
                "{:.3}",
                raw.pentanomial.as_ref().expect("pent").rms_bias_elo
            ),
        ),
        ("pent.games5", run.results.games().to_string()),
        ("sprt.elo5", format!("{:.4}", e5.elo)),
        ("sprt.los5", format!("{:.5}", e5.los)),
    ];
    for (name, w) in want {
        assert_eq!(field(body, name), w, "{name}");
    }
    let elo_row = format!("<span data-field=\"sprt.elo5\">{:.4}</span>", e5.elo);

    // The live fragment of an active run: 200, the content alone.
    let f = fragment(&mut anon, &format!("/tests/stats/{id}")).await;
    assert_eq!(f.status, 200);
    assert!(
        f.body.contains(&elo_row) && !f.body.contains("<html"),
        "{}",
        f.body
    );

    // Live Elo: the page, the update fragment, the gauges.
    let p = anon.get(&format!("/tests/live_elo/{id}")).await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(p.body.contains("Live Elo for SPRT test"));
    assert!(
        p.body
            .contains(&format!("data-refresh=\"/tests/live_elo_update/{id}\""))
    );
    let live_elo = format!(
        "{} [{}, {}] (95%)",
        f2(&e["elo"]),
        f2(&e["ci"][0]),
        f2(&e["ci"][1])
    );
    assert!(p.body.contains(&live_elo), "{live_elo} in {}", p.body);
    assert!(p.body.contains(&format!(
        "{} [{}, {}]",
        f2(&e["LLR"]),
        f2(&e["a"]),
        f2(&e["b"])
    )));
    assert_eq!(p.body.matches("<svg").count(), 3, "three gauges");
    let u = anon.get(&format!("/tests/live_elo_update/{id}")).await;
    assert_eq!(u.status, 200);
    assert!(u.body.contains(&live_elo) && !u.body.contains("<html"));

    // The charts: valid SVG, the LLR line and the Elo band.
    let llr = get_svg(&mut anon, &format!("/tests/chart/{id}/llr.svg")).await;
    assert!(llr.contains("LLR against games played"));
    assert!(llr.contains("<polyline"), "{llr}");
    let elo_svg = get_svg(&mut anon, &format!("/tests/chart/{id}/elo.svg")).await;
    assert!(elo_svg.contains("<polygon"), "the confidence band");
    assert!(!elo_svg.contains("style="), "no inline style (CSP)");

    // The run page links and embeds them.
    let view = anon.get(&format!("/tests/view/{id}")).await;
    for link in [
        format!("/tests/stats/{id}"),
        format!("/tests/live_elo/{id}"),
        format!("/tests/chart/{id}/llr.svg"),
    ] {
        assert!(view.body.contains(&link), "{link}");
    }

    // Stopped by its owner: the fragments say "last update" (286) and the pages stop polling.
    let mut owner = Browser::new(&server);
    let token = owner.get("/login").await.csrf();
    let login = owner
        .post(
            "/login",
            &[
                ("username", "owner"),
                ("password", PASSWORD),
                ("csrf_token", &token),
            ],
        )
        .await;
    assert_eq!(login.status, 302, "{}", login.body);
    let token = owner.get("/tests").await.csrf();
    let stop = owner
        .post(
            "/tests/stop",
            &[
                ("run-id", id.as_str()),
                ("csrf_token", &token),
                ("confirm", "yes"),
            ],
        )
        .await;
    assert_eq!(stop.status, 302, "{}", stop.body);
    let u = fragment(&mut anon, &format!("/tests/live_elo_update/{id}")).await;
    assert_eq!(u.status, 286);
    let f = fragment(&mut anon, &format!("/tests/stats/{id}")).await;
    assert_eq!(f.status, 286);
    assert!(
        f.body.contains("Trinomial statistics"),
        "the last content comes with it"
    );
    for path in [
        format!("/tests/live_elo/{id}"),
        format!("/tests/stats/{id}"),
    ] {
        let p = anon.get(&path).await;
        assert_eq!(p.status, 200);
        assert!(!p.body.contains("data-refresh"), "{path} still polls");
    }
    drop(owner);

    // The trajectory survives a restart.
    let before = stored_run(&server, &id).trajectory;
    drop(anon);
    let mut server = server;
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(30).success());
    drop(server);
    let server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    let after = stored_run(&server, &id).trajectory;
    assert_eq!(after, before);
    let mut anon = Browser::new(&server);
    get_svg(&mut anon, &format!("/tests/chart/{id}/elo.svg")).await;
}

#[tokio::test]
async fn a_fixed_games_run_has_stats_and_an_elo_chart_but_no_live_elo() {
    let server = TestServer::start().await;
    add_user(&server, "owner", &[]);
    add_user(&server, "boss", &["--approver"]);
    let id = create_run(&server, "owner", fixed_args(2000)).await;
    approve(&server, "boss", &id).await;
    let mut worker = Worker::new("owner", 4, 5);
    let reply = worker.request_task(&server).await;
    let (_, totals, _) = worker.play(&server, &reply, 100, EVEN).await;
    assert!(totals.games() > 0);
    let mut anon = Browser::new(&server);
    let p = anon.get(&format!("/tests/stats/{id}")).await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(p.body.contains("Statistics - 2000 games - patch vs master"));
    assert!(!p.body.contains("SPRT bounds") && !p.body.contains("Generalized Log Likelihood"));
    let (_, run) = server.get_json(&format!("/api/get_run/{id}")).await;
    let penta: Vec<f64> = run["results"]["pentanomial"]
        .as_array()
        .expect("pentanomial")
        .iter()
        .map(|c| c.as_f64().expect("count"))
        .collect();
    assert_eq!(penta.iter().sum::<f64>() * 2.0, totals.games() as f64);
    let e = shoal::stats::get_elo(&penta).expect("elo");
    assert_eq!(field(&p.body, "sprt.elo5"), format!("{:.4}", e.elo));
    assert_eq!(
        field(&p.body, "sprt.elo5_l"),
        format!("{:.4}", e.elo - e.elo95)
    );
    let n = shoal::stats::nelo_pentanomial(&penta).expect("nelo");
    assert_eq!(field(&p.body, "pent.nelo5"), format!("{:.2}", n.nelo5));
    assert_eq!(
        field(&p.body, "pent.nelo5_u"),
        format!("{:.2}", n.nelo5 + n.nelo5_delta)
    );
    for path in [
        format!("/tests/live_elo/{id}"),
        format!("/tests/live_elo_update/{id}"),
        format!("/tests/chart/{id}/llr.svg"),
    ] {
        assert_eq!(anon.get(&path).await.status, 404, "{path}");
    }
    get_svg(&mut anon, &format!("/tests/chart/{id}/elo.svg")).await;
}

#[tokio::test]
async fn an_spsa_run_has_a_parameter_chart_and_no_raw_statistics() {
    let server = TestServer::start().await;
    add_user(&server, "owner", &[]);
    add_user(&server, "boss", &["--approver"]);
    let mut args = fixed_args(2000);
    args["spsa"] = json!({"raw_params": "Alpha,50,0,100,5,0.002\nBeta,-20,-100,100,8,0.002"});
    let id = create_run(&server, "owner", args).await;
    approve(&server, "boss", &id).await;
    let w = Worker::new("owner", 4, 9);
    let reply = w.request_task(&server).await;
    let task_id = reply["task_id"].as_u64().expect("task");
    let num_games = reply["run"]["my_task"]["num_games"].as_u64().expect("n");
    let ids = json!({"run_id": id, "task_id": task_id});
    let mut rng = StdRng::seed_from_u64(4);
    let mut totals = Totals::default();
    for _ in 0..30 {
        let mut body = ids.clone();
        body["stats"] = totals.json();
        let (_, spsa) = w.call(&server, "/api/request_spsa", body).await;
        let before = totals;
        while totals.games() < (before.games() + 16).min(num_games) {
            totals.play_pair(&mut rng, EVEN);
        }
        let mut body = ids.clone();
        body["stats"] = totals.json();
        body["spsa"] = json!({
            "num_games": totals.games() - before.games(),
            "wins": totals.wins - before.wins,
            "losses": totals.losses - before.losses,
            "draws": totals.draws - before.draws,
            "sig": spsa["sig"],
        });
        let (status, v) = w.call(&server, "/api/update_task", body).await;
        assert_eq!(status, 200, "{v}");
        if v["task_alive"] != true || totals.games() >= num_games {
            break;
        }
    }
    let mut anon = Browser::new(&server);
    let p = anon.get(&format!("/tests/stats/{id}")).await;
    assert_eq!(p.status, 200);
    assert!(p.body.contains("Statistics - SPSA patch"));
    assert!(
        p.body.contains("SPSA tests do not have raw statistics"),
        "{}",
        p.body
    );
    assert!(!p.body.contains("data-refresh"), "no polling for SPSA");
    let f = fragment(&mut anon, &format!("/tests/stats/{id}")).await;
    assert_eq!(
        f.status, 286,
        "an SPSA page never changes its raw statistics"
    );
    let svg = get_svg(&mut anon, &format!("/tests/chart/{id}/spsa.svg")).await;
    assert!(svg.contains("Alpha") && svg.contains("Beta"));
    assert!(svg.matches("<polyline").count() >= 2, "{svg}");
    for path in [
        format!("/tests/live_elo/{id}"),
        format!("/tests/chart/{id}/llr.svg"),
        format!("/tests/chart/{id}/elo.svg"),
    ] {
        assert_eq!(anon.get(&path).await.status, 404, "{path}");
    }
    // The SPSA run's trajectory is not recorded (its history is the parameters').
    assert!(stored_run(&server, &id).trajectory.is_empty());
}

#[tokio::test]
async fn the_sprt_calculator_computes_on_the_server_and_refuses_bad_inputs() {
    let server = TestServer::start().await;
    let mut anon = Browser::new(&server);
    let p = anon.get("/sprt_calc").await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(p.body.contains("SPRT calculator"));
    assert!(p.body.contains("name=\"elo0\" value=\"0\""), "{}", p.body);
    assert!(
        p.body
            .contains("At Elo0 = 0.00 nElo: pass probability 5.0%"),
        "{}",
        p.body
    );
    assert!(
        p.body
            .contains("At Elo1 = 2.00 nElo: pass probability 95.0%")
    );
    assert_eq!(p.body.matches("<svg").count(), 2, "two inline charts");
    assert!(!p.body.contains("style="), "no inline style (CSP)");

    let q = "/sprt_calc?elo_model=Logistic&elo0=-1&elo1=1.5&draw_ratio=0.6&rms_bias=100";
    let p = anon.get(q).await;
    assert_eq!(p.status, 200, "{}", p.body);
    let input = shoal::stats::sprt_calc::CalcInput {
        normalized: false,
        elo0: -1.0,
        elo1: 1.5,
        draw_ratio: 0.6,
        rms_bias: 100.0,
    };
    let at = shoal::stats::sprt_calc::at(&input, 1.5).expect("calc");
    let want = format!(
        "At Elo1 = 1.50 Elo: pass probability {:.1}%, expected games {:.0}",
        at.pass * 100.0,
        at.games
    );
    assert!(p.body.contains(&want), "{want} in {}", p.body);
    assert!(p.body.contains("<option value=\"Logistic\" selected>"));

    for (query, message) in [
        ("elo0=0&elo1=0.2", "Elo1 must be at least Elo0 + 0.5"),
        ("elo0=0&elo1=12", "within [-10, 10]"),
        ("draw_ratio=1", "strictly between 0 and 1"),
        ("rms_bias=-3", "must not be negative"),
        ("draw_ratio=0.95&rms_bias=400", "incompatible"),
        ("elo0=abc", "Unreadable input"),
        ("elo_model=BayesElo", "Unknown Elo model"),
    ] {
        let p = anon.get(&format!("/sprt_calc?{query}")).await;
        assert_eq!(p.status, 400, "{query}");
        assert!(p.body.contains(message), "{query}: {message} in {}", p.body);
        assert!(!p.body.contains("<svg"), "{query}: no charts");
    }
    // The typed values come back in the form.
    let p = anon.get("/sprt_calc?elo0=abc").await;
    assert!(p.body.contains("name=\"elo0\" value=\"abc\""));
}
