//! The per-client series: answers by client name, and requests refused by the client's own
//! limits (kept apart from providers' 429s, which count in `sturnus_requests_total`).
//!
//! Label values are configured names (a static key's `name`) or a token's name claim, never a
//! credential; names from tokens beyond [`MAX_CLIENTS`] distinct ones share the label
//! [`OTHER`], so a stream of new token subjects cannot grow the exposition without bound.

use super::metrics::{register, Family};
use prometheus::{IntCounter, IntCounterVec, Opts, Registry};
use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, RwLock};

/// Most distinct client label values.
pub const MAX_CLIENTS: usize = 1000;
/// The label value of clients beyond [`MAX_CLIENTS`].
pub const OTHER: &str = "_other";
/// The status nearly every answer has, whose series [`ClientMetrics`] resolves ahead.
const OK: u16 = 200;

/// `sturnus_client_requests_total` and `sturnus_client_rate_limited_total`.
pub struct ClientMetrics {
    requests: IntCounterVec,
    rate_limited: IntCounterVec,
    known: Mutex<HashSet<String>>,
    /// The `status_code="200"` series of each client with a label of its own, resolved once:
    /// nearly every answer counts there, and a resolved series is one atomic add instead of a
    /// label lookup (hash and lock) per request. Bounded by [`MAX_CLIENTS`] like the labels.
    ok: RwLock<HashMap<String, IntCounter, foldhash::fast::RandomState>>,
}

impl ClientMetrics {
    /// Registers both families in `registry`, noting them in `families`.
    pub fn new(
        registry: &Registry,
        families: &mut Vec<Family>,
    ) -> Result<ClientMetrics, prometheus::Error> {
        let requests = IntCounterVec::new(
            Opts::new(
                "sturnus_client_requests_total",
                "Answers to authenticated clients, by client name and status code (sturnus's \
                 own refusals included).",
            ),
            &["client", "status_code"],
        )?;
        let rate_limited = IntCounterVec::new(
            Opts::new(
                "sturnus_client_rate_limited_total",
                "Requests refused with 429 client_rate_limited by the client's own limit \
                 (max_inflight or requests_per_minute), by client name.",
            ),
            &["client", "limit"],
        )?;
        register(registry, families, Box::new(requests.clone()))?;
        register(registry, families, Box::new(rate_limited.clone()))?;
        Ok(ClientMetrics {
            requests,
            rate_limited,
            known: Mutex::new(HashSet::new()),
            ok: RwLock::new(HashMap::default()),
        })
    }

    /// Creates the series of a configured client at zero, so it shows before its first request.
    pub fn precreate(&self, name: &str) {
        let label = self.label(name);
        self.requests.with_label_values(&[label, "200"]);
    }

    /// Counts one answer to `client` with `status`.
    pub fn answered(&self, client: &str, status: u16) {
        if status == OK {
            if let Some(ok) = self.resolved_ok(client) {
                ok.inc();
                return;
            }
        }
        let label = self.label(client);
        let series = self
            .requests
            .with_label_values(&[label, status.to_string().as_str()]);
        series.inc();
        if status == OK && label == client {
            if let Ok(mut ok) = self.ok.write() {
                ok.insert(client.to_string(), series);
            }
        }
    }

    /// The resolved `status_code="200"` series of `client`, once its first 200 was counted.
    fn resolved_ok(&self, client: &str) -> Option<IntCounter> {
        self.ok.read().ok()?.get(client).cloned()
    }

    /// Counts one request refused by `client`'s own `limit`.
    pub fn rate_limited(&self, client: &str, limit: &str) {
        let label = self.label(client);
        self.rate_limited.with_label_values(&[label, limit]).inc();
    }

    /// The label value for `name`: itself while the number of distinct names allows.
    fn label<'a>(&self, name: &'a str) -> &'a str {
        let Ok(mut known) = self.known.lock() else {
            return OTHER;
        };
        if known.contains(name) {
            return name;
        }
        if known.len() < MAX_CLIENTS {
            known.insert(name.to_string());
            return name;
        }
        OTHER
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_count_in_their_status_series_whether_resolved_ahead_or_not() {
        let m = ClientMetrics::new(&Registry::new(), &mut Vec::new()).unwrap();
        for _ in 0..3 {
            m.answered("billing", 200);
        }
        m.answered("billing", 429);
        let count = |status: &str| m.requests.with_label_values(&["billing", status]).get();
        assert_eq!((count("200"), count("429")), (3, 1));
    }

    #[test]
    fn names_beyond_the_cap_share_one_label() {
        let m = ClientMetrics::new(&Registry::new(), &mut Vec::new()).unwrap();
        for i in 0..MAX_CLIENTS {
            m.answered(&format!("c{i}"), 200);
        }
        assert_eq!(m.label("c0"), "c0");
        assert_eq!(m.label("new"), OTHER);
        m.rate_limited("new", "max_inflight");
        assert_eq!(
            m.rate_limited
                .with_label_values(&[OTHER, "max_inflight"])
                .get(),
            1
        );
    }
}
