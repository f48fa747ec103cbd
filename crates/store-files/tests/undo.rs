//! The trash bin and file versions on real databases and real blob stores: each scenario runs
//! on SQLite (one test each), on PostgreSQL (one test running them all on fresh databases of a
//! private server, see `arca_test_servers::Postgres`) and, for those that free bytes, on S3 (`moto_server`,
//! see `support/s3.rs`). Stores are opened as storage-users opens its own: trash on, versions
//! kept.

mod support;

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use arca_store_files::{
    Conflict, Node, RestoreFilter, Restored, StoreError, VersionRetention, VersionRules,
};
use support::{Ctx, content};

fn rules() -> VersionRules {
    VersionRules {
        min_size: 0,
        exclude: vec!["*.tmp".into()],
    }
}

macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let ctx = super::Ctx::undo(None, None, super::rules()).await;
                    super::$name(&ctx).await;
                }
            )*
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn postgres() {
            let pg = arca_test_servers::postgres_for_tests().await;
            $(
                eprintln!("postgres: {}", stringify!($name));
                let url = pg.fresh_database().await.expect("fresh database");
                let ctx = Ctx::undo(Some(&url), None, rules()).await;
                $name(&ctx).await;
                ctx.store.close().await;
                drop(ctx);
                pg.drop_database(&url).await.expect("drop database");
            )*
        }
    };
}

scenarios!(
    trash_is_one_move_and_hides_the_subtree,
    restore_conflicts_never_overwrite_silently,
    restore_into_missing_or_renamed_parents,
    bulk_restore_order_filters_and_conflicts,
    bulk_restore_batches_are_all_or_nothing,
    purge_frees_the_bytes,
    versions_keep_blobs_by_reference,
    copy_and_move_onto_a_file_are_overwrites,
    retention_by_age_count_and_quota_share,
    collector_counts_versions_and_trash,
    space_deletion_takes_trash_and_versions,
);

/// The S3 runs: what frees bytes, on a bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3() {
    let moto = support::s3::s3_for_tests().await;
    for (name, scenario) in [
        ("purge_frees_the_bytes", 0),
        ("retention_by_age_count_and_quota_share", 1),
    ] {
        eprintln!("s3: {name}");
        let ctx = Ctx::undo(None, Some(moto.bucket().await), rules()).await;
        match scenario {
            0 => purge_frees_the_bytes(&ctx).await,
            _ => retention_by_age_count_and_quota_share(&ctx).await,
        }
        ctx.store.close().await;
    }
}

/// The content of the file at `path` of `space`.
async fn read_path(ctx: &Ctx, space: &str, path: &str) -> Vec<u8> {
    let node = ctx.store.resolve(space, path).await.unwrap();
    ctx.read(&node.id).await
}

/// A whole bulk restore of `space`'s trash.
async fn restore_all(
    ctx: &Ctx,
    space: &str,
    filter: &RestoreFilter,
    conflict: Conflict,
) -> arca_store_files::RestoreTally {
    let mut run = ctx
        .store
        .restore_run(space, filter, conflict, "tester")
        .await
        .unwrap();
    while run.step().await.unwrap() {}
    run.tally()
}

/// The id of the directory at `path` of `space`.
async fn dir(ctx: &Ctx, space: &str, path: &str) -> String {
    ctx.store.resolve(space, path).await.unwrap().id
}

async fn tree(ctx: &Ctx, root: &str, files: usize) -> Node {
    let d = ctx.store.mkdir(root, "big").await.unwrap();
    let sub = ctx.store.mkdir(&d.id, "sub").await.unwrap();
    for i in 0..files {
        let parent = if i % 2 == 0 { &d.id } else { &sub.id };
        ctx.put(parent, &format!("f{i}.bin"), &content(i as u64, 100 + i))
            .await
            .unwrap();
    }
    ctx.store.stat(&d.id).await.unwrap()
}

async fn node_rows(ctx: &Ctx) -> usize {
    // Every node of every space: what a removal must not rewrite.
    let spaces = ctx.store.list_spaces(None).await.unwrap();
    let mut n = 0;
    for s in spaces {
        n += count_below(ctx, &s.root_id).await;
    }
    n
}

