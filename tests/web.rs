//! The web app against the real `arca` binary: its page and files on the wire (headers,
//! caching, gzip), the session (login, CSRF, logout, expiry, no Basic challenge to the
//! browser), then the app itself in a real browser: tests/web/app.py (the signed-in app) and
//! tests/web/link.py (the public-link page), Playwright driving Debian's Chromium, which
//! `make deps` installs.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use arca_tests::{HttpResponse, Launch, Server, TempDir, basic, send, send_as};

const PASSWORD: &str = "web-secret";
const READY: Duration = Duration::from_secs(60);
/// The browser script's own bound; it takes ~30 s on a quiet machine.
const BROWSER_BUDGET: Duration = Duration::from_secs(240);
/// The browser test's login throttle window (see below).
const THROTTLE_WINDOW: &str = "4s";

async fn start(dir: &TempDir, settings: &[(&str, &str)]) -> anyhow::Result<Server> {
    let mut launch = Launch::arca(dir).env("ARCA_ADMIN_PASSWORD", PASSWORD);
    for (key, value) in settings {
        launch = launch.set(key, value);
    }
    let mut server = launch.spawn()?;
    server.wait_ready(READY).await?;
    Ok(server)
}

fn admin() -> String {
    basic("admin", PASSWORD)
}

/// Logs in through the session endpoint: the cookie pair (`arca_session=…`) and the CSRF token.
async fn login(addr: &str) -> anyhow::Result<(String, String)> {
    let body = serde_json::json!({"user": "admin", "password": PASSWORD}).to_string();
    let r = send(
        addr,
        "POST",
        "/api/v1/session",
        &[("content-type", "application/json")],
        body,
    )
    .await?;
    anyhow::ensure!(r.status == 200, "login: {} {}", r.status, r.text());
    let set = r.header("set-cookie").context("no Set-Cookie")?.to_owned();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        anyhow::ensure!(set.contains(flag), "cookie without {flag}: {set}");
    }
    anyhow::ensure!(!set.contains("Secure"), "Secure on plain HTTP: {set}");
    let cookie = set.split(';').next().unwrap_or_default().to_owned();
    let csrf = r.json()?["csrf"].as_str().context("no csrf")?.to_owned();
    Ok((cookie, csrf))
}

async fn with_cookie(
    addr: &str,
    method: &str,
    path: &str,
    cookie: &str,
    extra: &[(&str, &str)],
) -> anyhow::Result<HttpResponse> {
    let mut headers = vec![("cookie", cookie), ("x-requested-with", "XMLHttpRequest")];
    headers.extend_from_slice(extra);
    send(addr, method, path, &headers, "").await
}

