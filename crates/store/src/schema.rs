//! Migrations by owner, and the take-over of databases made before the split.
//!
//! Each store owns its tables and migrates them alone, recording what it applied in a
//! migrations table of its own ([`Owner::migrations_table`]). So two owners may share one
//! database (their tables and their version numbers never meet), and each database holds only
//! what its owners made.
//!
//! **Before the split** one migration set made every table in every database, recorded in
//! sqlx's `_sqlx_migrations`: storage-users' database had empty users and share tables,
//! storage-system's an empty file tree. The owners' sets keep the versions of that set (its
//! `0002_users_locks` became version 2 of both: users for records, locks for files), so a
//! pre-split database is taken over at its first open ([`take_over`]):
//! 1. the owner copies the rows of its versions from `_sqlx_migrations` into its own table,
//!    with its own checksums (the pre-split code validated the old ones at every open, so a
//!    version recorded there is a migration that ran); its own migrator then applies what the
//!    database had not reached yet;
//! 2. the other owner's tables are dropped only when that owner has not taken them over and
//!    they hold nothing: that is the other service's half of a database it never used. They are
//!    kept when they hold data, which means both services were pointed at this one database
//!    (e.g. the same `database` URL for both): the other service takes them over when it opens;
//! 3. `_sqlx_migrations` is dropped once neither owner needs it any more.
//!
//! By default the two services never share one: storage-users keeps `DATA_DIR/storage-users/
//! meta.db`, storage-system `DATA_DIR/storage-system/meta.db` (see `database_url`).
//!
//! The take-over runs in one transaction under a lock every opener takes (`BEGIN IMMEDIATE` on
//! SQLite; a transaction-scoped advisory lock on PostgreSQL), so instances and owners opening
//! one database at once take turns, and a crash leaves it as it was.

use std::borrow::Cow;

use sqlx::migrate::{Migrate as _, Migration, MigrationType, Migrator};
use sqlx::{AnyConnection, AnyPool, Row as _, SqlSafeStr as _};

use crate::StoreError;
use crate::db::Dialect;

/// One migration: version, name, SQL.
pub type Step = (i64, &'static str, &'static str);

/// The migrations table of the single set before the split.
const PRE_SPLIT_TABLE: &str = "_sqlx_migrations";

/// The advisory lock PostgreSQL openers take while they look at and take over a pre-split
/// database: any fixed key (it reads "arcastor").
const TAKE_OVER_LOCK: i64 = 0x6172_6361_7374_6f72;

/// Who owns a set of tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// arca-store-files, for storage-users.
    Files,
    /// arca-store-records, for storage-system.
    Records,
}

impl Owner {
    /// Where this owner records the migrations it applied.
    pub fn migrations_table(self) -> &'static str {
        match self {
            Owner::Files => "_arca_files_migrations",
            Owner::Records => "_arca_records_migrations",
        }
    }

    fn other(self) -> Owner {
        match self {
            Owner::Files => Owner::Records,
            Owner::Records => Owner::Files,
        }
    }

    /// The tables this owner had in the pre-split set, those that refer to others first (the
    /// order to drop them in), each with the condition under which a row of it is data: the
    /// row the migration itself put in `credentials_generation` is not.
    fn pre_split_tables(self) -> &'static [(&'static str, &'static str)] {
        const ANY: &str = "1 = 1";
        match self {
            Owner::Files => &[
                ("props", ANY),
                ("space_details", ANY),
                ("trash", ANY),
                ("versions", ANY),
                ("nodes", ANY),
                ("blobs", ANY),
                ("spaces", ANY),
                ("locks", ANY),
                ("upload_chunks", ANY),
                ("upload_parts", ANY),
                ("uploads", ANY),
            ],
            Owner::Records => &[
                ("share_states", ANY),
                ("shares", ANY),
                ("credential_events", ANY),
                ("credentials_generation", "gen <> 0"),
                ("app_tokens", ANY),
                ("group_members", ANY),
                ("groups", ANY),
                ("users", ANY),
            ],
        }
    }
}

/// An owner's migrations, per dialect.
#[derive(Debug, Clone, Copy)]
pub struct Schema {
    pub owner: Owner,
    pub sqlite: &'static [Step],
    pub postgres: &'static [Step],
}