async fn count_below(ctx: &Ctx, id: &str) -> usize {
    let mut n = 0;
    let mut stack = vec![id.to_owned()];
    while let Some(d) = stack.pop() {
        for c in ctx.store.list_children(&d).await.unwrap() {
            n += 1;
            if c.is_dir() {
                stack.push(c.id);
            }
        }
    }
    n
}

pub async fn trash_is_one_move_and_hides_the_subtree(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("alice").await.unwrap();
    let big = tree(ctx, &space.root_id, 40).await;
    let keep = ctx.put(&space.root_id, "keep.txt", b"keep").await.unwrap();
    let before = s.space_usage(&space.id).await.unwrap();
    assert_eq!(before.used, big.size + 4);
    assert_eq!((before.trash, before.trash_items), (0, 0));
    let root_etag = s.space(&space.id).await.unwrap().etag;
    let inner = s.resolve(&space.id, "/big/sub/f1.bin").await.unwrap();

    let item = s.trash(&big.id, "alice").await.unwrap();
    assert_eq!(item.key, big.id, "the key is the node id");
    assert_eq!((item.name.as_str(), item.location.as_str()), ("big", "/"));
    assert_eq!(item.original_path(), "/big");
    assert_eq!(item.node.size, big.size);
    assert_eq!(item.deleted_by, "alice");
    let after = s.space_usage(&space.id).await.unwrap();
    assert_eq!(after.used, 4, "live bytes drop at once");
    assert_eq!((after.trash, after.trash_items), (big.size, 1));
    assert_ne!(s.space(&space.id).await.unwrap().etag, root_etag);

    // Nothing reaches the subtree by path or by id any more; the rest is untouched.
    assert!(matches!(
        s.resolve(&space.id, "/big").await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        s.path_of(&inner.id).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        s.path_of(&big.id).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(s.path_of(&keep.id).await.unwrap(), "/keep.txt");
    let listed: Vec<_> = s
        .list_children(&space.root_id)
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.name)
        .collect();
    assert_eq!(listed, ["keep.txt"]);
    assert!(matches!(
        s.trash(&big.id, "alice").await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        s.trash(&space.root_id, "alice").await,
        Err(StoreError::Forbidden(_))
    ));

    // Browsable inside, by key and path.
    let (it, sub) = s.trash_entry(&space.id, &big.id, "/sub").await.unwrap();
    assert_eq!(it, s.trash_items(&space.id).await.unwrap()[0]);
    let names: HashSet<_> = s
        .list_children(&sub.id)
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.name)
        .collect();
    assert_eq!(names.len(), 20);
    assert!(names.contains("f1.bin"));
    let (_, f) = s
        .trash_entry(&space.id, &big.id, "/sub/f1.bin")
        .await
        .unwrap();
    assert_eq!(f.id, inner.id);
    assert!(matches!(
        s.trash_entry(&space.id, &big.id, "/nope").await,
        Err(StoreError::NotFound)
    ));
    let other = s.personal_space("bob").await.unwrap();
    assert!(matches!(
        s.trash_entry(&other.id, &big.id, "/").await,
        Err(StoreError::NotFound)
    ));
    // Nextcloud's name for it.
    assert_eq!(
        s.trash_item_by_stamp(&space.id, "big", item.stamp)
            .await
            .unwrap()
            .key,
        big.id
    );

    // Back where it was: same ids, same bytes, sizes and usage as before.
    let done = s
        .restore_to_origin(&space.id, &big.id, Conflict::Fail, "alice")
        .await
        .unwrap();
    let Restored::Done { node, path, .. } = done else {
        panic!("restored: {done:?}")
    };
    assert_eq!((node.id.as_str(), path.as_str()), (big.id.as_str(), "/big"));
    let back = s.resolve(&space.id, "/big/sub/f1.bin").await.unwrap();
    assert_eq!(back.id, inner.id);
    assert_eq!(ctx.read(&back.id).await, content(1, 101));
    assert_eq!(s.space_usage(&space.id).await.unwrap(), before);
    assert_eq!(s.path_of(&inner.id).await.unwrap(), "/big/sub/f1.bin");
    assert_eq!(node_rows(ctx).await, 40 + 3);
}

