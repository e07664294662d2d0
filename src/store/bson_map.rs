//! The BSON mapping: Fishtest's MongoDB documents ⇄ shoal's JSON documents, lossless both
//! ways. The one place that knows how a BSON type is written in a shoal document; the dump
//! import/export (`crate::dump`) and the MongoDB store (`store::mongo`) both go through it.
//!
//! Owns: the value rules, the `_id` rules per collection, the `pgns` documents, and the
//! Extended JSON text of a dump (read and written). Must not: do I/O, know a backend, or drop
//! a field: what shoal does not model is carried through unchanged.
//!
//! ## Values (BSON → shoal; the way back is the inverse)
//! - int32 → a JSON integer; int64 → a JSON integer when outside the int32 range (that is
//!   how pymongo chooses, so it is what Fishtest writes), else `{"$numberLong": "<n>"}`; a
//!   JSON integer comes back as int32 when it fits, else int64.
//! - double → a JSON float (written with a fraction or exponent, so `2.0` stays a double);
//!   NaN and the infinities → `{"$numberDouble": "NaN" | "Infinity" | "-Infinity"}`.
//! - datetime → `{"$date": "<RFC 3339, milliseconds, Z>"}` (shoal's [`super::Date`]), or
//!   `{"$date": {"$numberLong": "<ms>"}}` for a year outside 0–9999.
//! - ObjectId → its 24-hex string for the `_id` of an ObjectId-keyed collection, else
//!   `{"$oid": "<hex>"}`.
//! - binary → `{"$binary": {"base64": …, "subType": "<hex>"}}`, except a task's
//!   `spsa_params.packed_flips` (generic binary), which shoal models as an array of bytes.
//! - string, bool, null, arrays and documents as they are; any other BSON type (decimal128,
//!   regex, timestamp, …) as its canonical Extended JSON object.
//!
//! ## `_id`
//! shoal keys `nns` by `name` and `workers` by `worker_name` (the `_id` of the shoal document);
//! their Fishtest ObjectId is kept in `_mongo_id`. `kvstore` ids are strings. The other
//! collections use ObjectIds, shown as hex. An `_id` of any other type is kept in `_mongo_id`
//! too, with its string form as the shoal `_id`. Field order inside a document is not kept
//! (shoal's documents are sorted maps); MongoDB's queries and Fishtest do not depend on it.
//!
//! Files: `bson_map/tests.rs`: the unit tests (Fishtest's sample database included).

use std::io::Write;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use bson::spec::BinarySubtype;
use bson::{Binary, Bson, DateTime as BsonDate, Document, oid::ObjectId};
use chrono::{DateTime, Datelike, Utc};
use serde_json::{Map, Number, Value, json};

use super::{Collection, Date, Doc};

/// Where the Fishtest `_id` of a document is kept when the shoal `_id` is something else.
pub const MONGO_ID: &str = "_mongo_id";

/// A document or value that cannot be mapped, and why.
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    #[error("document has no `_id`")]
    MissingId,
    #[error("`{field}` (the key shoal uses for {collection}) is missing or not a string")]
    MissingKey {
        collection: &'static str,
        field: &'static str,
    },
    #[error("`{path}`: {message}")]
    Value { path: String, message: String },
    #[error("not Extended JSON: {0}")]
    ExtJson(String),
}

fn bad(path: &str, message: impl Into<String>) -> MapError {
    MapError::Value {
        path: path.to_string(),
        message: message.into(),
    }
}

/// The field that identifies a document of this collection in shoal (its shoal `_id`).
pub fn key_field(coll: Collection) -> &'static str {
    match coll {
        Collection::Nns => "name",
        Collection::Workers => "worker_name",
        _ => "_id",
    }
}

/// Whether Fishtest gives this collection's documents ObjectId `_id`s that shoal shows as hex.
fn oid_keyed(coll: Collection) -> bool {
    !matches!(
        coll,
        Collection::Kvstore | Collection::ShoalKv | Collection::Nns | Collection::Workers
    )
}

