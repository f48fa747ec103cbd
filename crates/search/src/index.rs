//! The index: documents (one per file or folder: ids, space, parent, path inside the space,
//! name, size, mtime, etag, media type, and the text of text-like files) with a trigram index
//! over names and texts, so that `name:"*term*"` and `content:"…"` are answered from it, and
//! each space's root etag as last indexed (a space whose root etag is unchanged is not
//! walked).
//!
//! Two homes, one schema and one query language ([`Index::search`] builds the same SQL for
//! both, in each one's dialect):
//! - [`sqlite`]: a file at `data_dir/search/index.db`, one per search instance (the default).
//! - [`postgres`]: tables in a PostgreSQL database (`search.database`), shared by every
//!   search instance: one of them crawls into it, under the leader lease, and all answer
//!   queries from it.
//!
//! One writer (the crawler) and any number of readers (queries).

pub mod postgres;
pub mod sqlite;

use std::collections::HashMap;
use std::path::Path;

use crate::kql::{Cmp, Expr, MediaType};

/// What failed in the index.
#[derive(Debug, thiserror::Error)]
#[error("search index: {0}")]
pub struct IndexError(#[from] sqlx::Error);

/// One indexed file or folder.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Doc {
    pub id: String,
    pub space_id: String,
    pub parent_id: String,
    /// Inside the space, starting with `/`.
    pub path: String,
    pub name: String,
    pub is_dir: bool,
    pub size: u64,
    pub mtime_ns: i64,
    pub etag: String,
    pub mime: String,
    pub owner_id: String,
}

/// One write to the index (see [`Index::apply`]).
#[derive(Clone, Debug)]
pub enum Change {
    /// [`Index::upsert`].
    Upsert { doc: Doc, content: Option<String> },
    /// [`Index::refresh`].
    Refresh(Doc),
    /// [`Index::remove`].
    Remove { space_id: String, path: String },
}

/// What the crawler needs of an indexed child to decide whether to look again.
#[derive(Clone, Debug)]
pub struct Known {
    pub etag: String,
    pub path: String,
    pub is_dir: bool,
}

/// Which hits come first (and so which a limit keeps).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Order {
    /// Best score first, then the latest.
    #[default]
    Relevance,
    Name {
        descending: bool,
    },
    Mtime {
        descending: bool,
    },
    Size {
        descending: bool,
    },
}

impl Order {
    /// The ORDER BY clause: constant pieces only.
    fn sql(self, dialect: Dialect) -> &'static str {
        // PostgreSQL has no NOCASE collation; lower() sorts the same for names.
        let pg = dialect == Dialect::Postgres;
        match self {
            Order::Relevance => "score DESC, d.mtime_ns DESC, d.id",
            Order::Name { descending: false } if pg => "lower(d.name) ASC, d.id",
            Order::Name { descending: true } if pg => "lower(d.name) DESC, d.id",
            Order::Name { descending: false } => "d.name COLLATE NOCASE ASC, d.id",
            Order::Name { descending: true } => "d.name COLLATE NOCASE DESC, d.id",
            Order::Mtime { descending: false } => "d.mtime_ns ASC, d.id",
            Order::Mtime { descending: true } => "d.mtime_ns DESC, d.id",
            Order::Size { descending: false } => "d.size ASC, d.id",
            Order::Size { descending: true } => "d.size DESC, d.id",
        }
    }
}

/// A hit: the document and its score.
#[derive(Clone, Debug)]
pub struct Hit {
    pub doc: Doc,
    pub score: f64,
}

/// Where a caller may read: a whole space, or at and below one path in it.
#[derive(Clone, Debug)]
pub struct Reach {
    pub space_id: String,
    /// `None`: the whole space.
    pub below: Option<String>,
}

/// The index, in whichever home the config gave it.
#[derive(Clone)]
pub enum Index {
    Sqlite(sqlite::SqliteIndex),
    Postgres(postgres::PgIndex),
}

/// Runs the same method on whichever index this is.
/// `($first, $first+1, …)` for `n` values: a `VALUES` tuple or an `IN` list.
fn tuple(first: usize, n: usize) -> String {
    let params: Vec<String> = (first..first + n).map(|i| format!("${i}")).collect();
    format!("({})", params.join(", "))
}

