//! Binding endpoints. Only the runtime binds; services receive bound listeners.

use std::io;
use std::path::{Path, PathBuf};

use tokio::net::{TcpListener, UnixListener, UnixStream};

use crate::{Endpoint, MemHub};

/// A bound endpoint, ready to be handed to [`serve`](crate::serve).
pub enum Listener {
    Tcp(TcpListener),
    /// The socket path is kept so the file can be removed when serving ends.
    Unix(UnixListener, PathBuf),
    /// A name claimed in the hub; nothing is reachable until it is served.
    Mem(MemHub, String),
}

/// Why an endpoint could not be bound; always names the endpoint.
#[derive(Debug, thiserror::Error)]
#[error("bind {endpoint}: {source}")]
pub struct BindError {
    pub endpoint: Endpoint,
    #[source]
    pub source: io::Error,
}

impl Listener {
    /// The address actually bound (a `tcp://…:0` endpoint reports the port it got).
    pub fn local_endpoint(&self) -> Endpoint {
        match self {
            Listener::Tcp(l) => match l.local_addr() {
                Ok(addr) => Endpoint::Tcp(addr.to_string()),
                Err(_) => Endpoint::Tcp("unknown:0".into()),
            },
            Listener::Unix(_, path) => Endpoint::Unix(path.clone()),
            Listener::Mem(_, name) => Endpoint::Mem(name.clone()),
        }
    }
}

/// Binds `endpoint`. A Unix socket file left behind by a dead process is replaced; one that
/// still answers is an "address in use" error, as it would be for TCP.
pub async fn bind(endpoint: &Endpoint, hub: &MemHub) -> Result<Listener, BindError> {
    let err = |source| BindError {
        endpoint: endpoint.clone(),
        source,
    };
    match endpoint {
        Endpoint::Mem(name) => {
            if hub.reserve(name) {
                Ok(Listener::Mem(hub.clone(), name.clone()))
            } else {
                Err(err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "name already served in this process",
                )))
            }
        }
        Endpoint::Tcp(addr) => {
            let listener = TcpListener::bind(addr.as_str()).await.map_err(err)?;
            Ok(Listener::Tcp(listener))
        }
        Endpoint::Unix(path) => {
            remove_stale_socket(path).await.map_err(err)?;
            let listener = UnixListener::bind(path).map_err(err)?;
            Ok(Listener::Unix(listener, path.clone()))
        }
    }
}

async fn remove_stale_socket(path: &Path) -> io::Result<()> {
    match tokio::fs::symlink_metadata(path).await {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(_) => match UnixStream::connect(path).await {
            Ok(_) => Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                "another process is listening on this socket",
            )),
            Err(_) => tokio::fs::remove_file(path).await,
        },
    }
}
