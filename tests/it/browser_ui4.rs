//! Issue 37 in real Chromium (helpers of `browser.rs`), at a 390 px phone and a 1400 px
//! screen: run lists as cards on the phone (each card inside the viewport, its results box
//! whole, at least 7 runs to an 844 px screen) and tables on the wide screen; the new-test
//! form's height and where Submit is, its fields shown only when they apply; the charts' phone
//! layout (labels of 11 px or more as shown) and dark colours; `show_task` and `#task-N`
//! scrolled to; the light/dark switch remembered; text contrast of 4.5:1 as the browser
//! computes the colours, in both themes; targets of at least 24 px. Screenshots go to
//! `target/screenshots/ui4_*.png` for a person to look at.

use std::time::{Duration, Instant};

use fantoccini::{Client, Locator};
use serde_json::{Value, json};

use crate::browser::{body_text, browser, fill, screenshot, start_driver, submit, wait_to_leave};
use crate::fleet::{PASSWORD, Worker, add_user, approve, create_run, fixed_args, sprt_args};
use crate::harness::TestServer;

const EVEN: [f64; 5] = [0.05, 0.2, 0.5, 0.2, 0.05];
/// A phone's screen (CSS pixels).
const PHONE: (u32, u32) = (390, 844);

async fn js(c: &Client, script: &str) -> Value {
    c.execute(script, vec![]).await.expect("script")
}

/// Sizes the window so that the viewport is `w` × `h` CSS pixels.
async fn viewport(c: &Client, w: u32, h: u32) {
    c.set_window_size(w, h).await.expect("window size");
    let got = js(c, "return [window.innerWidth, window.innerHeight];").await;
    let (iw, ih) = (got[0].as_u64().unwrap_or(0), got[1].as_u64().unwrap_or(0));
    if ih != u64::from(h) {
        // The window has a frame: grow it by the difference.
        let extra = u32::try_from(u64::from(h).saturating_sub(ih)).unwrap_or(0);
        c.set_window_size(w, h + extra).await.expect("window size");
    }
    assert_eq!(iw, u64::from(w), "the viewport's width");
}

