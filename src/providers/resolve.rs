//! Asynchronous, cached host-name resolution for upstream peers.
//!
//! Pingora's `HttpPeer::new` resolves with a blocking `getaddrinfo` on the worker thread and
//! panics on malformed input, so sturnus resolves with tokio and hands Pingora a `SocketAddr`.

use std::net::{IpAddr, SocketAddr};
use std::sync::RwLock;
use std::time::{Duration, Instant};

/// Why a provider host has no address to connect to.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The lookup failed.
    #[error("cannot resolve {host}: {source}")]
    Lookup {
        /// The host name.
        host: String,
        /// The resolver's error.
        source: std::io::Error,
    },
    /// The lookup succeeded with no address.
    #[error("cannot resolve {host}: no addresses")]
    NoAddress {
        /// The host name.
        host: String,
    },
}

/// How long a resolved address is reused before it is looked up again.
const TTL: Duration = Duration::from_secs(30);

/// One provider host's address, looked up lazily and cached for `TTL`.
#[derive(Debug)]
pub struct HostAddr {
    host: String,
    port: u16,
    literal: Option<SocketAddr>,
    cached: RwLock<Option<(SocketAddr, Instant)>>,
}

impl HostAddr {
    /// A host name (or IP literal, with or without brackets) and port to resolve on demand.
    pub fn new(host: &str, port: u16) -> Self {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let literal = bare
            .parse::<IpAddr>()
            .ok()
            .map(|ip| SocketAddr::new(ip, port));
        HostAddr {
            host: bare.to_string(),
            port,
            literal,
            cached: RwLock::new(None),
        }
    }

    /// The address to connect to, resolving only when the cache is empty or stale.
    pub async fn get(&self) -> Result<SocketAddr, ResolveError> {
        if let Some(addr) = self.literal {
            return Ok(addr);
        }
        if let Ok(guard) = self.cached.read() {
            if let Some((addr, at)) = *guard {
                if at.elapsed() < TTL {
                    return Ok(addr);
                }
            }
        }
        let addr = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await
            .map_err(|source| ResolveError::Lookup {
                host: self.host.clone(),
                source,
            })?
            .next()
            .ok_or_else(|| ResolveError::NoAddress {
                host: self.host.clone(),
            })?;
        if let Ok(mut guard) = self.cached.write() {
            *guard = Some((addr, Instant::now()));
        }
        Ok(addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ip_literals_need_no_lookup() {
        assert_eq!(
            HostAddr::new("127.0.0.1", 8080).get().await.unwrap(),
            "127.0.0.1:8080".parse().unwrap()
        );
        assert_eq!(
            HostAddr::new("[::1]", 443).get().await.unwrap(),
            "[::1]:443".parse().unwrap()
        );
    }

    #[tokio::test]
    async fn localhost_resolves_and_is_cached() {
        let host = HostAddr::new("localhost", 9);
        let first = host.get().await.unwrap();
        assert!(first.ip().is_loopback());
        assert_eq!(host.get().await.unwrap(), first);
    }

    #[tokio::test]
    async fn unresolvable_names_are_errors() {
        let err = HostAddr::new("no-such-host.invalid", 443)
            .get()
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot resolve no-such-host.invalid"), "{err}");
    }
}
