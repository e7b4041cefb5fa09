//! End-to-end tests of `Config::parse` / `Config::load` on whole config files.

use super::*;
use std::cell::RefCell;
use std::time::Duration;

/// The full example config from the design, with every key.
pub(crate) const FULL: &str = r#"
listen = "127.0.0.1:4000"            # default 127.0.0.1:4000
metrics_listen = "0.0.0.0:4040"

[provider.openai]
base_url = "https://api.openai.com/v1"
api_key = "${OPENAI_API_KEY}"        # optional; ${NOT_EXPANDED_IN_COMMENTS}

[provider.groq]
base_url = "https://api.groq.com/openai/v1"
api_key = "${GROQ_API_KEY:-}"

[provider.azure]
api_key = "${AZURE_OPENAI_KEY}"
azure_openai = { resource_name = "my-resource", api_version = "2024-10-21" }

[provider.gemini]
api_key = "${GEMINI_API_KEY}"
google_ai = { api_version = "v1beta" }

[provider.anthropic]
api_key = "${ANTHROPIC_API_KEY}"
anthropic = { version = "2023-06-01" }

[provider.vertex]
vertex_ai = { project_id = "my-gcp-project", location = "us-central1" }

[model]
fast = [
  { provider = "groq",   model = "llama-3.3-70b-versatile" },
  { provider = "openai", model = "gpt-4o-mini" },
]
smart = [{ provider = "anthropic", model = "claude-sonnet-4" }, { provider = "vertex", model = "gemini-2.5-pro" }]

[routing]
ewma_alpha = 0.3
exploit_k = 3.0
probe_floor = 0.01
error_threshold = 0.5
connect_timeout_secs = 10
read_timeout_secs = 60
max_body_bytes = 33554432
max_buffered_bytes = 0
header_timeout_secs = 10
body_timeout_secs = 0.5
"#;

/// Secret values used by the test environment; none may ever be printed.
pub(crate) const SECRETS: &[&str] = &[
    "sk-openai-SECRET-1",
    "azure-SECRET-2",
    "gemini-SECRET-3",
    "anthropic-SECRET-4",
];

/// A fake environment: no test mutates the process environment.
pub(crate) fn env(name: &str) -> Option<String> {
    match name {
        "OPENAI_API_KEY" => Some(SECRETS[0].into()),
        "AZURE_OPENAI_KEY" => Some(SECRETS[1].into()),
        "GEMINI_API_KEY" => Some(SECRETS[2].into()),
        "ANTHROPIC_API_KEY" => Some(SECRETS[3].into()),
        "EMPTY" => Some(String::new()),
        _ => None,
    }
}

/// A small valid config to build error cases from.
const MINI: &str = "[provider.openai]\nbase_url = \"https://api.openai.com/v1\"\n[model]\nfast = [{ provider = \"openai\", model = \"gpt-4o-mini\" }]\n";

fn problems(text: &str) -> Vec<String> {
    Config::parse(text, &env).expect_err("should fail").problems
}

#[test]
fn full_example_parses() {
    let cfg = Config::parse(FULL, &env).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.listen.to_string(), "127.0.0.1:4000");
    assert_eq!(cfg.metrics_listen.unwrap().to_string(), "0.0.0.0:4040");
    let names: Vec<_> = cfg.providers.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["openai", "groq", "azure", "gemini", "anthropic", "vertex"]
    );
    let openai = cfg.provider("openai").unwrap();
    assert_eq!(openai.kind, ProviderKind::OpenAiCompatible);
    assert_eq!(openai.api_key.as_ref().unwrap().expose(), SECRETS[0]);
    assert_eq!(openai.base_url.as_ref().unwrap().host, "api.openai.com");
    assert!(cfg.provider("groq").unwrap().api_key.is_none());
    assert_eq!(
        cfg.provider("azure").unwrap().kind,
        ProviderKind::AzureOpenAi {
            resource_name: "my-resource".into(),
            api_version: "2024-10-21".into()
        }
    );
    assert_eq!(
        cfg.provider("gemini").unwrap().kind,
        ProviderKind::GoogleAi {
            api_version: "v1beta".into()
        }
    );
    assert_eq!(
        cfg.provider("anthropic").unwrap().kind,
        ProviderKind::Anthropic {
            version: "2023-06-01".into()
        }
    );
    let vertex = cfg.provider("vertex").unwrap();
    assert!(vertex.api_key.is_none() && vertex.base_url.is_none());
    assert!(cfg.provider("nope").is_none());

    let aliases: Vec<_> = cfg.aliases.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(aliases, ["fast", "smart"]);
    let fast = cfg.alias("fast").unwrap();
    assert_eq!(fast.candidates[0].provider, "groq");
    assert_eq!(fast.candidates[0].model, "llama-3.3-70b-versatile");
    assert_eq!(fast.candidates[1].provider, "openai");
    assert!(cfg.alias("slow").is_none());

    assert_eq!(cfg.routing.max_buffered_bytes, Some(0));
    assert_eq!(cfg.routing.body_timeout, Duration::from_millis(500));
    assert_eq!(cfg.routing.max_body_bytes, 33_554_432);
}

