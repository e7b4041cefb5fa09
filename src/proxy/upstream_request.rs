//! The request header a provider receives: sturnus's stand-in for Pingora's
//! `upstream_request_filter` phase.

use crate::observe::trace::{self, TraceContext};
use crate::providers::{CredentialError, Provider};
use http::{HeaderMap, HeaderValue};
use pingora::http::RequestHeader;

/// Client headers that never reach a provider: client credentials, our own routing header,
/// hop-by-hop headers, and framing that sturnus recomputes.
const DROPPED: &[&str] = &[
    "authorization",
    "api-key",
    "x-api-key",
    "cookie",
    "x-session-affinity",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "expect",
    "content-length",
    "host",
];

/// sturnus's `upstream_request_filter`: the provider's request header, built from the
/// client's: path, `Host`, auth, `Content-Length` of the spliced body, the request's
/// `x-request-id` (the client's own when it sent a usable one, else sturnus's), `traceparent`
/// naming sturnus's span (`tracestate` only when the caller's trace continues); every other
/// client header passes through, in the client's order.
///
/// The header map is built directly, outside Pingora's [`RequestHeader`]: its own insert and
/// remove re-parse each name and keep a second map with the client's spelling of every name,
/// which cost more than the rest of the rewrite. One pass copies the headers the provider may
/// see into a map sized for them and sturnus's own, so nothing is copied only to be removed.
/// Names therefore reach the provider in canonical case (`Content-Type`, `x-custom`), which
/// HTTP treats as the same names.
pub fn upstream_request_filter(
    client: &RequestHeader,
    provider: &Provider,
    path_and_query: &str,
    body_len: usize,
    ids: &RequestIds,
) -> Result<RequestHeader, CredentialError> {
    let uri =
        http::Uri::try_from(path_and_query).map_err(|_| CredentialError::InvalidUpstreamPath)?;
    let (mut parts, ()) = http::Request::new(()).into_parts();
    parts.method = client.method.clone();
    parts.uri = uri;
    parts.version = http::Version::HTTP_11;
    parts.extensions = client.extensions.clone();
    let headers = &mut parts.headers;
    copy_forwarded_headers(&client.headers, headers, provider, body_len, ids);
    if let Ok(id) = HeaderValue::from_str(ids.request_id) {
        headers.insert(trace::REQUEST_ID_NAME.clone(), id);
    }
    if let Ok(traceparent) = HeaderValue::try_from(ids.trace.traceparent()) {
        headers.insert(trace::TRACEPARENT_NAME.clone(), traceparent);
    }
    provider.authorize(headers)?;
    Ok(RequestHeader::from(parts))
}

/// Who the request is, for the headers the provider receives.
pub struct RequestIds<'a> {
    /// sturnus's `x-request-id` for this request.
    pub request_id: &'a str,
    /// The trace context the `traceparent` sent upstream continues.
    pub trace: &'a TraceContext,
}

/// Headers sturnus adds to the client's (`x-request-id`, `traceparent`, the provider's
/// credential), reserved in the provider's map with the client's.
const ADDED: usize = 4;

/// Copies the client's headers into `out` except [`DROPPED`] ones, those the client's
/// `Connection` header names, and `tracestate` when the caller's trace does not continue;
/// `Host` and `Content-Length` take the provider's and the spliced body's values where the
/// client had them (else at the end).
fn copy_forwarded_headers(
    client: &HeaderMap,
    out: &mut HeaderMap,
    provider: &Provider,
    body_len: usize,
    ids: &RequestIds,
) {
    let named = connection_named(client);
    let keep_tracestate = ids.trace.continued();
    out.reserve(client.len() + ADDED);
    let mut host_set = false;
    let mut length_set = false;
    for (name, value) in client {
        if name == http::header::HOST {
            if !host_set {
                out.append(http::header::HOST, provider.host_value().clone());
                host_set = true;
            }
        } else if name == http::header::CONTENT_LENGTH {
            if !length_set {
                out.append(http::header::CONTENT_LENGTH, HeaderValue::from(body_len));
                length_set = true;
            }
        } else if !(DROPPED.contains(&name.as_str())
            || (!keep_tracestate && name == trace::TRACESTATE_NAME)
            || named.iter().any(|n| n == name.as_str()))
        {
            out.append(name.clone(), value.clone());
        }
    }
    if !host_set {
        out.append(http::header::HOST, provider.host_value().clone());
    }
    if !length_set {
        out.append(http::header::CONTENT_LENGTH, HeaderValue::from(body_len));
    }
}

