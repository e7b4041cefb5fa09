//! Forwarding a routed request: the spliced body to the chosen provider over Pingora's pooled
//! connector, and the provider's answer back to the client chunk by chunk, while the client is
//! watched for leaving ([`Departure`]: its HTTP/1 connection or its HTTP/2 stream).
//!
//! Every routed request goes this way, called from `request_filter` once the body is read and
//! spliced, instead of through Pingora's `proxy_to_upstream`. With the body already in hand
//! there is nothing left for Pingora's request-body pump to do: the request goes out in two
//! writes (header, then the whole body), the answer in one when it is not streamed, and no
//! channel or second task sits between client and provider. On the benchmark's 1 KB chat
//! request this takes as many instructions as Pingora's bare pass-through
//! (`bench/results/profile.md`).
//!
//! Which Pingora phase each function here stands in for is mapped in `docs/architecture.md`.

use super::ctx::RequestCtx;
use super::departure::Departure;
use super::{held_answer, outcome, overhead, upstream_request};
use crate::app::App;
use crate::body::id_splice::StreamTagger;
use bytes::Bytes;
use pingora::http::RequestHeader;
use pingora_core::protocols::http::client::HttpSession;
use pingora_core::protocols::http::HttpTask;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_core::{Error, ErrorSource, ErrorType, Result, RetryType};
use pingora_proxy::Session;
use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// How long an idle pooled provider connection is kept.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Sends the spliced request upstream and relays the response chunk by chunk.
/// Errors carry their side (upstream or downstream) so `fail_to_proxy` answers correctly; a
/// client that leaves (noticed by the watch, or by a failed write) ends the request at once and
/// drops the provider connection, which is then never reused.
pub async fn forward(
    session: &mut Session,
    app: &App,
    ctx: &mut RequestCtx,
    body: Vec<Bytes>,
    peer: Box<HttpPeer>,
) -> Result<()> {
    let mut departure = Departure::new(session);
    let forwarded = forward_watched(session, app, ctx, body, peer, &mut departure).await;
    if let Err(e) = &forwarded {
        ctx.client_closed = e.esource() == &ErrorSource::Downstream;
    }
    forwarded
}

/// [`forward`], with `departure` watching the client.
async fn forward_watched(
    session: &mut Session,
    app: &App,
    ctx: &mut RequestCtx,
    body: Vec<Bytes>,
    peer: Box<HttpPeer>,
    departure: &mut Departure,
) -> Result<()> {
    let mut upstream = send(session, departure, app, ctx, &body, &peer).await?;
    // The provider has answered, so the body will not be resent: its memory goes back now.
    drop(body);
    ctx.reservation = None;
    relay_response(session, departure, app, ctx, &mut upstream).await?;
    // Always HTTP/1.1 (see `connect`): back to the pool.
    if let HttpSession::H1(h1) = upstream {
        app.upstream()
            .connector
            .release_http_session(h1, &*peer, Some(IDLE_TIMEOUT))
            .await;
    }
    Ok(())
}

/// A connection to the provider: a pooled one when there is one, else a new one (`true` when
/// it came from the pool), with the time spent opening it (zero for a pooled one, which costs
/// no clock read). A failure to connect is not retried (Pingora's `fail_to_connect`
/// is not consulted): the request fails with a 502 or 504.
async fn connect(app: &App, peer: &HttpPeer) -> Result<(HttpSession, bool, Duration)> {
    let connector = &app.upstream().connector;
    if let Some(pooled) = connector.reused_http_session(peer).await {
        return Ok((HttpSession::H1(pooled), true, Duration::ZERO));
    }
    let opening = Instant::now();
    // Boxed: opening a connection (TCP, TLS) is a ≈ 9 KB future. Inline, it would make every
    // request's future that much larger, and each request's future is copied into its box
    // (`bench/results/profile.md`); most requests take a pooled connection.
    let (new, reused) = Box::pin(connector.get_http_session(peer))
        .await
        .map_err(|e| e.into_up())?;
    Ok((HttpSession::H1(new), reused, opening.elapsed()))
}