#[test]
fn minimal_config_gets_defaults() {
    let cfg = Config::parse(MINI, &env).unwrap();
    assert_eq!(cfg.listen.to_string(), "127.0.0.1:4000");
    assert!(cfg.metrics_listen.is_none());
    assert_eq!(cfg.routing, RoutingConfig::default());
}

#[test]
fn config_order_is_kept_even_when_not_alphabetical() {
    let text = "[model]\nz = [{ provider = \"b\", model = \"m\" }]\na = [{ provider = \"a\", model = \"m\" }]\n\
                [provider.b]\nbase_url = \"http://b\"\n[provider.a]\nbase_url = \"http://a\"";
    let cfg = Config::parse(text, &env).unwrap();
    assert_eq!(cfg.aliases[0].name, "z");
    assert_eq!(cfg.aliases[1].name, "a");
    assert_eq!(cfg.providers[0].name, "b");
}

#[test]
fn unset_variable_names_variable_and_key_path() {
    let text = MINI.replace(
        "base_url = \"https://api.openai.com/v1\"",
        "base_url = \"https://api.openai.com/v1\"\napi_key = \"${OPENAI_API_KEY_X}\"",
    );
    assert_eq!(
        problems(&text),
        vec!["provider.openai.api_key: environment variable OPENAI_API_KEY_X is not set"]
    );
}

#[test]
fn all_problems_are_collected() {
    let text = "listen = \"x\"\nmetrics_listn = 1\n[provider.opnai]\nbase_url = \"https://h\"\n\
                [model]\nfast = [{ provider = \"groq\", model = \"m\" }]\nempty = []\n\
                [routing]\newma_alpah = 0.3\nexploit_k = 0";
    assert_eq!(
        problems(text),
        vec![
            "metrics_listn: unknown key (did you mean metrics_listen?)",
            "listen: \"x\" is not a socket address like 127.0.0.1:4000",
            "model.fast[0].provider: unknown provider \"groq\"",
            "model.empty: alias has no candidates",
            "routing.ewma_alpah: unknown key (did you mean ewma_alpha?)",
            "routing.exploit_k: 0 is out of range (must be > 0 and <= 20)",
        ]
    );
}

#[test]
fn unknown_provider_suggests_the_close_one() {
    let text = MINI.replace("provider = \"openai\"", "provider = \"opnai\"");
    assert_eq!(
        problems(&text),
        vec!["model.fast[0].provider: unknown provider \"opnai\" (did you mean openai?)"]
    );
}

#[test]
fn listen_rules() {
    assert_eq!(
        problems(&format!("listen = 4000\n{MINI}")),
        vec!["listen: expected a string, found integer"]
    );
    assert_eq!(
        problems(&format!("metrics_listen = \"127.0.0.1:4000\"\n{MINI}")),
        vec!["metrics_listen: must differ from listen (127.0.0.1:4000)"]
    );
    assert_eq!(
        problems(&format!("listen = \"127.0.0.1:9\"\nmetrics_listen = \"0.0.0.0:9\"\n{MINI}")),
        vec!["metrics_listen: 0.0.0.0:9 overlaps listen (127.0.0.1:9) on the same port; use a different port"]
    );
    assert_eq!(
        problems(&format!("metrics_listen = \"localhost:1\"\n{MINI}")),
        vec!["metrics_listen: \"localhost:1\" is not a socket address like 0.0.0.0:4040"]
    );
    let cfg = Config::parse(
        &format!("listen = \"${{LISTEN:-[::1]:8080}}\"\n{MINI}"),
        &env,
    )
    .unwrap();
    assert_eq!(cfg.listen.to_string(), "[::1]:8080");
}

