//! The machinery that lets each KubeletConfiguration field be declared once: the
//! [`kubelet_section!`] macro turns one table row (Rust name, JSON name, fate, type, Go default)
//! into the struct field, its [`Default`], its [`Field`] entry (fate), its decoding (Go zero
//! values count as unset, unknown fields are refused) and its serde encoding.
//!
//! The rows themselves live in [`super::kubelet_configuration`]; nothing here names a field.

use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What deckhand does with one field of the Go `KubeletConfiguration` type.
#[derive(Debug, Clone, Copy)]
pub enum Fate {
    /// Decoded into a typed field and used; command-line flags overlay it
    /// ([`super::merge`]).
    Honoured,
    /// A nested object whose fields have their own fates.
    Section(&'static [Field]),
    /// Accepted and not used: a start-up warning when set to anything but a Go zero value
    /// ([`go_zero`]) or a value `ok` accepts, because deckhand's behaviour without it is
    /// harmless (`why` says why).
    Accepted {
        /// Values that need no warning (besides Go zero values).
        ok: fn(&Value) -> bool,
        /// Why ignoring it is harmless.
        why: &'static str,
    },
    /// Refused: start-up fails when set to anything but a Go zero value or a value `ok`
    /// accepts, because ignoring it would change what the node does.
    Refused {
        /// Values that are fine (besides Go zero values).
        ok: fn(&Value) -> bool,
        /// Why it cannot be ignored.
        why: &'static str,
    },
}

/// One field of a configuration object: its JSON name and its fate.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// The JSON (camelCase) name, as in the Go type's `json:` tag.
    pub name: &'static str,
    /// What deckhand does with it.
    pub fate: Fate,
}

/// Why a configuration document does not decode. `field` is the dotted path, e.g.
/// `authentication.x509.clientCAFile`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A field the Go type does not have.
    #[error("unknown field {field:?}")]
    UnknownField {
        /// Dotted path of the field.
        field: String,
    },
    /// A nested object given as something else.
    #[error("field {field:?} must be an object")]
    NotAnObject {
        /// Dotted path of the field.
        field: String,
    },
    /// An honoured field whose value does not fit its type (a bad duration, IP, mode, ...).
    #[error("field {field:?}: {message}")]
    Invalid {
        /// Dotted path of the field.
        field: String,
        /// What is wrong.
        message: String,
    },
}

/// Decoding context: the directory relative paths are resolved against (the Go kubelet's
/// `resolveRelativePaths`, for a file: its directory); `None` keeps them as written.
#[derive(Debug, Clone, Copy, Default)]
pub struct Context<'a> {
    /// Base of relative paths.
    pub base: Option<&'a Path>,
}

impl Context<'_> {
    /// `p` resolved against the base (unchanged when absolute, empty or without a base).
    pub fn resolve(&self, p: &str) -> String {
        match self.base {
            Some(base) if !p.is_empty() && !Path::new(p).is_absolute() => {
                base.join(p).display().to_string()
            }
            _ => p.to_string(),
        }
    }
}

/// A configuration object made by [`kubelet_section!`].
pub trait Section: Sized + Default {
    /// Its fields, in the Go type's order.
    const FIELDS: &'static [Field];
    /// Decodes `obj` (the object at dotted path `prefix`, `""` at the top). Unset fields and
    /// fields set to a Go zero value keep their Go default (pointer fields: only unset ones).
    ///
    /// Errors: [`DecodeError`].
    fn decode(obj: &Map<String, Value>, prefix: &str, cx: &Context) -> Result<Self, DecodeError>;
    /// Encodes every set field (the Go type's JSON).
    fn encode(&self) -> Map<String, Value>;
    /// Appends the accepted or refused fields that are set (any value, even a Go zero one), with
    /// their dotted paths.
    fn settings<'a>(&'a self, prefix: &str, out: &mut Vec<Setting<'a>>);
}

/// An accepted or refused field set in a configuration object.
#[derive(Debug, Clone)]
pub struct Setting<'a> {
    /// Dotted path.
    pub field: String,
    /// The value, as written.
    pub value: &'a Value,
    /// [`Fate::Accepted`] or [`Fate::Refused`].
    pub fate: Fate,
}

