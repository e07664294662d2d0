//! A cookie-carrying HTTP client for the web UI's integration tests: it keeps the session
//! cookie, follows no redirect, and reads forms' CSRF tokens.

use std::time::Duration;

use reqwest::header::HeaderMap;

use crate::harness::TestServer;

/// A browser without a browser engine.
pub struct Browser<'a> {
    pub server: &'a TestServer,
    pub client: reqwest::Client,
    pub cookie: Option<String>,
}

/// An answer: status, headers, `Location` (empty if none) and body.
pub struct Page {
    pub status: u16,
    pub headers: HeaderMap,
    pub location: String,
    pub body: String,
}

impl Page {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// The CSRF token of the page's first form.
    pub fn csrf(&self) -> String {
        self.input("csrf_token").expect("a form with a csrf_token")
    }

    /// The value of the page's first input named `name` (`name="..." value="..."`).
    pub fn input(&self, name: &str) -> Option<String> {
        let mark = format!("name=\"{name}\" value=\"");
        let at = self.body.find(&mark)?;
        let rest = &self.body[at + mark.len()..];
        Some(rest[..rest.find('"')?].to_string())
    }
}

impl<'a> Browser<'a> {
    pub fn new(server: &'a TestServer) -> Self {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30))
            .build()
            .expect("client");
        Browser {
            server,
            client,
            cookie: None,
        }
    }

    pub async fn send(&mut self, req: reqwest::RequestBuilder) -> Page {
        let req = match &self.cookie {
            Some(c) => req.header("cookie", c.clone()),
            None => req,
        };
        let r = req.send().await.expect("request");
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        if let Some(set) = headers.get("set-cookie").and_then(|v| v.to_str().ok()) {
            let pair = set.split(';').next().unwrap_or_default().to_string();
            assert!(pair.starts_with("shoal_session="), "{set}");
            self.cookie = Some(pair);
        }
        let location = headers
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let body = r.text().await.expect("body");
        Page {
            status,
            headers,
            location,
            body,
        }
    }

    pub async fn get(&mut self, path: &str) -> Page {
        let req = self.client.get(self.server.url(path));
        self.send(req).await
    }

    pub async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        let req = self.client.post(self.server.url(path)).form(form);
        self.send(req).await
    }

    /// A GET or POST (`form`) as if from `ip`, through a trusted proxy (the server must trust
    /// 127.0.0.1: setting `trusted_proxies`).
    pub async fn as_from(&mut self, ip: &str, path: &str, form: Option<&[(&str, &str)]>) -> Page {
        let req = match form {
            Some(f) => self.client.post(self.server.url(path)).form(f),
            None => self.client.get(self.server.url(path)),
        };
        self.send(req.header("x-forwarded-for", ip)).await
    }
}
