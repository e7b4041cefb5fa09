//! Azure OpenAI: deployment URLs with `api-version`, or the v1 API; auth by `api-key` header.

use super::credential::{Credential, StaticHeaders};
use super::{Endpoint, PathStyle, ProviderError};
use crate::config::ProviderConfig;
use std::sync::Arc;

/// `https://{resource}.openai.azure.com/openai/deployments/{model}/…?api-version=…`, or with
/// `api_version = "v1"` the v1 API `…/openai/v1/{path}` that takes the model from the body.
pub(super) fn build(
    cfg: &ProviderConfig,
    resource_name: &str,
    api_version: &str,
) -> Result<(Endpoint, Arc<dyn Credential>), ProviderError> {
    let host = format!("{resource_name}.openai.azure.com");
    let mut endpoint = Endpoint::https(host, "/openai");
    if api_version == "v1" {
        endpoint.prefix = "/openai/v1".into();
    } else {
        endpoint.style = PathStyle::AzureDeployment {
            api_version: api_version.to_string(),
        };
    }
    let pairs = match &cfg.api_key {
        Some(key) => vec![("api-key", key.expose().to_string())],
        None => vec![],
    };
    let credential = StaticHeaders::new(pairs).map_err(|problem| ProviderError::ApiKey {
        provider: cfg.name.clone(),
        problem,
    })?;
    Ok((endpoint, Arc::new(credential)))
}