pub async fn restore_conflicts_never_overwrite_silently(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("carol").await.unwrap();
    let root = &space.root_id;
    let first = ctx.put(root, "a.txt", b"first").await.unwrap();
    s.trash(&first.id, "carol").await.unwrap();
    let second = ctx.put(root, "a.txt", b"second!").await.unwrap();

    // The name is taken: refused, and nothing moved.
    assert!(matches!(
        s.restore_trash(
            &space.id,
            &first.id,
            "/",
            root,
            "a.txt",
            Conflict::Fail,
            "carol"
        )
        .await,
        Err(StoreError::AlreadyExists)
    ));
    assert_eq!(s.trash_items(&space.id).await.unwrap().len(), 1);
    assert!(matches!(
        s.restore_trash(
            &space.id,
            &first.id,
            "/",
            root,
            "a.txt",
            Conflict::Skip,
            "carol"
        )
        .await,
        Ok(Restored::Skipped)
    ));
    // Keep both: beside it under a free name.
    let kept = s
        .restore_trash(
            &space.id,
            &first.id,
            "/",
            root,
            "a.txt",
            Conflict::KeepBoth,
            "carol",
        )
        .await
        .unwrap();
    let Restored::Done {
        node,
        path,
        replaced,
    } = kept
    else {
        panic!("{kept:?}")
    };
    assert_eq!((path.as_str(), replaced), ("/a (2).txt", None));
    assert_eq!(ctx.read(&node.id).await, b"first");
    assert_eq!(ctx.read(&second.id).await, b"second!");

    // Replace: what was there goes to the trash itself.
    s.trash(&node.id, "carol").await.unwrap();
    let replaced = s
        .restore_trash(
            &space.id,
            &node.id,
            "/",
            root,
            "a.txt",
            Conflict::Replace,
            "carol",
        )
        .await
        .unwrap();
    let Restored::Done { replaced, .. } = replaced else {
        panic!("{replaced:?}")
    };
    assert_eq!(replaced.as_deref(), Some(second.id.as_str()));
    let items = s.trash_items(&space.id).await.unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(
        (items[0].key.as_str(), items[0].name.as_str()),
        (second.id.as_str(), "a.txt")
    );
    assert_eq!(read_path(ctx, &space.id, "/a.txt").await, b"first");

    // Two removals of one name in one second get distinct Nextcloud stamps.
    let x = ctx.put(root, "x", b"1").await.unwrap();
    let t1 = s.trash(&x.id, "carol").await.unwrap();
    let y = ctx.put(root, "x", b"2").await.unwrap();
    let t2 = s.trash(&y.id, "carol").await.unwrap();
    assert_ne!(t1.stamp, t2.stamp);

    // A sub-item of a trashed folder is restored on its own; the folder stays in the trash.
    let d = s.mkdir(root, "d").await.unwrap();
    let inner = ctx.put(&d.id, "in.txt", b"inner").await.unwrap();
    ctx.put(&d.id, "other.txt", b"other").await.unwrap();
    s.trash(&d.id, "carol").await.unwrap();
    let trash_before = s.space_usage(&space.id).await.unwrap().trash;
    s.restore_trash(
        &space.id,
        &d.id,
        "/in.txt",
        root,
        "in.txt",
        Conflict::Fail,
        "carol",
    )
    .await
    .unwrap();
    assert_eq!(s.path_of(&inner.id).await.unwrap(), "/in.txt");
    let usage = s.space_usage(&space.id).await.unwrap();
    assert_eq!(usage.trash, trash_before - 5);
    let (item, _) = s.trash_entry(&space.id, &d.id, "/").await.unwrap();
    assert_eq!(item.node.size, 5, "the folder in the trash lost its member");
}

