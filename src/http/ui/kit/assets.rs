//! Static files: where they are, and their URLs with a content hash (`?v=`), so a page always
//! names the file it was rendered with and the file can be cached for a year.

use std::path::PathBuf;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

/// Where the static files are: `./static` when the server runs from a checkout or an
/// installation that has one, else the source tree's `static/` (tests, `cargo run`).
pub fn static_dir() -> PathBuf {
    let local = PathBuf::from("static");
    if local.join("style.css").is_file() {
        local
    } else {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/static"))
    }
}

/// The URL of a static file with its content hash (`?v=`), computed once (in the pool: pages
/// call it while rendering).
pub fn asset(name: &'static str) -> String {
    static HASHES: OnceLock<parking_lot::Mutex<std::collections::HashMap<&'static str, String>>> =
        OnceLock::new();
    let map = HASHES.get_or_init(Default::default);
    let mut map = map.lock();
    let v = map.entry(name).or_insert_with(|| {
        let bytes = std::fs::read(static_dir().join(name)).unwrap_or_default();
        hex::encode(&Sha256::digest(&bytes)[..6])
    });
    format!("/static/{name}?v={v}")
}
