//! Vertex AI through its OpenAI-compatible endpoint, authorized by OAuth access tokens.

use super::credential::Credential;
use super::Endpoint;
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

/// Vertex AI needs a Google access-token source, which this build does not have yet.
pub(super) fn build(
    cfg: &ProviderConfig,
    project_id: &str,
    location: &str,
) -> Result<(Endpoint, Arc<dyn Credential>), String> {
    let _ = endpoint(project_id, location);
    Err(format!(
        "provider.{}: vertex_ai providers are not supported by this build yet",
        cfg.name
    ))
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
        assert_eq!(endpoint("p1", "global").host, "aiplatform.googleapis.com");
    }
}
