//! The `If` header (RFC 4918 §10.4): parsing and evaluation.
//!
//! ```text
//! If          = "If" ":" ( 1*No-tag-list | 1*Tagged-list )
//! No-tag-list = List
//! Tagged-list = Resource-Tag 1*List
//! List        = "(" 1*Condition ")"
//! Condition   = ["Not"] (State-token | "[" entity-tag "]")
//! ```
//!
//! Semantics (§10.4.3): a list is true when all its conditions are; the header is true when
//! any list is. A state token condition is true when the token is a current lock token of the
//! resource (`<DAV:no-lock>` never is, so `(Not <DAV:no-lock>)` is always true); an entity-tag
//! condition is true when it equals the resource's current etag. Untagged lists apply to the
//! request resource; tagged lists to the resource the tag names. When the header is false
//! the request fails with 412 (litmus: bogus tokens, `(<DAV:no-lock>)`).
//!
//! Separately, a locked resource may only be changed when its lock token is *submitted*:
//! mentioned anywhere in the header ([`IfHeader::submitted_tokens`]); otherwise 423 with
//! `DAV:lock-token-submitted` (litmus `cond_put_corrupt_token`: `(<token>x) (Not
//! <DAV:no-lock>)` evaluates true but submits no valid token, so 423).

use percent_encoding::percent_decode_str;

use super::headers::{HeaderError, show};
#[cfg(doc)]
use super::paths::DavPath;
use super::paths::decode_path;

/// A parsed `If` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfHeader {
    /// All lists in header order (OR). Untagged lists have `resource: None`.
    pub lists: Vec<IfList>,
}

/// One parenthesized list of conditions (AND), with the resource tag it follows, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfList {
    /// The Resource-Tag as written (an absolute URI or an absolute path, still encoded).
    pub resource: Option<String>,
    pub conditions: Vec<IfCondition>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfCondition {
    pub not: bool,
    pub kind: ConditionKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConditionKind {
    /// `<...>`: a lock token (or any state token URI, e.g. `DAV:no-lock`).
    StateToken(String),
    /// `[...]`: an entity tag as written, quotes included (`"abc"`, `W/"abc"`).
    ETag(String),
}

/// The state token that matches no lock (RFC 4918 §10.4.8 uses it to build always-true lists).
pub const NO_LOCK: &str = "DAV:no-lock";

impl IfHeader {
    /// Parses the header value. Mixed tagged and untagged lists, empty lists, and anything
    /// outside the grammar are errors (400).
    pub fn parse(value: impl AsRef<[u8]>) -> Result<IfHeader, HeaderError> {
        let raw = value.as_ref();
        let text = std::str::from_utf8(raw).map_err(|_| HeaderError::If("not UTF-8".into()))?;
        Parser { s: text, pos: 0 }
            .parse()
            .map_err(|msg| HeaderError::If(format!("{msg} in '{}'", show(raw))))
    }

    /// Every state token mentioned, in order (including ones under `Not`, and `DAV:no-lock`):
    /// the "submitted" lock tokens of RFC 4918 §6.5 / §10.4.
    pub fn submitted_tokens(&self) -> impl Iterator<Item = &str> + '_ {
        self.lists
            .iter()
            .flat_map(|l| l.conditions.iter())
            .filter_map(|c| match &c.kind {
                ConditionKind::StateToken(t) => Some(t.as_str()),
                ConditionKind::ETag(_) => None,
            })
    }

    /// Whether `token` is submitted (see [`Self::submitted_tokens`]).
    pub fn submits(&self, token: &str) -> bool {
        self.submitted_tokens().any(|t| t == token)
    }

    /// Evaluates the header. `request_path` is the path the untagged lists apply to, as
    /// [`DavPath::as_str`] gives it (decoded, no trailing slash); tagged lists apply to their
    /// tag's path, normalized the same way. `state(path)` returns that resource's current etag (`None` if it does not exist) and
    /// its current lock tokens (including locks inherited from ancestors); it is called at most
    /// once per distinct path.
    pub fn evaluate<F>(&self, request_path: &str, mut state: F) -> bool
    where
        F: FnMut(&str) -> (Option<String>, Vec<String>),
    {
        let mut cache: Vec<(String, Option<String>, Vec<String>)> = Vec::new();
        for list in &self.lists {
            let path = match &list.resource {
                None => request_path.to_string(),
                Some(tag) => tag_path(tag),
            };
            let idx = match cache.iter().position(|(p, _, _)| *p == path) {
                Some(i) => i,
                None => {
                    let (etag, tokens) = state(&path);
                    cache.push((path, etag, tokens));
                    cache.len() - 1
                }
            };
            let (_, etag, tokens) = &cache[idx];
            let all = list.conditions.iter().all(|c| {
                let matched = match &c.kind {
                    ConditionKind::StateToken(t) => tokens.iter().any(|x| x == t),
                    ConditionKind::ETag(e) => etag.as_deref().is_some_and(|cur| etag_eq(cur, e)),
                };
                matched != c.not
            });
            if all {
                return true;
            }
        }
        false
    }
}