pub async fn restore_into_missing_or_renamed_parents(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("dave").await.unwrap();
    let root = &space.root_id;
    let a = s.mkdir(root, "a").await.unwrap();
    let b = s.mkdir(&a.id, "b").await.unwrap();
    let f = ctx.put(&b.id, "f.txt", b"deep").await.unwrap();
    s.trash(&f.id, "dave").await.unwrap();

    // A chosen destination that is gone: 409's conflict; the item stays.
    let gone = s.mkdir(root, "gone").await.unwrap();
    s.trash(&gone.id, "dave").await.unwrap();
    assert!(matches!(
        s.restore_trash(
            &space.id,
            &f.id,
            "/",
            &gone.id,
            "f.txt",
            Conflict::Fail,
            "dave"
        )
        .await,
        Err(StoreError::Conflict)
    ));
    assert!(matches!(
        s.restore_trash(
            &space.id,
            &f.id,
            "/",
            "no-such-dir",
            "f.txt",
            Conflict::Fail,
            "dave"
        )
        .await,
        Err(StoreError::Conflict)
    ));

    // The parent renamed: the original location is recreated.
    s.move_node(&a.id, root, "renamed", false).await.unwrap();
    let r = s
        .restore_to_origin(&space.id, &f.id, Conflict::Fail, "dave")
        .await
        .unwrap();
    assert!(
        matches!(&r, Restored::Done { path, .. } if path == "/a/b/f.txt"),
        "{r:?}"
    );
    assert_eq!(read_path(ctx, &space.id, "/a/b/f.txt").await, b"deep");
    assert!(s.resolve(&space.id, "/renamed/b").await.is_ok());

    // The parent removed (and still in the trash): recreated too.
    let g = ctx
        .put(&dir(ctx, &space.id, "/a/b").await, "g.txt", b"g")
        .await
        .unwrap();
    s.trash(&g.id, "dave").await.unwrap();
    let a2 = s.resolve(&space.id, "/a").await.unwrap();
    s.trash(&a2.id, "dave").await.unwrap();
    s.restore_to_origin(&space.id, &g.id, Conflict::Fail, "dave")
        .await
        .unwrap();
    assert_eq!(read_path(ctx, &space.id, "/a/b/g.txt").await, b"g");
    // A file where a folder of the location was: the folder comes back beside it.
    let h = ctx
        .put(&dir(ctx, &space.id, "/a/b").await, "h.txt", b"h")
        .await
        .unwrap();
    s.trash(&h.id, "dave").await.unwrap();
    let b_now = s.resolve(&space.id, "/a/b").await.unwrap();
    s.trash(&b_now.id, "dave").await.unwrap();
    ctx.put(&dir(ctx, &space.id, "/a").await, "b", b"a file now")
        .await
        .unwrap();
    let r = s
        .restore_to_origin(&space.id, &h.id, Conflict::Fail, "dave")
        .await
        .unwrap();
    assert!(
        matches!(&r, Restored::Done { path, .. } if path == "/a/b (2)/h.txt"),
        "{r:?}"
    );
}

