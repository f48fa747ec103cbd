//! OpenID Connect Bearer tokens: verifying the provider's JWTs and mapping them to arca users.
//!
//! The provider's discovery document and signing keys (JWKS) are fetched when the proxy starts
//! and kept in memory, refreshed every [`REFRESH`]; a token is verified locally against them
//! (RS256 or ES256; signature, `iss`, `aud` when configured, `exp`/`nbf` with [`LEEWAY`]), so
//! the provider is not on the request path: while it is down, Basic logins and tokens signed
//! with known keys keep working. A token naming a key we do not know triggers one JWKS refetch
//! (the provider rotated its keys), at most once per [`REFETCH_EVERY`] whatever the tokens say,
//! so garbage tokens cannot make us hammer the provider.
//!
//! A verified token becomes an arca identity through the Users service: the user named by the
//! configured claim, created at first login when `proxy.oidc.provision` is on. The result is
//! cached until the token expires or for [`CACHE_TTL`], whichever is first, in the proxy's
//! credential cache ([`crate::auth::CredentialCache`]: keyed by an HMAC of the token under a
//! per-process secret, so neither the cache nor a heap dump holds a usable token). The
//! credential feed that keeps Basic logins honest evicts these entries too: a user deleted or
//! changed in arca is refused (or re-read) on the very next request, and while the feed is
//! down nothing is cached. No token is ever logged.
//!
//! Refused tokens count as failed logins ([`arca_runtime::Throttle`]): per client address always,
//! and per user only once the signature proved the provider named that user (otherwise
//! anyone could lock any account out with unsigned garbage naming it).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arca_proto::ErrorKind;
use arca_proto::v1::users_client::UsersClient;
use arca_proto::v1::{CreateUserRequest, GetUserRequest, User};
use arca_runtime::{
    BoxFuture, Identity, Login, Schedule, ServiceError, TokenSigner, Worker, WorkerState,
};
use arca_transport::Channel;
use http::HeaderValue;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::auth::CredentialCache;
use arca_runtime::Throttle;

/// Clock skew tolerated on `exp` and `nbf`.
const LEEWAY: u64 = 30;
/// Longest a verified token is trusted without being verified again. The credential feed
/// evicts entries of changed users at once; this bounds what a missed event could cost.
const CACHE_TTL: Duration = Duration::from_secs(60);
/// Identity tokens signed for the frontend outlive the cache entry that hands them out.
const TOKEN_TTL: Duration = Duration::from_secs(600);
/// Unknown-`kid` refetches of the JWKS happen at most this often.
const REFETCH_EVERY: Duration = Duration::from_secs(30);
/// The JWKS is refreshed this often, so keys the provider withdrew stop being accepted.
const REFRESH: Duration = Duration::from_secs(600);
/// Discovery and JWKS documents larger than this are refused.
const MAX_DOCUMENT: usize = 1 << 20;

/// Why a Bearer token was not accepted.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum BearerError {
    /// The token is not valid (401); the reason is for the log.
    #[error("{0}")]
    Invalid(String),
    /// The provider's keys or the Users service could not be reached (503).
    #[error("{0}")]
    Unavailable(String),
    /// Too many failed logins from this address or for this user (429 with `Retry-After`).
    #[error("throttled for {0:?}")]
    Throttled(Duration),
}

/// Why the provider's documents could not be loaded.
#[derive(Debug, thiserror::Error)]
enum FetchError {
    #[error("GET {url}: {reason}")]
    Http { url: String, reason: String },
    #[error("{url}: {reason}")]
    Document { url: String, reason: String },
    #[error("discovery names issuer {found:?}, configured is {configured:?}")]
    IssuerMismatch { found: String, configured: String },
}

#[derive(Clone)]
pub(crate) struct Oidc {
    inner: Arc<Inner>,
}

struct Inner {
    issuer: String,
    audience: Option<String>,
    user_claim: String,
    provision: bool,
    /// Bounds user creations (`proxy.oidc.provisioning`).
    provisioning: arca_runtime::Limiter,
    /// Concurrent first requests of one user (one token or several) look the user up, and
    /// create it, once.
    flights: arca_runtime::SingleFlight<String, Result<User, BearerError>>,
    http: reqwest::Client,
    users: Channel,
    signer: TokenSigner,
    keys: RwLock<Keys>,
    /// When the last unknown-`kid` refetch started; the lock also makes concurrent refetches
    /// one, the others waiting for its keys.
    refetch: tokio::sync::Mutex<Option<Instant>>,
    cache: CredentialCache,
    throttle: Throttle,
}

