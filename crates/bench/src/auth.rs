//! The auth benchmark: what a Bearer token costs next to HTTP Basic on the request path.
//!
//! One run of the real `arca server` (release build, built-in defaults) with
//! `proxy.oidc.issuer` pointing at a small OpenID provider started here (discovery and JWKS
//! over axum; an RSA key made by `openssl genpkey`, the token signed with jsonwebtoken). The
//! same 4 KiB GET, 16 connections, driven by `wrk`, alternates between Basic and Bearer
//! rounds so background load hits both alike; the line shows the median req/s of each and the
//! Bearer/Basic ratio, with the target of ≥ 0.9 (both are served from the proxy's caches, so a
//! Bearer token should cost about what a password does).

use std::fmt::Write as _;
use std::fs;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, ensure};
use bytes::Bytes;

use crate::wrk::{CONNECTIONS, find_program};
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};

use crate::process::{self};
use crate::{Scratch, Targets};

const ROUNDS: usize = 5;
const MEASURE: Duration = Duration::from_secs(5);
const WARMUP: Duration = Duration::from_secs(1);
const SMALL: usize = 4096;
const RATIO_TARGET: f64 = 0.9;
const USER: &str = "admin";
const KID: &str = "bench-rsa";

pub(crate) fn run(targets: &mut Targets) -> anyhow::Result<()> {
    let arca_bin = process::locate_arca("auth")?;
    ensure!(
        find_program("wrk").is_some(),
        "wrk not found (apt-get install wrk; the files section installs it)"
    );
    let scratch = Scratch::new("auth").context("scratch directory")?;
    let (encoding, jwk) = rsa_key(&scratch.path).context("making the issuer's key")?;

    // The issuer runs on its own runtime thread for the whole section; wrk blocks this one.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let issuer = rt
        .block_on(start_issuer(&jwk))
        .context("starting the issuer")?;

    let (password, basic) = process::admin_credentials(USER);
    let arca_dir = scratch.path.join("arca");
    let (mut arca, debug, public) = process::spawn_arca(
        &arca_bin,
        &arca_dir,
        &[
            ("ARCA_ADMIN_PASSWORD", &password),
            ("ARCA_PROXY_OIDC_ISSUER", &issuer),
        ],
    )?;
    arca.wait_ready(debug)?;

    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let claims = serde_json::json!({
        "iss": issuer,
        "sub": "bench",
        "preferred_username": USER,
        "iat": now,
        "exp": now + 3600,
    });
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(KID.to_owned());
    let token = jsonwebtoken::encode(&header, &claims, &encoding).context("signing")?;
    let bearer = format!("Bearer {token}");

    let path = format!("/remote.php/dav/files/{USER}/auth-bench.bin");
    let put = rt.block_on(request(public, "PUT", &path, &basic, vec![b'x'; SMALL]))?;
    ensure!(put == 201 || put == 204, "PUT {path}: {put}");
    for auth in [&basic, &bearer] {
        let status = rt.block_on(request(public, "GET", &path, auth, Vec::new()))?;
        ensure!(
            status == 200,
            "{}",
            arca.with_log(&format!("GET {path} answered {status}"))
        );
    }

    let url = format!("http://{public}{path}");
    let mut basic_rates = Vec::new();
    let mut bearer_rates = Vec::new();
    let basic_script = script(&scratch.path, "basic", &basic)?;
    let bearer_script = script(&scratch.path, "bearer", &bearer)?;
    wrk(&basic_script, &url, WARMUP)?;
    wrk(&bearer_script, &url, WARMUP)?;
    for _ in 0..ROUNDS {
        basic_rates.push(wrk(&basic_script, &url, MEASURE)?);
        bearer_rates.push(wrk(&bearer_script, &url, MEASURE)?);
    }
    let _ = arca.terminate();
    drop(rt);

    let rounds = format!(
        "      rounds: Basic {}; Bearer {}",
        list(&basic_rates),
        list(&bearer_rates)
    );
    let (b, t) = (median(&mut basic_rates), median(&mut bearer_rates));
    let ratio = if b > 0.0 { t / b } else { 0.0 };
    println!();
    println!(
        "auth: GET 4 KiB, {CONNECTIONS} conns, median of {ROUNDS} x {}s: Basic {:.0} req/s, \
         Bearer (OIDC RS256) {:.0} req/s, Bearer/Basic {ratio:.2}",
        MEASURE.as_secs(),
        b,
        t
    );
    println!("{rounds}");
    targets.check(
        ratio >= RATIO_TARGET,
        &format!("auth Bearer/Basic GET 4 KiB {ratio:.2} ≥ {RATIO_TARGET}"),
    );
    Ok(())
}

