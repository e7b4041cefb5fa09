//! From an incoming request to a routing decision: path check, body, alias, candidate, splice.
//! Pingora's `upstream_peer` and `request_body_filter` phases are not reached for routed
//! requests; [`admit`] does their work, through `upstream_peer` and `request_body_filter`.

use super::ctx::RequestCtx;
use super::held_object;
use super::whole_body::{self, BodyLimits};
use crate::api::{respond, ApiError};
use crate::app::App;
use crate::body;
use crate::observe::metrics::RouteReason;
use crate::providers::Provider;
use crate::routing::{Drawn, ErrorKind, Mode};
use bytes::Bytes;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_core::Result;
use pingora_proxy::Session;

/// The OpenAI endpoints sturnus routes, by the path after `/v1`.
pub const ROUTED: &[&str] = &[
    "/chat/completions",
    "/completions",
    "/embeddings",
    "/responses",
];

/// What `request_filter` does next with a request.
pub enum Admission {
    /// Routed: forward it to the chosen candidate.
    Forward {
        /// The spliced body: one buffer, or for a large body pieces sharing the received
        /// body's memory.
        body: Vec<Bytes>,
        /// The chosen provider's peer.
        peer: Box<HttpPeer>,
    },
    /// sturnus already answered (an error); nothing goes upstream.
    Answered,
}

/// Bodies up to this size are spliced into one new buffer, so they go upstream in one write;
/// larger ones are sent as pieces of the received body instead of being copied again.
const ONE_BUFFER_MAX: usize = 64 * 1024;

/// The path after `/v1` when the request targets a routed endpoint.
pub fn routed_suffix(path: &str) -> Option<&'static str> {
    let rest = path.strip_prefix("/v1")?;
    ROUTED.iter().copied().find(|s| *s == rest)
}

/// Validates a request body: its model and stream flag, and with `keyed` (prefix affinity on)
/// where its conversation's opening messages are, or the 400 answer for anything that is not a
/// JSON object with a string `model`. Unkeyed, the scan does not look for the opening.
pub fn inspect_body(bytes: &[u8], keyed: bool) -> std::result::Result<body::Inspected, ApiError> {
    let inspected = if keyed {
        body::inspect(bytes)
    } else {
        body::inspect_unkeyed(bytes)
    };
    inspected.map_err(|e| ApiError::invalid_request(e.to_string(), e.param()))
}

/// The conversation key a request is routed by: every turn of a conversation, its first
/// included when it opens with a system prompt, keeps to the conversation's candidate (so its
/// second turn finds the prompt the first one cached); a lone question has none and follows
/// the shares, so identical one-line requests are spread. The key is hashed only for those.
fn affinity_key(inspected: &body::Inspected, body: &[u8]) -> Option<u64> {
    if inspected.continued || inspected.prompted {
        inspected.conversation_key(body)
    } else {
        None
    }
}

