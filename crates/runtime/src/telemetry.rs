//! Logs, traces and metrics for the whole process, set up once by the binary.

use arca_config::{Config, LogFormat};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("log.level: {0}")]
    Filter(String),
    #[error("tracing.otlp.endpoint: {0}")]
    Otlp(String),
    #[error("metrics: {0}")]
    Metrics(String),
    #[error("logging already initialised")]
    Init,
    #[error("starting the {0} thread: {1}")]
    Thread(&'static str, std::io::Error),
}

/// Keeps exporters alive; [`Telemetry::shutdown`] flushes spans still buffered.
pub struct Telemetry {
    /// `None` for a second [`init`] in the same process, which shares the first one's.
    tracer: Option<SdkTracerProvider>,
    pub metrics: PrometheusHandle,
}

impl Telemetry {
    pub fn shutdown(self) {
        if let Some(tracer) = self.tracer
            && let Err(e) = tracer.shutdown()
        {
            tracing::warn!(error = %e, "flushing traces failed");
        }
        flush_logs();
    }
}

/// The recorder [`init`] installed, for a later `init` in the same process (tests host
/// several deployments in one process; logs, traces and metrics are the process's, once).
static INSTALLED: std::sync::Mutex<Option<PrometheusHandle>> = std::sync::Mutex::new(None);

/// Checks a `log.level` filter without installing anything, so a bad one is a config error
/// reported before the process starts.
pub fn check_log_level(level: &str) -> Result<(), String> {
    EnvFilter::try_new(level)
        .map(|_| ())
        .map_err(|e| format!("log.level: {level:?} is not a log filter: {e}"))
}

/// Log lines on their way to stderr, below WARN (see [`LogWriter`]).
static PENDING_LOGS: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());

/// How long an INFO or DEBUG line may wait in [`PENDING_LOGS`].
const LOG_FLUSH: std::time::Duration = std::time::Duration::from_millis(100);

/// Past this many bytes pending, the line's own writer writes them out.
const LOG_BUFFER: usize = 64 * 1024;

/// Writes out the log lines still pending. The binary calls it before the process exits.
pub fn flush_logs() {
    let mut pending = pending_logs();
    write_out(&mut pending);
}

fn pending_logs() -> std::sync::MutexGuard<'static, Vec<u8>> {
    // Bytes only: a panic elsewhere while holding the lock leaves them usable.
    PENDING_LOGS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write_out(pending: &mut Vec<u8>) {
    use std::io::Write as _;
    if !pending.is_empty() {
        // Nowhere to report a failed write of the log itself.
        let _ = std::io::stderr().write_all(pending);
        pending.clear();
    }
}

/// Where log lines go: stderr, with lines below WARN collected and written out at most
/// [`LOG_FLUSH`] later (or once [`LOG_BUFFER`] bytes wait), and a WARN or ERROR line written at
/// once after whatever waited before it. Why: the access log writes a line per request, and a
/// write(2) per line was ~10% of a 4 KiB GET's CPU.
#[derive(Clone, Copy)]
struct LogWriter;

struct LogLine {
    urgent: bool,
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogLine;

