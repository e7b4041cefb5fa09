//! The process logger: `log` + `env_logger`, JSON lines for log pipelines, text for people.
//!
//! Level filter from `RUST_LOG` (default: info for sturnus, warn for dependencies). The format
//! comes from `--log-format auto|json|pretty` or `STURNUS_LOG_FORMAT`; `auto` writes JSON lines
//! when stdout is not a terminal and readable text when it is. Logs go to stdout. A JSON line is
//! `{"timestamp","level","target","message", ...}` with each `log` key-value as its own field.

use log::kv::{self, Key, Value, VisitSource, VisitValue};
use log::Record;
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
    let json = format.is_json(std::io::stdout().is_terminal());
    let env = env_logger::Env::default().default_filter_or(DEFAULT_FILTER);
    let mut builder = env_logger::Builder::from_env(env);
    builder.target(env_logger::Target::Stdout);
    if json {
        builder.format(|buf, record| {
            let line = json_line(&buf.timestamp_millis().to_string(), record);
            writeln!(buf, "{line}")
        });
    } else {
        builder.format(|buf, record| {
            let line = pretty_line(&buf.timestamp_millis().to_string(), record);
            writeln!(buf, "{line}")
        });
    }
    let _ = builder.try_init();
}

/// One JSON object for a record: fixed fields first, then the record's key-values.
pub fn json_line(timestamp: &str, record: &Record) -> String {
    let mut s = String::with_capacity(256);
    s.push_str("{\"timestamp\":");
    push_json_str(&mut s, timestamp);
    s.push_str(",\"level\":");
    push_json_str(&mut s, record.level().as_str());
    s.push_str(",\"target\":");
    push_json_str(&mut s, record.target());
    s.push_str(",\"message\":");
    push_json_str(&mut s, &record.args().to_string());
    let _ = record.key_values().visit(&mut JsonFields(&mut s));
    s.push('}');
    s
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

fn push_json_str(s: &mut String, text: &str) {
    s.push_str(&serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into()));
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
        self.0.push_str(&json_value(&value).to_string());
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