/// Validates and routes one request; writes the error answer itself when it cannot be routed.
pub async fn admit(session: &mut Session, app: &App, ctx: &mut RequestCtx) -> Result<Admission> {
    let header = session.req_header();
    let path = header.uri.path();
    if let Some(object) = held_object::ObjectRequest::parse(&header.method, path) {
        return held_object::admit_object(session, app, ctx, object).await;
    }
    let target = match routed_suffix(path) {
        Some(suffix) if header.method == http::Method::POST => Ok(suffix),
        Some(_) => Err(ApiError::method_not_allowed(
            header.method.as_str(),
            path,
            "POST",
        )),
        None => Err(ApiError::unknown_path(header.method.as_str(), path)),
    };
    let suffix = match target {
        Ok(suffix) => suffix,
        Err(err) => {
            respond::error(session, &ctx.request_id, &err, false).await?;
            return Ok(Admission::Answered);
        }
    };

    let Some(received) = receive_body(session, app, ctx).await? else {
        return Ok(Admission::Answered);
    };
    let inspected = match inspect_body(&received, app.config.routing.prefix_affinity) {
        Ok(inspected) => inspected,
        Err(err) => {
            respond::error(session, &ctx.request_id, &err, true).await?;
            return Ok(Admission::Answered);
        }
    };
    if let Some(err) = super::client_gate::alias_refusal(ctx, &inspected.model) {
        respond::error(session, &ctx.request_id, &err, true).await?;
        return Ok(Admission::Answered);
    }
    let Some(alias) = app.catalog.alias(&inspected.model) else {
        respond::error(
            session,
            &ctx.request_id,
            &ApiError::model_not_found(&inspected.model),
            true,
        )
        .await?;
        return Ok(Admission::Answered);
    };

    let mode = Mode::from_stream(inspected.stream);
    let responses = suffix == "/responses";
    let follow_up = responses
        .then(|| held_object::follow_up(&inspected, &received))
        .flatten();
    let (index, reason, conversation, drawn) = match &follow_up {
        Some(held) => match alias.holder_position(&held.holder) {
            Some(index) => (index, RouteReason::HeldObject, None, Drawn::default()),
            None => {
                let err = ApiError::previous_response_elsewhere(&held.id, &alias.name);
                respond::error(session, &ctx.request_id, &err, true).await?;
                return Ok(Admission::Answered);
            }
        },
        None => {
            let pin = session
                .req_header()
                .headers
                .get(&super::outcome::AFFINITY_NAME)
                .and_then(|v| v.to_str().ok());
            // One candidate needs no key: the hash is skipped.
            let conversation = (alias.candidates.len() > 1)
                .then(|| affinity_key(&inspected, &received))
                .flatten();
            let choice = alias.choose_keyed(mode, pin, conversation, &app.catalog.params);
            let reason = match (choice.pinned_honoured, conversation) {
                (true, _) => RouteReason::SessionAffinity,
                (false, Some(_)) => RouteReason::PrefixAffinity,
                (false, None) => RouteReason::Pick,
            };
            (choice.index, reason, conversation, choice.drawn)
        }
    };
    let candidate = &alias.candidates[index];
    let rewrite = body::Rewrite {
        model: &candidate.model,
        previous_response_id: follow_up.as_ref().map(|held| held.provider_id.as_str()),
    };
    let spliced_len = inspected.spliced_len_as(&received, rewrite);
    let provider = candidate.provider.clone();
    let path_and_query = provider.endpoint.path_and_query(
        suffix,
        session.req_header().uri.query(),
        &candidate.model,
    );
    let keyed = reason == RouteReason::PrefixAffinity && conversation.is_some();
    ctx.route = Some(held_object::route(
        app,
        alias,
        index,
        mode,
        held_object::Why {
            reason,
            holder: responses.then_some(candidate.holder),
            keyed_hits: keyed.then(|| std::sync::Arc::clone(&alias.keyed_hits)),
            drawn,
        },
        path_and_query,
        spliced_len,
    ));

    let peer = match upstream_peer(&provider, app, ctx).await {
        Ok(peer) => peer,
        Err(err) => {
            respond::error(session, &ctx.request_id, &err, true).await?;
            return Ok(Admission::Answered);
        }
    };
    let body = request_body_filter(&inspected, &received, rewrite);
    Ok(Admission::Forward { body, peer })
}

/// Reads the whole request body within the size cap, the time limit and the memory budget
/// (which then holds it in `ctx` until the provider has it); `None` when it was refused and
/// the refusal answered.
pub(super) async fn receive_body(
    session: &mut Session,
    app: &App,
    ctx: &mut RequestCtx,
) -> Result<Option<Bytes>> {
    let limits = BodyLimits {
        cap: app.config.routing.max_body_bytes,
        timeout: app.config.routing.body_timeout,
    };
    let whole = match whole_body::read_whole(session, limits, &app.budget).await? {
        Ok(whole) => whole,
        Err(refused) => {
            if refused.error.status == 429 {
                app.metrics.buffer_rejected();
            }
            respond::refuse(
                session,
                &ctx.request_id,
                &refused.error,
                refused.retry_after,
            )
            .await?;
            return Ok(None);
        }
    };
    ctx.overhead.body_received = Some(std::time::Instant::now());
    ctx.request_bytes = whole.bytes.len() as u64;
    ctx.reservation = Some(whole.reservation);
    Ok(Some(whole.bytes))
}

/// sturnus's `upstream_peer`: the chosen candidate's provider as a Pingora peer, once its
/// credential can authorize the request; the answer to send (503, 502) when it cannot.
pub(super) async fn upstream_peer(
    provider: &Provider,
    app: &App,
    ctx: &mut RequestCtx,
) -> std::result::Result<Box<HttpPeer>, ApiError> {
    if let Err(why) = provider.credential_ready().await {
        ctx.failure = Some(ErrorKind::Auth);
        return Err(ApiError::credential_unavailable(&provider.name, &why));
    }
    match provider.peer(&app.peer_settings).await {
        Ok(peer) => Ok(Box::new(peer)),
        Err(why) => {
            ctx.failure = Some(ErrorKind::Dns);
            Err(ApiError::upstream(
                &provider.name,
                ErrorKind::Dns,
                &why.to_string(),
            ))
        }
    }
}

