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
    known_of, search_sql, tuple,
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

/// A run of [`Change::Upsert`]s on `c`: the documents' rows, and their FTS rows replaced (the
/// content kept where it is `None`), four statements for up to 64 documents
/// ([`super::chunk_sizes`]) — on the connection's worker thread each statement is a round
/// trip, and a crawl of a folder or a hint's nodes writes hundreds at once. A document named
/// twice in a run is written in order (the run is cut there).
async fn upsert_all_in(
    c: &mut SqliteConnection,
    docs: &[(&Doc, Option<&str>)],
) -> Result<(), IndexError> {
    let mut start = 0;
    while start < docs.len() {
        let mut seen = std::collections::HashSet::new();
        let mut end = start;
        while end < docs.len() && seen.insert(docs[end].0.id.as_str()) {
            end += 1;
        }
        let mut from = start;
        for n in super::chunk_sizes(end - start) {
            upsert_chunk(c, &docs[from..from + n]).await?;
            from += n;
        }
        start = end;
    }
    Ok(())
}

/// [`upsert_all_in`] for documents of distinct ids.
async fn upsert_chunk(
    c: &mut SqliteConnection,
    docs: &[(&Doc, Option<&str>)],
) -> Result<(), IndexError> {
    const COLS: usize = 11;
    if docs.is_empty() {
        return Ok(());
    }
    // Only placeholders are pasted together here; every value is bound.
    let values: Vec<String> = (0..docs.len()).map(|i| tuple(i * COLS + 1, COLS)).collect();
    let sql = format!(
        "INSERT INTO docs (id, space_id, parent_id, path, name, is_dir, size, mtime_ns, etag,
                           mime, owner_id)
         VALUES {}
         ON CONFLICT (id) DO UPDATE SET space_id = excluded.space_id,
            parent_id = excluded.parent_id, path = excluded.path, name = excluded.name,
            is_dir = excluded.is_dir, size = excluded.size, mtime_ns = excluded.mtime_ns,
            etag = excluded.etag, mime = excluded.mime, owner_id = excluded.owner_id
         RETURNING id, rowid",
        values.join(", ")
    );
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
    for (doc, _) in docs {
        q = super::bind_doc!(q, doc);
    }
    let rowids: HashMap<String, i64> = q
        .fetch_all(&mut *c)
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let rowid_of = |doc: &Doc| {
        rowids.get(&doc.id).copied().ok_or_else(|| {
            IndexError(sqlx::Error::Protocol(format!(
                "no row came back for {}",
                doc.id
            )))
        })
    };
    let all: Vec<i64> = docs
        .iter()
        .map(|(doc, _)| rowid_of(doc))
        .collect::<Result<_, _>>()?;
    // What the documents without new content keep of their indexed text.
    let keep: Vec<i64> = docs
        .iter()
        .zip(&all)
        .filter(|((_, content), _)| content.is_none())
        .map(|(_, rowid)| *rowid)
        .collect();
    let mut kept: HashMap<i64, String> = HashMap::new();
    if !keep.is_empty() {
        let mut from = 0;
        for n in super::chunk_sizes(keep.len()) {
            let sql = format!(
                "SELECT rowid, content FROM docs_fts WHERE rowid IN {}",
                tuple(1, n)
            );
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
            for rowid in &keep[from..from + n] {
                q = q.bind(*rowid);
            }
            for r in q.fetch_all(&mut *c).await? {
                if let Some(text) = r.get::<Option<String>, _>(1) {
                    kept.insert(r.get(0), text);
                }
            }
            from += n;
        }
    }
    let sql = format!(
        "DELETE FROM docs_fts WHERE rowid IN {}",
        tuple(1, all.len())
    );
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
    for rowid in &all {
        q = q.bind(*rowid);
    }
    q.execute(&mut *c).await?;
    let values: Vec<String> = (0..docs.len()).map(|i| tuple(i * 3 + 1, 3)).collect();
    let sql = format!(
        "INSERT INTO docs_fts (rowid, name, content) VALUES {}",
        values.join(", ")
    );
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
    for ((doc, content), rowid) in docs.iter().zip(&all) {
        let text = match content {
            Some(text) => (*text).to_owned(),
            None => kept.remove(rowid).unwrap_or_default(),
        };
        q = q.bind(*rowid).bind(&doc.name).bind(text);
    }
    q.execute(&mut *c).await?;
    Ok(())
}

/// [`Change::Remove`] on `c`: a document and everything below its path.
async fn remove_in(c: &mut SqliteConnection, space_id: &str, path: &str) -> Result<(), IndexError> {
    let (from, to) = super::subtree_range(path);
    // The path and a range of `docs_space_path` (byte order) below it, each its own lookup:
    // written as one condition with OR, SQLite used the index for the space alone and
    // scanned every document of it (a removal in a home of 100,000 files read them all).
    let matching = "rowid IN (SELECT rowid FROM docs WHERE space_id = ?1 AND path = ?2 \
         UNION ALL SELECT rowid FROM docs WHERE space_id = ?1 AND path >= ?3 AND path < ?4)";
    // The text rows first: they are found through the documents' rows.
    for table in ["docs_fts", "docs"] {
        // Only constant SQL is pasted together here; every value is bound.
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {table} WHERE {matching}"
        )))
        .bind(space_id)
        .bind(path)
        .bind(&from)
        .bind(&to)
        .execute(&mut *c)
        .await?;
    }
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
