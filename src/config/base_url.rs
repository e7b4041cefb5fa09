//! Parsing of provider `base_url` values into scheme, host, port and path prefix.

use std::fmt;
use std::net::Ipv6Addr;

/// Why a base URL was rejected; the message never repeats the URL (it could hold credentials).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// No `scheme://` at the start.
    #[error("must start with http:// or https://")]
    NoScheme,
    /// A scheme other than http or https.
    #[error("scheme must be http or https")]
    Scheme,
    /// A `?query` part.
    #[error("must not have a query string")]
    Query,
    /// A `#fragment` part.
    #[error("must not have a fragment (#...)")]
    Fragment,
    /// A `user:password@` part.
    #[error("must not contain user info (user:password@); put credentials in api_key")]
    UserInfo,
    /// An empty host.
    #[error("has no host")]
    NoHost,
    /// `[v6` without the closing bracket.
    #[error("IPv6 host is missing its closing ]")]
    UnclosedIpv6,
    /// Brackets around something that is not an IPv6 address.
    #[error("host in [] is not a valid IPv6 address")]
    BadIpv6,
    /// Text after `[v6]` that is not `:port`.
    #[error("unexpected text after the IPv6 host")]
    AfterIpv6,
    /// An IPv6 address without brackets.
    #[error("IPv6 hosts must be written in brackets, like http://[::1]:8000")]
    UnbracketedIpv6,
    /// A host with characters a name or address cannot have.
    #[error("host must be a name or IP address (letters, digits, '.', '-', '_')")]
    BadHost,
    /// A port that is not a number from 1 to 65535.
    #[error("port must be a number from 1 to 65535")]
    Port,
    /// A path with spaces, control or non-ASCII characters.
    #[error("path must be ASCII without spaces or control characters (percent-encode it)")]
    Path,
}

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
    pub fn parse(input: &str) -> Result<BaseUrl, UrlError> {
        let s = input.trim();
        let (scheme, rest) = s.split_once("://").ok_or(UrlError::NoScheme)?;
        let tls = if scheme.eq_ignore_ascii_case("https") {
            true
        } else if scheme.eq_ignore_ascii_case("http") {
            false
        } else {
            return Err(UrlError::Scheme);
        };
        if rest.contains('?') {
            return Err(UrlError::Query);
        }
        if rest.contains('#') {
            return Err(UrlError::Fragment);
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(UrlError::UserInfo);
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
            return Err(UrlError::Path);
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
fn split_host_port(authority: &str) -> Result<(String, Option<&str>), UrlError> {
    if authority.is_empty() {
        return Err(UrlError::NoHost);
    }
    if let Some(inner) = authority.strip_prefix('[') {
        let close = inner.find(']').ok_or(UrlError::UnclosedIpv6)?;
        let v6 = &inner[..close];
        let addr: Ipv6Addr = v6.parse().map_err(|_| UrlError::BadIpv6)?;
        let after = &inner[close + 1..];
        let port = if after.is_empty() {
            None
        } else {
            Some(after.strip_prefix(':').ok_or(UrlError::AfterIpv6)?)
        };
        return Ok((addr.to_string(), port));
    }
    let (host, port) = match authority.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (authority, None),
    };
    if port.is_some_and(|p| p.contains(':')) {
        return Err(UrlError::UnbracketedIpv6);
    }
    if host.is_empty() {
        return Err(UrlError::NoHost);
    }
    let valid = host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_')
        && !host.starts_with(['.', '-']);
    if !valid {
        return Err(UrlError::BadHost);
    }
    Ok((host.to_ascii_lowercase(), port))
}

/// Parses a non-zero decimal port.
fn parse_port(p: &str) -> Result<u16, UrlError> {
    match p.parse::<u16>() {
        Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => Err(UrlError::Port),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> BaseUrl {
        BaseUrl::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn err(s: &str) -> String {
        BaseUrl::parse(s).expect_err(s).to_string()
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
