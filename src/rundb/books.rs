//! The opening books the server knows: name -> {total, white, black, min/max_depth, sri}.
//!
//! Owns: loading the book list (the list shipped inside the binary, a copy of the official
//! books repository's `books.json`, or the file named by the `books_file` setting) and
//! keeping it across restarts: the list as last refreshed is stored in `kvstore` under
//! `books`, in Fishtest's shape (`{_id: "books", value: {<book>: {total, white, black,
//! min_depth, max_depth, sri}}}`), and read back at start-up when no `books_file` is set.
//! Must not: fetch anything: the worker downloads books from GitHub itself; the server only
//! needs each book's `sri` to hand out with tasks.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::store::{Collection, Doc, Store, StoreResult};

/// The `kvstore` key of the stored list (Fishtest's).
pub const KV_KEY: &str = "books";

/// The default list, shipped with the binary.
const SHIPPED: &str = include_str!("books.json");

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Book {
    // Counts are null for some books in the official list.
    #[serde(default)]
    pub total: Option<u64>,
    #[serde(default)]
    pub white: Option<u64>,
    #[serde(default)]
    pub black: Option<u64>,
    #[serde(default)]
    pub min_depth: Option<u64>,
    #[serde(default)]
    pub max_depth: Option<u64>,
    pub sri: String,
}

#[derive(Debug, Clone, Default)]
pub struct Books(pub HashMap<String, Book>);

#[derive(Debug, thiserror::Error)]
pub enum BooksError {
    #[error("cannot read books file {0}: {1}")]
    Read(String, std::io::Error),
    #[error("books file {0} is not a valid book list: {1}")]
    Parse(String, serde_json::Error),
}

impl Books {
    pub fn shipped() -> Result<Books, BooksError> {
        Self::parse(SHIPPED, "(shipped books.json)")
    }

    pub fn load(path: Option<&Path>) -> Result<Books, BooksError> {
        match path {
            None => Self::shipped(),
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| BooksError::Read(p.display().to_string(), e))?;
                Self::parse(&text, &p.display().to_string())
            }
        }
    }

    fn parse(text: &str, origin: &str) -> Result<Books, BooksError> {
        serde_json::from_str(text)
            .map(Books)
            .map_err(|e| BooksError::Parse(origin.to_string(), e))
    }

    pub fn get(&self, name: &str) -> Option<&Book> {
        self.0.get(name)
    }

    /// The list at start-up: the `books_file` when one is set (the operator's choice), else
    /// the list stored at the last refresh, else the shipped one.
    pub fn at_start(path: Option<&Path>, store: &dyn Store) -> Result<Books, BooksError> {
        if path.is_some() {
            return Self::load(path);
        }
        match Self::stored(store) {
            Ok(Some(books)) => Ok(books),
            Ok(None) => Self::shipped(),
            Err(e) => {
                tracing::warn!(error = %e, "stored book list unreadable: the shipped one is used");
                Self::shipped()
            }
        }
    }

    /// The list stored in `kvstore` `books`, if any (an empty one counts as none).
    pub fn stored(store: &dyn Store) -> Result<Option<Books>, String> {
        let Some(doc) = store
            .get(Collection::Kvstore, KV_KEY)
            .map_err(|e| e.to_string())?
        else {
            return Ok(None);
        };
        let value = doc.get("value").cloned().unwrap_or(Value::Null);
        let books: HashMap<String, Book> =
            serde_json::from_value(value).map_err(|e| format!("kvstore books: {e}"))?;
        Ok((!books.is_empty()).then_some(Books(books)))
    }

    /// Stores the list in `kvstore` `books` (Fishtest's document: `_id` and `value` only).
    pub fn save(&self, store: &dyn Store) -> StoreResult<()> {
        let mut doc = Doc::new();
        doc.insert("_id".into(), json!(KV_KEY));
        doc.insert("value".into(), json!(self.0));
        store.put(Collection::Kvstore, &doc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_list_has_the_standard_books_with_sri() {
        let books = Books::shipped().expect("parses");
        let b = books.get("UHO_Lichess_4852_v1.epd").expect("standard book");
        assert!(b.sri.len() > 40);
        assert!(books.0.len() > 5);
    }
}
