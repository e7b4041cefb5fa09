//! Reading `[provider.NAME]` tables: kind selection, base URL, API key and kind settings.

use super::base_url::BaseUrl;
use super::health_check::read_health_check;
use super::reader::{join, quoted, Reader};
use super::schema::{ProviderConfig, ProviderKind};
use super::secret::Secret;
use toml::{Table, Value};

/// Every key a `[provider.NAME]` table accepts.
pub(super) const KEYS: &[&str] = &[
    "base_url",
    "api_key",
    "azure_openai",
    "google_ai",
    "anthropic",
    "vertex_ai",
    "health_check",
];
/// The kind tables; at most one may be present.
const KINDS: &[&str] = &["azure_openai", "google_ai", "anthropic", "vertex_ai"];

/// The providers read from `[provider]`.
pub(crate) struct Providers {
    /// Providers that were read without problems, in config order.
    pub valid: Vec<ProviderConfig>,
    /// Every declared provider name (valid or not), so aliases are checked against all of them.
    pub names: Vec<String>,
}

/// Reads the `[provider]` table, recording problems for each provider.
pub(crate) fn read_providers(r: &mut Reader, value: Option<&Value>) -> Providers {
    let mut out = Providers {
        valid: Vec::new(),
        names: Vec::new(),
    };
    let Some(table) = value.and_then(|v| r.table("provider", v)) else {
        return out;
    };
    for (name, v) in table {
        out.names.push(name.clone());
        let path = join("provider", name);
        if !is_provider_name(name) {
            r.problem(
                &path,
                "provider name must match [A-Za-z0-9_.-]+ (it is used in headers and metric labels)",
            );
        }
        if let Some(p) = read_provider(r, &path, name, v) {
            out.valid.push(p);
        }
    }
    out
}

/// Tells whether a provider name is safe for headers and metric labels.
fn is_provider_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Reads one provider table.
fn read_provider(r: &mut Reader, path: &str, name: &str, value: &Value) -> Option<ProviderConfig> {
    let t = r.table(path, value)?;
    r.unknown_keys(path, t, KEYS);
    let base_url = t
        .get("base_url")
        .and_then(|v| read_base_url(r, &join(path, "base_url"), v));
    let api_key = t
        .get("api_key")
        .and_then(|v| r.string(&join(path, "api_key"), v))
        .filter(|k| !k.is_empty())
        .map(Secret::new);
    let kinds: Vec<&str> = KINDS
        .iter()
        .copied()
        .filter(|k| t.contains_key(*k))
        .collect();
    let kind = match kinds.as_slice() {
        [] if t.contains_key("base_url") => Some(ProviderKind::OpenAiCompatible),
        [] => {
            r.problem(
                path,
                "needs base_url (for an OpenAI-compatible API) or one of azure_openai, google_ai, anthropic, vertex_ai",
            );
            None
        }
        [k] => t.get(*k).and_then(|v| read_kind(r, &join(path, k), k, v)),
        many => {
            r.problem(
                path,
                format_args!(
                    "only one of azure_openai, google_ai, anthropic, vertex_ai may be set (found {})",
                    many.join(" and ")
                ),
            );
            None
        }
    };
    if kinds == ["vertex_ai"] && api_key.is_some() {
        r.problem(
            &join(path, "api_key"),
            "Vertex AI uses OAuth access tokens (Application Default Credentials), not API keys; remove api_key",
        );
    }
    let health_check = match t.get("health_check") {
        Some(v) => Some(read_health_check(r, &join(path, "health_check"), v)?),
        None => None,
    };
    Some(ProviderConfig {
        name: name.to_string(),
        kind: kind?,
        base_url,
        api_key,
        health_check,
    })
}

/// Reads and parses `base_url`.
fn read_base_url(r: &mut Reader, path: &str, v: &Value) -> Option<BaseUrl> {
    let s = r.string(path, v)?;
    match BaseUrl::parse(&s) {
        Ok(u) => Some(u),
        Err(e) => {
            r.problem(
                path,
                format_args!("not a valid http(s) URL with a host: {e}"),
            );
            None
        }
    }
}

/// Reads the settings table of one kind.
fn read_kind(r: &mut Reader, path: &str, kind: &str, v: &Value) -> Option<ProviderKind> {
    let t = r.table(path, v)?;
    match kind {
        "azure_openai" => {
            r.unknown_keys(path, t, &["resource_name", "api_version"]);
            let resource_name = field(r, path, t, "resource_name", None, HOST_LABEL);
            let api_version = field(r, path, t, "api_version", None, TOKEN);
            Some(ProviderKind::AzureOpenAi {
                resource_name: resource_name?,
                api_version: api_version?,
            })
        }
        "google_ai" => {
            r.unknown_keys(path, t, &["api_version"]);
            let api_version = field(r, path, t, "api_version", Some("v1beta"), TOKEN)?;
            Some(ProviderKind::GoogleAi { api_version })
        }
        "anthropic" => {
            r.unknown_keys(path, t, &["version"]);
            let version = field(r, path, t, "version", Some("2023-06-01"), TOKEN)?;
            Some(ProviderKind::Anthropic { version })
        }
        _ => {
            r.unknown_keys(path, t, &["project_id", "location"]);
            let project_id = field(r, path, t, "project_id", None, PROJECT_ID);
            let location = field(r, path, t, "location", None, HOST_LABEL);
            Some(ProviderKind::VertexAi {
                project_id: project_id?,
                location: location?,
            })
        }
    }
}

