//! `arca trash restore`: undoes a mass delete by asking the running server, as `arca health`
//! does (a SQLite database belongs to the one process that has it open), to restore every
//! matching item of a user's trash where it was: `POST /api/v1/trash/restore` on the public
//! address of the config (`proxy.http.addr`), as the admin (`identity.admin_password`, or the
//! first line of standard input with `--password-stdin`). It prints how many items came back.
//!
//! Exit codes: 0 done, 1 it failed (the server's one-line reason), 2 bad usage or
//! configuration.

use std::io::BufRead as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arca_config::Overrides;
use clap::{Args, Subcommand};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

/// Where the server answers the bulk restore (arca-frontend's `trash_api`).
const RESTORE: &str = "/api/v1/trash/restore";
/// A restore of 100,000 items takes seconds; a minute of silence means something is wrong.
const ANSWER_WITHIN: Duration = Duration::from_secs(600);

#[derive(Args)]
pub(crate) struct TrashArgs {
    /// Any setting, as a dotted key: --set proxy.http.addr=127.0.0.1:9200 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE", global = true)]
    set: Vec<String>,
    #[command(subcommand)]
    command: TrashCommand,
}

#[derive(Subcommand)]
enum TrashCommand {
    /// Restore a user's removed files and folders where they were (folders on the way
    /// recreated).
    Restore {
        /// Whose personal trash (a login name).
        #[arg(long)]
        user: String,
        /// Only what was removed since then: an RFC 3339 time (2026-12-06T09:00:00Z) or a
        /// duration ago (2h, 3days).
        #[arg(long)]
        since: Option<String>,
        /// Only what was removed from this folder (or that file) or below it.
        #[arg(long)]
        path: Option<String>,
        /// Only what this user (a login name) removed.
        #[arg(long)]
        by: Option<String>,
        /// When the original name is taken again: keep-both (beside it), skip (stays in the
        /// trash) or replace (what is there goes to the trash).
        #[arg(long, default_value = "keep-both")]
        conflict: String,
        /// Read the admin's password from the first line of standard input (default:
        /// identity.admin_password of the config).
        #[arg(long)]
        password_stdin: bool,
    },
}

pub(crate) fn run(file: Option<PathBuf>, args: TrashArgs) -> ExitCode {
    match execute(file, args) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err((code, message)) => {
            eprintln!("arca trash: {message}");
            ExitCode::from(code)
        }
    }
}

fn execute(file: Option<PathBuf>, args: TrashArgs) -> Result<String, (u8, String)> {
    let usage = |m: String| (2u8, m);
    let mut flags = Overrides::default();
    for assignment in &args.set {
        flags
            .push_set(assignment)
            .map_err(|e| usage(e.to_string()))?;
    }
    let config = arca_config::load_from_process(file.as_deref(), flags)
        .map_err(|e| usage(format!("config error: {e}")))?;
    let TrashCommand::Restore {
        user,
        since,
        path,
        by,
        conflict,
        password_stdin,
    } = args.command;
    let since = since.map(|s| since_secs(&s)).transpose().map_err(usage)?;
    let password = if password_stdin {
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .map_err(|e| (1, format!("reading the password: {e}")))?;
        line.trim_end_matches(['\r', '\n']).to_owned()
    } else {
        config.identity.admin_password.clone().ok_or_else(|| {
            usage("no admin password: set identity.admin_password (ARCA_ADMIN_PASSWORD) or pass --password-stdin".into())
        })?
    };
    if config.proxy.tls.is_some() {
        return Err(usage(
            "proxy.tls is set and this command speaks plain HTTP to proxy.http.addr; run it \
             against a process without TLS on its public address"
                .into(),
        ));
    }
    let addr = local_addr(&config.proxy.http.addr);
    let mut body = json!({"user": user, "conflict": conflict});
    if let Some(s) = since {
        body["since"] = json!(s);
    }
    if let Some(p) = path {
        body["path"] = json!(p);
    }
    if let Some(b) = by {
        body["by"] = json!(b);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| (1, format!("cannot start the async runtime: {e}")))?;
    let auth = basic("admin", &password);
    let sent = runtime.block_on(async {
        tokio::time::timeout(ANSWER_WITHIN, post(&addr, &auth, body.to_string())).await
    });
    let (status, answer) = match sent {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => return Err((1, format!("{addr}: {e:#}"))),
        Err(_) => return Err((1, format!("{addr}: no answer within {ANSWER_WITHIN:?}"))),
    };
    let v: Value = serde_json::from_str(&answer).unwrap_or(Value::Null);
    if status != 200 {
        let why = v["error"]["message"].as_str().unwrap_or(answer.trim());
        return Err((1, format!("the server refused ({status}): {why}")));
    }
    let n = |k: &str| v[k].as_u64().unwrap_or(0);
    Ok(format!(
        "restored {} of {} items ({} files, {} bytes); {} under another name, {} replacing \
         what was there, {} left in the trash ({} over quota)",
        n("restored"),
        n("total"),
        n("files"),
        n("bytes"),
        n("renamed"),
        n("replaced"),
        n("skipped") + n("over_quota"),
        n("over_quota"),
    ))
}

/// `--since` as unix seconds: an RFC 3339 time, or a duration before now.
fn since_secs(s: &str) -> Result<i64, String> {
    let at = match humantime::parse_rfc3339_weak(s) {
        Ok(t) => t,
        Err(_) => {
            let ago = humantime::parse_duration(s).map_err(|_| {
                format!("--since {s:?}: neither an RFC 3339 time nor a duration such as 2h")
            })?;
            SystemTime::now()
                .checked_sub(ago)
                .ok_or_else(|| format!("--since {s:?}: too long ago"))?
        }
    };
    let secs = at
        .duration_since(UNIX_EPOCH)
        .map_err(|_| format!("--since {s:?}: before 1970"))?
        .as_secs();
    i64::try_from(secs).map_err(|_| format!("--since {s:?}: too far ahead"))
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

async fn post(addr: &str, auth: &str, body: String) -> anyhow::Result<(u16, String)> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let req = hyper::Request::post(RESTORE)
        .header(hyper::header::HOST, addr)
        .header(hyper::header::AUTHORIZATION, auth)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))?;
    let resp = sender.send_request(req).await?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_a_time_or_a_duration_ago() {
        assert_eq!(since_secs("2026-12-06T09:00:00Z"), Ok(1_796_547_600));
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let two_hours_ago = since_secs("2h").unwrap();
        assert!((now - 7200 - two_hours_ago).abs() <= 2, "{two_hours_ago}");
        assert!(since_secs("yesterday-ish").is_err());
    }

    #[test]
    fn unspecified_listen_hosts_mean_this_machine() {
        assert_eq!(local_addr("0.0.0.0:9200"), "127.0.0.1:9200");
        assert_eq!(local_addr("[::]:9200"), "[::1]:9200");
        assert_eq!(local_addr("10.0.0.1:9200"), "10.0.0.1:9200");
    }
}