/// `prefix.name`, or `name` at the top.
pub fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// Fails on the first key of `obj` (in key order) that `fields` does not have.
///
/// Errors: [`DecodeError::UnknownField`].
pub fn check_known(
    obj: &Map<String, Value>,
    prefix: &str,
    fields: &[Field],
) -> Result<(), DecodeError> {
    match obj.keys().find(|k| !fields.iter().any(|f| f.name == *k)) {
        Some(k) => Err(DecodeError::UnknownField {
            field: join(prefix, k),
        }),
        None => Ok(()),
    }
}

/// Every field under `fields`, nested ones by dotted path, with its fate (objects included).
pub fn flatten(fields: &'static [Field], prefix: &str) -> Vec<(String, Fate)> {
    let mut out = Vec::new();
    for f in fields {
        let path = join(prefix, f.name);
        out.push((path.clone(), f.fate));
        if let Fate::Section(inner) = f.fate {
            out.extend(flatten(inner, &path));
        }
    }
    out
}

/// True for Go's zero values, which the Go kubelet's defaulting treats as "not set": null, `0`,
/// `""`, `"0s"`, `"0"`, `false`, `{}`, `[]`. Accepted and refused fields set to one are fine.
pub fn go_zero(v: &Value) -> bool {
    match v {
        Value::String(s) => s.is_empty() || s == "0s" || s == "0",
        v => json_zero(v),
    }
}

/// [`go_zero`], also for objects whose every member is a zero (kubeadm's
/// `logging.options.json.infoBufferSize: "0"`).
pub fn go_zero_deep(v: &Value) -> bool {
    match v {
        Value::Object(o) => o.values().all(go_zero_deep),
        v => go_zero(v),
    }
}

/// The zero value of a JSON type: null, `false`, `0`, `""`, `[]`, `{}`.
pub fn json_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// `ok` for fields with no accepted value but Go zero ones.
pub fn none(_: &Value) -> bool {
    false
}
/// `ok` for fields whose only accepted value is `true` (the Go default).
pub fn is_true(v: &Value) -> bool {
    v == &Value::Bool(true)
}
/// True when `v` is one of the strings `ok`.
pub fn is_str<const N: usize>(v: &Value, ok: [&str; N]) -> bool {
    v.as_str().is_some_and(|s| ok.contains(&s))
}

/// How a field's Rust type `T` is read from and written to JSON.
pub trait Codec<T> {
    /// Decodes a value that is not a zero ([`Codec::is_zero`]).
    ///
    /// Errors: what is wrong with the value.
    fn decode(v: &Value, cx: &Context) -> Result<T, String>;
    /// Encodes `t`.
    fn encode(t: &T) -> Value;
    /// Whether `v` is the Go zero value of the field (the field keeps its default).
    fn is_zero(v: &Value) -> bool {
        json_zero(v)
    }
}

/// serde as is.
pub struct Plain;
impl<T: serde::Serialize + serde::de::DeserializeOwned> Codec<T> for Plain {
    fn decode(v: &Value, _: &Context) -> Result<T, String> {
        T::deserialize(v).map_err(|e| e.to_string())
    }
    fn encode(t: &T) -> Value {
        serde_json::to_value(t).unwrap_or(Value::Null)
    }
}

/// A Go `metav1.Duration`: `"10s"`, `"1m30s"` ([`super::parse_go_duration`]); any zero
/// duration (`"0s"`, `"0"`, `"0m"`) is unset.
pub struct GoDuration;
impl Codec<Duration> for GoDuration {
    fn decode(v: &Value, _: &Context) -> Result<Duration, String> {
        let s = v
            .as_str()
            .ok_or_else(|| format!("{v}: expected a duration such as \"10s\""))?;
        super::parse_go_duration(s)
    }
    fn encode(t: &Duration) -> Value {
        Value::String(crate::time::go_duration(*t))
    }
    fn is_zero(v: &Value) -> bool {
        match v {
            Value::String(s) => {
                s.is_empty() || super::parse_go_duration(s).is_ok_and(|d| d.is_zero())
            }
            v => json_zero(v),
        }
    }
}

