//! Building the links and redirects pages hand out.
//!
//! One encoding for every page: RFC 3986's unreserved characters (letters, digits, `-._~`)
//! are kept and every other byte becomes `%XX`, so a value is safe in a path segment and in a
//! query alike (a space is `%20`, never `+`, which a path would keep as a plus). A `next=`
//! value that is itself a same-site path keeps its slashes ([`Href::path_param`]), as the
//! login links always have.

use std::fmt::{self, Display};

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// What one encoding escapes: every byte but RFC 3986's unreserved `A-Z a-z 0-9 - . _ ~`.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');
/// The same, keeping `/` (a same-site path as a `next=` value).
const PATH: &AsciiSet = &COMPONENT.remove(b'/');

/// `s` as one path segment or one query value.
pub fn encode(s: &str) -> String {
    utf8_percent_encode(s, COMPONENT).to_string()
}

/// The signed-in user's own pages under `/user/` (`/user/tokens`): words that are not user
/// names there.
pub const USER_OWN_PAGES: &[&str] = &["tokens"];

/// The address of `name`'s user page (an approver's page of the account, `POST` its
/// actions, `/reset_link` its one-time link). `/users/{name}` answers for every name;
/// `/user/{name}`, Fishtest's address, for every name that is not one of `/user/`'s own
/// pages ([`USER_OWN_PAGES`]: `/user/tokens` is the tokens page, always). Links use
/// `/user/{name}` where it reaches the user, so every address Fishtest and shoal gave out
/// keeps working, and `/users/{name}` for the rest.
pub fn user_href(name: &str) -> String {
    let base = if USER_OWN_PAGES.contains(&name) {
        "/users"
    } else {
        "/user"
    };
    Href::new(base).seg(name).build()
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
        self.url
            .push_str(&utf8_percent_encode(path, PATH).to_string());
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

/// The longest redirect target taken from a form or a query.
const TARGET_MAX: usize = 2000;

/// A place to send the browser after a form (`next` at login, `back` after a follow): only a
/// path on this site. `target` is resolved as a browser would, relative to the site (the
/// `url` crate, WHATWG rules: a browser drops tabs and newlines, so `/\t/evil.example` is
/// `//evil.example` to it); it must stay on the site's origin and may hold no control
/// character, no backslash, and at most [`TARGET_MAX`] bytes. `Some`: `target` as given (a
/// browser resolves it as checked here); `None`: refused.
pub fn same_site_path(target: &str) -> Option<String> {
    if target.len() > TARGET_MAX
        || !target.starts_with('/')
        || target.contains('\\')
        || target.chars().any(char::is_control)
    {
        return None;
    }
    let site = url::Url::parse("http://shoal.invalid/").ok()?;
    let resolved = site.join(target).ok()?;
    if resolved.origin() != site.origin()
        || !resolved.username().is_empty()
        || resolved.password().is_some()
    {
        return None;
    }
    let path = &resolved[url::Position::BeforePath..];
    // A path that starts `//` would be another host to whoever reads it next.
    (path.starts_with('/') && !path.starts_with("//")).then(|| target.to_string())
}

/// What a page says beside a link it could give only as a path ([`outside_link`]).
pub const NO_PUBLIC_URL: &str = "This server has no public_url setting, so the link is shown \
    as a path: put the address you reach this server at in front of it. (The operator sets \
    public_url to have whole links; shoal never builds them from the address a request \
    names, which the requester chooses.)";

/// A link that leaves the server (a reset link, a feed URL): `path` on the configured
/// `public_url` (`public_base`), or the bare path when there is none. Never built from a
/// request's `Host` header: whoever sends the request picks that.
pub fn outside_link(public_base: Option<&str>, path: &str) -> String {
    format!("{}{path}", public_base.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_same_site_paths_are_redirect_targets() {
        for (target, want) in [
            ("/tests/view/1?x=2", "/tests/view/1?x=2"),
            ("/", "/"),
            ("/a b", "/a b"),
            ("/tests#frag", "/tests#frag"),
            ("/a/../tests", "/a/../tests"),
        ] {
            assert_eq!(same_site_path(target).as_deref(), Some(want), "{target}");
        }
        for bad in [
            "//evil.example",
            "/\t/evil.example",
            "/\n/evil.example",
            "/\r/evil.example",
            "/\t\t/evil.example",
            "/\u{0}/evil.example",
            "/\u{7f}/x",
            "/\u{85}/x",
            "/\\evil.example",
            "https://evil.example",
            "http://shoal.invalid/x",
            "tests",
            "",
            " /x",
            "/.//evil.example",
            "/a/..//evil.example",
        ] {
            assert_eq!(same_site_path(bad), None, "{bad:?}");
        }
        assert_eq!(same_site_path(&format!("/{}", "x".repeat(2000))), None);
    }

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
