//! The storage scenarios, each an `async fn(&Ctx)`: run on SQLite and PostgreSQL by `store.rs`,
//! and those that touch blobs on S3 by `s3.rs`. Whatever a scenario checks about blobs goes
//! through [`Ctx::blob_files`], which lists the blob directory or the bucket alike.

// Each test binary runs its own subset.
#![allow(dead_code)]

use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arca_store_files::{
    ChecksumAlgo, DeadProp, Node, NodeKind, Precheck, PropPatch, PutOptions, Space, SpaceKind,
    StoreError,
};
use md5::Md5;
use sha1::{Digest, Sha1};

use crate::support::{Ctx, body, content, failing_body, read_all};

pub async fn etag_propagates_to_root(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("alice").await.unwrap();
    let root0 = s.stat(&space.root_id).await.unwrap();
    let a = s.mkdir(&space.root_id, "a").await.unwrap();
    let root1 = s.stat(&space.root_id).await.unwrap();
    assert_ne!(root0.etag, root1.etag, "mkdir changes the root etag");

    let b = s.mkdir(&a.id, "b").await.unwrap();
    let (a1, root2) = (
        s.stat(&a.id).await.unwrap(),
        s.stat(&space.root_id).await.unwrap(),
    );
    assert_ne!(a.etag, a1.etag);
    assert_ne!(root1.etag, root2.etag);

    // put: every ancestor changes, the sibling subtree does not.
    let other = s.mkdir(&space.root_id, "other").await.unwrap();
    let before: Vec<_> = [&space.root_id, &a.id, &b.id, &other.id]
        .iter()
        .map(|id| id.to_string())
        .collect();
    let etags = |ids: Vec<String>| async move {
        let mut out = Vec::new();
        for id in ids {
            out.push(s.stat(&id).await.unwrap().etag);
        }
        out
    };
    let e0 = etags(before.clone()).await;
    let f = ctx.put(&b.id, "f.txt", b"hello").await.unwrap();
    let e1 = etags(before.clone()).await;
    assert_ne!(e0[0], e1[0], "root");
    assert_ne!(e0[1], e1[1], "a");
    assert_ne!(e0[2], e1[2], "b");
    assert_eq!(e0[3], e1[3], "sibling untouched");

    // overwrite: the file and its ancestors change
    let f2 = ctx.put(&b.id, "f.txt", b"hello again").await.unwrap();
    assert_ne!(f.etag, f2.etag);
    let e2 = etags(before.clone()).await;
    for i in 0..3 {
        assert_ne!(e1[i], e2[i]);
    }
    assert_eq!(space.root_id, s.space(&space.id).await.unwrap().root_id);
    assert_eq!(
        e2[0],
        s.space(&space.id).await.unwrap().etag,
        "space etag = root etag"
    );

    // move: old and new chains change
    s.move_node(&f.id, &other.id, "g.txt", false).await.unwrap();
    let e3 = etags(before.clone()).await;
    for i in 0..4 {
        assert_ne!(e2[i], e3[i], "move changes chain member {i}");
    }

    // delete
    s.delete(&f.id).await.unwrap();
    let e4 = etags(before.clone()).await;
    assert_ne!(e3[0], e4[0]);
    assert_ne!(e3[3], e4[3]);
    assert_eq!(e3[2], e4[2], "b was not an ancestor of the deleted file");

    // dead properties do not change etags
    s.set_prop(&b.id, "urn:x", "color", "<x:color>red</x:color>")
        .await
        .unwrap();
    assert_eq!(etags(before).await, e4);
}

pub async fn ids_stable_across_move_and_rename(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("bob").await.unwrap();
    let d1 = s.mkdir(&space.root_id, "d1").await.unwrap();
    let d2 = s.mkdir(&space.root_id, "d2").await.unwrap();
    let f = ctx.put(&d1.id, "f", b"x").await.unwrap();

    let renamed = s.move_node(&f.id, &d1.id, "renamed", false).await.unwrap();
    assert_eq!(renamed.id, f.id);
    assert_eq!(renamed.name, "renamed");
    assert_eq!(renamed.etag, f.etag, "a move keeps the node's own etag");

    let moved = s.move_node(&f.id, &d2.id, "moved", false).await.unwrap();
    assert_eq!(moved.id, f.id);
    assert_eq!(moved.parent_id.as_deref(), Some(d2.id.as_str()));
    assert_eq!(s.resolve(&space.id, "/d2/moved").await.unwrap().id, f.id);
    assert!(matches!(
        s.resolve(&space.id, "/d1/renamed").await,
        Err(StoreError::NotFound)
    ));

    // A directory moved with its contents keeps all ids.
    let dir_moved = s
        .move_node(&d2.id, &d1.id, "d2-inside", false)
        .await
        .unwrap();
    assert_eq!(dir_moved.id, d2.id);
    assert_eq!(
        s.resolve(&space.id, "/d1/d2-inside/moved")
            .await
            .unwrap()
            .id,
        f.id
    );

    // Overwrite keeps the id of the overwritten file.
    let over = ctx.put(&d2.id, "moved", b"new content").await.unwrap();
    assert_eq!(over.id, f.id);
    assert_eq!(ctx.read(&f.id).await, b"new content");
}

pub async fn dir_sizes_are_subtree_sizes(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("carol").await.unwrap();
    let root = space.root_id.clone();
    let a = s.mkdir(&root, "a").await.unwrap();
    let b = s.mkdir(&a.id, "b").await.unwrap();
    let c = s.mkdir(&root, "c").await.unwrap();
    ctx.put(&a.id, "1", &[1; 100]).await.unwrap();
    let f2 = ctx.put(&b.id, "2", &[2; 30]).await.unwrap();
    ctx.put(&c.id, "3", &[3; 7]).await.unwrap();
    let size = |id: String| async move { s.stat(&id).await.unwrap().size };
    assert_eq!(size(b.id.clone()).await, 30);
    assert_eq!(size(a.id.clone()).await, 130);
    assert_eq!(size(root.clone()).await, 137);
    assert_eq!(s.space(&space.id).await.unwrap().used, 137);

    ctx.put(&b.id, "2", &[2; 10]).await.unwrap(); // shrink by 20
    assert_eq!(size(a.id.clone()).await, 110);
    assert_eq!(size(root.clone()).await, 117);

    s.move_node(&b.id, &c.id, "b", false).await.unwrap();
    assert_eq!(size(a.id.clone()).await, 100);
    assert_eq!(size(c.id.clone()).await, 17);
    assert_eq!(size(root.clone()).await, 117);

    s.copy_node(&c.id, &a.id, "c-copy", false, true)
        .await
        .unwrap();
    assert_eq!(size(a.id.clone()).await, 117);
    assert_eq!(size(root.clone()).await, 134);

    s.delete(&f2.id).await.unwrap();
    assert_eq!(size(c.id.clone()).await, 7);
    assert_eq!(size(root.clone()).await, 124);

    s.delete(&a.id).await.unwrap();
    assert_eq!(size(root.clone()).await, 7);
}

