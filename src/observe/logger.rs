//! The process logger: `log` + `env_logger`, JSON lines for log pipelines, text for people.
//!
//! Level filter from `RUST_LOG` (default: info for sturnus, warn for dependencies). The format
//! comes from `--log-format auto|json|pretty` or `STURNUS_LOG_FORMAT`; `auto` writes JSON lines
//! when stdout is not a terminal and readable text when it is. Logs go to stdout. A JSON line is
//! `{"timestamp","level","target","message", ...}` with each `log` key-value as its own field.

use log::kv::{self, Key, Value, VisitSource, VisitValue};
use log::Record;
use std::fmt::Write as _;
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
            let mut line = String::with_capacity(LINE_CAPACITY);
            write_json_line(&mut line, super::timestamp::now().as_str(), record);
            line.push('\n');
            let batch = record.target() == super::access_log::TARGET;
            super::log_sink::write_line(line.as_bytes(), batch);
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

/// Whether the installed logger writes JSON lines, so a structured line may be built directly
/// with [`JsonLine`] instead of going through `log`'s key-values.
pub fn writes_json() -> bool {
    WRITES_JSON.load(std::sync::atomic::Ordering::Relaxed)
}

/// A JSON line built field by field, the same shape as a `log` record's line: for the access
/// line, written once per request, where visiting `log`'s key-values costs more than the
/// proxying around it.
pub struct JsonLine(String);

