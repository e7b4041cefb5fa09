//! Prometheus metrics, served at `GET /metrics`.
//!
//! Every configured alias × candidate series exists from startup at zero, so a missing series is
//! never mistaken for "no errors"; label values only ever come from the config (an unknown alias
//! in a request creates nothing). The request path holds a [`Tracked`] per routed request whose
//! handles are resolved once, so recording is a few atomic adds.

use crate::catalog::Catalog;
use crate::providers::Provider;
use crate::routing::{ErrorKind, Mode, QuotaKind};
use prometheus::core::Collector;
use prometheus::{
    Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// `Content-Type` of the exposition format.
pub const CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

/// Histogram buckets in seconds, for LLM traffic: 25 ms up to 120 s.
pub const BUCKETS: &[f64] = &[
    0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0,
];

/// Buckets of `sturnus_overhead_seconds`, for the proxy's own cost: 50 µs up to 100 ms.
pub const OVERHEAD_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
];

/// The transport-failure kinds `sturnus_errors_total` counts (failures with no provider response).
pub const ERROR_KINDS: [ErrorKind; 6] = [
    ErrorKind::Connect,
    ErrorKind::Timeout,
    ErrorKind::Tls,
    ErrorKind::Dns,
    ErrorKind::Auth,
    ErrorKind::Reset,
];

/// The `kind` of `sturnus_errors_total` counting requests whose client closed its connection
/// while the provider was answering (not a provider failure: kept out of [`ERROR_KINDS`] and of
/// the routing statistics).
pub const CLIENT_CLOSED: &str = "client_closed";

/// The `status_code` value every series is pre-created with.
const PRECREATED_STATUS: &str = "200";

/// Labels shared by the per-candidate families.
const CANDIDATE_LABELS: [&str; 3] = ["alias", "provider", "model"];

/// The `stream` label value of a mode.
pub fn stream_label(mode: Mode) -> &'static str {
    match mode {
        Mode::Streaming => "true",
        Mode::NonStreaming => "false",
    }
}

/// Why a routed request went to its candidate: the `route` of the access log and of
/// `sturnus_routes_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteReason {
    /// The latency-weighted pick among the alias's candidates.
    Pick,
    /// The `x-session-affinity` pin named it.
    SessionAffinity,
    /// The conversation key's pick (prefix affinity).
    PrefixAffinity,
    /// The id of a Responses API object it holds named it.
    HeldObject,
}

impl RouteReason {
    /// Every reason, in the order their series are kept.
    pub const ALL: [RouteReason; 4] = [
        RouteReason::Pick,
        RouteReason::SessionAffinity,
        RouteReason::PrefixAffinity,
        RouteReason::HeldObject,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            RouteReason::Pick => "pick",
            RouteReason::SessionAffinity => "session_affinity",
            RouteReason::PrefixAffinity => "prefix_affinity",
            RouteReason::HeldObject => "held_object",
        }
    }
}

/// What one registered metric family declares (the README's metric table is checked
/// against these).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Family {
    /// The family's name.
    pub name: String,
    /// `counter`, `gauge` or `histogram`.
    pub kind: String,
    /// Its label names.
    pub labels: Vec<String>,
}

/// Registers `collector` in `registry` and notes every family it declares in `families`.
pub(super) fn register(
    registry: &Registry,
    families: &mut Vec<Family>,
    collector: Box<dyn Collector>,
) -> Result<(), prometheus::Error> {
    for (desc, family) in collector.desc().iter().zip(collector.collect()) {
        families.push(Family {
            name: desc.fq_name.clone(),
            kind: format!("{:?}", family.get_field_type()).to_lowercase(),
            labels: desc.variable_labels.clone(),
        });
    }
    registry.register(collector)
}

/// The registry and every sturnus metric family.
pub struct Metrics {
    registry: Registry,
    /// Every family registered, in registration order.
    families: Vec<Family>,
    buffer_rejections: IntCounter,
    upstream_resends: IntCounter,
    /// `sturnus_provider_healthy` of each provider with an active health check.
    provider_healthy: Vec<(Arc<Provider>, IntGauge)>,
    /// `sturnus_quota_remaining_ratio`: its series appear once a candidate's provider announces
    /// a quota with a limit.
    quota_ratio: GaugeVec,
    /// Per alias (config order): its candidate series and routed-request counts.
    aliases: Vec<AliasSeries>,
    by_name: HashMap<String, usize>,
    /// The per-client series (`[auth]`).
    pub clients: super::clients::ClientMetrics,
}

