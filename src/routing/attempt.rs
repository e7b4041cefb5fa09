//! What the proxy tells routing about one upstream attempt: its latency series ([`Mode`]), how
//! it ended ([`Outcome`]) and, for a failure, why ([`ErrorKind`]).
//!
//! Shared by the tracker, the waiting-age and congestion signals and the selector, so none of
//! them has to import another for the vocabulary.

use std::fmt;

/// Which latency series a request belongs to: streaming first-chunk times differ from buffered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Ordinary request/response (`"stream": false` or absent).
    NonStreaming,
    /// Server-sent-events streaming (`"stream": true`).
    Streaming,
}

impl Mode {
    /// Mode for a request's `stream` flag.
    pub fn from_stream(stream: bool) -> Self {
        if stream {
            Mode::Streaming
        } else {
            Mode::NonStreaming
        }
    }

    /// Stable label for /status and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::NonStreaming => "non_streaming",
            Mode::Streaming => "streaming",
        }
    }

    /// Slot of this mode in per-mode arrays.
    pub(crate) fn slot(self) -> usize {
        match self {
            Mode::NonStreaming => 0,
            Mode::Streaming => 1,
        }
    }
}

/// How a finished upstream attempt affects the candidate's success rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// 2xx: success sample 1.0.
    Success,
    /// Transport error, timeout, 408, 429, 5xx, 401, 403: success sample 0.0.
    Failure,
    /// Any other 4xx (the client's fault): success rate untouched.
    ClientError,
}

impl Outcome {
    /// Classify an upstream HTTP status. 1xx/3xx are treated as neutral (`ClientError`), and
    /// values outside 100..=599 (a broken upstream) as `Failure`.
    pub fn from_status(status: u16) -> Outcome {
        match status {
            200..=299 => Outcome::Success,
            401 | 403 | 408 | 429 => Outcome::Failure,
            400..=499 => Outcome::ClientError,
            500..=599 => Outcome::Failure,
            100..=199 | 300..=399 => Outcome::ClientError,
            _ => Outcome::Failure,
        }
    }
}

/// Why the last failed attempt failed; the strings are metric labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// TCP connect refused/unreachable.
    Connect,
    /// Connect, read or total timeout.
    Timeout,
    /// TLS handshake or certificate failure.
    Tls,
    /// Name resolution failure.
    Dns,
    /// Upstream rejected our credentials (401/403).
    Auth,
    /// Connection reset / closed mid-response.
    Reset,
    /// Upstream answered with a failure status (5xx, 429, 408).
    Status,
    /// Anything not covered above.
    Other,
}

impl ErrorKind {
    /// Every kind, in index order (for pre-registering metric label values).
    pub const ALL: [ErrorKind; 8] = [
        ErrorKind::Connect,
        ErrorKind::Timeout,
        ErrorKind::Tls,
        ErrorKind::Dns,
        ErrorKind::Auth,
        ErrorKind::Reset,
        ErrorKind::Status,
        ErrorKind::Other,
    ];

    /// Metric label / status string.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Tls => "tls",
            ErrorKind::Dns => "dns",
            ErrorKind::Auth => "auth",
            ErrorKind::Reset => "reset",
            ErrorKind::Status => "status",
            ErrorKind::Other => "other",
        }
    }

    /// Position in [`ErrorKind::ALL`].
    pub fn index(self) -> usize {
        match self {
            ErrorKind::Connect => 0,
            ErrorKind::Timeout => 1,
            ErrorKind::Tls => 2,
            ErrorKind::Dns => 3,
            ErrorKind::Auth => 4,
            ErrorKind::Reset => 5,
            ErrorKind::Status => 6,
            ErrorKind::Other => 7,
        }
    }

    /// Inverse of [`ErrorKind::index`]; `None` for out-of-range values.
    pub fn from_index(i: usize) -> Option<ErrorKind> {
        ErrorKind::ALL.get(i).copied()
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_status_table() {
        for st in [200, 201, 204, 299] {
            assert_eq!(Outcome::from_status(st), Outcome::Success, "{st}");
        }
        for st in [408, 429, 500, 502, 503, 504, 599, 401, 403] {
            assert_eq!(Outcome::from_status(st), Outcome::Failure, "{st}");
        }
        for st in [400, 404, 405, 413, 422, 499] {
            assert_eq!(Outcome::from_status(st), Outcome::ClientError, "{st}");
        }
        assert_eq!(Outcome::from_status(0), Outcome::Failure);
        assert_eq!(Outcome::from_status(600), Outcome::Failure);
        assert_eq!(Outcome::from_status(302), Outcome::ClientError);
    }

    #[test]
    fn mode_from_stream() {
        assert_eq!(Mode::from_stream(true), Mode::Streaming);
        assert_eq!(Mode::from_stream(false), Mode::NonStreaming);
        assert_eq!(Mode::Streaming.as_str(), "streaming");
    }

    #[test]
    fn error_kind_index_round_trip() {
        for k in ErrorKind::ALL {
            assert_eq!(ErrorKind::from_index(k.index()), Some(k));
        }
        assert_eq!(ErrorKind::from_index(99), None);
        assert_eq!(ErrorKind::Connect.as_str(), "connect");
        assert_eq!(ErrorKind::Dns.to_string(), "dns");
    }
}
