//! The run page's history and chi² box through real HTTP (issue 21, parts 2 and 3): the
//! trajectory recorded as updates are acknowledged, bounded, every acknowledged point still
//! there after `kill -9` (SQLite and MongoDB, where it lives beside Fishtest's run document)
//! and after an export/import round trip; the charts' live fragment and their axis labels; a
//! run imported from Fishtest shown as having no recorded history; the chi² box and each
//! task's residual colour checked against an independent computation.

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use bson::doc;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::{Value, json};
use statrs::distribution::{ChiSquared, ContinuousCDF, Normal};

use crate::fleet::{
    PASSWORD, Totals, Worker, add_user, approve, create_run, fixed_args, sprt_args, stored_run,
};
use crate::harness::{Opts, TestServer, bin, mongo_env};
use crate::mongo;
use crate::web::Browser;
use shoal::rundb::model::Run;
use shoal::rundb::trajectory::{MAX_POINTS, Trajectory};

const EVEN: [f64; 5] = [0.05, 0.2, 0.5, 0.2, 0.05];

fn add(a: &Totals, b: &Totals) -> Totals {
    let mut s = *a;
    s.wins += b.wins;
    s.losses += b.losses;
    s.draws += b.draws;
    for i in 0..5 {
        s.pentanomial[i] += b.pentanomial[i];
    }
    s
}

/// A point's counts: games, wins, losses, draws, pentanomial.
type Counts = (u64, u64, u64, u64, [u64; 5]);

/// The counts of a trajectory's points (the LLRs are the server's to compute).
fn counts(t: &Trajectory) -> Vec<Counts> {
    t.points.iter().map(|p| (p.g, p.w, p.l, p.d, p.p)).collect()
}

/// The trajectory a run's acknowledged updates should leave, by the sampling rule as
/// documented (`src/rundb/trajectory.rs`'s module doc, "Sampling"), written out here
/// without the server's code: a point is kept once the run has played `stride` games (at
/// first 2) past the point before the newest, else the newest point moves forward to the
/// totals; at `MAX_POINTS` points, every other one goes (the first, the third, …, and the
/// newest stays) and the stride doubles.
#[derive(Debug, Clone, Default)]
struct Expected {
    stride: u64,
    points: Vec<Counts>,
}

impl Expected {
    fn record(&mut self, now: Counts) {
        if self.stride == 0 {
            self.stride = 2;
        }
        let n = self.points.len();
        let before_last = if n >= 2 { self.points[n - 2].0 } else { 0 };
        match self.points.last_mut() {
            Some(last) if last.0 == now.0 => *last = now,
            Some(last) if n >= 2 && last.0 - before_last < self.stride => *last = now,
            _ => {
                if n >= MAX_POINTS {
                    self.points = self
                        .points
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| i % 2 == 0 || *i == n - 1)
                        .map(|(_, p)| *p)
                        .collect();
                    self.stride *= 2;
                }
                self.points.push(now);
            }
        }
    }
}

/// One worker playing an SPRT run batch by batch, keeping the trajectory its acknowledged
/// updates should make ([`Expected`]).
struct Player {
    worker: Worker,
    run: String,
    batch: u64,
    /// The current task: id, size, the run's totals before it, its own totals.
    task: Option<(u64, u64, Totals, Totals)>,
    totals: Totals,
    expected: Expected,
}

impl Player {
    async fn new(server: &TestServer, run: &str, n: u32) -> Player {
        let (_, r) = server.get_json(&format!("/api/get_run/{run}")).await;
        Player {
            worker: Worker::new("owner", 4, n),
            run: run.to_string(),
            batch: 2 * r["args"]["sprt"]["batch_size"]
                .as_u64()
                .expect("batch size"),
            task: None,
            totals: Totals::default(),
            expected: Expected::default(),
        }
    }

