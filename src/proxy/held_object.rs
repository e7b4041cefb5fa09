//! The held-object route: requests naming a Responses API object go to the candidate that holds
//! it, named by the holder tag in the object's id ([`crate::body::holder_tag`]).
//!
//! - A `POST /v1/responses` follow-up whose `previous_response_id` carries a valid tag goes to
//!   the tagged candidate of the requested alias with the provider's own id put back
//!   ([`follow_up`]); without a valid tag it is routed as usual and forwarded unchanged.
//! - `GET /v1/responses/{id}`, `DELETE /v1/responses/{id}`, `POST /v1/responses/{id}/cancel` and
//!   `GET /v1/responses/{id}/input_items` go to the tagged candidate with the provider's id
//!   ([`admit_object`]); an id without a valid tag, or whose candidate is not configured, gets a
//!   404 and reaches no provider.
//!
//! The holder is used whatever its health, back-off or latency: the object exists nowhere else,
//! so its answer, whatever it is, goes back as it came (with its response ids tagged).

use super::admission::{self, Admission};
use super::ctx::{RequestCtx, Route};
use crate::api::{respond, ApiError};
use crate::app::App;
use crate::body::holder_tag::{untag, HolderTag};
use crate::body::Inspected;
use crate::catalog::Alias;
use crate::observe::metrics::RouteReason;
use crate::routing::lull::Slot;
use crate::routing::{Drawn, KeyedHits, Mode};
use pingora_core::Result;
use pingora_proxy::Session;
use std::sync::Arc;

/// Where the Responses API's object endpoints start.
const OBJECT_PREFIX: &str = "/v1/responses/";

/// What an object endpoint does with the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `GET /v1/responses/{id}` (also a stream's resumption, `?stream=true&starting_after=N`).
    Retrieve,
    /// `DELETE /v1/responses/{id}`.
    Delete,
    /// `POST /v1/responses/{id}/cancel`.
    Cancel,
    /// `GET /v1/responses/{id}/input_items`.
    InputItems,
}

impl Action {
    /// The path after the id.
    fn tail(self) -> &'static str {
        match self {
            Action::Retrieve | Action::Delete => "",
            Action::Cancel => "/cancel",
            Action::InputItems => "/input_items",
        }
    }

    /// Whether its answer is a response object, whose ids get the holder tag (input items are
    /// a list of items, which carry none).
    fn answers_a_response(self) -> bool {
        self != Action::InputItems
    }
}

/// A request for one Responses API object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRequest {
    /// The id as the client sent it (tagged, when sturnus issued it).
    pub id: String,
    /// What to do with it.
    pub action: Action,
}

impl ObjectRequest {
    /// For a path under `/v1/responses/`: the object request, or the 404/405 for a path or
    /// method no object endpoint serves. `None` for every other path.
    pub fn parse(
        method: &http::Method,
        path: &str,
    ) -> Option<std::result::Result<ObjectRequest, ApiError>> {
        let rest = path.strip_prefix(OBJECT_PREFIX)?;
        let (id, tail) = rest.split_once('/').unwrap_or((rest, ""));
        let unknown = || ApiError::unknown_path(method.as_str(), path);
        if id.is_empty() {
            return Some(Err(unknown()));
        }
        let (action, allowed) = match (tail, method) {
            ("", &http::Method::GET) => (Action::Retrieve, ""),
            ("", &http::Method::DELETE) => (Action::Delete, ""),
            ("", _) => (Action::Retrieve, "GET or DELETE"),
            ("cancel", &http::Method::POST) => (Action::Cancel, ""),
            ("cancel", _) => (Action::Cancel, "POST"),
            ("input_items", &http::Method::GET) => (Action::InputItems, ""),
            ("input_items", _) => (Action::InputItems, "GET"),
            _ => return Some(Err(unknown())),
        };
        if !allowed.is_empty() {
            return Some(Err(ApiError::method_not_allowed(
                method.as_str(),
                path,
                allowed,
            )));
        }
        Some(Ok(ObjectRequest {
            id: id.to_string(),
            action,
        }))
    }
}

/// Why a request goes to its candidate, for [`route`].
pub(super) struct Why {
    /// The reason logged and counted.
    pub reason: RouteReason,
    /// For a Responses API answer, the tag its response ids get.
    pub holder: Option<HolderTag>,
    /// For a request routed by its conversation key, its alias's keyed hit rate.
    pub keyed_hits: Option<Arc<KeyedHits>>,
    /// How the pick's draw placed it ([`crate::routing::Drawn`]).
    pub drawn: Drawn,
}

/// The route of a request to candidate `index` of `alias`, counted in the metrics.
pub(super) fn route(
    app: &App,
    alias: &Alias,
    index: usize,
    mode: Mode,
    why: Why,
    path_and_query: String,
    body_len: usize,
) -> Route {
    let candidate = &alias.candidates[index];
    let metrics = app.metrics.track(&alias.name, index, mode);
    metrics.routed(why.reason);
    Route {
        alias: alias.name.clone(),
        metrics,
        inflight: candidate.stats.begin_owned(),
        candidate: Arc::clone(candidate),
        mode,
        slot: Slot {
            index,
            of: alias.candidates.len(),
        },
        keyed_hits: why.keyed_hits,
        path_and_query,
        body_len,
        reason: why.reason,
        holder: why.holder,
        drawn: why.drawn,
    }
}

