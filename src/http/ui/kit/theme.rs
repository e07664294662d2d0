//! The light/dark switch: the `theme` cookie (`dark` or `light`; absent: the system's
//! setting), read on every page into the layout (`<html class="theme-…">`, which the
//! stylesheet's palette follows), and `POST /theme`, the header's button: a plain form, no
//! JavaScript, that sets or clears the cookie and sends the browser back where it was.
//!
//! Must not: touch the session or the store (the theme is the browser's, not the account's).

use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::url::same_site_path;

/// The cookie's name (Fishtest's).
pub const COOKIE: &str = "theme";

/// How long the choice is kept (400 days, as Fishtest's UI cookies).
const MAX_AGE_S: u64 = 400 * 24 * 3600;

/// The theme a request's `theme` cookie names, if it names one.
pub fn from_headers(headers: &HeaderMap) -> Option<&'static str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(name, _)| *name == COOKIE)
        .find_map(|(_, value)| parse(value))
}

fn parse(value: &str) -> Option<&'static str> {
    match value.trim() {
        "dark" => Some("dark"),
        "light" => Some("light"),
        _ => None,
    }
}

/// The theme the header's button switches to: the system's → dark → light → the system's.
pub fn next(current: Option<&str>) -> &'static str {
    match current {
        None => "dark",
        Some("dark") => "light",
        Some(_) => "auto",
    }
}

/// The switch's form.
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct ThemeForm {
    /// `dark`, `light` or `auto` (the system's setting: the cookie is cleared).
    pub theme: String,
    /// Where to go back to (a path of this site; anything else means `/tests`).
    pub back: String,
}

/// `POST /theme`: sets the `theme` cookie (or clears it for `auto`) and answers 303 to the
/// page the button was on (`back`, else the `Referer`'s path on this site, else `/tests`).
/// An unknown theme is a 400 and changes nothing.
pub async fn switch(headers: HeaderMap, form: Result<Form<ThemeForm>, FormRejection>) -> Response {
    let f = form.map(|Form(f)| f).unwrap_or_default();
    let cookie = match f.theme.as_str() {
        "auto" => format!("{COOKIE}=; Path=/; Max-Age=0; SameSite=Lax"),
        other => match parse(other) {
            Some(t) => format!("{COOKIE}={t}; Path=/; Max-Age={MAX_AGE_S}; SameSite=Lax"),
            None => {
                return (
                    StatusCode::BAD_REQUEST,
                    "Unknown theme: dark, light or auto",
                )
                    .into_response();
            }
        },
    };
    let referer = headers
        .get(header::REFERER)
        .and_then(|v| v.to_str().ok())
        .and_then(|r| url::Url::parse(r).ok())
        .map(|u| match u.query() {
            Some(q) => format!("{}?{q}", u.path()),
            None => u.path().to_string(),
        })
        .unwrap_or_default();
    let back = same_site_path(&f.back)
        .or_else(|| same_site_path(&referer))
        .unwrap_or_else(|| "/tests".to_string());
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let (Ok(loc), Ok(set)) = (HeaderValue::from_str(&back), HeaderValue::from_str(&cookie)) {
        r.headers_mut().insert(header::LOCATION, loc);
        r.headers_mut().insert(header::SET_COOKIE, set);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_names_a_theme_or_none() {
        let mut h = HeaderMap::new();
        assert_eq!(from_headers(&h), None);
        h.insert(header::COOKIE, HeaderValue::from_static("a=1; theme=dark"));
        assert_eq!(from_headers(&h), Some("dark"));
        h.insert(header::COOKIE, HeaderValue::from_static("theme=blue"));
        assert_eq!(from_headers(&h), None);
        assert_eq!(next(None), "dark");
        assert_eq!(next(Some("dark")), "light");
        assert_eq!(next(Some("light")), "auto");
    }
}
