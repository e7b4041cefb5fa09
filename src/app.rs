//! The shared, immutable state of a running sturnus: config, routing table, upstream settings.

use crate::budget::Budget;
use crate::catalog::{Catalog, CatalogError};
use crate::config::Config;
use crate::lifecycle::Lifecycle;
use crate::observe::Metrics;
use crate::providers::{tls, PeerSettings};
use std::sync::Arc;
use std::time::Instant;

/// Everything the request path and the admin endpoints share, behind one `Arc`.
pub struct App {
    /// The validated configuration.
    pub config: Config,
    /// Aliases, candidates, providers and their live statistics.
    pub catalog: Catalog,
    /// Timeouts and trust roots for upstream connections.
    pub peer_settings: PeerSettings,
    /// Connector to the providers (HTTP/1.1), with its pool of keep-alive connections
    /// (`proxy/forward.rs`).
    pub connector: pingora_core::connectors::http::v1::Connector,
    /// The Prometheus metrics, with every configured series pre-created.
    pub metrics: Metrics,
    /// The aggregate memory budget for buffered request bodies.
    pub budget: Arc<Budget>,
    /// When this process started serving.
    pub started: Instant,
    /// Signals, drain and upgrade state of the process (`/health` reads it).
    pub lifecycle: Arc<Lifecycle>,
}

/// Why the runtime state cannot be built from a valid config.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The `SSL_CERT_FILE` bundle cannot be used.
    #[error(transparent)]
    TrustRoots(#[from] tls::BundleError),
    /// A provider or candidate cannot be built.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// The Prometheus registry refused a metric.
    #[error("metrics registry: {0}")]
    Metrics(prometheus::Error),
}

impl App {
    /// Builds the runtime state from a validated config; fails on unusable providers or CA files.
    pub fn new(config: Config) -> Result<Arc<App>, AppError> {
        let roots = tls::from_env()?;
        let catalog = Catalog::build(&config)?;
        let metrics = Metrics::new(&catalog).map_err(AppError::Metrics)?;
        let peer_settings = PeerSettings {
            connect_timeout: config.routing.connect_timeout,
            read_timeout: config.routing.read_timeout,
            roots,
        };
        Ok(Arc::new(App {
            catalog,
            metrics,
            peer_settings,
            connector: pingora_core::connectors::http::v1::Connector::new(None),
            budget: Budget::from_config(&config.routing),
            started: Instant::now(),
            lifecycle: Arc::new(Lifecycle::new()),
            config,
        }))
    }
}
