//! Credentials: how a provider's auth headers are produced, behind one trait.
//!
//! The proxy calls [`Credential::apply`] and never learns whether the value came from a static
//! key in config or from a token that a background service keeps fresh.

use http::header::{HeaderMap, HeaderName, HeaderValue};
use std::time::Duration;
use tokio::sync::watch;

/// Why a provider cannot be authorized right now (never contains the secret itself).
#[derive(Debug, Clone, PartialEq)]
pub struct CredentialError(pub String);

impl std::fmt::Display for CredentialError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
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
    pub fn new(pairs: Vec<(&'static str, String)>) -> Result<Self, String> {
        let mut headers = Vec::with_capacity(pairs.len());
        for (name, value) in pairs {
            let mut value = HeaderValue::from_str(&value)
                .map_err(|_| format!("the value for header {name} contains invalid characters"))?;
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
    fn invalid_header_values_are_rejected_without_echoing_them() {
        let err = StaticHeaders::new(vec![("x-api-key", "bad\nkey".into())])
            .err()
            .unwrap();
        assert!(!err.contains("bad"), "{err}");
    }
}
