//! The real `arca` binary as operators run it: readiness of an all-in-one process, services
//! that cannot become ready and say why, a process split over Unix sockets or TCP, bad
//! configuration refused before anything binds, and `arca init`.

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use anyhow::Context as _;
use arca_tests::{
    InProcess, Launch, TempDir, all_services, assert_stopped_in_reverse_dependency_order,
    dependencies, eventually, free_port, get, metric_total, run_arca, send,
};

/// Deadline for states that take milliseconds when all is well: generous for a loaded CI box,
/// and only ever reached by a failing test.
const WITHIN: Duration = Duration::from_secs(10);
/// Processes of one deployment verify each other's identity tokens: they share the secret.
const SPLIT_SECRET: &str = "0123456789abcdef0123456789abcdef";

#[tokio::test]
async fn all_in_one_becomes_ready_serves_status_and_stops_in_order() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let mut arca = Launch::arca(&dir).spawn()?;

    let ready = arca.wait_ready(WITHIN).await?;
    let services = ready["services"].as_object().expect("services map");
    assert_eq!(services.len(), all_services().len(), "{ready}");
    for name in all_services() {
        assert_eq!(ready["services"][name], "ready", "{name}: {ready}");
    }
    assert!(ready.get("reasons").is_none(), "{ready}");
    // The storage services made and proved their directories before reporting ready.
    for name in ["storage-users", "storage-system"] {
        assert!(dir.join("data").join(name).is_dir(), "data/{name} missing");
    }

    let healthz = get(&arca.debug, "/healthz", &[]).await?;
    assert_eq!(healthz.status, 200, "{}", healthz.text());

    // Through the proxy's public port to the frontend, with a fresh request id…
    let status = arca.get("/status.php").await?;
    assert_eq!(status.status, 200, "{}", status.text());
    assert!(
        status
            .header("content-type")
            .is_some_and(|v| v.starts_with("application/json")),
        "{status:?}"
    );
    assert_eq!(status.json()?["installed"], true, "{}", status.text());
    let generated = status.header("x-request-id").unwrap_or_default();
    assert!(!generated.is_empty(), "no x-request-id: {status:?}");
    // …or the client's own one, echoed and logged.
    let echoed = get(&arca.public, "/status.php", &[("x-request-id", "test-42")]).await?;
    assert_eq!(echoed.status, 200);
    assert_eq!(echoed.header("x-request-id"), Some("test-42"));
    assert_ne!(generated, "test-42");
    arca.proc
        .wait_event(WITHIN, "access log line of request test-42", |e| {
            e["target"] == "access"
                && e["fields"]["request_id"] == "test-42"
                && e["fields"]["status"] == 200
        })
        .await?;
    let metrics = get(&arca.debug, "/metrics", &[]).await?.text();
    // Both GETs, each counted once under its route, method and status, and timed once.
    let value = |series: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok())
    };
    assert_eq!(
        value(
            r#"arca_requests_total{service="frontend",route="/status.php",method="GET",status="200"}"#
        ),
        Some(2.0),
        "the frontend's count of /status.php:\n{metrics}"
    );
    assert_eq!(
        value(r#"arca_request_duration_seconds_count{service="frontend",route="/status.php"}"#),
        Some(2.0),
        "the frontend's timings of /status.php:\n{metrics}"
    );

    arca.proc.sigterm();
    assert_eq!(arca.proc.exit_code(WITHIN).await?, Some(0));
    assert_stopped_in_reverse_dependency_order(&arca.proc, &all_services(), &dependencies());
    // Info lines wait in a buffer for at most 100 ms: the process writes out the last of them
    // before it exits.
    let events = arca.proc.events();
    assert_eq!(
        events.last().map(|e| e["fields"]["message"].clone()),
        Some("stopped cleanly".into()),
        "{}",
        arca.proc.stderr_tail(5)
    );
    Ok(())
}

