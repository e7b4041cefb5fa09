//! Observability: what operators see of a running sturnus.
//!
//! - [`metrics`]: the Prometheus registry behind `GET /metrics`.
//! - [`access_log`]: one structured line per request.
//! - [`clients`]: the per-client series (`[auth]`).
//! - [`trace`]: W3C `traceparent`/`tracestate` propagation and `x-request-id`.
//! - [`logger`]: the `env_logger` setup (JSON lines or text).
//! - [`flat_json`]: the serializer that writes a JSON log line.
//! - [`log_sink`]: stdout for JSON lines, access lines batched.
//!
//! Nothing here does I/O on the request path besides logging; the proxy feeds these rooms.

pub mod access_log;
pub mod clients;
pub mod flat_json;
pub mod log_sink;
pub mod logger;
pub mod metrics;
pub mod timestamp;
pub mod trace;

pub use access_log::{AccessRecord, Verdict};
pub use logger::LogFormat;
pub use metrics::{Metrics, Tracked};
pub use trace::TraceContext;

use crate::config::Config;

/// Logs what a starting sturnus will serve: listeners and every alias with its candidates.
/// (No secret is part of any of it.)
pub fn log_startup(config: &Config) {
    log::info!(
        "sturnus {} listening on {}",
        env!("CARGO_PKG_VERSION"),
        config.listen
    );
    if let Some(tls) = &config.listen_tls {
        log::info!("TLS listener on {} (h2, http/1.1)", tls.listen);
    }
    if let Some(addr) = config.metrics_listen {
        log::info!("metrics listener on {addr} (/metrics, /health, /healthz, /status)");
    }
    for alias in &config.aliases {
        let candidates: Vec<String> = alias
            .candidates
            .iter()
            .map(|c| format!("{}/{}", c.provider, c.model))
            .collect();
        log::info!(
            "alias {} -> {} candidate(s): {}",
            alias.name,
            candidates.len(),
            candidates.join(", ")
        );
    }
}
