//! Who is calling: HTTP Basic against the users service, cached so that a password hash is
//! computed once per credential rather than once per request.
//!
//! The cache key is an HMAC of the credential under a key that lives only in this process's
//! memory, so neither the cache nor a heap dump holds a password or a reusable hash of one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use arca_proto::ErrorKind;
use arca_proto::v1::AuthenticateRequest;
use arca_proto::v1::users_client::UsersClient;
use arca_runtime::{Identity, TokenSigner};
use arca_transport::Channel;
use base64::Engine as _;
use hmac::{KeyInit, Mac};
use http::HeaderValue;

/// How long a verified credential is trusted without asking the users service again. Short:
/// a changed password or a removed user stops working within this time everywhere.
const CACHE_TTL: Duration = Duration::from_secs(30);
/// Identity tokens outlive a request but not a session; re-signed from the cache well before.
const TOKEN_TTL: Duration = Duration::from_secs(600);
/// Entries kept at most; the map is cleared of expired entries when it grows past this.
const CACHE_MAX: usize = 10_000;

pub(crate) enum AuthError {
    /// No or unusable credentials: answer 401 with challenges.
    Missing,
    Invalid,
    /// Too many failed logins for this user or address: answer 429 with `Retry-After`.
    Throttled(Duration),
    /// The users service could not be asked: answer 503, not 401 (the password may be fine).
    Unavailable(String),
}

#[derive(Clone)]
pub(crate) struct Authenticator {
    users: Channel,
    signer: TokenSigner,
    cache_key: Arc<[u8]>,
    cache: Arc<Mutex<HashMap<[u8; 32], Cached>>>,
    throttle: crate::throttle::Throttle,
}

#[derive(Clone)]
struct Cached {
    token: HeaderValue,
    until: Instant,
}

impl Authenticator {
    pub(crate) fn new(
        users: Channel,
        signer: TokenSigner,
        throttle: crate::throttle::Throttle,
    ) -> Self {
        Self {
            users,
            signer,
            cache_key: arca_config::generate_secret(32).into_bytes().into(),
            cache: Arc::default(),
            throttle,
        }
    }

    /// The identity token for the request's `Authorization` header.
    pub(crate) async fn authenticate(
        &self,
        authorization: Option<&HeaderValue>,
        peer: Option<std::net::IpAddr>,
    ) -> Result<HeaderValue, AuthError> {
        let (username, password) = basic_credentials(authorization).ok_or(AuthError::Missing)?;
        let key = self.key(&username, &password);
        if let Some(token) = self.cached(&key) {
            return Ok(token);
        }
        let mut keys = vec![format!("user:{username}")];
        if let Some(ip) = peer {
            keys.push(format!("addr:{ip}"));
        }
        if let Some(wait) = self.throttle.blocked(&keys) {
            return Err(AuthError::Throttled(wait));
        }
        let mut client = UsersClient::new(self.users.clone());
        let user = match client
            .authenticate(AuthenticateRequest { username, password })
            .await
        {
            Ok(user) => user.into_inner(),
            Err(status) => {
                return Err(match ErrorKind::of(&status) {
                    ErrorKind::Unauthenticated
                    | ErrorKind::NotFound
                    | ErrorKind::InvalidArgument => {
                        self.throttle.failed(&keys);
                        AuthError::Invalid
                    }
                    _ => AuthError::Unavailable(status.message().to_owned()),
                });
            }
        };
        let identity = Identity {
            id: user.id,
            username: user.username,
            display_name: user.display_name,
            groups: user.groups,
            admin: user.admin,
        };
        let token = self.signer.sign_identity(&identity, TOKEN_TTL + CACHE_TTL);
        let token = HeaderValue::from_str(&token)
            .map_err(|_| AuthError::Unavailable("token encoding".into()))?;
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= CACHE_MAX {
            let now = Instant::now();
            cache.retain(|_, c| c.until > now);
        }
        cache.insert(
            key,
            Cached {
                token: token.clone(),
                until: Instant::now() + CACHE_TTL,
            },
        );
        Ok(token)
    }

    fn cached(&self, key: &[u8; 32]) -> Option<HeaderValue> {
        let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache
            .get(key)
            .filter(|c| c.until > Instant::now())
            .map(|c| c.token.clone())
    }

    fn key(&self, username: &str, password: &str) -> [u8; 32] {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.cache_key)
            .unwrap_or_else(|_| hmac::Hmac::<sha2::Sha256>::new(&Default::default()));
        mac.update(username.as_bytes());
        mac.update(b"\0");
        mac.update(password.as_bytes());
        mac.finalize().into_bytes().into()
    }
}

/// `Basic base64(user:pass)` → (user, pass); the password may contain ':'.
fn basic_credentials(value: Option<&HeaderValue>) -> Option<(String, String)> {
    let value = value?.to_str().ok()?;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, pass) = text.split_once(':')?;
    (!user.is_empty()).then(|| (user.to_owned(), pass.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_basic_credentials() {
        let v = HeaderValue::from_static("Basic YWRtaW46cDpzcw=="); // admin:p:ss
        assert_eq!(
            basic_credentials(Some(&v)),
            Some(("admin".into(), "p:ss".into()))
        );
        assert_eq!(
            basic_credentials(Some(&HeaderValue::from_static("Bearer x"))),
            None
        );
        assert_eq!(
            basic_credentials(Some(&HeaderValue::from_static("Basic !!"))),
            None
        );
        assert_eq!(basic_credentials(None), None);
    }
}
