//! Endpoints sturnus answers itself: `/health`, `/healthz`, `/status`, `/v1/models`.
//!
//! Answers are plain values so every listener can serve them; nothing here touches a provider.

use crate::app::App;
use crate::proxy::respond;
use crate::routing::Mode;
use pingora_core::Result;
use pingora_proxy::Session;
use serde_json::{json, Value};

/// A complete answer to an admin request.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// `Content-Type` header value.
    pub content_type: &'static str,
    /// Response body.
    pub body: Vec<u8>,
}

impl Answer {
    fn json(status: u16, value: &Value) -> Answer {
        Answer {
            status,
            content_type: "application/json",
            body: serde_json::to_vec(value).unwrap_or_default(),
        }
    }
}

/// The admin answer for a method and path, or `None` when the path is not an admin path.
pub fn answer(method: &http::Method, path: &str, app: &App) -> Option<Answer> {
    let build: fn(&App) -> Answer = match path {
        "/health" | "/healthz" => |_| Answer::json(200, &json!({"status": "ok"})),
        "/status" => |app| Answer::json(200, &status(app)),
        "/v1/models" => |app| Answer::json(200, &models(app)),
        _ => return None,
    };
    if method != http::Method::GET && method != http::Method::HEAD {
        let err = crate::proxy::errors::ApiError::method_not_allowed(method.as_str(), path, "GET");
        return Some(Answer {
            status: 405,
            content_type: "application/json",
            body: err.to_json(),
        });
    }
    Some(build(app))
}

/// Serves an admin request on the proxy listener; true when it was one.
pub async fn serve(session: &mut Session, app: &App) -> Result<bool> {
    let header = session.req_header();
    let Some(answer) = answer(&header.method, header.uri.path(), app) else {
        return Ok(false);
    };
    let head = header.method == http::Method::HEAD;
    if session.drain_request_body().await.is_err() {
        session.set_keepalive(None);
    }
    let body = if head { Vec::new() } else { answer.body };
    respond::send(session, answer.status, answer.content_type, body, &[]).await?;
    Ok(true)
}

/// OpenAI's model list, one entry per alias, so SDKs and tools can discover them.
pub fn models(app: &App) -> Value {
    let data: Vec<Value> = app
        .catalog
        .aliases
        .iter()
        .map(|a| json!({"id": a.name, "object": "model", "created": 0, "owned_by": "sturnus"}))
        .collect();
    json!({"object": "list", "data": data})
}

/// Live routing state per alias (config order) and candidate; never any secret.
pub fn status(app: &App) -> Value {
    let params = &app.catalog.params;
    let aliases: Vec<Value> = app
        .catalog
        .aliases
        .iter()
        .map(|alias| {
            let shares_ns = alias.shares(Mode::NonStreaming, params);
            let shares_s = alias.shares(Mode::Streaming, params);
            let candidates: Vec<Value> = alias
                .candidates
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let s = &c.stats;
                    let success = s.success();
                    let per_mode = |mode: Mode| {
                        let lat = s.latency_ms(mode);
                        json!({
                            "latency_ms": lat,
                            "effective_latency_ms": lat.map(|l| l / success.max(0.001)),
                        })
                    };
                    json!({
                        "provider": c.provider.name,
                        "model": c.model,
                        "state": s.health(params.error_threshold).as_str(),
                        "non_streaming": per_mode(Mode::NonStreaming),
                        "streaming": per_mode(Mode::Streaming),
                        "success_rate": success,
                        "share": {"non_streaming": shares_ns[i], "streaming": shares_s[i]},
                        "in_flight": s.inflight(),
                        "requests": s.requests(),
                        "failures": s.failures(),
                        "last_error": s.last_error().map(|(kind, at_ms)| {
                            json!({"kind": kind.as_str(), "at_unix_ms": at_ms})
                        }),
                    })
                })
                .collect();
            json!({"alias": alias.name, "candidates": candidates})
        })
        .collect();
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "pid": std::process::id(),
        "uptime_secs": app.started.elapsed().as_secs(),
        "budget": budget(app),
        "aliases": aliases,
    })
}

/// The memory budget for request bodies: size, bytes held now, the most ever held, 429s.
fn budget(app: &App) -> Value {
    let b = &app.budget;
    json!({
        "limit_bytes": b.limit(),
        "source": b.source(),
        "in_use_bytes": b.in_use(),
        "peak_bytes": b.peak(),
        "rejections": b.rejections(),
    })
}
