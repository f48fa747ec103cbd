//! Races between instances: two `Store`s (two connection pools, as two storage-users processes
//! have) on one PostgreSQL database and one blob directory, hammering the same row at once.
//!
//! - WebDAV LOCK: many concurrent exclusive LOCKs of one path → exactly one is granted. The
//!   conflict check and the insert must not interleave across pools (read committed lets two
//!   transactions both see "no conflict" unless the space row serialises them).
//! - Resumable uploads: many concurrent appends at one offset → exactly one counts, the others
//!   learn the offset that won and leave no part behind; the committed file is exactly the
//!   winners' bytes in order.
//!
//! PostgreSQL is a private server (`arca_test_servers::Postgres`; the test fails when it is
//! missing). SQLite has a single writer per database and cannot race.

mod support;

use std::sync::Arc;
use std::time::Instant;

use arca_store_files::{Appended, Lock, PutOptions, Store, StoreConfig, StoreError, Upload};
use bytes::Bytes;
use futures::TryStreamExt;
use tokio::sync::Barrier;

/// Contenders per round, split over the two stores.
const CONTENDERS: usize = 24;

/// Two stores on one database and one blob directory.
async fn two_instances(url: &str, blobs: &std::path::Path) -> [Store; 2] {
    let open = || async {
        let cfg = StoreConfig::new(url.to_owned(), blobs.to_path_buf());
        Store::open(cfg).await.expect("open store")
    };
    [open().await, open().await]
}

fn lock(token: String, space_id: &str, root: &str, deep: bool) -> Lock {
    Lock {
        token,
        space_id: space_id.to_owned(),
        root_path: root.to_owned(),
        exclusive: true,
        deep,
        owner_xml: String::new(),
        holder: "alice".into(),
        expires_ms: 0,
    }
}

