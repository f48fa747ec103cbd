//! XML escaping for the writer and the (non-expanding) unescaping used by the parser.
//!
//! Only the five predefined entities and numeric character references are ever resolved:
//! nothing here can expand a user-defined entity, so an entity bomb has nothing to grow from.

use std::borrow::Cow;

/// Why an escaped string could not be unescaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UnescapeError {
    /// `&name;` with a name other than the five predefined ones.
    Entity(String),
    /// `&` without `;`, a bad number, or a character XML does not allow.
    Malformed(String),
}

/// Appends `s` as XML character data: `&`, `<` and `>` escaped; quotes stay literal, as oCIS
/// writes etags (`<d:getetag>"abc"</d:getetag>`).
pub fn escape_text(s: &str, out: &mut String) {
    escape_into(s, out, false);
}

/// Appends `s` for a double-quoted attribute value (`"` escaped as well).
pub fn escape_attr(s: &str, out: &mut String) {
    escape_into(s, out, true);
}

/// Whether any byte of `bytes` must be escaped. Written without early exits inside a
/// 32-byte chunk so that it compiles to vector compares: most values (ids, etags, names)
/// need no escaping and take this path only.
#[inline]
fn needs_escape(bytes: &[u8], attr: bool) -> bool {
    bytes.chunks(32).any(|chunk| {
        chunk.iter().fold(false, |acc, &b| {
            acc | (b == b'&')
                | (b == b'<')
                | (b == b'>')
                | (b == b'\r')
                | (attr & ((b == b'"') | (b == b'\t') | (b == b'\n')))
        })
    })
}

#[inline]
fn escape_into(s: &str, out: &mut String, attr: bool) {
    let bytes = s.as_bytes();
    if !needs_escape(bytes, attr) {
        out.push_str(s);
        return;
    }
    let mut last = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let rep = match b {
            b'&' => "&amp;",
            b'<' => "&lt;",
            b'>' => "&gt;",
            b'"' if attr => "&quot;",
            // Tabs, newlines and CRs in attribute values would be normalized to spaces
            // by a reader; keep them as character references so they round-trip.
            b'\t' if attr => "&#9;",
            b'\n' if attr => "&#10;",
            b'\r' => "&#13;",
            _ => continue,
        };
        out.push_str(&s[last..i]);
        out.push_str(rep);
        last = i + 1;
    }
    out.push_str(&s[last..]);
}

/// Returns `s` escaped as character data, borrowing when nothing needs escaping.
pub fn escape_text_cow(s: &str) -> Cow<'_, str> {
    if needs_escape(s.as_bytes(), false) {
        let mut out = String::with_capacity(s.len() + 8);
        escape_text(s, &mut out);
        Cow::Owned(out)
    } else {
        Cow::Borrowed(s)
    }
}

/// Whether `c` may appear in an XML 1.0 document (XML 1.0 §2.2 `Char`).
pub(crate) fn is_xml_char(c: char) -> bool {
    matches!(c,
        '\u{9}' | '\u{A}' | '\u{D}'
        | '\u{20}'..='\u{D7FF}'
        | '\u{E000}'..='\u{FFFD}'
        | '\u{10000}'..='\u{10FFFF}')
}

/// The replacement of a predefined entity (`lt`, `gt`, `amp`, `apos`, `quot`).
pub(crate) fn predefined_entity(name: &str) -> Option<&'static str> {
    Some(match name {
        "lt" => "<",
        "gt" => ">",
        "amp" => "&",
        "apos" => "'",
        "quot" => "\"",
        _ => return None,
    })
}

/// Resolves a character reference body (`#65536`, `#x10000`), refusing characters XML
/// does not allow (a NUL or a control character in a value would make our output invalid).
pub(crate) fn char_ref(body: &str) -> Result<char, UnescapeError> {
    let num = body
        .strip_prefix('#')
        .ok_or_else(|| UnescapeError::Entity(body.to_string()))?;
    let code = if let Some(hex) = num.strip_prefix('x') {
        u32::from_str_radix(hex, 16).ok()
    } else if num.bytes().all(|b| b.is_ascii_digit()) {
        num.parse::<u32>().ok()
    } else {
        None
    };
    match code.and_then(char::from_u32) {
        Some(c) if is_xml_char(c) => Ok(c),
        _ => Err(UnescapeError::Malformed(format!(
            "invalid character reference '&{}'",
            truncate(body, 16)
        ))),
    }
}

/// Unescapes `&...;` references in `s` (predefined entities and character references only).
pub(crate) fn unescape(s: &str) -> Result<Cow<'_, str>, UnescapeError> {
    if !s.contains('&') {
        return Ok(Cow::Borrowed(s));
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let after = &rest[amp + 1..];
        let semi = after
            .find(';')
            .ok_or_else(|| UnescapeError::Malformed("'&' without a terminating ';'".to_string()))?;
        let name = &after[..semi];
        if name.starts_with('#') {
            out.push(char_ref(name)?);
        } else if let Some(rep) = predefined_entity(name) {
            out.push_str(rep);
        } else {
            return Err(UnescapeError::Entity(name.to_string()));
        }
        rest = &after[semi + 1..];
    }
    out.push_str(rest);
    Ok(Cow::Owned(out))
}

/// Cuts `s` to at most `max` bytes on a char boundary (for error messages).
pub(crate) fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A printable, single-line, bounded rendering of untrusted text for error messages.
pub(crate) fn one_line(s: &str, max: usize) -> String {
    let cut = truncate(s, max);
    let mut out: String = cut
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if cut.len() < s.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_text_and_attributes() {
        let mut s = String::new();
        escape_text(r#"a&b<c>d"e'"#, &mut s);
        assert_eq!(s, r#"a&amp;b&lt;c&gt;d"e'"#);
        let mut a = String::new();
        escape_attr("x\"y&\n", &mut a);
        assert_eq!(a, "x&quot;y&amp;&#10;");
        assert!(matches!(escape_text_cow("plain"), Cow::Borrowed("plain")));
        assert_eq!(escape_text_cow("1<2"), "1&lt;2");
    }

    #[test]
    fn unescapes_only_predefined_and_char_refs() {
        assert_eq!(unescape("a &amp; b &lt;&#65;&#x42;").unwrap(), "a & b <AB");
        assert_eq!(unescape("&#65536;").unwrap(), "\u{10000}");
        assert_eq!(
            unescape("&xxe;"),
            Err(UnescapeError::Entity("xxe".to_string()))
        );
        assert!(matches!(unescape("&#0;"), Err(UnescapeError::Malformed(_))));
        assert!(matches!(unescape("&#1;"), Err(UnescapeError::Malformed(_))));
        assert!(matches!(
            unescape("&#xD800;"),
            Err(UnescapeError::Malformed(_))
        ));
        assert!(matches!(
            unescape("a & b"),
            Err(UnescapeError::Malformed(_))
        ));
    }

    #[test]
    fn one_line_messages() {
        assert_eq!(one_line("a\nb\r\tc", 100), "a b  c");
        assert_eq!(one_line("ééé", 3), "é…");
    }
}
