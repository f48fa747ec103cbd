//! Who is calling: HTTP Basic against the users service, cached so that a password hash is
//! computed once per credential rather than once per request.
//!
//! The cache ([`CredentialCache`]) holds every verified credential the proxy accepts: Basic
//! passwords and app tokens here, OIDC Bearer tokens in [`crate::oidc`]. Its key is an HMAC of
//! the credential under a key that lives only in this process's memory, so neither the cache
//! nor a heap dump holds a password, a token or a reusable hash of one.
//!
//! Invalidation: the proxy subscribes to storage-system's credential change feed
//! (`WatchCredentials`) and drops a user's entries, whichever way they logged in, when the
//! feed says the user changed (new password, deleted, app token revoked, groups changed),
//! acknowledging each change; the change answers its own caller only after that
//! acknowledgement, so the next request already misses the cache. Nothing is asked per
//! request. While the feed is not subscribed (at start, after the stream broke, until a
//! resubscription succeeds) nothing is served from the cache and nothing is added to it: every
//! request is verified by storage-system.
//!
//! The identity token handed downstream also says how the caller logged in ([`Login`]), so
//! the frontend can keep app tokens from managing app tokens.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arca_proto::ErrorKind;
use arca_proto::v1::users_client::UsersClient;
use arca_proto::v1::{
    AckCredentialsRequest, AuthenticateRequest, CredentialEventKind, WatchCredentialsRequest,
};
use arca_runtime::{BoxFuture, Schedule, ServiceError, Worker, WorkerState};
use arca_runtime::{Identity, Login, SingleFlight, TokenSigner};
use arca_transport::Channel;
use base64::Engine as _;
use hmac::{KeyInit, Mac};
use http::HeaderValue;
use tokio_util::sync::CancellationToken;

/// How long a verified credential is trusted without asking the users service again. The
/// change feed ends entries early; this bounds what a feed that misses an event could cost.
const CACHE_TTL: Duration = Duration::from_secs(30);
/// Identity tokens outlive a request but not a session; re-signed from the cache well before.
const TOKEN_TTL: Duration = Duration::from_secs(600);
/// Entries kept at most; the map is cleared of expired entries when it grows past this.
const CACHE_MAX: usize = 10_000;
/// The purpose of the tokens this proxy signs to read the credential feed (storage-system
/// checks the same string).
const WATCH_PURPOSE: &str = "credentials-watch";
/// storage-system sends a heartbeat every 5 s; this much silence means the stream is dead
/// even if no connection error says so (a peer that vanished without a reset).
const FEED_SILENCE: Duration = Duration::from_secs(15);
/// Resubscription backoff: doubling from the first to the last value.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

#[derive(Clone)]
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
    cache: CredentialCache,
    throttle: arca_runtime::Throttle,
    /// `proxy.auth.basic`: false takes only app tokens as the Basic secret.
    passwords: bool,
    /// Concurrent requests of one credential that miss the cache (a sync client opening its
    /// connections, or all of them once the entry expired) share one verification: one
    /// argon2 computation instead of one per request, which queued behind each other on the
    /// bounded hashing threads and stalled every connection for hundreds of milliseconds.
    flights: Arc<SingleFlight<CacheKey, Result<HeaderValue, AuthError>>>,
}

#[derive(Clone)]
struct Cached {
    token: HeaderValue,
    until: Instant,
    user_id: String,
}

/// The verified credentials, and what decides whether they may be used and added to.
#[derive(Default)]
struct Cache {
    entries: HashMap<[u8; 32], Cached>,
    /// The change feed is subscribed: entries are trustworthy.
    live: bool,
    /// Counts invalidations. A lookup that started at epoch E is cached only if no
    /// invalidation that could concern it came after E: otherwise the change may have
    /// committed after storage-system answered, and the answer is already stale.
    epoch: u64,
    /// User id → the epoch of the last invalidation of that user.
    invalidated: HashMap<String, u64>,
    /// The epoch of the last whole-cache invalidation.
    reset_at: u64,
}

impl Cache {
    fn get(&self, key: &[u8; 32]) -> Option<HeaderValue> {
        if !self.live {
            return None;
        }
        self.entries
            .get(key)
            .filter(|c| c.until > Instant::now())
            .map(|c| c.token.clone())
    }

    fn insert(&mut self, key: [u8; 32], entry: Cached, started: u64) {
        let stale = !self.live
            || self.reset_at > started
            || self
                .invalidated
                .get(&entry.user_id)
                .is_some_and(|&at| at > started);
        if stale {
            return;
        }
        if self.entries.len() >= CACHE_MAX {
            let now = Instant::now();
            self.entries.retain(|_, c| c.until > now);
        }
        self.entries.insert(key, entry);
    }

