//! The live dashboard in real Chromium (helpers of `browser.rs`), at 390 px and 1400 px: while
//! a worker plays, the run's numbers change on the open page without a reload (a marker set on
//! `window` survives); a folded panel stays folded after a reload, an opened workers panel
//! stays open and its table is searched as you type; an active-run filter ticked off hides its
//! rows at once and still after a reload (its cookie); the page never scrolls sideways at
//! 390 px. Screenshots: `target/screenshots/dashboard_{390,1400}.png`.

use std::time::{Duration, Instant};

use fantoccini::{Client, Locator};
use serde_json::{Value, json};

use crate::browser::{body_text, browser, fill, screenshot, start_driver, wait_for_answer};
use crate::fleet::{Totals, Worker, add_user, approve, create_run, fixed_args, sprt_args};
use crate::harness::TestServer;

const EVEN: [f64; 5] = [0.05, 0.2, 0.5, 0.2, 0.05];

async fn js(c: &Client, script: &str) -> Value {
    c.execute(script, vec![]).await.expect("script")
}

async fn set_width(c: &Client, width: u32) {
    c.set_window_size(width, 900).await.expect("window size");
    assert_eq!(
        js(c, "return window.innerWidth;").await,
        json!(width),
        "the viewport's width"
    );
}

/// Loads the dashboard and waits for its scripts (deferred) to have run.
async fn open_dashboard(c: &Client, server: &TestServer) {
    c.goto(&server.url("/tests")).await.expect("dashboard");
    wait_for_answer(c, "Active - ").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while js(
        c,
        "return typeof window.shoalRefresh === 'function' && document.readyState === 'complete';",
    )
    .await
        != json!(true)
    {
        assert!(Instant::now() < deadline, "the scripts never ran");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The active run's results box as the page shows it now.
async fn results_text(c: &Client) -> String {
    js(
        c,
        "const e = document.querySelector('#active tr[data-test-type=\"numgames\"] pre.results'); \
         return e ? e.textContent : '';",
    )
    .await
    .as_str()
    .unwrap_or_default()
    .to_string()
}

/// Sends the worker's next results (`games` in all) and waits until the open page shows them
/// without reloading: the marker set on `window` before is still there after.
async fn numbers_change_in_place(
    c: &Client,
    server: &TestServer,
    w: &mut Worker,
    run: &str,
    task: u64,
    totals: &mut Totals,
    games: u64,
) {
    js(c, "window.__shoalMarker = 'still here'; return null;").await;
    let before = results_text(c).await;
    assert!(!before.contains(&format!("Total: {games} ")), "{before}");
    while totals.games() < games {
        totals.play_pair(&mut w.rng, EVEN);
    }
    let body = json!({"run_id": run, "task_id": task, "stats": totals.json()});
    let (status, v) = w.call(server, "/api/update_task", body).await;
    assert_eq!(status, 200, "{v}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = results_text(c).await;
        if now.contains(&format!("Total: {games} ")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the page never showed {games} games without a reload: {now}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(
        js(c, "return window.__shoalMarker || null;").await,
        json!("still here"),
        "the page was not reloaded"
    );
}

async fn is_open(c: &Client, id: &str) -> bool {
    js(c, &format!("return document.getElementById('{id}').open;")).await == json!(true)
}

async fn click(c: &Client, css: &str) {
    c.find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("click {css}: {e}"));
}

/// Whether the active row of kind `kind` (a test type) is displayed.
async fn row_shown(c: &Client, kind: &str) -> bool {
    js(
        c,
        &format!(
            "const r = document.querySelector('#active tr[data-test-type=\"{kind}\"]'); \
             return !!r && getComputedStyle(r).display !== 'none';"
        ),
    )
    .await
        == json!(true)
}

#[tokio::test]
async fn the_dashboard_refreshes_in_place_folds_and_filters() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    // A fixed-games run a worker plays, an SPRT another worker holds, one pending approval.
    let mut one = fixed_args(40000);
    one["max_active_tasks"] = json!(1);
    let run = create_run(&server, "alice", one).await;
    approve(&server, "boss", &run).await;
    let mut w = Worker::new("alice", 4, 1);
    let reply = w.request_task(&server).await;
    assert_eq!(reply["run"]["_id"], run.as_str(), "{reply}");
    let task = reply["task_id"].as_u64().expect("task");
    let sprt = create_run(&server, "alice", sprt_args(0.0, 2.0)).await;
    approve(&server, "boss", &sprt).await;
    let other = Worker::new("alice", 8, 2);
    let reply = other.request_task(&server).await;
    assert_eq!(reply["run"]["_id"], sprt.as_str(), "{reply}");
    create_run(&server, "alice", fixed_args(1000)).await;
    let mut totals = Totals::default();

    let driver = start_driver().await;
    let c = browser(&driver).await;
    let mut games = 0;
    for width in [1400, 390] {
        set_width(&c, width).await;
        open_dashboard(&c, &server).await;
        games += 100;
        numbers_change_in_place(&c, &server, &mut w, &run, task, &mut totals, games).await;

        // Fold the pending panel and open the workers panel: both kept across a reload.
        assert!(is_open(&c, "pending").await && !is_open(&c, "workers").await);
        click(&c, "#pending > summary").await;
        click(&c, "#workers > summary").await;
        assert!(!is_open(&c, "pending").await && is_open(&c, "workers").await);
        // The folded panel's table was not in the page: opening it fetched it.
        wait_for_answer(&c, "alice-8cores-00000002").await;
        open_dashboard(&c, &server).await;
        assert!(
            !is_open(&c, "pending").await,
            "{width} px: folded after a reload"
        );
        assert!(
            is_open(&c, "workers").await,
            "{width} px: opened after a reload"
        );
        // Opened from the remembered fold: fetched at once.
        wait_for_answer(&c, "alice-8cores-00000002").await;
        if width > 1000 {
            // Searched as you type: the table alone is fetched again.
            js(&c, "window.__shoalMarker = 'still here'; return null;").await;
            fill(&c, "workers_q", "8cores").await;
            let text = wait_for_answer(&c, "1 of 2 machines match").await;
            assert!(!text.contains("alice-4cores-00000001"), "{text}");
            assert_eq!(
                js(&c, "return window.__shoalMarker || null;").await,
                json!("still here"),
                "the page was not reloaded"
            );
        }
        // Open again for the next width.
        click(&c, "#pending > summary").await;

        // Tick off fixed games: its row hides at once, and still after a reload.
        if !is_open(&c, "active-filters").await {
            click(&c, "#active-filters > summary").await;
        }
        assert!(row_shown(&c, "numgames").await && row_shown(&c, "sprt").await);
        click(&c, "#active-filters input[name=\"numgames\"]").await;
        assert!(!row_shown(&c, "numgames").await && row_shown(&c, "sprt").await);
        assert!(body_text(&c).await.contains("Active - 2 (1) tests"));
        open_dashboard(&c, &server).await;
        assert!(
            !row_shown(&c, "numgames").await,
            "{width} px: the filter kept"
        );
        assert!(row_shown(&c, "sprt").await);
        click(&c, "#active-filters input[name=\"numgames\"]").await;
        assert!(row_shown(&c, "numgames").await);
        let text = body_text(&c).await;
        assert!(text.contains("Active - 2 tests"), "{text}");
        assert!(!text.contains("1 of 2 shown"), "{text}");

        // The page fits, with every panel open.
        let (scroll, inner) = {
            let v = js(
                &c,
                "return [document.documentElement.scrollWidth, window.innerWidth];",
            )
            .await;
            (v[0].as_u64().expect("width"), v[1].as_u64().expect("width"))
        };
        assert!(
            scroll <= inner,
            "{width} px scrolls sideways: {scroll} > {inner}"
        );
        js(&c, "window.scrollTo(0, 0); return null;").await;
        screenshot(&c, &format!("dashboard_{width}")).await;
        // The next width starts from the defaults.
        js(
            &c,
            "localStorage.clear(); document.cookie = 'active_run_filters=; max-age=0; path=/'; return null;",
        )
        .await;
    }
    c.close().await.expect("close the browser");
}
