//! Reading the whole request body before the upstream is chosen, and handing it back to Pingora.
//!
//! Pingora 0.9.1 chooses the upstream before it reads the body, yet routing needs the body's
//! `model`. This module is the one place that knows how that is bridged: the body is read in
//! `request_filter` with Pingora's retry buffering on, and bodies that fit the retry buffer
//! (64 KiB) are replayed by Pingora into `request_body_filter`, where the spliced bytes are
//! swapped in. Larger bodies cannot be replayed and take the direct path (`direct.rs`). When a
//! Pingora release offers `early_request_body_filter`/`set_buffered_body`, only this file changes.

use super::errors::ApiError;
use bytes::{Bytes, BytesMut};
use pingora_core::Result;
use pingora_proxy::Session;

/// A request body read in full, and whether Pingora can replay it upstream by itself.
pub struct WholeBody {
    /// The bytes exactly as the client sent them (chunked encoding removed).
    pub bytes: Bytes,
    /// True when Pingora's retry buffer holds the whole body, so the normal proxy path works.
    pub replayable: bool,
}

/// Reads the whole request body, refusing bodies larger than `cap` bytes before buffering them.
pub async fn read_whole(
    session: &mut Session,
    cap: u64,
) -> Result<std::result::Result<WholeBody, ApiError>> {
    let declared = session
        .req_header()
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|len| len > cap) {
        return Ok(Err(ApiError::body_too_large(cap)));
    }
    if expects_continue(session) {
        session.write_continue_response().await?;
    }
    session.enable_retry_buffering();
    let mut buf = BytesMut::with_capacity(declared.unwrap_or(0).min(cap) as usize);
    while let Some(chunk) = session.read_request_body().await? {
        if (buf.len() + chunk.len()) as u64 > cap {
            return Ok(Err(ApiError::body_too_large(cap)));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(Ok(WholeBody {
        bytes: buf.freeze(),
        replayable: !session.as_ref().retry_buffer_truncated(),
    }))
}

/// Swaps Pingora's replay of the original body for the spliced one (from `request_body_filter`).
/// The replay is always the whole body in one piece, also when Pingora resends on a fresh
/// connection after a stale pooled one failed, so every replay gets the spliced bytes.
pub fn replace_replayed(body: &mut Option<Bytes>, spliced: &Option<Bytes>) {
    if let (Some(body), Some(spliced)) = (body.as_mut(), spliced) {
        *body = spliced.clone();
    }
}

fn expects_continue(session: &Session) -> bool {
    session
        .req_header()
        .headers
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}