#[derive(Default)]
struct Keys {
    /// The `issuer` of the discovery document (tokens' `iss` must be exactly this).
    issuer: Option<String>,
    jwks_uri: Option<String>,
    /// Where the web app's login sends browsers, and where the proxy trades the code.
    endpoints: Option<Endpoints>,
    keys: Vec<Key>,
    loaded: bool,
}

/// The provider's endpoints of the authorization-code flow (discovery's
/// `authorization_endpoint` and `token_endpoint`).
#[derive(Clone)]
pub(crate) struct Endpoints {
    pub(crate) authorization: String,
    pub(crate) token: String,
    /// Where a browser is sent to end its session at the provider too (RP-Initiated Logout
    /// 1.0), if the provider has one.
    pub(crate) end_session: Option<String>,
}

struct Key {
    kid: Option<String>,
    alg: Algorithm,
    key: DecodingKey,
}

#[derive(Deserialize)]
struct Discovery {
    issuer: String,
    jwks_uri: String,
    authorization_endpoint: Option<String>,
    token_endpoint: Option<String>,
    end_session_endpoint: Option<String>,
}

impl Oidc {
    /// `cache` is the proxy's credential cache (the feed evicts from it); `throttle` counts
    /// failed logins with Basic's.
    pub(crate) fn new(
        config: &arca_config::ProxyOidc,
        users: Channel,
        signer: TokenSigner,
        cache: CredentialCache,
        throttle: Throttle,
    ) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("HTTP client for proxy.oidc.issuer: {e}"))?;
        Ok(Self {
            inner: Arc::new(Inner {
                issuer: config.issuer.clone(),
                audience: config.audience.clone(),
                user_claim: config.user_claim.clone(),
                provision: config.provision,
                provisioning: arca_runtime::Limiter::new(
                    "proxy/oidc-user",
                    (&config.provisioning).into(),
                ),
                flights: arca_runtime::SingleFlight::new(),
                http,
                users,
                signer,
                keys: RwLock::default(),
                refetch: tokio::sync::Mutex::new(None),
                cache,
                throttle,
            }),
        })
    }

    /// The worker that loads the provider's keys at once, retrying with backoff until it
    /// answers, then refreshes them every [`REFRESH`] (keeping the old ones while the provider
    /// is unreachable), until `shutdown`.
    pub(crate) fn key_refresher(&self, shutdown: CancellationToken) -> KeyRefresher {
        KeyRefresher {
            oidc: self.clone(),
            shutdown,
        }
    }

    /// The identity token for a Bearer token from a client at `peer`.
    pub(crate) async fn authenticate(
        &self,
        token: &str,
        peer: Option<IpAddr>,
    ) -> Result<HeaderValue, BearerError> {
        let inner = &self.inner;
        let cache_key = inner.cache.bearer_key(token);
        if let Some(identity) = inner.cache.get(&cache_key) {
            return Ok(identity);
        }
        // Refused before any signature is checked or any key fetched: a blocked address
        // costs us nothing.
        let mut throttle_keys: Vec<String> =
            peer.map(|ip| format!("addr:{ip}")).into_iter().collect();
        if let Some(wait) = inner.throttle.blocked(&throttle_keys) {
            return Err(BearerError::Throttled(wait));
        }
        // Taken before the user is looked up: a change of the user after this point makes
        // the answer too old to cache.
        let started = inner.cache.epoch();
        match self.verify(token, &mut throttle_keys).await {
            Ok((identity, user_id, exp)) => {
                let left = exp.map_or(Duration::ZERO, |exp| {
                    Duration::from_secs(exp.saturating_sub(unix_now()))
                });
                let until = Instant::now() + left.min(CACHE_TTL);
                inner
                    .cache
                    .insert(cache_key, identity.clone(), user_id, until, started);
                Ok(identity)
            }
            Err(BearerError::Invalid(why)) => {
                inner.throttle.failed(&throttle_keys);
                Err(BearerError::Invalid(why))
            }
            Err(e) => Err(e),
        }
    }

    /// Verifies `token` and finds its user: the identity token, the user's id and the
    /// token's `exp`. Once the signature holds, the user's throttle key joins `throttle_keys`.
    async fn verify(
        &self,
        token: &str,
        throttle_keys: &mut Vec<String>,
    ) -> Result<(HeaderValue, String, Option<u64>), BearerError> {
        let inner = &self.inner;
        let claims = self.claims(token, inner.audience.as_deref()).await?;
        let identity = self.identity(&claims, throttle_keys).await?;
        let signed = inner.signer.sign_identity(&identity, TOKEN_TTL + CACHE_TTL);
        let signed = HeaderValue::from_str(&signed)
            .map_err(|_| BearerError::Unavailable("identity token encoding".into()))?;
        let exp = claims.get("exp").and_then(serde_json::Value::as_u64);
        Ok((signed, identity.id, exp))
    }

    /// The identity of the user an ID token from the web app's login names (OpenID Connect
    /// Core §3.1.3.7: signed by the provider, `aud` holding `client_id`, `nonce` the one the
    /// login sent), under the login throttle like every other way of logging in.
    pub(crate) async fn login(
        &self,
        id_token: &str,
        client_id: &str,
        nonce: &str,
        peer: Option<IpAddr>,
    ) -> Result<Identity, BearerError> {
        let inner = &self.inner;
        let mut throttle_keys: Vec<String> =
            peer.map(|ip| format!("addr:{ip}")).into_iter().collect();
        if let Some(wait) = inner.throttle.blocked(&throttle_keys) {
            return Err(BearerError::Throttled(wait));
        }
        let verified = async {
            let claims = self.claims(id_token, Some(client_id)).await?;
            let said = claims.get("nonce").and_then(serde_json::Value::as_str);
            if said != Some(nonce) {
                return Err(BearerError::Invalid(
                    "the ID token's nonce is not the login's".into(),
                ));
            }
            self.identity(&claims, &mut throttle_keys).await
        }
        .await;
        if let Err(BearerError::Invalid(_)) = &verified {
            inner.throttle.failed(&throttle_keys);
        }
        verified
    }

    /// The provider's login endpoints, loading discovery first if the start-up fetch has not
    /// landed yet. `None`: the provider names none (it cannot log browsers in).
    pub(crate) async fn endpoints(&self) -> Result<Option<Endpoints>, BearerError> {
        let loaded = || {
            let keys = self
                .inner
                .keys
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            keys.loaded.then(|| keys.endpoints.clone())
        };
        if let Some(endpoints) = loaded() {
            return Ok(endpoints);
        }
        self.inner.refetch_for_unknown_key().await?;
        Ok(loaded().flatten())
    }

    /// The HTTP client the provider is asked with (bounded connect and total timeouts).
    pub(crate) fn http(&self) -> &reqwest::Client {
        &self.inner.http
    }

    /// The claims of a token the provider signed for `audience` (any audience when `None`).
    async fn claims(
        &self,
        token: &str,
        audience: Option<&str>,
    ) -> Result<HashMap<String, serde_json::Value>, BearerError> {
        let inner = &self.inner;
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| BearerError::Invalid(format!("malformed token: {e}")))?;
        if !matches!(header.alg, Algorithm::RS256 | Algorithm::ES256) {
            return Err(BearerError::Invalid(format!(
                "algorithm {:?} not accepted (RS256, ES256)",
                header.alg
            )));
        }
        let kid = header.kid.as_deref();
        let (key, issuer) = match inner.find(kid, header.alg) {
            Some(found) => found,
            None => {
                inner.refetch_for_unknown_key().await?;
                inner.find(kid, header.alg).ok_or_else(|| {
                    BearerError::Invalid(format!("no provider key {kid:?} for {:?}", header.alg))
                })?
            }
        };
        let mut validation = Validation::new(header.alg);
        validation.leeway = LEEWAY;
        validation.validate_nbf = true;
        validation.set_issuer(&[issuer]);
        match audience {
            Some(aud) => {
                validation.set_audience(&[aud]);
                validation.set_required_spec_claims(&["exp", "iss", "aud"]);
            }
            None => {
                validation.validate_aud = false;
                validation.set_required_spec_claims(&["exp", "iss"]);
            }
        }
        jsonwebtoken::decode::<HashMap<String, serde_json::Value>>(token, &key, &validation)
            .map(|data| data.claims)
            .map_err(|e| BearerError::Invalid(format!("token refused: {e}")))
    }

    /// The arca user verified `claims` name (created first when provisioning is on). Once
    /// known, the user's throttle key joins `throttle_keys`.
    async fn identity(
        &self,
        claims: &HashMap<String, serde_json::Value>,
        throttle_keys: &mut Vec<String>,
    ) -> Result<Identity, BearerError> {
        let inner = &self.inner;
        let text = |name: &str| {
            claims
                .get(name)
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let username = text(&inner.user_claim);
        if username.is_empty() {
            return Err(BearerError::Invalid(format!(
                "the token has no {} claim",
                inner.user_claim
            )));
        }
        // The same key as Basic logins of this name: one account, one count.
        throttle_keys.push(format!("user:{username}"));
        if let Some(wait) = inner.throttle.blocked(throttle_keys) {
            return Err(BearerError::Throttled(wait));
        }
        let (name, email) = (text("name"), text("email"));
        let (user, _) = inner
            .flights
            .run(username.clone(), || inner.user(&username, &name, &email))
            .await;
        let user = user?;
        Ok(Identity {
            id: user.id,
            username: user.username,
            display_name: user.display_name,
            groups: user.groups,
            admin: user.admin,
            space_admin: user.space_admin,
            login: Some(Login::Oidc),
        })
    }
}