/// Runs `CONTENDERS` lock attempts at once (alternating instances); returns (granted, refused).
async fn lock_round(stores: &[Store; 2], locks: Vec<Lock>) -> (usize, usize) {
    let barrier = Arc::new(Barrier::new(locks.len()));
    let tasks: Vec<_> = locks
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            let store = stores[i % 2].clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                store.create_lock(&l).await
            })
        })
        .collect();
    let (mut granted, mut refused) = (0, 0);
    for t in tasks {
        match t.await.expect("lock task") {
            Ok(()) => granted += 1,
            Err(StoreError::Locked) => refused += 1,
            Err(e) => panic!("unexpected LOCK failure: {e}"),
        }
    }
    (granted, refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_exclusive_locks_through_two_pools_grant_exactly_one() {
    let pg = arca_test_servers::postgres_for_tests().await;
    let url = pg.fresh_database().await.expect("fresh database");
    let tmp = tempfile::tempdir().expect("temp dir");
    let stores = two_instances(&url, &tmp.path().join("blobs")).await;
    let space = stores[0].personal_space("alice").await.expect("space");

    let rounds = 20;
    let started = Instant::now();
    for round in 0..rounds {
        // Same path, all exclusive.
        let path = format!("/doc-{round}.txt");
        let locks = (0..CONTENDERS)
            .map(|i| {
                lock(
                    format!("opaquelocktoken:{round}-{i}"),
                    &space.id,
                    &path,
                    false,
                )
            })
            .collect();
        let (granted, refused) = lock_round(&stores, locks).await;
        assert_eq!(
            (granted, refused),
            (1, CONTENDERS - 1),
            "round {round}: {granted} exclusive locks granted on {path}"
        );
        // Overlapping, not equal: a deep lock of a folder against locks of a file inside it.
        let dir = format!("/dir-{round}");
        let locks = (0..CONTENDERS)
            .map(|i| {
                let token = format!("opaquelocktoken:{round}-deep-{i}");
                if i % 3 == 0 {
                    lock(token, &space.id, &dir, true)
                } else {
                    lock(token, &space.id, &format!("{dir}/f.txt"), false)
                }
            })
            .collect();
        let (granted, _) = lock_round(&stores, locks).await;
        assert_eq!(granted, 1, "round {round}: overlapping locks granted");
    }
    let live = stores[1].space_locks(&space.id).await.expect("locks");
    assert_eq!(live.len(), 2 * rounds);
    eprintln!(
        "{} rounds of {CONTENDERS} concurrent exclusive LOCKs through two pools: exactly one \
         granted each time ({:?})",
        2 * rounds,
        started.elapsed()
    );
    for s in &stores {
        s.close().await;
    }
    pg.drop_database(&url).await.expect("drop database");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_appends_through_two_pools_count_exactly_one_each_time() {
    let pg = arca_test_servers::postgres_for_tests().await;
    let url = pg.fresh_database().await.expect("fresh database");
    let tmp = tempfile::tempdir().expect("temp dir");
    let blobs = tmp.path().join("blobs");
    let stores = two_instances(&url, &blobs).await;
    let space = stores[0].personal_space("alice").await.expect("space");
    let chunk = 1000usize;
    let rounds = 8usize;
    let mut upload = Upload {
        id: Upload::new_id(),
        user: "alice".into(),
        space_id: space.id.clone(),
        parent_id: space.root_id.clone(),
        name: "raced.bin".into(),
        path: "/raced.bin".into(),
        owner: "alice".into(),
        length: (chunk * rounds) as u64,
        offset: 0,
        if_match: String::new(),
        mtime_ns: 0,
        expires: u64::MAX >> 2,
        checksum: String::new(),
        hash_state: None,
    };
    stores[0].create_upload(&upload).await.expect("create");

    let mut expected = Vec::new();
    for round in 0..rounds {
        let barrier = Arc::new(Barrier::new(CONTENDERS));
        let tasks: Vec<_> = (0..CONTENDERS)
            .map(|i| {
                let store = stores[i % 2].clone();
                let barrier = barrier.clone();
                let at = upload.clone();
                // Each contender's bytes differ, so the file shows whose counted.
                let data = Bytes::from(vec![(round * CONTENDERS + i) as u8; chunk]);
                tokio::spawn(async move {
                    let mut part = store.upload_part(&at);
                    barrier.wait().await;
                    part.write(data.clone()).await?;
                    store
                        .append_upload_part(part)
                        .await
                        .map(|a| (a, data.to_vec()))
                })
            })
            .collect();
        let end = ((round + 1) * chunk) as u64;
        let mut winners = Vec::new();
        for t in tasks {
            match t.await.expect("append task").expect("append") {
                (Appended::At(at), data) => {
                    assert_eq!(at, end);
                    winners.push(data);
                }
                (Appended::Moved(at), _) => assert_eq!(at, end, "round {round}"),
                (Appended::Gone, _) => panic!("the upload vanished"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: appends counted");
        expected.extend_from_slice(&winners[0]);
        upload = stores[round % 2]
            .upload(&upload.id)
            .await
            .expect("read")
            .expect("upload");
        assert_eq!(upload.offset, end);
    }
    // Every losing part was deleted: one object per round remains.
    let mut parts = Vec::new();
    support::walk(&blobs.join("uploads"), &mut parts);
    assert_eq!(parts.len(), rounds, "{parts:?}");

    let node = stores[1]
        .commit_upload(&upload, PutOptions::default())
        .await
        .expect("commit");
    let got: Vec<Bytes> = stores[0]
        .open_read(&node.id, None)
        .await
        .expect("read")
        .stream
        .try_collect()
        .await
        .expect("stream");
    assert_eq!(got.concat(), expected);
    let mut left = Vec::new();
    support::walk(&blobs.join("uploads"), &mut left);
    assert!(left.is_empty(), "parts left after the commit: {left:?}");
    assert!(stores[0].upload(&upload.id).await.expect("read").is_none());
    eprintln!("{rounds} rounds of {CONTENDERS} concurrent appends: one counted each time");
    for s in &stores {
        s.close().await;
    }
    pg.drop_database(&url).await.expect("drop database");
}
