//! Signed, short-lived tokens: the identity the proxy vouches for, and transfer grants.
//!
//! Format: `v1.<base64url(JSON claims)>.<base64url(HMAC-SHA256)>`, keyed by `identity.secret`.
//! The MAC covers a purpose string as well as the claims, so a token minted for one purpose
//! (a download grant, say) can never be replayed as another (an identity).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{KeyInit, Mac};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// Who is calling, as authenticated by the proxy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// Stable user id (never reused).
    pub id: String,
    /// Login name, as in `/remote.php/dav/files/{username}/`.
    pub username: String,
    #[serde(default)]
    pub display_name: String,
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default)]
    pub admin: bool,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    #[error("malformed token")]
    Malformed,
    #[error("token signature invalid")]
    BadSignature,
    #[error("token expired")]
    Expired,
}

/// Signs and verifies tokens with the process's secret.
#[derive(Clone)]
pub struct TokenSigner {
    key: std::sync::Arc<[u8]>,
}

#[derive(Serialize, Deserialize)]
struct Envelope<T> {
    exp: u64,
    #[serde(flatten)]
    claims: T,
}

/// The purpose of identity tokens; transfer grants use their own.
pub const IDENTITY_PURPOSE: &str = "identity";

impl TokenSigner {
    pub fn new(secret: &[u8]) -> Self {
        Self { key: secret.into() }
    }

    fn mac(&self, purpose: &str, payload: &str) -> HmacSha256 {
        // `new_from_slice` accepts keys of any length for HMAC; the error case cannot happen.
        let mut mac = HmacSha256::new_from_slice(&self.key)
            .unwrap_or_else(|_| HmacSha256::new(&Default::default()));
        mac.update(purpose.as_bytes());
        mac.update(b"\0");
        mac.update(payload.as_bytes());
        mac
    }

    pub fn sign<T: Serialize>(&self, purpose: &str, claims: &T, ttl: Duration) -> String {
        let exp = now_secs() + ttl.as_secs().max(1);
        let json = serde_json::to_vec(&Envelope { exp, claims }).unwrap_or_default();
        let payload = B64.encode(json);
        let tag = self.mac(purpose, &payload).finalize().into_bytes();
        format!("v1.{payload}.{}", B64.encode(tag))
    }

    pub fn verify<T: DeserializeOwned>(&self, purpose: &str, token: &str) -> Result<T, TokenError> {
        let rest = token.strip_prefix("v1.").ok_or(TokenError::Malformed)?;
        let (payload, tag) = rest.split_once('.').ok_or(TokenError::Malformed)?;
        let tag = B64.decode(tag).map_err(|_| TokenError::Malformed)?;
        // `verify_slice` compares in constant time.
        self.mac(purpose, payload)
            .verify_slice(&tag)
            .map_err(|_| TokenError::BadSignature)?;
        let json = B64.decode(payload).map_err(|_| TokenError::Malformed)?;
        let envelope: Envelope<T> =
            serde_json::from_slice(&json).map_err(|_| TokenError::Malformed)?;
        if envelope.exp < now_secs() {
            return Err(TokenError::Expired);
        }
        Ok(envelope.claims)
    }

    pub fn sign_identity(&self, identity: &Identity, ttl: Duration) -> String {
        self.sign(IDENTITY_PURPOSE, identity, ttl)
    }

    pub fn verify_identity(&self, token: &str) -> Result<Identity, TokenError> {
        self.verify(IDENTITY_PURPOSE, token)
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> Identity {
        Identity {
            id: "u1".into(),
            username: "alice".into(),
            display_name: "Alice".into(),
            groups: vec!["g".into()],
            admin: false,
        }
    }

    #[test]
    fn round_trip() {
        let s = TokenSigner::new(b"secret");
        let t = s.sign_identity(&alice(), Duration::from_secs(60));
        assert_eq!(s.verify_identity(&t), Ok(alice()));
    }

    #[test]
    fn wrong_key_purpose_or_tampering_is_refused() {
        let s = TokenSigner::new(b"secret");
        let t = s.sign_identity(&alice(), Duration::from_secs(60));
        assert_eq!(
            TokenSigner::new(b"other").verify_identity(&t),
            Err(TokenError::BadSignature)
        );
        assert_eq!(
            s.verify::<Identity>("download", &t),
            Err(TokenError::BadSignature)
        );
        let mut forged = t.clone();
        forged.insert(5, 'A');
        assert!(s.verify_identity(&forged).is_err());
        assert_eq!(s.verify_identity("garbage"), Err(TokenError::Malformed));
    }

    #[test]
    fn expired_tokens_are_refused() {
        let s = TokenSigner::new(b"secret");
        let payload = B64.encode(
            serde_json::to_vec(&Envelope {
                exp: 1,
                claims: alice(),
            })
            .unwrap(),
        );
        let tag = s.mac(IDENTITY_PURPOSE, &payload).finalize().into_bytes();
        let t = format!("v1.{payload}.{}", B64.encode(tag));
        assert_eq!(s.verify_identity(&t), Err(TokenError::Expired));
    }
}
