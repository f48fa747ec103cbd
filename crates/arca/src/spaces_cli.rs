//! `arca spaces usage`: what every space holds, live and besides: its used bytes (what the
//! quota limits), its trash (items and bytes) and its file versions (how many, bytes). It asks
//! the running server (see `server_api`) for every drive, `GET /graph/v1.0/drives` as the
//! admin, and prints the extra fields of each drive's `quota`, one space a line.
//!
//! Exit codes: 0 done, 1 it failed (the server's one-line reason), 2 bad usage or
//! configuration.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::Value;

use crate::server_api::{self, Failure, ServerApi};

/// Every drive, other users' personal ones included, when the admin asks (arca-frontend's
/// `graph::drives`).
const DRIVES: &str = "/graph/v1.0/drives";
/// Counting is a query per space; a minute of silence means something is wrong.
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

#[derive(Args)]
pub(crate) struct SpacesArgs {
    /// Any setting, as a dotted key: --set proxy.http.addr=127.0.0.1:9200 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE", global = true)]
    set: Vec<String>,
    #[command(subcommand)]
    command: SpacesCommand,
}

#[derive(Subcommand)]
enum SpacesCommand {
    /// Bytes used, in the trash and in versions, per space.
    Usage {
        /// Only this user's spaces (a login name): their personal space and the project
        /// spaces they manage.
        #[arg(long)]
        user: Option<String>,
        /// Read the admin's password from the first line of standard input (default:
        /// identity.admin_password of the config).
        #[arg(long)]
        password_stdin: bool,
    },
}

pub(crate) fn run(file: Option<PathBuf>, args: SpacesArgs) -> ExitCode {
    match execute(file, args) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err((code, message)) => {
            eprintln!("arca spaces: {message}");
            ExitCode::from(code)
        }
    }
}

fn execute(file: Option<PathBuf>, args: SpacesArgs) -> Result<String, Failure> {
    let config = server_api::config(file.as_deref(), &args.set)?;
    let SpacesCommand::Usage {
        user,
        password_stdin,
    } = args.command;
    let server = ServerApi::new(&config, password_stdin)?;
    let (status, answer) = server.send(hyper::Method::GET, DRIVES, None, ANSWER_WITHIN)?;
    if status != 200 {
        return Err(server_api::refused(status, &answer));
    }
    let v: Value = serde_json::from_str(&answer)
        .map_err(|e| (1, format!("the server's drive list is not JSON: {e}")))?;
    let drives = v["value"].as_array().ok_or_else(|| {
        (
            1,
            "the server's drive list has no \"value\" array".to_owned(),
        )
    })?;
    let mut rows = usage_rows(drives);
    if let Some(login) = user {
        rows.retain(|r| r.owner == login);
        if rows.is_empty() {
            return Err((1, format!("no space of a user named {login:?}")));
        }
    }
    Ok(table(&rows))
}

/// One line of the table.
#[derive(Debug, PartialEq)]
struct Row {
    kind: String,
    /// The owner's login name: a personal space's user, a project space's manager (their id
    /// when they have no personal space to learn the login from).
    owner: String,
    used: u64,
    trash_items: u64,
    trash: u64,
    version_count: u64,
    versions: u64,
    name: String,
}

/// Rows from libregraph drives, in the server's order.
fn usage_rows(drives: &[Value]) -> Vec<Row> {
    // A personal drive's alias is `personal/LOGIN` and its owner the user's id: the logins by
    // id, for the managers of project drives.
    let logins: std::collections::HashMap<&str, &str> = drives
        .iter()
        .filter_map(|d| {
            let login = d["driveAlias"].as_str()?.strip_prefix("personal/")?;
            Some((d["owner"]["user"]["id"].as_str()?, login))
        })
        .collect();
    drives
        .iter()
        .map(|d| {
            let kind = d["driveType"].as_str().unwrap_or_default().to_owned();
            let owner_id = if kind == "personal" {
                d["owner"]["user"]["id"].as_str()
            } else {
                d["root"]["permissions"][0]["grantedToV2"]["user"]["id"].as_str()
            }
            .unwrap_or_default();
            let q = &d["quota"];
            let n = |k: &str| q[k].as_u64().unwrap_or(0);
            Row {
                owner: logins.get(owner_id).copied().unwrap_or(owner_id).to_owned(),
                kind,
                used: n("used"),
                trash_items: n("trashItems"),
                trash: n("trash"),
                version_count: n("versionCount"),
                versions: n("versions"),
                name: d["name"].as_str().unwrap_or_default().to_owned(),
            }
        })
        .collect()
}

/// Aligned columns, bytes exact; the name last, as it may hold spaces.
fn table(rows: &[Row]) -> String {
    let header = [
        "KIND",
        "OWNER",
        "USED",
        "TRASHED",
        "TRASH_BYTES",
        "VERSIONS",
        "VERSION_BYTES",
        "NAME",
    ];
    let mut cells: Vec<[String; 8]> = vec![header.map(str::to_owned)];
    for r in rows {
        cells.push([
            r.kind.clone(),
            r.owner.clone(),
            r.used.to_string(),
            r.trash_items.to_string(),
            r.trash.to_string(),
            r.version_count.to_string(),
            r.versions.to_string(),
            r.name.clone(),
        ]);
    }
    let mut widths = [0usize; 8];
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for row in &cells {
        let mut line = String::new();
        for (i, (c, w)) in row.iter().zip(widths).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            // Text left, numbers right.
            if (2..7).contains(&i) {
                line.push_str(&format!("{c:>w$}"));
            } else {
                line.push_str(&format!("{c:<w$}"));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rows_name_owners_by_login() {
        let drives = [
            json!({"driveType": "personal", "driveAlias": "personal/alice", "name": "Alice A",
                   "owner": {"user": {"id": "u1"}},
                   "quota": {"used": 10, "trash": 3, "trashItems": 1, "versions": 7,
                             "versionCount": 2}}),
            json!({"driveType": "project", "driveAlias": "project/x", "name": "X",
                   "owner": {"user": {"id": "p1"}},
                   "root": {"permissions": [{"grantedToV2": {"user": {"id": "u1"}}}]},
                   "quota": {"used": 5}}),
            json!({"driveType": "project", "name": "Y",
                   "root": {"permissions": [{"grantedToV2": {"user": {"id": "u9"}}}]},
                   "quota": {}}),
        ];
        let rows = usage_rows(&drives);
        assert_eq!(
            rows[0],
            Row {
                kind: "personal".into(),
                owner: "alice".into(),
                used: 10,
                trash_items: 1,
                trash: 3,
                version_count: 2,
                versions: 7,
                name: "Alice A".into(),
            }
        );
        assert_eq!(rows[1].owner, "alice");
        assert_eq!(rows[1].trash, 0);
        assert_eq!(rows[2].owner, "u9", "an unknown manager shows by id");
        let text = table(&rows);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "KIND      OWNER  USED  TRASHED  TRASH_BYTES  VERSIONS  VERSION_BYTES  NAME"
        );
        assert_eq!(
            lines[1],
            "personal  alice    10        1            3         2              7  Alice A"
        );
        assert_eq!(lines.len(), 4);
    }
}
