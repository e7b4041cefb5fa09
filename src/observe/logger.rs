//! The process logger: `log` + `env_logger`, JSON lines for log pipelines, text for people.
//!
//! Level filter from `RUST_LOG` (default: info for sturnus, warn for dependencies). The format
//! comes from `--log-format auto|json|pretty` or `STURNUS_LOG_FORMAT`; `auto` writes JSON lines
//! when stdout is not a terminal and readable text when it is. Logs go to stdout. A JSON line is
//! `{"timestamp","level","target","message", ...}` with each `log` key-value as its own field.

use log::kv::{self, Key, Value, VisitSource};
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

/// A key-value as JSON; values that cannot be serialized become their text.
fn json_value(value: &Value) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or_else(|_| serde_json::Value::String(value.to_string()))
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
    fn auto_means_json_unless_stdout_is_a_terminal() {
        assert!(LogFormat::Auto.is_json(false));
        assert!(!LogFormat::Auto.is_json(true));
        assert!(LogFormat::Json.is_json(true));
        assert!(!LogFormat::Pretty.is_json(false));
    }
}
