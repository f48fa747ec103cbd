//! WebDAV protocol pieces (RFC 4918 class 1 and 2) for `/remote.php/webdav/`,
//! `/remote.php/dav/files/{user}/` and `/dav/spaces/{space-id}/`.
//!
//! Pure: parsing and rendering only — no I/O, no async, no handlers. The handlers own the
//! HTTP plumbing and call into this module.
//!
//! - [`props`]: [`PropName`] and the live properties ([`LiveProp`]) in `DAV:` and `oc:`.
//! - [`xml`]: request bodies — [`parse_propfind`], [`parse_proppatch`], [`parse_lockinfo`];
//!   DTDs and entities refused ([`DavXmlError`]).
//! - [`multistatus`]: 207 bodies in the oCIS shape ([`Multistatus`]), lock XML, error bodies.
//! - [`headers`]: Depth, Overwrite, Destination, Timeout, Lock-Token.
//! - [`if_header`]: the If header, parsed and evaluated ([`IfHeader`]).
//! - [`paths`]: request path decoding with validation, href encoding.

pub mod escape;
pub mod headers;
pub mod if_header;
pub mod multistatus;
pub mod paths;
pub mod props;
pub mod xml;

pub use headers::{
    Depth, DestinationError, HeaderError, Timeout, lock_timeout, parse_destination,
    parse_lock_token, parse_overwrite,
};
pub use if_header::{ConditionKind, IfCondition, IfHeader, IfList};
pub use multistatus::{
    ActiveLock, Multistatus, Precondition, PropResponse, error_body, lock_response_body,
};
pub use paths::{DavPath, PathError, decode_path, encode_path, encode_segment, encoded_path};
pub use props::{DAV_NS, LiveProp, NC_NS, OC_NS, PropName, SABRE_NS};
pub use xml::{
    DavXmlError, LockInfo, LockScope, PropPatchOp, Propfind, parse_lockinfo, parse_propfind,
    parse_proppatch, text_content,
};