pub async fn checksums_match_content(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("dave").await.unwrap();
    for (i, len) in [0usize, 1, 5000, 3 << 20].into_iter().enumerate() {
        let data = content(i as u64, len);
        let node = s
            .put_file(
                &space.root_id,
                &format!("f{i}"),
                body(data.clone(), 65536),
                PutOptions::default(),
            )
            .await
            .unwrap();
        let cs = node.checksums.clone().expect("files have checksums");
        assert_eq!(cs.sha1, hex(&Sha1::digest(&data)), "sha1 of {len} bytes");
        assert_eq!(cs.md5, hex(&Md5::digest(&data)), "md5 of {len} bytes");
        assert_eq!(
            cs.adler32,
            format!("{:08x}", naive_adler32(&data)),
            "adler32 of {len} bytes"
        );
        assert_eq!(node.size, len as u64);
        assert_eq!(s.stat(&node.id).await.unwrap().checksums, Some(cs));
        assert_eq!(ctx.read(&node.id).await, data);
    }
    // The declared checksum is accepted in any case, under any algorithm.
    let data = b"checked".to_vec();
    let want = hex(&Sha1::digest(&data)).to_uppercase();
    s.put_file(
        &space.root_id,
        "checked",
        body(data.clone(), 3),
        PutOptions {
            expected_checksum: Some((ChecksumAlgo::Sha1, want)),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let adler = format!("{:08x}", naive_adler32(&data));
    s.put_file(
        &space.root_id,
        "checked",
        body(data, 3),
        PutOptions {
            expected_checksum: Some((ChecksumAlgo::Adler32, adler)),
            ..Default::default()
        },
    )
    .await
    .unwrap();
}

pub async fn quota_exceeded_writes_nothing(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s
        .create_project_space("proj", "erin", Some(100))
        .await
        .unwrap();
    assert_eq!(space.kind, SpaceKind::Project);
    assert_eq!(space.quota, Some(100));
    let root = &space.root_id;
    ctx.put(root, "a", &[0; 60]).await.unwrap();
    let blobs_before = ctx.blob_files().await.len();
    let etag_before = s.stat(root).await.unwrap().etag;

    // Declared length over the quota: refused before the body is read.
    let err = s
        .put_file(
            root,
            "b",
            body(vec![1; 60], 10),
            PutOptions {
                content_length: Some(60),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::QuotaExceeded), "{err:?}");

    // Unknown length: refused while streaming.
    let err = s
        .put_file(root, "b", body(vec![1; 60], 10), PutOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::QuotaExceeded), "{err:?}");

    // Overwriting a file counts only the difference.
    ctx.put(root, "a", &[0; 100]).await.unwrap();
    let err = ctx.put(root, "a", &[0; 101]).await.unwrap_err();
    assert!(matches!(err, StoreError::QuotaExceeded), "{err:?}");

    // Copies count too.
    let err = s
        .copy_node(
            &s.resolve(&space.id, "/a").await.unwrap().id,
            root,
            "a2",
            false,
            true,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::QuotaExceeded), "{err:?}");

    let after = s.space(&space.id).await.unwrap();
    assert_eq!(after.used, 100);
    assert!(matches!(
        s.resolve(&space.id, "/b").await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(
        ctx.read(&s.resolve(&space.id, "/a").await.unwrap().id)
            .await,
        vec![0; 100]
    );
    assert_ne!(
        etag_before, after.etag,
        "the successful overwrite changed it"
    );

    // Nothing from the refused uploads is left once orphans are collected (the first "a" blob
    // is an orphan of the overwrite).
    s.collect_orphans(Duration::ZERO).await.unwrap();
    assert_eq!(
        ctx.blob_files().await.len(),
        blobs_before,
        "{:?}",
        ctx.blob_files().await
    );

    // Unlimited again.
    s.set_quota(&space.id, None).await.unwrap();
    ctx.put(root, "b", &[1; 500]).await.unwrap();
}

/// A put whose early checks the caller made (`PutOptions::prechecked`) skips its own, but the
/// commit still checks everything: a precheck gone stale lets nothing through.
pub async fn stale_prechecks_let_nothing_through(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s
        .create_project_space("pre", "gina", Some(100))
        .await
        .unwrap();
    let root = s.stat(&space.root_id).await.unwrap();
    let check = |space: &Space, existing: Option<&Node>, opts: PutOptions| {
        Precheck::of(space, &root, existing, &opts).map(|p| PutOptions {
            prechecked: Some(p),
            ..opts
        })
    };
    let sized = |len: u64| PutOptions {
        content_length: Some(len),
        ..Default::default()
    };

    // The refusals are those of the put's own precheck.
    let err = check(&space, None, sized(101)).unwrap_err();
    assert!(matches!(err, StoreError::QuotaExceeded), "{err:?}");
    let dir = s.mkdir(&space.root_id, "d").await.unwrap();
    let err = check(&space, Some(&dir), sized(1)).unwrap_err();
    assert!(matches!(err, StoreError::IsADirectory), "{err:?}");
    let err = check(
        &space,
        None,
        PutOptions {
            if_match: Some("\"x\"".into()),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(matches!(err, StoreError::PreconditionFailed), "{err:?}");

    // Checked on an empty space, committed after another put used most of it.
    let fits = check(&space, None, sized(60)).unwrap();
    assert_eq!(fits.prechecked.as_ref().unwrap().allowance, Some(100));
    ctx.put(&space.root_id, "a", &[0; 60]).await.unwrap();
    let err = s
        .put_file(&space.root_id, "b", body(vec![1; 60], 10), fits)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::QuotaExceeded), "{err:?}");

    // Checked while the name was free, committed after it was taken.
    let fresh = check(
        &space,
        None,
        PutOptions {
            if_none_match_any: true,
            ..Default::default()
        },
    )
    .unwrap();
    ctx.put(&space.root_id, "c", b"first").await.unwrap();
    let err = s
        .put_file(&space.root_id, "c", body(b"second".to_vec(), 3), fresh)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::PreconditionFailed), "{err:?}");

    // The allowance bounds a body of unknown length while it streams.
    let now = s.space(&space.id).await.unwrap();
    let open_ended = check(&now, None, PutOptions::default()).unwrap();
    assert_eq!(open_ended.prechecked.as_ref().unwrap().allowance, Some(35));
    let err = s
        .put_file(
            &space.root_id,
            "e",
            body(vec![2; 36], 4),
            open_ended.clone(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::QuotaExceeded), "{err:?}");
    s.put_file(&space.root_id, "e", body(vec![2; 35], 4), open_ended)
        .await
        .unwrap();

    let after = s.space(&space.id).await.unwrap();
    assert_eq!(after.used, 100);
    assert!(matches!(
        s.resolve(&space.id, "/b").await,
        Err(StoreError::NotFound)
    ));
    let c = s.resolve(&space.id, "/c").await.unwrap();
    assert_eq!(ctx.read(&c.id).await, b"first");
}

