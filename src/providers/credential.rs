//! Credentials: how a provider's auth headers are produced, behind one trait.
//!
//! The proxy calls [`Credential::apply`] and never learns whether the value came from a static
//! key in config or from a token that a background service keeps fresh.

use super::gcp::token::TokenUnavailable;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use std::time::Duration;
use tokio::sync::watch;

/// Why a provider cannot be authorized right now (never contains the secret itself). The client
/// gets [`CredentialError::status`] with [`CredentialError::code`]; the request is not forwarded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    /// The credential is fetched in the background and no usable one exists yet (or any more).
    #[error(transparent)]
    NotReady(#[from] TokenUnavailable),
    /// The upstream path and query do not form a valid URI, so no request can carry the
    /// credential.
    #[error("the upstream path is not a valid URI")]
    InvalidUpstreamPath,
}

impl CredentialError {
    /// The HTTP status the client gets: 503, since the provider may be usable again shortly.
    pub fn status(&self) -> u16 {
        503
    }

    /// The `error.code` of the JSON error body the client gets.
    pub fn code(&self) -> &'static str {
        "provider_credentials_unavailable"
    }
}

/// A configured header value that HTTP cannot carry (never shows the value: it is a secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the value for header {name} contains invalid characters")]
pub struct InvalidHeaderValue {
    /// The header's name.
    pub name: &'static str,
}

/// A source of auth headers for one provider.
pub trait Credential: Send + Sync {
    /// Sets the auth headers on an upstream request's header map.
    fn apply(&self, headers: &mut HeaderMap) -> Result<(), CredentialError>;

    /// Whether a request could be authorized now (static keys always can).
    fn ready(&self) -> Result<(), CredentialError> {
        Ok(())
    }

    /// While the first credential is still being obtained in the background: a signal that
    /// fires when that first attempt ends (static keys never pend).
    fn pending(&self) -> Option<Pending> {
        None
    }
}

/// The end of a credential's first fetch, for the first requests to wait on (with a bound).
pub struct Pending(watch::Receiver<bool>);

impl Pending {
    /// Wraps a receiver whose value turns `true` once the first attempt has ended.
    pub fn new(done: watch::Receiver<bool>) -> Self {
        Pending(done)
    }

    /// Waits until the first attempt has ended or `bound` has passed; true if it ended.
    pub async fn wait(mut self, bound: Duration) -> bool {
        matches!(
            tokio::time::timeout(bound, self.0.wait_for(|done| *done)).await,
            Ok(Ok(_))
        )
    }
}

/// Fixed headers built once from config (API keys, version headers).
pub struct StaticHeaders {
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl StaticHeaders {
    /// Headers to set; values marked sensitive so they never show in debug output.
    pub fn new(pairs: Vec<(&'static str, String)>) -> Result<Self, InvalidHeaderValue> {
        let mut headers = Vec::with_capacity(pairs.len());
        for (name, value) in pairs {
            let mut value =
                HeaderValue::from_str(&value).map_err(|_| InvalidHeaderValue { name })?;
            value.set_sensitive(true);
            headers.push((HeaderName::from_static(name), value));
        }
        Ok(StaticHeaders { headers })
    }
}

impl Credential for StaticHeaders {
    fn apply(&self, headers: &mut HeaderMap) -> Result<(), CredentialError> {
        for (name, value) in &self.headers {
            headers.insert(name.clone(), value.clone());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_headers_are_set_and_masked_in_debug() {
        let cred = StaticHeaders::new(vec![("authorization", "Bearer sk-secret".into())]).unwrap();
        let mut headers = HeaderMap::new();
        cred.apply(&mut headers).unwrap();
        assert_eq!(headers["authorization"], "Bearer sk-secret");
        assert!(!format!("{headers:?}").contains("sk-secret"));
    }

    #[tokio::test]
    async fn pending_waits_for_the_first_attempt_with_a_bound() {
        let (tx, rx) = watch::channel(false);
        assert!(
            !Pending::new(rx.clone())
                .wait(Duration::from_millis(20))
                .await
        );
        let waiter = tokio::spawn(Pending::new(rx).wait(Duration::from_secs(30)));
        tx.send_replace(true);
        assert!(waiter.await.unwrap());
    }

    #[test]
    fn credential_errors_answer_503_provider_credentials_unavailable() {
        for err in [
            CredentialError::NotReady(TokenUnavailable::FirstFetchPending),
            CredentialError::InvalidUpstreamPath,
        ] {
            assert_eq!(
                (err.status(), err.code()),
                (503, "provider_credentials_unavailable")
            );
        }
    }

    #[test]
    fn a_credential_error_can_travel_as_the_cause_of_a_pingora_error() {
        let sent = CredentialError::NotReady(TokenUnavailable::RefreshPending);
        let e = pingora_core::Error::because(
            pingora_core::ErrorType::Custom("credential unavailable"),
            "authorizing the upstream request",
            sent.clone(),
        );
        assert_eq!(
            e.root_cause().downcast_ref::<CredentialError>(),
            Some(&sent)
        );
    }

    #[test]
    fn invalid_header_values_are_rejected_without_echoing_them() {
        let err = StaticHeaders::new(vec![("x-api-key", "bad\nkey".into())])
            .err()
            .unwrap()
            .to_string();
        assert_eq!(
            err,
            "the value for header x-api-key contains invalid characters"
        );
    }
}