/// A field key with its JSON punctuation, `,"name":`, written by `json_key!` at compile
/// time so a field costs one copy for its key.
#[derive(Debug, Clone, Copy)]
pub struct FieldKey(pub &'static str);

/// `json_key!("name")`: the [`FieldKey`] of the field `name` (the caller's identifier, `[a-z_]`,
/// written without escaping).
#[macro_export]
macro_rules! json_key {
    ($name:literal) => {
        $crate::observe::logger::FieldKey(concat!(",\"", $name, "\":"))
    };
}

impl JsonLine {
    /// Starts a line with its fixed fields.
    pub fn new(level: log::Level, target: &str, message: &str) -> JsonLine {
        let mut s = String::with_capacity(LINE_CAPACITY);
        push_fixed_fields(&mut s, super::timestamp::now().as_str(), level, target);
        push_json_str(&mut s, message);
        JsonLine(s)
    }

    /// Starts a field: one copy of its key, punctuation included.
    fn key(&mut self, key: FieldKey) -> &mut String {
        debug_assert!(key.0.starts_with(",\"") && key.0.ends_with("\":"));
        self.0.push_str(key.0);
        &mut self.0
    }

    /// A string field (`null` when absent).
    pub fn str(&mut self, key: FieldKey, value: Option<&str>) -> &mut Self {
        let s = self.key(key);
        match value {
            Some(v) => push_json_str(s, v),
            None => s.push_str("null"),
        }
        self
    }

    /// An integer field (`null` when absent).
    pub fn u64(&mut self, key: FieldKey, value: Option<u64>) -> &mut Self {
        let s = self.key(key);
        match value {
            Some(v) => s.push_str(itoa::Buffer::new().format(v)),
            None => s.push_str("null"),
        }
        self
    }

    /// A millisecond field already rounded to microseconds (as `access_log::millis` makes
    /// them), written as its shortest decimal — the text `f64`'s `Display` gives, without its
    /// general-purpose float formatting (`null` when absent or not finite).
    pub fn millis(&mut self, key: FieldKey, value: Option<f64>) -> &mut Self {
        let s = self.key(key);
        match value {
            Some(v) if v.is_finite() && (0.0..1e12).contains(&v) => push_millis(s, v),
            other => push_json_f64(s, other),
        }
        self
    }

    /// A boolean field (`null` when absent).
    pub fn bool(&mut self, key: FieldKey, value: Option<bool>) -> &mut Self {
        let s = self.key(key);
        s.push_str(match value {
            Some(true) => "true",
            Some(false) => "false",
            None => "null",
        });
        self
    }

    /// The finished line (without the newline).
    pub fn finish(mut self) -> String {
        self.0.push('}');
        self.0
    }

    /// Writes the line to stdout; `batch` as in [`super::log_sink::write_line`].
    pub fn write(self, batch: bool) {
        let mut line = self.finish();
        line.push('\n');
        super::log_sink::write_line(line.as_bytes(), batch);
    }
}

/// `{"timestamp":…,"level":…,"target":…,"message":` — the start of every JSON line.
fn push_fixed_fields(s: &mut String, timestamp: &str, level: log::Level, target: &str) {
    s.push_str("{\"timestamp\":\"");
    s.push_str(timestamp);
    s.push_str("\",\"level\":");
    push_json_str(s, level.as_str());
    s.push_str(",\"target\":");
    push_json_str(s, target);
    s.push_str(",\"message\":");
}

/// Appends `ms` (non-negative, below 10¹², at most three decimals) as its shortest decimal.
fn push_millis(s: &mut String, ms: f64) {
    let micros = (ms * 1000.0).round() as u64;
    s.push_str(itoa::Buffer::new().format(micros / 1000));
    let fraction = (micros % 1000) as u32;
    let text = [
        b'.',
        b'0' + (fraction / 100) as u8,
        b'0' + (fraction / 10 % 10) as u8,
        b'0' + (fraction % 10) as u8,
    ];
    // Trailing zeros go, and the point with them when the fraction is zero.
    let len = match text.iter().rposition(|&b| b != b'0') {
        Some(0) | None => 0,
        Some(last) => last + 1,
    };
    s.push_str(std::str::from_utf8(&text[..len]).unwrap_or(""));
}

/// Appends a JSON number, or `null` for an absent or non-finite one.
fn push_json_f64(s: &mut String, value: Option<f64>) {
    match value {
        Some(v) if v.is_finite() => {
            let _ = write!(s, "{v}");
        }
        _ => s.push_str("null"),
    }
}

/// One JSON object for a record: fixed fields first, then the record's key-values.
pub fn json_line(timestamp: &str, record: &Record) -> String {
    let mut s = String::with_capacity(LINE_CAPACITY);
    write_json_line(&mut s, timestamp, record);
    s
}

/// Appends [`json_line`]'s object to `s`, writing every value straight into it (this runs
/// once per request for the access line, so it builds no intermediate values).
fn write_json_line(s: &mut String, timestamp: &str, record: &Record) {
    push_fixed_fields(s, timestamp, record.level(), record.target());
    match record.args().as_str() {
        Some(message) => push_json_str(s, message),
        None => push_json_str(s, &record.args().to_string()),
    }
    let _ = record.key_values().visit(&mut JsonFields(s));
    s.push('}');
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

/// Appends `text` as a JSON string (quotes, backslashes and control characters escaped).
fn push_json_str(s: &mut String, text: &str) {
    s.push('"');
    if !text.bytes().any(|b| NEEDS_ESCAPE[usize::from(b)]) {
        s.push_str(text);
        s.push('"');
        return;
    }
    let mut plain = 0;
    for (i, b) in text.bytes().enumerate() {
        let escaped = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..=0x1f | 0x7f => "",
            _ => continue,
        };
        s.push_str(&text[plain..i]);
        if escaped.is_empty() {
            let _ = write!(s, "\\u{b:04x}");
        } else {
            s.push_str(escaped);
        }
        plain = i + 1;
    }
    s.push_str(&text[plain..]);
    s.push('"');
}

/// Whether a byte cannot appear as it is inside a JSON string.
const fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\' || b == 0x7f
}

/// [`needs_escape`] for every byte: one load per byte on the access line's hot path.
static NEEDS_ESCAPE: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = needs_escape(b as u8);
        b += 1;
    }
    table
};

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
        // Non-finite numbers have no JSON form.
        self.0 = serde_json::Number::from_f64(value).map_or(serde_json::Value::Null, Into::into);
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

