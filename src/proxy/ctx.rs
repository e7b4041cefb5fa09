//! The per-request state: the only state a request carries between Pingora's hooks.

use super::overhead::OverheadMarks;
use crate::body::holder_tag::HolderTag;
use crate::budget::Reservation;
use crate::catalog::Candidate;
use crate::observe::metrics::RouteReason;
use crate::observe::trace::{self, TraceContext};
use crate::observe::Tracked;
use crate::routing::lull::Slot;
use crate::routing::{Answer, Drawn, ErrorKind, KeyedHits, Mode, OwnedInflightGuard, WaitGuard};
use pingora::http::RequestHeader;
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
    /// The candidate's place in its alias's lull rotation.
    pub slot: Slot,
    /// For a request routed by its conversation key: its alias's keyed hit rate, which its
    /// first chunk feeds.
    pub keyed_hits: Option<Arc<KeyedHits>>,
    /// Upstream path and query.
    pub path_and_query: String,
    /// Length of the spliced body sent upstream.
    pub body_len: usize,
    /// Counts the request as in flight for the candidate until the context drops.
    pub inflight: OwnedInflightGuard,
    /// The request's metric series (in flight until the context drops).
    pub metrics: Tracked,
    /// Why the candidate was chosen (logged as `route`, counted in `sturnus_routes_total`).
    pub reason: RouteReason,
    /// How the pick's draw placed it ([`crate::routing::Drawn`]): what its answer may add to
    /// the candidate's congestion discount.
    pub drawn: Drawn,
    /// For a Responses API answer: the candidate's holder tag, which the response ids in the
    /// answer get ([`crate::body::id_splice`]).
    pub holder: Option<HolderTag>,
}

/// State of one request across the proxy hooks.
pub struct RequestCtx {
    /// When sturnus received the request header.
    pub received: Instant,
    /// The routing decision, once made.
    pub route: Option<Route>,
    /// When the request header went upstream (start of the TTFC measurement).
    pub sent_at: Option<Instant>,
    /// Counts the request as waiting for its first chunk (its age raises the candidate's
    /// effective latency while it waits); dropped at the first chunk or the end.
    pub wait: Option<WaitGuard>,
    /// What the request measured at its first chunk (and whether it was sent in a lull),
    /// recorded with its outcome.
    pub answer: Option<(Answer, bool)>,
    /// The marks of the time sturnus itself adds (`sturnus_overhead_seconds`).
    pub overhead: OverheadMarks,
    /// When the first response body chunk arrived.
    pub first_chunk_at: Option<Instant>,
    /// When the last response body byte was relayed.
    pub last_chunk_at: Option<Instant>,
    /// The request's id, echoed as `x-request-id` and logged; set by [`RequestCtx::identify`]
    /// (empty until then).
    pub request_id: String,
    /// The request's trace context (sturnus's span in the caller's trace, or a new trace).
    pub trace: TraceContext,
    /// The provider's own `x-request-id`, when it sent a loggable one.
    pub upstream_request_id: Option<String>,
    /// The provider's response status, once seen.
    pub status: Option<u16>,
    /// A transport failure already classified (credentials, DNS).
    pub failure: Option<ErrorKind>,
    /// The client closed its connection before the answer was complete (logged as 499).
    pub client_closed: bool,
    /// Response body bytes relayed to the client.
    pub response_bytes: u64,
    /// Request body bytes received from the client.
    pub request_bytes: u64,
    /// The memory budget held for the request body, until the provider has it (or the
    /// request ends any other way: dropping the context gives it back).
    pub reservation: Option<Reservation>,
    /// The authenticated client (`[auth]`), when the request carried an accepted credential.
    pub client: Option<Arc<crate::auth::Client>>,
    /// The request's place under its client's `max_inflight`, until the context drops.
    pub client_slot: Option<crate::auth::limits::Slot>,
    /// The `code` of sturnus's refusal of the client itself (401, 403, 429 of its own limits).
    pub refusal: Option<&'static str>,
}

impl RequestCtx {
    /// A fresh context for a new request (its identity comes from [`RequestCtx::identify`]).
    pub fn new() -> Self {
        RequestCtx {
            received: Instant::now(),
            route: None,
            sent_at: None,
            wait: None,
            answer: None,
            overhead: OverheadMarks::default(),
            first_chunk_at: None,
            last_chunk_at: None,
            request_id: String::new(),
            trace: TraceContext::new_root(),
            upstream_request_id: None,
            status: None,
            failure: None,
            client_closed: false,
            response_bytes: 0,
            request_bytes: 0,
            reservation: None,
            client: None,
            client_slot: None,
            refusal: None,
        }
    }
}

impl RequestCtx {
    /// Takes the request's identity from its headers: the client's `x-request-id` (when safe)
    /// or a new one, which every answer and the provider's request then carry; and the
    /// caller's trace context, or a new trace.
    pub fn identify(&mut self, req: &RequestHeader) {
        let client_id = req
            .headers
            .get(&trace::REQUEST_ID_NAME)
            .map(|v| v.as_bytes());
        self.request_id = trace::request_id(client_id);
        // Without a `traceparent` the request keeps the new trace its context began with.
        let mut parents = req
            .headers
            .get_all(&trace::TRACEPARENT_NAME)
            .iter()
            .peekable();
        if parents.peek().is_some() {
            self.trace = TraceContext::from_headers(parents.map(|v| v.as_bytes()));
        }
    }
}

impl RequestCtx {
    /// The ids the provider's request carries.
    pub(super) fn ids(&self) -> super::upstream_request::RequestIds<'_> {
        super::upstream_request::RequestIds {
            request_id: &self.request_id,
            trace: &self.trace,
        }
    }

    /// The request id, generating one if the request ended before [`RequestCtx::identify`].
    pub fn ensure_request_id(&mut self) -> &str {
        if self.request_id.is_empty() {
            self.request_id = trace::new_request_id();
        }
        &self.request_id
    }
}

impl Default for RequestCtx {
    fn default() -> Self {
        Self::new()
    }
}
