//! The request header a provider receives; one implementation for both forwarding paths.

use crate::observe::trace::{self, TraceContext};
use crate::providers::{CredentialError, Provider};
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

/// [`DROPPED`] headers that [`prepare`] sets again anyway: replacing them in place is cheaper
/// than removing and re-inserting.
const REPLACED: &[&str] = &["content-length", "host"];

/// Rewrites a copy of the client's request header for the provider: path, `Host`, auth,
/// `Content-Length` of the spliced body, `traceparent` naming sturnus's span (`tracestate` only
/// when the caller's trace continues); every other client header passes through.
pub fn prepare(
    req: &mut RequestHeader,
    provider: &Provider,
    path_and_query: &str,
    body_len: usize,
    trace: &TraceContext,
) -> Result<(), CredentialError> {
    remove_client_only_headers(req);
    let uri = http::Uri::try_from(path_and_query)
        .map_err(|_| CredentialError("the upstream path is not a valid URI".into()))?;
    req.set_uri(uri);
    req.set_version(http::Version::HTTP_11);
    let _ = req.insert_header(http::header::HOST, provider.host_header());
    let _ = req.insert_header(http::header::CONTENT_LENGTH, body_len.to_string());
    let _ = req.insert_header(trace::TRACEPARENT, trace.traceparent());
    if !trace.continued() {
        req.remove_header(trace::TRACESTATE);
    }
    provider.authorize(req)
}

/// Removes [`DROPPED`] headers and those the client's `Connection` header names. One pass over
/// the names present finds them, so only headers the request carries are removed (each removal
/// by name is a parse of the name and a hash lookup, even for a name that is not there).
fn remove_client_only_headers(req: &mut RequestHeader) {
    let mut named: Vec<String> = Vec::new();
    for value in req.headers.get_all(http::header::CONNECTION) {
        let Ok(value) = value.to_str() else { continue };
        named.extend(
            value
                .split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .filter(|t| !t.is_empty()),
        );
    }
    let doomed: Vec<http::HeaderName> = req
        .headers
        .keys()
        .filter(|name| {
            let name = name.as_str();
            (DROPPED.contains(&name) && !REPLACED.contains(&name))
                || named.iter().any(|n| n == name)
        })
        .cloned()
        .collect();
    for name in &doomed {
        req.remove_header(name);
    }
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
        prepare(
            &mut req,
            &provider(),
            "/v1/chat/completions?x=1",
            42,
            &trace,
        )
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
    }

    #[test]
    fn tracestate_travels_only_with_the_callers_trace() {
        let incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        for (traceparent, kept) in [(incoming, true), ("00-bogus", false)] {
            let mut req = RequestHeader::build("POST", b"/v1/embeddings", None).unwrap();
            req.append_header("traceparent", traceparent).unwrap();
            req.append_header("tracestate", "vendor=1,other=2").unwrap();
            let trace = TraceContext::from_headers([traceparent.as_bytes()].into_iter());
            prepare(&mut req, &provider(), "/v1/embeddings", 1, &trace).unwrap();
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
