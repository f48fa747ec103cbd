//! Header names arca's own services exchange over HTTP (the identity, request id and trace
//! headers every call carries are arca_transport's `context`).

/// The committed node, as a provider's data path returns it to the frontend (base64 of the
/// protobuf `Node`).
pub const NODE: &str = "x-arca-node";

/// The client's address as the proxy saw it, for the frontend (public links throttle wrong
/// passwords per address). Only the proxy sets it: a client's own value is dropped.
pub const CLIENT_ADDR: &str = "x-arca-client-addr";

/// What a page's script sends to say it is one (`X-Requested-With: XMLHttpRequest`): a 401 to
/// it carries no Basic challenge, which would make the browser show its own password prompt
/// over the page (the proxy for logins, the frontend for public links).
pub const REQUESTED_WITH: &str = "x-requested-with";

/// Whether `headers` say the request comes from a page's script ([`REQUESTED_WITH`]).
pub fn from_script(headers: &http::HeaderMap) -> bool {
    headers
        .get(REQUESTED_WITH)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"XMLHttpRequest"))
}
