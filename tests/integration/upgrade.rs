//! Graceful upgrade: a new process started with `-u` takes the listening sockets over when the
//! old one gets SIGQUIT — under continuous load with zero failed requests, in-flight streams
//! completing — and takes the routing state (per-candidate EWMAs) over with them. The new
//! process reads the `[listen_tls]` certificate and key again: replaced files are served to
//! new connections while the old process finishes its TLS streams with the old certificate.

use crate::common;

use common::tls::{edge_config, throwaway_certificate, Throwaway, EDGE_KEY};
use common::*;
use futures_util::StreamExt;
use nix::sys::signal::Signal;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A Pingora server config like `conf/pingora.yaml`, with this test's own socket and pid file.
fn pingora_yaml(dir: &Path) -> PathBuf {
    let path = dir.join("pingora.yaml");
    std::fs::write(
        &path,
        format!(
            "---\nversion: 1\nthreads: 2\nupgrade_sock: {}\npid_file: {}\ngrace_period_seconds: 20\ngraceful_shutdown_timeout_seconds: 5\n",
            dir.join("upgrade.sock").display(),
            dir.join("sturnus.pid").display()
        ),
    )
    .unwrap();
    path
}

/// Starts the new process with `-u` on `old`'s address, sends SIGQUIT to `old` once the new one
/// waits on the upgrade socket, and returns the new process once it serves.
async fn upgrade(old: &Proxy, config: &str, yaml: &Path) -> Proxy {
    let sock = yaml.with_file_name("upgrade.sock");
    let yaml = yaml.to_string_lossy().into_owned();
    let mut new = Proxy::spawn(
        old.addr,
        config,
        Launch {
            args: &["-c", &yaml, "-u"],
            ..Launch::default()
        },
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sock.exists() {
        assert!(
            Instant::now() < deadline,
            "no upgrade socket:\n{}",
            new.logs()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    old.signal(Signal::SIGQUIT);
    assert!(new.wait_healthy().await, "{}", new.logs());
    new
}

/// One request as a load worker sends it; `Err` describes a failure.
async fn one_request(c: &reqwest::Client, url: &str, stream: bool) -> Result<(), String> {
    let resp = c
        .post(url)
        .header("content-type", "application/json")
        .body(chat_body("fast", stream))
        .send()
        .await
        .map_err(|e| format!("send: {e:?}"))?;
    let status = resp.status();
    let body = resp.text().await.map_err(|e| format!("body: {e:?}"))?;
    if status != 200 {
        return Err(format!("status {status}: {body}"));
    }
    let complete = if stream {
        body.trim_end().ends_with("data: [DONE]")
    } else {
        serde_json::from_str::<Value>(&body).is_ok_and(|v| v["choices"].is_array())
    };
    if complete {
        Ok(())
    } else {
        Err(format!("incomplete body: {body}"))
    }
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    failures: Mutex<Vec<String>>,
}

/// A load worker: reused connections (one pooled client) or a new connection per request,
/// alternating streaming and not, until `stop` (and at most `max` requests).
async fn worker(url: String, reuse: bool, stop: Arc<AtomicBool>, tally: Arc<Tally>) {
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30));
    if !reuse {
        builder = builder.pool_max_idle_per_host(0);
    }
    let c = builder.build().unwrap();
    let max = 20_000;
    for i in 0..max {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        match one_request(&c, &url, i % 2 == 1).await {
            Ok(()) => {
                tally.ok.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => tally.failures.lock().unwrap().push(e),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn upgrade_under_load_fails_no_request_and_in_flight_streams_complete() {
    let fast = FakeProvider::start("fast").await.unwrap();
    fast.behaviour.set_latency(Duration::from_millis(2));
    fast.behaviour.set_chunk_interval(Duration::from_millis(5));
    let slow = FakeProvider::start("slow").await.unwrap();
    // Long streams: 16 events 500 ms apart, so they outlive the old process's 5 s hand-over.
    slow.behaviour.set_chunks(14);
    slow.behaviour
        .set_chunk_interval(Duration::from_millis(500));
    let config = format!(
        "{}{}[model]\nfast = [{{ provider = \"fast\", model = \"f\" }}]\nlong = [{{ provider = \"slow\", model = \"s\" }}]\n",
        provider_toml("fast", &fast, None),
        provider_toml("slow", &slow, None)
    );
    let dir = scratch_dir();
    let yaml = pingora_yaml(&dir);
    let yaml_arg = yaml.to_string_lossy().into_owned();
    let mut old = Proxy::start_with(&config, &[], &["-c", &yaml_arg]).await;
    let old_pid = old.pid();

    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let url = old.url("/v1/chat/completions");
    let workers: Vec<_> = [true, true, false, false]
        .into_iter()
        .map(|reuse| tokio::spawn(worker(url.clone(), reuse, stop.clone(), tally.clone())))
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Streams in flight on the old process when it hands over.
    let mut long_streams = Vec::new();
    for _ in 0..3 {
        let mut resp = post(&old, "/v1/chat/completions", chat_body("long", true)).await;
        assert_eq!(resp.status(), 200);
        let first = resp.chunk().await.unwrap().expect("first chunk");
        long_streams.push(tokio::spawn(async move {
            let mut body = first.to_vec();
            let mut rest = resp.bytes_stream();
            while let Some(chunk) = rest.next().await {
                body.extend_from_slice(&chunk.map_err(|e| format!("{e:?}"))?);
            }
            Ok::<_, String>(String::from_utf8_lossy(&body).into_owned())
        }));
    }

    let new = upgrade(&old, &config, &yaml).await;
    assert_ne!(new.pid(), old_pid);

    // The old process serves what it has, hands over, drains and exits 0 by itself.
    let status = old.wait_exit(Duration::from_secs(30)).await;
    let status = status.unwrap_or_else(|| panic!("old still running:\n{}", old.logs()));
    assert_eq!(status.code(), Some(0), "{}", old.logs());
    let served_before_exit = tally.ok.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }

    for s in long_streams {
        let text = s
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("stream broke: {e}"));
        assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
        assert_eq!(text.matches("\"delta\"").count(), 15, "{text}");
    }
    let failures = tally.failures.lock().unwrap().clone();
    let ok = tally.ok.load(Ordering::Relaxed);
    assert!(
        failures.is_empty(),
        "{} of {} requests failed, e.g. {:?}",
        failures.len(),
        ok + failures.len() as u64,
        &failures[..failures.len().min(5)]
    );
    eprintln!("{ok} requests served across the upgrade, {served_before_exit} before the old process exited");
    assert!(
        ok > served_before_exit,
        "nothing served after the old process exited"
    );
    assert!(ok >= 100, "only {ok} requests");
    assert_eq!(new.status().await["pid"], new.pid());
    assert!(!old.logs().contains("panicked") && !new.logs().contains("panicked"));
}

/// `(latency_ms non-streaming, latency_ms streaming, success_rate, state)` of a candidate.
fn candidate(status: &Value, provider: &str) -> Option<(Value, Value, Value, Value)> {
    status["aliases"][0]["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["provider"] == provider)
        .map(|c| {
            (
                c["non_streaming"]["latency_ms"].clone(),
                c["streaming"]["latency_ms"].clone(),
                c["success_rate"].clone(),
                c["state"].clone(),
            )
        })
}

#[tokio::test(flavor = "multi_thread")]
async fn routing_state_survives_the_upgrade_removed_candidates_drop_new_ones_start_cold() {
    let a = FakeProvider::start("a").await.unwrap();
    let b = FakeProvider::start("b").await.unwrap();
    let c = FakeProvider::start("c").await.unwrap();
    a.behaviour.set_latency(Duration::from_millis(5));
    b.behaviour.set_latency(Duration::from_millis(30));
    let providers = format!(
        "{}{}{}",
        provider_toml("a", &a, None),
        provider_toml("b", &b, None),
        provider_toml("c", &c, None)
    );
    let old_config = format!(
        "{providers}[model]\nfast = [{{ provider = \"a\", model = \"ma\" }}, {{ provider = \"b\", model = \"mb\" }}]\n"
    );
    let dir = scratch_dir();
    let yaml = pingora_yaml(&dir);
    let yaml_arg = yaml.to_string_lossy().into_owned();
    let mut old = Proxy::start_with(&old_config, &[], &["-c", &yaml_arg]).await;
    // Warm both candidates in both modes, each request pinned to its candidate.
    for i in 0..60 {
        let pin = ["a/ma", "b/mb"][i / 2 % 2];
        let resp = client()
            .post(old.url("/v1/chat/completions"))
            .header("x-session-affinity", pin)
            .body(chat_body("fast", i % 2 == 0))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        resp.bytes().await.unwrap();
    }
    let before = old.status().await;
    let (a_ns, a_s, a_success, a_state) = candidate(&before, "a").unwrap();
    assert!(a_ns.is_f64() && a_s.is_f64(), "a not warm: {before}");
    assert!(
        candidate(&before, "b").unwrap().0.is_f64(),
        "b not warm: {before}"
    );
    assert_eq!(a_state, "warm");

    // The new config keeps a, drops b, adds c.
    let new_config = format!(
        "{providers}[model]\nfast = [{{ provider = \"a\", model = \"ma\" }}, {{ provider = \"c\", model = \"mc\" }}]\n"
    );
    let new = upgrade(&old, &new_config, &yaml).await;
    let after = new.status().await;
    assert_eq!(after["pid"], new.pid());
    let (n_ns, n_s, n_success, n_state) = candidate(&after, "a").unwrap();
    assert_eq!((n_ns, n_s, n_success), (a_ns, a_s, a_success), "{after}");
    assert_eq!(n_state, "warm");
    assert_eq!(
        after["aliases"][0]["candidates"][0]["requests"], 0,
        "counters start fresh"
    );
    assert!(candidate(&after, "b").is_none(), "{after}");
    let (c_ns, c_s, _, c_state) = candidate(&after, "c").unwrap();
    assert!(c_ns.is_null() && c_s.is_null(), "{after}");
    assert_eq!(c_state, "cold");
    assert!(
        new.logs()
            .contains("1 candidate(s) carried, 1 dropped, 1 new (cold)"),
        "{}",
        new.logs()
    );
    assert!(
        !dir.join("upgrade.sock.routing-state.json").exists(),
        "the snapshot is consumed"
    );
    let status = old.wait_exit(Duration::from_secs(30)).await;
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{}", old.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upgrade_with_a_new_metrics_listener_config_serves_it_from_the_new_process() {
    let sim = FakeProvider::start("p").await.unwrap();
    let metrics = format!("127.0.0.1:{}", free_port());
    let config =
        format!("metrics_listen = \"{metrics}\"\n") + &fast_alias_config("p", &sim, "m", None);
    let dir = scratch_dir();
    let yaml = pingora_yaml(&dir);
    let yaml_arg = yaml.to_string_lossy().into_owned();
    let mut old = Proxy::start_with(&config, &[], &["-c", &yaml_arg]).await;
    let new = upgrade(&old, &config, &yaml).await;
    let status = old.wait_exit(Duration::from_secs(30)).await;
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{}", old.logs());
    // The metrics socket moved too: the new process answers on it, healthy.
    let v: Value = get_url(format!("http://{metrics}/status"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["pid"], new.pid());
    let health = get_url(format!("http://{metrics}/health")).await;
    assert_eq!(health.status(), 200);
}

/// An HTTPS client trusting every CA of `certs`, reporting the certificate each answer came
/// with, on a new connection for every request.
fn tls_client(certs: &[&Throwaway], http1_only: bool) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .tls_info(true)
        .pool_max_idle_per_host(0);
    for cert in certs {
        let ca = reqwest::Certificate::from_pem(&std::fs::read(&cert.ca_pem).unwrap()).unwrap();
        builder = builder.add_root_certificate(ca);
    }
    if http1_only {
        builder = builder.http1_only();
    }
    builder.build().unwrap()
}

/// A chat request to the TLS listener with the edge client's key.
async fn tls_chat(client: &reqwest::Client, port: u16, stream: bool) -> reqwest::Response {
    client
        .post(format!("https://127.0.0.1:{port}/v1/chat/completions"))
        .header("authorization", format!("Bearer {EDGE_KEY}"))
        .header("content-type", "application/json")
        .body(chat_body("fast", stream))
        .send()
        .await
        .unwrap()
}

/// The leaf certificate (DER) the server presented for `resp`.
fn presented(resp: &reqwest::Response) -> Vec<u8> {
    resp.extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|info| info.peer_certificate())
        .expect("the TLS peer certificate")
        .to_vec()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upgrade_reads_the_tls_certificate_again_and_in_flight_tls_streams_finish() {
    let sim = FakeProvider::start("up").await.unwrap();
    // Streams of 13 events 600 ms apart outlive the old process's 5 s hand-over.
    sim.behaviour.set_chunks(12);
    sim.behaviour.set_chunk_interval(Duration::from_millis(600));
    let first = throwaway_certificate();
    let second = throwaway_certificate();
    let port = free_port();
    let config = edge_config(&sim, &first, port, "");
    let dir = scratch_dir();
    let yaml = pingora_yaml(&dir);
    let yaml_arg = yaml.to_string_lossy().into_owned();
    let mut old = Proxy::start_with(&config, &[], &["-c", &yaml_arg]).await;

    // A stream in flight on the old process over each HTTP version.
    let mut in_flight = Vec::new();
    for (http1_only, version) in [
        (false, http::Version::HTTP_2),
        (true, http::Version::HTTP_11),
    ] {
        let client = tls_client(&[&first, &second], http1_only);
        let mut resp = tls_chat(&client, port, true).await;
        assert_eq!((resp.status().as_u16(), resp.version()), (200, version));
        assert_eq!(presented(&resp), first.leaf_der);
        let head = resp.chunk().await.unwrap().expect("first chunk");
        in_flight.push(tokio::spawn(async move {
            let mut body = head.to_vec();
            while let Some(chunk) = resp.chunk().await.map_err(|e| format!("{e:?}"))? {
                body.extend_from_slice(&chunk);
            }
            Ok::<_, String>((version, String::from_utf8_lossy(&body).into_owned()))
        }));
    }

    // The files are replaced by another CA's certificate and key; the config stays as it was.
    std::fs::copy(&second.cert_pem, &first.cert_pem).unwrap();
    std::fs::copy(&second.key_pem, &first.key_pem).unwrap();
    let _new = upgrade(&old, &config, &yaml).await;

    // The old process accepts for a few seconds more; the new one serves the new certificate
    // from its first connection on.
    let client = tls_client(&[&first, &second], false);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let resp = tls_chat(&client, port, false).await;
        assert_eq!(resp.status(), 200);
        if presented(&resp) == second.leaf_der {
            break;
        }
        assert_eq!(presented(&resp), first.leaf_der);
        assert!(
            Instant::now() < deadline,
            "the new certificate is never served"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = old.wait_exit(Duration::from_secs(30)).await;
    let status = status.unwrap_or_else(|| panic!("old still running:\n{}", old.logs()));
    assert_eq!(status.code(), Some(0), "{}", old.logs());

    for stream in in_flight {
        let (version, text) = stream
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("stream broke: {e}"));
        assert!(
            text.trim_end().ends_with("data: [DONE]"),
            "{version:?}: {text}"
        );
        assert_eq!(text.matches("\"delta\"").count(), 13, "{version:?}: {text}");
    }
    // Once the old process is gone, every new connection, over either version, gets the new
    // certificate; a client trusting only the old CA is refused.
    for http1_only in [false, true] {
        let resp = tls_chat(&tls_client(&[&second], http1_only), port, true).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(presented(&resp), second.leaf_der);
    }
    let refused = tls_client(&[&first], false)
        .post(format!("https://127.0.0.1:{port}/v1/chat/completions"))
        .send()
        .await;
    assert!(refused.is_err(), "{refused:?}");
}
