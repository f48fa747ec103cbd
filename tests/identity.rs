//! Identity end to end, with the real `arca` binary: a changed password, a deleted user and a
//! revoked app token stop working on the very next request (the proxy's credential cache is
//! invalidated by storage-system's change feed, in one process and across processes over TCP
//! and Unix sockets, and a lost feed never leaves stale logins behind); app tokens are
//! created, listed, used, revoked and expire; groups and their members through Graph; and
//! `arca users` on the database, alone and beside a running server. The tests that count
//! authentications in `/metrics`, stop a process or run the CLI use the binary; the others run
//! every service in the test process.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use arca_tests::{
    HttpResponse, InProcess, Launch, Server, TempDir, arca_bin, basic, command, eventually,
    free_port, get, send,
};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;

/// Deadline for states that take milliseconds when all is well.
const WITHIN: Duration = Duration::from_secs(15);
const ADMIN_PASSWORD: &str = "admin-secret";
/// Processes of one deployment verify each other's identity tokens: they share the secret.
const SPLIT_SECRET: &str = "0123456789abcdef0123456789abcdef";
/// What `arca users` documents: a change written to the database by another process reaches
/// every proxy within this (storage-system's 1 s poll plus one round trip).
const CLI_BOUND: Duration = Duration::from_secs(2);

/// One request as `user`, with a JSON body (empty for none).
async fn call(
    addr: &str,
    method: &str,
    path: &str,
    (user, password): (&str, &str),
    body: &str,
) -> anyhow::Result<HttpResponse> {
    let auth = basic(user, password);
    let mut headers = vec![("authorization", auth.as_str())];
    if !body.is_empty() {
        headers.push(("content-type", "application/json"));
    }
    send(addr, method, path, &headers, body.to_owned()).await
}

async fn status(addr: &str, method: &str, path: &str, who: (&str, &str), body: &str) -> u16 {
    match call(addr, method, path, who, body).await {
        Ok(r) => r.status,
        Err(e) => panic!("{method} {path}: {e:#}"),
    }
}

fn admin() -> (&'static str, &'static str) {
    ("admin", ADMIN_PASSWORD)
}

/// Every service in this process: for tests that read neither its `/metrics` (the test
/// process's recorder sums every deployment's counters) nor its exit.
async fn start_in_process(dir: &TempDir) -> anyhow::Result<InProcess> {
    InProcess::ready(dir, ADMIN_PASSWORD, &[]).await
}

/// `arca server` as a process: its own `/metrics` (the cache tests count authentications).
async fn start(dir: &TempDir) -> anyhow::Result<Server> {
    let mut server = Launch::arca(dir)
        .env("ARCA_ADMIN_PASSWORD", ADMIN_PASSWORD)
        .spawn()?;
    server.wait_ready(WITHIN).await?;
    Ok(server)
}

/// Creates a user through Graph as admin; returns their id.
async fn create_user(addr: &str, name: &str, password: &str) -> anyhow::Result<String> {
    let body = json!({
        "onPremisesSamAccountName": name,
        "displayName": name,
        "mail": format!("{name}@example.org"),
        "passwordProfile": {"password": password},
    });
    let r = call(
        addr,
        "POST",
        "/graph/v1.0/users",
        admin(),
        &body.to_string(),
    )
    .await?;
    anyhow::ensure!(r.status == 201, "create {name}: {} {}", r.status, r.text());
    Ok(r.json()?["id"].as_str().unwrap_or_default().to_owned())
}

/// The sum of the samples of the metric lines starting with `prefix`.
fn counter(metrics: &str, prefix: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// How many times storage-system was asked to verify a credential, from the metrics of the
/// process at `debug` (which must host storage-system).
async fn authentications(debug: &str) -> anyhow::Result<f64> {
    let metrics = get(debug, "/metrics", &[]).await?.text();
    Ok(counter(
        &metrics,
        r#"arca_requests_total{service="storage-system",route="/arca.v1.Users/Authenticate""#,
    ))
}

/// Waits until `who`'s logins are served from the proxy's cache (the feed is subscribed and
/// the credential verified once): two requests in a row cost storage-system nothing. This is
/// what makes the invalidation tests mean something: without a cache they would pass anyway.
async fn wait_cached(public: &str, debug: &str, who: (&str, &str)) -> anyhow::Result<()> {
    eventually(
        WITHIN,
        &format!("{}'s login served from the cache", who.0),
        || async move {
            let r = call(public, "GET", "/graph/v1.0/me", who, "").await?;
            anyhow::ensure!(
                r.status == 200,
                "GET /me as {}: {} {}",
                who.0,
                r.status,
                r.text()
            );
            let before = authentications(debug).await?;
            for _ in 0..3 {
                let r = call(public, "GET", "/graph/v1.0/me", who, "").await?;
                anyhow::ensure!(r.status == 200, "GET /me as {}: {}", who.0, r.status);
            }
            Ok((authentications(debug).await? == before).then_some(()))
        },
    )
    .await
}

async fn me(public: &str, who: (&str, &str)) -> u16 {
    status(public, "GET", "/graph/v1.0/me", who, "").await
}

#[tokio::test]
async fn a_changed_password_is_refused_on_the_very_next_request() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir).await?;
    let (public, debug) = (server.public.as_str(), server.debug.as_str());
    let alice = create_user(public, "alice", "alice-pass-0").await?;
    let mut password = "alice-pass-0".to_owned();
    for round in 1..=4 {
        wait_cached(public, debug, ("alice", &password)).await?;
        let new = format!("alice-pass-{round}");
        let patch = json!({"passwordProfile": {"password": new}}).to_string();
        // Admins change passwords, and users their own.
        let by = if round % 2 == 1 {
            admin()
        } else {
            ("alice", password.as_str())
        };
        let path = format!("/graph/v1.0/users/{alice}");
        let patching = Instant::now();
        let r = call(public, "PATCH", &path, by, &patch).await?;
        assert_eq!(r.status, 200, "round {round}: {}", r.text());
        // Hashing and the proxies' acknowledgement included.
        eprintln!("password change answered in {:?}", patching.elapsed());
        assert_eq!(
            me(public, ("alice", &password)).await,
            401,
            "round {round}: the old password still works"
        );
        assert_eq!(me(public, ("alice", &new)).await, 200, "round {round}");
        password = new;
    }
    Ok(())
}

