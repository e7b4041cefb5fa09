//! The static `aarch64-unknown-linux-musl` binary (what the arm64 image ships), run on this
//! machine in an arm64 Linux guest under `qemu-system-aarch64` (`scripts/arm64-vm.sh`) with an
//! empty environment: it serves `/health` and proxies one chat completion and one stream to a
//! fake provider running natively, reached through qemu's user-mode network.
//!
//! A full-system emulator, not qemu-user: qemu-user (Debian's 7.2 and 10.0) does not implement
//! `setsockopt(IP_BIND_ADDRESS_NO_PORT)`, which Pingora sets on every connection to a provider,
//! so under it every proxied request fails with a 502. An arm64 kernel implements it.
//!
//! Needs the cross-built binary, qemu-system-aarch64 and the guest's kernel, so it is ignored by
//! `cargo test`; `make smoke-arm64` builds the binary, fetches what the guest needs and runs it
//! with `STURNUS_ARM64_BIN` (the binary) and `ARM64_VM_DIR` (the guest's kernel and busybox).

use crate::common;

use common::elf::{dynamic_needs, machine, EM_AARCH64};
use common::*;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Stops the emulator (and with it the guest) when the test ends, however it ends.
struct Emulated(Child);

impl Drop for Emulated {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the emulated sturnus has written to its log file so far.
fn logs_of(log: &std::path::Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

/// Waits (up to 180 s: the guest boots an emulated kernel first) until `url` answers 200.
async fn wait_for_health(url: &str, process: &mut Emulated, log: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(180);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = process.0.try_wait() {
            panic!("the arm64 guest stopped with {status}:\n{}", logs_of(log));
        }
        if let Ok(r) = client().get(url).send().await {
            if r.status() == 200 {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "sturnus in the arm64 guest did not become healthy in 180 s:\n{}",
        logs_of(log)
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the aarch64 binary and qemu-system-aarch64: run `make smoke-arm64`"]
async fn the_arm64_binary_serves_health_and_proxies_a_chat_and_a_stream_in_an_arm64_guest() {
    let bin = std::env::var("STURNUS_ARM64_BIN")
        .expect("STURNUS_ARM64_BIN names the aarch64 binary (make smoke-arm64 sets it)");
    let elf = std::fs::read(&bin).unwrap_or_else(|e| panic!("{bin}: {e}"));
    assert_eq!(machine(&elf), EM_AARCH64, "{bin} is not an aarch64 binary");
    assert_eq!(dynamic_needs(&elf), (false, 0), "{bin} is not static");

    let sim = FakeProvider::start("plain").await.unwrap();
    let port = free_port();
    let dir = scratch_dir();
    let config = dir.join("config.toml");
    // In the guest, this machine's loopback is 10.0.2.2 and port 4000 is forwarded from `port`.
    let provider = provider_toml("plain", &sim, Some("sk-arm64")).replace("127.0.0.1", "10.0.2.2");
    std::fs::write(
        &config,
        format!(
            "listen = \"0.0.0.0:4000\"\n{provider}[model]\nfast = [{{ provider = \"plain\", model = \"m\" }}]\n[auth]\nallow_anonymous = true\n"
        ),
    )
    .unwrap();
    let log = dir.join("guest.log");
    let out = std::fs::File::create(&log).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/arm64-vm.sh");
    let child = Command::new(script)
        .arg(&bin)
        .arg(&config)
        .arg(port.to_string())
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {script}: {e}"));
    let mut sturnus = Emulated(child);
    let base = format!("http://127.0.0.1:{port}");
    wait_for_health(&format!("{base}/health"), &mut sturnus, &log).await;

    let health = get_url(format!("{base}/health")).await;
    assert_eq!(health.text().await.unwrap(), r#"{"status":"ok"}"#);

    let chat = client()
        .post(format!("{base}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(chat_body("fast", false))
        .send()
        .await
        .unwrap();
    let status = chat.status();
    let provider = chat.headers().get("x-sturnus-provider").cloned();
    let answer = chat.text().await.unwrap();
    assert_eq!(status, 200, "{answer}\n{}", logs_of(&log));
    assert_eq!(provider.unwrap(), "plain");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["model"], "m", "{answer}");
    assert!(
        answer["choices"][0]["message"]["content"].is_string(),
        "{answer}"
    );

    let stream = client()
        .post(format!("{base}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(chat_body("fast", true))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200, "{}", logs_of(&log));
    assert!(stream.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let events = stream.text().await.unwrap();
    assert!(events.matches("data: {").count() >= 2, "{events}");
    assert!(events.trim_end().ends_with("data: [DONE]"), "{events}");

    assert_eq!(sim.request_count(), 2);
    let received = sim.requests();
    assert_eq!(received[0].header("authorization"), Some("Bearer sk-arm64"));
    let logs = logs_of(&log);
    assert!(logs.contains("arm64-vm: aarch64 guest up"), "{logs}");
    assert!(!logs.contains("panicked"), "{logs}");
}
