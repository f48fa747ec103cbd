//! The client channel against real servers on loopback: per-request balancing, retry past a
//! dead endpoint, no lost requests when one instance shuts down, streaming bodies, and the call
//! context travelling with each call.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arca_transport::context::{CallContext, IDENTITY_HEADER};
use arca_transport::{Clients, Endpoint, MemHub, RetryPolicy, StaticRegistry, bind, serve};
use axum::Router;
use axum::body::Body;
use axum::routing::{get, post};
use http::{HeaderValue, Request, StatusCode};
use http_body_util::BodyExt;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// A server answering `/who` with its tag and counting hits; `/echo-len` counts body bytes;
/// `/identity` returns the identity header it received.
struct TestServer {
    hits: Arc<AtomicUsize>,
    token: CancellationToken,
    done: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start(endpoint: &Endpoint, hub: &MemHub, tag: &'static str) -> TestServer {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let router = Router::new()
        .route(
            "/who",
            get(move || {
                counter.fetch_add(1, Ordering::SeqCst);
                async move { tag }
            }),
        )
        .route(
            "/echo-len",
            post(|body: Body| async move {
                let mut stream = body.into_data_stream();
                let mut n = 0usize;
                while let Some(Ok(chunk)) = futures::StreamExt::next(&mut stream).await {
                    n += chunk.len();
                }
                n.to_string()
            }),
        )
        .route(
            "/identity",
            get(|headers: http::HeaderMap| async move {
                headers
                    .get(IDENTITY_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("none")
                    .to_owned()
            }),
        );
    let listener = bind(endpoint, hub).await.expect("bind");
    let token = CancellationToken::new();
    let done = tokio::spawn(serve(listener, router, token.clone()));
    TestServer { hits, token, done }
}

fn free_tcp() -> Endpoint {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 0");
    Endpoint::Tcp(l.local_addr().expect("addr").to_string())
}

fn clients(hub: &MemHub, service: &str, endpoints: Vec<Endpoint>) -> Clients {
    let mut map = BTreeMap::new();
    map.insert(service.to_owned(), endpoints);
    Clients::new(
        hub.clone(),
        Arc::new(StaticRegistry::new(&map)),
        RetryPolicy::default(),
    )
}

async fn get_text(
    clients: &Clients,
    service: &str,
    path: &str,
) -> Result<(StatusCode, String), String> {
    let req = Request::get(path)
        .body(Body::empty())
        .map_err(|e| e.to_string())?;
    let resp = clients
        .channel(service)
        .oneshot(req)
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

#[tokio::test]
async fn picks_an_endpoint_per_request() {
    let hub = MemHub::new();
    let (a, b) = (free_tcp(), free_tcp());
    let sa = start(&a, &hub, "a").await;
    let sb = start(&b, &hub, "b").await;
    let c = clients(&hub, "svc", vec![a, b]);
    for _ in 0..200 {
        let (status, _) = get_text(&c, "svc", "/who").await.expect("call");
        assert_eq!(status, StatusCode::OK);
    }
    let (ha, hb) = (
        sa.hits.load(Ordering::SeqCst),
        sb.hits.load(Ordering::SeqCst),
    );
    assert_eq!(ha + hb, 200);
    // One pinned connection would send everything to one side.
    assert!(ha >= 40 && hb >= 40, "unbalanced: a={ha} b={hb}");
}

#[tokio::test]
async fn retries_past_a_dead_endpoint() {
    let hub = MemHub::new();
    let dead = free_tcp(); // nothing listens there any more
    let alive = free_tcp();
    let s = start(&alive, &hub, "alive").await;
    let c = clients(&hub, "svc", vec![dead, alive]);
    for _ in 0..100 {
        let (status, body) = get_text(&c, "svc", "/who")
            .await
            .expect("every call succeeds");
        assert_eq!((status, body.as_str()), (StatusCode::OK, "alive"));
    }
    assert_eq!(s.hits.load(Ordering::SeqCst), 100);
}

#[tokio::test]
async fn no_request_lost_when_an_instance_stops() {
    let hub = MemHub::new();
    let dir = tempdir();
    let a = Endpoint::Unix(dir.join("a.sock"));
    let b = Endpoint::Unix(dir.join("b.sock"));
    let sa = start(&a, &hub, "a").await;
    let sb = start(&b, &hub, "b").await;
    let c = clients(&hub, "svc", vec![a, b]);
    // Open connections to both first, then stop one while calls keep flowing.
    for _ in 0..20 {
        get_text(&c, "svc", "/who").await.expect("warm-up call");
    }
    let load = {
        let c = c.clone();
        tokio::spawn(async move {
            let mut failures = Vec::new();
            for _ in 0..400 {
                if let Err(e) = get_text(&c, "svc", "/who").await {
                    failures.push(e);
                }
            }
            failures
        })
    };
    sa.token.cancel();
    sa.done.await.expect("join").expect("server a drained");
    let failures = load.await.expect("join");
    assert!(failures.is_empty(), "lost requests: {failures:?}");
    assert!(sb.hits.load(Ordering::SeqCst) > 0);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn streams_a_large_body_over_a_unix_socket() {
    let hub = MemHub::new();
    let dir = tempdir();
    let ep = Endpoint::Unix(dir.join("s.sock"));
    let _s = start(&ep, &hub, "s").await;
    let c = clients(&hub, "svc", vec![ep]);
    // 32 MiB in 64 KiB chunks, produced lazily: the body is never whole in memory.
    let chunks = futures::stream::iter(
        (0..512).map(|_| Ok::<_, std::io::Error>(bytes::Bytes::from(vec![7u8; 64 * 1024]))),
    );
    let req = Request::post("/echo-len")
        .body(Body::from_stream(chunks))
        .expect("request");
    let resp = c.channel("svc").oneshot(req).await.expect("call");
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(&body[..], (32usize << 20).to_string().as_bytes());
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn in_process_calls_use_the_hub_and_carry_the_call_context() {
    let hub = MemHub::new();
    let s = start(&Endpoint::Mem("svc".into()), &hub, "mem").await;
    // Serving starts when the spawned task first runs; wait for that, as readiness would.
    while !hub.is_serving("svc") {
        tokio::task::yield_now().await;
    }
    // No registry entry at all: the hub alone must find it.
    let c = clients(&hub, "other", vec![]);
    let ctx = CallContext {
        identity: Some(HeaderValue::from_static("token-123")),
        request_id: None,
        client: None,
        traceparent: None,
    };
    let (_, who) = get_text(&c, "svc", "/identity").await.expect("call");
    assert_eq!(who, "none");
    let (_, who) = ctx
        .scope(get_text(&c, "svc", "/identity"))
        .await
        .expect("call");
    assert_eq!(who, "token-123");

    s.token.cancel();
    s.done.await.expect("join").expect("drained");
    let err = get_text(&c, "svc", "/who")
        .await
        .expect_err("stopped service is unavailable");
    assert!(err.contains("no endpoint"), "{err}");
}

fn tempdir() -> std::path::PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "arca-transport-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}
