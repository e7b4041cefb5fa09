//! JSON Web Tokens: the verification keys (PEM files, a JWKS file or a shared secret), loaded
//! once at start-up, and the check of one token against them at an instant the caller gives.

use super::{Client, Refused};
use crate::config::{JwtConfig, JwtKeySource};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use std::sync::Arc;

/// Seconds a token is still accepted after its `exp` (and before its `nbf`): clock skew
/// between the issuer and this host.
pub const LEEWAY_SECS: u64 = 30;

/// The kinds of signature key; a key verifies only algorithms of its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Hmac,
    Rsa,
    Ec,
    Ed,
}

impl Family {
    fn of(alg: Algorithm) -> Family {
        use Algorithm::*;
        match alg {
            HS256 | HS384 | HS512 => Family::Hmac,
            RS256 | RS384 | RS512 | PS256 | PS384 | PS512 => Family::Rsa,
            ES256 | ES384 => Family::Ec,
            EdDSA => Family::Ed,
        }
    }
}

/// One verification key.
struct Key {
    /// Its `kid` (JWKS keys that name one).
    kid: Option<String>,
    family: Family,
    key: DecodingKey,
}

/// Why the configured keys cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// A key file cannot be read.
    #[error("auth.jwt: cannot read {path}: {why}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        why: std::io::Error,
    },
    /// A key file holds no key usable with the configured algorithms.
    #[error("auth.jwt: {path}: {why}")]
    Unusable {
        /// The file.
        path: String,
        /// What is wrong with it.
        why: String,
    },
}

/// Checks tokens against `[auth.jwt]`.
pub struct Verifier {
    keys: Vec<Key>,
    /// One validation per accepted algorithm (a key verifies only its own kind).
    validations: Vec<(Algorithm, Validation)>,
    name_claim: String,
    aliases_claim: Option<String>,
    limits: crate::config::ClientLimits,
}

impl Verifier {
    /// Loads the keys `config` names.
    pub fn load(config: &JwtConfig) -> Result<Verifier, KeyError> {
        let families: Vec<Family> = config.algorithms.iter().map(|a| Family::of(*a)).collect();
        let keys = match &config.keys {
            JwtKeySource::Secret(secret) => vec![Key {
                kid: None,
                family: Family::Hmac,
                key: DecodingKey::from_secret(secret.expose().as_bytes()),
            }],
            JwtKeySource::Pem(paths) => {
                let mut keys = Vec::new();
                for path in paths {
                    keys.push(pem_key(path, &families)?);
                }
                keys
            }
            JwtKeySource::Jwks(path) => jwks_keys(path, &families)?,
        };
        let validations = config
            .algorithms
            .iter()
            .map(|alg| (*alg, validation(*alg, config)))
            .collect();
        Ok(Verifier {
            keys,
            validations,
            name_claim: config.name_claim.clone(),
            aliases_claim: config.aliases_claim.clone(),
            limits: config.limits,
        })
    }

    /// The client a token names, when it is valid at `now` (seconds since the Unix epoch).
    pub fn verify(&self, token: &str, now: u64) -> Result<Client, Refused> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| Refused::Malformed)?;
        let Some((_, validation)) = self.validations.iter().find(|(a, _)| *a == header.alg) else {
            return Err(Refused::Jwt("its algorithm is not accepted"));
        };
        let family = Family::of(header.alg);
        let candidates: Vec<&Key> = self
            .keys
            .iter()
            .filter(|k| k.family == family)
            .filter(|k| match (&header.kid, &k.kid) {
                (Some(want), Some(have)) => want == have,
                _ => true,
            })
            .collect();
        if candidates.is_empty() {
            return Err(match header.kid {
                Some(_) => Refused::Jwt("its kid names no configured key"),
                None => Refused::Jwt("no configured key verifies its algorithm"),
            });
        }
        let mut last = Refused::Jwt("its signature does not verify");
        for key in candidates {
            match jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, validation) {
                Ok(data) => return self.client(&data.claims, now),
                Err(e) => last = refusal(&e),
            }
            if !matches!(last, Refused::Jwt("its signature does not verify")) {
                return Err(last);
            }
        }
        Err(last)
    }

    /// The client named by verified claims, once `exp` and `nbf` hold at `now`.
    fn client(&self, claims: &Map<String, Value>, now: u64) -> Result<Client, Refused> {
        let exp = claims.get("exp").and_then(Value::as_u64);
        if exp.is_none_or(|exp| now > exp.saturating_add(LEEWAY_SECS)) {
            return Err(Refused::Jwt("it has expired"));
        }
        if let Some(nbf) = claims.get("nbf").and_then(Value::as_u64) {
            if now.saturating_add(LEEWAY_SECS) < nbf {
                return Err(Refused::Jwt("it is not valid yet (nbf)"));
            }
        }
        let name = claims
            .get(&self.name_claim)
            .and_then(Value::as_str)
            .filter(|n| super::is_loggable_name(n))
            .ok_or(Refused::Jwt(
                "its name claim is missing or not a usable name",
            ))?;
        let aliases = self
            .aliases_claim
            .as_ref()
            .map(|claim| match claims.get(claim) {
                Some(Value::Array(items)) => items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect(),
                Some(Value::String(list)) => list.split_whitespace().map(str::to_string).collect(),
                _ => Vec::new(),
            });
        Ok(Client {
            name: Arc::from(name),
            aliases,
            limits: self.limits,
        })
    }
}

/// The validation for tokens signed with `alg`: issuer, audience and the presence of `exp`
/// (checked by [`Verifier::client`] against the caller's clock).
fn validation(alg: Algorithm, config: &JwtConfig) -> Validation {
    let mut v = Validation::new(alg);
    v.set_issuer(&[&config.issuer]);
    v.set_audience(&[&config.audience]);
    v.set_required_spec_claims(&["exp", "iss", "aud"]);
    v.validate_exp = false;
    v.validate_nbf = false;
    v.leeway = 0;
    v
}