pub async fn if_match_mismatch_keeps_old_content(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("frank").await.unwrap();
    let root = &space.root_id;
    let v1 = ctx.put(root, "doc", b"version 1").await.unwrap();

    let err = s
        .put_file(
            root,
            "doc",
            body(b"version 2".to_vec(), 4),
            PutOptions {
                if_match: Some("\"0123456789abcdef0123456789abcdef\"".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::PreconditionFailed), "{err:?}");
    assert_eq!(ctx.read(&v1.id).await, b"version 1");
    assert_eq!(s.stat(&v1.id).await.unwrap().etag, v1.etag);

    // The right etag, quoted as clients send it.
    let v2 = s
        .put_file(
            root,
            "doc",
            body(b"version 2".to_vec(), 4),
            PutOptions {
                if_match: Some(format!("\"{}\"", v1.etag)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(ctx.read(&v2.id).await, b"version 2");

    // If-None-Match: * on an existing file.
    let err = s
        .put_file(
            root,
            "doc",
            body(b"version 3".to_vec(), 4),
            PutOptions {
                if_none_match_any: true,
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::PreconditionFailed), "{err:?}");
    // If-Match on a file that does not exist.
    let err = s
        .put_file(
            root,
            "missing",
            body(b"x".to_vec(), 4),
            PutOptions {
                if_match: Some(v2.etag.clone()),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::PreconditionFailed), "{err:?}");
    assert_eq!(ctx.read(&v2.id).await, b"version 2");
    s.collect_orphans(Duration::ZERO).await.unwrap();
    assert_eq!(ctx.blob_files().await.len(), 1);
}

pub async fn concurrent_puts_are_atomic(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("grace").await.unwrap();
    const WRITERS: u64 = 8;
    // Big enough to take the multipart path and interleave on disk if writes were not atomic.
    const LEN: usize = (1 << 20) + 12345;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let store = s.clone();
        let root = space.root_id.clone();
        tasks.push(tokio::spawn(async move {
            store
                .put_file(
                    &root,
                    "same",
                    body(content(100 + w, LEN), 16 << 10),
                    PutOptions::default(),
                )
                .await
        }));
    }
    let mut ids = HashSet::new();
    for t in tasks {
        let node = t.await.unwrap().unwrap();
        ids.insert(node.id);
    }
    assert_eq!(ids.len(), 1, "every writer wrote the same node");
    let id = ids.into_iter().next().unwrap();
    let got = ctx.read(&id).await;
    let winners: Vec<u64> = (0..WRITERS)
        .filter(|w| got == content(100 + w, LEN))
        .collect();
    assert_eq!(winners.len(), 1, "content is exactly one writer's");
    let node = s.stat(&id).await.unwrap();
    assert_eq!(node.size, LEN as u64);
    assert_eq!(node.checksums.unwrap().sha1, hex(&Sha1::digest(&got)));
    assert_eq!(s.space(&space.id).await.unwrap().used, LEN as u64);
    assert_eq!(s.list_children(&space.root_id).await.unwrap().len(), 1);

    // The 7 losers' blobs are orphans.
    let n = s.collect_orphans(Duration::ZERO).await.unwrap();
    assert_eq!(n, WRITERS - 1);
    assert_eq!(ctx.blob_files().await.len(), 1);
}

pub async fn concurrent_if_match_one_winner(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("heidi").await.unwrap();
    let v1 = ctx.put(&space.root_id, "f", b"base").await.unwrap();
    let mut tasks = Vec::new();
    for w in 0..8u64 {
        let store = s.clone();
        let root = space.root_id.clone();
        let etag = v1.etag.clone();
        tasks.push(tokio::spawn(async move {
            store
                .put_file(
                    &root,
                    "f",
                    body(content(w, 50_000), 4096),
                    PutOptions {
                        if_match: Some(etag),
                        ..Default::default()
                    },
                )
                .await
                .map(|_| w)
        }));
    }
    let mut winners = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(w) => winners.push(w),
            Err(StoreError::PreconditionFailed) => {}
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one If-Match writer wins");
    assert_eq!(ctx.read(&v1.id).await, content(winners[0], 50_000));
}

pub async fn failing_body_keeps_old_content(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("ivan").await.unwrap();
    let old = ctx
        .put(&space.root_id, "f", b"the old content")
        .await
        .unwrap();
    for len in [10usize, 3 << 20] {
        let err = s
            .put_file(
                &space.root_id,
                "f",
                failing_body(content(1, len)),
                PutOptions::default(),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Body(_)), "{err:?}");
        let now = s.stat(&old.id).await.unwrap();
        assert_eq!(now.etag, old.etag);
        assert_eq!(ctx.read(&old.id).await, b"the old content");
    }
    // A new file that fails is not created at all.
    let err = s
        .put_file(
            &space.root_id,
            "new",
            failing_body(vec![1; 10]),
            PutOptions::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Body(_)));
    assert!(matches!(
        s.resolve(&space.id, "/new").await,
        Err(StoreError::NotFound)
    ));
    // The failed uploads cleaned up after themselves; nothing left to collect.
    assert_eq!(
        ctx.blob_files().await.len(),
        1,
        "{:?}",
        ctx.blob_files().await
    );
    assert_eq!(s.collect_orphans(Duration::ZERO).await.unwrap(), 0);
}

pub async fn checksum_and_length_mismatch_keep_old_content(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("judy").await.unwrap();
    let old = ctx.put(&space.root_id, "f", b"old").await.unwrap();
    let err = s
        .put_file(
            &space.root_id,
            "f",
            body(b"new".to_vec(), 1),
            PutOptions {
                expected_checksum: Some((
                    ChecksumAlgo::Md5,
                    "00000000000000000000000000000000".into(),
                )),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::ChecksumMismatch {
                algo: ChecksumAlgo::Md5,
                ..
            }
        ),
        "{err:?}"
    );
    for (declared, sent) in [(10u64, 5usize), (5, 10)] {
        let err = s
            .put_file(
                &space.root_id,
                "f",
                body(vec![7; sent], 2),
                PutOptions {
                    content_length: Some(declared),
                    ..Default::default()
                },
            )
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::LengthMismatch { .. }), "{err:?}");
    }
    assert_eq!(ctx.read(&old.id).await, b"old");
    assert_eq!(s.stat(&old.id).await.unwrap().etag, old.etag);
    assert_eq!(ctx.blob_files().await.len(), 1);
}

pub async fn orphans_collected(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("mallory").await.unwrap();
    let root = &space.root_id;
    let f = ctx.put(root, "f", b"one").await.unwrap();
    let first_blob = f.blob_id().unwrap().to_owned();
    ctx.put(root, "f", b"two").await.unwrap();
    assert_eq!(
        ctx.blob_files().await.len(),
        2,
        "the old blob stays until collected"
    );
    // Too young to collect.
    assert_eq!(
        s.collect_orphans(Duration::from_secs(3600)).await.unwrap(),
        0
    );
    assert_eq!(s.collect_orphans(Duration::ZERO).await.unwrap(), 1);
    assert_eq!(ctx.blob_files().await.len(), 1);
    assert!(
        !ctx.blob_files()
            .await
            .iter()
            .any(|p| p.contains(&first_blob))
    );

    // Copies share the blob: deleting one copy keeps it, deleting both frees it.
    let copy = s
        .copy_node(&f.id, root, "f-copy", false, true)
        .await
        .unwrap();
    assert_eq!(copy.blob_id(), s.stat(&f.id).await.unwrap().blob_id());
    s.delete(&f.id).await.unwrap();
    assert_eq!(s.collect_orphans(Duration::ZERO).await.unwrap(), 0);
    assert_eq!(ctx.read(&copy.id).await, b"two");
    // Overwriting the copy releases the shared blob for good.
    ctx.put(root, "f-copy", b"three").await.unwrap();
    assert_eq!(s.collect_orphans(Duration::ZERO).await.unwrap(), 1);

    // A directory delete frees every blob below it.
    let d = s.mkdir(root, "d").await.unwrap();
    let e = s.mkdir(&d.id, "e").await.unwrap();
    ctx.put(&d.id, "1", b"1").await.unwrap();
    ctx.put(&e.id, "2", b"2").await.unwrap();
    s.delete(&d.id).await.unwrap();
    assert_eq!(s.collect_orphans(Duration::ZERO).await.unwrap(), 2);
    assert_eq!(ctx.blob_files().await.len(), 1);
    assert_eq!(ctx.read(&copy.id).await, b"three");
}

