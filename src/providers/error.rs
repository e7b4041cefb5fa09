//! Why a configured provider cannot be built at startup; every message names the provider.

use super::credential::InvalidHeaderValue;
use super::gcp::DiscoveryError;

/// Why a `[provider.NAME]` section cannot be turned into a provider (never shows a key).
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// An OpenAI-compatible provider without `base_url`.
    #[error("provider.{provider}: base_url is required")]
    MissingBaseUrl {
        /// The provider's name.
        provider: String,
    },
    /// `api_key` holds characters a header cannot carry.
    #[error("provider.{provider}.api_key: {problem}")]
    ApiKey {
        /// The provider's name.
        provider: String,
        /// Which header it is.
        problem: InvalidHeaderValue,
    },
    /// A fixed header (such as `anthropic-version`) or the key cannot be sent.
    #[error("provider.{provider}: {problem}")]
    Header {
        /// The provider's name.
        provider: String,
        /// Which header it is.
        problem: InvalidHeaderValue,
    },
    /// No usable Google credential for a Vertex AI provider.
    #[error("provider.{provider}: Google credentials: {problem}")]
    Google {
        /// The provider's name.
        provider: String,
        /// Why discovery failed.
        problem: DiscoveryError,
    },
    /// The host cannot be sent as a `Host` header.
    #[error("provider {provider}: host {host:?} is not a valid Host header")]
    HostHeader {
        /// The provider's name.
        provider: String,
        /// The `Host` value.
        host: String,
    },
}
