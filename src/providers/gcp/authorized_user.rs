//! User credentials from `gcloud auth application-default login`: a refresh-token grant.

use super::adc::{required_field, token_uri};
use super::error::FileError;
use super::http::{form_encode, TokenRequest};
use crate::config::{BaseUrl, Secret};
use serde_json::Value;

/// An OAuth client and a user's refresh token, read from an `authorized_user` file.
pub struct AuthorizedUser {
    client_id: String,
    client_secret: Secret,
    refresh_token: Secret,
    token_uri: BaseUrl,
}

impl std::fmt::Debug for AuthorizedUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthorizedUser")
            .field("client_id", &self.client_id)
            .field("token_uri", &self.token_uri.to_string())
            .finish_non_exhaustive()
    }
}

impl AuthorizedUser {
    /// Reads `client_id`, `client_secret`, `refresh_token` and (optionally) `token_uri`.
    pub fn from_json(json: &Value) -> Result<AuthorizedUser, FileError> {
        Ok(AuthorizedUser {
            client_id: required_field(json, "client_id")?.to_string(),
            client_secret: Secret::new(required_field(json, "client_secret")?),
            refresh_token: Secret::new(required_field(json, "refresh_token")?),
            token_uri: token_uri(json)?,
        })
    }

    /// Where the refresh token is exchanged for access tokens.
    pub fn token_uri(&self) -> &BaseUrl {
        &self.token_uri
    }

    /// The refresh-token grant POSTed to the token endpoint.
    pub fn request(&self) -> TokenRequest {
        TokenRequest {
            method: "POST",
            url: self.token_uri.clone(),
            headers: vec![],
            form: Some(form_encode(&[
                ("grant_type", "refresh_token"),
                ("client_id", &self.client_id),
                ("client_secret", self.client_secret.expose()),
                ("refresh_token", self.refresh_token.expose()),
            ])),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresh_grant_goes_to_the_default_token_endpoint() {
        let user = AuthorizedUser::from_json(&serde_json::json!({
            "type": "authorized_user",
            "client_id": "123.apps.googleusercontent.com",
            "client_secret": "shh",
            "refresh_token": "1//refresh",
        }))
        .unwrap();
        let req = user.request();
        assert_eq!(req.method, "POST");
        assert_eq!(req.url.to_string(), "https://oauth2.googleapis.com/token");
        assert_eq!(
            req.form.unwrap().expose(),
            "grant_type=refresh_token&client_id=123.apps.googleusercontent.com&client_secret=shh&refresh_token=1%2F%2Frefresh"
        );
        let shown = format!("{user:?}");
        assert!(
            !shown.contains("shh") && !shown.contains("refresh\""),
            "{shown}"
        );
    }

    #[test]
    fn missing_fields_are_named() {
        let err = AuthorizedUser::from_json(&serde_json::json!({"client_id": "x"}))
            .err()
            .unwrap()
            .to_string();
        assert_eq!(err, "client_secret is missing");
    }
}
