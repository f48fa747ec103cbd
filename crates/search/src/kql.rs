//! oCIS's KQL subset, parsed by hand into an [`Expr`] tree.
//!
//! What is understood: `name:"*term*"` and `name:term` (a glob on the name; a value without
//! `*` or `?` matches anywhere in the name, as oCIS's clients always mean), bare words and
//! quoted phrases (name searches, as oCIS treats free text), `content:"…"` (text inside
//! text-like files), `mediatype:document|spreadsheet|presentation|pdf|image|video|audio|
//! folder|archive` (oCIS's groups) or a media type prefix (`mediatype:text/`), `mtime` and
//! `size` with `>`, `>=`, `<`, `<=` or `:` (`mtime>2024-01-31`, `mtime>"2024-01-31T10:00:00Z"`,
//! `size<1000`), `scope:ID` (a
//! space id, or a resource id to search below a folder), `AND`, `OR`, `NOT`, implicit AND
//! between terms, parentheses. Anything else is a [`KqlError`] naming the problem, which the
//! client gets as its 400.

/// A parsed query.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    /// A glob on the name (`*` any run, `?` one character), case-insensitive.
    Name(String),
    /// A phrase in the content, case-insensitive.
    Content(String),
    MediaType(MediaType),
    /// Modification time against Unix nanoseconds.
    Mtime(Cmp, i64),
    Size(Cmp, i64),
    /// A space id, or a resource id: the hit is in that space, or at or below that resource.
    Scope(String),
}

/// How a value is compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    Lt,
    Le,
    Gt,
    Ge,
    /// `mtime:DAY` is that whole day; `size:N` exactly N.
    Eq,
}

/// oCIS's media type groups, or a media type prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MediaType {
    Folder,
    /// Exactly one of these types.
    OneOf(&'static [&'static str]),
    /// Types starting with this (`image/`, `text/plain`).
    Prefix(String),
}

/// Why a query was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KqlError {
    #[error("the search query is empty")]
    Empty,
    #[error("unknown search property {0:?} (name, content, mediatype, mtime, size, scope)")]
    UnknownKey(String),
    #[error("{0} needs a value")]
    MissingValue(String),
    #[error("unterminated quote in the search query")]
    Unterminated,
    #[error("unbalanced parentheses in the search query")]
    Parentheses,
    #[error("{0} has nothing on one side")]
    DanglingOperator(&'static str),
    #[error("{key} takes {expected}, not {value:?}")]
    BadValue {
        key: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("{0} takes no comparison but ':'")]
    BadComparison(String),
    #[error("the search query is nested too deeply")]
    TooDeep,
}

/// Nesting past this is refused (a stack bound, not a real query's need).
const MAX_DEPTH: usize = 32;

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Open,
    Close,
    And,
    Or,
    Not,
    /// `key` `op` `value` (`op` one of `:`, `<`, `<=`, `>`, `>=`).
    Property {
        key: String,
        op: String,
        value: String,
    },
    /// A bare word or a quoted phrase.
    Text(String),
}

/// Parses `query`.
pub fn parse(query: &str) -> Result<Expr, KqlError> {
    let tokens = tokenize(query)?;
    if tokens.is_empty() {
        return Err(KqlError::Empty);
    }
    let mut p = Parser {
        tokens,
        at: 0,
        depth: 0,
    };
    let expr = p.or()?;
    match p.peek() {
        None => Ok(expr),
        Some(Token::Close) => Err(KqlError::Parentheses),
        Some(_) => Err(KqlError::DanglingOperator("the query")),
    }
}

