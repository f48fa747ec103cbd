//! The retry classifier: what a failed exchange proves about its request.
//!
//! A request may go again to another endpoint when it provably was not processed, whatever
//! its method; otherwise only when repeating it has the effect of sending it once
//! (idempotent) and its body is still whole. "Provably not processed", on an HTTP/2
//! connection:
//!
//! - the connection could not be made, or hyper handed the request back unsent (both judged
//!   by the caller, before this module is asked);
//! - the server reset the stream with REFUSED_STREAM (RFC 9113 §8.7: "the stream was closed
//!   prior to any processing");
//! - the server's GOAWAY named a last stream id below the stream's (RFC 9113 §6.8: such streams
//!   "were not processed"), or the stream was to be opened after that GOAWAY. h2 (0.4) reports
//!   exactly these streams with the peer's GOAWAY error, set when the frame is read; a stream
//!   still open when the connection then ends gets "stream closed because of a broken pipe"
//!   instead, so a remote GOAWAY error on a stream is proof however soon the end follows.
//!
//! Anything else before the answer — a reset of another kind, a connection cut or refused
//! mid-stream, our own h2 giving up on the connection — may come after the server acted.

/// What a failure before the response says about the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// The server provably did not act on it.
    NotProcessed,
    /// It may have: only an idempotent request may be sent again.
    Unknown,
}

/// Reads a failed exchange of a request that was sent (not handed back).
pub(super) fn classify(err: &hyper::Error) -> Outcome {
    let mut source = std::error::Error::source(err);
    while let Some(e) = source {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            let refused =
                h2.is_reset() && h2.is_remote() && h2.reason() == Some(h2::Reason::REFUSED_STREAM);
            let above_goaway = h2.is_go_away() && h2.is_remote();
            return if refused || above_goaway {
                Outcome::NotProcessed
            } else {
                Outcome::Unknown
            };
        }
        source = e.source();
    }
    Outcome::Unknown
}

/// How an attempt failed, as far as the channel saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Failure {
    /// No connection to the endpoint: nothing was sent.
    Connect,
    /// The connection handed the request back before writing any byte of it.
    HandedBack,
    /// The request went out; the exchange then failed, read by [`classify`].
    Sent(Outcome),
}

/// Whether a failed attempt goes again to another endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decision {
    /// Provably not processed and the body is still there to send: again, unbudgeted (it
    /// adds no load to any server).
    Again,
    /// Maybe processed, but repeating it is harmless: again if the retry budget allows.
    AgainIfBudgeted,
    /// Answer the caller with the failure.
    Fail,
}

/// The body of the request, as far as a retry cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct BodyState {
    /// It can be sent again from its start (kept whole, or not read yet).
    pub can_replay: bool,
    /// It is kept whole in memory: may go again even after a send that read some of it.
    pub whole: bool,
}

/// The retry decision: what was proven not processed goes again whatever its method, as long
/// as its body can be sent again; what may have been processed goes again only when it is
/// idempotent and its body was kept whole, and only within the budget.
pub(super) fn decide(failure: Failure, idempotent: bool, body: BodyState) -> Decision {
    match failure {
        Failure::Connect | Failure::HandedBack => Decision::Again,
        Failure::Sent(Outcome::NotProcessed) if body.can_replay => Decision::Again,
        Failure::Sent(Outcome::NotProcessed) => Decision::Fail,
        Failure::Sent(Outcome::Unknown) if idempotent && body.whole => Decision::AgainIfBudgeted,
        Failure::Sent(Outcome::Unknown) => Decision::Fail,
    }
}

/// Methods a client may repeat with the effect of one request (RFC 9110 §9.2.2), and the
/// WebDAV reads (PROPFIND, RFC 4918 §9.1; REPORT, RFC 3253 §3.6). gRPC calls are POSTs: the
/// methods whose proto declares them idempotent are named in the retry policy.
pub(super) fn is_idempotent(method: &http::Method) -> bool {
    matches!(
        method.as_str(),
        "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE" | "PROPFIND" | "REPORT"
    )
}

#[cfg(test)]
mod tests {
    //! The classifier against real failures: hyper's HTTP/2 client (as the channel builds it)
    //! talking to a hand-written server that sends exactly the frames a case needs.

    use super::*;
    use crate::channel::pool::{Exchanged, exchange, handshake};
    use axum::body::Body;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    const HEADERS: u8 = 0x1;
    const RST_STREAM: u8 = 0x3;
    const SETTINGS: u8 = 0x4;
    const GOAWAY: u8 = 0x7;
    const ACK: u8 = 0x1;
    const NO_ERROR: u32 = 0x0;
    const INTERNAL_ERROR: u32 = 0x2;
    const REFUSED_STREAM: u32 = 0x7;
    const ENHANCE_YOUR_CALM: u32 = 0xb;