#[tokio::test]
async fn the_page_its_files_and_the_session_on_the_wire() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[]).await?;
    let addr = server.public.as_str();

    // The page: public, revalidated, with the security headers, and no Basic challenge.
    let page = arca_tests::get(addr, "/", &[("accept-encoding", "gzip")]).await?;
    assert_eq!(page.status, 200, "{}", page.text());
    assert_eq!(page.header("cache-control"), Some("no-cache"));
    assert_eq!(page.header("content-encoding"), Some("gzip"));
    let csp = page.header("content-security-policy").unwrap_or_default();
    assert!(csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"));
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(page.header("referrer-policy"), Some("no-referrer"));
    assert!(page.header("www-authenticate").is_none());

    // Its files under the content hash: cached for good, compressed when asked.
    let plain = arca_tests::get(addr, "/", &[]).await?;
    assert!(plain.header("content-encoding").is_none());
    let html = plain.text();
    let start = html.find("/app/").context("no /app/ path in the page")?;
    let hash: String = html[start + 5..]
        .chars()
        .take_while(|c| c.is_ascii_hexdigit())
        .collect();
    let js = arca_tests::get(
        addr,
        &format!("/app/{hash}/app.js"),
        &[("accept-encoding", "gzip, br")],
    )
    .await?;
    assert_eq!(js.status, 200);
    assert_eq!(
        js.header("cache-control"),
        Some("public, max-age=31536000, immutable")
    );
    // Brotli where the browser takes it (every browser does: the browser tests load the app
    // this way), else gzip; each smaller than the last.
    assert_eq!(js.header("content-encoding"), Some("br"));
    assert!(js.header("content-security-policy").is_some());
    let gz = arca_tests::get(
        addr,
        &format!("/app/{hash}/app.js"),
        &[("accept-encoding", "gzip")],
    )
    .await?;
    assert_eq!(gz.header("content-encoding"), Some("gzip"));
    let raw = arca_tests::get(addr, &format!("/app/{hash}/app.js"), &[]).await?;
    assert!(
        js.body.len() < gz.body.len() && gz.body.len() < raw.body.len(),
        "br {} B, gzip {} B, raw {} B",
        js.body.len(),
        gz.body.len(),
        raw.body.len()
    );
    let stale = arca_tests::get(addr, "/app/0000000000000000/app.js", &[]).await?;
    assert_eq!(stale.status, 404);

    // No Basic challenge to the app's calls; sync clients keep theirs.
    let dav = "/remote.php/dav/files/admin/";
    let app = send(
        addr,
        "PROPFIND",
        dav,
        &[("x-requested-with", "XMLHttpRequest")],
        "",
    )
    .await?;
    assert_eq!(app.status, 401);
    let challenges: Vec<_> = app.headers.get_all("www-authenticate").iter().collect();
    assert!(
        challenges
            .iter()
            .all(|c| !c.as_bytes().starts_with(b"Basic")),
        "{challenges:?}"
    );
    let client = send(addr, "PROPFIND", dav, &[], "").await?;
    assert!(
        client
            .headers
            .get_all("www-authenticate")
            .iter()
            .any(|c| c.as_bytes().starts_with(b"Basic")),
        "a sync client lost its Basic challenge"
    );

    // A wrong password: 401 with a message, no cookie.
    let wrong = send(
        addr,
        "POST",
        "/api/v1/session",
        &[("content-type", "application/json")],
        r#"{"user":"admin","password":"nope"}"#,
    )
    .await?;
    assert_eq!(wrong.status, 401);
    assert!(wrong.header("set-cookie").is_none());
    assert!(wrong.json()?["error"].as_str().is_some());

    // A session: reads with the cookie alone, changes only with the CSRF token.
    let (cookie, csrf) = login(addr).await?;
    let me = with_cookie(addr, "GET", "/api/v1/session", &cookie, &[]).await?;
    assert_eq!(me.status, 200, "{}", me.text());
    assert_eq!(me.json()?["user"], "admin");
    assert_eq!(me.json()?["csrf"], csrf.as_str());
    let list = with_cookie(addr, "PROPFIND", dav, &cookie, &[("depth", "1")]).await?;
    assert_eq!(list.status, 207, "{}", list.text());
    let path = "/remote.php/dav/files/admin/made-by-cookie";
    let refused = with_cookie(addr, "MKCOL", path, &cookie, &[]).await?;
    assert_eq!(refused.status, 403, "{}", refused.text());
    assert!(
        refused.text().contains("X-CSRF-Token"),
        "{}",
        refused.text()
    );
    let forged = with_cookie(addr, "MKCOL", path, &cookie, &[("x-csrf-token", "x")]).await?;
    assert_eq!(forged.status, 403);
    let made = with_cookie(addr, "MKCOL", path, &cookie, &[("x-csrf-token", &csrf)]).await?;
    assert_eq!(made.status, 201, "{}", made.text());
    // Basic clients are unaffected by cookies and CSRF.
    let by_basic = send_as(addr, &admin(), "PROPFIND", path, &[("depth", "0")], "").await?;
    assert_eq!(by_basic.status, 207);

    // Logout needs the token too, then ends the session everywhere.
    let no_token = with_cookie(addr, "DELETE", "/api/v1/session", &cookie, &[]).await?;
    assert_eq!(no_token.status, 403);
    let out = with_cookie(
        addr,
        "DELETE",
        "/api/v1/session",
        &cookie,
        &[("x-csrf-token", &csrf)],
    )
    .await?;
    assert_eq!(out.status, 204, "{}", out.text());
    assert!(
        out.header("set-cookie")
            .is_some_and(|c| c.contains("Max-Age=0"))
    );
    let after = with_cookie(addr, "PROPFIND", dav, &cookie, &[("depth", "0")]).await?;
    assert_eq!(after.status, 401, "the old cookie still works after logout");
    let gone = with_cookie(addr, "GET", "/api/v1/session", &cookie, &[]).await?;
    assert_eq!(gone.status, 401);
    // No provider configured: the page offers none, and its login route says so.
    assert!(gone.json()?["oidc"].is_null(), "{}", gone.text());
    let none = arca_tests::get(addr, "/api/v1/session/oidc", &[]).await?;
    assert_eq!(none.status, 404, "{}", none.text());
    Ok(())
}

