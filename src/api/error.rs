//! Errors sturnus itself produces, in OpenAI's error shape, and how transport failures map to them.
//!
//! `{"error":{"message":"…","type":"…","param":…,"code":…}}`: SDKs already know how to surface it.

use crate::routing::ErrorKind;
use pingora_core::{Error, ErrorSource, ErrorType};

/// `code` of a request without an accepted credential.
pub const INVALID_API_KEY: &str = "invalid_api_key";
/// `code` of a request for an alias its client may not use.
pub const ALIAS_NOT_ALLOWED: &str = "alias_not_allowed";
/// `code` of a request over its client's own limits.
pub const CLIENT_RATE_LIMITED: &str = "client_rate_limited";

/// One error answer: HTTP status plus the OpenAI error object's fields.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status code.
    pub status: u16,
    /// Human-readable, precise message (never contains secrets).
    pub message: String,
    /// OpenAI error `type`.
    pub kind: &'static str,
    /// The offending request parameter, if any.
    pub param: Option<&'static str>,
    /// Machine-readable error code, if any.
    pub code: Option<&'static str>,
}

/// A client-supplied name as an error message shows it: at most 200 characters.
fn shown(name: &str) -> String {
    let mut shown: String = name.chars().take(200).collect();
    if shown.len() < name.len() {
        shown.push('…');
    }
    shown
}

