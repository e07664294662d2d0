//! The dashboard's active-run filters (Fishtest's): test type (SPRT, SPSA, fixed games), time
//! control (STC, LTC: a tc ratio over 4) and threads (ST, SMP: more than one), as checkboxes
//! in a `method=get` form. The choice comes from the form's query (`filters=1` and one
//! parameter per ticked value), else from the `active_run_filters` cookie (Fishtest's: a comma
//! list of the ticked values, `none`, or absent for all), which the page writes when the form
//! is sent and `static/dashboard.js` writes when a box is ticked.
//!
//! Owns: the values, a run's kind, the choice read and written, the form. The rows are
//! hidden by classes on the dashboard's wrapper (static CSS), so the shared rendering of the
//! dashboard never depends on the choice. Must not: render the panels or read the run core.

use std::collections::HashMap;

use askama::Template;
use axum::http::{HeaderMap, HeaderValue, header};

use crate::rundb::model::Run;
use crate::rundb::schedule::{parse_tc, tc_ratio};

/// The filter values: (query parameter and cookie word, label, dimension). One bit each, in
/// this order.
pub const VALUES: [(&str, &str, Dim); 7] = [
    ("sprt", "SPRT", Dim::Type),
    ("spsa", "SPSA", Dim::Type),
    ("numgames", "Fixed games", Dim::Type),
    ("stc", "STC", Dim::Tc),
    ("ltc", "LTC", Dim::Tc),
    ("st", "ST", Dim::Threads),
    ("smp", "SMP", Dim::Threads),
];

/// Every value ticked.
pub const ALL: u8 = 0x7f;

/// The cookie Fishtest uses for the choice.
pub const COOKIE: &str = "active_run_filters";

/// The row attribute each dimension sets (`data-…` on a run row).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Dim {
    Type,
    Tc,
    Threads,
}

impl Dim {
    pub fn attr(self) -> &'static str {
        match self {
            Dim::Type => "test-type",
            Dim::Tc => "time-control",
            Dim::Threads => "threads",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Dim::Type => "Type",
            Dim::Tc => "Time control",
            Dim::Threads => "Threads",
        }
    }
}

fn bit(word: &str) -> Option<u8> {
    VALUES
        .iter()
        .position(|(w, _, _)| *w == word)
        .map(|i| 1 << i)
}

/// A run's three words: its test type, time control and threads.
pub fn words(run: &Run) -> [&'static str; 3] {
    let a = &run.args;
    let kind = if a.sprt.is_some() {
        "sprt"
    } else if a.spsa.is_some() {
        "spsa"
    } else {
        "numgames"
    };
    let ratio = parse_tc(&a.tc).map_or(0.0, |tc| tc_ratio(&tc, a.threads));
    let tc = if ratio > 4.0 { "ltc" } else { "stc" };
    let threads = if a.threads > 1 { "smp" } else { "st" };
    [kind, tc, threads]
}

/// A run's kind: its three words' bits.
pub fn kind(run: &Run) -> u8 {
    words(run)
        .iter()
        .filter_map(|w| bit(w))
        .fold(0, |k, b| k | b)
}

/// Whether a run of kind `kind` is shown under the choice `mask`.
pub fn shown(kind: u8, mask: u8) -> bool {
    kind & mask == kind
}

/// The choice of a request: the form's (`filters` present), else the cookie's, else all.
/// The second value is the cookie to set when the form chose.
pub fn choice(params: &HashMap<String, String>, headers: &HeaderMap) -> (u8, Option<HeaderValue>) {
    if params.contains_key("filters") {
        let mask = VALUES
            .iter()
            .enumerate()
            .filter(|(_, (w, _, _))| params.get(*w).is_some_and(|v| !v.is_empty()))
            .fold(0, |m, (i, _)| m | 1 << i);
        return (mask, Some(set_cookie(mask)));
    }
    (from_cookie(headers), None)
}

/// The cookie's choice (absent or unreadable: all).
pub fn from_cookie(headers: &HeaderMap) -> u8 {
    for value in headers.get_all(header::COOKIE) {
        let Ok(text) = value.to_str() else { continue };
        for pair in text.split(';') {
            let Some((name, v)) = pair.trim().split_once('=') else {
                continue;
            };
            if name != COOKIE {
                continue;
            }
            let v = v.replace("%2C", ",").replace("%2c", ",");
            if v.is_empty() {
                return ALL;
            }
            if v == "none" {
                return 0;
            }
            return v.split(',').filter_map(bit).fold(0, |m, b| m | b);
        }
    }
    ALL
}

