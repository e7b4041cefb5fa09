//! Endpoints sturnus answers itself: `/health`, `/healthz`, `/status`, `/metrics`, `/v1/models`,
//! `/v1/models/{alias}`.
//!
//! Answers are plain values so every listener can serve them; nothing here touches a provider.
//! The proxy listener serves all of them; `metrics_listen` only [`METRICS_LISTENER_PATHS`].

use crate::api::respond;
use crate::app::App;
use crate::routing::{self, now_us, CandidateStats, ErrorKind, Mode, QuotaKind, QuotaView};
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

/// The paths the separate metrics listener serves (it never proxies).
pub const METRICS_LISTENER_PATHS: [&str; 4] = ["/metrics", "/health", "/healthz", "/status"];

/// Every endpoint of the proxy listener: path, methods, what answers it (listed on `/status`,
/// and in the README's endpoint table, which `readme_tables` checks against it and the router).
pub const ENDPOINTS: [(&str, &str, &str); 13] = [
    ("/v1/chat/completions", "POST", "routed to a candidate of the body's model alias"),
    ("/v1/completions", "POST", "routed to a candidate of the body's model alias"),
    ("/v1/embeddings", "POST", "routed to a candidate of the body's model alias"),
    ("/v1/responses", "POST", "routed to a candidate of the body's model alias; a follow-up (previous_response_id) to the candidate holding the previous response"),
    ("/v1/responses/{id}", "GET, DELETE", "the candidate holding the response"),
    ("/v1/responses/{id}/cancel", "POST", "the candidate holding the response"),
    ("/v1/responses/{id}/input_items", "GET", "the candidate holding the response"),
    ("/v1/models", "GET", "the aliases in OpenAI's list shape"),
    ("/v1/models/{alias}", "GET", "one alias in OpenAI's model shape"),
    ("/status", "GET", "live routing state per alias and candidate"),
    ("/metrics", "GET", "Prometheus metrics"),
    ("/health", "GET", "readiness"),
    ("/healthz", "GET", "liveness"),
];

/// Where one alias's model entry is served.
const MODEL_PREFIX: &str = "/v1/models/";

/// The admin answer for a method and path, or `None` when the path is not an admin path.
pub fn answer(method: &http::Method, path: &str, app: &App) -> Option<Answer> {
    let alias = path.strip_prefix(MODEL_PREFIX);
    let build: fn(&App) -> Answer = match path {
        // Answered by `model` once the method is checked.
        _ if alias.is_some() => |_| Answer::json(404, &Value::Null),
        "/health" => health,
        "/healthz" => |_| Answer::json(200, &json!({"status": "ok"})),
        "/status" => |app| Answer::json(200, &status(app)),
        "/metrics" => |app| Answer {
            status: 200,
            content_type: crate::observe::metrics::CONTENT_TYPE,
            body: app.metrics.render(&app.catalog),
        },
        "/v1/models" => |app| Answer::json(200, &models(app)),
        _ => return None,
    };
    if method != http::Method::GET && method != http::Method::HEAD {
        let err = crate::api::ApiError::method_not_allowed(method.as_str(), path, "GET");
        return Some(Answer {
            status: 405,
            content_type: "application/json",
            body: err.to_json(),
        });
    }
    Some(match alias {
        Some(name) => model(app, name),
        None => build(app),
    })
}

/// `GET /v1/models/{alias}`: the alias in OpenAI's model shape, or `404 model_not_found`.
fn model(app: &App, encoded: &str) -> Answer {
    let name = percent_encoding::percent_decode_str(encoded).decode_utf8_lossy();
    match app.catalog.alias(&name) {
        Some(alias) => Answer::json(200, &model_entry(&alias.name)),
        None => Answer {
            status: 404,
            content_type: "application/json",
            body: crate::api::ApiError::model_not_found(&name).to_json(),
        },
    }
}

/// One alias as an OpenAI model object.
fn model_entry(name: &str) -> Value {
    json!({"id": name, "object": "model", "created": 0, "owned_by": "sturnus"})
}

