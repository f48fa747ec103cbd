//! What the sharing tests share: every service with the admin's password known (in the test
//! process, or as the single binary when a test reads the events it logs), users and groups
//! made through Graph, OCS calls, PROPFIND helpers, anonymous requests and a keep-alive
//! connection (an "open session"). Included by tests/sharing.rs and tests/sharing_links.rs;
//! each uses part of it.
#![allow(dead_code)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
pub use arca_tests::basic;
use arca_tests::{HttpResponse, InProcess, Launch, Proc, Server, TempDir, send, send_as};
use http_body_util::BodyExt as _;
use hyper_util::rt::TokioIo;
use serde_json::Value;

pub const READY: Duration = Duration::from_secs(20);
pub const ADMIN_PASSWORD: &str = "admin-secret";
pub const OCS: &str = "/ocs/v2.php/apps/files_sharing/api/v1";

/// Where a test's services run.
pub enum Deployment {
    /// In the test process: for tests that only talk HTTP to it.
    InProcess(InProcess),
    /// The single binary: for tests that read the events it logs (`message: "event"`), which
    /// an in-process deployment writes to the test process's shared log.
    Process(Server),
}

pub struct Env {
    pub deployment: Deployment,
    /// `HOST:PORT` of the public listener.
    addr: String,
}

impl Env {
    /// Every service in the test process, with `settings` (dotted keys).
    pub async fn start(dir: &TempDir, settings: &[(&str, &str)]) -> anyhow::Result<Self> {
        let deployment = InProcess::ready(dir, ADMIN_PASSWORD, settings).await?;
        Ok(Self {
            addr: deployment.public.clone(),
            deployment: Deployment::InProcess(deployment),
        })
    }

    /// `arca server` as a process, with `settings` (dotted keys, as `--set`), whose log
    /// [`Env::proc`] reads.
    pub async fn process(dir: &TempDir, settings: &[(&str, &str)]) -> anyhow::Result<Self> {
        let mut launch = Launch::arca(dir).env("ARCA_ADMIN_PASSWORD", ADMIN_PASSWORD);
        for (k, v) in settings {
            launch = launch.set(k, v);
        }
        let mut server = launch.spawn()?;
        server.wait_ready(READY).await?;
        Ok(Self::on(server))
    }

    /// A process the test started itself.
    pub fn on(server: Server) -> Self {
        Self {
            addr: server.public.clone(),
            deployment: Deployment::Process(server),
        }
    }

