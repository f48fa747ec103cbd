//! Shared test plumbing: records on a fresh SQLite file or a fresh PostgreSQL database (of
//! `arca_test_servers::postgres_for_tests`).

#![allow(dead_code)]

use arca_store_records::{Records, RecordsConfig};

pub struct Ctx {
    pub store: Records,
    pub db_url: String,
    _tmp: tempfile::TempDir,
}

impl Ctx {
    /// Records on a fresh SQLite file.
    pub async fn sqlite() -> Ctx {
        let tmp = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}?mode=rwc", tmp.path().join("meta.db").display());
        Self::open_in(tmp, url).await
    }

    /// Records on the given database URL (a fresh PostgreSQL database).
    pub async fn with_url(url: &str) -> Ctx {
        let tmp = tempfile::tempdir().expect("temp dir");
        Self::open_in(tmp, url.to_owned()).await
    }

    async fn open_in(tmp: tempfile::TempDir, db_url: String) -> Ctx {
        let store = Records::open(RecordsConfig::new(db_url.clone()))
            .await
            .unwrap_or_else(|e| panic!("open records on {db_url}: {e}"));
        Ctx {
            store,
            db_url,
            _tmp: tmp,
        }
    }
}
