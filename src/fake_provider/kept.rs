//! The responses a fake provider keeps, as the Responses API does: a follow-up names its
//! `previous_response_id` (unknown here: `400 previous_response_not_found`), and a kept
//! response can be retrieved, deleted, cancelled (in background mode), listed for its input
//! items, and its stream replayed from any event (`?stream=true&starting_after=N`).
//!
//! Background mode runs on polls, not on a clock: a background response is `queued` when
//! created, `in_progress` at its first retrieval and `completed` from the second on, so tests
//! poll it to completion without waiting.

use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// Most responses kept; the oldest is forgotten beyond that (a benchmark's load stays bounded).
pub(crate) const MAX_KEPT: usize = 10_000;

/// One kept response: its renderings and where it stands.
#[derive(Debug)]
struct Kept {
    /// The completed response object.
    completed: Vec<u8>,
    /// The response object while it runs (`in_progress`).
    running: Vec<u8>,
    /// The response object once cancelled.
    cancelled: Vec<u8>,
    /// The SSE events of its stream, in sequence order.
    events: Vec<Vec<u8>>,
    /// Its input items.
    input_items: Vec<Value>,
    /// Created with `background: true`.
    background: bool,
    /// Retrievals so far (a background response completes at the second).
    polls: u32,
    /// Cancelled before it completed.
    is_cancelled: bool,
    /// Its place in a chain of follow-ups (1 for a first turn).
    turn: u64,
}

/// What a `POST .../responses` body asks of the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Admitted {
    /// The turn of the new response: one more than its previous response's.
    pub(crate) turn: u64,
    /// `background: true`.
    pub(crate) background: bool,
    /// The request's input as items.
    pub(crate) input_items: Vec<Value>,
}

/// The renderings of a new response, for [`Store::keep`].
#[derive(Debug)]
pub(crate) struct Rendered {
    /// The completed response object.
    pub(crate) completed: Vec<u8>,
    /// The response object while it runs.
    pub(crate) running: Vec<u8>,
    /// The response object once cancelled.
    pub(crate) cancelled: Vec<u8>,
    /// The SSE events of its stream.
    pub(crate) events: Vec<Vec<u8>>,
}

/// An answer of the store: status and JSON body, or a replayed stream.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// A JSON answer.
    Json(u16, Vec<u8>),
    /// SSE events to stream.
    Events(Vec<Vec<u8>>),
}

/// The kept responses of one fake provider.
#[derive(Debug)]
pub(crate) struct Store {
    /// What this provider's response ids start with: `resp_sim_<hex of its name>_`, so two
    /// providers never issue the same id.
    prefix: String,
    kept: Mutex<(HashMap<String, Kept>, VecDeque<String>)>,
}

/// An OpenAI error body with a `code` and `param`.
fn error(message: &str, code: Option<&str>, param: Option<&str>) -> Vec<u8> {
    serde_json::to_vec(&json!({"error": {
        "message": message,
        "type": "invalid_request_error",
        "param": param,
        "code": code,
    }}))
    .unwrap_or_default()
}

/// The request's `input` as Responses API items: a string is one user message; each item of
/// a list keeps its fields and gets an id when it has none.
fn input_items(input: Option<&Value>, n: u64) -> Vec<Value> {
    let items = match input {
        Some(Value::String(text)) => vec![json!({
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
        })],
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, mut item)| {
            if let Some(fields) = item.as_object_mut() {
                fields
                    .entry("id")
                    .or_insert_with(|| Value::String(format!("msg_in_{n}_{i}")));
            }
            item
        })
        .collect()
}

impl Store {
    /// An empty store for the provider called `name`.
    pub(crate) fn new(name: &str) -> Store {
        Store {
            prefix: format!("resp_sim_{}_", hex::encode(name.as_bytes())),
            kept: Mutex::new((HashMap::new(), VecDeque::new())),
        }
    }

    /// The id of this provider's response number `n`.
    pub(crate) fn id(&self, n: u64) -> String {
        format!("{}{n}", self.prefix)
    }