/// A web session (or a provider's token) is not the person: setting one's own password from
/// one takes the current password (`POST /graph/v1.0/me/changePassword`, oCIS's call), and
/// wrong ones are throttled per user. HTTP Basic with the password proved it already; an
/// admin sets another's without it.
#[tokio::test]
async fn setting_ones_own_password_takes_the_current_one() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server =
        InProcess::ready(&dir, ADMIN_PASSWORD, &[("proxy.auth.max_failures", "3")]).await?;
    let public = server.public.as_str();
    let alice = create_user(public, "alice", "alice-1").await?;

    // A session of alice's, as the web app holds one.
    let login = json!({"user": "alice", "password": "alice-1"}).to_string();
    let r = send(
        public,
        "POST",
        "/api/v1/session",
        &[("content-type", "application/json")],
        login,
    )
    .await?;
    anyhow::ensure!(r.status == 200, "login: {} {}", r.status, r.text());
    let cookie = r
        .header("set-cookie")
        .and_then(|c| c.split(';').next())
        .context("no session cookie")?
        .to_owned();
    let csrf = r.json()?["csrf"].as_str().context("no csrf")?.to_owned();
    let by_session = |method: &'static str, path: String, body: Value| {
        let (cookie, csrf) = (cookie.clone(), csrf.clone());
        async move {
            let headers = [
                ("cookie", cookie.as_str()),
                ("x-csrf-token", csrf.as_str()),
                ("x-requested-with", "XMLHttpRequest"),
                ("content-type", "application/json"),
            ];
            send(public, method, &path, &headers, body.to_string()).await
        }
    };
    let change = "/graph/v1.0/me/changePassword".to_owned();

    // The user PATCH from a session: refused, pointing to the call that asks.
    let patch = json!({"passwordProfile": {"password": "stolen"}});
    let r = by_session("PATCH", format!("/graph/v1.0/users/{alice}"), patch).await?;
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(
        r.text().contains("/graph/v1.0/me/changePassword"),
        "{}",
        r.text()
    );
    assert_eq!(me(public, ("alice", "stolen")).await, 401);

    // Bad requests say what is wrong.
    for (body, says) in [
        (json!({"newPassword": "alice-2"}), "currentPassword"),
        (
            json!({"currentPassword": "alice-1", "newPassword": ""}),
            "newPassword is required",
        ),
        (
            json!({"currentPassword": "alice-1", "newPassword": "alice-1"}),
            "is the current one",
        ),
    ] {
        let r = by_session("POST", change.clone(), body).await?;
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(r.text().contains(says), "{says}: {}", r.text());
    }

    // A wrong current password: 400, nothing changed.
    let wrong = json!({"currentPassword": "guess", "newPassword": "alice-2"});
    let r = by_session("POST", change.clone(), wrong.clone()).await?;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text().contains("the current password is wrong"),
        "{}",
        r.text()
    );
    assert_eq!(me(public, ("alice", "alice-1")).await, 200);

    // The right one: 204, the old password dead at once, the new one live.
    let right = json!({"currentPassword": "alice-1", "newPassword": "alice-2"});
    let r = by_session("POST", change.clone(), right).await?;
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(me(public, ("alice", "alice-1")).await, 401);
    assert_eq!(me(public, ("alice", "alice-2")).await, 200);

    // Over Basic with the password, the same call asks for it too.
    let body = json!({"currentPassword": "alice-2", "newPassword": "alice-3"}).to_string();
    assert_eq!(
        status(public, "POST", &change, ("alice", "alice-2"), &body).await,
        204
    );
    assert_eq!(me(public, ("alice", "alice-3")).await, 200);

    // Guessing from the session: after max_failures wrong ones, 429 with Retry-After, even
    // for the right password, until the window moves on.
    for _ in 0..2 {
        let r = by_session("POST", change.clone(), wrong.clone()).await?;
        assert_eq!(r.status, 400, "{}", r.text());
    }
    let right = json!({"currentPassword": "alice-3", "newPassword": "alice-4"});
    let r = by_session("POST", change.clone(), right).await?;
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(
        r.header("retry-after")
            .is_some_and(|s| s.parse::<u64>().is_ok_and(|s| s >= 1))
    );
    assert_eq!(me(public, ("alice", "alice-3")).await, 200);

    // An admin sets another's password without it.
    let set = json!({"passwordProfile": {"password": "alice-5"}}).to_string();
    let path = format!("/graph/v1.0/users/{alice}");
    assert_eq!(status(public, "PATCH", &path, admin(), &set).await, 200);
    assert_eq!(me(public, ("alice", "alice-5")).await, 200);
    Ok(())
}