/// The values of every `Set-Cookie` of `r`.
fn set_cookies(r: &HttpResponse) -> Vec<String> {
    r.headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_owned))
        .collect()
}

/// The `name=value` pair of the cookie `name` that `r` sets.
fn cookie_pair(r: &HttpResponse, name: &str) -> Option<String> {
    set_cookies(r)
        .into_iter()
        .find(|c| c.starts_with(&format!("{name}=")))
        .map(|c| c.split(';').next().unwrap_or_default().to_owned())
}

/// The value of `name` in the query of `url` (percent-decoded).
fn query_value(url: &str, name: &str) -> Option<String> {
    let query = url.split_once('?')?.1;
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == name).then(|| {
            percent_encoding::percent_decode_str(&v.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned()
        })
    })
}

/// The test provider's sign-in form at `to`, submitted with `action` (login as oscar, or
/// cancel): the path on `addr` the browser is sent back to.
async fn sign_in_at(
    idp: String,
    addr: &str,
    to: String,
    action: &'static str,
) -> anyhow::Result<String> {
    let path = to
        .split_once(idp.as_str())
        .map(|(_, p)| p.to_owned())
        .context("path")?;
    let page = arca_tests::get(&idp, &path, &[]).await?;
    anyhow::ensure!(page.status == 200, "sign-in page: {}", page.text());
    let r = send(
        &idp,
        "POST",
        &path,
        &[("content-type", "application/x-www-form-urlencoded")],
        format!("username=oscar&action={action}"),
    )
    .await?;
    anyhow::ensure!(r.status == 302, "sign-in: {} {}", r.status, r.text());
    let back = r.header("location").context("no Location")?;
    Ok(back
        .strip_prefix(&format!("http://{addr}"))
        .context("sent back elsewhere")?
        .to_owned())
}

/// The browser's return to arca's callback `path` with `cookie`: the 303 it gets.
async fn come_back_to(
    addr: &str,
    cookie: Option<String>,
    path: String,
) -> anyhow::Result<HttpResponse> {
    let headers: Vec<(&str, &str)> = cookie.iter().map(|c| ("cookie", c.as_str())).collect();
    let r = arca_tests::get(addr, &path, &headers).await?;
    anyhow::ensure!(r.status == 303, "callback: {} {}", r.status, r.text());
    Ok(r)
}

/// The test OpenID provider, and arca logging browsers in through it as client `arca-web`.
async fn start_with_issuer(dir: &TempDir) -> anyhow::Result<(arca_tests::OidcIssuer, Server)> {
    let issuer = arca_tests::OidcIssuer::start(dir).await?;
    let server = start(
        dir,
        &[
            ("proxy.oidc.issuer", issuer.url.as_str()),
            ("proxy.oidc.client_id", "arca-web"),
            ("proxy.oidc.provider_name", "Test IdP"),
        ],
    )
    .await?;
    Ok((issuer, server))
}

