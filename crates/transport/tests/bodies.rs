//! Bodies through a channel against real servers on loopback: relayed bodies never kill the
//! connection they cross; a PUT kept whole goes again when its endpoint fails mid-request and a
//! larger one does not; a caller's broken body is the caller's fault; a GET that breaks off
//! continues from another endpoint with a Range request, or ends in an error, never short.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use arca_transport::{
    CallFailure, Channel, Clients, Endpoint, MemHub, RetryPolicy, StaticRegistry, bind, serve,
};
use axum::Router;
use axum::body::Body;
use axum::routing::{get, put};
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode, header};
use http_body_util::BodyExt;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

const BLOB: usize = 70_000;

fn blob() -> Bytes {
    Bytes::from((0..BLOB).map(|i| (i * 7 % 251) as u8).collect::<Vec<u8>>())
}

fn free_tcp() -> Endpoint {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 0");
    Endpoint::Tcp(l.local_addr().expect("addr").to_string())
}

async fn start(endpoint: &Endpoint, router: Router) -> CancellationToken {
    let listener = bind(endpoint, &MemHub::new()).await.expect("bind");
    let token = CancellationToken::new();
    tokio::spawn(serve(listener, router, token.clone()));
    token
}

fn channel(endpoints: Vec<Endpoint>) -> Channel {
    let mut map = BTreeMap::new();
    map.insert("svc".to_owned(), endpoints);
    Clients::new(
        MemHub::new(),
        Arc::new(StaticRegistry::new(&map)),
        RetryPolicy {
            max_buffered_body: 1 << 20,
            ..RetryPolicy::default()
        },
    )
    .channel("svc")
}

/// A body that is not ready at once (so it streams instead of being gathered), yielding
/// `chunks` with a pause before each.
fn trickle(chunks: Vec<Bytes>) -> Body {
    let stream = futures::stream::unfold(chunks.into_iter(), |mut rest| async move {
        tokio::task::yield_now().await;
        rest.next().map(|c| (Ok::<_, std::io::Error>(c), rest))
    });
    Body::from_stream(stream)
}

/// What bodies relayed through a hop look like now and then: empty chunks between the data.
fn with_empty_chunks() -> Vec<Bytes> {
    vec![
        Bytes::from_static(b"ab"),
        Bytes::new(),
        Bytes::from_static(b"cd"),
        Bytes::new(),
    ]
}

#[tokio::test]
async fn empty_chunks_in_relayed_bodies_never_kill_the_connection() {
    let ep = free_tcp();
    let router = Router::new()
        .route(
            "/echo",
            axum::routing::post(|body: Body| async move {
                body.collect()
                    .await
                    .map(|c| c.to_bytes())
                    .unwrap_or_default()
            }),
        )
        .route("/stream", get(|| async { trickle(with_empty_chunks()) }));
    let _server = start(&ep, router).await;
    let ch = channel(vec![ep]);
    // h2 answers the 101st empty non-final DATA frame of a connection's life with GOAWAY
    // ENHANCE_YOUR_CALM; 300 of each direction over the channel's one connection.
    for i in 0..300 {
        let req = Request::post("/echo")
            .body(trickle(with_empty_chunks()))
            .unwrap();
        let resp = ch
            .clone()
            .oneshot(req)
            .await
            .unwrap_or_else(|e| panic!("request {i}: {e}"));
        let body = resp.into_body().collect().await.expect("echo").to_bytes();
        assert_eq!(&body[..], b"abcd");
        let resp = ch
            .clone()
            .oneshot(Request::get("/stream").body(Body::empty()).unwrap())
            .await
            .unwrap_or_else(|e| panic!("request {i}: {e}"));
        let body = resp.into_body().collect().await.expect("answer").to_bytes();
        assert_eq!(&body[..], b"abcd");
    }
}