fn tokenize(query: &str) -> Result<Vec<Token>, KqlError> {
    let chars: Vec<char> = query.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c == '(' {
            out.push(Token::Open);
            i += 1;
            continue;
        }
        if c == ')' {
            out.push(Token::Close);
            i += 1;
            continue;
        }
        if c == '"' {
            let (text, next) = quoted(&chars, i)?;
            out.push(Token::Text(text));
            i = next;
            continue;
        }
        // A word, up to whitespace or a parenthesis; a property when it holds `:`, `<`, `>`.
        let start = i;
        while i < chars.len()
            && !chars[i].is_whitespace()
            && !matches!(chars[i], '(' | ')' | ':' | '<' | '>' | '"')
        {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        if i < chars.len() && matches!(chars[i], ':' | '<' | '>') && !word.is_empty() {
            let mut op = chars[i].to_string();
            i += 1;
            if i < chars.len() && chars[i] == '=' && op != ":" {
                op.push('=');
                i += 1;
            }
            let value = if i < chars.len() && chars[i] == '"' {
                let (text, next) = quoted(&chars, i)?;
                i = next;
                text
            } else {
                let vs = i;
                while i < chars.len() && !chars[i].is_whitespace() && !matches!(chars[i], '(' | ')')
                {
                    i += 1;
                }
                chars[vs..i].iter().collect()
            };
            if value.is_empty() {
                return Err(KqlError::MissingValue(word));
            }
            out.push(Token::Property {
                key: word.to_ascii_lowercase(),
                op,
                value,
            });
            continue;
        }
        if word.is_empty() {
            // A lone `:`, `<`, `>` or a quote inside a word.
            return Err(KqlError::MissingValue(chars[i].to_string()));
        }
        out.push(match word.as_str() {
            "AND" => Token::And,
            "OR" => Token::Or,
            "NOT" => Token::Not,
            _ => Token::Text(word),
        });
    }
    Ok(out)
}

/// The phrase of the quote opening at `at`, and where after it to go on.
fn quoted(chars: &[char], at: usize) -> Result<(String, usize), KqlError> {
    let mut i = at + 1;
    let mut text = String::new();
    while i < chars.len() {
        match chars[i] {
            '"' => return Ok((text, i + 1)),
            '\\' if i + 1 < chars.len() => {
                text.push(chars[i + 1]);
                i += 2;
            }
            c => {
                text.push(c);
                i += 1;
            }
        }
    }
    Err(KqlError::Unterminated)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn or(&mut self) -> Result<Expr, KqlError> {
        let mut left = self.and()?;
        while self.peek() == Some(&Token::Or) {
            self.at += 1;
            let right = self.and().map_err(|e| dangling(e, "OR"))?;
            left = Expr::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Expr, KqlError> {
        let mut left = self.unary()?;
        loop {
            match self.peek() {
                Some(Token::And) => {
                    self.at += 1;
                    let right = self.unary().map_err(|e| dangling(e, "AND"))?;
                    left = Expr::And(Box::new(left), Box::new(right));
                }
                // Terms side by side: an implicit AND.
                Some(Token::Open | Token::Not | Token::Property { .. } | Token::Text(_)) => {
                    let right = self.unary()?;
                    left = Expr::And(Box::new(left), Box::new(right));
                }
                _ => return Ok(left),
            }
        }
    }

    fn unary(&mut self) -> Result<Expr, KqlError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(KqlError::TooDeep);
        }
        let out = self.unary_inner();
        self.depth -= 1;
        out
    }

    fn unary_inner(&mut self) -> Result<Expr, KqlError> {
        let Some(token) = self.tokens.get(self.at).cloned() else {
            return Err(KqlError::DanglingOperator("the query"));
        };
        self.at += 1;
        match token {
            Token::Not => Ok(Expr::Not(Box::new(
                self.unary().map_err(|e| dangling(e, "NOT"))?,
            ))),
            Token::Open => {
                let inner = self.or()?;
                if self.peek() != Some(&Token::Close) {
                    return Err(KqlError::Parentheses);
                }
                self.at += 1;
                Ok(inner)
            }
            Token::Close => Err(KqlError::Parentheses),
            Token::And => Err(KqlError::DanglingOperator("AND")),
            Token::Or => Err(KqlError::DanglingOperator("OR")),
            Token::Text(t) => Ok(Expr::Name(t)),
            Token::Property { key, op, value } => property(&key, &op, value),
        }
    }
}

/// An operator with nothing after it names itself, not "the query".
fn dangling(e: KqlError, op: &'static str) -> KqlError {
    match e {
        KqlError::DanglingOperator("the query") => KqlError::DanglingOperator(op),
        e => e,
    }
}

