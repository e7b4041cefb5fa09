//! The provider's response on its way back: sturnus headers, TTFC timing, outcome accounting.
//!
//! Shared by the Pingora hooks and the direct path, so both measure and label identically.

use super::ctx::RequestCtx;
use super::errors;
use crate::routing::{ErrorKind, Outcome, RoutingParams};
use pingora::http::ResponseHeader;
use pingora_core::Error;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Response header naming the candidate, to send back for session affinity.
pub const AFFINITY_HEADER: &str = "x-session-affinity";
/// Response header naming the provider that served the request.
pub const PROVIDER_HEADER: &str = "x-sturnus-provider";

/// Marks the moment the request went upstream (start of time-to-first-chunk).
pub fn request_sent(ctx: &mut RequestCtx) {
    ctx.sent_at = Some(Instant::now());
}

/// Notes the provider's status and adds the sturnus headers to its response.
pub fn response_header(resp: &mut ResponseHeader, ctx: &mut RequestCtx) {
    ctx.status = Some(resp.status.as_u16());
    if let Some(route) = &ctx.route {
        let _ = resp.insert_header(AFFINITY_HEADER, route.candidate.affinity.as_str());
        let _ = resp.insert_header(PROVIDER_HEADER, route.candidate.provider.name.as_str());
    }
}

/// Accounts one response body chunk; the first one (or the end of an empty body) is the TTFC.
pub fn body_chunk(len: usize, end_of_stream: bool, ctx: &mut RequestCtx, params: &RoutingParams) {
    ctx.response_bytes += len as u64;
    if ctx.first_chunk_at.is_some() || (len == 0 && !end_of_stream) {
        return;
    }
    let now = Instant::now();
    ctx.first_chunk_at = Some(now);
    if let (Some(route), Some(sent)) = (&ctx.route, ctx.sent_at) {
        let micros = now.duration_since(sent).as_secs_f64() * 1e6;
        route
            .candidate
            .stats
            .record_latency(route.mode, micros, params.ewma_alpha);
    }
}

/// Feeds the request's outcome into the candidate's success rate, once, at the end.
pub fn finish(ctx: &mut RequestCtx, error: Option<&Error>, params: &RoutingParams) {
    let Some(route) = &ctx.route else {
        return;
    };
    let stats = &route.candidate.stats;
    let failure = ctx.failure.or_else(|| error.and_then(errors::classify));
    if let Some(kind) = failure {
        stats.record_failure(kind, unix_ms(), params.ewma_alpha);
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
            stats.record_failure(kind, unix_ms(), params.ewma_alpha);
        } else {
            stats.record_outcome(outcome, params.ewma_alpha);
        }
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
