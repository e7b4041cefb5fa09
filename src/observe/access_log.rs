//! The access log: one structured line per request, logged under the target `sturnus::access`.
//!
//! The fields are top-level JSON fields next to `timestamp` and `level`, in the order
//! [`AccessRecord`] declares them: serialized straight into the line when the logger writes
//! JSON, else shown as ` key=value` text (the readable format). Only ids, names from the config,
//! numbers and the path are logged: never a header value, a query string, a key or any request
//! or response content.

use super::flat_json::{Buffer, Text};
use super::logger::{JsonLine, Number};
use serde::{Serialize, Serializer};

/// The log target of access lines (filter them with `RUST_LOG=sturnus::access=off`).
pub const TARGET: &str = "sturnus::access";

/// The message of every access line.
pub const MESSAGE: &str = "access";

/// How a request ended, as the access log and the routing statistics see it; serialized as the
/// `outcome` field value (`success`, `failure`, `client_error`, `client_closed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// A 2xx (or other non-failure) answer.
    Success,
    /// A transport failure, a provider failure status (5xx, 408, 429, 401, 403) or an error
    /// sturnus could not avoid (503 credentials, 502/504).
    Failure,
    /// The client's fault: a 4xx answer, or the client went away before it was routed.
    ClientError,
    /// The client closed its connection while the provider was answering (logged as 499).
    ClientClosed,
}

/// Everything one access line says about a request: its fields, in this order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AccessRecord<'a> {
    /// The request's id (also sent as `x-request-id`).
    pub request_id: &'a str,
    /// The trace id (32 hex digits).
    pub trace_id: &'a str,
    /// sturnus's span id (16 hex digits), the parent-id the provider saw.
    pub span_id: &'a str,
    /// The caller's span id, when it sent a valid `traceparent`.
    pub parent_span_id: Option<&'a str>,
    /// HTTP method.
    pub method: &'a str,
    /// Request path without the query string.
    pub path: &'a str,
    /// The authenticated client's configured name (`[auth]`), never its credential.
    pub client: Option<&'a str>,
    /// The configured alias, when the request was routed.
    pub alias: Option<&'a str>,
    /// The chosen provider, when routed.
    pub provider: Option<&'a str>,
    /// The chosen provider-side model, when routed.
    pub model: Option<&'a str>,
    /// Whether the request asked for streaming, when routed.
    pub stream: Option<bool>,
    /// Why the candidate was chosen (`pick`, `session_affinity`, `prefix_affinity`,
    /// `held_object`), when routed.
    pub route: Option<&'a str>,
    /// The status sent to the client, if any was sent.
    pub status: Option<u16>,
    /// How the request ended.
    pub outcome: Verdict,
    /// The transport-failure kind, when there was one; for a client sturnus refused itself,
    /// the answer's `code` (`invalid_api_key`, `alias_not_allowed`, `client_rate_limited`).
    pub error_kind: Option<&'static str>,
    /// Time from sending upstream to the first response chunk, in ms.
    #[serde(serialize_with = "optional_millis")]
    pub ttfc_ms: Option<f64>,
    /// Time from receiving the request to finishing it, in ms.
    #[serde(serialize_with = "millis_number")]
    pub duration_ms: f64,
    /// Request body bytes read from the client.
    pub request_bytes: u64,
    /// Response body bytes sent to the client (relayed or sturnus's own answer).
    pub response_bytes: u64,
    /// The provider's own request id, when it sent a loggable one.
    pub upstream_request_id: Option<&'a str>,
}

/// Milliseconds rounded to microseconds, so lines stay short.
pub fn millis(seconds: f64) -> f64 {
    (seconds * 1e6).round() / 1e3
}

/// A millisecond field as its shortest decimal (`20`, `12.345`).
fn millis_number<S: Serializer>(ms: &f64, s: S) -> Result<S::Ok, S::Error> {
    Number(*ms).serialize(s)
}

/// [`millis_number`], or `null` when absent.
fn optional_millis<S: Serializer>(ms: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    ms.map(Number).serialize(s)
}

