//! The statistics pages in real Chromium: the charts load as images under the page's CSP, the
//! stats page refreshes itself as a worker plays, and screenshots of the stats page, the
//! charts, live Elo and the SPRT calculator are saved under `target/screenshots/`.

use std::time::{Duration, Instant};

use crate::browser::{body_text, browser, screenshot, start_driver};
use crate::fleet::{Worker, add_user, approve, create_run, sprt_args};
use crate::harness::TestServer;
use crate::ui_stats::play_batches;

/// Whether every `<img>` of the page has loaded (a CSP refusal or a broken SVG leaves
/// `naturalWidth` at 0).
async fn images_loaded(c: &fantoccini::Client) -> bool {
    let v = c
        .execute(
            "return Array.from(document.images).every(i => i.complete && i.naturalWidth > 0) \
             && document.images.length > 0;",
            vec![],
        )
        .await
        .expect("script");
    v.as_bool() == Some(true)
}

async fn wait_images(c: &fantoccini::Client) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !images_loaded(c).await {
        assert!(Instant::now() < deadline, "the charts never loaded");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn the_stats_pages_render_their_charts_and_refresh_in_chromium() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    let run = create_run(&server, "alice", sprt_args(0.0, 2.0)).await;
    approve(&server, "boss", &run).await;
    let mut w = Worker::new("alice", 4, 21);
    play_batches(&server, &run, &mut w, 60).await;

    let driver = start_driver().await;
    let c = browser(&driver).await;
    c.goto(&server.url(&format!("/tests/stats/{run}")))
        .await
        .expect("stats page");
    let text = body_text(&c).await;
    assert!(text.contains("Raw Statistics for test"), "{text}");
    wait_images(&c).await;
    screenshot(&c, "stats").await;

    // More games: static/refresh.js swaps the new content in without a reload.
    let (_, before) = server.get_json(&format!("/api/get_run/{run}")).await;
    let games_before = before["results"]["wins"].as_u64().unwrap_or(0)
        + before["results"]["losses"].as_u64().unwrap_or(0)
        + before["results"]["draws"].as_u64().unwrap_or(0);
    play_batches(&server, &run, &mut w, 20).await;
    let (_, after) = server.get_json(&format!("/api/get_run/{run}")).await;
    let games_after = after["results"]["wins"].as_u64().unwrap_or(0)
        + after["results"]["losses"].as_u64().unwrap_or(0)
        + after["results"]["draws"].as_u64().unwrap_or(0);
    assert!(games_after > games_before);
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let text = body_text(&c).await;
        if text.contains(&games_after.to_string()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the stats never refreshed to {games_after} games:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    for name in ["elo", "llr"] {
        c.goto(&server.url(&format!("/tests/chart/{run}/{name}.svg")))
            .await
            .expect("chart");
        tokio::time::sleep(Duration::from_millis(300)).await;
        screenshot(&c, &format!("chart_{name}")).await;
    }

    c.goto(&server.url(&format!("/tests/live_elo/{run}")))
        .await
        .expect("live elo");
    let text = body_text(&c).await;
    assert!(text.contains("Live Elo for SPRT test"), "{text}");
    wait_images(&c).await;
    screenshot(&c, "live_elo").await;

    c.goto(&server.url("/sprt_calc?elo0=0&elo1=2&draw_ratio=0.49&rms_bias=191"))
        .await
        .expect("sprt calc");
    let text = body_text(&c).await;
    assert!(text.contains("pass probability 5.0%"), "{text}");
    screenshot(&c, "sprt_calc").await;
    c.close().await.expect("close the browser");
}
