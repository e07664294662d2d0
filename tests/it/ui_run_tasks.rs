//! The run page for approvers (issue 25, item 3) through real HTTP: on a run with thousands
//! of tasks the tasks table is paged, sorted and searched on the server (checked row by row
//! against the order computed here), the fragment `/tests/tasks/{id}` answers exactly the page
//! asked for, the run page's live refresh asks for the page on screen only, bad parameters
//! are a 400 page, every task shows its worker's details, and the chi² box is computed over
//! every task whatever the page. The arguments table shows every argument an approver checks,
//! in reading order; an SPSA run shows Fishtest's full parameter table. In Chromium at 390 px
//! and 1400 px: the page fits, the header links and the search work without JavaScript, and
//! screenshots go to `target/screenshots/` (`run_page_*.png`, `tasks_table_*.png`).

use fantoccini::Locator;
use serde_json::{Value, json};

use crate::browser::{body_text, browser, screenshot, start_driver, wait_for_answer};
use crate::browser_phone::{set_width, widths};
use crate::fleet::{add_user, create_run, fixed_args, key, sprt_args, worker_info};
use crate::harness::{TestServer, open_store};
use crate::web::Browser;

/// Tasks of the big run.
const TASKS: usize = 3000;
/// The id the big run is written under.
pub(crate) const BIG: &str = "0badc0ffee0123456789abcd";
/// Rows a page holds (`run_tasks_view::TASKS_PAGE_SIZE`).
const PAGE: usize = 25;

/// One task of the big run, as the test knows it.
#[derive(Clone)]
pub(crate) struct Model {
    idx: usize,
    user: String,
    worker: String,
    windows: bool,
    played: u64,
    state: &'static str,
    /// Minutes after the epoch of the run: a permutation of the task numbers.
    minute: usize,
}

fn model(i: usize) -> Model {
    let user = format!("user{}", i % 7);
    let cores = 1 + (i % 8);
    let key = key(u32::try_from(i).expect("small"));
    let worker = format!(
        "{user}-{cores}cores-{}",
        key.split('-').take(2).collect::<Vec<_>>().join("-")
    );
    let (played, state) = if i.is_multiple_of(100) {
        (200, "active")
    } else if i % 10 == 3 {
        (400, "dead")
    } else {
        (1000, "done")
    };
    Model {
        idx: i,
        user,
        worker,
        windows: i.is_multiple_of(5),
        played,
        state,
        minute: (i * 7919) % TASKS,
    }
}

/// Statistics of `games` games: whole pairs, spread over the pentanomial.
fn stats(games: u64) -> Value {
    let pairs = games / 2;
    let p = [pairs / 10, pairs / 5, 0, pairs / 5, pairs / 10];
    let p2 = pairs - p[0] - p[1] - p[3] - p[4];
    let p = [p[0], p[1], p2, p[3], p[4]];
    json!({
        "wins": 2 * p[4] + p[3],
        "losses": 2 * p[0] + p[1],
        "draws": p[1] + 2 * p[2] + p[3],
        "crashes": 0,
        "time_losses": 0,
        "pentanomial": p,
    })
}

