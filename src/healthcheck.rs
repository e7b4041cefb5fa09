//! `sturnus healthcheck [--url URL]`: GET a health URL and turn the answer into an exit code,
//! for exec probes and `HEALTHCHECK` in images that have no curl (the scratch image has nothing
//! but the binary).
//!
//! Plain HTTP/1.1 over a std `TcpStream` with timeouts; exit 0 on a 200, else 1 with one line
//! on stderr saying why (refused, timed out, which status and body).

use crate::config::BaseUrl;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// The URL checked when `--url` is not given: the proxy listener's default address.
pub const DEFAULT_URL: &str = "http://127.0.0.1:4000/health";

/// Longest answer read (health answers are a few bytes).
const MAX_ANSWER: usize = 64 * 1024;

/// The health URL parsed by the config's URL parser: plain `http://` only (the probe speaks no
/// TLS), with `/` for an empty path.
fn parse_url(url: &str) -> Result<BaseUrl, String> {
    let target = BaseUrl::parse(url).map_err(|e| format!("{url}: {e}"))?;
    if target.tls {
        return Err(format!("{url}: only http:// URLs are supported"));
    }
    Ok(target)
}

/// Checks `url` once; `Ok` with a one-line summary on a 200, `Err` with one line saying why.
pub fn check(url: &str, timeout: Duration) -> Result<String, String> {
    let target = parse_url(url)?;
    let addr: SocketAddr = (target.host.as_str(), target.port)
        .to_socket_addrs()
        .map_err(|e| format!("{url}: cannot resolve {}: {e}", target.host))?
        .next()
        .ok_or_else(|| format!("{url}: {} has no address", target.host))?;
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| format!("{url}: cannot connect to {addr}: {e}"))?;
    let io = |e: std::io::Error| format!("{url}: {e}");
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
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
        .map_err(|e| format!("{url}: cannot send the request: {e}"))?;
    let mut answer = Vec::new();
    stream
        .take(MAX_ANSWER as u64)
        .read_to_end(&mut answer)
        .map_err(|e| format!("{url}: no answer: {e}"))?;
    let (status, body) = parse_answer(&answer).map_err(|e| format!("{url}: {e}"))?;
    if status == 200 {
        Ok(format!("{url}: 200 {body}"))
    } else {
        Err(format!("{url}: answered {status} {body}"))
    }
}

/// Status code and a one-line excerpt of the body of a raw HTTP/1.x answer.
fn parse_answer(raw: &[u8]) -> Result<(u16, String), String> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(raw) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Err("incomplete HTTP answer".to_string()),
        Err(e) => return Err(format!("not an HTTP answer: {e}")),
    };
    let status = response.code.ok_or("no status code")?;
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
        assert!(parse_url("https://x/health")
            .unwrap_err()
            .contains("only http://"));
        assert!(parse_url("http://x:99999/").unwrap_err().contains("port"));
        assert!(parse_url("http:///health").unwrap_err().contains("no host"));
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
        .unwrap_err();
        assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }
}
