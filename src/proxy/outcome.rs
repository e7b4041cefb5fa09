//! The provider's response on its way back: sturnus headers, TTFC timing, outcome accounting,
//! metrics and the access log.
//!
//! [`response_filter`] and [`response_body_filter`] stand in for Pingora's phases of the same
//! names (called by `forward.rs` for each answer); [`finish`] is what the `logging` hook does
//! for every request, answered or not.

use super::ctx::RequestCtx;
use crate::api::classify;
use crate::app::App;
use crate::observe::access_log::{millis, AccessRecord, Verdict};
use crate::observe::trace;
use crate::providers::{prompt_cache, ratelimit};
use crate::routing::quota::QuotaParams;
use crate::routing::{lull, now_us, ErrorKind, Outcome, RoutingParams};
use pingora::http::ResponseHeader;
use pingora_core::{Error, ErrorSource};
use pingora_proxy::Session;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Response header naming the candidate, to send back for session affinity.
pub const AFFINITY_HEADER: &str = "x-session-affinity";
/// Response header naming the provider that served the request.
pub const PROVIDER_HEADER: &str = "x-sturnus-provider";
/// [`AFFINITY_HEADER`] as a header name, for inserting without parsing the name each time.
pub static AFFINITY_NAME: http::HeaderName = http::HeaderName::from_static(AFFINITY_HEADER);
/// [`PROVIDER_HEADER`] as a header name.
static PROVIDER_NAME: http::HeaderName = http::HeaderName::from_static(PROVIDER_HEADER);

/// Longest `Retry-After` honoured, so one odd header cannot bench a candidate for hours.
pub(super) const MAX_RETRY_AFTER_SECS: u64 = 300;

/// Marks the moment the request went upstream (start of time-to-first-chunk and end of the
/// overhead before it, less `connecting`, the time spent opening a new connection) and counts
/// it as waiting for its first chunk.
pub fn request_sent(ctx: &mut RequestCtx, connecting: Duration) {
    let now = Instant::now();
    ctx.sent_at = Some(now);
    ctx.overhead.leaving(now, connecting);
    if let Some(route) = &ctx.route {
        ctx.wait = Some(
            route
                .candidate
                .stats
                .begin_wait(route.mode, now_us(), route.drawn),
        );
    }
}

/// A 429 or 503 with `Retry-After` (seconds, an HTTP date, or `retry-after-ms`) keeps traffic
/// off the candidate until then.
fn honour_retry_after(resp: &ResponseHeader, ctx: &RequestCtx) {
    let status = resp.status.as_u16();
    if status != 429 && status != 503 {
        return;
    }
    let Some(route) = &ctx.route else {
        return;
    };
    if let Some(wait) = ratelimit::retry_after(&resp.headers, SystemTime::now()) {
        let wait = wait.min(Duration::from_secs(MAX_RETRY_AFTER_SECS));
        let deadline_us = now_us() + wait.as_micros() as u64;
        route.candidate.stats.back_off_until(deadline_us);
    }
}

/// sturnus's `response_filter`: notes the provider's status and the quota it announces, and
/// builds the client's response header from the provider's `upstream` one with sturnus's
/// headers. Every header the provider sent reaches the client with its value unchanged, in the
/// provider's order, except its hop-by-hop ones (`Keep-Alive`, `Proxy-Connection` and those
/// its `Connection` names; Pingora's server writes `Connection` and `Date` itself, as for any
/// proxied answer). sturnus adds [`AFFINITY_HEADER`] and [`PROVIDER_HEADER`], and
/// `x-request-id` (its own) only when the provider sent none; the provider's id is kept for
/// the access log.
///
/// Like the upstream request, the header map is built outside Pingora's [`ResponseHeader`]
/// (see `upstream_request::upstream_request_filter`), in one pass into a map sized for the
/// provider's headers and sturnus's: names reach the client in canonical case, and the status
/// line carries the standard reason phrase.
pub fn response_filter(
    upstream: &ResponseHeader,
    ctx: &mut RequestCtx,
    pacing: &QuotaParams,
) -> ResponseHeader {
    ctx.status = Some(upstream.status.as_u16());
    honour_retry_after(upstream, ctx);
    super::quota::observe(upstream, ctx, pacing);
    let (mut parts, ()) = http::Response::new(()).into_parts();
    parts.status = upstream.status;
    parts.version = upstream.version;
    parts.extensions = upstream.extensions.clone();
    let headers = &mut parts.headers;
    copy_end_to_end(&upstream.headers, headers);
    if let Some(route) = &ctx.route {
        let (affinity, provider) = &route.candidate.header_values;
        if let Some(value) = affinity {
            headers.insert(AFFINITY_NAME.clone(), value.clone());
        }
        if let Some(value) = provider {
            headers.insert(PROVIDER_NAME.clone(), value.clone());
        }
    }
    match headers.get(&trace::REQUEST_ID_NAME) {
        Some(theirs) => {
            if trace::is_safe_id(theirs.as_bytes()) {
                ctx.upstream_request_id = Some(String::from_utf8_lossy(theirs.as_bytes()).into());
            }
        }
        None => {
            if let Ok(id) = http::HeaderValue::from_str(&ctx.request_id) {
                headers.insert(trace::REQUEST_ID_NAME.clone(), id);
            }
        }
    }
    ResponseHeader::from(parts)
}

