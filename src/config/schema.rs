//! The resolved, validated configuration types handed to the rest of sturnus.

use super::base_url::BaseUrl;
use super::secret::Secret;
use std::net::SocketAddr;
use std::time::Duration;

/// The whole validated config; immutable once loaded.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address of the main proxy listener (default 127.0.0.1:4000).
    pub listen: SocketAddr,
    /// Optional HTTPS listener (`[listen_tls]`), next to `listen`.
    pub listen_tls: Option<super::listen_tls::ListenTls>,
    /// Optional second listener for metrics; never equal to `listen`.
    pub metrics_listen: Option<SocketAddr>,
    /// Upstream providers, in config order.
    pub providers: Vec<ProviderConfig>,
    /// Model aliases, in config order.
    pub aliases: Vec<AliasConfig>,
    /// Routing and limits tuning.
    pub routing: RoutingConfig,
    /// Client authentication and limits (`[auth]`); `None`: every client is served.
    pub auth: Option<super::auth::AuthConfig>,
}

/// One upstream provider (`[provider.NAME]`).
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    /// The provider's name, matching `[A-Za-z0-9_.-]+` (used in headers and metric labels).
    pub name: String,
    /// Which API dialect it speaks.
    pub kind: ProviderKind,
    /// Explicit base URL; for non-OpenAI kinds it replaces the derived host and path prefix.
    pub base_url: Option<BaseUrl>,
    /// API key, if set and non-empty after expansion.
    pub api_key: Option<Secret>,
    /// Active health check (`health_check = { ... }`); off when `None`.
    pub health_check: Option<HealthCheckConfig>,
}

/// A provider's active health check: a GET of `path` on its host every `interval`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheckConfig {
    /// Path (and optional query) on the provider's host, starting with `/`; the base URL's
    /// path prefix is not prepended.
    pub path: String,
    /// Time between the starts of two checks; also the time one check may take.
    pub interval: Duration,
    /// Consecutive failed checks that take the provider out of rotation.
    pub unhealthy_after: u32,
    /// Consecutive passed checks that bring it back.
    pub healthy_after: u32,
}

impl Default for HealthCheckConfig {
    /// Every 5 s; out after 2 failures, back after 1 pass. The path has no default.
    fn default() -> Self {
        HealthCheckConfig {
            path: String::new(),
            interval: Duration::from_secs(5),
            unhealthy_after: 2,
            healthy_after: 1,
        }
    }
}

/// The API dialect of a provider and the settings that dialect needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderKind {
    /// OpenAI-compatible API (OpenAI, Groq, vLLM, Ollama, ...); needs `base_url`.
    OpenAiCompatible,
    /// Azure OpenAI (`azure_openai = { resource_name, api_version }`).
    AzureOpenAi {
        /// The Azure resource, as in `{resource_name}.openai.azure.com`.
        resource_name: String,
        /// The `api-version` query parameter.
        api_version: String,
    },
    /// Google AI Studio Gemini API (`google_ai = { api_version }`, default v1beta).
    GoogleAi {
        /// The API version path segment.
        api_version: String,
    },
    /// Anthropic Messages API (`anthropic = { version }`, default 2023-06-01).
    Anthropic {
        /// The `anthropic-version` header value.
        version: String,
    },
    /// Google Vertex AI (`vertex_ai = { project_id, location }`); uses OAuth, not API keys.
    VertexAi {
        /// The GCP project id.
        project_id: String,
        /// The GCP region, e.g. us-central1.
        location: String,
    },
}

/// A model alias: the interchangeable candidates a request for `name` may be routed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AliasConfig {
    /// The alias clients ask for.
    pub name: String,
    /// Candidates in config order; never empty, no duplicates.
    pub candidates: Vec<CandidateConfig>,
}

/// One (provider, model) pair an alias may route to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CandidateConfig {
    /// Name of a configured provider.
    pub provider: String,
    /// The upstream model name sent to that provider.
    pub model: String,
}

/// Routing tuning and request limits (`[routing]`).
#[derive(Debug, Clone, PartialEq)]
pub struct RoutingConfig {
    /// EWMA smoothing factor for latency, in (0, 1].
    pub ewma_alpha: f64,
    /// How strongly to favour the fastest candidate, in (0, 20].
    pub exploit_k: f64,
    /// Minimum share of traffic each healthy candidate gets, in [0, 0.5].
    pub probe_floor: f64,
    /// Error rate above which a candidate counts as unhealthy, in (0, 1].
    pub error_threshold: f64,
    /// The routing rule's constants (`[routing.rule.<factor>]`; docs/routing.md lists them).
    pub rule: crate::routing::RuleParams,
    /// Requests without `x-session-affinity` that carry a conversation (opening messages) keep
    /// to one candidate by weighted rendezvous over the shares (docs/routing.md).
    pub prefix_affinity: bool,
    /// Time allowed to connect to an upstream.
    pub connect_timeout: Duration,
    /// Max silence before response headers and between body chunks.
    pub read_timeout: Duration,
    /// Per-request body size cap in bytes.
    pub max_body_bytes: u64,
    /// Aggregate buffering budget in bytes; `None` means derive it at startup (half the
    /// container's memory limit, else 4 × `max_body_bytes`, see `crate::budget`).
    /// `Some(0)` turns the aggregate limit off.
    pub max_buffered_bytes: Option<u64>,
    /// Time allowed to read the request headers.
    pub header_timeout: Duration,
    /// Time allowed to read the request body.
    pub body_timeout: Duration,
}

impl Default for RoutingConfig {
    fn default() -> RoutingConfig {
        RoutingConfig {
            ewma_alpha: 0.4,
            exploit_k: 6.0,
            probe_floor: 0.02,
            error_threshold: 0.5,
            rule: Default::default(),
            prefix_affinity: crate::routing::rendezvous::PREFIX_AFFINITY_DEFAULT,
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(60),
            max_body_bytes: 32 * 1024 * 1024,
            max_buffered_bytes: None,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(60),
        }
    }
}

/// The listen address used when `listen` is absent.
pub(crate) const DEFAULT_LISTEN: &str = "127.0.0.1:4000";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_defaults() {
        let r = RoutingConfig::default();
        // The config defaults are the selector's defaults.
        let p = crate::routing::RoutingParams::default();
        assert_eq!(
            (r.ewma_alpha, r.exploit_k, r.probe_floor, r.error_threshold),
            (p.ewma_alpha, p.exploit_k, p.probe_floor, p.error_threshold)
        );
        assert_eq!(r.ewma_alpha, 0.4);
        assert_eq!(r.exploit_k, 6.0);
        assert_eq!(r.probe_floor, 0.02);
        assert_eq!(r.error_threshold, 0.5);
        assert!(r.prefix_affinity);
        assert_eq!(r.connect_timeout, Duration::from_secs(10));
        assert_eq!(r.read_timeout, Duration::from_secs(60));
        assert_eq!(r.max_body_bytes, 33_554_432);
        assert_eq!(r.max_buffered_bytes, None);
        assert_eq!(r.header_timeout, Duration::from_secs(10));
        assert_eq!(r.body_timeout, Duration::from_secs(60));
    }

    #[test]
    fn default_listen_parses() {
        let addr: SocketAddr = DEFAULT_LISTEN.parse().unwrap();
        assert_eq!(addr.port(), 4000);
    }
}