/// One alias's series.
struct AliasSeries {
    name: String,
    candidates: Vec<Arc<CandidateSeries>>,
    /// Requests routed to this alias, per mode slot (weights the share gauge).
    routed: [AtomicU64; 2],
}

/// One alias × candidate's handles, resolved once at startup.
pub struct CandidateSeries {
    labels: [String; 3],
    requests: IntCounterVec,
    /// The `status_code="200"` counter, resolved ahead for the common case.
    ok: IntCounter,
    ttfc: [Histogram; 2],
    latency: [Histogram; 2],
    /// The alias's `sturnus_overhead_seconds` series (shared by its candidates).
    overhead: [Histogram; 2],
    errors: [IntCounter; ERROR_KINDS.len()],
    client_closed: IntCounter,
    inflight: IntGauge,
    share: Gauge,
    /// `sturnus_routes_total`, per [`RouteReason::ALL`].
    routes: [IntCounter; 4],
}

fn slot(mode: Mode) -> usize {
    match mode {
        Mode::NonStreaming => 0,
        Mode::Streaming => 1,
    }
}

/// The three candidate label values plus one more.
fn with_extra<'a>(labels: &'a [String; 3], extra: &'a str) -> [&'a str; 4] {
    [&labels[0], &labels[1], &labels[2], extra]
}

fn histogram(name: &str, help: &str) -> Result<HistogramVec, prometheus::Error> {
    let labels = [CANDIDATE_LABELS.as_slice(), &["stream"]].concat();
    HistogramVec::new(
        HistogramOpts::new(name, help).buckets(BUCKETS.to_vec()),
        &labels,
    )
}

