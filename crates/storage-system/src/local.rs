//! User administration straight on storage-system's database, with no server running: what
//! `arca users` does. Changes land in the credential change feed like any other, so a server
//! running on the same database tells its proxies within its poll interval
//! ([`CHANGE_VISIBLE_WITHIN`]).

use std::time::Duration;

use arca_config::Config;
use arca_store_records::{Records, RecordsConfig, StoreError};

pub use arca_store_records::User;

/// The longest a change made here takes to reach every proxy of a running server on the same
/// database: storage-system's poll interval plus the notification's own round trip.
pub const CHANGE_VISIBLE_WITHIN: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error("user {0} exists")]
    Exists(String),
    #[error("no user {0}")]
    NoSuchUser(String),
    #[error("{0}")]
    Invalid(&'static str),
    #[error("{0}: {1}")]
    Open(String, #[source] StoreError),
    #[error("user store: {0}")]
    Store(#[from] StoreError),
    #[error("hashing the password: {0}")]
    Hash(String),
}

/// storage-system's user store, opened from the same configuration the server reads.
pub struct LocalUsers {
    store: Records,
}

impl LocalUsers {
    /// Opens (creating if needed) the database at `storage-system.database`, or the SQLite
    /// file under `data_dir/storage-system`.
    pub async fn open(config: &Config) -> Result<Self, LocalError> {
        let dir = config.data_dir.join("storage-system");
        let where_ = config.storage_system.database.as_ref().map_or_else(
            || dir.display().to_string(),
            |_| "storage-system.database".into(),
        );
        if config.storage_system.database.is_none() {
            tokio::fs::create_dir_all(&dir)
                .await
                .map_err(|e| LocalError::Open(where_.clone(), e.into()))?;
        }
        let store = Records::open(RecordsConfig::from_section(&config.storage_system, &dir))
            .await
            .map_err(|e| LocalError::Open(where_, e))?;
        Ok(Self { store })
    }

    pub async fn close(&self) {
        self.store.close().await;
    }

    pub async fn add(
        &self,
        username: &str,
        display_name: Option<&str>,
        mail: Option<&str>,
        admin: bool,
        password: &str,
    ) -> Result<User, LocalError> {
        if !crate::users::valid_username(username) {
            return Err(LocalError::Invalid(crate::users::USERNAME_RULE));
        }
        if password.is_empty() {
            return Err(LocalError::Invalid("the password is empty"));
        }
        let hash = hash(password).await?;
        self.store
            .create_user(
                username,
                display_name.unwrap_or(username),
                mail.unwrap_or(""),
                &hash,
                admin,
            )
            .await
            .map_err(|e| match e {
                StoreError::AlreadyExists => LocalError::Exists(username.to_owned()),
                other => other.into(),
            })
    }

    pub async fn list(&self) -> Result<Vec<User>, LocalError> {
        Ok(self.store.list_users().await?)
    }

    pub async fn passwd(&self, username: &str, password: &str) -> Result<(), LocalError> {
        if password.is_empty() {
            return Err(LocalError::Invalid("the password is empty"));
        }
        let user = self.find(username).await?;
        let hash = hash(password).await?;
        self.store
            .update_user(&user.id, None, None, Some(&hash))
            .await?;
        Ok(())
    }

    pub async fn delete(&self, username: &str) -> Result<(), LocalError> {
        let user = self.find(username).await?;
        self.store.delete_user(&user.id).await?;
        Ok(())
    }

    async fn find(&self, username: &str) -> Result<User, LocalError> {
        self.store
            .user_by_name(username)
            .await
            .map_err(|e| match e {
                StoreError::NotFound => LocalError::NoSuchUser(username.to_owned()),
                other => other.into(),
            })
    }
}

async fn hash(password: &str) -> Result<String, LocalError> {
    crate::users::hash_password(password.to_owned())
        .await
        .map_err(|s| LocalError::Hash(s.message().to_owned()))
}