/// A login through the provider, on the wire: the proxy sends the browser to the provider
/// with PKCE (S256), a state bound to a cookie and a nonce; the callback opens a session only
/// for the browser that started the login, once per code, and only with the verifier of the
/// challenge it sent (the test issuer checks it as a provider does); every failure comes back
/// to the app as a fixed word, never a session.
#[tokio::test]
async fn a_login_through_oidc_runs_the_code_flow_with_pkce() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let (issuer, server) = start_with_issuer(&dir).await?;
    let addr = server.public.as_str();
    let idp = issuer
        .url
        .strip_prefix("http://")
        .and_then(|rest| rest.split_once('/'))
        .map(|(host, _)| host.to_owned())
        .context("issuer address")?;

    let nobody = arca_tests::get(addr, "/api/v1/session", &[]).await?;
    assert_eq!(nobody.status, 401);
    let offered = nobody.json()?;
    assert_eq!(offered["oidc"]["name"], "Test IdP", "{offered}");
    assert_eq!(offered["oidc"]["url"], "/api/v1/session/oidc");

    // Leg one: to the provider, with the state in a cookie.
    let begin = || async {
        let r = arca_tests::get(addr, "/api/v1/session/oidc", &[]).await?;
        anyhow::ensure!(r.status == 303, "start: {} {}", r.status, r.text());
        let to = r.header("location").context("no Location")?.to_owned();
        let cookie = set_cookies(&r)
            .into_iter()
            .find(|c| c.starts_with("arca_oidc="))
            .context("no state cookie")?;
        for flag in ["HttpOnly", "SameSite=Lax", "Path=/api/v1/session/oidc"] {
            anyhow::ensure!(
                cookie.contains(flag),
                "state cookie without {flag}: {cookie}"
            );
        }
        let pair = cookie.split(';').next().unwrap_or_default().to_owned();
        anyhow::Ok((to, pair))
    };
    let (to, state_cookie) = begin().await?;
    assert!(
        to.starts_with(&format!("{}/protocol/openid-connect/auth?", issuer.url)),
        "{to}"
    );
    assert_eq!(query_value(&to, "client_id").as_deref(), Some("arca-web"));
    assert_eq!(query_value(&to, "response_type").as_deref(), Some("code"));
    assert_eq!(
        query_value(&to, "code_challenge_method").as_deref(),
        Some("S256")
    );
    let redirect = format!("http://{addr}/api/v1/session/oidc/callback");
    assert_eq!(query_value(&to, "redirect_uri"), Some(redirect.clone()));
    let state = query_value(&to, "state").context("no state")?;
    assert_eq!(state_cookie, format!("arca_oidc={state}"));
    assert!(query_value(&to, "scope").is_some_and(|s| s.split(' ').any(|s| s == "openid")));
    assert!(query_value(&to, "nonce").is_some_and(|n| n.len() >= 32));

    // At the provider: the person signs in, the browser comes back with a code.
    let sign_in = |to: String, action: &'static str| sign_in_at(idp.clone(), addr, to, action);
    let callback = sign_in(to, "login").await?;
    assert!(
        callback.starts_with("/api/v1/session/oidc/callback?code="),
        "{callback}"
    );
    let come_back = |cookie: Option<String>, path: String| come_back_to(addr, cookie, path);
    let login_word = |r: &HttpResponse| r.header("location").map(str::to_owned);

    // Another browser (no state cookie), or one in its own login: no session, the code kept.
    let stranger = come_back(None, callback.clone()).await?;
    assert_eq!(login_word(&stranger).as_deref(), Some("/?login=failed"));
    assert!(cookie_pair(&stranger, "arca_session").is_none());
    let (_, other_cookie) = begin().await?;
    let crossed = come_back(Some(other_cookie), callback.clone()).await?;
    assert_eq!(login_word(&crossed).as_deref(), Some("/?login=failed"));
    assert!(cookie_pair(&crossed, "arca_session").is_none());
    assert_eq!(issuer.open_grants(), 1, "a refused callback spent the code");

    // A state forged with its own cookie: the verifier the proxy derives from it is not the
    // one of the challenge it sent, and the provider refuses the code.
    let code = query_value(&callback, "code").context("no code")?;
    let forged = format!("{}.{}", u32::MAX, "0".repeat(32));
    let r = come_back(
        Some(format!("arca_oidc={forged}")),
        format!("/api/v1/session/oidc/callback?code={code}&state={forged}"),
    )
    .await?;
    assert_eq!(login_word(&r).as_deref(), Some("/?login=failed"));
    assert!(cookie_pair(&r, "arca_session").is_none());

    // The real one, again, from its browser: that code was spent by the forgery's attempt,
    // so a fresh login.
    let (to, state_cookie) = begin().await?;
    let callback = sign_in(to, "login").await?;
    let done = come_back(Some(state_cookie.clone()), callback.clone()).await?;
    assert_eq!(login_word(&done).as_deref(), Some("/"));
    let session = cookie_pair(&done, "arca_session").context("no session cookie")?;
    let set = set_cookies(&done);
    assert!(
        set.iter().any(|c| c.starts_with("arca_session=")
            && c.contains("HttpOnly")
            && c.contains("SameSite=Strict")),
        "{set:?}"
    );
    assert!(
        set.iter()
            .any(|c| c.starts_with("arca_oidc=;") && c.contains("Max-Age=0")),
        "the state cookie is not cleared: {set:?}"
    );
    let me = with_cookie(addr, "GET", "/api/v1/session", &session, &[]).await?;
    assert_eq!(me.status, 200, "{}", me.text());
    let me = me.json()?;
    assert_eq!(me["user"], "oscar");
    assert_eq!(me["displayName"], "oscar from the IdP");
    let home = with_cookie(
        addr,
        "PROPFIND",
        "/remote.php/dav/files/oscar/",
        &session,
        &[("depth", "0")],
    )
    .await?;
    assert_eq!(home.status, 207, "{}", home.text());

    // Logging out ends arca's session, and names where the provider's ends too: its
    // end-session endpoint, with this client and the way back to the app.
    let marker = cookie_pair(&done, "arca_oidc_session").context("no provider cookie")?;
    assert!(
        set.iter().any(|c| c.starts_with("arca_oidc_session=1")
            && c.contains("HttpOnly")
            && c.contains("SameSite=Strict")),
        "{set:?}"
    );
    let both = format!("{session}; {marker}");
    let csrf = me["csrf"].as_str().context("no csrf")?.to_owned();
    let out = with_cookie(
        addr,
        "DELETE",
        "/api/v1/session",
        &both,
        &[("x-csrf-token", &csrf)],
    )
    .await?;
    assert_eq!(out.status, 200, "{}", out.text());
    let to = out.json()?["logout"]
        .as_str()
        .context("no logout URL")?
        .to_owned();
    assert!(
        to.starts_with(&format!("{}/protocol/openid-connect/logout?", issuer.url)),
        "{to}"
    );
    assert_eq!(query_value(&to, "client_id").as_deref(), Some("arca-web"));
    assert_eq!(
        query_value(&to, "post_logout_redirect_uri"),
        Some(format!("http://{addr}/"))
    );
    assert!(
        set_cookies(&out)
            .iter()
            .any(|c| c.starts_with("arca_session=;") && c.contains("Max-Age=0")),
        "{:?}",
        set_cookies(&out)
    );
    assert!(
        set_cookies(&out)
            .iter()
            .any(|c| c.starts_with("arca_oidc_session=;") && c.contains("Max-Age=0")),
        "{:?}",
        set_cookies(&out)
    );
    let gone = with_cookie(addr, "GET", "/api/v1/session", &session, &[]).await?;
    assert_eq!(gone.status, 401, "the session outlived the logout");
    // A session opened with the password form ends at arca alone (204, as before).
    let (form, form_csrf) = login(addr).await?;
    let out = with_cookie(
        addr,
        "DELETE",
        "/api/v1/session",
        &form,
        &[("x-csrf-token", &form_csrf)],
    )
    .await?;
    assert_eq!(out.status, 204, "{}", out.text());

    // The same code twice: the provider trades it once.
    let again = come_back(Some(state_cookie), callback).await?;
    assert_eq!(login_word(&again).as_deref(), Some("/?login=failed"));
    assert!(cookie_pair(&again, "arca_session").is_none());

    // Cancelled at the provider; a state past its time.
    let (to, state_cookie) = begin().await?;
    let cancelled = sign_in(to, "cancel").await?;
    let r = come_back(Some(state_cookie), cancelled).await?;
    assert_eq!(login_word(&r).as_deref(), Some("/?login=denied"));
    let old = format!("1.{}", "0".repeat(32));
    let r = come_back(
        Some(format!("arca_oidc={old}")),
        format!("/api/v1/session/oidc/callback?code=x&state={old}"),
    )
    .await?;
    assert_eq!(login_word(&r).as_deref(), Some("/?login=expired"));
    Ok(())
}