    /// The process, its output captured (only for an [`Env::process`]).
    pub fn proc(&self) -> &Proc {
        match &self.deployment {
            Deployment::Process(server) => &server.proc,
            Deployment::InProcess(_) => {
                panic!("an in-process deployment has no log of its own: start it with Env::process")
            }
        }
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// One request as `user` (whose password is `USER-pw`; the admin's is ADMIN_PASSWORD).
    pub async fn req(
        &self,
        user: &str,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> anyhow::Result<HttpResponse> {
        let password = if user == "admin" {
            ADMIN_PASSWORD.to_owned()
        } else {
            format!("{user}-pw")
        };
        let auth = basic(user, &password);
        send_as(self.addr(), &auth, method, path, headers, body.to_owned()).await
    }

    /// Creates a user through the Graph API; its id.
    pub async fn user(&self, name: &str) -> anyhow::Result<String> {
        let body = format!(
            r#"{{"onPremisesSamAccountName":"{name}","displayName":"{name} Display","mail":"{name}@example.org","passwordProfile":{{"password":"{name}-pw"}}}}"#
        );
        let r = self
            .req(
                "admin",
                "POST",
                "/graph/v1.0/users",
                &[("content-type", "application/json")],
                &body,
            )
            .await?;
        anyhow::ensure!(r.status == 201, "create {name}: {} {}", r.status, r.text());
        Ok(r.json()?["id"].as_str().context("user id")?.to_owned())
    }

    /// An OCS call as `user` with a form body; the parsed JSON answer.
    pub async fn ocs(
        &self,
        user: &str,
        method: &str,
        path: &str,
        form: &str,
    ) -> anyhow::Result<(u16, Value)> {
        let sep = if path.contains('?') { '&' } else { '?' };
        let r = self
            .req(
                user,
                method,
                &format!("{OCS}{path}{sep}format=json"),
                &[("content-type", "application/x-www-form-urlencoded")],
                form,
            )
            .await?;
        let v = r.json().with_context(|| format!("{method} {path}"))?;
        Ok((r.status, v))
    }

    pub async fn put(&self, user: &str, path: &str, body: &str) -> anyhow::Result<u16> {
        Ok(self.req(user, "PUT", path, &[], body).await?.status)
    }
}

pub fn files(user: &str, rest: &str) -> String {
    format!("/remote.php/dav/files/{user}{rest}")
}

/// A Depth 1 PROPFIND's hrefs and the body.
pub async fn listing(env: &Env, user: &str, path: &str) -> anyhow::Result<(u16, String)> {
    let r = env
        .req(user, "PROPFIND", path, &[("depth", "1")], "")
        .await?;
    Ok((r.status, r.text()))
}

pub async fn prop(env: &Env, user: &str, path: &str, name: &str) -> anyhow::Result<String> {
    let body = format!(
        r#"<?xml version="1.0"?><d:propfind xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns"><d:prop><{name}/></d:prop></d:propfind>"#
    );
    let r = env
        .req(user, "PROPFIND", path, &[("depth", "0")], &body)
        .await?;
    anyhow::ensure!(
        r.status == 207,
        "PROPFIND {path}: {} {}",
        r.status,
        r.text()
    );
    let text = r.text();
    let open = format!("<{name}>");
    let Some(start) = text.find(&open) else {
        return Ok(String::new());
    };
    let start = start + open.len();
    let end = text[start..]
        .find(&format!("</{name}>"))
        .context("unterminated")?
        + start;
    Ok(text[start..end].to_owned())
}

pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Groups through the Graph API as admin; the group's id.
pub async fn group(env: &Env, name: &str, members: &[&str]) -> anyhow::Result<String> {
    let r = env
        .req(
            "admin",
            "POST",
            "/graph/v1.0/groups",
            &[("content-type", "application/json")],
            &format!(r#"{{"displayName":"{name}"}}"#),
        )
        .await?;
    anyhow::ensure!(r.status == 201, "group: {} {}", r.status, r.text());
    let id = r.json()?["id"].as_str().context("group id")?.to_owned();
    for m in members {
        let r = env
            .req(
                "admin",
                "POST",
                &format!("/graph/v1.0/groups/{id}/members/$ref"),
                &[("content-type", "application/json")],
                &format!(r#"{{"@odata.id":"http://x/graph/v1.0/users/{m}"}}"#),
            )
            .await?;
        anyhow::ensure!(r.status == 204, "add member: {} {}", r.status, r.text());
    }
    Ok(id)
}

pub async fn link(env: &Env, form: &str) -> anyhow::Result<(String, String)> {
    let (status, v) = env.ocs("alice", "POST", "/shares", form).await?;
    anyhow::ensure!(status == 200, "link: {v}");
    let d = &v["ocs"]["data"];
    Ok((
        d["token"].as_str().context("token")?.to_owned(),
        d["id"].as_str().context("id")?.to_owned(),
    ))
}

/// A request without a login, with optional headers.
pub async fn anon(
    env: &Env,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> anyhow::Result<HttpResponse> {
    send(env.addr(), method, path, headers, body.to_owned()).await
}

/// One HTTP/1.1 connection kept open across requests, as a sync client or a browser holds
/// it: what a share change must reach on the very next request.
pub struct Conn {
    addr: String,
    sender: hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>,
}

impl Conn {
    pub async fn open(addr: &str) -> anyhow::Result<Self> {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .with_context(|| format!("connect {addr}"))?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        Ok(Self {
            addr: addr.to_owned(),
            sender,
        })
    }

    /// One request on this connection (it fails, rather than reconnecting, if the server
    /// closed it).
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> anyhow::Result<HttpResponse> {
        self.sender.ready().await.context("the connection closed")?;
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, self.addr.as_str());
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let req = req.body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_owned(),
        )))?;
        let exchange = async {
            let resp = self.sender.send_request(req).await?;
            let status = resp.status().as_u16();
            let (parts, body) = resp.into_parts();
            let body = body.collect().await?.to_bytes().to_vec();
            anyhow::Ok(HttpResponse {
                status,
                headers: parts.headers,
                body,
            })
        };
        tokio::time::timeout(Duration::from_secs(30), exchange)
            .await
            .with_context(|| format!("{method} {path}: no answer within 30s"))?
    }
}

/// (year, month, day, hour, minute, second) of unix seconds, UTC.
pub fn civil(secs: u64) -> (i64, i64, i64, u64, u64, u64) {
    let days = (secs / 86_400) as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let t = secs % 86_400;
    (
        yoe + era * 400 + i64::from(m <= 2),
        m,
        d,
        t / 3600,
        t / 60 % 60,
        t % 60,
    )
}
