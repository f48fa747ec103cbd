//! Request size limits at the edge: the request head (431) and the body (413).
//!
//! The body limit never buffers: a declared `Content-Length` above it is refused before a byte
//! of the body is read (so a client sending `Expect: 100-continue` never gets the go-ahead),
//! and a body without one streams through a counter that cuts it off where it passes the limit.
//! The frontend then sees a failed body and commits nothing; the proxy answers 413 in place of
//! whatever the frontend said about the broken stream.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{StatusCode, header};
use http_body::{Frame, SizeHint};

/// The size of the request head as HTTP/1.1 would carry it: request line, then each field as
/// `name: value\r\n`. HTTP/2 requests are measured the same way, so one limit means one thing.
pub(crate) fn head_size(req: &Request) -> usize {
    let uri = req.uri().path_and_query().map_or(1, |p| p.as_str().len());
    // "METHOD SP URI SP HTTP/1.1 CRLF"
    let line = req.method().as_str().len() + 1 + uri + 1 + 8 + 2;
    req.headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + 2 + value.len() + 2)
        .sum::<usize>()
        + line
}

/// 431 if the request head is larger than `max` bytes (RFC 6585 §5).
pub(crate) fn check_head(req: &Request, max: u64) -> Option<Response> {
    let size = head_size(req) as u64;
    (size > max).then(|| {
        let body = format!("request headers are {size} bytes, more than the {max} allowed\n");
        (StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, body).into_response()
    })
}

/// 413 if the request declares a body larger than `max` bytes (RFC 9110 §15.5.14).
pub(crate) fn check_declared_body(req: &Request, max: u64) -> Option<Response> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()?;
    (declared > max).then(|| too_large(max))
}

pub(crate) fn too_large(max: u64) -> Response {
    let body = format!("request body larger than the {max} bytes allowed\n");
    // The rest of the body is read and thrown away (`linger`), so the client, still sending,
    // gets to read this answer.
    (StatusCode::PAYLOAD_TOO_LARGE, body).into_response()
}

/// Wraps the body of `req` so it fails once more than `max` bytes have passed; the returned
/// flag says whether that happened.
pub(crate) fn limit_body(req: Request, max: u64) -> (Request, Arc<AtomicBool>) {
    let tripped = Arc::new(AtomicBool::new(false));
    let req = req.map(|inner| {
        Body::new(Limited {
            inner,
            remaining: max,
            tripped: tripped.clone(),
        })
    });
    (req, tripped)
}

struct Limited {
    inner: Body,
    remaining: u64,
    tripped: Arc<AtomicBool>,
}

#[derive(Debug, thiserror::Error)]
#[error("request body larger than the limit")]
struct TooLarge;

impl http_body::Body for Limited {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let len = frame.data_ref().map_or(0, |d| d.len() as u64);
                if len > this.remaining {
                    this.remaining = 0;
                    this.tripped.store(true, Ordering::Release);
                    return Poll::Ready(Some(Err(axum::Error::new(TooLarge))));
                }
                this.remaining -= len;
                Poll::Ready(Some(Ok(frame)))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    #[tokio::test]
    async fn a_streamed_body_is_cut_where_it_passes_the_limit() {
        let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(Bytes::from_static(b"12345")),
            Ok(Bytes::from_static(b"678")),
        ];
        let body = Body::from_stream(futures::stream::iter(chunks));
        let (req, tripped) = limit_body(Request::new(body), 6);
        let err = req.into_body().collect().await.unwrap_err();
        assert!(err.to_string().contains("larger than the limit"), "{err}");
        assert!(tripped.load(Ordering::Acquire));

        let (req, tripped) = limit_body(Request::new(Body::from("123456")), 6);
        let bytes = req.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"123456");
        assert!(!tripped.load(Ordering::Acquire));
    }

    #[test]
    fn head_size_counts_the_request_line_and_fields() {
        let req = Request::builder()
            .uri("/a?b")
            .header("x-one", "1")
            .body(Body::empty())
            .unwrap();
        // "GET /a?b HTTP/1.1\r\n" + "x-one: 1\r\n"
        assert_eq!(head_size(&req), 19 + 10);
        assert!(check_head(&req, 29).is_none());
        assert_eq!(
            check_head(&req, 28).map(|r| r.status()),
            Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
        );
    }
}
