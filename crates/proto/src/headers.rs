//! Header names arca's own services exchange over HTTP (the identity, request id and trace
//! headers every call carries are arca_transport's `context`).

/// The committed node, as a provider's data path returns it to the frontend (base64 of the
/// protobuf `Node`).
pub const NODE: &str = "x-arca-node";

/// The client's address as the proxy saw it, for the frontend (public links throttle wrong
/// passwords per address). Only the proxy sets it: a client's own value is dropped.
pub const CLIENT_ADDR: &str = "x-arca-client-addr";