/// A server that reads a PUT's whole body and then fails the request the way a dying
/// instance does (its handler never answers: the stream is reset), counting the bodies it
/// read; and a healthy one that stores what it gets.
async fn failing_and_healthy() -> (
    Endpoint,
    Endpoint,
    Arc<AtomicUsize>,
    Arc<std::sync::Mutex<Vec<Bytes>>>,
) {
    let (bad, good) = (free_tcp(), free_tcp());
    let read = Arc::new(AtomicUsize::new(0));
    let seen = read.clone();
    let bad_router = Router::new().route(
        "/put",
        put(move |body: Body| {
            let seen = seen.clone();
            async move {
                let _ = body.collect().await;
                seen.fetch_add(1, Ordering::SeqCst);
                panic!("the instance dies after reading the body");
                #[allow(unreachable_code)]
                StatusCode::OK
            }
        }),
    );
    let stored: Arc<std::sync::Mutex<Vec<Bytes>>> = Arc::default();
    let into = stored.clone();
    let good_router = Router::new().route(
        "/put",
        put(move |body: Body| {
            let into = into.clone();
            async move {
                let bytes = body.collect().await.expect("body").to_bytes();
                into.lock().unwrap().push(bytes);
                StatusCode::NO_CONTENT
            }
        }),
    );
    std::mem::forget(start(&bad, bad_router).await);
    std::mem::forget(start(&good, good_router).await);
    (bad, good, read, stored)
}

fn put_request(bytes: &Bytes) -> Request<Body> {
    // Streamed in 16 KiB pieces, as a relayed upload arrives.
    let chunks: Vec<Bytes> = bytes.chunks(16 << 10).map(Bytes::copy_from_slice).collect();
    Request::put("/put")
        .header(header::CONTENT_LENGTH, bytes.len())
        .body(trickle(chunks))
        .unwrap()
}

#[tokio::test]
async fn a_put_kept_whole_goes_again_after_its_endpoint_failed_mid_request() {
    let (bad, good, read_by_bad, stored) = failing_and_healthy().await;
    let ch = channel(vec![bad, good]);
    let body = blob();
    for i in 0..40 {
        let resp = ch
            .clone()
            .oneshot(put_request(&body))
            .await
            .unwrap_or_else(|e| panic!("PUT {i}: {e}"));
        assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    }
    assert!(
        read_by_bad.load(Ordering::SeqCst) > 0,
        "no request reached the failing instance first"
    );
    let stored = stored.lock().unwrap();
    assert_eq!(stored.len(), 40);
    assert!(stored.iter().all(|b| *b == body), "a body arrived changed");
}

#[tokio::test]
async fn a_put_larger_than_the_buffer_is_not_sent_again() {
    let (bad, good, read_by_bad, stored) = failing_and_healthy().await;
    let ch = channel(vec![bad, good]);
    let big = Bytes::from(vec![5u8; (1 << 20) + 1]);
    let mut failed = 0;
    for _ in 0..20 {
        match ch.clone().oneshot(put_request(&big)).await {
            Ok(resp) => assert_eq!(resp.status(), StatusCode::NO_CONTENT),
            Err(e) => {
                failed += 1;
                assert!(
                    matches!(Channel::failure(&e), CallFailure::Unavailable(_)),
                    "{e}"
                );
            }
        }
    }
    // Every request that reached the failing instance failed: none went again.
    assert_eq!(failed, read_by_bad.load(Ordering::SeqCst));
    assert!(failed > 0);
    assert!(stored.lock().unwrap().iter().all(|b| *b == big));
}

#[tokio::test]
async fn a_callers_broken_body_is_the_callers_fault() {
    let ep = free_tcp();
    let router = Router::new().route(
        "/put",
        put(|body: Body| async move {
            match body.collect().await {
                Ok(_) => StatusCode::NO_CONTENT,
                Err(_) => StatusCode::BAD_REQUEST,
            }
        }),
    );
    let _server = start(&ep, router).await;
    let ch = channel(vec![ep]);
    for _ in 0..20 {
        let stream = futures::stream::unfold(0, |n| async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            match n {
                0 => Some((Ok(Bytes::from_static(b"start")), 1)),
                1 => Some((Err(std::io::Error::other("the client hung up")), 2)),
                _ => None,
            }
        });
        let req = Request::put("/put")
            .header(header::CONTENT_LENGTH, 10_000_000)
            .body(Body::from_stream(stream))
            .unwrap();
        let e = ch.clone().oneshot(req).await.expect_err("the body broke");
        assert!(
            matches!(Channel::failure(&e), CallFailure::CallerBody(_)),
            "{e}"
        );
    }
    // The endpoint did nothing wrong: it still takes requests at once.
    let req = Request::put("/put").body(Body::from("ok")).unwrap();
    let resp = ch.clone().oneshot(req).await.expect("a good request");
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
}

