//! Signed, short-lived tokens: the identity the proxy vouches for, and transfer grants.
//!
//! Format: `v1.<base64url(JSON claims)>.<base64url(HMAC-SHA256)>`, keyed by `identity.secret`.
//! The MAC covers a purpose string as well as the claims, so a token minted for one purpose
//! (a download grant, say) can never be replayed as another (an identity).

use std::collections::HashMap;
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
    /// Creates project spaces and manages every one (the Space Admin role; see
    /// arca_proto::roles). Left out of the token when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub space_admin: bool,
    /// How the caller proved who they are, when a person logged in (the proxy sets it;
    /// services acting for themselves and public-link visitors have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<Login>,
}

impl Identity {
    /// Creates project spaces and manages every one: admins and space admins.
    pub fn manages_spaces(&self) -> bool {
        self.admin || self.space_admin
    }
}

/// How a caller logged in, as the identity token tells downstream services.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Login {
    /// HTTP Basic with the user's password.
    Password,
    /// HTTP Basic with one of the user's app tokens.
    AppToken,
    /// An OpenID Connect Bearer token.
    Oidc,
    /// The web app's session cookie, made by a login with the user's password (every
    /// state-changing request with it also carries the session's CSRF token).
    Session,
}

impl Login {
    /// Whether this login may manage the user's credentials (app tokens): an app token
    /// given to a sync client must not be able to mint or revoke others.
    pub fn manages_credentials(self) -> bool {
        matches!(self, Login::Password | Login::Oidc | Login::Session)
    }
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
    /// The MAC keyed once and cloned per token: keying hashes the secret's padded blocks.
    keyed: HmacSha256,
    /// Identity tokens verified lately, by their text, with their expiry. A login's token is
    /// sent with many calls and verified at every hop of each; verifying one (MAC, base64,
    /// JSON through a flattened envelope) was ~4% of a 4 KiB GET's CPU. Only a token
    /// identical to one that verified is served from here, and never past its expiry.
    identities: std::sync::Arc<std::sync::Mutex<Verified>>,
}

/// Identity tokens that verified, by their text, with their expiry.
type Verified = HashMap<Box<str>, (Identity, u64)>;

/// At most this many verified identity tokens are remembered: a full set starts over.
const MAX_VERIFIED: usize = 4_096;

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
        // `new_from_slice` accepts keys of any length for HMAC; the error case cannot happen.
        let keyed = HmacSha256::new_from_slice(secret)
            .unwrap_or_else(|_| HmacSha256::new(&Default::default()));
        Self {
            keyed,
            identities: Default::default(),
        }
    }

    fn mac(&self, purpose: &str, payload: &str) -> HmacSha256 {
        let mut mac = self.keyed.clone();
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
        self.verify_until(purpose, token).map(|(claims, _)| claims)
    }

    /// [`verify`](Self::verify), with the token's expiry.
    fn verify_until<T: DeserializeOwned>(
        &self,
        purpose: &str,
        token: &str,
    ) -> Result<(T, u64), TokenError> {
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
        Ok((envelope.claims, envelope.exp))
    }

    /// A MAC of `data` for `purpose`, base64url: a value anyone holding the process secret
    /// can recompute (every proxy replica), and no one else can forge (the web app's CSRF
    /// token is that of its session).
    pub fn tag(&self, purpose: &str, data: &str) -> String {
        B64.encode(self.mac(purpose, data).finalize().into_bytes())
    }

    pub fn sign_identity(&self, identity: &Identity, ttl: Duration) -> String {
        self.sign(IDENTITY_PURPOSE, identity, ttl)
    }

    pub fn verify_identity(&self, token: &str) -> Result<Identity, TokenError> {
        let now = now_secs();
        if let Some((identity, exp)) = self.verified().get(token)
            && *exp >= now
        {
            return Ok(identity.clone());
        }
        let (identity, exp) = self.verify_until::<Identity>(IDENTITY_PURPOSE, token)?;
        let mut verified = self.verified();
        if verified.len() >= MAX_VERIFIED {
            verified.clear();
        }
        verified.insert(token.into(), (identity.clone(), exp));
        Ok(identity)
    }

    fn verified(&self) -> std::sync::MutexGuard<'_, Verified> {
        // A plain map: a panic elsewhere while holding the lock leaves it usable.
        self.identities
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
            space_admin: false,
            login: None,
        }
    }

    #[test]
    fn identity_tokens_say_how_the_caller_logged_in() {
        let signer = TokenSigner::new(b"k");
        for (login, text) in [
            (Login::Password, "password"),
            (Login::AppToken, "app_token"),
            (Login::Oidc, "oidc"),
        ] {
            let who = Identity {
                login: Some(login),
                ..alice()
            };
            let token = signer.sign_identity(&who, Duration::from_secs(60));
            assert_eq!(signer.verify_identity(&token), Ok(who));
            let claims: serde_json::Value = signer.verify(IDENTITY_PURPOSE, &token).unwrap();
            assert_eq!(claims["login"], text);
        }
        // Tokens without the claim (services, link visitors) read as no login at all.
        let token = signer.sign_identity(&alice(), Duration::from_secs(60));
        assert_eq!(signer.verify_identity(&token).map(|i| i.login), Ok(None));
        assert!(!Login::AppToken.manages_credentials());
        assert!(Login::Password.manages_credentials() && Login::Oidc.manages_credentials());
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
    fn verified_identities_are_remembered_until_their_expiry_only() {
        let s = TokenSigner::new(b"secret");
        let t = s.sign_identity(&alice(), Duration::from_secs(60));
        assert_eq!(s.verify_identity(&t), Ok(alice()));
        // Remembered: a clone of the signer (as every hop holds) serves it from memory.
        let bob = Identity {
            username: "bob".into(),
            ..alice()
        };
        let far = now_secs() + 3600;
        s.verified().insert(t.clone().into(), (bob.clone(), far));
        assert_eq!(s.clone().verify_identity(&t), Ok(bob.clone()));
        // Past the remembered expiry the token is verified again.
        s.verified().insert(t.clone().into(), (bob, 1));
        assert_eq!(s.verify_identity(&t), Ok(alice()));
        // Only the very text that verified is remembered: one byte more is checked in full.
        let mut forged = t.clone();
        forged.push('A');
        assert!(s.verify_identity(&forged).is_err());
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