impl Metrics {
    /// Registers every family and pre-creates the series of every configured alias × candidate.
    pub fn new(catalog: &Catalog) -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "sturnus_requests_total",
                "Responses relayed from providers, by status code.",
            ),
            &[CANDIDATE_LABELS.as_slice(), &["status_code"]].concat(),
        )?;
        let ttfc = histogram(
            "sturnus_ttfc_seconds",
            "Time from sending the request upstream to the first response chunk.",
        )?;
        let latency = histogram(
            "sturnus_latency_seconds",
            "Time from sending the request upstream to the last response byte.",
        )?;
        let overhead = HistogramVec::new(
            HistogramOpts::new(
                "sturnus_overhead_seconds",
                "Time sturnus itself adds to a request: from the end of the client's request \
                 body to the request leaving for the provider (without opening a connection), \
                 plus from the provider's response header to the first write to the client.",
            )
            .buckets(OVERHEAD_BUCKETS.to_vec()),
            &["alias", "stream"],
        )?;
        let errors = IntCounterVec::new(
            Opts::new(
                "sturnus_errors_total",
                "Requests that ended without a complete provider response, by kind: transport \
                 failures, or client_closed when the client left first.",
            ),
            &[CANDIDATE_LABELS.as_slice(), &["kind"]].concat(),
        )?;
        let buffer_rejections = IntCounter::new(
            "sturnus_buffer_rejections_total",
            "Requests shed with 429 by the memory budget.",
        )?;
        let upstream_resends = IntCounter::new(
            "sturnus_upstream_resends_total",
            "Requests resent on a new provider connection because writing them to a pooled one \
             failed (they cannot have reached the provider); at most once per request.",
        )?;
        let inflight = IntGaugeVec::new(
            Opts::new(
                "sturnus_inflight_requests",
                "Requests in flight per candidate.",
            ),
            &CANDIDATE_LABELS,
        )?;
        let share = GaugeVec::new(
            Opts::new(
                "sturnus_routing_share",
                "Each candidate's current share of its alias's traffic (0-1).",
            ),
            &CANDIDATE_LABELS,
        )?;
        let quota_ratio = GaugeVec::new(
            Opts::new(
                "sturnus_quota_remaining_ratio",
                "Remaining / limit of the quota the candidate's provider last announced, by kind \
                 (requests or tokens); present once a provider announced a quota with a limit.",
            ),
            &[CANDIDATE_LABELS.as_slice(), &["kind"]].concat(),
        )?;
        let routes = IntCounterVec::new(
            Opts::new(
                "sturnus_routes_total",
                "Requests routed to each candidate, by why it was chosen: pick (the \
                 latency-weighted pick), session_affinity (the x-session-affinity pin), \
                 prefix_affinity (the conversation key) or held_object (the candidate holds the \
                 Responses API object the request names).",
            ),
            &[CANDIDATE_LABELS.as_slice(), &["route"]].concat(),
        )?;
        let build_info = IntGaugeVec::new(
            Opts::new("sturnus_build_info", "Always 1; the version is a label."),
            &["version"],
        )?;
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        let healthy = IntGaugeVec::new(
            Opts::new(
                "sturnus_provider_healthy",
                "1 while the provider passes its active health check, 0 while it fails it \
                 (providers with a health_check only).",
            ),
            &["provider"],
        )?;
        let provider_healthy = catalog
            .providers
            .iter()
            .filter(|p| p.health.check().is_some())
            .map(|p| (p.clone(), healthy.with_label_values(&[p.name.as_str()])))
            .collect();

        let mut families = Vec::new();
        register(&registry, &mut families, Box::new(requests.clone()))?;
        register(&registry, &mut families, Box::new(ttfc.clone()))?;
        register(&registry, &mut families, Box::new(latency.clone()))?;
        register(&registry, &mut families, Box::new(overhead.clone()))?;
        register(&registry, &mut families, Box::new(errors.clone()))?;
        register(
            &registry,
            &mut families,
            Box::new(buffer_rejections.clone()),
        )?;
        register(&registry, &mut families, Box::new(upstream_resends.clone()))?;
        register(&registry, &mut families, Box::new(inflight.clone()))?;
        register(&registry, &mut families, Box::new(share.clone()))?;
        register(&registry, &mut families, Box::new(quota_ratio.clone()))?;
        register(&registry, &mut families, Box::new(routes.clone()))?;
        register(&registry, &mut families, Box::new(build_info))?;
        register(&registry, &mut families, Box::new(healthy))?;

        let mut aliases = Vec::with_capacity(catalog.aliases.len());
        for alias in &catalog.aliases {
            let alias_overhead = [Mode::NonStreaming, Mode::Streaming]
                .map(|m| overhead.with_label_values(&[alias.name.as_str(), stream_label(m)]));
            let candidates = alias
                .candidates
                .iter()
                .map(|c| {
                    let labels = [alias.name.clone(), c.provider.name.clone(), c.model.clone()];
                    let l = |extra| with_extra(&labels, extra);
                    let ok = requests.with_label_values(&l(PRECREATED_STATUS));
                    let by_mode = |vec: &HistogramVec| {
                        [Mode::NonStreaming, Mode::Streaming]
                            .map(|m| vec.with_label_values(&l(stream_label(m))))
                    };
                    let base: Vec<&str> = labels.iter().map(String::as_str).collect();
                    Arc::new(CandidateSeries {
                        requests: requests.clone(),
                        ok,
                        ttfc: by_mode(&ttfc),
                        latency: by_mode(&latency),
                        overhead: alias_overhead.clone(),
                        errors: ERROR_KINDS.map(|k| errors.with_label_values(&l(k.as_str()))),
                        client_closed: errors.with_label_values(&l(CLIENT_CLOSED)),
                        inflight: inflight.with_label_values(&base),
                        share: share.with_label_values(&base),
                        routes: RouteReason::ALL.map(|r| routes.with_label_values(&l(r.as_str()))),
                        labels: labels.clone(),
                    })
                })
                .collect();
            aliases.push(AliasSeries {
                name: alias.name.clone(),
                candidates,
                routed: [AtomicU64::new(0), AtomicU64::new(0)],
            });
        }
        let by_name = aliases
            .iter()
            .enumerate()
            .map(|(i, a)| (a.name.clone(), i))
            .collect();
        let clients = super::clients::ClientMetrics::new(&registry, &mut families)?;
        let metrics = Metrics {
            clients,
            registry,
            families,
            buffer_rejections,
            upstream_resends,
            provider_healthy,
            quota_ratio,
            aliases,
            by_name,
        };
        metrics.update_shares(catalog);
        Ok(metrics)
    }

    /// Starts tracking one routed request to candidate `index` of `alias`: counts it in flight
    /// until the returned handle drops. An unknown alias yields a handle that records nothing.
    pub fn track(&self, alias: &str, index: usize, mode: Mode) -> Tracked {
        let series = self.by_name.get(alias).and_then(|&i| {
            let a = &self.aliases[i];
            let s = a.candidates.get(index)?;
            a.routed[slot(mode)].fetch_add(1, Relaxed);
            s.inflight.inc();
            Some(s.clone())
        });
        Tracked { series, mode }
    }

    /// Every metric family registered, series or not.
    pub fn families(&self) -> &[Family] {
        &self.families
    }

    /// Counts one request resent after writing it to a pooled connection failed.
    pub fn upstream_resent(&self) {
        self.upstream_resends.inc();
    }

    /// Counts one request shed with 429 by the memory budget.
    pub fn buffer_rejected(&self) {
        self.buffer_rejections.inc();
    }

    /// Requests routed to `alias` so far, per mode; `None` for an unknown alias.
    pub fn routed(&self, alias: &str) -> Option<(u64, u64)> {
        let a = &self.aliases[*self.by_name.get(alias)?];
        Some((a.routed[0].load(Relaxed), a.routed[1].load(Relaxed)))
    }

    /// Refreshes the share gauges: each candidate's share in each mode, weighted by how many of
    /// the alias's requests were in that mode (the non-streaming shares before any traffic).
    pub fn update_shares(&self, catalog: &Catalog) {
        for alias in &catalog.aliases {
            let Some(&i) = self.by_name.get(&alias.name) else {
                continue;
            };
            let series = &self.aliases[i];
            let ns = alias.shares(Mode::NonStreaming, &catalog.params);
            let s = alias.shares(Mode::Streaming, &catalog.params);
            let (n_ns, n_s) = (
                series.routed[0].load(Relaxed) as f64,
                series.routed[1].load(Relaxed) as f64,
            );
            let w_s = if n_ns + n_s > 0.0 {
                n_s / (n_ns + n_s)
            } else {
                0.0
            };
            for (k, c) in series.candidates.iter().enumerate() {
                let blended = (1.0 - w_s) * ns.get(k).copied().unwrap_or(0.0)
                    + w_s * s.get(k).copied().unwrap_or(0.0);
                c.share.set(blended);
            }
        }
    }

    /// Refreshes the quota gauges from each candidate's last quota reading that had a limit.
    fn update_quotas(&self, catalog: &Catalog) {
        for alias in &catalog.aliases {
            let Some(&i) = self.by_name.get(&alias.name) else {
                continue;
            };
            for (candidate, series) in alias.candidates.iter().zip(&self.aliases[i].candidates) {
                for kind in QuotaKind::ALL {
                    let Some(view) = candidate.stats.quota(kind) else {
                        continue;
                    };
                    let Some(limit) = view.limit.filter(|&l| l > 0) else {
                        continue;
                    };
                    self.quota_ratio
                        .with_label_values(&with_extra(&series.labels, kind.as_str()))
                        .set(view.remaining as f64 / limit as f64);
                }
            }
        }
    }

    /// The exposition text, with shares, quotas and provider health refreshed from the live
    /// state.
    pub fn render(&self, catalog: &Catalog) -> Vec<u8> {
        self.update_shares(catalog);
        self.update_quotas(catalog);
        for (provider, gauge) in &self.provider_healthy {
            gauge.set(i64::from(provider.health.is_healthy()));
        }
        let mut out = Vec::with_capacity(16 * 1024);
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            log::error!("cannot encode metrics: {e}");
        }
        out
    }
}

