//! Reading `[auth]`: the clients allowed to use the proxy (static keys, JWTs) and their limits.
//!
//! A key given as `key = "${VAR}"` is hashed here, as the file is read: only its SHA-256 is
//! kept, so the key itself never reaches the running proxy, its logs or `sturnus check`.

use super::reader::{index, join, Reader};
use super::secret::Secret;
use std::path::PathBuf;
use toml::{Table, Value};

/// Every key `[auth]` accepts.
const KEYS: &[&str] = &["allow_anonymous", "key", "jwt"];
/// Every key an `[[auth.key]]` entry accepts.
const KEY_KEYS: &[&str] = &[
    "name",
    "sha256",
    "key",
    "aliases",
    "max_inflight",
    "requests_per_minute",
];
/// Every key `[auth.jwt]` accepts.
const JWT_KEYS: &[&str] = &[
    "issuer",
    "audience",
    "algorithms",
    "keys",
    "jwks",
    "secret",
    "name_claim",
    "aliases_claim",
    "max_inflight",
    "requests_per_minute",
];

/// `[auth]`: who may use the proxy.
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// Requests without any credential are served (without a client name or limits); a
    /// credential that is presented must still be valid.
    pub allow_anonymous: bool,
    /// The static keys (`[[auth.key]]`), in config order.
    pub keys: Vec<StaticKey>,
    /// JSON Web Tokens (`[auth.jwt]`), when accepted.
    pub jwt: Option<JwtConfig>,
}

impl AuthConfig {
    /// Whether any credential can be accepted at all.
    pub fn has_credentials(&self) -> bool {
        !self.keys.is_empty() || self.jwt.is_some()
    }
}

/// Per-client limits (`max_inflight`, `requests_per_minute`); `None` is unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientLimits {
    /// Most requests of the client in flight at once.
    pub max_inflight: Option<u32>,
    /// Most requests of the client per minute.
    pub requests_per_minute: Option<u32>,
}

/// One `[[auth.key]]`: a static key by its SHA-256.
#[derive(Clone, PartialEq, Eq)]
pub struct StaticKey {
    /// The client's name, shown in logs and metrics.
    pub name: String,
    /// SHA-256 of the key.
    pub sha256: [u8; 32],
    /// The aliases the key may use; `None` is every alias.
    pub aliases: Option<Vec<String>>,
    /// The client's limits.
    pub limits: ClientLimits,
}

impl std::fmt::Debug for StaticKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticKey")
            .field("name", &self.name)
            .field("aliases", &self.aliases)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// Where the keys that verify JWT signatures come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwtKeySource {
    /// PEM files of public keys (RSA, EC or Ed25519), each tried in turn.
    Pem(Vec<PathBuf>),
    /// A JWKS file; a token's `kid` picks the key.
    Jwks(PathBuf),
    /// A shared secret, for HS256/HS384/HS512.
    Secret(Secret),
}

/// `[auth.jwt]`: which tokens are accepted and how a client is named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtConfig {
    /// The required `iss`.
    pub issuer: String,
    /// The required `aud`.
    pub audience: String,
    /// The accepted signature algorithms (`RS256`, `ES256`, ...).
    pub algorithms: Vec<jsonwebtoken::Algorithm>,
    /// The verification keys.
    pub keys: JwtKeySource,
    /// The claim holding the client's name (default `sub`).
    pub name_claim: String,
    /// The claim listing the aliases the client may use; `None`: every alias.
    pub aliases_claim: Option<String>,
    /// Limits of each client name.
    pub limits: ClientLimits,
}

/// Reads `[auth]` (absent: `None`), checking aliases against `aliases`.
pub(crate) fn read_auth(
    r: &mut Reader,
    value: Option<&Value>,
    aliases: &[String],
) -> Option<AuthConfig> {
    let table = r.table("auth", value?)?;
    r.unknown_keys("auth", table, KEYS);
    let mut out = AuthConfig::default();
    if let Some(v) = table.get("allow_anonymous") {
        out.allow_anonymous = r
            .boolean(&join("auth", "allow_anonymous"), v)
            .unwrap_or(false);
    }
    if let Some(v) = table.get("key") {
        out.keys = read_keys(r, v, aliases);
    }
    if let Some(v) = table.get("jwt") {
        out.jwt = read_jwt(r, v);
    }
    if !out.has_credentials() && !out.allow_anonymous {
        r.problem(
            "auth",
            "no [[auth.key]] and no [auth.jwt]: every request would be refused \
             (add a key, or set allow_anonymous = true)",
        );
    }
    Some(out)
}

