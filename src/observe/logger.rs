//! The process logger: `log` + `env_logger`, JSON lines for log pipelines, text for people.
//!
//! Level filter from `RUST_LOG` (default: info for sturnus, warn for dependencies). The format
//! comes from `--log-format auto|json|pretty` or `STURNUS_LOG_FORMAT`; `auto` writes JSON lines
//! when stdout is not a terminal and readable text when it is. Logs go to stdout. A JSON line is
//! `{"timestamp","level","target","message", ...}` with each `log` key-value as its own field.

use super::flat_json::{Buffer, Object, Text};
use log::kv::{self, Key, Value, VisitSource, VisitValue};
use log::Record;
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use std::io::{IsTerminal, Write};

/// The filter used when `RUST_LOG` is not set.
pub const DEFAULT_FILTER: &str = "warn,sturnus=info";

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// JSON lines when stdout is not a terminal, text when it is.
    #[default]
    Auto,
    /// One JSON object per line.
    Json,
    /// Readable text.
    Pretty,
}

impl LogFormat {
    /// Whether this format writes JSON, given whether stdout is a terminal.
    pub fn is_json(self, stdout_is_terminal: bool) -> bool {
        match self {
            LogFormat::Auto => !stdout_is_terminal,
            LogFormat::Json => true,
            LogFormat::Pretty => false,
        }
    }
}

/// Installs the logger (once; later calls do nothing).
pub fn init(format: LogFormat) {
    let env = env_logger::Env::default().default_filter_or(DEFAULT_FILTER);
    install(format, env_logger::Builder::from_env(env));
}

/// Installs the logger with a fixed level filter (e.g. `warn`), whatever `RUST_LOG` says: for
/// `sturnus demo`, whose screen belongs to its tables.
pub fn init_with_filter(format: LogFormat, filter: &str) {
    let mut builder = env_logger::Builder::new();
    builder.parse_filters(filter);
    install(format, builder);
}

/// Sets `builder`'s output up for `format` and installs it (once; later calls do nothing).
fn install(format: LogFormat, mut builder: env_logger::Builder) {
    let json = format.is_json(std::io::stdout().is_terminal());
    if json {
        // JSON lines go to stdout through the log sink, which batches access lines; env_logger
        // only filters and formats. (Its own writer would also scan every byte for terminal
        // escapes and ask the kernel whether stdout is a terminal before every line.)
        builder.target(env_logger::Target::Pipe(Box::new(std::io::sink())));
        builder.write_style(env_logger::WriteStyle::Never);
        builder.format(|_, record| {
            let batch = record.target() == super::access_log::TARGET;
            let now = super::timestamp::now();
            record_line(now.as_str(), record, |line| line.write(batch));
            Ok(())
        });
        WRITES_JSON.store(true, std::sync::atomic::Ordering::Relaxed);
    } else {
        builder.target(env_logger::Target::Stdout);
        builder.format(|buf, record| {
            let line = pretty_line(&buf.timestamp_millis().to_string(), record);
            writeln!(buf, "{line}")
        });
    }
    let _ = builder.try_init();
}

/// Room for a whole access line, so formatting one does not reallocate.
const LINE_CAPACITY: usize = 1024;

/// Set once JSON lines are being written (see [`writes_json`]).
static WRITES_JSON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether the installed logger writes JSON lines, so a record that is [`Serialize`] may be
/// written directly as a [`JsonLine`] instead of going through `log`'s key-values.
pub fn writes_json() -> bool {
    WRITES_JSON.load(std::sync::atomic::Ordering::Relaxed)
}

/// One JSON log line: the fixed fields, then `fields`' own fields at the same level, written
/// by [`flat_json`](super::flat_json).
pub struct JsonLine<'a, F> {
    /// When: UTC, RFC 3339, milliseconds ([`super::timestamp::now`]).
    pub timestamp: &'a str,
    /// The level (`INFO`, `WARN`, ...).
    pub level: log::Level,
    /// The `log` target.
    pub target: Text<'a>,
    /// The message.
    pub message: Text<'a>,
    /// The line's own fields (a struct or map of flat values), written after the fixed ones.
    pub fields: F,
}

