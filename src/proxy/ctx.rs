//! The per-request state: the only state a request carries between Pingora's hooks.

use crate::budget::Reservation;
use crate::catalog::Candidate;
use crate::routing::{ErrorKind, Mode, OwnedInflightGuard};
use bytes::Bytes;
use pingora_core::upstreams::peer::HttpPeer;
use std::sync::Arc;
use std::time::Instant;

/// Where a routed request goes, decided in `request_filter`.
pub struct Route {
    /// The alias the client asked for.
    pub alias: String,
    /// The chosen candidate.
    pub candidate: Arc<Candidate>,
    /// Streaming or not (from the body's `"stream": true`).
    pub mode: Mode,
    /// Upstream path and query.
    pub path_and_query: String,
    /// Length of the spliced body sent upstream.
    pub body_len: usize,
    /// Counts the request as in flight for the candidate until the context drops.
    pub inflight: OwnedInflightGuard,
}

/// State of one request across the proxy hooks.
pub struct RequestCtx {
    /// When sturnus received the request header.
    pub received: Instant,
    /// The routing decision, once made.
    pub route: Option<Route>,
    /// The peer for `upstream_peer`, resolved ahead in `request_filter` (async DNS).
    pub peer: Option<Box<HttpPeer>>,
    /// The spliced body waiting to replace Pingora's replay in `request_body_filter`.
    pub spliced: Option<Bytes>,
    /// When the request header went upstream (start of the TTFC measurement).
    pub sent_at: Option<Instant>,
    /// When the first response body chunk arrived.
    pub first_chunk_at: Option<Instant>,
    /// The provider's response status, once seen.
    pub status: Option<u16>,
    /// A transport failure already classified (direct path, credentials, DNS).
    pub failure: Option<ErrorKind>,
    /// Response body bytes relayed to the client.
    pub response_bytes: u64,
    /// Request body bytes received from the client.
    pub request_bytes: u64,
    /// The memory budget held for the request body, until the provider has it (or the
    /// request ends any other way: dropping the context gives it back).
    pub reservation: Option<Reservation>,
}

impl RequestCtx {
    /// A fresh context for a new request.
    pub fn new() -> Self {
        RequestCtx {
            received: Instant::now(),
            route: None,
            peer: None,
            spliced: None,
            sent_at: None,
            first_chunk_at: None,
            status: None,
            failure: None,
            response_bytes: 0,
            request_bytes: 0,
            reservation: None,
        }
    }
}

impl Default for RequestCtx {
    fn default() -> Self {
        Self::new()
    }
}