/// Reads the `[[auth.key]]` array.
fn read_keys(r: &mut Reader, v: &Value, aliases: &[String]) -> Vec<StaticKey> {
    let path = join("auth", "key");
    let Value::Array(items) = v else {
        r.problem(&path, "expected an array of tables ([[auth.key]])");
        return Vec::new();
    };
    let mut keys: Vec<StaticKey> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = index(&path, i);
        let Some(key) = read_key(r, &path, item, aliases) else {
            continue;
        };
        if keys.iter().any(|k| k.name == key.name) {
            r.problem(&path, format_args!("name {:?} is used twice", key.name));
        } else if keys.iter().any(|k| k.sha256 == key.sha256) {
            r.problem(&path, "the same key is listed twice");
        } else {
            keys.push(key);
        }
    }
    keys
}

/// Reads one `[[auth.key]]` table.
fn read_key(r: &mut Reader, path: &str, v: &Value, aliases: &[String]) -> Option<StaticKey> {
    let t = r.table(path, v)?;
    r.unknown_keys(path, t, KEY_KEYS);
    let name = required_string(r, t, path, "name")?;
    if !crate::auth::is_loggable_name(&name) {
        r.problem(
            &join(path, "name"),
            "must match [A-Za-z0-9_.:@-]{1,64} (it is shown in logs and metric labels)",
        );
    }
    let sha256 = match (t.get("sha256"), t.get("key")) {
        (Some(_), Some(_)) => {
            r.problem(path, "give either sha256 or key, not both");
            None
        }
        (Some(v), None) => read_digest(r, &join(path, "sha256"), v),
        (None, Some(v)) => {
            let key_path = join(path, "key");
            let key = r.string(&key_path, v)?;
            if key.is_empty() {
                r.problem(&key_path, "is empty");
                None
            } else {
                Some(crate::auth::sha256(key.as_bytes()))
            }
        }
        (None, None) => {
            r.problem(path, "needs sha256 (hex SHA-256 of the key) or key");
            None
        }
    };
    let key_aliases = t
        .get("aliases")
        .and_then(|v| read_aliases(r, &join(path, "aliases"), v, aliases));
    let limits = read_limits(r, t, path);
    Some(StaticKey {
        name,
        sha256: sha256?,
        aliases: key_aliases,
        limits,
    })
}

/// A string key that must be present.
fn required_string(r: &mut Reader, t: &Table, path: &str, key: &str) -> Option<String> {
    match t.get(key) {
        Some(v) => r.string(&join(path, key), v),
        None => {
            r.problem(&join(path, key), "is required");
            None
        }
    }
}

/// Reads a hex SHA-256 digest.
fn read_digest(r: &mut Reader, path: &str, v: &Value) -> Option<[u8; 32]> {
    let s = r.string(path, v)?;
    let mut out = [0u8; 32];
    match hex::decode_to_slice(s.trim(), &mut out) {
        Ok(()) => Some(out),
        Err(_) => {
            r.problem(path, "must be 64 hex digits (the SHA-256 of the key)");
            None
        }
    }
}

/// Reads a list of configured alias names.
fn read_aliases(
    r: &mut Reader,
    path: &str,
    v: &Value,
    configured: &[String],
) -> Option<Vec<String>> {
    let names = read_strings(r, path, v)?;
    for name in &names {
        if !configured.contains(name) {
            r.problem(path, format_args!("{name:?} is not a configured alias"));
        }
    }
    Some(names)
}

/// Reads an array of strings.
fn read_strings(r: &mut Reader, path: &str, v: &Value) -> Option<Vec<String>> {
    let Value::Array(items) = v else {
        r.problem(path, "expected an array of strings");
        return None;
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        out.push(r.string(&index(path, i), item)?);
    }
    Some(out)
}

/// Reads `max_inflight` and `requests_per_minute` of a table.
fn read_limits(r: &mut Reader, t: &Table, path: &str) -> ClientLimits {
    let mut limit = |key: &str| {
        let v = t.get(key)?;
        let path = join(path, key);
        let n = r.integer(&path, v)?;
        match u32::try_from(n) {
            Ok(n) if n >= 1 => Some(n),
            _ => {
                r.problem(
                    &path,
                    format_args!("{n} is out of range (must be 1 or more)"),
                );
                None
            }
        }
    };
    ClientLimits {
        max_inflight: limit("max_inflight"),
        requests_per_minute: limit("requests_per_minute"),
    }
}