/// How many of `n` values each statement of a run takes: greedily 64, 16, 4 or 1. A
/// statement's text grows with its values, and each text is prepared (parsed and planned)
/// once and then kept by the connection: four shapes stay prepared, where a statement for
/// every count would be prepared anew nearly every time (measured: 2-7% of the server's CPU
/// under a PUT load, more than the round trips it saved).
fn chunk_sizes(mut n: usize) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        let size = [64, 16, 4, 1].into_iter().find(|&s| s <= n)?;
        n -= size;
        Some(size)
    })
}

macro_rules! each {
    ($self:ident . $method:ident ( $($arg:expr),* )) => {
        match $self {
            Index::Sqlite(i) => i.$method($($arg),*).await,
            Index::Postgres(i) => i.$method($($arg),*).await,
        }
    };
}

impl Index {
    /// Opens (creating) the instance's own index in `dir`.
    pub async fn open(dir: &Path) -> Result<Index, IndexError> {
        Ok(Index::Sqlite(sqlite::SqliteIndex::open(dir).await?))
    }

    /// Connects to the index shared in the PostgreSQL database at `url`, creating its tables
    /// if they are missing.
    pub async fn connect(url: &str) -> Result<Index, IndexError> {
        Ok(Index::Postgres(postgres::PgIndex::connect(url).await?))
    }

    /// Whether other search instances may use this index too (then one crawls it, under the
    /// leader lease).
    pub fn is_shared(&self) -> bool {
        matches!(self, Index::Postgres(_))
    }

    /// Forgets which etags were indexed, so that the crawler's next round (a running
    /// service's too) walks every folder and reads every file again: a full rebuild from the
    /// store, with the documents searchable meanwhile and replaced as the walk reaches them
    /// (`arca search reindex`). Returns how many documents are to be checked again.
    pub async fn forget_progress(&self) -> Result<u64, IndexError> {
        each!(self.forget_progress())
    }

    /// Every indexed space with its root etag as last indexed.
    pub async fn spaces(&self) -> Result<HashMap<String, String>, IndexError> {
        each!(self.spaces())
    }

    /// The etag `id` was last indexed at, if it was.
    pub async fn space_etag(&self, id: &str) -> Result<Option<String>, IndexError> {
        each!(self.space_etag(id))
    }

    /// Records a space as indexed at `etag` (after its walk finished).
    pub async fn set_space(&self, id: &str, etag: &str, disabled: bool) -> Result<(), IndexError> {
        each!(self.set_space(id, etag, disabled))
    }

    /// Marks a space disabled (or not) without touching its etag.
    pub async fn set_disabled(&self, id: &str, disabled: bool) -> Result<(), IndexError> {
        each!(self.set_disabled(id, disabled))
    }

    /// Whether a space is disabled as last seen (unknown spaces are not).
    pub async fn is_disabled(&self, id: &str) -> Result<bool, IndexError> {
        each!(self.is_disabled(id))
    }

    /// Forgets a space and everything in it.
    pub async fn drop_space(&self, id: &str) -> Result<(), IndexError> {
        each!(self.drop_space(id))
    }

    /// The indexed children of a folder, by id.
    pub async fn children(&self, parent_id: &str) -> Result<HashMap<String, Known>, IndexError> {
        each!(self.children(parent_id))
    }

    /// What the index holds of the nodes `ids` (their etags, paths and kinds), by id: those
    /// not indexed are missing. A few statements for any number of ids, not one each.
    pub async fn known(&self, ids: &[&str]) -> Result<HashMap<String, Known>, IndexError> {
        let mut known = HashMap::new();
        let mut from = 0;
        for n in chunk_sizes(ids.len()) {
            known.extend(each!(self.known(&ids[from..from + n]))?);
            from += n;
        }
        Ok(known)
    }

    /// Where a node is: its space and path, if indexed.
    pub async fn locate(&self, id: &str) -> Result<Option<(String, String)>, IndexError> {
        each!(self.locate(id))
    }

    /// Makes `changes`, in order, in one transaction: a crawler's writes for one folder or
    /// one hint cost one commit, not one each.
    pub async fn apply(&self, changes: &[Change]) -> Result<(), IndexError> {
        if changes.is_empty() {
            return Ok(());
        }
        each!(self.apply(changes))
    }

    /// Inserts or replaces a document; `content` `None` keeps what was indexed (a folder, a
    /// file whose content is not read), `Some` replaces it.
    pub async fn upsert(&self, doc: &Doc, content: Option<&str>) -> Result<(), IndexError> {
        self.apply(&[Change::Upsert {
            doc: doc.clone(),
            content: content.map(str::to_owned),
        }])
        .await
    }