fn property(key: &str, op: &str, value: String) -> Result<Expr, KqlError> {
    let colon_only = |e: Expr| {
        if op == ":" {
            Ok(e)
        } else {
            Err(KqlError::BadComparison(key.to_owned()))
        }
    };
    match key {
        "name" => colon_only(Expr::Name(value)),
        "content" => colon_only(Expr::Content(value)),
        "scope" => colon_only(Expr::Scope(value)),
        "mediatype" => colon_only(Expr::MediaType(media_type(&value)?)),
        "mtime" => {
            let cmp = cmp(op);
            let ns = instant_ns(&value).ok_or_else(|| KqlError::BadValue {
                key: "mtime",
                value: value.clone(),
                expected: "a date YYYY-MM-DD or a time YYYY-MM-DDTHH:MM[:SS][Z|±HH:MM]",
            })?;
            Ok(Expr::Mtime(cmp, ns))
        }
        "size" => {
            let n = value
                .parse::<i64>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| KqlError::BadValue {
                    key: "size",
                    value: value.clone(),
                    expected: "a number of bytes",
                })?;
            Ok(Expr::Size(cmp(op), n))
        }
        _ => Err(KqlError::UnknownKey(key.to_owned())),
    }
}

fn cmp(op: &str) -> Cmp {
    match op {
        "<" => Cmp::Lt,
        "<=" => Cmp::Le,
        ">" => Cmp::Gt,
        ">=" => Cmp::Ge,
        _ => Cmp::Eq,
    }
}

/// oCIS's `mediatype:` groups (services/search's KQL mapping), or a type prefix.
fn media_type(value: &str) -> Result<MediaType, KqlError> {
    let v = value.to_ascii_lowercase();
    Ok(match v.as_str() {
        "folder" => MediaType::Folder,
        "document" => MediaType::OneOf(&[
            "application/msword",
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            "application/vnd.oasis.opendocument.text",
            "text/plain",
            "text/markdown",
            "application/rtf",
            "application/vnd.apple.pages",
        ]),
        "spreadsheet" => MediaType::OneOf(&[
            "application/vnd.ms-excel",
            "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
            "application/vnd.oasis.opendocument.spreadsheet",
            "text/csv",
            "application/vnd.apple.numbers",
        ]),
        "presentation" => MediaType::OneOf(&[
            "application/vnd.ms-powerpoint",
            "application/vnd.openxmlformats-officedocument.presentationml.presentation",
            "application/vnd.oasis.opendocument.presentation",
            "application/vnd.apple.keynote",
        ]),
        "pdf" => MediaType::OneOf(&["application/pdf"]),
        "archive" => MediaType::OneOf(&[
            "application/zip",
            "application/x-tar",
            "application/gzip",
            "application/x-7z-compressed",
            "application/x-rar-compressed",
            "application/x-bzip2",
        ]),
        "image" | "video" | "audio" => MediaType::Prefix(format!("{v}/")),
        _ if v.contains('/') => MediaType::Prefix(v),
        _ => {
            return Err(KqlError::BadValue {
                key: "mediatype",
                value: value.to_owned(),
                expected: "document, spreadsheet, presentation, pdf, image, video, audio, \
                           folder, archive or a media type",
            });
        }
    })
}

/// Nanoseconds in a day.
pub const DAY_NS: i64 = 86_400 * 1_000_000_000;

/// `YYYY-MM-DD` (midnight UTC) or an RFC 3339 time `YYYY-MM-DDTHH:MM[:SS[.frac]]` with `Z`
/// or an offset (UTC without), in Unix nanoseconds. With `:` (equal) a time still means its
/// whole day.
fn instant_ns(value: &str) -> Option<i64> {
    let Some((date, time)) = value.split_once(['T', 't']) else {
        return day_start_ns(value);
    };
    let day = day_start_ns(date)?;
    let (clock, offset_s) = match time.find(['Z', 'z', '+', '-']) {
        None => (time, 0),
        Some(at) => {
            let (clock, zone) = time.split_at(at);
            let offset = match zone {
                "Z" | "z" => 0,
                _ => {
                    let sign = if zone.starts_with('-') { -1 } else { 1 };
                    let (h, m) = zone[1..].split_once(':')?;
                    let (h, m): (i64, i64) = (h.parse().ok()?, m.parse().ok()?);
                    if h > 23 || m > 59 {
                        return None;
                    }
                    sign * (h * 3600 + m * 60)
                }
            };
            (clock, offset)
        }
    };
    let mut parts = clock.splitn(3, ':');
    let h: i64 = parts.next()?.parse().ok()?;
    let m: i64 = parts.next()?.parse().ok()?;
    let s: i64 = match parts.next() {
        None => 0,
        Some(sec) => sec.split('.').next()?.parse().ok()?,
    };
    if h > 23 || m > 59 || s > 60 {
        return None;
    }
    day.checked_add((h * 3600 + m * 60 + s - offset_s).checked_mul(1_000_000_000)?)
}