/// Reads `[auth.jwt]`.
fn read_jwt(r: &mut Reader, v: &Value) -> Option<JwtConfig> {
    let path = join("auth", "jwt");
    let t = r.table(&path, v)?;
    r.unknown_keys(&path, t, JWT_KEYS);
    let issuer = required_string(r, t, &path, "issuer");
    let audience = required_string(r, t, &path, "audience");
    let algorithms = read_algorithms(r, t, &path);
    let keys = read_key_source(r, t, &path, algorithms.as_deref());
    let name_claim = match t.get("name_claim") {
        Some(v) => r.string(&join(&path, "name_claim"), v),
        None => Some("sub".to_string()),
    };
    let aliases_claim = t
        .get("aliases_claim")
        .and_then(|v| r.string(&join(&path, "aliases_claim"), v));
    let limits = read_limits(r, t, &path);
    Some(JwtConfig {
        issuer: issuer?,
        audience: audience?,
        algorithms: algorithms?,
        keys: keys?,
        name_claim: name_claim?,
        aliases_claim,
        limits,
    })
}

/// Whether an algorithm verifies with a shared secret (HS256/384/512).
pub fn is_hmac(alg: jsonwebtoken::Algorithm) -> bool {
    use jsonwebtoken::Algorithm::{HS256, HS384, HS512};
    matches!(alg, HS256 | HS384 | HS512)
}

/// Reads `algorithms`: a non-empty list, all HMAC or all public-key.
fn read_algorithms(r: &mut Reader, t: &Table, path: &str) -> Option<Vec<jsonwebtoken::Algorithm>> {
    let key_path = join(path, "algorithms");
    let Some(v) = t.get("algorithms") else {
        r.problem(&key_path, "is required (e.g. [\"RS256\", \"ES256\"])");
        return None;
    };
    let names = read_strings(r, &key_path, v)?;
    let mut out = Vec::with_capacity(names.len());
    for name in &names {
        match name.parse::<jsonwebtoken::Algorithm>() {
            Ok(alg) => out.push(alg),
            Err(_) => r.problem(&key_path, format_args!("{name:?} is not a JWT algorithm")),
        }
    }
    if out.len() != names.len() {
        return None;
    }
    if out.is_empty() {
        r.problem(&key_path, "must list at least one algorithm");
        return None;
    }
    let hmac = out.iter().filter(|a| is_hmac(**a)).count();
    if hmac != 0 && hmac != out.len() {
        r.problem(
            &key_path,
            "mixes HS* (shared secret) with public-key algorithms; use one kind",
        );
        return None;
    }
    Some(out)
}