/// Sends the request and reads the response header. The only resend: a request that cannot
/// have reached the provider, because writing it to a pooled connection failed (the provider
/// had closed it); the same candidate, the same bytes, on the next connection, at most once
/// (and not at all with `max_retries: 0`), counted in `sturnus_upstream_resends_total`. A
/// request written whole is never resent, whatever happens next: the provider may be
/// generating its answer (see [`error_while_proxy`]). The client leaving ends the wait for the
/// connection and for the answer, and drops the provider connection.
async fn send(
    session: &mut Session,
    departure: &mut Departure,
    app: &App,
    ctx: &mut RequestCtx,
    body: &[Bytes],
    peer: &HttpPeer,
) -> Result<HttpSession> {
    let mut resends = 0;
    let allowed = app.upstream().max_resends.min(MAX_RESENDS);
    loop {
        let header = upstream_header(session, ctx)?;
        let (mut upstream, reused, connecting) =
            departure.race(session, connect(app, peer)).await??;
        upstream.set_read_timeout(Some(app.peer_settings.read_timeout));
        upstream.set_write_timeout(Some(app.peer_settings.read_timeout));
        outcome::request_sent(ctx, connecting);
        match departure
            .race(session, exchange(&mut upstream, header, body))
            .await?
        {
            Ok(()) => {
                ctx.overhead.header_received = Some(Instant::now());
                return Ok(upstream);
            }
            Err(e) if error_while_proxy(&e, reused) && resends < allowed => {
                log::debug!("pooled connection to {peer} was closed ({e}); resending");
                app.metrics.upstream_resent();
                resends += 1;
            }
            Err(e) => return Err(e.more_context(format!("Peer: {peer}")).into_up()),
        }
    }
}

/// The provider's request header: the client's, rewritten for the chosen candidate.
fn upstream_header(session: &Session, ctx: &mut RequestCtx) -> Result<Box<RequestHeader>> {
    let Some(route) = &ctx.route else {
        return Error::e_explain(ErrorType::InternalError, "forwarding without a route");
    };
    let prepared = upstream_request::upstream_request_filter(
        session.req_header(),
        &route.candidate.provider,
        &route.path_and_query,
        route.body_len,
        &ctx.ids(),
    );
    match prepared {
        Ok(req) => Ok(Box::new(req)),
        Err(why) => {
            ctx.failure = Some(crate::routing::ErrorKind::Auth);
            Err(Error::because(
                ErrorType::Custom("credential unavailable"),
                "authorizing the upstream request",
                why,
            ))
        }
    }
}

/// Most resends of one request.
const MAX_RESENDS: usize = 1;

/// Writes the request header and body, then waits for the response header.
async fn exchange(
    upstream: &mut HttpSession,
    header: Box<RequestHeader>,
    body: &[Bytes],
) -> Result<()> {
    write_request(upstream, header, body)
        .await
        .map_err(undelivered)?;
    upstream.read_response_header().await.map_err(delivered)
}

/// Writes the request header and the whole body.
async fn write_request(
    upstream: &mut HttpSession,
    header: Box<RequestHeader>,
    body: &[Bytes],
) -> Result<()> {
    upstream.write_request_header(header).await?;
    let last = body.len().saturating_sub(1);
    for (i, part) in body.iter().enumerate() {
        upstream.write_request_body(part.clone(), i == last).await?;
    }
    upstream.finish_request_body().await
}

/// Marks a failed write of the request as safe to resend on a pooled connection. The socket
/// refused the bytes because the provider had closed the connection, so the request never
/// reached it whole and nothing was answered: the same case as Pingora's empty read of the
/// response header, caught one step earlier (when the close raced the pool's liveness check).
/// A write timeout is not marked: the provider may be reading slowly.
fn undelivered(mut e: Box<Error>) -> Box<Error> {
    e.retry = if e.etype() == &ErrorType::WriteError {
        RetryType::ReusedOnly
    } else {
        RetryType::Decided(false)
    };
    e
}

