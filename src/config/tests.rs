//! Unit tests of the settings: parsing, validation, overrides, the shipped settings file.

use super::*;
use crate::secret::REDACTED;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn err_text(text: &str, e: &[(&str, &str)]) -> String {
    Config::from_sources(Some(text), "test.toml", env(e))
        .expect_err("config should be refused")
        .to_string()
}

#[test]
fn shipped_settings_file_lists_every_key_with_its_default() {
    let text = include_str!("../../settings.toml");
    let table: toml::Table = text.parse().expect("settings.toml parses");
    let config = Config::from_sources(Some(text), "settings.toml", Vec::new())
        .expect("settings.toml is valid");
    // Optional keys are documented as comments; the rest must be present.
    for key in KEYS {
        let listed = table.contains_key(*key) || text.contains(&format!("# {key} ="));
        assert!(listed, "settings.toml does not list `{key}`");
    }
    assert_eq!(config, Config::default(), "settings.toml defaults drift");
    let serialized = toml::to_string(&Config::default()).expect("serializes");
    let fields: toml::Table = serialized.parse().expect("parses");
    for field in fields.keys() {
        assert!(KEYS.contains(&field.as_str()), "KEYS misses `{field}`");
    }
}

#[test]
fn env_overrides_file_and_ignores_foreign_variables() {
    let c = Config::from_sources(
        Some("port = 9000\nlog = \"warn\""),
        "t",
        env(&[
            ("SHOAL_PORT", "9100"),
            ("SHOAL_HOST", "0.0.0.0"),
            ("SHOAL_ADMISSION_QUEUE", "50"),
            ("SHOAL_STATS_CORPUS", "/tmp/x.json"),
            ("OTHER", "1"),
        ]),
    )
    .expect("valid");
    assert_eq!(c.port, 9100);
    assert_eq!(c.host, "0.0.0.0");
    assert_eq!(c.admission_queue, 50);
    assert_eq!(c.log, "warn");
}

#[test]
fn empty_env_value_unsets_optional_key() {
    let c = Config::from_sources(
        Some("primary_port = 8000"),
        "t",
        env(&[("SHOAL_PRIMARY_PORT", "")]),
    )
    .expect("valid");
    assert_eq!(c.primary_port, None);
}

#[test]
fn primary_rule() {
    let mut c = Config::default();
    assert!(c.is_primary());
    c.primary_port = Some(8000);
    assert!(c.is_primary());
    c.primary_port = Some(8001);
    assert!(!c.is_primary());
}

#[test]
fn unknown_key_is_named() {
    assert!(err_text("threadpool_tokenz = 3", &[]).contains("threadpool_tokenz"));
}

#[test]
fn wrong_type_is_named() {
    let e = err_text("port = \"eighty\"", &[]);
    assert!(e.contains("port"), "{e}");
    let e = err_text("", &[("SHOAL_THREADPOOL_TOKENS", "many")]);
    assert!(e.contains("threadpool_tokens"), "{e}");
}