/// Serves `/blob` (BLOB bytes) with `etag`, honouring single `Range: bytes=A-B` requests;
/// a whole answer breaks off after `break_after` bytes when given. `chunked`: no length.
fn blob_router(etag: &'static str, break_after: Option<usize>, chunked: bool) -> Router {
    Router::new().route(
        "/blob",
        get(move |headers: HeaderMap| async move {
            let data = blob();
            let range = headers
                .get(header::RANGE)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("bytes="))
                .and_then(|v| v.split_once('-'))
                .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)));
            let mut resp = http::Response::builder()
                .header(header::ETAG, etag)
                .header(header::ACCEPT_RANGES, "bytes");
            let part = match range {
                Some((a, b)) => {
                    resp = resp
                        .status(206)
                        .header(header::CONTENT_RANGE, format!("bytes {a}-{b}/{BLOB}"));
                    data.slice(a..=b)
                }
                None => data,
            };
            if !chunked {
                resp = resp.header(header::CONTENT_LENGTH, part.len());
            }
            let whole = range.is_none();
            let pieces: Vec<Result<Bytes, std::io::Error>> = match break_after {
                Some(n) if whole => vec![
                    Ok(part.slice(..n)),
                    Err(std::io::Error::other("the instance died")),
                ],
                _ => part
                    .chunks(8192)
                    .map(|c| Ok(Bytes::copy_from_slice(c)))
                    .collect(),
            };
            // A pause before each piece: the head (and the first bytes) are on their way
            // before the break, as when an instance dies mid-answer.
            let stream = futures::stream::unfold(pieces.into_iter(), |mut rest| async move {
                tokio::time::sleep(Duration::from_millis(2)).await;
                rest.next().map(|p| (p, rest))
            });
            resp.body(Body::from_stream(stream)).unwrap()
        }),
    )
}

