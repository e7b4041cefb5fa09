//! Application Default Credentials: which Google credential sturnus uses, found in ADC order.
//!
//! 1. the JSON file named by `GOOGLE_APPLICATION_CREDENTIALS`;
//! 2. gcloud's `application_default_credentials.json` (in `$CLOUDSDK_CONFIG`, else
//!    `~/.config/gcloud`);
//! 3. the metadata server (GKE Workload Identity, GCE) at `GCE_METADATA_HOST`, default
//!    `metadata.google.internal`.
//!
//! Files are read once at startup: a named file that is missing or malformed stops startup with
//! a message naming it (never its contents). The metadata server is only contacted later, by the
//! refresher.

use super::authorized_user::AuthorizedUser;
use super::error::{DiscoveryError, FileError, TokenError};
use super::http::TokenRequest;
use super::metadata::{MetadataServer, DEFAULT_HOST};
use super::service_account::ServiceAccount;
use crate::config::BaseUrl;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Google's OAuth token endpoint, for files that do not name one.
pub const DEFAULT_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";

/// Where tokens come from.
#[derive(Debug)]
pub enum Source {
    /// A service-account key file.
    ServiceAccount {
        /// The account and its key.
        account: ServiceAccount,
        /// Where the file was found (for messages).
        origin: String,
    },
    /// gcloud user credentials.
    AuthorizedUser {
        /// The OAuth client and refresh token.
        user: AuthorizedUser,
        /// Where the file was found (for messages).
        origin: String,
    },
    /// The metadata server.
    Metadata(MetadataServer),
}

impl Source {
    /// Finds the credential in ADC order, reading the environment through `env`.
    pub fn discover(env: &dyn Fn(&str) -> Option<String>) -> Result<Source, DiscoveryError> {
        let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        if let Some(path) = var("GOOGLE_APPLICATION_CREDENTIALS") {
            let origin = format!("GOOGLE_APPLICATION_CREDENTIALS={path}");
            return from_file(Path::new(&path), origin.clone())
                .map_err(|problem| DiscoveryError::File { origin, problem });
        }
        let gcloud_dir = var("CLOUDSDK_CONFIG")
            .map(PathBuf::from)
            .or_else(|| var("HOME").map(|h| Path::new(&h).join(".config").join("gcloud")));
        if let Some(dir) = gcloud_dir {
            let path = dir.join("application_default_credentials.json");
            if path.exists() {
                let origin = path.display().to_string();
                return from_file(&path, origin.clone())
                    .map_err(|problem| DiscoveryError::File { origin, problem });
            }
        }
        let host = var("GCE_METADATA_HOST").unwrap_or_else(|| DEFAULT_HOST.to_string());
        MetadataServer::new(&host).map(Source::Metadata)
    }

    /// What sturnus authenticates as and where tokens come from (for logs and errors).
    pub fn describe(&self) -> String {
        match self {
            Source::ServiceAccount { account, origin } => format!(
                "service account {} from {origin} (token endpoint {})",
                account.email(),
                account.token_uri()
            ),
            Source::AuthorizedUser { user, origin } => format!(
                "user credentials from {origin} (token endpoint {})",
                user.token_uri()
            ),
            Source::Metadata(m) => format!("the metadata server at {}", m.host()),
        }
    }

    /// The request that fetches a token now (`now` in Unix seconds, for signed assertions).
    pub fn request(&self, now: u64) -> Result<TokenRequest, TokenError> {
        match self {
            Source::ServiceAccount { account, .. } => account.request(now),
            Source::AuthorizedUser { user, .. } => Ok(user.request()),
            Source::Metadata(m) => Ok(m.request()),
        }
    }
}

/// Reads a credentials file and dispatches on its `type`.
fn from_file(path: &Path, origin: String) -> Result<Source, FileError> {
    let text = std::fs::read(path).map_err(FileError::Read)?;
    // Only syntax errors (line and column) are reported: serde's type errors could quote a key.
    let json: Value = serde_json::from_slice(&text).map_err(|e| FileError::NotJson {
        line: e.line(),
        column: e.column(),
    })?;
    match required_field(&json, "type")? {
        "service_account" => Ok(Source::ServiceAccount {
            account: ServiceAccount::from_json(&json)?,
            origin,
        }),
        "authorized_user" => Ok(Source::AuthorizedUser {
            user: AuthorizedUser::from_json(&json)?,
            origin,
        }),
        other => Err(FileError::UnsupportedType {
            kind: other.chars().take(40).collect(),
        }),
    }
}

/// A string field of a credentials file; the error names the field, never its value.
pub(super) fn required_field<'a>(
    json: &'a Value,
    field: &'static str,
) -> Result<&'a str, FileError> {
    optional_field(json, field)?.ok_or(FileError::Missing { field })
}

