//! Every provider kind on the wire: URL shape, auth headers, version headers and query rules,
//! against fake providers that record what they received (each kind's `base_url` points
//! at loopback in place of the real host). Also the config mistakes that stop startup.

use crate::common;

use common::gcp::GcpMock;
use common::*;
use std::process::Command;
use sturnus::fake_provider::RecordedRequest;

/// What the client sends along, none of which may reach a provider as credentials.
const CLIENT_AUTH: &[(&str, &str)] = &[
    ("authorization", "Bearer client-own-token"),
    ("api-key", "client-azure-key"),
    ("x-api-key", "client-anthropic-key"),
];

struct Kind {
    /// Provider (and alias) name.
    name: &'static str,
    /// The `[provider.NAME]` body after `base_url` (kind table, key).
    settings: &'static str,
    /// The `base_url` path standing in for the derived prefix.
    base_path: &'static str,
    /// The candidate's model.
    model: &'static str,
    /// Expected upstream path.
    path: &'static str,
    /// Expected upstream query.
    query: Option<&'static str>,
    /// Expected headers (name, value).
    headers: &'static [(&'static str, &'static str)],
    /// Auth headers that must be absent.
    absent: &'static [&'static str],
}

const KINDS: &[Kind] = &[
    Kind {
        name: "openai",
        settings: "api_key = \"sk-openai\"",
        base_path: "/v1",
        model: "gpt-4o-mini",
        path: "/v1/chat/completions",
        query: Some("api-version=client&trace=1"),
        headers: &[("authorization", "Bearer sk-openai")],
        absent: &["api-key", "x-api-key"],
    },
    Kind {
        name: "ollama",
        settings: "",
        base_path: "/v1",
        model: "llama3.2",
        path: "/v1/chat/completions",
        query: Some("api-version=client&trace=1"),
        headers: &[],
        absent: &["authorization", "api-key", "x-api-key"],
    },
    Kind {
        name: "groq",
        settings: "api_key = \"gsk-groq\"",
        base_path: "/openai/v1",
        model: "llama-3.3-70b-versatile",
        path: "/openai/v1/chat/completions",
        query: Some("api-version=client&trace=1"),
        headers: &[("authorization", "Bearer gsk-groq")],
        absent: &["api-key", "x-api-key"],
    },
    Kind {
        name: "azure",
        settings: "api_key = \"az-key\"\nazure_openai = { resource_name = \"my-resource\", api_version = \"2024-10-21\" }",
        base_path: "/openai",
        model: "gpt 4o/prod",
        path: "/openai/deployments/gpt%204o%2Fprod/chat/completions",
        query: Some("trace=1&api-version=2024-10-21"),
        headers: &[("api-key", "az-key")],
        absent: &["authorization", "x-api-key"],
    },
    Kind {
        name: "azure_v1",
        settings: "api_key = \"az-key-v1\"\nazure_openai = { resource_name = \"my-resource\", api_version = \"v1\" }",
        base_path: "/openai/v1",
        model: "gpt-4o",
        path: "/openai/v1/chat/completions",
        query: Some("api-version=client&trace=1"),
        headers: &[("api-key", "az-key-v1")],
        absent: &["authorization", "x-api-key"],
    },
    Kind {
        name: "gemini",
        settings: "api_key = \"g-key\"\ngoogle_ai = { api_version = \"v1beta\" }",
        base_path: "/v1beta/openai",
        model: "gemini-2.5-flash",
        path: "/v1beta/openai/chat/completions",
        query: Some("api-version=client&trace=1"),
        headers: &[("authorization", "Bearer g-key")],
        absent: &["api-key", "x-api-key"],
    },
    Kind {
        name: "anthropic",
        settings: "api_key = \"sk-ant\"\nanthropic = {}",
        base_path: "/v1",
        model: "claude-sonnet-4-5",
        path: "/v1/chat/completions",
        query: Some("api-version=client&trace=1"),
        headers: &[("x-api-key", "sk-ant"), ("anthropic-version", "2023-06-01")],
        absent: &["authorization", "api-key"],
    },
    Kind {
        name: "anthropic_pinned",
        settings: "api_key = \"sk-ant-2\"\nanthropic = { version = \"2024-10-22\" }",
        base_path: "/v1",
        model: "claude-haiku-4-5",
        path: "/v1/chat/completions",
        query: Some("api-version=client&trace=1"),
        headers: &[("x-api-key", "sk-ant-2"), ("anthropic-version", "2024-10-22")],
        absent: &["authorization", "api-key"],
    },
    Kind {
        name: "vertex",
        settings: "vertex_ai = { project_id = \"my-gcp-project\", location = \"us-central1\" }",
        base_path: "/v1/projects/my-gcp-project/locations/us-central1/endpoints/openapi",
        model: "google/gemini-2.5-flash",
        path: "/v1/projects/my-gcp-project/locations/us-central1/endpoints/openapi/chat/completions",
        query: Some("api-version=client&trace=1"),
        headers: &[("authorization", "Bearer <metadata token>")],
        absent: &["api-key", "x-api-key"],
    },
];

