//! Property names: `PropName` (namespace + local name) and the live properties arca serves.
//!
//! Names compare by content, so a name parsed from a request (owned strings) equals the
//! constant (`&'static str`) without allocating the constant.

use std::borrow::Cow;
use std::fmt;

/// The WebDAV namespace (RFC 4918 §21).
pub const DAV_NS: &str = "DAV:";
/// The ownCloud namespace, bound to `oc:` in every multistatus (CLIENT_PROTOCOL.md §4b).
pub const OC_NS: &str = "http://owncloud.org/ns";
/// The SabreDAV namespace, bound to `s:`; oCIS puts `s:exception`/`s:message` in error bodies.
pub const SABRE_NS: &str = "http://sabredav.org/ns";
/// The Nextcloud namespace (rclone declares it; arca serves nothing in it).
pub const NC_NS: &str = "http://nextcloud.org/ns";

/// A property name: `{ns}local` in Clark notation. `ns` is empty for a property in no
/// namespace (litmus `propnullns` sets one with `xmlns=""`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PropName {
    pub ns: Cow<'static, str>,
    pub local: Cow<'static, str>,
}

impl PropName {
    pub const CREATIONDATE: PropName = PropName::dav("creationdate");
    pub const DISPLAYNAME: PropName = PropName::dav("displayname");
    pub const GETCONTENTLENGTH: PropName = PropName::dav("getcontentlength");
    pub const GETCONTENTTYPE: PropName = PropName::dav("getcontenttype");
    pub const GETETAG: PropName = PropName::dav("getetag");
    pub const GETLASTMODIFIED: PropName = PropName::dav("getlastmodified");
    pub const RESOURCETYPE: PropName = PropName::dav("resourcetype");
    pub const LOCKDISCOVERY: PropName = PropName::dav("lockdiscovery");
    pub const SUPPORTEDLOCK: PropName = PropName::dav("supportedlock");
    pub const QUOTA_USED_BYTES: PropName = PropName::dav("quota-used-bytes");
    pub const QUOTA_AVAILABLE_BYTES: PropName = PropName::dav("quota-available-bytes");

    pub const OC_ID: PropName = PropName::oc("id");
    pub const OC_FILEID: PropName = PropName::oc("fileid");
    pub const OC_FILE_PARENT: PropName = PropName::oc("file-parent");
    pub const OC_SPACEID: PropName = PropName::oc("spaceid");
    pub const OC_NAME: PropName = PropName::oc("name");
    pub const OC_PERMISSIONS: PropName = PropName::oc("permissions");
    pub const OC_SIZE: PropName = PropName::oc("size");
    pub const OC_CHECKSUMS: PropName = PropName::oc("checksums");
    pub const OC_FAVORITE: PropName = PropName::oc("favorite");
    pub const OC_SHARE_TYPES: PropName = PropName::oc("share-types");
    pub const OC_OWNER_ID: PropName = PropName::oc("owner-id");
    pub const OC_OWNER_DISPLAY_NAME: PropName = PropName::oc("owner-display-name");
    pub const OC_PRIVATELINK: PropName = PropName::oc("privatelink");
    pub const OC_DOWNLOAD_URL: PropName = PropName::oc("downloadURL");
    pub const OC_DDC: PropName = PropName::oc("dDC");
    pub const OC_DATA_FINGERPRINT: PropName = PropName::oc("data-fingerprint");
    pub const OC_TAGS: PropName = PropName::oc("tags");
    /// arca's own: bytes in the space's trash and in its file versions, on a space root.
    pub const OC_TRASHBIN_SIZE: PropName = PropName::oc("trashbin-size");
    pub const OC_VERSIONS_SIZE: PropName = PropName::oc("versions-size");

    /// A name in the `DAV:` namespace.
    pub const fn dav(local: &'static str) -> PropName {
        PropName {
            ns: Cow::Borrowed(DAV_NS),
            local: Cow::Borrowed(local),
        }
    }

    /// A name in the ownCloud namespace.
    pub const fn oc(local: &'static str) -> PropName {
        PropName {
            ns: Cow::Borrowed(OC_NS),
            local: Cow::Borrowed(local),
        }
    }

    /// A name in the Nextcloud namespace.
    pub const fn nc(local: &'static str) -> PropName {
        PropName {
            ns: Cow::Borrowed(NC_NS),
            local: Cow::Borrowed(local),
        }
    }