/// A path, relative ones resolved against the file's directory.
pub struct FilePath;
impl Codec<String> for FilePath {
    fn decode(v: &Value, cx: &Context) -> Result<String, String> {
        let s: String = Plain::decode(v, cx)?;
        Ok(cx.resolve(&s))
    }
    fn encode(t: &String) -> Value {
        Value::String(t.clone())
    }
}
impl Codec<Option<PathBuf>> for FilePath {
    fn decode(v: &Value, cx: &Context) -> Result<Option<PathBuf>, String> {
        let s: String = Plain::decode(v, cx)?;
        Ok(Some(PathBuf::from(cx.resolve(&s))))
    }
    fn encode(t: &Option<PathBuf>) -> Value {
        t.as_ref()
            .map_or(Value::Null, |p| Value::String(p.display().to_string()))
    }
}

/// The kubelet server's authorization mode, `Webhook` or `AlwaysAllow`.
pub struct Mode;
impl Codec<crate::server::auth::AuthorizationMode> for Mode {
    fn decode(v: &Value, cx: &Context) -> Result<crate::server::auth::AuthorizationMode, String> {
        let m: String = Plain::decode(v, cx)?;
        <crate::server::auth::AuthorizationMode as clap::ValueEnum>::from_str(&m, false)
            .map_err(|_| format!("{m:?} is not one of Webhook, AlwaysAllow"))
    }
    fn encode(t: &crate::server::auth::AuthorizationMode) -> Value {
        clap::ValueEnum::to_possible_value(t)
            .map_or(Value::Null, |p| Value::String(p.get_name().to_string()))
    }
}

/// `logging.verbosity` (Go: `uint32`), capped at 10.
pub struct Verbosity;
impl Codec<u8> for Verbosity {
    fn decode(v: &Value, cx: &Context) -> Result<u8, String> {
        let n: u32 = Plain::decode(v, cx)?;
        Ok(n.min(10) as u8)
    }
    fn encode(t: &u8) -> Value {
        Value::from(*t)
    }
}

/// A count of at least 2 (`containerLogMaxFiles`: the live file and one rotated one).
pub struct AtLeastTwo;
impl Codec<usize> for AtLeastTwo {
    fn decode(v: &Value, cx: &Context) -> Result<usize, String> {
        let n: i64 = Plain::decode(v, cx)?;
        if n < 2 {
            return Err(format!("{n}: must be at least 2"));
        }
        usize::try_from(n).map_err(|_| format!("{n} is out of range"))
    }
    fn encode(t: &usize) -> Value {
        Value::from(*t)
    }
}

/// `userNamespaces.idsPerPod`: at least 65536, a multiple of 65536, at most 2^32 − 1 (k/k
/// `validation_linux.go`).
pub struct IdsPerPod;
impl Codec<u32> for IdsPerPod {
    fn decode(v: &Value, cx: &Context) -> Result<u32, String> {
        let n: i64 = Plain::decode(v, cx)?;
        let unit = crate::userns::IDS_PER_POD_UNIT as i64;
        if n < unit {
            return Err(format!("{n}: must not be less than {unit}"));
        }
        if n % unit != 0 {
            return Err(format!("{n}: must be a multiple of {unit}"));
        }
        u32::try_from(n).map_err(|_| format!("{n}: must not be more than {}", u32::MAX))
    }
    fn encode(t: &u32) -> Value {
        Value::from(*t)
    }
}

