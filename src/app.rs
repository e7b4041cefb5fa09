//! The shared, immutable state of a running sturnus: config, routing table, upstream settings.

use crate::budget::Budget;
use crate::catalog::{Catalog, CatalogError};
use crate::config::Config;
use crate::lifecycle::Lifecycle;
use crate::observe::Metrics;
use crate::providers::{tls, PeerSettings};
use pingora::server::configuration::ServerConf;
use pingora_core::connectors::http::v1::Connector;
use pingora_core::connectors::ConnectorOptions;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// Everything the request path and the admin endpoints share, behind one `Arc`.
pub struct App {
    /// The validated configuration.
    pub config: Config,
    /// Aliases, candidates, providers and their live statistics.
    pub catalog: Catalog,
    /// Timeouts and trust roots for upstream connections.
    pub peer_settings: PeerSettings,
    /// Connector to the providers, set from Pingora's server configuration when the server is
    /// built ([`App::connect_upstream`]).
    upstream: OnceLock<Upstream>,
    /// The Prometheus metrics, with every configured series pre-created.
    pub metrics: Metrics,
    /// The aggregate memory budget for buffered request bodies.
    pub budget: Arc<Budget>,
    /// When this process started serving.
    pub started: Instant,
    /// Signals, drain and upgrade state of the process (`/health` reads it).
    pub lifecycle: Arc<Lifecycle>,
    /// Who may use the proxy (`[auth]`); `None`: every client is served.
    pub auth: Option<crate::auth::Gate>,
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
    /// The JWT verification keys cannot be loaded.
    #[error(transparent)]
    Auth(#[from] crate::auth::jwt::KeyError),
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
        let auth = config
            .auth
            .as_ref()
            .map(crate::auth::Gate::new)
            .transpose()?;
        for key in config.auth.iter().flat_map(|a| &a.keys) {
            metrics.clients.precreate(&key.name);
        }
        let peer_settings = PeerSettings {
            connect_timeout: config.routing.connect_timeout,
            read_timeout: config.routing.read_timeout,
            roots,
        };
        Ok(Arc::new(App {
            catalog,
            metrics,
            peer_settings,
            upstream: OnceLock::new(),
            budget: Budget::from_config(&config.routing),
            started: Instant::now(),
            lifecycle: Arc::new(Lifecycle::new()),
            auth,
            config,
        }))
    }
}

/// How sturnus reaches the providers: Pingora's connector (HTTP/1.1) with its pool of
/// keep-alive connections, and the resend bound, both from Pingora's server configuration.
pub struct Upstream {
    /// The connector and its pool (`proxy/forward.rs`).
    pub connector: Connector,
    /// Most resends of one request whose pooled connection the provider had already closed
    /// (`max_retries`).
    pub max_resends: usize,
    /// Most idle connections the pool keeps (`upstream_keepalive_pool_size` × `threads`).
    pub pool_size: usize,
}

impl Upstream {
    /// The connector Pingora's own proxy would build from `conf`: its keep-alive pool size,
    /// source addresses, connect offload threads, CA file and TLS key log.
    pub fn from_server_conf(conf: &ServerConf) -> Upstream {
        let options = ConnectorOptions::from_server_conf(conf);
        let pool_size = options.keepalive_pool_size;
        Upstream {
            connector: Connector::new(Some(options)),
            max_resends: conf.max_retries,
            pool_size,
        }
    }
}

impl App {
    /// Builds the connector to the providers from Pingora's server configuration; the first
    /// call wins (the server is built once per process).
    pub fn connect_upstream(&self, conf: &ServerConf) -> &Upstream {
        self.upstream
            .get_or_init(|| Upstream::from_server_conf(conf))
    }

    /// The connector to the providers (Pingora's defaults if no server configuration was given).
    pub fn upstream(&self) -> &Upstream {
        self.upstream
            .get_or_init(|| Upstream::from_server_conf(&ServerConf::default()))
    }
}