pub async fn killed_upload_leaves_only_orphans(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("niaj").await.unwrap();
    let old = ctx.put(&space.root_id, "f", b"old content").await.unwrap();

    // An upload whose request is dropped mid-body (the client or the process went away): the
    // put future is cancelled while it waits for more bytes.
    let (tx, rx) = futures::channel::mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(4);
    let store = s.clone();
    let root = space.root_id.clone();
    let task =
        tokio::spawn(async move { store.put_file(&root, "f", rx, PutOptions::default()).await });
    let mut tx = tx;
    use futures::SinkExt;
    for _ in 0..40 {
        tx.send(Ok(bytes::Bytes::from(vec![9u8; 64 << 10])))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    task.abort();
    let _ = task.await;

    assert_eq!(ctx.read(&old.id).await, b"old content");
    assert_eq!(s.stat(&old.id).await.unwrap().etag, old.etag);
    // After a restart the collector removes what the upload left.
    let reopened = ctx.reopen().await;
    let n = reopened.collect_orphans(Duration::ZERO).await.unwrap();
    assert_eq!(n, 1, "the abandoned upload");
    assert_eq!(
        ctx.blob_files().await.len(),
        1,
        "{:?}",
        ctx.blob_files().await
    );
    assert_eq!(read_all(&reopened, &old.id, None).await, b"old content");
    reopened.close().await;
}

pub async fn range_reads(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("olivia").await.unwrap();
    // Over two local read chunks (1 MiB), so ranges cross chunk boundaries.
    let data = content(7, 2_500_000);
    let f = s
        .put_file(
            &space.root_id,
            "f",
            body(data.clone(), 10_000),
            PutOptions::default(),
        )
        .await
        .unwrap();
    let len = data.len() as u64;
    for (start, end) in [
        (0u64, 0u64),
        (10, 99),
        (0, len - 1),
        (len - 10, len - 1),
        (262_000, 530_000),
        (1_040_000, 2_100_000),
    ] {
        let got = read_all(s, &f.id, Some((start, end))).await;
        assert_eq!(
            got,
            &data[start as usize..=end as usize],
            "range {start}-{end}"
        );
    }
    // An end past the file is clamped.
    let dl = s
        .open_read(&f.id, Some((len - 5, len + 100)))
        .await
        .unwrap();
    assert_eq!(dl.range, Some((len - 5, len - 1)));
    for bad in [(len, len + 1), (5, 4)] {
        assert!(matches!(
            s.open_read(&f.id, Some(bad)).await,
            Err(StoreError::InvalidRange)
        ));
    }
    assert_eq!(read_all(s, &f.id, None).await, data);
    // Reads are chunked, not whole-file buffers.
    let dl = s.open_read(&f.id, None).await.unwrap();
    let chunks: Vec<bytes::Bytes> = futures::TryStreamExt::try_collect(dl.stream).await.unwrap();
    assert!(chunks.len() > 1 && chunks.iter().all(|c| c.len() <= 1 << 20));
    // Empty files and directories.
    let empty = ctx.put(&space.root_id, "empty", b"").await.unwrap();
    assert!(ctx.read(&empty.id).await.is_empty());
    assert!(matches!(
        s.open_read(&empty.id, Some((0, 0))).await,
        Err(StoreError::InvalidRange)
    ));
    assert!(matches!(
        s.open_read(&space.root_id, None).await,
        Err(StoreError::IsADirectory)
    ));
}

pub async fn large_file_multipart_round_trip(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("peggy").await.unwrap();
    let data = content(99, (5 << 20) + 3);
    let f = s
        .put_file(
            &space.root_id,
            "big.bin",
            body(data.clone(), 64 << 10),
            PutOptions {
                content_length: Some(data.len() as u64),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(f.size, data.len() as u64);
    let got = ctx.read(&f.id).await;
    assert!(got == data, "round trip differs");
    assert_eq!(ctx.blob_files().await.len(), 1, "no staging files left");
}

pub async fn name_validation(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("quentin").await.unwrap();
    let root = &space.root_id;
    let long = "x".repeat(256);
    for bad in ["", ".", "..", "a/b", "nul\0", long.as_str()] {
        assert!(
            matches!(
                s.mkdir(root, bad).await,
                Err(StoreError::InvalidName { .. })
            ),
            "mkdir {bad:?}"
        );
        assert!(
            matches!(
                ctx.put(root, bad, b"x").await,
                Err(StoreError::InvalidName { .. })
            ),
            "put {bad:?}"
        );
    }
    let f = ctx.put(root, "ok", b"x").await.unwrap();
    assert!(matches!(
        s.move_node(&f.id, root, "..", false).await,
        Err(StoreError::InvalidName { .. })
    ));
    assert!(matches!(
        s.copy_node(&f.id, root, "a/b", false, true).await,
        Err(StoreError::InvalidName { .. })
    ));
    assert!(matches!(
        s.resolve(&space.id, "/ok/../ok").await,
        Err(StoreError::InvalidName { .. })
    ));
    // 255 bytes and Unicode are fine.
    s.mkdir(root, &"y".repeat(255)).await.unwrap();
    s.mkdir(root, "ünïcødé 漢字").await.unwrap();
    assert_eq!(
        s.resolve(&space.id, "/ünïcødé 漢字").await.unwrap().name,
        "ünïcødé 漢字"
    );
}

pub async fn mkdir_and_put_errors(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("rupert").await.unwrap();
    let root = &space.root_id;
    let d = s.mkdir(root, "d").await.unwrap();
    assert_eq!(d.kind, NodeKind::Dir);
    assert!(matches!(
        s.mkdir(root, "d").await,
        Err(StoreError::AlreadyExists)
    ));
    let missing = "0123456789abcdef0123456789abcdef";
    assert!(matches!(
        s.mkdir(missing, "x").await,
        Err(StoreError::Conflict)
    ));
    assert!(matches!(
        ctx.put(missing, "x", b"x").await,
        Err(StoreError::Conflict)
    ));
    let f = ctx.put(root, "f", b"x").await.unwrap();
    assert!(matches!(
        s.mkdir(&f.id, "x").await,
        Err(StoreError::NotADirectory)
    ));
    assert!(matches!(
        ctx.put(&f.id, "x", b"x").await,
        Err(StoreError::NotADirectory)
    ));
    assert!(matches!(
        s.mkdir(root, "f").await,
        Err(StoreError::AlreadyExists)
    ));
    assert!(matches!(
        ctx.put(root, "d", b"x").await,
        Err(StoreError::IsADirectory)
    ));
    assert!(matches!(
        s.list_children(&f.id).await,
        Err(StoreError::NotADirectory)
    ));
    assert!(matches!(
        s.list_children(missing).await,
        Err(StoreError::NotFound)
    ));
    assert!(s.list_children(&d.id).await.unwrap().is_empty());
    assert!(matches!(
        s.delete(root).await,
        Err(StoreError::Forbidden(_))
    ));
    assert!(matches!(s.delete(missing).await, Err(StoreError::NotFound)));
    // Listing: one query, sorted by name.
    for name in ["b", "a", "C", "c"] {
        ctx.put(&d.id, name, b"x").await.unwrap();
    }
    let names: Vec<_> = s
        .list_children(&d.id)
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.name)
        .collect();
    assert_eq!(names, ["C", "a", "b", "c"]);
    assert_eq!(s.child(&d.id, "a").await.unwrap().name, "a");
}

pub async fn move_rules(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("sybil").await.unwrap();
    let root = &space.root_id;
    let a = s.mkdir(root, "a").await.unwrap();
    let b = s.mkdir(&a.id, "b").await.unwrap();
    let f = ctx.put(root, "f", b"f").await.unwrap();
    let g = ctx.put(root, "g", b"g").await.unwrap();

    for target in [&a.id, &b.id] {
        assert!(matches!(
            s.move_node(&a.id, target, "x", false).await,
            Err(StoreError::Forbidden(_))
        ));
    }
    assert!(matches!(
        s.move_node(&f.id, root, "f", true).await,
        Err(StoreError::Forbidden(_))
    ));
    assert!(matches!(
        s.move_node(&f.id, root, "g", false).await,
        Err(StoreError::AlreadyExists)
    ));
    assert!(matches!(
        s.move_node(&f.id, "0123456789abcdef0123456789abcdef", "g", false)
            .await,
        Err(StoreError::Conflict)
    ));
    assert!(matches!(
        s.move_node(&f.id, &g.id, "x", false).await,
        Err(StoreError::NotADirectory)
    ));
    // Moving b over its own ancestor a would delete b itself.
    assert!(matches!(
        s.move_node(&b.id, root, "a", true).await,
        Err(StoreError::Forbidden(_))
    ));
    assert!(matches!(
        s.move_node(root, &a.id, "r", false).await,
        Err(StoreError::Forbidden(_))
    ));

    // Overwrite replaces the target (and its blob is released).
    let moved = s.move_node(&f.id, root, "g", true).await.unwrap();
    assert_eq!(moved.id, f.id);
    assert!(matches!(s.stat(&g.id).await, Err(StoreError::NotFound)));
    assert_eq!(ctx.read(&f.id).await, b"f");
    assert_eq!(s.space(&space.id).await.unwrap().used, 1);
    assert_eq!(s.collect_orphans(Duration::ZERO).await.unwrap(), 1);

    // Across spaces: refused.
    let other = s.personal_space("trent").await.unwrap();
    assert!(matches!(
        s.move_node(&f.id, &other.root_id, "f", false).await,
        Err(StoreError::Forbidden(_))
    ));
}

pub async fn copy_tree(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("uma").await.unwrap();
    let root = &space.root_id;
    let src = s.mkdir(root, "src").await.unwrap();
    let sub = s.mkdir(&src.id, "sub").await.unwrap();
    let f1 = ctx.put(&src.id, "f1", b"one").await.unwrap();
    ctx.put(&sub.id, "f2", b"two!").await.unwrap();
    s.set_prop(&f1.id, "urn:x", "p", "<x:p>1</x:p>")
        .await
        .unwrap();

    let copy = s
        .copy_node(&src.id, root, "dst", false, true)
        .await
        .unwrap();
    assert_ne!(copy.id, src.id);
    assert_eq!(copy.size, 7);
    let c1 = s.resolve(&space.id, "/dst/f1").await.unwrap();
    let c2 = s.resolve(&space.id, "/dst/sub/f2").await.unwrap();
    assert_ne!(c1.id, f1.id);
    assert_eq!(ctx.read(&c1.id).await, b"one");
    assert_eq!(ctx.read(&c2.id).await, b"two!");
    assert_eq!(c1.checksums, f1.checksums);
    assert_eq!(
        s.props(&c1.id).await.unwrap().len(),
        1,
        "dead props are copied"
    );
    assert_eq!(
        s.stat(&sub.id).await.unwrap().parent_id.as_deref(),
        Some(src.id.as_str())
    );

    // Depth 0: the directory only.
    let shallow = s
        .copy_node(&src.id, root, "shallow", false, false)
        .await
        .unwrap();
    assert_eq!(shallow.size, 0);
    assert!(s.list_children(&shallow.id).await.unwrap().is_empty());

    // No overwrite → AlreadyExists; overwrite replaces.
    assert!(matches!(
        s.copy_node(&f1.id, root, "dst", false, true).await,
        Err(StoreError::AlreadyExists)
    ));
    let over = s.copy_node(&f1.id, root, "dst", true, true).await.unwrap();
    assert_eq!(over.kind, NodeKind::File);
    assert_eq!(s.space(&space.id).await.unwrap().used, 7 + 3);
    // Into itself: refused.
    assert!(matches!(
        s.copy_node(&src.id, &sub.id, "loop", false, true).await,
        Err(StoreError::Forbidden(_))
    ));

    // Across spaces: allowed, sizes land in the target space.
    let other = s.create_project_space("shared", "uma", None).await.unwrap();
    let x = s
        .copy_node(&src.id, &other.root_id, "imported", false, true)
        .await
        .unwrap();
    assert_eq!(x.space_id, other.id);
    assert_eq!(s.space(&other.id).await.unwrap().used, 7);
    assert_eq!(
        ctx.read(&s.resolve(&other.id, "/imported/sub/f2").await.unwrap().id)
            .await,
        b"two!"
    );
    assert_eq!(s.space(&space.id).await.unwrap().used, 10);
}

pub async fn dead_properties(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("victor").await.unwrap();
    let d = s.mkdir(&space.root_id, "d").await.unwrap();
    let f = ctx.put(&d.id, "f", b"x").await.unwrap();
    let g = ctx.put(&d.id, "g", b"y").await.unwrap();
    assert!(s.props(&f.id).await.unwrap().is_empty());
    s.set_prop(&f.id, "urn:a", "one", "<a:one>1</a:one>")
        .await
        .unwrap();
    s.set_prop(&f.id, "urn:a", "one", "<a:one>uno</a:one>")
        .await
        .unwrap();
    s.set_prop(&g.id, "urn:b", "two", "2").await.unwrap();
    assert_eq!(
        s.props(&f.id).await.unwrap(),
        vec![DeadProp {
            namespace: "urn:a".into(),
            name: "one".into(),
            value: "<a:one>uno</a:one>".into()
        }]
    );
    let mut all = s.children_props(&d.id).await.unwrap();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(all.len(), 2);

    s.patch_props(
        &f.id,
        &[
            PropPatch::Remove {
                namespace: "urn:a".into(),
                name: "one".into(),
            },
            PropPatch::Set {
                namespace: "urn:c".into(),
                name: "three".into(),
                value: "3".into(),
            },
            PropPatch::Remove {
                namespace: "urn:none".into(),
                name: "absent".into(),
            },
        ],
    )
    .await
    .unwrap();
    let names: Vec<_> = s
        .props(&f.id)
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["three"]);
    s.remove_prop(&f.id, "urn:c", "three").await.unwrap();
    assert!(s.props(&f.id).await.unwrap().is_empty());
    let missing = "0123456789abcdef0123456789abcdef";
    assert!(matches!(s.props(missing).await, Err(StoreError::NotFound)));
    assert!(matches!(
        s.set_prop(missing, "urn:a", "x", "1").await,
        Err(StoreError::NotFound)
    ));
    // Properties go with the node.
    s.delete(&g.id).await.unwrap();
    assert!(s.children_props(&d.id).await.unwrap().is_empty());
}

pub async fn personal_space_idempotent(ctx: &Ctx) {
    let s = &ctx.store;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let store = s.clone();
        tasks.push(tokio::spawn(
            async move { store.personal_space("wendy").await },
        ));
    }
    let mut ids = HashSet::new();
    for t in tasks {
        ids.insert(t.await.unwrap().unwrap().id);
    }
    assert_eq!(ids.len(), 1);
    let id = ids.into_iter().next().unwrap();
    let space = s.space(&id).await.unwrap();
    assert_eq!(space.kind, SpaceKind::Personal);
    assert_eq!(space.owner, "wendy");
    assert_eq!(space.root_id, space.id);
    assert_eq!(space.quota, None);
    assert_eq!(space.used, 0);
    let root = s.stat(&space.root_id).await.unwrap();
    assert!(root.is_root() && root.is_dir());
    // `empty` (what lets the search crawler skip a new home) holds until the root has an
    // entry, an empty folder included, and again once the last one is gone.
    assert!(space.empty);
    let dir = s.mkdir(&space.root_id, "d").await.unwrap();
    let listed = s.list_spaces(Some("wendy")).await.unwrap();
    assert!(listed.iter().all(|sp| !sp.empty), "{listed:?}");
    s.delete(&dir.id).await.unwrap();
    assert!(s.space(&id).await.unwrap().empty);
    s.create_project_space("p", "wendy", Some(10))
        .await
        .unwrap();
    s.personal_space("xavier").await.unwrap();
    assert_eq!(s.list_spaces(Some("wendy")).await.unwrap().len(), 2);
    assert_eq!(s.list_spaces(None).await.unwrap().len(), 3);
    s.delete_space(&id).await.unwrap();
    assert!(matches!(s.space(&id).await, Err(StoreError::NotFound)));
    assert_eq!(s.list_spaces(None).await.unwrap().len(), 2);
}

