//! Databases made before the split into owners open with the owners' stores, keep their data
//! and end up with only their owners' tables (see `arca_store::schema`), on SQLite and on a
//! private PostgreSQL (see `arca_test_servers::Postgres`).
//!
//! The pre-split databases are made as the code before the split made them: its migration set,
//! kept verbatim under `fixtures/pre-split-migrations`, run by sqlx into `_sqlx_migrations`;
//! then rows written as that code wrote them. Three shapes:
//! - storage-users' database: a file tree, empty identity and share tables;
//! - storage-system's database: users, groups, tokens, shares, an empty file tree;
//! - one database both services were pointed at: both hold data, so neither store may drop
//!   the other's tables.

mod support;

use std::collections::BTreeSet;

use arca_store_files::{Store, StoreConfig};
use arca_store_records::{Records, RecordsConfig, ShareFilter};
use sqlx::migrate::Migrator;
use sqlx::{AnyPool, Row as _, SqlSafeStr as _};

/// The pre-split migration set, as the code before the split embedded it.
fn pre_split_migrator(postgres: bool) -> Migrator {
    macro_rules! steps {
        ($dialect:literal) => {
            vec![
                (
                    1,
                    "init",
                    include_str!(concat!(
                        "fixtures/pre-split-migrations/",
                        $dialect,
                        "/0001_init.sql"
                    )),
                ),
                (
                    2,
                    "users_locks",
                    include_str!(concat!(
                        "fixtures/pre-split-migrations/",
                        $dialect,
                        "/0002_users_locks.sql"
                    )),
                ),
                (
                    3,
                    "identity",
                    include_str!(concat!(
                        "fixtures/pre-split-migrations/",
                        $dialect,
                        "/0003_identity.sql"
                    )),
                ),
                (
                    4,
                    "space_details",
                    include_str!(concat!(
                        "fixtures/pre-split-migrations/",
                        $dialect,
                        "/0004_space_details.sql"
                    )),
                ),
                (
                    10,
                    "shares",
                    include_str!(concat!(
                        "fixtures/pre-split-migrations/",
                        $dialect,
                        "/0010_shares.sql"
                    )),
                ),
                (
                    12,
                    "uploads",
                    include_str!(concat!(
                        "fixtures/pre-split-migrations/",
                        $dialect,
                        "/0012_uploads.sql"
                    )),
                ),
                (
                    20,
                    "undo",
                    include_str!(concat!(
                        "fixtures/pre-split-migrations/",
                        $dialect,
                        "/0020_undo.sql"
                    )),
                ),
                (
                    25,
                    "upload_folders",
                    include_str!(concat!(
                        "fixtures/pre-split-migrations/",
                        $dialect,
                        "/0025_upload_folders.sql"
                    )),
                ),
            ]
        };
    }
    let mut steps: Vec<(i64, &'static str, &'static str)> = if postgres {
        steps!("postgres")
    } else {
        steps!("sqlite")
    };
    if !postgres {
        steps.push((
            26,
            "place_claim",
            include_str!("fixtures/pre-split-migrations/sqlite/0026_place_claim.sql"),
        ));
    }
    arca_store::schema::migrator(&steps)
}

/// A file tree as storage-users wrote it: alice's space with `/Docs/a.txt`, a dead property on
/// the file, a lock on `/Docs`.
const FILES_ROWS: &str = "
INSERT INTO spaces (id, kind, owner, name, quota, seq, created)
    VALUES ('s1', 'personal', 'alice', 'alice', 1000, 3, 1);
INSERT INTO blobs (id, state, size, created) VALUES ('b1', 1, 5, 1);
INSERT INTO nodes (id, space_id, parent_id, name, kind, size, mtime, etag, blob_id, sha1, md5, adler32, created)
    VALUES ('s1', 's1', NULL, '', 1, 5, 1, 'e-root', NULL, NULL, NULL, NULL, 1);
INSERT INTO nodes (id, space_id, parent_id, name, kind, size, mtime, etag, blob_id, sha1, md5, adler32, created)
    VALUES ('d1', 's1', 's1', 'Docs', 1, 5, 1, 'e-docs', NULL, NULL, NULL, NULL, 1);
INSERT INTO nodes (id, space_id, parent_id, name, kind, size, mtime, etag, blob_id, sha1, md5, adler32, created)
    VALUES ('f1', 's1', 'd1', 'a.txt', 2, 5, 1, 'e-file', 'b1', 'aa', 'bb', 'cc', 1);
INSERT INTO props (node_id, ns, name, value) VALUES ('f1', 'urn:x', 'color', 'red');
INSERT INTO locks (token, space_id, root_path, exclusive, deep, owner_xml, holder, expires)
    VALUES ('opaquelocktoken:1', 's1', '/Docs', 1, 1, '', 'alice', 0);
";

/// The platform's records as storage-system wrote them: alice in a group with an app token,
/// two credential changes, a share with alice's answer to it.
const RECORDS_ROWS: &str = "
INSERT INTO users (id, username, display_name, mail, admin, password_hash, credential_version, created)
    VALUES ('u1', 'alice', 'Alice', 'alice@example.org', 1, '$argon2id$x', 2, 1);
