//! The GCE / GKE metadata server: tokens for the attached service account (on GKE, the Kubernetes
//! service account's Workload Identity), fetched with `Metadata-Flavor: Google`.

use super::error::DiscoveryError;
use super::http::TokenRequest;
use crate::config::BaseUrl;

/// The metadata server's host when `GCE_METADATA_HOST` is not set.
pub const DEFAULT_HOST: &str = "metadata.google.internal";
/// The token path of the default service account.
const TOKEN_PATH: &str = "/computeMetadata/v1/instance/service-accounts/default/token";

/// Where the metadata server answers.
#[derive(Debug, Clone)]
pub struct MetadataServer {
    url: BaseUrl,
}

impl MetadataServer {
    /// The server at `host` (`name` or `name:port`, as in `GCE_METADATA_HOST`).
    pub fn new(host: &str) -> Result<MetadataServer, DiscoveryError> {
        let host = host.trim();
        let host = host.strip_prefix("http://").unwrap_or(host);
        let host = host.trim_end_matches('/');
        if host.is_empty() || host.contains('/') {
            return Err(DiscoveryError::MetadataHost {
                host: host.to_string(),
            });
        }
        let url = BaseUrl::parse(&format!("http://{host}{TOKEN_PATH}")).map_err(|problem| {
            DiscoveryError::MetadataUrl {
                host: host.to_string(),
                problem,
            }
        })?;
        Ok(MetadataServer { url })
    }

    /// `host[:port]` of the server, for messages.
    pub fn host(&self) -> String {
        self.url.host_header()
    }

    /// The token request: a GET with `Metadata-Flavor: Google`.
    pub fn request(&self) -> TokenRequest {
        TokenRequest {
            method: "GET",
            url: self.url.clone(),
            headers: vec![("metadata-flavor", "Google")],
            form: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_and_overridden_hosts() {
        let m = MetadataServer::new(DEFAULT_HOST).unwrap();
        let req = m.request();
        assert_eq!(req.method, "GET");
        assert_eq!(
            req.url.to_string(),
            "http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token"
        );
        assert_eq!(req.headers, vec![("metadata-flavor", "Google")]);
        assert!(req.form.is_none());
        let m = MetadataServer::new("127.0.0.1:8089").unwrap();
        assert_eq!(m.host(), "127.0.0.1:8089");
        assert_eq!(
            MetadataServer::new("http://169.254.169.254/")
                .unwrap()
                .host(),
            "169.254.169.254"
        );
        assert!(MetadataServer::new("a/b").is_err());
        assert!(MetadataServer::new("").is_err());
    }
}
