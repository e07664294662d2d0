//! The session cookie and the CSRF tokens.
//!
//! The cookie `shoal_session` carries only a random id, signed (HMAC-SHA256, the `cookie`
//! crate's signed jar) with a key derived from the server's secret. The session itself is a
//! server-side record (`accounts`), so logging out ends it for good: a replayed cookie
//! names no session and is anonymous.
//!
//! CSRF: a logged-in session has a random token in its record; an anonymous visitor's token is
//! derived from its cookie id (HMAC with the secret), so anonymous visitors cost no memory.
//! Owns: reading and writing the cookie, resolving a request's session ([`resolve`], in the
//! pool), checking a form's token (constant time).
//! Must not: run [`resolve`] on the event loop (it reads the store).

use axum::http::{HeaderMap, HeaderValue, header};
use cookie::{Cookie, CookieJar, Key, SameSite};
use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

use crate::accounts::{Accounts, REMEMBER_S, SessionState, User, UserError, random_token};

/// The session cookie's name.
pub const COOKIE: &str = "shoal_session";
/// Cookie values longer than this are ignored unread (a signed id is about 110 bytes).
pub const MAX_COOKIE_VALUE: usize = 256;

/// What the event loop reads from a request before the pool resolves the session.
#[derive(Clone)]
pub struct CookieKeys {
    key: Key,
    csrf_key: [u8; 64],
    secure: bool,
}

impl CookieKeys {
    /// Keys derived from the server's secret (distinct keys for signing and CSRF).
    pub fn new(secret: &[u8], secure: bool) -> Self {
        let mut h = Sha512::new();
        h.update(b"shoal session cookie\0");
        h.update(secret);
        let key = Key::from(h.finalize().as_slice());
        let mut c = Sha512::new();
        c.update(b"shoal anonymous csrf\0");
        c.update(secret);
        CookieKeys {
            key,
            csrf_key: c.finalize().into(),
            secure,
        }
    }

    /// The verified session id of the request's cookie, if any.
    pub fn read_id(&self, headers: &HeaderMap) -> Option<String> {
        let mut jar = CookieJar::new();
        for value in headers.get_all(header::COOKIE) {
            let Ok(text) = value.to_str() else { continue };
            for c in Cookie::split_parse(text).flatten() {
                if c.name() == COOKIE && c.value().len() <= MAX_COOKIE_VALUE {
                    jar.add_original(c.into_owned());
                }
            }
        }
        let id = jar.signed(&self.key).get(COOKIE)?.value().to_string();
        (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(id)
    }

    /// The `Set-Cookie` value for session `id`: a remembered one lasts 400 days, another
    /// ends with the browser.
    pub fn set_cookie(&self, id: &str, remember: bool) -> Option<HeaderValue> {
        let mut jar = CookieJar::new();
        let mut c = Cookie::build((COOKIE, id.to_string()))
            .path("/")
            .http_only(true)
            .same_site(SameSite::Lax)
            .secure(self.secure);
        if remember {
            c = c.max_age(cookie::time::Duration::seconds(REMEMBER_S));
        }
        jar.signed_mut(&self.key).add(c);
        let cookie = jar.get(COOKIE)?;
        HeaderValue::from_str(&cookie.to_string()).ok()
    }

    fn anonymous_csrf(&self, id: &str) -> String {
        // A 64-byte key (one SHA-256 block): the infallible constructor.
        let mut mac = <Hmac<Sha256> as KeyInit>::new(&self.csrf_key.into());
        mac.update(id.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }
}

/// A request's session, resolved in the pool.
pub struct Ctx {
    /// The cookie's session id (a new anonymous one if the request had none).
    pub id: String,
    pub user: Option<User>,
    pub csrf: String,
    /// The cookie to send back: a new or changed id, with its lifetime.
    pub set_cookie: Option<(String, bool)>,
    /// The session was ended on this request (blocked user, changed password).
    pub ended: bool,
    /// For an approver: how many accounts wait for approval (the navigation's badge).
    pub pending_users: Option<u64>,
    /// For a logged-in user: their unread notices about followed runs (the header's link).
    pub unread: Option<u64>,
    /// The theme picked by hand (the `theme` cookie: `dark` or `light`; `None`: the
    /// system's).
    pub theme: Option<&'static str>,
}

impl Ctx {
    pub fn username(&self) -> Option<String> {
        self.user.as_ref().map(|u| u.username.clone())
    }

    /// Checks a submitted CSRF token (constant time).
    pub fn csrf_ok(&self, token: Option<&str>) -> bool {
        !self.csrf.is_empty()
            && token.is_some_and(|t| bool::from(t.as_bytes().ct_eq(self.csrf.as_bytes())))
    }

    /// Logs `user` in: a new session under a new id (the old anonymous id and its token are
    /// dropped, so a planted cookie cannot be carried into the login).
    pub fn login(
        &mut self,
        accounts: &Accounts,
        user: User,
        remember: bool,
    ) -> Result<(), UserError> {
        let (id, session) = accounts.session_start(&user, remember)?;
        self.csrf = session.csrf;
        self.set_cookie = Some((id.clone(), remember));
        self.id = id;
        self.user = Some(user);
        Ok(())
    }

    /// Ends the session on the server and gives the browser a fresh anonymous id.
    pub fn logout(&mut self, accounts: &Accounts, keys: &CookieKeys) -> Result<(), UserError> {
        accounts.session_end(&self.id)?;
        self.id = random_token();
        self.csrf = keys.anonymous_csrf(&self.id);
        self.set_cookie = Some((self.id.clone(), false));
        self.user = None;
        Ok(())
    }
}

/// Resolves the request's session (blocking: call in the pool). A request without a valid
/// cookie gets a new anonymous id, sent back as a cookie.
pub fn resolve(
    accounts: &Accounts,
    keys: &CookieKeys,
    id: Option<String>,
) -> Result<Ctx, UserError> {
    let Some(id) = id else {
        let id = random_token();
        return Ok(Ctx {
            csrf: keys.anonymous_csrf(&id),
            set_cookie: Some((id.clone(), false)),
            id,
            user: None,
            ended: false,
            pending_users: None,
            unread: None,
            theme: None,
        });
    };
    Ok(match accounts.session(&id)? {
        SessionState::Active(active) => {
            let (session, user) = *active;
            let pending_users = if user.is_approver() {
                Some(accounts.users().pending_count()?)
            } else {
                None
            };
            Ctx {
                id,
                user: Some(user),
                csrf: session.csrf,
                set_cookie: None,
                ended: false,
                pending_users,
                unread: None,
                theme: None,
            }
        }
        state => {
            let ended = matches!(state, SessionState::Ended);
            let new_id = if ended { random_token() } else { id };
            Ctx {
                csrf: keys.anonymous_csrf(&new_id),
                set_cookie: ended.then(|| (new_id.clone(), false)),
                id: new_id,
                user: None,
                ended,
                pending_users: None,
                unread: None,
                theme: None,
            }
        }
    })
}
