//! The translation of the store's query vocabulary ([`Query`], [`Cond`], [`Order`]) into SQL
//! over the JSON documents: field paths become `json_extract` expressions (or the run columns
//! of migration 3), values become bound parameters, never text spliced into the SQL.
//!
//! Must not: run SQL or hold a connection; accept a field path that `valid_path` refuses.

use rusqlite::types::Value as SqlValue;
use serde_json::Value;

use super::table;
use crate::store::{Collection, Cond, Order, Query, StoreError, StoreResult, valid_path};

/// The statement adding `?1` to the numeric top-level `field` (absent: 0) of the document with
/// id `?2`, in one UPDATE (atomic: SQLite serialises writers). Not for runs, whose documents
/// have their own columns and change only through the run core.
pub fn increment_sql(coll: Collection, field: &str) -> StoreResult<String> {
    if coll == Collection::Runs || field == "_id" || field.contains('.') || !valid_path(field) {
        return Err(StoreError::InvalidQuery(format!(
            "cannot increment {field:?} of {}",
            coll.name()
        )));
    }
    // `field` is [A-Za-z0-9_]+ (valid_path), so it is safe inside the JSON path literal.
    Ok(format!(
        "UPDATE {t} SET doc = json_set(doc, '$.{field}', \
         coalesce(json_extract(doc, '$.{field}'), 0) + ?1) WHERE id = ?2",
        t = table(coll)
    ))
}

/// The SQL expression for a field path (literal, so SQLite can match expression indexes).
/// Dates are compared on their ISO string inside `$date`. The run fields that have their own
/// columns (migration 3) are read from them: `finished` (0/1), `last_updated` (ISO string,
/// meaningful with date values and for sorting), `args.username`.
fn field_expr(coll: Collection, path: &str, value_is_date: bool) -> StoreResult<String> {
    if !valid_path(path) {
        return Err(StoreError::InvalidQuery(format!("bad field path {path:?}")));
    }
    if path == "_id" {
        return Ok("id".to_string());
    }
    if coll == Collection::Runs {
        match path {
            "finished" => return Ok("finished".to_string()),
            "last_updated" => return Ok("last_updated".to_string()),
            "args.username" => return Ok("username".to_string()),
            _ => {}
        }
    }
    let suffix = if value_is_date { ".\"$date\"" } else { "" };
    Ok(format!("json_extract(doc, '$.{path}{suffix}')"))
}

/// A JSON scalar as an SQL parameter, and whether it was a `{"$date": ...}`.
fn sql_param(v: &Value) -> StoreResult<(SqlValue, bool)> {
    Ok(match v {
        Value::Bool(b) => (SqlValue::Integer(i64::from(*b)), false),
        Value::Number(n) => match n.as_i64() {
            Some(i) => (SqlValue::Integer(i), false),
            None => (SqlValue::Real(n.as_f64().unwrap_or(f64::NAN)), false),
        },
        Value::String(s) => (SqlValue::Text(s.clone()), false),
        Value::Object(m) if m.len() == 1 && m.get("$date").is_some_and(Value::is_string) => (
            SqlValue::Text(
                m.get("$date")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            ),
            true,
        ),
        Value::Null => (SqlValue::Null, false),
        other => {
            return Err(StoreError::InvalidQuery(format!(
                "cannot compare with {other}"
            )));
        }
    })
}

/// `WHERE` clause and parameters for a filter.
fn where_clause(coll: Collection, filter: &[Cond]) -> StoreResult<(String, Vec<SqlValue>)> {
    let mut parts = Vec::new();
    let mut params = Vec::new();
    for cond in filter {
        let (path, op, value) = match cond {
            Cond::Eq(p, v) => (p, "=", v),
            Cond::Ne(p, v) => (p, "!=", v),
            Cond::Gt(p, v) => (p, ">", v),
            Cond::Gte(p, v) => (p, ">=", v),
            Cond::Lt(p, v) => (p, "<", v),
            Cond::Lte(p, v) => (p, "<=", v),
            Cond::In(p, values) => {
                let mut marks = Vec::new();
                let mut is_date = false;
                for v in values {
                    let (param, d) = sql_param(v)?;
                    is_date |= d;
                    params.push(param);
                    marks.push("?");
                }
                let expr = field_expr(coll, p, is_date)?;
                if marks.is_empty() {
                    parts.push("0".to_string());
                } else {
                    parts.push(format!("{expr} IN ({})", marks.join(", ")));
                }
                continue;
            }
            Cond::ContainsAny(paths, texts) | Cond::ContainsNone(paths, texts) => {
                let mut any = Vec::new();
                for p in paths {
                    let expr = field_expr(coll, p, false)?;
                    for t in texts {
                        // instr() is a literal match: the text is never a LIKE pattern; a
                        // missing field contains nothing (never NULL, so NOT works).
                        any.push(format!(
                            "coalesce(instr(lower(CAST({expr} AS TEXT)), ?), 0) > 0"
                        ));
                        params.push(SqlValue::Text(t.to_ascii_lowercase()));
                    }
                }
                let none = matches!(cond, Cond::ContainsNone(..));
                parts.push(match (any.is_empty(), none) {
                    (true, false) => "0".to_string(),
                    (true, true) => "1".to_string(),
                    (false, false) => format!("({})", any.join(" OR ")),
                    (false, true) => format!("NOT ({})", any.join(" OR ")),
                });
                continue;
            }
            Cond::Exists(p, exists) => {
                if !valid_path(p) {
                    return Err(StoreError::InvalidQuery(format!("bad field path {p:?}")));
                }
                let not = if *exists { "NOT " } else { "" };
                parts.push(format!("json_type(doc, '$.{p}') IS {not}NULL"));
                continue;
            }
        };
        let (param, is_date) = sql_param(value)?;
        let expr = field_expr(coll, path, is_date)?;
        match (&param, op) {
            (SqlValue::Null, "=") => parts.push(format!("{expr} IS NULL")),
            (SqlValue::Null, "!=") => parts.push(format!("{expr} IS NOT NULL")),
            (SqlValue::Null, _) => {
                return Err(StoreError::InvalidQuery(format!(
                    "cannot order-compare {path} with null"
                )));
            }
            // Like MongoDB's $ne, a missing field is "not equal".
            (_, "!=") => {
                parts.push(format!("({expr} IS NULL OR {expr} != ?)"));
                params.push(param);
            }
            _ => {
                parts.push(format!("{expr} {op} ?"));
                params.push(param);
            }
        }
    }
    if parts.is_empty() {
        Ok((String::new(), params))
    } else {
        Ok((format!(" WHERE {}", parts.join(" AND ")), params))
    }
}