    fn forget_user(&mut self, user_id: &str) {
        self.epoch += 1;
        self.entries.retain(|_, c| c.user_id != user_id);
        if self.invalidated.len() >= CACHE_MAX {
            // Bounded memory: forgetting who was invalidated when is safe if every lookup
            // in flight is treated as stale.
            self.invalidated.clear();
            self.reset_at = self.epoch;
        }
        self.invalidated.insert(user_id.to_owned(), self.epoch);
    }

    fn forget_all(&mut self, live: bool) {
        self.epoch += 1;
        self.entries.clear();
        self.invalidated.clear();
        self.reset_at = self.epoch;
        self.live = live;
    }
}

/// The proxy's cache of verified credentials, shared by every way of logging in and kept
/// honest by the credential feed. Cheap to clone.
#[derive(Clone)]
pub(crate) struct CredentialCache {
    /// The HMAC key of cache keys: random per process, never leaves memory.
    key: Arc<[u8]>,
    cache: Arc<Mutex<Cache>>,
}

/// The cache key of a credential: an HMAC, never the credential.
pub(crate) type CacheKey = [u8; 32];

impl CredentialCache {
    fn new() -> Self {
        Self {
            key: arca_config::generate_secret(32).into_bytes().into(),
            cache: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Cache> {
        lock_cache(&self.cache)
    }

    /// The key of a credential of kind `kind` made of `parts`. The kind keeps a Basic
    /// password and a Bearer token that happen to be the same bytes apart.
    fn key(&self, kind: &str, parts: &[&str]) -> CacheKey {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.key)
            .unwrap_or_else(|_| hmac::Hmac::<sha2::Sha256>::new(&Default::default()));
        mac.update(kind.as_bytes());
        for part in parts {
            mac.update(b"\0");
            mac.update(part.as_bytes());
        }
        mac.finalize().into_bytes().into()
    }

    /// The cache key of a Bearer token.
    pub(crate) fn bearer_key(&self, token: &str) -> CacheKey {
        self.key("bearer", &[token])
    }

    /// The identity token cached for `key`, if the feed is live and the entry fresh.
    pub(crate) fn get(&self, key: &CacheKey) -> Option<HeaderValue> {
        self.lock().get(key)
    }

    /// Where invalidations stand now; a verification started at this point is cached with
    /// [`insert`](Self::insert) only if nothing concerning its user happened since.
    pub(crate) fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// Caches `token`, `user_id`'s identity, until `until`, unless the feed is down or the
    /// user changed since `started` (then the answer may already be stale).
    pub(crate) fn insert(
        &self,
        key: CacheKey,
        token: HeaderValue,
        user_id: String,
        until: Instant,
        started: u64,
    ) {
        self.lock().insert(
            key,
            Cached {
                token,
                until,
                user_id,
            },
            started,
        );
    }
}

impl Authenticator {
    /// The authenticator, and the worker that keeps its cache subscribed to the credential
    /// feed of `users` (storage-system) until `shutdown`; until that worker runs, nothing is
    /// cached.
    pub(crate) fn new(
        users: Channel,
        signer: TokenSigner,
        throttle: arca_runtime::Throttle,
        passwords: bool,
        shutdown: CancellationToken,
    ) -> (Self, FeedFollower) {
        let cache = CredentialCache::new();
        let follower = FeedFollower {
            users: users.clone(),
            signer: signer.clone(),
            cache: cache.cache.clone(),
            shutdown,
            resubscribe: false,
        };
        let auth = Self {
            users,
            signer,
            cache,
            throttle,
            passwords,
            flights: Arc::new(SingleFlight::new()),
        };
        (auth, follower)
    }

    /// The cache the feed keeps; Bearer logins share it, so the feed evicts them too. Those
    /// entries are only as live as this authenticator: keep it as long as they are used.
    pub(crate) fn cache(&self) -> CredentialCache {
        self.cache.clone()
    }

    /// The identity token for the request's `Authorization` header.
    pub(crate) async fn authenticate(
        &self,
        authorization: Option<&HeaderValue>,
        peer: Option<std::net::IpAddr>,
    ) -> Result<HeaderValue, AuthError> {
        let (username, password) = basic_credentials(authorization).ok_or(AuthError::Missing)?;
        let key = self.cache.key("basic", &[&username, &password]);
        if let Some(token) = self.cache.get(&key) {
            return Ok(token);
        }
        let mut keys = vec![format!("user:{username}")];
        if let Some(ip) = peer {
            keys.push(format!("addr:{ip}"));
        }
        if let Some(wait) = self.throttle.blocked(&keys) {
            return Err(AuthError::Throttled(wait));
        }
        let verify = || self.verify(username, password, keys, key, Secret::Basic);
        self.flights.run(key, verify).await.0
    }

