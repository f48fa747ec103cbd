//! What the allocator keeps: mimalloc gives back what start-up freed.
//!
//! Starting frees far more than it keeps (the built-in admin's argon2 hash alone holds 19 MiB
//! for a moment; the live heap of an idle single binary is about 2 MiB). mimalloc returns freed
//! memory to the system only after a delay (`purge_delay`, 1 s in mimalloc 3), and only when
//! it next runs past it: a process that goes idle once ready never does, and ~20 MiB stayed
//! resident. So freed memory is purged at once until 2 s after the process turned ready, and
//! on mimalloc's delay after that (at once costs a system call per page freed under load).
//! mimalloc is also built without transparent huge pages (the `no_thp` feature): with them it
//! purges whole 2 MiB regions only, and start-up's scattered frees left most of them resident.
//! Idle VmRSS on embedded defaults, 12 s after start: 72 MiB before (40 MiB anonymous), 58 MiB
//! without huge pages alone (27 MiB anonymous), 38 MiB with both (6.3 MiB anonymous; the rest
//! is the binary's code). GET and PROPFIND rates and CPU per request with and without huge
//! pages, alternated twice: within 3% of each other, either way.

use std::ffi::{c_int, c_long};
use std::time::Duration;

use arca_runtime::Health;

// mimalloc's C API, linked in with the global allocator (libmimalloc-sys); declared here for
// the two calls needed rather than through the sys crate's `extended` feature and its extra
// dependency.
unsafe extern "C" {
    fn mi_option_get(option: c_int) -> c_long;
    fn mi_option_set(option: c_int, value: c_long);
}

/// `mi_option_purge_delay`'s place in mimalloc's option enum (the same in mimalloc 2 and 3).
const PURGE_DELAY: c_int = 15;
/// Its default in mimalloc 3 (the crate's default build), ms: seen there, it also confirms
/// the option's place.
const DEFAULT_PURGE_DELAY_MS: c_long = 1000;
/// The longest start-up purges at once: a process that never turns ready (a database away)
/// goes back to mimalloc's delay after this.
const START_UP: Duration = Duration::from_secs(60);
/// How often readiness is looked at meanwhile.
const POLL: Duration = Duration::from_millis(50);
/// After readiness, start-up work still ends and frees (the first rounds of background jobs):
/// purging at once goes on this long.
const SETTLE: Duration = Duration::from_secs(2);

/// Purges freed memory at once from now on, unless the operator chose a delay
/// (`MIMALLOC_PURGE_DELAY`) or the option is not where this expects it. Returns what to restore.
pub(crate) fn purge_at_once() -> Option<c_long> {
    // SAFETY: reads one option of the initialized allocator, by an index inside its enum.
    let delay = unsafe { mi_option_get(PURGE_DELAY) };
    if delay != DEFAULT_PURGE_DELAY_MS {
        return None;
    }
    // SAFETY: writes the option just read, whose place its default confirmed.
    unsafe { mi_option_set(PURGE_DELAY, 0) };
    Some(delay)
}

/// [`SETTLE`] after the process turned ready (or after [`START_UP`]), puts back the delay
/// [`purge_at_once`] replaced.
pub(crate) async fn after_start_up(health: Health, restore: Option<c_long>) {
    let Some(delay) = restore else { return };
    let started = tokio::time::Instant::now();
    while !health.report().is_ready() && started.elapsed() < START_UP {
        tokio::time::sleep(POLL).await;
    }
    tokio::time::sleep(SETTLE).await;
    // SAFETY: as in `purge_at_once`: the option whose place its default confirmed.
    unsafe { mi_option_set(PURGE_DELAY, delay) };
    tracing::debug!(
        purge_delay_ms = delay,
        "start-up over: the allocator purges freed memory on its delay again"
    );
}