    /// Plays `updates` acknowledged batches (a new task when one ends).
    async fn play(&mut self, server: &TestServer, updates: usize) {
        for _ in 0..updates {
            let (task_id, size, base, mut t) = match self.task.take() {
                Some(task) => task,
                None => {
                    let reply = self.worker.request_task(server).await;
                    assert_eq!(
                        reply["run"]["_id"].as_str(),
                        Some(self.run.as_str()),
                        "{reply}"
                    );
                    let id = reply["task_id"].as_u64().expect("task id");
                    let size = reply["run"]["my_task"]["num_games"].as_u64().expect("size");
                    (id, size, self.totals, Totals::default())
                }
            };
            let target = (t.games() + self.batch).min(size);
            while t.games() < target {
                t.play_pair(&mut self.worker.rng, EVEN);
            }
            let (status, v) = self
                .worker
                .call(
                    server,
                    "/api/update_task",
                    json!({"run_id": self.run, "task_id": task_id, "stats": t.json()}),
                )
                .await;
            assert_eq!(status, 200, "{v}");
            let now = add(&base, &t);
            self.expected.record((
                now.games(),
                now.wins,
                now.losses,
                now.draws,
                now.pentanomial,
            ));
            self.totals = now;
            if v["task_alive"] == true {
                self.task = Some((task_id, size, base, t));
            } else {
                let (_, r) = server.get_json(&format!("/api/get_run/{}", self.run)).await;
                assert_eq!(r["finished"], false, "the SPRT must stay undecided");
            }
        }
    }
}

/// The stored run: SQLite beside the server, or the MongoDB database (runs merged with
/// `shoal_run_extras`, as the store reads them).
async fn stored(server: &TestServer, uri: Option<&str>, run: &str) -> Run {
    match uri {
        None => stored_run(server, run),
        Some(uri) => {
            let uri = shoal::secret::SecretUri::new(uri.to_string());
            let run = run.to_string();
            tokio::task::spawn_blocking(move || {
                use shoal::store::Store;
                let store = shoal::store::mongo::MongoStore::open(&uri).expect("mongo store");
                let doc = store
                    .get(shoal::store::Collection::Runs, &run)
                    .expect("get")
                    .expect("the run");
                serde_json::from_value(Value::Object(doc)).expect("run parses")
            })
            .await
            .expect("blocking")
        }
    }
}

fn opts(data: &Path, uri: Option<&str>) -> Opts {
    let o = Opts::new().data_dir(data);
    match uri {
        Some(uri) => o.set("store", "mongodb").set("mongodb_uri", uri),
        None => o,
    }
}

/// `owner` and the approver `boss`, through the CLI on the server's store.
fn add_users(data: &Path, uri: Option<&str>) {
    for (name, extra) in [("owner", None), ("boss", Some("--approver"))] {
        let mut c = Command::new(bin());
        let email = format!("{name}@example.org");
        c.args([
            "user",
            "add",
            name,
            "--password",
            PASSWORD,
            "--email",
            &email,
        ])
        .args(extra)
        .current_dir(data.parent().expect("parent"))
        .env_clear()
        .env("SHOAL_DATA_DIR", data);
        match uri {
            Some(uri) => c
                .env("SHOAL_STORE", "mongodb")
                .env("SHOAL_MONGODB_URI", uri),
            None => c.envs(mongo_env(data)),
        };
        let out = c.output().expect("shoal user add");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The words of an SVG's `<text>` elements.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = t.split_once('>')?.1;
            Some(body.split_once("</text>")?.0.trim().to_string())
        })
        .collect()
}

async fn get_svg(b: &mut Browser<'_>, path: &str) -> String {
    let p = b.get(path).await;
    assert_eq!(p.status, 200, "{path}: {}", p.body);
    assert_eq!(p.header("content-type"), "image/svg+xml", "{path}");
    p.body
}

