//! Endpoint addresses: where a service listens and where a client reaches it.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// One place a service can be reached: in this process, on a Unix socket, or over TCP.
///
/// Written in config as `mem://NAME`, `unix:///abs/path.sock` or `tcp://host:port`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Endpoint {
    /// A service hosted by this process, reached without any socket.
    Mem(String),
    /// A Unix domain socket path.
    Unix(PathBuf),
    /// A TCP `host:port`; the host may be a name, resolved when connecting.
    Tcp(String),
}

/// Why an endpoint string could not be parsed; the message completes "VALUE is …".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("not an endpoint: expected mem://NAME, unix:///PATH or tcp://HOST:PORT")]
    Scheme,
    #[error("not an endpoint: mem:// needs a name of letters, digits, '-' or '_'")]
    MemName,
    #[error("not an endpoint: unix:// needs an absolute path")]
    UnixPath,
    #[error("not an endpoint: tcp:// needs HOST:PORT with a port in 1..=65535")]
    TcpAddr,
}

impl Endpoint {
    /// Short scheme name, used in metrics labels and logs.
    pub fn scheme(&self) -> &'static str {
        match self {
            Endpoint::Mem(_) => "mem",
            Endpoint::Unix(_) => "unix",
            Endpoint::Tcp(_) => "tcp",
        }
    }
}

impl FromStr for Endpoint {
    type Err = EndpointError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(name) = s.strip_prefix("mem://") {
            let valid = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            return if valid {
                Ok(Endpoint::Mem(name.to_owned()))
            } else {
                Err(EndpointError::MemName)
            };
        }
        if let Some(path) = s.strip_prefix("unix://") {
            return if path.starts_with('/') && path.len() > 1 && !path.contains('\0') {
                Ok(Endpoint::Unix(PathBuf::from(path)))
            } else {
                Err(EndpointError::UnixPath)
            };
        }
        if let Some(addr) = s.strip_prefix("tcp://") {
            return if is_host_port(addr) {
                Ok(Endpoint::Tcp(addr.to_owned()))
            } else {
                Err(EndpointError::TcpAddr)
            };
        }
        Err(EndpointError::Scheme)
    }
}

/// `host:port` with a non-empty host (name, IPv4, or bracketed IPv6) and a port 1..=65535.
pub fn is_host_port(s: &str) -> bool {
    let Some((host, port)) = s.rsplit_once(':') else {
        return false;
    };
    let port_ok = matches!(port.parse::<u16>(), Ok(p) if p > 0);
    let host_ok = if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        inner.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
    };
    port_ok && host_ok
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Mem(name) => write!(f, "mem://{name}"),
            Endpoint::Unix(path) => write!(f, "unix://{}", path.display()),
            Endpoint::Tcp(addr) => write!(f, "tcp://{addr}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_all_three_schemes() {
        assert_eq!("mem://gateway".parse(), Ok(Endpoint::Mem("gateway".into())));
        assert_eq!(
            "unix:///run/arca/gw.sock".parse(),
            Ok(Endpoint::Unix("/run/arca/gw.sock".into()))
        );
        assert_eq!(
            "tcp://127.0.0.1:9142".parse(),
            Ok(Endpoint::Tcp("127.0.0.1:9142".into()))
        );
        assert_eq!(
            "tcp://[::1]:80".parse(),
            Ok(Endpoint::Tcp("[::1]:80".into()))
        );
    }

    #[test]
    fn rejects_nonsense() {
        for bad in [
            "gateway",
            "mem://",
            "mem://a/b",
            "unix://rel.sock",
            "tcp://host",
            "tcp://host:0",
            "tcp://:80",
            "tcp://host:99999",
            "http://x:1",
        ] {
            assert!(bad.parse::<Endpoint>().is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn display_round_trips() {
        for s in ["mem://x", "unix:///a/b.sock", "tcp://localhost:1"] {
            assert_eq!(
                s.parse::<Endpoint>().map(|e| e.to_string()),
                Ok(s.to_owned())
            );
        }
    }
}