impl Inner {
    /// The key for a token's `kid` and `alg`, and the issuer its `iss` must name. A token
    /// without `kid` is accepted only when exactly one key fits its algorithm.
    fn find(&self, kid: Option<&str>, alg: Algorithm) -> Option<(DecodingKey, String)> {
        let keys = self.keys.read().unwrap_or_else(PoisonError::into_inner);
        let issuer = keys.issuer.clone()?;
        let mut fitting = keys.keys.iter().filter(|k| k.alg == alg);
        let key = match kid {
            Some(kid) => fitting.find(|k| k.kid.as_deref() == Some(kid))?,
            None => {
                let first = fitting.next()?;
                if fitting.next().is_some() {
                    return None;
                }
                first
            }
        };
        Some((key.key.clone(), issuer))
    }

    /// Refetches the keys for a token naming one we do not know, unless that was done less
    /// than [`REFETCH_EVERY`] ago.
    async fn refetch_for_unknown_key(&self) -> Result<(), BearerError> {
        let mut last = self.refetch.lock().await;
        let loaded = self
            .keys
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .loaded;
        if let Some(at) = *last
            && at.elapsed() < REFETCH_EVERY
        {
            return if loaded {
                Ok(())
            } else {
                Err(BearerError::Unavailable(
                    "the OIDC provider's keys are not loaded yet".into(),
                ))
            };
        }
        *last = Some(Instant::now());
        match self.load_keys().await {
            // The first keys, not a rotation: a token came before the start-up fetch landed.
            // The provider's next rotation must not wait out a cooldown this started.
            Ok(_) if !loaded => {
                *last = None;
                Ok(())
            }
            Ok(count) => {
                tracing::info!(
                    keys = count,
                    "OIDC signing keys refetched for an unknown key id"
                );
                Ok(())
            }
            Err(e) if loaded => {
                tracing::warn!(error = %e, "cannot refetch the OIDC provider's keys");
                Ok(())
            }
            Err(e) => Err(BearerError::Unavailable(format!(
                "the OIDC provider's keys are not loaded: {e}"
            ))),
        }
    }