    fn make_writer(&'a self) -> LogLine {
        LogLine { urgent: true }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> LogLine {
        LogLine {
            urgent: *meta.level() <= tracing::Level::WARN,
        }
    }
}

impl std::io::Write for LogLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // Written out under the lock, so lines keep their order whoever writes them.
        let mut pending = pending_logs();
        pending.extend_from_slice(buf);
        if self.urgent || pending.len() >= LOG_BUFFER {
            write_out(&mut pending);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// How often histogram samples are folded into their buckets (see [`init`]).
const METRICS_UPKEEP: std::time::Duration = std::time::Duration::from_secs(5);

/// Set once [`init`] installed an OpenTelemetry layer.
static OTEL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether request spans are OpenTelemetry spans (traces are exported), or carry the trace id
/// of the incoming `traceparent` (or a new one) as a plain field.
pub(crate) fn otel_enabled() -> bool {
    OTEL.load(std::sync::atomic::Ordering::Relaxed)
}

/// Installs the global subscriber (pretty or JSON logs on stderr), the W3C trace-context
/// propagator, an OpenTelemetry tracer (exporting over OTLP only when configured) and the
/// Prometheus recorder.
///
/// Without an exporter no OpenTelemetry layer is installed — building an OpenTelemetry span
/// for every hop of every request only to drop it cost a fifth of a small GET's throughput —
/// but request spans still log a trace id, propagated in `traceparent` from hop to hop (see
/// [`otel_enabled`]), so one request can be followed across every hop in the logs alone.
///
/// All of this is process-wide: a second call (a test hosting a second deployment in the same
/// process) installs nothing and shares the first call's metrics.
pub fn init(config: &Config) -> Result<Telemetry, TelemetryError> {
    // Held to the end, so two first calls at once cannot both install.
    let mut installed = INSTALLED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(metrics) = installed.as_ref() {
        return Ok(Telemetry {
            tracer: None,
            metrics: metrics.clone(),
        });
    }
    let filter =
        EnvFilter::try_new(&config.log.level).map_err(|e| TelemetryError::Filter(e.to_string()))?;

    let mut builder = SdkTracerProvider::builder();
    if let Some(endpoint) = &config.tracing.otlp.endpoint {
        use opentelemetry_otlp::WithExportConfig;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint.clone())
            .build()
            .map_err(|e| TelemetryError::Otlp(e.to_string()))?;
        builder = builder.with_batch_exporter(exporter);
    }
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(config.tracing.otlp.service_name.clone())
        .build();
    let tracer_provider = builder.with_resource(resource).build();
    let tracer = tracer_provider.tracer("arca");
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let exporting = config.tracing.otlp.endpoint.is_some();
    let otel = exporting.then(|| tracing_opentelemetry::layer().with_tracer(tracer));

    let registry = tracing_subscriber::registry().with(filter).with(otel);
    let result = match config.log.format {
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_span_list(false)
                    .with_writer(LogWriter),
            )
            .try_init(),
        LogFormat::Pretty => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(LogWriter)
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
            )
            .try_init(),
    };
    result.map_err(|_| TelemetryError::Init)?;
    std::thread::Builder::new()
        .name("log-flush".into())
        .spawn(|| {
            loop {
                std::thread::sleep(LOG_FLUSH);
                flush_logs();
            }
        })
        .map_err(|e| TelemetryError::Thread("log-flush", e))?;
    // A panic's message goes to stderr directly: the lines before it go first (unless the
    // panicking thread is the one writing them out: waiting for itself would hang).
    let report_panic = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if let Ok(mut pending) = PENDING_LOGS.try_lock() {
            write_out(&mut pending);
        }
        report_panic(info);
    }));
    OTEL.store(exporting, std::sync::atomic::Ordering::Relaxed);

    let metrics = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Suffix("duration_seconds".into()),
            &[
                0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0,
            ],
        )
        .map_err(|e| TelemetryError::Metrics(e.to_string()))?
        .install_recorder()
        .map_err(|e| TelemetryError::Metrics(e.to_string()))?;
    // Histogram samples wait in the recorder, one entry each, until an upkeep folds them into
    // the buckets. Scrapes of /metrics run one, but with nobody scraping the samples piled up
    // for the life of the process (RSS +12 MiB per 89,000 small GETs, measured).
    let upkeep = metrics.clone();
    std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || {
            loop {
                std::thread::sleep(METRICS_UPKEEP);
                upkeep.run_upkeep();
            }
        })
        .map_err(|e| TelemetryError::Thread("metrics-upkeep", e))?;
    *installed = Some(metrics.clone());
    Ok(Telemetry {
        tracer: Some(tracer_provider),
        metrics,
    })
}