/// Headers sturnus may add to the provider's: [`AFFINITY_HEADER`], [`PROVIDER_HEADER`] and
/// `x-request-id`.
const ADDED: usize = 3;

/// Copies the provider's headers into `out` except its hop-by-hop ones: `Keep-Alive`,
/// `Proxy-Connection` and the ones its `Connection` header names (`Connection` itself is
/// rewritten by Pingora; the framing headers stay, Pingora frames the body to the client from
/// them).
fn copy_end_to_end(upstream: &http::HeaderMap, out: &mut http::HeaderMap) {
    let named: Vec<http::HeaderName> = upstream
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| http::HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .filter(|n| !FRAMING.contains(n))
        .collect();
    out.reserve(upstream.len() + ADDED);
    for (name, value) in upstream {
        if name == KEEP_ALIVE || name == PROXY_CONNECTION || named.contains(name) {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
}

/// `Keep-Alive`, a hop-by-hop header.
const KEEP_ALIVE: http::HeaderName = http::HeaderName::from_static("keep-alive");
/// `Proxy-Connection`, a hop-by-hop header.
const PROXY_CONNECTION: http::HeaderName = http::HeaderName::from_static("proxy-connection");
/// Headers that frame the body: never removed, even when `Connection` names them.
const FRAMING: [http::HeaderName; 2] = [
    http::header::CONTENT_LENGTH,
    http::header::TRANSFER_ENCODING,
];

/// sturnus's `response_body_filter`: accounts one response body chunk; the first one (or the
/// end of an empty body) is the TTFC, which a successful answer folds into its candidate's
/// latency ([`crate::routing::CandidateStats::record_first_chunk`]). With prefix affinity, a first chunk that reports a
/// prompt-cache hit feeds the candidate's cache-hit latency, which raises its estimate only
/// while hits are slow; the first chunk of a request routed by its key feeds its alias's
/// keyed hit rate either way.
pub fn response_body_filter(chunk: &[u8], end_of_stream: bool, ctx: &mut RequestCtx, app: &App) {
    ctx.response_bytes += chunk.len() as u64;
    let now = Instant::now();
    if end_of_stream && ctx.last_chunk_at.is_none() {
        ctx.last_chunk_at = Some(now);
    }
    if ctx.first_chunk_at.is_some() || (chunk.is_empty() && !end_of_stream) {
        return;
    }
    ctx.first_chunk_at = Some(now);
    if let (Some(route), Some(sent)) = (&ctx.route, ctx.sent_at) {
        let seconds = now.duration_since(sent).as_secs_f64();
        let stats = &route.candidate.stats;
        let micros = seconds * 1e6;
        // No longer waiting; its send time on the routing clock says whether it went out in a
        // lull, and what it measured waits in the context for the request's outcome.
        let answer = ctx.wait.take().map(|wait| wait.first_chunk(micros));
        let sent_us = answer.map(|a| a.sent_us);
        let hit = app.config.routing.prefix_affinity && prompt_cache::reports_hit(chunk);
        if let Some(keyed_hits) = &route.keyed_hits {
            keyed_hits.record(route.mode, hit, &app.catalog.params.rule.keyed);
        }
        let lulls = &app.catalog.params.rule.lull;
        let in_lull = sent_us.is_some_and(|at| lull::unqueued_sample(at, route.slot, lulls));
        let outcome = ctx.status.map_or(Outcome::Failure, Outcome::from_status);
        let at = Some(now_us());
        stats.record_first_chunk(route.mode, micros, outcome, hit, at, &app.catalog.params);
        route.metrics.first_chunk(seconds);
        // A cached answer says where a conversation's cache is, not how the candidate queues.
        ctx.answer = answer.filter(|_| !hit).map(|a| (a, in_lull));
    }
}

/// The first write to the client was handed off at `at`: the request's overhead is complete.
pub fn first_write_handed_off(ctx: &mut RequestCtx, at: Instant) {
    if let (Some(overhead), Some(route)) = (ctx.overhead.first_write(at), &ctx.route) {
        route.metrics.overhead(overhead.as_secs_f64());
    }
}

/// Status logged for a request whose client left before its answer was complete (nginx's
/// "client closed request").
pub const CLIENT_CLOSED_STATUS: u16 = 499;

/// Ends a request: its outcome goes into the candidate's success rate and the metrics, once,
/// and its access line is written. A client that left is the provider's fault in no way: such
/// a request adds nothing to the candidate's statistics and is logged as `499 client_closed`.
pub fn finish(session: &Session, ctx: &mut RequestCtx, error: Option<&Error>, app: &App) {
    ctx.ensure_request_id();
    let client_closed = ctx.client_closed;
    let failure = if client_closed {
        None
    } else {
        ctx.failure.or_else(|| error.and_then(classify))
    };
    if client_closed {
        if let Some(route) = &ctx.route {
            route.metrics.client_closed();
        }
    } else {
        record_outcome(ctx, failure, &app.catalog.params);
        record_metrics(ctx, failure, error);
    }
    let header = session.req_header();
    let status = if client_closed {
        Some(CLIENT_CLOSED_STATUS)
    } else {
        session
            .response_written()
            .map(|h| h.status.as_u16())
            .or(ctx.status)
    };
    let route = ctx.route.as_ref();
    if let Some(client) = &ctx.client {
        app.metrics
            .clients
            .answered(&client.name, status.unwrap_or(0));
    }
    let verdict = match (failure, status) {
        _ if client_closed => Verdict::ClientClosed,
        _ if ctx.refusal.is_some() => Verdict::ClientError,
        (Some(_), _) => Verdict::Failure,
        _ if error.is_some_and(|e| e.esource() == &ErrorSource::Downstream) => Verdict::ClientError,
        (None, Some(status)) => verdict_of(status),
        (None, None) if error.is_some() => Verdict::Failure,
        (None, None) => Verdict::ClientError,
    };
    let error_kind = if client_closed {
        Some(crate::observe::metrics::CLIENT_CLOSED)
    } else {
        failure.map(ErrorKind::as_str).or(ctx.refusal)
    };
    let trace_id = ctx.trace.trace_id_hex();
    let span_id = ctx.trace.span_id_hex();
    let parent_span_id = ctx.trace.parent_id_hex();
    AccessRecord {
        request_id: &ctx.request_id,
        trace_id: &trace_id,
        span_id: &span_id,
        parent_span_id: parent_span_id.as_deref(),
        method: header.method.as_str(),
        path: header.uri.path(),
        client: ctx.client.as_deref().map(|c| &*c.name),
        alias: route.map(|r| r.alias.as_str()),
        provider: route.map(|r| r.candidate.provider.name.as_str()),
        model: route.map(|r| r.candidate.model.as_str()),
        stream: route.map(|r| r.mode == crate::routing::Mode::Streaming),
        route: route.map(|r| r.reason.as_str()),
        status,
        outcome: verdict,
        error_kind,
        ttfc_ms: elapsed(ctx.sent_at, ctx.first_chunk_at).map(millis),
        duration_ms: millis(ctx.received.elapsed().as_secs_f64()),
        request_bytes: ctx.request_bytes.max(session.body_bytes_read() as u64),
        response_bytes: ctx.response_bytes.max(session.body_bytes_sent() as u64),
        upstream_request_id: ctx.upstream_request_id.as_deref(),
    }
    .log();
}

/// The access-log verdict for the status the client received.
fn verdict_of(status: u16) -> Verdict {
    match Outcome::from_status(status) {
        _ if (100..400).contains(&status) => Verdict::Success,
        Outcome::Success => Verdict::Success,
        Outcome::Failure => Verdict::Failure,
        Outcome::ClientError => Verdict::ClientError,
    }
}

/// Seconds from `from` to `to`, when both happened.
fn elapsed(from: Option<Instant>, to: Option<Instant>) -> Option<f64> {
    Some(to?.checked_duration_since(from?)?.as_secs_f64())
}

/// Feeds the request's outcome into the candidate's success rate.
fn record_outcome(ctx: &RequestCtx, failure: Option<ErrorKind>, params: &RoutingParams) {
    let Some(route) = &ctx.route else {
        return;
    };
    let stats = &route.candidate.stats;
    if let Some(kind) = failure {
        stats.record_failure(kind, unix_ms(), now_us(), params);
        return;
    }
    if let Some(status) = ctx.status {
        let outcome = Outcome::from_status(status);
        if outcome == Outcome::Failure {
            let kind = if status == 401 || status == 403 {
                ErrorKind::Auth
            } else {
                ErrorKind::Status
            };
            stats.record_failure(kind, unix_ms(), now_us(), params);
        } else {
            stats.record_outcome(outcome, now_us(), params);
            if let (Outcome::Success, Some((answer, in_lull))) = (outcome, &ctx.answer) {
                stats.record_answer(answer, *in_lull, params, now_us());
            }
        }
    }
}

/// A relayed provider response counts in `sturnus_requests_total` (and, when it completed, in
/// the latency histogram); a failure with no provider response counts in `sturnus_errors_total`.
fn record_metrics(ctx: &RequestCtx, failure: Option<ErrorKind>, error: Option<&Error>) {
    let Some(route) = &ctx.route else {
        return;
    };
    match ctx.status {
        Some(status) => {
            let completed = failure.is_none() && error.is_none();
            let latency = completed
                .then(|| {
                    elapsed(
                        ctx.sent_at,
                        Some(ctx.last_chunk_at.unwrap_or_else(Instant::now)),
                    )
                })
                .flatten();
            route.metrics.response(status, latency);
        }
        None => {
            if let Some(kind) = failure {
                route.metrics.transport_error(kind);
            }
        }
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_providers_x_request_id_reaches_the_client_and_sturnus_fills_in_a_missing_one() {
        let mut ctx = RequestCtx::new();
        ctx.request_id = "ours".into();
        let mut resp = ResponseHeader::build(200, None).unwrap();
        resp.insert_header("x-request-id", "req_provider123")
            .unwrap();
        resp.insert_header("openai-processing-ms", "17").unwrap();
        let resp = response_filter(&resp, &mut ctx, &QuotaParams::default());
        assert_eq!(resp.headers["x-request-id"], "req_provider123");
        assert_eq!(resp.headers["openai-processing-ms"], "17");
        assert!(resp.headers.get("x-upstream-request-id").is_none());
        assert_eq!(ctx.upstream_request_id.as_deref(), Some("req_provider123"));
        assert_eq!(ctx.status, Some(200));

        let mut ctx = RequestCtx::new();
        ctx.ensure_request_id();
        let mut resp = ResponseHeader::build(502, None).unwrap();
        resp.insert_header("x-request-id", "not loggable\t")
            .unwrap();
        let resp = response_filter(&resp, &mut ctx, &QuotaParams::default());
        assert_eq!(resp.headers["x-request-id"], "not loggable\t");
        assert_eq!(ctx.upstream_request_id, None);

        let mut ctx = RequestCtx::new();
        ctx.request_id = "ours".into();
        let resp = ResponseHeader::build(200, None).unwrap();
        let resp = response_filter(&resp, &mut ctx, &QuotaParams::default());
        assert_eq!(resp.headers["x-request-id"], "ours");
        assert_eq!(ctx.upstream_request_id, None);
    }

    #[test]
    fn hop_by_hop_headers_of_the_provider_stay_behind_and_framing_stays() {
        let mut ctx = RequestCtx::new();
        let mut resp = ResponseHeader::build(200, None).unwrap();
        for (name, value) in [
            ("connection", "keep-alive, x-hop, content-length"),
            ("keep-alive", "timeout=5"),
            ("x-hop", "1"),
            ("content-length", "2"),
            ("x-ratelimit-remaining-requests", "99"),
        ] {
            resp.append_header(name, value).unwrap();
        }
        let resp = response_filter(&resp, &mut ctx, &QuotaParams::default());
        let h = &resp.headers;
        assert!(h.get("keep-alive").is_none() && h.get("x-hop").is_none());
        assert_eq!(h["content-length"], "2");
        assert_eq!(h["x-ratelimit-remaining-requests"], "99");
    }

    #[test]
    fn verdicts_follow_the_routing_outcome_classes() {
        assert_eq!(verdict_of(200), Verdict::Success);
        assert_eq!(verdict_of(304), Verdict::Success);
        assert_eq!(verdict_of(400), Verdict::ClientError);
        assert_eq!(verdict_of(404), Verdict::ClientError);
        assert_eq!(verdict_of(429), Verdict::Failure);
        assert_eq!(verdict_of(401), Verdict::Failure);
        assert_eq!(verdict_of(502), Verdict::Failure);
    }
}
