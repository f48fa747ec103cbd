//! Password hashing for every secret a person chooses (user passwords, public-link
//! passwords): argon2id with the crate's defaults (RFC 9106's second recommended profile
//! scaled down: 19 MiB, 2 passes), on blocking threads, at most one computation per core.
//!
//! The bound matters under a burst of logins or of wrong passwords: unbounded, each waiting
//! hash would hold a blocking-pool thread and 19 MiB (512 threads, ~10 GiB) while the CPU,
//! which sets their speed anyway, is already busy. Bounded, they queue as cheap futures.

use std::sync::{Arc, LazyLock};

use argon2::Argon2;
use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use tokio::sync::Semaphore;

static HASHING: LazyLock<Semaphore> =
    LazyLock::new(|| Semaphore::new(std::thread::available_parallelism().map_or(1, usize::from)));

#[derive(Debug, thiserror::Error)]
pub enum PasswordError {
    #[error("password hashing failed: {0}")]
    Hash(String),
    #[error("password hashing task failed")]
    Task,
}

/// Runs one argon2 computation when a permit is free.
async fn bounded<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, PasswordError> {
    // The semaphore is never closed; should acquiring fail anyway, run unbounded rather than
    // refuse a login.
    let _permit = HASHING.acquire().await.ok();
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|_| PasswordError::Task)
}

impl From<PasswordError> for tonic::Status {
    fn from(e: PasswordError) -> Self {
        arca_proto::ErrorKind::Internal.status(e.to_string())
    }
}

/// A hash no password matches, checked when there is no real one (an unknown user, a user or
/// link without a password), so that a miss takes as long as a wrong password: how long a
/// refusal took tells an attacker nothing about which accounts or links exist.
#[derive(Clone, Debug)]
pub struct Decoy(Arc<str>);

impl Decoy {
    /// A decoy hashed from a fresh random secret, made once per service start.
    pub async fn new() -> Result<Self, PasswordError> {
        Ok(Decoy(hash(arca_config::generate_secret(16)).await?.into()))
    }

    /// Whether `password` matches `stored`; with nothing stored, false after as long as a
    /// wrong password takes.
    pub async fn verify(&self, password: String, stored: Option<&str>) -> bool {
        match stored {
            Some(stored) => verify(password, stored.to_owned()).await,
            None => {
                verify(password, self.0.to_string()).await;
                false
            }
        }
    }
}

/// A PHC string of `password` under a fresh salt from the OS random source.
pub async fn hash(password: String) -> Result<String, PasswordError> {
    bounded(move || {
        Argon2::default()
            .hash_password(password.as_bytes())
            .map(|h| h.to_string())
            .map_err(|e| PasswordError::Hash(e.to_string()))
    })
    .await?
}

/// Whether `password` matches the PHC string `hash`; false for anything unparsable.
pub async fn verify(password: String, hash: String) -> bool {
    bounded(move || {
        Argon2::default()
            .verify_password(password.as_bytes(), hash.as_str())
            .is_ok()
    })
    .await
    .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn a_hash_verifies_its_password_only() {
        let h = super::hash("correct horse".into()).await.expect("hash");
        assert!(super::verify("correct horse".into(), h.clone()).await);
        assert!(!super::verify("wrong".into(), h).await);
        assert!(!super::verify("x".into(), "!".into()).await);
    }
}
