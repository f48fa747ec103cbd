//! arca-transport: endpoints (`mem://`, `unix://`, `tcp://`), listeners, serving, and the
//! per-request balanced client [`Channel`] that finds services through a [`Registry`].
//!
//! Every service endpoint is one HTTP server (HTTP/1.1 and HTTP/2 on the same listener) carrying
//! an axum [`Router`](axum::Router): gRPC services mount into it, HTTP routes sit beside them.
//! Because of that, one client type serves both gRPC stubs and the proxy's HTTP forwarding, and
//! the in-memory transport can hand a caller the server's router itself: no socket, no HTTP/2
//! framing, yet the same codecs, headers and layers as over a socket.
//!
//! Main types: [`Endpoint`], [`Listener`] and [`bind`], [`serve`], [`MemHub`], [`Channel`] and
//! [`Clients`], the [`Registry`] trait with [`MemoryRegistry`], [`StaticRegistry`],
//! [`NatsRegistry`] and [`DnsRegistry`], and
//! [`context`] for what travels with every call (trace context, identity, request id).

mod body;
mod channel;
pub mod context;
mod endpoint;
mod guard;
mod hub;
mod listener;
pub mod registry;
mod server;
pub mod tls;

pub use channel::{CallFailure, Channel, Clients, RetryPolicy, UNAVAILABLE_RETRY_AFTER_SECS};
pub use endpoint::{Endpoint, EndpointError, is_host_port};
pub use hub::MemHub;
pub use listener::{BindError, Listener, bind};
pub use registry::{
    DnsRegistry, EndpointSet, MemoryRegistry, NatsConnection, NatsKv, NatsRegistry, NatsSettings,
    Registry, RegistryError, StaticRegistry,
};
pub use server::{PeerAddr, serve, serve_with};
pub use tls::ServeOptions;

/// The error type every transport-level service returns; tonic and axum both accept it.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An error with its sources, `: `-joined: hyper's message with the h2 reason under it
/// ("http2 error" alone says nothing).
pub(crate) fn describe(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}
