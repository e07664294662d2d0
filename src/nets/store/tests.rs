//! The net store's tests: the name rule and both layouts, adding, uploading, installing,
//! importing and sweeping nets, each refusal leaving nothing behind.

use super::*;
use crate::store::testkit::temp_store;

fn gunzip(path: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    GzDecoder::new(File::open(path).expect("open"))
        .read_to_end(&mut out)
        .expect("gunzip");
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::default());
    e.write_all(bytes).expect("gzip");
    e.finish().expect("gzip")
}

fn name_of(content: &[u8]) -> String {
    format!("nn-{}.nnue", &hex::encode(Sha256::digest(content))[..12])
}

#[test]
fn names_and_layouts() {
    assert!(!valid_name("nn-ABCDEF123456.nnue"));
    assert!(!valid_name("../../etc/passwd"));
    assert_eq!(
        net_of_file("nn-0123456789ab.nnue.gz"),
        Some(("nn-0123456789ab.nnue", true))
    );
    assert_eq!(
        net_of_file("nn-0123456789ab.nnue"),
        Some(("nn-0123456789ab.nnue", false))
    );
    for other in [
        "nn-0123456789ab.gz",
        ".upload-1.part",
        "../nn-0123456789ab.nnue",
    ] {
        assert_eq!(net_of_file(other), None, "{other}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    assert_eq!(locate(dir.path(), "../x").expect("locate"), None);
    assert_eq!(
        locate(&dir.path().join("none"), "nn-0123456789ab.nnue").expect("locate"),
        None
    );
    assert!(
        present(&dir.path().join("none"))
            .expect("present")
            .is_empty()
    );
}

#[test]
fn add_checks_name_and_content_and_stores_gzipped() {
    let (dir, store) = temp_store();
    let nets = dir.path().join("nn");
    let content = b"not really a net, but bytes all the same";
    let good = dir.path().join(name_of(content));
    std::fs::write(&good, content).expect("write");
    let name = add(&store, &nets, &good, "alice").expect("add").name;
    let file = locate(&nets, &name).expect("locate").expect("file");
    assert_eq!(file, NetFile::Gzip(nets.join(format!("{name}.gz"))));
    assert_eq!(gunzip(file.path()), content);
    assert!(good.exists(), "the source is left as it was");
    assert!(matches!(
        add(&store, &nets, &good, "alice"),
        Err(NetError::Duplicate(_))
    ));
    let liar = dir.path().join("nn-000000000000.nnue");
    std::fs::write(&liar, content).expect("write");
    assert!(matches!(
        add(&store, &nets, &liar, "alice"),
        Err(NetError::WrongContent { .. })
    ));
    // A gzipped file is checked decoded and stored as it is.
    let other = b"another net";
    let gz = dir.path().join(format!("{}.gz", name_of(other)));
    std::fs::write(&gz, gzip(other)).expect("write");
    let other_name = add(&store, &nets, &gz, "bob").expect("add gz").name;
    assert_eq!(gunzip(&nets.join(format!("{other_name}.gz"))), other);
    let not_gz = dir.path().join(format!("{}.gz", name_of(b"x")));
    std::fs::write(&not_gz, b"x").expect("write");
    assert!(matches!(
        add(&store, &nets, &not_gz, "bob"),
        Err(NetError::BadGzip(_))
    ));
    let names = present(&nets).expect("present");
    assert_eq!(names.len(), 2);
    assert!(names.contains(&name) && names.contains(&other_name));
    // No temporary file is left behind.
    let files = std::fs::read_dir(&nets).expect("dir").count();
    assert_eq!(files, 2);
    assert!(count_download(&store, &name).expect("count"));
    assert!(!count_download(&store, "nn-000000000000.nnue").expect("count"));
    let doc = store
        .get(Collection::Nns, &name)
        .expect("get")
        .expect("doc");
    assert_eq!(doc["downloads"], 1);
    // A recorded net whose file went missing gets its file back, its record kept.
    std::fs::remove_file(nets.join(format!("{name}.gz"))).expect("rm");
    let again = add(&store, &nets, &good, "carol").expect("add again");
    assert!(again.file_only);
    let doc = store
        .get(Collection::Nns, &name)
        .expect("get")
        .expect("doc");
    assert_eq!(
        (doc["user"].as_str(), doc["downloads"].as_u64()),
        (Some("alice"), Some(1))
    );
    assert_eq!(gunzip(&nets.join(format!("{name}.gz"))), content);
}

#[test]
fn the_plain_layout_is_still_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let content = b"an old net";
    let name = name_of(content);
    std::fs::write(dir.path().join(&name), content).expect("write");
    let file = locate(dir.path(), &name).expect("locate").expect("file");
    assert!(!file.is_gzip());
    assert!(present(dir.path()).expect("present").contains(&name));
    // Both present: the gzipped one wins.
    std::fs::write(dir.path().join(format!("{name}.gz")), gzip(content)).expect("write");
    assert!(
        locate(dir.path(), &name)
            .expect("locate")
            .expect("file")
            .is_gzip()
    );
}

#[test]
fn upload_writer_install_and_sweep() {
    let (dir, store) = temp_store();
    let nets = dir.path().join("nn");
    let content = b"an uploaded net";
    let name = name_of(content);
    let mut w = NetWriter::create(&nets).expect("create");
    w.write(&content[..5]).expect("write");
    w.write(&content[5..]).expect("write");
    assert_eq!(w.written(), content.len() as u64);
    let (tmp, sha) = w.finish().expect("finish");
    assert_eq!(sha, name[3..15]);
    // A fresh temporary file is not swept.
    assert_eq!(sweep_stale_parts(&nets), 0);
    assert!(tmp.exists());
    install(&store, &nets, &tmp, &name, "alice").expect("install");
    assert!(!tmp.exists(), "the temporary file is gone");
    assert_eq!(gunzip(&nets.join(format!("{name}.gz"))), content);
    assert!(known(&store, &nets, &name).expect("known"));
    // A second installation of the same name is refused and leaves nothing.
    let mut w = NetWriter::create(&nets).expect("create");
    w.write(content).expect("write");
    let (tmp2, _) = w.finish().expect("finish");
    assert!(matches!(
        install(&store, &nets, &tmp2, &name, "bob"),
        Err(NetError::Duplicate(_))
    ));
    assert!(!tmp2.exists());
    let listed = list(&store).expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].user.as_str(), listed[0].downloads), ("alice", 0));
    assert!(listed[0].time.is_some());
    // Fishtest's schema has no upload time: the record keeps it in its ObjectId alone.
    let stored = find(&store, &name).expect("find").expect("the record");
    assert!(!stored.contains_key("time"), "{stored:?}");
}

