//! Bodies on their way through a hop: what every body sent over an internal HTTP/2 connection
//! passes through, on both sides.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use http_body::{Frame, SizeHint};

/// A body that never yields an empty data frame: it polls past them.
///
/// Why: hyper sends every data chunk a body yields as one DATA frame, an empty one included,
/// without END_STREAM when the body cannot yet tell it has ended; and h2 (0.4.20) counts the
/// empty non-final DATA frames a connection receives over its whole lifetime, answering the
/// 101st with GOAWAY ENHANCE_YOUR_CALM `too_many_data_frames` — its guard against empty-frame
/// floods (a fixed cap, no setting). A relayed body (a PUT streamed on from the proxy, a
/// download streamed on from storage-users) yields empty chunks now and then, so every internal
/// connection died after its hundredth, failing every request on it: the "broken pipe" PUT 502s
/// and PROPFIND 503s of a steady load (issue 19). Bodies we send carry none.
pub(crate) struct NonEmpty<B> {
    pub(crate) inner: B,
}

impl<B> http_body::Body for NonEmpty<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        loop {
            match std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
                Some(Ok(frame)) if frame.data_ref().is_some_and(Bytes::is_empty) => continue,
                other => return Poll::Ready(other),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// `body` with its empty data frames left out (see [`NonEmpty`]).
pub(crate) fn non_empty(body: Body) -> Body {
    if http_body::Body::is_end_stream(&body) {
        return body;
    }
    Body::new(NonEmpty { inner: body })
}

/// Where a request body's own failure is noted: the caller's body broke (its client hung up
/// mid-upload, sent less than its Content-Length), so the request failed through no fault of
/// the server or the connection. Shared between the body being sent and the call.
#[derive(Clone, Default)]
pub(crate) struct BodyFault(Arc<OnceLock<String>>);

impl BodyFault {
    /// The first error the body yielded, if it yielded one.
    pub(crate) fn get(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }

    /// `body`, noting here the first error it yields.
    pub(crate) fn watch(&self, body: Body) -> Body {
        if http_body::Body::is_end_stream(&body) {
            return body;
        }
        Body::new(Faulting {
            inner: body,
            fault: self.clone(),
        })
    }

    pub(crate) fn note(&self, error: &dyn std::fmt::Display) {
        let _ = self.0.set(error.to_string());
    }
}

struct Faulting {
    inner: Body,
    fault: BodyFault,
}

impl http_body::Body for Faulting {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Err(e))) = &polled {
            self.fault.note(e);
        }
        polled
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
    use super::*;
    use http_body_util::BodyExt as _;

    #[tokio::test]
    async fn empty_data_frames_are_left_out() {
        let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(Bytes::new()),
            Ok(Bytes::from_static(b"ab")),
            Ok(Bytes::new()),
            Ok(Bytes::new()),
            Ok(Bytes::from_static(b"c")),
            Ok(Bytes::new()),
        ];
        let mut body = non_empty(Body::from_stream(futures::stream::iter(chunks)));
        let mut seen = Vec::new();
        while let Some(frame) = body.frame().await {
            seen.push(frame.unwrap().into_data().unwrap());
        }
        assert_eq!(seen, [Bytes::from_static(b"ab"), Bytes::from_static(b"c")]);
    }

    #[tokio::test]
    async fn a_body_error_is_noted() {
        let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(Bytes::from_static(b"ab")),
            Err(std::io::Error::other("client went away")),
        ];
        let fault = BodyFault::default();
        let body = fault.watch(Body::from_stream(futures::stream::iter(chunks)));
        assert!(fault.get().is_none());
        assert!(body.collect().await.is_err());
        assert!(fault.get().is_some_and(|e| e.contains("client went away")));
    }
}
