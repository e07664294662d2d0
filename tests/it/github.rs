//! The GitHub component against a GitHub of our own on loopback (`fake_github.rs`, GitHub's
//! documented shapes from `tests/data/github/fixture.json`): what a branch resolves to, the
//! benches and nets read from it, the fork check, the diff, the quota, conditional requests
//! that cost nothing (also after a restart), and every way GitHub fails.

use std::sync::Arc;
use std::time::Duration;

use shoal::github::{Github, GithubConfig, GithubError, RepoName};
use shoal::offload::Offload;

use crate::fake_github::{FORK, FakeGithub, Mode, OFFICIAL};
use crate::harness;

fn repo(full: &str) -> RepoName {
    RepoName::from_full(full).expect("repo")
}

fn github(fake: &FakeGithub, dir: &std::path::Path, timeout_s: u64) -> Github {
    github_with_token(fake, dir, timeout_s, Some(fake.token()))
}

fn github_with_token(
    fake: &FakeGithub,
    dir: &std::path::Path,
    timeout_s: u64,
    token: Option<String>,
) -> Github {
    let store: shoal::store::SharedStore = Arc::from(harness::open_store(dir).expect("store"));
    let cfg = GithubConfig {
        api_url: fake.api_url(),
        raw_url: fake.raw_url(),
        token: token.map(shoal::secret::Secret::new),
        timeout: Duration::from_secs(timeout_s),
        official_repo: OFFICIAL.into(),
    };
    let ledger = Arc::new(shoal::ledger::Ledger::new(Arc::clone(&store), true));
    Github::new(&cfg, store, Offload::new(4), ledger).expect("github")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_resolves_to_its_commit_bench_and_nets() {
    let fake = FakeGithub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gh = github(&fake, dir.path(), 5);

    let c = gh.commit(&repo(FORK), "lmr-tweak").await.unwrap();
    assert_eq!(c.sha, "aaaa000000000000000000000000000000000001");
    assert_eq!(c.subject(), "Tweak LMR reduction");
    assert_eq!(c.bench(), Some(1893224));
    // A short SHA resolves too.
    let c = gh.commit(&repo(FORK), "dddd0000").await.unwrap();
    assert_eq!(c.sha, "dddd000000000000000000000000000000000001");

    // Master's newest commit has no bench: the base bench is the newest one stated.
    let (head, bench) = gh.master_bench().await.unwrap();
    assert_eq!(head.sha, "3333333333333333333333333333333333333333");
    let (with, b) = bench.expect("a bench on master");
    assert_eq!(with.sha, "2222222222222222222222222222222222222222");
    assert_eq!(b, 1947203);

    let nets = gh
        .nets(&repo(FORK), "aaaa000000000000000000000000000000000001")
        .await
        .unwrap();
    assert_eq!(nets, vec!["nn-1c0000000000.nnue", "nn-37f18f62d772.nnue"]);
    let nets = gh
        .nets(&repo(FORK), "dddd000000000000000000000000000000000001")
        .await
        .unwrap();
    assert_eq!(nets, vec!["nn-1c0000000000.nnue", "nn-9999aaaabbbb.nnue"]);
    // evaluate.h names none: ucioption.cpp's quoted name.
    let nets = gh
        .nets(&repo(FORK), "eeee000000000000000000000000000000000001")
        .await
        .unwrap();
    assert_eq!(nets, vec!["nn-62ef826d1a6d.nnue"]);

    // A commit without a bench says so.
    let c = gh.commit(&repo(FORK), "no-bench").await.unwrap();
    assert_eq!(c.bench(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forks_diffs_and_ancestry() {
    let fake = FakeGithub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gh = github(&fake, dir.path(), 5);

    assert!(gh.is_official_or_fork(&repo(OFFICIAL)).await.unwrap());
    assert!(gh.is_official_or_fork(&repo(FORK)).await.unwrap());
    // GitHub matches names case-insensitively; so does the check.
    assert!(
        gh.is_official_or_fork(&repo("Dev-One/stockfish"))
            .await
            .unwrap()
    );
    assert!(
        !gh.is_official_or_fork(&repo("stranger/Engine"))
            .await
            .unwrap()
    );
    assert_eq!(
        gh.is_official_or_fork(&repo("nobody/Stockfish")).await,
        Err(GithubError::NoRepository("nobody/Stockfish".into()))
    );

    let diff = gh
        .diff(
            &repo(FORK),
            "3333333333333333333333333333333333333333",
            "aaaa000000000000000000000000000000000001",
        )
        .await
        .unwrap();
    assert!(diff.starts_with("diff --git a/src/search.cpp"), "{diff}");
    assert!(diff.contains("+      r -= 1100 * ss->ttPv;"));

    // A branch on top of master is ahead and not behind; an old base is behind master.
    let a = gh
        .ancestry(
            &repo(FORK),
            "master",
            "aaaa000000000000000000000000000000000001",
        )
        .await
        .unwrap();
    assert_eq!((a.ahead_by, a.behind_by), (1, 0));
    let a = gh
        .ancestry(
            &repo(FORK),
            "master",
            "bbbb000000000000000000000000000000000001",
        )
        .await
        .unwrap();
    assert_eq!((a.ahead_by, a.behind_by), (1, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_reply_costs_no_quota_even_after_a_restart() {
    let fake = FakeGithub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gh = github(&fake, dir.path(), 5);

    gh.commit(&repo(FORK), "lmr-tweak").await.unwrap();
    let used = fake.used();
    assert_eq!(used, 1);
    let again = gh.commit(&repo(FORK), "lmr-tweak").await.unwrap();
    assert_eq!(again.sha, "aaaa000000000000000000000000000000000001");
    assert_eq!(fake.used(), used, "a 304 costs nothing");
    assert_eq!(
        fake.hits(&format!("/repos/{FORK}/commits/lmr-tweak")),
        2,
        "the second resolution asked GitHub (conditionally)"
    );

    // A new instance on the same store (a restart) reuses the kept reply.
    drop(gh);
    let gh = github(&fake, dir.path(), 5);
    let c = gh.commit(&repo(FORK), "lmr-tweak").await.unwrap();
    assert_eq!(c.bench(), Some(1893224));
    assert_eq!(fake.used(), used, "kept across the restart");

    // The quota as the last reply stated it, and as /rate_limit states it.
    let (limit, remaining, reset) = fake.quota();
    let q = gh.quota().expect("quota seen");
    assert_eq!((q.limit, q.remaining, q.reset), (limit, remaining, reset));
    let q = gh.refresh_quota().await.unwrap();
    assert_eq!(
        (q.limit, q.remaining, q.used, q.reset),
        (limit, remaining, used, reset)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_github_fails_is_named() {
    let mut fake = FakeGithub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gh = github(&fake, dir.path(), 1);
    let fork = repo(FORK);

    // An unknown branch: GitHub's 422 "No commit found".
    let e = gh.commit(&fork, "no-such-branch").await.unwrap_err();
    assert_eq!(
        e,
        GithubError::UnknownRef {
            repo: FORK.into(),
            reference: "no-such-branch".into()
        }
    );
    assert!(!e.is_outage());
    // A name that cannot go into a URL is refused before any call.
    let before = fake.used();
    assert!(matches!(
        gh.commit(&fork, "../../etc").await,
        Err(GithubError::BadInput(_))
    ));
    assert_eq!(fake.used(), before);

    fake.set_mode(Mode::RateLimited);
    let (_, _, reset) = fake.quota();
    let e = gh.commit(&fork, "master").await.unwrap_err();
    assert_eq!(e, GithubError::RateLimited { reset: Some(reset) });
    assert!(e.to_string().contains("rate limit is used up until"), "{e}");

    fake.set_mode(Mode::ServerError);
    let path = format!("/repos/{FORK}/commits/old-base");
    let e = gh.commit(&fork, "old-base").await.unwrap_err();
    assert_eq!(e, GithubError::Server(502));
    assert_eq!(fake.hits(&path), 2, "a 5xx is retried once");

    fake.set_mode(Mode::Malformed);
    let e = gh.commit(&fork, "new-net").await.unwrap_err();
    assert!(matches!(e, GithubError::Malformed(_)), "{e:?}");

    fake.set_mode(Mode::Slow(Duration::from_secs(3)));
    let e = gh.commit(&fork, "ucioption-nets").await.unwrap_err();
    assert_eq!(e, GithubError::Timeout(1));
    assert!(e.is_outage());

    fake.set_mode(Mode::Normal);
    fake.stop().await;
    let e = gh.commit(&fork, "lmr-tweak").await.unwrap_err();
    assert!(matches!(e, GithubError::Unreachable(_)), "{e:?}");
    assert!(e.to_string().contains("could not be reached"), "{e}");
}

fn wanted(repo: &str, new: &str, base: &str) -> shoal::github::Wanted {
    shoal::github::Wanted {
        tests_repo: repo.into(),
        new_tag: new.into(),
        base_tag: base.into(),
        // An account registered today (Fishtest's fork rule applies to it).
        registered_at: chrono::Utc::now().timestamp(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_by_branch_name_resolves_everything() {
    use shoal::github::Field;
    let fake = FakeGithub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gh = github(&fake, dir.path(), 5);

    // Only a branch: the base is master, both benches come from the messages (master's from
    // the newest commit stating one), the nets from the sources.
    let r = gh
        .resolve_submission(&wanted(
            "https://github.com/dev-one/Stockfish/",
            "lmr-tweak",
            "",
        ))
        .await
        .unwrap();
    assert_eq!(r.tests_repo, "https://github.com/dev-one/Stockfish");
    assert_eq!(r.new.commit.sha, "aaaa000000000000000000000000000000000001");
    assert_eq!(r.new.commit.subject(), "Tweak LMR reduction");
    assert_eq!(r.new.bench, 1893224);
    assert_eq!(r.base.tag, "master");
    assert_eq!(
        r.base.commit.sha,
        "3333333333333333333333333333333333333333"
    );
    assert_eq!(r.base.bench, 1947203);
    assert_eq!(
        r.new.nets,
        vec!["nn-1c0000000000.nnue", "nn-37f18f62d772.nnue"]
    );
    assert_eq!(r.base.nets, r.new.nets);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    assert_eq!(r.behind_by, Some(0), "on top of master");
    // A branch on an older master: how far behind is known (a warning only past the
    // threshold, BEHIND_WARNING commits).
    let mut w = wanted("https://github.com/dev-one/Stockfish", "old-base", "");
    w.base_signature = Some(1947203);
    let r = gh.resolve_submission(&w).await.unwrap();
    assert_eq!(r.behind_by, Some(2));
    assert!(2 <= shoal::github::BEHIND_WARNING && r.warnings.is_empty());

    // No repository given: the official one.
    let r = gh
        .resolve_submission(&wanted("", "2222222222", ""))
        .await
        .unwrap();
    assert_eq!(
        r.tests_repo,
        "https://github.com/official-stockfish/Stockfish"
    );

    // A commit without a bench line needs one by hand; given, it is used.
    let e = gh
        .resolve_submission(&wanted(
            "https://github.com/dev-one/Stockfish",
            "no-bench",
            "",
        ))
        .await
        .unwrap_err();
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].field, Field::NewSignature);
    assert!(e[0].message.contains("has no \"Bench: N\" line"), "{e:?}");
    let mut w = wanted("https://github.com/dev-one/Stockfish", "no-bench", "");
    w.new_signature = Some(1234567);
    assert_eq!(gh.resolve_submission(&w).await.unwrap().new.bench, 1234567);

    // Every problem at once, each at its field.
    let e = gh
        .resolve_submission(&wanted(
            "https://github.com/dev-one/Stockfish",
            "no-such-branch",
            "no-bench",
        ))
        .await
        .unwrap_err();
    let fields: Vec<Field> = e.iter().map(|p| p.field).collect();
    assert_eq!(fields, vec![Field::NewTag, Field::BaseSignature], "{e:?}");
    assert!(e.iter().all(|p| !p.outage));

    // Outside the fork network; not a GitHub address.
    let e = gh
        .resolve_submission(&wanted(
            "https://github.com/stranger/Engine",
            "main",
            "main",
        ))
        .await
        .unwrap_err();
    assert_eq!(e[0].field, Field::TestsRepo);
    assert!(e[0].message.contains("nor a fork of it"), "{e:?}");
    // An account registered before 2025-07-01 is warned, not refused; the network's root is
    // the run's master_repo. A fork has none.
    let mut old = wanted("https://github.com/stranger/Engine", "main", "main");
    old.registered_at = shoal::github::FORK_REQUIRED_SINCE - 1;
    let r = gh.resolve_submission(&old).await.unwrap();
    assert_eq!(
        r.master_repo.as_deref(),
        Some("https://github.com/stranger/Engine")
    );
    assert!(
        r.warnings.iter().any(|w| w.contains("is not a fork of")),
        "{:?}",
        r.warnings
    );
    old.registered_at = shoal::github::FORK_REQUIRED_SINCE;
    assert!(gh.resolve_submission(&old).await.is_err());
    let r = gh
        .resolve_submission(&wanted(
            "https://github.com/dev-one/Stockfish",
            "lmr-tweak",
            "",
        ))
        .await
        .unwrap();
    assert_eq!(r.master_repo, None);
    let e = gh
        .resolve_submission(&wanted("https://gitlab.com/a/b", "x", ""))
        .await
        .unwrap_err();
    assert_eq!(e[0].field, Field::TestsRepo);

    // GitHub down: the problem says so and is marked as an outage.
    fake.set_mode(Mode::ServerError);
    let e = gh
        .resolve_submission(&wanted(
            "https://github.com/dev-one/Stockfish",
            "new-net",
            "",
        ))
        .await
        .unwrap_err();
    assert!(e[0].outage, "{e:?}");
    assert!(e[0].message.contains("HTTP 502"), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_master_is_refreshed_kept_and_logged() {
    use shoal::github::MasterRefresh;
    let fake = FakeGithub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gh = github(&fake, dir.path(), 5);
    assert_eq!(gh.master(), None);

    let MasterRefresh::Changed(m) = gh.refresh_master().await.unwrap() else {
        panic!("the first refresh is a change");
    };
    assert_eq!(m.sha, "3333333333333333333333333333333333333333");
    assert_eq!(m.subject, "Fix a typo in the README");
    assert_eq!(m.bench, Some(1947203));
    assert_eq!(
        m.bench_sha.as_deref(),
        Some("2222222222222222222222222222222222222222")
    );
    assert_eq!(gh.refresh_master().await.unwrap(), MasterRefresh::Unchanged);

    // Logged once, as a system event.
    let store = harness::open_store(dir.path()).unwrap();
    let actions = store
        .find(
            shoal::store::Collection::Actions,
            &shoal::store::Query::new(),
        )
        .unwrap();
    let logged: Vec<&str> = actions
        .iter()
        .filter_map(|a| a.get("message").and_then(|m| m.as_str()))
        .filter(|m| m.starts_with("official master"))
        .collect();
    assert_eq!(
        logged,
        vec!["official master 3333333333: Fix a typo in the README (Bench: 1947203)"]
    );

    // A restart starts from the stored master, before any call; GitHub down changes nothing.
    drop(gh);
    let gh = github(&fake, dir.path(), 1);
    let g2 = Arc::new(gh);
    let g = Arc::clone(&g2);
    tokio::task::spawn_blocking(move || g.load_master_blocking())
        .await
        .unwrap();
    assert_eq!(g2.master().map(|m| m.bench), Some(Some(1947203)));
    fake.set_mode(Mode::ServerError);
    assert!(g2.refresh_master().await.is_err());
    assert_eq!(g2.master().map(|m| m.sha.clone()), Some(m.sha.clone()));
}

/// Fishtest's `kvstore` `official_master_sha`.
fn official_master_sha(dir: &std::path::Path) -> Option<serde_json::Value> {
    let store = harness::open_store(dir).unwrap();
    store
        .get(shoal::store::Collection::Kvstore, "official_master_sha")
        .unwrap()
        .map(serde_json::Value::Object)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_master_sha_is_kept_in_fishtests_shape_and_written_after_a_miss() {
    use shoal::github::MasterRefresh;
    let fake = FakeGithub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gh = github(&fake, dir.path(), 5);
    // A failed refresh first: nothing known, nothing written.
    fake.set_mode(Mode::ServerError);
    assert!(gh.refresh_master().await.is_err());
    assert_eq!(official_master_sha(dir.path()), None);
    fake.set_mode(Mode::Normal);
    assert!(matches!(
        gh.refresh_master().await.unwrap(),
        MasterRefresh::Changed(_)
    ));
    assert_eq!(
        official_master_sha(dir.path()),
        Some(serde_json::json!({"_id": "official_master_sha",
                                "value": "3333333333333333333333333333333333333333"}))
    );

    // A store where shoal's own record is there but Fishtest's key is not (written before
    // shoal kept it, or deleted): the next refresh writes it, master unchanged.
    drop(gh);
    harness::open_store(dir.path())
        .unwrap()
        .delete(shoal::store::Collection::Kvstore, "official_master_sha")
        .unwrap();
    let gh = Arc::new(github(&fake, dir.path(), 5));
    let g = Arc::clone(&gh);
    tokio::task::spawn_blocking(move || g.load_master_blocking())
        .await
        .unwrap();
    assert_eq!(gh.refresh_master().await.unwrap(), MasterRefresh::Unchanged);
    assert_eq!(
        official_master_sha(dir.path()).map(|d| d["value"].clone()),
        Some(serde_json::json!(
            "3333333333333333333333333333333333333333"
        ))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_is_sent_and_the_stand_in_wants_it() {
    let fake = FakeGithub::start().await;
    let http = reqwest::Client::new();
    let url = format!("{}/repos/{OFFICIAL}", fake.api_url());
    // The stand-in refuses a call without the token, or with another, as GitHub does.
    for auth in [None, Some("Bearer ghp_not_it".to_string())] {
        let mut req = http.get(&url);
        if let Some(a) = &auth {
            req = req.header("authorization", a);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status().as_u16(), 401, "{auth:?}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["message"], "Bad credentials");
    }
    let r = http
        .get(&url)
        .bearer_auth(fake.token())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);

    // shoal without the token is refused; with it, answered.
    let dir = tempfile::tempdir().unwrap();
    let without = github_with_token(&fake, dir.path(), 5, None);
    let e = without.commit(&repo(FORK), "lmr-tweak").await.unwrap_err();
    assert!(
        matches!(e, GithubError::Refused { status: 401, .. }),
        "{e:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let with = github(&fake, dir.path(), 5);
    assert!(with.commit(&repo(FORK), "lmr-tweak").await.is_ok());
}

/// The fields GitHub's REST description (github/rest-api-description) requires of each reply
/// the stand-in gives, so shoal is tested against GitHub's shapes, not the stand-in's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stand_in_answers_in_githubs_documented_shapes() {
    let fake = FakeGithub::start().await;
    let http = reqwest::Client::new();
    let get = |path: String| {
        let req = http
            .get(format!("{}{path}", fake.api_url()))
            .bearer_auth(fake.token());
        async move {
            let r = req.send().await.unwrap();
            assert_eq!(r.status().as_u16(), 200, "{path}");
            r.json::<serde_json::Value>().await.unwrap()
        }
    };
    let has = |what: &str, v: &serde_json::Value, keys: &[&str]| {
        let missing: Vec<&&str> = keys.iter().filter(|k| v.get(**k).is_none()).collect();
        assert!(missing.is_empty(), "{what} lacks {missing:?}: {v}");
    };
    // `commit` and its `commit.commit`, `parents[]`, `simple-user` author.
    let commit_keys = [
        "url",
        "sha",
        "node_id",
        "html_url",
        "comments_url",
        "commit",
        "author",
        "committer",
        "parents",
    ];
    let git_commit_keys = [
        "url",
        "author",
        "committer",
        "message",
        "comment_count",
        "tree",
    ];
    let user_keys = [
        "login",
        "id",
        "node_id",
        "avatar_url",
        "gravatar_id",
        "url",
        "html_url",
        "followers_url",
        "following_url",
        "gists_url",
        "starred_url",
        "subscriptions_url",
        "organizations_url",
        "repos_url",
        "events_url",
        "received_events_url",
        "type",
        "site_admin",
    ];
    let check_commit = |what: &str, c: &serde_json::Value| {
        has(what, c, &commit_keys);
        has(&format!("{what}.commit"), &c["commit"], &git_commit_keys);
        has(&format!("{what}.author"), &c["author"], &user_keys);
        for p in c["parents"].as_array().unwrap() {
            has(&format!("{what}.parents[]"), p, &["sha", "url"]);
        }
    };
    let c = get(format!("/repos/{FORK}/commits/lmr-tweak")).await;
    check_commit("commit", &c);
    assert_eq!(c["sha"], "aaaa000000000000000000000000000000000001");
    let list = get(format!("/repos/{FORK}/commits?sha=lmr-tweak&per_page=2")).await;
    for c in list.as_array().unwrap() {
        check_commit("commits[]", c);
    }
    // `commit-comparison`.
    let cmp = get(format!(
        "/repos/{FORK}/compare/3333333333333333333333333333333333333333...lmr-tweak"
    ))
    .await;
    has(
        "comparison",
        &cmp,
        &[
            "url",
            "html_url",
            "permalink_url",
            "diff_url",
            "patch_url",
            "base_commit",
            "merge_base_commit",
            "status",
            "ahead_by",
            "behind_by",
            "total_commits",
            "commits",
        ],
    );
    check_commit("comparison.base_commit", &cmp["base_commit"]);
    assert_eq!(
        cmp["commits"].as_array().unwrap().len() as u64,
        cmp["total_commits"].as_u64().unwrap()
    );
    // A fork's repository: its identity and its `source`.
    let r = get(format!("/repos/{FORK}")).await;
    let repo_keys = [
        "id",
        "node_id",
        "name",
        "full_name",
        "owner",
        "private",
        "html_url",
        "description",
        "fork",
        "url",
        "default_branch",
    ];
    has("repository", &r, &repo_keys);
    has("repository.source", &r["source"], &repo_keys);
    has("repository.owner", &r["owner"], &user_keys);
    // `rate-limit-overview`: `resources.core` and `.search`, `rate`, each a `rate-limit`.
    let q = get("/rate_limit".to_string()).await;
    for part in ["/resources/core", "/resources/search", "/rate"] {
        let v = q.pointer(part).unwrap_or(&serde_json::Value::Null);
        has(part, v, &["limit", "remaining", "reset", "used"]);
    }
}
