//! Writing answers that sturnus produces itself (errors, admin JSON) to the client.

use super::ApiError;
use crate::observe::trace::REQUEST_ID;
use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora_core::Result;
use pingora_proxy::Session;

/// Writes a complete response with the given content type and body, carrying the request's
/// `x-request-id`.
pub async fn send(
    session: &mut Session,
    request_id: &str,
    status: u16,
    content_type: &str,
    body: Vec<u8>,
    extra_headers: &[(&'static str, String)],
) -> Result<()> {
    let mut header = ResponseHeader::build(status, Some(4 + extra_headers.len()))?;
    header.insert_header(http::header::CONTENT_TYPE, content_type)?;
    header.insert_header(http::header::CONTENT_LENGTH, body.len().to_string())?;
    if !request_id.is_empty() {
        header.insert_header(REQUEST_ID, request_id)?;
    }
    for (name, value) in extra_headers {
        header.insert_header(*name, value.as_str())?;
    }
    session
        .write_response_header(Box::new(header), body.is_empty())
        .await?;
    if !body.is_empty() {
        session
            .write_response_body(Some(Bytes::from(body)), true)
            .await?;
    }
    Ok(())
}

/// Writes an OpenAI-shaped error. The connection is closed afterwards when the request body
/// was not (or not completely) read, so leftover bytes are never parsed as a next request.
pub async fn error(
    session: &mut Session,
    request_id: &str,
    err: &ApiError,
    body_consumed: bool,
) -> Result<()> {
    error_with(session, request_id, err, body_consumed, &[]).await
}

/// [`error`], with `extra` headers (a `Retry-After`).
pub async fn error_with(
    session: &mut Session,
    request_id: &str,
    err: &ApiError,
    body_consumed: bool,
    extra: &[(&'static str, String)],
) -> Result<()> {
    // Boxed, like every answer here: error paths are rare, so their state stays out of the
    // request path's future.
    Box::pin(async move {
        if !body_consumed && !drain_small_body(session).await {
            session.set_keepalive(None);
        }
        send_error(session, request_id, err, extra).await
    })
    .await
}

/// Writes `err` as its JSON answer (with `extra` headers), carrying the request's id.
pub async fn send_error(
    session: &mut Session,
    request_id: &str,
    err: &ApiError,
    extra: &[(&'static str, String)],
) -> Result<()> {
    let body = err.to_json();
    send(
        session,
        request_id,
        err.status,
        "application/json",
        body,
        extra,
    )
    .await
}

/// Answers a request whose body sturnus stopped reading (too large, over budget, too slow) and
/// closes the connection. Before closing it drains what the client still sends for a moment
/// ([`REFUSAL_DRAIN`]), without keeping it, so the client reads the answer rather than a reset.
pub async fn refuse(
    session: &mut Session,
    request_id: &str,
    err: &ApiError,
    retry_after: Option<u64>,
) -> Result<()> {
    session.set_keepalive(None);
    let extra: Vec<(&'static str, String)> = retry_after
        .map(|secs| ("retry-after", secs.to_string()))
        .into_iter()
        .collect();
    Box::pin(async move {
        send_error(session, request_id, err, &extra).await?;
        let _ = tokio::time::timeout(REFUSAL_DRAIN, session.drain_request_body()).await;
        Ok(())
    })
    .await
}

/// The request's `Content-Length` as a number, if it has a readable one: every early answer and
/// body read sizes its work from it.
pub fn declared_length(req: &pingora::http::RequestHeader) -> Option<u64> {
    req.headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// After refusing a request, how long unread request bytes are drained before the connection
/// closes, so the client reads the answer instead of a connection reset.
pub const REFUSAL_DRAIN: std::time::Duration = std::time::Duration::from_secs(1);

/// Largest unread request body sturnus drains (rather than closing) before answering early.
const DRAIN_LIMIT: u64 = 1 << 20;

/// Drains an unread request body when it is small enough; false when it was not drained.
async fn drain_small_body(session: &mut Session) -> bool {
    let declared = declared_length(session.req_header());
    match declared {
        Some(len) if len <= DRAIN_LIMIT => session.drain_request_body().await.is_ok(),
        None if session.is_body_empty() => true,
        _ => false,
    }
}
