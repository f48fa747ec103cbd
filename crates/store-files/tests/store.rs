//! Storage behaviour on real databases and a real blob directory.
//!
//! Every scenario (in `scenarios/`) runs on SQLite (one test each, in parallel; and again on a
//! store caching path resolutions as storage-users opens it, `sqlite_sole_writer`) and on
//! PostgreSQL (one test, `postgres`, running all scenarios in turn, each on a fresh database of a
//! private server — see `arca_test_servers::Postgres`; it fails when PostgreSQL is missing).
//! `s3.rs` runs the blob scenarios against an S3 server.

mod scenarios;
mod support;

use arca_store_files::{PutOptions, Store, StoreConfig, StoreError};
use support::{Ctx, body};

macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let ctx = super::Ctx::sqlite().await;
                    super::scenarios::$name(&ctx).await;
                }
            )*
        }

        mod sqlite_sole_writer {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let ctx = super::Ctx::sqlite_sole_writer().await;
                    super::scenarios::$name(&ctx).await;
                }
            )*
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn postgres() {
            let pg = arca_test_servers::postgres_for_tests().await;
            $(
                eprintln!("postgres: {}", stringify!($name));
                let url = pg.fresh_database().await.expect("fresh database");
                let ctx = Ctx::with_url(&url).await;
                scenarios::$name(&ctx).await;
                ctx.store.close().await;
                drop(ctx);
                pg.drop_database(&url).await.expect("drop database");
            )*
        }
    };
}

scenarios!(
    etag_propagates_to_root,
    ids_stable_across_move_and_rename,
    dir_sizes_are_subtree_sizes,
    checksums_match_content,
    quota_exceeded_writes_nothing,
    stale_prechecks_let_nothing_through,
    if_match_mismatch_keeps_old_content,
    concurrent_puts_are_atomic,
    concurrent_if_match_one_winner,
    failing_body_keeps_old_content,
    checksum_and_length_mismatch_keep_old_content,
    orphans_collected,
    killed_upload_leaves_only_orphans,
    range_reads,
    large_file_multipart_round_trip,
    name_validation,
    mkdir_and_put_errors,
    move_rules,
    copy_tree,
    dead_properties,
    personal_space_idempotent,
    resolve_and_path,
    mtime_settable,
    resolutions_follow_every_change,
    cached_listings_follow_every_change,
    space_members_and_disabling,
    deep_paths_resolve_piecewise,
    inline_bodies,
);

/// `default_personal_quota` (`storage-users.personal_quota` in the config) is the quota of every
/// personal space created after; project spaces get theirs when created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_personal_quota_applies() {
    let tmp = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", tmp.path().join("m.db").display());
    let mut cfg = StoreConfig::new(url, tmp.path().join("blobs"));
    cfg.default_personal_quota = Some(1000);
    let store = Store::open(cfg).await.unwrap();
    let space = store.personal_space("zoe").await.unwrap();
    assert_eq!(space.quota, Some(1000));
    let put = |name: &'static str, len: usize| {
        let store = store.clone();
        let root = space.root_id.clone();
        async move {
            store
                .put_file(&root, name, body(vec![1; len], 100), PutOptions::default())
                .await
        }
    };
    let err = put("big", 1001).await.unwrap_err();
    assert!(matches!(err, StoreError::QuotaExceeded), "{err:?}");
    put("fits", 1000).await.unwrap();
    let project = store.create_project_space("p", "zoe", None).await.unwrap();
    assert_eq!(project.quota, None);
    store.close().await;
}

/// A SQLite file that a sole writer (`StoreConfig::sole_writer`) has open is not opened by a
/// second one until the first is gone: each caches what it resolved and would miss the other's
/// commits, so the second waits for the first's lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sole_writer_waits_for_the_first_to_close() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("m.db");
    let mut cfg = StoreConfig::new(
        format!("sqlite://{}?mode=rwc", db.display()),
        tmp.path().join("blobs"),
    );
    cfg.sole_writer = true;
    let first = Store::open(cfg.clone()).await.unwrap();
    first.personal_space("ida").await.unwrap();
    assert!(tmp.path().join("m.db.lock").exists());

    let mut second = tokio::spawn(Store::open(cfg));
    // A bound on waiting to see it wait, not a stand-in for readiness: an open that does not
    // wait takes milliseconds.
    let waited = tokio::time::timeout(std::time::Duration::from_millis(500), &mut second).await;
    assert!(waited.is_err(), "the second store opened beside the first");

    first.close().await;
    drop(first);
    let second = second.await.unwrap().unwrap();
    let space = second.resolve_personal("ida", "/").await.unwrap();
    assert!(space.is_some(), "the first store's space is there");
    second.close().await;
}