    /// One HTTP/2 server connection driven frame by frame.
    struct Raw(TcpStream);

    impl Raw {
        async fn frame(&mut self) -> Option<(u8, u8, u32, Vec<u8>)> {
            let mut head = [0u8; 9];
            self.0.read_exact(&mut head).await.ok()?;
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            let mut payload = vec![0; len];
            self.0.read_exact(&mut payload).await.ok()?;
            Some((head[3], head[4], stream, payload))
        }

        async fn send(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
            let len = (payload.len() as u32).to_be_bytes();
            let mut frame = vec![len[1], len[2], len[3], kind, flags];
            frame.extend_from_slice(&stream.to_be_bytes());
            frame.extend_from_slice(payload);
            self.0.write_all(&frame).await.expect("write a frame");
        }

        /// Reads until `n` requests have opened their streams; their ids. SETTINGS are
        /// acknowledged as they come.
        async fn requests(&mut self, n: usize) -> Vec<u32> {
            let mut ids = Vec::new();
            while ids.len() < n {
                let (kind, flags, stream, _) = self.frame().await.expect("a frame");
                match kind {
                    HEADERS => ids.push(stream),
                    SETTINGS if flags & ACK == 0 => self.send(SETTINGS, ACK, 0, &[]).await,
                    _ => {}
                }
            }
            ids
        }

        async fn goaway(&mut self, last: u32, code: u32) {
            let mut payload = last.to_be_bytes().to_vec();
            payload.extend_from_slice(&code.to_be_bytes());
            self.send(GOAWAY, 0, 0, &payload).await;
        }

        async fn reset(&mut self, stream: u32, code: u32) {
            self.send(RST_STREAM, 0, stream, &code.to_be_bytes()).await;
        }
    }

