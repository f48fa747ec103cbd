//! `arca-bench logins`: 10,000 first logins at once against the release binary on built-in
//! defaults (SQLite, the in-memory registry), each a user nobody has seen, with an OIDC Bearer
//! token from a provider started here (arca-tests' `OidcIssuer`): the proxy creates the user
//! from the token's claims (storage-system), storage-users creates the personal space, and the
//! request (PROPFIND Depth 0 of the user's files root) is answered. Every request is sent at
//! once, each on its own connection, as after an outage that logged everyone out.
//!
//! Prints the wall time of the burst (target < 20 s), the answers' p50/p99, and the database
//! work per login from arca's own counters (`arca_db_operations_total`: connections taken for
//! reading and write transactions begun, target ≤ 5 per login). The registry side (operations
//! that do not grow with the request rate) is asserted in tests/logins.rs against a real
//! nats-server; on defaults the registry is in memory.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use arca_tests::{OidcIssuer, TempDir, metric_total};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::TokioIo;

use crate::files::thousands;
use crate::process;
use crate::{Scratch, Targets};

/// First logins sent at once (`ARCA_BENCH_LOGINS` overrides it).
const LOGINS: usize = 10_000;
const TIME_TARGET: Duration = Duration::from_secs(20);
const DB_OPS_TARGET: f64 = 5.0;
/// One login's bound: a request still unanswered then counts as failed.
const REQUEST_BOUND: Duration = Duration::from_secs(120);

pub(crate) fn run(targets: &mut Targets) -> anyhow::Result<()> {
    let bin = process::locate_arca("logins")?;
    let logins = match std::env::var("ARCA_BENCH_LOGINS") {
        Ok(v) => v
            .parse()
            .with_context(|| format!("ARCA_BENCH_LOGINS={v:?}: not a count"))?,
        Err(_) => LOGINS,
    };
    raise_open_files(logins)?;
    let scratch = Scratch::new("logins").context("scratch directory")?;
    // Two workers: the issuer (discovery, JWKS) and the clients share this process.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let issuer_dir = TempDir::new();
    let issuer = rt
        .block_on(OidcIssuer::start(&issuer_dir))
        .context("starting the OIDC provider")?;
    let (password, _) = process::admin_credentials("admin");
    let (mut server, debug, public) = process::spawn_arca(
        &bin,
        &scratch.path,
        &[
            ("ARCA_ADMIN_PASSWORD", password.as_str()),
            ("ARCA_PROXY_OIDC_ISSUER", issuer.url.as_str()),
        ],
    )?;
    server.wait_ready(debug)?;
    let fail = |e: anyhow::Error| anyhow::anyhow!(server.with_log(&format!("{e:#}")));

    let tokens: Vec<String> = (0..logins)
        .map(|i| issuer.token(&format!("login{i:05}")))
        .collect::<anyhow::Result<_>>()
        .context("signing the tokens")?;
    let outcome = rt.block_on(burst(public, debug, tokens)).map_err(fail)?;
    let _ = server.terminate();
    drop(rt);

    let Outcome {
        elapsed,
        mut latencies,
        failed,
        users_db,
        system_db,
        provisioned,
    } = outcome;
    latencies.sort();
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    let per_login = (users_db + system_db) / logins as f64;
    println!();
    println!(
        "logins: {} first logins at once (OIDC, each its own connection): {:.2} s, {} logins/s, \
         p50 {} ms, p99 {} ms, {failed} failed",
        thousands(logins as f64),
        elapsed.as_secs_f64(),
        thousands(logins as f64 / elapsed.as_secs_f64()),
        pct(0.50).as_millis(),
        pct(0.99).as_millis(),
    );
    println!(
        "logins: provisioned {} users and {} spaces; database work {per_login:.2}/login \
         (storage-users {:.2}, storage-system {:.2}: connections taken + write transactions)",
        provisioned.0,
        provisioned.1,
        users_db / logins as f64,
        system_db / logins as f64,
    );
    targets.check(
        failed == 0 && elapsed < TIME_TARGET,
        &format!(
            "logins: {} at once in {:.1} s < {} s, {failed} failed",
            thousands(logins as f64),
            elapsed.as_secs_f64(),
            TIME_TARGET.as_secs()
        ),
    );
    targets.check(
        per_login <= DB_OPS_TARGET,
        &format!("logins: database work {per_login:.2}/login ≤ {DB_OPS_TARGET}"),
    );
    Ok(())
}

