//! What the commands that ask a running server share (`arca trash`, `arca spaces`): the config
//! with their `--set` flags, the admin's password, and one plain HTTP/1.1 request to the public
//! address of the config (`proxy.http.addr`) as the admin.
//!
//! They ask the server rather than open its stores because a SQLite database belongs to the
//! one process that has it open (as `arca health` asks for /readyz).
//!
//! Failures are an exit code and one line: 1 the request failed or was refused, 2 bad usage
//! or configuration.

use std::io::BufRead as _;
use std::path::Path;
use std::time::Duration;

use arca_config::{Config, Overrides};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// An exit code and the one line that says why.
pub(crate) type Failure = (u8, String);

/// The config of `file` (or the defaults) with the dotted `KEY=VALUE` assignments of `--set`.
pub(crate) fn config(file: Option<&Path>, sets: &[String]) -> Result<Config, Failure> {
    let mut flags = Overrides::default();
    for assignment in sets {
        flags.push_set(assignment).map_err(|e| (2, e.to_string()))?;
    }
    arca_config::load_from_process(file, flags).map_err(|e| (2, format!("config error: {e}")))
}

/// The running server of a config, reached as the admin.
pub(crate) struct ServerApi {
    addr: String,
    auth: String,
}

impl ServerApi {
    /// The admin's password is the first line of standard input with `password_stdin`, else
    /// `identity.admin_password` of the config.
    pub(crate) fn new(config: &Config, password_stdin: bool) -> Result<Self, Failure> {
        let password = if password_stdin {
            let mut line = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut line)
                .map_err(|e| (1, format!("reading the password: {e}")))?;
            line.trim_end_matches(['\r', '\n']).to_owned()
        } else {
            config.identity.admin_password.clone().ok_or_else(|| {
                (2, "no admin password: set identity.admin_password (ARCA_ADMIN_PASSWORD) or pass --password-stdin".to_owned())
            })?
        };
        if config.proxy.tls.is_some() {
            return Err((
                2,
                "proxy.tls is set and this command speaks plain HTTP to proxy.http.addr; run it \
                 against a process without TLS on its public address"
                    .into(),
            ));
        }
        Ok(Self {
            addr: local_addr(&config.proxy.http.addr),
            auth: basic("admin", &password),
        })
    }

    /// `method path` with a JSON `body`, answered within `within`: the status and the body.
    pub(crate) fn send(
        &self,
        method: hyper::Method,
        path: &str,
        body: Option<&Value>,
        within: Duration,
    ) -> Result<(u16, String), Failure> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| (1, format!("cannot start the async runtime: {e}")))?;
        let body = body.map(Value::to_string);
        let sent = runtime.block_on(async {
            tokio::time::timeout(within, self.exchange(method, path, body)).await
        });
        match sent {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err((1, format!("{}: {e:#}", self.addr))),
            Err(_) => Err((1, format!("{}: no answer within {within:?}", self.addr))),
        }
    }

    async fn exchange(
        &self,
        method: hyper::Method,
        path: &str,
        body: Option<String>,
    ) -> anyhow::Result<(u16, String)> {
        let stream = tokio::net::TcpStream::connect(&self.addr).await?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, &self.addr)
            .header(hyper::header::AUTHORIZATION, &self.auth);
        if body.is_some() {
            req = req.header(hyper::header::CONTENT_TYPE, "application/json");
        }
        let req = req.body(Full::new(Bytes::from(body.unwrap_or_default())))?;
        let resp = sender.send_request(req).await?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await?.to_bytes();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }
}

/// The one line for an answer that is not a success: the server's reason (`error.message`,
/// as Graph and the trash API write it), else the body as it came.
pub(crate) fn refused(status: u16, answer: &str) -> Failure {
    let v: Value = serde_json::from_str(answer).unwrap_or(Value::Null);
    let why = v["error"]["message"].as_str().unwrap_or(answer.trim());
    (1, format!("the server refused ({status}): {why}"))
}

/// A listening address to connect to: an unspecified host (0.0.0.0, [::]) means this machine.
fn local_addr(listen: &str) -> String {
    match listen.rsplit_once(':') {
        Some(("0.0.0.0", port)) => format!("127.0.0.1:{port}"),
        Some(("[::]", port)) => format!("[::1]:{port}"),
        _ => listen.to_owned(),
    }
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {encoded}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unspecified_listen_hosts_mean_this_machine() {
        assert_eq!(local_addr("0.0.0.0:9200"), "127.0.0.1:9200");
        assert_eq!(local_addr("[::]:9200"), "[::1]:9200");
        assert_eq!(local_addr("10.0.0.1:9200"), "10.0.0.1:9200");
    }

    #[test]
    fn refusals_give_the_servers_reason() {
        assert_eq!(
            refused(
                403,
                r#"{"error":{"code":"accessDenied","message":"admins only"}}"#
            ),
            (1, "the server refused (403): admins only".to_owned())
        );
        assert_eq!(
            refused(502, "bad gateway\n"),
            (1, "the server refused (502): bad gateway".to_owned())
        );
    }
}