/// The boot path `arca server` runs, hosting whole deployments inside the test process: all
/// six services over `mem://`, then the same six split in two hosts over a Unix socket and a
/// static registry, each answering through its proxy and stopping cleanly on request.
#[tokio::test]
async fn deployments_run_inside_the_test_process_on_the_real_boot_path() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let mut all = InProcess::start(&dir, &[("identity.admin_password", "in-process")]).await?;
    all.wait_ready(WITHIN).await?;
    let status = get(&all.public, "/status.php", &[]).await?;
    assert_eq!(status.status, 200, "{}", status.text());
    let readyz = get(&all.debug, "/readyz", &[]).await?;
    assert_eq!(readyz.status, 200, "{}", readyz.text());
    // Background jobs are workers the runtime runs and /metrics shows: the upload sweeper
    // runs at once under its lease; the orphan collector holds its lease and waits.
    let sweeper = [("worker", "storage-users/upload-expiry")];
    let metrics = eventually(WITHIN, "the upload sweeper's first run", || async {
        let text = get(&all.debug, "/metrics", &[]).await?.text();
        Ok((metric_total(&text, "arca_worker_runs_total", &sweeper) >= 1.0).then_some(text))
    })
    .await?;
    assert_eq!(
        metric_total(&metrics, "arca_worker_errors_total", &sweeper),
        0.0
    );
    assert!(
        metric_total(&metrics, "arca_worker_last_run_timestamp_seconds", &sweeper) > 1.0e9,
        "{metrics}"
    );
    let gc = [("worker", "storage-users/orphan-gc")];
    assert_eq!(metric_total(&metrics, "arca_worker_active", &gc), 1.0);
    let auth = [("authorization", "Basic YWRtaW46aW4tcHJvY2Vzcw==")]; // admin:in-process
    let put = send(&all.public, "PUT", "/remote.php/webdav/a.txt", &auth, "one").await?;
    assert_eq!(put.status, 201, "{}", put.text());
    let got = send(&all.public, "GET", "/remote.php/webdav/a.txt", &auth, "").await?;
    assert_eq!((got.status, got.text().as_str()), (200, "one"));
    assert!(matches!(all.stop().await?, arca_runtime::Outcome::Clean));

    let socket = dir.join("system.sock");
    let socket = format!("unix://{}", socket.display());
    let (back_dir, front_dir) = (TempDir::new(), TempDir::new());
    let mut back = InProcess::start(
        &back_dir,
        &[
            ("identity.secret", SPLIT_SECRET),
            ("identity.admin_password", "split-pass"),
            ("services", "storage-system"),
            ("storage-system.endpoint", &socket),
        ],
    )
    .await?;
    let mut front = InProcess::start(
        &front_dir,
        &[
            ("identity.secret", SPLIT_SECRET),
            ("services", "proxy,frontend,gateway,storage-users,sharing"),
            ("registry.kind", "static"),
            ("registry.static.storage-system", &socket),
        ],
    )
    .await?;
    back.wait_ready(WITHIN).await?;
    front.wait_ready(WITHIN).await?;
    // The login is answered by the other host's storage-system, over the socket.
    let auth = [("authorization", "Basic YWRtaW46c3BsaXQtcGFzcw==")]; // admin:split-pass
    let put = send(
        &front.public,
        "PUT",
        "/remote.php/webdav/b.txt",
        &auth,
        "two",
    )
    .await?;
    assert_eq!(put.status, 201, "{}", put.text());
    let got = send(&front.public, "GET", "/remote.php/webdav/b.txt", &auth, "").await?;
    assert_eq!((got.status, got.text().as_str()), (200, "two"));
    assert!(matches!(front.stop().await?, arca_runtime::Outcome::Clean));
    assert!(matches!(back.stop().await?, arca_runtime::Outcome::Clean));
    Ok(())
}