/// Marks a failure after the whole request was written as final. Pingora's HTTP/1 client marks
/// a connection closed before the response header as safe to resend on a reused connection,
/// but the provider may have read the request and be generating an answer: it is not resent.
fn delivered(mut e: Box<Error>) -> Box<Error> {
    e.retry = RetryType::Decided(false);
    e
}

/// sturnus's `error_while_proxy`: whether an exchange may be resent, as Pingora's hook decides
/// for its own proxy loop. Only when it went out on a pooled connection and writing it failed
/// ([`undelivered`]): the request cannot have reached the provider.
fn error_while_proxy(e: &Error, reused: bool) -> bool {
    reused && matches!(e.retry, RetryType::ReusedOnly)
}

/// Sends the provider's response header (with sturnus's headers) and relays its body. Each
/// write to the client carries the chunks already received (up to [`MAX_BATCH_CHUNKS`] and
/// [`MAX_BATCH_BYTES`]), as Pingora's own proxy loop does: a burst of small SSE events costs
/// one write, not one per event, while a chunk that arrives alone is sent at once.
async fn relay_response(
    session: &mut Session,
    departure: &mut Departure,
    app: &App,
    ctx: &mut RequestCtx,
    upstream: &mut HttpSession,
) -> Result<()> {
    let mut response = match upstream.response_header() {
        Some(h) => outcome::response_filter(h, ctx, &app.catalog.params.rule.quota),
        None => return Error::e_explain(ErrorType::InvalidHTTPHeader, "no response header"),
    };
    let mut tagger = match held_answer::tagging(&mut response, ctx) {
        held_answer::Tagging::Untouched => None,
        held_answer::Tagging::Stream(tagger) => Some(tagger),
        held_answer::Tagging::Whole(holder) => {
            return held_answer::relay_whole(
                session, departure, app, ctx, upstream, response, holder,
            )
            .await;
        }
    };
    // The header goes out at once, with whatever body has already arrived; room for one body
    // chunk, so a whole answer that came with its header is queued without growing the list.
    let mut tasks = Vec::with_capacity(2);
    tasks.push(HttpTask::Header(Box::new(response), false));
    let mut first_write = true;
    loop {
        let mut batch = Batch::default();
        let mut outcome = Ok(false);
        if tasks.is_empty() {
            let chunk = departure
                .race(session, upstream.read_response_body())
                .await?;
            outcome = batch.take(chunk, upstream, &mut tasks, ctx, app, &mut tagger);
        }
        while matches!(outcome, Ok(false)) && batch.has_room() {
            // Pingora's own proxy loop also drops a pending read (it is cancel-safe).
            match ready_now(upstream.read_response_body()) {
                Some(chunk) => {
                    outcome = batch.take(chunk, upstream, &mut tasks, ctx, app, &mut tagger)
                }
                None => break,
            }
        }
        // What was received reaches the client before a provider error ends the response.
        let write = session.write_response_tasks(std::mem::take(&mut tasks));
        let written = if first_write {
            first_write = false;
            let mut at = None;
            let written = overhead::handed_off(std::pin::pin!(write), &mut at).await;
            if let Some(at) = at {
                outcome::first_write_handed_off(ctx, at);
            }
            written
        } else {
            write.await
        };
        written.map_err(|e| e.into_down())?;
        if outcome? {
            return Ok(());
        }
    }
}

/// Most response chunks gathered into one write to the client.
const MAX_BATCH_CHUNKS: usize = 64;
/// Most response body bytes gathered into one write to the client (a provider that sends
/// faster than the client reads is relayed with bounded memory).
const MAX_BATCH_BYTES: usize = 64 * 1024;

/// The chunks gathered for one write to the client.
#[derive(Default)]
struct Batch {
    chunks: usize,
    bytes: usize,
}

impl Batch {
    /// Whether another ready chunk may join this write.
    fn has_room(&self) -> bool {
        self.chunks < MAX_BATCH_CHUNKS && self.bytes < MAX_BATCH_BYTES
    }

