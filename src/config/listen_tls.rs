//! Reading `[listen_tls]`: the HTTPS listener's address and its certificate and key files.

use super::reader::{join, Reader};
use std::net::SocketAddr;
use std::path::PathBuf;
use toml::Value;

/// Every key `[listen_tls]` accepts.
const KEYS: &[&str] = &["listen", "cert", "key"];

/// `[listen_tls]`: an HTTPS listener (ALPN `h2` and `http/1.1`) next to the plain `listen`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenTls {
    /// Its address.
    pub listen: SocketAddr,
    /// PEM certificate chain, read at start-up (and so again by a graceful upgrade).
    pub cert: PathBuf,
    /// PEM private key, read at start-up.
    pub key: PathBuf,
}

/// Reads `[listen_tls]` (absent: `None`).
pub(crate) fn read_listen_tls(r: &mut Reader, value: Option<&Value>) -> Option<ListenTls> {
    let t = r.table("listen_tls", value?)?;
    r.unknown_keys("listen_tls", t, KEYS);
    let mut required = |key: &str| {
        let path = join("listen_tls", key);
        match t.get(key) {
            Some(v) => r.string(&path, v).filter(|s| {
                let ok = !s.trim().is_empty();
                if !ok {
                    r.problem(&path, "is empty");
                }
                ok
            }),
            None => {
                r.problem(&path, "is required");
                None
            }
        }
    };
    let listen = required("listen");
    let cert = required("cert");
    let key = required("key");
    let listen = match listen?.trim().parse() {
        Ok(addr) => addr,
        Err(_) => {
            r.problem(
                "listen_tls.listen",
                "is not a socket address like 0.0.0.0:4443",
            );
            return None;
        }
    };
    Some(ListenTls {
        listen,
        cert: PathBuf::from(cert?),
        key: PathBuf::from(key?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> (Option<ListenTls>, Vec<String>) {
        let doc: toml::Table = text.parse().unwrap();
        let env = |_: &str| None;
        let mut r = Reader::new(&env);
        (read_listen_tls(&mut r, doc.get("listen_tls")), r.problems)
    }

    #[test]
    fn the_issue_example_reads() {
        let (tls, problems) = read(
            "[listen_tls]\nlisten = \"0.0.0.0:4443\"\ncert = \"/etc/sturnus/tls.crt\"\nkey = \"/etc/sturnus/tls.key\"\n",
        );
        assert!(problems.is_empty(), "{problems:?}");
        let tls = tls.unwrap();
        assert_eq!(tls.listen.port(), 4443);
        assert_eq!(tls.key, PathBuf::from("/etc/sturnus/tls.key"));
    }

    #[test]
    fn missing_and_bad_values_are_named() {
        let (_, problems) = read("[listen_tls]\nlisten = \"nowhere\"\ncert = \"\"\n");
        let all = problems.join("\n");
        assert!(all.contains("listen_tls.cert: is empty"), "{all}");
        assert!(all.contains("listen_tls.key: is required"), "{all}");
        assert!(
            all.contains("listen_tls.listen: is not a socket address"),
            "{all}"
        );
    }
}