#[tokio::test]
async fn a_session_ends_at_its_expiry() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[("proxy.auth.session_ttl", "2s")]).await?;
    let addr = server.public.as_str();
    let (cookie, _) = login(addr).await?;
    let dav = "/remote.php/dav/files/admin/";
    let during = with_cookie(addr, "PROPFIND", dav, &cookie, &[("depth", "0")]).await?;
    assert_eq!(during.status, 207);
    tokio::time::sleep(Duration::from_millis(3_100)).await;
    let after = with_cookie(addr, "PROPFIND", dav, &cookie, &[("depth", "0")]).await?;
    assert_eq!(after.status, 401, "an expired session still works");
    Ok(())
}

/// Files the browser test expects to find, made over WebDAV with Basic.
async fn seed(addr: &str) -> anyhow::Result<()> {
    let root = "/remote.php/dav/files/admin";
    let auth = admin();
    let mkcol = send_as(addr, &auth, "MKCOL", &format!("{root}/docs"), &[], "").await?;
    anyhow::ensure!(mkcol.status == 201, "MKCOL docs: {}", mkcol.status);
    let files: [(&str, Vec<u8>); 6] = [
        ("hello.txt", b"hello".to_vec()),
        ("old.txt", b"old".to_vec()),
        ("docs/inner.txt", b"inner".to_vec()),
        ("big.bin", vec![7; 300_000]),
        ("%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E", b"x".to_vec()),
        ("%22%3E%3Cscript%3E", b"y".to_vec()),
    ];
    for (name, body) in files {
        let r = send_as(addr, &auth, "PUT", &format!("{root}/{name}"), &[], body).await?;
        anyhow::ensure!(r.status == 201, "PUT {name}: {} {}", r.status, r.text());
    }
    // A file with one earlier version, for the versions panel.
    for (body, status) in [("first draft", 201), ("second draft", 204)] {
        let r = send_as(addr, &auth, "PUT", &format!("{root}/notes.txt"), &[], body).await?;
        anyhow::ensure!(
            r.status == status,
            "PUT notes.txt: {} {}",
            r.status,
            r.text()
        );
    }
    Ok(())
}

