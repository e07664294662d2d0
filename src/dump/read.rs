//! Reading a dump file: a JSON array or one document per line, streamed document by
//! document.
//!
//! Must not: hold more than one document of a file at a time (but [`read_file`], for small
//! files).

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use bson::Document;
use serde::de::{DeserializeSeed, SeqAccess, Visitor};
use serde_json::Value;

use super::{DumpError, io_err};
use crate::store::StoreError;
use crate::store::bson_map::{self, MapError};

pub(super) enum ReadError {
    Json(String),
    Store(StoreError),
}

/// Calls `f` on each document of a dump file as it is parsed: a JSON array, or a sequence
/// of documents (one per line), never holding more than one document.
pub(super) fn for_each_document(
    mut reader: impl std::io::BufRead,
    mut f: impl FnMut(Value) -> Result<(), StoreError>,
) -> Result<(), ReadError> {
    // Peek at the first non-blank byte to tell an array from a sequence.
    let first = loop {
        let buf = reader
            .fill_buf()
            .map_err(|e| ReadError::Json(e.to_string()))?;
        match buf.iter().position(|b| !b.is_ascii_whitespace()) {
            Some(i) => {
                let b = buf[i];
                reader.consume(i);
                break Some(b);
            }
            None if buf.is_empty() => break None,
            None => {
                let n = buf.len();
                reader.consume(n);
            }
        }
    };
    let mut failure = None;
    match first {
        None => Ok(()),
        Some(b'[') => {
            let mut de = serde_json::Deserializer::from_reader(reader);
            let seed = EachSeed {
                f: &mut f,
                failure: &mut failure,
            };
            let parsed = seed.deserialize(&mut de).and_then(|()| de.end());
            match (failure, parsed) {
                (Some(e), _) => Err(ReadError::Store(e)),
                (None, Err(e)) => Err(ReadError::Json(e.to_string())),
                (None, Ok(())) => Ok(()),
            }
        }
        Some(_) => {
            for v in serde_json::Deserializer::from_reader(reader).into_iter::<Value>() {
                let v = v.map_err(|e| ReadError::Json(e.to_string()))?;
                f(v).map_err(ReadError::Store)?;
            }
            Ok(())
        }
    }
}

/// Visits a JSON array element by element.
struct EachSeed<'f, F> {
    f: &'f mut F,
    failure: &'f mut Option<StoreError>,
}

impl<'de, F: FnMut(Value) -> Result<(), StoreError>> DeserializeSeed<'de> for EachSeed<'_, F> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, F: FnMut(Value) -> Result<(), StoreError>> Visitor<'de> for EachSeed<'_, F> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON array of documents")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        use serde::de::Error;
        while let Some(v) = seq.next_element::<Value>()? {
            if let Err(e) = (self.f)(v) {
                *self.failure = Some(e);
                return Err(A::Error::custom("store failure"));
            }
        }
        Ok(())
    }
}

/// Reads every document of one dump file (tests and checks; small files only).
pub fn read_file(path: &Path) -> Result<Vec<Document>, DumpError> {
    let file = File::open(path).map_err(io_err(path))?;
    let mut docs = Vec::new();
    let mut bad = None;
    let reader = BufReader::new(file);
    for_each_document(reader, |v| {
        match bson_map::parse_extjson(v) {
            Ok(d) => docs.push(d),
            Err(e) => {
                bad.get_or_insert(e);
            }
        }
        Ok(())
    })
    .map_err(|e| DumpError::Format {
        path: path.to_path_buf(),
        message: match e {
            ReadError::Json(m) => m,
            ReadError::Store(e) => e.to_string(),
        },
    })?;
    match bad {
        Some(MapError::ExtJson(m)) | Some(MapError::Value { message: m, .. }) => {
            Err(DumpError::Format {
                path: path.to_path_buf(),
                message: m,
            })
        }
        Some(other) => Err(DumpError::Format {
            path: path.to_path_buf(),
            message: other.to_string(),
        }),
        None => Ok(docs),
    }
}
