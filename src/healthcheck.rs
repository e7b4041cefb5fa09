//! `sturnus healthcheck [--url URL]`: GET a health URL and turn the answer into an exit code,
//! for exec probes and `HEALTHCHECK` in images that have no curl (the scratch image has nothing
//! but the binary).
//!
//! Plain HTTP/1.1 over a std `TcpStream` with timeouts; exit 0 on a 200, else 1 with one line
//! on stderr saying why (refused, timed out, which status and body).

use crate::config::{BaseUrl, UrlError};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// The URL checked when `--url` is not given: the proxy listener's default address.
pub const DEFAULT_URL: &str = "http://127.0.0.1:4000/health";

/// Longest answer read (health answers are a few bytes).
const MAX_ANSWER: usize = 64 * 1024;

/// Why a health check failed: the URL checked and what went wrong.
#[derive(Debug, thiserror::Error)]
#[error("{url}: {problem}")]
pub struct CheckError {
    /// The URL that was checked.
    pub url: String,
    /// What went wrong.
    pub problem: Problem,
}

/// What went wrong in one health check.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    /// The URL cannot be parsed.
    #[error(transparent)]
    Url(#[from] UrlError),
    /// An `https://` URL (the probe speaks no TLS).
    #[error("only http:// URLs are supported")]
    Tls,
    /// The host name cannot be resolved.
    #[error("cannot resolve {host}: {source}")]
    Resolve {
        /// The host name.
        host: String,
        /// The resolver's error.
        source: std::io::Error,
    },
    /// The host name resolves to nothing.
    #[error("{host} has no address")]
    NoAddress {
        /// The host name.
        host: String,
    },
    /// The TCP connection failed.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The address tried.
        addr: SocketAddr,
        /// The connect error.
        source: std::io::Error,
    },
    /// The socket could not be set up.
    #[error(transparent)]
    Socket(std::io::Error),
    /// The request could not be written.
    #[error("cannot send the request: {0}")]
    Send(std::io::Error),
    /// The answer could not be read.
    #[error("no answer: {0}")]
    NoAnswer(std::io::Error),
    /// The answer is not HTTP.
    #[error(transparent)]
    Answer(#[from] AnswerError),
    /// The answer's status is not 200.
    #[error("answered {status} {body}")]
    Unhealthy {
        /// The HTTP status.
        status: u16,
        /// The body on one line, cut to 200 characters.
        body: String,
    },
}

/// Why an answer is not a readable HTTP/1.x response.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    /// The connection closed before the header ended.
    #[error("incomplete HTTP answer")]
    Incomplete,
    /// The bytes are not an HTTP response.
    #[error("not an HTTP answer: {0}")]
    NotHttp(httparse::Error),
    /// The status line has no code.
    #[error("no status code")]
    NoStatus,
}

/// The health URL parsed by the config's URL parser: plain `http://` only (the probe speaks no
/// TLS), with `/` for an empty path.
fn parse_url(url: &str) -> Result<BaseUrl, Problem> {
    let target = BaseUrl::parse(url)?;
    if target.tls {
        return Err(Problem::Tls);
    }
    Ok(target)
}

/// Checks `url` once; `Ok` with a one-line summary on a 200, `Err` with one line saying why.
pub fn check(url: &str, timeout: Duration) -> Result<String, CheckError> {
    probe(url, timeout).map_err(|problem| CheckError {
        url: url.to_string(),
        problem,
    })
}

/// One check; the caller adds the URL to the error.
fn probe(url: &str, timeout: Duration) -> Result<String, Problem> {
    let target = parse_url(url)?;
    let addr: SocketAddr = (target.host.as_str(), target.port)
        .to_socket_addrs()
        .map_err(|source| Problem::Resolve {
            host: target.host.clone(),
            source,
        })?
        .next()
        .ok_or_else(|| Problem::NoAddress {
            host: target.host.clone(),
        })?;
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|source| Problem::Connect { addr, source })?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(Problem::Socket)?;
    stream
        .set_write_timeout(Some(timeout))
        .map_err(Problem::Socket)?;
    let path = if target.path.is_empty() {
        "/"
    } else {
        &target.path
    };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: sturnus-healthcheck\r\nConnection: close\r\n\r\n",
        target.host_header()
    );
    stream
        .write_all(request.as_bytes())
        .map_err(Problem::Send)?;
    let mut answer = Vec::new();
    stream
        .take(MAX_ANSWER as u64)
        .read_to_end(&mut answer)
        .map_err(Problem::NoAnswer)?;
    let (status, body) = parse_answer(&answer)?;
    if status == 200 {
        Ok(format!("{url}: 200 {body}"))
    } else {
        Err(Problem::Unhealthy { status, body })
    }
}

/// Status code and a one-line excerpt of the body of a raw HTTP/1.x answer.
fn parse_answer(raw: &[u8]) -> Result<(u16, String), AnswerError> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(raw) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Err(AnswerError::Incomplete),
        Err(e) => return Err(AnswerError::NotHttp(e)),
    };
    let status = response.code.ok_or(AnswerError::NoStatus)?;
    let body = String::from_utf8_lossy(&raw[head_len..]);
    let line: String = body
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(200)
        .collect();
    Ok((status, line))
}

/// Runs the subcommand: prints one line, returns the exit code.
pub fn main(url: &str, timeout: Duration) -> i32 {
    match check(url, timeout) {
        Ok(line) => {
            println!("healthy: {line}");
            0
        }
        Err(why) => {
            eprintln!("unhealthy: {why}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_host_port_and_path() {
        let t = parse_url("http://127.0.0.1:4040/health").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("127.0.0.1", 4040, "/health")
        );
        let t = parse_url("http://localhost").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("localhost", 80, "")
        );
        let t = parse_url("http://[::1]:9/healthz").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("::1", 9, "/healthz")
        );
        assert!(matches!(parse_url("https://x/health"), Err(Problem::Tls)));
        assert!(matches!(
            parse_url("http://x:99999/"),
            Err(Problem::Url(UrlError::Port))
        ));
        assert!(matches!(
            parse_url("http:///health"),
            Err(Problem::Url(UrlError::NoHost))
        ));
        let err = check("https://x/health", Duration::from_secs(1)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "https://x/health: only http:// URLs are supported"
        );
    }

    #[test]
    fn answers_give_status_and_a_one_line_body() {
        let raw = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 28\r\n\r\n{\"status\":\"shutting_down\"}\n";
        let (status, body) = parse_answer(raw).unwrap();
        assert_eq!(status, 503);
        assert_eq!(body, "{\"status\":\"shutting_down\"}");
        assert!(parse_answer(b"SSH-2.0-OpenSSH\r\n").is_err());
        assert!(parse_answer(b"HTTP/1.1 200 OK\r\n").is_err());
    }

    #[test]
    fn a_refused_connection_is_one_line_naming_the_address() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let err = check(
            &format!("http://127.0.0.1:{port}/health"),
            Duration::from_secs(2),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }
}