/// A string field that may be absent.
pub(super) fn optional_field<'a>(
    json: &'a Value,
    field: &'static str,
) -> Result<Option<&'a str>, FileError> {
    match json.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Err(FileError::Empty { field }),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(FileError::NotString { field }),
    }
}

/// The file's `token_uri`, or Google's default.
pub(super) fn token_uri(json: &Value) -> Result<BaseUrl, FileError> {
    let uri = optional_field(json, "token_uri")?.unwrap_or(DEFAULT_TOKEN_URI);
    BaseUrl::parse(uri).map_err(FileError::TokenUri)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn dir() -> PathBuf {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "sturnus-adc-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn discover(vars: &[(&str, &str)]) -> Result<Source, DiscoveryError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Source::discover(&|k| map.get(k).cloned())
    }

    const USER: &str =
        r#"{"type":"authorized_user","client_id":"c","client_secret":"s","refresh_token":"r"}"#;

    #[test]
    fn explicit_file_wins() {
        let d = dir();
        let f = d.join("sa.json");
        let key = include_str!("testdata/test_key.pem");
        let json = serde_json::json!({
            "type": "service_account", "client_email": "sa@p.iam.gserviceaccount.com",
            "private_key": key, "private_key_id": "k", "token_uri": "http://127.0.0.1:9/token"
        });
        std::fs::write(&f, json.to_string()).unwrap();
        std::fs::create_dir_all(d.join(".config/gcloud")).unwrap();
        std::fs::write(
            d.join(".config/gcloud/application_default_credentials.json"),
            USER,
        )
        .unwrap();
        let s = discover(&[
            ("GOOGLE_APPLICATION_CREDENTIALS", f.to_str().unwrap()),
            ("HOME", d.to_str().unwrap()),
        ])
        .unwrap();
        assert!(matches!(s, Source::ServiceAccount { .. }));
        assert_eq!(
            s.describe(),
            format!(
                "service account sa@p.iam.gserviceaccount.com from GOOGLE_APPLICATION_CREDENTIALS={} (token endpoint http://127.0.0.1:9/token)",
                f.display()
            )
        );
        std::fs::remove_dir_all(d).ok();
    }

    #[test]
    fn gcloud_file_then_metadata_server() {
        let d = dir();
        let home = d.to_str().unwrap();
        let s = discover(&[("HOME", home), ("GCE_METADATA_HOST", "127.0.0.1:8089")]).unwrap();
        assert_eq!(s.describe(), "the metadata server at 127.0.0.1:8089");
        assert_eq!(
            discover(&[("HOME", home)]).unwrap().describe(),
            "the metadata server at metadata.google.internal"
        );
        std::fs::create_dir_all(d.join(".config/gcloud")).unwrap();
        let adc = d.join(".config/gcloud/application_default_credentials.json");
        std::fs::write(&adc, USER).unwrap();
        let s = discover(&[("HOME", home), ("GOOGLE_APPLICATION_CREDENTIALS", "")]).unwrap();
        assert!(matches!(s, Source::AuthorizedUser { .. }));
        assert!(s
            .describe()
            .contains("application_default_credentials.json"));
        // CLOUDSDK_CONFIG moves gcloud's directory.
        let s = discover(&[("HOME", home), ("CLOUDSDK_CONFIG", "/nonexistent")]).unwrap();
        assert!(matches!(s, Source::Metadata(_)));
        std::fs::remove_dir_all(d).ok();
    }

    #[test]
    fn broken_files_stop_startup_with_a_message_that_names_them() {
        let d = dir();
        let missing = d.join("missing.json");
        let err = discover(&[("GOOGLE_APPLICATION_CREDENTIALS", missing.to_str().unwrap())])
            .err()
            .unwrap()
            .to_string();
        assert!(err.starts_with("GOOGLE_APPLICATION_CREDENTIALS="), "{err}");
        assert!(err.contains("cannot read the file"), "{err}");
        let f = d.join("f.json");
        for (content, expected) in [
            ("{\"private_key\": \"secret", "not a JSON credentials file"),
            (
                r#"{"type":"external_account"}"#,
                "\"external_account\" are not supported",
            ),
            (
                r#"{"type":"service_account","client_email":"e","private_key":"secret-pem"}"#,
                "private_key is not a PEM-encoded RSA private key",
            ),
            (
                r#"{"type":"authorized_user","client_id":"c","client_secret":"s3cr3t","refresh_token":7}"#,
                "refresh_token must be a string",
            ),
        ] {
            std::fs::write(&f, content).unwrap();
            let err = discover(&[("GOOGLE_APPLICATION_CREDENTIALS", f.to_str().unwrap())])
                .err()
                .unwrap()
                .to_string();
            assert!(err.contains(expected), "{err}");
            assert!(!err.contains("secret") && !err.contains("s3cr3t"), "{err}");
        }
        std::fs::remove_dir_all(d).ok();
    }
}
