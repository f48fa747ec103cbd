//! Request bodies: PROPFIND, PROPPATCH and LOCK, parsed namespace-aware with quick-xml.
//!
//! Hardening (issue 3 §6): a `<!DOCTYPE` and any entity reference other than the five
//! predefined ones are refused with [`DavXmlError::Dtd`] and never expanded; malformed XML,
//! invalid UTF-8 and the wrong root element are errors; every error is one line and means 400.
//! The body size limit is the caller's (it answers 413 before parsing).
//!
//! Unknown elements are ignored where RFC 4918 §17 asks for it (extensibility), and stray
//! character data between elements is ignored: owncloudcmd 2.11 sends a stray `M` between
//! `</d:prop>` and `</d:propfind>` (CLIENT_PROTOCOL.md §4a).
//!
//! Property values (PROPPATCH `set`, LOCK `owner`) are kept as XML: the inner content of
//! the element, *re-serialized* so that it stands on its own. Every top-level child element
//! carries its namespace as `xmlns="…"`, prefixed attributes get their `xmlns:p` declared on
//! the element, text is re-escaped and character references are resolved. A value whose
//! children used prefixes declared on ancestors in the request (litmus `propvalnspace`)
//! therefore still serializes as well-formed XML wherever it is embedded later.

use std::borrow::Cow;
use std::collections::HashSet;

use quick_xml::events::{BytesStart, Event};
use quick_xml::name::{QName, ResolveResult};
use quick_xml::reader::NsReader;

use super::escape::{
    UnescapeError, char_ref, escape_attr, escape_text, is_xml_char, one_line, predefined_entity,
    unescape,
};
use super::props::{DAV_NS, OC_NS, PropName, SABRE_NS};

/// Elements deeper than this are refused: no legitimate WebDAV body comes close, and it
/// bounds the per-element bookkeeping of a hostile one.
const MAX_DEPTH: usize = 256;
/// Attributes per element; WebDAV bodies carry a handful at most.
const MAX_ATTRIBUTES: usize = 64;

/// Why a request body was refused. Every variant means `400 Bad Request`; `Display` is one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DavXmlError {
    #[error("malformed XML: {0}")]
    Malformed(String),
    #[error("XML document type declarations and entity references are not allowed")]
    Dtd,
    #[error("request body is not valid UTF-8")]
    InvalidUtf8,
    #[error("unexpected root element {found}, expected {expected}")]
    WrongRoot {
        expected: &'static str,
        found: String,
    },
    #[error("invalid WebDAV request body: {0}")]
    Invalid(String),
}

fn malformed(msg: impl AsRef<str>) -> DavXmlError {
    DavXmlError::Malformed(one_line(msg.as_ref(), 200))
}

impl From<UnescapeError> for DavXmlError {
    fn from(e: UnescapeError) -> Self {
        match e {
            UnescapeError::Entity(_) => DavXmlError::Dtd,
            UnescapeError::Malformed(m) => malformed(m),
        }
    }
}

/// A parsed PROPFIND body (RFC 4918 §14.20).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Propfind {
    /// `<allprop/>`, optionally with `<include>`; also what an empty body means (§9.1).
    AllProp { include: Vec<PropName> },
    /// `<propname/>`: names only, no values.
    PropName,
    /// `<prop>`: these properties, in request order, without duplicates.
    Prop(Vec<PropName>),
}

/// One PROPPATCH instruction, in document order (RFC 4918 §9.2: processed in order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PropPatchOp {
    /// `value` is the property element's inner XML, re-serialized self-contained (see module doc).
    Set {
        name: PropName,
        value: String,
    },
    Remove {
        name: PropName,
    },
}

impl PropPatchOp {
    pub fn name(&self) -> &PropName {
        match self {
            PropPatchOp::Set { name, .. } | PropPatchOp::Remove { name } => name,
        }
    }
}

/// `DAV:exclusive` or `DAV:shared`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockScope {
    Exclusive,
    Shared,
}

/// A parsed LOCK body (RFC 4918 §14.11). The lock type is always write (others are refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    pub scope: LockScope,
    /// The inner XML of `<owner>`, re-serialized (see module doc); `None` when absent or empty.
    pub owner: Option<String>,
}

/// Parses a PROPFIND body. An empty (or all-whitespace) body is `allprop` (RFC 4918 §9.1).
pub fn parse_propfind(body: &[u8]) -> Result<Propfind, DavXmlError> {
    if is_blank(body) {
        return Ok(Propfind::AllProp {
            include: Vec::new(),
        });
    }
    let mut p = Parser::new(body)?;
    p.expect_root("propfind", "DAV:propfind")?;
    let mut result: Option<Propfind> = None;
    let mut include = Vec::new();
    loop {
        match p.next()? {
            Node::Open(el) => {
                let kind = if el.name.ns == DAV_NS {
                    el.name.local.as_ref()
                } else {
                    ""
                };
                let found = match kind {
                    "allprop" => {
                        p.skip()?;
                        Propfind::AllProp {
                            include: Vec::new(),
                        }
                    }
                    "propname" => {
                        p.skip()?;
                        Propfind::PropName
                    }
                    "prop" => Propfind::Prop(p.names()?),
                    "include" => {
                        include.extend(p.names()?);
                        continue;
                    }
                    // RFC 4918 §17: unknown elements are ignored (litmus `propextended`).
                    _ => {
                        p.skip()?;
                        continue;
                    }
                };
                if result.is_some() {
                    return Err(DavXmlError::Invalid(
                        "propfind must contain only one of allprop, propname or prop".into(),
                    ));
                }
                result = Some(found);
            }
            // Stray character data (owncloudcmd's `M`) is not an element: ignore it.
            Node::Text(_) => {}
            Node::Close => break,
        }
    }
    p.finish()?;
    Ok(match result {
        // `<propfind/>` with nothing we know inside: treat like an empty body.
        None | Some(Propfind::AllProp { .. }) => {
            dedup(&mut include);
            Propfind::AllProp { include }
        }
        Some(other) => other,
    })
}

/// An element of a request body kept whole: its resolved name, its child elements and its
/// text (references resolved, pieces joined).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XmlTree {
    pub name: PropName,
    pub children: Vec<XmlTree>,
    pub text: String,
}

impl XmlTree {
    /// The first child named `DAV:<local>`.
    pub fn dav_child(&self, local: &str) -> Option<&XmlTree> {
        self.children
            .iter()
            .find(|c| c.name.ns == DAV_NS && c.name.local == local)
    }
}

/// The most elements a [`parse_tree`] body may have.
const MAX_TREE_ELEMENTS: usize = 4096;

