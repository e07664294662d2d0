//! The indexes of the MongoDB store: Fishtest's own (`server/utils/create_indexes.py` and
//! `utils/delta_update_users.py`, the same names, keys and options, so a database shared
//! with Fishtest keeps one set), plus the journal's.
//!
//! Must not: talk to a server (`MongoStore::open` creates them); drop or rebuild an index.

use bson::{Bson, Document, doc};
use mongodb::IndexModel;
use mongodb::options::IndexOptions;

/// One index: the collection, its name, its keys in order (1, -1 or "text") and its options.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexSpec {
    pub collection: &'static str,
    pub name: &'static str,
    pub keys: Document,
    pub unique: bool,
    pub partial: Option<Document>,
    /// `default_language` of a text index.
    pub default_language: Option<&'static str>,
}

fn spec(collection: &'static str, name: &'static str, keys: Document) -> IndexSpec {
    IndexSpec {
        collection,
        name,
        keys,
        unique: false,
        partial: None,
        default_language: None,
    }
}

impl IndexSpec {
    fn unique(mut self) -> Self {
        self.unique = true;
        self
    }

    fn partial(mut self, filter: Document) -> Self {
        self.partial = Some(filter);
        self
    }

    fn text(mut self) -> Self {
        self.default_language = Some("none");
        self
    }

    /// The driver's index model.
    pub fn model(&self) -> IndexModel {
        let options = IndexOptions::builder()
            .name(self.name.to_string())
            .unique(self.unique.then_some(true))
            .partial_filter_expression(self.partial.clone())
            .default_language(self.default_language.map(str::to_string))
            .build();
        IndexModel::builder()
            .keys(self.keys.clone())
            .options(options)
            .build()
    }
}

/// The collection holding the journal of acknowledged run changes (shoal's; Fishtest has none).
pub const JOURNAL: &str = "shoal_journal";
/// Each run's last flushed journal seq.
pub const RUN_SEQ: &str = "shoal_run_seq";
/// shoal's own fields of each run (`_id`: the run's), kept out of Fishtest's `runs`.
pub const RUN_EXTRAS: &str = "shoal_run_extras";

/// shoal's own action log (`store::Collection::ShoalActions`).
pub const SHOAL_ACTIONS: &str = "shoal_actions";

/// Every index the store makes sure exists (`_id` indexes are MongoDB's own).
pub fn all() -> Vec<IndexSpec> {
    let not_deleted = |mut d: Document| {
        d.insert("deleted", false);
        d
    };
    vec![
        spec("runs", "unfinished_runs", doc! {"finished": 1}).partial(doc! {"finished": false}),
        spec(
            "runs",
            "finished_runs",
            doc! {"finished": 1, "last_updated": -1, "deleted": 1},
        )
        .partial(doc! {"finished": true}),
        spec(
            "runs",
            "finished_green_runs",
            doc! {"finished": 1, "is_green": -1, "last_updated": -1},
        )
        .partial(not_deleted(doc! {"finished": true, "is_green": true})),
        spec(
            "runs",
            "finished_yellow_runs",
            doc! {"finished": 1, "is_yellow": -1, "last_updated": -1},
        )
        .partial(not_deleted(doc! {"finished": true, "is_yellow": true})),
        spec(
            "runs",
            "finished_ltc_runs",
            doc! {"finished": 1, "last_updated": -1, "tc_base": -1},
        )
        .partial(not_deleted(
            doc! {"finished": true, "tc_base": {"$gte": 40}},
        )),
        spec(
            "runs",
            "user_runs",
            doc! {"args.username": -1, "last_updated": -1},
        ),
        spec(
            "runs",
            "finished_user_runs",
            doc! {"args.username": -1, "finished": 1, "last_updated": -1},
        )
        .partial(not_deleted(doc! {"finished": true})),
        spec("runs", "finished_runs_text", doc! {"args.info": "text"})
            .partial(not_deleted(doc! {"finished": true}))
            .text(),
        spec("users", "username_1", doc! {"username": 1}).unique(),
        spec("actions", "actions_time_id", doc! {"time": -1, "_id": -1}),
        spec(
            "actions",
            "actions_user_time_id",
            doc! {"username": 1, "time": -1, "_id": -1},
        ),
        spec(
            "actions",
            "actions_action_time_id",
            doc! {"action": 1, "time": -1, "_id": -1},
        ),
        spec(
            "actions",
            "actions_run_time_id",
            doc! {"run_id": 1, "time": -1, "_id": -1},
        ),
        spec(
            "actions",
            "username_1__id_-1",
            doc! {"username": 1, "_id": -1},
        ),
        spec("actions", "action_1__id_-1", doc! {"action": 1, "_id": -1}),
        spec("actions", "run_id_1__id_-1", doc! {"run_id": 1, "_id": -1}),
        spec(
            "actions",
            "action_text_username_text_worker_text_message_text_run_text_user_text_nn_text__id_-1",
            doc! {"action": "text", "username": "text", "worker": "text", "message": "text",
            "run": "text", "user": "text", "nn": "text", "_id": -1},
        )
        .text(),
        spec("pgns", "run_id_-1", doc! {"run_id": -1}),
        spec("nns", "name_-1", doc! {"name": -1}),
        spec("workers", "worker_name_1", doc! {"worker_name": 1}).unique(),
        spec("user_cache", "username_1", doc! {"username": 1}).unique(),
        spec("top_month", "username_1", doc! {"username": 1}).unique(),
        spec(JOURNAL, "run_id_1__id_1", doc! {"run_id": 1, "_id": 1}),
        spec(
            SHOAL_ACTIONS,
            "time_-1__id_-1",
            doc! {"time": -1, "_id": -1},
        ),
    ]
}

