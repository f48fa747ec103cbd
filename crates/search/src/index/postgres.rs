//! The index shared by every search instance: tables in the schema `arca_search` of the
//! PostgreSQL database `search.database` names.
//!
//! `docs` holds the documents with their text in a column of their own; pg_trgm GIN indexes
//! over `name` and `content` answer `ILIKE '%term%'` on either. The extension is created if
//! the database lacks it (PostgreSQL 13 and later let a database's owner do that: it is a
//! trusted extension). Every connection reads `arca_search` first, then `public` (where an
//! existing pg_trgm may live), so the statements name the tables as SQLite's do.
//!
//! Writes come from one instance at a time (the crawler runs under the leader lease), reads
//! from all of them.

use std::collections::HashMap;
use std::str::FromStr as _;
use std::time::Duration;

use sqlx::Row as _;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};

use super::{
    Bind, Change, Dialect, Doc, Hit, IndexError, Known, Order, Reach, common_statements, hit,
    known_of, search_sql, tuple,
};
use crate::kql::Expr;

const SCHEMA_NAME: &str = "arca_search";
/// Connections per instance: queries are short, and one crawler writes.
const MAX_CONNECTIONS: u32 = 8;
/// How long a connection may take to be had from the pool (the database away): a query then
/// fails instead of hanging.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// Serialises instances starting together: concurrent `CREATE … IF NOT EXISTS` of one object
/// can fail on PostgreSQL's catalog. Any fixed number; this one is "arcasrch" in ASCII.
const SCHEMA_LOCK: i64 = 0x6172_6361_7372_6368;

const SCHEMA: [&str; 9] = [
    "CREATE SCHEMA IF NOT EXISTS arca_search",
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE TABLE IF NOT EXISTS docs (
        id TEXT PRIMARY KEY,
        space_id TEXT NOT NULL,
        parent_id TEXT NOT NULL,
        path TEXT NOT NULL,
        name TEXT NOT NULL,
        is_dir BIGINT NOT NULL,
        size BIGINT NOT NULL,
        mtime_ns BIGINT NOT NULL,
        etag TEXT NOT NULL,
        mime TEXT NOT NULL,
        owner_id TEXT NOT NULL,
        content TEXT NOT NULL DEFAULT ''
    )",
    // Byte order ("C"), so that a subtree is one range of it: `remove` asks for the paths
    // from "P/" up to "P0" ('0' follows '/'), which a linguistic collation does not keep
    // together. It replaces the index of the first version, in the database's collation.
    "CREATE INDEX IF NOT EXISTS docs_space_path_c ON docs (space_id, path COLLATE \"C\")",
    "DROP INDEX IF EXISTS docs_space_path",
    "CREATE INDEX IF NOT EXISTS docs_parent ON docs (parent_id)",
    // Trigram: substrings of names and contents, as `name:"*term*"` asks. Without
    // `fastupdate`: GIN otherwise keeps new entries in a pending list that every search
    // reads through until a vacuum merges it; after a first crawl of 100,000 files a name
    // query took 44 ms in the index instead of 2 (the crawler's writes are few and paced, a
    // query's latency is what a person waits for).
    "CREATE INDEX IF NOT EXISTS docs_name_trgm ON docs USING gin (name gin_trgm_ops)
        WITH (fastupdate = off)",
    "CREATE INDEX IF NOT EXISTS docs_content_trgm ON docs USING gin (content gin_trgm_ops)
        WITH (fastupdate = off)",
    "CREATE TABLE IF NOT EXISTS spaces (
        id TEXT PRIMARY KEY,
        etag TEXT NOT NULL,
        disabled BIGINT NOT NULL
    )",
];

#[derive(Clone)]
pub struct PgIndex {
    pool: PgPool,
}

/// The methods of [`super::Index`], which documents them.
impl PgIndex {
    common_statements!(PgConnection);

