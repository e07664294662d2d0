//! Static files: where they are, and their URLs with a content hash (`?v=`), so a page always
//! names the file it was rendered with and the file can be cached for a year.

use std::collections::HashMap;
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

/// The URL of a static file with its content hash (`?v=`). Every file's hash is computed
/// once, on first use (in the pool: pages call it while rendering), from one listing of the
/// static directory; a name not found there gets the hash of no bytes.
pub fn asset(name: &'static str) -> String {
    static HASHES: OnceLock<HashMap<String, String>> = OnceLock::new();
    let hashes = HASHES.get_or_init(|| {
        let dir = static_dir();
        let mut hashes = HashMap::new();
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if let (Ok(name), Ok(bytes)) =
                (entry.file_name().into_string(), std::fs::read(entry.path()))
            {
                hashes.insert(name, hash(&bytes));
            }
        }
        hashes
    });
    match hashes.get(name) {
        Some(v) => format!("/static/{name}?v={v}"),
        None => format!("/static/{name}?v={}", hash(&[])),
    }
}

fn hash(bytes: &[u8]) -> String {
    hex::encode(&Sha256::digest(bytes)[..6])
}