impl AccessRecord<'_> {
    /// Writes the line at info level under [`TARGET`]: serialized straight into the log sink
    /// when the logger writes JSON (once per request, `log`'s key-value path costs too much),
    /// else through `log` as readable text.
    pub fn log(&self) {
        if !log::log_enabled!(target: TARGET, log::Level::Info) {
            return;
        }
        if super::logger::writes_json() {
            let now = super::timestamp::now();
            self.json_line(now.as_str()).write(true);
            return;
        }
        log::info!(target: TARGET, "{MESSAGE}{}", super::logger::pretty_fields(self));
    }

    /// The JSON line without its newline, stamped now, as [`AccessRecord::log`] writes it.
    pub fn to_json_line(&self) -> Vec<u8> {
        let now = super::timestamp::now();
        self.json_line(now.as_str()).to_bytes()
    }

    /// [`AccessRecord::to_json_line`] appended to `out` (a buffer kept from line to line, as
    /// [`AccessRecord::log`] keeps one per thread); `false` if it could not be written.
    pub fn append_json_line(&self, out: &mut Buffer) -> bool {
        let now = super::timestamp::now();
        self.json_line(now.as_str()).append_to(out)
    }

    fn json_line<'a>(&'a self, timestamp: &'a str) -> JsonLine<'a, &'a Self> {
        JsonLine {
            timestamp,
            level: log::Level::Info,
            target: Text::Fixed(TARGET),
            message: Text::Fixed(MESSAGE),
            fields: self,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(routed: bool) -> AccessRecord<'static> {
        AccessRecord {
            request_id: "req-1",
            trace_id: "abababababababababababababababab",
            span_id: "0101010101010101",
            parent_span_id: routed.then_some("0202020202020202"),
            method: "POST",
            path: "/v1/chat/completions",
            client: None,
            alias: routed.then_some("fast"),
            provider: routed.then_some("openai"),
            model: routed.then_some("gpt \"x\""),
            stream: routed.then_some(true),
            route: routed.then_some("pick"),
            status: routed.then_some(200),
            outcome: Verdict::Success,
            error_kind: None,
            ttfc_ms: routed.then_some(12.345),
            duration_ms: 20.0,
            request_bytes: 1024,
            response_bytes: 77,
            upstream_request_id: None,
        }
    }

    #[test]
    fn the_json_line_has_every_field_in_order_with_its_json_type() {
        let line = String::from_utf8(record(true).to_json_line()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        let ts = v["timestamp"].as_str().unwrap();
        assert!(
            ts.ends_with('Z') && ts.len() == "2026-01-02T03:04:05.678Z".len(),
            "{ts}"
        );
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["target"], TARGET);
        assert_eq!(v["message"], MESSAGE);
        assert_eq!(v["model"], "gpt \"x\"");
        assert_eq!(v["stream"], true);
        assert_eq!(v["status"], 200);
        assert_eq!(v["ttfc_ms"], 12.345);
        assert_eq!(v["duration_ms"], 20.0);
        assert_eq!(v["request_bytes"], 1024);
        assert!(v["error_kind"].is_null() && v["upstream_request_id"].is_null());
        let order = [
            "timestamp",
            "level",
            "target",
            "message",
            "request_id",
            "trace_id",
            "span_id",
            "parent_span_id",
            "method",
            "path",
            "client",
            "alias",
            "provider",
            "model",
            "stream",
            "route",
            "status",
            "outcome",
            "error_kind",
            "ttfc_ms",
            "duration_ms",
            "request_bytes",
            "response_bytes",
            "upstream_request_id",
        ];
        let at = |key: &str| line.find(&format!("\"{key}\":")).unwrap();
        assert!(order.windows(2).all(|w| at(w[0]) < at(w[1])), "{line}");
        assert_eq!(v.as_object().unwrap().len(), order.len());
        let unrouted = String::from_utf8(record(false).to_json_line()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&unrouted).unwrap();
        for field in [
            "parent_span_id",
            "client",
            "alias",
            "provider",
            "model",
            "stream",
            "route",
            "status",
        ] {
            assert!(v[field].is_null(), "{field} in {unrouted}");
        }
    }

    #[test]
    fn millis_keep_microseconds() {
        assert_eq!(millis(0.0123456), 12.346);
        assert_eq!(millis(2.0), 2000.0);
    }

    #[test]
    fn verdicts_have_their_field_values() {
        for (verdict, value) in [
            (Verdict::Success, "success"),
            (Verdict::Failure, "failure"),
            (Verdict::ClientError, "client_error"),
            (Verdict::ClientClosed, "client_closed"),
        ] {
            assert_eq!(serde_json::to_value(verdict).unwrap(), value);
        }
    }

    /// The example line of docs/observability.md, byte for byte.
    #[test]
    fn the_line_reads_as_documented() {
        let documented = r#"{"timestamp":"2026-01-05T10:00:01.234Z","level":"INFO","target":"sturnus::access","message":"access","request_id":"3449abb3-dc01-4f5b-bb87-ac7338b2746d","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"2a2d064b2bdb3395","parent_span_id":"00f067aa0ba902b7","method":"POST","path":"/v1/chat/completions","client":"billing-svc","alias":"fast","provider":"groq","model":"llama-3.3-70b","stream":true,"route":"pick","status":200,"outcome":"success","error_kind":null,"ttfc_ms":182.411,"duration_ms":2310.07,"request_bytes":412,"response_bytes":5120,"upstream_request_id":"req_01h..."}"#;
        let docs = include_str!("../../docs/observability.md");
        assert!(docs.contains(documented), "docs/observability.md changed");
        let record = AccessRecord {
            request_id: "3449abb3-dc01-4f5b-bb87-ac7338b2746d",
            trace_id: "4bf92f3577b34da6a3ce929d0e0e4736",
            span_id: "2a2d064b2bdb3395",
            parent_span_id: Some("00f067aa0ba902b7"),
            method: "POST",
            path: "/v1/chat/completions",
            client: Some("billing-svc"),
            alias: Some("fast"),
            provider: Some("groq"),
            model: Some("llama-3.3-70b"),
            stream: Some(true),
            route: Some("pick"),
            status: Some(200),
            outcome: Verdict::Success,
            error_kind: None,
            ttfc_ms: Some(millis(0.182_411)),
            duration_ms: millis(2.310_07),
            request_bytes: 412,
            response_bytes: 5120,
            upstream_request_id: Some("req_01h..."),
        };
        let line = record.json_line("2026-01-05T10:00:01.234Z").to_bytes();
        assert_eq!(std::str::from_utf8(&line).unwrap(), documented);
    }

    #[test]
    fn whole_and_fractional_millis_read_as_display_writes_them() {
        let mut r = record(true);
        r.ttfc_ms = Some(millis(0.012));
        r.duration_ms = millis(0.000_001);
        let line = String::from_utf8(r.json_line("T").to_bytes()).unwrap();
        assert!(
            line.contains(r#""ttfc_ms":12,"duration_ms":0.001,"#),
            "{line}"
        );
    }

    #[test]
    fn the_readable_line_shows_present_fields_in_order() {
        let shown = super::super::logger::pretty_fields(&record(false));
        assert_eq!(
            shown,
            " request_id=req-1 trace_id=abababababababababababababababab \
             span_id=0101010101010101 method=POST path=/v1/chat/completions outcome=success \
             duration_ms=20 request_bytes=1024 response_bytes=77"
        );
    }
}
