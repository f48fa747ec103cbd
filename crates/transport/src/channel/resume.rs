//! GET answers that outlive their upstream: when the body of a GET breaks off after its head
//! was passed on, the rest is asked for again — elsewhere — with a `Range` from the byte it
//! reached, and spliced on if it is the same representation (same strong ETag, a 206 for
//! exactly that range). When that cannot be done the body ends in an error, which makes every
//! hop above reset its stream or connection: no client ever takes a short body for a whole one.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use futures::future::BoxFuture;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, Uri, header};
use http_body::{Frame, SizeHint};

use super::Inner;
use crate::Endpoint;

/// Continuations one answer may need before it gives up.
const MAX_RESUMES: u32 = 3;

/// What an answer promised: the bytes `start..start + len` of the representation `etag`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Promise {
    etag: HeaderValue,
    start: u64,
    len: u64,
}

impl Promise {
    /// What a GET answer promises, if it can be continued: 200 with a declared length and
    /// `Accept-Ranges: bytes`, or 206 with a single `Content-Range`, both with a strong ETag
    /// (RFC 9110 §13.1.1: only a strong validator says two byte ranges are of one
    /// representation).
    pub(super) fn of(method: &Method, head: &http::response::Parts) -> Option<Self> {
        if method != Method::GET {
            return None;
        }
        let h = &head.headers;
        let etag = h
            .get(header::ETAG)
            .filter(|e| !e.as_bytes().starts_with(b"W/"))?;
        let len: u64 = h.get(header::CONTENT_LENGTH)?.to_str().ok()?.parse().ok()?;
        let start = match head.status {
            StatusCode::OK => {
                let ranges = h.get(header::ACCEPT_RANGES)?;
                if !ranges.as_bytes().eq_ignore_ascii_case(b"bytes") {
                    return None;
                }
                0
            }
            StatusCode::PARTIAL_CONTENT => {
                let (first, last) = content_range(h)?;
                if last + 1 - first != len {
                    return None;
                }
                first
            }
            _ => return None,
        };
        (len > 0).then(|| Self {
            etag: etag.clone(),
            start,
            len,
        })
    }
}

/// `Content-Range: bytes FIRST-LAST/…` (RFC 9110 §14.4).
fn content_range(h: &HeaderMap) -> Option<(u64, u64)> {
    let v = h.get(header::CONTENT_RANGE)?.to_str().ok()?;
    let range = v.strip_prefix("bytes ")?.split('/').next()?;
    let (first, last) = range.split_once('-')?;
    let (first, last): (u64, u64) = (first.trim().parse().ok()?, last.trim().parse().ok()?);
    (last >= first).then_some((first, last))
}

/// The request to send again: what it was, without its body (a GET has none).
pub(super) struct Again {
    pub(super) uri: Uri,
    pub(super) headers: HeaderMap,
}

type Pending = BoxFuture<'static, Result<(Response<Body>, Endpoint), tonic::Status>>;

/// An answer body that continues from another endpoint when it breaks off.
pub(super) struct Resuming {
    inner: Arc<Inner>,
    again: Again,
    promise: Promise,
    /// Bytes passed on so far.
    sent: u64,
    body: Body,
    /// Where the current body comes from: the next attempt avoids it.
    from: Endpoint,
    pending: Option<Pending>,
    resumes: u32,
    /// Why the first break happened, for the error when continuing fails.
    cause: Option<String>,
}

impl Resuming {
    pub(super) fn new(
        inner: Arc<Inner>,
        again: Again,
        promise: Promise,
        body: Body,
        from: Endpoint,
    ) -> Self {
        Self {
            inner,
            again,
            promise,
            sent: 0,
            body,
            from,
            pending: None,
            resumes: 0,
            cause: None,
        }
    }

    /// Asks for the rest, from the byte reached, of the same representation.
    fn continue_from_here(&mut self, why: String) -> Result<(), axum::Error> {
        let left = self.promise.len - self.sent;
        if self.resumes >= MAX_RESUMES {
            return Err(self.give_up(why));
        }
        self.resumes += 1;
        self.cause.get_or_insert(why);
        let first = self.promise.start + self.sent;
        let last = first + left - 1;
        let mut headers = self.again.headers.clone();
        let range = HeaderValue::from_str(&format!("bytes={first}-{last}"))
            .map_err(|e| axum::Error::new(e.to_string()))?;
        headers.insert(header::RANGE, range);
        // A server that knows the validator refuses a changed representation (412) instead
        // of sending the wrong bytes; the answer's own ETag is checked on top.
        headers.insert(header::IF_MATCH, self.promise.etag.clone());
        headers.remove(header::IF_RANGE);
        let mut req = http::Request::new(Body::empty());
        *req.uri_mut() = self.again.uri.clone();
        *req.headers_mut() = headers;
        let inner = self.inner.clone();
        let avoid = self.from.clone();
        self.pending = Some(Box::pin(async move { inner.fetch(req, Some(avoid)).await }));
        Ok(())
    }