    /// The identity token for a web app session (`crate::session`): the session is one of
    /// the user's app tokens, checked as one (never as a password), cached and evicted like
    /// a Basic login. A wrong one is not counted against the throttle: it is a cookie the
    /// browser kept after the session ended, not a guess (192 random bits are not guessed).
    pub(crate) async fn authenticate_session(
        &self,
        username: &str,
        secret: &str,
    ) -> Result<HeaderValue, AuthError> {
        let key = self.cache.key("session", &[username, secret]);
        if let Some(token) = self.cache.get(&key) {
            return Ok(token);
        }
        let verify = || {
            self.verify(
                username.to_owned(),
                secret.to_owned(),
                Vec::new(),
                key,
                Secret::Session,
            )
        };
        self.flights.run(key, verify).await.0
    }

    /// Checks a user's password for the web app's login form, under the same throttle as
    /// Basic logins (a failure counts against the user name and the address). Nothing is
    /// cached: the session made next is the credential. An app token is refused here: the
    /// form asks for the password, and a session is worth more than an app token (it may
    /// manage app tokens).
    pub(crate) async fn check_password(
        &self,
        username: &str,
        password: &str,
        peer: Option<std::net::IpAddr>,
    ) -> Result<arca_proto::v1::User, AuthError> {
        let mut keys = vec![format!("user:{username}")];
        if let Some(ip) = peer {
            keys.push(format!("addr:{ip}"));
        }
        if let Some(wait) = self.throttle.blocked(&keys) {
            return Err(AuthError::Throttled(wait));
        }
        let mut client = UsersClient::new(self.users.clone());
        match client
            .authenticate(AuthenticateRequest {
                username: username.to_owned(),
                password: password.to_owned(),
                app_tokens_only: false,
            })
            .await
        {
            Ok(user) if !user.get_ref().app_token => Ok(user.into_inner()),
            Ok(_) => {
                self.throttle.failed(&keys);
                Err(AuthError::Invalid)
            }
            Err(status) => Err(self.refused(&status, &keys)),
        }
    }

    /// What a refusal of the users service means for the caller; failures count in the
    /// throttle against `keys`.
    fn refused(&self, status: &tonic::Status, keys: &[String]) -> AuthError {
        match ErrorKind::of(status) {
            ErrorKind::Unauthenticated | ErrorKind::NotFound | ErrorKind::InvalidArgument => {
                self.throttle.failed(keys);
                AuthError::Invalid
            }
            _ => AuthError::Unavailable(status.message().to_owned()),
        }
    }

    /// Asks the users service about a credential the cache does not hold, and caches the
    /// answer. `keys`: what a failure counts against in the throttle.
    async fn verify(
        &self,
        username: String,
        password: String,
        keys: Vec<String>,
        key: CacheKey,
        secret: Secret,
    ) -> Result<HeaderValue, AuthError> {
        let started = self.cache.epoch();
        let mut client = UsersClient::new(self.users.clone());
        let user = match client
            .authenticate(AuthenticateRequest {
                username,
                password,
                app_tokens_only: secret == Secret::Session || !self.passwords,
            })
            .await
        {
            Ok(user) => user.into_inner(),
            Err(status) => return Err(self.refused(&status, &keys)),
        };
        // An app token that expires sooner than the cache entry would ends the entry with it.
        let mut until = Instant::now() + CACHE_TTL;
        if user.credential_expires != 0 {
            let left = (UNIX_EPOCH + Duration::from_secs(user.credential_expires))
                .duration_since(SystemTime::now())
                .unwrap_or_default();
            until = until.min(Instant::now() + left);
        }
        let user_id = user.id.clone();
        let identity = Identity {
            id: user.id,
            username: user.username,
            display_name: user.display_name,
            groups: user.groups,
            admin: user.admin,
            space_admin: user.space_admin,
            login: Some(match secret {
                Secret::Session => Login::Session,
                Secret::Basic if user.app_token => Login::AppToken,
                Secret::Basic => Login::Password,
            }),
        };
        let token = self.signer.sign_identity(&identity, TOKEN_TTL + CACHE_TTL);
        let token = HeaderValue::from_str(&token)
            .map_err(|_| AuthError::Unavailable("token encoding".into()))?;
        self.cache
            .insert(key, token.clone(), user_id, until, started);
        Ok(token)
    }
}

/// Where a secret came from, which decides what it may be and the login it makes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Secret {
    /// HTTP Basic: the password or an app token.
    Basic,
    /// The web app's session cookie: only the session's own app token.
    Session,
}