    /// Writes a document's fields but its path, name and text: a node changed in place whose
    /// text index stays as it is.
    pub async fn refresh(&self, doc: &Doc) -> Result<(), IndexError> {
        self.apply(&[Change::Refresh(doc.clone())]).await
    }

    /// Removes a node and, for a folder, everything below it.
    pub async fn remove(&self, space_id: &str, path: &str) -> Result<(), IndexError> {
        self.apply(&[Change::Remove {
            space_id: space_id.to_owned(),
            path: path.to_owned(),
        }])
        .await
    }

    pub async fn search(
        &self,
        expr: &Expr,
        reach: &[Reach],
        order: Order,
        limit: u32,
    ) -> Result<(Vec<Hit>, u64), IndexError> {
        if reach.is_empty() {
            return Ok((Vec::new(), 0));
        }
        each!(self.search(expr, reach, order, limit))
    }
}

/// The statements both homes run alike (`$n` placeholders, which SQLite takes too), as
/// methods of an index type with a `pool` field.
macro_rules! common_statements {
    ($conn:ty) => {
        pub(super) async fn forget_progress(&self) -> Result<u64, IndexError> {
            let mut tx = self.pool.begin().await?;
            let docs = sqlx::query("UPDATE docs SET etag = ''")
                .execute(&mut *tx)
                .await?
                .rows_affected();
            // Kept, with their disabled flag: queries go on skipping disabled spaces.
            sqlx::query("UPDATE spaces SET etag = ''")
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(docs)
        }

        pub(super) async fn spaces(&self) -> Result<HashMap<String, String>, IndexError> {
            let rows = sqlx::query("SELECT id, etag FROM spaces")
                .fetch_all(&self.pool)
                .await?;
            Ok(rows
                .iter()
                .map(|r| (r.get::<String, _>(0), r.get::<String, _>(1)))
                .collect())
        }

        pub(super) async fn space_etag(&self, id: &str) -> Result<Option<String>, IndexError> {
            let row = sqlx::query("SELECT etag FROM spaces WHERE id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
            Ok(row.map(|r| r.get::<String, _>(0)))
        }

        pub(super) async fn set_space(
            &self,
            id: &str,
            etag: &str,
            disabled: bool,
        ) -> Result<(), IndexError> {
            sqlx::query(
                "INSERT INTO spaces (id, etag, disabled) VALUES ($1, $2, $3)
                 ON CONFLICT (id) DO UPDATE SET etag = excluded.etag, disabled = excluded.disabled",
            )
            .bind(id)
            .bind(etag)
            .bind(i64::from(disabled))
            .execute(&self.pool)
            .await?;
            Ok(())
        }

        pub(super) async fn set_disabled(&self, id: &str, disabled: bool) -> Result<(), IndexError> {
            sqlx::query("UPDATE spaces SET disabled = $1 WHERE id = $2")
                .bind(i64::from(disabled))
                .bind(id)
                .execute(&self.pool)
                .await?;
            Ok(())
        }

        pub(super) async fn is_disabled(&self, id: &str) -> Result<bool, IndexError> {
            let row = sqlx::query("SELECT disabled FROM spaces WHERE id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
            Ok(row.is_some_and(|r| r.get::<i64, _>(0) != 0))
        }

        pub(super) async fn children(
            &self,
            parent_id: &str,
        ) -> Result<HashMap<String, Known>, IndexError> {
            let rows = sqlx::query("SELECT id, etag, path, is_dir FROM docs WHERE parent_id = $1")
                .bind(parent_id)
                .fetch_all(&self.pool)
                .await?;
            Ok(rows.iter().map(known_of).collect())
        }

        /// [`Index::apply`]; `upsert_in` and `remove_in` are the backend module's own.
        pub(super) async fn apply(&self, changes: &[Change]) -> Result<(), IndexError> {
            let mut tx = self.pool.begin().await?;
            // Upserts in a row go to the backend together (SQLite writes them a few
            // statements per run, not a few per document); the order of the changes holds.
            let mut upserts: Vec<(&Doc, Option<&str>)> = Vec::new();
            for change in changes {
                if let Change::Upsert { doc, content } = change {
                    upserts.push((doc, content.as_deref()));
                    continue;
                }
                upsert_all_in(&mut tx, &upserts).await?;
                upserts.clear();
                match change {
                    Change::Refresh(doc) => Self::refresh_in(&mut tx, doc).await?,
                    Change::Remove { space_id, path } => remove_in(&mut tx, space_id, path).await?,
                    Change::Upsert { .. } => {}
                }
            }
            upsert_all_in(&mut tx, &upserts).await?;
            tx.commit().await?;
            Ok(())
        }

        /// [`Change::Refresh`] on `c`.
        async fn refresh_in(c: &mut $conn, doc: &Doc) -> Result<(), IndexError> {
            sqlx::query(
                "UPDATE docs SET parent_id = $2, size = $3, mtime_ns = $4, etag = $5, mime = $6,
                    owner_id = $7 WHERE id = $1",
            )
            .bind(&doc.id)
            .bind(&doc.parent_id)
            .bind(i64::try_from(doc.size).unwrap_or(i64::MAX))
            .bind(doc.mtime_ns)
            .bind(&doc.etag)
            .bind(&doc.mime)
            .bind(&doc.owner_id)
            .execute(&mut *c)
            .await?;
            Ok(())
        }

        pub(super) async fn known(
            &self,
            ids: &[&str],
        ) -> Result<HashMap<String, Known>, IndexError> {
            if ids.is_empty() {
                return Ok(HashMap::new());
            }
            let sql = format!(
                "SELECT id, etag, path, is_dir FROM docs WHERE id IN {}",
                tuple(1, ids.len())
            );
            // Built from constants and the number of ids; every id is bound.
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for id in ids {
                query = query.bind(*id);
            }
            let rows = query.fetch_all(&self.pool).await?;
            Ok(rows.iter().map(known_of).collect())
        }

        pub(super) async fn locate(&self, id: &str) -> Result<Option<(String, String)>, IndexError> {
            let row = sqlx::query("SELECT space_id, path FROM docs WHERE id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
            Ok(row.map(|r| (r.get(0), r.get(1))))
        }

    };
}
use common_statements;

/// The paths strictly below `path`, as a half-open range in byte order: from "P/" up to "P0"
/// ('0' is the byte after '/'), so a subtree is one range of a (space, path) index.
fn subtree_range(path: &str) -> (String, String) {
    (format!("{path}/"), format!("{path}0"))
}

/// `query` with a [`Doc`]'s eleven columns bound in their order in `docs` (id, space_id,
/// parent_id, path, name, is_dir, size, mtime_ns, etag, mime, owner_id), as both backends'
/// upserts insert them.
macro_rules! bind_doc {
    ($query:expr, $doc:expr) => {
        $query
            .bind(&$doc.id)
            .bind(&$doc.space_id)
            .bind(&$doc.parent_id)
            .bind(&$doc.path)
            .bind(&$doc.name)
            .bind(i64::from($doc.is_dir))
            .bind(i64::try_from($doc.size).unwrap_or(i64::MAX))
            .bind($doc.mtime_ns)
            .bind(&$doc.etag)
            .bind(&$doc.mime)
            .bind(&$doc.owner_id)
    };
}
use bind_doc;

/// Which SQL a query is built in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    /// `docs` joined row for row with the FTS5 trigram table `docs_fts` (`f`).
    Sqlite,
    /// One `docs` table whose `name` and `content` carry pg_trgm GIN indexes.
    Postgres,
}

/// A value bound to a `?` placeholder.
#[derive(Clone, Debug)]
enum Bind {
    Text(String),
    Int(i64),
}

/// A search as one statement with `?` placeholders (the last one the limit), and the values
/// for all but the last, in order. Built from constant pieces only ([`lower`], [`score`]);
/// every value the caller gave is bound. The total comes with the hits (a window over every
/// match), so the index is asked once, not once more for a count.
fn search_sql(dialect: Dialect, expr: &Expr, reach: &[Reach], order: Order) -> (String, Vec<Bind>) {
    let mut score_sql = String::from("1.0");
    let mut binds = Vec::new();
    score(dialect, expr, &mut score_sql, &mut binds);
    let mut where_sql = String::from("d.path <> '/' AND (");
    lower(dialect, expr, &mut where_sql, &mut binds);
    where_sql.push_str(") AND (");
    // A query the trigram index narrows must start there: given the choice, SQLite walks
    // the caller's spaces by `docs_space_path` and tests each document against the
    // index's answer (9 ms a query at 100,000 files instead of 0.4 ms). The unary `+`
    // takes that index out of its choice; a query with no text to look up keeps it.
    // (PostgreSQL weighs both by its statistics, and has no unary `+` for text.)
    let space = if dialect == Dialect::Sqlite && driven_by_text(expr) {
        "+d.space_id"
    } else {
        "d.space_id"
    };
    for (i, r) in reach.iter().enumerate() {
        if i > 0 {
            where_sql.push_str(" OR ");
        }
        binds.push(Bind::Text(r.space_id.clone()));
        match &r.below {
            None => where_sql.push_str(&format!("{space} = ?")),
            Some(path) => {
                where_sql.push_str(&format!(
                    "({space} = ? AND (d.path = ? OR substr(d.path, 1, length(?)) = ?))"
                ));
                let below = format!("{}/", path.trim_end_matches('/'));
                binds.push(Bind::Text(path.clone()));
                binds.push(Bind::Text(below.clone()));
                binds.push(Bind::Text(below));
            }
        }
    }
    where_sql.push(')');
    let (from, score) = match dialect {
        Dialect::Sqlite => (
            "FROM docs d JOIN docs_fts f ON f.rowid = d.rowid",
            score_sql,
        ),
        // The literals are numeric there: the score is read as a double.
        Dialect::Postgres => (
            "FROM docs d",
            format!("CAST({score_sql} AS DOUBLE PRECISION)"),
        ),
    };
    let sql = format!(
        "SELECT d.id, d.space_id, d.parent_id, d.path, d.name, d.is_dir, d.size, d.mtime_ns,
                d.etag, d.mime, d.owner_id, {score} AS score, count(*) OVER () AS total
         {from} WHERE {where_sql}
         ORDER BY {} LIMIT ?",
        order.sql(dialect)
    );
    (sql, binds)
}

/// A row of `id, etag, path, is_dir` as what the index holds of that node (either
/// database's).
fn known_of<R: sqlx::Row>(r: &R) -> (String, Known)
where
    usize: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let known = Known {
        etag: r.get(1),
        path: r.get(2),
        is_dir: r.get::<i64, _>(3) != 0,
    };
    (r.get(0), known)
}

/// A row of [`search_sql`]'s statement as a hit (either database's).
fn hit<R: sqlx::Row>(r: &R) -> Hit
where
    usize: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> f64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    Hit {
        doc: Doc {
            id: r.get(0),
            space_id: r.get(1),
            parent_id: r.get(2),
            path: r.get(3),
            name: r.get(4),
            is_dir: r.get::<i64, _>(5) != 0,
            size: u64::try_from(r.get::<i64, _>(6)).unwrap_or(0),
            mtime_ns: r.get(7),
            etag: r.get(8),
            mime: r.get(9),
            owner_id: r.get(10),
        },
        score: r.get(11),
    }
}