/// Parses a body whose root must be `DAV:<root>` (e.g. RFC 5323's `searchrequest`) into a
/// tree, with the same hardening as the other bodies and at most [`MAX_TREE_ELEMENTS`]
/// elements.
pub fn parse_tree(
    body: &[u8],
    root: &'static str,
    expected: &'static str,
) -> Result<XmlTree, DavXmlError> {
    fn fill(p: &mut Parser<'_>, into: &mut XmlTree, budget: &mut usize) -> Result<(), DavXmlError> {
        loop {
            match p.next()? {
                Node::Open(el) => {
                    *budget = budget
                        .checked_sub(1)
                        .ok_or_else(|| DavXmlError::Invalid("too many elements".into()))?;
                    let mut child = XmlTree {
                        name: el.name,
                        children: Vec::new(),
                        text: String::new(),
                    };
                    fill(p, &mut child, budget)?;
                    into.children.push(child);
                }
                Node::Text(t) => into.text.push_str(&t),
                Node::Close => return Ok(()),
            }
        }
    }
    let mut p = Parser::new(body)?;
    p.expect_root(root, expected)?;
    let mut tree = XmlTree {
        name: PropName {
            ns: Cow::Borrowed(DAV_NS),
            local: Cow::Borrowed(root),
        },
        children: Vec::new(),
        text: String::new(),
    };
    let mut budget = MAX_TREE_ELEMENTS;
    fill(&mut p, &mut tree, &mut budget)?;
    p.finish()?;
    Ok(tree)
}

/// Parses a PROPPATCH body into its instructions, in document order.
pub fn parse_proppatch(body: &[u8]) -> Result<Vec<PropPatchOp>, DavXmlError> {
    if is_blank(body) {
        return Err(DavXmlError::Invalid(
            "PROPPATCH needs a propertyupdate body".into(),
        ));
    }
    let mut p = Parser::new(body)?;
    p.expect_root("propertyupdate", "DAV:propertyupdate")?;
    let mut ops = Vec::new();
    loop {
        match p.next()? {
            Node::Open(el) => {
                let set = match (el.name.ns == DAV_NS, el.name.local.as_ref()) {
                    (true, "set") => true,
                    (true, "remove") => false,
                    _ => {
                        p.skip()?;
                        continue;
                    }
                };
                // Children of set/remove: DAV:prop (others ignored).
                loop {
                    match p.next()? {
                        Node::Open(el) if el.name.ns == DAV_NS && el.name.local == "prop" => loop {
                            match p.next()? {
                                Node::Open(prop) => {
                                    let name = prop.name;
                                    if set {
                                        let value = p.capture_inner()?;
                                        ops.push(PropPatchOp::Set { name, value });
                                    } else {
                                        p.skip()?;
                                        ops.push(PropPatchOp::Remove { name });
                                    }
                                }
                                Node::Text(_) => {}
                                Node::Close => break,
                            }
                        },
                        Node::Open(_) => p.skip()?,
                        Node::Text(_) => {}
                        Node::Close => break,
                    }
                }
            }
            Node::Text(_) => {}
            Node::Close => break,
        }
    }
    p.finish()?;
    if ops.is_empty() {
        return Err(DavXmlError::Invalid(
            "propertyupdate contains no property to set or remove".into(),
        ));
    }
    Ok(ops)
}

/// Parses a LOCK body. An empty body is a refresh (RFC 4918 §9.10.2) and gives `None`.
pub fn parse_lockinfo(body: &[u8]) -> Result<Option<LockInfo>, DavXmlError> {
    if is_blank(body) {
        return Ok(None);
    }
    let mut p = Parser::new(body)?;
    p.expect_root("lockinfo", "DAV:lockinfo")?;
    let mut scope = None;
    let mut owner = None;
    loop {
        match p.next()? {
            Node::Open(el) if el.name.ns == DAV_NS => match el.name.local.as_ref() {
                "lockscope" => loop {
                    match p.next()? {
                        Node::Open(s) => {
                            if s.name.ns == DAV_NS && s.name.local == "exclusive" {
                                scope = Some(LockScope::Exclusive);
                            } else if s.name.ns == DAV_NS && s.name.local == "shared" {
                                scope = Some(LockScope::Shared);
                            }
                            p.skip()?;
                        }
                        Node::Text(_) => {}
                        Node::Close => break,
                    }
                },
                "locktype" => loop {
                    match p.next()? {
                        Node::Open(t) => {
                            if !(t.name.ns == DAV_NS && t.name.local == "write") {
                                return Err(DavXmlError::Invalid(format!(
                                    "unsupported lock type {}",
                                    one_line(&t.name.to_string(), 100)
                                )));
                            }
                            p.skip()?;
                        }
                        Node::Text(_) => {}
                        Node::Close => break,
                    }
                },
                "owner" => {
                    let xml = p.capture_inner()?;
                    owner = (!xml.trim().is_empty()).then_some(xml);
                }
                _ => p.skip()?,
            },
            Node::Open(_) => p.skip()?,
            Node::Text(_) => {}
            Node::Close => break,
        }
    }
    p.finish()?;
    let scope = scope.ok_or_else(|| {
        DavXmlError::Invalid("lockinfo needs a lockscope of exclusive or shared".into())
    })?;
    Ok(Some(LockInfo { scope, owner }))
}

/// The text of a property value produced by this parser (e.g. `1` for
/// `<oc:favorite>1</oc:favorite>`), or `None` when the value contains elements.
pub fn text_content(value: &str) -> Option<String> {
    if value.contains('<') {
        return None;
    }
    unescape(value).ok().map(Cow::into_owned)
}

fn is_blank(body: &[u8]) -> bool {
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    body.iter()
        .all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
}

/// Drops repeated names, keeping the first (hashing: a hostile body may list many).
fn dedup(names: &mut Vec<PropName>) {
    let mut seen = HashSet::with_capacity(names.len());
    names.retain(|n| seen.insert(n.clone()));
}

/// An element start, with its name resolved.
struct Element<'i> {
    name: PropName,
    start: BytesStart<'i>,
}

enum Node<'i> {
    Open(Element<'i>),
    Close,
    Text(Cow<'i, str>),
}

/// A strict pull parser over quick-xml's namespace-aware reader: it tracks depth, refuses
/// DTDs and unknown entities, validates names and attributes, and turns `<a/>` into
/// `Open` + `Close` so consumers see one shape.
struct Parser<'i> {
    reader: NsReader<&'i [u8]>,
    depth: usize,
    /// The last `Open` came from an empty element: the next node is its `Close`.
    pending_close: bool,
    root_seen: bool,
    /// The body is plain ASCII (any ASCII-compatible declared encoding then reads the same).
    ascii: bool,
}

impl<'i> Parser<'i> {
    fn new(body: &'i [u8]) -> Result<Self, DavXmlError> {
        let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
        let text = std::str::from_utf8(body).map_err(|_| DavXmlError::InvalidUtf8)?;
        Ok(Parser {
            reader: NsReader::from_str(text),
            depth: 0,
            pending_close: false,
            root_seen: false,
            ascii: body.is_ascii(),
        })
    }

