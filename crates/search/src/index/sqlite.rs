//! The instance's own index: one SQLite database at `data_dir/search/index.db`.
//!
//! `docs` holds the documents; `docs_fts` is an FTS5 table over name and content with the
//! trigram tokenizer, row for row (same rowid), so `LIKE '%term%'` on either column is
//! answered from the index for terms of three characters or more. WAL lets queries read while
//! a crawl writes.

use std::collections::HashMap;
use std::path::Path;
use std::str::FromStr as _;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
};
use sqlx::{Row as _, Sqlite};

use super::{
    Bind, Change, Dialect, Doc, Hit, IndexError, Known, Order, Reach, common_statements, hit,
    known_of, search_sql,
};
use crate::kql::Expr;

#[derive(Clone)]
pub struct SqliteIndex {
    pool: SqlitePool,
}

const SCHEMA: [&str; 5] = [
    "CREATE TABLE IF NOT EXISTS docs (
        rowid INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        space_id TEXT NOT NULL,
        parent_id TEXT NOT NULL,
        path TEXT NOT NULL,
        name TEXT NOT NULL,
        is_dir INTEGER NOT NULL,
        size INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        etag TEXT NOT NULL,
        mime TEXT NOT NULL,
        owner_id TEXT NOT NULL
    )",
    "CREATE INDEX IF NOT EXISTS docs_space_path ON docs (space_id, path)",
    "CREATE INDEX IF NOT EXISTS docs_parent ON docs (parent_id)",
    // Trigram: substrings of names and contents, as `name:"*term*"` asks.
    "CREATE VIRTUAL TABLE IF NOT EXISTS docs_fts USING fts5(name, content, tokenize='trigram')",
    "CREATE TABLE IF NOT EXISTS spaces (
        id TEXT PRIMARY KEY,
        etag TEXT NOT NULL,
        disabled INTEGER NOT NULL
    )",
];

/// The methods of [`super::Index`], which documents them.
impl SqliteIndex {
    common_statements!(SqliteConnection);

    /// Opens (creating) the index in `dir`.
    pub async fn open(dir: &Path) -> Result<Self, IndexError> {
        let options = SqliteConnectOptions::from_str("sqlite://")?
            .filename(dir.join("index.db"))
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // Derived data: what a power loss takes back, the next crawl finds again.
            .synchronous(sqlx::sqlite::SqliteSynchronous::Normal)
            .busy_timeout(std::time::Duration::from_secs(5));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await?;
        for statement in SCHEMA {
            sqlx::query(statement).execute(&pool).await?;
        }
        Ok(Self { pool })
    }

    pub(super) async fn drop_space(&self, id: &str) -> Result<(), IndexError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "DELETE FROM docs_fts WHERE rowid IN (SELECT rowid FROM docs WHERE space_id = ?)",
        )
        .bind(id)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM docs WHERE space_id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM spaces WHERE id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn search(
        &self,
        expr: &Expr,
        reach: &[Reach],
        order: Order,
        limit: u32,
    ) -> Result<(Vec<Hit>, u64), IndexError> {
        let (sql, binds) = search_sql(Dialect::Sqlite, expr, reach, order);
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for b in &binds {
            query = bind(query, b);
        }
        let rows = query.bind(i64::from(limit)).fetch_all(&self.pool).await?;
        let total: i64 = rows.first().map_or(0, |r| r.get(12));
        let hits = rows.iter().map(hit).collect();
        Ok((hits, u64::try_from(total).unwrap_or(0)))
    }
}

/// [`Change::Upsert`] on `c`: the document's row, and its FTS row replaced (the content kept
/// when `content` is `None`).
async fn upsert_in(
    c: &mut SqliteConnection,
    doc: &Doc,
    content: Option<&str>,
) -> Result<(), IndexError> {
    let rowid: i64 =
        super::bind_doc!(sqlx::query(
        "INSERT INTO docs (id, space_id, parent_id, path, name, is_dir, size, mtime_ns, etag,
                           mime, owner_id)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (id) DO UPDATE SET space_id = excluded.space_id,
            parent_id = excluded.parent_id, path = excluded.path, name = excluded.name,
            is_dir = excluded.is_dir, size = excluded.size, mtime_ns = excluded.mtime_ns,
            etag = excluded.etag, mime = excluded.mime, owner_id = excluded.owner_id
         RETURNING rowid",
    ), doc)
        .fetch_one(&mut *c)
        .await?
        .get(0);
    let kept: Option<String> = match content {
        Some(_) => None,
        None => sqlx::query("SELECT content FROM docs_fts WHERE rowid = ?")
            .bind(rowid)
            .fetch_optional(&mut *c)
            .await?
            .and_then(|r| r.get::<Option<String>, _>(0)),
    };
    sqlx::query("DELETE FROM docs_fts WHERE rowid = ?")
        .bind(rowid)
        .execute(&mut *c)
        .await?;
    sqlx::query("INSERT INTO docs_fts (rowid, name, content) VALUES (?, ?, ?)")
        .bind(rowid)
        .bind(&doc.name)
        .bind(content.map(str::to_owned).or(kept).unwrap_or_default())
        .execute(&mut *c)
        .await?;
    Ok(())
}

/// [`Change::Remove`] on `c`: a document and everything below its path.
async fn remove_in(c: &mut SqliteConnection, space_id: &str, path: &str) -> Result<(), IndexError> {
    let (from, to) = super::subtree_range(path);
    // A range of `docs_space_path` (byte order), not a scan of the space's documents.
    let matching = "space_id = ?1 AND (path = ?2 OR (path >= ?3 AND path < ?4))";
    // Only constant SQL is pasted together here; every value is bound.
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DELETE FROM docs_fts WHERE rowid IN (SELECT rowid FROM docs WHERE {matching})"
    )))
    .bind(space_id)
    .bind(path)
    .bind(&from)
    .bind(&to)
    .execute(&mut *c)
    .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DELETE FROM docs WHERE {matching}"
    )))
    .bind(space_id)
    .bind(path)
    .bind(&from)
    .bind(&to)
    .execute(&mut *c)
    .await?;
    Ok(())
}

fn bind<'q>(
    q: sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments>,
    b: &Bind,
) -> sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments> {
    match b {
        Bind::Text(t) => q.bind(t.clone()),
        Bind::Int(n) => q.bind(*n),
    }
}
