//! The statistics pages against Fishtest's own page code: `tests/data/fishtest-db/` (a
//! Fishtest database) imported into a real server, `/tests/stats/<id>` and
//! `/tests/view/<id>` rendered for every run, and every displayed number compared with
//! `tests/data/stats-page-reference.json` (for each run, the numbers Fishtest's raw
//! statistics page and run-page results box compute, nested names flattened with dots).
//!
//! A displayed number is a `<span data-field="<reference name>">` (with `data-scale="100"`
//! when the page shows a fraction as a percentage). It matches when it is within half a unit
//! of its last displayed digit of the reference value. Every reference field must be
//! displayed (Fishtest's pages display all of them: the raw statistics page the `args`,
//! `drawelo`, `tri`, `pent` and `sprt` fields, the run page's results box the `results`
//! fields), and every displayed field must be a reference field. All mismatches are
//! reported at once.

use std::collections::BTreeMap;
use std::path::Path;

use regex::Regex;
use serde_json::Value;

use crate::fishtest_db::import;
use crate::harness::{Opts, TestServer};
use crate::web::Browser;

fn reference() -> BTreeMap<String, BTreeMap<String, Value>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/stats-page-reference.json");
    let text = std::fs::read_to_string(path).expect("read the reference");
    serde_json::from_str(&text).expect("reference json")
}

/// One displayed number: its text and the factor between it and the statistic.
struct Shown {
    text: String,
    scale: f64,
    page: &'static str,
}

/// Every `data-field` span of `body`, by field.
fn shown(body: &str, page: &'static str, into: &mut BTreeMap<String, Vec<Shown>>) {
    let re = Regex::new(r#"<span data-field="([^"]+)"(?: data-scale="(\d+)")?>([^<]*)</span>"#)
        .expect("regex");
    for c in re.captures_iter(body) {
        let scale = c.get(2).map_or(1.0, |m| m.as_str().parse().expect("scale"));
        into.entry(c[1].to_string()).or_default().push(Shown {
            text: c[3].to_string(),
            scale,
            page,
        });
    }
}

/// Whether `text` shows `want` (times `scale`) to its last digit: within half a unit of
/// that digit (plus a hair for the last bits of a double).
fn matches(text: &str, scale: f64, want: &Value) -> bool {
    let Some(want) = want.as_f64() else {
        return want.as_str() == Some(text);
    };
    let want = want * scale;
    match text {
        "inf" => return want == f64::INFINITY,
        "-inf" => return want == f64::NEG_INFINITY,
        "nan" => return want.is_nan(),
        _ => {}
    }
    let Ok(got) = text.parse::<f64>() else {
        return false;
    };
    let decimals = text.split_once('.').map_or(0, |(_, d)| d.len());
    let half_unit = 0.5 * 10f64.powi(-(decimals as i32));
    (got - want).abs() <= half_unit + 1e-9 * want.abs().max(1.0)
}

#[tokio::test]
async fn every_number_on_the_stats_pages_is_fishtests() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let (ok, _, err) = import(&data, &[]);
    assert!(ok, "import: {err}");
    let server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    let mut b = Browser::new(&server);
    let reference = reference();
    assert_eq!(reference.len(), 16, "every run of the database");
    let mut problems = Vec::new();
    let mut compared = 0usize;
    for (id, fields) in &reference {
        let mut found = BTreeMap::new();
        for (path, page) in [
            (format!("/tests/stats/{id}"), "stats"),
            (format!("/tests/view/{id}"), "view"),
        ] {
            let p = b.get(&path).await;
            assert_eq!(p.status, 200, "{path}: {}", p.body);
            shown(&p.body, page, &mut found);
        }
        for (field, want) in fields {
            let Some(shown) = found.get(field) else {
                problems.push(format!("{id} {field}: missing (Fishtest shows {want})"));
                continue;
            };
            for s in shown {
                compared += 1;
                if !matches(&s.text, s.scale, want) {
                    problems.push(format!(
                        "{id} {field}: {} shows {:?}, Fishtest {want}",
                        s.page, s.text
                    ));
                }
            }
        }
        for field in found.keys().filter(|f| !fields.contains_key(*f)) {
            problems.push(format!("{id} {field}: shown, but not a Fishtest field"));
        }
    }
    assert!(
        problems.is_empty(),
        "{} mismatches out of {compared} displayed numbers:\n{}",
        problems.len(),
        problems.join("\n")
    );
    assert!(compared > 1400, "{compared} numbers compared");
}

#[test]
fn a_displayed_number_matches_to_half_its_last_digit() {
    let v = |x: f64| Value::from(x);
    assert!(matches("2.142", 1.0, &v(2.1415)));
    assert!(!matches("1.901", 1.0, &v(2.142)));
    assert!(matches("98.5", 100.0, &v(0.98486)));
    assert!(!matches("98.5", 1.0, &v(0.98486)));
    assert!(matches("0", 1.0, &v(0.003)));
    assert!(matches("-0.000", 1.0, &v(0.0)));
    assert!(!matches("-", 1.0, &v(0.0)));
    assert!(matches("8832", 1.0, &Value::from(8832)));
}