pub async fn bulk_restore_order_filters_and_conflicts(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("erin").await.unwrap();
    let root = &space.root_id;
    let docs = s.mkdir(root, "Documents").await.unwrap();
    let mut files = Vec::new();
    for i in 0..30 {
        files.push(
            ctx.put(&docs.id, &format!("{i}.txt"), &content(i, 10))
                .await
                .unwrap(),
        );
    }
    let old = ctx.put(root, "old.txt", b"old").await.unwrap();
    s.trash(&old.id, "erin").await.unwrap();
    let since = SystemTime::now();
    // A client's mass delete: some files one by one, then their folder.
    for f in &files[..10] {
        s.trash(&f.id, "erin").await.unwrap();
    }
    s.trash(&docs.id, "erin").await.unwrap();
    // The same name removed twice.
    let v1 = ctx.put(root, "twice.txt", b"older").await.unwrap();
    s.trash(&v1.id, "erin").await.unwrap();
    let v2 = ctx.put(root, "twice.txt", b"newer").await.unwrap();
    s.trash(&v2.id, "erin").await.unwrap();
    assert_eq!(s.trash_items(&space.id).await.unwrap().len(), 14);

    // A prefix takes only what was below it.
    let filter = RestoreFilter {
        since: Some(since),
        prefix: Some("/Documents".into()),
        ..RestoreFilter::default()
    };
    let mut run = s
        .restore_run(&space.id, &filter, Conflict::KeepBoth, "erin")
        .await
        .unwrap()
        .with_batch(4);
    while run.step().await.unwrap() {}
    let t = run.tally();
    assert_eq!((t.total, t.restored, t.renamed, t.skipped), (11, 11, 0, 0));
    assert_eq!(t.files, 30);
    // The folder came back first, its files into it, not beside it.
    let back = s.resolve(&space.id, "/Documents").await.unwrap();
    assert_eq!(back.id, docs.id);
    let names: HashSet<_> = s
        .list_children(&docs.id)
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.name)
        .collect();
    assert_eq!(names.len(), 30, "{names:?}");
    for (i, f) in files.iter().enumerate() {
        assert_eq!(ctx.read(&f.id).await, content(i as u64, 10));
    }

    // `since` leaves the older item; of two removals of one name the newer lands, the older
    // is skipped (replace never replaces what the run itself restored).
    let filter = RestoreFilter {
        since: Some(since),
        ..RestoreFilter::default()
    };
    let t = restore_all(ctx, &space.id, &filter, Conflict::Replace).await;
    assert_eq!((t.total, t.restored, t.skipped, t.replaced), (2, 1, 1, 0));
    assert_eq!(read_path(ctx, &space.id, "/twice.txt").await, b"newer");
    let left: Vec<_> = s
        .trash_items(&space.id)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.key)
        .collect();
    assert_eq!(left.len(), 2);
    assert!(left.contains(&old.id) && left.contains(&v1.id));

    // Keep-both brings the older one beside it.
    let t = restore_all(
        ctx,
        &space.id,
        &RestoreFilter::default(),
        Conflict::KeepBoth,
    )
    .await;
    assert_eq!(t.renamed, 1);
    assert_eq!(read_path(ctx, &space.id, "/twice (2).txt").await, b"older");
    assert!(s.trash_items(&space.id).await.unwrap().is_empty());
    assert_eq!(s.space_usage(&space.id).await.unwrap().trash, 0);
}

pub async fn bulk_restore_batches_are_all_or_nothing(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("frank").await.unwrap();
    let root = &space.root_id;
    let mut ids = Vec::new();
    for i in 0..60 {
        let f = ctx
            .put(root, &format!("{i}"), &content(i, 7))
            .await
            .unwrap();
        s.trash(&f.id, "frank").await.unwrap();
        ids.push(f.id);
    }
    let mut run = s
        .restore_run(
            &space.id,
            &RestoreFilter::default(),
            Conflict::Fail,
            "frank",
        )
        .await
        .unwrap()
        .with_batch(25);
    assert!(run.step().await.unwrap());
    // A run dropped half-way (what a killed process leaves): every item is either back or
    // still in the trash, none both, none lost; a new run takes the rest.
    drop(run);
    let in_trash: HashSet<_> = s
        .trash_items(&space.id)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.key)
        .collect();
    let live: HashSet<_> = s
        .list_children(root)
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.id)
        .collect();
    assert_eq!((in_trash.len(), live.len()), (35, 25));
    assert!(in_trash.is_disjoint(&live));
    let t = restore_all(ctx, &space.id, &RestoreFilter::default(), Conflict::Fail).await;
    assert_eq!(t.restored, 35);
    let live = s.list_children(root).await.unwrap();
    assert_eq!(live.len(), 60, "no duplicates, nothing lost");
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(ctx.read(id).await, content(i as u64, 7));
    }
}

