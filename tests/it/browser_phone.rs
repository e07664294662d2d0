//! The layout in real Chromium (helpers of `browser.rs`) at a phone's width (390 px, and
//! 360 px), a tablet's (800 px) and a wide screen's (1400 px): no page scrolls sideways (the
//! document is no wider than the viewport), the navigation is reachable (on a phone through the
//! Menu button, which needs no JavaScript) and Logout is on screen when logged in; on a touch
//! screen every control is at least 44 px tall. Each check is of the page asked for: the
//! browser is still at its address and shows no error page. Screenshots of the dashboard, a run page, its
//! tasks table and the open menu go to `target/screenshots/` (`phone_*.png`, `wide_*.png`).

use fantoccini::{Client, Locator};
use serde_json::json;

use crate::browser::{
    body_text, browser, fill, screenshot, start_driver, submit, wait_for_answer, wait_to_leave,
};
use crate::fleet::{
    PASSWORD, Totals, Worker, add_user, approve, create_run, fixed_args, sprt_args,
};
use crate::harness::TestServer;

const EVEN: [f64; 5] = [0.05, 0.2, 0.5, 0.2, 0.05];

/// The pages anyone sees.
const PUBLIC: [&str; 11] = [
    "/tests",
    "/tests/finished",
    "/nns",
    "/actions",
    "/contributors",
    "/tests/machines",
    "/login",
    "/signup",
    "/sprt_calc",
    "/rate_limits",
    "/forgot",
];

/// The pages of a logged-in approver (besides [`PUBLIC`]'s and the run page).
const LOGGED_IN: [&str; 9] = [
    "/tests/run",
    "/user_management",
    "/upload",
    "/user",
    "/tests/user/alice",
    "/workers/show",
    "/contributors/monthly",
    "/notifications",
    "/user/tokens",
];

/// Sizes the window so that the page's viewport is `width` CSS pixels wide.
pub(crate) async fn set_width(c: &Client, width: u32) {
    c.set_window_size(width, 900).await.expect("window size");
    let inner = c
        .execute("return window.innerWidth;", vec![])
        .await
        .expect("innerWidth");
    assert_eq!(inner, json!(width), "the viewport's width");
}

/// The document's width and the viewport's: equal when nothing sticks out sideways.
pub(crate) async fn widths(c: &Client) -> (u64, u64) {
    let v = c
        .execute(
            "return [document.documentElement.scrollWidth, window.innerWidth];",
            vec![],
        )
        .await
        .expect("widths");
    (
        v[0].as_u64().expect("scrollWidth"),
        v[1].as_u64().expect("innerWidth"),
    )
}

/// The outermost elements that reach past the viewport's right edge (for a failure's
/// message).
async fn sticking_out(c: &Client) -> String {
    let v = c
        .execute(
            "const w = window.innerWidth; return Array.from(document.querySelectorAll('body *'))\
             .filter(e => e.getBoundingClientRect().right > w + 0.5 && \
               !(e.parentElement.getBoundingClientRect().right > w + 0.5))\
             .slice(0, 12).map(e => e.tagName + '.' + e.className + ' ' + \
             Math.round(e.getBoundingClientRect().right)).join('\\n');",
            vec![],
        )
        .await
        .expect("elements");
    v.as_str().unwrap_or_default().to_string()
}

async fn assert_fits(c: &Client, page: &str, width: u32) {
    let (scroll, inner) = widths(c).await;
    assert!(
        scroll <= inner,
        "{page} at {width} px scrolls sideways ({scroll} > {inner}):\n{}",
        sticking_out(c).await
    );
}

/// Whether `css` names an element that is displayed and lies inside the viewport.
async fn on_screen(c: &Client, css: &str) -> bool {
    let Ok(e) = c.find(Locator::Css(css)).await else {
        return false;
    };
    if !e.is_displayed().await.unwrap_or(false) {
        return false;
    }
    let v = c
        .execute(
            "const r = arguments[0].getBoundingClientRect(); \
             return r.width > 0 && r.height > 0 && r.left >= 0 && r.right <= window.innerWidth;",
            vec![serde_json::to_value(e).expect("element")],
        )
        .await
        .expect("rect");
    v == json!(true)
}

const FINISHED: &str = ".sidebar a[href=\"/tests/finished\"]";

