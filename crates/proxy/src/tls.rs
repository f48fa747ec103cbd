//! How the public listener is served: TLS from `proxy.tls.*` and the connection deadlines of
//! `proxy.limits.*`, as transport [`ServeOptions`].

use arca_transport::ServeOptions;
use arca_transport::tls::server_config;

/// The public listener's options; an unreadable or invalid certificate or key is an error
/// naming its key, one line, for `arca` to report as a configuration error before binding.
pub fn edge_options(config: &arca_config::Config) -> Result<ServeOptions, String> {
    let proxy = &config.proxy;
    let tls = match &proxy.tls {
        None => None,
        Some(files) => Some(server_config(&files.cert, &files.key).map_err(|e| {
            let key = if e.is_cert() {
                "proxy.tls.cert"
            } else {
                "proxy.tls.key"
            };
            format!("{key}: {e}")
        })?),
    };
    Ok(ServeOptions {
        tls,
        header_timeout: Some(proxy.limits.header_timeout),
        idle_timeout: Some(proxy.limits.idle_timeout),
        max_header_bytes: usize::try_from(proxy.limits.max_header_bytes).ok(),
        public: true,
    })
}
