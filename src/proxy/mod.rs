//! The Pingora request path. Each hook is a line or two that hands off to the room owning the
//! concern, so this impl reads as the request's table of contents.

pub mod body_intake;
pub mod ctx;
mod direct;
pub mod errors;
mod failure;
pub mod header_guard;
pub mod intake;
pub mod relay;
pub mod respond;
mod upstream_request;

use crate::admin;
use crate::app::App;
use async_trait::async_trait;
use bytes::Bytes;
use ctx::RequestCtx;
use intake::Admission;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora_core::upstreams::peer::HttpPeer;
use pingora_core::{Error, ErrorType, Result, RetryType};
use pingora_proxy::{FailToProxy, ProxyHttp, Session};
use std::sync::Arc;
use std::time::Duration;

/// The sturnus proxy: Pingora's `ProxyHttp` over the shared [`App`].
pub struct Sturnus {
    app: Arc<App>,
}

impl Sturnus {
    /// A proxy serving the given runtime state.
    pub fn new(app: Arc<App>) -> Self {
        Sturnus { app }
    }
}

#[async_trait]
impl ProxyHttp for Sturnus {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx::new()
    }

    /// Admin endpoints, then validation and routing; large bodies are forwarded right here.
    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        ctx.identify(session.req_header());
        if admin::serve(session, &self.app, &ctx.request_id).await? {
            return Ok(true);
        }
        match intake::admit(session, &self.app, ctx).await? {
            Admission::Proxy => Ok(false),
            Admission::Answered => Ok(true),
            Admission::Direct { body, peer } => {
                // Boxed: the direct path's state is large and rare, so it stays out of the
                // future every request allocates.
                Box::pin(direct::forward(session, &self.app, ctx, body, peer)).await?;
                Ok(true)
            }
        }
    }

    /// The peer chosen (and resolved) in `request_filter`.
    async fn upstream_peer(&self, _: &mut Session, ctx: &mut RequestCtx) -> Result<Box<HttpPeer>> {
        ctx.peer
            .clone()
            .ok_or_else(|| Error::explain(ErrorType::InternalError, "no upstream chosen"))
    }

    /// Provider path, `Host`, auth, `Content-Length`, `x-request-id` and `traceparent`; starts
    /// the TTFC clock.
    async fn upstream_request_filter(
        &self,
        _: &mut Session,
        req: &mut RequestHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        if let Some(route) = &ctx.route {
            let provider = &route.candidate.provider;
            let prepared = upstream_request::prepare(
                req,
                provider,
                &route.path_and_query,
                route.body_len,
                &ctx.ids(),
            );
            if let Err(why) = prepared {
                ctx.failure = Some(crate::routing::ErrorKind::Auth);
                return Err(Error::explain(ErrorType::HTTPStatus(503), why.0));
            }
        }
        relay::request_sent(ctx);
        Ok(())
    }

    /// Swaps Pingora's replay of the original body for the spliced one.
    async fn request_body_filter(
        &self,
        _: &mut Session,
        body: &mut Option<Bytes>,
        _end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        body_intake::replace_replayed(body, &ctx.spliced);
        Ok(())
    }

    /// Adds `x-session-affinity`, `x-sturnus-provider` and `x-request-id`; notes the status.
    async fn response_filter(
        &self,
        _: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        relay::response_header(resp, ctx);
        // The provider answered, so Pingora will not resend the body: give its memory back.
        ctx.reservation = None;
        ctx.spliced = None;
        Ok(())
    }

    /// Times the first response chunk (TTFC) and counts bytes; chunks pass through untouched.
    fn response_body_filter(
        &self,
        _: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<Option<Duration>> {
        let len = body.as_ref().map_or(0, |b| b.len());
        relay::body_chunk(len, end_of_stream, ctx, &self.app.catalog.params);
        Ok(None)
    }

    /// No retries and no failover: a failed connect goes back to the client as it is.
    fn fail_to_connect(
        &self,
        _: &mut Session,
        _: &HttpPeer,
        _: &mut RequestCtx,
        mut e: Box<Error>,
    ) -> Box<Error> {
        e.set_retry(false);
        e
    }

    /// The one resend allowed: a pooled connection the provider had already closed, found dead
    /// before anything was received (the same candidate, the same bytes).
    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        _: &mut Session,
        e: Box<Error>,
        _: &mut RequestCtx,
        client_reused: bool,
    ) -> Box<Error> {
        let mut e = e.more_context(format!("Peer: {peer}"));
        let stale_pooled = matches!(e.retry, RetryType::ReusedOnly) && client_reused;
        e.set_retry(stale_pooled);
        e
    }

    /// A JSON 502/504 instead of Pingora's empty error page.
    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut RequestCtx,
    ) -> FailToProxy {
        failure::respond(session, e, ctx).await
    }

    /// Feeds the outcome into the candidate's success rate, the metrics and the access log.
    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut RequestCtx) {
        relay::finish(session, ctx, e, &self.app);
    }
}
