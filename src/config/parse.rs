//! Top-level parsing: TOML syntax, top-level keys, listen addresses, then each section.

use super::alias::read_aliases;
use super::auth::read_auth;
use super::error::ConfigError;
use super::listen_tls::read_listen_tls;
use super::provider::read_providers;
use super::reader::{quoted, Reader};
use super::routing::read_routing;
use super::schema::{Config, DEFAULT_LISTEN};
use std::net::SocketAddr;
use toml::{Table, Value};

/// Every top-level key the config accepts.
const TOP_KEYS: &[&str] = &[
    "listen",
    "metrics_listen",
    "provider",
    "model",
    "routing",
    "auth",
    "listen_tls",
];

/// Parses and validates config text, expanding `${...}` in string values with `env`;
/// `listen_override` (from `--listen` / `STURNUS_LISTEN`) replaces the file's `listen`.
pub(crate) fn parse(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
    listen_override: Option<SocketAddr>,
) -> Result<Config, ConfigError> {
    let doc: Table = text.parse().map_err(|e| syntax_error(text, &e))?;
    let mut r = Reader::new(env);
    r.unknown_keys("", &doc, TOP_KEYS);
    let default_listen: SocketAddr = DEFAULT_LISTEN
        .parse()
        .map_err(|_| ConfigError::single("internal error: bad default listen address"))?;
    let listen = doc
        .get("listen")
        .and_then(|v| read_addr(&mut r, "listen", v, DEFAULT_LISTEN))
        .unwrap_or(default_listen);
    let listen = listen_override.unwrap_or(listen);
    let metrics_listen = doc
        .get("metrics_listen")
        .and_then(|v| read_addr(&mut r, "metrics_listen", v, "0.0.0.0:4040"));
    if let Some(m) = metrics_listen {
        if m == listen {
            r.problem(
                "metrics_listen",
                format_args!("must differ from listen ({listen})"),
            );
        } else if overlaps(m, listen) {
            r.problem(
                "metrics_listen",
                format_args!(
                    "{m} overlaps listen ({listen}) on the same port; use a different port"
                ),
            );
        }
    }
    let listen_tls = read_listen_tls(&mut r, doc.get("listen_tls"));
    if let Some(tls) = &listen_tls {
        let clash = |other: SocketAddr| tls.listen == other || overlaps(tls.listen, other);
        if clash(listen) || metrics_listen.is_some_and(clash) {
            r.problem(
                "listen_tls.listen",
                format_args!(
                    "{} overlaps listen or metrics_listen; use a different port",
                    tls.listen
                ),
            );
        }
    }
    let providers = read_providers(&mut r, doc.get("provider"));
    let aliases = read_aliases(&mut r, doc.get("model"), &providers.names);
    let routing = read_routing(&mut r, doc.get("routing"));
    let alias_names: Vec<String> = aliases.iter().map(|a| a.name.clone()).collect();
    let auth = read_auth(&mut r, doc.get("auth"), &alias_names);
    if !r.problems.is_empty() {
        return Err(ConfigError {
            problems: r.problems,
        });
    }
    Ok(Config {
        listen,
        listen_tls,
        metrics_listen,
        providers: providers.valid,
        aliases,
        routing,
        auth,
    })
}

/// Turns a TOML syntax error into a one-line `config:` problem with line and column.
fn syntax_error(text: &str, e: &toml::de::Error) -> ConfigError {
    let message = e.message().trim();
    match e.span() {
        Some(span) => {
            let (line, column) = line_col(text, span.start);
            ConfigError::single(format_args!(
                "TOML syntax error at line {line}, column {column}: {message}"
            ))
        }
        None => ConfigError::single(format_args!("TOML syntax error: {message}")),
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let bytes = text.as_bytes();
    let before = &bytes[..offset.min(bytes.len())];
    let line = before.iter().filter(|b| **b == b'\n').count() + 1;
    let start = before
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1);
    let column = String::from_utf8_lossy(&before[start..]).chars().count() + 1;
    (line, column)
}

/// Reads a socket address string.
fn read_addr(r: &mut Reader, path: &str, v: &Value, example: &str) -> Option<SocketAddr> {
    let s = r.string(path, v)?;
    match s.trim().parse() {
        Ok(addr) => Some(addr),
        Err(_) => {
            r.problem(
                path,
                format_args!(
                    "{} is not a socket address like {example}",
                    quoted(Some(v), &s)
                ),
            );
            None
        }
    }
}

/// True when binding both addresses would clash: same non-zero port and the same address, or a
/// wildcard address that covers the other one.
fn overlaps(a: SocketAddr, b: SocketAddr) -> bool {
    if a.port() != b.port() || a.port() == 0 {
        return false;
    }
    let covers = |wild: SocketAddr, other: SocketAddr| {
        wild.ip().is_unspecified() && (wild.is_ipv6() || wild.is_ipv4() == other.is_ipv4())
    };
    a.ip() == b.ip() || covers(a, b) || covers(b, a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn line_and_column() {
        assert_eq!(line_col("abc", 0), (1, 1));
        assert_eq!(line_col("abc\ndef", 5), (2, 2));
        assert_eq!(line_col("é\nxé", 5), (2, 3));
        assert_eq!(line_col("ab", 99), (1, 3));
    }

    #[test]
    fn overlap_rules() {
        assert!(overlaps(addr("0.0.0.0:4000"), addr("127.0.0.1:4000")));
        assert!(overlaps(addr("127.0.0.1:4000"), addr("0.0.0.0:4000")));
        assert!(overlaps(addr("[::]:4000"), addr("127.0.0.1:4000")));
        assert!(!overlaps(addr("0.0.0.0:4000"), addr("[::1]:4000")));
        assert!(!overlaps(addr("127.0.0.1:4000"), addr("127.0.0.2:4000")));
        assert!(!overlaps(addr("0.0.0.0:4040"), addr("127.0.0.1:4000")));
        assert!(!overlaps(addr("127.0.0.1:0"), addr("0.0.0.0:0")));
    }
}
