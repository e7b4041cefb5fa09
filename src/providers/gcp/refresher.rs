//! The Pingora background service that keeps Google access tokens fresh.
//!
//! It fetches a token at startup, then again when less than five minutes of its life remain
//! (half, for short-lived tokens), so requests never fetch. A failed fetch is logged (without
//! any secret) and retried with exponential backoff; an existing token stays in use while it is
//! valid.

use super::http::HttpClient;
use super::GoogleTokens;
use crate::providers::tls::TrustRoots;
use crate::providers::Provider;
use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// First retry delay after a failed fetch.
const BACKOFF_START: Duration = Duration::from_millis(500);
/// Longest retry delay (also how soon a restored token endpoint is noticed).
const BACKOFF_MAX: Duration = Duration::from_secs(10);
/// Shortest pause between two successful fetches, whatever the token's lifetime.
const MIN_INTERVAL: Duration = Duration::from_millis(250);

/// Keeps every distinct Google credential of the configured providers fresh.
pub struct Refresher {
    sources: Vec<Arc<GoogleTokens>>,
    roots: TrustRoots,
}

impl Refresher {
    /// A refresher for the providers' Google credentials, or `None` when no provider has one.
    pub fn for_providers(providers: &[Arc<Provider>], roots: TrustRoots) -> Option<Refresher> {
        let mut sources: Vec<Arc<GoogleTokens>> = Vec::new();
        for tokens in providers.iter().filter_map(|p| p.google_tokens()) {
            if !sources.iter().any(|s| Arc::ptr_eq(s, tokens)) {
                sources.push(tokens.clone());
            }
        }
        (!sources.is_empty()).then_some(Refresher { sources, roots })
    }
}

#[async_trait]
impl BackgroundService for Refresher {
    async fn start(&self, shutdown: ShutdownWatch) {
        let client = Arc::new(HttpClient::new(self.roots.clone()));
        let mut tasks = tokio::task::JoinSet::new();
        for tokens in &self.sources {
            tasks.spawn(keep_fresh(tokens.clone(), client.clone(), shutdown.clone()));
        }
        while tasks.join_next().await.is_some() {}
    }
}

/// The delay before retry number `failures` (1-based): 0.5 s, 1 s, 2 s, … up to 10 s.
pub fn backoff(failures: u32) -> Duration {
    let factor = 1u32 << failures.saturating_sub(1).min(16);
    (BACKOFF_START * factor).min(BACKOFF_MAX)
}

/// Fetches, stores and schedules the next fetch for one credential until shutdown.
async fn keep_fresh(
    tokens: Arc<GoogleTokens>,
    client: Arc<HttpClient>,
    mut shutdown: ShutdownWatch,
) {
    let mut failures: u32 = 0;
    let mut obtained_once = false;
    loop {
        if *shutdown.borrow() {
            return;
        }
        let next = tokio::select! {
            result = tokens.fetch(&client) => match result {
                Ok(refresh_at) => {
                    if failures > 0 || !obtained_once {
                        log::info!("Google access token obtained from {}", tokens.describe());
                    }
                    obtained_once = true;
                    let wait = refresh_at.saturating_duration_since(Instant::now());
                    log::debug!("next Google token refresh in {:.1}s", wait.as_secs_f64());
                    failures = 0;
                    wait.max(MIN_INTERVAL)
                }
                Err(why) => {
                    failures += 1;
                    let delay = backoff(failures);
                    log::warn!(
                        "{why} (attempt {failures}; retrying in {:.1}s)",
                        delay.as_secs_f64()
                    );
                    tokens.cell().fail(why.to_string());
                    delay
                }
            },
            _ = shutdown.changed() => return,
        };
        tokio::select! {
            _ = tokio::time::sleep(next) => {}
            _ = shutdown.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let delays: Vec<u64> = (1..=8).map(|n| backoff(n).as_millis() as u64).collect();
        assert_eq!(
            delays,
            vec![500, 1000, 2000, 4000, 8000, 10000, 10000, 10000]
        );
        assert_eq!(backoff(u32::MAX), BACKOFF_MAX);
    }
}