/// A follow-up's `previous_response_id` with a valid holder tag, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowUp {
    /// The id as the client sent it.
    pub id: String,
    /// The provider's own id, which the provider receives.
    pub provider_id: String,
    /// The tag of the candidate holding it.
    pub holder: HolderTag,
}

/// The held response a `POST /v1/responses` body continues, when its `previous_response_id`
/// carries a valid holder tag.
pub fn follow_up(inspected: &Inspected, body: &[u8]) -> Option<FollowUp> {
    let id = inspected.previous_response_id(body)?;
    let untagged = untag(&id)?;
    Some(FollowUp {
        provider_id: untagged.provider_id.to_string(),
        holder: untagged.holder,
        id: id.into_owned(),
    })
}

/// Whether a query string asks for a stream (`stream=true`).
fn asks_for_stream(query: Option<&str>) -> bool {
    query
        .unwrap_or_default()
        .split('&')
        .any(|pair| pair == "stream=true")
}

/// Routes a request for one object to the candidate holding it; answers the 404/405 itself
/// when it cannot, before reading the body and without reaching any provider.
pub async fn admit_object(
    session: &mut Session,
    app: &App,
    ctx: &mut RequestCtx,
    request: std::result::Result<ObjectRequest, ApiError>,
) -> Result<Admission> {
    let held = request.and_then(|object| {
        let untagged =
            untag(&object.id).ok_or_else(|| ApiError::response_id_unrecognised(&object.id))?;
        let (alias, index) = app.catalog.holder(&untagged.holder).ok_or_else(|| {
            ApiError::response_holder_not_configured(&object.id, untagged.holder.as_str())
        })?;
        let suffix = format!(
            "/responses/{}{}",
            untagged.provider_id,
            object.action.tail()
        );
        Ok((alias, index, suffix, object.action))
    });
    let (alias, index, suffix, action) = match held {
        Ok(held) => held,
        Err(err) => {
            respond::error(session, &ctx.request_id, &err, false).await?;
            return Ok(Admission::Answered);
        }
    };
    let Some(received) = admission::receive_body(session, app, ctx).await? else {
        return Ok(Admission::Answered);
    };
    let candidate = &alias.candidates[index];
    let query = session.req_header().uri.query();
    let streaming = action == Action::Retrieve && asks_for_stream(query);
    let mode = Mode::from_stream(streaming);
    let path_and_query =
        candidate
            .provider
            .endpoint
            .path_and_query(&suffix, query, &candidate.model);
    let why = Why {
        reason: RouteReason::HeldObject,
        holder: action.answers_a_response().then_some(candidate.holder),
        keyed_hits: None,
        drawn: Drawn::default(),
    };
    ctx.route = Some(route(
        app,
        alias,
        index,
        mode,
        why,
        path_and_query,
        received.len(),
    ));
    let provider = Arc::clone(&candidate.provider);
    let peer = match admission::upstream_peer(&provider, app, ctx).await {
        Ok(peer) => peer,
        Err(err) => {
            respond::error(session, &ctx.request_id, &err, true).await?;
            return Ok(Admission::Answered);
        }
    };
    let body = if received.is_empty() {
        Vec::new()
    } else {
        vec![received]
    };
    Ok(Admission::Forward { body, peer })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(method: &str, path: &str) -> Option<std::result::Result<ObjectRequest, u16>> {
        let method = http::Method::from_bytes(method.as_bytes()).unwrap();
        ObjectRequest::parse(&method, path).map(|r| r.map_err(|e| e.status))
    }

    #[test]
    fn the_four_object_endpoints_are_recognised_with_their_methods() {
        let object = |id: &str, action| {
            Some(Ok(ObjectRequest {
                id: id.into(),
                action,
            }))
        };
        assert_eq!(
            parse("GET", "/v1/responses/resp_1"),
            object("resp_1", Action::Retrieve)
        );
        assert_eq!(
            parse("DELETE", "/v1/responses/resp_1"),
            object("resp_1", Action::Delete)
        );
        assert_eq!(
            parse("POST", "/v1/responses/resp_1/cancel"),
            object("resp_1", Action::Cancel)
        );
        assert_eq!(
            parse("GET", "/v1/responses/resp_1/input_items"),
            object("resp_1", Action::InputItems)
        );
        assert_eq!(parse("POST", "/v1/responses/resp_1"), Some(Err(405)));
        assert_eq!(parse("GET", "/v1/responses/resp_1/cancel"), Some(Err(405)));
        assert_eq!(parse("GET", "/v1/responses/resp_1/other"), Some(Err(404)));
        assert_eq!(parse("GET", "/v1/responses/"), Some(Err(404)));
        assert_eq!(parse("POST", "/v1/responses"), None);
        assert_eq!(parse("GET", "/v1/models"), None);
    }

    #[test]
    fn only_stream_true_asks_for_a_stream() {
        assert!(asks_for_stream(Some("stream=true&starting_after=3")));
        assert!(asks_for_stream(Some("starting_after=3&stream=true")));
        assert!(!asks_for_stream(Some("stream=false")));
        assert!(!asks_for_stream(None));
    }
}
