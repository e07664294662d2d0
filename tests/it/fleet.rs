//! Test helpers for the worker API: users through the CLI, runs through the API, and a
//! scripted worker that plays games with consistent cumulative statistics.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use crate::harness::TestServer;

pub const PASSWORD: &str = "correct horse";

/// Runs `shoal user ...` against the server's data directory.
pub fn user_cli(server: &TestServer, args: &[&str]) -> String {
    let out = server
        .cli()
        .arg("user")
        .args(args)
        .output()
        .expect("run shoal user");
    assert!(
        out.status.success(),
        "shoal user {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn add_user(server: &TestServer, name: &str, extra: &[&str]) {
    let mut args = vec!["add", name, "--password", PASSWORD];
    args.extend_from_slice(extra);
    user_cli(server, &args);
}

/// A unique key whose first group is `n` in hex.
pub fn key(n: u32) -> String {
    format!("{n:08x}-1111-4222-8333-{n:012x}")
}

pub fn worker_info(user: &str, concurrency: u32, key: &str) -> Value {
    json!({
        "uname": "Linux 6.1.0-18-amd64",
        "architecture": ["64bit", "ELF"],
        "concurrency": concurrency,
        "max_memory": 8000,
        "min_threads": 1,
        "username": user,
        "version": 325,
        "python_version": [3, 11, 7],
        "gcc_version": [12, 2, 0],
        "compiler": "g++",
        "unique_key": key,
        "modified": false,
        "worker_arch": "x86-64-avx2",
        "ARCH": "?",
        "nps": 0.0,
        "near_github_api_limit": false,
    })
}

pub fn sha(c: char) -> String {
    std::iter::repeat_n(c, 40).collect()
}

/// Arguments of a small fixed-games run.
pub fn fixed_args(num_games: u64) -> Value {
    json!({
        "base_tag": "master",
        "new_tag": "patch",
        "resolved_base": sha('a'),
        "resolved_new": sha('b'),
        "base_signature": "1234567",
        "new_signature": "1234568",
        "base_options": "Hash=16",
        "new_options": "Hash=16",
        "tc": "10+0.1",
        "book": "UHO_Lichess_4852_v1.epd",
        "book_depth": "8",
        "threads": 1,
        "tests_repo": "https://github.com/official-stockfish/Stockfish",
        "num_games": num_games,
        "info": "a test run",
    })
}

pub fn sprt_args(elo0: f64, elo1: f64) -> Value {
    let mut a = fixed_args(0);
    let m = a.as_object_mut().expect("object");
    m.remove("num_games");
    m.insert("sprt".into(), json!({"elo0": elo0, "elo1": elo1}));
    a
}

pub async fn create_run(server: &TestServer, user: &str, args: Value) -> String {
    let (status, v) = server
        .post_json(
            "/api/create_run",
            &json!({"username": user, "password": PASSWORD, "args": args}),
        )
        .await;
    assert_eq!(status, 200, "create_run: {v}");
    v["run_id"].as_str().expect("run_id").to_string()
}

pub async fn approve(server: &TestServer, approver: &str, run_id: &str) {
    let (status, v) = server
        .post_json(
            "/api/approve_run",
            &json!({"username": approver, "password": PASSWORD, "run_id": run_id}),
        )
        .await;
    assert_eq!(status, 200, "approve_run: {v}");
}

/// Reads a run document straight from the store (the server keeps running).
pub fn stored_run(server: &TestServer, run_id: &str) -> shoal::rundb::model::Run {
    let store = crate::harness::open_store(&server.data_dir).expect("open store");
    let doc = store
        .get(shoal::store::Collection::Runs, run_id)
        .expect("get")
        .expect("run exists");
    serde_json::from_value(Value::Object(doc)).expect("run parses")
}

/// Cumulative results as the worker reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Totals {
    pub wins: u64,
    pub losses: u64,
    pub draws: u64,
    pub pentanomial: [u64; 5],
}

impl Totals {
    pub fn games(&self) -> u64 {
        self.wins + self.losses + self.draws
    }

    pub fn json(&self) -> Value {
        json!({
            "wins": self.wins, "losses": self.losses, "draws": self.draws,
            "crashes": 0, "time_losses": 0, "pentanomial": self.pentanomial,
        })
    }

    /// Plays one game pair: `p` = probabilities of the pair scores 0, ½, 1, 1½, 2.
    pub fn play_pair(&mut self, rng: &mut StdRng, p: [f64; 5]) {
        let mut x: f64 = rng.random();
        let mut cell = 4;
        for (i, pi) in p.iter().enumerate() {
            if x < *pi {
                cell = i;
                break;
            }
            x -= pi;
        }
        self.pentanomial[cell] += 1;
        match cell {
            0 => self.losses += 2,
            1 => {
                self.losses += 1;
                self.draws += 1;
            }
            2 => {
                if rng.random::<bool>() {
                    self.draws += 2;
                } else {
                    self.wins += 1;
                    self.losses += 1;
                }
            }
            3 => {
                self.wins += 1;
                self.draws += 1;
            }
            _ => self.wins += 2,
        }
    }
}

/// A scripted worker.
pub struct Worker {
    pub info: Value,
    pub rng: StdRng,
    pub forwarded_for: Option<String>,
}

impl Worker {
    pub fn new(user: &str, concurrency: u32, n: u32) -> Worker {
        Worker {
            info: worker_info(user, concurrency, &key(n)),
            rng: StdRng::seed_from_u64(u64::from(n)),
            forwarded_for: None,
        }
    }

    pub async fn call(&self, server: &TestServer, path: &str, extra: Value) -> (u16, Value) {
        let mut body = json!({"password": PASSWORD, "worker_info": self.info});
        if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
            b.extend(e);
        }
        let mut req = server.client.post(server.url(path)).json(&body);
        if let Some(ip) = &self.forwarded_for {
            req = req.header("X-Forwarded-For", ip);
        }
        let r = req.send().await.expect("call");
        let status = r.status().as_u16();
        let v: Value = r.json().await.expect("json reply");
        assert!(
            v.get("duration").and_then(Value::as_f64).is_some(),
            "reply without duration: {v}"
        );
        (status, v)
    }

    pub async fn request_task(&self, server: &TestServer) -> Value {
        let (status, v) = self.call(server, "/api/request_task", json!({})).await;
        assert_eq!(status, 200, "{v}");
        v
    }

    /// Plays the task handed out in `reply` to its end (or until the server says stop),
    /// sending an update every `batch` games. Returns the last reply and the totals sent.
    pub async fn play(
        &mut self,
        server: &TestServer,
        reply: &Value,
        batch: u64,
        p: [f64; 5],
    ) -> (Value, Totals, usize) {
        let run_id = reply["run"]["_id"].as_str().expect("run id").to_string();
        let task_id = reply["task_id"].as_u64().expect("task id");
        let num_games = reply["run"]["my_task"]["num_games"]
            .as_u64()
            .expect("num_games");
        let mut totals = Totals::default();
        let mut updates = 0;
        let mut last = Value::Null;
        while totals.games() < num_games {
            let target = (totals.games() + batch).min(num_games);
            while totals.games() < target {
                totals.play_pair(&mut self.rng, p);
            }
            let (status, v) = self
                .call(
                    server,
                    "/api/update_task",
                    json!({"run_id": run_id, "task_id": task_id, "stats": totals.json()}),
                )
                .await;
            assert_eq!(status, 200, "update_task: {v}");
            updates += 1;
            let alive = v["task_alive"].as_bool().expect("task_alive present");
            last = v;
            if !alive {
                break;
            }
        }
        (last, totals, updates)
    }
}
