//! Google access tokens for Vertex AI: Application Default Credentials, a token cache the
//! request path reads without waiting, and a Pingora background service that keeps it fresh.
//!
//! - [`adc`]: which credential (key file, gcloud file, metadata server), in ADC order;
//! - [`service_account`], [`authorized_user`], [`metadata`]: each source's token request;
//! - [`http`]: the small HTTP/1.1 client (Pingora's connector) those requests go through;
//! - [`response`]: reading token answers; [`token`]: the cache and its refresh schedule;
//! - [`refresher`]: the background service.

pub mod adc;
pub mod authorized_user;
pub mod error;
pub mod http;
pub mod metadata;
pub mod refresher;
pub mod response;
pub mod service_account;
pub mod token;

use crate::providers::credential::{Credential, CredentialError, Pending};
use adc::Source;
pub use error::{DiscoveryError, FetchError};
use std::sync::Arc;
use std::time::Instant;
use token::TokenCell;

pub use refresher::Refresher;

/// The OAuth scope sturnus asks for.
pub const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// One Google credential and its current token, shared by every Vertex provider.
#[derive(Debug)]
pub struct GoogleTokens {
    source: Source,
    cell: TokenCell,
}

impl GoogleTokens {
    /// Finds the credential in ADC order from the process environment.
    pub fn from_env() -> Result<Arc<GoogleTokens>, DiscoveryError> {
        Self::discover(&|name| std::env::var(name).ok())
    }

    /// Finds the credential in ADC order, reading variables through `env`.
    pub fn discover(
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Arc<GoogleTokens>, DiscoveryError> {
        Ok(Arc::new(GoogleTokens {
            source: Source::discover(env)?,
            cell: TokenCell::new(),
        }))
    }

    /// What sturnus authenticates as and where tokens come from.
    pub fn describe(&self) -> String {
        self.source.describe()
    }

    /// The token cache.
    pub fn cell(&self) -> &TokenCell {
        &self.cell
    }

    /// Fetches one token and stores it; returns when to refresh it. The error names the source
    /// and the failure, never a secret.
    pub async fn fetch(&self, client: &http::HttpClient) -> Result<Instant, FetchError> {
        let started = Instant::now();
        let now = crate::clock::unix_now().as_secs();
        let outcome = async {
            let request = self.source.request(now)?;
            let answer = client.send(&request).await?;
            let fetched = response::parse(answer.status, &answer.body)?;
            self.cell.store(fetched, started)
        }
        .await;
        outcome.map_err(|problem| FetchError {
            from: self.describe(),
            problem,
        })
    }
}

/// The Vertex AI credential: `Authorization: Bearer {access token}` from the shared cache.
pub struct BearerToken(pub Arc<GoogleTokens>);

impl Credential for BearerToken {
    fn apply(&self, headers: &mut ::http::HeaderMap) -> Result<(), CredentialError> {
        let value = self.0.cell.header()?;
        headers.insert(::http::header::AUTHORIZATION, value);
        Ok(())
    }

    fn ready(&self) -> Result<(), CredentialError> {
        self.0.cell.ready()
    }

    fn pending(&self) -> Option<Pending> {
        self.0.cell.pending()
    }
}
