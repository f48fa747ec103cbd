//! Reading the rest of a body nobody wanted, so the client hears the answer.
//!
//! A request refused before its body was read (401, 413, 404, 507, a failed precondition)
//! drops the body. hyper then closes an HTTP/1.1 connection whose body is still arriving, and
//! the client — still writing — gets a broken pipe, or a reset that throws away the answer
//! waiting in its receive buffer: it never learns why. Like nginx's lingering close, the rest
//! of such a body is read and discarded for a bounded time, which keeps the connection open
//! until the client has sent everything and read the answer (and reusable after it).
//! HTTP/2 needs none of this: the stream is reset on its own and the connection lives on.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use bytes::Bytes;
use http::{Version, header};
use http_body::{Body as _, Frame, SizeHint};
use http_body_util::BodyExt as _;

/// How long a refused body is read at most (nginx's `lingering_time` is 30 s): a client
/// still sending after this is cut off.
const LINGER: Duration = Duration::from_secs(10);

/// Wraps the body of an HTTP/1.x request so that dropping it unfinished reads the rest in
/// the background (bounded by [`LINGER`]).
pub(crate) fn on_drop(req: Request) -> Request {
    if !matches!(req.version(), Version::HTTP_10 | Version::HTTP_11) {
        return req;
    }
    let expects_continue = req
        .headers()
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    req.map(|inner| {
        Body::new(Lingering {
            inner: Some(inner),
            polled: false,
            ended: false,
            expects_continue,
        })
    })
}

struct Lingering {
    inner: Option<Body>,
    polled: bool,
    ended: bool,
    expects_continue: bool,
}

impl http_body::Body for Lingering {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        this.polled = true;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            this.ended = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        let Some(body) = self.inner.take() else {
            return;
        };
        if self.ended || body.is_end_stream() {
            return;
        }
        // A client waiting for "100 Continue" has sent nothing yet; reading now would ask it
        // for the very body that was refused.
        if self.expects_continue && !self.polled {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(discard(body));
        }
    }
}

async fn discard(mut body: Body) {
    let _ = tokio::time::timeout(LINGER, async {
        while let Some(Ok(_)) = body.frame().await {}
    })
    .await;
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A body of `n` chunks that counts how many were read.
    fn counted(n: usize, read: Arc<AtomicUsize>) -> Body {
        let chunks = futures::stream::iter((0..n).map(move |_| {
            read.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(Bytes::from_static(b"x"))
        }));
        Body::from_stream(chunks)
    }

    fn request(body: Body, expect: bool) -> Request {
        let mut b = http::Request::builder().method("PUT").uri("/x");
        if expect {
            b = b.header("expect", "100-continue");
        }
        on_drop(b.body(body).expect("request"))
    }

    async fn settle(read: &AtomicUsize, want: usize) {
        for _ in 0..1000 {
            if read.load(Ordering::SeqCst) >= want {
                return;
            }
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_dropped_unread_body_is_read_to_its_end() {
        let read = Arc::new(AtomicUsize::new(0));
        drop(request(counted(5, read.clone()), false));
        settle(&read, 5).await;
        assert_eq!(read.load(Ordering::SeqCst), 5);
    }

    #[tokio::test]
    async fn a_client_waiting_for_continue_is_not_asked_for_its_body() {
        let read = Arc::new(AtomicUsize::new(0));
        drop(request(counted(5, read.clone()), true));
        settle(&read, 1).await;
        assert_eq!(read.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_body_read_in_part_after_continue_is_read_to_its_end() {
        let read = Arc::new(AtomicUsize::new(0));
        let mut body = request(counted(5, read.clone()), true).into_body();
        assert!(body.frame().await.is_some());
        drop(body);
        settle(&read, 5).await;
        assert_eq!(read.load(Ordering::SeqCst), 5);
    }

    #[tokio::test]
    async fn http2_bodies_are_left_alone() {
        let read = Arc::new(AtomicUsize::new(0));
        let req = http::Request::builder()
            .method("PUT")
            .uri("/x")
            .version(Version::HTTP_2)
            .body(counted(5, read.clone()))
            .expect("request");
        drop(on_drop(req));
        settle(&read, 1).await;
        assert_eq!(read.load(Ordering::SeqCst), 0);
    }
}