async fn get_blob(ch: &Channel) -> Result<Bytes, String> {
    let resp = ch
        .clone()
        .oneshot(Request::get("/blob").body(Body::empty()).unwrap())
        .await
        .map_err(|e| e.to_string())?;
    assert_eq!(resp.status(), StatusCode::OK);
    resp.into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn a_get_that_breaks_off_continues_from_another_endpoint() {
    let (a, b) = (free_tcp(), free_tcp());
    let _sa = start(&a, blob_router("\"v1\"", Some(8192), false)).await;
    let _sb = start(&b, blob_router("\"v1\"", None, false)).await;
    let ch = channel(vec![a, b]);
    for i in 0..40 {
        let body = get_blob(&ch)
            .await
            .unwrap_or_else(|e| panic!("GET {i}: {e}"));
        assert!(
            body == blob(),
            "GET {i}: {} bytes, not the blob",
            body.len()
        );
    }
}

#[tokio::test]
async fn a_get_that_cannot_be_continued_ends_in_an_error_never_short() {
    // The other endpoint has another version: splicing would mix two representations.
    let (a, b) = (free_tcp(), free_tcp());
    let _sa = start(&a, blob_router("\"v1\"", Some(8192), false)).await;
    let _sb = start(&b, blob_router("\"v2\"", Some(8192), false)).await;
    let ch = channel(vec![a, b]);
    for i in 0..10 {
        match get_blob(&ch).await {
            Ok(body) => panic!("GET {i}: a body of {} bytes counted as whole", body.len()),
            Err(e) => assert!(e.contains("broke off"), "{e}"),
        }
    }
    // Without a declared length (chunked), a break is an error too.
    let c = free_tcp();
    let _sc = start(&c, blob_router("\"v1\"", Some(8192), true)).await;
    let ch = channel(vec![c]);
    assert!(get_blob(&ch).await.is_err());
}

/// The path of a gRPC call the tests' policy declares idempotent.
const IDEMPOTENT_CALL: &str = "/arca.v1.Probe/Check";

/// An endpoint answering gRPC calls at [`IDEMPOTENT_CALL`] and `/arca.v1.Probe/Write` with
/// a 40 KB message and `grpc-status: 0` in its trailers; with `dies`, it sends the head and
/// 8 KB of the message, then breaks off (an instance killed mid-answer).
fn grpc_router(dies: bool, served: Arc<AtomicUsize>) -> Router {
    let answer = move || {
        let served = served.clone();
        async move {
            served.fetch_add(1, Ordering::SeqCst);
            let message = Bytes::from(vec![7u8; 40_000]);
            let mut trailers = HeaderMap::new();
            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
            let frames: Vec<Result<http_body::Frame<Bytes>, std::io::Error>> = if dies {
                vec![
                    Ok(http_body::Frame::data(message.slice(..8192))),
                    Err(std::io::Error::other("the instance died")),
                ]
            } else {
                vec![
                    Ok(http_body::Frame::data(message)),
                    Ok(http_body::Frame::trailers(trailers)),
                ]
            };
            let stream = futures::stream::unfold(frames.into_iter(), |mut rest| async move {
                tokio::time::sleep(Duration::from_millis(2)).await;
                rest.next().map(|f| (f, rest))
            });
            http::Response::builder()
                .header(header::CONTENT_TYPE, "application/grpc")
                .body(Body::new(http_body_util::StreamBody::new(stream)))
                .unwrap()
        }
    };
    Router::new()
        .route(IDEMPOTENT_CALL, axum::routing::post(answer.clone()))
        .route("/arca.v1.Probe/Write", axum::routing::post(answer))
}

/// A gRPC call: its whole answer and trailers, or the error the channel or the body gave.
async fn grpc_call(ch: &Channel, path: &str) -> Result<(Bytes, Option<HeaderMap>), String> {
    let req = Request::post(path)
        .header(header::CONTENT_TYPE, "application/grpc")
        .body(Body::from(Bytes::from_static(b"\0\0\0\0\0")))
        .unwrap();
    let resp = ch.clone().oneshot(req).await.map_err(|e| e.to_string())?;
    let whole = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    let trailers = whole.trailers().cloned();
    Ok((whole.to_bytes(), trailers))
}

/// An idempotent gRPC call whose answer breaks off after its head is asked again of another
/// endpoint and reaches the caller whole, trailers included; a call that is not idempotent
/// is never sent twice, and its break reaches the caller as UNAVAILABLE.
#[tokio::test]
async fn an_idempotent_call_whose_answer_breaks_off_goes_to_another_endpoint() {
    let (a, b) = (free_tcp(), free_tcp());
    let (dead, alive) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let _sa = start(&a, grpc_router(true, dead.clone())).await;
    let _sb = start(&b, grpc_router(false, alive.clone())).await;
    let mut map = BTreeMap::new();
    map.insert("svc".to_owned(), vec![a, b]);
    let ch = Clients::new(
        MemHub::new(),
        Arc::new(StaticRegistry::new(&map)),
        RetryPolicy {
            max_buffered_body: 1 << 20,
            idempotent_calls: &[IDEMPOTENT_CALL],
            ..RetryPolicy::default()
        },
    )
    .channel("svc");
    for i in 0..40 {
        let (body, trailers) = grpc_call(&ch, IDEMPOTENT_CALL)
            .await
            .unwrap_or_else(|e| panic!("call {i}: {e}"));
        assert_eq!(body.len(), 40_000, "call {i}");
        let status = trailers.as_ref().and_then(|t| t.get("grpc-status"));
        assert_eq!(status.map(|v| v.as_bytes()), Some(&b"0"[..]), "call {i}");
    }
    assert!(
        dead.load(Ordering::SeqCst) > 0,
        "the dying endpoint was never tried"
    );
    let (before_dead, before_alive) = (dead.load(Ordering::SeqCst), alive.load(Ordering::SeqCst));
    let mut broken = 0;
    for _ in 0..20 {
        if let Err(e) = grpc_call(&ch, "/arca.v1.Probe/Write").await {
            // UNAVAILABLE ("try later"), never the bare h2 error tonic reports as INTERNAL.
            assert!(e.contains("the answer broke off"), "{e}");
            broken += 1;
        }
    }
    let sent =
        dead.load(Ordering::SeqCst) - before_dead + alive.load(Ordering::SeqCst) - before_alive;
    assert_eq!(sent, 20, "a call that is not idempotent went twice");
    assert!(broken > 0, "no write met the dying endpoint");
}
