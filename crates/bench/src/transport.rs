//! The transport benchmark: one unary Probe/Check round trip over each kind of endpoint.
//!
//! Everything on the path is arca's own: the server is an axum router with the generated
//! `ProbeServer` mounted exactly as the runtime mounts it, served by [`serve`] on a listener from
//! [`bind`]; the client is the generated `ProbeClient` over a [`Clients`] channel found through a
//! [`StaticRegistry`]. So the numbers include what a real call pays for: the channel's endpoint
//! choice, context headers, the gRPC codec and, for sockets, HTTP/2 and the kernel. Only the
//! runtime's observation layer (metrics, request span) is left out, because it is the same on
//! every transport and this compares transports.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use arca_proto::v1::probe_client::ProbeClient;
use arca_proto::v1::probe_server::{Probe, ProbeServer};
use arca_proto::v1::{CheckRequest, CheckResponse, State};
use arca_transport::{Channel, Clients, Endpoint, MemHub, RetryPolicy, StaticRegistry};
use axum::Router;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use crate::{Scratch, Targets};

/// Calls made before measuring: connections set up, allocator and caches warm.
const WARMUP: Duration = Duration::from_millis(300);
/// How long each measurement runs; long enough to average out scheduler noise on 2 cores.
const MEASURE: Duration = Duration::from_millis(1500);
/// Concurrent callers sharing one channel, as the services of a busy process would.
const CALLERS: usize = 16;
/// The clock is read once per this many calls so reading it costs nothing measurable.
const CLOCK_EVERY: u64 = 32;

/// Targets from the issue.
const MEM_SEQUENTIAL_MAX_US: f64 = 5.0;
const MEM_VS_UNIX_MIN: f64 = 10.0;

/// The cheapest possible Probe: whatever a call costs beyond this is transport.
struct TrivialProbe;

#[tonic::async_trait]
impl Probe for TrivialProbe {
    async fn check(
        &self,
        _: tonic::Request<CheckRequest>,
    ) -> Result<tonic::Response<CheckResponse>, tonic::Status> {
        Ok(tonic::Response::new(CheckResponse {
            service: "bench".to_owned(),
            version: arca_proto::VERSION.to_owned(),
            state: State::Serving as i32,
        }))
    }
}

/// The router a service endpoint serves, with the probe mounted as `arca-runtime` mounts it.
fn router() -> Router {
    let probe = ProbeServer::new(TrivialProbe);
    Router::new().route_service(
        "/arca.v1.Probe/{*rest}",
        probe.map_request(|r: axum::extract::Request| r.map(tonic::body::Body::new)),
    )
}

/// Calls per second and the time per call it implies.
#[derive(Clone, Copy)]
struct Rate {
    calls: u64,
    elapsed: Duration,
}

impl Rate {
    /// For concurrent callers this is wall time divided by calls: the cost of a call to the
    /// process, not the latency one caller sees.
    fn micros_per_call(self) -> f64 {
        self.elapsed.as_secs_f64() * 1e6 / self.calls as f64
    }

    fn per_second(self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64()
    }
}

/// One caller, one call at a time, until `budget` has passed.
async fn sequential(client: &ProbeClient<Channel>, budget: Duration) -> anyhow::Result<Rate> {
    let mut client = client.clone();
    let start = Instant::now();
    let mut calls = 0u64;
    loop {
        client.check(CheckRequest {}).await?;
        calls += 1;
        if calls.is_multiple_of(CLOCK_EVERY) && start.elapsed() >= budget {
            break;
        }
    }
    Ok(Rate {
        calls,
        elapsed: start.elapsed(),
    })
}

/// `CALLERS` tasks calling back to back until `budget` has passed; calls are summed and the
/// clock stops when the last caller finishes its last call.
async fn concurrent(client: &ProbeClient<Channel>, budget: Duration) -> anyhow::Result<Rate> {
    let start = Instant::now();
    let deadline = start + budget;
    let callers: Vec<_> = (0..CALLERS)
        .map(|_| {
            let mut client = client.clone();
            tokio::spawn(async move {
                let mut calls = 0u64;
                loop {
                    client.check(CheckRequest {}).await?;
                    calls += 1;
                    if calls.is_multiple_of(CLOCK_EVERY) && Instant::now() >= deadline {
                        return Ok::<u64, tonic::Status>(calls);
                    }
                }
            })
        })
        .collect();
    let mut calls = 0;
    for caller in callers {
        calls += caller.await.context("caller task")??;
    }
    Ok(Rate {
        calls,
        elapsed: start.elapsed(),
    })
}

/// Sequential and concurrent rates for one transport.
struct Measured {
    scheme: &'static str,
    sequential: Rate,
    concurrent: Rate,
}