    /// Checks a create request: its previous response must be kept here. `Err` is the 400.
    pub(crate) fn admit(&self, body: &Value, n: u64) -> Result<Admitted, Vec<u8>> {
        let previous = body.get("previous_response_id").and_then(Value::as_str);
        let turn = match previous {
            None => 1,
            Some(id) => {
                let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
                match kept.0.get(id) {
                    Some(k) => k.turn + 1,
                    None => {
                        return Err(error(
                            &format!("Previous response with id '{id}' not found."),
                            Some("previous_response_not_found"),
                            Some("previous_response_id"),
                        ))
                    }
                }
            }
        };
        Ok(Admitted {
            turn,
            background: body.get("background") == Some(&Value::Bool(true)),
            input_items: input_items(body.get("input"), n),
        })
    }

    /// Keeps a new response under `id`.
    pub(crate) fn keep(&self, id: String, admitted: Admitted, rendered: Rendered) {
        let mut guard = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let (kept, order) = &mut *guard;
        if order.len() >= MAX_KEPT {
            if let Some(oldest) = order.pop_front() {
                kept.remove(&oldest);
            }
        }
        order.push_back(id.clone());
        kept.insert(
            id,
            Kept {
                completed: rendered.completed,
                running: rendered.running,
                cancelled: rendered.cancelled,
                events: rendered.events,
                input_items: admitted.input_items,
                background: admitted.background,
                polls: 0,
                is_cancelled: false,
                turn: admitted.turn,
            },
        );
    }

