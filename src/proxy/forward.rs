//! The direct path: forwarding bodies Pingora cannot replay (over 64 KiB) through Pingora's
//! pooled connector, with the same header building and response handling as the hooks.

use super::ctx::RequestCtx;
use super::{relay, upstream_request};
use crate::app::App;
use bytes::Bytes;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_core::{Error, ErrorType, Result};
use pingora_proxy::Session;
use std::time::Duration;

/// How long an idle pooled connection from the direct path is kept.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Sends the spliced request upstream and relays the response chunk by chunk.
/// Errors carry their side (upstream or downstream) so `fail_to_proxy` answers correctly.
pub async fn forward(
    session: &mut Session,
    app: &App,
    ctx: &mut RequestCtx,
    body: Vec<Bytes>,
    peer: Box<HttpPeer>,
) -> Result<()> {
    let body_len = body.iter().map(Bytes::len).sum();
    let Some(route) = &ctx.route else {
        return Error::e_explain(ErrorType::InternalError, "direct path without a route");
    };
    let mut req = session.req_header().clone();
    let provider = &route.candidate.provider;
    if let Err(why) = upstream_request::prepare(
        &mut req,
        provider,
        &route.path_and_query,
        body_len,
        &ctx.ids(),
    ) {
        ctx.failure = Some(crate::routing::ErrorKind::Auth);
        return Error::e_explain(ErrorType::HTTPStatus(503), why.0);
    }

    let (mut upstream, _reused) = app
        .connector
        .get_http_session(&*peer)
        .await
        .map_err(|e| e.into_up())?;
    upstream.set_read_timeout(Some(app.peer_settings.read_timeout));
    upstream.set_write_timeout(Some(app.peer_settings.read_timeout));
    relay::request_sent(ctx);
    let sent = async {
        upstream.write_request_header(Box::new(req)).await?;
        let last = body.len().saturating_sub(1);
        for (i, part) in body.into_iter().enumerate() {
            upstream.write_request_body(part, i == last).await?;
        }
        upstream.finish_request_body().await
    };
    sent.await.map_err(|e| e.into_up())?;
    // The provider has the body: its memory goes back to the budget now, not at the end.
    ctx.reservation = None;
    upstream
        .read_response_header()
        .await
        .map_err(|e| e.into_up())?;
    let mut response = match upstream.response_header() {
        Some(h) => h.clone(),
        None => return Error::e_explain(ErrorType::InvalidHTTPHeader, "no response header"),
    };
    relay::response_header(&mut response, ctx);
    session
        .write_response_header(Box::new(response), false)
        .await
        .map_err(|e| e.into_down())?;

    loop {
        let chunk = upstream
            .read_response_body()
            .await
            .map_err(|e| e.into_up())?;
        let end = chunk.is_none() || upstream.response_done();
        let len = chunk.as_ref().map_or(0, |c| c.len());
        relay::body_chunk(len, end, ctx, &app.catalog.params);
        session
            .write_response_body(chunk, end)
            .await
            .map_err(|e| e.into_down())?;
        if end {
            break;
        }
    }
    app.connector
        .release_http_session(upstream, &*peer, Some(IDLE_TIMEOUT))
        .await;
    Ok(())
}
