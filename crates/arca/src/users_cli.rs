//! `arca users …`: add, list, change and delete the built-in users straight in storage-system's
//! database, with no server running. The configuration is loaded as `arca server` loads it
//! (`--config`/`ARCA_CONFIG`, `ARCA_*`, `--data-dir`, `--set`), so the command finds the same
//! database. A server running on that database notices a changed password or a deleted user
//! within `arca_storage_system::local::CHANGE_VISIBLE_WITHIN` (its poll interval plus one round
//! trip to the proxies) and drops the cached logins.
//!
//! Exit codes: 0 done, 1 it failed (e.g. "user bob exists"), 2 bad usage or configuration.

use std::io::BufRead as _;
use std::path::PathBuf;
use std::process::ExitCode;

use arca_config::{Origin, Overrides};
use arca_storage_system::local::{LocalError, LocalUsers, User};
use clap::{Args, Subcommand};

#[derive(Args)]
pub(crate) struct UsersArgs {
    /// Where embedded stores keep their data (data_dir).
    #[arg(long, global = true)]
    data_dir: Option<String>,
    /// Any other setting, as a dotted key: --set storage-system.database=postgres://… (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE", global = true)]
    set: Vec<String>,
    #[command(subcommand)]
    command: UsersCommand,
}

#[derive(Subcommand)]
enum UsersCommand {
    /// Create a user; without --password-stdin a random password is generated and printed once.
    Add {
        /// The login name: letters, digits, '.', '_', '-', '@'.
        name: String,
        /// The name shown to others (default: the login name).
        #[arg(long)]
        display_name: Option<String>,
        #[arg(long)]
        email: Option<String>,
        /// Make the user an administrator.
        #[arg(long)]
        admin: bool,
        /// Read the password from the first line of standard input.
        #[arg(long)]
        password_stdin: bool,
    },
    /// List the users: name, id, display name, email, admin.
    List,
    /// Set a user's password; without --password-stdin a random one is generated and printed.
    Passwd {
        name: String,
        /// Read the password from the first line of standard input.
        #[arg(long)]
        password_stdin: bool,
    },
    /// Delete a user (their group memberships and app tokens go with them).
    Delete { name: String },
}

/// A failure and the exit code it deserves.
struct Failure {
    code: u8,
    message: String,
}

impl From<LocalError> for Failure {
    fn from(e: LocalError) -> Self {
        let code = match e {
            LocalError::Invalid(_) => 2,
            _ => 1,
        };
        Failure {
            code,
            message: e.to_string(),
        }
    }
}

pub(crate) fn run(file: Option<PathBuf>, args: UsersArgs) -> ExitCode {
    let config = match load(file.as_deref(), &args) {
        Ok(c) => c,
        Err(message) => {
            eprintln!("config error: {message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match crate::command_runtime("arca users") {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match runtime.block_on(execute(&config, args.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("arca users: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

fn load(file: Option<&std::path::Path>, args: &UsersArgs) -> Result<arca_config::Config, String> {
    offline_config(file, args.data_dir.as_deref(), &args.set)
}

/// The configuration as `arca server` loads it (`--config`/`ARCA_CONFIG`, `ARCA_*`, then
/// `--data-dir` and `--set`), for a command that works on a service's data directly.
pub(crate) fn offline_config(
    file: Option<&std::path::Path>,
    data_dir: Option<&str>,
    set: &[String],
) -> Result<arca_config::Config, String> {
    let mut flags = Overrides::default();
    if let Some(dir) = data_dir {
        flags.push(
            "data_dir",
            dir.to_owned(),
            Origin::Flag("--data-dir".into()),
        );
    }
    for assignment in set {
        flags.push_set(assignment).map_err(|e| e.to_string())?;
    }
    arca_config::load_from_process(file, flags).map_err(|e| e.to_string())
}

async fn execute(config: &arca_config::Config, command: UsersCommand) -> Result<(), Failure> {
    let users = LocalUsers::open(config).await?;
    let result = match command {
        UsersCommand::Add {
            name,
            display_name,
            email,
            admin,
            password_stdin,
        } => {
            let (password, generated) = password(password_stdin)?;
            let user = users
                .add(
                    &name,
                    display_name.as_deref(),
                    email.as_deref(),
                    admin,
                    &password,
                )
                .await;
            user.map(|u| {
                println!("created user {} (id {})", u.username, u.id);
                if generated {
                    println!("password: {password}");
                }
            })
        }
        UsersCommand::List => users.list().await.map(|list| print!("{}", table(&list))),
        UsersCommand::Passwd {
            name,
            password_stdin,
        } => {
            let (password, generated) = password(password_stdin)?;
            users.passwd(&name, &password).await.map(|()| {
                println!("changed the password of {name}");
                if generated {
                    println!("password: {password}");
                }
            })
        }
        UsersCommand::Delete { name } => users
            .delete(&name)
            .await
            .map(|()| println!("deleted user {name}")),
    };
    users.close().await;
    Ok(result?)
}

/// The password from stdin's first line, or a generated one (and whether it was generated).
fn password(from_stdin: bool) -> Result<(String, bool), Failure> {
    if !from_stdin {
        return Ok((arca_config::generate_secret(12), true));
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| Failure {
            code: 1,
            message: format!("reading the password from stdin: {e}"),
        })?;
    let password = line.trim_end_matches(['\n', '\r']).to_owned();
    if password.is_empty() {
        return Err(Failure {
            code: 2,
            message: "--password-stdin: standard input has no password".into(),
        });
    }
    Ok((password, false))
}

/// Left-aligned columns, two spaces apart, under a header.
fn table(users: &[User]) -> String {
    let header = ["NAME", "ID", "DISPLAY NAME", "EMAIL", "ADMIN"];
    let rows: Vec<[String; 5]> = users
        .iter()
        .map(|u| {
            [
                u.username.clone(),
                u.id.clone(),
                u.display_name.clone(),
                u.mail.clone(),
                if u.admin { "yes" } else { "no" }.to_owned(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 5]| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        s.push('\n');
        s
    };
    let mut out = line(header);
    for row in &rows {
        out.push_str(&line([&row[0], &row[1], &row[2], &row[3], &row[4]]));
    }
    out
}
