//! Request bodies kept so a request can go again: whole in memory up to the retry policy's
//! `max_buffered_body`, else streamed once.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use futures::FutureExt as _;
use http_body::Frame;
use http_body_util::BodyExt as _;

use crate::body::BodyFault;

/// A request body, kept whole when small enough to send again.
pub(super) enum Replayable {
    /// Whole in memory: any attempt sends it.
    Full(Bytes),
    /// Streamed: the first attempt that reads it consumes it (`None` after). It may still go
    /// again when an attempt hands it back unread.
    Stream(Option<Body>),
}

impl Replayable {
    /// Takes up to `limit` bytes of `body` into memory. With `wait`, its frames are awaited
    /// (a body its client sends whole without waiting for an answer: an idempotent request
    /// with a declared length within the limit); without, only what is ready now is gathered
    /// (a streaming call may send more only after it sees a response). A body that errors
    /// while gathered is the caller's fault, noted in `fault`; what is left streams under
    /// `fault`'s watch.
    pub(super) async fn prepare(
        mut body: Body,
        limit: usize,
        wait: bool,
        fault: &BodyFault,
    ) -> Result<Self, String> {
        use http_body::Body as _;
        if body.is_end_stream() {
            return Ok(Replayable::Full(Bytes::new()));
        }
        let mut buf = BytesMut::new();
        loop {
            let next = if wait {
                Some(body.frame().await)
            } else {
                body.frame().now_or_never()
            };
            match next {
                Some(None) => return Ok(Replayable::Full(buf.freeze())),
                Some(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) if buf.len() + data.len() <= limit => buf.extend_from_slice(&data),
                    Ok(data) => {
                        buf.extend_from_slice(&data);
                        return Ok(Self::prefixed(buf.freeze(), None, body, fault));
                    }
                    Err(frame) => {
                        return Ok(Self::prefixed(buf.freeze(), Some(frame), body, fault));
                    }
                },
                Some(Some(Err(e))) => {
                    fault.note(&e);
                    return Err(e.to_string());
                }
                None => return Ok(Self::prefixed(buf.freeze(), None, body, fault)),
            }
        }
    }

    fn prefixed(
        prefix: Bytes,
        trailers: Option<Frame<Bytes>>,
        rest: Body,
        fault: &BodyFault,
    ) -> Self {
        Replayable::Stream(Some(Body::new(Prefixed {
            prefix: (!prefix.is_empty()).then_some(prefix),
            trailers,
            rest: fault.watch(rest),
        })))
    }

    /// The body for one attempt; `None` once a streamed body was consumed.
    pub(super) fn take(&mut self) -> Option<Body> {
        match self {
            Replayable::Full(bytes) => Some(Body::from(bytes.clone())),
            Replayable::Stream(body) => body.take(),
        }
    }

    /// An attempt handed its body back unread.
    pub(super) fn put_back(&mut self, body: Body) {
        if let Replayable::Stream(slot) = self {
            *slot = Some(body);
        }
    }

    pub(super) fn can_replay(&self) -> bool {
        matches!(self, Replayable::Full(_) | Replayable::Stream(Some(_)))
    }

    /// Held whole in memory: may be sent again even after a send that may have read it.
    pub(super) fn is_whole(&self) -> bool {
        matches!(self, Replayable::Full(_))
    }
}

/// A body whose first bytes were already read: yields them, then the rest.
struct Prefixed {
    prefix: Option<Bytes>,
    trailers: Option<Frame<Bytes>>,
    rest: Body,
}

impl http_body::Body for Prefixed {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        if let Some(prefix) = self.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        if let Some(trailers) = self.trailers.take() {
            return Poll::Ready(Some(Ok(trailers)));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none() && self.trailers.is_none() && self.rest.is_end_stream()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streamed(chunks: Vec<&'static [u8]>) -> Body {
        let chunks: Vec<Result<Bytes, std::io::Error>> = chunks
            .into_iter()
            .map(|c| Ok(Bytes::from_static(c)))
            .collect();
        Body::from_stream(futures::stream::iter(chunks))
    }

    #[tokio::test]
    async fn a_body_within_the_limit_is_kept_whole() {
        let fault = BodyFault::default();
        let body = streamed(vec![b"abc", b"def"]);
        let mut kept = Replayable::prepare(body, 6, true, &fault).await.unwrap();
        assert!(kept.is_whole());
        for _ in 0..2 {
            let bytes = kept.take().unwrap().collect().await.unwrap().to_bytes();
            assert_eq!(&bytes[..], b"abcdef");
        }
    }

    #[tokio::test]
    async fn a_larger_body_streams_once_with_its_start() {
        let fault = BodyFault::default();
        let body = streamed(vec![b"abc", b"def", b"g"]);
        let mut kept = Replayable::prepare(body, 4, true, &fault).await.unwrap();
        assert!(!kept.is_whole());
        let bytes = kept.take().unwrap().collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"abcdefg");
        assert!(kept.take().is_none(), "streamed once");
    }

    #[tokio::test]
    async fn a_body_that_breaks_while_kept_is_the_callers_fault() {
        let fault = BodyFault::default();
        let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(Bytes::from_static(b"abc")),
            Err(std::io::Error::other("hung up")),
        ];
        let body = Body::from_stream(futures::stream::iter(chunks));
        assert!(Replayable::prepare(body, 100, true, &fault).await.is_err());
        assert!(fault.get().is_some());
    }
}
