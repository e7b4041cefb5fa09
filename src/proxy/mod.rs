//! The Pingora request path. Each hook hands off to the rooms owning its concerns
//! (`request_filter` calls them in turn: the client gate, admin, admission, forward), so this impl reads as the
//! request's table of contents. Routed requests are forwarded from `request_filter`; the
//! functions standing in for the phases after it carry the phases' names
//! (`admission::upstream_peer`, `upstream_request::upstream_request_filter`,
//! `admission::request_body_filter`, `outcome::response_filter`, `outcome::response_body_filter`,
//! `forward::error_while_proxy`): the map is in `docs/architecture.md`.

pub mod admission;
mod client_gate;
mod client_watch;
pub mod ctx;
mod departure;
mod fail_to_proxy;
mod forward;
pub mod header_guard;
mod held_answer;
pub mod held_object;
pub mod outcome;
mod overhead;
mod quota;
mod upstream_request;
pub mod whole_body;

use crate::admin;
use crate::app::App;
use admission::Admission;
use async_trait::async_trait;
use ctx::RequestCtx;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_core::{Error, ErrorType, Result};
use pingora_proxy::{FailToProxy, ProxyHttp, Session};
use std::sync::Arc;

/// The sturnus proxy: Pingora's `ProxyHttp` over the shared `App` (the runtime state).
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

    /// Admin endpoints, then validation and routing, then forwarding to the chosen candidate:
    /// every request is answered here, so Pingora's own upstream hooks never run.
    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        ctx.identify(session.req_header());
        header_guard::close_after_unsized_body(session);
        if client_gate::authenticate(session, &self.app, ctx).await? {
            return Ok(true);
        }
        if admin::serve(session, &self.app, &ctx.request_id).await? {
            return Ok(true);
        }
        if client_gate::limit(session, &self.app, ctx).await? {
            return Ok(true);
        }
        if let Admission::Forward { body, peer } = admission::admit(session, &self.app, ctx).await?
        {
            forward::forward(session, &self.app, ctx, body, peer).await?;
        }
        Ok(true)
    }

    /// Not reached: `request_filter` forwards (or answers) every request itself, with the peer
    /// from `admission::upstream_peer`.
    async fn upstream_peer(&self, _: &mut Session, _: &mut RequestCtx) -> Result<Box<HttpPeer>> {
        Error::e_explain(
            ErrorType::InternalError,
            "sturnus forwards requests in request_filter",
        )
    }

    /// A JSON 502/504 instead of Pingora's empty error page.
    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut RequestCtx,
    ) -> FailToProxy {
        fail_to_proxy::respond(session, e, ctx).await
    }

    /// Feeds the outcome into the candidate's success rate, the metrics and the access log.
    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut RequestCtx) {
        outcome::finish(session, ctx, e, &self.app);
    }
}
