//! Who the client is and what it may do: the credential of a request (static key or JWT)
//! checked against `[auth]`, decided before admission. Nothing after this room sees the
//! credential: it names a [`Client`], and the provider never receives it
//! (`proxy::upstream_request` drops the headers it travels in).

pub mod jwt;
pub mod limits;

use crate::config::{AuthConfig, ClientLimits};
use http::HeaderMap;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// An authenticated client: its configured name and what it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    /// The configured name (a static key's `name`, a JWT's name claim): what logs and metrics
    /// show, never the credential.
    pub name: Arc<str>,
    /// The aliases it may use; `None`: every alias.
    pub aliases: Option<Vec<String>>,
    /// Its limits.
    pub limits: ClientLimits,
}

impl Client {
    /// Whether the client may ask for `alias`.
    pub fn may_use(&self, alias: &str) -> bool {
        self.aliases
            .as_ref()
            .is_none_or(|list| list.iter().any(|a| a == alias))
    }
}

/// Why a request's credential was not accepted (answered with 401 `invalid_api_key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// No credential in `Authorization: Bearer`, `api-key` or `x-api-key`.
    Missing,
    /// A credential that is no configured key and not a token.
    Unknown,
    /// Something that looks like a token but cannot be parsed as one.
    Malformed,
    /// A token that was refused, and why.
    Jwt(&'static str),
}

impl Refused {
    /// The message of the 401 answer (never shows the credential).
    pub fn message(&self) -> String {
        match self {
            Refused::Missing => "Missing API key: send it as `Authorization: Bearer <key>`, \
                                 `api-key` or `x-api-key`"
                .to_string(),
            Refused::Unknown => "Incorrect API key provided".to_string(),
            Refused::Malformed => "Incorrect API key provided: not a valid token".to_string(),
            Refused::Jwt(why) => format!("The token is not accepted: {why}"),
        }
    }
}

/// `[auth]` made ready: the static keys by hash, the JWT verifier, the limits.
pub struct Gate {
    keys: ByDigest,
    jwt: Option<jwt::Verifier>,
    allow_anonymous: bool,
    /// The per-client limits' shared counters.
    pub limiter: limits::Limiter,
}

/// Static keys' clients by the keys' SHA-256. A digest is already spread evenly, and no one can
/// pick a key whose digest lands on another's, so the map hashes a digest by its first 8 bytes
/// rather than hashing it again on every request.
type ByDigest = HashMap<[u8; 32], Arc<Client>, BuildHasherDefault<DigestHasher>>;

/// The hasher of [`ByDigest`]: a digest's first 8 bytes.
#[derive(Default)]
struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut first = [0u8; 8];
        let n = bytes.len().min(first.len());
        first[..n].copy_from_slice(&bytes[..n]);
        self.0 ^= u64::from_le_bytes(first);
    }

    /// The array's length, written before its bytes: the same for every digest.
    fn write_usize(&mut self, _: usize) {}
}

impl Gate {
    /// Builds the gate from `[auth]`, loading the JWT keys it names.
    pub fn new(config: &AuthConfig) -> Result<Gate, jwt::KeyError> {
        let keys = config
            .keys
            .iter()
            .map(|k| {
                let client = Client {
                    name: Arc::from(k.name.as_str()),
                    aliases: k.aliases.clone(),
                    limits: k.limits,
                };
                (k.sha256, Arc::new(client))
            })
            .collect();
        let jwt = config.jwt.as_ref().map(jwt::Verifier::load).transpose()?;
        Ok(Gate {
            keys,
            jwt,
            allow_anonymous: config.allow_anonymous,
            limiter: limits::Limiter::new(),
        })
    }

    /// The client a request's headers authenticate, at `now` (seconds since the Unix epoch,
    /// for token expiry); `None` for an anonymous request that `allow_anonymous` lets in.
    pub fn authenticate(
        &self,
        headers: &HeaderMap,
        now: u64,
    ) -> Result<Option<Arc<Client>>, Refused> {
        let Some(credential) = credential(headers) else {
            return if self.allow_anonymous {
                Ok(None)
            } else {
                Err(Refused::Missing)
            };
        };
        if let Some(client) = self.keys.get(&sha256(credential.as_bytes())) {
            return Ok(Some(client.clone()));
        }
        match &self.jwt {
            Some(jwt) if looks_like_a_token(credential) => {
                jwt.verify(credential, now).map(|c| Some(Arc::new(c)))
            }
            _ => Err(Refused::Unknown),
        }
    }
}

