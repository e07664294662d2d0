//! The net store in Fishtest's layout, through the real binary: `shoal import --fishtest DIR
//! --nets NETSDIR` moves the net files of a Fishtest net directory into shoal's (checked
//! first: a bad file is refused and left where it was) and reports nets recorded without a
//! file and files no record names; `/api/nn/<name>` counts the download and redirects to
//! `<nn_url or this server>/nn/<name>`, as Fishtest does; `/nn/<name>` sends the gzipped file
//! with `Content-Encoding: gzip`, which is what a worker accepts (decoded, its SHA-256 prefix
//! is the name's); a plain file of shoal's older layout is still served; `/nns` shows a net
//! whose file is missing as such.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::Command;

use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::harness::{Opts, TestServer, bin, mongo_env, open_store};
use crate::web::Browser;

/// A net's bytes and its name (`nn-<first 12 hex of the SHA-256>.nnue`).
fn net(seed: u8, len: usize) -> (Vec<u8>, String) {
    let bytes: Vec<u8> = (0..len)
        .map(|i| ((i * 131 + i / 7) as u8).wrapping_add(seed))
        .collect();
    (bytes.clone(), name_of(&bytes))
}

fn name_of(bytes: &[u8]) -> String {
    format!("nn-{}.nnue", &hex::encode(Sha256::digest(bytes))[..12])
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::default());
    e.write_all(bytes).expect("gzip");
    e.finish().expect("gzip")
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .expect("a gzip stream");
    out
}

/// Downloads a net as the official worker does: follows redirects, fails on a status of 400
/// or more, decodes the body when (and only when) it is sent with `Content-Encoding: gzip`,
/// and checks that the content's SHA-256 begins with the name's 12 hex digits. Returns the
/// content.
pub async fn download_as_worker(server: &TestServer, name: &str) -> Vec<u8> {
    let r = reqwest::Client::new()
        .get(server.url(&format!("/api/nn/{name}")))
        .send()
        .await
        .expect("download");
    assert_eq!(r.status(), 200, "{name}");
    let gzipped = r
        .headers()
        .get("content-encoding")
        .is_some_and(|v| v == "gzip");
    let body = r.bytes().await.expect("body").to_vec();
    let content = if gzipped { gunzip(&body) } else { body };
    assert_eq!(
        hex::encode(Sha256::digest(&content))[..12],
        name[3..15],
        "the worker's check of {name}"
    );
    content
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// `GET /api/nn/<name>` without following: (status, Location).
async fn api_nn(server: &TestServer, name: &str) -> (u16, String) {
    api_nn_with(server, name, &[]).await
}

async fn api_nn_with(server: &TestServer, name: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut req = no_redirects().get(server.url(&format!("/api/nn/{name}")));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.expect("GET /api/nn");
    let location = r
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (r.status().as_u16(), location)
}

/// Runs `shoal <args>` on the store in `data`; returns (success, stdout, stderr).
fn shoal(data: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(bin())
        .args(args)
        .current_dir(data.parent().expect("parent"))
        .env_clear()
        .envs(mongo_env(data))
        .env("SHOAL_DATA_DIR", data)
        .env("SHOAL_LOG", "warn")
        .output()
        .expect("run shoal");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn sample_dump() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fishtest-db")
}

/// The sample database's net names.
fn sample_nets() -> Vec<String> {
    let text = std::fs::read_to_string(sample_dump().join("nns.json")).expect("nns.json");
    let docs: Vec<Value> = serde_json::from_str(&text).expect("json");
    docs.iter()
        .map(|d| d["name"].as_str().expect("name").to_string())
        .collect()
}

/// A copy of the sample dump whose `nns.json` also records `extra` (name, downloads), as
/// Fishtest writes them (ObjectId `_id`, int32 `downloads`).
fn dump_with(dir: &Path, extra: &[(&str, i32)]) -> PathBuf {
    let dump = dir.join("dump");
    std::fs::create_dir_all(&dump).expect("mkdir");
    for entry in std::fs::read_dir(sample_dump()).expect("sample") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), dump.join(entry.file_name())).expect("copy");
    }
    let text = std::fs::read_to_string(dump.join("nns.json")).expect("nns.json");
    let mut docs: Vec<Value> = serde_json::from_str(&text).expect("json");
    for (i, (name, downloads)) in extra.iter().enumerate() {
        docs.push(json!({
            "_id": {"$oid": format!("6b00000000000000000000{i:02x}")},
            "user": "vexillum",
            "name": name,
            "downloads": {"$numberInt": downloads.to_string()},
        }));
    }
    std::fs::write(
        dump.join("nns.json"),
        serde_json::to_string(&docs).expect("json"),
    )
    .expect("write");
    dump
}