impl Schema {
    fn migrator(&self, dialect: Dialect) -> Migrator {
        let mut migrator = migrator(match dialect {
            Dialect::Sqlite => self.sqlite,
            Dialect::Postgres => self.postgres,
        });
        // "Dangerous" only in that a table already holding another migrator's rows would be
        // misread; this name is the owner's alone.
        migrator.dangerous_set_table_name(self.owner.migrations_table());
        migrator
    }
}

/// A migrator of `steps` that records in sqlx's default table, `_sqlx_migrations`: what
/// [`Schema`] builds on (with its owner's table), and how the pre-split set was run.
pub fn migrator(steps: &[Step]) -> Migrator {
    Migrator::with_migrations(
        steps
            .iter()
            .map(|&(version, name, sql)| {
                Migration::new(
                    version,
                    Cow::Borrowed(name),
                    MigrationType::Simple,
                    sql.into_sql_str(),
                    false,
                )
            })
            .collect(),
    )
}

/// Brings the database to `schema`'s latest version, taking a pre-split database over first.
pub(crate) async fn migrate(
    pool: &AnyPool,
    dialect: Dialect,
    schema: &Schema,
) -> Result<(), StoreError> {
    let migrator = schema.migrator(dialect);
    take_over(pool, dialect, schema.owner, &migrator).await?;
    migrator.run(pool).await?;
    Ok(())
}

/// Steps 1 to 3 of the module doc, when the database is a pre-split one; nothing otherwise.
async fn take_over(
    pool: &AnyPool,
    dialect: Dialect,
    owner: Owner,
    migrator: &Migrator,
) -> Result<(), StoreError> {
    let mut tx = match dialect {
        // Taking the write lock at BEGIN: openers of one file queue here (busy_timeout)
        // instead of failing when both read first and then write.
        Dialect::Sqlite => pool.begin_with("BEGIN IMMEDIATE").await?,
        Dialect::Postgres => {
            let mut tx = pool.begin().await?;
            // The function returns void, which the Any driver cannot decode: count its row.
            sqlx::query("SELECT count(*) FROM pg_advisory_xact_lock($1)")
                .bind(TAKE_OVER_LOCK)
                .execute(&mut *tx)
                .await?;
            tx
        }
    };
    if !table_exists(&mut tx, dialect, PRE_SPLIT_TABLE).await? {
        tx.commit().await?;
        return Ok(());
    }
    let mine = owner.migrations_table();
    if !table_exists(&mut tx, dialect, mine).await? {
        tx.ensure_migrations_table(mine).await?;
        let done: Vec<i64> = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT version FROM {PRE_SPLIT_TABLE} WHERE success = TRUE"
        )))
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| r.try_get::<i64, _>(0))
        .collect::<Result<_, _>>()?;
        let mut adopted = Vec::new();
        for m in migrator.iter().filter(|m| done.contains(&m.version)) {
            tx.skip(mine, m).await?;
            adopted.push(m.version);
        }
        tracing::info!(?owner, versions = ?adopted, "took over the tables of a pre-split database");
    }
    let other = owner.other();
    let other_gone = if table_exists(&mut tx, dialect, other.migrations_table()).await? {
        // Taken over already: its tables are its own now.
        true
    } else if holds_data(&mut tx, dialect, other).await? {
        tracing::info!(
            owner = ?other,
            "this database holds the other store's data too: kept for it to take over"
        );
        false
    } else {
        for (table, _) in other.pre_split_tables() {
            if table_exists(&mut tx, dialect, table).await? {
                sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE {table}")))
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tracing::info!(owner = ?other, "dropped the other store's empty pre-split tables");
        true
    };
    if other_gone {
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE {PRE_SPLIT_TABLE}")))
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}

async fn table_exists(
    c: &mut AnyConnection,
    dialect: Dialect,
    table: &str,
) -> Result<bool, StoreError> {
    let sql = match dialect {
        Dialect::Sqlite => "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = $1",
        Dialect::Postgres => {
            "SELECT 1 FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_name = $1"
        }
    };
    Ok(sqlx::query(sql)
        .bind(table)
        .fetch_optional(&mut *c)
        .await?
        .is_some())
}

/// Whether any of `owner`'s pre-split tables holds a row of data.
async fn holds_data(
    c: &mut AnyConnection,
    dialect: Dialect,
    owner: Owner,
) -> Result<bool, StoreError> {
    for (table, data) in owner.pre_split_tables() {
        if !table_exists(c, dialect, table).await? {
            continue;
        }
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT 1 FROM {table} WHERE {data} LIMIT 1"
        )))
        .fetch_optional(&mut *c)
        .await?;
        if row.is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}