pub async fn purge_frees_the_bytes(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("gina").await.unwrap();
    let root = &space.root_id;
    let d = s.mkdir(root, "d").await.unwrap();
    for i in 0..5 {
        ctx.put(&d.id, &format!("{i}"), &content(i, 20_000))
            .await
            .unwrap();
    }
    let shared = ctx.put(root, "shared", &content(99, 30_000)).await.unwrap();
    let copy = s
        .copy_node(&shared.id, root, "copy", false, true)
        .await
        .unwrap();
    let full = (ctx.stored_bytes().await, s.blob_bytes().await.unwrap());
    assert_eq!(full.1, 5 * 20_000 + 30_000);
    assert!(full.0 >= full.1);

    s.trash(&d.id, "gina").await.unwrap();
    s.trash(&shared.id, "gina").await.unwrap();
    assert_eq!(
        s.blob_bytes().await.unwrap(),
        full.1,
        "the trash keeps the bytes"
    );
    let gone = s.purge_trash(&space.id, &d.id, "/").await.unwrap();
    assert_eq!((gone.items, gone.bytes), (5, 100_000));
    assert_eq!(s.blob_bytes().await.unwrap(), 30_000);
    assert!(
        ctx.stored_bytes().await <= full.0 - 100_000,
        "the blob store gave the bytes back"
    );
    // A blob a live copy still uses stays.
    s.purge_trash_all(&space.id).await.unwrap();
    assert_eq!(s.blob_bytes().await.unwrap(), 30_000);
    assert_eq!(ctx.read(&copy.id).await, content(99, 30_000));
    assert!(matches!(
        s.purge_trash(&space.id, &d.id, "/").await,
        Err(StoreError::NotFound)
    ));
    let usage = s.space_usage(&space.id).await.unwrap();
    assert_eq!((usage.trash, usage.trash_items), (0, 0));
    // Purging inside a trashed folder takes that node only.
    let e = s.mkdir(root, "e").await.unwrap();
    let x = ctx.put(&e.id, "x", &content(1, 1000)).await.unwrap();
    ctx.put(&e.id, "y", &content(2, 1000)).await.unwrap();
    s.trash(&e.id, "gina").await.unwrap();
    s.purge_trash(&space.id, &e.id, "/x").await.unwrap();
    assert!(matches!(s.stat(&x.id).await, Err(StoreError::NotFound)));
    assert_eq!(s.space_usage(&space.id).await.unwrap().trash, 1000);
    assert_eq!(s.blob_bytes().await.unwrap(), 31_000);
}

pub async fn versions_keep_blobs_by_reference(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("hank").await.unwrap();
    let root = &space.root_id;
    let v1 = ctx.put(root, "doc.txt", b"one").await.unwrap();
    let v2 = ctx.put(root, "doc.txt", b"two!").await.unwrap();
    let v3 = ctx.put(root, "doc.txt", b"three").await.unwrap();
    assert_eq!(v3.id, v1.id);
    let list = s.versions(&v1.id).await.unwrap();
    assert_eq!(list.len(), 2);
    // Newest first, each the content (and etag) the file had, by the same blob.
    assert_eq!((list[0].size, list[0].etag.as_str()), (4, v2.etag.as_str()));
    assert_eq!((list[1].size, list[1].etag.as_str()), (3, v1.etag.as_str()));
    assert_eq!(s.blob_bytes().await.unwrap(), 3 + 4 + 5, "no byte copied");
    let usage = s.space_usage(&space.id).await.unwrap();
    assert_eq!((usage.used, usage.versions, usage.version_count), (5, 7, 2));
    let file_id = v1.id.clone();
    let read = |key: String| {
        let file_id = file_id.clone();
        async move {
            use futures::TryStreamExt as _;
            let dl = s.open_version(&file_id, &key, None).await.unwrap();
            let chunks: Vec<bytes::Bytes> = dl.stream.try_collect().await.unwrap();
            chunks.concat()
        }
    };
    assert_eq!(read(list[1].key.clone()).await, b"one");

    // Restoring a version: it becomes the content, the content it replaces a version.
    let restored = s.restore_version(&v1.id, &list[1].key).await.unwrap();
    assert_eq!(restored.id, v1.id);
    assert_eq!(ctx.read(&v1.id).await, b"one");
    let after = s.versions(&v1.id).await.unwrap();
    assert_eq!(after.len(), 2);
    assert_eq!(
        after[0].etag, v3.etag,
        "the replaced content is the newest version"
    );
    assert!(after.iter().all(|v| v.key != list[1].key));
    assert_eq!(s.space(&space.id).await.unwrap().used, 3);

    // Labels, and deleting one version frees its blob.
    s.set_version_label(&v1.id, &after[1].key, "draft")
        .await
        .unwrap();
    assert_eq!(
        s.version(&v1.id, &after[1].key).await.unwrap().label,
        "draft"
    );
    assert!(matches!(
        s.set_version_label(&v1.id, "nope", "x").await,
        Err(StoreError::NotFound)
    ));
    let bytes = s.blob_bytes().await.unwrap();
    s.delete_version(&v1.id, &after[0].key).await.unwrap();
    assert_eq!(s.blob_bytes().await.unwrap(), bytes - 5);
    assert!(matches!(
        s.delete_version(&v1.id, &after[0].key).await,
        Err(StoreError::NotFound)
    ));

    // The rules: excluded names and small contents keep no version.
    ctx.put(root, "x.tmp", b"1").await.unwrap();
    let tmp = ctx.put(root, "x.tmp", b"2").await.unwrap();
    assert!(s.versions(&tmp.id).await.unwrap().is_empty());

    // Versions travel with their file into the trash and back.
    s.trash(&v1.id, "hank").await.unwrap();
    assert_eq!(s.versions(&v1.id).await.unwrap().len(), 1);
    s.restore_to_origin(&space.id, &v1.id, Conflict::Fail, "hank")
        .await
        .unwrap();
    assert_eq!(s.versions(&v1.id).await.unwrap().len(), 1);
}