/// Points recorded as updates arrive, bounded, all of them there after `kill -9`.
async fn history_is_recorded_bounded_and_survives_kill_9(uri: Option<&str>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = TestServer::start_with(opts(&data, uri)).await;
    add_users(&data, uri);
    let id = create_run(&server, "owner", sprt_args(-1.0, 1.0)).await;
    approve(&server, "boss", &id).await;
    let mut player = Player::new(&server, &id, 5).await;

    // A few updates: a point each (the stride is still one batch), written behind while the
    // run plays.
    player.play(&server, 6).await;
    assert_eq!(player.expected.points.len(), 6);
    let deadline = Instant::now() + Duration::from_secs(60);
    while counts(&stored(&server, uri, &id).await.trajectory) != player.expected.points {
        assert!(
            Instant::now() < deadline,
            "the six points were never written"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Many more: bounded, decimated, still from the origin to the current totals; the
    // server is killed right after the last acknowledged update.
    player.play(&server, 2 * MAX_POINTS + 40).await;
    let (totals, expected) = (player.totals, player.expected.clone());
    assert!(expected.stride > 2, "decimated: {expected:?}");
    let mut server = server;
    server.signal(libc::SIGKILL);
    let _ = server.wait_exit(30);
    drop(server);

    let server = TestServer::start_with(opts(&data, uri)).await;
    let run = stored(&server, uri, &id).await;
    assert_eq!(
        run.results.games(),
        totals.games(),
        "the acknowledged totals"
    );
    let t = &run.trajectory;
    assert_eq!(counts(t), expected.points, "every acknowledged point");
    assert_eq!(t.stride, expected.stride);
    assert!(t.from_origin());
    assert!(t.points.len() <= MAX_POINTS && t.points.len() >= MAX_POINTS / 2);
    assert!(t.points.iter().all(|p| p.llr.is_some()));
    let (_, r) = server.get_json(&format!("/api/get_run/{id}")).await;
    assert!(r.get("trajectory").is_none(), "the API never shows it");
    assert_eq!(
        t.points.last().and_then(|p| p.llr),
        r["args"]["sprt"]["llr"].as_f64(),
        "the newest point holds the current LLR"
    );
    if let Some(uri) = uri {
        // Fishtest's run document stays Fishtest's: the history lives beside it.
        let oid = bson::oid::ObjectId::parse_str(&id).expect("an ObjectId");
        let runs = mongo::docs(uri, "runs", doc! {"_id": oid}).await;
        assert!(
            runs.first().is_some_and(|d| !d.contains_key("trajectory")),
            "{runs:?}"
        );
        let extras = mongo::docs(uri, "shoal_run_extras", doc! {"_id": &id}).await;
        assert!(extras.first().is_some_and(|d| d.contains_key("trajectory")));
    }

    // The page: the charts refresh with the live page (their URLs change with the games);
    // the SVG's axes read as 1k, 2k…, never 4000.0.
    let mut anon = Browser::new(&server);
    let games = totals.games();
    let page = anon.get(&format!("/tests/view/{id}")).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body
            .contains(&format!("data-refresh=\"/tests/view/{id}/charts\"")),
        "{}",
        page.body
    );
    for chart in ["llr.svg", "elo.svg"] {
        let src = format!("src=\"/tests/chart/{id}/{chart}?g={games}\"");
        assert!(page.body.contains(&src), "{src} in {}", page.body);
    }
    let fragment = anon.get(&format!("/tests/view/{id}/charts")).await;
    assert_eq!(fragment.status, 200);
    assert!(fragment.body.contains(&format!("llr.svg?g={games}")));
    assert!(!fragment.body.contains("<html"));
    for chart in ["llr.svg", "elo.svg"] {
        let svg = get_svg(&mut anon, &format!("/tests/chart/{id}/{chart}?g={games}")).await;
        let words = texts(&svg);
        assert!(
            words
                .iter()
                .any(|w| w.ends_with('k') && w[..w.len() - 1].parse::<f64>().is_ok()),
            "games in thousands: {words:?}"
        );
        assert!(
            words.iter().all(|w| !w.ends_with(".0")
                && w.chars().take_while(char::is_ascii_digit).nth(3).is_none()),
            "no raw numbers: {words:?}"
        );
        assert!(!svg.contains("No recorded history"), "{svg}");
    }
    // One more update: the fragment names new images.
    player.task = None;
    player.play(&server, 1).await;
    let fragment = anon.get(&format!("/tests/view/{id}/charts")).await;
    assert!(
        fragment
            .body
            .contains(&format!("llr.svg?g={}", player.totals.games())),
        "{}",
        fragment.body
    );
}

#[tokio::test]
async fn history_is_recorded_bounded_and_survives_kill_9_on_sqlite() {
    history_is_recorded_bounded_and_survives_kill_9(None).await;
}

#[tokio::test]
async fn history_is_recorded_bounded_and_survives_kill_9_on_mongodb() {
    let uri = mongo::fresh_uri("charts");
    history_is_recorded_bounded_and_survives_kill_9(Some(&uri)).await;
}

/// Runs `shoal <args>` on the store in `data` (SQLite unless the suite runs on MongoDB).
fn shoal_cli(data: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(bin())
        .args(args)
        .current_dir(data.parent().expect("parent"))
        .env_clear()
        .envs(mongo_env(data))
        .env("SHOAL_DATA_DIR", data)
        .env("SHOAL_LOG", "warn")
        .output()
        .expect("run shoal");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_history_is_kept_through_export_and_import() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    add_user(&server, "owner", &[]);
    add_user(&server, "boss", &["--approver"]);
    let id = create_run(&server, "owner", sprt_args(-1.0, 1.0)).await;
    approve(&server, "boss", &id).await;
    let mut player = Player::new(&server, &id, 9).await;
    player.play(&server, 20).await;
    let expected = player.expected.clone();
    let mut server = server;
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(30).success());
    drop(server);

    let dump = dir.path().join("dump");
    let (ok, err) = shoal_cli(
        &data,
        &["export", "--fishtest", dump.to_str().expect("path")],
    );
    assert!(ok, "export: {err}");
    let copy = dir.path().join("copy");
    let (ok, err) = shoal_cli(
        &copy,
        &["import", "--fishtest", dump.to_str().expect("path")],
    );
    assert!(ok, "import: {err}");
    let server = TestServer::start_with(Opts::new().data_dir(&copy)).await;
    let run = stored_run(&server, &id);
    assert_eq!(counts(&run.trajectory), expected.points);
    assert_eq!(run.trajectory.stride, expected.stride);
}