/// An app token is a sync client's credential, which may leak with its device: it may not set
/// a password (the account would be taken over), the user's own or, for an admin, another's.
#[tokio::test]
async fn an_app_token_cannot_change_a_password() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start_in_process(&dir).await?;
    let public = server.public.as_str();
    let alice = create_user(public, "alice", "alice-pass").await?;
    let token = |who: (&'static str, &'static str)| async move {
        let r = call(public, "POST", "/auth-app/tokens?expiry=1h", who, "").await?;
        anyhow::ensure!(r.status == 200, "token: {} {}", r.status, r.text());
        Ok::<_, anyhow::Error>(r.json()?["token"].as_str().unwrap_or_default().to_owned())
    };
    let alices = token(("alice", "alice-pass")).await?;
    let admins = token(admin()).await?;
    let path = format!("/graph/v1.0/users/{alice}");
    let patch = json!({"passwordProfile": {"password": "taken-over"}}).to_string();
    for who in [("alice", alices.as_str()), ("admin", admins.as_str())] {
        let r = call(public, "PATCH", &path, who, &patch).await?;
        assert_eq!(r.status, 403, "{} with an app token: {}", who.0, r.text());
        assert!(
            r.text().contains("app tokens cannot change passwords"),
            "{}",
            r.text()
        );
    }
    assert_eq!(me(public, ("alice", "taken-over")).await, 401);
    assert_eq!(me(public, ("alice", "alice-pass")).await, 200);
    // The token may still change what is not a credential; a password login may change both.
    let name = json!({"displayName": "Alice A."}).to_string();
    assert_eq!(
        status(public, "PATCH", &path, ("alice", &alices), &name).await,
        200
    );
    assert_eq!(
        status(public, "PATCH", &path, ("alice", "alice-pass"), &patch).await,
        200
    );
    assert_eq!(me(public, ("alice", "taken-over")).await, 200);
    Ok(())
}

#[tokio::test]
async fn a_deleted_user_is_refused_at_once() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir).await?;
    let (public, debug) = (server.public.as_str(), server.debug.as_str());
    let bob = create_user(public, "bob", "bob-pass").await?;
    wait_cached(public, debug, ("bob", "bob-pass")).await?;
    let path = format!("/graph/v1.0/users/{bob}");
    assert_eq!(status(public, "DELETE", &path, admin(), "").await, 204);
    assert_eq!(me(public, ("bob", "bob-pass")).await, 401);
    // A new user of the same name is someone else, with their own password.
    create_user(public, "bob", "new-bob").await?;
    assert_eq!(me(public, ("bob", "bob-pass")).await, 401);
    assert_eq!(me(public, ("bob", "new-bob")).await, 200);

    // The proxy's feed subscription (in memory here) holds up no one's shutdown.
    let mut server = server;
    let stopping = Instant::now();
    server.proc.sigterm();
    assert_eq!(server.proc.exit_code(WITHIN).await?, Some(0));
    let took = stopping.elapsed();
    assert!(took < Duration::from_secs(5), "shutdown took {took:?}");
    Ok(())
}

/// A client that opens many connections at once (or all of whose connections miss the cache
/// together when its entry expires) costs storage-system one verification, not one per
/// request: each is an argon2 hash, and 16 of them queued on two cores stalled every
/// connection for ~300 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_logins_of_one_credential_are_verified_once() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir).await?;
    let (public, debug) = (server.public.as_str(), server.debug.as_str());
    create_user(public, "carol", "carol-pass").await?;
    // The feed is up, so what is verified is cached: a request after the shared verification
    // is answered from the cache and cannot hide a second verification.
    wait_cached(public, debug, admin()).await?;

    let before = authentications(debug).await?;
    let requests = (0..16).map(|_| me(public, ("carol", "carol-pass")));
    let statuses = futures::future::join_all(requests).await;
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    assert_eq!(authentications(debug).await? - before, 1.0, "verifications");
    Ok(())
}