/// An index spec as `indexes.json` lists it (for comparing with Fishtest's).
pub fn as_listed(s: &IndexSpec) -> Document {
    let keys: Vec<Bson> = s
        .keys
        .iter()
        .map(|(k, v)| Bson::Array(vec![Bson::String(k.clone()), v.clone()]))
        .collect();
    let mut d = doc! {"name": s.name, "key": keys};
    if s.unique {
        d.insert("unique", true);
    }
    if let Some(p) = &s.partial {
        d.insert("partialFilterExpression", p.clone());
    }
    if let Some(l) = s.default_language {
        d.insert("default_language", l);
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The specs are Fishtest's: the same as the `indexes.json` of a database its code made.
    #[test]
    fn the_specs_are_fishtests() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/fishtest-db/indexes.json"
        );
        let text = std::fs::read_to_string(path).expect("indexes.json");
        let listed: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&text).expect("json");
        let mut fishtest = Vec::new();
        for (coll, list) in &listed {
            for ix in list.as_array().expect("list") {
                let mut ix = ix.as_object().expect("index").clone();
                ix.remove("source");
                if ix.get("name").and_then(|n| n.as_str()) == Some("_id_") {
                    continue;
                }
                let d = Document::try_from(ix).expect("doc");
                fishtest.push((coll.clone(), d));
            }
        }
        let ours: Vec<(String, Document)> = all()
            .iter()
            .filter(|s| s.collection != JOURNAL && s.collection != SHOAL_ACTIONS)
            .map(|s| (s.collection.to_string(), as_listed(s)))
            .collect();
        assert_eq!(ours.len(), fishtest.len());
        for (coll, d) in &fishtest {
            let name = d.get_str("name").expect("name");
            let mine = ours
                .iter()
                .find(|(c, o)| c == coll && o.get_str("name").ok() == Some(name))
                .unwrap_or_else(|| panic!("{coll}.{name} missing"));
            assert_eq!(&mine.1, d, "{coll}.{name}");
            // Key order matters in an index.
            assert_eq!(
                mine.1.get_array("key").expect("key"),
                d.get_array("key").expect("key")
            );
        }
        for s in all() {
            let m = s.model();
            assert_eq!(m.keys, s.keys);
            assert_eq!(
                m.options.as_ref().and_then(|o| o.name.as_deref()),
                Some(s.name)
            );
        }
    }
}