fn dump_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fishtest-db")
}

#[tokio::test]
async fn a_run_imported_from_fishtest_says_it_has_no_recorded_history() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let (ok, err) = shoal_cli(
        &data,
        &["import", "--fishtest", dump_dir().to_str().expect("path")],
    );
    assert!(ok, "import: {err}");
    let text = std::fs::read_to_string(dump_dir().join("runs.json")).expect("runs");
    let runs: Vec<Value> = serde_json::from_str(&text).expect("json");
    // A finished SPRT with games.
    let id = runs
        .iter()
        .find(|r| r["finished"] == true && r["args"].get("sprt").is_some())
        .and_then(|r| r["_id"]["$oid"].as_str())
        .expect("an SPRT run")
        .to_string();
    let server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    let mut anon = Browser::new(&server);
    let page = anon.get(&format!("/tests/view/{id}")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("No recorded history for this run"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("llr.svg"), "no chart: {}", page.body);
    assert!(!page.body.contains("elo.svg"), "no chart: {}", page.body);
    // The images themselves (the statistics page shows them) say so too, and draw no line.
    for chart in ["llr.svg", "elo.svg"] {
        let svg = get_svg(&mut anon, &format!("/tests/chart/{id}/{chart}")).await;
        assert!(svg.contains("No recorded history for this run"), "{svg}");
        assert!(!svg.contains("<polyline"), "a line from nowhere: {svg}");
    }
    // Its chi² box is there (Fishtest's tasks, Fishtest's numbers).
    assert!(page.body.contains("p-value"), "{}", page.body);
}

/// One worker's table row: pentanomial pairs collapsed to (pair wins, pair losses, draws).
fn cells(t: &Totals) -> [f64; 3] {
    let p = t.pentanomial;
    [(p[4] + p[3]) as f64, (p[0] + p[1]) as f64, p[2] as f64]
}

/// Fishtest's chi² over workers, written out here from its description
/// (spec/server-behaviour.md, purge): expected counts from the margins, workers with an
/// expected cell of 5 or less dropped, each residual the worker's own 2×3 chi² (it against
/// the rest) as a normal z-score, Bonferroni thresholds.
struct Table {
    chi2: f64,
    dof: usize,
    p: f64,
    residuals: Vec<f64>,
    z95: f64,
    z99: f64,
}

fn table(rows: &[[f64; 3]]) -> Table {
    let cols: Vec<f64> = (0..3).map(|j| rows.iter().map(|r| r[j]).sum()).collect();
    let total: f64 = cols.iter().sum();
    let mut chi2 = 0.0;
    let mut residuals = Vec::new();
    let normal = Normal::new(0.0, 1.0).expect("normal");
    let two = ChiSquared::new(2.0).expect("chi2(2)");
    for r in rows {
        let n: f64 = r.iter().sum();
        let mut own = 0.0;
        for j in 0..3 {
            let e = n * cols[j] / total;
            assert!(e > 5.0, "every worker has enough games");
            own += (r[j] - e).powi(2) / e;
        }
        chi2 += own;
        let adjusted = own / (1.0 - n / total);
        let z = -normal.inverse_cdf(two.sf(adjusted));
        residuals.push(z.max(0.0));
    }
    let k = rows.len() as f64;
    let dof = (rows.len() - 1) * 2;
    Table {
        chi2,
        dof,
        p: 1.0 - ChiSquared::new(dof as f64).expect("chi2").cdf(chi2),
        residuals,
        z95: normal.inverse_cdf(1.0 - 0.05 / k),
        z99: normal.inverse_cdf(1.0 - 0.01 / k),
    }
}