/// The navigation is reachable: shown beside the page on a wide screen, behind the Menu
/// button on a phone (which opens it without JavaScript, and the page still fits).
async fn assert_navigation(c: &Client, page: &str, width: u32) {
    if width > 700 {
        assert!(
            on_screen(c, FINISHED).await,
            "{page} at {width} px: the sidebar's Finished link"
        );
        return;
    }
    assert!(
        !on_screen(c, FINISHED).await,
        "{page} at {width} px: the menu starts folded"
    );
    assert!(
        on_screen(c, "label.menu-button").await,
        "{page} at {width} px: the Menu button"
    );
    c.find(Locator::Css("label.menu-button"))
        .await
        .expect("the Menu button")
        .click()
        .await
        .expect("open the menu");
    assert!(
        on_screen(c, FINISHED).await,
        "{page} at {width} px: the opened menu's Finished link"
    );
    assert_fits(c, &format!("{page} (menu open)"), width).await;
}

/// Opens `page` and checks that the browser shows it: still at that path (not sent to
/// `/login` or elsewhere) and not an error page (whose only way on is "Go to Home").
async fn open(c: &Client, server: &TestServer, page: &str) {
    c.goto(&server.url(page)).await.expect("page");
    let text = body_text(c).await;
    let url = c.current_url().await.expect("the page's address");
    let path = page.split(['?', '#']).next().unwrap_or(page);
    assert_eq!(url.path(), path, "asked for {page}, got {url}:\n{text}");
    assert!(
        !text.contains("Go to Home"),
        "asked for {page}, got an error page:\n{text}"
    );
}

/// Visits `page` at `width` and checks the layout; `logged_in`: Logout is on screen.
async fn check_page(c: &Client, server: &TestServer, page: &str, width: u32, logged_in: bool) {
    open(c, server, page).await;
    assert_fits(c, page, width).await;
    if logged_in {
        assert!(
            on_screen(c, "form[action=\"/logout\"] button").await,
            "{page} at {width} px: Logout"
        );
    }
    assert_navigation(c, page, width).await;
}

#[tokio::test]
async fn every_page_fits_a_phone_and_a_wide_screen() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    let run = create_run(&server, "alice", fixed_args(40000)).await;
    approve(&server, "boss", &run).await;
    // A few workers with their tasks, for the run page's tasks table.
    for n in 0..4 {
        let mut w = Worker::new("alice", 4 + n, 90 + n);
        let reply = w.request_task(&server).await;
        let task_id = reply["task_id"].as_u64().expect("task");
        let mut totals = Totals::default();
        while totals.games() < 16 + 8 * u64::from(n) {
            totals.play_pair(&mut w.rng, EVEN);
        }
        let body = json!({"run_id": run, "task_id": task_id, "stats": totals.json()});
        let (status, v) = w.call(&server, "/api/update_task", body).await;
        assert_eq!(status, 200, "{v}");
    }
    let view = format!("/tests/view/{run}");
    let stats = format!("/tests/stats/{run}");
    // Live Elo is an SPRT's page (another run's is an error page).
    let sprt = create_run(&server, "alice", sprt_args(0.0, 2.0)).await;
    approve(&server, "boss", &sprt).await;
    let live_elo = format!("/tests/live_elo/{sprt}");
    let driver = start_driver().await;
    let c = browser(&driver).await;

    // Anonymous, also at the narrowest phones' width and a tablet's.
    for width in [360, 390, 800, 1400] {
        set_width(&c, width).await;
        for page in PUBLIC.iter().copied().chain([view.as_str()]) {
            check_page(&c, &server, page, width, false).await;
        }
    }

    c.goto(&server.url("/login")).await.expect("login page");
    fill(&c, "username", "boss").await;
    fill(&c, "password", PASSWORD).await;
    submit(&c, "main form").await;
    wait_to_leave(&c, "/login").await;
    wait_for_answer(&c, "Logout").await;
    for width in [390, 1400] {
        set_width(&c, width).await;
        let name = if width < 1000 { "phone" } else { "wide" };
        for page in PUBLIC
            .iter()
            .filter(|p| !matches!(**p, "/login" | "/signup" | "/forgot"))
            .chain(LOGGED_IN.iter())
            .copied()
            .chain([view.as_str(), stats.as_str(), live_elo.as_str()])
        {
            check_page(&c, &server, page, width, true).await;
        }
        c.goto(&server.url("/tests/run"))
            .await
            .expect("the new-test form");
        wait_for_answer(&c, "Test branch").await;
        screenshot(&c, &format!("{name}_new_test")).await;
        c.goto(&server.url(&stats)).await.expect("the statistics");
        body_text(&c).await;
        screenshot(&c, &format!("{name}_stats")).await;
        c.goto(&server.url("/tests")).await.expect("dashboard");
        wait_for_answer(&c, "patch").await;
        screenshot(&c, &format!("{name}_dashboard")).await;
        c.goto(&server.url(&view)).await.expect("run page");
        wait_for_answer(&c, "alice-4cores-").await;
        screenshot(&c, &format!("{name}_run")).await;
        let tasks = c
            .find(Locator::Css("table.tasks"))
            .await
            .expect("the tasks table");
        c.execute(
            "arguments[0].scrollIntoView();",
            vec![serde_json::to_value(tasks).expect("element")],
        )
        .await
        .expect("scroll");
        screenshot(&c, &format!("{name}_tasks")).await;
        if width < 1000 {
            c.find(Locator::Css("label.menu-button"))
                .await
                .expect("the Menu button")
                .click()
                .await
                .expect("open the menu");
            screenshot(&c, &format!("{name}_menu")).await;
        }
    }
    c.close().await.expect("close the browser");
}