/// Reads `keys`, `jwks` or `secret` (exactly one, matching the algorithms' kind).
fn read_key_source(
    r: &mut Reader,
    t: &Table,
    path: &str,
    algorithms: Option<&[jsonwebtoken::Algorithm]>,
) -> Option<JwtKeySource> {
    let given: Vec<&str> = ["keys", "jwks", "secret"]
        .into_iter()
        .filter(|k| t.contains_key(*k))
        .collect();
    if given.len() != 1 {
        r.problem(
            path,
            "needs exactly one of keys (PEM files), jwks (a file) or secret",
        );
        return None;
    }
    let hmac = algorithms.map(|a| a.iter().all(|a| is_hmac(*a)));
    let source = match given[0] {
        "keys" => {
            let key_path = join(path, "keys");
            let files = read_strings(r, &key_path, &t["keys"])?;
            if files.is_empty() {
                r.problem(&key_path, "must list at least one PEM file");
                return None;
            }
            JwtKeySource::Pem(files.into_iter().map(PathBuf::from).collect())
        }
        "jwks" => JwtKeySource::Jwks(PathBuf::from(r.string(&join(path, "jwks"), &t["jwks"])?)),
        _ => {
            let key_path = join(path, "secret");
            let secret = r.string(&key_path, &t["secret"])?;
            if secret.is_empty() {
                r.problem(&key_path, "is empty");
                return None;
            }
            JwtKeySource::Secret(Secret::new(secret))
        }
    };
    match (hmac, &source) {
        (Some(true), JwtKeySource::Secret(_)) | (Some(false), JwtKeySource::Pem(_)) => {}
        (Some(false), JwtKeySource::Jwks(_)) => {}
        (Some(true), _) => r.problem(path, "HS* algorithms verify with secret, not keys or jwks"),
        (Some(false), _) => r.problem(path, "public-key algorithms need keys or jwks, not secret"),
        (None, _) => {}
    }
    Some(source)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str, env: &[(&str, &str)]) -> (Option<AuthConfig>, Vec<String>) {
        let doc: Table = text.parse().unwrap();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = move |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let mut r = Reader::new(&lookup);
        let auth = read_auth(&mut r, doc.get("auth"), &["fast".to_string()]);
        (auth, r.problems)
    }

    #[test]
    fn the_issue_example_reads_and_keys_are_hashed() {
        let digest = hex::encode(crate::auth::sha256(b"test"));
        let text = format!(
            r#"[auth]
allow_anonymous = false
[[auth.key]]
name = "billing-svc"
sha256 = "{digest}"
aliases = ["fast"]
max_inflight = 20
requests_per_minute = 600
[[auth.key]]
name = "search"
key = "${{SEARCH_KEY}}"
[auth.jwt]
issuer = "https://issuer.example"
audience = "sturnus"
algorithms = ["RS256", "ES256"]
keys = ["/etc/sturnus/jwt.pem"]
name_claim = "sub"
aliases_claim = "sturnus_aliases"
max_inflight = 20
requests_per_minute = 600
"#
        );
        let (auth, problems) = read(&text, &[("SEARCH_KEY", "sk-search")]);
        assert!(problems.is_empty(), "{problems:?}");
        let auth = auth.unwrap();
        assert_eq!(auth.keys[0].sha256, crate::auth::sha256(b"test"));
        assert_eq!(auth.keys[1].sha256, crate::auth::sha256(b"sk-search"));
        assert_eq!(auth.keys[0].aliases, Some(vec!["fast".to_string()]));
        assert_eq!(
            auth.keys[0].limits,
            ClientLimits {
                max_inflight: Some(20),
                requests_per_minute: Some(600)
            }
        );
        let jwt = auth.jwt.unwrap();
        assert_eq!(jwt.algorithms.len(), 2);
        assert_eq!(jwt.aliases_claim.as_deref(), Some("sturnus_aliases"));
        assert!(!format!("{:?}", auth.keys).contains("sk-search"));
    }

    #[test]
    fn problems_name_their_key_and_never_show_the_key() {
        let text = r#"[auth]
[[auth.key]]
name = "a b"
key = "${K}"
aliases = ["slow"]
max_inflight = 0
[[auth.key]]
name = "c"
sha256 = "xyz"
[auth.jwt]
issuer = "i"
audience = "a"
algorithms = ["HS256", "RS256"]
secret = "s"
"#;
        let (_, problems) = read(text, &[("K", "")]);
        let all = problems.join("\n");
        assert!(all.contains("auth.key[0].name: must match"), "{all}");
        assert!(all.contains("auth.key[0].key: is empty"), "{all}");
        assert!(all.contains("\"slow\" is not a configured alias"), "{all}");
        assert!(
            all.contains("auth.key[0].max_inflight: 0 is out of range"),
            "{all}"
        );
        assert!(
            all.contains("auth.key[1].sha256: must be 64 hex digits"),
            "{all}"
        );
        assert!(all.contains("auth.jwt.algorithms: mixes"), "{all}");
        let (_, problems) = read(
            "[auth]\n[[auth.key]]\nname = \"x\"\nkey = \"${K}\"\n",
            &[("K", "sk-secret-value")],
        );
        assert!(problems.is_empty(), "{problems:?}");
    }

    #[test]
    fn an_auth_table_that_accepts_nobody_is_refused() {
        let (_, problems) = read("[auth]\n", &[]);
        assert!(
            problems[0].contains("every request would be refused"),
            "{problems:?}"
        );
        let (auth, problems) = read("[auth]\nallow_anonymous = true\n", &[]);
        assert!(problems.is_empty() && auth.unwrap().allow_anonymous);
    }

    #[test]
    fn the_key_source_must_match_the_algorithms() {
        let text = "[auth.jwt]\nissuer = \"i\"\naudience = \"a\"\nalgorithms = [\"HS256\"]\nkeys = [\"k.pem\"]\n";
        let (_, problems) = read(text, &[]);
        assert!(
            problems.iter().any(|p| p.contains("verify with secret")),
            "{problems:?}"
        );
        let text = "[auth.jwt]\nissuer = \"i\"\naudience = \"a\"\nalgorithms = [\"ES256\"]\njwks = \"j.json\"\n";
        let (auth, problems) = read(text, &[]);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(auth.unwrap().jwt.unwrap().name_claim, "sub");
    }
}