/// Runs a browser script of tests/web/ with the workspace's Python (Playwright) and fails,
/// with its output, unless it passes within [`BROWSER_BUDGET`].
async fn run_script(script: &str, args: &[String]) -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("workspace")?;
    let python = root.join(".venv/bin/python");
    anyhow::ensure!(
        python.is_file() && Path::new("/usr/bin/chromium").is_file(),
        "run `make deps` first: it installs playwright into .venv and Debian's chromium"
    );
    let started = Instant::now();
    let mut cmd = tokio::process::Command::new(&python);
    cmd.arg(root.join("tests/web").join(script))
        .args(args)
        .kill_on_drop(true);
    let out = tokio::time::timeout(BROWSER_BUDGET, cmd.output())
        .await
        .with_context(|| format!("{script} did not finish within {BROWSER_BUDGET:?}"))??;
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!(
        "{script} ({:.1}s):\n{output}",
        started.elapsed().as_secs_f64()
    );
    anyhow::ensure!(out.status.success(), "{script} failed:\n{output}");
    Ok(())
}

#[tokio::test]
async fn the_app_in_a_real_browser() -> anyhow::Result<()> {
    let dir = TempDir::new();
    // A small login throttle, so the script's last step meets it after a few guesses, in a
    // short window, so that the checks below are not throttled with it.
    let server = start(
        &dir,
        &[
            ("proxy.auth.max_failures", "4"),
            ("proxy.auth.window", THROTTLE_WINDOW),
            // The mass delete the script makes (8 files) is flagged.
            ("storage-users.trash.burst.items", "5"),
            // The upload below is larger: its one PATCH is refused (413) and the page sends
            // it in halves, then quarters, from the offsets the server confirms.
            ("proxy.limits.max_body_bytes", "4MiB"),
        ],
    )
    .await?;
    let addr = server.public.as_str();
    seed(addr).await?;

    // Larger than the proxy's body limit (set above): sent as several PATCHes.
    let upload = dir.join("upload-Ω.bin");
    let bytes = arca_tests::pattern(9 * 1024 * 1024 + 123, 33);
    std::fs::write(&upload, &bytes)?;

    run_script(
        "app.py",
        &[
            format!("http://{addr}"),
            "admin".to_owned(),
            PASSWORD.to_owned(),
            upload.display().to_string(),
        ],
    )
    .await?;

    // The script ended on the throttle, which counts the address: let it pass.
    tokio::time::sleep(Duration::from_secs(5)).await;
    // What the clicks left on the server: the uploaded bytes, the renamed file, the trash.
    let root = "/remote.php/dav/files/admin";
    let got = send_as(
        addr,
        &admin(),
        "GET",
        &format!("{root}/upload-%CE%A9.bin"),
        &[],
        "",
    )
    .await?;
    assert_eq!(got.status, 200);
    assert!(
        got.body == bytes,
        "the uploaded bytes differ ({} bytes)",
        got.body.len()
    );
    let renamed = send_as(
        addr,
        &admin(),
        "GET",
        &format!("{root}/greeting.txt"),
        &[],
        "",
    )
    .await?;
    assert_eq!(renamed.text(), "hello");
    let folder = send_as(
        addr,
        &admin(),
        "PROPFIND",
        &format!("{root}/Projects"),
        &[("depth", "0")],
        "",
    )
    .await?;
    assert_eq!(folder.status, 207);
    // Restored from the trash beside the name taken again, and into its removed folder; the
    // version restored; the trash emptied at the end.
    // Then moved into Projects (over a file there, replaced) and copied beside a taken name.
    for (path, want) in [
        ("Projects/old%20(2).txt", "old"),
        ("Projects/old.txt", "newer"),
        ("docs/inner.txt", "inner"),
        ("Projects/notes.txt", "first draft"),
        ("greeting%20(2).txt", "hello"),
    ] {
        let r = send_as(addr, &admin(), "GET", &format!("{root}/{path}"), &[], "").await?;
        assert_eq!((r.status, r.text().as_str()), (200, want), "{path}");
    }
    let trash = send_as(
        addr,
        &admin(),
        "PROPFIND",
        "/remote.php/dav/trash-bin/admin/",
        &[("depth", "1")],
        "",
    )
    .await?;
    assert_eq!(trash.status, 207, "{}", trash.text());
    assert_eq!(
        trash.text().matches("<d:response>").count(),
        1,
        "only the trash root is left: {}",
        trash.text()
    );
    Ok(())
}