/// Claims of a feed subscription token: only who is asking, for the logs.
#[derive(serde::Serialize)]
struct WatchClaims {
    sub: &'static str,
}

fn watch_token(signer: &TokenSigner) -> String {
    signer.sign(
        WATCH_PURPOSE,
        &WatchClaims { sub: "proxy" },
        Duration::from_secs(60),
    )
}

fn lock_cache(cache: &Mutex<Cache>) -> MutexGuard<'_, Cache> {
    cache.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Keeps the credential feed subscribed: subscribes, applies events, and after any loss clears
/// the cache and resubscribes, with backoff while subscribing fails.
pub(crate) struct FeedFollower {
    users: Channel,
    signer: TokenSigner,
    cache: Arc<Mutex<Cache>>,
    /// A subscription lasts until it is lost; it ends at shutdown too.
    shutdown: CancellationToken,
    /// Not the first subscription: wait a little before the next.
    resubscribe: bool,
}

impl Worker for FeedFollower {
    fn name(&self) -> &'static str {
        "proxy/credential-feed"
    }

    fn schedule(&self) -> Schedule {
        Schedule::on_work(BACKOFF_MIN, BACKOFF_MAX)
    }

    fn wait_for_work(&mut self) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            // After a live subscription was lost: a short pause, then subscribe again.
            if std::mem::replace(&mut self.resubscribe, true) {
                tokio::time::sleep(BACKOFF_MIN).await;
            }
            true
        })
    }

    /// One subscription, from the call until it is lost: `Idle` when it had been live (the
    /// next one follows after a pause), an error when it never got subscribed (the runner
    /// backs off).
    fn work(&mut self) -> BoxFuture<'_, Result<WorkerState, ServiceError>> {
        Box::pin(async move {
            let outcome = tokio::select! {
                () = self.shutdown.cancelled() => return Ok(WorkerState::Done),
                outcome = subscription(&self.users, &self.signer, &self.cache) => outcome,
            };
            // Whatever ended the subscription, changes may now go unseen: trust nothing cached.
            lock_cache(&self.cache).forget_all(false);
            let Lost { subscribed, why } = outcome;
            if subscribed {
                tracing::warn!(error = %why, "credential feed lost; logins are verified uncached until it is back");
            } else {
                tracing::debug!(error = %why, "credential feed not subscribed yet");
            }
            if subscribed {
                Ok(WorkerState::Idle)
            } else {
                Err(why.into())
            }
        })
    }
}

/// Why a subscription ended, and whether it had got as far as SUBSCRIBED.
struct Lost {
    subscribed: bool,
    why: String,
}

/// One subscription, from the call to the end of its stream.
async fn subscription(users: &Channel, signer: &TokenSigner, cache: &Mutex<Cache>) -> Lost {
    let lost = |subscribed: bool, why: String| Lost { subscribed, why };
    let mut client = UsersClient::new(users.clone());
    let mut stream = match client
        .watch_credentials(WatchCredentialsRequest {
            token: watch_token(signer),
        })
        .await
    {
        Ok(r) => r.into_inner(),
        Err(s) => return lost(false, s.message().to_owned()),
    };
    let mut subscription = None;
    loop {
        let event = match tokio::time::timeout(FEED_SILENCE, stream.message()).await {
            Err(_) => {
                return lost(
                    subscription.is_some(),
                    format!("no event for {FEED_SILENCE:?}"),
                );
            }
            Ok(Err(s)) => return lost(subscription.is_some(), s.message().to_owned()),
            Ok(Ok(None)) => return lost(subscription.is_some(), "the stream ended".into()),
            Ok(Ok(Some(e))) => e,
        };
        match CredentialEventKind::try_from(event.kind) {
            Ok(CredentialEventKind::Subscribed) => {
                // Whatever happened before now is unknown: start empty, and live.
                lock_cache(cache).forget_all(true);
                tracing::info!(
                    generation = event.generation,
                    "subscribed to credential changes"
                );
                subscription = Some(event.subscription);
            }
            Ok(CredentialEventKind::Changed) => {
                lock_cache(cache).forget_user(&event.user_id);
                acknowledge(users, signer, subscription.as_deref(), event.generation);
            }
            Ok(CredentialEventKind::Reset) => {
                let live = subscription.is_some();
                lock_cache(cache).forget_all(live);
                acknowledge(users, signer, subscription.as_deref(), event.generation);
            }
            Ok(CredentialEventKind::Heartbeat) => {}
            // A newer storage-system's event kind: the safe reading is "anything changed".
            Err(_) => lock_cache(cache).forget_all(subscription.is_some()),
        }
    }
}

