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
}

/// Keeps exporters alive; [`Telemetry::shutdown`] flushes spans still buffered.
pub struct Telemetry {
    tracer: SdkTracerProvider,
    pub metrics: PrometheusHandle,
}

impl Telemetry {
    pub fn shutdown(self) {
        if let Err(e) = self.tracer.shutdown() {
            tracing::warn!(error = %e, "flushing traces failed");
        }
    }
}

/// Checks a `log.level` filter without installing anything, so a bad one is a config error
/// reported before the process starts.
pub fn check_log_level(level: &str) -> Result<(), String> {
    EnvFilter::try_new(level)
        .map(|_| ())
        .map_err(|e| format!("log.level: {level:?} is not a log filter: {e}"))
}

/// Installs the global subscriber (pretty or JSON logs on stderr), the W3C trace-context
/// propagator, an OpenTelemetry tracer (exporting over OTLP only when configured) and the
/// Prometheus recorder.
///
/// The tracer is installed even without an exporter: spans then still get trace ids, which
/// the request spans log, so one request can be followed across every hop in the logs alone.
pub fn init(config: &Config) -> Result<Telemetry, TelemetryError> {
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
    let otel = tracing_opentelemetry::layer().with_tracer(tracer);

    let registry = tracing_subscriber::registry().with(filter).with(otel);
    let result = match config.log.format {
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_span_list(false)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
        LogFormat::Pretty => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
            )
            .try_init(),
    };
    result.map_err(|_| TelemetryError::Init)?;

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
    Ok(Telemetry {
        tracer: tracer_provider,
        metrics,
    })
}