fn is_oid_hex(s: &str) -> bool {
    s.len() == 24 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

// ---------------------------------------------------------------------------------------
// BSON → shoal

/// A Fishtest document as shoal stores it.
pub fn to_doc(coll: Collection, doc: Document) -> Result<Doc, MapError> {
    let mut out = Doc::new();
    let mut id = None;
    for (k, v) in doc {
        if k == "_id" {
            id = Some(v);
        } else {
            let value = to_value(v, &k)?;
            out.insert(k, value);
        }
    }
    let id = id.ok_or(MapError::MissingId)?;
    let key = key_field(coll);
    if key != "_id" {
        let name = out
            .get(key)
            .and_then(Value::as_str)
            .ok_or(MapError::MissingKey {
                collection: coll.name(),
                field: key,
            })?
            .to_string();
        out.insert(MONGO_ID.into(), to_value(id, "_id")?);
        out.insert("_id".into(), Value::String(name));
        return Ok(out);
    }
    let shoal_id = match id {
        Bson::ObjectId(oid) if oid_keyed(coll) => Value::String(oid.to_hex()),
        Bson::String(s) if !oid_keyed(coll) => Value::String(s),
        other => {
            let text = match &other {
                Bson::ObjectId(oid) => oid.to_hex(),
                Bson::String(s) => s.clone(),
                o => o.clone().into_relaxed_extjson().to_string(),
            };
            out.insert(MONGO_ID.into(), to_value(other, "_id")?);
            Value::String(text)
        }
    };
    out.insert("_id".into(), shoal_id);
    Ok(out)
}

/// One BSON value as shoal writes it (see the module doc). `path` names it in errors and
/// selects the field-specific rules.
pub fn to_value(b: Bson, path: &str) -> Result<Value, MapError> {
    Ok(match b {
        Bson::Int32(i) => Value::from(i),
        Bson::Int64(i) if i32::try_from(i).is_ok() => json!({"$numberLong": i.to_string()}),
        Bson::Int64(i) => Value::from(i),
        Bson::Double(f) => match Number::from_f64(f) {
            Some(n) => Value::Number(n),
            None => Bson::Double(f).into_canonical_extjson(),
        },
        Bson::String(s) => Value::String(s),
        Bson::Boolean(b) => Value::Bool(b),
        Bson::Null => Value::Null,
        Bson::DateTime(d) => date_value(d),
        Bson::ObjectId(oid) => json!({"$oid": oid.to_hex()}),
        Bson::Binary(bin) if is_packed_flips(path) && bin.subtype == BinarySubtype::Generic => {
            Value::Array(bin.bytes.into_iter().map(Value::from).collect())
        }
        Bson::Binary(bin) => json!({"$binary": {
            "base64": B64.encode(&bin.bytes),
            "subType": hex::encode([u8::from(bin.subtype)]),
        }}),
        Bson::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|v| to_value(v, path))
                .collect::<Result<_, _>>()?,
        ),
        Bson::Document(d) => {
            let mut m = Map::new();
            for (k, v) in d {
                let sub = format!("{path}.{k}");
                m.insert(k, to_value(v, &sub)?);
            }
            Value::Object(m)
        }
        other => other.into_canonical_extjson(),
    })
}

fn is_packed_flips(path: &str) -> bool {
    path.ends_with("spsa_params.packed_flips")
}

fn date_value(d: BsonDate) -> Value {
    let ms = d.timestamp_millis();
    match DateTime::<Utc>::from_timestamp_millis(ms) {
        Some(t) if (0..=9999).contains(&t.year()) => Date(t).to_value(),
        _ => json!({"$date": {"$numberLong": ms.to_string()}}),
    }
}

// ---------------------------------------------------------------------------------------
// shoal → BSON

