//! The public HTTP paths the edge must know about, declared once: the frontend mounts its
//! routes under these roots and the proxy decides from them which requests need no login and
//! which carry a capability token the access log must not keep whole.
//!
//! Every other path the frontend serves needs an authenticated caller, so a route added there
//! is safe by default; a route added here is public.

/// `/status.php`: clients read it before they log in.
pub const STATUS: &str = "/status.php";

/// OCS capabilities: oCIS answers them without authentication (nothing in them is about the
/// caller); every other OCS path stays authenticated.
pub const CAPABILITIES: [&str; 2] = [
    "/ocs/v1.php/cloud/capabilities",
    "/ocs/v2.php/cloud/capabilities",
];

/// Upload URLs (TUS `Location`), `/data/{token}`: the signed token in the path authorises by
/// itself, as in oCIS; clients may or may not send their credentials along.
pub const UPLOAD_URLS: &str = "/data";

/// Public links, `ROOT/{token}[/path]`: the token is the credential. A link's password comes
/// as HTTP Basic with any user name (as ownCloud clients send it), which is no login: the
/// proxy passes it on untouched and the sharing service checks and throttles it.
pub const PUBLIC_LINK_BROWSER: &str = "/s";
/// The WebDAV roots of public links (ownCloud's and oCIS's spelling).
pub const PUBLIC_LINK_DAV: [&str; 2] = ["/remote.php/dav/public-files", "/dav/public-files"];

/// The web app's page (`arca_web`): public, as a login page must be; everything it shows
/// after login comes from the authenticated APIs.
pub const WEB_APP: &str = "/";
/// The web app's static files, `ROOT/{content hash}/{file}`: public like the page that loads
/// them (they hold no data, only the app's code, styles and icons).
pub const WEB_ASSETS: &str = "/app";
/// The web app's session: `POST` logs in (user name and password as JSON), `GET` tells who
/// the session cookie belongs to, `DELETE` logs out. Answered by the proxy itself, before any
/// authentication: it is where a browser gets its credential.
pub const SESSION: &str = "/api/v1/session";
/// The web app's "Log in with …": `GET` sends the browser to the OIDC provider (the
/// authorization-code flow with PKCE), which sends it back to [`SESSION_OIDC_CALLBACK`]. Both
/// answered by the proxy, before any authentication.
pub const SESSION_OIDC: &str = "/api/v1/session/oidc";
pub const SESSION_OIDC_CALLBACK: &str = "/api/v1/session/oidc/callback";

/// Roots whose next path segment is a capability token: whoever knows it holds the upload or
/// the link.
pub const CAPABILITY_ROOTS: [&str; 4] = [
    UPLOAD_URLS,
    PUBLIC_LINK_BROWSER,
    PUBLIC_LINK_DAV[0],
    PUBLIC_LINK_DAV[1],
];

/// Whether anyone may reach `path` without logging in.
pub fn is_anonymous(path: &str) -> bool {
    path == STATUS
        || path == WEB_APP
        || path == SESSION
        || path == SESSION_OIDC
        || path == SESSION_OIDC_CALLBACK
        || CAPABILITIES.contains(&path)
        || path
            .strip_prefix(WEB_ASSETS)
            .is_some_and(|rest| rest.starts_with('/'))
        || capability_root(path).is_some()
}

/// The [`CAPABILITY_ROOTS`] entry `path` lies under (`ROOT/…`), if any.
pub fn capability_root(path: &str) -> Option<&'static str> {
    CAPABILITY_ROOTS.iter().copied().find(|root| {
        path.strip_prefix(root)
            .is_some_and(|rest| rest.starts_with('/'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_paths() {
        assert!(is_anonymous("/status.php"));
        assert!(is_anonymous("/ocs/v2.php/cloud/capabilities"));
        assert!(is_anonymous("/data/abc"));
        assert!(is_anonymous("/s/tok"));
        assert!(is_anonymous("/remote.php/dav/public-files/tok/a.txt"));
        assert!(is_anonymous("/dav/public-files/tok"));
        assert!(!is_anonymous("/ocs/v2.php/cloud/user"));
        assert!(!is_anonymous("/remote.php/webdav/"));
        assert!(!is_anonymous("/datafoo"));
        assert!(!is_anonymous("/s"));
        assert!(is_anonymous("/"));
        assert!(is_anonymous("/app/0123abcd/app.js"));
        assert!(is_anonymous("/api/v1/session"));
        assert!(!is_anonymous("/app"));
        assert!(!is_anonymous("/apps/x"));
        assert!(!is_anonymous("/api/v1/trash/restore"));
        assert_eq!(capability_root("/s/tok/x"), Some("/s"));
        assert_eq!(capability_root("/data"), None);
    }
}
