//! Anthropic through its OpenAI-compatible endpoint: `x-api-key` plus `anthropic-version`.

use super::credential::{Credential, StaticHeaders};
use super::{Endpoint, ProviderError};
use crate::config::ProviderConfig;
use std::sync::Arc;

/// `https://api.anthropic.com/v1/{path}` with `x-api-key` and `anthropic-version` headers.
pub(super) fn build(
    cfg: &ProviderConfig,
    version: &str,
) -> Result<(Endpoint, Arc<dyn Credential>), ProviderError> {
    let endpoint = Endpoint::https("api.anthropic.com", "/v1");
    let mut pairs = vec![("anthropic-version", version.to_string())];
    if let Some(key) = &cfg.api_key {
        pairs.push(("x-api-key", key.expose().to_string()));
    }
    let credential = StaticHeaders::new(pairs).map_err(|problem| ProviderError::Header {
        provider: cfg.name.clone(),
        problem,
    })?;
    Ok((endpoint, Arc::new(credential)))
}
