//! Reading token endpoint answers: `{"access_token","expires_in","token_type"}` on success,
//! OAuth's `{"error","error_description"}` on failure. Error messages never carry the token.

use super::error::AnswerError;
use crate::config::Secret;
use serde_json::Value;
use std::time::Duration;

/// Lifetime assumed when an answer has no `expires_in` (Google's tokens live an hour).
const DEFAULT_LIFETIME: Duration = Duration::from_secs(3600);

/// A token as the endpoint issued it.
pub struct Fetched {
    /// The access token itself.
    pub token: Secret,
    /// How long it is valid from the moment it was requested.
    pub lifetime: Duration,
}

/// Turns an HTTP status and body from a token endpoint into a token or a secret-free error.
pub fn parse(status: u16, body: &[u8]) -> Result<Fetched, AnswerError> {
    let json: Option<Value> = serde_json::from_slice(body).ok();
    if status != 200 {
        return Err(match json.as_ref().and_then(oauth_error) {
            Some(detail) => AnswerError::Refused { status, detail },
            None => AnswerError::Failed {
                status,
                excerpt: text_snippet(body),
            },
        });
    }
    let json = json.ok_or(AnswerError::NotJson)?;
    let token = json
        .get("access_token")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or(AnswerError::NoAccessToken)?;
    if let Some(kind) = json.get("token_type").and_then(Value::as_str) {
        if !kind.eq_ignore_ascii_case("bearer") {
            return Err(AnswerError::TokenType {
                kind: kind.chars().take(20).collect(),
            });
        }
    }
    let lifetime = match json.get("expires_in") {
        None => DEFAULT_LIFETIME,
        Some(v) => v
            .as_f64()
            .filter(|s| s.is_finite() && *s >= 0.0 && *s < 1e9)
            .map(Duration::from_secs_f64)
            .ok_or(AnswerError::ExpiresIn)?,
    };
    Ok(Fetched {
        token: Secret::new(token),
        lifetime,
    })
}

/// `error: error_description` from an OAuth error answer, cut to a sane length.
fn oauth_error(json: &Value) -> Option<String> {
    let error = json.get("error")?;
    let code = match error {
        Value::String(s) => s.clone(),
        // Google APIs' own shape: {"error":{"code":…,"message":…,"status":…}}.
        Value::Object(o) => o
            .get("status")
            .or_else(|| o.get("message"))
            .and_then(Value::as_str)
            .unwrap_or("error")
            .to_string(),
        _ => return None,
    };
    let mut out = code;
    if let Some(d) = json.get("error_description").and_then(Value::as_str) {
        out.push_str(": ");
        out.push_str(d);
    }
    Some(out.chars().take(300).collect())
}

/// `: first line` of a short plain-text error body (metadata servers answer in text).
fn text_snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let line = text.lines().next().unwrap_or("").trim();
    if line.is_empty() {
        String::new()
    } else {
        format!(": {}", line.chars().take(120).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_answers() {
        let f = parse(
            200,
            br#"{"access_token":"ya29.a","expires_in":3599,"token_type":"Bearer"}"#,
        )
        .unwrap();
        assert_eq!(f.token.expose(), "ya29.a");
        assert_eq!(f.lifetime, Duration::from_secs(3599));
        let f = parse(200, br#"{"access_token":"t"}"#).unwrap();
        assert_eq!(f.lifetime, DEFAULT_LIFETIME);
    }

    #[test]
    fn oauth_errors_are_named() {
        let e = parse(
            400,
            br#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#,
        )
        .err()
        .unwrap()
        .to_string();
        assert_eq!(e, "HTTP 400: invalid_grant: Invalid JWT Signature.");
        let e = parse(
            403,
            br#"{"error":{"code":403,"message":"denied","status":"PERMISSION_DENIED"}}"#,
        )
        .err()
        .unwrap()
        .to_string();
        assert_eq!(e, "HTTP 403: PERMISSION_DENIED");
        let e = parse(404, b"Not Found\nmore").err().unwrap().to_string();
        assert_eq!(e, "HTTP 404: Not Found");
        assert_eq!(parse(500, b"").err().unwrap().to_string(), "HTTP 500");
    }

    #[test]
    fn malformed_success_answers_do_not_echo_the_token() {
        for body in [
            &br#"{"access_token":"ya29.s","token_type":"MAC"}"#[..],
            br#"{"access_token":"ya29.s","expires_in":"soon"}"#,
            br#"{"access_token":"ya29.s","expires_in":-1}"#,
        ] {
            let e = parse(200, body).err().unwrap().to_string();
            assert!(!e.contains("ya29"), "{e}");
        }
        assert!(parse(200, b"<html>")
            .err()
            .unwrap()
            .to_string()
            .contains("not JSON"));
        assert!(parse(200, b"{}")
            .err()
            .unwrap()
            .to_string()
            .contains("no access_token"));
    }
}
