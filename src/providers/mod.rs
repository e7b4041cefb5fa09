//! Providers: where a candidate's request goes and how it authenticates.
//!
//! Every provider is reached through its OpenAI-compatible HTTP API, so kinds differ only in the
//! URL shape ([`Endpoint`]) and the auth headers ([`Credential`]). One small file per kind builds
//! both from config; the proxy never knows which kind it is talking to.

mod anthropic;
mod azure;
pub mod credential;
mod error;
pub mod gcp;
mod google_ai;
pub mod health;
mod openai;
pub mod prompt_cache;
pub mod ratelimit;
pub mod resolve;
pub mod tls;
mod vertex;

use crate::config::{ProviderConfig, ProviderKind};
pub use credential::{Credential, CredentialError};
pub use error::ProviderError;
use gcp::GoogleTokens;
use pingora_core::upstreams::peer::HttpPeer;
use resolve::{HostAddr, ResolveError};
use std::sync::Arc;
use std::time::Duration;

/// How a provider kind maps the client's `/v1/...` path onto the provider's.
#[derive(Debug, Clone, PartialEq)]
pub enum PathStyle {
    /// `{prefix}{path after /v1}` with the client's query string kept.
    Append,
    /// Azure's deployment URLs: `{prefix}/deployments/{model}{path}?api-version=…`.
    AzureDeployment {
        /// The `api-version` query value sturnus sets.
        api_version: String,
    },
}

/// Where a provider lives: scheme, host, port and path prefix.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// Whether the connection uses TLS.
    pub tls: bool,
    /// Host name or IP literal (also the SNI and `Host` header).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Path prefix without a trailing slash, e.g. `/openai/v1`.
    pub prefix: String,
    /// How the rest of the path is built.
    pub style: PathStyle,
}

impl Endpoint {
    /// An endpoint that appends the client's path to `prefix` on an HTTPS host.
    pub fn https(host: impl Into<String>, prefix: impl Into<String>) -> Self {
        Endpoint {
            tls: true,
            host: host.into(),
            port: 443,
            prefix: prefix.into(),
            style: PathStyle::Append,
        }
    }

    /// The same endpoint with scheme, host, port and prefix taken from a configured `base_url`.
    fn overridden_by(mut self, cfg: &ProviderConfig) -> Self {
        if let Some(base) = &cfg.base_url {
            self.tls = base.tls;
            self.host = base.host.clone();
            self.port = base.port;
            self.prefix = base.path.clone();
        }
        self
    }