#[test]
fn a_listen_override_replaces_the_file_and_is_checked_against_metrics_listen() {
    let text = format!("listen = \"127.0.0.1:4000\"\nmetrics_listen = \"0.0.0.0:4040\"\n{MINI}");
    let open: std::net::SocketAddr = "0.0.0.0:5000".parse().unwrap();
    let cfg = parse::parse(&text, &env, Some(open)).unwrap();
    assert_eq!(cfg.listen, open);
    let clash: std::net::SocketAddr = "0.0.0.0:4040".parse().unwrap();
    assert_eq!(
        parse::parse(&text, &env, Some(clash)).unwrap_err().problems,
        vec!["metrics_listen: must differ from listen (0.0.0.0:4040)"]
    );
    // Without a `listen` key, the override replaces the default.
    let cfg = parse::parse(MINI, &env, Some(open)).unwrap();
    assert_eq!(cfg.listen, open);
}
#[test]
fn empty_document_reports_missing_aliases() {
    assert_eq!(
        problems(""),
        vec!["model: no model aliases defined; add one like [model] fast = [{ provider = \"openai\", model = \"gpt-4o-mini\" }]"]
    );
}

#[test]
fn syntax_errors_have_line_and_column() {
    let p = problems("listen = \"127.0.0.1:4000\"\n[model\n");
    assert_eq!(p.len(), 1);
    assert!(
        p[0].starts_with("config: TOML syntax error at line 2, column "),
        "{p:?}"
    );
    let p = problems("a = 1\na = 2\n");
    assert!(
        p[0].starts_with("config: TOML syntax error at line 2"),
        "{p:?}"
    );
    assert!(p[0].contains("duplicate key"), "{p:?}");
}

#[test]
fn syntax_errors_do_not_echo_values() {
    let p = problems("[provider.x]\napi_key = \"sk-SECRET-in-file\nbase_url = 1");
    assert!(p[0].starts_with("config: TOML syntax error"), "{p:?}");
    assert!(!p[0].contains("sk-SECRET"), "{p:?}");
}

#[test]
fn expansion_in_nested_arrays_and_inline_tables() {
    let text = "[provider.azure]\nazure_openai = { resource_name = \"${RES:-res-1}\", api_version = \"${VER:-2024-10-21}\" }\n\
                [model]\nfast = [{ provider = \"${P:-azure}\", model = \"${M:-gpt-4o}\" }]";
    let cfg = Config::parse(text, &env).unwrap();
    assert_eq!(
        cfg.providers[0].kind,
        ProviderKind::AzureOpenAi {
            resource_name: "res-1".into(),
            api_version: "2024-10-21".into()
        }
    );
    assert_eq!(cfg.aliases[0].candidates[0].provider, "azure");
    assert_eq!(cfg.aliases[0].candidates[0].model, "gpt-4o");
}

#[test]
fn keys_and_comments_are_never_expanded() {
    let looked_up = RefCell::new(Vec::new());
    let spy = |name: &str| {
        looked_up.borrow_mut().push(name.to_string());
        Some("expanded".to_string())
    };
    let text = "# ${IN_COMMENT}\n[provider.\"${IN_KEY}\"]\nbase_url = \"http://h\" # ${TRAILING}\n\
                [model]\nfast = [{ provider = \"${IN_KEY}\", model = \"m\" }]";
    let e = Config::parse(text, &spy).unwrap_err();
    assert_eq!(looked_up.borrow().as_slice(), ["IN_KEY"]);
    assert_eq!(
        e.problems,
        vec![
            "provider.\"${IN_KEY}\": provider name must match [A-Za-z0-9_.-]+ (it is used in headers and metric labels)",
            // The value was expanded (looked up above); a problem quotes it as written.
            "model.fast[0].provider: unknown provider \"${IN_KEY}\"",
        ]
    );
}

#[test]
fn variables_cannot_inject_toml() {
    let evil = |name: &str| {
        (name == "EVIL")
            .then(|| "http://h\"\n[provider.injected]\nbase_url = \"http://x".to_string())
    };
    let text = "[provider.a]\nbase_url = \"${EVIL}\"\n[model]\nfast = [{ provider = \"a\", model = \"m\" }]";
    let e = Config::parse(text, &evil).unwrap_err();
    assert_eq!(e.problems.len(), 1);
    assert!(
        e.problems[0].starts_with("provider.a.base_url: not a valid http(s) URL"),
        "{e}"
    );
}

#[test]
fn unterminated_reference_is_an_error_at_its_key() {
    let text = MINI.replace("gpt-4o-mini", "${MODEL");
    assert_eq!(
        problems(&text),
        vec!["model.fast[0].model: unterminated \"${\" (missing \"}\"; write $$ for a literal $)"]
    );
}

#[test]
fn dollar_escapes_in_values() {
    let text = MINI.replace("gpt-4o-mini", "a$$b$c");
    let cfg = Config::parse(&text, &env).unwrap();
    assert_eq!(cfg.aliases[0].candidates[0].model, "a$b$c");
}