pub async fn copy_and_move_onto_a_file_are_overwrites(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("iris").await.unwrap();
    let root = &space.root_id;
    let target = ctx.put(root, "report.odt", b"report v1").await.unwrap();
    let draft = ctx.put(root, "draft", b"report v2").await.unwrap();
    // Copy onto the file: it keeps its id; what it had is a version.
    let copied = s
        .copy_node_as(&draft.id, root, "report.odt", true, true, "iris")
        .await
        .unwrap();
    assert_eq!(copied.id, target.id);
    assert_eq!(ctx.read(&target.id).await, b"report v2");
    assert_eq!(s.versions(&target.id).await.unwrap().len(), 1);

    // Move onto the file (an editor's save by rename): the target keeps its id and gains
    // the moved file's history; the moved node is gone.
    ctx.put(root, "tmp-save", b"report v3").await.unwrap();
    let save = ctx.put(root, "tmp-save", b"report v4").await.unwrap();
    let moved = s
        .move_node_as(&save.id, root, "report.odt", true, "iris")
        .await
        .unwrap();
    assert_eq!(moved.id, target.id);
    assert_eq!(ctx.read(&target.id).await, b"report v4");
    let history: Vec<_> = s.versions(&target.id).await.unwrap();
    assert_eq!(history.len(), 3, "{history:?}");
    assert!(matches!(s.stat(&save.id).await, Err(StoreError::NotFound)));
    assert!(s.trash_items(&space.id).await.unwrap().is_empty());
    assert_eq!(s.space(&space.id).await.unwrap().used, 9 + 9);

    // Onto a folder, or a folder onto a file: the replaced one goes to the trash.
    let d = s.mkdir(root, "d").await.unwrap();
    ctx.put(&d.id, "in", b"inside").await.unwrap();
    s.move_node_as(&draft.id, root, "d", true, "iris")
        .await
        .unwrap();
    let items = s.trash_items(&space.id).await.unwrap();
    assert_eq!((items.len(), items[0].key.as_str()), (1, d.id.as_str()));
    assert_eq!(items[0].deleted_by, "iris");
}