#[test]
fn each_rule_names_its_key() {
    let cases: &[(&str, &str)] = &[
        ("host = \"not a host\"", "host"),
        ("data_dir = \"\"", "data_dir"),
        ("store = \"mongodb\"\nmongodb_uri = \" \"", "mongodb_uri"),
        ("store = \"postgres\"", "store"),
        ("threadpool_tokens = 0", "threadpool_tokens"),
        ("task_semaphore_size = 0", "task_semaphore_size"),
        ("admission_queue = 20000000", "admission_queue"),
        ("admission_timeout_s = 0", "admission_timeout_s"),
        ("admission_timeout_s = -1.0", "admission_timeout_s"),
        ("max_concurrent_requests = 204", "max_concurrent_requests"),
        ("listen_backlog = 0", "listen_backlog"),
        ("worker_threads = 0", "worker_threads"),
        ("api_body_limit_bytes = 10", "api_body_limit_bytes"),
        ("pgn_body_limit_bytes = 10", "pgn_body_limit_bytes"),
        ("shutdown_grace_s = -2", "shutdown_grace_s"),
        ("trusted_proxies = [\"proxy\"]", "trusted_proxies"),
        ("dead_task_timeout_s = 0", "dead_task_timeout_s"),
        ("flush_runs_per_tick = 0", "flush_runs_per_tick"),
        ("cache_keep_s = -1", "cache_keep_s"),
        ("cache_keep_s = 86401", "cache_keep_s"),
        ("periodic_jobs = false", "periodic_jobs"),
        ("pgn_retention_days = -1", "pgn_retention_days"),
        ("pgn_retention_days = 36501", "pgn_retention_days"),
        ("pgn_retention_days = 1.5", "pgn_retention_days"),
        ("pgn_retention_ltc_days = -1", "pgn_retention_ltc_days"),
        (
            "pgn_retention_unfinished_days = 36501",
            "pgn_retention_unfinished_days",
        ),
        ("scavenge_interval_s = 0", "scavenge_interval_s"),
        ("books_file = \"\"", "books_file"),
        ("nn_dir = \"\"", "nn_dir"),
        ("nn_url = \"ftp://x\"", "nn_url"),
        ("public_url = \"example.org\"", "public_url"),
        ("public_url = \"https://t.example.org/?a=1\"", "public_url"),
        ("public_url = \"https://t.example.org/#top\"", "public_url"),
        ("public_url = \"https://me@t.example.org\"", "public_url"),
        ("public_url = \"https://t.example.org/a b\"", "public_url"),
        ("secret = \"short\"", "secret"),
        // The placeholder of deploy/settings/shoal.env.example, long enough but refused.
        (
            "secret = \"replace-with-the-output-of-openssl-rand-hex-32\"",
            "secret",
        ),
        ("session_recheck_s = -1", "session_recheck_s"),
        ("session_recheck_s = 3601", "session_recheck_s"),
        ("log = \"info,[[\"", "log"),
        ("sqlite_synchronous = \"off\"", "sqlite_synchronous"),
        ("port = 70000", "port"),
    ];
    for (text, key) in cases {
        let e = err_text(text, &[]);
        assert!(
            e.contains(key),
            "`{text}` gave `{e}`, which does not name `{key}`"
        );
    }
}

#[test]
fn secrets_stay_out_of_debug_printout_and_errors() {
    let secret = "s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t";
    let c = Config::from_sources(
        Some("mongodb_uri = \"mongodb://alice:pa55word@db:27017/ft\""),
        "t",
        env(&[("SHOAL_SECRET", secret)]),
    )
    .expect("valid");
    assert_eq!(c.secret.as_ref().map(Secret::expose), Some(secret));
    assert_eq!(
        c.mongodb_uri.expose(),
        "mongodb://alice:pa55word@db:27017/ft"
    );
    let debug = format!("{c:?}");
    let printed = toml::to_string(&c).expect("serializes");
    for shown in [&debug, &printed] {
        assert!(!shown.contains(secret), "{shown}");
        assert!(!shown.contains("pa55word"), "{shown}");
        assert!(shown.contains(REDACTED), "{shown}");
        assert!(
            shown.contains("mongodb://alice:[REDACTED]@db:27017/ft"),
            "{shown}"
        );
    }
    // Type and syntax errors quote the offending line; not when it holds a secret.
    for (text, e, key) in [
        (
            "",
            &[("SHOAL_SECRET", "12345678901234567890123456789.25")][..],
            "secret",
        ),
        (
            "secret = [\"s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t\"]",
            &[],
            "secret",
        ),
        (
            "secret = \"s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t",
            &[],
            "secret",
        ),
        ("mongodb_uri = 987654", &[], "mongodb_uri"),
    ] {
        let message = err_text(text, e);
        assert!(!message.contains("s3cr3t"), "{message}");
        assert!(!message.contains("123456789"), "{message}");
        assert!(!message.contains("987654"), "{message}");
        assert!(
            message.contains(&format!("invalid value for `{key}` (not shown")),
            "{message}"
        );
    }
    // Other keys are still quoted.
    assert!(err_text("port = \"eighty\"", &[]).contains("eighty"));
}