/// Declares a configuration object, one row per field of the Go type:
///
/// ```text
/// /// doc
/// rust_name "jsonName": honoured(Type = go_default, Codec),   // zero value = unset
/// rust_name "jsonName": pointer(Type = go_default, Codec),    // Go pointer: only null = unset
/// rust_name "jsonName": accepted(ok_fn, "why it is harmless"),
/// rust_name "jsonName": refused(ok_fn, "why it cannot be ignored"),
/// rust_name "jsonName": section(NestedType),
/// ```
///
/// Accepted and refused fields are kept as written (`Option<serde_json::Value>`); deckhand only
/// compares them with their defaults ([`super::file::ConfigFile::check`]).
macro_rules! kubelet_section {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[doc = $doc:literal])*
                $field:ident $json:literal : $kind:ident $args:tt
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        pub struct $name {
            $(
                $(#[doc = $doc])*
                #[doc = $crate::config::fields::field_doc!($json, $kind $args)]
                pub $field: $crate::config::fields::field_type!($kind $args),
            )*
        }

        impl Default for $name {
            /// The Go defaults (`pkg/kubelet/apis/config/v1beta1/defaults.go`).
            fn default() -> Self {
                Self { $( $field: $crate::config::fields::field_default!($kind $args), )* }
            }
        }

        impl $crate::config::fields::Section for $name {
            const FIELDS: &'static [$crate::config::fields::Field] = &[
                $( $crate::config::fields::Field {
                    name: $json,
                    fate: $crate::config::fields::field_fate!($kind $args),
                }, )*
            ];

            #[allow(unused_variables)]
            fn decode(
                obj: &serde_json::Map<String, serde_json::Value>,
                prefix: &str,
                cx: &$crate::config::fields::Context,
            ) -> Result<Self, $crate::config::fields::DecodeError> {
                $crate::config::fields::check_known(obj, prefix, Self::FIELDS)?;
                let mut out = Self::default();
                $(
                    if let Some(v) = obj.get($json) {
                        $crate::config::fields::field_decode!(
                            $kind $args, out.$field, v, prefix, $json, cx
                        );
                    }
                )*
                Ok(out)
            }

            fn encode(&self) -> serde_json::Map<String, serde_json::Value> {
                let mut m = serde_json::Map::new();
                $(
                    let v = $crate::config::fields::field_encode!($kind $args, &self.$field);
                    if let Some(v) = v.filter(|v| !v.is_null()) {
                        m.insert($json.to_string(), v);
                    }
                )*
                m
            }

            #[allow(unused_variables)]
            fn settings<'a>(
                &'a self,
                prefix: &str,
                out: &mut Vec<$crate::config::fields::Setting<'a>>,
            ) {
                $( $crate::config::fields::field_settings!(
                    $kind $args, &self.$field, prefix, $json, out
                ); )*
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                serde::Serialize::serialize(&$crate::config::fields::Section::encode(self), s)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            /// [`Section::decode`](crate::config::fields::Section::decode), relative paths
            /// kept as written.
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let m: serde_json::Map<String, serde_json::Value> =
                    serde::Deserialize::deserialize(d)?;
                <Self as $crate::config::fields::Section>::decode(
                    &m,
                    "",
                    &$crate::config::fields::Context::default(),
                )
                .map_err(serde::de::Error::custom)
            }
        }
    };
}

macro_rules! field_doc {
    ($json:literal, honoured $a:tt) => {
        concat!("\n\n`", $json, "`: honoured.")
    };
    ($json:literal, pointer $a:tt) => {
        concat!(
            "\n\n`",
            $json,
            "`: honoured; a Go pointer (only null is unset)."
        )
    };
    ($json:literal, accepted ($ok:expr, $why:literal)) => {
        concat!(
            "`",
            $json,
            "`: accepted and not used (a warning when set): ",
            $why,
            "."
        )
    };
    ($json:literal, refused ($ok:expr, $why:literal)) => {
        concat!(
            "`",
            $json,
            "`: refused when set to anything but its default: ",
            $why,
            "."
        )
    };
    ($json:literal, section $a:tt) => {
        concat!("\n\n`", $json, "`.")
    };
}

macro_rules! field_type {
    (honoured ($t:ty = $d:expr, $c:ty)) => { $t };
    (pointer ($t:ty = $d:expr, $c:ty)) => { $t };
    (accepted $a:tt) => { Option<serde_json::Value> };
    (refused $a:tt) => { Option<serde_json::Value> };
    (section ($t:ty)) => { $t };
}

macro_rules! field_default {
    (honoured ($t:ty = $d:expr, $c:ty)) => {
        $d
    };
    (pointer ($t:ty = $d:expr, $c:ty)) => {
        $d
    };
    (accepted $a:tt) => {
        None
    };
    (refused $a:tt) => {
        None
    };
    (section ($t:ty)) => {
        <$t>::default()
    };
}

macro_rules! field_fate {
    (honoured $a:tt) => {
        $crate::config::fields::Fate::Honoured
    };
    (pointer $a:tt) => {
        $crate::config::fields::Fate::Honoured
    };
    (accepted ($ok:expr, $why:expr)) => {
        $crate::config::fields::Fate::Accepted { ok: $ok, why: $why }
    };
    (refused ($ok:expr, $why:expr)) => {
        $crate::config::fields::Fate::Refused { ok: $ok, why: $why }
    };
    (section ($t:ty)) => {
        $crate::config::fields::Fate::Section(<$t as $crate::config::fields::Section>::FIELDS)
    };
}

