//! Service-account key files: a self-signed RS256 JWT exchanged for an access token
//! (OAuth 2.0 JWT bearer grant, RFC 7523).

use super::adc::{optional_field, required_field, token_uri};
use super::error::{FileError, TokenError};
use super::http::{form_encode, TokenRequest};
use super::SCOPE;
use crate::config::BaseUrl;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::Serialize;
use serde_json::Value;

/// The grant type of the JWT bearer flow.
pub const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// Lifetime asked for in the assertion (Google's maximum).
const ASSERTION_LIFETIME_SECS: u64 = 3600;

/// A service account's identity and signing key, read from its JSON key file.
pub struct ServiceAccount {
    email: String,
    key_id: Option<String>,
    key: EncodingKey,
    token_uri: BaseUrl,
}

impl std::fmt::Debug for ServiceAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccount")
            .field("email", &self.email)
            .field("token_uri", &self.token_uri.to_string())
            .finish_non_exhaustive()
    }
}

/// The assertion's claims, as Google's token endpoint expects them.
#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    scope: &'a str,
    aud: String,
    iat: u64,
    exp: u64,
}

impl ServiceAccount {
    /// Reads `client_email`, `private_key`, `private_key_id` and `token_uri` from a key file.
    pub fn from_json(json: &Value) -> Result<ServiceAccount, FileError> {
        let email = required_field(json, "client_email")?.to_string();
        let pem = required_field(json, "private_key")?;
        let key = EncodingKey::from_rsa_pem(pem.as_bytes()).map_err(|_| FileError::PrivateKey)?;
        Ok(ServiceAccount {
            email,
            key_id: optional_field(json, "private_key_id")?.map(str::to_string),
            key,
            token_uri: token_uri(json)?,
        })
    }

    /// The service account's e-mail address (the assertion's issuer).
    pub fn email(&self) -> &str {
        &self.email
    }

    /// Where assertions are exchanged for tokens.
    pub fn token_uri(&self) -> &BaseUrl {
        &self.token_uri
    }

    /// The signed assertion for a token requested at `now` (Unix seconds).
    pub fn assertion(&self, now: u64) -> Result<String, TokenError> {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = self.key_id.clone();
        let claims = Claims {
            iss: &self.email,
            scope: SCOPE,
            aud: self.token_uri.to_string(),
            iat: now,
            exp: now + ASSERTION_LIFETIME_SECS,
        };
        jsonwebtoken::encode(&header, &claims, &self.key).map_err(TokenError::Sign)
    }

    /// The token request for `now` (Unix seconds): the assertion POSTed to `token_uri`.
    pub fn request(&self, now: u64) -> Result<TokenRequest, TokenError> {
        let assertion = self.assertion(now)?;
        Ok(TokenRequest {
            method: "POST",
            url: self.token_uri.clone(),
            headers: vec![],
            form: Some(form_encode(&[
                ("grant_type", JWT_BEARER),
                ("assertion", &assertion),
            ])),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A throwaway 2048-bit RSA key (PKCS#8), used only by these tests.
    const TEST_KEY: &str = include_str!("testdata/test_key.pem");
    /// Its public half.
    const TEST_PUB: &str = include_str!("testdata/test_key.pub.pem");

    fn key_file() -> Value {
        serde_json::json!({
            "type": "service_account",
            "project_id": "p",
            "private_key_id": "kid-1",
            "private_key": TEST_KEY,
            "client_email": "sa@p.iam.gserviceaccount.com",
            "token_uri": "https://oauth2.googleapis.com/token",
        })
    }

    #[test]
    fn assertion_is_signed_with_the_documented_claims() {
        let sa = ServiceAccount::from_json(&key_file()).unwrap();
        let jwt = sa.assertion(1_700_000_000).unwrap();
        let header = jsonwebtoken::decode_header(&jwt).unwrap();
        assert_eq!(header.alg, Algorithm::RS256);
        assert_eq!(header.kid.as_deref(), Some("kid-1"));
        let key = jsonwebtoken::DecodingKey::from_rsa_pem(TEST_PUB.as_bytes()).unwrap();
        let mut v = jsonwebtoken::Validation::new(Algorithm::RS256);
        v.validate_exp = false;
        v.set_audience(&["https://oauth2.googleapis.com/token"]);
        let claims = jsonwebtoken::decode::<Value>(&jwt, &key, &v)
            .unwrap()
            .claims;
        assert_eq!(claims["iss"], "sa@p.iam.gserviceaccount.com");
        assert_eq!(claims["scope"], SCOPE);
        assert_eq!(claims["iat"], 1_700_000_000u64);
        assert_eq!(claims["exp"], 1_700_003_600u64);
    }

    #[test]
    fn request_posts_the_jwt_bearer_grant() {
        let sa = ServiceAccount::from_json(&key_file()).unwrap();
        let req = sa.request(1_700_000_000).unwrap();
        assert_eq!(req.method, "POST");
        assert_eq!(req.url.to_string(), "https://oauth2.googleapis.com/token");
        let form = req.form.unwrap();
        assert!(form.expose().starts_with(
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=ey"
        ));
        assert!(!format!("{sa:?}").contains("PRIVATE"));
    }

    #[test]
    fn bad_key_files_are_named_without_their_contents() {
        let mut f = key_file();
        f["private_key"] =
            "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n".into();
        let err = ServiceAccount::from_json(&f).err().unwrap().to_string();
        assert_eq!(err, "private_key is not a PEM-encoded RSA private key");
        let mut f = key_file();
        f.as_object_mut().unwrap().remove("client_email");
        assert_eq!(
            ServiceAccount::from_json(&f).err().unwrap().to_string(),
            "client_email is missing"
        );
        let mut f = key_file();
        f["client_email"] = 5.into();
        assert_eq!(
            ServiceAccount::from_json(&f).err().unwrap().to_string(),
            "client_email must be a string"
        );
    }
}