    pub fn new(ns: impl Into<Cow<'static, str>>, local: impl Into<Cow<'static, str>>) -> PropName {
        PropName {
            ns: ns.into(),
            local: local.into(),
        }
    }

    pub fn is_dav(&self) -> bool {
        self.ns == DAV_NS
    }

    pub fn is_oc(&self) -> bool {
        self.ns == OC_NS
    }

    /// The live property this name denotes, if any.
    pub fn live(&self) -> Option<LiveProp> {
        LiveProp::from_name(self)
    }
}

impl fmt::Display for PropName {
    /// Clark notation, `{DAV:}getetag`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{{}}}{}", self.ns, self.local)
    }
}

/// The live (server-computed) properties arca knows, for dispatching on a `PropName`
/// with a `match` instead of string compares per entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LiveProp {
    CreationDate,
    DisplayName,
    GetContentLength,
    GetContentType,
    GetEtag,
    GetLastModified,
    ResourceType,
    LockDiscovery,
    SupportedLock,
    QuotaUsedBytes,
    QuotaAvailableBytes,
    OcId,
    OcFileId,
    OcFileParent,
    OcSpaceId,
    OcName,
    OcPermissions,
    OcSize,
    OcChecksums,
    OcFavorite,
    OcShareTypes,
    OcOwnerId,
    OcOwnerDisplayName,
    OcPrivateLink,
    OcDownloadUrl,
    OcDdc,
    OcDataFingerprint,
    OcTags,
    OcTrashbinSize,
    OcVersionsSize,
}

impl LiveProp {
    pub const ALL: [LiveProp; 30] = [
        LiveProp::CreationDate,
        LiveProp::DisplayName,
        LiveProp::GetContentLength,
        LiveProp::GetContentType,
        LiveProp::GetEtag,
        LiveProp::GetLastModified,
        LiveProp::ResourceType,
        LiveProp::LockDiscovery,
        LiveProp::SupportedLock,
        LiveProp::QuotaUsedBytes,
        LiveProp::QuotaAvailableBytes,
        LiveProp::OcId,
        LiveProp::OcFileId,
        LiveProp::OcFileParent,
        LiveProp::OcSpaceId,
        LiveProp::OcName,
        LiveProp::OcPermissions,
        LiveProp::OcSize,
        LiveProp::OcChecksums,
        LiveProp::OcFavorite,
        LiveProp::OcShareTypes,
        LiveProp::OcOwnerId,
        LiveProp::OcOwnerDisplayName,
        LiveProp::OcPrivateLink,
        LiveProp::OcDownloadUrl,
        LiveProp::OcDdc,
        LiveProp::OcDataFingerprint,
        LiveProp::OcTags,
        LiveProp::OcTrashbinSize,
        LiveProp::OcVersionsSize,
    ];

    pub const fn name(self) -> PropName {
        match self {
            LiveProp::CreationDate => PropName::CREATIONDATE,
            LiveProp::DisplayName => PropName::DISPLAYNAME,
            LiveProp::GetContentLength => PropName::GETCONTENTLENGTH,
            LiveProp::GetContentType => PropName::GETCONTENTTYPE,
            LiveProp::GetEtag => PropName::GETETAG,
            LiveProp::GetLastModified => PropName::GETLASTMODIFIED,
            LiveProp::ResourceType => PropName::RESOURCETYPE,
            LiveProp::LockDiscovery => PropName::LOCKDISCOVERY,
            LiveProp::SupportedLock => PropName::SUPPORTEDLOCK,
            LiveProp::QuotaUsedBytes => PropName::QUOTA_USED_BYTES,
            LiveProp::QuotaAvailableBytes => PropName::QUOTA_AVAILABLE_BYTES,
            LiveProp::OcId => PropName::OC_ID,
            LiveProp::OcFileId => PropName::OC_FILEID,
            LiveProp::OcFileParent => PropName::OC_FILE_PARENT,
            LiveProp::OcSpaceId => PropName::OC_SPACEID,
            LiveProp::OcName => PropName::OC_NAME,
            LiveProp::OcPermissions => PropName::OC_PERMISSIONS,
            LiveProp::OcSize => PropName::OC_SIZE,
            LiveProp::OcChecksums => PropName::OC_CHECKSUMS,
            LiveProp::OcFavorite => PropName::OC_FAVORITE,
            LiveProp::OcShareTypes => PropName::OC_SHARE_TYPES,
            LiveProp::OcOwnerId => PropName::OC_OWNER_ID,
            LiveProp::OcOwnerDisplayName => PropName::OC_OWNER_DISPLAY_NAME,
            LiveProp::OcPrivateLink => PropName::OC_PRIVATELINK,
            LiveProp::OcDownloadUrl => PropName::OC_DOWNLOAD_URL,
            LiveProp::OcDdc => PropName::OC_DDC,
            LiveProp::OcDataFingerprint => PropName::OC_DATA_FINGERPRINT,
            LiveProp::OcTags => PropName::OC_TAGS,
            LiveProp::OcTrashbinSize => PropName::OC_TRASHBIN_SIZE,
            LiveProp::OcVersionsSize => PropName::OC_VERSIONS_SIZE,
        }
    }