/// A `LIKE` pattern (escape `\`) of a name glob: a glob without `*` or `?` matches anywhere.
fn name_pattern(glob: &str) -> String {
    let anywhere = !glob.contains(['*', '?']);
    let mut out = String::new();
    if anywhere {
        out.push('%');
    }
    for c in glob.chars() {
        match c {
            '*' => out.push('%'),
            '?' => out.push('_'),
            '%' | '_' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    if anywhere {
        out.push('%');
    }
    out
}

/// A `LIKE` pattern (escape `\`) matching `phrase` anywhere.
fn contains_pattern(phrase: &str) -> String {
    let mut out = String::from("%");
    for c in phrase.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('%');
    out
}

/// The SQL condition of `expr` over `d` (docs) and, on SQLite, `f` (docs_fts).
fn lower(dialect: Dialect, expr: &Expr, sql: &mut String, binds: &mut Vec<Bind>) {
    match expr {
        Expr::And(a, b) | Expr::Or(a, b) => {
            sql.push('(');
            lower(dialect, a, sql, binds);
            sql.push_str(if matches!(expr, Expr::And(..)) {
                " AND "
            } else {
                " OR "
            });
            lower(dialect, b, sql, binds);
            sql.push(')');
        }
        Expr::Not(a) => {
            sql.push_str("NOT (");
            lower(dialect, a, sql, binds);
            sql.push(')');
        }
        Expr::Name(glob) => text_match(dialect, "name", glob, name_pattern(glob), sql, binds),
        Expr::Content(phrase) => {
            text_match(
                dialect,
                "content",
                phrase,
                contains_pattern(phrase),
                sql,
                binds,
            );
        }
        Expr::MediaType(MediaType::Folder) => sql.push_str("d.is_dir = 1"),
        Expr::MediaType(MediaType::OneOf(types)) => {
            sql.push_str("(d.is_dir = 0 AND d.mime IN (");
            for (i, t) in types.iter().enumerate() {
                if i > 0 {
                    sql.push_str(", ");
                }
                sql.push('?');
                binds.push(Bind::Text((*t).to_owned()));
            }
            sql.push_str("))");
        }
        Expr::MediaType(MediaType::Prefix(p)) => {
            sql.push_str("(d.is_dir = 0 AND substr(d.mime, 1, length(?)) = ?)");
            binds.push(Bind::Text(p.clone()));
            binds.push(Bind::Text(p.clone()));
        }
        Expr::Mtime(cmp, ns) => compare("d.mtime_ns", *cmp, *ns, crate::kql::DAY_NS, sql, binds),
        Expr::Size(cmp, n) => compare("d.size", *cmp, *n, 1, sql, binds),
        Expr::Scope(id) => match scope(id) {
            Scope::Space(space) => {
                sql.push_str("d.space_id = ?");
                binds.push(Bind::Text(space));
            }
            Scope::Node(node) => {
                // At or below the node named, wherever the index has it.
                sql.push_str(
                    "EXISTS (SELECT 1 FROM docs s WHERE s.id = ? AND s.space_id = d.space_id
                     AND (d.path = s.path OR substr(d.path, 1, length(s.path) + 1) = s.path || '/'))",
                );
                binds.push(Bind::Text(node));
            }
        },
    }
}

/// `column LIKE pattern` on the trigram index, for the user's `text` turned into `pattern`.
///
/// PostgreSQL: `ILIKE` (case-insensitive, as SQLite's LIKE; `\` is its default escape), which
/// the pg_trgm GIN index answers, any text. SQLite: the trigram index answers a LIKE only without an ESCAPE clause (SQLite hands a virtual
/// table two-argument LIKEs only), and only when it is asked for the rowids itself; a join
/// that filters row by row reads every document (0.4 s a query at 100,000 files). So text
/// with no `%`, `_` or `\` of its own, which needs no escaping, is looked up in the index;
/// other text is matched exactly, with ESCAPE, by a scan.
fn text_match(
    dialect: Dialect,
    column: &str,
    text: &str,
    pattern: String,
    sql: &mut String,
    binds: &mut Vec<Bind>,
) {
    if dialect == Dialect::Postgres {
        sql.push_str(&format!("d.{column} ILIKE ?"));
    } else if !indexed_text(text) {
        sql.push_str(&format!("f.{column} LIKE ? ESCAPE '\\'"));
    } else {
        sql.push_str(&format!(
            "d.rowid IN (SELECT rowid FROM docs_fts WHERE {column} LIKE ?)"
        ));
    }
    binds.push(Bind::Text(pattern));
}

/// Whether [`text_match`] looks `text` up in the trigram index.
fn indexed_text(text: &str) -> bool {
    !text.contains(['%', '_', '\\'])
}

/// Whether every document `expr` matches is among those a trigram lookup of it returns: then
/// that lookup is the cheapest start (see `Index::search`).
fn driven_by_text(expr: &Expr) -> bool {
    match expr {
        Expr::Name(text) | Expr::Content(text) => indexed_text(text),
        Expr::And(a, b) => driven_by_text(a) || driven_by_text(b),
        Expr::Or(a, b) => driven_by_text(a) && driven_by_text(b),
        _ => false,
    }
}

/// `column cmp value`; `:` (Eq) is the span `[value, value + span)` (a whole day for dates).
fn compare(column: &str, cmp: Cmp, value: i64, span: i64, sql: &mut String, binds: &mut Vec<Bind>) {
    let op = match cmp {
        Cmp::Lt => "<",
        Cmp::Le => "<=",
        Cmp::Gt => ">",
        Cmp::Ge => ">=",
        Cmp::Eq => {
            sql.push_str(&format!("({column} >= ? AND {column} < ?)"));
            binds.push(Bind::Int(value));
            binds.push(Bind::Int(value.saturating_add(span)));
            return;
        }
    };
    // A date compared with `>` means after that day, `<=` up to its end.
    let value = match cmp {
        Cmp::Gt | Cmp::Le if span > 1 => value.saturating_add(span - 1),
        _ => value,
    };
    sql.push_str(&format!("{column} {op} ?"));
    binds.push(Bind::Int(value));
}

enum Scope {
    Space(String),
    Node(String),
}

/// A scope value: a space id (`PROVIDER$SPACE`), a space's root id (`PROVIDER$SPACE!SPACE`,
/// the whole space too) or another resource id.
fn scope(id: &str) -> Scope {
    match id.split_once('!') {
        None => Scope::Space(id.to_owned()),
        Some((space, node)) if space.rsplit_once('$').is_some_and(|(_, s)| s == node) => {
            Scope::Space(space.to_owned())
        }
        Some(_) => Scope::Node(id.to_owned()),
    }
}

/// The score of a hit: 1, plus 2 per name term it matches, plus 1 per content phrase, so a
/// name match ranks above a content match.
fn score(dialect: Dialect, expr: &Expr, sql: &mut String, binds: &mut Vec<Bind>) {
    let like = |column: &str| match dialect {
        Dialect::Sqlite => format!("f.{column} LIKE ? ESCAPE '\\'"),
        Dialect::Postgres => format!("d.{column} ILIKE ?"),
    };
    match expr {
        Expr::And(a, b) | Expr::Or(a, b) => {
            score(dialect, a, sql, binds);
            score(dialect, b, sql, binds);
        }
        Expr::Name(glob) => {
            sql.push_str(&format!(
                " + (CASE WHEN {} THEN 2.0 ELSE 0.0 END)",
                like("name")
            ));
            binds.push(Bind::Text(name_pattern(glob)));
        }
        Expr::Content(phrase) => {
            sql.push_str(&format!(
                " + (CASE WHEN {} THEN 1.0 ELSE 0.0 END)",
                like("content")
            ));
            binds.push(Bind::Text(contains_pattern(phrase)));
        }
        Expr::Not(_) | Expr::MediaType(_) | Expr::Mtime(..) | Expr::Size(..) | Expr::Scope(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(id: &str, path: &str, name: &str) -> Doc {
        Doc {
            id: id.into(),
            space_id: "p$s".into(),
            parent_id: "p$s!s".into(),
            path: path.into(),
            name: name.into(),
            mime: "text/plain".into(),
            ..Default::default()
        }
    }

    /// Runs `scenario` on an index of each kind: a file of its own, and a fresh PostgreSQL
    /// database (see `arca_test_servers::postgres_for_tests`).
    async fn on_both<F>(scenario: impl Fn(Index) -> F) -> Result<(), IndexError>
    where
        F: std::future::Future<Output = Result<(), IndexError>>,
    {
        let dir = tempfile::tempdir().map_err(|e| IndexError(e.into()))?;
        scenario(Index::open(dir.path()).await?).await?;
        let pg = arca_test_servers::postgres_for_tests().await;
        let url = pg
            .fresh_database()
            .await
            .map_err(|e| IndexError(sqlx::Error::Protocol(e.to_string())))?;
        let index = Index::connect(&url).await?;
        // A second instance starting on the same database finds the index there.
        Index::connect(&url).await?;
        scenario(index).await
    }

    #[tokio::test]
    async fn names_and_contents_are_found_within_reach() -> Result<(), IndexError> {
        on_both(names_and_contents).await
    }

    async fn names_and_contents(index: Index) -> Result<(), IndexError> {
        index
            .upsert(&doc("p$s!a", "/a", "Report.txt"), Some("the big cat"))
            .await?;
        let mut d = doc("p$s!b", "/dir", "dir");
        d.is_dir = true;
        index.upsert(&d, None).await?;
        index
            .upsert(&doc("p$s!c", "/dir/cat.md", "cat.md"), Some("nothing"))
            .await?;
        let all = [Reach {
            space_id: "p$s".into(),
            below: None,
        }];
        let q = |s: &str| {
            crate::kql::parse(s).map_err(|e| IndexError(sqlx::Error::Protocol(e.to_string())))
        };
        let (hits, total) = index
            .search(&q("report")?, &all, Order::Relevance, 10)
            .await?;
        assert_eq!((hits.len(), total), (1, 1));
        let (hits, _) = index
            .search(&q("cat OR content:cat")?, &all, Order::Relevance, 10)
            .await?;
        // The name match ranks first.
        assert_eq!(hits[0].doc.name, "cat.md");
        assert_eq!(hits[1].doc.name, "Report.txt");
        let below = [Reach {
            space_id: "p$s".into(),
            below: Some("/dir".into()),
        }];
        let (hits, _) = index
            .search(&q("cat OR content:cat")?, &below, Order::Relevance, 10)
            .await?;
        assert_eq!(hits.len(), 1);
        // Content kept when a file is updated without it.
        index
            .upsert(&doc("p$s!a", "/a", "Report.txt"), None)
            .await?;
        assert_eq!(
            index
                .search(&q("content:\"big cat\"")?, &all, Order::Relevance, 10)
                .await?
                .1,
            1
        );
        index.remove("p$s", "/dir").await?;
        assert_eq!(
            index
                .search(&q("cat")?, &all, Order::Relevance, 10)
                .await?
                .1,
            0
        );
        assert_eq!(
            index
                .search(&q("mediatype:folder")?, &all, Order::Relevance, 10)
                .await?
                .1,
            0
        );
        Ok(())
    }

    /// One `apply` of many upserts (more than a statement takes, one id twice, some keeping
    /// their content) indexes each as its own upsert would.
    #[tokio::test]
    async fn a_long_run_of_upserts_is_applied_in_order() -> Result<(), IndexError> {
        on_both(long_run).await
    }

    async fn long_run(index: Index) -> Result<(), IndexError> {
        index
            .upsert(&doc("p$s!k", "/k.txt", "k.txt"), Some("kept words"))
            .await?;
        let mut changes: Vec<Change> = (0..600)
            .map(|i| Change::Upsert {
                doc: doc(
                    &format!("p$s!{i}"),
                    &format!("/f{i}.txt"),
                    &format!("f{i}.txt"),
                ),
                content: Some(format!("text n{i}x")),
            })
            .collect();
        // Renamed without new content: keeps its text.
        changes.insert(
            300,
            Change::Upsert {
                doc: doc("p$s!k", "/k2.txt", "k2.txt"),
                content: None,
            },
        );
        // The same id again later in the run: the later one wins.
        changes.push(Change::Upsert {
            doc: doc("p$s!7", "/seven.txt", "seven.txt"),
            content: Some("changed".into()),
        });
        index.apply(&changes).await?;
        let all = [Reach {
            space_id: "p$s".into(),
            below: None,
        }];
        let count = |s: &'static str| {
            let index = &index;
            let all = &all;
            async move {
                let expr = crate::kql::parse(s)
                    .map_err(|e| IndexError(sqlx::Error::Protocol(e.to_string())))?;
                Ok::<u64, IndexError>(index.search(&expr, all, Order::Relevance, 10).await?.1)
            }
        };
        assert_eq!(count("content:n599x").await?, 1);
        assert_eq!(count("content:n255x").await?, 1);
        assert_eq!(count("content:n256x").await?, 1);
        assert_eq!(count("content:\"kept words\" AND name:k2.txt").await?, 1);
        assert_eq!(count("name:k.txt").await?, 0);
        assert_eq!(count("name:seven.txt AND content:changed").await?, 1);
        assert_eq!(count("content:n7x").await?, 0);
        assert_eq!(count("name:f7.txt").await?, 0);
        Ok(())
    }

    /// Text with LIKE's own characters is matched exactly (the escaped scan), other text
    /// through the trigram index, both ignoring case, short text (under three characters) too.
    #[tokio::test]
    async fn wildcard_characters_in_names_match_themselves() -> Result<(), IndexError> {
        on_both(wildcards).await
    }

    async fn wildcards(index: Index) -> Result<(), IndexError> {
        for (id, name, text) in [
            ("p$s!1", "plan_a.txt", "100% sure"),
            ("p$s!2", "planXa.txt", "100 x sure"),
            ("p$s!3", "PLAN-B.txt", "ok"),
        ] {
            index
                .upsert(&doc(id, &format!("/{name}"), name), Some(text))
                .await?;
        }
        let all = [Reach {
            space_id: "p$s".into(),
            below: None,
        }];
        let names = |hits: Vec<Hit>| {
            let mut n: Vec<String> = hits.into_iter().map(|h| h.doc.name).collect();
            n.sort();
            n
        };
        for (query, want) in [
            ("name:\"*plan_a*\"", vec!["plan_a.txt"]),
            ("content:\"100%\"", vec!["plan_a.txt"]),
            ("name:\"*plan-b*\"", vec!["PLAN-B.txt"]),
            (
                "name:\"plan*\"",
                vec!["PLAN-B.txt", "planXa.txt", "plan_a.txt"],
            ),
            ("name:\"*b.*\"", vec!["PLAN-B.txt"]),
            ("ok", vec![]),
        ] {
            let expr = crate::kql::parse(query)
                .map_err(|e| IndexError(sqlx::Error::Protocol(e.to_string())))?;
            let (hits, _) = index
                .search(&expr, &all, Order::Name { descending: false }, 10)
                .await?;
            assert_eq!(names(hits), want, "{query}");
        }
        Ok(())
    }
}