    /// Reads the root element and checks it is `DAV:<local>`.
    fn expect_root(&mut self, local: &str, expected: &'static str) -> Result<(), DavXmlError> {
        match self.next_raw()? {
            Some(Node::Open(el)) if el.name.ns == DAV_NS && el.name.local == local => Ok(()),
            Some(Node::Open(el)) => Err(DavXmlError::WrongRoot {
                expected,
                found: one_line(&el.name.to_string(), 120),
            }),
            _ => Err(malformed("no root element")),
        }
    }

    /// The next node inside the root element; the root's own end is the final `Close`.
    fn next(&mut self) -> Result<Node<'i>, DavXmlError> {
        match self.next_raw()? {
            Some(node) => Ok(node),
            None => Err(malformed("unexpected end of document")),
        }
    }

    /// After the root closed: only whitespace, comments and PIs may follow.
    fn finish(&mut self) -> Result<(), DavXmlError> {
        match self.next_raw()? {
            None => Ok(()),
            Some(_) => Err(malformed("content after the root element")),
        }
    }

    /// Consumes the rest of the element whose `Open` was just returned.
    fn skip(&mut self) -> Result<(), DavXmlError> {
        let base = self.depth;
        loop {
            if let Node::Close = self.next()?
                && self.depth < base
            {
                return Ok(());
            }
        }
    }

    /// The names of the child elements of the element just opened (a `DAV:prop` or
    /// `DAV:include`), their content skipped, duplicates dropped.
    fn names(&mut self) -> Result<Vec<PropName>, DavXmlError> {
        let mut names = Vec::new();
        loop {
            match self.next()? {
                Node::Open(el) => {
                    self.skip()?;
                    names.push(el.name);
                }
                Node::Text(_) => {}
                Node::Close => {
                    dedup(&mut names);
                    return Ok(names);
                }
            }
        }
    }

    /// Re-serializes the content of the element just opened, up to its end (consumed).
    fn capture_inner(&mut self) -> Result<String, DavXmlError> {
        let base = self.depth;
        let mut w = InnerWriter::default();
        loop {
            match self.next()? {
                Node::Open(el) => w.open(&el, self.reader.resolver())?,
                Node::Close if self.depth < base => return Ok(w.out),
                Node::Close => w.close(),
                Node::Text(t) => w.text(&t),
            }
        }
    }

    /// `None` at the end of the document.
    fn next_raw(&mut self) -> Result<Option<Node<'i>>, DavXmlError> {
        if self.pending_close {
            self.pending_close = false;
            self.depth = self.depth.saturating_sub(1);
            return Ok(Some(Node::Close));
        }
        loop {
            let (ns, event) = match self.reader.read_resolved_event() {
                Ok((res, ev)) => {
                    let ns = match (&ev, res) {
                        (Event::Start(_) | Event::Empty(_), ResolveResult::Bound(ns)) => {
                            Some(intern_ns(ns.0)?)
                        }
                        (Event::Start(_) | Event::Empty(_), ResolveResult::Unbound) => {
                            Some(Cow::Borrowed(""))
                        }
                        (Event::Start(_) | Event::Empty(_), ResolveResult::Unknown(p)) => {
                            return Err(malformed(format!("unknown namespace prefix '{p}'")));
                        }
                        _ => None,
                    };
                    (ns, ev)
                }
                Err(e) => {
                    return Err(malformed(format!(
                        "{e} (at byte {})",
                        self.reader.error_position()
                    )));
                }
            };
            match event {
                Event::Start(start) => return self.open(start, ns, false).map(Some),
                Event::Empty(start) => return self.open(start, ns, true).map(Some),
                Event::End(_) => {
                    self.depth = self.depth.saturating_sub(1);
                    return Ok(Some(Node::Close));
                }
                Event::Text(t) => {
                    let s = t.xml10_content();
                    if let Some(text) = self.text(s)? {
                        return Ok(Some(Node::Text(text)));
                    }
                }
                Event::CData(c) => {
                    let s = c.xml10_content();
                    if self.depth == 0 {
                        return Err(malformed("CDATA outside the root element"));
                    }
                    check_chars(&s)?;
                    return Ok(Some(Node::Text(s)));
                }
                Event::GeneralRef(r) => {
                    let name = r.into_inner();
                    let text: Cow<'i, str> = if name.starts_with('#') {
                        Cow::Owned(char_ref(&name)?.to_string())
                    } else if let Some(rep) = predefined_entity(&name) {
                        Cow::Borrowed(rep)
                    } else {
                        // Never expanded: there is no DTD we would take a definition from.
                        return Err(DavXmlError::Dtd);
                    };
                    if self.depth == 0 {
                        return Err(malformed("reference outside the root element"));
                    }
                    return Ok(Some(Node::Text(text)));
                }
                Event::DocType(_) => return Err(DavXmlError::Dtd),
                Event::Decl(decl) => {
                    if let Some(Ok(enc)) = decl.encoding() {
                        let enc = enc.to_ascii_lowercase();
                        // We parse UTF-8 only; a body in another declared encoding is
                        // still fine while it is plain ASCII.
                        if !matches!(enc.as_str(), "utf-8" | "utf8" | "us-ascii" | "ascii")
                            && !self.ascii
                        {
                            return Err(DavXmlError::Invalid(format!(
                                "unsupported XML encoding '{}', send UTF-8",
                                one_line(&enc, 40)
                            )));
                        }
                    }
                }
                Event::Comment(_) | Event::PI(_) => {}
                Event::Eof => {
                    if self.depth > 0 {
                        return Err(malformed("unexpected end of document inside an element"));
                    }
                    return Ok(None);
                }
            }
        }
    }

    fn open(
        &mut self,
        start: BytesStart<'i>,
        ns: Option<Cow<'static, str>>,
        empty: bool,
    ) -> Result<Node<'i>, DavXmlError> {
        if self.depth == 0 && self.root_seen {
            return Err(malformed("content after the root element"));
        }
        self.root_seen = true;
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(malformed("elements nested too deeply"));
        }
        check_qname(start.name().into_inner())?;
        for (i, attr) in start.attributes().enumerate() {
            if i == MAX_ATTRIBUTES {
                return Err(malformed("too many attributes on one element"));
            }
            let attr = attr.map_err(|e| malformed(e.to_string()))?;
            let key = attr.key.into_inner();
            check_qname(key)?;
            // Refuses `&xxe;` in attribute values too, and characters XML does not allow.
            let value = unescape(&attr.value)?;
            check_chars(&value)?;
            if let Some(prefix) = key.strip_prefix("xmlns:") {
                // XML Namespaces 1.0 §3 forbids undeclaring a prefix (litmus
                // `propfind_invalid2` sends `xmlns:bar=""` and expects 400).
                if value.is_empty() {
                    return Err(malformed(format!(
                        "empty namespace declaration for prefix '{prefix}'"
                    )));
                }
            } else if key.contains(':')
                && !key.starts_with("xml:")
                && let (ResolveResult::Unknown(p), _) =
                    self.reader.resolver().resolve_attribute(QName(key))
            {
                return Err(malformed(format!("unknown namespace prefix '{p}'")));
            }
        }
        let local = start.local_name().into_inner().to_string();
        let ns = ns.unwrap_or(Cow::Borrowed(""));
        self.pending_close = empty;
        Ok(Node::Open(Element {
            name: PropName::new(ns, local),
            start,
        }))
    }

    /// Character data: `None` for ignorable whitespace outside the root.
    fn text(&mut self, s: Cow<'i, str>) -> Result<Option<Cow<'i, str>>, DavXmlError> {
        if self.depth == 0 {
            if s.chars().all(|c| matches!(c, ' ' | '\t' | '\r' | '\n')) {
                return Ok(None);
            }
            return Err(malformed("text outside the root element"));
        }
        check_chars(&s)?;
        Ok(Some(s))
    }
}