    /// Answers a request for kept response `id`: `action` is the path after the id (``,
    /// `cancel`, `input_items`), `method` the request's method.
    pub(crate) fn answer(&self, method: &str, id: &str, action: &str, query: &str) -> Reply {
        let mut guard = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let (kept, order) = &mut *guard;
        let Some(k) = kept.get_mut(id) else {
            let message = format!("Response with id '{id}' not found.");
            return Reply::Json(404, error(&message, None, None));
        };
        match (method, action) {
            ("GET", "") if query.split('&').any(|p| p == "stream=true") => {
                let after = query
                    .split('&')
                    .find_map(|p| p.strip_prefix("starting_after="))
                    .and_then(|n| n.parse::<usize>().ok());
                let from = after.map_or(0, |n| n + 1);
                Reply::Events(k.events.iter().skip(from).cloned().collect())
            }
            ("GET", "") => {
                if k.is_cancelled {
                    return Reply::Json(200, k.cancelled.clone());
                }
                k.polls += 1;
                if k.background && k.polls == 1 {
                    Reply::Json(200, k.running.clone())
                } else {
                    Reply::Json(200, k.completed.clone())
                }
            }
            ("DELETE", "") => {
                kept.remove(id);
                order.retain(|kept_id| kept_id != id);
                let deleted = json!({"id": id, "object": "response.deleted", "deleted": true});
                Reply::Json(200, serde_json::to_vec(&deleted).unwrap_or_default())
            }
            ("POST", "cancel") if !k.background => Reply::Json(
                400,
                error("Cannot cancel a synchronous response.", None, None),
            ),
            ("POST", "cancel") if k.polls >= 2 && !k.is_cancelled => Reply::Json(
                400,
                error("Cannot cancel a completed response.", None, None),
            ),
            ("POST", "cancel") => {
                k.is_cancelled = true;
                Reply::Json(200, k.cancelled.clone())
            }
            ("GET", "input_items") => {
                let first = k.input_items.first().and_then(|i| i.get("id")).cloned();
                let last = k.input_items.last().and_then(|i| i.get("id")).cloned();
                let list = json!({
                    "object": "list",
                    "data": k.input_items,
                    "first_id": first,
                    "last_id": last,
                    "has_more": false,
                });
                Reply::Json(200, serde_json::to_vec(&list).unwrap_or_default())
            }
            _ => {
                let message = format!("Invalid URL ({method} /responses/{id}/{action})");
                Reply::Json(404, error(&message, None, None))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(tag: &str) -> Rendered {
        Rendered {
            completed: format!("{tag}-completed").into_bytes(),
            running: format!("{tag}-running").into_bytes(),
            cancelled: format!("{tag}-cancelled").into_bytes(),
            events: (0..4).map(|i| format!("{tag}-{i}").into_bytes()).collect(),
        }
    }

    fn json_of(reply: Reply) -> (u16, Value) {
        match reply {
            Reply::Json(status, body) => (status, serde_json::from_slice(&body).unwrap()),
            Reply::Events(_) => panic!("events"),
        }
    }

    #[test]
    fn follow_ups_need_a_kept_previous_response_and_count_turns() {
        let store = Store::new("a");
        let first = store.admit(&json!({"input": "hi"}), 1).unwrap();
        assert_eq!(first.turn, 1);
        assert_eq!(first.input_items[0]["id"], "msg_in_1_0");
        let id = store.id(1);
        assert_eq!(id, "resp_sim_61_1");
        store.keep(id.clone(), first, rendered("a"));
        let next = store
            .admit(
                &json!({"previous_response_id": id, "input": [{"role": "user", "content": "x"}]}),
                2,
            )
            .unwrap();
        assert_eq!(next.turn, 2);
        let refused = store
            .admit(&json!({"previous_response_id": "resp_sim_62_1"}), 3)
            .unwrap_err();
        let v: Value = serde_json::from_slice(&refused).unwrap();
        assert_eq!(v["error"]["code"], "previous_response_not_found");
        assert_eq!(v["error"]["param"], "previous_response_id");
    }

    #[test]
    fn a_background_response_runs_on_polls_and_can_be_cancelled_before_it_completes() {
        let store = Store::new("a");
        let background = json!({"background": true, "input": "hi"});
        store.keep(
            store.id(1),
            store.admit(&background, 1).unwrap(),
            rendered("one"),
        );
        let get = |id: &str| store.answer("GET", id, "", "");
        assert_eq!(get(&store.id(1)), Reply::Json(200, b"one-running".to_vec()));
        assert_eq!(
            get(&store.id(1)),
            Reply::Json(200, b"one-completed".to_vec())
        );
        assert_eq!(
            json_of(store.answer("POST", &store.id(1), "cancel", "")).0,
            400
        );

        store.keep(
            store.id(2),
            store.admit(&background, 2).unwrap(),
            rendered("two"),
        );
        assert_eq!(
            store.answer("POST", &store.id(2), "cancel", ""),
            Reply::Json(200, b"two-cancelled".to_vec())
        );
        assert_eq!(
            get(&store.id(2)),
            Reply::Json(200, b"two-cancelled".to_vec())
        );

        let sync = json!({"input": "hi"});
        store.keep(
            store.id(3),
            store.admit(&sync, 3).unwrap(),
            rendered("three"),
        );
        assert_eq!(
            get(&store.id(3)),
            Reply::Json(200, b"three-completed".to_vec())
        );
        assert_eq!(
            json_of(store.answer("POST", &store.id(3), "cancel", "")).0,
            400
        );
    }

    #[test]
    fn streams_replay_after_the_given_event_and_deleted_responses_are_gone() {
        let store = Store::new("a");
        store.keep(
            store.id(1),
            store.admit(&json!({}), 1).unwrap(),
            rendered("s"),
        );
        let replay = |query: &str| match store.answer("GET", &store.id(1), "", query) {
            Reply::Events(events) => events,
            other => panic!("{other:?}"),
        };
        assert_eq!(replay("stream=true").len(), 4);
        assert_eq!(
            replay("stream=true&starting_after=1"),
            vec![b"s-2".to_vec(), b"s-3".to_vec()]
        );
        let (status, items) = json_of(store.answer("GET", &store.id(1), "input_items", ""));
        assert_eq!((status, items["object"].clone()), (200, json!("list")));
        let (status, deleted) = json_of(store.answer("DELETE", &store.id(1), "", ""));
        assert_eq!(status, 200);
        assert_eq!(
            deleted,
            json!({"id": store.id(1), "object": "response.deleted", "deleted": true})
        );
        assert_eq!(json_of(store.answer("GET", &store.id(1), "", "")).0, 404);
    }
}
