//! Reading the whole request body before the upstream is chosen.
//!
//! Pingora 0.9.1 chooses the upstream before it reads the body, yet routing needs the body's
//! `model`. So `request_filter` reads the whole body here, and `forward.rs` sends the spliced
//! bytes itself; Pingora's own body handling (and its retry buffer) is never used for routed
//! requests.
//!
//! Reading is bounded three ways: the per-request cap `routing.max_body_bytes` (413), the
//! aggregate memory budget (memory is reserved before it is used: the whole `Content-Length`
//! up front, or each growth of the buffer of a chunked upload; 429, or 413 when a body can
//! never fit), and `routing.body_timeout_secs` for the whole body (408).

use crate::api::respond::declared_length;
use crate::api::ApiError;
use crate::budget::{Budget, Refusal as BudgetRefusal, Reservation};
use bytes::Bytes;
use pingora_core::{ErrorType, Result};
use pingora_proxy::Session;
use std::sync::Arc;
use std::time::Duration;

/// First buffer size for a chunked upload (it doubles from there, up to the cap).
const FIRST_CHUNKED_CAPACITY: usize = 16 * 1024;

/// A request body read in full.
#[derive(Debug)]
pub struct WholeBody {
    /// The bytes exactly as the client sent them (chunked encoding removed).
    pub bytes: Bytes,
    /// The memory budget held for the body; dropping it gives the bytes back.
    pub reservation: Reservation,
}

/// Why a body was not read, and how to answer.
#[derive(Debug)]
pub struct Refused {
    /// The answer.
    pub error: ApiError,
    /// `Retry-After` seconds, for 429.
    pub retry_after: Option<u64>,
}

impl From<ApiError> for Refused {
    fn from(error: ApiError) -> Self {
        Refused {
            error,
            retry_after: None,
        }
    }
}

/// The limits a body is read under.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// Per-request cap in bytes (`routing.max_body_bytes`).
    pub cap: u64,
    /// Time allowed for the whole body (`routing.body_timeout_secs`).
    pub timeout: Duration,
}

/// Reads the whole request body within `limits`, reserving its memory from `budget` first.
/// `Err` is a transport failure (the client went away); `Ok(Err)` is an answer to send.
pub async fn read_whole(
    session: &mut Session,
    limits: BodyLimits,
    budget: &Arc<Budget>,
) -> Result<std::result::Result<WholeBody, Refused>> {
    let declared = declared_length(session.req_header());
    if declared.is_some_and(|len| len > limits.cap) {
        return Ok(Err(ApiError::body_too_large(limits.cap).into()));
    }
    let mut reservation = match budget.reserve(declared.unwrap_or(0)) {
        Ok(r) => r,
        Err(refusal) => return Ok(Err(refused(refusal))),
    };
    if expects_continue(session) {
        session.write_continue_response().await?;
    }
    // The deadline below bounds the whole body; Pingora's own per-read timeout would arm a
    // second timer on every read. It is restored for whatever Pingora reads later (a drain).
    session.set_read_timeout(None);
    let read = read_chunks(session, limits, &mut reservation, declared).await;
    session.set_read_timeout(Some(limits.timeout));
    let buf = match read? {
        Ok(buf) => buf,
        Err(refused) => return Ok(Err(refused)),
    };
    Ok(Ok(WholeBody {
        bytes: Bytes::from(buf),
        reservation,
    }))
}

