//! The web app's "Log in with …": OpenID Connect's authorization-code flow with PKCE (RFC
//! 7636), run by the proxy, so no token of the provider ever reaches the browser.
//!
//! [`routes::SESSION_OIDC`] sends the browser to the provider's authorization endpoint with a
//! fresh `state`, a `nonce` and an S256 code challenge, and sets a short-lived cookie holding
//! the state (`SameSite=Lax`: it must come back with the provider's top-level redirect). The
//! verifier and the nonce are stored nowhere: both are MACs of the state under the process
//! secret, so any proxy replica finishes a login another one started, and nobody without the
//! secret computes them. The state carries its own expiry.
//!
//! [`routes::SESSION_OIDC_CALLBACK`] checks that the state is this browser's cookie's (a login
//! started in another browser, login CSRF, is refused) and not expired, trades the code for
//! tokens at the token endpoint (with the verifier, and the secret of a confidential client),
//! verifies the ID token (signature, issuer, audience = client id, nonce) and opens an arca
//! session as the password form does. Every outcome is a redirect to the app: `/` logged in,
//! or `/?login=CODE`, a fixed word the app turns into a message (no text from a URL is shown).

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use arca_proto::routes;
use arca_runtime::{Throttle, TokenSigner};
use axum::extract::Query;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use http::request::Parts;
use http::{HeaderValue, StatusCode, header};
use sha2::{Digest, Sha256};

use crate::oidc::{BearerError, Endpoints, Oidc};
use crate::session::{self, Sessions};

/// The cookie holding a login's state between the two legs.
const STATE_COOKIE: &str = "arca_oidc";
/// Set beside the session cookie of a login the provider completed: logging out then ends
/// the provider's session too.
const PROVIDER_COOKIE: &str = "arca_oidc_session";
/// Seconds a person has at the provider to log in.
const STATE_TTL: u64 = 600;
const PKCE_PURPOSE: &str = "oidc-pkce";
const NONCE_PURPOSE: &str = "oidc-nonce";
/// A token response larger than this is not one.
const MAX_TOKEN_RESPONSE: usize = 1 << 20;

/// Why a login through the provider ended without a session: the word the app is sent back
/// with (`/?login=WORD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// The person cancelled, or the provider refused them.
    Denied,
    /// Longer than [`STATE_TTL`] at the provider.
    Expired,
    /// The flow broke: no or another browser's state, a code the provider refused.
    Failed,
    /// The provider or storage-system could not be reached.
    Unavailable,
    /// Too many failed logins from this address.
    Throttled,
    /// The provider vouched for someone arca does not let in (unknown user, no provisioning).
    Refused,
}

impl Outcome {
    fn word(self) -> &'static str {
        match self {
            Self::Denied => "denied",
            Self::Expired => "expired",
            Self::Failed => "failed",
            Self::Unavailable => "unavailable",
            Self::Throttled => "throttled",
            Self::Refused => "refused",
        }
    }
}

/// The flow, for `proxy.oidc.client_id`.
#[derive(Clone)]
pub(crate) struct WebLogin {
    oidc: Oidc,
    config: arca_config::OidcWebLogin,
    signer: TokenSigner,
    throttle: Throttle,
}

impl WebLogin {
    pub(crate) fn new(
        oidc: Oidc,
        config: arca_config::OidcWebLogin,
        signer: TokenSigner,
        throttle: Throttle,
    ) -> Self {
        Self {
            oidc,
            config,
            signer,
            throttle,
        }
    }

