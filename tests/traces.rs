//! One trace across processes, exported over OTLP/gRPC to a real receiver (issue 19): a
//! client's request joins the proxy's span, the frontend group's and storage-users', parent to
//! child, including a hop refused by one storage-users endpoint (a GOAWAY, as from a draining
//! instance) that went again to the other; that hop is marked on its span
//! (`arca.call.outcome`) and counted in the frontend's `/metrics` by service, endpoint and
//! outcome.
//!
//! The receiver is tests/kit/otlp_receiver.py, built on PyPI's opentelemetry-proto and
//! grpcio (`make deps` installs both into .venv): no collector ships as a package here.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use arca_tests::{
    Launch, Proc, TempDir, eventually, free_addr, free_port, get, metric_total, send, venv_bin,
};
use serde_json::Value;

const SECRET: &str = "traces-secret-0123456789abcdef0123";
const PASSWORD: &str = "traces-pass";
/// `admin:traces-pass`, as HTTP Basic.
const BASIC: &str = "Basic YWRtaW46dHJhY2VzLXBhc3M=";
const READY: Duration = Duration::from_secs(30);

fn tcp() -> String {
    format!("tcp://{}", free_addr())
}

/// An HTTP/2 endpoint that takes connections and refuses every stream on them, as a draining
/// instance does: its first frames are SETTINGS and a GOAWAY with last stream id 0, so every
/// request sent to it provably was not processed and goes again elsewhere. Returns its
/// `tcp://` endpoint.
async fn refusing_endpoint() -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let endpoint = format!("tcp://{}", listener.local_addr()?);
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                // SETTINGS (empty), then GOAWAY: last stream id 0, NO_ERROR.
                let mut frames = vec![0, 0, 0, 0x4, 0, 0, 0, 0, 0];
                frames.extend_from_slice(&[0, 0, 8, 0x7, 0, 0, 0, 0, 0]);
                frames.extend_from_slice(&[0; 8]);
                if conn.write_all(&frames).await.is_err() {
                    return;
                }
                // Until the client, having nothing left on the connection, closes it.
                let mut sink = [0u8; 4096];
                while matches!(conn.read(&mut sink).await, Ok(n) if n > 0) {}
            });
        }
    });
    Ok(endpoint)
}

/// The spans the receiver printed so far.
fn spans(receiver: &Proc) -> Vec<Value> {
    receiver
        .stdout()
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect()
}