/// The cookie's text for `mask` (all: expired at once, as Fishtest clears it).
fn cookie_value(mask: u8) -> String {
    if mask == ALL {
        return String::new();
    }
    if mask == 0 {
        return "none".into();
    }
    VALUES
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, (w, _, _))| *w)
        .collect::<Vec<_>>()
        .join(",")
}

/// The `Set-Cookie` header keeping `mask` (400 days; all: the cookie removed).
pub fn set_cookie(mask: u8) -> HeaderValue {
    let text = if mask == ALL {
        format!("{COOKIE}=; Path=/; Max-Age=0; SameSite=Lax")
    } else {
        format!(
            "{COOKIE}={}; Path=/; Max-Age=34560000; SameSite=Lax",
            cookie_value(mask)
        )
    };
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The dashboard wrapper's classes hiding the unticked values' rows (`no-<value>`).
pub fn hide_classes(mask: u8) -> String {
    VALUES
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) == 0)
        .map(|(_, (w, _, _))| format!(" no-{w}"))
        .collect()
}

/// One checkbox of the form.
pub struct Check {
    pub word: &'static str,
    pub label: &'static str,
    pub checked: bool,
}

/// One dimension's checkboxes.
pub struct Group {
    pub label: &'static str,
    pub attr: &'static str,
    pub checks: Vec<Check>,
}

#[derive(Template)]
#[template(path = "active_filters.html")]
pub struct FilterForm {
    pub groups: Vec<Group>,
    /// Some ticked off: the form starts open.
    pub filtered: bool,
    pub shown: usize,
    pub total: usize,
}

/// The form for the choice `mask` over active runs of kinds `kinds`.
pub fn form(mask: u8, kinds: &[u8]) -> FilterForm {
    let groups = [Dim::Type, Dim::Tc, Dim::Threads]
        .into_iter()
        .map(|d| Group {
            label: d.label(),
            attr: d.attr(),
            checks: VALUES
                .iter()
                .enumerate()
                .filter(|(_, (_, _, dim))| *dim == d)
                .map(|(i, (w, l, _))| Check {
                    word: w,
                    label: l,
                    checked: mask & (1 << i) != 0,
                })
                .collect(),
        })
        .collect();
    FilterForm {
        groups,
        filtered: mask != ALL,
        shown: kinds.iter().filter(|k| shown(**k, mask)).count(),
        total: kinds.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(cookie: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(cookie).expect("cookie"),
        );
        h
    }

    #[test]
    fn the_choice_comes_from_the_form_then_the_cookie() {
        let none = HashMap::new();
        assert_eq!(choice(&none, &HeaderMap::new()).0, ALL);
        assert_eq!(from_cookie(&headers("a=b; active_run_filters=none")), 0);
        assert_eq!(
            from_cookie(&headers("active_run_filters=sprt%2Cstc,st")),
            0b0101001
        );
        let form: HashMap<String, String> = [("filters", "1"), ("spsa", "1"), ("ltc", "on")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let (mask, cookie) = choice(&form, &headers("active_run_filters=none"));
        assert_eq!(mask, 0b0010010);
        let cookie = cookie.expect("the form sets the cookie");
        assert!(
            cookie
                .to_str()
                .expect("text")
                .starts_with("active_run_filters=spsa,ltc;")
        );
        assert!(
            set_cookie(ALL)
                .to_str()
                .expect("text")
                .contains("Max-Age=0")
        );
        assert_eq!(hide_classes(ALL), "");
        assert_eq!(hide_classes(ALL & !1 & !(1 << 6)), " no-sprt no-smp");
    }

    #[test]
    fn a_run_is_shown_when_its_every_word_is_ticked() {
        let sprt_stc_st = 1 | 1 << 3 | 1 << 5;
        assert!(shown(sprt_stc_st, ALL));
        assert!(!shown(sprt_stc_st, ALL & !(1 << 3)));
        assert!(shown(sprt_stc_st, sprt_stc_st));
        let f = form(ALL & !1, &[sprt_stc_st, 2 | 1 << 4 | 1 << 6]);
        assert_eq!((f.shown, f.total, f.filtered), (1, 2, true));
    }
}