/// The `/nns` row of `name` (filtered to it): the page's HTML.
async fn nns_row(server: &TestServer, name: &str) -> String {
    let mut b = Browser::new(server);
    let page = b.get(&format!("/nns?network_name={name}")).await;
    assert_eq!(page.status, 200);
    page.body
}

#[tokio::test]
async fn import_with_nets_moves_them_and_api_nn_redirects_and_counts() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let source = tmp.path().join("fishtest-nn");
    std::fs::create_dir_all(&source).expect("mkdir");

    let (good, good_name) = net(1, 300_000);
    let (truncated, truncated_name) = net(2, 20_000);
    let (_, liar_name) = net(3, 20_000);
    let (_, absent_name) = net(4, 1000);
    let (stray, stray_name) = net(5, 1000);
    let good_gz = gzip(&good);
    std::fs::write(source.join(format!("{good_name}.gz")), &good_gz).expect("write");
    let t = gzip(&truncated);
    std::fs::write(
        source.join(format!("{truncated_name}.gz")),
        &t[..t.len() / 2],
    )
    .expect("w");
    // A readable gzip whose content is not the net its name says.
    std::fs::write(source.join(format!("{liar_name}.gz")), gzip(b"other bytes")).expect("w");
    std::fs::write(source.join(format!("{stray_name}.gz")), gzip(&stray)).expect("write");
    std::fs::write(source.join("README"), "not a net").expect("write");

    let dump = dump_with(
        tmp.path(),
        &[
            (&good_name, 5),
            (&truncated_name, 0),
            (&liar_name, 0),
            (&absent_name, 2),
        ],
    );
    let (ok, out, err) = shoal(
        &data,
        &[
            "import",
            "--fishtest",
            dump.to_str().expect("utf-8"),
            "--nets",
            source.to_str().expect("utf-8"),
        ],
    );
    assert!(ok, "import: {err}\n{out}");

    // Moved: gone from the source, in the net directory, intact.
    let target = data.join("nn").join(format!("{good_name}.gz"));
    assert!(!source.join(format!("{good_name}.gz")).exists(), "{out}");
    assert_eq!(std::fs::read(&target).expect("moved file"), good_gz);
    assert!(out.contains("1 files moved into"), "{out}");
    // Refused files stay where they were, and are reported with why.
    for bad in [&truncated_name, &liar_name] {
        assert!(source.join(format!("{bad}.gz")).exists());
        assert!(!data.join("nn").join(format!("{bad}.gz")).exists());
        assert!(out.contains(&format!("refused {bad}.gz: ")), "{out}");
    }
    assert!(out.contains("not a readable gzip file"), "{out}");
    assert!(out.contains("sha256"), "{out}");
    // Nets recorded without a file: the refused ones, the absent one, the sample's own.
    for name in [&truncated_name, &liar_name, &absent_name]
        .into_iter()
        .cloned()
        .chain(sample_nets())
    {
        assert!(out.contains(&format!("missing {name}: ")), "{name}:\n{out}");
    }
    assert!(!out.contains(&format!("missing {good_name}")), "{out}");
    // A file no record names, and a file that is not a net, are left alone.
    assert!(source.join(format!("{stray_name}.gz")).exists());
    assert!(
        out.contains(&format!("not in the database {stray_name}.gz")),
        "{out}"
    );
    assert!(source.join("README").exists());
    assert!(out.contains("not a net file README"), "{out}");

    // Served by shoal itself: /api/nn counts and redirects to this server's /nn/<name>.
    let server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    let (status, location) = api_nn(&server, &good_name).await;
    assert_eq!(status, 302);
    assert_eq!(location, server.url(&format!("/nn/{good_name}")));
    // A client's own X-Forwarded-Proto is not believed (no proxy is trusted here).
    let (_, location) = api_nn_with(&server, &good_name, &[("x-forwarded-proto", "https")]).await;
    assert_eq!(location, server.url(&format!("/nn/{good_name}")));
    let r = server.client.get(&location).send().await.expect("GET /nn");
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers().get("content-encoding").map(|v| v.as_bytes()),
        Some(&b"gzip"[..])
    );
    assert_eq!(r.bytes().await.expect("bytes").as_ref(), good_gz.as_slice());
    assert_eq!(download_as_worker(&server, &good_name).await, good);
    // Three downloads on top of Fishtest's 5.
    let row = nns_row(&server, &good_name).await;
    assert!(row.contains("<td class=\"num\">8</td>"), "{row}");
    assert!(
        row.contains(&format!("href=\"/api/nn/{good_name}\"")),
        "{row}"
    );

    // A recorded net without a file: counted and redirected as in Fishtest; the file server
    // answers 404; /nns says the file is missing instead of linking to it.
    let (status, location) = api_nn(&server, &absent_name).await;
    assert_eq!(
        (status, location.as_str()),
        (302, server.url(&format!("/nn/{absent_name}")).as_str())
    );
    let r = server.client.get(&location).send().await.expect("GET /nn");
    assert_eq!(r.status(), 404);
    let row = nns_row(&server, &absent_name).await;
    assert!(row.contains("file missing"), "{row}");
    assert!(
        !row.contains(&format!("href=\"/api/nn/{absent_name}\"")),
        "{row}"
    );
    assert!(row.contains("<td class=\"num\">3</td>"), "{row}");
    let all = Browser::new(&server).get("/nns?view=all").await;
    assert!(all.body.contains("Files missing"), "{}", all.body);

    // Unknown nets and names that are not nets: 404, nothing counted, nothing read.
    for bad in [
        stray_name.as_str(),
        "nn-000000000000.nnue",
        "..%2F..%2Fsecret",
    ] {
        assert_eq!(api_nn(&server, bad).await.0, 404, "{bad}");
    }
    for bad in [
        "..%2Fshoal.db",
        "nn-XYZ.nnue",
        &format!("{good_name}.gz"),
        "%2E%2E%2Fshoal.db",
    ] {
        let r = server
            .client
            .get(server.url(&format!("/nn/{bad}")))
            .send()
            .await
            .expect("GET /nn");
        assert_eq!(r.status(), 404, "{bad}");
    }

    // With nn_url: the same count, and a redirect to <nn_url>/nn/<name> (a trailing slash of
    // nn_url ignored), as FISHTEST_NN_URL does.
    drop(server);
    let redirecting = TestServer::start_with(
        Opts::new()
            .data_dir(&data)
            .set("nn_url", "\"https://nets.example.org/\""),
    )
    .await;
    let (status, location) = api_nn(&redirecting, &good_name).await;
    assert_eq!(
        (status, location.as_str()),
        (
            302,
            format!("https://nets.example.org/nn/{good_name}").as_str()
        )
    );
    let row = nns_row(&redirecting, &good_name).await;
    assert!(row.contains("<td class=\"num\">9</td>"), "{row}");
}

