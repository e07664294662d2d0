//! Building the links and redirects pages hand out.
//!
//! One encoding for every page: RFC 3986's unreserved characters (letters, digits, `-._~`)
//! are kept and every other byte becomes `%XX`, so a value is safe in a path segment and in a
//! query alike (a space is `%20`, never `+`, which a path would keep as a plus). A `next=`
//! value that is itself a same-site path keeps its slashes ([`Href::path_param`]), as the
//! login links always have.

use std::fmt::{self, Display};

/// `s` percent-encoded for any part of a URL: everything but `A-Z a-z 0-9 - . _ ~` and the
/// bytes in `keep` becomes `%XX`.
fn escape(s: &str, keep: &[u8]) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) || keep.contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `s` as one path segment or one query value.
pub fn encode(s: &str) -> String {
    escape(s, b"")
}

/// A link under construction: a path of ours, then query parameters in the order added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Href {
    url: String,
    params: bool,
}

impl Href {
    /// The path as written (it is ours: no encoding).
    pub fn new(path: impl Into<String>) -> Href {
        let url = path.into();
        let params = url.contains('?');
        Href { url, params }
    }

    /// The path followed by `/<segment>`, encoded.
    pub fn seg(mut self, segment: &str) -> Href {
        self.url.push('/');
        self.url.push_str(&encode(segment));
        self
    }

    fn sep(&mut self) {
        self.url.push(if self.params { '&' } else { '?' });
        self.params = true;
    }

    /// `key=value`, the value encoded.
    pub fn param(mut self, key: &str, value: impl Display) -> Href {
        self.sep();
        self.url.push_str(key);
        self.url.push('=');
        self.url.push_str(&encode(&value.to_string()));
        self
    }

    /// `key=value` when `on`.
    pub fn param_if(self, on: bool, key: &str, value: impl Display) -> Href {
        if on { self.param(key, value) } else { self }
    }

    /// `key=value` for a value that is not empty.
    pub fn param_nonempty(self, key: &str, value: &str) -> Href {
        self.param_if(!value.is_empty(), key, value)
    }

    /// `key=value` for a same-site path (`next=/tests/run%3Fid%3D…`): its slashes kept.
    pub fn path_param(mut self, key: &str, path: &str) -> Href {
        self.sep();
        self.url.push_str(key);
        self.url.push('=');
        self.url.push_str(&escape(path, b"/"));
        self
    }

    /// `#fragment` (ours: not encoded).
    pub fn fragment(mut self, fragment: &str) -> Href {
        self.url.push('#');
        self.url.push_str(fragment);
        self
    }

    pub fn build(self) -> String {
        self.url
    }
}

impl Display for Href {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.url)
    }
}

impl From<Href> for String {
    fn from(h: Href) -> String {
        h.url
    }
}

/// The login wall: `/login?next=<path>`, the path encoded whole (its slashes too).
pub fn login_next(path: &str) -> String {
    Href::new("/login").param("next", path).build()
}

/// Where this server is reached, for links that leave the browser (a feed URL): the
/// configured `public_url`, else the request's `Host` (when it is a plain host name) over
/// http.
pub fn site_url(public_url: Option<&str>, headers: &axum::http::HeaderMap) -> String {
    if let Some(u) = public_url {
        return u.trim_end_matches('/').to_string();
    }
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
        })
        .unwrap_or("localhost");
    format!("http://{host}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_paths_and_next() {
        assert_eq!(encode("a b/c?d=e&f+~*"), "a%20b%2Fc%3Fd%3De%26f%2B~%2A");
        assert_eq!(encode("é"), "%C3%A9");
        let h = Href::new("/tests/finished")
            .param("mode", "search")
            .param_nonempty("user", "")
            .param_nonempty("text", "king \"safety\"")
            .param_if(false, "page", 2)
            .build();
        assert_eq!(h, "/tests/finished?mode=search&text=king%20%22safety%22");
        assert_eq!(
            Href::new("/tests/view").seg("a b").param("x", 1).build(),
            "/tests/view/a%20b?x=1"
        );
        assert_eq!(
            Href::new("/x?a=1").param("b", 2).fragment("me").build(),
            "/x?a=1&b=2#me"
        );
        assert_eq!(login_next("/user/alice"), "/login?next=%2Fuser%2Falice");
        assert_eq!(
            Href::new("/login").path_param("next", "/a b").build(),
            "/login?next=/a%20b"
        );
    }
}
