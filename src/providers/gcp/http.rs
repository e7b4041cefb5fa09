//! A minimal HTTP/1.1 client for token fetches, over Pingora's own connector.
//!
//! Token endpoints need one small request and a small JSON answer, so sturnus reuses Pingora's
//! connector (and its rustls with sturnus's trust roots) instead of linking a second HTTP stack.

use super::error::ExchangeError;
use crate::config::{BaseUrl, Secret};
use crate::providers::percent_encode_segment;
use crate::providers::resolve::HostAddr;
use crate::providers::tls::TrustRoots;
use bytes::Bytes;
use pingora::http::RequestHeader;
use pingora_core::connectors::http::Connector;
use pingora_core::upstreams::peer::HttpPeer;
use std::time::Duration;

/// The most of an answer that is read; token answers are a few hundred bytes.
const MAX_ANSWER: usize = 64 * 1024;
/// Connect (and TLS handshake) timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on one whole exchange, connect to last byte.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(15);

/// One request to a token endpoint.
pub struct TokenRequest {
    /// `GET` or `POST`.
    pub method: &'static str,
    /// Scheme, host, port and path of the endpoint.
    pub url: BaseUrl,
    /// Extra headers (beyond `Host`, `Content-Length`, `Accept`, `User-Agent`).
    pub headers: Vec<(&'static str, &'static str)>,
    /// An `application/x-www-form-urlencoded` body; it carries secrets, so it is masked.
    pub form: Option<Secret>,
}

/// The status and body the token endpoint answered a [`TokenRequest`] with.
pub struct TokenResponse {
    /// HTTP status code.
    pub status: u16,
    /// The body (at most `MAX_ANSWER` bytes).
    pub body: Vec<u8>,
}

/// Sends token requests through a Pingora connector trusting sturnus's roots.
pub struct HttpClient {
    connector: Connector,
    roots: TrustRoots,
}

impl HttpClient {
    /// A client with its own connector (create it on the runtime that will use it).
    pub fn new(roots: TrustRoots) -> Self {
        HttpClient {
            connector: Connector::new(None),
            roots,
        }
    }

    /// Sends `req` and reads the whole answer; errors are short and free of secrets.
    pub async fn send(&self, req: &TokenRequest) -> Result<TokenResponse, ExchangeError> {
        match tokio::time::timeout(EXCHANGE_TIMEOUT, self.exchange(req)).await {
            Ok(result) => result,
            Err(_) => Err(ExchangeError::Timeout {
                secs: EXCHANGE_TIMEOUT.as_secs(),
            }),
        }
    }

    async fn exchange(&self, req: &TokenRequest) -> Result<TokenResponse, ExchangeError> {
        let url = &req.url;
        let addr = HostAddr::new(&url.host, url.port).get().await?;
        let sni = if url.tls {
            url.host.clone()
        } else {
            String::new()
        };
        let mut peer = HttpPeer::new(addr, url.tls, sni);
        peer.options.connection_timeout = Some(CONNECT_TIMEOUT);
        peer.options.total_connection_timeout = Some(CONNECT_TIMEOUT);
        peer.options.read_timeout = Some(EXCHANGE_TIMEOUT);
        peer.options.write_timeout = Some(EXCHANGE_TIMEOUT);
        if url.tls {
            peer.options.ca = Some(self.roots.clone());
        }
        let (mut session, _) = self
            .connector
            .get_http_session(&peer)
            .await
            .map_err(ExchangeError::Io)?;

        let path = if url.path.is_empty() { "/" } else { &url.path };
        let mut header = RequestHeader::build(req.method, path.as_bytes(), None)
            .map_err(|_| ExchangeError::BuildRequest)?;
        let body = req.form.as_ref().map(|f| f.expose().as_bytes().to_vec());
        let mut fixed = vec![
            ("host", url.host_header()),
            ("accept", "application/json".to_string()),
            (
                "user-agent",
                concat!("sturnus/", env!("CARGO_PKG_VERSION")).into(),
            ),
            ("connection", "close".to_string()),
        ];
        if let Some(b) = &body {
            fixed.push(("content-type", "application/x-www-form-urlencoded".into()));
            fixed.push(("content-length", b.len().to_string()));
        }
        for (name, value) in fixed
            .iter()
            .map(|(n, v)| (*n, v.as_str()))
            .chain(req.headers.iter().copied())
        {
            header
                .insert_header(name, value)
                .map_err(|_| ExchangeError::Header { name })?;
        }

        let io = ExchangeError::Io;
        session
            .write_request_header(Box::new(header))
            .await
            .map_err(io)?;
        if let Some(b) = body {
            session
                .write_request_body(Bytes::from(b), true)
                .await
                .map_err(io)?;
        }
        session.finish_request_body().await.map_err(io)?;
        session.read_response_header().await.map_err(io)?;
        let status = session
            .response_header()
            .map(|h| h.status.as_u16())
            .ok_or(ExchangeError::NoResponseHeader)?;
        let mut out = Vec::new();
        while let Some(chunk) = session.read_response_body().await.map_err(io)? {
            if out.len() + chunk.len() > MAX_ANSWER {
                return Err(ExchangeError::TooLarge { limit: MAX_ANSWER });
            }
            out.extend_from_slice(&chunk);
            if session.response_done() {
                break;
            }
        }
        session.shutdown().await;
        Ok(TokenResponse { status, body: out })
    }
}

