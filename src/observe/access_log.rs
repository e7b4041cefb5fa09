//! The access log: one structured line per request, logged under the target `sturnus::access`.
//!
//! The fields are `log` key-values, so the JSON logger writes them as top-level JSON fields next
//! to `timestamp` and `level`. Only ids, names from the config, numbers and the path are logged:
//! never a header value, a query string, a key or any request or response content.

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
    /// The client's fault: a 4xx answer, or the client went away.
    ClientError,
}

impl Verdict {
    /// The `outcome` field value.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Success => "success",
            Verdict::Failure => "failure",
            Verdict::ClientError => "client_error",
        }
    }
}

/// Everything one access line says about a request.
#[derive(Debug, Clone, PartialEq)]
pub struct AccessRecord<'a> {
    /// The request's id (also sent as `x-request-id`).
    pub request_id: &'a str,
    /// The trace id (32 hex digits).
    pub trace_id: String,
    /// sturnus's span id (16 hex digits), the parent-id the provider saw.
    pub span_id: String,
    /// The caller's span id, when it sent a valid `traceparent`.
    pub parent_span_id: Option<String>,
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
    /// Writes the line at info level under [`TARGET`].
    pub fn log(&self) {
        log::info!(
            target: TARGET,
            request_id = self.request_id,
            trace_id = self.trace_id.as_str(),
            span_id = self.span_id.as_str(),
            parent_span_id = self.parent_span_id.as_deref(),
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

#[cfg(test)]
mod tests {
    use super::*;

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
