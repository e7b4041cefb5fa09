//! `sturnus healthcheck [--url URL]`: exit 0 on a 200, else 1 with one line saying why.

use crate::common;

use common::*;
use nix::sys::signal::Signal;
use std::process::Output;
use std::time::Duration;

fn healthcheck(args: &[&str]) -> Output {
    run_sturnus("healthcheck", args)
}

fn one_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes).into_owned();
    assert_eq!(text.trim_end().lines().count(), 1, "not one line: {text:?}");
    text
}

#[tokio::test(flavor = "multi_thread")]
async fn healthy_draining_and_unreachable_targets() {
    let sim = FakeProvider::start("p").await.unwrap();
    let metrics = format!("127.0.0.1:{}", free_port());
    sim.behaviour.set_chunks(10);
    sim.behaviour.set_chunk_interval(Duration::from_millis(300));
    let config = format!(
        "metrics_listen = \"{metrics}\"\n{}[model]\nfast = [{{ provider = \"p\", model = \"m\" }}]\n",
        provider_toml("p", &sim, None)
    );
    let mut proxy = Proxy::start(&config).await;

    let ok = healthcheck(&["--url", &proxy.url("/health")]);
    assert_eq!(ok.status.code(), Some(0), "{ok:?}");
    assert!(one_line(&ok.stdout).contains("200"));

    // A stream keeps the process draining after SIGTERM; the metrics listener says 503.
    let mut stream = post(&proxy, "/v1/chat/completions", chat_body("fast", true)).await;
    stream.chunk().await.unwrap();
    proxy.signal(Signal::SIGTERM);
    let url = format!("http://{metrics}/health");
    let mut draining = None;
    for _ in 0..200 {
        let out = tokio::task::spawn_blocking({
            let url = url.clone();
            move || healthcheck(&["--url", &url])
        })
        .await
        .unwrap();
        if out.status.code() == Some(1) {
            draining = Some(out);
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let draining = draining.expect("healthcheck never failed while draining");
    let why = one_line(&draining.stderr);
    assert!(
        why.contains("503") && why.contains("shutting_down"),
        "{why}"
    );
    while stream.chunk().await.unwrap().is_some() {}
    assert_eq!(
        proxy
            .wait_exit(Duration::from_secs(15))
            .await
            .and_then(|s| s.code()),
        Some(0)
    );

    // Nothing listening any more: refused, one line naming the address.
    let refused = healthcheck(&["--url", &url, "--timeout", "2"]);
    assert_eq!(refused.status.code(), Some(1));
    let why = one_line(&refused.stderr);
    assert!(why.contains(&metrics), "{why}");
}

#[test]
fn a_wrong_path_and_a_bad_url_fail_with_one_line() {
    let out = healthcheck(&["--url", "https://127.0.0.1:1/health"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(one_line(&out.stderr).contains("only http://"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_non_200_answer_is_unhealthy() {
    let (_sim, proxy) = one_provider("m", None, "").await;
    let url = proxy.url("/nope");
    let out = tokio::task::spawn_blocking(move || healthcheck(&["--url", &url]))
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let why = one_line(&out.stderr);
    assert!(why.contains("404"), "{why}");
}