async fn open(c: &Client, server: &TestServer, path: &str) {
    c.goto(&server.url(path)).await.expect("page");
    let deadline = Instant::now() + Duration::from_secs(30);
    while js(c, "return document.readyState;").await != json!("complete") {
        assert!(Instant::now() < deadline, "{path} never finished loading");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn log_in(c: &Client, server: &TestServer, name: &str) {
    c.goto(&server.url("/login")).await.expect("login page");
    fill(c, "username", name).await;
    fill(c, "password", PASSWORD).await;
    submit(c, "main form").await;
    wait_to_leave(c, "/login").await;
}

/// Finished runs with games (two-line info, as real runs have), and one pending run.
async fn finished_runs(server: &TestServer, n: u32) {
    for i in 0..n {
        let mut args = fixed_args(1000);
        args["new_tag"] = json!(format!("patch-number-{i}"));
        args["info"] = json!("Lower the singular extension depth limit\nPassed STC and LTC.");
        let run = create_run(server, "alice", args).await;
        approve(server, "boss", &run).await;
        let mut w = Worker::new("alice", 4, 200 + i);
        // Task after task until the run has all its games.
        for _ in 0..10 {
            let reply = w.request_task(server).await;
            if reply["run"]["_id"] != json!(run) {
                break;
            }
            w.play(server, &reply, 1000, EVEN).await;
        }
    }
    create_run(server, "alice", fixed_args(2000)).await;
}

/// The run cards' boxes (left, right, top, bottom, height) and the viewport's width, plus
/// whether every results box is shown whole.
async fn cards(c: &Client) -> Value {
    js(
        c,
        "const rows = Array.from(document.querySelectorAll('table.run-list tbody tr'));\
         return {width: window.innerWidth, scroll: document.documentElement.scrollWidth,\
           boxes: rows.map(r => { const b = r.getBoundingClientRect();\
             return [b.left, b.right, b.top + window.scrollY, b.bottom + window.scrollY, b.height]; }),\
           cut: Array.from(document.querySelectorAll('table.run-list pre.results'))\
             .filter(p => p.scrollWidth > p.clientWidth + 1 || p.getBoundingClientRect().right > window.innerWidth)\
             .map(p => p.textContent),\
           thead: Array.from(document.querySelectorAll('table.run-list thead'))\
             .map(t => getComputedStyle(t).display)};",
    )
    .await
}

/// How many whole cards fit one screen of `height` px from the first card's top.
fn per_screen(boxes: &[Value], height: f64) -> usize {
    let top = boxes.first().and_then(|b| b[2].as_f64()).unwrap_or(0.0);
    boxes
        .iter()
        .filter(|b| b[3].as_f64().unwrap_or(f64::MAX) <= top + height + 0.5)
        .count()
}

#[tokio::test]
async fn run_lists_are_cards_on_a_phone_and_tables_on_a_wide_screen() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    finished_runs(&server, 10).await;
    let driver = start_driver().await;
    let c = browser(&driver).await;
    viewport(&c, PHONE.0, PHONE.1).await;
    for page in ["/tests/finished", "/tests", "/tests/user/alice"] {
        open(&c, &server, page).await;
        let name = page.trim_start_matches('/').replace('/', "_");
        c.execute(
            "document.querySelector('table.run-list').scrollIntoView();",
            vec![],
        )
        .await
        .expect("scroll");
        screenshot(&c, &format!("ui4_cards_390_{name}")).await;
        let v = cards(&c).await;
        let boxes = v["boxes"].as_array().expect("boxes").clone();
        assert!(boxes.len() >= 10, "{page}: {v}");
        let width = v["width"].as_f64().expect("width");
        for b in &boxes {
            assert!(
                b[0].as_f64().unwrap_or(-1.0) >= 0.0 && b[1].as_f64().unwrap_or(1e9) <= width,
                "{page}: a card outside the viewport: {b} (width {width})"
            );
        }
        assert!(
            v["scroll"].as_f64() <= Some(width),
            "{page} scrolls sideways: {v}"
        );
        assert_eq!(v["cut"], json!([]), "{page}: results boxes cut");
        assert!(
            v["thead"]
                .as_array()
                .expect("heads")
                .iter()
                .all(|d| d == "none"),
            "{page}: no header row on a phone: {v}"
        );
        // The finished list's cards (the user page's first ones are the pending panel).
        let finished: Vec<Value> = boxes.iter().rev().take(10).rev().cloned().collect();
        let fit = per_screen(&finished, f64::from(PHONE.1));
        assert!(
            fit >= 7,
            "{page}: {fit} runs to an {} px screen: {finished:?}",
            PHONE.1
        );
    }
    // Compact empty states: no header row over "No paused tests".
    open(&c, &server, "/tests").await;
    let paused = js(
        &c,
        "const p = document.getElementById('paused'); \
         return [p.querySelectorAll('th').length, p.textContent.includes('No paused tests')];",
    )
    .await;
    assert_eq!(paused, json!([0, true]), "the paused panel");
    viewport(&c, 1400, 900).await;
    open(&c, &server, "/tests/finished").await;
    let v = cards(&c).await;
    assert!(
        v["thead"]
            .as_array()
            .expect("heads")
            .iter()
            .all(|d| d == "table-header-group"),
        "a table with its header row above 700 px: {v}"
    );
    screenshot(&c, "ui4_list_1400_finished").await;
    c.close().await.expect("close the browser");
}

/// The machines list and the events log fit a phone: every row inside the viewport.
#[tokio::test]
async fn machines_and_events_fit_a_phone_with_compiler_and_python() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    let run = create_run(&server, "alice", fixed_args(40000)).await;
    approve(&server, "boss", &run).await;
    let w = Worker::new("alice", 4, 91);
    w.request_task(&server).await;
    let driver = start_driver().await;
    let c = browser(&driver).await;
    viewport(&c, 1400, 900).await;
    open(&c, &server, "/tests/machines").await;
    let heads = js(
        &c,
        "return Array.from(document.querySelectorAll('table.machines th')).map(t => t.textContent.trim());",
    )
    .await;
    for want in ["Compiler", "Python"] {
        assert!(
            heads.as_array().expect("heads").iter().any(|h| h == want),
            "{want}: {heads}"
        );
    }
    let cores = js(
        &c,
        "return document.querySelector('table.machines td.cores').textContent.trim();",
    )
    .await;
    assert!(
        cores
            .as_str()
            .is_some_and(|t| t.starts_with("4 ") && t.contains("(country unknown)")),
        "the core count apart from the country: {cores}"
    );
    viewport(&c, PHONE.0, PHONE.1).await;
    for page in ["/tests/machines", "/actions"] {
        open(&c, &server, page).await;
        let v = js(
            &c,
            "const w = window.innerWidth; return [document.documentElement.scrollWidth <= w,\
             Array.from(document.querySelectorAll('main table tbody tr'))\
               .filter(r => r.getBoundingClientRect().right > w + 0.5 || r.getBoundingClientRect().left < 0).length,\
             document.querySelectorAll('main table tbody tr').length];",
        )
        .await;
        assert_eq!(v[0], json!(true), "{page} scrolls sideways: {v}");
        assert_eq!(v[1], json!(0), "{page}: rows outside the viewport: {v}");
        assert!(v[2].as_u64() > Some(0), "{page}: no rows: {v}");
        screenshot(&c, &format!("ui4_cards_390_{}", page.replace('/', "_"))).await;
    }
    c.close().await.expect("close the browser");
}

