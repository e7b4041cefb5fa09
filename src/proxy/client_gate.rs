//! The client at the door: its credential checked against `[auth]` (401), its limits (429),
//! and, once the body names a model, whether it may use that alias (403). Refused requests
//! are answered here and never reach a provider.

use super::ctx::RequestCtx;
use crate::api::error::{ALIAS_NOT_ALLOWED, CLIENT_RATE_LIMITED, INVALID_API_KEY};
use crate::api::{respond, ApiError};
use crate::app::App;
use pingora_core::Result;
use pingora_proxy::Session;
use std::time::{SystemTime, UNIX_EPOCH};

/// Paths served without a credential on the proxy listener: liveness and readiness probes.
const OPEN_PATHS: [&str; 2] = ["/health", "/healthz"];

/// Authenticates the request when `[auth]` is configured; answers 401 (and returns true) when
/// its credential is missing or not accepted.
pub async fn authenticate(session: &mut Session, app: &App, ctx: &mut RequestCtx) -> Result<bool> {
    let Some(gate) = &app.auth else {
        return Ok(false);
    };
    let header = session.req_header();
    if OPEN_PATHS.contains(&header.uri.path()) {
        return Ok(false);
    }
    match gate.authenticate(&header.headers, unix_now_secs()) {
        Ok(client) => {
            ctx.client = client;
            Ok(false)
        }
        Err(refused) => {
            ctx.refusal = Some(INVALID_API_KEY);
            let err = ApiError::invalid_api_key(refused.message());
            respond::error(session, &ctx.request_id, &err, false).await?;
            Ok(true)
        }
    }
}

/// Holds the request's place under its client's limits; answers 429 `client_rate_limited`
/// with `Retry-After` (and returns true) when it is over one.
pub async fn limit(session: &mut Session, app: &App, ctx: &mut RequestCtx) -> Result<bool> {
    let (Some(gate), Some(client)) = (&app.auth, &ctx.client) else {
        return Ok(false);
    };
    match gate.limiter.admit(client) {
        Ok(slot) => {
            ctx.client_slot = Some(slot);
            Ok(false)
        }
        Err(limited) => {
            ctx.refusal = Some(CLIENT_RATE_LIMITED);
            app.metrics
                .clients
                .rate_limited(&client.name, limited.limit.as_str());
            let err = ApiError::client_rate_limited(
                &client.name,
                limited.limit.as_str(),
                limited.value,
                limited.retry_after_secs,
            );
            let retry_after = [("retry-after", limited.retry_after_secs.to_string())];
            respond::error_with(session, &ctx.request_id, &err, false, &retry_after).await?;
            Ok(true)
        }
    }
}

/// The 403 for a client asking for an alias it may not use (checked before the alias is
/// looked up, so a client learns nothing of aliases it may not use).
pub fn alias_refusal(ctx: &mut RequestCtx, model: &str) -> Option<ApiError> {
    let client = ctx.client.as_ref()?;
    if client.may_use(model) {
        return None;
    }
    ctx.refusal = Some(ALIAS_NOT_ALLOWED);
    Some(ApiError::alias_not_allowed(&client.name, model))
}

/// Seconds since the Unix epoch: the clock token expiry is checked against.
fn unix_now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