/// Reads the body's chunks into one buffer within `limits`, growing `reservation` with it.
async fn read_chunks(
    session: &mut Session,
    limits: BodyLimits,
    reservation: &mut Reservation,
    declared: Option<u64>,
) -> Result<std::result::Result<Vec<u8>, Refused>> {
    let mut buf: Vec<u8> = Vec::with_capacity(declared.unwrap_or(0) as usize);
    // One timer for the whole body, armed only if a read has to wait.
    let deadline = tokio::time::sleep(limits.timeout);
    tokio::pin!(deadline);
    loop {
        let read = tokio::select! {
            biased;
            read = session.read_request_body() => Ok(read),
            () = &mut deadline => Err(()),
        };
        let chunk = match read {
            Err(()) => return Ok(Err(ApiError::request_timeout("body", limits.timeout).into())),
            Ok(Err(e)) if malformed(e.etype()) => {
                let why = format!("invalid request body framing ({})", e.etype().as_str());
                return Ok(Err(ApiError::malformed_http(&why).into()));
            }
            // The client went away: nobody to answer.
            Ok(Err(e)) => return Err(e.into_down()),
            Ok(Ok(chunk)) => chunk,
        };
        let Some(chunk) = chunk else {
            return Ok(Ok(buf));
        };
        let needed = buf.len() + chunk.len();
        if needed as u64 > limits.cap {
            return Ok(Err(ApiError::body_too_large(limits.cap).into()));
        }
        if needed > buf.capacity() {
            let grown = grown_capacity(buf.capacity(), needed, limits.cap);
            if let Err(refusal) = reservation.grow_to(grown as u64) {
                return Ok(Err(refused(refusal)));
            }
            buf.reserve_exact(grown - buf.len());
        }
        buf.extend_from_slice(&chunk);
    }
}

/// The next buffer capacity for a chunked upload that needs `needed` bytes: doubling (so
/// copies stay linear), never beyond the cap.
fn grown_capacity(current: usize, needed: usize, cap: u64) -> usize {
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    current
        .saturating_mul(2)
        .max(FIRST_CHUNKED_CAPACITY)
        .max(needed)
        .min(cap.max(needed))
}

/// Whether a body read error means the client sent broken framing (rather than went away).
fn malformed(etype: &ErrorType) -> bool {
    match etype {
        ErrorType::InvalidHTTPHeader => true,
        ErrorType::Custom(name) => matches!(*name, "InvalidChunk" | "InvalidTrailerEnd"),
        _ => false,
    }
}

/// The answer for a budget refusal: 413 when the body can never fit, 429 when it may later.
fn refused(refusal: BudgetRefusal) -> Refused {
    match refusal {
        BudgetRefusal::TooLarge { limit } => ApiError::body_exceeds_budget(limit).into(),
        BudgetRefusal::Busy {
            retry_after_secs,
            in_use,
            limit,
        } => Refused {
            error: ApiError::budget_busy(retry_after_secs, in_use, limit),
            retry_after: Some(retry_after_secs),
        },
    }
}

fn expects_continue(session: &Session) -> bool {
    session
        .req_header()
        .headers
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_length_reads_a_numeric_content_length_only() {
        let with = |value: Option<&str>| {
            let mut req = pingora::http::RequestHeader::build("POST", b"/", None).unwrap();
            if let Some(v) = value {
                req.insert_header("content-length", v).unwrap();
            }
            declared_length(&req)
        };
        assert_eq!(with(Some("1024")), Some(1024));
        assert_eq!(with(Some(" 7 ")), Some(7));
        assert_eq!(with(Some("-1")), None);
        assert_eq!(with(Some("12ab")), None);
        assert_eq!(with(None), None);
    }

    #[test]
    fn chunked_buffers_double_within_the_cap() {
        assert_eq!(grown_capacity(0, 10, 1 << 20), FIRST_CHUNKED_CAPACITY);
        assert_eq!(grown_capacity(16_384, 16_385, 1 << 20), 32_768);
        assert_eq!(grown_capacity(16_384, 100_000, 1 << 20), 100_000);
        assert_eq!(grown_capacity(600_000, 600_001, 1 << 20), 1 << 20);
        assert_eq!(grown_capacity(0, 10, 12), 12);
    }

    #[test]
    fn budget_refusals_map_to_413_and_429() {
        let r = refused(BudgetRefusal::TooLarge { limit: 5 });
        assert_eq!((r.error.status, r.retry_after), (413, None));
        let r = refused(BudgetRefusal::Busy {
            retry_after_secs: 3,
            in_use: 9,
            limit: 10,
        });
        assert_eq!((r.error.status, r.retry_after), (429, Some(3)));
        assert!(
            r.error.message.contains("retry in 3 s"),
            "{}",
            r.error.message
        );
    }
}