/// Serves an admin request on the proxy listener (answering with `request_id`); true when it
/// was one.
pub async fn serve(session: &mut Session, app: &App, request_id: &str) -> Result<bool> {
    let header = session.req_header();
    let Some(answer) = answer(&header.method, header.uri.path(), app) else {
        return Ok(false);
    };
    let head = header.method == http::Method::HEAD;
    // Boxed: every proxied request passes through here, admin answers are rare.
    Box::pin(async move {
        if session.drain_request_body().await.is_err() {
            session.set_keepalive(None);
        }
        let body = if head { Vec::new() } else { answer.body };
        let (status, content_type) = (answer.status, answer.content_type);
        respond::send(session, request_id, status, content_type, body, &[]).await
    })
    .await?;
    Ok(true)
}

/// Readiness: 200 `{"status":"ok"}`, or 503 `{"status":"shutting_down"}` once SIGTERM started
/// the drain. (`/healthz` is liveness and stays 200 while the process runs.)
fn health(app: &App) -> Answer {
    if app.lifecycle.is_draining() {
        Answer::json(503, &json!({"status": "shutting_down"}))
    } else {
        Answer::json(200, &json!({"status": "ok"}))
    }
}

/// OpenAI's model list, one entry per alias, so SDKs and tools can discover them.
pub fn models(app: &App) -> Value {
    let data: Vec<Value> = app
        .catalog
        .aliases
        .iter()
        .map(|a| model_entry(&a.name))
        .collect();
    json!({"object": "list", "data": data})
}

/// An alias's keyed picks: the share of its keyed answers its providers' prompt caches
/// served, and the exponent its next keyed pick uses, per mode.
fn keyed(hits: &crate::routing::KeyedHits, params: &crate::routing::RoutingParams) -> Value {
    let per_mode = |f: &dyn Fn(Mode) -> f64| json!({"non_streaming": f(Mode::NonStreaming), "streaming": f(Mode::Streaming)});
    json!({
        "hit_rate": per_mode(&|m| hits.rate(m)),
        "exploit_k": per_mode(&|m| params.exploit_k * hits.exploit(m, &params.rule.keyed)),
    })
}

/// Live routing state per alias (config order) and candidate (config order), plus totals over
/// every distinct candidate; never any secret.
pub fn status(app: &App) -> Value {
    let params = &app.catalog.params;
    let now = now_us();
    let aliases: Vec<Value> = app
        .catalog
        .aliases
        .iter()
        .map(|alias| {
            let shares_ns = alias.shares(Mode::NonStreaming, params);
            let shares_s = alias.shares(Mode::Streaming, params);
            let keyed_ns = alias.keyed_shares(Mode::NonStreaming, params);
            let keyed_s = alias.keyed_shares(Mode::Streaming, params);
            let weights_ns = alias.weights(Mode::NonStreaming, params);
            let weights_s = alias.weights(Mode::Streaming, params);
            let candidates: Vec<Value> = alias
                .candidates
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let s = &c.stats;
                    let success = s.success_at(now, &params.rule.success);
                    let per_mode = |mode: Mode| {
                        let snap = s.snapshot_at(mode, now, &params.rule.success);
                        let charged = routing::charged_latency_us(&snap, &params.rule);
                        let min_success = params.rule.score.min_success;
                        json!({
                            "latency_ms": s.latency_ms(mode),
                            "waiting_age_ms": snap.wait_age_us.map(|a| a / 1000.0),
                            "load_ms_per_request": snap.load_slope_us / 1000.0,
                            "load_mean_in_flight": snap.load_mean_inflight,
                            "charged_latency_ms": charged.map(|l| l / 1000.0),
                            "effective_latency_ms": charged.map(|l| l / 1000.0 / snap.success.max(min_success)),
                            "congestion_discount": snap.discount,
                            "reference_latency_ms": snap.reference_us.map(|r| r / 1000.0),
                        })
                    };
                    let lulled = routing::lull::lulled(now, alias.candidates.len(), &params.rule.lull)
                        == Some(i)
                        && s.takes_lulls();
                    let backed_off_ms = s
                        .back_off_deadline_us()
                        .filter(|&until| until > now)
                        .map(|until| (until - now) / 1000);
                    json!({
                        "provider": c.provider.name,
                        "model": c.model,
                        "holder_tag": c.holder.as_str(),
                        "state": c.state(params, now),
                        "non_streaming": per_mode(Mode::NonStreaming),
                        "streaming": per_mode(Mode::Streaming),
                        "success_rate": success,
                        "share": {"non_streaming": shares_ns[i], "streaming": shares_s[i]},
                        "keyed_share": {"non_streaming": keyed_ns[i], "streaming": keyed_s[i]},
                        "weight": {"non_streaming": weights_ns[i], "streaming": weights_s[i]},
                        "in_flight": s.inflight(),
                        "requests": s.requests(),
                        "failures": s.failures(),
                        "client_errors": s.client_errors(),
                        "last_error": last_error(s.last_error()),
                        "quota": quota(s, now),
                        "pacing": s.pacing(now),
                        "in_lull": lulled,
                        "backed_off_for_ms": backed_off_ms,
                        "on_probation": s.on_probation(),
                    })
                })
                .collect();
            let (ns, st) = app.metrics.routed(&alias.name).unwrap_or((0, 0));
            json!({
                "alias": alias.name,
                "routed": {"non_streaming": ns, "streaming": st},
                "keyed": keyed(&alias.keyed_hits, params),
                "candidates": candidates,
            })
        })
        .collect();
    let candidates = &app.catalog.candidates;
    let sum = |f: fn(&crate::routing::CandidateStats) -> u64| -> u64 {
        candidates.iter().map(|c| f(&c.stats)).sum()
    };
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "pid": std::process::id(),
        "uptime_secs": app.started.elapsed().as_secs(),
        "totals": {
            "requests": sum(|s| s.requests()),
            "failures": sum(|s| s.failures()),
            "client_errors": sum(|s| s.client_errors()),
            "in_flight": sum(|s| s.inflight()),
        },
        "budget": budget(app),
        "aliases": aliases,
        "endpoints": ENDPOINTS
            .iter()
            .map(|(path, methods, answer)| json!({"path": path, "methods": methods, "answer": answer}))
            .collect::<Vec<_>>(),
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

