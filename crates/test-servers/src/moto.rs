//! moto's S3 server (PyPI `moto[server]`): `$ARCA_MOTO_SERVER`, else the workspace's
//! `.venv/bin/moto_server`, on a free loopback port, objects in memory, its output in a log
//! file of its own. It speaks the S3 protocol, checks signatures' shape but accepts any
//! credentials, and in server mode accepts unsigned requests such as `PUT /BUCKET`, which is
//! how buckets are made here (S3 clients such as object_store have no bucket API).

use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{Error, free_port, log_tail, venv_bin};

/// moto takes a few seconds to import on a busy 2-core machine; a minute means it is broken.
const START_DEADLINE: Duration = Duration::from_secs(60);
const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(50);
const INSTALL: &str = "Install moto's S3 server into the workspace venv (`make deps` does: \
                       `python3 -m venv .venv && .venv/bin/pip install 'moto[server]'`), \
                       or point ARCA_MOTO_SERVER at a moto_server binary.";

/// The S3 server to test against, started privately.
///
/// Panics (fails the test) when none can be had, saying why and how to fix it.
pub async fn moto_for_tests() -> Moto {
    Moto::start().await.unwrap_or_else(|why| {
        panic!("\n\nS3 tests cannot run: {why}\n");
    })
}

/// A running moto server; killed (SIGKILL) and reaped on drop, and by the kernel if the test
/// process dies first.
pub struct Moto {
    child: Child,
    addr: SocketAddr,
    endpoint: String,
    log: PathBuf,
    /// Holds the log; removed with the server.
    _dir: tempfile::TempDir,
}

impl Moto {
    /// Starts the server and waits (at most a minute) until it answers. Call it from the
    /// test's own task, not from `spawn_blocking`: the kernel kills moto when the spawning
    /// thread exits (see below), and the runtime ends idle blocking threads.
    pub async fn start() -> Result<Moto, Error> {
        let bin = binary()?;
        let dir = tempfile::Builder::new()
            .prefix("arca-moto-")
            .tempdir()
            .map_err(Error::io("making a temp dir for moto"))?;
        let log = dir.path().join("moto.log");
        let out = std::fs::File::create(&log).map_err(Error::io(log.display().to_string()))?;
        let err = out
            .try_clone()
            .map_err(Error::io(log.display().to_string()))?;
        let port = free_port()?;
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
            .map_err(Error::io(format!("starting {}", bin.display())))?;
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

    /// `http://127.0.0.1:PORT`
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Creates the bucket `name`.
    pub async fn create_bucket(&self, name: &str) -> Result<(), Error> {
        let (status, body) = self.request("PUT", &format!("/{name}")).await?;
        if status != 200 {
            return Err(Error::Failed(format!(
                "creating bucket {name}: {status} {body}"
            )));
        }
        Ok(())
    }

    /// One unsigned HTTP/1.1 request without a body; the status and the raw body.
    pub async fn request(&self, method: &str, path: &str) -> Result<(u16, String), Error> {
        http(self.addr, method, path)
            .await
            .map_err(Error::io(format!(
                "{method} {path} to moto at {}",
                self.addr
            )))
    }

    /// Polls `GET /` until moto answers 200, failing early if the process exits.
    async fn wait_ready(&mut self) -> Result<(), Error> {
        let started = Instant::now();
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    return Err(Error::Failed(format!(
                        "moto_server exited ({status}); its log ends with:\n{}",
                        log_tail(&self.log, 20)
                    )));
                }
                Ok(None) => {}
                Err(e) => return Err(Error::io("waiting for moto_server")(e)),
            }
            if let Ok((200, _)) = http(self.addr, "GET", "/").await {
                return Ok(());
            }
            if started.elapsed() > START_DEADLINE {
                return Err(Error::NotReady {
                    what: format!("moto_server on {}", self.addr),
                    within: START_DEADLINE,
                    log: log_tail(&self.log, 20),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        // SIGKILL: the wait that follows cannot hang.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `$ARCA_MOTO_SERVER` if set, else `.venv/bin/moto_server`.
fn binary() -> Result<PathBuf, Error> {
    if let Some(path) = std::env::var_os("ARCA_MOTO_SERVER").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        if path.is_file() {
            return Ok(path);
        }
        return Err(Error::Missing {
            what: format!("ARCA_MOTO_SERVER={} is not a file", path.display()),
            fix: INSTALL,
        });
    }
    venv_bin("moto_server").map_err(|e| match e {
        Error::Missing { what, .. } => Error::Missing { what, fix: INSTALL },
        other => other,
    })
}

/// One HTTP/1.1 request without a body, unsigned, within [`REQUEST_DEADLINE`]; the status and
/// the raw body (moto closes the connection as asked, so reading to the end is the answer).
async fn http(addr: SocketAddr, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    let exchange = async {
        let mut conn = tokio::net::TcpStream::connect(addr).await?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\n\
             Connection: close\r\n\r\n"
        );
        conn.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        conn.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&raw).into_owned())
    };
    let text = tokio::time::timeout(REQUEST_DEADLINE, exchange)
        .await
        .map_err(|_| std::io::Error::other(format!("no answer within {REQUEST_DEADLINE:?}")))??;
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
