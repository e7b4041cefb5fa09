//! The optional `metrics_listen` service: a second Pingora listener that serves only
//! `/metrics`, `/health`, `/healthz` and `/status`, so the credential-bearing proxy can stay on
//! loopback while Prometheus scrapes a routable address. It never proxies: every other path is
//! a JSON 404.

use crate::admin::{self, Answer, METRICS_LISTENER_PATHS};
use crate::api::ApiError;
use crate::app::App;
use async_trait::async_trait;
use http::Response;
use pingora_core::apps::http_app::ServeHttp;
use pingora_core::protocols::http::ServerSession;
use pingora_core::services::listening::Service;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Largest request body drained (rather than closing the connection) before answering.
const DRAIN_LIMIT: u64 = 1 << 20;
/// Time allowed to drain a request body.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// The metrics listener's request handler.
pub struct MetricsListener {
    app: Arc<App>,
}

/// The Pingora service listening on `addr` (the config's `metrics_listen`).
pub fn service(app: Arc<App>, addr: SocketAddr) -> Service<MetricsListener> {
    let mut service = Service::new("sturnus metrics".to_string(), MetricsListener { app });
    service.add_tcp(&addr.to_string());
    service.threads = Some(1);
    service
}

/// The answer for a request to the metrics listener: an admin answer for the four paths,
/// a JSON 404 for anything else.
pub fn answer(method: &http::Method, path: &str, app: &App) -> Answer {
    let served = METRICS_LISTENER_PATHS.contains(&path);
    match served.then(|| admin::answer(method, path, app)).flatten() {
        Some(answer) => answer,
        None => Answer {
            status: 404,
            content_type: "application/json",
            body: ApiError::unknown_path(method.as_str(), path).to_json(),
        },
    }
}

#[async_trait]
impl ServeHttp for MetricsListener {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let method = session.req_header().method.clone();
        let path = session.req_header().uri.path().to_string();
        let answer = answer(&method, &path, &self.app);
        if !drain(session).await {
            session.set_keepalive(None);
        }
        let body = if method == http::Method::HEAD {
            Vec::new()
        } else {
            answer.body
        };
        Response::builder()
            .status(answer.status)
            .header(http::header::CONTENT_TYPE, answer.content_type)
            .header(http::header::CONTENT_LENGTH, body.len())
            .body(body)
            .unwrap_or_default()
    }
}

/// Reads and discards a small request body so the connection can be reused; false when the
/// body is too large, too slow or broken (the connection is then closed after the answer).
async fn drain(session: &mut ServerSession) -> bool {
    if session.is_body_empty() {
        return true;
    }
    let declared = crate::api::respond::declared_length(session.req_header());
    match declared {
        Some(len) if len <= DRAIN_LIMIT => {
            matches!(
                tokio::time::timeout(DRAIN_TIMEOUT, session.drain_request_body()).await,
                Ok(Ok(()))
            )
        }
        _ => false,
    }
}
