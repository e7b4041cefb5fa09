//! The cached Google access token: the refresher writes it, requests only read it.
//!
//! Reading is a short read-lock and a header clone, so the request path never waits for the
//! network once a token exists. The schedule (when to refresh, until when a token may be used)
//! is a pure function of the fetch time and the token's lifetime.

use super::error::TokenError;
use super::response::Fetched;
use crate::providers::credential::{CredentialError, Pending};
use http::header::HeaderValue;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Refresh when at most this much of a token's life remains (or half of it, if shorter).
pub const REFRESH_MARGIN: Duration = Duration::from_secs(5 * 60);
/// Stop using a token this long before it expires (or an eighth of its life, if shorter), so it
/// cannot expire between leaving sturnus and reaching Google.
pub const USE_MARGIN: Duration = Duration::from_secs(10);

/// When a token fetched at `fetched_at` with `lifetime` should be refreshed and until when it may
/// be used: `(refresh_at, usable_until, expires_at)`.
pub fn schedule(fetched_at: Instant, lifetime: Duration) -> (Instant, Instant, Instant) {
    let expires_at = fetched_at + lifetime;
    let refresh_at = expires_at - REFRESH_MARGIN.min(lifetime / 2);
    let usable_until = expires_at - USE_MARGIN.min(lifetime / 8);
    (refresh_at, usable_until, expires_at)
}

/// Why no usable Google access token exists right now; the fetch error it carries is
/// secret-free.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenUnavailable {
    /// No token yet, and the first fetch is still running.
    #[error("no Google access token yet: the first fetch has not finished")]
    FirstFetchPending,
    /// No token yet, and the last fetch failed.
    #[error("no Google access token: {last_error}")]
    FetchFailed {
        /// Why the last fetch failed.
        last_error: String,
    },
    /// The token expired and its refresh has not ended yet.
    #[error("the Google access token expired and no fresh one has been fetched yet")]
    RefreshPending,
    /// The token expired and the last refresh failed.
    #[error("the Google access token expired and could not be refreshed: {last_error}")]
    RefreshFailed {
        /// Why the last fetch failed.
        last_error: String,
    },
}

/// One access token as an `Authorization` header value, with its schedule.
struct Issued {
    /// `Bearer …`, marked sensitive so it never shows in debug output.
    header: HeaderValue,
    refresh_at: Instant,
    usable_until: Instant,
}

/// The current token (if any), the last fetch error, and whether a first fetch has ended.
pub struct TokenCell {
    current: RwLock<Option<Arc<Issued>>>,
    last_error: RwLock<Option<String>>,
    first_done: watch::Sender<bool>,
}

impl std::fmt::Debug for TokenCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenCell")
            .field("ready", &self.ready().is_ok())
            .finish_non_exhaustive()
    }
}

impl Default for TokenCell {
    fn default() -> Self {
        TokenCell {
            current: RwLock::new(None),
            last_error: RwLock::new(None),
            first_done: watch::channel(false).0,
        }
    }
}

impl TokenCell {
    /// An empty cell: no token yet, first fetch not ended.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores a freshly fetched token (requested at `fetched_at`); returns when to refresh it.
    pub fn store(&self, fetched: Fetched, fetched_at: Instant) -> Result<Instant, TokenError> {
        let mut header = HeaderValue::try_from(format!("Bearer {}", fetched.token.expose()))
            .map_err(|_| TokenError::InvalidToken)?;
        header.set_sensitive(true);
        let (refresh_at, usable_until, _) = schedule(fetched_at, fetched.lifetime);
        let issued = Arc::new(Issued {
            header,
            refresh_at,
            usable_until,
        });
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Some(issued);
        *self.last_error.write().unwrap_or_else(|e| e.into_inner()) = None;
        self.first_done.send_replace(true);
        Ok(refresh_at)
    }

    /// Records a failed fetch (the message must not contain secrets); a usable token stays.
    pub fn fail(&self, why: String) {
        *self.last_error.write().unwrap_or_else(|e| e.into_inner()) = Some(why);
        self.first_done.send_replace(true);
    }

