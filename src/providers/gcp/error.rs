//! What can go wrong finding a Google credential and fetching its tokens. Every message names
//! the file, field or endpoint at fault and never a secret (keys, tokens, file contents).

use crate::config::UrlError;
use crate::providers::resolve::ResolveError;

/// Why no Google credential could be set up at startup.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// A credentials file (named by `origin`) cannot be used.
    #[error("{origin}: {problem}")]
    File {
        /// Where the file was found, e.g. `GOOGLE_APPLICATION_CREDENTIALS=/path`.
        origin: String,
        /// What is wrong with it.
        problem: FileError,
    },
    /// `GCE_METADATA_HOST` is not a host or `host:port`.
    #[error("GCE_METADATA_HOST must be a host or host:port, not {host:?}")]
    MetadataHost {
        /// The value, without scheme and trailing slash.
        host: String,
    },
    /// `GCE_METADATA_HOST` does not make a usable URL.
    #[error("GCE_METADATA_HOST={host}: {problem}")]
    MetadataUrl {
        /// The value, without scheme and trailing slash.
        host: String,
        /// Why the URL was rejected.
        problem: UrlError,
    },
}

/// What is wrong with a credentials file (never quotes its contents beyond the `type`).
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file cannot be read.
    #[error("cannot read the file: {0}")]
    Read(std::io::Error),
    /// The file is not JSON (only the position is given: serde could quote a key).
    #[error("not a JSON credentials file (line {line}, column {column})")]
    NotJson {
        /// 1-based line of the syntax error.
        line: usize,
        /// 1-based column of the syntax error.
        column: usize,
    },
    /// A required field is absent or null.
    #[error("{field} is missing")]
    Missing {
        /// The field's name.
        field: &'static str,
    },
    /// A field is an empty string.
    #[error("{field} is empty")]
    Empty {
        /// The field's name.
        field: &'static str,
    },
    /// A field is not a string.
    #[error("{field} must be a string")]
    NotString {
        /// The field's name.
        field: &'static str,
    },
    /// A `type` other than `service_account` or `authorized_user` (cut to 40 characters).
    #[error(
        "credentials of type {kind:?} are not supported (use service_account or authorized_user, \
         or unset it to use the metadata server)"
    )]
    UnsupportedType {
        /// The file's `type`, cut to 40 characters.
        kind: String,
    },
    /// `private_key` is not an RSA key in PEM.
    #[error("private_key is not a PEM-encoded RSA private key")]
    PrivateKey,
    /// `token_uri` is not a usable URL.
    #[error("token_uri is not a usable URL: {0}")]
    TokenUri(UrlError),
}

/// Why one token fetch failed, with the credential it was for.
#[derive(Debug, thiserror::Error)]
#[error("fetching a token from {from} failed: {problem}")]
pub struct FetchError {
    /// The credential and its token endpoint, as [`super::GoogleTokens::describe`] says.
    pub from: String,
    /// What went wrong.
    pub problem: TokenError,
}

/// What went wrong in one token fetch.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The service-account assertion could not be signed.
    #[error("cannot sign the service-account assertion: {0}")]
    Sign(jsonwebtoken::errors::Error),
    /// The exchange with the token endpoint failed.
    #[error(transparent)]
    Exchange(#[from] ExchangeError),
    /// The token endpoint refused, or answered something that is not a token.
    #[error(transparent)]
    Answer(#[from] AnswerError),
    /// The token cannot be sent in an `Authorization` header.
    #[error("the token endpoint returned an access token with invalid characters")]
    InvalidToken,
}

/// Why an HTTP exchange with a token endpoint failed.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// The whole exchange took longer than its bound.
    #[error("no answer within {secs}s")]
    Timeout {
        /// The bound, in seconds.
        secs: u64,
    },
    /// The endpoint's host has no address.
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    /// Connecting, writing or reading failed.
    #[error("{}", crate::api::describe(.0))]
    Io(Box<pingora_core::Error>),
    /// The request line could not be built.
    #[error("cannot build the request")]
    BuildRequest,
    /// A header could not be set.
    #[error("cannot set header {name}")]
    Header {
        /// The header's name.
        name: &'static str,
    },
    /// The connection ended without a response header.
    #[error("no response header")]
    NoResponseHeader,
    /// The answer is larger than token answers ever are.
    #[error("the answer is larger than {limit} bytes")]
    TooLarge {
        /// The most that is read.
        limit: usize,
    },
}

/// Why a token endpoint's answer holds no usable token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// A non-200 answer with an OAuth or Google API error.
    #[error("HTTP {status}: {detail}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// `error: error_description`, cut to 300 characters.
        detail: String,
    },
    /// A non-200 answer without a recognised error body.
    #[error("HTTP {status}{excerpt}")]
    Failed {
        /// The HTTP status.
        status: u16,
        /// `: first line` of a plain-text body, or empty.
        excerpt: String,
    },
    /// A 200 answer that is not JSON.
    #[error("the answer is not JSON")]
    NotJson,
    /// A 200 answer without `access_token`.
    #[error("the answer has no access_token")]
    NoAccessToken,
    /// A token of a type other than Bearer.
    #[error("the answer has token_type {kind:?}, expected Bearer")]
    TokenType {
        /// The `token_type`, cut to 20 characters.
        kind: String,
    },
    /// An `expires_in` that is not a sane number of seconds.
    #[error("the answer's expires_in is not a number of seconds")]
    ExpiresIn,
}
