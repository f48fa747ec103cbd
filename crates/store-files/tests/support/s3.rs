//! A private S3 server for tests: `moto_server` (PyPI `moto[server]`) on a free loopback port.
//!
//! [`s3_for_tests`] is what tests call. The binary is `$ARCA_MOTO_SERVER`, else the workspace's
//! `.venv/bin/moto_server` (`make deps` installs it there); when there is none the test FAILS
//! (a skipped suite would count as passed). moto speaks the S3 protocol from memory, checks signatures' shape
//! but accepts any credentials, and in server mode accepts an unsigned `PUT /BUCKET`, which is
//! how buckets are made here (object_store has no bucket API). The server is killed when the
//! [`Moto`] is dropped, and by the kernel if the test process dies first.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use arca_store_files::S3Options;
use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// moto takes a few seconds to import on a busy 2-core machine; a minute means it is broken.
const START_DEADLINE: Duration = Duration::from_secs(60);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Any credentials do for moto; they are still sent, signed, as to a real server.
const KEY_ID: &str = "arca-test";
const SECRET: &str = "arca-test-secret";

/// The S3 server to test against.
///
/// Panics (fails the test) when none can be had, saying why and how to fix it.
pub async fn s3_for_tests() -> Moto {
    Moto::start().await.unwrap_or_else(|why| {
        panic!(
            "\n\nS3 blob storage tests cannot run: {why}\n\
             Install moto's S3 server into the workspace venv (`make deps` does:\n\
             `python3 -m venv .venv && .venv/bin/pip install 'moto[server]'`), or point\n\
             ARCA_MOTO_SERVER at a moto_server binary.\n"
        )
    })
}

pub struct Moto {
    child: Child,
    addr: SocketAddr,
    /// `http://127.0.0.1:PORT`
    pub endpoint: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Moto {
    pub async fn start() -> Result<Moto, String> {
        let bin = find_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("arca-moto-")
            .tempdir()
            .map_err(|e| format!("temp dir: {e}"))?;
        let log = dir.path().join("moto.log");
        let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| format!("log file: {e}"))?;
        // A port the kernel just handed out and we let go of: free unless another process
        // grabs it in between, which the readiness check below would report.
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("finding a free port: {e}"))?
            .port();
        let mut cmd = Command::new(&bin);
        cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent. It asks the
        // kernel to kill moto when the thread that spawned it exits, so a test process that is
        // killed (or aborts on a double panic) leaves no server behind.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("starting {}: {e}", bin.display()))?;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let mut moto = Moto {
            child,
            addr,
            endpoint: format!("http://{addr}"),
            log,
            _dir: dir,
        };
        moto.wait_ready().await?;
        Ok(moto)
    }

    /// Polls `GET /` until moto answers 200, failing early if the process exits.
    async fn wait_ready(&mut self) -> Result<(), String> {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "moto_server exited ({status}): {}",
                    self.log_tail()
                ));
            }
            if let Ok((200, _)) = http(self.addr, "GET", "/").await {
                return Ok(());
            }
            if started.elapsed() > START_DEADLINE {
                return Err(format!(
                    "moto_server did not answer on {} within {START_DEADLINE:?}: {}",
                    self.addr,
                    self.log_tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    }

    /// Creates a new bucket with a name of its own and returns it.
    pub async fn bucket(&self) -> Bucket {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!("arca-test-{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let (status, body) = http(self.addr, "PUT", &format!("/{name}"))
            .await
            .expect("create bucket");
        assert_eq!(status, 200, "PUT /{name}: {body}");
        Bucket::new(self.options(&name))
    }

    /// Options for `bucket` on this server, whether or not it exists.
    pub fn options(&self, bucket: &str) -> S3Options {
        S3Options {
            endpoint: Some(self.endpoint.clone()),
            access_key_id: Some(KEY_ID.to_owned()),
            secret_access_key: Some(SECRET.to_owned()),
            ..S3Options::new(bucket, "us-east-1")
        }
    }

    /// Multipart uploads started and neither completed nor aborted in `bucket`.
    pub async fn open_multipart_uploads(&self, bucket: &str) -> usize {
        let (status, body) = http(self.addr, "GET", &format!("/{bucket}?uploads"))
            .await
            .expect("list multipart uploads");
        assert_eq!(status, 200, "GET /{bucket}?uploads: {body}");
        body.matches("<Upload>").count()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A bucket and a client of its own for the test to look inside.
#[derive(Clone)]
pub struct Bucket {
    pub options: S3Options,
    client: Arc<dyn ObjectStore>,
}

impl Bucket {
    fn new(options: S3Options) -> Bucket {
        let client = AmazonS3Builder::new()
            .with_endpoint(options.endpoint.clone().unwrap_or_default())
            .with_allow_http(true)
            .with_bucket_name(&options.bucket)
            .with_region(&options.region)
            .with_access_key_id(KEY_ID)
            .with_secret_access_key(SECRET)
            .build()
            .expect("S3 client for the test");
        Bucket {
            options,
            client: Arc::new(client),
        }
    }

    /// Every object key in the bucket.
    pub async fn keys(&self) -> Vec<String> {
        self.client
            .list(None)
            .map_ok(|meta| meta.location.to_string())
            .try_collect()
            .await
            .expect("list bucket")
    }

    /// Bytes of every object in the bucket.
    pub async fn bytes(&self) -> u64 {
        self.client
            .list(None)
            .map_ok(|meta| meta.size)
            .try_fold(0u64, |sum, size| async move { Ok(sum + size) })
            .await
            .expect("list bucket")
    }

    pub async fn head(&self, key: &str) -> ObjectMeta {
        self.client
            .head(&Path::from(key))
            .await
            .unwrap_or_else(|e| panic!("HEAD {key}: {e}"))
    }
}

fn find_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("ARCA_MOTO_SERVER").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("ARCA_MOTO_SERVER={} is not a file", path.display()))
        };
    }
    let venv = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/moto_server");
    if venv.is_file() {
        Ok(venv)
    } else {
        Err(format!("no moto_server at {}", venv.display()))
    }
}

/// One HTTP/1.1 request without a body, unsigned; returns the status and the raw body.
async fn http(addr: SocketAddr, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    let exchange = async {
        let mut conn = tokio::net::TcpStream::connect(addr).await?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        conn.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        conn.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&raw).into_owned())
    };
    let text = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .map_err(|_| std::io::Error::other(format!("{method} {path}: no answer")))??;
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {text:.80}")))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}