impl ApiError {
    fn new(status: u16, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
        }
    }

    /// 400: the request itself is malformed.
    pub fn invalid_request(message: impl Into<String>, param: Option<&'static str>) -> Self {
        ApiError {
            param,
            ..Self::new(400, "invalid_request_error", message)
        }
    }

    /// 404: the requested model is not a configured alias.
    pub fn model_not_found(model: &str) -> Self {
        let shown = shown(model);
        ApiError {
            param: Some("model"),
            code: Some("model_not_found"),
            ..Self::new(
                404,
                "invalid_request_error",
                format!(
                    "The model `{shown}` does not exist: it is not an alias configured in sturnus"
                ),
            )
        }
    }

    /// 404 `response_id_unrecognised`: a Responses API object id without a valid holder tag
    /// (altered, made up, or not issued through sturnus), so no candidate can be named.
    pub fn response_id_unrecognised(id: &str) -> Self {
        ApiError {
            code: Some("response_id_unrecognised"),
            ..Self::new(
                404,
                "invalid_request_error",
                format!(
                    "No response with id `{}` was issued through sturnus: the id carries no valid \
                     holder tag (it was altered, or comes from a direct call to a provider)",
                    shown(id)
                ),
            )
        }
    }

    /// 404 `response_holder_not_configured`: the id's holder tag is valid but names no
    /// candidate of the running configuration.
    pub fn response_holder_not_configured(id: &str, tag: &str) -> Self {
        ApiError {
            code: Some("response_holder_not_configured"),
            ..Self::new(
                404,
                "invalid_request_error",
                format!(
                    "The response `{}` is held by a candidate (tag {tag}) that is not in \
                     sturnus's configuration any more",
                    shown(id)
                ),
            )
        }
    }

    /// 400 `previous_response_not_found`: a follow-up whose previous response is held by a
    /// candidate that the requested alias does not list.
    pub fn previous_response_elsewhere(id: &str, alias: &str) -> Self {
        ApiError {
            param: Some("previous_response_id"),
            code: Some("previous_response_not_found"),
            ..Self::new(
                400,
                "invalid_request_error",
                format!(
                    "Previous response with id `{}` is held by a candidate that alias `{}` \
                     does not list (or that is not configured any more); continue it with the \
                     alias that created it",
                    shown(id),
                    shown(alias)
                ),
            )
        }
    }

    /// 404: nothing is served at this path.
    pub fn unknown_path(method: &str, path: &str) -> Self {
        ApiError {
            code: Some("unknown_url"),
            ..Self::new(
                404,
                "invalid_request_error",
                format!("Unknown request URL: {method} {path}"),
            )
        }
    }

    /// 405: the path exists but not for this method.
    pub fn method_not_allowed(method: &str, path: &str, allowed: &str) -> Self {
        ApiError {
            code: Some("method_not_allowed"),
            ..Self::new(
                405,
                "invalid_request_error",
                format!("Method {method} is not allowed for {path}; use {allowed}"),
            )
        }
    }

    /// 413: the request body exceeds the per-request cap.
    pub fn body_too_large(limit: u64) -> Self {
        ApiError {
            code: Some("request_too_large"),
            ..Self::new(
                413,
                "invalid_request_error",
                format!("Request body exceeds the limit of {limit} bytes"),
            )
        }
    }

    /// 413: the request body alone is larger than the whole memory budget.
    pub fn body_exceeds_budget(limit: u64) -> Self {
        ApiError {
            code: Some("request_too_large"),
            ..Self::new(
                413,
                "invalid_request_error",
                format!(
                    "Request body exceeds sturnus's whole memory budget for request bodies \
                     ({limit} bytes, routing.max_buffered_bytes)"
                ),
            )
        }
    }

    /// 429: the memory budget is busy with other request bodies; retry after a few seconds.
    pub fn budget_busy(retry_after_secs: u64, in_use: u64, limit: u64) -> Self {
        ApiError {
            code: Some("memory_budget_exhausted"),
            ..Self::new(
                429,
                "rate_limit_error",
                format!(
                    "sturnus is holding too many request bodies right now ({in_use} of \
                     {limit} bytes buffered); retry in {retry_after_secs} s"
                ),
            )
        }
    }

    /// 408: the client took longer than allowed to send its request header or body.
    pub fn request_timeout(what: &str, limit: std::time::Duration) -> Self {
        ApiError {
            code: Some("request_timeout"),
            ..Self::new(
                408,
                "invalid_request_error",
                format!("The request {what} was not received within {limit:?}"),
            )
        }
    }

    /// 400: the bytes received are not a well-formed HTTP/1.1 request.
    pub fn malformed_http(why: &str) -> Self {
        ApiError {
            code: Some("malformed_request"),
            ..Self::new(
                400,
                "invalid_request_error",
                format!("Malformed HTTP request: {why}"),
            )
        }
    }

    /// 431: the request header is larger than sturnus accepts (`detail` names the limit).
    pub fn headers_too_large(detail: &str) -> Self {
        ApiError {
            code: Some("request_header_fields_too_large"),
            ..Self::new(
                431,
                "invalid_request_error",
                format!("Request header too large: {detail}"),
            )
        }
    }

    /// 503: the provider's credential cannot authorize requests right now.
    pub fn credential_unavailable(provider: &str, why: &crate::providers::CredentialError) -> Self {
        ApiError {
            code: Some(why.code()),
            ..Self::new(
                why.status(),
                "server_error",
                format!("Provider `{provider}` cannot be authorized: {why}"),
            )
        }
    }

    /// The answer for a failure to reach or read from a provider.
    pub fn upstream(provider: &str, kind: ErrorKind, detail: &str) -> Self {
        let (status, code, what) = match kind {
            ErrorKind::Timeout => (504, "upstream_timeout", "timed out"),
            ErrorKind::Connect => (502, "upstream_connect_error", "could not be reached"),
            ErrorKind::Dns => (502, "upstream_dns_error", "could not be resolved"),
            ErrorKind::Tls => (502, "upstream_tls_error", "failed the TLS handshake"),
            ErrorKind::Auth => (
                503,
                "provider_credentials_unavailable",
                "cannot be authorized",
            ),
            _ => (502, "upstream_error", "failed"),
        };
        ApiError {
            code: Some(code),
            ..Self::new(
                status,
                "server_error",
                format!("Provider `{provider}` {what}: {detail}"),
            )
        }
    }

    /// 401: the request carries no accepted credential (`[auth]`).
    pub fn invalid_api_key(message: String) -> Self {
        ApiError {
            code: Some(INVALID_API_KEY),
            ..Self::new(401, "invalid_request_error", message)
        }
    }

    /// 403: the client may not use the alias it asked for.
    pub fn alias_not_allowed(client: &str, alias: &str) -> Self {
        let mut shown: String = alias.chars().take(200).collect();
        if shown.len() < alias.len() {
            shown.push('…');
        }
        ApiError {
            param: Some("model"),
            code: Some(ALIAS_NOT_ALLOWED),
            ..Self::new(
                403,
                "permission_error",
                format!("Client `{client}` may not use the model `{shown}`"),
            )
        }
    }

    /// 429: the client is over one of its own limits (not a provider's).
    pub fn client_rate_limited(client: &str, limit: &str, value: u32, retry_after: u64) -> Self {
        ApiError {
            code: Some(CLIENT_RATE_LIMITED),
            ..Self::new(
                429,
                "rate_limit_error",
                format!(
                    "Client `{client}` is over its limit {limit} = {value}; retry in \
                     {retry_after} s"
                ),
            )
        }
    }

    /// 500: proxying failed for a reason that is neither the client's nor the provider's (a
    /// bug in sturnus); the client still gets an OpenAI-shaped answer.
    pub fn internal() -> Self {
        ApiError {
            code: Some("internal_error"),
            ..Self::new(500, "server_error", "internal error in sturnus")
        }
    }

    /// The JSON body.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }))
        .unwrap_or_default()
    }
}

