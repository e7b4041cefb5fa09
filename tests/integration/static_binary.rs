//! What the `FROM scratch` image relies on, proven without Docker: the binary is statically
//! linked, and in an empty environment — and, for the static build, inside an empty root that
//! holds nothing but the binary and its config (no libc, no /etc, no CA files, no /tmp) — it
//! serves `/health`, reaches an HTTPS provider whose certificate chains to a private CA named by
//! `SSL_CERT_FILE`, and without it fails cleanly with a JSON 502 `upstream_tls_error`.
//!
//! The README's test command builds this suite for `x86_64-unknown-linux-musl`, so the binary
//! under test is the one the Dockerfile ships.

use crate::common;

use common::elf::dynamic_needs;
use common::*;
use std::path::Path;

#[test]
fn elf_reading_tells_a_dynamic_binary_from_a_static_one() {
    // This test binary itself: dynamic on glibc, static on musl.
    let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    let (interp, needed) = dynamic_needs(&me);
    if cfg!(target_env = "musl") {
        assert!(!interp && needed == 0);
    } else {
        assert!(
            interp && needed > 0,
            "a glibc test binary should be dynamic"
        );
    }
}

#[cfg(target_env = "musl")]
#[test]
fn the_binary_is_statically_linked() {
    let bin = std::fs::read(env!("CARGO_BIN_EXE_sturnus")).unwrap();
    let (interp, needed) = dynamic_needs(&bin);
    assert!(!interp, "the binary names a dynamic loader (PT_INTERP)");
    assert_eq!(needed, 0, "the binary needs shared libraries");
}

/// Where the process runs: for the static build, an empty root (which needs `chroot`, so root:
/// a run that cannot make one fails rather than passing without the check); for a glibc build,
/// which cannot run without its libc, an empty environment only.
fn scratch_files<'a>(files: &'a [(&'a str, &'a Path)]) -> Option<&'a [(&'a str, &'a Path)]> {
    if !cfg!(target_env = "musl") {
        return None;
    }
    assert!(
        is_root(),
        "the static binary's empty-root check needs root (chroot): run the suite as root, \
         or skip it with `-- --skip static_binary`"
    );
    Some(files)
}

/// Starts sturnus like a scratch container would: empty environment plus `env`, and (static
/// build, as root) an empty root holding only the binary, the config and `files`.
async fn start_bare(config: &str, env: &[(&str, &str)], files: &[(&str, &Path)]) -> Proxy {
    Proxy::launch(
        config,
        Launch {
            env,
            clear_env: true,
            scratch_root: scratch_files(files),
            ..Launch::default()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn in_an_empty_environment_it_serves_health_and_proxies() {
    let sim = FakeProvider::start("plain").await.unwrap();
    let metrics = format!("127.0.0.1:{}", free_port());
    let config =
        format!("metrics_listen = \"{metrics}\"\n") + &fast_alias_config("plain", &sim, "m", None);
    let proxy = start_bare(&config, &[], &[]).await;
    let health = get(&proxy, "/health").await;
    assert_eq!(health.status(), 200);
    assert_eq!(health.text().await.unwrap(), r#"{"status":"ok"}"#);
    let resp = post(&proxy, "/v1/chat/completions", chat_body("fast", true)).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().contains("data: [DONE]"));
    let scrape = get_url(format!("http://{metrics}/metrics")).await;
    assert_eq!(scrape.status(), 200);
    // The healthcheck subcommand works there too (what a HEALTHCHECK or exec probe runs).
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sturnus"))
        .env_clear()
        .args(["healthcheck", "--url", &proxy.url("/health")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(!proxy.logs().contains("panicked"), "{}", proxy.logs());
}

async fn https_setup(trust_test_ca: bool) -> (FakeProvider, Proxy) {
    let sim = FakeProvider::start("secure").await.unwrap();
    let front = tls::front(sim.addr).await;
    let config = format!(
        "[provider.secure]\nbase_url = \"https://127.0.0.1:{}/v1\"\napi_key = \"sk-scratch\"\n[model]\nfast = [{{ provider = \"secure\", model = \"m\" }}]\n",
        front.addr.port()
    );
    let in_root = scratch_files(&[]).is_some();
    let ca_path = if in_root {
        "/test-ca.pem".to_string()
    } else {
        front.ca_pem.to_string_lossy().into_owned()
    };
    let env: Vec<(&str, &str)> = if trust_test_ca {
        vec![("SSL_CERT_FILE", ca_path.as_str())]
    } else {
        vec![]
    };
    let files = [("test-ca.pem", front.ca_pem.as_path())];
    let proxy = start_bare(&config, &env, &files).await;
    (sim, proxy)
}

#[tokio::test(flavor = "multi_thread")]
async fn https_to_a_private_ca_works_with_ssl_cert_file() {
    let (sim, proxy) = https_setup(true).await;
    tls::expect_https_round_trip(&proxy, &sim, "sk-scratch").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn https_to_a_private_ca_fails_cleanly_without_ssl_cert_file() {
    let (sim, proxy) = https_setup(false).await;
    let resp = post(&proxy, "/v1/chat/completions", chat_body("fast", false)).await;
    assert_eq!(resp.status(), 502);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    let err = error_of(resp).await;
    assert_eq!(err["code"], "upstream_tls_error", "{err}");
    assert_eq!(sim.request_count(), 0);
    // Still serving, no panic.
    let health = get(&proxy, "/health").await;
    assert_eq!(health.status(), 200);
    assert!(!proxy.logs().contains("panicked"), "{}", proxy.logs());
}