#[test]
fn secrets_never_in_debug_describe_or_errors() {
    let cfg = Config::parse(FULL, &env).unwrap();
    let debug = format!("{cfg:?}");
    let debug_pretty = format!("{cfg:#?}");
    let summary = cfg.describe();
    for secret in SECRETS {
        assert!(!debug.contains(secret));
        assert!(!debug_pretty.contains(secret));
        assert!(!summary.contains(secret));
    }
    assert!(debug.contains("***"));
    // An error elsewhere in the file must not leak them either.
    let broken = FULL.replace("ewma_alpha = 0.3", "ewma_alpha = 3");
    let e = Config::parse(&broken, &env).unwrap_err().to_string();
    for secret in SECRETS {
        assert!(!e.contains(secret));
    }
}

#[test]
fn describe_summarises_the_config() {
    let cfg = Config::parse(FULL, &env).unwrap();
    let s = cfg.describe();
    for expected in [
        "listen: 127.0.0.1:4000",
        "metrics_listen: 0.0.0.0:4040",
        "providers (6):",
        "openai: OpenAI-compatible, base_url https://api.openai.com/v1, api_key ***",
        "groq: OpenAI-compatible, base_url https://api.groq.com/openai/v1, api_key not set",
        "azure: Azure OpenAI (resource my-resource, api-version 2024-10-21), base_url derived from kind, api_key ***",
        "gemini: Google AI (api version v1beta)",
        "anthropic: Anthropic (version 2023-06-01)",
        "vertex: Vertex AI (project my-gcp-project, location us-central1), base_url derived from kind, OAuth (Application Default Credentials)",
        "aliases (2):",
        "  fast:\n    1. groq / llama-3.3-70b-versatile\n    2. openai / gpt-4o-mini",
        "timeouts: connect 10s, read 60s, header 10s, body 500ms",
        "limits: max_body_bytes 33554432, max_buffered_bytes 0 (no aggregate limit)",
    ] {
        assert!(s.contains(expected), "missing {expected:?} in:\n{s}");
    }
    let mini = Config::parse(MINI, &env).unwrap().describe();
    assert!(mini.contains("metrics_listen: not set"));
    assert!(mini.contains("max_buffered_bytes derived from cgroup"));
}

#[test]
fn describe_names_each_providers_health_check() {
    let text = MINI.replace(
        "/v1\"\n",
        "/v1\"\nhealth_check = { path = \"/health\", interval_secs = 2.5, healthy_after = 3 }\n",
    );
    let s = Config::parse(&text, &env).unwrap().describe();
    assert!(
        s.contains("api_key not set, health check GET /health every 2.5s (out after 2 failures, back after 3 passes)"),
        "{s}"
    );
    let s = Config::parse(MINI, &env).unwrap().describe();
    assert!(s.contains("api_key not set, no health check"), "{s}");
}

#[test]
fn error_display_is_one_problem_per_line() {
    let e = Config::parse("listen = 1\nfoo = 2", &env).unwrap_err();
    let text = e.to_string();
    assert_eq!(text.lines().count(), e.problems.len());
    assert_eq!(e.problems.len(), 3);
}

#[test]
fn load_reads_a_file_and_names_missing_paths() {
    let e = Config::load(Path::new("/no/such/sturnus.toml")).unwrap_err();
    assert_eq!(e.problems.len(), 1);
    assert!(
        e.problems[0].starts_with("config: cannot read /no/such/sturnus.toml: "),
        "{e}"
    );

    let path =
        std::env::temp_dir().join(format!("sturnus-config-test-{}.toml", std::process::id()));
    std::fs::write(&path, MINI).unwrap();
    let cfg = Config::load(&path);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(cfg.unwrap().aliases[0].name, "fast");
}

#[test]
fn values_expanded_from_the_environment_are_quoted_as_written_in_problems() {
    let text =
        "listen = \"${OPENAI_API_KEY}\"\n[provider.p]\nbase_url = \"http://127.0.0.1:9/v1\"\n\
                [model]\nfast = [{ provider = \"${GEMINI_API_KEY}\", model = \"m\" }]\n";
    let e = Config::parse(text, &env).unwrap_err();
    let all = e.problems.join("\n");
    for secret in SECRETS {
        assert!(!all.contains(secret), "{all}");
    }
    assert!(
        all.contains("listen: \"${OPENAI_API_KEY}\" is not a socket address"),
        "{all}"
    );
    assert!(
        all.contains("unknown provider \"${GEMINI_API_KEY}\""),
        "{all}"
    );
}