    /// The `Host` header value: the host, with the port when it is not the scheme's default.
    fn host_header(&self) -> String {
        let default_port = if self.tls { 443 } else { 80 };
        if self.port == default_port {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The upstream path and query for a client path suffix (after `/v1`) and candidate model.
    pub fn path_and_query(&self, suffix: &str, query: Option<&str>, model: &str) -> String {
        match &self.style {
            PathStyle::Append => {
                let query = query.filter(|q| !q.is_empty());
                let len = self.prefix.len() + suffix.len() + query.map_or(0, |q| q.len() + 1);
                let mut out = String::with_capacity(len);
                out.push_str(&self.prefix);
                out.push_str(suffix);
                if let Some(q) = query {
                    out.push('?');
                    out.push_str(q);
                }
                out
            }
            PathStyle::AzureDeployment { api_version } => {
                let mut out = format!(
                    "{}/deployments/{}{}?",
                    self.prefix,
                    percent_encode_segment(model),
                    suffix
                );
                for pair in query.unwrap_or("").split('&') {
                    let key = pair.split('=').next().unwrap_or("");
                    if !pair.is_empty() && key != "api-version" {
                        out.push_str(pair);
                        out.push('&');
                    }
                }
                out.push_str("api-version=");
                out.push_str(&percent_encode_segment(api_version));
                out
            }
        }
    }
}

/// Everything but RFC 3986 unreserved characters: what a path segment, query value or form
/// field must have percent-encoded.
const NOT_UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes everything but RFC 3986 unreserved characters (for a path segment or value).
pub(crate) fn percent_encode_segment(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, NOT_UNRESERVED).to_string()
}

/// How long a request waits for a credential's first fetch (a Google token at startup).
pub const FIRST_CREDENTIAL_WAIT: Duration = Duration::from_secs(5);

/// Builds every configured provider, in order; Vertex providers share one Google token source.
pub fn build_all(configs: &[ProviderConfig]) -> Result<Vec<Arc<Provider>>, ProviderError> {
    let mut google = None;
    configs
        .iter()
        .map(|cfg| Provider::build(cfg, &mut google).map(Arc::new))
        .collect()
}

/// Upstream connection settings shared by every provider.
#[derive(Clone)]
pub struct PeerSettings {
    /// TCP (and TLS) connect timeout.
    pub connect_timeout: Duration,
    /// Maximum silence while waiting for response headers and between body chunks.
    pub read_timeout: Duration,
    /// Certificate authorities trusted for HTTPS providers.
    pub roots: tls::TrustRoots,
}

/// One configured provider, ready to serve: endpoint, cached address and credential.
pub struct Provider {
    /// The `[provider.NAME]` name, used in headers, metrics and `/status`.
    pub name: String,
    /// Where requests go.
    pub endpoint: Endpoint,
    host_value: http::HeaderValue,
    addr: HostAddr,
    credential: Arc<dyn Credential>,
    google: Option<Arc<GoogleTokens>>,
    /// Whether its active health check (if configured) lets it take traffic.
    pub health: health::HealthState,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider")
            .field("name", &self.name)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Provider {
    /// Builds a provider from its config section (a Vertex provider gets its own token source;
    /// [`build_all`] shares one).
    pub fn from_config(cfg: &ProviderConfig) -> Result<Provider, ProviderError> {
        Self::build(cfg, &mut None)
    }

    fn build(
        cfg: &ProviderConfig,
        google: &mut Option<Arc<GoogleTokens>>,
    ) -> Result<Provider, ProviderError> {
        let mut tokens = None;
        let (endpoint, credential) = match &cfg.kind {
            ProviderKind::OpenAiCompatible => openai::build(cfg)?,
            ProviderKind::AzureOpenAi {
                resource_name,
                api_version,
            } => azure::build(cfg, resource_name, api_version)?,
            ProviderKind::GoogleAi { api_version } => google_ai::build(cfg, api_version)?,
            ProviderKind::Anthropic { version } => anthropic::build(cfg, version)?,
            ProviderKind::VertexAi {
                project_id,
                location,
            } => {
                let (endpoint, shared) = vertex::build(cfg, project_id, location, google)?;
                tokens = Some(shared.clone());
                let credential: Arc<dyn Credential> = Arc::new(gcp::BearerToken(shared));
                (endpoint, credential)
            }
        };
        let endpoint = endpoint.overridden_by(cfg);
        let host_header = endpoint.host_header();
        let host_value =
            http::HeaderValue::from_str(&host_header).map_err(|_| ProviderError::HostHeader {
                provider: cfg.name.clone(),
                host: host_header.clone(),
            })?;
        Ok(Provider {
            name: cfg.name.clone(),
            host_value,
            addr: HostAddr::new(&endpoint.host, endpoint.port),
            endpoint,
            credential,
            google: tokens,
            health: health::HealthState::new(cfg.health_check.clone()),
        })
    }

    /// The Google token source behind this provider's credential (Vertex AI only), for the
    /// background refresher.
    pub fn google_tokens(&self) -> Option<&Arc<GoogleTokens>> {
        self.google.as_ref()
    }

    /// The `Host` header value for requests to this provider (host, and port when not the
    /// scheme's default), built once.
    pub fn host_value(&self) -> &http::HeaderValue {
        &self.host_value
    }

    /// Sets this provider's auth headers on an upstream request's header map.
    pub fn authorize(&self, headers: &mut http::HeaderMap) -> Result<(), CredentialError> {
        self.credential.apply(headers)
    }

    /// Checks, without a request at hand, whether the credential can currently authorize one.
    /// While a first token is still being fetched, waits for it at most
    /// [`FIRST_CREDENTIAL_WAIT`]; once it exists this never waits.
    pub async fn credential_ready(&self) -> Result<(), CredentialError> {
        if let Some(pending) = self.credential.pending() {
            pending.wait(FIRST_CREDENTIAL_WAIT).await;
        }
        self.credential.ready()
    }

    /// A Pingora peer for this provider, with the address resolved asynchronously.
    pub async fn peer(&self, settings: &PeerSettings) -> Result<HttpPeer, ResolveError> {
        let addr = self.addr.get().await?;
        let sni = if self.endpoint.tls {
            self.endpoint.host.clone()
        } else {
            String::new()
        };
        let mut peer = HttpPeer::new(addr, self.endpoint.tls, sni);
        let options = &mut peer.options;
        options.connection_timeout = Some(settings.connect_timeout);
        options.total_connection_timeout = Some(settings.connect_timeout);
        options.read_timeout = Some(settings.read_timeout);
        options.write_timeout = Some(settings.read_timeout);
        options.idle_timeout = Some(Duration::from_secs(60));
        if self.endpoint.tls {
            options.ca = Some(settings.roots.clone());
        }
        Ok(peer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(style: PathStyle) -> Endpoint {
        Endpoint {
            tls: true,
            host: "example.com".into(),
            port: 443,
            prefix: "/openai".into(),
            style,
        }
    }

    #[test]
    fn append_keeps_the_query() {
        let e = endpoint(PathStyle::Append);
        assert_eq!(
            e.path_and_query("/chat/completions", Some("a=1&b=2"), "m"),
            "/openai/chat/completions?a=1&b=2"
        );
        assert_eq!(
            e.path_and_query("/embeddings", None, "m"),
            "/openai/embeddings"
        );
    }

    #[test]
    fn azure_deployment_path_encodes_model_and_owns_api_version() {
        let e = endpoint(PathStyle::AzureDeployment {
            api_version: "2024-10-21".into(),
        });
        assert_eq!(
            e.path_and_query(
                "/chat/completions",
                Some("api-version=old&x=1"),
                "gpt 4o/mini"
            ),
            "/openai/deployments/gpt%204o%2Fmini/chat/completions?x=1&api-version=2024-10-21"
        );
    }

    fn built(kind: ProviderKind, key: Option<&str>) -> Provider {
        Provider::from_config(&ProviderConfig {
            name: "p".into(),
            kind,
            base_url: None,
            api_key: key.map(crate::config::Secret::new),
            health_check: None,
        })
        .unwrap()
    }

    /// The derived URL (host header + path) and the auth headers each kind sends.
    fn sent(p: &Provider, suffix: &str, query: Option<&str>, model: &str) -> (String, Vec<String>) {
        let mut sent = http::HeaderMap::new();
        p.authorize(&mut sent).unwrap();
        let mut headers: Vec<String> = sent
            .iter()
            .map(|(k, v)| format!("{k}: {}", v.to_str().unwrap()))
            .collect();
        headers.sort();
        let url = format!(
            "https://{}{}",
            p.host_value().to_str().unwrap(),
            p.endpoint.path_and_query(suffix, query, model)
        );
        (url, headers)
    }

    #[test]
    fn derived_urls_and_auth_headers_per_kind() {
        let azure = built(
            ProviderKind::AzureOpenAi {
                resource_name: "my-res".into(),
                api_version: "2024-10-21".into(),
            },
            Some("az-key"),
        );
        assert_eq!(
            sent(&azure, "/chat/completions", Some("x=1"), "gpt-4o"),
            (
                "https://my-res.openai.azure.com/openai/deployments/gpt-4o/chat/completions?x=1&api-version=2024-10-21".into(),
                vec!["api-key: az-key".into()]
            )
        );
        let azure_v1 = built(
            ProviderKind::AzureOpenAi {
                resource_name: "my-res".into(),
                api_version: "v1".into(),
            },
            Some("az-key"),
        );
        assert_eq!(
            sent(&azure_v1, "/embeddings", None, "gpt-4o").0,
            "https://my-res.openai.azure.com/openai/v1/embeddings"
        );
        let gemini = built(
            ProviderKind::GoogleAi {
                api_version: "v1beta".into(),
            },
            Some("g-key"),
        );
        assert_eq!(
            sent(&gemini, "/chat/completions", None, "gemini-2.5-flash"),
            (
                "https://generativelanguage.googleapis.com/v1beta/openai/chat/completions".into(),
                vec!["authorization: Bearer g-key".into()]
            )
        );
        let claude = built(
            ProviderKind::Anthropic {
                version: "2023-06-01".into(),
            },
            Some("a-key"),
        );
        assert_eq!(
            sent(&claude, "/chat/completions", None, "claude-sonnet-4-5"),
            (
                "https://api.anthropic.com/v1/chat/completions".into(),
                vec![
                    "anthropic-version: 2023-06-01".into(),
                    "x-api-key: a-key".into()
                ]
            )
        );
        let keyless = built(
            ProviderKind::GoogleAi {
                api_version: "v1".into(),
            },
            None,
        );
        assert!(sent(&keyless, "/chat/completions", None, "m").1.is_empty());
    }

    #[test]
    fn host_header_carries_non_default_ports() {
        let mut e = endpoint(PathStyle::Append);
        assert_eq!(e.host_header(), "example.com");
        e.port = 8443;
        assert_eq!(e.host_header(), "example.com:8443");
        e.tls = false;
        e.port = 80;
        assert_eq!(e.host_header(), "example.com");
    }
}
