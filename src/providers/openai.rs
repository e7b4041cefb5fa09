//! OpenAI-compatible servers (OpenAI, Groq, vLLM, Ollama, …): `base_url` + optional Bearer key.

use super::credential::{Credential, StaticHeaders};
use super::{Endpoint, PathStyle, ProviderError};
use crate::config::ProviderConfig;
use std::sync::Arc;

/// Endpoint from `base_url` (required for this kind) and a Bearer credential when a key is set.
pub(super) fn build(
    cfg: &ProviderConfig,
) -> Result<(Endpoint, Arc<dyn Credential>), ProviderError> {
    let base = cfg
        .base_url
        .as_ref()
        .ok_or_else(|| ProviderError::MissingBaseUrl {
            provider: cfg.name.clone(),
        })?;
    let endpoint = Endpoint {
        tls: base.tls,
        host: base.host.clone(),
        port: base.port,
        prefix: base.path.clone(),
        style: PathStyle::Append,
    };
    Ok((endpoint, bearer(cfg)?))
}

/// `Authorization: Bearer {api_key}` when a key is configured, nothing otherwise.
pub(super) fn bearer(cfg: &ProviderConfig) -> Result<Arc<dyn Credential>, ProviderError> {
    let pairs = match &cfg.api_key {
        Some(key) => vec![("authorization", format!("Bearer {}", key.expose()))],
        None => vec![],
    };
    Ok(Arc::new(StaticHeaders::new(pairs).map_err(|problem| {
        ProviderError::ApiKey {
            provider: cfg.name.clone(),
            problem,
        }
    })?))
}