/// A shoal document as Fishtest stores it: `_id` first, then the fields.
pub fn to_bson(coll: Collection, doc: &Doc) -> Result<Document, MapError> {
    let mut out = Document::new();
    out.insert("_id", fishtest_id(coll, doc)?);
    for (k, v) in doc {
        if k == "_id" || k == MONGO_ID {
            continue;
        }
        out.insert(k.clone(), from_value(v, k)?);
    }
    Ok(out)
}

/// The Fishtest `_id` of a shoal document: the one kept in `_mongo_id`, else the ObjectId
/// its hex `_id` spells, else its string `_id`; a document shoal made in a collection keyed
/// by another field (a net, a worker) gets a new ObjectId.
pub fn fishtest_id(coll: Collection, doc: &Doc) -> Result<Bson, MapError> {
    if let Some(kept) = doc.get(MONGO_ID) {
        return from_value(kept, "_id");
    }
    if key_field(coll) != "_id" {
        return Ok(Bson::ObjectId(ObjectId::new()));
    }
    match doc.get("_id") {
        Some(Value::String(s)) if oid_keyed(coll) && is_oid_hex(s) => ObjectId::parse_str(s)
            .map(Bson::ObjectId)
            .map_err(|e| bad("_id", e.to_string())),
        Some(Value::String(s)) => Ok(Bson::String(s.clone())),
        Some(other) => from_value(other, "_id"),
        None => Err(MapError::MissingId),
    }
}