/// The `SELECT id, doc` of a query (its filter, sort keys, limit and skip) and its parameters.
pub(super) fn select_sql(coll: Collection, query: &Query) -> StoreResult<(String, Vec<SqlValue>)> {
    let (clause, mut params) = where_clause(coll, &query.filter)?;
    let mut sql = format!("SELECT id, doc FROM {}{clause}", table(coll));
    if !query.sort.is_empty() {
        let mut keys = Vec::new();
        for (path, order) in &query.sort {
            let dir = match order {
                Order::Asc => "ASC",
                Order::Desc => "DESC",
            };
            keys.push(format!("{} {dir}", field_expr(coll, path, false)?));
        }
        sql.push_str(&format!(" ORDER BY {}", keys.join(", ")));
    }
    if query.limit.is_some() || query.skip > 0 {
        sql.push_str(" LIMIT ? OFFSET ?");
        let limit = query
            .limit
            .map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
        params.push(SqlValue::Integer(limit));
        params.push(SqlValue::Integer(
            i64::try_from(query.skip).unwrap_or(i64::MAX),
        ));
    }
    Ok((sql, params))
}

/// The `SELECT COUNT(*)` of a filter and its parameters.
pub(super) fn count_sql(coll: Collection, filter: &[Cond]) -> StoreResult<(String, Vec<SqlValue>)> {
    let (clause, params) = where_clause(coll, filter)?;
    let sql = format!("SELECT COUNT(*) FROM {}{clause}", table(coll));
    Ok((sql, params))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::tests::{doc, store};
    use crate::store::{Date, Store};
    use serde_json::json;

    #[test]
    fn queries_filter_sort_and_page() {
        let (_d, s) = store();
        let base = chrono::Utc::now();
        let mut docs = Vec::new();
        for i in 0..10i64 {
            let when = Date(base + chrono::Duration::seconds(i));
            docs.push(doc(json!({
                "_id": format!("{i:024}"),
                "finished": i % 2 == 0,
                "last_updated": when,
                "args": {"username": if i < 5 { "alice" } else { "bob" }},
                "cores": i,
            })));
        }
        s.put_many(Collection::Runs, &docs).expect("put_many");
        let q = Query::new()
            .with(Cond::Eq("finished".into(), json!(false)))
            .sort("last_updated", Order::Desc)
            .limit(3);
        let ids: Vec<_> = s
            .find(Collection::Runs, &q)
            .expect("find")
            .iter()
            .map(|d| d["cores"].as_i64().unwrap_or(-1))
            .collect();
        assert_eq!(ids, vec![9, 7, 5]);
        let cutoff = Date(base + chrono::Duration::seconds(6)).to_value();
        let n = s
            .count(
                Collection::Runs,
                &[
                    Cond::Gte("last_updated".into(), cutoff),
                    Cond::Eq("args.username".into(), json!("bob")),
                ],
            )
            .expect("count");
        assert_eq!(n, 4);
        let n = s
            .count(
                Collection::Runs,
                &[Cond::In(
                    "cores".into(),
                    vec![json!(1), json!(2), json!(30)],
                )],
            )
            .expect("count");
        assert_eq!(n, 2);
        let page = s
            .find(
                Collection::Runs,
                &Query::new().sort("cores", Order::Asc).skip(8),
            )
            .expect("page");
        assert_eq!(page.len(), 2);
        assert_eq!(
            s.count(Collection::Runs, &[Cond::Exists("nope".into(), true)])
                .expect("count"),
            0
        );
        assert_eq!(
            s.count(Collection::Runs, &[Cond::Ne("nope".into(), json!(1))])
                .expect("count"),
            10
        );
    }

    #[test]
    fn hostile_paths_and_values_are_refused() {
        let (_d, s) = store();
        let e = s
            .find(
                Collection::Runs,
                &Query::new().with(Cond::Eq("x') OR 1=1 --".into(), json!(1))),
            )
            .expect_err("refused");
        assert!(matches!(e, StoreError::InvalidQuery(_)));
        let e = s
            .count(Collection::Runs, &[Cond::Eq("a".into(), json!([1]))])
            .expect_err("refused");
        assert!(matches!(e, StoreError::InvalidQuery(_)));
    }
}