INSERT INTO groups (id, display_name, description, created) VALUES ('g1', 'team', 'the team', 1);
INSERT INTO group_members (group_id, user_id) VALUES ('g1', 'u1');
INSERT INTO app_tokens (id, user_id, hash, label, created, expires)
    VALUES ('t1', 'u1', 'abcd', 'laptop', 1, 0);
UPDATE credentials_generation SET gen = 2 WHERE id = 1;
INSERT INTO credential_events (gen, user_id, at) VALUES (1, 'u1', 1);
INSERT INTO credential_events (gen, user_id, at) VALUES (2, 'u1', 2);
INSERT INTO shares (id, share_type, space_id, node_id, is_dir, target, owner_id, creator_id, grantee_id, permissions, created)
    VALUES ('sh1', 0, 'storage-users$s1', 'storage-users$s1!d1', 1, 'Docs', 'alice', 'alice', 'bob', 15, 1);
INSERT INTO share_states (share_id, user_id, state) VALUES ('sh1', 'bob', 0);
";

const FILES_TABLES: &[&str] = &[
    "_arca_files_migrations",
    "blobs",
    "locks",
    "nodes",
    "props",
    "space_details",
    "space_members",
    "spaces",
    "trash",
    "trash_bursts",
    "upload_chunks",
    "upload_parts",
    "uploads",
    "versions",
];

const RECORDS_TABLES: &[&str] = &[
    "_arca_records_migrations",
    "app_tokens",
    "credential_events",
    "credentials_generation",
    "group_members",
    "groups",
    "share_states",
    "shares",
    "users",
];

/// Makes `url` a pre-split database holding `rows`, up to `up_to` when given (an older
/// database that had not reached the last migrations).
async fn pre_split(url: &str, rows: &[&'static str], up_to: Option<i64>) {
    sqlx::any::install_default_drivers();
    let pool = AnyPool::connect(url).await.expect("connect");
    let migrator = pre_split_migrator(url.starts_with("postgres"));
    match up_to {
        Some(v) => migrator.run_to(v, &pool).await,
        None => migrator.run(&pool).await,
    }
    .expect("pre-split migrations");
    for sql in rows {
        sqlx::raw_sql(sql.into_sql_str())
            .execute(&pool)
            .await
            .expect("pre-split rows");
    }
    pool.close().await;
}

async fn tables(url: &str) -> BTreeSet<String> {
    let pool = AnyPool::connect(url).await.expect("connect");
    let sql = if url.starts_with("postgres") {
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = current_schema()"
    } else {
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    };
    let names = sqlx::query(sql)
        .fetch_all(&pool)
        .await
        .expect("list tables")
        .iter()
        .map(|r| r.try_get::<String, _>(0).expect("table name"))
        .collect();
    pool.close().await;
    names
}

fn set(groups: &[&[&str]]) -> BTreeSet<String> {
    groups
        .iter()
        .flat_map(|g| g.iter().map(|t| (*t).to_owned()))
        .collect()
}

async fn open_files(url: &str, blobs: &std::path::Path) -> Store {
    Store::open(StoreConfig::new(url, blobs))
        .await
        .unwrap_or_else(|e| panic!("open the files store on {url}: {e}"))
}

async fn open_records(url: &str) -> Records {
    Records::open(RecordsConfig::new(url))
        .await
        .unwrap_or_else(|e| panic!("open the records on {url}: {e}"))
}

/// Everything [`FILES_ROWS`] wrote, read through the files store.
async fn files_kept(s: &Store) {
    let spaces = s.list_spaces(Some("alice")).await.unwrap();
    assert_eq!(spaces.len(), 1);
    assert_eq!(spaces[0].id, "s1");
    assert_eq!(spaces[0].quota, Some(1000));
    assert_eq!(spaces[0].used, 5);
    assert_eq!(spaces[0].etag, "e-root");
    let file = s.resolve("s1", "/Docs/a.txt").await.unwrap();
    assert_eq!(file.id, "f1");
    assert_eq!(file.size, 5);
    assert_eq!(file.etag, "e-file");
    assert_eq!(file.blob_id(), Some("b1"));
    let props = s.props("f1").await.unwrap();
    assert_eq!(props.len(), 1);
    assert_eq!(
        (props[0].namespace.as_str(), props[0].value.as_str()),
        ("urn:x", "red")
    );
    let locks = s.space_locks("s1").await.unwrap();
    assert_eq!(locks.len(), 1);
    assert_eq!(locks[0].root_path, "/Docs");
    assert!(locks[0].deep);
    // And it still writes: a new directory beside the old ones.
    s.mkdir("s1", "New").await.unwrap();
}

/// Everything [`RECORDS_ROWS`] wrote, read through the records store.
async fn records_kept(r: &Records) {
    let alice = r.user_by_name("alice").await.unwrap();
    assert_eq!(alice.id, "u1");
    assert!(alice.admin);
    assert_eq!(alice.credential_version, 2);
    let groups = r.user_groups("u1").await.unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].display_name, "team");
    assert_eq!(r.app_tokens("u1").await.unwrap().len(), 1);
    assert_eq!(r.credentials_generation().await.unwrap(), 2);
    assert_eq!(r.credential_events_after(0, 10).await.unwrap().len(), 2);
    let shares = r.list_shares(&ShareFilter::default()).await.unwrap();
    assert_eq!(shares.len(), 1);
    assert_eq!(shares[0].id, "sh1");
    assert_eq!(r.share_states("bob").await.unwrap().len(), 1);
    // And it still writes.
    r.create_user("bob", "Bob", "", "$argon2id$y", false)
        .await
        .unwrap();
}

