//! Faults below arca, as tests (tests/faults.rs, tests/disks.rs) and the soak benchmark inject
//! them: an S3 in front of moto that answers errors, drops connections or freezes on demand
//! ([`FaultyS3`]), and a disk that can be cut down until it is full and grown again
//! ([`SmallDisk`]).

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context as _, ensure};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;

/// An HTTP proxy in front of the S3 server that breaks some requests on purpose. While
/// breaking ([`FaultyS3::set_breaking`]), of every seven requests one is answered 503 SlowDown
/// and another has its connection dropped before any answer. While frozen
/// ([`FaultyS3::set_frozen`]), a request is held without a byte of answer until the freeze
/// ends (as a SIGSTOPped server holds it), then goes through. The rest go through. Counts what
/// it broke or held.
pub struct FaultyS3 {
    /// `http://127.0.0.1:PORT`: the endpoint to give arca.
    pub endpoint: String,
    faults: Arc<Faults>,
    task: tokio::task::JoinHandle<()>,
}

/// What the proxy does to requests, shared by its connections.
#[derive(Default)]
struct Faults {
    breaking: AtomicBool,
    frozen: AtomicBool,
    seen: AtomicU64,
    broken: AtomicU64,
}

impl FaultyS3 {
    /// Listens on a free loopback port and forwards to `upstream` (`http://HOST:PORT`).
    pub async fn start(upstream: &str) -> anyhow::Result<Self> {
        use hyper::service::service_fn;
        let upstream = upstream.trim_start_matches("http://").to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let faults = Arc::new(Faults::default());
        let shared = faults.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (faults, upstream) = (shared.clone(), upstream.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let (faults, upstream) = (faults.clone(), upstream.clone());
                        async move { forward(req, &upstream, &faults).await }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Self {
            endpoint,
            faults,
            task,
        })
    }

    /// Starts or stops breaking one request in seven with 503 SlowDown and another with a
    /// dropped connection.
    pub fn set_breaking(&self, on: bool) {
        self.faults.breaking.store(on, Ordering::SeqCst);
    }

    /// Starts or ends a freeze: requests held without an answer meanwhile.
    pub fn set_frozen(&self, on: bool) {
        self.faults.frozen.store(on, Ordering::SeqCst);
    }

    /// Requests broken or held so far.
    pub fn broken(&self) -> u64 {
        self.faults.broken.load(Ordering::SeqCst)
    }
}

impl Drop for FaultyS3 {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One request through the proxy: held while frozen, broken as the schedule says, else sent
/// upstream.
async fn forward(
    req: hyper::Request<hyper::body::Incoming>,
    upstream: &str,
    faults: &Faults,
) -> anyhow::Result<hyper::Response<Full<Bytes>>> {
    let n = faults.seen.fetch_add(1, Ordering::SeqCst);
    let (parts, body) = req.into_parts();
    let body = body.collect().await?.to_bytes();
    if faults.frozen.load(Ordering::SeqCst) {
        faults.broken.fetch_add(1, Ordering::SeqCst);
        // Held, not answered: the caller's own timeout is all that ends the wait early.
        while faults.frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    if faults.breaking.load(Ordering::SeqCst) {
        match n % 7 {
            3 => {
                faults.broken.fetch_add(1, Ordering::SeqCst);
                let xml = "<?xml version=\"1.0\"?><Error><Code>SlowDown</Code>\
                           <Message>Please reduce your request rate.</Message></Error>";
                return Ok(hyper::Response::builder()
                    .status(503)
                    .body(Full::new(Bytes::from(xml)))?);
            }
            5 => {
                // The connection goes down without an answer (hyper closes it on an error).
                faults.broken.fetch_add(1, Ordering::SeqCst);
                anyhow::bail!("reset on purpose");
            }
            _ => {}
        }
    }
    let stream = tokio::net::TcpStream::connect(upstream).await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let req = hyper::Request::from_parts(parts, Full::new(body));
    let resp = sender.send_request(req).await?;
    let (parts, body) = resp.into_parts();
    let body = body.collect().await?.to_bytes();
    Ok(hyper::Response::from_parts(parts, Full::new(body)))
}

/// A tmpfs of a given size mounted at a directory (unmounted on drop). Needs root
/// (CAP_SYS_ADMIN); without it, [`SmallDisk::mount`] fails with the reason.
pub struct SmallDisk {
    at: PathBuf,
}

impl SmallDisk {
    pub fn mount(at: PathBuf, bytes: u64) -> anyhow::Result<Self> {
        std::fs::create_dir_all(&at)?;
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={bytes},mode=0755"),
                "arca-test",
            ])
            .arg(&at)
            .output()
            .context("running mount")?;
        ensure!(
            out.status.success(),
            "mounting a {bytes}-byte tmpfs at {} (needs root: CAP_SYS_ADMIN): {}",
            at.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(Self { at })
    }

    /// Gives the disk a new size (more room, as a grown volume; or less, down to what it
    /// holds).
    pub fn resize(&self, bytes: u64) -> anyhow::Result<()> {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,size={bytes}")])
            .arg(&self.at)
            .output()
            .context("running mount")?;
        ensure!(
            out.status.success(),
            "resizing the tmpfs at {}: {}",
            self.at.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(())
    }

    /// Bytes in use on it.
    pub fn used(&self) -> anyhow::Result<u64> {
        let out = Command::new("df")
            .args(["-B1", "--output=used"])
            .arg(&self.at)
            .output()
            .context("running df")?;
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .with_context(|| format!("df's answer: {text}"))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        // Lazy: a file still open (a test that failed half-way) does not keep it mounted.
        let _ = Command::new("umount").arg("-l").arg(&self.at).status();
    }
}
