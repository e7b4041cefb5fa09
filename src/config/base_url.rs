//! Parsing of provider `base_url` values into scheme, host, port and path prefix.

use std::fmt;
use std::net::Ipv6Addr;

/// A parsed http(s) base URL: scheme, host, port (default 80/443), path prefix without trailing
/// slash. `host` is lower-cased and stored without brackets, even for IPv6.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseUrl {
    /// True for `https`, false for `http`.
    pub tls: bool,
    /// Host name or IP address, without `[]` for IPv6.
    pub host: String,
    /// Explicit port, or 443/80 from the scheme.
    pub port: u16,
    /// Path prefix such as `/openai/v1`, without trailing slash; empty for the root.
    pub path: String,
}

impl BaseUrl {
    /// Parses `http(s)://host[:port][/path]`; rejects user info, query, fragment, and bad hosts.
    /// The error explains the problem without repeating the URL (it could hold credentials).
    pub fn parse(input: &str) -> Result<BaseUrl, String> {
        let s = input.trim();
        let (scheme, rest) = s
            .split_once("://")
            .ok_or_else(|| "must start with http:// or https://".to_string())?;
        let tls = if scheme.eq_ignore_ascii_case("https") {
            true
        } else if scheme.eq_ignore_ascii_case("http") {
            false
        } else {
            return Err("scheme must be http or https".into());
        };
        if rest.contains('?') {
            return Err("must not have a query string".into());
        }
        if rest.contains('#') {
            return Err("must not have a fragment (#...)".into());
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(
                "must not contain user info (user:password@); put credentials in api_key".into(),
            );
        }
        let (host, port) = split_host_port(authority)?;
        let port = match port {
            None => {
                if tls {
                    443
                } else {
                    80
                }
            }
            Some(p) => parse_port(p)?,
        };
        let path = path.trim_end_matches('/');
        if !path.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(
                "path must be ASCII without spaces or control characters (percent-encode it)"
                    .into(),
            );
        }
        Ok(BaseUrl {
            tls,
            host,
            port,
            path: path.to_string(),
        })
    }

    /// True when the port is the scheme's default (443 for https, 80 for http).
    pub fn is_default_port(&self) -> bool {
        self.port == if self.tls { 443 } else { 80 }
    }

    /// `host:port` with IPv6 hosts in brackets, for connecting.
    pub fn authority(&self) -> String {
        format!("{}:{}", self.bracketed_host(), self.port)
    }

    /// The `Host` header value: the host (bracketed if IPv6), plus `:port` when not the default.
    pub fn host_header(&self) -> String {
        if self.is_default_port() {
            self.bracketed_host()
        } else {
            self.authority()
        }
    }

    /// The host, in brackets when it is an IPv6 address.
    fn bracketed_host(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        }
    }
}

impl fmt::Display for BaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}{}", self.host_header(), self.path)
    }
}

/// Splits `host[:port]` / `[v6][:port]` and validates the host.
fn split_host_port(authority: &str) -> Result<(String, Option<&str>), String> {
    if authority.is_empty() {
        return Err("has no host".into());
    }
    if let Some(inner) = authority.strip_prefix('[') {
        let close = inner
            .find(']')
            .ok_or_else(|| "IPv6 host is missing its closing ]".to_string())?;
        let v6 = &inner[..close];
        let addr: Ipv6Addr = v6
            .parse()
            .map_err(|_| "host in [] is not a valid IPv6 address".to_string())?;
        let after = &inner[close + 1..];
        let port = if after.is_empty() {
            None
        } else {
            Some(
                after
                    .strip_prefix(':')
                    .ok_or_else(|| "unexpected text after the IPv6 host".to_string())?,
            )
        };
        return Ok((addr.to_string(), port));
    }
    let (host, port) = match authority.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (authority, None),
    };
    if port.is_some_and(|p| p.contains(':')) {
        return Err("IPv6 hosts must be written in brackets, like http://[::1]:8000".into());
    }
    if host.is_empty() {
        return Err("has no host".into());
    }
    let valid = host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_')
        && !host.starts_with(['.', '-']);
    if !valid {
        return Err("host must be a name or IP address (letters, digits, '.', '-', '_')".into());
    }
    Ok((host.to_ascii_lowercase(), port))
}

/// Parses a non-zero decimal port.
fn parse_port(p: &str) -> Result<u16, String> {
    match p.parse::<u16>() {
        Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => Err("port must be a number from 1 to 65535".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> BaseUrl {
        BaseUrl::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn err(s: &str) -> String {
        BaseUrl::parse(s).expect_err(s)
    }

    #[test]
    fn https_with_path() {
        let u = ok("https://api.groq.com/openai/v1");
        assert_eq!(
            u,
            BaseUrl {
                tls: true,
                host: "api.groq.com".into(),
                port: 443,
                path: "/openai/v1".into()
            }
        );
        assert_eq!(u.to_string(), "https://api.groq.com/openai/v1");
        assert_eq!(u.authority(), "api.groq.com:443");
        assert_eq!(u.host_header(), "api.groq.com");
    }

    #[test]
    fn http_default_port_and_trailing_slashes() {
        let u = ok("http://localhost/v1//");
        assert!(!u.tls);
        assert_eq!(u.port, 80);
        assert_eq!(u.path, "/v1");
        assert_eq!(ok("https://example.com/").path, "");
        assert_eq!(ok("https://example.com").path, "");
    }

    #[test]
    fn explicit_port_and_case() {
        let u = ok("HTTP://LocalHost:11434/v1");
        assert_eq!(
            (u.tls, u.host.as_str(), u.port),
            (false, "localhost", 11434)
        );
        assert_eq!(u.host_header(), "localhost:11434");
        assert_eq!(u.to_string(), "http://localhost:11434/v1");
        assert_eq!(ok("http://127.0.0.1:8000").authority(), "127.0.0.1:8000");
    }

    #[test]
    fn ipv6_hosts() {
        let u = ok("http://[::1]:8000/v1");
        assert_eq!(u.host, "::1");
        assert_eq!(u.port, 8000);
        assert_eq!(u.authority(), "[::1]:8000");
        assert_eq!(u.to_string(), "http://[::1]:8000/v1");
        let u = ok("https://[2001:DB8::1]");
        assert_eq!(u.host, "2001:db8::1");
        assert_eq!(u.host_header(), "[2001:db8::1]");
        assert!(err("http://::1:80").contains("brackets"));
        assert!(err("http://[::1").contains("closing"));
        assert!(err("http://[nope]").contains("IPv6"));
        assert!(err("http://[::1]x").contains("unexpected"));
    }

    #[test]
    fn rejections() {
        assert!(err("ftp://x").contains("http or https"));
        assert!(err("api.openai.com/v1").contains("must start with"));
        assert!(err("https://").contains("no host"));
        assert!(err("https:///v1").contains("no host"));
        assert!(err("https://:443").contains("no host"));
        assert!(err("https://user:sk-secret@host/v1").contains("user info"));
        assert!(!err("https://user:sk-secret@host/v1").contains("sk-secret"));
        assert!(err("https://host/v1?x=1").contains("query"));
        assert!(err("https://host/v1#frag").contains("fragment"));
        assert!(err("https://host:0").contains("port"));
        assert!(err("https://host:99999").contains("port"));
        assert!(err("https://host:+80").contains("port"));
        assert!(err("https://host:").contains("port"));
        assert!(err("https://ho st/").contains("host must be"));
        assert!(err("https://-host/").contains("host must be"));
        assert!(err("https://host/a b").contains("path"));
        assert!(err("https://host/é").contains("path"));
    }
}