    pub fn from_name(name: &PropName) -> Option<LiveProp> {
        let local: &str = &name.local;
        if name.ns == DAV_NS {
            Some(match local {
                "creationdate" => LiveProp::CreationDate,
                "displayname" => LiveProp::DisplayName,
                "getcontentlength" => LiveProp::GetContentLength,
                "getcontenttype" => LiveProp::GetContentType,
                "getetag" => LiveProp::GetEtag,
                "getlastmodified" => LiveProp::GetLastModified,
                "resourcetype" => LiveProp::ResourceType,
                "lockdiscovery" => LiveProp::LockDiscovery,
                "supportedlock" => LiveProp::SupportedLock,
                "quota-used-bytes" => LiveProp::QuotaUsedBytes,
                "quota-available-bytes" => LiveProp::QuotaAvailableBytes,
                _ => return None,
            })
        } else if name.ns == OC_NS {
            Some(match local {
                "id" => LiveProp::OcId,
                "fileid" => LiveProp::OcFileId,
                "file-parent" => LiveProp::OcFileParent,
                "spaceid" => LiveProp::OcSpaceId,
                "name" => LiveProp::OcName,
                "permissions" => LiveProp::OcPermissions,
                "size" => LiveProp::OcSize,
                "checksums" => LiveProp::OcChecksums,
                "favorite" => LiveProp::OcFavorite,
                "share-types" => LiveProp::OcShareTypes,
                "owner-id" => LiveProp::OcOwnerId,
                "owner-display-name" => LiveProp::OcOwnerDisplayName,
                "privatelink" => LiveProp::OcPrivateLink,
                "downloadURL" => LiveProp::OcDownloadUrl,
                "dDC" => LiveProp::OcDdc,
                "data-fingerprint" => LiveProp::OcDataFingerprint,
                "tags" => LiveProp::OcTags,
                "trashbin-size" => LiveProp::OcTrashbinSize,
                "versions-size" => LiveProp::OcVersionsSize,
                _ => return None,
            })
        } else {
            None
        }
    }

    /// Whether PROPPATCH must refuse to set or remove it (403 with
    /// `DAV:cannot-modify-protected-property`, RFC 4918 §9.2). RFC 4918 §15 leaves
    /// `displayname` and `getcontenttype` writable; ownCloud clients PROPPATCH
    /// `oc:favorite` and `oc:tags`. Everything else is computed by the server.
    pub const fn is_protected(self) -> bool {
        !matches!(
            self,
            LiveProp::DisplayName
                | LiveProp::GetContentType
                | LiveProp::OcFavorite
                | LiveProp::OcTags
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_props_round_trip_through_names() {
        for p in LiveProp::ALL {
            assert_eq!(LiveProp::from_name(&p.name()), Some(p), "{p:?}");
        }
        assert_eq!(
            LiveProp::from_name(&PropName::new("urn:x", "getetag".to_string())),
            None
        );
        assert_eq!(LiveProp::from_name(&PropName::new(OC_NS, "audio")), None);
    }

    #[test]
    fn owned_and_borrowed_names_compare_equal() {
        let parsed = PropName::new(DAV_NS.to_string(), "getetag".to_string());
        assert_eq!(parsed, PropName::GETETAG);
        use std::collections::HashSet;
        let set: HashSet<PropName> = [PropName::GETETAG].into_iter().collect();
        assert!(set.contains(&parsed));
        assert_eq!(
            PropName::OC_DOWNLOAD_URL.to_string(),
            "{http://owncloud.org/ns}downloadURL"
        );
    }

    #[test]
    fn protection() {
        assert!(LiveProp::GetEtag.is_protected());
        assert!(LiveProp::OcId.is_protected());
        assert!(!LiveProp::OcFavorite.is_protected());
        assert!(!LiveProp::DisplayName.is_protected());
    }
}