impl<F: Serialize> JsonLine<'_, F> {
    /// The line without its newline (empty if a field cannot be written as JSON).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut line = Buffer::with_capacity(LINE_CAPACITY);
        self.append_to(&mut line);
        line.bytes
    }

    /// Appends the line without its newline to `out`; `false` (and `out`'s bytes as they were)
    /// if a field cannot be written as a flat JSON value.
    pub fn append_to(&self, out: &mut Buffer) -> bool {
        let start = out.bytes.len();
        let mut line = Object::open(out);
        let written = line.field("timestamp", self.timestamp).is_ok()
            && line
                .text_field("level", Text::Fixed(self.level.as_str()))
                .is_ok()
            && line.text_field("target", self.target).is_ok()
            && line.text_field("message", self.message).is_ok()
            && line.fields(&self.fields).is_ok();
        line.close();
        if !written {
            out.bytes.truncate(start);
        }
        written
    }

    /// Writes the line to stdout; `batch` as in [`super::log_sink::write_line`]. The line is
    /// built in a buffer this thread keeps, so writing one allocates nothing.
    pub fn write(&self, batch: bool) {
        let write_in = |line: &mut Buffer| {
            line.bytes.clear();
            if self.append_to(line) {
                line.bytes.push(b'\n');
                super::log_sink::write_line(&line.bytes, batch);
            }
            line.bytes.shrink_to(LINE_CAPACITY);
        };
        // The thread's buffer is gone while the thread ends, and busy if writing a line logs.
        let done = LINE
            .try_with(|cell| cell.try_borrow_mut().map(|mut line| write_in(&mut line)))
            .is_ok_and(|written| written.is_ok());
        if !done {
            write_in(&mut Buffer::with_capacity(LINE_CAPACITY));
        }
    }
}

thread_local! {
    /// This thread's buffer for the line being written (see [`JsonLine::write`]).
    static LINE: std::cell::RefCell<Buffer> =
        std::cell::RefCell::new(Buffer::with_capacity(LINE_CAPACITY));
}

/// A number as JSON in the text `f64`'s `Display` gives (`20`, `12.345`); `null` when not
/// finite, which JSON cannot write.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Number(pub f64);

/// Whole numbers up to this magnitude are written without a fraction, as `Display` writes them.
const WHOLE_LIMIT: f64 = 1e15;

impl Serialize for Number {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.0;
        if !v.is_finite() {
            s.serialize_none()
        } else if v.abs() < WHOLE_LIMIT && (v as i64) as f64 == v {
            s.serialize_i64(v as i64)
        } else {
            s.serialize_f64(v)
        }
    }
}

/// One JSON object for a record: fixed fields first, then the record's key-values.
pub fn json_line(timestamp: &str, record: &Record) -> String {
    record_line(timestamp, record, |line| {
        String::from_utf8(line.to_bytes()).unwrap_or_default()
    })
}

/// Calls `f` with `record`'s [`JsonLine`] stamped `timestamp`.
fn record_line<R>(
    timestamp: &str,
    record: &Record,
    f: impl FnOnce(&JsonLine<KeyValues>) -> R,
) -> R {
    let owned;
    let message = match record.args().as_str() {
        Some(message) => message,
        None => {
            owned = record.args().to_string();
            &owned
        }
    };
    f(&JsonLine {
        timestamp,
        level: record.level(),
        target: Text::Passing(record.target()),
        message: Text::Passing(message),
        fields: KeyValues(record.key_values()),
    })
}

/// A record's key-values as JSON fields, with the types [`json_value`] gives.
struct KeyValues<'a>(&'a dyn kv::Source);

impl Serialize for KeyValues<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut fields = JsonFields {
            map: s.serialize_map(None)?,
            failed: None,
        };
        let _ = self.0.visit(&mut fields);
        match fields.failed {
            Some(e) => Err(e),
            None => fields.map.end(),
        }
    }
}

/// Writes each key-value into a JSON object, keeping the first error.
struct JsonFields<M: SerializeMap> {
    map: M,
    failed: Option<M::Error>,
}

impl<'kvs, M: SerializeMap> VisitSource<'kvs> for JsonFields<M> {
    fn visit_pair(&mut self, key: Key<'kvs>, value: Value<'kvs>) -> Result<(), kv::Error> {
        if self.failed.is_none() {
            if let Err(e) = self.map.serialize_entry(key.as_str(), &json_value(&value)) {
                self.failed = Some(e);
            }
        }
        Ok(())
    }
}