macro_rules! field_decode {
    (honoured ($t:ty = $d:expr, $c:ty), $slot:expr, $v:expr, $prefix:expr, $json:expr, $cx:expr) => {
        if !<$c as $crate::config::fields::Codec<$t>>::is_zero($v) {
            $slot =
                <$c as $crate::config::fields::Codec<$t>>::decode($v, $cx).map_err(|message| {
                    $crate::config::fields::DecodeError::Invalid {
                        field: $crate::config::fields::join($prefix, $json),
                        message,
                    }
                })?;
        }
    };
    (pointer ($t:ty = $d:expr, $c:ty), $slot:expr, $v:expr, $prefix:expr, $json:expr, $cx:expr) => {
        if !$v.is_null() {
            $slot =
                <$c as $crate::config::fields::Codec<$t>>::decode($v, $cx).map_err(|message| {
                    $crate::config::fields::DecodeError::Invalid {
                        field: $crate::config::fields::join($prefix, $json),
                        message,
                    }
                })?;
        }
    };
    (accepted $a:tt, $slot:expr, $v:expr, $prefix:expr, $json:expr, $cx:expr) => {
        if !$v.is_null() {
            $slot = Some($v.clone());
        }
    };
    (refused $a:tt, $slot:expr, $v:expr, $prefix:expr, $json:expr, $cx:expr) => {
        if !$v.is_null() {
            $slot = Some($v.clone());
        }
    };
    (section ($t:ty), $slot:expr, $v:expr, $prefix:expr, $json:expr, $cx:expr) => {
        match $v {
            serde_json::Value::Null => {}
            serde_json::Value::Object(o) => {
                let path = $crate::config::fields::join($prefix, $json);
                $slot = <$t as $crate::config::fields::Section>::decode(o, &path, $cx)?;
            }
            _ => {
                return Err($crate::config::fields::DecodeError::NotAnObject {
                    field: $crate::config::fields::join($prefix, $json),
                })
            }
        }
    };
}

macro_rules! field_encode {
    (honoured ($t:ty = $d:expr, $c:ty), $x:expr) => {
        Some(<$c as $crate::config::fields::Codec<$t>>::encode($x))
    };
    (pointer ($t:ty = $d:expr, $c:ty), $x:expr) => {
        Some(<$c as $crate::config::fields::Codec<$t>>::encode($x))
    };
    (accepted $a:tt, $x:expr) => {
        $x.clone()
    };
    (refused $a:tt, $x:expr) => {
        $x.clone()
    };
    (section ($t:ty), $x:expr) => {
        Some(serde_json::Value::Object(
            <$t as $crate::config::fields::Section>::encode($x),
        ))
        .filter(|v| v.as_object().is_some_and(|o| !o.is_empty()))
    };
}

macro_rules! field_settings {
    (honoured $a:tt, $x:expr, $prefix:expr, $json:expr, $out:expr) => {};
    (pointer $a:tt, $x:expr, $prefix:expr, $json:expr, $out:expr) => {};
    (accepted $a:tt, $x:expr, $prefix:expr, $json:expr, $out:expr) => {
        if let Some(value) = $x {
            $out.push($crate::config::fields::Setting {
                field: $crate::config::fields::join($prefix, $json),
                value,
                fate: $crate::config::fields::field_fate!(accepted $a),
            });
        }
    };
    (refused $a:tt, $x:expr, $prefix:expr, $json:expr, $out:expr) => {
        if let Some(value) = $x {
            $out.push($crate::config::fields::Setting {
                field: $crate::config::fields::join($prefix, $json),
                value,
                fate: $crate::config::fields::field_fate!(refused $a),
            });
        }
    };
    (section ($t:ty), $x:expr, $prefix:expr, $json:expr, $out:expr) => {
        <$t as $crate::config::fields::Section>::settings(
            $x,
            &$crate::config::fields::join($prefix, $json),
            $out,
        )
    };
}

pub(crate) use {
    field_decode, field_default, field_doc, field_encode, field_fate, field_settings, field_type,
    kubelet_section,
};
