//! Blob storage on a real S3 server: the scenarios of `scenarios/` that write, read, overwrite,
//! fail or collect blobs, run with SQLite metadata and blobs in a bucket of a private
//! `moto_server` (see `support/s3.rs`), plus what only S3 has: multipart uploads that must be
//! completed or aborted, and a bucket that must exist.
//!
//! One test runs everything in turn against one server (moto takes seconds to start), each
//! scenario on a fresh bucket and database. It fails when moto_server is missing.

mod scenarios;
mod support;

use std::time::{Duration, Instant};

use arca_store_files::{BlobConfig, PutOptions, Store, StoreConfig, StoreError};
use bytes::Bytes;
use futures::SinkExt;
use support::s3::{Moto, s3_for_tests};
use support::{Ctx, content, read_all};

macro_rules! on_s3 {
    ($moto:expr, $($name:ident),* $(,)?) => {
        $(
            eprintln!("s3: {}", stringify!($name));
            let ctx = Ctx::sqlite_s3($moto.bucket().await).await;
            scenarios::$name(&ctx).await;
            ctx.store.close().await;
        )*
    };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3() {
    let moto = s3_for_tests().await;
    on_s3!(
        moto,
        etag_propagates_to_root,
        checksums_match_content,
        quota_exceeded_writes_nothing,
        if_match_mismatch_keeps_old_content,
        concurrent_puts_are_atomic,
        concurrent_if_match_one_winner,
        failing_body_keeps_old_content,
        checksum_and_length_mismatch_keep_old_content,
        orphans_collected,
        killed_upload_leaves_only_orphans,
        range_reads,
        large_file_multipart_round_trip,
        copy_tree,
        inline_bodies,
    );
    eprintln!("s3: multipart_uploads_complete_or_abort");
    multipart_uploads_complete_or_abort(&moto).await;
    eprintln!("s3: missing_bucket_fails_open");
    missing_bucket_fails_open(&moto).await;
}

/// A body with a declared length over 5 MiB goes up in parts (5 MiB + 3 bytes: two), and an
/// upload that fails or is dropped after its first part leaves no incomplete multipart upload —
/// which S3 would keep, unseen, until a lifecycle rule removed it.
async fn multipart_uploads_complete_or_abort(moto: &Moto) {
    let bucket = moto.bucket().await;
    let name = bucket.options.bucket.clone();
    let ctx = Ctx::sqlite_s3(bucket.clone()).await;
    let s = &ctx.store;
    let space = s.personal_space("sybil").await.unwrap();
    let root = space.root_id.clone();

    let data = content(5, (5 << 20) + 3);
    let f = s
        .put_file(
            &root,
            "big",
            support::body(data.clone(), 64 << 10),
            PutOptions {
                content_length: Some(data.len() as u64),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(ctx.read(&f.id).await == data, "round trip differs");
    let blob = f.blob_id().unwrap();
    let key = format!("{}/{blob}", &blob[..2]);
    assert_eq!(bucket.keys().await, std::slice::from_ref(&key));
    let etag = bucket.head(&key).await.e_tag.unwrap_or_default();
    assert!(etag.ends_with("-2\""), "a two-part upload's ETag: {etag}");
    assert_eq!(moto.open_multipart_uploads(&name).await, 0);

    // A body that fails after its first part went up: put_file aborts the upload.
    let good = content(6, 6 << 20);
    let err = s
        .put_file(
            &root,
            "big",
            support::failing_body(good),
            PutOptions {
                content_length: Some(20 << 20),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Body(_)), "{err:?}");
    assert_eq!(moto.open_multipart_uploads(&name).await, 0);

    // A put dropped mid-body (the request went away): the writer's Drop aborts the upload.
    let (mut tx, rx) = futures::channel::mpsc::channel::<Result<Bytes, std::io::Error>>(2);
    let store = s.clone();
    let dir = root.clone();
    let task = tokio::spawn(async move {
        let opts = PutOptions {
            content_length: Some(20 << 20),
            ..Default::default()
        };
        store.put_file(&dir, "big", rx, opts).await
    });
    for i in 0..6u64 {
        tx.send(Ok(Bytes::from(content(10 + i, 1 << 20))))
            .await
            .unwrap();
    }
    wait_for(
        || async { moto.open_multipart_uploads(&name).await == 1 },
        "upload started",
    )
    .await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    wait_for(
        || async { moto.open_multipart_uploads(&name).await == 0 },
        "upload aborted",
    )
    .await;

    // The first version is intact, and only the abandoned rows are left to collect.
    assert!(ctx.read(&f.id).await == data);
    assert_eq!(s.collect_orphans(Duration::ZERO).await.unwrap(), 1);
    assert_eq!(bucket.keys().await, [key]);
    assert!(read_all(s, &f.id, Some((5 << 20, (5 << 20) + 2))).await == data[5 << 20..]);
    ctx.store.close().await;
}

/// A bucket that does not exist is refused when the store opens, not at the first upload.
async fn missing_bucket_fails_open(moto: &Moto) {
    let tmp = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", tmp.path().join("m.db").display());
    let blobs = BlobConfig::S3(moto.options("no-such-bucket"));
    let err = Store::open(StoreConfig::with_blobs(url, blobs))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Config(_)), "{err:?}");
    assert!(err.to_string().contains("no-such-bucket"), "{err}");
}

/// Polls `check` (each poll a request to moto) until it holds, for at most 30 s.
async fn wait_for<F, Fut>(check: F, what: &str)
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