/// One readable line: `timestamp LEVEL target: message key=value ...` (absent values skipped).
pub fn pretty_line(timestamp: &str, record: &Record) -> String {
    let mut s = format!(
        "{timestamp} {:<5} {}: {}",
        record.level(),
        record.target(),
        record.args()
    );
    let _ = record.key_values().visit(&mut TextFields(&mut s));
    s
}

/// `fields` (a value that serializes as a JSON object) as ` key=value` pairs for a readable
/// line, in its order, absent values skipped.
pub fn pretty_fields(fields: &impl Serialize) -> String {
    let mut s = String::new();
    let pairs = serde_json::to_vec(fields).and_then(|json| serde_json::from_slice(&json));
    if let Ok(Pairs(pairs)) = pairs {
        for (key, value) in pairs {
            push_pretty_pair(&mut s, &key, value);
        }
    }
    s
}

/// A JSON object's fields in their order (a `serde_json::Map` sorts them).
struct Pairs(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for Pairs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct InOrder;
        impl<'de> serde::de::Visitor<'de> for InOrder {
            type Value = Pairs;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Pairs, A::Error> {
                let mut pairs = Vec::new();
                while let Some(pair) = map.next_entry()? {
                    pairs.push(pair);
                }
                Ok(Pairs(pairs))
            }
        }
        d.deserialize_map(InOrder)
    }
}

/// Appends ` key=value` (strings without their quotes), or nothing for `null`.
fn push_pretty_pair(s: &mut String, key: &str, value: serde_json::Value) {
    let shown = match value {
        serde_json::Value::Null => return,
        serde_json::Value::String(text) => text,
        other => other.to_string(),
    };
    s.push(' ');
    s.push_str(key);
    s.push('=');
    s.push_str(&shown);
}

/// A key-value as JSON: numbers, booleans, strings and `null` keep their type; anything else
/// becomes its text.
fn json_value(value: &Value) -> serde_json::Value {
    let mut out = ToJson(serde_json::Value::Null);
    if value.visit(&mut out).is_err() {
        return serde_json::Value::String(value.to_string());
    }
    out.0
}

struct ToJson(serde_json::Value);

impl<'v> VisitValue<'v> for ToJson {
    fn visit_any(&mut self, value: Value) -> Result<(), kv::Error> {
        self.0 = serde_json::Value::String(value.to_string());
        Ok(())
    }
    fn visit_null(&mut self) -> Result<(), kv::Error> {
        self.0 = serde_json::Value::Null;
        Ok(())
    }
    fn visit_u64(&mut self, value: u64) -> Result<(), kv::Error> {
        self.0 = value.into();
        Ok(())
    }
    fn visit_i64(&mut self, value: i64) -> Result<(), kv::Error> {
        self.0 = value.into();
        Ok(())
    }
    fn visit_f64(&mut self, value: f64) -> Result<(), kv::Error> {
        self.0 = serde_json::to_value(Number(value)).unwrap_or(serde_json::Value::Null);
        Ok(())
    }
    fn visit_bool(&mut self, value: bool) -> Result<(), kv::Error> {
        self.0 = value.into();
        Ok(())
    }
    fn visit_str(&mut self, value: &str) -> Result<(), kv::Error> {
        self.0 = value.into();
        Ok(())
    }
}

struct TextFields<'a>(&'a mut String);