#[test]
fn import_file_moves_checked_nets_and_leaves_bad_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
    std::fs::create_dir_all(&src).expect("mkdir");
    let content = b"a fishtest net";
    let name = name_of(content);
    let from = src.join(format!("{name}.gz"));
    std::fs::write(&from, gzip(content)).expect("write");
    assert_eq!(
        import_file(&from, &name, true, &dst).expect("import"),
        Imported::Moved
    );
    assert!(!from.exists());
    assert_eq!(gunzip(&dst.join(format!("{name}.gz"))), content);
    // The same net again: the target is not replaced and the source stays.
    std::fs::write(&from, gzip(content)).expect("write");
    assert!(matches!(
        import_file(&from, &name, true, &dst),
        Err(NetError::Duplicate(_))
    ));
    assert!(from.exists());
    // A truncated gzip and a wrong hash are refused and left where they are.
    let other = b"another fishtest net";
    let other_name = name_of(other);
    let truncated = src.join(format!("{other_name}.gz"));
    let full = gzip(other);
    std::fs::write(&truncated, &full[..full.len() - 6]).expect("write");
    assert!(matches!(
        import_file(&truncated, &other_name, true, &dst),
        Err(NetError::BadGzip(_))
    ));
    assert!(truncated.exists());
    std::fs::write(&truncated, gzip(b"something else")).expect("write");
    assert!(matches!(
        import_file(&truncated, &other_name, true, &dst),
        Err(NetError::WrongContent { .. })
    ));
    assert!(truncated.exists());
    assert!(!dst.join(format!("{other_name}.gz")).exists());
}

#[test]
fn a_fishtest_record_without_time_is_dated_by_its_object_id() {
    let mut doc = Doc::new();
    doc.insert(
        crate::store::bson_map::MONGO_ID.into(),
        json!({"$oid": "6a4e7e0122dfea1c957407a2"}),
    );
    let t = oid_time(&doc).expect("a date");
    assert_eq!(t.0.timestamp(), 0x6a4e_7e01);
    let mut odd = Doc::new();
    odd.insert("_id".into(), json!({"$oid": "zz"}));
    assert!(oid_time(&odd).is_none());
    assert!(oid_time(&Doc::new()).is_none());
}