/// One routed request's metric handles; decrements the in-flight gauge when dropped.
pub struct Tracked {
    series: Option<Arc<CandidateSeries>>,
    mode: Mode,
}

impl Tracked {
    /// Counts why the request went to its candidate (`sturnus_routes_total`).
    pub fn routed(&self, reason: RouteReason) {
        if let Some(s) = &self.series {
            s.routes[reason as usize].inc();
        }
    }

    /// Observes the time to the first response chunk.
    pub fn first_chunk(&self, seconds: f64) {
        if let Some(s) = &self.series {
            s.ttfc[slot(self.mode)].observe(seconds);
        }
    }

    /// Observes the time sturnus itself added to the request (`sturnus_overhead_seconds`).
    pub fn overhead(&self, seconds: f64) {
        if let Some(s) = &self.series {
            s.overhead[slot(self.mode)].observe(seconds);
        }
    }

    /// Counts a response relayed from the provider; `latency` is the time to its last byte
    /// when the response completed.
    pub fn response(&self, status: u16, latency: Option<f64>) {
        let Some(s) = &self.series else {
            return;
        };
        if status == 200 {
            s.ok.inc();
        } else {
            let code = status.to_string();
            let [alias, provider, model] = &s.labels;
            s.requests
                .with_label_values(&[alias.as_str(), provider.as_str(), model.as_str(), &code])
                .inc();
        }
        if let Some(latency) = latency {
            s.latency[slot(self.mode)].observe(latency);
        }
    }