impl<'kvs> VisitSource<'kvs> for TextFields<'_> {
    fn visit_pair(&mut self, key: Key<'kvs>, value: Value<'kvs>) -> Result<(), kv::Error> {
        push_pretty_pair(self.0, key.as_str(), json_value(&value));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use log::kv::ToValue;
    use log::Level;

    fn with_record<R>(f: impl FnOnce(&Record) -> R) -> R {
        let kvs: [(&str, Value); 5] = [
            ("request_id", Value::from("abc")),
            ("status", Value::from(200u16)),
            ("stream", Value::from(true)),
            ("ttfc_ms", Value::from(12.5f64)),
            ("alias", Option::<&str>::None.to_value()),
        ];
        let args = format_args!("access \"quoted\"\nline");
        let record = Record::builder()
            .args(args)
            .level(Level::Info)
            .target("sturnus::access")
            .key_values(&kvs)
            .build();
        f(&record)
    }

    #[test]
    fn json_lines_carry_fixed_fields_and_key_values() {
        let line = with_record(|r| json_line("2024-01-02T03:04:05.678Z", r));
        assert!(!line.contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["timestamp"], "2024-01-02T03:04:05.678Z");
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["target"], "sturnus::access");
        assert_eq!(v["message"], "access \"quoted\"\nline");
        assert_eq!(v["request_id"], "abc");
        assert_eq!(v["status"], 200);
        assert_eq!(v["stream"], true);
        assert_eq!(v["ttfc_ms"], 12.5);
        assert!(v["alias"].is_null());
        assert!(line.starts_with("{\"timestamp\":"));
    }

    #[test]
    fn numbers_read_as_f64_display_writes_them() {
        let mut values = vec![
            0.0, 0.001, 0.01, 0.1, 1.0, 12.5, 12.345, 20.0, 999.999, 1000.0, -1.5, -3.0,
        ];
        let mut x = 0.000_123_4_f64;
        while x < 1e7 {
            values.push(crate::observe::access_log::millis(x));
            x = x * 1.37 + 0.000_001;
        }
        for v in values {
            assert_eq!(serde_json::to_string(&Number(v)).unwrap(), format!("{v}"));
        }
        for v in [f64::NAN, f64::INFINITY] {
            assert_eq!(serde_json::to_string(&Number(v)).unwrap(), "null");
        }
    }

    #[test]
    fn messages_with_control_characters_stay_on_one_line() {
        for text in [
            "",
            "plain",
            "caf\u{e9} \u{65e5}\u{672c}",
            "q\"b\\s/\n\r\t\u{0}\u{1b}[31m\u{7f}\u{1f}end",
        ] {
            let line = json_line(
                "T",
                &Record::builder()
                    .args(format_args!("{text}"))
                    .level(Level::Warn)
                    .target("t")
                    .build(),
            );
            assert!(!line.bytes().any(|b| b < 0x20), "{line:?}");
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["message"], text);
        }
    }

    #[test]
    fn json_line_values_match_their_json_types() {
        let kvs: [(&str, Value); 6] = [
            ("f", Value::from(0.125f64)),
            ("whole", Value::from(2000.0f64)),
            ("nan", Value::from(f64::NAN)),
            ("neg", Value::from(-3i64)),
            ("shown", Value::from_display(&'x')),
            ("some", Some(404u16).to_value()),
        ];
        let record = Record::builder()
            .args(format_args!("m"))
            .level(Level::Warn)
            .target("t")
            .key_values(&kvs)
            .build();
        let v: serde_json::Value = serde_json::from_str(&json_line("T", &record)).unwrap();
        assert_eq!(v["f"], 0.125);
        assert_eq!(v["whole"], 2000.0);
        assert!(v["nan"].is_null());
        assert_eq!(v["neg"], -3);
        assert_eq!(v["shown"], "x");
        assert_eq!(v["some"], 404);
        assert_eq!(v["level"], "WARN");
    }

    #[test]
    fn pretty_lines_are_readable_and_skip_absent_values() {
        let line = with_record(|r| pretty_line("T", r));
        assert!(
            line.starts_with("T INFO  sturnus::access: access"),
            "{line}"
        );
        assert!(line.ends_with(" request_id=abc status=200 stream=true ttfc_ms=12.5"));
        assert!(!line.contains("alias"));
    }

    #[test]
    fn values_keep_their_json_types() {
        use serde_json::json;
        assert_eq!(json_value(&Value::from(-3i64)), json!(-3));
        assert_eq!(json_value(&Value::from(7u64)), json!(7));
        assert_eq!(json_value(&Value::from(0.5f64)), json!(0.5));
        assert_eq!(json_value(&Value::from(f64::NAN)), json!(null));
        assert_eq!(json_value(&Value::from(false)), json!(false));
        assert_eq!(json_value(&Value::from("a\"b")), json!("a\"b"));
        assert_eq!(json_value(&Option::<u16>::None.to_value()), json!(null));
        assert_eq!(json_value(&Some(404u16).to_value()), json!(404));
        assert_eq!(json_value(&Value::from_display(&'x')), json!("x"));
    }

    #[test]
    fn auto_means_json_unless_stdout_is_a_terminal() {
        assert!(LogFormat::Auto.is_json(false));
        assert!(!LogFormat::Auto.is_json(true));
        assert!(LogFormat::Json.is_json(true));
        assert!(!LogFormat::Pretty.is_json(false));
    }
}