    /// A client connection to a fresh raw server, and that server's side of it.
    async fn connect() -> (crate::channel::pool::Conn, Raw) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepting = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut preface = [0u8; 24];
            stream.read_exact(&mut preface).await.unwrap();
            assert_eq!(&preface, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
            let mut raw = Raw(stream);
            raw.send(SETTINGS, 0, 0, &[]).await;
            raw
        });
        let conn = handshake(TcpStream::connect(addr).await.unwrap())
            .await
            .unwrap();
        (conn, accepting.await.unwrap())
    }

    fn request() -> http::Request<Body> {
        http::Request::post("http://test/arca.v1.Storage/CreateDir")
            .version(http::Version::HTTP_2)
            .body(Body::from("x"))
            .unwrap()
    }

    /// Sends `n` requests at once; they run until the server decides their fate.
    fn send_all(
        conn: &crate::channel::pool::Conn,
        n: usize,
    ) -> Vec<tokio::task::JoinHandle<Option<Exchanged>>> {
        (0..n)
            .map(|_| tokio::spawn(exchange(conn.sender.clone(), request())))
            .collect()
    }

    /// The verdict on one exchange: `None` when it was handed back unsent (also proof), else
    /// the classifier's reading of its error.
    async fn verdict(task: tokio::task::JoinHandle<Option<Exchanged>>) -> Option<Outcome> {
        match task.await.unwrap().expect("the exchange task ran") {
            Ok(resp) => panic!("expected a failure, got {}", resp.status()),
            Err(mut e) => match e.take_message() {
                Some(_) => None,
                None => Some(classify(e.error())),
            },
        }
    }

    /// In stream-id order: which of the streams a GOAWAY with `last` left behind.
    async fn goaway_case(code: u32) {
        let (conn, mut raw) = connect().await;
        let tasks = send_all(&conn, 3);
        let ids = raw.requests(3).await;
        assert_eq!(ids, [1, 3, 5]);
        // Streams 3 and 5 are above the last stream id; then the connection ends at once, as
        // after h2's ENHANCE_YOUR_CALM or a draining server's final GOAWAY.
        raw.goaway(1, code).await;
        drop(raw);
        let mut verdicts = Vec::new();
        for t in tasks {
            verdicts.push(verdict(t).await);
        }
        verdicts.sort_by_key(|v| *v == Some(Outcome::NotProcessed));
        assert_eq!(
            verdicts,
            [
                Some(Outcome::Unknown),
                Some(Outcome::NotProcessed),
                Some(Outcome::NotProcessed)
            ],
            "stream 1 may have been processed, 3 and 5 were not"
        );
    }

    #[tokio::test]
    async fn streams_above_a_graceful_goaway_were_not_processed_even_if_the_connection_ends_at_once()
     {
        goaway_case(NO_ERROR).await;
    }

    #[tokio::test]
    async fn streams_above_an_enhance_your_calm_goaway_were_not_processed() {
        goaway_case(ENHANCE_YOUR_CALM).await;
    }

    #[tokio::test]
    async fn a_request_after_the_goaway_never_starts() {
        let (conn, mut raw) = connect().await;
        let first = send_all(&conn, 1);
        raw.requests(1).await;
        raw.goaway(0, NO_ERROR).await;
        for t in first {
            assert_eq!(verdict(t).await, Some(Outcome::NotProcessed));
        }
        // The GOAWAY has been read: a new request on the connection does not start.
        let late = tokio::spawn(exchange(conn.sender.clone(), request()));
        let got = verdict(late).await;
        assert!(
            got.is_none() || got == Some(Outcome::NotProcessed),
            "a request never sent was judged {got:?}"
        );
    }

    #[tokio::test]
    async fn a_refused_stream_was_not_processed() {
        let (conn, mut raw) = connect().await;
        let tasks = send_all(&conn, 1);
        let ids = raw.requests(1).await;
        raw.reset(ids[0], REFUSED_STREAM).await;
        for t in tasks {
            assert_eq!(verdict(t).await, Some(Outcome::NotProcessed));
        }
    }

    #[tokio::test]
    async fn another_reset_may_come_after_processing() {
        let (conn, mut raw) = connect().await;
        let tasks = send_all(&conn, 1);
        let ids = raw.requests(1).await;
        raw.reset(ids[0], INTERNAL_ERROR).await;
        for t in tasks {
            assert_eq!(verdict(t).await, Some(Outcome::Unknown));
        }
    }

    #[tokio::test]
    async fn a_connection_cut_without_goaway_proves_nothing() {
        let (conn, mut raw) = connect().await;
        let tasks = send_all(&conn, 2);
        raw.requests(2).await;
        drop(raw);
        for t in tasks {
            assert_eq!(verdict(t).await, Some(Outcome::Unknown));
        }
    }

    const KEPT: BodyState = BodyState {
        can_replay: true,
        whole: true,
    };
    /// A streamed body (above `retry.max_buffered_body`) whose bytes went out: gone.
    const SENT_STREAM: BodyState = BodyState {
        can_replay: false,
        whole: false,
    };
    /// A streamed body not read yet: it can start again, but not after a send that read it.
    const UNREAD_STREAM: BodyState = BodyState {
        can_replay: true,
        whole: false,
    };

    #[test]
    fn what_never_reached_a_server_goes_again_whatever_its_method_and_body() {
        for failure in [Failure::Connect, Failure::HandedBack] {
            for idempotent in [true, false] {
                for body in [KEPT, SENT_STREAM, UNREAD_STREAM] {
                    assert_eq!(
                        decide(failure, idempotent, body),
                        Decision::Again,
                        "{failure:?} idempotent={idempotent} {body:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_refused_or_above_goaway_stream_goes_again_unbudgeted_while_its_body_can() {
        let not_processed = Failure::Sent(Outcome::NotProcessed);
        for idempotent in [true, false] {
            assert_eq!(decide(not_processed, idempotent, KEPT), Decision::Again);
            assert_eq!(
                decide(not_processed, idempotent, UNREAD_STREAM),
                Decision::Again
            );
            // Its streamed bytes were read into the first attempt: nothing left to send.
            assert_eq!(
                decide(not_processed, idempotent, SENT_STREAM),
                Decision::Fail
            );
        }
    }

    #[test]
    fn what_may_have_been_processed_goes_again_only_if_idempotent_whole_and_budgeted() {
        let unknown = Failure::Sent(Outcome::Unknown);
        // A PUT or GET kept whole: again, within the budget.
        assert_eq!(decide(unknown, true, KEPT), Decision::AgainIfBudgeted);
        // A non-idempotent call (a POST, a MKCOL) after its bytes went out: never.
        assert_eq!(decide(unknown, false, KEPT), Decision::Fail);
        // An idempotent PUT whose streamed body was sent: never (the caller gets 503).
        assert_eq!(decide(unknown, true, SENT_STREAM), Decision::Fail);
        assert_eq!(decide(unknown, true, UNREAD_STREAM), Decision::Fail);
        assert_eq!(decide(unknown, false, SENT_STREAM), Decision::Fail);
    }

    #[test]
    fn idempotent_methods() {
        for m in ["GET", "HEAD", "PUT", "DELETE", "PROPFIND", "OPTIONS"] {
            assert!(is_idempotent(&m.parse().unwrap()), "{m}");
        }
        for m in [
            "POST",
            "MKCOL",
            "MOVE",
            "COPY",
            "LOCK",
            "PATCH",
            "PROPPATCH",
        ] {
            assert!(!is_idempotent(&m.parse().unwrap()), "{m}");
        }
    }
}