/// The answer for a token `jsonwebtoken` refused.
fn refusal(e: &jsonwebtoken::errors::Error) -> Refused {
    use jsonwebtoken::errors::ErrorKind as K;
    Refused::Jwt(match e.kind() {
        K::InvalidSignature => "its signature does not verify",
        K::InvalidAudience => "it is not for this audience (aud)",
        K::InvalidIssuer => "it is not from the configured issuer (iss)",
        K::MissingRequiredClaim(_) => "it lacks exp, iss or aud",
        K::InvalidAlgorithm => "its algorithm is not accepted",
        _ => "it is malformed",
    })
}

/// Reads a file, naming it on failure.
fn read(path: &std::path::Path) -> Result<Vec<u8>, KeyError> {
    std::fs::read(path).map_err(|why| KeyError::Read {
        path: path.display().to_string(),
        why,
    })
}

/// A PEM public key usable with one of `families`.
fn pem_key(path: &std::path::Path, families: &[Family]) -> Result<Key, KeyError> {
    let pem = read(path)?;
    for family in families {
        let key = match family {
            Family::Rsa => DecodingKey::from_rsa_pem(&pem),
            Family::Ec => DecodingKey::from_ec_pem(&pem),
            Family::Ed => DecodingKey::from_ed_pem(&pem),
            Family::Hmac => continue,
        };
        if let Ok(key) = key {
            return Ok(Key {
                kid: None,
                family: *family,
                key,
            });
        }
    }
    Err(KeyError::Unusable {
        path: path.display().to_string(),
        why: "not a PEM public key for the configured algorithms".to_string(),
    })
}

/// The keys of a JWKS file usable with `families`.
fn jwks_keys(path: &std::path::Path, families: &[Family]) -> Result<Vec<Key>, KeyError> {
    let unusable = |why: String| KeyError::Unusable {
        path: path.display().to_string(),
        why,
    };
    let set: jsonwebtoken::jwk::JwkSet = serde_json::from_slice(&read(path)?)
        .map_err(|e| unusable(format!("not a JWKS document: {e}")))?;
    let mut keys = Vec::new();
    for jwk in &set.keys {
        use jsonwebtoken::jwk::AlgorithmParameters as P;
        let family = match &jwk.algorithm {
            P::RSA(_) => Family::Rsa,
            P::EllipticCurve(_) => Family::Ec,
            P::OctetKeyPair(_) => Family::Ed,
            P::OctetKey(_) => continue,
        };
        if !families.contains(&family) {
            continue;
        }
        let key = DecodingKey::from_jwk(jwk).map_err(|e| unusable(format!("a key: {e}")))?;
        keys.push(Key {
            kid: jwk.common.key_id.clone(),
            family,
            key,
        });
    }
    if keys.is_empty() {
        return Err(unusable("no key for the configured algorithms".to_string()));
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ClientLimits, Secret};
    use jsonwebtoken::{encode, EncodingKey, Header};

    fn verifier(aliases_claim: Option<&str>) -> Verifier {
        Verifier::load(&JwtConfig {
            issuer: "https://issuer.example".into(),
            audience: "sturnus".into(),
            algorithms: vec![Algorithm::HS256],
            keys: JwtKeySource::Secret(Secret::new("s3cret")),
            name_claim: "sub".into(),
            aliases_claim: aliases_claim.map(str::to_string),
            limits: ClientLimits::default(),
        })
        .unwrap()
    }

    fn token(claims: Value, secret: &str) -> String {
        encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(secret.as_bytes()),
        )
        .unwrap()
    }

    fn claims(exp: u64) -> Value {
        serde_json::json!({"iss": "https://issuer.example", "aud": "sturnus", "sub": "svc-a",
            "exp": exp, "sturnus_aliases": ["fast"]})
    }

    #[test]
    fn a_good_token_names_its_client_and_its_aliases() {
        let v = verifier(Some("sturnus_aliases"));
        let client = v.verify(&token(claims(1_000), "s3cret"), 900).unwrap();
        assert_eq!(&*client.name, "svc-a");
        assert!(client.may_use("fast") && !client.may_use("slow"));
        let all = verifier(None)
            .verify(&token(claims(1_000), "s3cret"), 900)
            .unwrap();
        assert!(all.may_use("slow"));
    }

    #[test]
    fn expiry_is_checked_against_the_callers_clock_with_a_small_leeway() {
        let v = verifier(None);
        let t = token(claims(1_000), "s3cret");
        assert!(v.verify(&t, 1_000 + LEEWAY_SECS).is_ok());
        assert_eq!(
            v.verify(&t, 1_001 + LEEWAY_SECS).unwrap_err(),
            Refused::Jwt("it has expired")
        );
    }

    #[test]
    fn wrong_signature_audience_and_issuer_are_refused() {
        let v = verifier(None);
        assert_eq!(
            v.verify(&token(claims(1_000), "other"), 0).unwrap_err(),
            Refused::Jwt("its signature does not verify")
        );
        let mut c = claims(1_000);
        c["aud"] = "someone-else".into();
        assert_eq!(
            v.verify(&token(c, "s3cret"), 0).unwrap_err(),
            Refused::Jwt("it is not for this audience (aud)")
        );
        let mut c = claims(1_000);
        c["iss"] = "https://evil.example".into();
        assert!(v.verify(&token(c, "s3cret"), 0).is_err());
        assert_eq!(v.verify("not-a-token", 0).unwrap_err(), Refused::Malformed);
    }
}
