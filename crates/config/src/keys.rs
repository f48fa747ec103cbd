//! How a config key is declared, once: [`section!`] writes a section's struct and, for each key,
//! its path, type, default, environment variable and doc; the loader's defaults, the
//! environment mapping, the reader and the `arca init` template all follow from it.
//!
//! A plain key is one line in a `section!` (see lib.rs). A value built from several keys (the
//! proxy's TLS pair, a storage service's blobs) is a [`Part`] written by hand: its keys are
//! still declared in one [`keys!`] list next to the code that reads them.

use std::sync::LazyLock;

use config::{Map, Value, ValueKind};

use crate::ConfigError;
use crate::load::Table;

pub(crate) enum DefaultValue {
    /// No value: the setting is off until given.
    Unset,
    Text(&'static str),
    List(&'static [&'static str]),
    EmptyMap,
}

impl DefaultValue {
    /// The default as a config-rs value, as if a source had given it.
    pub(crate) fn to_value(&self) -> Option<Value> {
        let kind = match self {
            DefaultValue::Unset => return None,
            DefaultValue::Text(text) => ValueKind::String((*text).to_owned()),
            DefaultValue::List(items) => {
                ValueKind::Array(items.iter().map(|i| Value::from(*i)).collect())
            }
            DefaultValue::EmptyMap => ValueKind::Table(Map::new()),
        };
        Some(Value::new(None, kind))
    }
}

/// One leaf key.
pub(crate) struct Key {
    /// Dotted path, as `--set` takes it.
    pub path: String,
    pub default: DefaultValue,
    pub env: Option<&'static str>,
    /// Why the key exists: its doc comment, on one line.
    pub why: String,
}

impl Key {
    /// `doc` is a key's doc comment as the compiler hands it over: one line per `///`.
    pub(crate) fn new(
        prefix: &str,
        name: &str,
        default: DefaultValue,
        env: Option<&'static str>,
        doc: &str,
    ) -> Key {
        let path = join(prefix, name);
        let why = doc.split_whitespace().collect::<Vec<_>>().join(" ");
        Key {
            path,
            default,
            env,
            why,
        }
    }
}

/// A section or a value read from one sub-table: how to list its keys under a prefix, and how
/// to read it from the table at that prefix.
pub(crate) struct Part<T> {
    /// Appends the keys under `prefix`, in template order.
    pub keys: fn(prefix: &str, out: &mut Vec<Key>),
    /// Reads the value; the caller refuses whatever keys are left in the table.
    pub read: for<'a> fn(&mut Table<'a>) -> Result<T, ConfigError>,
}

/// Every leaf key, in template order (siblings next to each other).
pub(crate) static KEYS: LazyLock<Vec<Key>> = LazyLock::new(|| {
    let mut keys = Vec::new();
    (crate::Config::PART.keys)("", &mut keys);
    keys
});

/// The built-in default of a leaf key, if it has one.
pub(crate) fn default_of(path: &str) -> Option<Value> {
    KEYS.iter()
        .find(|k| k.path == path)
        .and_then(|k| k.default.to_value())
}

/// The dotted key an `ARCA_*` variable sets; `None` for names that are not ours.
pub(crate) fn key_of_env(var: &str) -> Option<&'static str> {
    KEYS.iter()
        .find(|k| k.env == Some(var))
        .map(|k| k.path.as_str())
}

/// A default as written in a declaration: `"text"`, `unset`, `{}` (an empty map), `[a, b]` or
/// the name of a constant list.
macro_rules! default_value {
    (unset) => {
        $crate::keys::DefaultValue::Unset
    };
    ({}) => {
        $crate::keys::DefaultValue::EmptyMap
    };
    ([$($item:expr),* $(,)?]) => {
        $crate::keys::DefaultValue::List(&[$($item),*])
    };
    ($text:literal) => {
        $crate::keys::DefaultValue::Text($text)
    };
    ($list:ident) => {
        $crate::keys::DefaultValue::List(&$list)
    };
}

/// A key's name: the field's, or the one given with `as "name"`.
macro_rules! key_name {
    ($field:ident) => {
        stringify!($field)
    };
    ($field:ident $name:literal) => {
        $name
    };
}