/// A run of [`TASKS`] tasks written straight into the store beside the server (as the
/// write-behind writes a run), under the id [`BIG`]; its arguments are a real run's.
pub(crate) async fn big_run(server: &TestServer) -> Vec<Model> {
    add_user(server, "owner", &[]);
    let template = create_run(server, "owner", fixed_args(1000 * TASKS as u64)).await;
    let store = open_store(&server.data_dir).expect("open store");
    let mut doc = store
        .get(shoal::store::Collection::Runs, &template)
        .expect("get")
        .expect("the run is stored");
    let models: Vec<Model> = (0..TASKS).map(model).collect();
    let mut totals = [0u64; 5];
    let (mut workers, mut cores, mut committed) = (0u64, 0u64, 0u64);
    let tasks: Vec<Value> = models
        .iter()
        .map(|m| {
            let concurrency = 1 + (m.idx % 8) as u32;
            let mut info = worker_info(&m.user, concurrency, &key(m.idx as u32));
            if m.windows {
                info["uname"] = json!("Windows 10");
                info["compiler"] = json!("clang++");
            }
            let s = stats(m.played);
            for (t, v) in totals
                .iter_mut()
                .zip(s["pentanomial"].as_array().expect("p"))
            {
                *t += v.as_u64().expect("count");
            }
            let active = m.state == "active";
            if active {
                workers += 1;
                cores += u64::from(concurrency);
                committed += 1000;
            } else {
                committed += m.played;
            }
            let when = chrono::DateTime::from_timestamp(1_767_225_600 + 60 * m.minute as i64, 0)
                .expect("a time");
            json!({
                "num_games": 1000,
                "active": active,
                "last_updated": {"$date": when.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()},
                "start": m.idx * 1000,
                "stats": s,
                "worker_info": info,
            })
        })
        .collect();
    let p = totals;
    doc.insert("_id".into(), json!(BIG));
    doc.remove(shoal::store::bson_map::MONGO_ID);
    doc.insert("tasks".into(), Value::Array(tasks));
    doc.insert(
        "results".into(),
        json!({
            "wins": 2 * p[4] + p[3], "losses": 2 * p[0] + p[1], "draws": p[1] + 2 * p[2] + p[3],
            "crashes": 0, "time_losses": 0, "pentanomial": p,
        }),
    );
    doc.insert("approved".into(), json!(true));
    doc.insert("approver".into(), json!("boss"));
    doc.insert("workers".into(), json!(workers));
    doc.insert("cores".into(), json!(cores));
    doc.insert("committed_games".into(), json!(committed));
    doc.insert("total_games".into(), json!(1000 * TASKS as u64));
    let record = shoal::store::RunRecord::from_doc(&doc, 0).expect("record");
    store.flush_runs(&[record]).expect("write the big run");
    store.close().expect("close");
    models
}