/// One shoal value as BSON (the inverse of [`to_value`]).
pub fn from_value(v: &Value, path: &str) -> Result<Bson, MapError> {
    Ok(match v {
        Value::Null => Bson::Null,
        Value::Bool(b) => Bson::Boolean(*b),
        Value::String(s) => Bson::String(s.clone()),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                match i32::try_from(i) {
                    Ok(small) => Bson::Int32(small),
                    Err(_) => Bson::Int64(i),
                }
            } else if n.is_u64() {
                return Err(bad(path, format!("{n} does not fit a BSON int64")));
            } else {
                Bson::Double(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Value::Array(items) if is_packed_flips(path) => {
            let bytes = items
                .iter()
                .map(|x| x.as_u64().and_then(|b| u8::try_from(b).ok()))
                .collect::<Option<Vec<u8>>>()
                .ok_or_else(|| bad(path, "packed_flips holds a value that is not a byte"))?;
            Bson::Binary(Binary {
                subtype: BinarySubtype::Generic,
                bytes,
            })
        }
        Value::Array(items) => Bson::Array(
            items
                .iter()
                .map(|x| from_value(x, path))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(m) => {
            if let Some(special) = extjson_value(m, path)? {
                return Ok(special);
            }
            let mut d = Document::new();
            for (k, x) in m {
                d.insert(k.clone(), from_value(x, &format!("{path}.{k}"))?);
            }
            Bson::Document(d)
        }
    })
}

/// A single-key `{"$…": …}` object is an Extended JSON value; anything else is a document.
fn extjson_value(m: &Map<String, Value>, path: &str) -> Result<Option<Bson>, MapError> {
    let mut keys = m.keys();
    let (Some(key), None) = (keys.next(), keys.next()) else {
        return Ok(None);
    };
    if !key.starts_with('$') {
        return Ok(None);
    }
    if key == "$date"
        && let Some(Value::String(s)) = m.get("$date")
    {
        // Parsed here rather than by `bson`, so every year chrono reads comes back.
        let t = DateTime::parse_from_rfc3339(s).map_err(|e| bad(path, format!("{s:?}: {e}")))?;
        return Ok(Some(Bson::DateTime(BsonDate::from_millis(
            t.timestamp_millis(),
        ))));
    }
    Bson::try_from(Value::Object(m.clone()))
        .map(Some)
        .map_err(|e| bad(path, e.to_string()))
}

// ---------------------------------------------------------------------------------------
// pgns

/// A Fishtest `pgns` document: `{_id, run_id: "<run>-<task>", pgn_zip: binary, size}`.
#[derive(Debug, Clone, PartialEq)]
pub struct PgnDoc {
    /// The ObjectId's hex form.
    pub id: String,
    pub run_task: String,
    pub gz: Vec<u8>,
}

/// Reads a `pgns` document. shoal stores the four fields Fishtest writes; `size` must be the
/// length of `pgn_zip`, as Fishtest writes it, since shoal derives it on the way back.
pub fn pgn_from_bson(doc: &Document) -> Result<PgnDoc, MapError> {
    let id = match doc.get("_id") {
        Some(Bson::ObjectId(oid)) => oid.to_hex(),
        Some(_) => return Err(bad("_id", "a PGN's `_id` must be an ObjectId")),
        None => return Err(MapError::MissingId),
    };
    let run_task = doc
        .get_str("run_id")
        .map_err(|_| bad("run_id", "missing or not a string"))?
        .to_string();
    let gz = match doc.get("pgn_zip") {
        Some(Bson::Binary(b)) => b.bytes.clone(),
        _ => return Err(bad("pgn_zip", "missing or not binary")),
    };
    let size = match doc.get("size") {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        _ => return Err(bad("size", "missing or not an integer")),
    };
    if usize::try_from(size).ok() != Some(gz.len()) {
        return Err(bad(
            "size",
            format!("{size} is not the length of pgn_zip ({})", gz.len()),
        ));
    }
    if let Some(extra) = doc
        .keys()
        .find(|k| !matches!(k.as_str(), "_id" | "run_id" | "pgn_zip" | "size"))
    {
        return Err(bad(extra, "a field shoal's PGN store does not keep"));
    }
    Ok(PgnDoc { id, run_task, gz })
}

/// A `pgns` document as Fishtest writes it.
pub fn pgn_to_bson(pgn: &PgnDoc) -> Result<Document, MapError> {
    let oid = ObjectId::parse_str(&pgn.id).map_err(|e| bad("_id", e.to_string()))?;
    let size = i64::try_from(pgn.gz.len()).map_err(|e| bad("size", e.to_string()))?;
    let mut d = Document::new();
    d.insert("_id", oid);
    d.insert("run_id", pgn.run_task.clone());
    d.insert(
        "pgn_zip",
        Binary {
            subtype: BinarySubtype::Generic,
            bytes: pgn.gz.clone(),
        },
    );
    d.insert(
        "size",
        match i32::try_from(size) {
            Ok(n) => Bson::Int32(n),
            Err(_) => Bson::Int64(size),
        },
    );
    Ok(d)
}

// ---------------------------------------------------------------------------------------
// Extended JSON text (the dump's files)

/// A document read from canonical or relaxed Extended JSON.
pub fn parse_extjson(v: Value) -> Result<Document, MapError> {
    match v {
        Value::Object(m) => Document::try_from(m).map_err(|e| MapError::ExtJson(e.to_string())),
        other => Err(MapError::ExtJson(format!(
            "expected a document, found {}",
            kind(&other)
        ))),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Writes a document as canonical Extended JSON on one line, keeping its field order (`_id`
/// first, as `mongoexport` and Fishtest's tools write it).
pub fn write_extjson(out: &mut impl Write, doc: &Document) -> std::io::Result<()> {
    out.write_all(b"{")?;
    for (i, (k, v)) in doc.iter().enumerate() {
        if i > 0 {
            out.write_all(b", ")?;
        }
        serde_json::to_writer(&mut *out, k)?;
        out.write_all(b": ")?;
        write_bson(out, v)?;
    }
    out.write_all(b"}")
}

fn write_bson(out: &mut impl Write, v: &Bson) -> std::io::Result<()> {
    match v {
        Bson::Document(d) => write_extjson(out, d),
        Bson::Array(items) => {
            out.write_all(b"[")?;
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.write_all(b", ")?;
                }
                write_bson(out, x)?;
            }
            out.write_all(b"]")
        }
        scalar => Ok(serde_json::to_writer(
            &mut *out,
            &scalar.clone().into_canonical_extjson(),
        )?),
    }
}

#[cfg(test)]
mod tests;