pub(crate) fn run(targets: &mut Targets) -> anyhow::Result<()> {
    // The same runtime shape as the arca binary: multi-threaded, one worker per core.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let results = runtime.block_on(measure_all())?;

    let find = |scheme| results.iter().find(|m| m.scheme == scheme);
    let (Some(mem), Some(unix), Some(tcp)) = (find("mem"), find("unix"), find("tcp")) else {
        anyhow::bail!("a transport produced no result");
    };
    let ratio = |a: Rate, b: Rate| b.micros_per_call() / a.micros_per_call();
    let mem_vs_unix = ratio(mem.sequential, unix.sequential);
    println!("mem is {mem_vs_unix:.0}× cheaper than unix (sequential)");
    println!(
        "mem is {:.0}× cheaper than unix ({CALLERS} concurrent)",
        ratio(mem.concurrent, unix.concurrent)
    );
    println!(
        "mem is {:.0}× cheaper than tcp (sequential)",
        ratio(mem.sequential, tcp.sequential)
    );
    println!(
        "mem is {:.0}× cheaper than tcp ({CALLERS} concurrent)",
        ratio(mem.concurrent, tcp.concurrent)
    );
    let mem_us = mem.sequential.micros_per_call();
    targets.check(
        mem_us <= MEM_SEQUENTIAL_MAX_US,
        &format!("mem sequential {mem_us:.1} µs/call (target ≤ {MEM_SEQUENTIAL_MAX_US} µs)"),
    );
    targets.check(
        mem_vs_unix >= MEM_VS_UNIX_MIN,
        &format!(
            "mem {mem_vs_unix:.0}× cheaper than unix, sequential (target ≥ {MEM_VS_UNIX_MIN}×)"
        ),
    );
    Ok(())
}

async fn measure_all() -> anyhow::Result<Vec<Measured>> {
    let scratch = Scratch::new("transport").context("scratch directory")?;
    let hub = MemHub::new();
    let shutdown = CancellationToken::new();

    // One service name per transport, so the one Clients below reaches each through its own
    // endpoint. Only the mem one is attached to the hub, so only it is called in-process.
    let wanted = [
        ("mem", "probe-mem", Endpoint::Mem("probe-mem".to_owned())),
        (
            "unix",
            "probe-unix",
            Endpoint::Unix(scratch.path.join("probe.sock")),
        ),
        // Port 0: the listener reports the port it got, and that is what the registry lists.
        ("tcp", "probe-tcp", Endpoint::Tcp("127.0.0.1:0".to_owned())),
    ];
    let mut listed = BTreeMap::new();
    let mut servers = Vec::new();
    for (_, name, endpoint) in &wanted {
        let listener = arca_transport::bind(endpoint, &hub).await?;
        listed.insert((*name).to_owned(), vec![listener.local_endpoint()]);
        servers.push(tokio::spawn(arca_transport::serve(
            listener,
            router(),
            shutdown.clone(),
        )));
    }
    // The mem server attaches its router to the hub when its task first runs; a call before
    // that would be refused, so wait for it.
    let attach_deadline = Instant::now() + Duration::from_secs(5);
    while !hub.is_serving("probe-mem") {
        anyhow::ensure!(
            Instant::now() < attach_deadline,
            "mem://probe-mem never attached"
        );
        tokio::task::yield_now().await;
    }
    let clients = Clients::new(
        hub.clone(),
        Arc::new(StaticRegistry::new(&listed)),
        RetryPolicy::default(),
    );

    let mut results = Vec::new();
    for (scheme, name, _) in &wanted {
        let client = ProbeClient::new(clients.channel(name));
        // Warm-ups are discarded; the first one also opens the socket connection.
        sequential(&client, WARMUP)
            .await
            .with_context(|| format!("{scheme}: warm-up"))?;
        let seq = sequential(&client, MEASURE)
            .await
            .with_context(|| format!("{scheme}: sequential"))?;
        print_rate(scheme, "sequential", seq);
        concurrent(&client, WARMUP)
            .await
            .with_context(|| format!("{scheme}: concurrent warm-up"))?;
        let conc = concurrent(&client, MEASURE)
            .await
            .with_context(|| format!("{scheme}: {CALLERS} concurrent"))?;
        print_rate(scheme, &format!("{CALLERS} concurrent"), conc);
        results.push(Measured {
            scheme,
            sequential: seq,
            concurrent: conc,
        });
    }

    // Dropping the clients closes their pooled connections, so the servers' graceful drain has
    // nothing to wait for; the timeout only keeps a drain bug from hanging the benchmark.
    drop(clients);
    shutdown.cancel();
    for server in servers {
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .context("a server did not stop within 5 s of shutdown")?
            .context("server task")??;
    }
    Ok(results)
}

fn print_rate(scheme: &str, mode: &str, rate: Rate) {
    println!(
        "transport {scheme:<4} {mode:<13} {:>7.1} µs/call {:>9.0} calls/s",
        rate.micros_per_call(),
        rate.per_second()
    );
}