/// Known namespaces become `&'static` (no allocation per property name); the resolver hands
/// out the raw attribute value, so references in it are resolved here.
fn intern_ns(raw: &str) -> Result<Cow<'static, str>, DavXmlError> {
    Ok(match raw {
        DAV_NS => Cow::Borrowed(DAV_NS),
        OC_NS => Cow::Borrowed(OC_NS),
        SABRE_NS => Cow::Borrowed(SABRE_NS),
        other => Cow::Owned(unescape(other)?.into_owned()),
    })
}

fn check_chars(s: &str) -> Result<(), DavXmlError> {
    // Fast path: printable ASCII and common whitespace.
    if s.bytes()
        .all(|b| (0x20..0x7f).contains(&b) || matches!(b, b'\t' | b'\n' | b'\r'))
    {
        return Ok(());
    }
    match s.chars().find(|&c| !is_xml_char(c)) {
        Some(c) => Err(malformed(format!(
            "character U+{:04X} is not allowed in XML",
            c as u32
        ))),
        None => Ok(()),
    }
}

/// `prefix:local` or `local`, each an XML Name without colons. quick-xml takes a tag name
/// to be whatever precedes whitespace, `/` or `>`; we only let real names through so that
/// they can be written back verbatim.
fn check_qname(qname: &str) -> Result<(), DavXmlError> {
    let ok = match qname.split_once(':') {
        Some((prefix, local)) => is_ncname(prefix) && is_ncname(local),
        None => is_ncname(qname),
    };
    if ok {
        Ok(())
    } else {
        Err(malformed(format!(
            "invalid XML name '{}'",
            one_line(qname, 60)
        )))
    }
}

fn is_ncname(s: &str) -> bool {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' || (!c.is_ascii() && is_xml_char(c)) => {}
        _ => return false,
    }
    chars.all(|c| {
        c.is_ascii_alphanumeric()
            || matches!(c, '-' | '.' | '_')
            || (!c.is_ascii() && is_xml_char(c))
    })
}

/// Writes the content of a property element back out as self-contained XML.
#[derive(Default)]
struct InnerWriter {
    out: String,
    /// Per open element: its namespace (the default namespace in force in the output).
    defaults: Vec<Cow<'static, str>>,
    /// Per open element: its local name, for the end tag.
    names: Vec<String>,
    /// Prefix declarations written so far: (element level, prefix, namespace).
    decls: Vec<(usize, String, String)>,
    /// `<name attrs` is written but not yet `>`: an immediate end turns it into `/>`.
    tag_open: bool,
}

impl InnerWriter {
    fn open(
        &mut self,
        el: &Element<'_>,
        resolver: &quick_xml::name::NamespaceResolver,
    ) -> Result<(), DavXmlError> {
        self.close_start_tag();
        let level = self.defaults.len() + 1;
        self.out.push('<');
        self.out.push_str(&el.name.local);
        // Element names lose their prefix: the namespace goes in a default declaration,
        // written on every top-level element (we cannot know what the embedding context
        // binds) and wherever it changes.
        if self.defaults.last() != Some(&el.name.ns) {
            self.out.push_str(" xmlns=\"");
            escape_attr(&el.name.ns, &mut self.out);
            self.out.push('"');
        }
        for attr in el.start.attributes() {
            let attr = attr.map_err(|e| malformed(e.to_string()))?;
            let key = attr.key.into_inner();
            if key == "xmlns" {
                continue;
            }
            // Literal whitespace in attribute values is normalized to spaces (XML 1.0 §3.3.3).
            let raw = attr.value.replace(['\t', '\n', '\r'], " ");
            let value = unescape(&raw)?;
            if let Some(prefix) = key.strip_prefix("xmlns:") {
                // Kept so that QNames in content (e.g. `xsi:type="p:t"`) still resolve.
                self.declare(level, prefix, &value);
                continue;
            }
            if let Some((prefix, _)) = key.split_once(':')
                && prefix != "xml"
                && let (ResolveResult::Bound(ns), _) = resolver.resolve_attribute(QName(key))
            {
                let ns = unescape(ns.0)?.into_owned();
                self.declare(level, prefix, &ns);
            }
            self.out.push(' ');
            self.out.push_str(key);
            self.out.push_str("=\"");
            escape_attr(&value, &mut self.out);
            self.out.push('"');
        }
        self.defaults.push(el.name.ns.clone());
        self.names.push(el.name.local.to_string());
        self.tag_open = true;
        Ok(())
    }

    /// Writes `xmlns:prefix="ns"` on the current element unless already in force.
    fn declare(&mut self, level: usize, prefix: &str, ns: &str) {
        let in_force = self
            .decls
            .iter()
            .rev()
            .find(|(_, p, _)| p == prefix)
            .is_some_and(|(_, _, n)| n == ns);
        let here = self
            .decls
            .iter()
            .any(|(l, p, _)| *l == level && p == prefix);
        if in_force || here {
            return;
        }
        self.out.push_str(" xmlns:");
        self.out.push_str(prefix);
        self.out.push_str("=\"");
        escape_attr(ns, &mut self.out);
        self.out.push('"');
        self.decls.push((level, prefix.to_string(), ns.to_string()));
    }

    fn close(&mut self) {
        let level = self.defaults.len();
        let name = self.names.pop().unwrap_or_default();
        if self.tag_open {
            self.out.push_str("/>");
            self.tag_open = false;
        } else {
            self.out.push_str("</");
            self.out.push_str(&name);
            self.out.push('>');
        }
        self.defaults.pop();
        self.decls.retain(|(l, _, _)| *l < level);
    }

    fn text(&mut self, t: &str) {
        self.close_start_tag();
        escape_text(t, &mut self.out);
    }