pub async fn resolve_and_path(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("yvonne").await.unwrap();
    let a = s.mkdir(&space.root_id, "a").await.unwrap();
    let b = s.mkdir(&a.id, "b c").await.unwrap();
    let f = ctx.put(&b.id, "f.txt", b"x").await.unwrap();
    for path in ["/a/b c/f.txt", "a/b c/f.txt", "//a//b c/f.txt"] {
        assert_eq!(s.resolve(&space.id, path).await.unwrap().id, f.id, "{path}");
    }
    assert_eq!(s.resolve(&space.id, "/").await.unwrap().id, space.root_id);
    assert_eq!(s.resolve(&space.id, "/a/").await.unwrap().id, a.id);
    assert!(matches!(
        s.resolve(&space.id, "/a/nope").await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        s.resolve(&space.id, "/a/b c/f.txt/deeper").await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        s.resolve("0123456789abcdef0123456789abcdef", "/").await,
        Err(StoreError::NotFound)
    ));
    // A node id is not a space id.
    assert!(matches!(
        s.resolve(&a.id, "/").await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(s.path_of(&f.id).await.unwrap(), "/a/b c/f.txt");
    assert_eq!(s.path_of(&space.root_id).await.unwrap(), "/");
}

/// Every change shows in the next resolution of every path it touched: the file, its new and
/// old names, its ancestors (whose etags move on). With a store that caches resolutions
/// (`StoreConfig::sole_writer`), each of these checks reads after a commit.
pub async fn resolutions_follow_every_change(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("rosa").await.unwrap();
    let etag = |path: &'static str| async move {
        s.resolve_personal("rosa", path)
            .await
            .unwrap()
            .map(|(_, n)| n.etag)
    };
    let d = s.mkdir(&space.root_id, "d").await.unwrap();
    let v1 = ctx.put(&d.id, "f", b"one").await.unwrap();
    let root_before = etag("/").await.unwrap();
    assert_eq!(etag("/d/f").await, Some(v1.etag.clone()));
    assert_eq!(s.resolve(&space.id, "/d/f").await.unwrap().etag, v1.etag);

    let v2 = ctx.put(&d.id, "f", b"two").await.unwrap();
    assert_ne!(v2.etag, v1.etag);
    assert_eq!(etag("/d/f").await, Some(v2.etag.clone()));
    assert_eq!(s.resolve(&space.id, "/d/f").await.unwrap().etag, v2.etag);
    let root_after = etag("/").await.unwrap();
    assert_ne!(root_after, root_before, "the root's etag moved on");

    s.move_node(&v1.id, &space.root_id, "g", false)
        .await
        .unwrap();
    assert_eq!(etag("/d/f").await, None, "the old name is gone");
    assert!(matches!(
        s.resolve(&space.id, "/d/f").await,
        Err(StoreError::NotFound)
    ));
    let (_, moved) = s.resolve_personal("rosa", "/g").await.unwrap().unwrap();
    assert_eq!(moved.id, v1.id);
    assert_ne!(etag("/").await.unwrap(), root_after);

    s.delete(&v1.id).await.unwrap();
    assert_eq!(etag("/g").await, None);
    s.delete(&d.id).await.unwrap();
    assert!(matches!(
        s.resolve(&space.id, "/d").await,
        Err(StoreError::NotFound)
    ));

    // Readers resolving all the time, racing each commit (a read that saw the old version may
    // try to keep it just after the commit): once a put has returned, resolving its path shows
    // what it wrote.
    let d = s.mkdir(&space.root_id, "busy").await.unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut readers = tokio::task::JoinSet::new();
    for _ in 0..3 {
        let (store, stop) = (s.clone(), stop.clone());
        readers.spawn(async move {
            let mut reads = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = store.resolve_personal("rosa", "/busy/f").await.unwrap();
                reads += 1;
                tokio::task::yield_now().await;
            }
            reads
        });
    }
    for i in 0..200u8 {
        let node = s
            .put_file(&d.id, "f", body(vec![i], 1), PutOptions::default())
            .await
            .unwrap();
        let (_, seen) = s
            .resolve_personal("rosa", "/busy/f")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            seen.etag, node.etag,
            "put {i}: resolution behind the database"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    while let Some(reads) = readers.join_next().await {
        assert!(reads.unwrap() > 0);
    }
}

pub async fn mtime_settable(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("zoe").await.unwrap();
    let t = UNIX_EPOCH + Duration::from_secs(1_796_215_407);
    let f = s
        .put_file(
            &space.root_id,
            "f",
            body(b"x".to_vec(), 1),
            PutOptions {
                mtime: Some(t),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(f.mtime, t);
    assert_eq!(s.stat(&f.id).await.unwrap().mtime, t);
    let g = ctx.put(&space.root_id, "g", b"y").await.unwrap();
    let age = SystemTime::now()
        .duration_since(g.mtime)
        .unwrap_or_default();
    assert!(age < Duration::from_secs(60));
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn naive_adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for &x in data {
        a = (a + u32::from(x)) % 65521;
        b = (b + a) % 65521;
    }
    (b << 16) | a
}

/// `list_dir` serves listings from memory under the directory's etag: after every kind of
/// change — by this store or by a second one on the same database, as a second storage-users
/// instance would — it gives exactly what a fresh read gives, and an unchanged directory is
/// served from memory.
pub async fn cached_listings_follow_every_change(ctx: &Ctx) {
    let s = &ctx.store;
    let other = ctx.reopen().await;
    let space = s.personal_space("lister").await.unwrap();
    let root = &space.root_id;
    let d = s.mkdir(root, "d").await.unwrap();
    let elsewhere = s.mkdir(root, "elsewhere").await.unwrap();
    // Both listing forms, each checked against a fresh read of the database.
    let d_id = d.id.as_str();
    let check = |step: &'static str| async move {
        let d = d_id;
        let dir = s.stat(d).await.unwrap();
        let cached = s.list_dir(&dir, true).await.unwrap();
        let fresh = s.list_children_with(d, true).await.unwrap();
        assert_eq!(*cached, fresh, "{step}");
        // A display listing may carry more than it promises (a full one cached before).
        let shown = |nodes: &[arca_store_files::Node]| -> Vec<_> {
            nodes
                .iter()
                .map(|n| {
                    (
                        n.id.clone(),
                        n.name.clone(),
                        n.kind,
                        n.size,
                        n.mtime,
                        n.etag.clone(),
                    )
                })
                .collect()
        };
        let cached = s.list_dir(&dir, false).await.unwrap();
        let fresh = s.list_children_with(d, false).await.unwrap();
        assert_eq!(shown(&cached), shown(&fresh), "{step} (display listing)");
        let names: Vec<_> = s
            .list_dir(&dir, true)
            .await
            .unwrap()
            .iter()
            .map(|n| n.name.clone())
            .collect();
        names
    };

    assert!(check("empty").await.is_empty());
    let f = ctx.put(&d.id, "f", b"one").await.unwrap();
    assert_eq!(check("put").await, ["f"]);

    // Unchanged: the very same listing, not a new read.
    let dir = s.stat(&d.id).await.unwrap();
    let (a, b) = (
        s.list_dir(&dir, false).await.unwrap(),
        s.list_dir(&dir, false).await.unwrap(),
    );
    assert!(
        std::sync::Arc::ptr_eq(&a, &b),
        "an unchanged directory is served from memory"
    );

    ctx.put(&d.id, "f", b"longer content").await.unwrap();
    assert_eq!(check("overwrite").await, ["f"]);
    let dir = s.stat(&d.id).await.unwrap();
    assert_eq!(s.list_dir(&dir, true).await.unwrap()[0].size, 14);

    let sub = s.mkdir(&d.id, "sub").await.unwrap();
    assert_eq!(check("mkdir").await, ["f", "sub"]);
    ctx.put(&sub.id, "deep", b"below").await.unwrap();
    assert_eq!(
        check("a put one level down changes sub's size").await,
        ["f", "sub"]
    );
    s.move_node(&sub.id, &d.id, "renamed", false).await.unwrap();
    assert_eq!(check("rename").await, ["f", "renamed"]);
    s.move_node(&f.id, &elsewhere.id, "f", false).await.unwrap();
    assert_eq!(check("move away").await, ["renamed"]);
    s.copy_node(&f.id, &d.id, "copy", false, true)
        .await
        .unwrap();
    assert_eq!(check("copy in").await, ["copy", "renamed"]);
    s.delete(&sub.id).await.unwrap();
    assert_eq!(check("delete").await, ["copy"]);

    // Changes made through another store on the same database.
    let g = other
        .put_file(
            &d.id,
            "g",
            body(b"from the other".to_vec(), 4),
            PutOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(check("put by another instance").await, ["copy", "g"]);
    other.delete(&g.id).await.unwrap();
    assert_eq!(check("delete by another instance").await, ["copy"]);
    other.close().await;

    let file = s.stat(&f.id).await.unwrap();
    assert!(matches!(
        s.list_dir(&file, false).await,
        Err(StoreError::NotADirectory)
    ));
}

/// Project spaces' members: the best role of a user and their groups, the spaces they are in,
/// the creator as first manager, the last manager kept, disabling, and members going with
/// their space.
pub async fn space_members_and_disabling(ctx: &Ctx) {
    use arca_store_files::{MemberKind, Role};

    let store = ctx.store.clone();
    let space = store
        .create_project_space("Alpha", "u-admin", None)
        .await
        .unwrap();
    let other = store
        .create_project_space("Beta", "u-admin", None)
        .await
        .unwrap();
    let (user, group) = (MemberKind::User, MemberKind::Group);
    store
        .set_member(&space.id, user, "u-ann", Role::Manager)
        .await
        .unwrap();
    store
        .set_member(&space.id, group, "g-team", Role::Editor)
        .await
        .unwrap();
    store
        .set_member(&space.id, user, "u-bob", Role::Viewer)
        .await
        .unwrap();
    store
        .set_member(&other.id, user, "u-bob", Role::Manager)
        .await
        .unwrap();

    // The best of a user's own role and their groups'.
    let team = vec!["g-team".to_owned()];
    let role = |u: &'static str, g: Vec<String>| {
        let (store, id) = (store.clone(), space.id.clone());
        async move { store.member_role(&id, u, &g).await.unwrap() }
    };
    assert_eq!(role("u-bob", vec![]).await, Some(Role::Viewer));
    assert_eq!(role("u-bob", team.clone()).await, Some(Role::Editor));
    assert_eq!(role("u-cat", team.clone()).await, Some(Role::Editor));
    assert_eq!(role("u-cat", vec!["g-x".into()]).await, None);
    assert_eq!(role("u-ann", team.clone()).await, Some(Role::Manager));

    let spaces: Vec<String> = store
        .member_spaces("u-cat", &team)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(spaces, vec![space.id.clone()]);
    assert_eq!(store.member_spaces("u-bob", &[]).await.unwrap().len(), 2);

    // The creator is the first manager.
    let members = store.space_members(&space.id).await.unwrap();
    assert_eq!(members.len(), 4);
    assert!(
        members[..2].iter().all(|m| m.role == Role::Manager),
        "managers first"
    );
    assert_eq!(role("u-admin", vec![]).await, Some(Role::Manager));
    store
        .remove_member(&space.id, user, "u-admin")
        .await
        .unwrap();

    // The last manager stays: neither demoted nor removed.
    assert!(matches!(
        store
            .set_member(&space.id, user, "u-ann", Role::Editor)
            .await,
        Err(StoreError::Forbidden(_))
    ));
    assert!(matches!(
        store.remove_member(&space.id, user, "u-ann").await,
        Err(StoreError::Forbidden(_))
    ));
    store
        .set_member(&space.id, user, "u-bob", Role::Manager)
        .await
        .unwrap();
    store.remove_member(&space.id, user, "u-ann").await.unwrap();
    assert_eq!(role("u-ann", vec![]).await, None);
    assert!(matches!(
        store.remove_member(&space.id, user, "u-ann").await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store.set_member("nope", user, "u-ann", Role::Viewer).await,
        Err(StoreError::NotFound)
    ));

    // Disabled and back; personal spaces are never disabled.
    store.set_disabled(&space.id, true).await.unwrap();
    assert!(store.space(&space.id).await.unwrap().disabled.is_some());
    store.set_disabled(&space.id, false).await.unwrap();
    assert!(store.space(&space.id).await.unwrap().disabled.is_none());
    let home = store.personal_space("u-ann").await.unwrap();
    assert!(matches!(
        store.set_disabled(&home.id, true).await,
        Err(StoreError::NotFound)
    ));

    // Members go with their space.
    store.delete_space(&space.id).await.unwrap();
    assert!(
        store
            .member_spaces("u-cat", &team)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Paths deeper than one statement joins (SQLite: 64 tables) resolve piecewise, in statements
/// of bounded size: at 65, 100 and 130 segments, through a file on the way (nothing), a
/// missing segment past the first piece, and in a personal space (whose one-statement way
/// declines a deep path, so the general way takes it).
pub async fn deep_paths_resolve_piecewise(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("deep").await.unwrap();
    let mut dir = s.stat(&space.root_id).await.unwrap();
    let mut path = String::new();
    let mut at_depth = Vec::new();
    for depth in 1..=130 {
        let name = format!("d{depth}");
        dir = s.mkdir(&dir.id, &name).await.unwrap();
        path.push('/');
        path.push_str(&name);
        if matches!(depth, 31..=33 | 64 | 65 | 100 | 130) {
            at_depth.push((path.clone(), dir.id.clone()));
        }
    }
    for (p, id) in &at_depth {
        assert_eq!(&s.resolve(&space.id, p).await.unwrap().id, id, "{p}");
    }
    let file = ctx.put(&dir.id, "leaf.txt", b"deep").await.unwrap();
    let leaf = format!("{path}/leaf.txt");
    assert_eq!(s.resolve(&space.id, &leaf).await.unwrap().id, file.id);
    assert_eq!(s.path_of(&file.id).await.unwrap(), leaf);
    assert!(matches!(
        s.resolve(&space.id, &format!("{leaf}/below")).await,
        Err(StoreError::NotFound)
    ));
    let (p64, _) = &at_depth[3];
    assert!(matches!(
        s.resolve(&space.id, &format!("{p64}/nope/d66/d67")).await,
        Err(StoreError::NotFound)
    ));
    assert!(s.resolve_personal("deep", &leaf).await.unwrap().is_none());
    assert!(
        s.resolve_personal_entry("deep", &format!("{path}/new.txt"))
            .await
            .unwrap()
            .is_none()
    );
}

/// Bodies declared at most `inline_max` bytes long are kept in the metadata database with
/// their node; one byte more goes to the blob store. Both read back the same, whole and in
/// ranges, with the same checksums; overwrites, copies and the collector treat them alike.
pub async fn inline_bodies(ctx: &Ctx) {
    let s = &ctx.store;
    let space = s.personal_space("ines").await.unwrap();
    let root = &space.root_id;
    let max = arca_store_files::DEFAULT_INLINE_MAX as usize;
    let declared = |len: usize| PutOptions {
        content_length: Some(len as u64),
        ..PutOptions::default()
    };
    let files_before = ctx.blob_files().await.len();

    // At the threshold (sent in 4 KiB chunks, joined), one byte over, and empty.
    let at = content(11, max);
    let over = content(12, max + 1);
    let f_at = s
        .put_file(root, "at", body(at.clone(), 4096), declared(max))
        .await
        .unwrap();
    assert_eq!(
        ctx.blob_files().await.len(),
        files_before,
        "a body at the threshold writes no blob file"
    );
    let f_over = s
        .put_file(root, "over", body(over.clone(), 4096), declared(max + 1))
        .await
        .unwrap();
    assert_eq!(
        ctx.blob_files().await.len(),
        files_before + 1,
        "one byte over the threshold goes to the blob store"
    );
    let f_empty = s
        .put_file(root, "empty", body(Vec::new(), 1), declared(0))
        .await
        .unwrap();
    assert_eq!(ctx.read(&f_at.id).await, at);
    assert_eq!(ctx.read(&f_over.id).await, over);
    assert_eq!(ctx.read(&f_empty.id).await, b"");
    for (start, end) in [(0u64, 0u64), (100, 4195), (max as u64 - 10, max as u64 - 1)] {
        assert_eq!(
            read_all(s, &f_at.id, Some((start, end))).await,
            &at[start as usize..=end as usize],
            "range {start}-{end} of an inline body"
        );
    }
    // The same checksums as a streamed body of the same bytes.
    let streamed = s
        .put_file(
            root,
            "streamed",
            body(at.clone(), 1000),
            PutOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(f_at.checksums, streamed.checksums);
    assert_eq!(
        f_at.checksums.as_ref().unwrap().sha1,
        hex(&Sha1::digest(&at))
    );
    assert_eq!(s.stat(&f_at.id).await.unwrap().size, max as u64);

    // A body that is not what it declared is refused and the old content stays.
    for sent in [max - 1, max + 1] {
        let r = s
            .put_file(root, "at", body(content(13, sent), 4096), declared(max))
            .await;
        assert!(
            matches!(r, Err(StoreError::LengthMismatch { .. })),
            "declared {max}, sent {sent}: {r:?}"
        );
    }
    let checked = PutOptions {
        expected_checksum: Some((ChecksumAlgo::Sha1, "00".repeat(20))),
        ..declared(3)
    };
    let r = s
        .put_file(root, "at", body(b"abc".to_vec(), 3), checked)
        .await;
    assert!(
        matches!(r, Err(StoreError::ChecksumMismatch { .. })),
        "{r:?}"
    );
    assert_eq!(ctx.read(&f_at.id).await, at);

    // A copy shares the inline blob; overwriting both releases it once, and the collector
    // frees it (its row) without touching the blob store.
    let copy = s
        .copy_node(&f_at.id, root, "at-copy", false, true)
        .await
        .unwrap();
    assert_eq!(copy.blob_id(), f_at.blob_id());
    s.put_file(root, "at", body(b"new".to_vec(), 3), declared(3))
        .await
        .unwrap();
    assert_eq!(s.collect_orphans(Duration::ZERO).await.unwrap(), 0);
    assert_eq!(ctx.read(&copy.id).await, at);
    s.put_file(root, "at-copy", body(b"newer".to_vec(), 5), declared(5))
        .await
        .unwrap();
    assert_eq!(s.collect_orphans(Duration::ZERO).await.unwrap(), 1);
    assert_eq!(ctx.read(&f_at.id).await, b"new");
    assert_eq!(ctx.read(&copy.id).await, b"newer");
    assert_eq!(ctx.blob_files().await.len(), files_before + 2);

    // Concurrent inline puts to one name: each commits whole, the last one wins.
    let puts = (0..16u8).map(|i| {
        let s = s.clone();
        let root = root.clone();
        async move {
            let data = vec![i; 1000 + usize::from(i)];
            let len = data.len();
            s.put_file(&root, "race", body(data, 300), declared(len))
                .await
        }
    });
    let done = futures::future::join_all(puts).await;
    assert!(done.iter().all(|r| r.is_ok()), "{done:?}");
    let race = s.stat(&done[0].as_ref().unwrap().id).await.unwrap();
    let got = ctx.read(&race.id).await;
    let i = got[0];
    assert_eq!(got, vec![i; 1000 + usize::from(i)]);
    assert_eq!(race.size, got.len() as u64);
}