#[tokio::test]
async fn one_trace_joins_proxy_frontend_and_storage_users_across_a_retried_hop()
-> anyhow::Result<()> {
    let port = free_port();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kit/otlp_receiver.py");
    let mut cmd = Command::new(venv_bin("python"));
    cmd.arg(&script).arg(port.to_string());
    let receiver = Proc::spawn(cmd)?;
    eventually(
        Duration::from_secs(20),
        "the OTLP receiver listening",
        || {
            let up = receiver.stdout().iter().any(|l| l == "listening");
            async move { Ok(up.then_some(())) }
        },
    )
    .await?;

    // proxy | frontend + gateway | storage-users + storage-system + sharing, on TCP, found
    // through static registries; the frontend's lists a storage-users endpoint that refuses
    // every stream beside the live one, so about half its calls go there first and again.
    let (users, system, sharing, frontend) = (tcp(), tcp(), tcp(), tcp());
    let dead = refusing_endpoint().await?;
    let launch = |dir: &TempDir, services: &str, name: &str| {
        Launch::arca(dir)
            .services(services)
            .set("identity.secret", SECRET)
            .set("tracing.otlp.endpoint", format!("http://127.0.0.1:{port}"))
            .set("tracing.otlp.service_name", name)
            .env("ARCA_ADMIN_PASSWORD", PASSWORD)
            // Spans leave every 100 ms instead of every 5 s.
            .env("OTEL_BSP_SCHEDULE_DELAY", "100")
    };
    let dirs: Vec<TempDir> = (0..3).map(|_| TempDir::new()).collect();
    let mut back = launch(
        &dirs[0],
        "storage-users,storage-system,sharing",
        "storage-group",
    )
    .set("storage-users.endpoint", &users)
    .set("storage-system.endpoint", &system)
    .set("sharing.endpoint", &sharing)
    .spawn()?;
    let mut front = launch(&dirs[1], "frontend,gateway", "frontend-group")
        .set("registry.kind", "static")
        .set("frontend.endpoint", &frontend)
        .set("registry.static.storage-users", format!("{dead},{users}"))
        .set("registry.static.storage-system", &system)
        .set("registry.static.sharing", &sharing)
        .spawn()?;
    let mut proxy = launch(&dirs[2], "proxy", "proxy")
        .set("registry.kind", "static")
        .set("registry.static.frontend", &frontend)
        .set("registry.static.storage-system", &system)
        .spawn()?;
    back.wait_ready(READY).await?;
    front.wait_ready(READY).await?;
    proxy.wait_ready(READY).await?;

    let auth = ("authorization", BASIC);
    let put = send(
        &proxy.public,
        "PUT",
        "/remote.php/webdav/t.txt",
        &[auth],
        "traced",
    )
    .await?;
    assert_eq!(put.status, 201, "{}", put.text());

    // Requests of traces this test starts (W3C traceparent), so it knows their ids.
    let mut ours = BTreeMap::new();
    for i in 0..40u32 {
        let trace = format!(
            "{:032x}",
            0xa5ca_0000_0000_0000_0000_0000_0000_0000u128 + u128::from(i)
        );
        let parent = format!("{:016x}", 0x1000 + u64::from(i));
        let traceparent = format!("00-{trace}-{parent}-01");
        let got = send(
            &proxy.public,
            "GET",
            "/remote.php/webdav/t.txt",
            &[auth, ("traceparent", traceparent.as_str())],
            "",
        )
        .await?;
        assert_eq!((got.status, got.text().as_str()), (200, "traced"));
        ours.insert(trace, parent);
    }

    // A trace of ours in which the client's span is the proxy's parent, a proxy span the
    // frontend group's, a frontend-group span storage-users', and a frontend-group span
    // marked with a retried hop is the parent of the storage-users span that answered it.
    let joined = eventually(
        Duration::from_secs(30),
        "a joined trace with a retried hop",
        || {
            let all = spans(&receiver);
            let ours = &ours;
            async move {
                for (trace, client) in ours {
                    let of: Vec<&Value> = all.iter().filter(|s| s["trace_id"] == **trace).collect();
                    let ids = |service: &str| -> BTreeSet<String> {
                        of.iter()
                            .filter(|s| s["service"] == service)
                            .filter_map(|s| s["span_id"].as_str().map(str::to_owned))
                            .collect()
                    };
                    let (proxy_ids, front_ids) = (ids("proxy"), ids("frontend-group"));
                    let child_of = |service: &str, parents: &BTreeSet<String>| {
                        of.iter().any(|s| {
                            s["service"] == service
                                && s["parent_span_id"]
                                    .as_str()
                                    .is_some_and(|p| parents.contains(p))
                        })
                    };
                    let from_client = of
                        .iter()
                        .any(|s| s["service"] == "proxy" && s["parent_span_id"] == **client);
                    // The span that made the retried call, and the span of the attempt that
                    // answered it, its child in storage-group.
                    let marked: BTreeSet<String> = of
                        .iter()
                        .filter(|s| {
                            s["service"] == "frontend-group"
                                && s["attributes"]["arca.call.outcome"] == "retried-ok"
                        })
                        .filter_map(|s| s["span_id"].as_str().map(str::to_owned))
                        .collect();
                    let retried = child_of("storage-group", &marked);
                    if from_client
                        && child_of("frontend-group", &proxy_ids)
                        && child_of("storage-group", &front_ids)
                        && retried
                    {
                        return Ok(Some((trace.clone(), of.len())));
                    }
                }
                Ok(None)
            }
        },
    )
    .await;
    let (trace, n) = match joined {
        Ok(found) => found,
        Err(e) => {
            let all = spans(&receiver);
            let services: BTreeSet<String> = all
                .iter()
                .filter_map(|s| s["service"].as_str().map(str::to_owned))
                .collect();
            let first: Vec<String> = all
                .iter()
                .filter(|s| ours.keys().next().is_some_and(|t| s["trace_id"] == *t))
                .map(|s| {
                    format!(
                        "{} {} {} parent {} outcome {}",
                        s["service"],
                        s["span_id"],
                        s["attributes"]["route"],
                        s["parent_span_id"],
                        s["attributes"]["arca.call.outcome"]
                    )
                })
                .collect();
            let marked: Vec<&Value> = all
                .iter()
                .filter(|s| !s["attributes"]["arca.call.outcome"].is_null())
                .collect();
            anyhow::bail!(
                "{e:#}\n{} spans received, from {services:?}; our first trace: {first:#?}; marked: {marked:#?}",
                all.len(),
            );
        }
    };
    eprintln!(
        "trace {trace}: {n} spans across proxy, frontend-group and storage-group, one retried hop"
    );

    // The same hop in /metrics: by service, the endpoint that failed, and the outcome.
    let text = get(&front.debug, "/metrics", &[]).await?.text();
    let dead_endpoint = dead.clone();
    let retried = metric_total(
        &text,
        "arca_transport_failed_calls_total",
        &[
            ("service", "storage-users"),
            ("endpoint", dead_endpoint.as_str()),
            ("outcome", "retried-ok"),
        ],
    );
    eprintln!(
        "frontend: {retried} storage-users calls refused by {dead} and answered by the other"
    );
    assert!(retried >= 1.0, "no retried call counted:\n{text}");
    Ok(())
}