    fn close_start_tag(&mut self) {
        if self.tag_open {
            self.out.push('>');
            self.tag_open = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oc(local: &'static str) -> PropName {
        PropName::oc(local)
    }

    /// The exact body owncloudcmd 2.11 sends for its discovery PROPFIND (CLIENT_PROTOCOL.md §4a),
    /// stray `M` included.
    const OWNCLOUDCMD: &str = "<?xml version=\"1.0\" encoding=\"utf-8\"?><d:propfind xmlns:d=\"DAV:\"><d:prop>\n <d:resourcetype/><d:getlastmodified/><d:getcontentlength/><d:getetag/>\n <id xmlns=\"http://owncloud.org/ns\"/><downloadURL xmlns=\"http://owncloud.org/ns\"/>\n <dDC xmlns=\"http://owncloud.org/ns\"/><permissions xmlns=\"http://owncloud.org/ns\"/>\n <checksums xmlns=\"http://owncloud.org/ns\"/><data-fingerprint xmlns=\"http://owncloud.org/ns\"/>\n <share-types xmlns=\"http://owncloud.org/ns\"/></d:prop>M</d:propfind>";

    /// rclone's PROPFIND (CLIENT_PROTOCOL.md §4c).
    const RCLONE: &str = "<?xml version=\"1.0\"?>\n<d:propfind  xmlns:d=\"DAV:\" xmlns:oc=\"http://owncloud.org/ns\" xmlns:nc=\"http://nextcloud.org/ns\">\n <d:prop><d:displayname /><d:getlastmodified /><d:getcontentlength /><d:resourcetype />\n  <d:getcontenttype /><oc:checksums /></d:prop></d:propfind>";

    #[test]
    fn owncloudcmd_propfind() {
        let got = parse_propfind(OWNCLOUDCMD.as_bytes()).unwrap();
        assert_eq!(
            got,
            Propfind::Prop(vec![
                PropName::RESOURCETYPE,
                PropName::GETLASTMODIFIED,
                PropName::GETCONTENTLENGTH,
                PropName::GETETAG,
                oc("id"),
                oc("downloadURL"),
                oc("dDC"),
                oc("permissions"),
                oc("checksums"),
                oc("data-fingerprint"),
                oc("share-types"),
            ])
        );
    }

    #[test]
    fn rclone_propfind() {
        let got = parse_propfind(RCLONE.as_bytes()).unwrap();
        assert_eq!(
            got,
            Propfind::Prop(vec![
                PropName::DISPLAYNAME,
                PropName::GETLASTMODIFIED,
                PropName::GETCONTENTLENGTH,
                PropName::RESOURCETYPE,
                PropName::GETCONTENTTYPE,
                PropName::OC_CHECKSUMS,
            ])
        );
    }

    #[test]
    fn owncloudcmd_small_propfinds() {
        let body = r#"<?xml version="1.0" encoding="utf-8"?><d:propfind xmlns:d="DAV:"><d:prop><permissions xmlns="http://owncloud.org/ns"/></d:prop></d:propfind>"#;
        assert_eq!(
            parse_propfind(body.as_bytes()).unwrap(),
            Propfind::Prop(vec![PropName::OC_PERMISSIONS])
        );
        let body = r#"<?xml version="1.0" encoding="utf-8"?><d:propfind xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns"><d:prop><oc:fileid/><oc:permissions/><d:getetag/></d:prop></d:propfind>"#;
        assert_eq!(
            parse_propfind(body.as_bytes()).unwrap(),
            Propfind::Prop(vec![
                PropName::OC_FILEID,
                PropName::OC_PERMISSIONS,
                PropName::GETETAG
            ])
        );
    }

    #[test]
    fn empty_body_is_allprop() {
        for body in ["", "  \r\n", "\u{feff}"] {
            assert_eq!(
                parse_propfind(body.as_bytes()).unwrap(),
                Propfind::AllProp { include: vec![] }
            );
        }
        assert_eq!(
            parse_propfind(br#"<propfind xmlns="DAV:"/>"#).unwrap(),
            Propfind::AllProp { include: vec![] }
        );
    }

    #[test]
    fn allprop_include_and_propname() {
        let body = r#"<D:propfind xmlns:D="DAV:"><D:allprop/><D:include><D:supportedlock/><x:foo xmlns:x="urn:x"/></D:include></D:propfind>"#;
        assert_eq!(
            parse_propfind(body.as_bytes()).unwrap(),
            Propfind::AllProp {
                include: vec![PropName::SUPPORTEDLOCK, PropName::new("urn:x", "foo")]
            }
        );
        assert_eq!(
            parse_propfind(br#"<propfind xmlns="DAV:"><propname/></propfind>"#).unwrap(),
            Propfind::PropName
        );
    }

    #[test]
    fn litmus_propfind_bodies() {
        // propextended: an unknown element before allprop is ignored.
        let body = r#"<?xml version="1.0" encoding="utf-8" ?><propfind xmlns="DAV:"><foobar/><allprop/></propfind>"#;
        assert_eq!(
            parse_propfind(body.as_bytes()).unwrap(),
            Propfind::AllProp { include: vec![] }
        );
        // propwformed: property in its own default namespace.
        let body = r#"<?xml version="1.0" encoding="utf-8" ?><propfind xmlns='DAV:'><prop><valnspace xmlns='http://example.com/neon/litmus/'/></prop></propfind>"#;
        assert_eq!(
            parse_propfind(body.as_bytes()).unwrap(),
            Propfind::Prop(vec![PropName::new(
                "http://example.com/neon/litmus/",
                "valnspace"
            )])
        );
        // propget after propnullns: a property in no namespace.
        let body = r#"<propfind xmlns="DAV:"><prop><nonamespace xmlns=""/></prop></propfind>"#;
        assert_eq!(
            parse_propfind(body.as_bytes()).unwrap(),
            Propfind::Prop(vec![PropName::new("", "nonamespace")])
        );
        // propfind_invalid: not well-formed (and not a propfind): 400 either way.
        assert!(matches!(
            parse_propfind(b"<foo>"),
            Err(DavXmlError::WrongRoot { .. })
        ));
        assert!(matches!(
            parse_propfind(br#"<propfind xmlns="DAV:">"#),
            Err(DavXmlError::Malformed(_))
        ));
        // propfind_invalid2: undeclaring a prefix is not XML 1.0.
        let body =
            r#"<D:propfind xmlns:D="DAV:"><D:prop><bar:foo xmlns:bar=""/></D:prop></D:propfind>"#;
        let err = parse_propfind(body.as_bytes()).unwrap_err();
        assert!(matches!(err, DavXmlError::Malformed(_)), "{err}");
    }

    #[test]
    fn duplicate_props_are_dropped_and_unknown_children_ignored() {
        let body = r#"<d:propfind xmlns:d="DAV:"><d:prop><d:getetag/><d:getetag></d:getetag><d:resourcetype><d:collection/></d:resourcetype></d:prop><d:foo>ignored<d:bar/></d:foo></d:propfind>"#;
        assert_eq!(
            parse_propfind(body.as_bytes()).unwrap(),
            Propfind::Prop(vec![PropName::GETETAG, PropName::RESOURCETYPE])
        );
    }

    #[test]
    fn propfind_errors() {
        let wrong = parse_propfind(br#"<d:propertyupdate xmlns:d="DAV:"/>"#).unwrap_err();
        assert_eq!(
            wrong,
            DavXmlError::WrongRoot {
                expected: "DAV:propfind",
                found: "{DAV:}propertyupdate".into()
            }
        );
        // Right local name, wrong namespace.
        assert!(matches!(
            parse_propfind(b"<propfind><prop/></propfind>"),
            Err(DavXmlError::WrongRoot { .. })
        ));
        assert!(matches!(
            parse_propfind(br#"<d:propfind xmlns:d="DAV:"><d:prop></d:propfind>"#),
            Err(DavXmlError::Malformed(_))
        ));
        assert!(matches!(
            parse_propfind(br#"<d:propfind xmlns:d="DAV:"><x:prop/></d:propfind>"#),
            Err(DavXmlError::Malformed(_))
        ));
        assert!(matches!(
            parse_propfind(br#"<d:propfind xmlns:d="DAV:"/><d:propfind xmlns:d="DAV:"/>"#),
            Err(DavXmlError::Malformed(_))
        ));
        assert!(matches!(
            parse_propfind(br#"<d:propfind xmlns:d="DAV:"/>trailing"#),
            Err(DavXmlError::Malformed(_))
        ));
        assert!(matches!(
            parse_propfind(br#"<d:propfind xmlns:d="DAV:"><d:allprop/><d:propname/></d:propfind>"#),
            Err(DavXmlError::Invalid(_))
        ));
        assert!(matches!(
            parse_propfind(br#"<?xml version="1.0"?>"#),
            Err(DavXmlError::Malformed(_))
        ));
        assert!(matches!(
            parse_propfind(
                b"<d:propfind xmlns:d=\"DAV:\"><d:prop><d:g\xffetag/></d:prop></d:propfind>"
            ),
            Err(DavXmlError::InvalidUtf8)
        ));
        assert!(matches!(
            parse_propfind(br#"<d:propfind xmlns:d="DAV:" a="1" a="2"/>"#),
            Err(DavXmlError::Malformed(_))
        ));
        assert!(matches!(
            parse_propfind(b"<d:propfind xmlns:d=\"DAV:\">\x01</d:propfind>"),
            Err(DavXmlError::Malformed(_))
        ));
        // Every message is one line.
        for body in [
            &b"<foo>"[..],
            b"<D:propfind xmlns:D='DAV:'>\n<b>\n</a>",
            b"<a x='\n",
        ] {
            let msg = parse_propfind(body).unwrap_err().to_string();
            assert!(!msg.contains('\n'), "{msg:?}");
        }
    }

    #[test]
    fn dtds_and_entities_are_refused_not_expanded() {
        let billion_laughs = r#"<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
]>
<D:propfind xmlns:D="DAV:"><D:prop><D:getetag>&lol3;</D:getetag></D:prop></D:propfind>"#;
        assert_eq!(
            parse_propfind(billion_laughs.as_bytes()),
            Err(DavXmlError::Dtd)
        );
        let xxe = r#"<?xml version="1.0"?><!DOCTYPE foo [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><D:propertyupdate xmlns:D="DAV:"><D:set><D:prop><x xmlns="urn:x">&xxe;</x></D:prop></D:set></D:propertyupdate>"#;
        assert_eq!(parse_proppatch(xxe.as_bytes()), Err(DavXmlError::Dtd));
        // An undeclared entity without any DTD.
        let body = r#"<D:propertyupdate xmlns:D="DAV:"><D:set><D:prop><x xmlns="urn:x">&xxe;</x></D:prop></D:set></D:propertyupdate>"#;
        assert_eq!(parse_proppatch(body.as_bytes()), Err(DavXmlError::Dtd));
        // ... and in an attribute value.
        let body = r#"<D:propertyupdate xmlns:D="DAV:"><D:set><D:prop><x xmlns="urn:x" a="&xxe;">v</x></D:prop></D:set></D:propertyupdate>"#;
        assert_eq!(parse_proppatch(body.as_bytes()), Err(DavXmlError::Dtd));
        let body = r#"<!DOCTYPE D:lockinfo SYSTEM "http://evil/dtd"><D:lockinfo xmlns:D="DAV:"/>"#;
        assert_eq!(parse_lockinfo(body.as_bytes()), Err(DavXmlError::Dtd));
        assert!(DavXmlError::Dtd.to_string().contains("not allowed"));
    }

    fn set(ns: &'static str, local: &'static str, value: &str) -> PropPatchOp {
        PropPatchOp::Set {
            name: PropName::new(ns, local),
            value: value.to_string(),
        }
    }

    fn remove(ns: &'static str, local: &'static str) -> PropPatchOp {
        PropPatchOp::Remove {
            name: PropName::new(ns, local),
        }
    }

    const NS: &str = "http://example.com/neon/litmus/";

    #[test]
    fn litmus_propset_body() {
        // What neon's ne_proppatch sends for litmus `propset`.
        let body = "<?xml version=\"1.0\" encoding=\"utf-8\" ?>\n<D:propertyupdate xmlns:D=\"DAV:\"><D:set><D:prop><prop0 xmlns=\"http://example.com/neon/litmus/\">value0</prop0></D:prop></D:set>\n<D:set><D:prop><prop1 xmlns=\"http://example.com/neon/litmus/\">value1</prop1></D:prop></D:set>\n<D:remove><D:prop><prop2 xmlns=\"http://example.com/neon/litmus/\"/></D:prop></D:remove>\n</D:propertyupdate>\n";
        assert_eq!(
            parse_proppatch(body.as_bytes()).unwrap(),
            vec![
                set(NS, "prop0", "value0"),
                set(NS, "prop1", "value1"),
                remove(NS, "prop2")
            ]
        );
    }

    #[test]
    fn litmus_proppatch_order_bodies() {
        let body = r#"<?xml version="1.0" encoding="utf-8" ?><propertyupdate xmlns='DAV:'><remove><prop><removeset xmlns='http://example.com/neon/litmus/'/></prop></remove><set><prop><removeset xmlns='http://example.com/neon/litmus/'>x</removeset></prop></set><set><prop><removeset xmlns='http://example.com/neon/litmus/'>y</removeset></prop></set></propertyupdate>"#;
        assert_eq!(
            parse_proppatch(body.as_bytes()).unwrap(),
            vec![
                remove(NS, "removeset"),
                set(NS, "removeset", "x"),
                set(NS, "removeset", "y")
            ]
        );
        let body = r#"<?xml version="1.0" encoding="utf-8" ?><propertyupdate xmlns='DAV:'><set><prop><removeset xmlns='http://example.com/neon/litmus/'>x</removeset></prop></set><remove><prop><removeset xmlns='http://example.com/neon/litmus/'/></prop></remove></propertyupdate>"#;
        assert_eq!(
            parse_proppatch(body.as_bytes()).unwrap(),
            vec![set(NS, "removeset", "x"), remove(NS, "removeset")]
        );
    }

    #[test]
    fn litmus_nullns_and_high_unicode() {
        let body = r#"<?xml version="1.0" encoding="utf-8" ?><propertyupdate xmlns="DAV:"><set><prop><nonamespace xmlns="">randomvalue</nonamespace></prop></set></propertyupdate>"#;
        assert_eq!(
            parse_proppatch(body.as_bytes()).unwrap(),
            vec![set("", "nonamespace", "randomvalue")]
        );
        let body = r#"<?xml version="1.0" encoding="utf-8" ?><propertyupdate xmlns='DAV:'><set><prop><high-unicode xmlns='http://example.com/neon/litmus/'>&#65536;</high-unicode></prop></set></propertyupdate>"#;
        assert_eq!(
            parse_proppatch(body.as_bytes()).unwrap(),
            vec![set(NS, "high-unicode", "\u{10000}")]
        );
        // Raw UTF-8 and escapes round-trip as escaped XML text.
        let body = "<D:propertyupdate xmlns:D=\"DAV:\"><D:set><D:prop><u xmlns=\"urn:u\">Grüße 日本 \u{1F600} a&amp;b &lt;c&gt; \"q\"</u></D:prop></D:set></D:propertyupdate>";
        assert_eq!(
            parse_proppatch(body.as_bytes()).unwrap(),
            vec![set(
                "urn:u",
                "u",
                "Grüße 日本 \u{1F600} a&amp;b &lt;c&gt; \"q\""
            )]
        );
    }

    #[test]
    fn litmus_propvalnspace_value_is_self_contained() {
        let body = r#"<?xml version="1.0" encoding="utf-8" ?><propertyupdate xmlns='DAV:'><set><prop><t:valnspace xmlns:t='http://example.com/neon/litmus/'><foo xmlns='http://bar'/></t:valnspace></prop></set></propertyupdate>"#;
        assert_eq!(
            parse_proppatch(body.as_bytes()).unwrap(),
            vec![set(NS, "valnspace", r#"<foo xmlns="http://bar"/>"#)]
        );
    }

    #[test]
    fn value_children_using_ancestor_prefixes_get_declarations() {
        // `z:` and `a:` are declared on the root, far outside the value.
        let body = r#"<D:propertyupdate xmlns:D="DAV:" xmlns:z="urn:z" xmlns:a="urn:a"><D:set><D:prop><z:doc><z:item a:k="v&amp;w" plain="1">one</z:item><z:item/>tail<other xmlns="urn:o"><z:deep/></other><D:href>/x</D:href></z:doc></D:prop></D:set></D:propertyupdate>"#;
        let ops = parse_proppatch(body.as_bytes()).unwrap();
        assert_eq!(
            ops,
            vec![set(
                "urn:z",
                "doc",
                r#"<item xmlns="urn:z" xmlns:a="urn:a" a:k="v&amp;w" plain="1">one</item><item xmlns="urn:z"/>tail<other xmlns="urn:o"><deep xmlns="urn:z"/></other><href xmlns="DAV:">/x</href>"#
            )]
        );
        // The value parses on its own inside any wrapper.
        let PropPatchOp::Set { value, .. } = &ops[0] else {
            unreachable!()
        };
        let wrapped = format!(
            r#"<D:propertyupdate xmlns:D="DAV:"><D:set><D:prop><w xmlns="urn:w">{value}</w></D:prop></D:set></D:propertyupdate>"#
        );
        assert_eq!(
            parse_proppatch(wrapped.as_bytes()).unwrap(),
            vec![set("urn:w", "w", value)]
        );
    }

    #[test]
    fn value_nested_same_namespace_declared_once() {
        let body = r#"<D:propertyupdate xmlns:D="DAV:"><D:set><D:prop><p xmlns="urn:p"><a><b>x</b></a><c xmlns=""/></p></D:prop></D:set></D:propertyupdate>"#;
        assert_eq!(
            parse_proppatch(body.as_bytes()).unwrap(),
            vec![set(
                "urn:p",
                "p",
                r#"<a xmlns="urn:p"><b>x</b></a><c xmlns=""/>"#
            )]
        );
    }

    #[test]
    fn value_prefixes_declared_inside_and_xml_lang() {
        let body = r#"<D:propertyupdate xmlns:D="DAV:"><D:set><D:prop><p xmlns="urn:p" xml:lang="en"><a:x xmlns:a="urn:a" xml:lang="de"><a:y a:t="1"/></a:x></p></D:prop></D:set></D:propertyupdate>"#;
        assert_eq!(
            parse_proppatch(body.as_bytes()).unwrap(),
            vec![set(
                "urn:p",
                "p",
                r#"<x xmlns="urn:a" xmlns:a="urn:a" xml:lang="de"><y a:t="1"/></x>"#
            )]
        );
    }

    #[test]
    fn prop_lists_with_root_default_namespace_and_empty_prop() {
        let body = r#"<propfind xmlns="DAV:" xmlns:oc="http://owncloud.org/ns"><prop><oc:size/><getetag/><oc:audio/></prop></propfind>"#;
        assert_eq!(
            parse_propfind(body.as_bytes()).unwrap(),
            Propfind::Prop(vec![
                PropName::OC_SIZE,
                PropName::GETETAG,
                PropName::new(OC_NS, "audio")
            ])
        );
        assert_eq!(
            parse_propfind(br#"<propfind xmlns="DAV:"><prop/></propfind>"#).unwrap(),
            Propfind::Prop(vec![])
        );
        assert_eq!(
            parse_propfind(br#"<propfind xmlns="DAV:"><include><getetag/></include></propfind>"#)
                .unwrap(),
            Propfind::AllProp {
                include: vec![PropName::GETETAG]
            }
        );
    }

    #[test]
    fn value_cdata_comments_and_whitespace() {
        let body = "<D:propertyupdate xmlns:D=\"DAV:\"><D:set><D:prop><p xmlns=\"urn:p\"> a <![CDATA[<b>&]]><!-- c --> z\n</p></D:prop></D:set></D:propertyupdate>";
        assert_eq!(
            parse_proppatch(body.as_bytes()).unwrap(),
            vec![set("urn:p", "p", " a &lt;b&gt;&amp; z\n")]
        );
    }

    #[test]
    fn ownclou_favorite_proppatch_and_text_content() {
        let body = r#"<?xml version="1.0"?><d:propertyupdate xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns"><d:set><d:prop><oc:favorite>1</oc:favorite></d:prop></d:set></d:propertyupdate>"#;
        let ops = parse_proppatch(body.as_bytes()).unwrap();
        assert_eq!(
            ops,
            vec![PropPatchOp::Set {
                name: PropName::OC_FAVORITE,
                value: "1".into()
            }]
        );
        assert_eq!(ops[0].name(), &PropName::OC_FAVORITE);
        assert_eq!(text_content("a &amp; b").as_deref(), Some("a & b"));
        assert_eq!(text_content("<x/>"), None);
    }

    #[test]
    fn proppatch_errors() {
        assert!(matches!(parse_proppatch(b""), Err(DavXmlError::Invalid(_))));
        assert!(matches!(
            parse_proppatch(br#"<D:propertyupdate xmlns:D="DAV:"/>"#),
            Err(DavXmlError::Invalid(_))
        ));
        assert!(matches!(
            parse_proppatch(br#"<D:propfind xmlns:D="DAV:"/>"#),
            Err(DavXmlError::WrongRoot { .. })
        ));
        assert!(matches!(
            parse_proppatch(
                br#"<D:propertyupdate xmlns:D="DAV:"><D:set><D:prop><x xmlns="urn:x"><y></x></D:prop></D:set></D:propertyupdate>"#
            ),
            Err(DavXmlError::Malformed(_))
        ));
        assert!(matches!(
            parse_proppatch(
                br#"<D:propertyupdate xmlns:D="DAV:"><D:set><D:prop><x xmlns="urn:x">&#0;</x></D:prop></D:set></D:propertyupdate>"#
            ),
            Err(DavXmlError::Malformed(_))
        ));
        assert!(matches!(
            parse_proppatch(
                br#"<D:propertyupdate xmlns:D="DAV:"><D:set><D:prop><x xmlns="urn:x" q:a="1">v</x></D:prop></D:set></D:propertyupdate>"#
            ),
            Err(DavXmlError::Malformed(_))
        ));
    }

    #[test]
    fn many_props_and_attributes() {
        let mut body = String::from(r#"<d:propfind xmlns:d="DAV:"><d:prop>"#);
        for i in 0..20_000 {
            body.push_str(&format!("<p{} xmlns=\"urn:x\"/><d:getetag/>", i % 10_000));
        }
        body.push_str("</d:prop></d:propfind>");
        let Propfind::Prop(names) = parse_propfind(body.as_bytes()).unwrap() else {
            panic!()
        };
        assert_eq!(names.len(), 10_001);
        assert_eq!(names[0], PropName::new("urn:x", "p0"));
        assert_eq!(names[1], PropName::GETETAG);
        let attrs: String = (0..100).map(|i| format!(" a{i}=\"1\"")).collect();
        let body = format!(r#"<d:propfind xmlns:d="DAV:"{attrs}/>"#);
        assert!(matches!(
            parse_propfind(body.as_bytes()),
            Err(DavXmlError::Malformed(_))
        ));
    }

    #[test]
    fn deep_nesting_is_refused() {
        let mut body =
            String::from(r#"<D:propertyupdate xmlns:D="DAV:"><D:set><D:prop><x xmlns="urn:x">"#);
        for _ in 0..300 {
            body.push_str("<a>");
        }
        for _ in 0..300 {
            body.push_str("</a>");
        }
        body.push_str("</x></D:prop></D:set></D:propertyupdate>");
        assert!(matches!(
            parse_proppatch(body.as_bytes()),
            Err(DavXmlError::Malformed(_))
        ));
    }

    #[test]
    fn lockinfo_litmus_and_clients() {
        // neon (litmus): owner as text.
        let body = "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<lockinfo xmlns='DAV:'>\n <lockscope><exclusive/></lockscope>\n<locktype><write/></locktype><owner>litmus test suite</owner>\n</lockinfo>\n";
        assert_eq!(
            parse_lockinfo(body.as_bytes()).unwrap(),
            Some(LockInfo {
                scope: LockScope::Exclusive,
                owner: Some("litmus test suite".into())
            })
        );
        // Owner as an href (Windows, Finder, cadaver).
        let body = r#"<?xml version="1.0" encoding="utf-8" ?><D:lockinfo xmlns:D="DAV:"><D:lockscope><D:shared/></D:lockscope><D:locktype><D:write/></D:locktype><D:owner><D:href>http://example.org/~me</D:href></D:owner></D:lockinfo>"#;
        assert_eq!(
            parse_lockinfo(body.as_bytes()).unwrap(),
            Some(LockInfo {
                scope: LockScope::Shared,
                owner: Some(r#"<href xmlns="DAV:">http://example.org/~me</href>"#.into())
            })
        );
        // No owner, no locktype (lenient: write is the only type).
        let body = r#"<D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/></D:lockscope><D:owner/></D:lockinfo>"#;
        assert_eq!(
            parse_lockinfo(body.as_bytes()).unwrap(),
            Some(LockInfo {
                scope: LockScope::Exclusive,
                owner: None
            })
        );
    }

    #[test]
    fn lockinfo_refresh_and_errors() {
        assert_eq!(parse_lockinfo(b"").unwrap(), None);
        assert_eq!(parse_lockinfo(b" \n").unwrap(), None);
        assert!(matches!(
            parse_lockinfo(
                br#"<D:lockinfo xmlns:D="DAV:"><D:locktype><D:write/></D:locktype></D:lockinfo>"#
            ),
            Err(DavXmlError::Invalid(_))
        ));
        assert!(matches!(
            parse_lockinfo(br#"<D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/></D:lockscope><D:locktype><D:read/></D:locktype></D:lockinfo>"#),
            Err(DavXmlError::Invalid(_))
        ));
        assert!(matches!(
            parse_lockinfo(br#"<D:propfind xmlns:D="DAV:"/>"#),
            Err(DavXmlError::WrongRoot { .. })
        ));
        assert!(matches!(
            parse_lockinfo(br#"<D:lockinfo xmlns:D="DAV:"><D:lockscope>"#),
            Err(DavXmlError::Malformed(_))
        ));
    }

    #[test]
    fn declared_encodings() {
        let body = br#"<?xml version="1.0" encoding="ISO-8859-1"?><d:propfind xmlns:d="DAV:"><d:allprop/></d:propfind>"#;
        assert_eq!(
            parse_propfind(body).unwrap(),
            Propfind::AllProp { include: vec![] }
        );
        let body = "<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?><d:propfind xmlns:d=\"DAV:\"><d:prop><x:é xmlns:x=\"urn:x\"/></d:prop></d:propfind>";
        assert!(matches!(
            parse_propfind(body.as_bytes()),
            Err(DavXmlError::Invalid(_))
        ));
    }
}
