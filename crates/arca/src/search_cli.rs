//! `arca search reindex`: rebuild the search index from the store, e.g. after raising
//! `search.max_content_bytes` or adding media types whose contents are read. Works on the
//! search service's index directly (the file in `data_dir/search`, or the shared one in
//! `search.database`), whether the service runs or not: it forgets which etags were indexed,
//! and the service's next crawl (at its next round if it runs, else when it starts; with a
//! shared index, the instance holding the crawl's lease) walks every space and reads every
//! file again. Meanwhile the old entries stay searchable.
//!
//! Exit codes: 0 done, 1 it failed, 2 bad usage or configuration.

use std::path::PathBuf;
use std::process::ExitCode;

use arca_search::index::Index;
use clap::{Args, Subcommand};

#[derive(Args)]
pub(crate) struct SearchArgs {
    /// Where embedded stores keep their data (data_dir).
    #[arg(long, global = true)]
    data_dir: Option<String>,
    /// Any other setting, as a dotted key (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE", global = true)]
    set: Vec<String>,
    #[command(subcommand)]
    command: SearchCommand,
}

#[derive(Subcommand)]
enum SearchCommand {
    /// Walk every space and read every file again on the search service's next crawl.
    Reindex,
}

pub(crate) fn run(file: Option<PathBuf>, args: SearchArgs) -> ExitCode {
    let config = match crate::users_cli::offline_config(
        file.as_deref(),
        args.data_dir.as_deref(),
        &args.set,
    ) {
        Ok(c) => c,
        Err(message) => {
            eprintln!("config error: {message}");
            return ExitCode::from(2);
        }
    };
    let SearchCommand::Reindex = args.command;
    let runtime = match crate::command_runtime("arca search") {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    if let Some(url) = &config.search.database {
        let done = runtime.block_on(async { Index::connect(url).await?.forget_progress().await });
        return report(done, "search.database");
    }
    let dir = config.data_dir.join("search");
    if !dir.join("index.db").exists() {
        eprintln!(
            "arca search reindex: no index at {} (the search service has not run on this data dir); it builds one when it starts",
            dir.display()
        );
        return ExitCode::from(1);
    }
    let done = runtime.block_on(async { Index::open(&dir).await?.forget_progress().await });
    report(done, &dir.display().to_string())
}

/// What a reindex of the index at `place` (never a URL: it may hold a password) came to.
fn report(done: Result<u64, arca_search::index::IndexError>, place: &str) -> ExitCode {
    match done {
        Ok(docs) => {
            println!(
                "search index: {docs} entries to check again; the search service rebuilds them on its next crawl (search.interval)"
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("arca search reindex: {place}: {e}");
            ExitCode::from(1)
        }
    }
}
