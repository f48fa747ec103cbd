//! `arca trash restore`: undoes a mass delete by asking the running server, as `arca health`
//! does (a SQLite database belongs to the one process that has it open), to restore every
//! matching item of a user's trash where it was: `POST /api/v1/trash/restore` on the public
//! address of the config (`proxy.http.addr`), as the admin (`identity.admin_password`, or the
//! first line of standard input with `--password-stdin`). It prints how many items came back.
//!
//! Exit codes: 0 done, 1 it failed (the server's one-line reason), 2 bad usage or
//! configuration.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::server_api::{self, Failure, ServerApi};

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

fn execute(file: Option<PathBuf>, args: TrashArgs) -> Result<String, Failure> {
    let config = server_api::config(file.as_deref(), &args.set)?;
    let TrashCommand::Restore {
        user,
        since,
        path,
        by,
        conflict,
        password_stdin,
    } = args.command;
    let since = since
        .map(|s| since_secs(&s))
        .transpose()
        .map_err(|m| (2, m))?;
    let server = ServerApi::new(&config, password_stdin)?;
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
    let (status, answer) = server.send(hyper::Method::POST, RESTORE, Some(&body), ANSWER_WITHIN)?;
    if status != 200 {
        return Err(server_api::refused(status, &answer));
    }
    let v: Value = serde_json::from_str(&answer).unwrap_or(Value::Null);
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
}