#[test]
fn durations_are_typed() {
    let c = Config::from_sources(
        Some("shutdown_grace_s = 2.5\ndead_task_timeout_s = 90"),
        "t",
        env(&[("SHOAL_SCAVENGE_INTERVAL_S", "0.5")]),
    )
    .expect("valid");
    assert_eq!(c.shutdown_grace(), Duration::from_millis(2500));
    assert_eq!(c.dead_task_timeout(), Duration::from_secs(90));
    assert_eq!(c.scavenge_interval(), Duration::from_millis(500));
    assert_eq!(c.admission_timeout(), Duration::from_secs(5));
    assert_eq!(c.body_read_timeout(), Duration::from_secs(60));
}

#[test]
fn pgn_retention_is_fishtests_by_default_and_read_in_days() {
    let d = Config::default().pgn_retention();
    assert_eq!(
        (d.stc, d.ltc, d.deleted, d.unfinished),
        (1, 10, 10, 50),
        "purge_pgns.py's numbers"
    );
    let c = Config::from_sources(Some("pgn_retention_days = 0"), "t", env(&[])).expect("valid");
    assert_eq!(c.pgn_retention().stc, 0);
    assert_eq!(c.pgn_retention().ltc, 10);
    let c = Config::from_sources(
        None,
        "t",
        env(&[
            ("SHOAL_PGN_RETENTION_DAYS", "90"),
            ("SHOAL_PGN_RETENTION_UNFINISHED_DAYS", "0"),
        ]),
    )
    .expect("valid");
    assert_eq!(c.pgn_retention().stc, 90);
    assert_eq!(c.pgn_retention().unfinished, 0);
    let e = err_text("pgn_retention_days = -7", &[]);
    assert!(e.contains("not -7"), "{e}");
    let e = err_text("pgn_retention_deleted_days = 40000", &[]);
    assert!(e.contains("pgn_retention_deleted_days"), "{e}");
}

#[test]
fn max_concurrent_requests_floor_counts_queue() {
    let ok = "threadpool_tokens = 10\ntask_semaphore_size = 5\nadmission_queue = 100\n\
              max_concurrent_requests = 115";
    Config::from_sources(Some(ok), "t", Vec::new()).expect("exactly the floor is fine");
    let e = err_text(
        "threadpool_tokens = 10\ntask_semaphore_size = 5\nadmission_queue = 100\n\
         max_concurrent_requests = 114",
        &[],
    );
    assert!(e.contains("115"), "{e}");
}

#[test]
fn limits_entries_are_checked_and_named() {
    let text = "[[limits]]\nkind = \"concurrency\"\nkey = \"user\"\nmax = 64\n\n\
                [[limits]]\nname = \"bad\"\nkind = \"rate\"\nkey = \"user\"\nmax = 5\n";
    let e = err_text(text, &[]);
    assert!(e.contains("`limits`"), "{e}");
    assert!(e.contains("entry 2 (`bad`)"), "{e}");
    let ok = "[[limits]]\nkind = \"concurrency\"\nkey = \"user\"\nmax = 64\n";
    let c = Config::from_sources(Some(ok), "t", env(&[])).expect("valid");
    // The three built-ins, the two signup limits, the /forgot limit, the entry.
    assert_eq!(c.limit_defs().len(), 7);
    assert!(err_text("limits_wait_s = 30", &[]).contains("limits_wait_s"));
    assert!(
        err_text("[[limits]]\nkind = \"concurrency\"\nkey = \"user\"\n", &[])
            .contains("entry 1: `max` is required")
    );
}

#[test]
fn mail_needs_public_url_and_says_so_naming_both() {
    // Without public_url a mailed link could only come from a request's Host header.
    let e = err_text("smtp_url = \"smtp://127.0.0.1:2525\"", &[]);
    assert!(e.contains("public_url") && e.contains("smtp_url"), "{e}");
    let e = err_text("", &[("SHOAL_SMTP_URL", "smtp://127.0.0.1:2525")]);
    assert!(e.contains("public_url") && e.contains("smtp_url"), "{e}");
    let ok = Config::from_sources(
        Some("smtp_url = \"smtp://127.0.0.1:2525\"\npublic_url = \"https://t.example.org\""),
        "test.toml",
        Vec::new(),
    );
    assert!(ok.is_ok(), "{ok:?}");
}
