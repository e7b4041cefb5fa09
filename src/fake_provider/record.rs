//! What a fake provider received, kept so tests can assert on it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

/// How many requests the log keeps; older ones are dropped first.
pub const RECORD_CAP: usize = 10_000;

/// A request as the provider received it, for assertions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    /// The request method, e.g. `POST`.
    pub method: String,
    /// The request path without the query string.
    pub path: String,
    /// The query string (after `?`), if any.
    pub query: Option<String>,
    /// Headers in arrival order, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked if it came with `Transfer-Encoding: chunked`.
    pub body: Vec<u8>,
}

/// The first value of header `name` (case-insensitive) among `headers`, if present: the lookup
/// of every recorded request or response in the fake provider and its tests.
pub fn header_value<'h>(headers: &'h [(String, String)], name: &str) -> Option<&'h str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        header_value(&self.headers, name)
    }

    /// The body parsed as JSON, if it is JSON.
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// A bounded, switchable log of received requests.
#[derive(Debug)]
pub(crate) struct Recorder {
    enabled: AtomicBool,
    log: Mutex<VecDeque<RecordedRequest>>,
}

impl Recorder {
    /// An empty log that records.
    pub(crate) fn new() -> Recorder {
        Recorder {
            enabled: AtomicBool::new(true),
            log: Mutex::new(VecDeque::new()),
        }
    }

    /// Whether requests are currently being recorded.
    pub(crate) fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Turns recording on or off (off saves allocations in benchmarks).
    pub(crate) fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    /// Appends a request, dropping the oldest beyond [`RECORD_CAP`].
    pub(crate) fn push(&self, req: RecordedRequest) {
        let mut log = self.lock();
        if log.len() >= RECORD_CAP {
            log.pop_front();
        }
        log.push_back(req);
    }

    /// A copy of the log, oldest first.
    pub(crate) fn snapshot(&self) -> Vec<RecordedRequest> {
        self.lock().iter().cloned().collect()
    }

    /// Empties the log.
    pub(crate) fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<RecordedRequest>> {
        // A panic elsewhere while holding the lock leaves the log usable.
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(path: &str) -> RecordedRequest {
        RecordedRequest {
            method: "POST".into(),
            path: path.into(),
            query: None,
            headers: vec![("x-api-key".into(), "k".into())],
            body: br#"{"model":"m"}"#.to_vec(),
        }
    }

    #[test]
    fn header_lookup_ignores_case_and_json_parses() {
        let r = req("/v1/chat/completions");
        assert_eq!(r.header("X-Api-Key"), Some("k"));
        assert_eq!(r.header("missing"), None);
        assert_eq!(
            r.json().and_then(|v| v["model"].as_str().map(String::from)),
            Some("m".into())
        );
    }

    #[test]
    fn log_is_bounded_and_switchable() {
        let rec = Recorder::new();
        assert!(rec.enabled());
        for i in 0..RECORD_CAP + 3 {
            rec.push(req(&format!("/{i}")));
        }
        let snap = rec.snapshot();
        assert_eq!(snap.len(), RECORD_CAP);
        assert_eq!(snap[0].path, "/3");
        rec.set_enabled(false);
        assert!(!rec.enabled());
        rec.clear();
        assert!(rec.snapshot().is_empty());
    }
}