/// The path a Resource-Tag names, in the form of [`DavPath::as_str`]: scheme and authority
/// dropped, query/fragment dropped, percent-decoded, no trailing slash. neon (litmus) tags
/// its lists with the lock root's absolute URI, e.g. `<http://host/dav/lockcoll/> (<token>)`.
/// A tag that does not decode to a valid path is passed on decoded lossily; it names
/// nothing the caller has.
pub fn tag_path(tag: &str) -> String {
    let path = match tag.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
        None => tag,
    };
    let path = path.split(['?', '#']).next().unwrap_or("/");
    match decode_path(path) {
        Ok(p) => p.into_string(),
        Err(_) => percent_decode_str(path).decode_utf8_lossy().into_owned(),
    }
}

/// Entity tags compare on their opaque part: quotes and a weak `W/` prefix do not matter
/// (the caller's etag may be stored quoted or bare).
fn etag_eq(a: &str, b: &str) -> bool {
    fn opaque(e: &str) -> &str {
        let e = e.trim();
        let e = e.strip_prefix("W/").unwrap_or(e);
        e.strip_prefix('"')
            .and_then(|x| x.strip_suffix('"'))
            .unwrap_or(e)
    }
    opaque(a) == opaque(b)
}

struct Parser<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn rest(&self) -> &'a str {
        &self.s[self.pos..]
    }

    fn skip_ws(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start_matches([' ', '\t', '\r', '\n']).len();
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn parse(mut self) -> Result<IfHeader, String> {
        let mut lists = Vec::new();
        let mut tagged: Option<bool> = None;
        let mut current_tag: Option<String> = None;
        let mut tag_has_list = true;
        loop {
            self.skip_ws();
            match self.peek() {
                None => break,
                Some('<') => {
                    if tagged == Some(false) {
                        return Err("a resource tag after untagged lists".into());
                    }
                    if !tag_has_list {
                        return Err("a resource tag without a list".into());
                    }
                    tagged = Some(true);
                    current_tag = Some(self.coded_url()?);
                    tag_has_list = false;
                }
                Some('(') => {
                    if tagged.is_none() {
                        tagged = Some(false);
                    }
                    let conditions = self.list()?;
                    lists.push(IfList {
                        resource: current_tag.clone(),
                        conditions,
                    });
                    tag_has_list = true;
                }
                Some(c) => return Err(format!("unexpected '{}'", c.escape_debug())),
            }
        }
        if lists.is_empty() {
            return Err("no condition list".into());
        }
        if !tag_has_list {
            return Err("a resource tag without a list".into());
        }
        Ok(IfHeader { lists })
    }

    /// `<...>`: returns the inside.
    fn coded_url(&mut self) -> Result<String, String> {
        let rest = self.rest();
        debug_assert!(rest.starts_with('<'));
        let end = rest.find('>').ok_or("unterminated '<'")?;
        let inner = &rest[1..end];
        if inner.is_empty() || inner.contains(['<', ' ', '\t', '\r', '\n']) {
            return Err("invalid URI in '<...>'".into());
        }
        self.pos += end + 1;
        Ok(inner.to_string())
    }

    fn list(&mut self) -> Result<Vec<IfCondition>, String> {
        self.pos += 1; // '('
        let mut conditions = Vec::new();
        loop {
            self.skip_ws();
            let mut not = false;
            let rest = self.rest();
            if rest.len() >= 3 && rest.as_bytes()[..3].eq_ignore_ascii_case(b"not") {
                // "Not" is case-insensitive in ABNF; it must be followed by a condition.
                not = true;
                self.pos += 3;
                self.skip_ws();
            }
            match self.peek() {
                Some(')') if !not => {
                    self.pos += 1;
                    if conditions.is_empty() {
                        return Err("an empty list '()'".into());
                    }
                    return Ok(conditions);
                }
                Some('<') => {
                    let token = self.coded_url()?;
                    conditions.push(IfCondition {
                        not,
                        kind: ConditionKind::StateToken(token),
                    });
                }
                Some('[') => {
                    let etag = self.entity_tag()?;
                    conditions.push(IfCondition {
                        not,
                        kind: ConditionKind::ETag(etag),
                    });
                }
                None => return Err("unterminated '('".into()),
                Some(c) => return Err(format!("unexpected '{}' in a list", c.escape_debug())),
            }
        }
    }

    /// `[entity-tag]`: `"..."` or `W/"..."` (a `]` inside the quotes is allowed).
    fn entity_tag(&mut self) -> Result<String, String> {
        self.pos += 1; // '['
        self.skip_ws();
        let rest = self.rest();
        let quoted_start = if rest.starts_with("W/\"") {
            Some(2)
        } else if rest.starts_with('"') {
            Some(0)
        } else {
            None
        };
        let len = match quoted_start {
            Some(q) => {
                let close = rest[q + 1..].find('"').ok_or("unterminated entity tag")?;
                q + 1 + close + 1
            }
            // Lenient: an unquoted tag runs to the ']'.
            None => rest.find(']').ok_or("unterminated '['")?,
        };
        let etag = rest[..len].trim().to_string();
        self.pos += len;
        self.skip_ws();
        if self.peek() != Some(']') {
            return Err("expected ']' after the entity tag".into());
        }
        self.pos += 1;
        if etag.is_empty() {
            return Err("an empty entity tag".into());
        }
        Ok(etag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "opaquelocktoken:1c0f3f6e-6d2a-4b3e-9f0a-8b9c0d1e2f30";
    const PATH: &str = "/remote.php/dav/files/admin/litmus/lockme";
    const ETAG: &str = "\"d226aadefb5212476b11ae82f756c6ff\"";

    fn locked(path: &str) -> (Option<String>, Vec<String>) {
        if path == PATH {
            (Some(ETAG.to_string()), vec![TOKEN.to_string()])
        } else {
            (None, vec![])
        }
    }

    fn unlocked(path: &str) -> (Option<String>, Vec<String>) {
        if path == PATH {
            (Some(ETAG.to_string()), vec![])
        } else {
            (None, vec![])
        }
    }

    fn eval(header: &str, f: fn(&str) -> (Option<String>, Vec<String>)) -> bool {
        IfHeader::parse(header).unwrap().evaluate(PATH, f)
    }

    #[test]
    fn parses_structure() {
        let h = IfHeader::parse(format!("(<{TOKEN}> [{ETAG}]) (Not <DAV:no-lock>)")).unwrap();
        assert_eq!(
            h,
            IfHeader {
                lists: vec![
                    IfList {
                        resource: None,
                        conditions: vec![
                            IfCondition {
                                not: false,
                                kind: ConditionKind::StateToken(TOKEN.into())
                            },
                            IfCondition {
                                not: false,
                                kind: ConditionKind::ETag(ETAG.into())
                            },
                        ]
                    },
                    IfList {
                        resource: None,
                        conditions: vec![IfCondition {
                            not: true,
                            kind: ConditionKind::StateToken(NO_LOCK.into())
                        }]
                    },
                ]
            }
        );
        let h = IfHeader::parse(
            "<http://localhost/a> (<urn:uuid:1>) ([W/\"x]y\"]) <http://localhost/b> (Not[\"z\"])",
        )
        .unwrap();
        assert_eq!(h.lists.len(), 3);
        assert_eq!(h.lists[0].resource.as_deref(), Some("http://localhost/a"));
        assert_eq!(h.lists[1].resource.as_deref(), Some("http://localhost/a"));
        assert_eq!(
            h.lists[1].conditions[0].kind,
            ConditionKind::ETag("W/\"x]y\"".into())
        );
        assert_eq!(h.lists[2].resource.as_deref(), Some("http://localhost/b"));
        assert!(h.lists[2].conditions[0].not);
        assert_eq!(h.submitted_tokens().collect::<Vec<_>>(), ["urn:uuid:1"]);
    }

    #[test]
    fn litmus_lock_token_conditions() {
        // cond_put-style: lock token alone, with etag, with Not.
        assert!(eval(&format!("(<{TOKEN}>)"), locked));
        assert!(eval(&format!("(<{TOKEN}> [{ETAG}])"), locked));
        assert!(eval(&format!("(<{TOKEN}>) (Not <DAV:no-lock>)"), locked));
        assert!(eval(
            &format!("(<{TOKEN}> [{ETAG}]) (Not <DAV:no-lock> [{ETAG}])"),
            locked
        ));
        // fail_cond_put: no-lock with the right etag is false → 412.
        assert!(!eval(&format!("(<DAV:no-lock> [{ETAG}])"), locked));
        // fail_cond_put_unlocked.
        assert!(!eval("(<DAV:no-lock>)", unlocked));
        // fail_complex_cond_put: corrupted etag in both lists.
        let bad = "\"d226aadefb5212476b11ae82f756c7ff\"";
        assert!(!eval(
            &format!("(<{TOKEN}> [{bad}]) (Not <DAV:no-lock> [{bad}])"),
            locked
        ));
        // Bogus token → false (412).
        assert!(!eval("(<opaquelocktoken:foobar>)", locked));
        assert!(!eval(&format!("(<{TOKEN}>)"), unlocked));
        // (Not <token>) on the locked resource is false, on an unlocked one true.
        assert!(!eval(&format!("(Not <{TOKEN}>)"), locked));
        assert!(eval(&format!("(Not <{TOKEN}>)"), unlocked));
    }

    #[test]
    fn litmus_corrupt_token_is_true_but_submits_no_valid_token() {
        let h = IfHeader::parse(format!("(<{TOKEN}x>) (Not <DAV:no-lock>)")).unwrap();
        assert!(h.evaluate(PATH, locked));
        assert!(!h.submits(TOKEN));
        let h = IfHeader::parse(format!("(<{TOKEN}>) (Not <DAV:no-lock>)")).unwrap();
        assert!(h.submits(TOKEN));
    }

    #[test]
    fn tagged_lists_resolve_their_resource() {
        let header = format!("<http://localhost:9200{PATH}> (<{TOKEN}>)");
        assert!(eval(&header, locked));
        // A tag naming another resource does not see this lock.
        let header =
            format!("<http://localhost:9200/remote.php/dav/files/admin/other> (<{TOKEN}>)");
        assert!(!eval(&header, locked));
        // neon tags lists with the lock root's URI, trailing slash included.
        let h =
            IfHeader::parse(format!("<http://localhost:9200/dav/lockcoll/> (<{TOKEN}>)")).unwrap();
        let mut seen = Vec::new();
        h.evaluate("/dav/lockcoll/lockme.txt", |p| {
            seen.push(p.to_string());
            (None, vec![])
        });
        assert_eq!(seen, ["/dav/lockcoll"]);
        // Path-only tags, percent-encoded tags.
        let enc = "/remote.php/dav/files/admin/litmus/lock%6De";
        assert!(eval(&format!("<{enc}> ([{ETAG}])"), locked));
        // The evaluator looks each path up once.
        let h = IfHeader::parse(format!(
            "<{PATH}> ([\"nope\"]) <{PATH}> ([\"nope2\"]) <{PATH}> ([{ETAG}])"
        ))
        .unwrap();
        let mut calls = 0;
        assert!(h.evaluate("/elsewhere", |p| {
            calls += 1;
            locked(p)
        }));
        assert_eq!(calls, 1);
    }

    #[test]
    fn etag_conditions() {
        assert!(eval(&format!("([{ETAG}])"), unlocked));
        assert!(eval("([\"d226aadefb5212476b11ae82f756c6ff\"])", unlocked));
        assert!(eval("([W/\"d226aadefb5212476b11ae82f756c6ff\"])", unlocked));
        assert!(!eval("([\"fake-etag\"])", unlocked));
        assert!(eval(
            &format!("([{ETAG}] not [\"fake-etag\"]) ([\"fake-etag\"])"),
            unlocked
        ));
        assert!(!eval(
            &format!("([\"fake-etag\"]) (Not [{ETAG}])"),
            unlocked
        ));
        // A missing resource has no etag: [etag] false, Not [etag] true.
        let h = IfHeader::parse("([\"x\"])").unwrap();
        assert!(!h.evaluate("/missing", unlocked));
        let h = IfHeader::parse("(Not [\"x\"])").unwrap();
        assert!(h.evaluate("/missing", unlocked));
    }

    #[test]
    fn submitted_tokens_lists_all_state_tokens() {
        let h = IfHeader::parse("(<a:1> [\"e\"]) (Not <b:2>) <http://h/x> (<c:3>)");
        assert!(h.is_err(), "mixed tagged/untagged is invalid");
        let h = IfHeader::parse("<http://h/x> (<a:1> [\"e\"]) (Not <b:2>) </y> (<DAV:no-lock>)")
            .unwrap();
        assert_eq!(
            h.submitted_tokens().collect::<Vec<_>>(),
            ["a:1", "b:2", NO_LOCK]
        );
    }

    #[test]
    fn parse_errors() {
        for bad in [
            "",
            "   ",
            "()",
            "(",
            "(<a:1>",
            "(<>)",
            "(<a b>)",
            "(Not)",
            "(Not Not <a:1>)",
            "([])",
            "([\"x\")",
            "([\"x)",
            "<http://h/x>",
            "<http://h/x> (<a:1>) <http://h/y>",
            "(<a:1>) <http://h/x> (<b:2>)",
            "x(<a:1>)",
            "(<a:1> junk)",
        ] {
            let err = IfHeader::parse(bad);
            assert!(err.is_err(), "{bad:?} parsed as {err:?}");
            let msg = err.unwrap_err().to_string();
            assert!(msg.starts_with("invalid If header"), "{msg}");
            assert!(!msg.contains('\n'));
        }
        assert!(IfHeader::parse(b"(<a:\xff>)").is_err());
    }
}