/// The client's credential, where OpenAI (`Authorization: Bearer`), Azure (`api-key`) and
/// Anthropic (`x-api-key`) SDKs put it, in that order.
pub fn credential(headers: &HeaderMap) -> Option<&str> {
    let bearer = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
    bearer
        .or_else(|| header(headers, "api-key"))
        .or_else(|| header(headers, "x-api-key"))
        .filter(|c| !c.is_empty())
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// Three dot-separated parts: a compact JWS.
fn looks_like_a_token(credential: &str) -> bool {
    credential.bytes().filter(|b| *b == b'.').count() == 2
}

/// Whether a client name is safe in a metric label and a log line.
pub fn is_loggable_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.:@-".contains(&b))
}

/// SHA-256 of a key: the only form in which sturnus keeps a static key.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StaticKey;

    fn gate(allow_anonymous: bool) -> Gate {
        Gate::new(&AuthConfig {
            allow_anonymous,
            keys: vec![StaticKey {
                name: "billing".into(),
                sha256: sha256(b"sk-billing"),
                aliases: Some(vec!["fast".into()]),
                limits: ClientLimits::default(),
            }],
            jwt: None,
        })
        .unwrap()
    }

    fn headers(name: &str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
        h
    }

    #[test]
    fn the_sha256_of_test_is_the_known_digest() {
        assert_eq!(
            hex::encode(sha256(b"test")),
            "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
        );
    }

    #[test]
    fn a_key_is_accepted_where_each_sdk_sends_it() {
        let g = gate(false);
        for (name, value) in [
            ("authorization", "Bearer sk-billing"),
            ("authorization", "bearer  sk-billing "),
            ("api-key", "sk-billing"),
            ("x-api-key", "sk-billing"),
        ] {
            let client = g.authenticate(&headers(name, value), 0).unwrap().unwrap();
            assert_eq!(&*client.name, "billing", "{name}: {value}");
            assert!(client.may_use("fast") && !client.may_use("slow"));
        }
    }

    #[test]
    fn a_digest_hashes_as_its_first_eight_bytes_and_each_of_many_keys_is_found() {
        use std::hash::BuildHasher;
        let digest = sha256(b"sk-billing");
        let first = u64::from_le_bytes(digest[..8].try_into().unwrap());
        assert_eq!(
            BuildHasherDefault::<DigestHasher>::default().hash_one(digest),
            first
        );
        let keys: Vec<StaticKey> = (0..500)
            .map(|i| StaticKey {
                name: format!("client-{i}"),
                sha256: sha256(format!("sk-{i}").as_bytes()),
                aliases: None,
                limits: ClientLimits::default(),
            })
            .collect();
        let g = Gate::new(&AuthConfig {
            allow_anonymous: false,
            keys,
            jwt: None,
        })
        .unwrap();
        for i in [0, 1, 250, 499] {
            let found = g.authenticate(&headers("x-api-key", &format!("sk-{i}")), 0);
            assert_eq!(&*found.unwrap().unwrap().name, format!("client-{i}"));
        }
        let unknown = g.authenticate(&headers("x-api-key", "sk-500"), 0);
        assert_eq!(unknown, Err(Refused::Unknown));
    }

    #[test]
    fn missing_and_wrong_keys_are_refused_unless_anonymous_is_allowed() {
        let g = gate(false);
        assert_eq!(g.authenticate(&HeaderMap::new(), 0), Err(Refused::Missing));
        assert_eq!(
            g.authenticate(&headers("authorization", "Basic abc"), 0),
            Err(Refused::Missing)
        );
        assert_eq!(
            g.authenticate(&headers("x-api-key", "sk-wrong"), 0),
            Err(Refused::Unknown)
        );
        let open = gate(true);
        assert_eq!(open.authenticate(&HeaderMap::new(), 0), Ok(None));
        assert_eq!(
            open.authenticate(&headers("x-api-key", "sk-wrong"), 0),
            Err(Refused::Unknown)
        );
        assert!(!Refused::Unknown.message().contains("sk-wrong"));
    }
}
