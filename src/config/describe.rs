//! The human summary printed by `sturnus check`; shows whether keys are set, never their value.

use super::schema::{Config, ProviderConfig, ProviderKind};
use std::fmt::Write;

/// The `auth:` line: client names and whether tokens are accepted, never a key or secret.
fn auth_line(auth: Option<&super::auth::AuthConfig>) -> String {
    let Some(auth) = auth else {
        return "auth: none (every client is served)\n".to_string();
    };
    let names: Vec<&str> = auth.keys.iter().map(|k| k.name.as_str()).collect();
    let jwt = match &auth.jwt {
        Some(j) => format!(", JWTs from {} for {}", j.issuer, j.audience),
        None => String::new(),
    };
    let anonymous = if auth.allow_anonymous {
        ", anonymous requests allowed"
    } else {
        ""
    };
    format!(
        "auth: {} key(s) [{}]{jwt}{anonymous}\n",
        names.len(),
        names.join(", ")
    )
}

/// Renders a multi-line summary of `cfg` (listen addresses, providers, aliases, routing).
pub(crate) fn describe(cfg: &Config) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "listen: {}", cfg.listen);
    match cfg.metrics_listen {
        Some(m) => {
            let _ = writeln!(s, "metrics_listen: {m}");
        }
        None => s.push_str("metrics_listen: not set\n"),
    }
    if let Some(tls) = &cfg.listen_tls {
        let _ = writeln!(s, "listen_tls: {} (h2, http/1.1)", tls.listen);
    }
    s.push_str(&auth_line(cfg.auth.as_ref()));
    let _ = writeln!(s, "providers ({}):", cfg.providers.len());
    for p in &cfg.providers {
        let _ = writeln!(s, "  {}", provider_line(p));
    }
    let _ = writeln!(s, "aliases ({}):", cfg.aliases.len());
    for a in &cfg.aliases {
        let _ = writeln!(s, "  {}:", a.name);
        for (i, c) in a.candidates.iter().enumerate() {
            let _ = writeln!(s, "    {}. {} / {}", i + 1, c.provider, c.model);
        }
    }
    let r = &cfg.routing;
    let _ = writeln!(
        s,
        "routing: ewma_alpha {}, exploit_k {}, probe_floor {}, error_threshold {}, prefix_affinity {}",
        r.ewma_alpha, r.exploit_k, r.probe_floor, r.error_threshold, r.prefix_affinity
    );
    let _ = writeln!(
        s,
        "timeouts: connect {:?}, read {:?}, header {:?}, body {:?}",
        r.connect_timeout, r.read_timeout, r.header_timeout, r.body_timeout
    );
    let buffered = match r.max_buffered_bytes {
        Some(0) => "0 (no aggregate limit)".to_string(),
        Some(n) => n.to_string(),
        None => "derived from cgroup".to_string(),
    };
    let _ = writeln!(
        s,
        "limits: max_body_bytes {}, max_buffered_bytes {buffered}",
        r.max_body_bytes
    );
    s
}

/// One line describing a provider; the API key appears only as `***` or `not set`.
fn provider_line(p: &ProviderConfig) -> String {
    let kind = match &p.kind {
        ProviderKind::OpenAiCompatible => "OpenAI-compatible".to_string(),
        ProviderKind::AzureOpenAi {
            resource_name,
            api_version,
        } => format!("Azure OpenAI (resource {resource_name}, api-version {api_version})"),
        ProviderKind::GoogleAi { api_version } => format!("Google AI (api version {api_version})"),
        ProviderKind::Anthropic { version } => format!("Anthropic (version {version})"),
        ProviderKind::VertexAi {
            project_id,
            location,
        } => {
            format!("Vertex AI (project {project_id}, location {location})")
        }
    };
    let base = match &p.base_url {
        Some(u) => u.to_string(),
        None => "derived from kind".to_string(),
    };
    let auth = match (&p.kind, &p.api_key) {
        (ProviderKind::VertexAi { .. }, _) => "OAuth (Application Default Credentials)",
        (_, Some(_)) => "api_key ***",
        (_, None) => "api_key not set",
    };
    let health = match &p.health_check {
        Some(hc) => format!(
            "health check GET {} every {:?} (out after {} failures, back after {} passes)",
            hc.path, hc.interval, hc.unhealthy_after, hc.healthy_after
        ),
        None => "no health check".to_string(),
    };
    format!("{}: {kind}, base_url {base}, {auth}, {health}", p.name)
}

#[cfg(test)]
mod tests {
    use super::super::Config;

    #[test]
    fn the_summary_names_clients_and_the_tls_listener_but_never_a_key() {
        let text = "[provider.p]\nbase_url = \"http://127.0.0.1:9/v1\"\n[model]\nfast = [{ provider = \"p\", model = \"m\" }]\n\
                    [listen_tls]\nlisten = \"0.0.0.0:4443\"\ncert = \"c.pem\"\nkey = \"k.pem\"\n\
                    [auth]\n[[auth.key]]\nname = \"billing\"\nkey = \"${K}\"\n";
        let env = |k: &str| (k == "K").then(|| "sk-never-shown".to_string());
        let summary = Config::parse(text, &env).unwrap().describe();
        assert!(summary.contains("listen_tls: 0.0.0.0:4443"), "{summary}");
        assert!(summary.contains("auth: 1 key(s) [billing]"), "{summary}");
        assert!(!summary.contains("sk-never-shown"), "{summary}");
        let open = Config::parse(&text[..text.find("[listen_tls]").unwrap()], &env)
            .unwrap()
            .describe();
        assert!(open.contains("auth: none"), "{open}");
    }
}