/// Keys of a hand-written [`Part`], each `/// doc` `"name" = DEFAULT $(, env "VAR")?;`, pushed
/// onto `out` under `prefix`. A name may have dots (`"s3.bucket"`).
macro_rules! keys {
    ($prefix:expr, $out:expr, {
        $( $(#[doc = $doc:literal])* $name:literal = $default:tt $(, env $env:literal)? ; )*
    }) => {{
        $(
            $out.push($crate::keys::Key::new(
                $prefix,
                $name,
                $crate::keys::default_value!($default),
                None $(.or(Some($env)))?,
                concat!($($doc, "\n"),*),
            ));
        )*
    }};
}

/// A config section: a struct whose every field is
///
/// - a key: `/// doc` `name $(as "key")?: Type = key(DEFAULT, READER $(, env "VAR")?),` where
///   READER is a `Fn(&Field) -> Result<Type, ConfigError>` (usually a `Field` method), or
/// - a sub-table: `name $(as "key")?: Type = part(PART),` with PART a [`Part<Type>`] (every
///   section has one, `Type::PART`), or
/// - no key at all: `name: Type = none(EXPR),`.
///
/// `check(FN)` after the name runs `FN(&mut value, &table)` once the section is read: the place
/// for rules across keys. The struct gets the attributes given (derives included) and its
/// fields are public, documented with their key's doc.
macro_rules! section {
    (
        $(#[$attr:meta])*
        pub struct $name:ident $(check($check:path))? {
            $(
                $(#[doc = $doc:literal])*
                $field:ident $(as $key:literal)? : $ty:ty = $kind:ident ( $($spec:tt)* )
            ),* $(,)?
        }
    ) => {
        $(#[$attr])*
        pub struct $name {
            $( $(#[doc = $doc])* pub $field: $ty, )*
        }

        impl $name {
            /// Its keys and its reader.
            pub(crate) const PART: $crate::keys::Part<Self> = $crate::keys::Part {
                keys: Self::keys,
                read: Self::read,
            };

            fn keys(prefix: &str, out: &mut Vec<$crate::keys::Key>) {
                let _ = (&prefix, &out);
                $(
                    $crate::keys::section!(@keys $kind, prefix, out,
                        $crate::keys::key_name!($field $($key)?),
                        concat!($($doc, "\n"),*), ($($spec)*));
                )*
            }

            #[allow(clippy::redundant_closure_call)]
            fn read(t: &mut $crate::load::Table<'_>) -> Result<Self, $crate::ConfigError> {
                let _ = &t;
                #[allow(unused_mut)]
                let mut value = Self {
                    $(
                        $field: $crate::keys::section!(@read $kind, t,
                            $crate::keys::key_name!($field $($key)?), ($($spec)*)),
                    )*
                };
                $( $check(&mut value, t)?; )?
                Ok(value)
            }
        }
    };

    (@keys key, $prefix:ident, $out:ident, $name:expr, $doc:expr,
        ($default:tt, $read:expr $(, env $env:literal)?)) => {
        $out.push($crate::keys::Key::new(
            $prefix,
            $name,
            $crate::keys::default_value!($default),
            None $(.or(Some($env)))?,
            $doc,
        ))
    };
    (@keys part, $prefix:ident, $out:ident, $name:expr, $doc:expr, ($part:expr)) => {
        ($part.keys)(&$crate::keys::join($prefix, $name), $out)
    };
    (@keys none, $prefix:ident, $out:ident, $name:expr, $doc:expr, ($value:expr)) => {};

    (@read key, $t:ident, $name:expr, ($default:tt, $read:expr $(, env $env:literal)?)) => {
        ($read)(&$t.field($name))?
    };
    (@read part, $t:ident, $name:expr, ($part:expr)) => {
        $t.section($name, $part.read)?
    };
    (@read none, $t:ident, $name:expr, ($value:expr)) => {
        $value
    };
}

/// `prefix.name`, or `name` at the top.
pub(crate) fn join(prefix: &str, name: &str) -> String {
    match prefix {
        "" => name.to_owned(),
        prefix => format!("{prefix}.{name}"),
    }
}

pub(crate) use {default_value, key_name, keys, section};

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn env_names_are_unique_and_prefixed() {
        let mut seen = HashSet::new();
        for var in KEYS.iter().filter_map(|k| k.env) {
            assert!(var.starts_with("ARCA_"), "{var}");
            assert!(seen.insert(var), "{var} twice");
        }
        assert_eq!(key_of_env("ARCA_PROXY_HTTP_ADDR"), Some("proxy.http.addr"));
        assert_eq!(key_of_env("ARCA_CONFIG"), None);
    }

    #[test]
    fn paths_are_unique() {
        let paths: HashSet<_> = KEYS.iter().map(|k| &k.path).collect();
        assert_eq!(paths.len(), KEYS.len());
    }
}