#[tokio::test]
async fn endpoint_that_cannot_be_bound_keeps_the_service_not_ready_and_says_why()
-> anyhow::Result<()> {
    let dir = TempDir::new();
    let socket = dir.join("no-such-dir/su.sock");
    let socket = socket.display().to_string();
    let mut arca = Launch::arca(&dir)
        .set("storage-users.endpoint", format!("unix://{socket}"))
        .spawn()?;

    let report = arca
        .wait_not_ready(WITHIN, "storage-users", "No such file or directory")
        .await?;
    let reason = report["reasons"]["storage-users"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.contains(&socket),
        "reason does not name the socket: {report}"
    );
    assert_ne!(report["status"], "ready");
    // The log says the same, naming the service.
    arca.proc
        .wait_event(WITHIN, "a \"cannot bind\" warning for storage-users", |e| {
            e["fields"]["service"] == "storage-users"
                && e["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("cannot bind"))
                && e["fields"]["error"]
                    .as_str()
                    .is_some_and(|m| m.contains(&socket))
        })
        .await?;
    // Still 503 later on: the process neither recovers by accident nor dies.
    let (status, _) = arca.readyz().await?;
    assert_eq!(status, 503);

    // A process that never became ready still stops cleanly.
    arca.proc.sigterm();
    assert_eq!(arca.proc.exit_code(WITHIN).await?, Some(0));
    Ok(())
}

#[tokio::test]
async fn public_port_in_use_keeps_the_proxy_not_ready_until_it_is_free() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let taken = TcpListener::bind("127.0.0.1:0")?;
    let addr = taken.local_addr()?.to_string();
    let mut arca = Launch::arca(&dir).public_addr(&addr).spawn()?;

    let report = arca
        .wait_not_ready(WITHIN, "proxy", "Address already in use")
        .await?;
    let reason = report["reasons"]["proxy"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&addr),
        "reason does not name the address: {report}"
    );
    assert_eq!(report["services"]["frontend"], "ready", "{report}");

    // The proxy keeps trying: once the port is free it binds, and the process is ready.
    drop(taken);
    arca.wait_ready(WITHIN).await?;
    let status = arca.get("/status.php").await?;
    assert_eq!(status.status, 200, "{}", status.text());
    Ok(())
}

/// The frontend alone, its dependencies listed at `DIR/SERVICE.sock`, where nobody listens.
fn nobody_behind_the_frontend(dir: &TempDir) -> Launch {
    let mut launch = Launch::arca(dir)
        .services("frontend")
        .set("identity.secret", SPLIT_SECRET)
        .set("registry.kind", "static");
    for service in BACK {
        let socket = dir.join(&format!("{service}.sock"));
        launch = launch.set(
            &format!("registry.static.{service}"),
            format!("unix://{}", socket.display()),
        );
    }
    launch
}

#[tokio::test]
async fn unreachable_remote_dependency_keeps_the_dependant_not_ready() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let socket = dir.join("gateway.sock");
    let socket = socket.display().to_string();
    let mut arca = nobody_behind_the_frontend(&dir).spawn()?;

    let report = arca
        .wait_not_ready(WITHIN, "frontend", "dependency gateway unreachable")
        .await?;
    let reason = report["reasons"]["frontend"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&socket),
        "reason does not name the endpoint: {report}"
    );
    arca.proc
        .wait_event(WITHIN, "a \"dependency unreachable\" warning", |e| {
            e["fields"]["message"] == "dependency unreachable"
                && e["fields"]["service"] == "frontend"
                && e["fields"]["dependency"] == "gateway"
        })
        .await?;
    Ok(())
}

#[tokio::test]
async fn arca_health_answers_with_the_exit_code() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let health =
        |debug: String| async move { run_arca(&["health", "--debug-addr", &debug], &[]).await };

    // Not ready: 1, and the report says why.
    let mut lonely = nobody_behind_the_frontend(&dir).spawn()?;
    lonely
        .wait_not_ready(WITHIN, "frontend", "dependency gateway unreachable")
        .await?;
    let out = health(lonely.debug.clone()).await?;
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stdout
            .join("\n")
            .contains("dependency gateway unreachable"),
        "{out:?}"
    );

    // Ready: 0.
    let other = TempDir::new();
    let mut arca = Launch::arca(&other).spawn()?;
    arca.wait_ready(WITHIN).await?;
    let out = health(arca.debug.clone()).await?;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.join("\n").contains("\"ready\""), "{out:?}");

    // Gone: 1.
    arca.proc.sigterm();
    assert_eq!(arca.proc.exit_code(WITHIN).await?, Some(0));
    let out = health(arca.debug.clone()).await?;
    assert_eq!(out.code, Some(1), "health of a stopped process: {out:?}");
    Ok(())
}