struct JsonFields<'a>(&'a mut String);

impl<'kvs> VisitSource<'kvs> for JsonFields<'_> {
    fn visit_pair(&mut self, key: Key<'kvs>, value: Value<'kvs>) -> Result<(), kv::Error> {
        self.0.push(',');
        push_json_str(self.0, key.as_str());
        self.0.push(':');
        let start = self.0.len();
        if value.visit(&mut WriteJson(self.0)).is_err() {
            self.0.truncate(start);
            push_json_str(self.0, &value.to_string());
        }
        Ok(())
    }
}

/// Writes a key-value as JSON straight into the line, with the types [`json_value`] gives.
struct WriteJson<'a>(&'a mut String);

impl<'v> VisitValue<'v> for WriteJson<'_> {
    fn visit_any(&mut self, value: Value) -> Result<(), kv::Error> {
        push_json_str(self.0, &value.to_string());
        Ok(())
    }
    fn visit_null(&mut self) -> Result<(), kv::Error> {
        self.0.push_str("null");
        Ok(())
    }
    fn visit_u64(&mut self, value: u64) -> Result<(), kv::Error> {
        let _ = write!(self.0, "{value}");
        Ok(())
    }
    fn visit_i64(&mut self, value: i64) -> Result<(), kv::Error> {
        let _ = write!(self.0, "{value}");
        Ok(())
    }
    fn visit_f64(&mut self, value: f64) -> Result<(), kv::Error> {
        push_json_f64(self.0, Some(value));
        Ok(())
    }
    fn visit_bool(&mut self, value: bool) -> Result<(), kv::Error> {
        self.0.push_str(if value { "true" } else { "false" });
        Ok(())
    }
    fn visit_str(&mut self, value: &str) -> Result<(), kv::Error> {
        push_json_str(self.0, value);
        Ok(())
    }
}

struct TextFields<'a>(&'a mut String);

impl<'kvs> VisitSource<'kvs> for TextFields<'_> {
    fn visit_pair(&mut self, key: Key<'kvs>, value: Value<'kvs>) -> Result<(), kv::Error> {
        let shown = match json_value(&value) {
            serde_json::Value::Null => return Ok(()),
            serde_json::Value::String(text) => text,
            other => other.to_string(),
        };
        self.0.push(' ');
        self.0.push_str(key.as_str());
        self.0.push('=');
        self.0.push_str(&shown);
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
    fn millis_read_as_f64_display_writes_them() {
        let mut values = vec![
            0.0, 0.001, 0.01, 0.1, 1.0, 12.5, 12.345, 20.0, 999.999, 1000.0,
        ];
        let mut x = 0.000_123_4_f64;
        while x < 1e7 {
            values.push(crate::observe::access_log::millis(x));
            x = x * 1.37 + 0.000_001;
        }
        for v in values {
            let mut line = JsonLine(String::new());
            line.millis(crate::json_key!("k"), Some(v));
            assert_eq!(line.0, format!(",\"k\":{v}"), "{v:?}");
        }
        let mut line = JsonLine(String::new());
        line.millis(crate::json_key!("a"), None)
            .millis(crate::json_key!("b"), Some(f64::NAN))
            .millis(crate::json_key!("c"), Some(-1.5));
        assert_eq!(line.0, ",\"a\":null,\"b\":null,\"c\":-1.5");
    }

    #[test]
    fn json_strings_round_trip_through_a_json_parser() {
        for text in [
            "",
            "plain",
            "caf\u{e9} \u{65e5}\u{672c}",
            "q\"b\\s/\n\r\t\u{0}\u{1b}[31m\u{7f}\u{1f}end",
        ] {
            let mut s = String::new();
            push_json_str(&mut s, text);
            assert!(!s.bytes().any(|b| b < 0x20 || b == 0x7f), "{s:?}");
            let back: String = serde_json::from_str(&s).unwrap();
            assert_eq!(back, text);
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