/// The public-link page as recipients see it (tests/web/link.py: protected, file, image,
/// upload-only and read-write links), then what its clicks left on the server.
#[tokio::test]
async fn the_link_page_in_a_real_browser() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[]).await?;
    let addr = server.public.as_str();
    run_script(
        "link.py",
        &[
            format!("http://{addr}"),
            "admin".to_owned(),
            PASSWORD.to_owned(),
        ],
    )
    .await?;
    let root = "/remote.php/dav/files/admin";
    for (path, want) in [
        ("Inbox/report.txt", "the owner's report"),
        ("Inbox/report%20(2).txt", "a visitor's report"),
        ("Team/made/notes.txt", "written through a link"),
    ] {
        let r = send_as(addr, &admin(), "GET", &format!("{root}/{path}"), &[], "").await?;
        assert_eq!((r.status, r.text().as_str()), (200, want), "{path}");
    }
    let gone = send_as(
        addr,
        &admin(),
        "GET",
        &format!("{root}/Team/old.txt"),
        &[],
        "",
    )
    .await?;
    assert_eq!(gone.status, 404, "deleted through the link");
    let trash = send_as(
        addr,
        &admin(),
        "PROPFIND",
        "/remote.php/dav/trash-bin/admin/",
        &[("depth", "1")],
        "",
    )
    .await?;
    assert!(
        trash.text().contains("old.txt"),
        "a link's delete goes to the owner's trash: {}",
        trash.text()
    );
    Ok(())
}

/// Sharing in the app (tests/web/share.py: the share panel, roles, expiry, groups, a link with
/// a password on the clipboard, "Shared by me", then the recipient's "Shared with me"), then
/// the share records it left.
#[tokio::test]
async fn sharing_in_a_real_browser() -> anyhow::Result<()> {
    let dir = TempDir::new();
    // Shares wait for the recipient, so that "Shared with me" has something to accept.
    let server = start(&dir, &[("sharing.auto_accept", "false")]).await?;
    let addr = server.public.as_str();
    run_script(
        "share.py",
        &[
            format!("http://{addr}"),
            "admin".to_owned(),
            PASSWORD.to_owned(),
        ],
    )
    .await?;
    let r = send_as(
        addr,
        &admin(),
        "GET",
        "/ocs/v2.php/apps/files_sharing/api/v1/shares?format=json",
        &[("ocs-apirequest", "true")],
        "",
    )
    .await?;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json()?;
    let shares = v["ocs"]["data"].as_array().context("shares")?;
    assert_eq!(shares.len(), 1, "alice's share only: {v}");
    assert_eq!(shares[0]["share_with"], "alice");
    assert_eq!(shares[0]["permissions"], 15);
    Ok(())
}