struct Outcome {
    elapsed: Duration,
    latencies: Vec<Duration>,
    failed: usize,
    users_db: f64,
    system_db: f64,
    /// Users and spaces provisioned in the burst.
    provisioned: (f64, f64),
}

async fn burst(
    public: SocketAddr,
    debug: SocketAddr,
    tokens: Vec<String>,
) -> anyhow::Result<Outcome> {
    let before = metrics(debug).await?;
    let start = Arc::new(tokio::sync::Barrier::new(tokens.len() + 1));
    let tasks: Vec<_> = tokens
        .into_iter()
        .enumerate()
        .map(|(i, token)| {
            let start = Arc::clone(&start);
            tokio::spawn(async move {
                start.wait().await;
                let began = Instant::now();
                let path = format!("/remote.php/dav/files/login{i:05}/");
                let status = tokio::time::timeout(
                    REQUEST_BOUND,
                    propfind(public, &path, &format!("Bearer {token}")),
                )
                .await;
                match status {
                    Ok(Ok(207)) => Ok(began.elapsed()),
                    Ok(Ok(status)) => Err(format!("{path}: HTTP {status}")),
                    Ok(Err(e)) => Err(format!("{path}: {e:#}")),
                    Err(_) => Err(format!("{path}: no answer within {REQUEST_BOUND:?}")),
                }
            })
        })
        .collect();
    start.wait().await;
    let began = Instant::now();
    let mut latencies = Vec::with_capacity(tasks.len());
    let mut failures = Vec::new();
    for task in tasks {
        match task.await.context("a login task")? {
            Ok(d) => latencies.push(d),
            Err(e) => failures.push(e),
        }
    }
    let elapsed = began.elapsed();
    if let Some(first) = failures.first() {
        println!(
            "logins: {} failed, the first: {first}",
            thousands(failures.len() as f64)
        );
    }
    let after = metrics(debug).await?;
    let count = |family: &str, labels: &[(&str, &str)]| {
        metric_total(&after, family, labels) - metric_total(&before, family, labels)
    };
    Ok(Outcome {
        elapsed,
        latencies,
        failed: failures.len(),
        users_db: count("arca_db_operations_total", &[("store", "storage-users")]),
        system_db: count("arca_db_operations_total", &[("store", "storage-system")]),
        provisioned: (
            count(
                "arca_provisioning_total",
                &[("what", "user"), ("result", "provisioned")],
            ),
            count(
                "arca_provisioning_total",
                &[("what", "space"), ("result", "provisioned")],
            ),
        ),
    })
}

/// PROPFIND Depth 0 on a fresh connection; the status, the body read to its end.
async fn propfind(addr: SocketAddr, path: &str, authorization: &str) -> anyhow::Result<u16> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let req = hyper::Request::builder()
        .method("PROPFIND")
        .uri(path)
        .header("host", addr.to_string())
        .header("authorization", authorization)
        .header("depth", "0")
        .body(Empty::<Bytes>::new())?;
    let resp = sender.send_request(req).await?;
    let status = resp.status().as_u16();
    resp.into_body().collect().await?;
    Ok(status)
}

/// The debug listener's `/metrics` text.
async fn metrics(debug: SocketAddr) -> anyhow::Result<String> {
    let r = arca_tests::get(&debug.to_string(), "/metrics", &[]).await?;
    ensure!(r.status == 200, "GET /metrics: HTTP {}", r.status);
    Ok(r.text())
}

/// One descriptor per connection here (the server raises its own limit the same way).
fn raise_open_files(logins: usize) -> anyhow::Result<()> {
    let limit = arca_runtime::limit::raise_open_files().context("raising the open files limit")?;
    let needed = logins as u64 + 256;
    ensure!(
        limit >= needed,
        "{logins} connections need {needed} open files; the hard limit is {limit} (ulimit -Hn)"
    );
    Ok(())
}