/// An RSA key from `openssl genpkey`, as jsonwebtoken's signing key and its public JWK.
fn rsa_key(dir: &Path) -> anyhow::Result<(EncodingKey, Jwk)> {
    let pem = dir.join("issuer.pem");
    let der = dir.join("issuer.der");
    let openssl = |args: &[&std::ffi::OsStr]| -> anyhow::Result<()> {
        let out = Command::new("openssl")
            .args(args)
            .output()
            .context("running openssl")?;
        ensure!(
            out.status.success(),
            "openssl: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    };
    openssl(&[
        "genpkey".as_ref(),
        "-algorithm".as_ref(),
        "RSA".as_ref(),
        "-pkeyopt".as_ref(),
        "rsa_keygen_bits:2048".as_ref(),
        "-out".as_ref(),
        pem.as_os_str(),
    ])?;
    // jsonwebtoken's aws-lc-rs signer takes a PKCS#1 RSAPrivateKey in DER.
    openssl(&[
        "rsa".as_ref(),
        "-in".as_ref(),
        pem.as_os_str(),
        "-traditional".as_ref(),
        "-outform".as_ref(),
        "DER".as_ref(),
        "-out".as_ref(),
        der.as_os_str(),
    ])?;
    let encoding = EncodingKey::from_rsa_der(&fs::read(&der).context("reading the key")?);
    let mut jwk = Jwk::from_encoding_key(&encoding, Algorithm::RS256)?;
    jwk.common.key_id = Some(KID.to_owned());
    Ok((encoding, jwk))
}

/// Serves discovery and the JWKS on a free loopback port; returns the issuer URL.
async fn start_issuer(jwk: &Jwk) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let issuer = format!("http://{}", listener.local_addr()?);
    let discovery = serde_json::json!({
        "issuer": issuer,
        "jwks_uri": format!("{issuer}/jwks"),
    });
    let jwks = serde_json::to_value(JwkSet {
        keys: vec![jwk.clone()],
    })?;
    let app = axum::Router::new()
        .route(
            "/.well-known/openid-configuration",
            axum::routing::get(move || async move { axum::Json(discovery) }),
        )
        .route(
            "/jwks",
            axum::routing::get(move || async move { axum::Json(jwks) }),
        );
    // Lives until the runtime is dropped at the end of the section.
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(issuer)
}

/// One request over a fresh connection; the status.
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    auth: &str,
    body: Vec<u8>,
) -> anyhow::Result<u16> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string())
        .header("authorization", auth)
        .body(Full::new(Bytes::from(body)))?;
    let resp = sender.send_request(req).await?;
    let status = resp.status().as_u16();
    resp.into_body().collect().await?;
    Ok(status)
}

/// A wrk script sending `authorization` and counting non-2xx answers as errors.
fn script(dir: &Path, name: &str, authorization: &str) -> anyhow::Result<std::path::PathBuf> {
    let path = dir.join(format!("{name}.lua"));
    let mut text = String::new();
    let _ = write!(
        text,
        r#"wrk.headers["Authorization"] = "{authorization}"
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT requests=%d duration_us=%d errors=%d\n",
    summary.requests, summary.duration,
    e.connect + e.read + e.write + e.status + e.timeout))
end
"#
    );
    fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Runs wrk for `d`; the rate of answered requests. Any error (a non-2xx answer included)
/// fails the measurement: a fast 401 is not a fast login.
fn wrk(script: &Path, url: &str, d: Duration) -> anyhow::Result<f64> {
    let out = crate::wrk::run(script, url, d)?;
    let (requests, errors) = (out.field("requests")?, out.field("errors")?);
    ensure!(
        errors == 0,
        "wrk saw {errors} errors of {requests} requests"
    );
    Ok(requests as f64 / out.elapsed()?.as_secs_f64())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn list(values: &[f64]) -> String {
    values
        .iter()
        .map(|v| format!("{v:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}