    /// Times and counts one chunk read from the provider and queues it for the client (its
    /// events' response ids tagged, with a `tagger`); true at the end of the response.
    fn take(
        &mut self,
        chunk: Result<Option<Bytes>>,
        upstream: &mut HttpSession,
        tasks: &mut Vec<HttpTask>,
        ctx: &mut RequestCtx,
        app: &App,
        tagger: &mut Option<StreamTagger>,
    ) -> Result<bool> {
        let chunk = chunk.map_err(|e| e.into_up())?;
        let end = chunk.is_none() || upstream.response_done();
        let body = chunk.as_deref().unwrap_or_default();
        outcome::response_body_filter(body, end, ctx, app);
        self.chunks += 1;
        self.bytes += body.len();
        let chunk = match tagger {
            Some(tagger) => held_answer::retag(tagger, chunk, end),
            None => chunk,
        };
        tasks.push(HttpTask::Body(chunk, end));
        Ok(end)
    }
}

/// The future's output if it is ready at the first poll; `None` (and the future dropped) if
/// it would have to wait.
fn ready_now<F: Future>(future: F) -> Option<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    match std::pin::pin!(future).poll(&mut cx) {
        Poll::Ready(output) => Some(output),
        Poll::Pending => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_now_takes_only_what_is_ready() {
        assert_eq!(ready_now(std::future::ready(7)), Some(7));
        assert_eq!(ready_now(std::future::pending::<u8>()), None);
    }

    /// A connection its provider has closed with a reset, as a pooled one can be when the
    /// close races the pool's liveness check.
    async fn connection_the_provider_reset() -> HttpSession {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (provider, _) = listener.accept().await.unwrap();
        provider.set_zero_linger().unwrap();
        drop(provider);
        client.readable().await.unwrap();
        let reset = client.try_read(&mut [0u8; 1]).unwrap_err();
        assert_eq!(reset.kind(), std::io::ErrorKind::ConnectionReset);
        let stream = pingora_core::protocols::l4::stream::Stream::from(client);
        HttpSession::H1(pingora_core::protocols::http::v1::client::HttpSession::new(
            Box::new(stream),
        ))
    }

    #[tokio::test]
    async fn a_request_a_closed_pooled_connection_refused_to_take_is_resent() {
        let mut upstream = connection_the_provider_reset().await;
        let mut header = RequestHeader::build("POST", b"/v1/chat/completions", None).unwrap();
        header.insert_header("content-length", "2").unwrap();
        let body = [Bytes::from_static(b"{}")];
        let e = exchange(&mut upstream, Box::new(header), &body)
            .await
            .unwrap_err();
        assert_eq!(e.etype(), &ErrorType::WriteError, "{e}");
        assert!(error_while_proxy(&e, true), "{e}");
        assert!(
            !error_while_proxy(&e, false),
            "a fresh connection is not resent: {e}"
        );
    }

    #[test]
    fn a_write_that_timed_out_is_not_marked_for_a_resend() {
        let marked = undelivered(Error::new(ErrorType::WriteTimedout));
        assert!(!error_while_proxy(&marked, true));
    }

    #[test]
    fn a_connection_closed_after_the_whole_request_was_written_is_never_resent() {
        let mut closed = Error::new(ErrorType::ConnectionClosed);
        closed.retry = RetryType::ReusedOnly;
        assert!(!error_while_proxy(&delivered(closed), true));
        let mut reset = Error::new(ErrorType::ReadError);
        reset.retry = RetryType::Decided(true);
        assert!(!error_while_proxy(&delivered(reset), true));
    }

    #[test]
    fn only_errors_marked_safe_to_resend_on_a_pooled_connection_are_resent() {
        let mut closed = Error::new(ErrorType::ConnectionClosed);
        closed.retry = RetryType::ReusedOnly;
        assert!(error_while_proxy(&closed, true));
        assert!(!error_while_proxy(&closed, false));
        let timed_out = Error::new(ErrorType::ReadTimedout);
        assert!(!error_while_proxy(&timed_out, true));
        let mut refused = Error::new(ErrorType::ConnectRefused);
        refused.retry = RetryType::Decided(false);
        assert!(!error_while_proxy(&refused, true));
    }
}