pub async fn retention_by_age_count_and_quota_share(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("jill").await.unwrap();
    let root = &space.root_id;
    let now = SystemTime::now();
    let day = Duration::from_secs(86_400);
    for i in 0..4 {
        let f = ctx
            .put(root, &format!("t{i}"), &content(i, 10_000))
            .await
            .unwrap();
        s.trash(&f.id, "jill").await.unwrap();
    }
    // Nothing is 30 days old yet; 31 days from now everything is.
    let none = s.expire_trash(now, 30 * day, 0).await.unwrap();
    assert_eq!(none.items, 0);
    let all = s.expire_trash(now + 31 * day, 30 * day, 0).await.unwrap();
    assert_eq!((all.items, all.bytes), (4, 40_000));
    assert_eq!(s.blob_bytes().await.unwrap(), 0);

    // The share of the quota: with 100 kB, 50 % is 50 kB; the oldest go until it fits.
    s.set_quota(&space.id, Some(100_000)).await.unwrap();
    let mut keys = Vec::new();
    for i in 0..4 {
        let f = ctx
            .put(root, &format!("q{i}"), &content(i, 20_000))
            .await
            .unwrap();
        keys.push(s.trash(&f.id, "jill").await.unwrap().key);
    }
    // Reported per space and reason (storage-users publishes one file.purged for each).
    let share = s.expire_trash_by_space(now, 30 * day, 50).await.unwrap();
    assert_eq!(
        share,
        [arca_store_files::TrashExpiry {
            space_id: space.id.clone(),
            by_quota: true,
            gone: arca_store_files::Expired {
                items: 2,
                bytes: 40_000
            },
        }]
    );
    let left: HashSet<_> = s
        .trash_items(&space.id)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.key)
        .collect();
    assert_eq!(left, keys[2..].iter().cloned().collect());
    assert_eq!(s.space_usage(&space.id).await.unwrap().trash, 40_000);

    // Versions: the count bound keeps the newest; the quota share takes the oldest.
    let mut last = None;
    for i in 0..6 {
        last = Some(ctx.put(root, "v", &content(i, 5_000)).await.unwrap());
    }
    let file = last.unwrap();
    assert_eq!(s.versions(&file.id).await.unwrap().len(), 5);
    let count = VersionRetention {
        thinning: false,
        max_per_file: 3,
        max_share_of_quota: 0,
    };
    let gone = s.expire_versions(now, &count).await.unwrap();
    assert_eq!((gone.items, gone.bytes), (2, 10_000));
    let left = s.versions(&file.id).await.unwrap();
    assert_eq!(left.len(), 3);
    let share = VersionRetention {
        thinning: false,
        max_per_file: 0,
        max_share_of_quota: 10,
    };
    let gone = s.expire_versions(now, &share).await.unwrap();
    assert_eq!((gone.items, gone.bytes), (1, 5_000));
    let newest: Vec<_> = s.versions(&file.id).await.unwrap();
    assert_eq!(newest.len(), 2);
    assert_eq!(newest[0].key, left[0].key, "the oldest went");
    // Thinning a day later keeps one of the versions made within the same minute.
    let thin = VersionRetention {
        thinning: true,
        max_per_file: 0,
        max_share_of_quota: 0,
    };
    let gone = s.expire_versions(now + day, &thin).await.unwrap();
    assert_eq!(gone.items, 1);
    assert_eq!(s.versions(&file.id).await.unwrap().len(), 1);
    let usage = s.space_usage(&space.id).await.unwrap();
    assert_eq!(usage.versions, 5_000);
    assert_eq!(
        s.blob_bytes().await.unwrap(),
        40_000 + 5_000 + 5_000,
        "expired versions gave their bytes back"
    );
}

pub async fn collector_counts_versions_and_trash(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("kim").await.unwrap();
    let root = &space.root_id;
    ctx.put(root, "f", b"first").await.unwrap();
    let f = ctx.put(root, "f", b"second").await.unwrap();
    let g = ctx.put(root, "g", b"trashed").await.unwrap();
    s.trash(&g.id, "kim").await.unwrap();
    let files = ctx.blob_files().await.len();
    assert_eq!(s.collect_orphans(Duration::ZERO).await.unwrap(), 0);
    assert_eq!(ctx.blob_files().await.len(), files);
    let v = s.versions(&f.id).await.unwrap();
    use futures::TryStreamExt as _;
    let dl = s.open_version(&f.id, &v[0].key, None).await.unwrap();
    let chunks: Vec<bytes::Bytes> = dl.stream.try_collect().await.unwrap();
    assert_eq!(chunks.concat(), b"first");
    // Once unreferenced, collected as ever.
    s.delete(&f.id).await.unwrap();
    assert_eq!(s.collect_orphans(Duration::ZERO).await.unwrap(), 2);
}

pub async fn space_deletion_takes_trash_and_versions(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.create_project_space("P", "admin", None).await.unwrap();
    let root = &space.root_id;
    ctx.put(root, "f", b"a").await.unwrap();
    ctx.put(root, "f", b"b").await.unwrap();
    let g = ctx.put(root, "g", b"c").await.unwrap();
    s.trash(&g.id, "admin").await.unwrap();
    s.delete_space(&space.id).await.unwrap();
    assert_eq!(s.collect_orphans(Duration::ZERO).await.unwrap(), 3);
    assert!(ctx.blob_files().await.is_empty());
}