    fn give_up(&self, why: String) -> axum::Error {
        self.inner.count_resume(&self.from, "resume-failed");
        let cause = self.cause.as_deref().unwrap_or(&why);
        tracing::warn!(
            service = %self.inner.service,
            sent = self.sent,
            of = self.promise.len,
            %cause,
            error = %why,
            "an answer broke off and could not be continued; its client gets an error, not a short body"
        );
        axum::Error::new(format!(
            "answer broke off after {} of {} bytes ({cause}); continuing failed: {why}",
            self.sent, self.promise.len
        ))
    }

    /// Whether `resp` is the rest this body needs.
    fn fits(&self, resp: &Response<Body>) -> Result<(), String> {
        let first = self.promise.start + self.sent;
        let last = self.promise.start + self.promise.len - 1;
        if resp.status() != StatusCode::PARTIAL_CONTENT {
            return Err(format!("answered {} to a range", resp.status()));
        }
        if resp.headers().get(header::ETAG) != Some(&self.promise.etag) {
            return Err("the representation changed (another ETag)".to_owned());
        }
        match content_range(resp.headers()) {
            Some((f, l)) if (f, l) == (first, last) => Ok(()),
            other => Err(format!("answered the range {other:?}, not {first}-{last}")),
        }
    }
}

impl http_body::Body for Resuming {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        loop {
            if let Some(pending) = this.pending.as_mut() {
                let answer = std::task::ready!(pending.as_mut().poll(cx));
                this.pending = None;
                match answer {
                    Ok((resp, from)) => {
                        if let Err(why) = this.fits(&resp) {
                            return Poll::Ready(Some(Err(this.give_up(why))));
                        }
                        tracing::info!(
                            service = %this.inner.service,
                            at = this.sent,
                            of = this.promise.len,
                            from = %this.from,
                            to = %from,
                            "an answer broke off; continued from another endpoint"
                        );
                        this.inner.count_resume(&this.from, "resumed-ok");
                        this.from = from;
                        this.body = resp.into_body();
                    }
                    Err(status) => {
                        return Poll::Ready(Some(Err(this.give_up(status.message().to_owned()))));
                    }
                }
            }
            let polled = std::task::ready!(Pin::new(&mut this.body).poll_frame(cx));
            match polled {
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        let n = data.len() as u64;
                        if this.sent + n > this.promise.len {
                            return Poll::Ready(Some(Err(
                                this.give_up("more bytes than promised".to_owned())
                            )));
                        }
                        this.sent += n;
                    }
                    return Poll::Ready(Some(Ok(frame)));
                }
                Some(Err(e)) if this.sent < this.promise.len => {
                    if let Err(e) = this.continue_from_here(crate::describe(&e)) {
                        return Poll::Ready(Some(Err(e)));
                    }
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None if this.sent < this.promise.len => {
                    if let Err(e) = this.continue_from_here("ended early".to_owned()) {
                        return Poll::Ready(Some(Err(e)));
                    }
                }
                None => return Poll::Ready(None),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_none() && self.sent == self.promise.len
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.promise.len - self.sent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(status: u16, headers: &[(&str, &str)]) -> http::response::Parts {
        let mut b = Response::builder().status(status);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn what_an_answer_promises() {
        let get = Method::GET;
        let whole = head(
            200,
            &[
                ("etag", "\"e1\""),
                ("content-length", "100"),
                ("accept-ranges", "bytes"),
            ],
        );
        let p = Promise::of(&get, &whole).unwrap();
        assert_eq!((p.start, p.len), (0, 100));
        let part = head(
            206,
            &[
                ("etag", "\"e1\""),
                ("content-length", "10"),
                ("content-range", "bytes 90-99/100"),
            ],
        );
        let p = Promise::of(&get, &part).unwrap();
        assert_eq!((p.start, p.len), (90, 10));
        // Nothing to continue: a weak validator, no length, no ranges, another method.
        let weak = head(
            200,
            &[
                ("etag", "W/\"e1\""),
                ("content-length", "100"),
                ("accept-ranges", "bytes"),
            ],
        );
        assert!(Promise::of(&get, &weak).is_none());
        let chunked = head(200, &[("etag", "\"e1\""), ("accept-ranges", "bytes")]);
        assert!(Promise::of(&get, &chunked).is_none());
        let no_ranges = head(200, &[("etag", "\"e1\""), ("content-length", "100")]);
        assert!(Promise::of(&get, &no_ranges).is_none());
        assert!(Promise::of(&Method::from_bytes(b"PROPFIND").unwrap(), &whole).is_none());
        let bad_range = head(
            206,
            &[
                ("etag", "\"e1\""),
                ("content-length", "11"),
                ("content-range", "bytes 90-99/100"),
            ],
        );
        assert!(Promise::of(&get, &bad_range).is_none());
    }
}
