//! The official book list, refreshed from the books repository: its `books.json` read (a
//! conditional request: unchanged, it costs nothing), and every book that is new or whose
//! `sri` changed downloaded and checked: the archive's book, read as the worker reads it (text,
//! universal newlines), must hash (SHA-384, base64) to the `sri` the list states. A book that
//! does not is refused, with the reason; the caller keeps its old entry.
//!
//! Must not: replace the server's list (the periodic job does, with what this returns), hold
//! a book in memory longer than its check, or inflate and hash a book on the event loop.

use std::collections::HashMap;
use std::io::Read;

use base64::Engine as _;
use serde_json::{Map, Value};
use sha2::{Digest, Sha384};

use super::{Github, GithubError, RepoName};

/// The official books repository.
pub const BOOKS_REPO: &str = "official-stockfish/books";
/// The largest book archive read.
const MAX_ARCHIVE_BYTES: usize = 256 << 20;
/// The largest book read out of an archive.
const MAX_BOOK_BYTES: u64 = 1 << 30;

/// What a refresh found.
#[derive(Debug, Clone, PartialEq)]
pub struct BookCheck {
    /// The entries of `books.json` that are unchanged or were checked, by name.
    pub accepted: Map<String, Value>,
    /// The books refused, and why.
    pub refused: Vec<(String, String)>,
}

impl Github {
    /// Reads the official `books.json` and checks every book whose `sri` is not `known`.
    pub async fn check_books(
        &self,
        known: &HashMap<String, String>,
    ) -> Result<BookCheck, GithubError> {
        let repo = RepoName::from_full(BOOKS_REPO)
            .ok_or_else(|| GithubError::BadInput(BOOKS_REPO.into()))?;
        let text = self
            .raw(&repo, "master", "books.json")
            .await?
            .ok_or_else(|| {
                GithubError::Malformed("the books repository has no books.json".into())
            })?;
        let list: Map<String, Value> = serde_json::from_str(&text)
            .map_err(|e| GithubError::Malformed(format!("books.json: {e}")))?;
        let mut check = BookCheck {
            accepted: Map::new(),
            refused: Vec::new(),
        };
        for (name, entry) in list {
            let Some(sri) = entry.get("sri").and_then(Value::as_str) else {
                check.refused.push((name, "no sri in books.json".into()));
                continue;
            };
            if known.get(&name).is_some_and(|k| k == sri) {
                check.accepted.insert(name, entry);
                continue;
            }
            if !valid_book_name(&name) {
                check.refused.push((name, "not a book file name".into()));
                continue;
            }
            let url = format!("{}/{}/master/{name}.zip", self.raw_url, repo.full());
            let verdict = match self.client.get_bytes(&url, MAX_ARCHIVE_BYTES).await {
                // Inflating and hashing a book is CPU work: the pool's, not the event loop's.
                Ok(Some(zip)) => match self
                    .offload
                    .run({
                        let name = name.clone();
                        move || book_sri(&zip, &name)
                    })
                    .await
                    .unwrap_or_else(|e| Err(e.to_string()))
                {
                    Ok(got) if got == sri => Ok(()),
                    Ok(got) => Err(format!(
                        "checksum mismatch: books.json states {sri}, the book hashes to {got}"
                    )),
                    Err(e) => Err(e),
                },
                Ok(None) => Err(format!("{name}.zip is not in the books repository")),
                Err(e) => Err(e.to_string()),
            };
            match verdict {
                Ok(()) => {
                    check.accepted.insert(name, entry);
                }
                Err(why) => check.refused.push((name, why)),
            }
        }
        Ok(check)
    }
}

/// A book's name as the list may give it: a file name (`.epd` or `.pgn`), no path.
fn valid_book_name(name: &str) -> bool {
    (name.ends_with(".epd") || name.ends_with(".pgn"))
        && name.len() <= 200
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._+-".contains(c))
}

/// The `sri` of the book `name` inside a zip archive, as the worker computes it: the text with
/// universal newlines, SHA-384, base64.
pub fn book_sri(zip: &[u8], name: &str) -> Result<String, String> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zip))
        .map_err(|e| format!("{name}.zip is not a zip archive: {e}"))?;
    let mut file = archive
        .by_name(name)
        .map_err(|e| format!("{name}.zip holds no {name}: {e}"))?;
    let mut bytes = Vec::new();
    (&mut file)
        .take(MAX_BOOK_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{name}.zip cannot be read: {e}"))?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{name} is not UTF-8 text"))?;
    let text = text.replace("\r\n", "\n").replace('\r', "\n");
    Ok(base64::engine::general_purpose::STANDARD.encode(Sha384::digest(text.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zipped(name: &str, text: &str) -> Vec<u8> {
        let mut out = std::io::Cursor::new(Vec::new());
        let mut w = zip::ZipWriter::new(&mut out);
        w.start_file(name, zip::write::SimpleFileOptions::default())
            .expect("start");
        std::io::Write::write_all(&mut w, text.as_bytes()).expect("write");
        w.finish().expect("finish");
        out.into_inner()
    }

    #[test]
    fn the_sri_is_the_workers() {
        let zip = zipped("a.epd", "rnbqkbnr/8 w - -\r\nsecond line\n");
        let want = base64::engine::general_purpose::STANDARD
            .encode(Sha384::digest(b"rnbqkbnr/8 w - -\nsecond line\n"));
        assert_eq!(book_sri(&zip, "a.epd"), Ok(want));
        assert!(
            book_sri(&zip, "b.epd")
                .unwrap_err()
                .contains("holds no b.epd")
        );
        assert!(
            book_sri(b"not a zip", "a.epd")
                .unwrap_err()
                .contains("not a zip")
        );
    }

    #[test]
    fn book_names() {
        assert!(valid_book_name("UHO_Lichess_4852_v1.epd"));
        assert!(valid_book_name("4mvs_+90_+99.epd"));
        assert!(!valid_book_name("../x.epd"));
        assert!(!valid_book_name("x.txt"));
    }
}