/// A body of at least `size` bytes for `alias` (large ones take the direct forwarding path).
fn body(alias: &str, size: usize) -> String {
    let pad = "x".repeat(size.saturating_sub(80));
    format!(r#"{{"model":"{alias}","messages":[{{"role":"user","content":"{pad}"}}]}}"#)
}

fn check(kind: &Kind, got: &RecordedRequest, token: &str, sim: &FakeProvider) {
    let name = kind.name;
    assert_eq!(got.method, "POST", "{name}");
    assert_eq!(got.path, kind.path, "{name}");
    assert_eq!(got.query.as_deref(), kind.query, "{name}");
    for (header, value) in kind.headers {
        let value = value.replace("<metadata token>", token);
        assert_eq!(got.header(header), Some(value.as_str()), "{name}: {header}");
    }
    for header in kind.absent {
        assert_eq!(
            got.header(header),
            None,
            "{name}: {header} must not be sent"
        );
    }
    for (_, client_value) in CLIENT_AUTH {
        assert!(
            got.headers.iter().all(|(_, v)| !v.contains(client_value)),
            "{name}: a client credential was forwarded: {:?}",
            got.headers
        );
    }
    assert_eq!(
        got.header("host"),
        Some(sim.addr.to_string().as_str()),
        "{name}"
    );
    assert_eq!(got.json().unwrap()["model"], kind.model, "{name}");
}

#[tokio::test(flavor = "multi_thread")]
async fn each_kind_gets_its_url_shape_and_auth_headers() {
    let mock = GcpMock::start(3600).await;
    let mut sims = Vec::new();
    let mut config = String::new();
    let mut aliases = String::from("\n[model]\n");
    for kind in KINDS {
        let sim = FakeProvider::start(kind.name).await.unwrap();
        config.push_str(&format!(
            "[provider.{}]\nbase_url = \"{}{}\"\n{}\n",
            kind.name,
            sim.base_url(),
            kind.base_path,
            kind.settings
        ));
        aliases.push_str(&format!(
            "{0} = [{{ provider = \"{0}\", model = \"{1}\" }}]\n",
            kind.name, kind.model
        ));
        sims.push(sim);
    }
    config.push_str(&aliases);
    let home = scratch_dir();
    let env = [
        ("GOOGLE_APPLICATION_CREDENTIALS", ""),
        ("HOME", home.to_str().unwrap()),
        ("CLOUDSDK_CONFIG", home.to_str().unwrap()),
        ("GCE_METADATA_HOST", &mock.metadata_host()),
    ];
    let proxy = Proxy::start_with(&config, &env, &[]).await;

    for (kind, sim) in KINDS.iter().zip(&sims) {
        // Both ways a body goes upstream: spliced into one buffer, and over 64 KiB as pieces.
        for size in [200, 100 * 1024] {
            sim.clear_requests();
            let mut req = client()
                .post(proxy.url("/v1/chat/completions?api-version=client&trace=1"))
                .header("content-type", "application/json");
            for (k, v) in CLIENT_AUTH {
                req = req.header(*k, *v);
            }
            let resp = req.body(body(kind.name, size)).send().await.unwrap();
            assert_eq!(resp.status(), 200, "{} size {size}", kind.name);
            assert_eq!(resp.headers()["x-sturnus-provider"], kind.name);
            let got = sim.requests().pop().expect("the provider saw the request");
            let token = mock
                .issued()
                .last()
                .map(|t| t.token.clone())
                .unwrap_or_default();
            check(kind, &got, &token, sim);
        }
    }
    // Exactly one metadata fetch served all the Vertex traffic.
    assert_eq!(mock.issued().len(), 1);
    let logs = proxy.logs();
    for secret in [
        "sk-openai",
        "gsk-groq",
        "az-key",
        "g-key",
        "sk-ant",
        &mock.issued()[0].token,
    ] {
        assert!(!logs.contains(secret), "{secret} in the log:\n{logs}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_openai_endpoint_maps_onto_each_prefix() {
    let sim = FakeProvider::start("azure").await.unwrap();
    let config = format!(
        "[provider.azure]\nbase_url = \"{}/openai\"\napi_key = \"k\"\n\
         azure_openai = {{ resource_name = \"r\", api_version = \"2024-10-21\" }}\n\
         [provider.claude]\nbase_url = \"{}/v1\"\napi_key = \"k\"\nanthropic = {{}}\n\
         [model]\naz = [{{ provider = \"azure\", model = \"dep\" }}]\nan = [{{ provider = \"claude\", model = \"c\" }}]\n",
        sim.base_url(),
        sim.base_url()
    );
    let proxy = Proxy::start(&config).await;
    for suffix in [
        "/chat/completions",
        "/completions",
        "/embeddings",
        "/responses",
    ] {
        for (alias, expected) in [
            ("az", format!("/openai/deployments/dep{suffix}")),
            ("an", format!("/v1{suffix}")),
        ] {
            let resp = post(
                &proxy,
                &format!("/v1{suffix}"),
                format!(r#"{{"model":"{alias}","input":"hi","prompt":"x"}}"#),
            )
            .await;
            assert_eq!(resp.status(), 200, "{alias}{suffix}");
            let got = sim.requests().pop().unwrap();
            assert_eq!(got.path, expected);
            if alias == "az" {
                assert_eq!(got.query.as_deref(), Some("api-version=2024-10-21"));
            } else {
                assert_eq!(got.query, None);
            }
        }
    }
}

/// Runs `sturnus check` on `config` with `env`; returns (exit code, stderr).
fn check_config(config: &str, env: &[(&str, &str)]) -> (i32, String) {
    let dir = scratch_dir();
    let path = dir.join("config.toml");
    std::fs::write(&path, config).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sturnus"));
    cmd.arg("--config").arg(&path).arg("check");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    std::fs::remove_dir_all(&dir).ok();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn provider_mistakes_stop_startup_with_clear_messages() {
    let alias = "\n[model]\nm = [{ provider = \"p\", model = \"x\" }]\n";
    for (provider, expected) in [
        (
            "[provider.p]\napi_key = \"k\"",
            "provider.p: needs base_url (for an OpenAI-compatible API) or one of azure_openai, google_ai, anthropic, vertex_ai",
        ),
        (
            "[provider.p]\ngoogle_ai = {}\nanthropic = {}",
            "provider.p: only one of azure_openai, google_ai, anthropic, vertex_ai may be set (found google_ai and anthropic)",
        ),
        (
            "[provider.p]\napi_key = \"AIza-secret\"\nvertex_ai = { project_id = \"p\", location = \"global\" }",
            "provider.p.api_key: Vertex AI uses OAuth access tokens (Application Default Credentials), not API keys; remove api_key",
        ),
    ] {
        let (code, stderr) = check_config(&format!("{provider}{alias}"), &[]);
        assert_eq!(code, 1, "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert!(!stderr.contains("AIza-secret"), "{stderr}");
    }
    // An explicitly named credentials file that cannot be used stops startup too.
    let vertex = "[provider.p]\nvertex_ai = { project_id = \"p\", location = \"us-central1\" }";
    let (code, stderr) = check_config(
        &format!("{vertex}{alias}"),
        &[("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/sa.json")],
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("provider.p: Google credentials: GOOGLE_APPLICATION_CREDENTIALS=/nonexistent/sa.json: cannot read the file"),
        "{stderr}"
    );
    // Without any file, the metadata server is the source; it is only asked once serving.
    let home = scratch_dir();
    let (code, stderr) = check_config(
        &format!("{vertex}{alias}"),
        &[
            ("GOOGLE_APPLICATION_CREDENTIALS", ""),
            ("HOME", home.to_str().unwrap()),
            ("CLOUDSDK_CONFIG", home.to_str().unwrap()),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
}