#[tokio::test]
async fn data_dir_that_is_a_file_fails_the_process_naming_the_store() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let file = dir.join("not-a-directory");
    std::fs::write(&file, "x")?;
    let mut arca = Launch::arca(&dir).data_dir(&file).spawn()?;

    assert_eq!(arca.proc.exit_code(WITHIN).await?, Some(1));
    let stderr = arca.proc.stderr();
    let file = file.display().to_string();
    let summary = stderr
        .iter()
        .find(|l| l.starts_with("arca: service "))
        .unwrap_or_else(|| panic!("no failure summary on stderr:\n{}", stderr.join("\n")));
    assert!(
        (summary.contains("storage-users") || summary.contains("storage-system"))
            && summary.contains(&file)
            && summary.contains("Not a directory"),
        "{summary}"
    );
    let failed = arca.proc.events_with("service failed; stopping the others");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        failed[0]["fields"]["service"]
            .as_str()
            .is_some_and(|s| s.starts_with("storage-")),
        "{failed:?}"
    );
    Ok(())
}

/// The services of process B in the split tests: the gateway and everything behind it.
const BACK: [&str; 4] = ["gateway", "storage-users", "storage-system", "sharing"];

/// Process B hosts [`BACK`], each on its endpoint from `endpoints`; process A hosts the proxy
/// and the frontend and finds B's services through a static registry listing those endpoints.
/// Only config differs from the all-in-one (in-memory) process.
async fn split_processes(endpoints: [String; 4]) -> anyhow::Result<()> {
    let (dir_a, dir_b) = (TempDir::new(), TempDir::new());
    let mut a = Launch::arca(&dir_a)
        .services("proxy,frontend")
        .set("identity.secret", SPLIT_SECRET)
        .set("registry.kind", "static")
        .env("ARCA_LOG_LEVEL", "debug");
    let mut b = Launch::arca(&dir_b)
        .services(&BACK.join(","))
        .set("identity.secret", SPLIT_SECRET)
        .env("ARCA_ADMIN_PASSWORD", "split-pass")
        .env("ARCA_LOG_LEVEL", "debug");
    for (service, endpoint) in BACK.iter().zip(&endpoints) {
        a = a.set(&format!("registry.static.{service}"), endpoint);
        b = b.set(&format!("{service}.endpoint"), endpoint);
    }
    let mut a = a.spawn()?;
    // Started alone, A does not hang and does not pretend: it says what it misses.
    a.wait_not_ready(WITHIN, "frontend", "dependency gateway unreachable")
        .await?;

    let mut b = b.spawn()?;
    b.wait_ready(WITHIN).await?;
    let ready = a.wait_ready(WITHIN).await?;
    assert_eq!(ready["services"]["frontend"], "ready", "{ready}");

    let status = a.get("/status.php").await?;
    assert_eq!(status.status, 200, "{}", status.text());
    assert_eq!(status.json()?["installed"], true);

    // A file crosses the process boundary: its metadata over gRPC to B's gateway and
    // storage-users, its bytes over B's data path (past arca_proto::SMALL_BODY, which would
    // ride inside the calls), the login against B's storage-system.
    let auth = [("authorization", "Basic YWRtaW46c3BsaXQtcGFzcw==")]; // admin:split-pass
    let across = "across ".repeat(12_000);
    let put = send(
        &a.public,
        "PUT",
        "/remote.php/webdav/split.txt",
        &auth,
        across.clone(),
    )
    .await?;
    assert_eq!(put.status, 201, "{}", put.text());
    // The client starts the trace (W3C traceparent), so the test knows its id without
    // reading it back from a log line the proxy may not have written yet.
    let trace = "5a11b2c3d4e5f60718293a4b5c6d7e8f";
    let traceparent = format!("00-{trace}-0123456789abcdef-01");
    let traced = [auth[0], ("traceparent", traceparent.as_str())];
    let got = send(
        &a.public,
        "GET",
        "/remote.php/webdav/split.txt",
        &traced,
        "",
    )
    .await?;
    assert_eq!(got.status, 200);
    assert!(got.text() == across, "the bytes that were put");

    // One trace joins every hop of that GET, in both processes and over every transport.
    let handled = |e: &serde_json::Value, service: &str, route: &str| {
        e["fields"]["message"] == "handled"
            && e["span"]["service"] == service
            && e["span"]["method"] == "GET"
            && e["span"]["route"]
                .as_str()
                .is_some_and(|r| r.starts_with(route))
    };
    a.proc
        .wait_event(WITHIN, &format!("proxy GET in trace {trace}"), |e| {
            handled(e, "proxy", "") && e["span"]["trace_id"] == trace
        })
        .await?;
    b.proc
        .wait_event(
            WITHIN,
            &format!("storage-users data GET in trace {trace}"),
            |e| handled(e, "storage-users", "/data/") && e["span"]["trace_id"] == trace,
        )
        .await?;
    b.proc
        .wait_event(
            WITHIN,
            &format!("gateway InitiateDownload in trace {trace}"),
            |e| {
                e["fields"]["message"] == "handled"
                    && e["span"]["service"] == "gateway"
                    && e["span"]["route"] == "/arca.v1.Storage/InitiateDownload"
                    && e["span"]["trace_id"] == trace
            },
        )
        .await?;

    // A request that brings no trace starts one at the proxy, and every hop joins it.
    let untraced = send(&a.public, "GET", "/remote.php/webdav/split.txt", &auth, "").await?;
    assert_eq!(untraced.status, 200, "{}", untraced.text());
    let request_id = untraced
        .header("x-request-id")
        .context("the proxy answers with a request id")?
        .to_owned();
    let access = a
        .proc
        .wait_event(
            WITHIN,
            &format!("access line of request {request_id}"),
            |e| e["target"] == "access" && e["fields"]["request_id"] == request_id,
        )
        .await?;
    let started = access["span"]["trace_id"]
        .as_str()
        .context("the access line carries the trace id")?
        .to_owned();
    assert!(
        started.len() == 32
            && started.bytes().all(|b| b.is_ascii_hexdigit())
            && started.bytes().any(|b| b != b'0')
            && started != trace,
        "a new trace id: {started}"
    );
    b.proc
        .wait_event(
            WITHIN,
            &format!("storage-users data GET in the proxy's trace {started}"),
            |e| handled(e, "storage-users", "/data/") && e["span"]["trace_id"] == started,
        )
        .await?;

    // B's services trust only what a proxy vouched for: called directly, without an identity
    // token or with a forged one, they refuse and reveal nothing.
    let gateway_endpoint: arca_transport::Endpoint = endpoints[0].parse()?;
    let mut registry = std::collections::BTreeMap::new();
    registry.insert("gateway".to_owned(), vec![gateway_endpoint]);
    let clients = arca_transport::Clients::new(
        arca_transport::MemHub::new(),
        std::sync::Arc::new(arca_transport::StaticRegistry::new(&registry)),
        arca_transport::RetryPolicy::default(),
    );
    let stat = arca_proto::v1::StatRequest {
        r#ref: Some(arca_proto::v1::Ref {
            path: "/split.txt".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut direct = arca_proto::v1::storage_client::StorageClient::new(clients.channel("gateway"));
    let anonymous = direct
        .stat(stat.clone())
        .await
        .expect_err("no token, no answer");
    assert_eq!(
        anonymous.code(),
        tonic::Code::Unauthenticated,
        "{anonymous:?}"
    );
    let mut forged = tonic::Request::new(stat);
    forged
        .metadata_mut()
        .insert("x-arca-identity", "v1.eyJpZCI6ImFkbWluIn0.AAAA".parse()?);
    let refused = direct
        .stat(forged)
        .await
        .expect_err("a forged token is refused");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");

    // The gateway's probes came from A: nothing in B depends on the gateway.
    let metrics = get(&b.debug, "/metrics", &[]).await?.text();
    let probes = counter(
        &metrics,
        r#"arca_requests_total{service="gateway",route="/arca.v1.Probe/Check""#,
    );
    assert!(probes > 0.0, "B's gateway counted no probe:\n{metrics}");

    b.proc.sigterm();
    assert_eq!(b.proc.exit_code(WITHIN).await?, Some(0));
    a.wait_not_ready(WITHIN, "frontend", "dependency gateway unreachable")
        .await?;
    assert!(
        !a.proc.has_exited(),
        "A must keep running, not ready, until B is back"
    );
    Ok(())
}

/// In one process, a request's in-memory hops run inside the span of the hop that entered the
/// process (the proxy's): each hop's "handled" line names the hop and carries that span and
/// its trace, so one trace id still finds every hop's line.
#[tokio::test]
async fn in_process_hops_log_inside_the_request_span_of_the_proxy() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let mut arca = Launch::arca(&dir)
        .env("ARCA_ADMIN_PASSWORD", "split-pass")
        .env("ARCA_LOG_LEVEL", "debug")
        .spawn()?;
    arca.wait_ready(WITHIN).await?;
    let auth = ("authorization", "Basic YWRtaW46c3BsaXQtcGFzcw=="); // admin:split-pass
    // Past arca_proto::SMALL_BODY, so the bytes take the data path too.
    let here = "here ".repeat(16_000);
    let put = send(
        &arca.public,
        "PUT",
        "/remote.php/webdav/one.txt",
        &[auth],
        here.clone(),
    )
    .await?;
    assert_eq!(put.status, 201, "{}", put.text());
    let trace = "0a1b2c3d4e5f60718293a4b5c6d7e8f9";
    let traceparent = format!("00-{trace}-0123456789abcdef-01");
    let traced = [auth, ("traceparent", traceparent.as_str())];
    let got = send(
        &arca.public,
        "GET",
        "/remote.php/webdav/one.txt",
        &traced,
        "",
    )
    .await?;
    assert_eq!(got.status, 200);
    assert!(got.text() == here, "the bytes that were put");

    // (hop, route prefix): the frontend's WebDAV route is its fallback.
    for (hop, route) in [
        ("frontend", ""),
        ("gateway", "/arca.v1.Storage/InitiateDownload"),
        ("storage-users", "/arca.v1.Storage/InitiateDownload"),
        ("storage-users", "/data/{token}"),
    ] {
        arca.proc
            .wait_event(WITHIN, &format!("{hop} {route} in trace {trace}"), |e| {
                e["fields"]["message"] == "handled"
                    && e["fields"]["hop"] == hop
                    && e["fields"]["route"]
                        .as_str()
                        .is_some_and(|r| r.starts_with(route))
                    && e["span"]["service"] == "proxy"
                    && e["span"]["trace_id"] == trace
            })
            .await?;
    }
    Ok(())
}