    /// When the current token is due for refresh, if there is one.
    pub fn refresh_at(&self) -> Option<Instant> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|t| t.refresh_at)
    }

    /// The `Authorization` value for a request now, or why there is none.
    pub fn header(&self) -> Result<HeaderValue, CredentialError> {
        let current = self
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match current {
            Some(t) if Instant::now() < t.usable_until => Ok(t.header.clone()),
            stale => Err(self.problem(stale.is_some())),
        }
    }

    /// Whether a usable token exists now.
    pub fn ready(&self) -> Result<(), CredentialError> {
        self.header().map(|_| ())
    }

    /// A signal for the end of the first fetch, while that fetch is still running.
    pub fn pending(&self) -> Option<Pending> {
        if *self.first_done.borrow() {
            return None;
        }
        let rx = self.first_done.subscribe();
        if *rx.borrow() {
            None
        } else {
            Some(Pending::new(rx))
        }
    }

    /// Why no usable token exists: the last fetch error, or that none has finished yet.
    fn problem(&self, had_token: bool) -> CredentialError {
        let last = self
            .last_error
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        CredentialError::NotReady(match (had_token, last) {
            (false, Some(last_error)) => TokenUnavailable::FetchFailed { last_error },
            (true, Some(last_error)) => TokenUnavailable::RefreshFailed { last_error },
            (false, None) => TokenUnavailable::FirstFetchPending,
            (true, None) => TokenUnavailable::RefreshPending,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    fn fetched(token: &str, secs: u64) -> Fetched {
        Fetched {
            token: Secret::new(token),
            lifetime: Duration::from_secs(secs),
        }
    }

    #[test]
    fn an_hour_token_refreshes_five_minutes_early_and_is_used_until_ten_seconds_left() {
        let t0 = Instant::now();
        let (refresh, usable, expires) = schedule(t0, Duration::from_secs(3600));
        assert_eq!(refresh - t0, Duration::from_secs(3300));
        assert_eq!(usable - t0, Duration::from_secs(3590));
        assert_eq!(expires - t0, Duration::from_secs(3600));
    }

    #[test]
    fn short_tokens_refresh_at_half_life() {
        let t0 = Instant::now();
        let (refresh, usable, expires) = schedule(t0, Duration::from_secs(4));
        assert_eq!(refresh - t0, Duration::from_secs(2));
        assert_eq!(usable - t0, Duration::from_millis(3500));
        assert!(refresh < usable && usable < expires);
    }

    #[test]
    fn empty_cell_pends_then_reports_the_fetch_error() {
        let cell = TokenCell::new();
        assert!(cell.pending().is_some());
        let err = cell.ready().unwrap_err();
        assert_eq!(
            err,
            CredentialError::NotReady(TokenUnavailable::FirstFetchPending)
        );
        assert!(err.to_string().contains("first fetch has not finished"));
        cell.fail("fetching from the metadata server failed: refused".into());
        assert!(cell.pending().is_none());
        assert_eq!(
            cell.ready().unwrap_err().to_string(),
            "no Google access token: fetching from the metadata server failed: refused"
        );
    }

    #[test]
    fn stored_token_is_a_sensitive_bearer_header() {
        let cell = TokenCell::new();
        cell.store(fetched("ya29.secret", 3600), Instant::now())
            .unwrap();
        let h = cell.header().unwrap();
        assert_eq!(h, "Bearer ya29.secret");
        assert!(h.is_sensitive());
        assert!(!format!("{h:?} {cell:?}").contains("ya29"));
        // A later failure does not discard a token that is still usable.
        cell.fail("refused".into());
        assert!(cell.ready().is_ok());
    }

    #[test]
    fn expired_tokens_are_not_used() {
        let cell = TokenCell::new();
        let long_ago = Instant::now() - Duration::from_secs(100);
        cell.store(fetched("ya29.old", 60), long_ago).unwrap();
        let err = cell.ready().unwrap_err().to_string();
        assert!(err.contains("expired"), "{err}");
        assert!(!err.contains("ya29"));
        cell.fail("HTTP 500".into());
        assert_eq!(
            cell.ready().unwrap_err().to_string(),
            "the Google access token expired and could not be refreshed: HTTP 500"
        );
    }

    #[test]
    fn tokens_with_bad_characters_are_refused_without_echoing_them() {
        let err = TokenCell::new()
            .store(fetched("bad\ntoken", 60), Instant::now())
            .unwrap_err()
            .to_string();
        assert!(!err.contains("bad"), "{err}");
    }
}