/// Midnight UTC of `YYYY-MM-DD` in Unix nanoseconds.
fn day_start_ns(value: &str) -> Option<i64> {
    let mut parts = value.splitn(3, '-');
    let y: i64 = parts.next()?.parse().ok()?;
    let m: i64 = parts.next()?.parse().ok()?;
    let d: i64 = parts.next()?.parse().ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || !(1970..=9999).contains(&y) {
        return None;
    }
    arca_proto::civil::days_from_civil(y, m, d).checked_mul(DAY_NS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Box<Expr> {
        Box::new(Expr::Name(s.into()))
    }

    #[test]
    fn the_forms_clients_send() {
        assert_eq!(
            parse(r#"name:"*report*""#),
            Ok(Expr::Name("*report*".into()))
        );
        assert_eq!(parse("report"), Ok(Expr::Name("report".into())));
        assert_eq!(
            parse(r#"name:"*a*" AND content:"big cat""#),
            Ok(Expr::And(
                name("*a*"),
                Box::new(Expr::Content("big cat".into()))
            ))
        );
        assert_eq!(
            parse("a OR b c"),
            Ok(Expr::Or(
                name("a"),
                Box::new(Expr::And(name("b"), name("c")))
            ))
        );
        assert_eq!(
            parse("(a OR b) mediatype:folder"),
            Ok(Expr::And(
                Box::new(Expr::Or(name("a"), name("b"))),
                Box::new(Expr::MediaType(MediaType::Folder))
            ))
        );
        assert_eq!(
            parse("mtime>=2024-01-02"),
            Ok(Expr::Mtime(Cmp::Ge, 19_724 * DAY_NS))
        );
        // A time, as Nextcloud's SEARCH literals are turned into (seconds after midnight,
        // minus the offset).
        let at = 19_724 * DAY_NS + (10 * 3600 + 30 * 60 + 5) * 1_000_000_000;
        assert_eq!(
            parse(r#"mtime>="2024-01-02T10:30:05Z""#),
            Ok(Expr::Mtime(Cmp::Ge, at))
        );
        assert_eq!(
            parse(r#"mtime<"2024-01-02T12:30:05+02:00""#),
            Ok(Expr::Mtime(Cmp::Lt, at))
        );
        assert!(matches!(
            parse(r#"mtime<"2024-01-02T25:00:00Z""#),
            Err(KqlError::BadValue { .. })
        ));
        assert_eq!(parse("size<10"), Ok(Expr::Size(Cmp::Lt, 10)));
        assert_eq!(
            parse("scope:storage-users$abc"),
            Ok(Expr::Scope("storage-users$abc".into()))
        );
    }

    #[test]
    fn bad_queries_say_what_is_wrong() {
        assert_eq!(parse("  "), Err(KqlError::Empty));
        assert_eq!(parse("foo:bar"), Err(KqlError::UnknownKey("foo".into())));
        assert_eq!(parse(r#"name:"abc"#), Err(KqlError::Unterminated));
        assert_eq!(parse("(a"), Err(KqlError::Parentheses));
        assert_eq!(parse("a)"), Err(KqlError::Parentheses));
        assert_eq!(parse("a AND"), Err(KqlError::DanglingOperator("AND")));
        assert_eq!(parse("OR a"), Err(KqlError::DanglingOperator("OR")));
        assert!(matches!(
            parse("mtime>yesterday"),
            Err(KqlError::BadValue { .. })
        ));
        assert!(matches!(
            parse("mediatype:banana"),
            Err(KqlError::BadValue { .. })
        ));
        assert_eq!(parse("name>a"), Err(KqlError::BadComparison("name".into())));
        assert_eq!(parse(&"(".repeat(100)), Err(KqlError::TooDeep));
    }
}