/// A check on a kind setting plus the rule it enforces, for the error message.
struct Rule {
    ok: fn(&str) -> bool,
    text: &'static str,
}

/// Values that become part of a host name (Azure resource, Vertex location).
const HOST_LABEL: Rule = Rule {
    ok: |s| {
        s.len() <= 63
            && !s.starts_with('-')
            && !s.ends_with('-')
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    },
    text: "letters, digits and '-' only (it becomes part of a host name)",
};

/// Values that go into a URL path, query or header (API versions).
const TOKEN: Rule = Rule {
    ok: |s| {
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    },
    text: "letters, digits, '.', '_' and '-' only",
};

/// GCP project ids (including legacy `domain:project` ones).
const PROJECT_ID: Rule = Rule {
    ok: |s| {
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':'))
    },
    text: "letters, digits, '.', '_', ':' and '-' only",
};

/// Reads a string setting, applying `default` when absent (or reporting it missing) and `rule`.
fn field(
    r: &mut Reader,
    parent: &str,
    t: &Table,
    key: &str,
    default: Option<&str>,
    rule: Rule,
) -> Option<String> {
    let path = join(parent, key);
    let Some(v) = t.get(key) else {
        if default.is_none() {
            r.problem(&path, "required key is missing");
        }
        return default.map(str::to_string);
    };
    let s = r.string(&path, v)?;
    if s.is_empty() {
        r.problem(&path, "must not be empty");
        None
    } else if (rule.ok)(&s) {
        Some(s)
    } else {
        let shown = quoted(Some(v), &s);
        r.problem(&path, format_args!("{shown} is invalid: {}", rule.text));
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "KEY" => Some("sk-live-123".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    fn read(text: &str) -> (Providers, Vec<String>) {
        let doc: Table = text.parse().unwrap();
        let mut r = Reader::new(&env);
        let p = read_providers(&mut r, doc.get("provider"));
        (p, r.problems)
    }

    fn one(text: &str) -> ProviderConfig {
        let (p, problems) = read(text);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(p.valid.len(), 1);
        p.valid.into_iter().next().unwrap()
    }

    fn problems(text: &str) -> Vec<String> {
        read(text).1
    }

    #[test]
    fn openai_compatible_with_key() {
        let p = one(
            "[provider.openai]\nbase_url = \"https://api.openai.com/v1\"\napi_key = \"${KEY}\"",
        );
        assert_eq!(p.name, "openai");
        assert_eq!(p.kind, ProviderKind::OpenAiCompatible);
        assert_eq!(p.base_url.unwrap().path, "/v1");
        assert_eq!(p.api_key.unwrap().expose(), "sk-live-123");
    }

    #[test]
    fn empty_api_key_counts_as_not_set() {
        let p = one(
            "[provider.local]\nbase_url = \"http://localhost:11434/v1\"\napi_key = \"${EMPTY}\"",
        );
        assert!(p.api_key.is_none());
        let p = one("[provider.local]\nbase_url = \"http://localhost:11434/v1\"\napi_key = \"\"");
        assert!(p.api_key.is_none());
    }

    #[test]
    fn kinds_and_defaults() {
        let p = one("[provider.azure]\napi_key = \"k\"\nazure_openai = { resource_name = \"my-res\", api_version = \"2024-10-21\" }");
        assert_eq!(
            p.kind,
            ProviderKind::AzureOpenAi {
                resource_name: "my-res".into(),
                api_version: "2024-10-21".into()
            }
        );
        let p = one("[provider.gemini]\ngoogle_ai = {}");
        assert_eq!(
            p.kind,
            ProviderKind::GoogleAi {
                api_version: "v1beta".into()
            }
        );
        let p = one("[provider.gemini]\ngoogle_ai = { api_version = \"v1\" }");
        assert_eq!(
            p.kind,
            ProviderKind::GoogleAi {
                api_version: "v1".into()
            }
        );
        let p = one("[provider.claude]\n[provider.claude.anthropic]");
        assert_eq!(
            p.kind,
            ProviderKind::Anthropic {
                version: "2023-06-01".into()
            }
        );
        let p =
            one("[provider.v]\nvertex_ai = { project_id = \"p-1\", location = \"us-central1\" }");
        assert_eq!(
            p.kind,
            ProviderKind::VertexAi {
                project_id: "p-1".into(),
                location: "us-central1".into()
            }
        );
        assert!(p.base_url.is_none());
    }

    #[test]
    fn base_url_may_accompany_a_kind() {
        let p = one("[provider.a]\nanthropic = {}\nbase_url = \"http://127.0.0.1:9000/proxy\"");
        assert_eq!(
            p.kind,
            ProviderKind::Anthropic {
                version: "2023-06-01".into()
            }
        );
        assert_eq!(p.base_url.unwrap().authority(), "127.0.0.1:9000");
    }

    #[test]
    fn provider_needs_base_url_or_kind() {
        assert_eq!(
            problems("[provider.x]\napi_key = \"k\""),
            vec!["provider.x: needs base_url (for an OpenAI-compatible API) or one of azure_openai, google_ai, anthropic, vertex_ai"]
        );
    }

    #[test]
    fn two_kinds_is_an_error() {
        assert_eq!(
            problems("[provider.x]\ngoogle_ai = {}\nanthropic = {}"),
            vec!["provider.x: only one of azure_openai, google_ai, anthropic, vertex_ai may be set (found google_ai and anthropic)"]
        );
    }

    #[test]
    fn vertex_rejects_api_keys_but_not_empty_ones() {
        assert_eq!(
            problems("[provider.v]\napi_key = \"${KEY}\"\nvertex_ai = { project_id = \"p\", location = \"global\" }"),
            vec!["provider.v.api_key: Vertex AI uses OAuth access tokens (Application Default Credentials), not API keys; remove api_key"]
        );
        assert!(problems("[provider.v]\napi_key = \"${EMPTY}\"\nvertex_ai = { project_id = \"p\", location = \"global\" }").is_empty());
    }

    #[test]
    fn required_kind_settings() {
        assert_eq!(
            problems(
                "[provider.az]\nazure_openai = {}\n[provider.v]\nvertex_ai = { project_id = \"\" }"
            ),
            vec![
                "provider.az.azure_openai.resource_name: required key is missing",
                "provider.az.azure_openai.api_version: required key is missing",
                "provider.v.vertex_ai.project_id: must not be empty",
                "provider.v.vertex_ai.location: required key is missing",
            ]
        );
    }

    #[test]
    fn kind_settings_are_validated() {
        assert_eq!(
            problems(
                "[provider.az]\nazure_openai = { resource_name = \"a.b\", api_version = \"1 2\", region = 1 }\n\
                 [provider.g]\ngoogle_ai = 3"
            ),
            vec![
                "provider.az.azure_openai.region: unknown key",
                "provider.az.azure_openai.resource_name: \"a.b\" is invalid: letters, digits and '-' only (it becomes part of a host name)",
                "provider.az.azure_openai.api_version: \"1 2\" is invalid: letters, digits, '.', '_' and '-' only",
                "provider.g.google_ai: expected a table, found integer",
            ]
        );
    }

    #[test]
    fn bad_names_urls_and_keys() {
        assert_eq!(
            problems(
                "[provider.\"bad name\"]\nbase_url = \"ftp://x\"\napi_kye = \"x\"\n\
                 [provider.k]\nbase_url = \"https://h\"\napi_key = \"${NOT_SET}\"\n[provider.n]\nbase_url = 5"
            ),
            vec![
                "provider.\"bad name\": provider name must match [A-Za-z0-9_.-]+ (it is used in headers and metric labels)",
                "provider.\"bad name\".api_kye: unknown key (did you mean api_key?)",
                "provider.\"bad name\".base_url: not a valid http(s) URL with a host: scheme must be http or https",
                "provider.k.api_key: environment variable NOT_SET is not set",
                "provider.n.base_url: expected a string, found integer",
            ]
        );
    }

    #[test]
    fn names_include_invalid_providers_and_keep_order() {
        let (p, _) = read("[provider.zeta]\nbase_url = \"http://a\"\n[provider.alpha]\n[provider.mid]\nbase_url = \"http://b\"");
        assert_eq!(p.names, vec!["zeta", "alpha", "mid"]);
        let valid: Vec<_> = p.valid.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(valid, vec!["zeta", "mid"]);
    }

    #[test]
    fn health_checks_are_off_unless_configured() {
        let p = one("[provider.vllm]\nbase_url = \"http://vllm:8000/v1\"");
        assert_eq!(p.health_check, None);
        let p = one("[provider.vllm]\nbase_url = \"http://vllm:8000/v1\"\nhealth_check = { path = \"/health\", unhealthy_after = 3 }");
        let hc = p.health_check.unwrap();
        assert_eq!((hc.path.as_str(), hc.unhealthy_after), ("/health", 3));
        // An invalid check makes the provider invalid, but its name is still declared.
        let (p, problems) = read("[provider.vllm]\nbase_url = \"http://vllm:8000/v1\"\nhealth_check = { path = \"health\" }");
        assert!(p.valid.is_empty());
        assert_eq!(p.names, vec!["vllm"]);
        assert_eq!(
            problems,
            vec!["provider.vllm.health_check.path: \"health\" must start with '/' (a path on the provider's host)"]
        );
    }

    #[test]
    fn provider_must_be_a_table() {
        assert_eq!(
            problems("provider = 1"),
            vec!["provider: expected a table, found integer"]
        );
        assert_eq!(
            problems("[provider]\nx = 1"),
            vec!["provider.x: expected a table, found integer"]
        );
    }
}