/// The last quota reading of each kind as `{"remaining", "limit", "reset_in_ms"}` (`limit` and
/// `reset_in_ms` `null` when not announced; `reset_in_ms` 0 once the reset is past), or `null`
/// for a kind never announced.
fn quota(stats: &CandidateStats, now_us: u64) -> Value {
    let reading = |view: Option<QuotaView>| match view {
        None => Value::Null,
        Some(v) => json!({
            "remaining": v.remaining,
            "limit": v.limit,
            "reset_in_ms": v.reset_at_us.map(|at| at.saturating_sub(now_us) / 1000),
        }),
    };
    let mut out = serde_json::Map::new();
    for kind in QuotaKind::ALL {
        out.insert(kind.as_str().into(), reading(stats.quota(kind)));
    }
    Value::Object(out)
}

/// The last error as `{"kind", "at", "at_unix_ms"}` (`at` in RFC 3339, UTC), or `null`.
fn last_error(last: Option<(ErrorKind, u64)>) -> Value {
    let Some((kind, ms)) = last else {
        return Value::Null;
    };
    let at = i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map(|t| format!("{t:.3}"));
    json!({"kind": kind.as_str(), "at": at, "at_unix_ms": ms})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_errors_show_kind_and_time() {
        assert_eq!(last_error(None), Value::Null);
        let v = last_error(Some((ErrorKind::Timeout, 1_700_000_000_123)));
        assert_eq!(v["kind"], "timeout");
        assert_eq!(v["at"], "2023-11-14T22:13:20.123Z");
        assert_eq!(v["at_unix_ms"], 1_700_000_000_123u64);
    }

    #[test]
    fn quotas_show_the_last_reading_of_each_kind() {
        let stats = CandidateStats::new();
        assert_eq!(quota(&stats, 0), json!({"requests": null, "tokens": null}));
        stats.observe_quota(
            QuotaKind::Requests,
            42,
            Some(100),
            Some(1_234_000),
            5_000_000,
            &Default::default(),
        );
        stats.observe_quota(
            QuotaKind::Tokens,
            7,
            None,
            None,
            5_000_000,
            &Default::default(),
        );
        assert_eq!(
            quota(&stats, 5_000_000),
            json!({
                "requests": {"remaining": 42, "limit": 100, "reset_in_ms": 1234},
                "tokens": {"remaining": 7, "limit": null, "reset_in_ms": null},
            })
        );
        assert_eq!(quota(&stats, 9_000_000)["requests"]["reset_in_ms"], 0);
    }
}
