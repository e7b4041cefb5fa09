//! Google AI Studio (Gemini) through its OpenAI-compatible endpoint, with a Bearer API key.

use super::credential::Credential;
use super::{openai, Endpoint, ProviderError};
use crate::config::ProviderConfig;
use std::sync::Arc;

/// `https://generativelanguage.googleapis.com/{api_version}/openai/{path}` with a Bearer key.
pub(super) fn build(
    cfg: &ProviderConfig,
    api_version: &str,
) -> Result<(Endpoint, Arc<dyn Credential>), ProviderError> {
    let endpoint = Endpoint::https(
        "generativelanguage.googleapis.com",
        format!("/{api_version}/openai"),
    );
    Ok((endpoint, openai::bearer(cfg)?))
}
