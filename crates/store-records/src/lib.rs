//! arca-store-records: the platform records store of storage-system.
//!
//! It owns the records the platform keeps about its users, not their files: **users** (with
//! argon2id password hashes), **groups** and their members, **app tokens**, the **credential
//! change feed** that tells proxies which cached logins to forget, and the **share records** the
//! sharing service reads and writes through storage-system. They live in arca-store's metadata
//! database (SQLite or PostgreSQL) with this crate's own migrations (`migrations/`, recorded in
//! `_arca_records_migrations`, see `arca_store::schema`). It stores no file contents: no blob
//! store is opened.
//!
//! Main types: [`Records`] (every operation), [`RecordsConfig`], [`User`], [`Group`],
//! [`AppToken`], [`ShareRow`], and arca-store's [`StoreError`].

mod apptokens;
mod credentials;
mod groups;
mod shares;
mod users;

use std::sync::Arc;

use arca_store::db::{Db, ReadConn};
use arca_store::{Owner, Schema};

pub(crate) use arca_store::ids;
pub use arca_store::{Result, StoreError};

pub use apptokens::AppToken;
pub use credentials::CredentialEvent;
pub use groups::Group;
pub use shares::{ShareFilter, ShareRow};
pub use users::User;

/// The records' tables. Versions 2 and 3 are the pre-split set's identity tables and 10 its
/// share records (see `arca_store::schema`), so a database made before the split keeps them.
const SCHEMA: Schema = Schema {
    owner: Owner::Records,
    sqlite: &[
        (
            2,
            "users",
            include_str!("../migrations/sqlite/0002_users.sql"),
        ),
        (
            3,
            "identity",
            include_str!("../migrations/sqlite/0003_identity.sql"),
        ),
        (
            10,
            "shares",
            include_str!("../migrations/sqlite/0010_shares.sql"),
        ),
        (
            30,
            "roles",
            include_str!("../migrations/sqlite/0030_roles.sql"),
        ),
    ],
    postgres: &[
        (
            2,
            "users",
            include_str!("../migrations/postgres/0002_users.sql"),
        ),
        (
            3,
            "identity",
            include_str!("../migrations/postgres/0003_identity.sql"),
        ),
        (
            10,
            "shares",
            include_str!("../migrations/postgres/0010_shares.sql"),
        ),
        (
            30,
            "roles",
            include_str!("../migrations/postgres/0030_roles.sql"),
        ),
    ],
};

/// How to open [`Records`].
#[derive(Debug, Clone)]
pub struct RecordsConfig {
    /// `sqlite://PATH?mode=rwc` or `postgres://USER@HOST:PORT/DB`.
    pub db_url: String,
    /// Pool size; default 8 for SQLite (one writer plus readers), 16 for PostgreSQL.
    pub max_db_connections: Option<u32>,
    /// Labels this store's metrics (`arca_db_operations_total{store}`); the service's name.
    pub name: String,
}

impl RecordsConfig {
    pub fn new(db_url: impl Into<String>) -> Self {
        RecordsConfig {
            db_url: db_url.into(),
            max_db_connections: None,
            name: "records".to_owned(),
        }
    }

    /// The records of storage-system's config section: its database, or SQLite in `dir`
    /// (`DATA_DIR/storage-system`) when none is set. Its `blobs` keys are not read.
    pub fn from_section(section: &arca_config::StorageSection, dir: &std::path::Path) -> Self {
        let mut cfg = Self::new(arca_store::database_url(section, dir));
        cfg.max_db_connections = section.database_max_connections;
        if let Some(name) = dir.file_name() {
            cfg.name = name.to_string_lossy().into_owned();
        }
        cfg
    }
}

/// The platform records. Cheap to clone; all clones share one pool.
#[derive(Clone)]
pub struct Records {
    db: Arc<Db>,
}

impl std::fmt::Debug for Records {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Records")
            .field("dialect", &self.db.dialect)
            .finish()
    }
}

impl Records {
    /// Opens the database, running the records' migrations.
    pub async fn open(cfg: RecordsConfig) -> Result<Self> {
        let db = Db::open(&cfg.db_url, cfg.max_db_connections, &cfg.name, &SCHEMA).await?;
        Ok(Records { db: Arc::new(db) })
    }

    /// Whether the metadata database answers now (for `/readyz`).
    pub async fn ping(&self) -> Result<()> {
        self.db().ping().await
    }

    /// Closes the pool, waiting for connections in use to be returned.
    pub async fn close(&self) {
        self.db.close().await;
    }

    pub(crate) fn db(&self) -> &Db {
        &self.db
    }

    pub(crate) async fn read_conn(&self) -> Result<ReadConn> {
        self.db.acquire().await
    }
}