/// A Chromium session that emulates a phone's touch screen (`pointer: coarse`) at 390 px.
async fn touch_browser(driver: &crate::browser::Driver) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
            "mobileEmulation": {"deviceMetrics": {"width": 390, "height": 844, "pixelRatio": 2, "touch": true}},
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    fantoccini::ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a Chromium session")
}

/// The controls shown on the page that are less than 44 px tall, as `tag.class text height`.
async fn small_controls(c: &Client) -> Vec<String> {
    let v = c
        .execute(
            "return Array.from(document.querySelectorAll(\
               'button, input:not([type=hidden]):not(.menu-toggle), select, textarea, summary, \
                .menu-button, .topbar a, .sidebar a, nav.tabs a, nav.pager a'))\
             .filter(e => e.getClientRects().length > 0)\
             .filter(e => e.getBoundingClientRect().height < 43.5)\
             .map(e => e.tagName + '.' + e.className + ' ' + (e.textContent || e.name).trim() \
                  + ' ' + e.getBoundingClientRect().height);",
            vec![],
        )
        .await
        .expect("controls");
    v.as_array()
        .expect("a list")
        .iter()
        .map(|s| s.as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn on_a_touch_screen_every_control_is_at_least_44_px_tall() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    let run = create_run(&server, "alice", fixed_args(1000)).await;
    approve(&server, "boss", &run).await;
    let driver = start_driver().await;
    let c = touch_browser(&driver).await;
    c.goto(&server.url("/login")).await.expect("login page");
    let coarse = c
        .execute("return matchMedia('(pointer: coarse)').matches;", vec![])
        .await
        .expect("media");
    assert_eq!(coarse, json!(true), "the session emulates a touch screen");
    fill(&c, "username", "boss").await;
    fill(&c, "password", PASSWORD).await;
    submit(&c, "main form").await;
    wait_to_leave(&c, "/login").await;
    wait_for_answer(&c, "Logout").await;
    let view = format!("/tests/view/{run}");
    for page in PUBLIC
        .iter()
        .filter(|p| {
            !p.starts_with("/login") && !p.starts_with("/signup") && !p.starts_with("/forgot")
        })
        .chain(LOGGED_IN.iter())
        .copied()
        .chain([view.as_str()])
    {
        open(&c, &server, page).await;
        // The menu open, so its links are measured too.
        c.find(Locator::Css("label.menu-button"))
            .await
            .expect("the Menu button")
            .click()
            .await
            .expect("open the menu");
        let small = small_controls(&c).await;
        assert!(
            small.is_empty(),
            "{page}: controls under 44 px:\n{}",
            small.join("\n")
        );
        assert_fits(&c, page, 390).await;
    }
    screenshot(&c, "touch_run").await;
    c.close().await.expect("close the browser");
}