    /// `GET` [`routes::SESSION_OIDC`]: off to the provider.
    pub(crate) async fn start(&self, req: &Parts, secure: bool) -> Response {
        let endpoints = match self.oidc.endpoints().await {
            Ok(Some(endpoints)) => endpoints,
            Ok(None) => {
                tracing::warn!(
                    "the OIDC provider's discovery names no authorization_endpoint or token_endpoint: browsers cannot log in through it"
                );
                return back(Err(Outcome::Unavailable));
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot start a web login through OIDC");
                return back(Err(Outcome::Unavailable));
            }
        };
        let Some(redirect_uri) = self.redirect_uri(req, secure) else {
            return session::error(StatusCode::BAD_REQUEST, "the request names no valid Host");
        };
        let Ok(mut url) = reqwest::Url::parse(&endpoints.authorization) else {
            tracing::warn!(url = %endpoints.authorization, "the OIDC provider's authorization_endpoint is not a URL");
            return back(Err(Outcome::Unavailable));
        };
        let state = format!(
            "{}.{}",
            unix_now() + STATE_TTL,
            arca_config::generate_secret(16)
        );
        let challenge = B64.encode(Sha256::digest(self.verifier(&state).as_bytes()));
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &self.config.client_id)
            .append_pair("redirect_uri", &redirect_uri)
            .append_pair("scope", &self.config.scopes)
            .append_pair("state", &state)
            .append_pair("nonce", &self.nonce(&state))
            .append_pair("code_challenge", &challenge)
            .append_pair("code_challenge_method", "S256");
        let mut resp = redirect(url.as_str());
        set_state_cookie(&mut resp, &state, STATE_TTL, secure);
        resp
    }

    /// `GET` [`routes::SESSION_OIDC_CALLBACK`]: back from the provider.
    pub(crate) async fn callback(
        &self,
        sessions: &Sessions,
        req: &Parts,
        peer: Option<IpAddr>,
        secure: bool,
    ) -> Response {
        let address: Vec<String> = peer.map(|ip| format!("addr:{ip}")).into_iter().collect();
        let outcome = if self.throttle.blocked(&address).is_some() {
            Err(Outcome::Throttled)
        } else {
            self.finish(sessions, req, peer, secure).await
        };
        if outcome == Err(Outcome::Failed) {
            self.throttle.failed(&address);
        }
        let mut resp = back(outcome.as_ref().map(|_| ()).map_err(|o| *o));
        if let Ok(session_cookie) = outcome {
            resp.headers_mut()
                .append(header::SET_COOKIE, session_cookie);
            set_cookie(
                &mut resp,
                PROVIDER_COOKIE,
                "1",
                "/",
                "Strict",
                sessions.ttl().as_secs().max(1),
                secure,
            );
        }
        // The state is spent whatever happened.
        set_state_cookie(&mut resp, "", 0, secure);
        resp
    }

    /// After arca's session of `req` ended (a logout's 204): when the provider opened it and
    /// names an `end_session_endpoint`, the answer becomes `200 {"logout": URL}`, the URL
    /// where the app sends the browser so that the provider's session ends too and the
    /// provider sends it back to the app (OpenID Connect RP-Initiated Logout 1.0: `client_id`
    /// and `post_logout_redirect_uri`, which must be registered with the provider).
    pub(crate) async fn after_logout(
        &self,
        req: &Parts,
        secure: bool,
        mut resp: Response,
    ) -> Response {
        let ours = session::cookies(&req.headers).any(|(name, _)| name == PROVIDER_COOKIE);
        if !ours || resp.status() != StatusCode::NO_CONTENT {
            return resp;
        }
        let end_session = match self.oidc.endpoints().await {
            Ok(Some(Endpoints {
                end_session: Some(url),
                ..
            })) => url,
            Ok(_) => String::new(),
            Err(e) => {
                // arca's session is over all the same; the provider's stays.
                tracing::warn!(error = %e, "cannot end the provider's session at logout");
                String::new()
            }
        };
        let back = self.redirect_uri(req, secure).and_then(|uri| {
            let url = reqwest::Url::parse(&uri).ok()?;
            Some(format!("{}/", url.origin().ascii_serialization()))
        });
        if let (Ok(mut url), Some(back)) = (reqwest::Url::parse(&end_session), back) {
            url.query_pairs_mut()
                .append_pair("client_id", &self.config.client_id)
                .append_pair("post_logout_redirect_uri", &back);
            let headers = std::mem::take(resp.headers_mut());
            resp = (
                StatusCode::OK,
                axum::Json(serde_json::json!({ "logout": url.as_str() })),
            )
                .into_response();
            resp.headers_mut().extend(headers);
        }
        set_cookie(&mut resp, PROVIDER_COOKIE, "", "/", "Strict", 0, secure);
        resp
    }

    /// The session cookie of a login the provider completed.
    async fn finish(
        &self,
        sessions: &Sessions,
        req: &Parts,
        peer: Option<IpAddr>,
        secure: bool,
    ) -> Result<HeaderValue, Outcome> {
        let Ok(Query(query)) = Query::<HashMap<String, String>>::try_from_uri(&req.uri) else {
            return Err(Outcome::Failed);
        };
        let Some(state) = query.get("state") else {
            tracing::info!("an OIDC callback without state");
            return Err(Outcome::Failed);
        };
        let ours = session::cookies(&req.headers)
            .find_map(|(name, value)| (name == STATE_COOKIE).then_some(value));
        let Some(ours) = ours else {
            tracing::info!(
                "an OIDC callback without the state cookie (started in another browser?)"
            );
            return Err(Outcome::Failed);
        };
        if !session::constant_time_eq(state.as_bytes(), ours.as_bytes()) {
            tracing::info!("an OIDC callback whose state is not this browser's");
            return Err(Outcome::Failed);
        }
        let expires = state
            .split_once('.')
            .and_then(|(exp, _)| exp.parse::<u64>().ok());
        match expires {
            None => return Err(Outcome::Failed),
            Some(exp) if exp < unix_now() => return Err(Outcome::Expired),
            Some(_) => {}
        }
        if let Some(error) = query.get("error") {
            tracing::info!(%error, "the OIDC provider ended a web login");
            return Err(if error == "access_denied" {
                Outcome::Denied
            } else {
                Outcome::Failed
            });
        }
        let Some(code) = query.get("code") else {
            return Err(Outcome::Failed);
        };
        let id_token = self.trade(code, state, req, secure).await?;
        let identity = self
            .oidc
            .login(&id_token, &self.config.client_id, &self.nonce(state), peer)
            .await
            .map_err(|e| match e {
                BearerError::Invalid(why) => {
                    tracing::warn!(%why, "a web login's ID token was refused");
                    Outcome::Refused
                }
                BearerError::Unavailable(why) => {
                    tracing::warn!(%why, "cannot finish a web login");
                    Outcome::Unavailable
                }
                BearerError::Throttled(_) => Outcome::Throttled,
            })?;
        let (session_cookie, _) = sessions
            .open(&identity)
            .await
            .map_err(|_| Outcome::Unavailable)?;
        tracing::info!(user = %identity.username, "logged in to the web app through OIDC");
        Ok(session_cookie)
    }

    /// The ID token the provider gives for `code` (OpenID Connect Core §3.1.3).
    async fn trade(
        &self,
        code: &str,
        state: &str,
        req: &Parts,
        secure: bool,
    ) -> Result<String, Outcome> {
        #[derive(serde::Deserialize)]
        struct Tokens {
            id_token: Option<String>,
        }
        let endpoints = match self.oidc.endpoints().await {
            Ok(Some(endpoints)) => endpoints,
            _ => return Err(Outcome::Unavailable),
        };
        let redirect_uri = self.redirect_uri(req, secure).ok_or(Outcome::Failed)?;
        let verifier = self.verifier(state);
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", redirect_uri.as_str()),
            ("client_id", self.config.client_id.as_str()),
            ("code_verifier", verifier.as_str()),
        ];
        if let Some(secret) = &self.config.client_secret {
            form.push(("client_secret", secret));
        }
        let response = self
            .oidc
            .http()
            .post(&endpoints.token)
            .header(header::ACCEPT, "application/json")
            .form(&form)
            .send()
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "cannot reach the OIDC token endpoint");
                Outcome::Unavailable
            })?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| {
            tracing::warn!(error = %e, "reading the OIDC token response");
            Outcome::Unavailable
        })?;
        if body.len() > MAX_TOKEN_RESPONSE {
            tracing::warn!("the OIDC token response is too large");
            return Err(Outcome::Unavailable);
        }
        if status.is_server_error() {
            tracing::warn!(%status, "the OIDC token endpoint failed");
            return Err(Outcome::Unavailable);
        }
        if !status.is_success() {
            // RFC 6749 §5.2: `error` says why (invalid_grant: a used or expired code).
            let why = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
                .unwrap_or_default();
            tracing::info!(%status, error = %why, "the OIDC token endpoint refused a code");
            return Err(Outcome::Failed);
        }
        serde_json::from_slice::<Tokens>(&body)
            .ok()
            .and_then(|t| t.id_token)
            .ok_or_else(|| {
                tracing::warn!("the OIDC token response has no id_token");
                Outcome::Failed
            })
    }

    /// PKCE's code verifier of a login: 43 characters of base64url (RFC 7636 §4.1).
    fn verifier(&self, state: &str) -> String {
        self.signer.tag(PKCE_PURPOSE, state)
    }

    fn nonce(&self, state: &str) -> String {
        self.signer.tag(NONCE_PURPOSE, state)
    }

    /// Where the provider sends the browser back: configured, or this listener's URL of the
    /// callback as the browser named the host (the provider only accepts a registered one).
    fn redirect_uri(&self, req: &Parts, secure: bool) -> Option<String> {
        if let Some(uri) = &self.config.redirect_uri {
            return Some(uri.clone());
        }
        let host = match req.headers.get(header::HOST) {
            Some(host) => host.to_str().ok()?,
            None => req.uri.authority()?.as_str(),
        };
        let valid = !host.is_empty()
            && host.len() <= 255
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b));
        let scheme = if secure { "https" } else { "http" };
        valid.then(|| format!("{scheme}://{host}{}", routes::SESSION_OIDC_CALLBACK))
    }
}

/// Back to the app: logged in, or with the word saying why not.
fn back(outcome: Result<(), Outcome>) -> Response {
    match outcome {
        Ok(()) => redirect("/"),
        Err(why) => redirect(&format!("/?login={}", why.word())),
    }
}

fn redirect(location: &str) -> Response {
    let mut resp = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(location) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

fn set_state_cookie(resp: &mut Response, state: &str, max_age: u64, secure: bool) {
    set_cookie(
        resp,
        STATE_COOKIE,
        state,
        routes::SESSION_OIDC,
        "Lax",
        max_age,
        secure,
    );
}

/// Appends an HttpOnly cookie (`max_age` 0 clears it).
fn set_cookie(
    resp: &mut Response,
    name: &str,
    value: &str,
    path: &str,
    same_site: &str,
    max_age: u64,
    secure: bool,
) {
    let set = format!(
        "{name}={value}; Path={path}; HttpOnly; SameSite={same_site}; Max-Age={max_age}{}",
        if secure { "; Secure" } else { "" }
    );
    if let Ok(v) = HeaderValue::from_str(&set) {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
