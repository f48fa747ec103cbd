//! Serving a listener as a public edge: TLS (rustls, HTTP/1.1 and h2 by ALPN), the slowloris
//! header deadline, and the idle deadline of a connection.
//!
//! Internal endpoints never use any of this: they speak plain HTTP on loopback, a Unix socket
//! or in memory. Only the proxy's public listener is served with [`ServeOptions`] that ask for it.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// How a listener is served beyond plain HTTP; the default is what internal endpoints get.
#[derive(Clone, Default)]
pub struct ServeOptions {
    /// Speak TLS; built by [`server_config`].
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// A client must finish the TLS handshake and each request's headers within this time
    /// (hyper's `header_read_timeout`; with HTTP/1.1 keep-alive it also bounds the wait for
    /// the next request).
    pub header_timeout: Option<Duration>,
    /// A connection that moves no byte either way for this long is closed.
    pub idle_timeout: Option<Duration>,
    /// Caps what the HTTP layers buffer for one request head, as a backstop: the exact
    /// `431` rule lives with the proxy, which applies it to HTTP/1.1 and h2 alike.
    pub max_header_bytes: Option<usize>,
    /// Clients from the internet: h2's guards against abusive clients (reset floods, header
    /// and stream limits) keep their defaults. Internal endpoints (`false`) lift every cap our
    /// own services' traffic could reach.
    pub public: bool,
}

/// Why a certificate or key file cannot be served; names the file and which one it is.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{}: cannot read: {source}", path.display())]
    ReadCert { path: PathBuf, source: io::Error },
    #[error("{}: no PEM certificate in it ({reason})", path.display())]
    BadCert { path: PathBuf, reason: String },
    #[error("{}: cannot read: {source}", path.display())]
    ReadKey { path: PathBuf, source: io::Error },
    #[error("{}: no PEM private key in it ({reason})", path.display())]
    BadKey { path: PathBuf, reason: String },
    #[error("{}: does not belong to the certificate or is unusable: {reason}", path.display())]
    Mismatch { path: PathBuf, reason: String },
}

impl TlsError {
    /// Whether the certificate file (rather than the key file) is at fault.
    pub fn is_cert(&self) -> bool {
        matches!(self, TlsError::ReadCert { .. } | TlsError::BadCert { .. })
    }
}

/// A rustls server config from PEM files: the certificate chain (leaf first) and its private
/// key (PKCS#8, PKCS#1 or SEC1). ALPN offers h2 then HTTP/1.1.
///
/// The aws-lc-rs provider is named here rather than taken from the process default, so a
/// library user (tests, the bench) does not have to install one first.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let cert_pem = std::fs::read(cert).map_err(|source| TlsError::ReadCert {
        path: cert.to_owned(),
        source,
    })?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadCert {
            path: cert.to_owned(),
            reason: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::BadCert {
            path: cert.to_owned(),
            reason: "no CERTIFICATE section".into(),
        });
    }
    let key_pem = std::fs::read(key).map_err(|source| TlsError::ReadKey {
        path: key.to_owned(),
        source,
    })?;
    let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::BadKey {
        path: key.to_owned(),
        reason: e.to_string(),
    })?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Mismatch {
            path: key.to_owned(),
            reason: e.to_string(),
        })?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|e| TlsError::Mismatch {
            path: key.to_owned(),
            reason: e.to_string(),
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A stream that fails with `TimedOut` once no byte has moved either way for `timeout`.
///
/// Reads and writes both count as activity, so a long download to a slow reader or a long
/// upload stays open; a connection nobody uses, or a slowloris that stops mid-request, does
/// not. The deadline is only checked while the HTTP layer waits on the socket, which is
/// exactly when a silent peer can hold it.
pub(crate) struct IdleTimeout<S> {
    inner: S,
    /// `None`: never times out (the stream is only passed through).
    timeout: Option<Duration>,
    deadline: Pin<Box<Sleep>>,
}

impl<S> IdleTimeout<S> {
    pub(crate) fn new(inner: S, timeout: Option<Duration>) -> Self {
        let first = timeout.map_or_else(Instant::now, |t| Instant::now() + t);
        Self {
            inner,
            timeout,
            deadline: Box::pin(tokio::time::sleep_until(first)),
        }
    }

    fn touch(&mut self) {
        if let Some(timeout) = self.timeout {
            self.deadline.as_mut().reset(Instant::now() + timeout);
        }
    }

    /// Called when the inner stream is not ready: fails if the deadline has passed, otherwise
    /// arranges to be woken when it does.
    fn check(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        if self.timeout.is_none() {
            return Poll::Pending;
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(io::Error::new(
                io::ErrorKind::TimedOut,
                "connection idle for too long",
            )),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for IdleTimeout<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                this.touch();
                Poll::Ready(r)
            }
            Poll::Pending => this.check(cx).map(Err),
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for IdleTimeout<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Ready(r) => {
                this.touch();
                Poll::Ready(r)
            }
            Poll::Pending => this.check(cx).map(Err),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(r) => {
                this.touch();
                Poll::Ready(r)
            }
            Poll::Pending => this.check(cx).map(Err),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_stream_times_out_and_activity_keeps_it_open() {
        let (a, mut b) = tokio::io::duplex(64);
        let mut idle = IdleTimeout::new(a, Some(Duration::from_secs(10)));
        let mut buf = [0u8; 4];
        // Bytes every 6 s keep it open past the 10 s deadline.
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_secs(6)).await;
            b.write_all(b"ping").await.unwrap();
            idle.read_exact(&mut buf).await.unwrap();
        }
        let err = idle.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn missing_and_invalid_files_name_the_file() {
        let dir = std::env::temp_dir().join(format!("arca-tls-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let garbage = dir.join("garbage.pem");
        std::fs::write(&garbage, "not a pem file\n").unwrap();
        let missing = dir.join("missing.pem");
        let e = server_config(&missing, &garbage).unwrap_err();
        assert!(e.is_cert() && e.to_string().contains("missing.pem"), "{e}");
        let e = server_config(&garbage, &garbage).unwrap_err();
        assert!(
            e.is_cert() && e.to_string().contains("no PEM certificate"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