/// Tells storage-system an event was applied; off the feed's path, so a slow answer never
/// delays the next event.
fn acknowledge(users: &Channel, signer: &TokenSigner, subscription: Option<&str>, generation: u64) {
    let Some(subscription) = subscription else {
        return;
    };
    let request = AckCredentialsRequest {
        token: watch_token(signer),
        subscription: subscription.to_owned(),
        generation,
    };
    let mut client = UsersClient::new(users.clone());
    tokio::spawn(async move {
        if let Err(s) = client.ack_credentials(request).await {
            // The change waits for us only briefly; a lost stream is noticed by the feed loop.
            tracing::debug!(error = %s.message(), "acknowledging a credential change failed");
        }
    });
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

    fn entry(user: &str) -> Cached {
        Cached {
            token: HeaderValue::from_static("t"),
            until: Instant::now() + Duration::from_secs(60),
            user_id: user.into(),
        }
    }

    #[test]
    fn nothing_is_served_or_kept_while_the_feed_is_down() {
        let mut c = Cache::default();
        let started = c.epoch;
        c.insert([1; 32], entry("u1"), started);
        assert!(c.get(&[1; 32]).is_none(), "not live yet: nothing kept");
        c.forget_all(true);
        let started = c.epoch;
        c.insert([1; 32], entry("u1"), started);
        assert!(c.get(&[1; 32]).is_some());
        c.forget_all(false);
        assert!(c.get(&[1; 32]).is_none());
        c.forget_all(true);
        assert!(c.get(&[1; 32]).is_none(), "a lost feed emptied the cache");
    }

    #[test]
    fn a_change_evicts_its_user_and_stale_answers_are_not_cached() {
        let mut c = Cache::default();
        c.forget_all(true);
        let started = c.epoch;
        c.insert([1; 32], entry("u1"), started);
        c.insert([2; 32], entry("u2"), started);
        c.forget_user("u1");
        assert!(c.get(&[1; 32]).is_none());
        assert!(c.get(&[2; 32]).is_some());

        // A lookup for u2 that started before u2 changed answers with the old state.
        let started = c.epoch;
        c.forget_user("u2");
        c.insert([3; 32], entry("u2"), started);
        assert!(c.get(&[3; 32]).is_none(), "stale answer cached");
        // Another user's change does not spoil it.
        let started = c.epoch;
        c.forget_user("u3");
        c.insert([4; 32], entry("u2"), started);
        assert!(c.get(&[4; 32]).is_some());
        // Neither does a change of the same user that came before the lookup started.
        let started = c.epoch;
        c.insert([5; 32], entry("u2"), started);
        assert!(c.get(&[5; 32]).is_some());
        // A resubscription in between spoils every lookup that started before it.
        let started = c.epoch;
        c.forget_all(true);
        c.insert([6; 32], entry("u9"), started);
        assert!(c.get(&[6; 32]).is_none());
    }

    #[test]
    fn bearer_entries_follow_the_feed_like_basic_ones() {
        let cache = CredentialCache::new();
        let bearer = cache.bearer_key("a.b.c");
        let basic = cache.key("basic", &["a.b.c"]);
        assert_ne!(bearer, basic, "kinds share no keys");
        let token = HeaderValue::from_static("t");
        let until = Instant::now() + Duration::from_secs(60);
        // The feed is not subscribed yet: nothing is kept.
        cache.insert(bearer, token.clone(), "u1".into(), until, cache.epoch());
        assert!(cache.get(&bearer).is_none());
        cache.lock().forget_all(true);
        cache.insert(bearer, token.clone(), "u1".into(), until, cache.epoch());
        assert!(cache.get(&bearer).is_some());
        // The feed says u1 changed (deleted, say): the Bearer login is gone.
        cache.lock().forget_user("u1");
        assert!(cache.get(&bearer).is_none());
        cache.insert(bearer, token, "u1".into(), until, cache.epoch());
        // The feed is lost: nothing is served.
        cache.lock().forget_all(false);
        assert!(cache.get(&bearer).is_none());
    }

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