    /// Connects to the database at `url` and creates what is missing of the index there.
    pub async fn connect(url: &str) -> Result<Self, IndexError> {
        let options = PgConnectOptions::from_str(url)?
            .options([("search_path", format!("{SCHEMA_NAME},public"))]);
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await?;
        let mut tx = pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(SCHEMA_LOCK)
            .execute(&mut *tx)
            .await?;
        for statement in SCHEMA {
            sqlx::query(statement).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(Self { pool })
    }

    pub(super) async fn drop_space(&self, id: &str) -> Result<(), IndexError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM docs WHERE space_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM spaces WHERE id = $1")
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
        let (sql, binds) = search_sql(Dialect::Postgres, expr, reach, order);
        // Not prepared once and kept: a kept statement may be planned once for any pattern,
        // and a plan made without the pattern cannot use the trigram indexes.
        let mut query = sqlx::query(sqlx::AssertSqlSafe(numbered(&sql))).persistent(false);
        for b in &binds {
            query = match b {
                Bind::Text(t) => query.bind(t.clone()),
                Bind::Int(n) => query.bind(*n),
            };
        }
        let rows = query.bind(i64::from(limit)).fetch_all(&self.pool).await?;
        let total: i64 = rows.first().map_or(0, |r| r.get(12));
        let hits = rows.iter().map(hit).collect();
        Ok((hits, u64::try_from(total).unwrap_or(0)))
    }
}

/// A run of [`Change::Upsert`]s on `c`, one statement each.
async fn upsert_all_in(
    c: &mut PgConnection,
    docs: &[(&Doc, Option<&str>)],
) -> Result<(), IndexError> {
    for (doc, content) in docs {
        upsert_in(c, doc, *content).await?;
    }
    Ok(())
}

/// [`Change::Upsert`] on `c` (the content kept when `content` is `None`).
async fn upsert_in(
    c: &mut PgConnection,
    doc: &Doc,
    content: Option<&str>,
) -> Result<(), IndexError> {
    // No content given: a new document has none, an indexed one keeps its own.
    super::bind_doc!(
        sqlx::query(
            "INSERT INTO docs (id, space_id, parent_id, path, name, is_dir, size, mtime_ns, etag,
                           mime, owner_id, content)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, COALESCE($12, ''))
         ON CONFLICT (id) DO UPDATE SET space_id = excluded.space_id,
            parent_id = excluded.parent_id, path = excluded.path, name = excluded.name,
            is_dir = excluded.is_dir, size = excluded.size, mtime_ns = excluded.mtime_ns,
            etag = excluded.etag, mime = excluded.mime, owner_id = excluded.owner_id,
            content = COALESCE($12, docs.content)",
        ),
        doc
    )
    .bind(content)
    .execute(&mut *c)
    .await?;
    Ok(())
}

/// [`Change::Remove`] on `c`: a document and everything below its path.
async fn remove_in(c: &mut PgConnection, space_id: &str, path: &str) -> Result<(), IndexError> {
    let (from, to) = super::subtree_range(path);
    // Both conditions in the index's collation, so either can be an index condition of
    // `docs_space_path_c` (a plain `path = $2` is in the database's, which that index does
    // not answer); equality is the same in either.
    sqlx::query(
        "DELETE FROM docs WHERE space_id = $1 AND (path COLLATE \"C\" = $2
           OR (path COLLATE \"C\" >= $3 AND path COLLATE \"C\" < $4))",
    )
    .bind(space_id)
    .bind(path)
    .bind(from)
    .bind(to)
    .execute(&mut *c)
    .await?;
    Ok(())
}

/// `sql` with its `?` placeholders numbered `$1, $2, …` as PostgreSQL takes them. The
/// statements built for the index hold no `?` of any other kind (no string literal has one).
fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::numbered;

    #[test]
    fn placeholders_are_numbered_in_order() {
        assert_eq!(
            numbered("a = ? AND (b = ? OR c LIKE ?) LIMIT ?"),
            "a = $1 AND (b = $2 OR c LIKE $3) LIMIT $4"
        );
    }
}