/// `application/x-www-form-urlencoded` for name/value pairs (RFC 3986 unreserved kept as is).
pub fn form_encode(pairs: &[(&str, &str)]) -> Secret {
    let mut out = String::new();
    for (i, (name, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(&percent_encode_segment(name));
        out.push('=');
        out.push_str(&percent_encode_segment(value));
    }
    Secret::new(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn forms_are_percent_encoded() {
        let f = form_encode(&[
            ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
            ("assertion", "a.b+c/d=="),
        ]);
        assert_eq!(
            f.expose(),
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=a.b%2Bc%2Fd%3D%3D"
        );
    }

    /// A one-shot loopback server answering `answer` and returning what it received.
    async fn one_shot(answer: &'static str) -> (BaseUrl, tokio::task::JoinHandle<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                let n = s.read(&mut buf).await.unwrap();
                got.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&got).to_string();
                if let Some(end) = text.find("\r\n\r\n") {
                    let len = text
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .map_or(0, |v| v.trim().parse::<usize>().unwrap());
                    if got.len() >= end + 4 + len {
                        break;
                    }
                }
                if n == 0 {
                    break;
                }
            }
            s.write_all(answer.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&got).to_string()
        });
        let url = BaseUrl::parse(&format!("http://127.0.0.1:{port}/token")).unwrap();
        (url, task)
    }

    #[tokio::test]
    async fn posts_a_form_and_reads_the_answer() {
        let (url, server) = one_shot(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 18\r\n\r\n{\"access_token\":1}",
        )
        .await;
        let client = HttpClient::new(crate::providers::tls::build(None).unwrap());
        let answer = client
            .send(&TokenRequest {
                method: "POST",
                url,
                headers: vec![("x-extra", "1")],
                form: Some(form_encode(&[("a", "b c")])),
            })
            .await
            .unwrap();
        assert_eq!(answer.status, 200);
        assert_eq!(answer.body, b"{\"access_token\":1}");
        let got = server.await.unwrap();
        assert!(got.starts_with("POST /token HTTP/1.1\r\n"), "{got}");
        assert!(got.contains("content-type: application/x-www-form-urlencoded"));
        assert!(got.contains("x-extra: 1"));
        assert!(got.ends_with("\r\n\r\na=b%20c"), "{got}");
    }

    #[tokio::test]
    async fn refused_connections_are_described() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let client = HttpClient::new(crate::providers::tls::build(None).unwrap());
        let err = client
            .send(&TokenRequest {
                method: "GET",
                url: BaseUrl::parse(&format!("http://127.0.0.1:{port}/x")).unwrap(),
                headers: vec![],
                form: None,
            })
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("Connect"), "{err}");
    }
}
