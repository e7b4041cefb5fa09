//! Relaying a Responses API answer with its response ids tagged with the holder
//! ([`crate::body::id_splice`]): a stream event by event as it arrives, a JSON answer once whole
//! (its length changes, so its `Content-Length` is set again).

use super::ctx::RequestCtx;
use super::departure::Departure;
use super::{outcome, overhead};
use crate::app::App;
use crate::body::holder_tag::HolderTag;
use crate::body::id_splice::{tag_json_answer, StreamTagger};
use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora_core::protocols::http::client::HttpSession;
use pingora_core::protocols::http::HttpTask;
use pingora_core::Result;
use pingora_proxy::Session;

/// Largest JSON answer held back to tag its ids; a longer one goes out as it came.
pub const MAX_WHOLE_BYTES: usize = 8 << 20;

/// How a relayed answer's ids are tagged.
pub enum Tagging {
    /// Not a Responses API answer: relayed as it comes.
    Untouched,
    /// An event stream: each event tagged as it completes.
    Stream(StreamTagger),
    /// Any other answer: held until whole, then tagged.
    Whole(HolderTag),
}

/// The tagging the answer with header `resp` needs; a stream's framing becomes chunked when
/// the provider sent a length (the tagged stream is longer).
pub fn tagging(resp: &mut ResponseHeader, ctx: &RequestCtx) -> Tagging {
    let Some(holder) = ctx.route.as_ref().and_then(|route| route.holder) else {
        return Tagging::Untouched;
    };
    let stream = resp
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
    if !stream {
        return Tagging::Whole(holder);
    }
    if resp.headers.contains_key(http::header::CONTENT_LENGTH) {
        resp.remove_header(&http::header::CONTENT_LENGTH);
        let _ = resp.insert_header(http::header::TRANSFER_ENCODING, "chunked");
    }
    Tagging::Stream(StreamTagger::new(holder))
}

/// One piece of a tagged stream: the events it completes, tagged (and at the end whatever was
/// left); `chunk` itself when there is nothing to send yet and it is the end.
pub fn retag(tagger: &mut StreamTagger, chunk: Option<Bytes>, end: bool) -> Option<Bytes> {
    let mut out = tagger.push(chunk.as_deref().unwrap_or_default());
    if end {
        out.extend(tagger.finish());
    }
    if out.is_empty() && end {
        chunk.filter(|c| c.is_empty())
    } else {
        Some(Bytes::from(out))
    }
}

/// Relays an answer held until whole: reads it all (each piece accounted as it arrives), tags
/// it, and sends header and body in one write with the new `Content-Length`. Beyond
/// [`MAX_WHOLE_BYTES`] it is relayed as it came.
pub async fn relay_whole(
    session: &mut Session,
    departure: &mut Departure,
    app: &App,
    ctx: &mut RequestCtx,
    upstream: &mut HttpSession,
    mut response: ResponseHeader,
    holder: HolderTag,
) -> Result<()> {
    let mut body = Vec::new();
    let mut end = false;
    while !end && body.len() <= MAX_WHOLE_BYTES {
        let chunk;
        (chunk, end) = next_piece(session, departure, upstream, ctx, app).await?;
        body.extend_from_slice(chunk.as_deref().unwrap_or_default());
    }
    if end {
        if let Some(tagged) = tag_json_answer(&body, &holder) {
            body = tagged;
            response.remove_header(&http::header::TRANSFER_ENCODING);
            let _ = response.insert_header(http::header::CONTENT_LENGTH, body.len());
        }
    }
    let tasks = vec![
        HttpTask::Header(Box::new(response), false),
        HttpTask::Body(Some(Bytes::from(body)), end),
    ];
    let mut at = None;
    let write = session.write_response_tasks(tasks);
    let written = overhead::handed_off(std::pin::pin!(write), &mut at).await;
    if let Some(at) = at {
        outcome::first_write_handed_off(ctx, at);
    }
    written.map_err(|e| e.into_down())?;
    while !end {
        let chunk;
        (chunk, end) = next_piece(session, departure, upstream, ctx, app).await?;
        session
            .write_response_tasks(vec![HttpTask::Body(chunk, end)])
            .await
            .map_err(|e| e.into_down())?;
    }
    Ok(())
}

/// The next piece of the provider's body, accounted, and whether it ends the body; the client
/// leaving ends the request.
async fn next_piece(
    session: &mut Session,
    departure: &mut Departure,
    upstream: &mut HttpSession,
    ctx: &mut RequestCtx,
    app: &App,
) -> Result<(Option<Bytes>, bool)> {
    let chunk = departure
        .race(session, upstream.read_response_body())
        .await?;
    let chunk = chunk.map_err(|e| e.into_up())?;
    let end = chunk.is_none() || upstream.response_done();
    outcome::response_body_filter(chunk.as_deref().unwrap_or_default(), end, ctx, app);
    Ok((chunk, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_piece_is_sent_once_its_events_are_complete() {
        let mut tagger = StreamTagger::new(HolderTag::of("a", "m"));
        let half = Bytes::from_static(b"data: {\"delta\":");
        assert_eq!(
            retag(&mut tagger, Some(half), false).as_deref(),
            Some(&b""[..])
        );
        let rest = Bytes::from_static(b"\"x\"}\n\n");
        assert_eq!(
            retag(&mut tagger, Some(rest), false).as_deref(),
            Some(&b"data: {\"delta\":\"x\"}\n\n"[..])
        );
        assert_eq!(retag(&mut tagger, None, true), None);
    }
}