/// The header names the client's `Connection` header lists (lowercase): hop-by-hop ones.
fn connection_named(headers: &HeaderMap) -> Vec<String> {
    let mut named: Vec<String> = Vec::new();
    for value in headers.get_all(http::header::CONNECTION) {
        let Ok(value) = value.to_str() else { continue };
        named.extend(
            value
                .split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .filter(|t| !t.is_empty()),
        );
    }
    named
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BaseUrl, ProviderConfig, ProviderKind, Secret};

    fn provider() -> Provider {
        Provider::from_config(&ProviderConfig {
            name: "p".into(),
            kind: ProviderKind::OpenAiCompatible,
            base_url: Some(BaseUrl {
                tls: false,
                host: "127.0.0.1".into(),
                port: 9000,
                path: "/v1".into(),
            }),
            api_key: Some(Secret::new("sk-provider")),
            health_check: None,
        })
        .unwrap()
    }

    #[test]
    fn client_credentials_and_hop_headers_are_replaced() {
        let mut req = RequestHeader::build("POST", b"/v1/chat/completions", None).unwrap();
        for (k, v) in [
            ("authorization", "Bearer client"),
            ("x-api-key", "client"),
            ("api-key", "client"),
            ("cookie", "a=b"),
            ("x-session-affinity", "p/m"),
            ("transfer-encoding", "chunked"),
            ("openai-beta", "assistants=v2"),
            ("host", "127.0.0.1:4000"),
            ("host", "second.example"),
            ("content-length", "999"),
            ("connection", "keep-alive, x-hop"),
            ("x-hop", "1"),
        ] {
            req.append_header(k, v).unwrap();
        }
        let trace = TraceContext::new_root();
        let ids = RequestIds {
            request_id: "req-1",
            trace: &trace,
        };
        let req = upstream_request_filter(&req, &provider(), "/v1/chat/completions?x=1", 42, &ids)
            .unwrap();
        let h = &req.headers;
        assert_eq!(h["authorization"], "Bearer sk-provider");
        assert!(h.get("x-api-key").is_none() && h.get("api-key").is_none());
        assert!(h.get("cookie").is_none() && h.get("x-session-affinity").is_none());
        assert!(h.get("transfer-encoding").is_none() && h.get("x-hop").is_none());
        assert_eq!(h["openai-beta"], "assistants=v2");
        assert_eq!(h.get_all("host").iter().count(), 1);
        assert_eq!(h["host"], "127.0.0.1:9000");
        assert_eq!(h.get_all("content-length").iter().count(), 1);
        assert_eq!(h["content-length"], "42");
        let mut wire = Vec::new();
        req.header_to_h1_wire(&mut wire);
        let wire = String::from_utf8(wire).unwrap().to_ascii_lowercase();
        assert_eq!(wire.matches("host:").count(), 1, "{wire}");
        assert_eq!(wire.matches("content-length:").count(), 1, "{wire}");
        assert_eq!(req.uri, "/v1/chat/completions?x=1");
        assert_eq!(h["traceparent"], trace.traceparent().as_str());
        assert_eq!(h["x-request-id"], "req-1");
    }

    #[test]
    fn tracestate_travels_only_with_the_callers_trace() {
        let incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        for (traceparent, kept) in [(incoming, true), ("00-bogus", false)] {
            let mut req = RequestHeader::build("POST", b"/v1/embeddings", None).unwrap();
            req.append_header("traceparent", traceparent).unwrap();
            req.append_header("tracestate", "vendor=1,other=2").unwrap();
            let trace = TraceContext::from_headers([traceparent.as_bytes()].into_iter());
            let ids = RequestIds {
                request_id: "req-2",
                trace: &trace,
            };
            let req =
                upstream_request_filter(&req, &provider(), "/v1/embeddings", 1, &ids).unwrap();
            let h = &req.headers;
            assert_eq!(h.get_all("traceparent").iter().count(), 1);
            assert_eq!(h["traceparent"], trace.traceparent().as_str());
            assert_eq!(h.get("tracestate").is_some(), kept, "{traceparent}");
            if kept {
                assert_eq!(h["tracestate"], "vendor=1,other=2");
            }
        }
    }
}
