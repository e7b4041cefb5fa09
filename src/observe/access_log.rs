//! The access log: one structured line per request, logged under the target `sturnus::access`.
//!
//! The fields are top-level JSON fields next to `timestamp` and `level`: built directly into the
//! line when the logger writes JSON, else passed as `log` key-values (the readable format). Only ids, names from the config, numbers and the path are logged:
//! never a header value, a query string, a key or any request or response content.

use super::logger::JsonLine;
use crate::json_key;

/// The log target of access lines (filter them with `RUST_LOG=sturnus::access=off`).
pub const TARGET: &str = "sturnus::access";

/// The message of every access line.
pub const MESSAGE: &str = "access";

/// How a request ended, as the access log and the routing statistics see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

impl Verdict {
    /// The `outcome` field value.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Success => "success",
            Verdict::Failure => "failure",
            Verdict::ClientError => "client_error",
            Verdict::ClientClosed => "client_closed",
        }
    }
}

/// Everything one access line says about a request.
#[derive(Debug, Clone, PartialEq)]
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
    /// The configured alias, when the request was routed.
    pub alias: Option<&'a str>,
    /// The chosen provider, when routed.
    pub provider: Option<&'a str>,
    /// The chosen provider-side model, when routed.
    pub model: Option<&'a str>,
    /// Whether the request asked for streaming, when routed.
    pub stream: Option<bool>,
    /// The status sent to the client, if any was sent.
    pub status: Option<u16>,
    /// How the request ended.
    pub outcome: Verdict,
    /// The transport-failure kind, when there was one.
    pub error_kind: Option<&'static str>,
    /// Time from sending upstream to the first response chunk, in ms.
    pub ttfc_ms: Option<f64>,
    /// Time from receiving the request to finishing it, in ms.
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

impl AccessRecord<'_> {
    /// Writes the line at info level under [`TARGET`]: built directly when the logger writes
    /// JSON (once per request, the `log` key-value path costs too much), else through `log`.
    pub fn log(&self) {
        if !log::log_enabled!(target: TARGET, log::Level::Info) {
            return;
        }
        if super::logger::writes_json() {
            self.json_line().write(true);
            return;
        }
        log::info!(
            target: TARGET,
            request_id = self.request_id,
            trace_id = self.trace_id,
            span_id = self.span_id,
            parent_span_id = self.parent_span_id,
            method = self.method,
            path = self.path,
            alias = self.alias,
            provider = self.provider,
            model = self.model,
            stream = self.stream,
            status = self.status,
            outcome = self.outcome.as_str(),
            error_kind = self.error_kind,
            ttfc_ms = self.ttfc_ms,
            duration_ms = self.duration_ms,
            request_bytes = self.request_bytes,
            response_bytes = self.response_bytes,
            upstream_request_id = self.upstream_request_id;
            "{MESSAGE}"
        );
    }
}

impl AccessRecord<'_> {
    /// The JSON line: the same fields, in the same order, as the `log` record carries.
    fn json_line(&self) -> JsonLine {
        let mut line = JsonLine::new(log::Level::Info, TARGET, MESSAGE);
        line.str(json_key!("request_id"), Some(self.request_id))
            .str(json_key!("trace_id"), Some(self.trace_id))
            .str(json_key!("span_id"), Some(self.span_id))
            .str(json_key!("parent_span_id"), self.parent_span_id)
            .str(json_key!("method"), Some(self.method))
            .str(json_key!("path"), Some(self.path))
            .str(json_key!("alias"), self.alias)
            .str(json_key!("provider"), self.provider)
            .str(json_key!("model"), self.model)
            .bool(json_key!("stream"), self.stream)
            .u64(json_key!("status"), self.status.map(u64::from))
            .str(json_key!("outcome"), Some(self.outcome.as_str()))
            .str(json_key!("error_kind"), self.error_kind)
            .millis(json_key!("ttfc_ms"), self.ttfc_ms)
            .millis(json_key!("duration_ms"), Some(self.duration_ms))
            .u64(json_key!("request_bytes"), Some(self.request_bytes))
            .u64(json_key!("response_bytes"), Some(self.response_bytes))
            .str(json_key!("upstream_request_id"), self.upstream_request_id);
        line
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
            alias: routed.then_some("fast"),
            provider: routed.then_some("openai"),
            model: routed.then_some("gpt \"x\""),
            stream: routed.then_some(true),
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
        let line = record(true).json_line().finish();
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
            "alias",
            "provider",
            "model",
            "stream",
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
        let unrouted = record(false).json_line().finish();
        let v: serde_json::Value = serde_json::from_str(&unrouted).unwrap();
        for field in [
            "parent_span_id",
            "alias",
            "provider",
            "model",
            "stream",
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
        assert_eq!(Verdict::Success.as_str(), "success");
        assert_eq!(Verdict::Failure.as_str(), "failure");
        assert_eq!(Verdict::ClientError.as_str(), "client_error");
    }
}
