//! A COMMIT whose connection dies under it, on a real PostgreSQL: whether the batch landed is
//! unknown to the client side, and the committer finds out instead of guessing (the blob rows
//! are the batch's idempotency keys). A small proxy between the store and the server cuts one
//! connection at the COMMIT, either after passing it on (the server commits; its answer never
//! comes back) or before (the server never sees it and rolls back when the connection goes).
//! Either way the write is answered with success and is there exactly once.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use arca_store_files::{PutOptions, Store, StoreConfig};
use arca_test_servers::postgres_for_tests;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The simple-query message sqlx sends to commit: 'Q', its length (4 + 7), "COMMIT\0".
const COMMIT: &[u8] = b"Q\x00\x00\x00\x0bCOMMIT\x00";

/// What the proxy does to the next COMMIT it sees (after skipping some).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Cut {
    /// Passes the COMMIT on, then closes both sides.
    AfterCommit,
    /// Closes both sides without passing it on.
    BeforeCommit,
}

#[derive(Default)]
struct Plan {
    /// 0: pass everything; else 1 + the cut (as `Cut as usize`) for the COMMIT `skip` from now.
    armed: AtomicUsize,
    skip: AtomicUsize,
    fired: AtomicUsize,
}

impl Plan {
    fn arm(&self, cut: Cut, skip: usize) {
        self.skip.store(skip, Ordering::SeqCst);
        self.armed.store(1 + cut as usize, Ordering::SeqCst);
    }

    /// The cut for a COMMIT seen now, if this is the one.
    fn take(&self) -> Option<Cut> {
        let armed = self.armed.load(Ordering::SeqCst);
        if armed == 0 {
            return None;
        }
        if self.skip.load(Ordering::SeqCst) > 0 {
            self.skip.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        self.armed.store(0, Ordering::SeqCst);
        self.fired.fetch_add(1, Ordering::SeqCst);
        Some(if armed == 1 + Cut::AfterCommit as usize {
            Cut::AfterCommit
        } else {
            Cut::BeforeCommit
        })
    }
}

/// A TCP proxy to `server` that cuts connections at a COMMIT as `plan` says.
async fn proxy(server: SocketAddr, plan: Arc<Plan>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let plan = plan.clone();
            tokio::spawn(async move {
                let Ok(upstream) = TcpStream::connect(server).await else {
                    return;
                };
                let (mut cr, mut cw) = client.into_split();
                let (mut ur, mut uw) = upstream.into_split();
                // Server to client: as is, until either side goes.
                let back = tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut ur, &mut cw).await;
                });
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match cr.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    let chunk = &buf[..n];
                    let at = chunk.windows(COMMIT.len()).position(|w| w == COMMIT);
                    match at.and_then(|at| plan.take().map(|cut| (at, cut))) {
                        None => {
                            if uw.write_all(chunk).await.is_err() {
                                break;
                            }
                        }
                        Some((at, cut)) => {
                            let upto = match cut {
                                Cut::AfterCommit => at + COMMIT.len(),
                                Cut::BeforeCommit => at,
                            };
                            let _ = uw.write_all(&chunk[..upto]).await;
                            let _ = uw.shutdown().await;
                            break;
                        }
                    }
                }
                // Both directions end here: the client's connection dies without an answer.
                back.abort();
            });
        }
    });
    addr
}

/// `url` with its host and port replaced by `addr`.
fn through(url: &str, addr: SocketAddr) -> (String, SocketAddr) {
    let after_at = url
        .find('@')
        .map_or(url.find("//").unwrap_or(0) + 2, |i| i + 1);
    let host_end = after_at + url[after_at..].find('/').unwrap_or(url.len() - after_at);
    let server: SocketAddr = url[after_at..host_end]
        .parse()
        .unwrap_or_else(|e| panic!("host:port of {url}: {e}"));
    (
        format!("{}{addr}{}", &url[..after_at], &url[host_end..]),
        server,
    )
}

#[tokio::test]
async fn a_commit_cut_off_is_found_out_not_guessed() {
    let pg = postgres_for_tests().await;
    let url = pg.fresh_database().await.expect("database");
    let plan = Arc::new(Plan::default());
    let (_, server) = through(&url, "127.0.0.1:1".parse().unwrap());
    let addr = proxy(server, plan.clone()).await;
    let (proxied, _) = through(&url, addr);
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut cfg = StoreConfig::new(proxied, tmp.path().join("blobs"));
    cfg.write_retry = Duration::from_secs(10);
    let store = Store::open(cfg).await.expect("open store");
    let root = store.personal_space("alice").await.expect("space").root_id;
    let put = |store: &Store, data: &'static [u8]| {
        let store = store.clone();
        let root = root.clone();
        async move {
            store
                .put_file(
                    &root,
                    "f.txt",
                    support::body(data.to_vec(), 4),
                    PutOptions::default(),
                )
                .await
        }
    };

    // Each put is a reservation's commit, then the put's own. Both kinds are cut both ways.
    let mut last = None;
    for (i, (cut, skip)) in [
        (Cut::AfterCommit, 1),
        (Cut::BeforeCommit, 1),
        (Cut::AfterCommit, 0),
        (Cut::BeforeCommit, 0),
    ]
    .into_iter()
    .enumerate()
    {
        plan.arm(cut, skip);
        let data: &'static [u8] = [b"one".as_slice(), b"two", b"three", b"four"][i];
        let node = tokio::time::timeout(Duration::from_secs(30), put(&store, data))
            .await
            .expect("the put ends")
            .unwrap_or_else(|e| panic!("put {i} with {cut:?} (skip {skip}): {e}"));
        assert_eq!(
            plan.fired.load(Ordering::SeqCst),
            i + 1,
            "the cut {i} happened"
        );
        assert_eq!(support::read_all(&store, &node.id, None).await, data);
        if let Some(first) = &last {
            assert_eq!(&node.id, first, "one file, overwritten, never a second one");
        }
        last = Some(node.id.clone());
    }
    let listing = store.list_children(&root).await.expect("list");
    assert_eq!(listing.len(), 1, "{listing:?}");
}
