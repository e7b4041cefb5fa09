//! Vertex AI through its OpenAI-compatible endpoint, authorized by Google OAuth access tokens
//! (Application Default Credentials, kept fresh by [`super::gcp::Refresher`]).

use super::gcp::GoogleTokens;
use super::{Endpoint, ProviderError};
use crate::config::ProviderConfig;
use std::sync::Arc;

/// `https://{location}-aiplatform.googleapis.com/v1/projects/{p}/locations/{l}/endpoints/openapi`
/// (`aiplatform.googleapis.com` for the `global` location).
pub(super) fn endpoint(project_id: &str, location: &str) -> Endpoint {
    let host = if location == "global" {
        "aiplatform.googleapis.com".to_string()
    } else {
        format!("{location}-aiplatform.googleapis.com")
    };
    Endpoint::https(
        host,
        format!("/v1/projects/{project_id}/locations/{location}/endpoints/openapi"),
    )
}

/// The endpoint plus the process's Google token source (the credential is a Bearer token from
/// it), discovered once in ADC order and shared through `google` by every Vertex provider.
pub(super) fn build(
    cfg: &ProviderConfig,
    project_id: &str,
    location: &str,
    google: &mut Option<Arc<GoogleTokens>>,
) -> Result<(Endpoint, Arc<GoogleTokens>), ProviderError> {
    let tokens = match google {
        Some(tokens) => tokens.clone(),
        None => {
            let tokens = GoogleTokens::from_env().map_err(|problem| ProviderError::Google {
                provider: cfg.name.clone(),
                problem,
            })?;
            log::info!(
                "provider.{}: Vertex AI tokens come from {}",
                cfg.name,
                tokens.describe()
            );
            *google = Some(tokens.clone());
            tokens
        }
    };
    Ok((endpoint(project_id, location), tokens))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regional_and_global_hosts() {
        let e = endpoint("p1", "us-central1");
        assert_eq!(e.host, "us-central1-aiplatform.googleapis.com");
        assert_eq!(
            e.prefix,
            "/v1/projects/p1/locations/us-central1/endpoints/openapi"
        );
        assert_eq!(
            e.path_and_query("/chat/completions", None, "google/gemini-2.5-flash"),
            "/v1/projects/p1/locations/us-central1/endpoints/openapi/chat/completions"
        );
        let g = endpoint("p1", "global");
        assert_eq!(g.host, "aiplatform.googleapis.com");
        assert_eq!(
            g.prefix,
            "/v1/projects/p1/locations/global/endpoints/openapi"
        );
    }
}