#[tokio::test]
async fn split_over_unix_sockets() -> anyhow::Result<()> {
    let dir = TempDir::new();
    split_processes(BACK.map(|s| format!("unix://{}", dir.join(&format!("{s}.sock")).display())))
        .await
}

#[tokio::test]
async fn split_over_tcp() -> anyhow::Result<()> {
    split_processes(BACK.map(|_| format!("tcp://127.0.0.1:{}", free_port()))).await
}

/// The sum of the samples of the metric lines starting with `prefix`.
fn counter(metrics: &str, prefix: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn bad_config_exits_2_with_one_line_naming_the_key_before_binding() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let bad_addr = dir.join("bad-addr.yaml");
    std::fs::write(&bad_addr, "proxy:\n  http:\n    addr: not an address\n")?;
    let unknown = dir.join("unknown.yaml");
    std::fs::write(&unknown, "proxy:\n  htp:\n    addr: 127.0.0.1:1\n")?;
    let missing = dir.join("missing.yaml");
    let (bad_addr, unknown, missing) = (
        bad_addr.display().to_string(),
        unknown.display().to_string(),
        missing.display().to_string(),
    );

    struct Case<'a> {
        args: &'a [&'a str],
        env: &'a [(&'a str, &'a str)],
        expect: &'a [&'a str],
    }
    const SECRET: &str = "identity.secret=0123456789abcdef";
    let cases = [
        Case {
            args: &["--config", &bad_addr],
            env: &[],
            expect: &["proxy.http.addr", "\"not an address\"", &bad_addr],
        },
        Case {
            args: &["--config", &unknown],
            env: &[],
            expect: &["proxy.htp", "unknown key", &unknown],
        },
        Case {
            args: &["--set", "proxy.htp=1"],
            env: &[],
            expect: &["proxy.htp", "unknown key", "flag --set"],
        },
        Case {
            args: &[],
            env: &[("ARCA_SHUTDOWN_TIMEOUT", "soon")],
            expect: &["shutdown.timeout", "\"soon\"", "env ARCA_SHUTDOWN_TIMEOUT"],
        },
        Case {
            args: &["--services", "foo"],
            env: &[],
            expect: &["services", "\"foo\"", "flag --services"],
        },
        Case {
            args: &["--set", "gateway.endpoint=http://x"],
            env: &[],
            expect: &["gateway.endpoint", "http://x", "flag --set"],
        },
        Case {
            args: &["--config", &missing],
            env: &[],
            expect: &[&missing, "No such file"],
        },
        Case {
            args: &["--services", "frontend", "--set", SECRET],
            env: &[],
            expect: &["registry.kind", "\"memory\""],
        },
        Case {
            args: &[
                "--services",
                "frontend",
                "--set",
                SECRET,
                "--set",
                "registry.kind=static",
            ],
            env: &[],
            expect: &["registry.static.", "missing", "frontend depends on"],
        },
    ];

    for case in &cases {
        // The debug port is taken, so a process that bound anything before validating would
        // fail on it (exit 1, "debug server …") instead of reporting the config error.
        let taken = TcpListener::bind("127.0.0.1:0")?;
        let debug = taken.local_addr()?.to_string();
        let data = dir.join("data");
        let data = data.display().to_string();
        let mut args = vec!["server", "--debug-addr", &debug, "--data-dir", &data];
        args.extend_from_slice(case.args);
        let out = run_arca(&args, case.env).await?;
        let what = format!("{:?} {:?}: {out:?}", case.args, case.env);
        assert_eq!(out.code, Some(2), "{what}");
        assert_eq!(out.stderr.len(), 1, "not one line: {what}");
        let line = &out.stderr[0];
        assert!(line.starts_with("config error: "), "{what}");
        for needle in case.expect {
            assert!(line.contains(needle), "{needle:?} missing: {what}");
        }
        assert!(out.stdout.is_empty(), "{what}");
        assert!(!dir.join("data").exists(), "data dir created: {what}");
    }

    // Control: a valid config with the debug port taken does reach the bind, and fails there.
    let taken = TcpListener::bind("127.0.0.1:0")?;
    let debug = taken.local_addr()?.to_string();
    let data = dir.join("data");
    let out = run_arca(
        &[
            "server",
            "--debug-addr",
            &debug,
            "--data-dir",
            &data.display().to_string(),
        ],
        &[
            ("ARCA_LOG_FORMAT", "json"),
            ("ARCA_PROXY_HTTP_ADDR", "127.0.0.1:1"),
        ],
    )
    .await?;
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr
            .iter()
            .any(|l| l.contains(&format!("debug server on {debug}"))),
        "{out:?}"
    );
    Ok(())
}