    /// Fetches discovery (once it succeeded, the JWKS URI is kept) and the JWKS; replaces the
    /// keys only when both worked. Returns how many usable keys there are.
    async fn load_keys(&self) -> Result<usize, FetchError> {
        let known = {
            let keys = self.keys.read().unwrap_or_else(PoisonError::into_inner);
            let endpoints = keys.endpoints.clone();
            keys.issuer
                .clone()
                .zip(keys.jwks_uri.clone())
                .map(|(issuer, jwks)| (issuer, jwks, endpoints))
        };
        let (issuer, jwks_uri, endpoints) = match known {
            Some(known) => known,
            None => {
                let url = format!(
                    "{}/.well-known/openid-configuration",
                    self.issuer.trim_end_matches('/')
                );
                let discovery: Discovery = self.get_json(&url).await?;
                // OpenID Connect Discovery 1.0 §4.3: the document's issuer must be the one we
                // asked, or tokens could be minted by someone else's provider.
                if discovery.issuer.trim_end_matches('/') != self.issuer.trim_end_matches('/') {
                    return Err(FetchError::IssuerMismatch {
                        found: discovery.issuer,
                        configured: self.issuer.clone(),
                    });
                }
                let end_session = discovery.end_session_endpoint;
                let endpoints = discovery
                    .authorization_endpoint
                    .zip(discovery.token_endpoint)
                    .map(|(authorization, token)| Endpoints {
                        authorization,
                        token,
                        end_session,
                    });
                (discovery.issuer, discovery.jwks_uri, endpoints)
            }
        };
        let set: JwkSet = self.get_json(&jwks_uri).await?;
        let keys: Vec<Key> =
            set.keys
                .iter()
                .filter(|jwk| {
                    !matches!(
                        jwk.common.public_key_use,
                        Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))
                    )
                })
                .filter_map(|jwk| {
                    let alg = match (&jwk.algorithm, jwk.common.key_algorithm) {
                        (AlgorithmParameters::RSA(_), None | Some(KeyAlgorithm::RS256)) => {
                            Algorithm::RS256
                        }
                        (
                            AlgorithmParameters::EllipticCurve(ec),
                            None | Some(KeyAlgorithm::ES256),
                        ) if ec.curve == EllipticCurve::P256 => Algorithm::ES256,
                        _ => return None,
                    };
                    let key = DecodingKey::from_jwk(jwk).ok()?;
                    Some(Key {
                        kid: jwk.common.key_id.clone(),
                        alg,
                        key,
                    })
                })
                .collect();
        if keys.is_empty() {
            return Err(FetchError::Document {
                url: jwks_uri,
                reason: "no RS256 or ES256 signing key".into(),
            });
        }
        let count = keys.len();
        let mut current = self.keys.write().unwrap_or_else(PoisonError::into_inner);
        *current = Keys {
            issuer: Some(issuer),
            jwks_uri: Some(jwks_uri),
            endpoints,
            keys,
            loaded: true,
        };
        Ok(count)
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, FetchError> {
        let http = |reason: String| FetchError::Http {
            url: url.to_owned(),
            reason,
        };
        let response = self
            .http
            .get(url)
            .header(http::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| http(e.to_string()))?;
        if !response.status().is_success() {
            return Err(http(format!("status {}", response.status())));
        }
        if response
            .content_length()
            .is_some_and(|n| n > MAX_DOCUMENT as u64)
        {
            return Err(http("document too large".into()));
        }
        let body = response.bytes().await.map_err(|e| http(e.to_string()))?;
        if body.len() > MAX_DOCUMENT {
            return Err(http("document too large".into()));
        }
        serde_json::from_slice(&body).map_err(|e| FetchError::Document {
            url: url.to_owned(),
            reason: e.to_string(),
        })
    }

    /// The arca user `username`, created first if unknown and provisioning is on.
    async fn user(&self, username: &str, name: &str, email: &str) -> Result<User, BearerError> {
        match self
            .call(
                |mut c, r| async move { c.get_user(r).await },
                GetUserRequest {
                    id: String::new(),
                    username: username.to_owned(),
                },
            )
            .await
        {
            Ok(user) => return Ok(user),
            Err(status) if ErrorKind::of(&status) == ErrorKind::NotFound => {}
            Err(status) => return Err(unavailable(&status)),
        }
        if !self.provision {
            return Err(BearerError::Invalid(format!(
                "no arca user {username:?} and provisioning is off"
            )));
        }
        // No password: the user logs in through the provider only (storage-system stores
        // none for users a service creates, and computes no hash).
        let created = self
            .provisioning
            .run(self.call(
                |mut c, r| async move { c.create_user(r).await },
                CreateUserRequest {
                    username: username.to_owned(),
                    display_name: name.to_owned(),
                    mail: email.to_owned(),
                    password: String::new(),
                    admin: false,
                },
            ))
            .await;
        let result = match &created {
            Ok(_) => "provisioned",
            Err(status) if ErrorKind::of(status) == ErrorKind::AlreadyExists => "joined",
            Err(_) => "failed",
        };
        arca_runtime::limit::count_provisioning("user", result);
        match created {
            Ok(user) => {
                tracing::info!(user = %user.username, id = %user.id, "provisioned a user from OIDC claims");
                Ok(user)
            }
            // Another proxy created it first.
            Err(status) if ErrorKind::of(&status) == ErrorKind::AlreadyExists => self
                .call(
                    |mut c, r| async move { c.get_user(r).await },
                    GetUserRequest {
                        id: String::new(),
                        username: username.to_owned(),
                    },
                )
                .await
                .map_err(|s| unavailable(&s)),
            Err(status) if ErrorKind::of(&status) == ErrorKind::InvalidArgument => {
                Err(BearerError::Invalid(format!(
                    "cannot provision {username:?}: {}",
                    status.message()
                )))
            }
            Err(status) => Err(unavailable(&status)),
        }
    }

    /// One Users call made as the proxy's service identity.
    ///
    /// Looking users up and creating them needs a caller, and creating needs an admin: no user
    /// is logged in yet, so the proxy acts as itself. It signs a one-minute identity
    /// `service:proxy` (a name no user can have: ':' is not allowed in user names) with the
    /// process secret it already uses to vouch for every user, so this grants it nothing it
    /// did not have: whoever holds that secret can mint any identity. The token goes only to
    /// storage-system on these two calls, is never forwarded to the frontend, and clients can
    /// never present one (the proxy strips the identity header from every request).
    async fn call<Req, F, Fut>(&self, f: F, request: Req) -> Result<User, tonic::Status>
    where
        F: FnOnce(UsersClient<Channel>, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<User>, tonic::Status>>,
    {
        let service = Identity {
            id: "service:proxy".into(),
            username: "service:proxy".into(),
            display_name: "arca proxy (OIDC provisioning)".into(),
            groups: Vec::new(),
            admin: true,
            space_admin: false,
            login: None,
        };
        let token = self.signer.sign_identity(&service, Duration::from_secs(60));
        let mut request = tonic::Request::new(request);
        let value: tonic::metadata::AsciiMetadataValue = token
            .parse()
            .map_err(|_| tonic::Status::internal("identity token encoding"))?;
        // The metadata key is the identity header the channel would otherwise fill in.
        request
            .metadata_mut()
            .insert(arca_transport::context::IDENTITY, value);
        f(UsersClient::new(self.users.clone()), request)
            .await
            .map(tonic::Response::into_inner)
    }
}