/// Which transport-failure kind a Pingora error is, when it came from the upstream side.
pub fn classify(e: &Error) -> Option<ErrorKind> {
    use ErrorType::*;
    if e.esource() != &ErrorSource::Upstream && !matches!(e.etype(), ConnectTimedout) {
        return None;
    }
    Some(match e.etype() {
        ConnectTimedout | ReadTimedout | WriteTimedout => ErrorKind::Timeout,
        ConnectRefused | ConnectNoRoute | ConnectError | BindError | SocketError => {
            ErrorKind::Connect
        }
        TLSHandshakeFailure | TLSHandshakeTimedout | InvalidCert | HandshakeError
        | TLSWantX509Lookup => ErrorKind::Tls,
        _ => ErrorKind::Reset,
    })
}

/// A short, secret-free description of a Pingora error for an error message.
pub fn describe(e: &Error) -> String {
    let mut text = e.etype().as_str().to_string();
    if let Some(cause) = e.root_cause().to_string().split('\n').next() {
        if !cause.is_empty() && cause != text {
            text.push_str(": ");
            text.push_str(cause);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shape_matches_openai() {
        let v: serde_json::Value =
            serde_json::from_slice(&ApiError::model_not_found("nope").to_json()).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["param"], "model");
        assert_eq!(v["error"]["code"], "model_not_found");
        assert!(v["error"]["message"].as_str().unwrap().contains("`nope`"));
        let v: serde_json::Value =
            serde_json::from_slice(&ApiError::invalid_request("bad", None).to_json()).unwrap();
        assert_eq!(v["error"]["param"], serde_json::Value::Null);
        assert_eq!(v["error"]["code"], serde_json::Value::Null);
    }

    #[test]
    fn timeouts_are_504_and_others_502() {
        assert_eq!(ApiError::upstream("p", ErrorKind::Timeout, "x").status, 504);
        assert_eq!(ApiError::upstream("p", ErrorKind::Connect, "x").status, 502);
        assert_eq!(ApiError::upstream("p", ErrorKind::Tls, "x").status, 502);
    }

    #[test]
    fn an_internal_failure_is_a_500_in_openais_shape() {
        let e = ApiError::internal();
        assert_eq!(e.status, 500);
        let v: serde_json::Value = serde_json::from_slice(&e.to_json()).unwrap();
        assert_eq!(v["error"]["type"], "server_error");
        assert_eq!(v["error"]["code"], "internal_error");
        assert!(v["error"]["param"].is_null());
    }

    #[test]
    fn long_model_names_are_cut_in_messages() {
        let long = "m".repeat(5000);
        assert!(ApiError::model_not_found(&long).message.len() < 400);
    }
}