/// The task numbers of the rows of a page or fragment, in order.
fn rows(body: &str) -> Vec<usize> {
    let re = regex::Regex::new(r#"<tr class="task-[a-z]+[^"]*" data-task="(\d+)""#).expect("re");
    re.captures_iter(body)
        .map(|c| c[1].parse().expect("a number"))
        .collect()
}

/// The task numbers of `models` in the order of `cmp` (ties by number), reversed if `desc`.
fn order(
    models: &[Model],
    keep: impl Fn(&Model) -> bool,
    cmp: impl Fn(&Model, &Model) -> std::cmp::Ordering,
    desc: bool,
) -> Vec<usize> {
    let mut v: Vec<&Model> = models.iter().filter(|m| keep(m)).collect();
    v.sort_by(|a, b| cmp(a, b).then(a.idx.cmp(&b.idx)));
    if desc {
        v.reverse();
    }
    v.into_iter().map(|m| m.idx).collect()
}

fn page(all: &[usize], n: usize) -> Vec<usize> {
    all.iter()
        .skip((n - 1) * PAGE)
        .take(PAGE)
        .copied()
        .collect()
}

/// The chi² box of a page or fragment.
fn chi2_box(body: &str) -> String {
    let at = body.find("<div class=\"chi2\"").expect("a chi² box");
    let end = body[at..].find("</div>").expect("its end");
    body[at..at + end].to_string()
}

fn unescape(s: &str) -> String {
    s.replace("&amp;", "&").replace("&#38;", "&")
}

/// The `data-refresh` URL of the tasks section.
fn tasks_refresh(body: &str) -> String {
    let re = regex::Regex::new(r#"<section class="run-tasks" data-refresh="([^"]*)""#).expect("re");
    unescape(&re.captures(body).expect("a live tasks section")[1])
}

#[tokio::test]
async fn thousands_of_tasks_are_paged_sorted_and_searched_on_the_server() {
    let server = TestServer::start().await;
    let models = big_run(&server).await;
    let mut anon = Browser::new(&server);
    let frag = |q: &str| format!("/tests/tasks/{BIG}{q}");

    // The default (Fishtest's): the highest task number first, 25 rows, the page said in
    // words.
    let by_idx = |a: &Model, b: &Model| a.idx.cmp(&b.idx);
    let newest = order(&models, |_| true, by_idx, true);
    let p = anon.get(&frag("")).await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert_eq!(rows(&p.body), page(&newest, 1));
    assert!(
        p.body.contains(&format!(
            "Tasks 1–25 of {TASKS}; sorted by task number, highest first; 25 a page."
        )),
        "{}",
        &p.body[..2000.min(p.body.len())]
    );
    let box1 = chi2_box(&p.body);

    // Page 2 is exactly the next 25; the chi² box is the same (over every task).
    let p = anon.get(&frag("?tasks_page=2")).await;
    assert_eq!(rows(&p.body), page(&newest, 2));
    assert!(p.body.contains("Tasks 26–50 of 3000"), "{}", p.body);
    assert_eq!(chi2_box(&p.body), box1);
    // Past the last page: the last page.
    let p = anon.get(&frag("?tasks_page=999")).await;
    assert_eq!(rows(&p.body), page(&newest, TASKS / PAGE));

    // Each sort key, both ways.
    let by_worker = |a: &Model, b: &Model| a.worker.to_lowercase().cmp(&b.worker.to_lowercase());
    let by_games = |a: &Model, b: &Model| a.played.cmp(&b.played);
    let rank = |m: &Model| match m.state {
        "active" => 0,
        "dead" => 2,
        _ => 4,
    };
    let by_state = |a: &Model, b: &Model| rank(a).cmp(&rank(b));
    let by_minute = |a: &Model, b: &Model| a.minute.cmp(&b.minute);
    let no_crashes = |_: &Model, _: &Model| std::cmp::Ordering::Equal;
    let cases: Vec<(&str, Vec<usize>)> = vec![
        (
            "?tasks_sort=worker&tasks_order=asc",
            order(&models, |_| true, by_worker, false),
        ),
        (
            "?tasks_sort=worker&tasks_order=desc&tasks_page=3",
            page(&order(&models, |_| true, by_worker, true), 3),
        ),
        (
            "?tasks_sort=games",
            order(&models, |_| true, by_games, true),
        ),
        (
            "?tasks_sort=games&tasks_order=asc&tasks_page=60",
            page(&order(&models, |_| true, by_games, false), 60),
        ),
        (
            "?tasks_sort=state",
            order(&models, |_| true, by_state, false),
        ),
        (
            "?tasks_sort=idx&tasks_order=desc",
            order(&models, |_| true, by_idx, true),
        ),
        (
            "?tasks_sort=updated&tasks_order=asc",
            order(&models, |_| true, by_minute, false),
        ),
        (
            "?tasks_sort=updated",
            order(&models, |_| true, by_minute, true),
        ),
        // Fishtest's parameter and key names.
        (
            "?sort=last_updated&order=asc",
            order(&models, |_| true, by_minute, false),
        ),
        (
            "?sort=played&page=2",
            page(&order(&models, |_| true, by_games, true), 2),
        ),
        (
            "?sort=worker&order=desc&page=3",
            page(&order(&models, |_| true, by_worker, true), 3),
        ),
        (
            "?sort=crashes&order=asc",
            order(&models, |_| true, no_crashes, false),
        ),
        ("?sort=time", order(&models, |_| true, no_crashes, true)),
        // Ours win over Fishtest's when both are given.
        (
            "?tasks_sort=idx&tasks_order=asc&sort=worker&order=desc",
            order(&models, |_| true, by_idx, false),
        ),
    ];
    for (q, want) in cases {
        let p = anon.get(&frag(q)).await;
        assert_eq!(p.status, 200, "{q}: {}", p.body);
        let want: Vec<usize> = want.into_iter().take(PAGE).collect();
        assert_eq!(rows(&p.body), want, "{q}");
    }
    // Sorted by state, the active tasks come first.
    let p = anon.get(&frag("?tasks_sort=state")).await;
    assert_eq!(
        p.body.matches("<tr class=\"task-active").count(),
        (TASKS / 100).min(PAGE)
    );

    // Search: a user, a state, a system; with paging; nothing found.
    for (q, keep) in [
        (
            "user3",
            Box::new(|m: &Model| m.user == "user3") as Box<dyn Fn(&Model) -> bool>,
        ),
        ("DEAD", Box::new(|m: &Model| m.state == "dead")),
        ("windows", Box::new(|m: &Model| m.windows)),
    ] {
        let want = order(&models, &keep, by_idx, true);
        let p = anon.get(&frag(&format!("?tasks_q={q}&tasks_page=2"))).await;
        assert_eq!(rows(&p.body), page(&want, 2), "{q}");
        let fishtest = anon.get(&frag(&format!("?q={q}&page=2"))).await;
        assert_eq!(rows(&fishtest.body), page(&want, 2), "q={q}");
        assert!(
            p.body.contains(&format!(
                "Tasks 26–50 of {} matching “{q}” (of {TASKS})",
                want.len()
            )),
            "{q}: {}",
            p.body
        );
        assert_eq!(chi2_box(&p.body), box1, "the chi² box ignores the search");
    }
    let p = anon.get(&frag("?tasks_q=nobody-at-all")).await;
    assert!(rows(&p.body).is_empty());
    assert!(
        p.body.contains("No task matches “nobody-at-all”"),
        "{}",
        p.body
    );

    // Every row shows its worker's details.
    let p = anon.get(&frag("?tasks_sort=idx&tasks_order=asc")).await;
    for want in [
        "os: Windows 10",
        "compiler: clang++ 12.2.0",
        "os: Linux 6.1.0-18-amd64",
        "ram: 8000MiB",
        "compiler: g++ 12.2.0",
        "python: 3.11.7",
        "worker: 325",
        "cores: 8",
        "arch: x86-64-avx2",
        "<span class=\"task-name\">user0-1cores-00000000-1111</span>",
    ] {
        assert!(p.body.contains(want), "{want}");
    }

    // Bad parameters: a 400 page that names the parameter, on the fragment and the page.
    let long = "x".repeat(101);
    for (q, says) in [
        ("?tasks_sort=nope".to_string(), "tasks_sort must be one of"),
        (
            "?tasks_order=sideways".to_string(),
            "tasks_order must be asc or desc",
        ),
        (
            "?tasks_page=abc".to_string(),
            "tasks_page must be a page number",
        ),
        (
            "?tasks_page=0".to_string(),
            "tasks_page must be a page number",
        ),
        (
            "?tasks_page=99999999999999999999999".to_string(),
            "tasks_page must be a page number",
        ),
        (format!("?tasks_q={long}"), "longer than 100 characters"),
        ("?tasks_page=1&tasks_page=2".to_string(), "tasks_page"),
    ] {
        for path in [frag(&q), format!("/tests/view/{BIG}{q}")] {
            let p = anon.get(&path).await;
            assert_eq!(p.status, 400, "{path}: {}", p.body);
            assert!(p.body.contains(says), "{path}: {says} in {}", p.body);
        }
    }
}

#[tokio::test]
async fn the_run_page_carries_the_table_state_and_its_refresh_sends_that_page() {
    let server = TestServer::start().await;
    let models = big_run(&server).await;
    add_user(&server, "boss", &["--approver"]);
    let mut anon = Browser::new(&server);

    // The default page: 25 rows of 3000, the bare fragment URL, links back to the page.
    let view = format!("/tests/view/{BIG}");
    let p = anon.get(&view).await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert_eq!(rows(&p.body).len(), PAGE);
    assert_eq!(tasks_refresh(&p.body), format!("/tests/tasks/{BIG}"));
    for link in [
        format!("href=\"{view}?tasks_sort=worker&#38;tasks_order=asc#tasks\""),
        format!("href=\"{view}?tasks_sort=games&#38;tasks_order=desc#tasks\""),
        format!("href=\"{view}?tasks_sort=updated&#38;tasks_order=desc#tasks\""),
        format!("href=\"{view}?tasks_sort=idx&#38;tasks_order=asc#tasks\""),
        format!("href=\"{view}?tasks_sort=crashes&#38;tasks_order=desc#tasks\""),
        format!("href=\"{view}?tasks_page=2#tasks\""),
        format!("href=\"{view}?tasks_page=120#tasks\""),
        format!("action=\"{view}#tasks\""),
        "name=\"tasks_q\"".to_string(),
        "id=\"tasks\"".to_string(),
    ] {
        assert!(p.body.contains(&link), "{link}");
    }
    // Anonymous visitors get no worker links; approvers do.
    assert!(!p.body.contains("href=\"/workers/user"));
    let (mut boss, _) = crate::ui_workers::logged_in(&server, Some("boss")).await;
    let p = boss
        .get(&format!(
            "/tests/tasks/{BIG}?tasks_sort=idx&tasks_order=asc"
        ))
        .await;
    assert!(
        p.body.contains(
            "<span class=\"task-name\"><a href=\"/workers/user0-1cores-00000000\">user0-1cores-00000000-1111</a></span>"
        ),
        "{}",
        p.body
    );

    // `show_task` (the machines lists link to it): the page that holds the task, the task
    // highlighted and anchored, and the refresh keeps both.
    let p = anon.get(&format!("{view}?show_task=2950")).await;
    assert_eq!(p.status, 200);
    let by_idx = order(&models, |_| true, |a, b| a.idx.cmp(&b.idx), true);
    assert_eq!(rows(&p.body), page(&by_idx, 2));
    assert!(
        p.body
            .contains("task-shown\" data-task=\"2950\" id=\"task-2950\""),
        "{}",
        p.body
    );
    assert_eq!(p.body.matches("task-shown").count(), 1);
    assert_eq!(
        tasks_refresh(&p.body),
        format!("/tests/tasks/{BIG}?tasks_page=2&show_task=2950")
    );
    // A page asked for wins; an unknown task shows page 1, nothing highlighted.
    let p = anon
        .get(&format!("{view}?show_task=2950&tasks_page=3"))
        .await;
    assert_eq!(rows(&p.body), page(&by_idx, 3));
    let p = anon.get(&format!("{view}?show_task=99999")).await;
    assert_eq!(rows(&p.body), page(&by_idx, 1));
    assert!(!p.body.contains("task-shown"));

    // A page asked for with sort, search and page: its refresh asks for the same page only.
    let q = "?tasks_sort=games&tasks_order=asc&tasks_q=user2&tasks_page=3";
    let p = anon.get(&format!("{view}{q}")).await;
    assert_eq!(p.status, 200);
    let shown = rows(&p.body);
    let want = order(
        &models,
        |m| m.user == "user2",
        |a, b| a.played.cmp(&b.played),
        false,
    );
    assert_eq!(shown, page(&want, 3));
    let refresh = tasks_refresh(&p.body);
    assert_eq!(refresh, format!("/tests/tasks/{BIG}{q}"));
    let f = anon.get(&refresh).await;
    assert_eq!(f.status, 200);
    assert_eq!(rows(&f.body), shown, "the refresh sends the page on screen");
    assert!(!f.body.contains("<html"), "a fragment");
    // One page of 3000 tasks: a small answer (the whole table was about 1.2 MB).
    assert!(f.body.len() < 150_000, "{} bytes", f.body.len());
    // The search form keeps the sort; the pager keeps sort and search.
    for kept in [
        "<input type=\"hidden\" name=\"tasks_sort\" value=\"games\">",
        "<input type=\"hidden\" name=\"tasks_order\" value=\"asc\">",
        "value=\"user2\"",
        &format!(
            "href=\"{view}?tasks_sort=games&#38;tasks_order=asc&#38;tasks_q=user2&#38;tasks_page=4#tasks\""
        ),
    ] {
        assert!(p.body.contains(kept), "{kept}");
    }
}

/// The positions of the argument rows named, in the page.
fn arg_at(body: &str, name: &str) -> usize {
    body.find(&format!("<th scope=\"row\">{name}</th>"))
        .unwrap_or_else(|| panic!("no {name} row"))
}

#[tokio::test]
async fn the_arguments_an_approver_checks_in_reading_order_and_spsa_in_full() {
    let server = TestServer::start().await;
    add_user(&server, "owner", &[]);
    let mut args = sprt_args(0.0, 2.0);
    args["new_nets"] = json!(["nn-0123456789ab.nnue"]);
    crate::ui_submit::record_net(&server, "nn-0123456789ab.nnue");
    args["msg_new"] = json!("Tweak LMR");
    args["msg_base"] = json!("Bump the net");
    args["arch_filter"] = json!("avx2");
    args["compiler"] = json!("clang++");
    let id = create_run(&server, "owner", args).await;
    let mut anon = Browser::new(&server);
    let p = anon.get(&format!("/tests/view/{id}")).await;
    assert_eq!(p.status, 200, "{}", p.body);
    let names = [
        "id",
        "username",
        "tests_repo",
        "new_tag",
        "msg_new",
        "new_signature",
        "base_tag",
        "msg_base",
        "base_signature",
        "diff",
        "new_nets",
        "base_nets",
        "tc",
        "threads",
        "new_options",
        "base_options",
        "book",
        "book_depth",
        "num_games",
        "sprt",
        "itp",
        "priority",
        "throughput",
        "adjudication",
        "auto_purge",
        "arch_filter",
        "compiler",
        "approved",
        "start_time",
        "last_updated",
        "info",
        "document size",
        "events",
        "raw statistics",
    ];
    let at: Vec<usize> = names.iter().map(|n| arg_at(&p.body, n)).collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{names:?} at {at:?}");
    for want in [
        "<td>Tweak LMR</td>",
        "<td>nn-0123456789ab.nnue</td>",
        "<td>100.00</td>",
        "state: - (normalized)",
        "<td>avx2</td>",
        "<th colspan=\"2\" scope=\"rowgroup\">Nets</th>",
    ] {
        assert!(p.body.contains(want), "{want}");
    }
    let size = regex::Regex::new(r"<td>(\d+) bytes</td>").expect("re");
    let bytes: u64 = size.captures(&p.body).expect("a document size")[1]
        .parse()
        .expect("a number");
    assert!((1000..100_000).contains(&bytes), "{bytes}");

    // SPSA: Fishtest's summary and every column of its table.
    let mut spsa = fixed_args(40_000);
    spsa["spsa"] = json!({
        "raw_params": "Tempo,10,0,50,2,0.002\nAspiration,20,5,60,4,0.0025",
        "a_ratio": 0.1,
    });
    let id = create_run(&server, "owner", spsa).await;
    let p = anon.get(&format!("/tests/view/{id}")).await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(
        p.body
            .contains("iter: 1, A: 2000, alpha: 0.602, gamma: 0.101"),
        "{}",
        p.body
    );
    assert!(
        p.body
            .contains("<th>Parameter</th><th>Value</th><th>Start</th><th>Min</th><th>Max</th>"),
        "{}",
        p.body
    );
    for col in ["c</th>", "c_end</th>", "r</th>", "r_end</th>"] {
        assert!(p.body.contains(col), "{col}");
    }
    // Tempo: c_end 2, r_end 0.002; at iteration 1, c = c_end · N^γ (N = 20000) and R = r_end ·
    // c_end² · (A + N)^α / (A + 1)^α / c².
    let n: f64 = 20_000.0;
    let c = 2.0 * n.powf(0.101);
    let a = 0.002 * 4.0 * (2000.0 + n).powf(0.602) / 2001f64.powf(0.602);
    let row = format!(
        "<tr><td>Tempo</td><td>10.00</td><td>10</td><td>0</td><td>50</td><td>{c:.3}</td><td>2.000</td><td>{:.2e}</td><td>2.00e-3</td></tr>",
        a / (c * c)
    );
    assert!(p.body.contains(&row), "{row} in {}", p.body);
}

#[tokio::test]
async fn the_run_page_and_its_tasks_table_in_chromium_at_390_and_1400_px() {
    let server = TestServer::start().await;
    let models = big_run(&server).await;
    let view = format!("/tests/view/{BIG}");
    let driver = start_driver().await;
    let c = browser(&driver).await;
    for width in [390u32, 1400] {
        set_width(&c, width).await;
        c.goto(&server.url(&view)).await.expect("the run page");
        wait_for_answer(&c, "25 a page").await;
        let (scroll, inner) = widths(&c).await;
        assert!(
            scroll <= inner,
            "the run page at {width} px scrolls sideways ({scroll} > {inner})"
        );
        screenshot(&c, &format!("run_page_{width}")).await;

        // Without JavaScript's help: the Worker header's link reloads the page at #tasks,
        // sorted by worker.
        let link = c
            .find(Locator::Css(
                "table.tasks th a[href*=\"tasks_sort=worker\"]",
            ))
            .await
            .expect("the Worker header");
        link.click().await.expect("sort by worker");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let url = c.current_url().await.expect("url");
            if url.as_str().contains("tasks_sort=worker") {
                assert!(url.as_str().ends_with("#tasks"), "{url}");
                break;
            }
            assert!(std::time::Instant::now() < deadline, "never sorted: {url}");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        body_text(&c).await;
        let first = c
            .find(Locator::Css("table.tasks tbody tr .task-name"))
            .await
            .expect("a row")
            .text()
            .await
            .expect("text");
        let mut names: Vec<String> = models.iter().map(|m| m.worker.to_lowercase()).collect();
        names.sort();
        assert_eq!(first.to_lowercase(), names[0]);
        let (scroll, inner) = widths(&c).await;
        assert!(
            scroll <= inner,
            "the tasks table at {width} px scrolls the page sideways ({scroll} > {inner})"
        );
        let table = c
            .find(Locator::Css("#tasks"))
            .await
            .expect("the tasks heading");
        c.execute(
            "arguments[0].scrollIntoView();",
            vec![serde_json::to_value(table).expect("element")],
        )
        .await
        .expect("scroll");
        screenshot(&c, &format!("tasks_table_{width}")).await;

        // The search box: a GET form to the page.
        let input = c
            .find(Locator::Css("input[name=\"tasks_q\"]"))
            .await
            .expect("the search box");
        input.send_keys("windows").await.expect("type");
        c.find(Locator::Css("form.tasks-search button"))
            .await
            .expect("Search")
            .click()
            .await
            .expect("search");
        let want = models.iter().filter(|m| m.windows).count();
        wait_for_answer(&c, &format!("of {want} matching “windows”")).await;
        let (scroll, inner) = widths(&c).await;
        assert!(
            scroll <= inner,
            "the searched table at {width} px ({scroll} > {inner})"
        );
    }
    c.close().await.expect("close the browser");
}