fn unavailable(status: &tonic::Status) -> BearerError {
    BearerError::Unavailable(format!("users service: {}", status.message()))
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The `Bearer` token of an `Authorization` header (RFC 6750 §2.1), if that is its scheme.
pub(crate) fn bearer_token(value: Option<&HeaderValue>) -> Option<&str> {
    let value = value?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// See [`Oidc::key_refresher`].
pub(crate) struct KeyRefresher {
    oidc: Oidc,
    shutdown: CancellationToken,
}

impl Worker for KeyRefresher {
    fn name(&self) -> &'static str {
        "proxy/oidc-keys"
    }

    fn schedule(&self) -> Schedule {
        Schedule {
            retry: Some((Duration::from_millis(500), Duration::from_secs(30))),
            ..Schedule::every(REFRESH).at_once()
        }
    }

    fn work(&mut self) -> BoxFuture<'_, Result<WorkerState, ServiceError>> {
        Box::pin(async move {
            let inner = &self.oidc.inner;
            // A fetch in flight must not hold up shutdown for its whole timeout.
            let loaded = tokio::select! {
                () = self.shutdown.cancelled() => return Ok(WorkerState::Done),
                loaded = inner.load_keys() => loaded,
            };
            match loaded {
                Ok(count) => {
                    tracing::info!(issuer = %inner.issuer, keys = count, "OIDC signing keys loaded");
                    Ok(WorkerState::Idle)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot load the OIDC provider's keys; retrying");
                    Err(e.to_string().into())
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bearer_tokens() {
        let v = HeaderValue::from_static("Bearer abc.def.ghi");
        assert_eq!(bearer_token(Some(&v)), Some("abc.def.ghi"));
        let v = HeaderValue::from_static("bearer  xyz ");
        assert_eq!(bearer_token(Some(&v)), Some("xyz"));
        let v = HeaderValue::from_static("Basic YWRtaW46eA==");
        assert_eq!(bearer_token(Some(&v)), None);
        let v = HeaderValue::from_static("Bearer ");
        assert_eq!(bearer_token(Some(&v)), None);
        assert_eq!(bearer_token(None), None);
    }

    #[test]
    fn service_calls_use_the_identity_header() {
        // `call` writes the header name literally (tonic wants a 'static key).
        assert_eq!(
            arca_transport::context::IDENTITY_HEADER.as_str(),
            "x-arca-identity"
        );
    }
}