#[tokio::test]
async fn the_chi2_box_and_residual_colours_single_out_a_worker_out_of_line() {
    let server = TestServer::start().await;
    add_user(&server, "owner", &[]);
    add_user(&server, "boss", &["--approver"]);
    let id = create_run(&server, "owner", fixed_args(100_000)).await;
    approve(&server, "boss", &id).await;

    // Before any task: no box yet.
    let mut anon = Browser::new(&server);
    let page = anon.get(&format!("/tests/view/{id}")).await;
    assert!(!page.body.contains("p-value"), "{}", page.body);
    assert!(page.body.contains("No games played yet."), "{}", page.body);

    // Six workers: five alike, one whose results are far out of line.
    let outlier = [0.02, 0.08, 0.3, 0.3, 0.3];
    let mut rows = Vec::new();
    let mut names = Vec::new();
    for n in 0..6u32 {
        let w = Worker::new("owner", 4, 20 + n);
        let reply = w.request_task(&server).await;
        assert_eq!(reply["run"]["_id"].as_str(), Some(id.as_str()), "{reply}");
        let task_id = reply["task_id"].as_u64().expect("task id");
        let size = reply["run"]["my_task"]["num_games"].as_u64().expect("size");
        let pairs = (size / 2).min(200) - 1;
        let mut rng = StdRng::seed_from_u64(u64::from(n));
        let mut t = Totals::default();
        for _ in 0..pairs {
            t.play_pair(&mut rng, if n == 5 { outlier } else { EVEN });
        }
        let (status, v) = w
            .call(
                &server,
                "/api/update_task",
                json!({"run_id": id, "task_id": task_id, "stats": t.json()}),
            )
            .await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["task_alive"], true, "{v}");
        rows.push(cells(&t));
        names.push(w.info["unique_key"].as_str().expect("key").to_string());
        if n == 0 {
            // One worker: a box, but no test yet.
            let tasks = anon.get(&format!("/tests/tasks/{id}")).await;
            assert!(tasks.body.contains("No chi² test yet"), "{}", tasks.body);
        }
    }
    assert_eq!(names.iter().collect::<HashSet<_>>().len(), 6);
    let want = table(&rows);
    let colour = |r: f64| {
        if r < want.z95 {
            "green"
        } else if r < want.z99 {
            "yellow"
        } else {
            "red"
        }
    };
    assert_eq!(colour(want.residuals[5]), "red", "the construction");
    assert!(want.residuals[..5].iter().all(|r| *r < want.residuals[5]));
    let count = |c: &str| want.residuals.iter().filter(|r| colour(**r) == c).count();

    let page = anon.get(&format!("/tests/view/{id}")).await;
    let tasks = anon.get(&format!("/tests/tasks/{id}")).await;
    assert_eq!(tasks.status, 200);
    for body in [&page.body, &tasks.body] {
        for row in [
            format!("<th scope=\"row\">chi²</th><td>{:.2}</td>", want.chi2),
            format!("<th scope=\"row\">dof</th><td>{}</td>", want.dof),
            format!(
                "<th scope=\"row\">p-value</th><td>{:.2}%</td>",
                want.p * 100.0
            ),
        ] {
            assert!(body.contains(&row), "{row} in {body}");
        }
        for (i, r) in want.residuals.iter().enumerate() {
            let c = colour(*r);
            let cell = format!("<td class=\"residual residual-{c}\">{r:.3}");
            assert!(body.contains(&cell), "worker {i}: {cell} in {body}");
        }
        // Not by colour alone: the words, and the row marked.
        assert!(
            body.contains(&format!(
                "{:.3} <span class=\"residual-note\">(out of line)</span>",
                want.residuals[5]
            )),
            "{body}"
        );
        assert!(body.contains("task-outlier"), "{body}");
        let alert = format!(
            "{} task(s) out of line, {} high.",
            count("red"),
            count("yellow")
        );
        assert!(body.contains(&alert), "{alert} in {body}");
    }
}
