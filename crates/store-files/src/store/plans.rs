//! The plans SQLite chooses for the statements every request runs: none may read a table or an
//! index range it has to walk whole. Without this check a statement that the planner drives
//! from the wrong index still answers right, only slower with every file in the database — the
//! way a folder's delete came to read every file (see `RELEASE_SUBTREE_BLOBS`).

use sqlx::Row as _;

use super::*;

/// The tables of the store: a `SCAN` of any of them is a walk over all of its rows.
const TABLES: [&str; 9] = [
    "nodes",
    "versions",
    "trash",
    "blobs",
    "spaces",
    "props",
    "locks",
    "uploads",
    "upload_parts",
];

/// What is wrong with a plan (one line each), if anything.
fn faults(plan: &[String]) -> Vec<String> {
    plan.iter()
        .filter(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let table = |i: usize| words.get(i).is_some_and(|w| TABLES.contains(w));
            // `SCAN nodes`, `SCAN n` (an alias: every alias below names a table), or an index
            // searched by a range where the statement means one key.
            (words.first() == Some(&"SCAN")
                && (table(1) || words.get(1).is_some_and(|w| w.len() <= 2)))
                || (words.first() == Some(&"SEARCH")
                    && (line.contains(">?") || line.contains("<?")))
                || (line.contains("AUTOMATIC") && table(1))
        })
        .cloned()
        .collect()
}

async fn plan(c: &mut AnyConnection, sql: &str, params: usize) -> Vec<String> {
    let explain = format!("EXPLAIN QUERY PLAN {sql}");
    let mut q = sqlx::query(sqlx::AssertSqlSafe(explain));
    for _ in 0..params {
        q = q.bind("x");
    }
    let rows = q
        .fetch_all(&mut *c)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    rows.iter()
        .map(|r| r.try_get::<String, _>(3).unwrap())
        .collect()
}

#[tokio::test]
async fn hot_statements_read_only_what_they_name() {
    let tmp = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", tmp.path().join("m.db").display());
    let s = Store::open(StoreConfig::new(url, tmp.path().join("blobs")))
        .await
        .unwrap();
    let mut c = s.read_conn().await.unwrap();
    let statements: Vec<(String, usize)> = vec![
        (PROPAGATE.into(), 5),
        (ANCESTOR_OR_SELF.into(), 2),
        (RELEASE_SUBTREE_BLOBS.into(), 2),
        (LIVE_PATH.into(), 1),
        (trash::TRASH_INSERT.into(), 7),
        (SUBTREE.into(), 1),
        (PARENT_AND_CHILD.into(), 2),
        (LIST_PACKED.into(), 2),
        (commit::lookup_sql(2, 3), 8),
        // The foreign keys' cascades are planned with it.
        ("DELETE FROM nodes WHERE id = $1".into(), 1),
        (resolve_sql(3, false), 4),
        (resolve_sql(3, true), 4),
        (entry_sql(3), 5),
    ];
    let mut wrong = Vec::new();
    for (sql, params) in &statements {
        let plan = plan(&mut c, sql, *params).await;
        let bad = faults(&plan);
        if !bad.is_empty() {
            wrong.push(format!("{sql}\n  plan: {plan:?}\n  wrong: {bad:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The check itself: it finds the plan that made deletes grow with the database.
#[test]
fn a_walk_over_the_blob_index_is_a_fault() {
    let old = [
        "SEARCH blobs USING COVERING INDEX sqlite_autoindex_blobs_1 (id=?)",
        "SCAN sub",
        "SEARCH n USING INDEX nodes_blob (blob_id>?)",
        "SEARCH sub USING AUTOMATIC COVERING INDEX (sid=?)",
    ]
    .map(String::from);
    assert_eq!(faults(&old), vec![old[2].clone()]);
    assert_eq!(faults(&["SCAN nodes".into()]).len(), 1);
    assert!(faults(&["SCAN anc".into(), "SEARCH n USING INDEX x (id=?)".into()]).is_empty());
}