/// Whether the element `css` is displayed.
async fn shown(c: &Client, css: &str) -> bool {
    js(
        c,
        &format!(
            "const e = document.querySelector('{css}'); return !!e && e.getClientRects().length > 0;"
        ),
    )
    .await
        == json!(true)
}

#[tokio::test]
async fn the_new_test_form_fits_with_submit_on_top_and_only_the_fields_that_apply() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    let driver = start_driver().await;
    let c = browser(&driver).await;
    viewport(&c, 1400, 1000).await;
    log_in(&c, &server, "alice").await;
    open(&c, &server, "/tests/run").await;
    let m = js(
        &c,
        "const f = document.querySelector('form.run-form').getBoundingClientRect();\
         const s = Array.from(document.querySelectorAll('form.run-form button.submit-test'))\
           .map(b => b.getBoundingClientRect().top - f.top);\
         return {height: f.height, submits: s, page: document.documentElement.scrollHeight,\
           types: document.querySelectorAll('form.run-form [name=preset]').length,\
           links: document.querySelectorAll('a[href*=\"preset=\"]').length};",
    )
    .await;
    screenshot(&c, "ui4_form_1400").await;
    let height = m["height"].as_f64().expect("height");
    assert!(
        height <= 1100.0,
        "the form at 1400 px is {height} px tall: {m}"
    );
    let submits = m["submits"].as_array().expect("submits");
    assert_eq!(submits.len(), 2, "Submit on top and at the bottom: {m}");
    assert!(
        submits[0].as_f64() < Some(80.0),
        "the first Submit is on top: {m}"
    );
    assert!(
        submits[1].as_f64() > Some(height - 80.0),
        "the second Submit is at the bottom: {m}"
    );
    assert_eq!(m["links"], json!(0), "one control for the test type: {m}");
    assert_eq!(m["types"], json!(6), "{m}");
    // Fields that do not apply are not shown; ticking their box shows them (CSS only).
    for css in [
        "input[name=arch-filter]",
        "select[name=compiler]",
        "input[name=new_tc]",
        "input[name=sprt_elo0]",
        "input[name=num-games]",
        "textarea[name=spsa_raw_params]",
    ] {
        assert!(!shown(&c, css).await, "{css} shown at SPRT's defaults");
    }
    for (tick, field) in [
        (
            "input[name=checkbox-arch-filter]",
            "input[name=arch-filter]",
        ),
        ("input[name=checkbox-compiler]", "select[name=compiler]"),
        ("input[name=odds]", "input[name=new_tc]"),
    ] {
        c.find(Locator::Css(tick))
            .await
            .expect("the box")
            .click()
            .await
            .expect("tick");
        assert!(shown(&c, field).await, "{field} after ticking {tick}");
    }
    c.find(Locator::Css("input[name=stop_rule][value=spsa]"))
        .await
        .expect("SPSA")
        .click()
        .await
        .expect("SPSA");
    assert!(shown(&c, "textarea[name=spsa_raw_params]").await);
    assert!(shown(&c, "input[name=num-games]").await);
    // The test type: one row of buttons that keeps what was typed.
    open(&c, &server, "/tests/run").await;
    fill(&c, "new_tag", "my-branch").await;
    c.find(Locator::Css("button[name=preset][value=ltc]"))
        .await
        .expect("LTC")
        .click()
        .await
        .expect("LTC");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = js(
            &c,
            "const t = document.querySelector('input[name=tc]'); \
             const b = document.querySelector('input[name=new_tag]'); \
             return [t ? t.value : '', b ? b.value : ''];",
        )
        .await;
        if v == json!(["60+0.6", "my-branch"]) {
            break;
        }
        assert!(Instant::now() < deadline, "LTC never applied: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A phone: no sideways scroll, Submit on the first screen.
    viewport(&c, PHONE.0, PHONE.1).await;
    open(&c, &server, "/tests/run").await;
    let v = js(
        &c,
        "return [document.documentElement.scrollWidth <= window.innerWidth,\
          document.querySelector('button.submit-test').getBoundingClientRect().bottom <= window.innerHeight];",
    )
    .await;
    assert_eq!(v, json!([true, true]), "the form on a phone");
    screenshot(&c, "ui4_form_390").await;
    c.close().await.expect("close the browser");
}