/// A folder of 10,000 entries in the app (tests/web/big.py): all reachable, few rendered.
#[tokio::test]
async fn a_folder_of_ten_thousand_in_a_real_browser() -> anyhow::Result<()> {
    const ENTRIES: usize = 10_000;
    const AT_ONCE: usize = 16;
    let dir = TempDir::new();
    let server = start(&dir, &[]).await?;
    let addr = server.public.clone();
    let root = "/remote.php/dav/files/admin/big";
    let r = send_as(&addr, &admin(), "MKCOL", root, &[], "").await?;
    assert_eq!(r.status, 201);
    // Folders: the cheapest entries to make (no content), a few requests at a time.
    let mut made = tokio::task::JoinSet::new();
    for worker in 0..AT_ONCE {
        let addr = addr.clone();
        made.spawn(async move {
            for i in (worker..ENTRIES).step_by(AT_ONCE) {
                let r = send_as(
                    &addr,
                    &admin(),
                    "MKCOL",
                    &format!("{root}/d{i:05}"),
                    &[],
                    "",
                )
                .await?;
                anyhow::ensure!(r.status == 201, "MKCOL d{i:05}: {}", r.status);
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = made.join_next().await {
        done??;
    }
    run_script(
        "big.py",
        &[
            format!("http://{addr}"),
            "admin".to_owned(),
            PASSWORD.to_owned(),
        ],
    )
    .await
}

/// "Log in with …" in a real browser (tests/web/oidc.py): cancelled, then signed in at the
/// test provider, the folder made in the app on the server, logged out at arca and at the
/// provider.
#[tokio::test]
async fn a_login_through_oidc_in_a_real_browser() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let (issuer, server) = start_with_issuer(&dir).await?;
    let addr = server.public.as_str();
    run_script(
        "oidc.py",
        &[format!("http://{addr}"), "Test IdP".to_owned()],
    )
    .await?;
    // dora exists now, made from the ID token's claims.
    let dora = send_as(addr, &admin(), "GET", "/graph/v1.0/users/dora", &[], "").await?;
    assert_eq!(dora.status, 200, "{}", dora.text());
    assert_eq!(dora.json()?["displayName"], "dora from the IdP");
    assert_eq!(
        issuer.open_grants(),
        0,
        "a code was issued and never traded"
    );
    // The logout went through the provider's end-session endpoint and back to the app.
    assert_eq!(
        issuer.logouts(),
        vec![("arca-web".to_owned(), format!("http://{addr}/"))]
    );
    Ok(())
}

/// axe-core's rules on the main pages (tests/web/a11y.py): no serious or critical violation.
#[tokio::test]
async fn the_main_pages_pass_axe() -> anyhow::Result<()> {
    let axe = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("workspace")?
        .join(".tools/npm/node_modules/axe-core/axe.min.js");
    anyhow::ensure!(
        axe.is_file(),
        "run `make deps` first: it installs axe-core from npm"
    );
    let dir = TempDir::new();
    let server = start(&dir, &[]).await?;
    run_script(
        "a11y.py",
        &[
            format!("http://{}", server.public),
            "admin".to_owned(),
            PASSWORD.to_owned(),
            axe.display().to_string(),
        ],
    )
    .await
}

/// Uploads paused and resumed, interrupted by a reload and finished after it, and refused by
/// the quota (tests/web/upload.py).
#[tokio::test]
async fn uploads_pause_resume_and_survive_a_reload() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[("storage-users.personal_quota", "30MB")]).await?;
    run_script(
        "upload.py",
        &[
            format!("http://{}", server.public),
            "admin".to_owned(),
            PASSWORD.to_owned(),
        ],
    )
    .await
}