    /// Counts a transport failure that produced no provider response. Kinds outside
    /// [`ERROR_KINDS`] are not transport failures and are not counted.
    pub fn transport_error(&self, kind: ErrorKind) {
        let Some(s) = &self.series else {
            return;
        };
        if let Some(i) = ERROR_KINDS.iter().position(|k| *k == kind) {
            s.errors[i].inc();
        }
    }
}

impl Tracked {
    /// Counts a request whose client closed its connection before the answer was complete.
    pub fn client_closed(&self) {
        if let Some(s) = &self.series {
            s.client_closed.inc();
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if let Some(s) = &self.series {
            s.inflight.dec();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn catalog() -> Catalog {
        let text = r#"
[provider.a]
base_url = "http://127.0.0.1:9/v1"
[provider.b]
base_url = "http://127.0.0.1:10/v1"
[model]
fast = [{ provider = "a", model = "m1" }, { provider = "b", model = "m2" }]
solo = [{ provider = "b", model = "m2" }]
"#;
        let config = Config::parse(text, &|_| None).unwrap();
        Catalog::build(&config).unwrap()
    }

    fn text(m: &Metrics, c: &Catalog) -> String {
        String::from_utf8(m.render(c)).unwrap()
    }

    #[test]
    fn every_series_exists_at_zero_from_the_start() {
        let c = catalog();
        let m = Metrics::new(&c).unwrap();
        let t = text(&m, &c);
        for kind in [
            "connect",
            "timeout",
            "tls",
            "dns",
            "auth",
            "reset",
            "client_closed",
        ] {
            let line = format!(
                "sturnus_errors_total{{alias=\"solo\",kind=\"{kind}\",model=\"m2\",provider=\"b\"}} 0"
            );
            assert!(t.contains(&line), "{line} missing in\n{t}");
        }
        assert!(t.contains("sturnus_buffer_rejections_total 0"));
        assert!(t.contains(&format!(
            "sturnus_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )));
        assert!(t.contains(
            "sturnus_ttfc_seconds_count{alias=\"fast\",model=\"m1\",provider=\"a\",stream=\"true\"} 0"
        ));
        assert!(t.contains(
            "sturnus_requests_total{alias=\"fast\",model=\"m2\",provider=\"b\",status_code=\"200\"} 0"
        ));
        for alias in ["fast", "solo"] {
            for stream in ["true", "false"] {
                let line = format!(
                    "sturnus_overhead_seconds_count{{alias=\"{alias}\",stream=\"{stream}\"}} 0"
                );
                assert!(t.contains(&line), "{line} missing in\n{t}");
            }
        }
        assert!(t.contains("sturnus_routing_share{alias=\"solo\",model=\"m2\",provider=\"b\"} 1"));
        assert!(t.contains("sturnus_routing_share{alias=\"fast\",model=\"m1\",provider=\"a\"} 0.5"));
    }

    #[test]
    fn quota_ratios_appear_once_a_provider_announces_a_limit() {
        let c = catalog();
        let m = Metrics::new(&c).unwrap();
        assert!(!text(&m, &c).contains("sturnus_quota_remaining_ratio{"));
        let b = &c.aliases[0].candidates[1].stats;
        // No limit: nothing to divide by, no series.
        b.observe_quota(QuotaKind::Tokens, 10, None, None, 1, &Default::default());
        assert!(!text(&m, &c).contains("sturnus_quota_remaining_ratio{"));
        b.observe_quota(
            QuotaKind::Requests,
            25,
            Some(100),
            Some(1_000_000),
            2,
            &Default::default(),
        );
        let t = text(&m, &c);
        // Candidate b/m2 is listed by both aliases: one series per alias.
        for alias in ["fast", "solo"] {
            let line = format!(
                "sturnus_quota_remaining_ratio{{alias=\"{alias}\",kind=\"requests\",model=\"m2\",provider=\"b\"}} 0.25"
            );
            assert!(t.contains(&line), "{line} missing in\n{t}");
        }
        assert!(!t.contains("kind=\"tokens\""), "{t}");
        assert!(!t.contains(
            "sturnus_quota_remaining_ratio{alias=\"fast\",kind=\"requests\",model=\"m1\""
        ));
    }

    #[test]
    fn provider_health_is_a_gauge_for_checked_providers_only() {
        let text_config = r#"
[provider.a]
base_url = "http://127.0.0.1:9/v1"
health_check = { path = "/health" }
[provider.b]
base_url = "http://127.0.0.1:10/v1"
[model]
fast = [{ provider = "a", model = "m1" }, { provider = "b", model = "m2" }]
"#;
        let c = Catalog::build(&Config::parse(text_config, &|_| None).unwrap()).unwrap();
        let m = Metrics::new(&c).unwrap();
        let t = text(&m, &c);
        assert!(
            t.contains("sturnus_provider_healthy{provider=\"a\"} 1"),
            "{t}"
        );
        assert!(
            !t.contains("sturnus_provider_healthy{provider=\"b\"}"),
            "{t}"
        );
        c.providers[0].health.set_healthy(false);
        let t = text(&m, &c);
        assert!(
            t.contains("sturnus_provider_healthy{provider=\"a\"} 0"),
            "{t}"
        );
        // Its candidate is out of rotation: no share, and the other takes everything.
        assert!(t.contains("sturnus_routing_share{alias=\"fast\",model=\"m1\",provider=\"a\"} 0"));
        assert!(t.contains("sturnus_routing_share{alias=\"fast\",model=\"m2\",provider=\"b\"} 1"));
    }

    #[test]
    fn tracked_requests_record_and_leave_the_inflight_gauge() {
        let c = catalog();
        let m = Metrics::new(&c).unwrap();
        {
            let t = m.track("fast", 1, Mode::Streaming);
            assert!(text(&m, &c).contains(
                "sturnus_inflight_requests{alias=\"fast\",model=\"m2\",provider=\"b\"} 1"
            ));
            t.first_chunk(0.03);
            t.overhead(0.0003);
            t.response(503, Some(0.2));
            t.transport_error(ErrorKind::Status);
        }
        let unknown = m.track("nope", 0, Mode::Streaming);
        unknown.response(200, None);
        m.track("fast", 9, Mode::Streaming).response(200, None);
        drop(unknown);
        let t = text(&m, &c);
        assert!(
            t.contains("sturnus_inflight_requests{alias=\"fast\",model=\"m2\",provider=\"b\"} 0")
        );
        assert!(t.contains(
            "sturnus_requests_total{alias=\"fast\",model=\"m2\",provider=\"b\",status_code=\"503\"} 1"
        ));
        assert!(t.contains(
            "sturnus_ttfc_seconds_bucket{alias=\"fast\",model=\"m2\",provider=\"b\",stream=\"true\",le=\"0.05\"} 1"
        ));
        assert!(t.contains(
            "sturnus_latency_seconds_bucket{alias=\"fast\",model=\"m2\",provider=\"b\",stream=\"true\",le=\"0.1\"} 0"
        ));
        assert!(t.contains(
            "sturnus_overhead_seconds_bucket{alias=\"fast\",stream=\"true\",le=\"0.0005\"} 1"
        ));
        assert!(t.contains(
            "sturnus_overhead_seconds_bucket{alias=\"fast\",stream=\"true\",le=\"0.00025\"} 0"
        ));
        assert!(!t.contains("nope"));
        assert!(!t.contains("kind=\"status\""));
        assert_eq!(m.routed("fast"), Some((0, 1)));
        m.buffer_rejected();
        assert!(text(&m, &c).contains("sturnus_buffer_rejections_total 1"));
    }
}