/// sturnus's `request_body_filter`: the body the provider receives, the client's with the
/// candidate's model spliced in: one buffer up to [`ONE_BUFFER_MAX`], else pieces sharing the
/// received body's memory.
fn request_body_filter(
    inspected: &body::Inspected,
    received: &Bytes,
    rewrite: body::Rewrite<'_>,
) -> Vec<Bytes> {
    if received.len() <= ONE_BUFFER_MAX {
        vec![Bytes::from(inspected.splice_as(received, rewrite))]
    } else {
        inspected.splice_parts_as(received, rewrite)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Checks the answer for one body: a 400 in OpenAI's shape, or a body serde_json agrees
    /// is an object with a string `model`.
    fn check(bytes: &[u8]) -> std::result::Result<(), TestCaseError> {
        match inspect_body(bytes, true) {
            Err(err) => {
                prop_assert_eq!(err.status, 400);
                prop_assert_eq!(err.kind, "invalid_request_error");
                let v: serde_json::Value = serde_json::from_slice(&err.to_json())
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert!(!v["error"]["message"].as_str().unwrap_or("").is_empty());
            }
            Ok(ins) => {
                if let Ok(v) = serde_json::from_slice::<serde_json::Value>(bytes) {
                    prop_assert_eq!(v["model"].as_str(), Some(ins.model.as_str()));
                }
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        #[test]
        fn arbitrary_bytes_never_panic_and_get_a_400(
            bytes in prop::collection::vec(any::<u8>(), 0..512)
        ) {
            check(&bytes)?;
        }

        #[test]
        fn arbitrary_bytes_after_a_model_key_never_panic_and_get_a_400(
            tail in prop::collection::vec(any::<u8>(), 0..128)
        ) {
            let bytes = [&b"{\"model\":"[..], &tail].concat();
            check(&bytes)?;
        }
    }

    #[test]
    fn every_turn_of_a_conversation_with_a_system_prompt_is_routed_by_its_key() {
        let opening = r#"{"role":"system","content":"Be terse."},{"role":"user","content":"hi"}"#;
        let first = format!(r#"{{"model":"m","messages":[{opening}]}}"#);
        let later = format!(
            r#"{{"model":"m","messages":[{opening},{{"role":"assistant","content":"hello"}},{{"role":"user","content":"more"}}]}}"#
        );
        let key = |text: &str, keyed: bool| {
            let inspected = inspect_body(text.as_bytes(), keyed).unwrap();
            affinity_key(&inspected, text.as_bytes())
        };
        let conversation = Some(body::conversation_key(opening.as_bytes()));
        assert_eq!(key(&first, true), conversation);
        assert_eq!(key(&later, true), conversation);
        assert_eq!(key(&later, false), None);
        // A lone question has no key; its follow-up has the question's.
        let question = r#"{"role":"user","content":"hi"}"#;
        assert_eq!(
            key(&format!(r#"{{"model":"m","messages":[{question}]}}"#), true),
            None
        );
        let follow_up = format!(
            r#"{{"model":"m","messages":[{question},{{"role":"assistant","content":"hello"}},{{"role":"user","content":"more"}}]}}"#
        );
        assert_eq!(
            key(&follow_up, true),
            Some(body::conversation_key(question.as_bytes()))
        );
        assert_eq!(key(r#"{"model":"m","input":"one shot"}"#, true), None);
    }

    #[test]
    fn only_the_four_openai_endpoints_are_routed() {
        assert_eq!(
            routed_suffix("/v1/chat/completions"),
            Some("/chat/completions")
        );
        assert_eq!(routed_suffix("/v1/completions"), Some("/completions"));
        assert_eq!(routed_suffix("/v1/embeddings"), Some("/embeddings"));
        assert_eq!(routed_suffix("/v1/responses"), Some("/responses"));
        assert_eq!(routed_suffix("/v1/chat/completions/"), None);
        assert_eq!(routed_suffix("/chat/completions"), None);
        assert_eq!(routed_suffix("/v1/models"), None);
    }
}