/// storage-users' database: the files store keeps the tree and drops the empty records.
async fn users_database(url: &str, blobs: &std::path::Path, up_to: Option<i64>) {
    pre_split(url, &[FILES_ROWS], up_to).await;
    let s = open_files(url, blobs).await;
    files_kept(&s).await;
    s.close().await;
    assert_eq!(tables(url).await, set(&[FILES_TABLES]));
    // A second open finds nothing left to take over.
    let s = open_files(url, blobs).await;
    files_kept_again(&s).await;
    s.close().await;
}

async fn files_kept_again(s: &Store) {
    assert_eq!(s.resolve("s1", "/Docs/a.txt").await.unwrap().id, "f1");
    assert!(s.resolve("s1", "/New").await.unwrap().is_dir());
}

/// storage-system's database: the records store keeps the records and drops the empty tree.
async fn system_database(url: &str) {
    pre_split(url, &[RECORDS_ROWS], None).await;
    let r = open_records(url).await;
    records_kept(&r).await;
    r.close().await;
    assert_eq!(tables(url).await, set(&[RECORDS_TABLES]));
    let r = open_records(url).await;
    assert_eq!(r.list_users().await.unwrap().len(), 2);
    r.close().await;
}

/// One database for both services: each store takes its own tables over and leaves the
/// other's; the pre-split migrations table goes once both have.
async fn shared_database(url: &str, blobs: &std::path::Path) {
    pre_split(url, &[FILES_ROWS, RECORDS_ROWS], None).await;
    let s = open_files(url, blobs).await;
    files_kept(&s).await;
    let mut all_and_pre_split = set(&[FILES_TABLES, RECORDS_TABLES]);
    all_and_pre_split.remove("_arca_records_migrations");
    all_and_pre_split.insert("_sqlx_migrations".to_owned());
    assert_eq!(tables(url).await, all_and_pre_split);
    let r = open_records(url).await;
    records_kept(&r).await;
    assert_eq!(tables(url).await, set(&[FILES_TABLES, RECORDS_TABLES]));
    s.close().await;
    r.close().await;
    let (s, r) = (open_files(url, blobs).await, open_records(url).await);
    files_kept_again(&s).await;
    assert_eq!(r.list_users().await.unwrap().len(), 2);
    s.close().await;
    r.close().await;
}

fn sqlite_url(dir: &tempfile::TempDir, name: &str) -> String {
    format!("sqlite://{}?mode=rwc", dir.path().join(name).display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    let tmp = tempfile::tempdir().unwrap();
    let blobs = tmp.path().join("blobs");
    users_database(&sqlite_url(&tmp, "users.db"), &blobs, None).await;
    system_database(&sqlite_url(&tmp, "system.db")).await;
    shared_database(&sqlite_url(&tmp, "shared.db"), &blobs).await;
}

/// A database from before chunked uploads (up to version 20): the files store takes over what
/// it had and applies the rest (25, and on SQLite 26), as the code before the split would have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_older() {
    let tmp = tempfile::tempdir().unwrap();
    let url = sqlite_url(&tmp, "users.db");
    users_database(&url, &tmp.path().join("blobs"), Some(20)).await;
    let pool = AnyPool::connect(&url).await.unwrap();
    sqlx::query("SELECT place_claim, label FROM uploads")
        .fetch_all(&pool)
        .await
        .expect("the columns of 25 and 26");
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let pg = arca_test_servers::postgres_for_tests().await;
    let tmp = tempfile::tempdir().unwrap();
    let blobs = tmp.path().join("blobs");
    let url = pg.fresh_database().await.expect("fresh database");
    users_database(&url, &blobs, None).await;
    pg.drop_database(&url).await.expect("drop database");
    let url = pg.fresh_database().await.expect("fresh database");
    users_database(&url, &blobs, Some(20)).await;
    pg.drop_database(&url).await.expect("drop database");
    let url = pg.fresh_database().await.expect("fresh database");
    system_database(&url).await;
    pg.drop_database(&url).await.expect("drop database");
    let url = pg.fresh_database().await.expect("fresh database");
    shared_database(&url, &blobs).await;
    pg.drop_database(&url).await.expect("drop database");
}