#[test]
fn import_without_nets_reports_the_nets_that_have_no_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let dump = sample_dump();
    let (ok, out, err) = shoal(&data, &["import", "--fishtest", dump.to_str().expect("p")]);
    assert!(ok, "import: {err}");
    for name in sample_nets() {
        assert!(out.contains(&format!("missing {name}: ")), "{name}:\n{out}");
    }
    assert!(out.contains("pass --nets DIR"), "{out}");
    // A directory that does not exist is an error that names it, after which the dump's
    // documents are stored (the nets step is the last) and the files are untouched.
    let other = tmp.path().join("other");
    let nowhere = tmp.path().join("nowhere");
    let (ok, _, err) = shoal(
        &other,
        &[
            "import",
            "--fishtest",
            dump.to_str().expect("p"),
            "--nets",
            nowhere.to_str().expect("p"),
        ],
    );
    assert!(!ok);
    assert!(err.contains("nowhere"), "{err}");
}

#[tokio::test]
async fn a_plain_net_of_the_older_layout_is_still_served() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let (content, name) = net(7, 50_000);
    std::fs::create_dir_all(data.join("nn")).expect("mkdir");
    std::fs::write(data.join("nn").join(&name), &content).expect("write");
    {
        let store = open_store(&data).expect("store");
        let mut doc = shoal::store::Doc::new();
        doc.insert("_id".into(), json!(name));
        doc.insert("name".into(), json!(name));
        doc.insert("user".into(), json!("alice"));
        doc.insert("downloads".into(), json!(0));
        store
            .insert(shoal::store::Collection::Nns, doc)
            .expect("insert");
        store.close().expect("close");
    }
    // Behind a trusted proxy that says https, the redirect keeps the scheme.
    let server = TestServer::start_with(
        Opts::new()
            .data_dir(&data)
            .set("trusted_proxies", r#"["127.0.0.1"]"#),
    )
    .await;
    let (status, location) = api_nn_with(&server, &name, &[("x-forwarded-proto", "https")]).await;
    assert_eq!(status, 302);
    assert_eq!(location, format!("https://{}/nn/{name}", server.addr));
    let r = server
        .client
        .get(server.url(&format!("/api/nn/{name}")))
        .send()
        .await
        .expect("GET");
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("content-encoding").is_none());
    assert_eq!(r.bytes().await.expect("bytes").as_ref(), content.as_slice());
    assert_eq!(download_as_worker(&server, &name).await, content);
    let row = nns_row(&server, &name).await;
    assert!(!row.contains("file missing"), "{row}");
    assert!(row.contains("<td class=\"num\">3</td>"), "{row}");

    // `shoal nn` adds a net gzipped, and gives a recorded net whose file is missing its file
    // back without touching its record.
    let (more, more_name) = net(8, 10_000);
    let file = tmp.path().join(&more_name);
    std::fs::write(&file, &more).expect("write");
    // The uploader must be an account whose name Fishtest accepts.
    let path = file.to_str().expect("p");
    let (ok, _, err) = shoal(&data, &["nn", path, "--user", "shoal-cli"]);
    assert!(!ok && err.contains("not a username"), "{err}");
    let (ok, _, err) = shoal(&data, &["nn", path, "--user", "nobody"]);
    assert!(!ok && err.contains("no such user"), "{err}");
    crate::fleet::add_user(&server, "netadmin", &[]);
    let (ok, out, err) = shoal(&data, &["nn", path, "--user", "netadmin"]);
    assert!(ok, "{err}");
    assert!(out.contains("added net"), "{out}");
    let doc = open_store(&data)
        .expect("store")
        .get(shoal::store::Collection::Nns, &more_name)
        .expect("get")
        .expect("recorded");
    assert_eq!(doc["user"], "netadmin");
    let stored = std::fs::read(data.join("nn").join(format!("{more_name}.gz"))).expect("gz");
    assert_eq!(gunzip(&stored), more);
    assert_eq!(download_as_worker(&server, &more_name).await, more);
    std::fs::remove_file(data.join("nn").join(format!("{more_name}.gz"))).expect("rm");
    let row = nns_row(&server, &more_name).await;
    assert!(row.contains("file missing"), "{row}");
    let (ok, out, err) = shoal(&data, &["nn", path, "--user", "netadmin"]);
    assert!(ok, "{err}");
    assert!(out.contains("already recorded"), "{out}");
    let row = nns_row(&server, &more_name).await;
    assert!(!row.contains("file missing"), "{row}");
    assert!(row.contains("<td class=\"num\">1</td>"), "{row}");
}