#[tokio::test]
async fn app_tokens_are_created_listed_used_and_revoked() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir).await?;
    let (public, debug) = (server.public.as_str(), server.debug.as_str());
    create_user(public, "carol", "carol-pass").await?;
    create_user(public, "dave", "dave-pass").await?;
    let carol = ("carol", "carol-pass");

    // Without a valid expiry nothing is created; anonymous callers are not let in at all.
    for path in [
        "/auth-app/tokens",
        "/auth-app/tokens?expiry=soon",
        "/auth-app/tokens?expiry=0h",
    ] {
        let r = call(public, "POST", path, carol, "").await?;
        assert_eq!(r.status, 400, "{path}: {}", r.text());
    }
    let anonymous = send(public, "POST", "/auth-app/tokens?expiry=1h", &[], "").await?;
    assert_eq!(anonymous.status, 401);

    let created = call(
        public,
        "POST",
        "/auth-app/tokens?expiry=72h&label=phone",
        carol,
        "",
    )
    .await?;
    assert_eq!(created.status, 200, "{}", created.text());
    let created = created.json()?;
    let secret = created["token"].as_str().unwrap_or_default().to_owned();
    let id = created["id"].as_str().unwrap_or_default().to_owned();
    assert!(secret.len() >= 32, "{created}");
    assert_eq!(created["label"], "phone");
    for field in ["created_date", "expiration_date"] {
        assert!(
            created[field].as_str().is_some_and(|d| d.ends_with('Z')),
            "{field}: {created}"
        );
    }

    // The list shows the token but never its secret.
    let listed = call(public, "GET", "/auth-app/tokens", carol, "").await?;
    assert_eq!(listed.status, 200);
    assert!(!listed.text().contains(&secret), "{}", listed.text());
    let listed = listed.json()?;
    let entries = listed.as_array().cloned().unwrap_or_default();
    assert_eq!(entries.len(), 1, "{listed}");
    assert_eq!(entries[0]["id"], id.as_str());
    assert_eq!(entries[0]["label"], "phone");
    // Tokens are per user.
    let others = call(public, "GET", "/auth-app/tokens", ("dave", "dave-pass"), "").await?;
    assert_eq!(others.json()?, json!([]));

    // The token is a password for carol, and for nobody else.
    let with_token = ("carol", secret.as_str());
    assert_eq!(me(public, with_token).await, 200);
    wait_cached(public, debug, with_token).await?;
    let auth = basic("carol", &secret);
    let headers = [("authorization", auth.as_str()), ("depth", "1")];
    let webdav = send(public, "PROPFIND", "/remote.php/webdav/", &headers, "").await?;
    assert_eq!(webdav.status, 207, "{}", webdav.text());
    assert_eq!(me(public, ("dave", &secret)).await, 401);
    // Someone else cannot revoke it.
    let path = format!("/auth-app/tokens?token={secret}");
    assert_eq!(
        status(public, "DELETE", &path, ("dave", "dave-pass"), "").await,
        404
    );
    assert_eq!(me(public, with_token).await, 200);

    // Revoked: refused on the next request; the password still works.
    assert_eq!(status(public, "DELETE", &path, carol, "").await, 204);
    assert_eq!(me(public, with_token).await, 401);
    assert_eq!(me(public, carol).await, 200);
    assert_eq!(status(public, "DELETE", &path, carol, "").await, 404);

    // Revoking by the id the list shows works the same.
    let second = call(public, "POST", "/auth-app/tokens?expiry=1h", carol, "").await?;
    let second = second.json()?;
    let (secret2, id2) = (
        second["token"].as_str().unwrap_or_default().to_owned(),
        second["id"].as_str().unwrap_or_default().to_owned(),
    );
    assert_eq!(second["label"], "Generated via API");
    wait_cached(public, debug, ("carol", &secret2)).await?;
    let path = format!("/auth-app/tokens?id={id2}");
    assert_eq!(status(public, "DELETE", &path, carol, "").await, 204);
    assert_eq!(me(public, ("carol", &secret2)).await, 401);

    // Deleting the user takes their tokens along.
    let third = call(public, "POST", "/auth-app/tokens?expiry=1h", carol, "").await?;
    let secret3 = third.json()?["token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(me(public, ("carol", &secret3)).await, 200);
    let carol_id = call(public, "GET", "/graph/v1.0/me", carol, "")
        .await?
        .json()?["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let path = format!("/graph/v1.0/users/{carol_id}");
    assert_eq!(status(public, "DELETE", &path, admin(), "").await, 204);
    assert_eq!(me(public, ("carol", &secret3)).await, 401);
    Ok(())
}

#[tokio::test]
async fn an_expired_app_token_is_refused() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start_in_process(&dir).await?;
    let public = server.public.as_str();
    create_user(public, "erin", "erin-pass").await?;
    let created = call(
        public,
        "POST",
        "/auth-app/tokens?expiry=3s",
        ("erin", "erin-pass"),
        "",
    )
    .await?;
    let created_at = Instant::now();
    let secret = created.json()?["token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let first = me(public, ("erin", &secret)).await;
    assert_eq!(first, 200, "a fresh token works");
    eventually(WITHIN, "the expired token refused", || {
        let secret = secret.clone();
        async move {
            let r = call(public, "GET", "/graph/v1.0/me", ("erin", &secret), "").await?;
            Ok((r.status == 401).then_some(()))
        }
    })
    .await?;
    let after = created_at.elapsed();
    assert!(
        after >= Duration::from_secs(2),
        "refused after {after:?}, before it expired"
    );
    // Expired tokens are not listed either.
    let listed = call(public, "GET", "/auth-app/tokens", ("erin", "erin-pass"), "").await?;
    assert_eq!(listed.json()?, json!([]));
    Ok(())
}

fn names(list: &Value) -> Vec<String> {
    list["value"]
        .as_array()
        .map(|v| {
            v.iter()
                .filter_map(|x| x["displayName"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn groups_members_and_member_of_through_graph() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start_in_process(&dir).await?;
    let public = server.public.as_str();
    let frank_id = create_user(public, "frank", "frank-pass").await?;
    let gina_id = create_user(public, "gina", "gina-pass").await?;
    let frank = ("frank", "frank-pass");

    let new = json!({"displayName": "team", "description": "the team"}).to_string();
    let created = call(public, "POST", "/graph/v1.0/groups", admin(), &new).await?;
    assert_eq!(created.status, 201, "{}", created.text());
    let group = created.json()?;
    let id = group["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(group["displayName"], "team");
    assert_eq!(group["description"], "the team");
    let again = call(public, "POST", "/graph/v1.0/groups", admin(), &new).await?;
    assert_eq!(again.status, 409, "{}", again.text());
    for bad in ["{", r#"{"displayName": ""}"#, r#"{"description": "x"}"#] {
        let r = call(public, "POST", "/graph/v1.0/groups", admin(), bad).await?;
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
    }

    // Non-admins read groups but change nothing.
    let listed = call(public, "GET", "/graph/v1.0/groups", frank, "").await?;
    assert_eq!(listed.status, 200);
    assert_eq!(names(&listed.json()?), ["team"]);
    let group_path = format!("/graph/v1.0/groups/{id}");
    let members_ref = format!("{group_path}/members/$ref");
    let frank_ref =
        json!({"@odata.id": format!("http://{public}/graph/v1.0/users/{frank_id}")}).to_string();
    let writes = [
        (
            "POST",
            "/graph/v1.0/groups".to_owned(),
            r#"{"displayName":"mine"}"#.to_owned(),
        ),
        (
            "PATCH",
            group_path.clone(),
            r#"{"displayName":"ours"}"#.to_owned(),
        ),
        ("DELETE", group_path.clone(), String::new()),
        ("POST", members_ref.clone(), frank_ref.clone()),
        (
            "DELETE",
            format!("{group_path}/members/{gina_id}/$ref"),
            String::new(),
        ),
    ];
    for (method, path, body) in &writes {
        let r = call(public, method, path, frank, body).await?;
        assert_eq!(
            r.status,
            403,
            "{method} {path} as a non-admin: {}",
            r.text()
        );
    }

    // Rename, then add members by reference (by id, and by user name).
    let patch = json!({"displayName": "crew"}).to_string();
    assert_eq!(
        status(public, "PATCH", &group_path, admin(), &patch).await,
        204
    );
    let read = call(public, "GET", &group_path, frank, "").await?.json()?;
    assert_eq!(
        (read["displayName"].as_str(), read["description"].as_str()),
        (Some("crew"), Some("the team"))
    );
    assert_eq!(
        status(public, "POST", &members_ref, admin(), &frank_ref).await,
        204
    );
    let gina_ref =
        json!({"@odata.id": format!("http://{public}/graph/v1.0/users/gina")}).to_string();
    assert_eq!(
        status(public, "POST", &members_ref, admin(), &gina_ref).await,
        204
    );
    let members = call(public, "GET", &format!("{group_path}/members"), frank, "").await?;
    assert_eq!(members.status, 200);
    assert_eq!(names(&members.json()?), ["frank", "gina"]);
    let expanded = call(
        public,
        "GET",
        &format!("{group_path}?$expand=members"),
        frank,
        "",
    )
    .await?;
    let expanded = expanded.json()?;
    assert_eq!(
        expanded["members"].as_array().map(Vec::len),
        Some(2),
        "{expanded}"
    );
    for bad in [r#"{"@odata.id": "http://x/graph/v1.0/groups/1"}"#, "{}"] {
        let r = call(public, "POST", &members_ref, admin(), bad).await?;
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
    }
    let nobody = json!({"@odata.id": "http://x/graph/v1.0/users/nobody"}).to_string();
    assert_eq!(
        status(public, "POST", &members_ref, admin(), &nobody).await,
        404
    );

    // memberOf, for the caller.
    let mine = call(public, "GET", "/graph/v1.0/me?$expand=memberOf", frank, "").await?;
    assert_eq!(mine.status, 200);
    let mine = mine.json()?;
    assert_eq!(mine["onPremisesSamAccountName"], "frank");
    let member_of: Vec<&str> = mine["memberOf"]
        .as_array()
        .map(|g| g.iter().filter_map(|x| x["displayName"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(member_of, ["crew"], "{mine}");
    assert_eq!(mine["memberOf"][0]["id"], id.as_str());
    let plain = call(public, "GET", "/graph/v1.0/me", frank, "")
        .await?
        .json()?;
    assert!(plain.get("memberOf").is_none(), "{plain}");

    // Membership ends by reference; a user's deletion ends theirs.
    let frank_out = format!("{group_path}/members/{frank_id}/$ref");
    assert_eq!(status(public, "DELETE", &frank_out, admin(), "").await, 204);
    assert_eq!(status(public, "DELETE", &frank_out, admin(), "").await, 404);
    let mine = call(public, "GET", "/graph/v1.0/me?$expand=memberOf", frank, "")
        .await?
        .json()?;
    assert_eq!(mine["memberOf"], json!([]), "{mine}");
    let gina_path = format!("/graph/v1.0/users/{gina_id}");
    assert_eq!(status(public, "DELETE", &gina_path, admin(), "").await, 204);
    let members = call(public, "GET", &format!("{group_path}/members"), admin(), "").await?;
    assert_eq!(names(&members.json()?), Vec::<String>::new());

    // Deleted: gone for everyone.
    assert_eq!(
        status(public, "DELETE", &group_path, admin(), "").await,
        204
    );
    assert_eq!(status(public, "GET", &group_path, admin(), "").await, 404);
    let listed = call(public, "GET", "/graph/v1.0/groups", admin(), "").await?;
    assert_eq!(names(&listed.json()?), Vec::<String>::new());
    Ok(())
}

/// `arca users ARGS… --data-dir DIR`, `stdin` fed to it; its exit code and output.
async fn users_cli(
    data_dir: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> anyhow::Result<(Option<i32>, String, String)> {
    let mut cmd = tokio::process::Command::from(command(arca_bin()));
    cmd.arg("users")
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().context("spawn arca users")?;
    if let Some(mut pipe) = child.stdin.take() {
        if let Some(input) = stdin {
            pipe.write_all(input.as_bytes()).await?;
        }
        drop(pipe);
    }
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .context("arca users did not finish within 30s")??;
    Ok((
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[tokio::test]
async fn users_cli_works_on_the_database_with_no_server() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let data = dir.join("data");
    let (code, out, err) = users_cli(
        &data,
        &[
            "add",
            "bob",
            "--display-name",
            "Bob B",
            "--email",
            "bob@example.org",
            "--password-stdin",
        ],
        Some("bob-pass\n"),
    )
    .await?;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(!out.contains("bob-pass"), "{out}");

    let (code, _, err) = users_cli(&data, &["add", "bob", "--password-stdin"], Some("x\n")).await?;
    assert_eq!(code, Some(1));
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("user bob exists"), "{err}");

    // Without --password-stdin a password is made up and shown once.
    let (code, out, err) = users_cli(&data, &["add", "root2", "--admin"], None).await?;
    assert_eq!(code, Some(0), "{err}");
    let generated = out
        .lines()
        .find_map(|l| l.strip_prefix("password: "))
        .map(str::to_owned)
        .with_context(|| format!("no generated password in {out:?}"))?;
    assert!(generated.len() >= 16, "{generated}");

    let (code, out, err) = users_cli(&data, &["list"], None).await?;
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    let header: Vec<&str> = lines[0]
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        header,
        ["NAME", "ID", "DISPLAY NAME", "EMAIL", "ADMIN"],
        "{out}"
    );
    let bob = lines
        .iter()
        .find(|l| l.starts_with("bob "))
        .with_context(|| out.clone())?;
    assert!(
        bob.contains("Bob B") && bob.contains("bob@example.org") && bob.ends_with("no"),
        "{bob}"
    );
    let root2 = lines
        .iter()
        .find(|l| l.starts_with("root2 "))
        .with_context(|| out.clone())?;
    assert!(root2.ends_with("yes"), "{root2}");

    let (code, _, err) = users_cli(
        &data,
        &["passwd", "nobody", "--password-stdin"],
        Some("p\n"),
    )
    .await?;
    assert_eq!(code, Some(1));
    assert!(err.contains("no user nobody"), "{err}");
    let (code, _, err) = users_cli(
        &data,
        &["passwd", "bob", "--password-stdin"],
        Some("bob-new\n"),
    )
    .await?;
    assert_eq!(code, Some(0), "{err}");

    // Usage errors exit 2 with one line.
    for (args, stdin) in [
        (vec!["frobnicate"], None),
        (vec!["add"], None),
        (vec!["add", "b ob", "--password-stdin"], Some("p\n")),
        (vec!["add", "empty", "--password-stdin"], Some("\n")),
    ] {
        let (code, _, err) = users_cli(&data, &args, stdin).await?;
        assert_eq!(code, Some(2), "{args:?}: {err}");
    }

    let (code, _, err) = users_cli(&data, &["delete", "bob"], None).await?;
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = users_cli(&data, &["delete", "bob"], None).await?;
    assert_eq!(code, Some(1));
    assert!(err.contains("no user bob"), "{err}");
    let (_, out, _) = users_cli(&data, &["list"], None).await?;
    assert!(!out.lines().any(|l| l.starts_with("bob ")), "{out}");

    // The server starts on what the CLI wrote, and its users log in.
    let server = start(&dir).await?;
    assert_eq!(me(&server.public, ("root2", &generated)).await, 200);
    let users = call(
        &server.public,
        "GET",
        "/graph/v1.0/users",
        ("root2", &generated),
        "",
    )
    .await?;
    assert_eq!(users.status, 200, "root2 is an admin: {}", users.text());
    Ok(())
}

#[tokio::test]
async fn users_cli_beside_a_running_server_takes_effect_within_the_bound() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let data = dir.join("data");
    let server = start(&dir).await?;
    let (public, debug) = (server.public.as_str(), server.debug.as_str());

    // Added while the server runs: usable at once (nothing cached to forget).
    let (code, _, err) = users_cli(
        &data,
        &["add", "hank", "--password-stdin"],
        Some("hank-1\n"),
    )
    .await?;
    assert_eq!(code, Some(0), "{err}");
    wait_cached(public, debug, ("hank", "hank-1")).await?;

    let (code, _, err) = users_cli(
        &data,
        &["passwd", "hank", "--password-stdin"],
        Some("hank-2\n"),
    )
    .await?;
    assert_eq!(code, Some(0), "{err}");
    let changed = Instant::now();
    eventually(CLI_BOUND * 2, "the old password refused", || async move {
        Ok((me(public, ("hank", "hank-1")).await == 401).then_some(()))
    })
    .await?;
    let took = changed.elapsed();
    eprintln!("arca users passwd took effect after {took:?} (documented bound {CLI_BOUND:?})");
    assert_eq!(me(public, ("hank", "hank-2")).await, 200);

    wait_cached(public, debug, ("hank", "hank-2")).await?;
    let (code, _, err) = users_cli(&data, &["delete", "hank"], None).await?;
    assert_eq!(code, Some(0), "{err}");
    let deleted = Instant::now();
    eventually(CLI_BOUND * 2, "the deleted user refused", || async move {
        Ok((me(public, ("hank", "hank-2")).await == 401).then_some(()))
    })
    .await?;
    eprintln!(
        "arca users delete took effect after {:?}",
        deleted.elapsed()
    );
    Ok(())
}

/// The services of process B in the split tests: the gateway and everything behind it.
const BACK: [&str; 4] = ["gateway", "storage-users", "storage-system", "sharing"];

fn back(dir: &TempDir, endpoints: &[String; 4]) -> Launch {
    let mut b = Launch::arca(dir)
        .services(&BACK.join(","))
        .set("identity.secret", SPLIT_SECRET)
        .env("ARCA_ADMIN_PASSWORD", ADMIN_PASSWORD);
    for (service, endpoint) in BACK.iter().zip(endpoints) {
        b = b.set(&format!("{service}.endpoint"), endpoint);
    }
    b
}

/// Process A hosts the proxy and frontend, process B the rest (storage-system among them): the
/// credential feed crosses the process boundary. A password change through Graph is refused
/// at A's proxy on the next request; and when B goes away, A drops what it cached, so a change
/// made while the feed was down (here by `arca users` on B's stopped database) cannot be
/// answered from A's cache after B is back.
async fn split_processes(endpoints: [String; 4]) -> anyhow::Result<()> {
    let (dir_a, dir_b) = (TempDir::new(), TempDir::new());
    let mut a = Launch::arca(&dir_a)
        .services("proxy,frontend")
        .set("identity.secret", SPLIT_SECRET)
        .set("registry.kind", "static");
    for (service, endpoint) in BACK.iter().zip(&endpoints) {
        a = a.set(&format!("registry.static.{service}"), endpoint);
    }
    let mut a = a.spawn()?;
    let mut b = back(&dir_b, &endpoints).spawn()?;
    b.wait_ready(WITHIN).await?;
    a.wait_ready(WITHIN).await?;
    let (public, b_debug) = (a.public.clone(), b.debug.clone());

    let ivan = create_user(&public, "ivan", "ivan-1").await?;
    wait_cached(&public, &b_debug, ("ivan", "ivan-1")).await?;
    let patch = json!({"passwordProfile": {"password": "ivan-2"}}).to_string();
    let path = format!("/graph/v1.0/users/{ivan}");
    let patching = Instant::now();
    let r = call(&public, "PATCH", &path, admin(), &patch).await?;
    assert_eq!(r.status, 200, "{}", r.text());
    eprintln!(
        "split: password change answered in {:?}",
        patching.elapsed()
    );
    assert_eq!(me(&public, ("ivan", "ivan-1")).await, 401);
    assert_eq!(me(&public, ("ivan", "ivan-2")).await, 200);
    wait_cached(&public, &b_debug, ("ivan", "ivan-2")).await?;

    // B stops (its feed stream must not hold up its shutdown), its database changes behind
    // A's back, B comes back.
    b.proc.sigterm();
    assert_eq!(
        b.proc.exit_code(WITHIN).await?,
        Some(0),
        "{}",
        b.proc.stderr_tail(20)
    );
    let (code, _, err) = users_cli(
        &dir_b.join("data"),
        &["passwd", "ivan", "--password-stdin"],
        Some("ivan-3\n"),
    )
    .await?;
    assert_eq!(code, Some(0), "{err}");
    let mut b = back(&dir_b, &endpoints).spawn()?;
    b.wait_ready(WITHIN).await?;
    a.wait_ready(WITHIN).await?;
    assert_eq!(
        me(&public, ("ivan", "ivan-2")).await,
        401,
        "a stale login was served from A's cache"
    );
    assert_eq!(me(&public, ("ivan", "ivan-3")).await, 200);
    // And A resubscribed: logins are cached and invalidated again.
    wait_cached(&public, &b.debug, ("ivan", "ivan-3")).await?;
    let patch = json!({"passwordProfile": {"password": "ivan-4"}}).to_string();
    assert_eq!(status(&public, "PATCH", &path, admin(), &patch).await, 200);
    assert_eq!(me(&public, ("ivan", "ivan-3")).await, 401);
    assert_eq!(me(&public, ("ivan", "ivan-4")).await, 200);
    Ok(())
}

#[tokio::test]
async fn split_over_tcp_a_changed_password_is_refused_at_once() -> anyhow::Result<()> {
    split_processes(BACK.map(|_| format!("tcp://127.0.0.1:{}", free_port()))).await
}

#[tokio::test]
async fn split_over_unix_sockets_a_changed_password_is_refused_at_once() -> anyhow::Result<()> {
    let dir = TempDir::new();
    split_processes(BACK.map(|s| format!("unix://{}", dir.join(&format!("{s}.sock")).display())))
        .await
}

#[tokio::test]
async fn an_app_token_cannot_create_list_or_delete_app_tokens() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start_in_process(&dir).await?;
    let public = server.public.as_str();
    create_user(public, "gina", "gina-pass").await?;
    let gina = ("gina", "gina-pass");
    let created = call(public, "POST", "/auth-app/tokens?expiry=1h", gina, "").await?;
    assert_eq!(created.status, 200, "{}", created.text());
    let created = created.json()?;
    let secret = created["token"].as_str().unwrap_or_default().to_owned();
    let id = created["id"].as_str().unwrap_or_default().to_owned();
    let with_token = ("gina", secret.as_str());
    assert_eq!(me(public, with_token).await, 200, "the token logs in");

    for (method, path) in [
        ("POST", "/auth-app/tokens?expiry=72h".to_owned()),
        ("GET", "/auth-app/tokens".to_owned()),
        ("DELETE", format!("/auth-app/tokens?id={id}")),
        ("DELETE", format!("/auth-app/tokens?token={secret}")),
    ] {
        let r = call(public, method, &path, with_token, "").await?;
        assert_eq!(r.status, 403, "{method} {path}: {}", r.text());
        let text = r.text();
        assert_eq!(text.lines().count(), 1, "one line: {text}");
        assert_eq!(
            r.json()?["error"]["message"],
            "app tokens cannot manage app tokens: log in with your password or your identity provider"
        );
    }
    // Nothing was created or revoked: the password still sees the one token, which works.
    let listed = call(public, "GET", "/auth-app/tokens", gina, "").await?;
    assert_eq!(listed.status, 200);
    let listed = listed.json()?;
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed[0]["id"], id.as_str());
    assert_eq!(me(public, with_token).await, 200);
    Ok(())
}

#[tokio::test]
async fn with_basic_off_passwords_are_refused_and_app_tokens_still_work() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let mut server = start(&dir).await?;
    create_user(&server.public, "erin", "erin-pass").await?;
    let created = call(
        &server.public,
        "POST",
        "/auth-app/tokens?expiry=1h&label=sync",
        ("erin", "erin-pass"),
        "",
    )
    .await?;
    assert_eq!(created.status, 200, "{}", created.text());
    let secret = created.json()?["token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    server.proc.sigterm();
    server.proc.wait_exit(WITHIN).await?;

    // The same data, now with `proxy.auth.basic: false`.
    let mut server = Launch::arca(&dir)
        .env("ARCA_ADMIN_PASSWORD", ADMIN_PASSWORD)
        .set("proxy.auth.basic", "false")
        .spawn()?;
    server.wait_ready(WITHIN).await?;
    let public = server.public.as_str();
    for who in [admin(), ("erin", "erin-pass")] {
        let r = call(public, "GET", "/graph/v1.0/me", who, "").await?;
        assert_eq!(r.status, 401, "{}'s password: {}", who.0, r.text());
        let r = call(public, "PROPFIND", "/remote.php/webdav/", who, "").await?;
        assert_eq!(r.status, 401, "{}'s password over WebDAV", who.0);
    }
    // A sync client's app token is still a Basic secret, and only its owner's.
    assert_eq!(me(public, ("erin", &secret)).await, 200);
    assert_eq!(me(public, ("admin", &secret)).await, 401);
    let auth = basic("erin", &secret);
    let headers = [("authorization", auth.as_str()), ("depth", "1")];
    let webdav = send(public, "PROPFIND", "/remote.php/webdav/", &headers, "").await?;
    assert_eq!(webdav.status, 207, "{}", webdav.text());

    // A misspelt value is refused at start with the key named, not read as "on".
    server.proc.sigterm();
    server.proc.wait_exit(WITHIN).await?;
    let mut refused = command(arca_bin());
    refused
        .current_dir(dir.path())
        .args(["server", "--set", "proxy.auth.basic=nope"])
        .arg("--data-dir")
        .arg(dir.join("data"));
    let mut refused = tokio::process::Command::from(refused);
    refused.kill_on_drop(true);
    let out = tokio::time::timeout(WITHIN, refused.output())
        .await
        .context("arca server with proxy.auth.basic=nope did not exit")??;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("proxy.auth.basic"), "{stderr}");
    Ok(())
}