/// Plays at least `games` games of `run`, task after task, in updates of 64 games (whole
/// SPRT batches), so the run has a recorded history.
async fn play_history(server: &TestServer, run: &str, games: u64) {
    let mut w = Worker::new("alice", 4, 77);
    let mut played = 0;
    while played < games {
        let reply = w.request_task(server).await;
        assert_eq!(reply["run"]["_id"], json!(run), "{reply}");
        let (_, totals, _) = w.play(server, &reply, 64, EVEN).await;
        played += totals.games();
    }
}

/// The chart image shown (displayed) in the first figure: its name, its width as drawn and
/// as drawn in the SVG, the SVG's smallest font size and its background fill.
async fn chart_shown(c: &Client) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = c
            .execute_async(
                "const done = arguments[arguments.length - 1];\
                 const img = Array.from(document.querySelectorAll('figure.chart img'))\
                   .find(i => i.getClientRects().length > 0);\
                 if (!img) { done(null); return; }\
                 img.scrollIntoView();\
                 fetch(img.currentSrc || img.src).then(r => r.text()).then(svg => {\
                   const doc = new DOMParser().parseFromString(svg, 'image/svg+xml');\
                   const sizes = Array.from(doc.querySelectorAll('text'))\
                     .map(t => parseFloat(t.getAttribute('font-size') || '0')).filter(s => s > 0);\
                   const rect = doc.querySelector('rect');\
                   done({src: img.getAttribute('src'), shown: img.getBoundingClientRect().width,\
                     natural: parseFloat(doc.documentElement.getAttribute('width')),\
                     smallest: Math.min.apply(null, sizes), fill: rect ? rect.getAttribute('fill') : ''});\
                 }).catch(e => done({error: String(e)}));",
                vec![],
            )
            .await
            .expect("the chart");
        if !v.is_null() {
            return v;
        }
        if Instant::now() >= deadline {
            let html = js(c, "const e = document.querySelector('.charts'); return e ? e.outerHTML : document.body.innerHTML.slice(0, 3000);").await;
            panic!("no chart shown: {html}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Luminance of `#rrggbb`.
fn luminance(hex: &str) -> f64 {
    let h = hex.trim_start_matches('#');
    let ch = |i: usize| {
        let c = f64::from(u8::from_str_radix(&h[i..i + 2], 16).unwrap_or(0)) / 255.0;
        if c <= 0.04045 {
            c / 12.92
        } else {
            ((c + 0.055) / 1.055).powf(2.4)
        }
    };
    0.2126 * ch(0) + 0.7152 * ch(2) + 0.0722 * ch(4)
}

async fn switch_theme_to(c: &Client, want: &str) {
    for _ in 0..3 {
        let now = js(
            c,
            "return document.querySelector('.theme-switch button').textContent.trim();",
        )
        .await;
        if now == json!(format!("Theme: {want}")) {
            return;
        }
        c.find(Locator::Css(".theme-switch button"))
            .await
            .expect("the theme button")
            .click()
            .await
            .expect("switch");
        body_text(c).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while js(c, "return document.readyState;").await != json!("complete") {
            assert!(Instant::now() < deadline, "the page never loaded");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    panic!("the theme never became {want}");
}

#[tokio::test]
async fn charts_have_a_phone_layout_and_dark_colours_and_the_theme_is_remembered() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    let run = create_run(&server, "alice", sprt_args(0.0, 2.0)).await;
    approve(&server, "boss", &run).await;
    play_history(&server, &run, 1200).await;
    let view = format!("/tests/view/{run}");
    let driver = start_driver().await;
    let c = browser(&driver).await;
    for (w, h, phone) in [(1400, 900, false), (PHONE.0, PHONE.1, true)] {
        viewport(&c, w, h).await;
        open(&c, &server, &view).await;
        let v = chart_shown(&c).await;
        let src = v["src"].as_str().unwrap_or_default().to_string();
        assert_eq!(src.contains("-phone"), phone, "{w} px: {v}");
        assert!(!src.contains("-dark"), "the light theme: {v}");
        let scale = v["shown"].as_f64().unwrap_or(0.0) / v["natural"].as_f64().unwrap_or(1.0);
        let smallest = v["smallest"].as_f64().unwrap_or(0.0) * scale;
        assert!(
            smallest >= 11.0,
            "{w} px: labels drawn at {smallest:.1} px: {v}"
        );
        screenshot(&c, &format!("ui4_chart_{w}_light")).await;
    }
    // Dark, picked by hand (no JavaScript needed: a form), remembered on the next pages.
    open(&c, &server, &view).await;
    switch_theme_to(&c, "dark").await;
    for (w, h) in [(PHONE.0, PHONE.1), (1400, 900)] {
        viewport(&c, w, h).await;
        open(&c, &server, &view).await;
        assert_eq!(
            js(&c, "return document.documentElement.className;").await,
            json!("theme-dark")
        );
        let bg = js(
            &c,
            "return getComputedStyle(document.body).backgroundColor;",
        )
        .await;
        assert_eq!(bg, json!("rgb(20, 23, 28)"), "the dark page");
        let v = chart_shown(&c).await;
        assert!(
            v["src"].as_str().is_some_and(|s| s.contains("-dark")),
            "{w} px: {v}"
        );
        let fill = v["fill"].as_str().unwrap_or("#FFFFFF").to_string();
        assert!(
            luminance(&fill) < 0.05,
            "{w} px: the chart's background {fill} is not dark"
        );
        screenshot(&c, &format!("ui4_chart_{w}_dark")).await;
    }
    open(&c, &server, "/tests").await;
    assert_eq!(
        js(&c, "return document.documentElement.className;").await,
        json!("theme-dark"),
        "remembered on another page"
    );
    switch_theme_to(&c, "light").await;
    assert_eq!(
        js(
            &c,
            "return getComputedStyle(document.body).backgroundColor;"
        )
        .await,
        json!("rgb(246, 247, 249)")
    );
    c.close().await.expect("close the browser");
}

#[tokio::test]
async fn show_task_and_a_task_link_scroll_to_the_task() {
    let server = TestServer::start().await;
    crate::ui_run_tasks::big_run(&server).await;
    let big = crate::ui_run_tasks::BIG;
    let driver = start_driver().await;
    let c = browser(&driver).await;
    for (w, h) in [(1400, 900), PHONE] {
        viewport(&c, w, h).await;
        for path in [
            format!("/tests/view/{big}?show_task=2950"),
            format!("/tests/view/{big}?tasks_page=2#task-2951"),
        ] {
            open(&c, &server, &path).await;
            let want = if path.contains("2951") { 2951 } else { 2950 };
            let deadline = Instant::now() + Duration::from_secs(10);
            let v = loop {
                let v = js(
                    &c,
                    &format!(
                        "const r = document.getElementById('task-{want}').getBoundingClientRect();\
                         return [r.top, r.bottom, window.innerHeight, window.scrollY];"
                    ),
                )
                .await;
                let top = v[0].as_f64().unwrap_or(-1.0);
                let bottom = v[1].as_f64().unwrap_or(1e9);
                if top >= 0.0 && bottom <= v[2].as_f64().unwrap_or(0.0) {
                    break v;
                }
                assert!(
                    Instant::now() < deadline,
                    "{w} px {path}: the task is not on screen: {v}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            };
            assert!(
                v[3].as_f64() > Some(500.0),
                "{w} px {path}: the page was scrolled: {v}"
            );
        }
        screenshot(&c, &format!("ui4_show_task_{w}")).await;
        // The task pager's page numbers are targets of 24 px or more.
        let small = js(
            &c,
            "return Array.from(document.querySelectorAll('nav.pager a, nav.pager span'))\
               .filter(e => e.getClientRects().length > 0)\
               .map(e => e.getBoundingClientRect())\
               .filter(r => r.width < 24 || r.height < 24).length;",
        )
        .await;
        assert_eq!(small, json!(0), "{w} px: pager targets under 24 px");
    }
    c.close().await.expect("close the browser");
}

/// Every text node's colour against the background behind it, as Chromium computes both
/// (colour mixes, opacity of a colour included): those under 4.5:1.
const LOW_CONTRAST: &str = "\
  function rgba(s) { const m = s.match(/[\\d.]+/g) || []; return m.map(Number).concat([1]).slice(0, 4); }\
  function lum(c) { const f = v => { v /= 255; return v <= 0.04045 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };\
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); }\
  function over(top, under) { const a = top[3]; return [0, 1, 2].map(i => top[i] * a + under[i] * (1 - a)).concat([1]); }\
  function back(e) { const stack = []; for (let n = e; n; n = n.parentElement) {\
      const c = rgba(getComputedStyle(n).backgroundColor); if (c[3] > 0) stack.push(c); if (c[3] >= 1) break; }\
    let b = [255, 255, 255, 1]; for (let i = stack.length - 1; i >= 0; i--) b = over(stack[i], b); return b; }\
  const out = []; const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);\
  while (walk.nextNode()) { const t = walk.currentNode; const e = t.parentElement;\
    if (!t.textContent.trim() || !e || e.getClientRects().length === 0) continue;\
    if (e.closest('svg, [hidden], .hp, .visually-hidden, option')) continue;\
    const st = getComputedStyle(e); if (st.visibility === 'hidden') continue;\
    const b = back(e); const f = over(rgba(st.color), b);\
    const l1 = lum(f), l2 = lum(b); const r = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);\
    if (r < 4.5) out.push(e.tagName + '.' + e.className + ' \"' + t.textContent.trim().slice(0, 30) + '\" ' + r.toFixed(2) + ' ' + st.color + ' on ' + b); }\
  return out;";

#[tokio::test]
async fn text_reaches_4_5_to_1_in_the_browser_in_both_themes() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    finished_runs(&server, 2).await;
    let run = create_run(&server, "alice", sprt_args(0.0, 2.0)).await;
    approve(&server, "boss", &run).await;
    play_history(&server, &run, 400).await;
    let driver = start_driver().await;
    let c = browser(&driver).await;
    viewport(&c, 1400, 900).await;
    log_in(&c, &server, "boss").await;
    let pages = [
        "/tests".to_string(),
        "/tests/finished".to_string(),
        format!("/tests/view/{run}"),
        "/tests/run".to_string(),
        "/tests/machines".to_string(),
        "/actions".to_string(),
        "/nns".to_string(),
        "/notifications".to_string(),
    ];
    for theme in ["dark", "light"] {
        open(&c, &server, "/tests").await;
        switch_theme_to(&c, theme).await;
        for page in &pages {
            open(&c, &server, page).await;
            let low = js(&c, LOW_CONTRAST).await;
            assert_eq!(low, json!([]), "{theme}: {page}: text under 4.5:1");
        }
    }
    // The sidebar's links are targets of 24 px or more.
    let small = js(
        &c,
        "return Array.from(document.querySelectorAll('.sidebar a'))\
           .filter(a => a.getBoundingClientRect().height < 24).map(a => a.textContent);",
    )
    .await;
    assert_eq!(small, json!([]), "sidebar links under 24 px");
    // The "sprt" link in the Live cell is underlined, not marked by colour alone.
    open(&c, &server, "/tests").await;
    let line = js(
        &c,
        "const a = document.querySelector('td.live a'); \
         return a ? getComputedStyle(a).textDecorationLine : 'none';",
    )
    .await;
    assert_eq!(line, json!("underline"));
    c.close().await.expect("close the browser");
}