#[tokio::test]
async fn init_writes_a_private_config_that_the_server_accepts() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let path = dir.join("etc/arca.yaml");
    let path_str = path.display().to_string();

    let init = run_arca(&["init", "--config", &path_str], &[]).await?;
    assert_eq!(init.code, Some(0), "{init:?}");
    assert!(
        init.stdout
            .iter()
            .any(|l| l.starts_with("admin password: ")),
        "{init:?}"
    );
    let mode = std::fs::metadata(&path)?.permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "mode {mode:o}");
    let written = std::fs::read_to_string(&path)?;

    let mut arca = Launch::arca(&dir).arg("--config").arg(&path).spawn()?;
    arca.wait_ready(WITHIN).await?;
    let started = arca
        .proc
        .wait_event(WITHIN, "the \"arca starting\" line", |e| {
            e["fields"]["message"] == "arca starting"
        })
        .await?;
    assert_eq!(started["fields"]["config"], path_str.as_str(), "{started}");
    arca.proc.sigterm();
    assert_eq!(arca.proc.exit_code(WITHIN).await?, Some(0));

    let again = run_arca(&["init", "--config", &path_str], &[]).await?;
    assert_eq!(again.code, Some(2), "{again:?}");
    assert!(again.stderr.join("\n").contains("--force"), "{again:?}");
    assert_eq!(
        std::fs::read_to_string(&path)?,
        written,
        "overwritten without --force"
    );

    let forced = run_arca(&["init", "--config", &path_str, "--force"], &[]).await?;
    assert_eq!(forced.code, Some(0), "{forced:?}");
    assert_ne!(
        std::fs::read_to_string(&path)?,
        written,
        "--force kept the old secrets"
    );
    let mode = std::fs::metadata(&path)?.permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "mode after --force {mode:o}");
    Ok(())
}

#[tokio::test]
async fn init_force_makes_an_existing_file_private() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let path = dir.join("arca.yaml");
    std::fs::write(&path, "# an old, world-readable config\n")?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))?;
    let path_str = path.display().to_string();
    let forced = run_arca(&["init", "--config", &path_str, "--force"], &[]).await?;
    assert_eq!(forced.code, Some(0), "{forced:?}");
    let mode = std::fs::metadata(&path)?.permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "secrets written to a file of mode {mode:o}");
    Ok(())
}
