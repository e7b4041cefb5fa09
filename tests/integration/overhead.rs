//! `sturnus_overhead_seconds`, black-box: one observation per answered request, per alias and
//! stream mode, far below the provider's own time, and not raised by a client that reads slowly.

use crate::common;

use common::exposition::Exposition;
use common::*;
use futures_util::StreamExt;
use std::time::Duration;

/// The fake provider's delay before its response header.
const DELAY: Duration = Duration::from_millis(200);

/// `(count, sum)` of the overhead histogram for one alias and stream mode.
fn overhead(m: &Exposition, alias: &str, stream: &str) -> (f64, f64) {
    let labels = [("alias", alias), ("stream", stream)];
    let count = m.value("sturnus_overhead_seconds_count", &labels);
    let sum = m.value("sturnus_overhead_seconds_sum", &labels);
    (
        count.unwrap_or_else(|| panic!("no overhead count for {alias}/{stream}")),
        sum.unwrap_or_else(|| panic!("no overhead sum for {alias}/{stream}")),
    )
}

async fn setup() -> (FakeProvider, Proxy) {
    let sim = FakeProvider::start("up").await.unwrap();
    sim.behaviour.set_latency(DELAY);
    let config = format!(
        "{}\n[routing]\nread_timeout_secs = 10\n\n[model]\n\
         fast = [{{ provider = \"up\", model = \"real-a\" }}]\n\
         idle = [{{ provider = \"up\", model = \"real-b\" }}]\n",
        provider_toml("up", &sim, None),
    );
    let proxy = Proxy::start(&config).await;
    (sim, proxy)
}

fn patient_client() -> reqwest::Client {
    client_with_timeout(Duration::from_secs(60))
}

#[tokio::test(flavor = "multi_thread")]
async fn every_answered_request_is_observed_once_far_below_the_providers_time() {
    let (_sim, proxy) = setup().await;
    let before = proxy.settled_metrics().await;
    for (alias, stream) in [("fast", "false"), ("fast", "true"), ("idle", "false")] {
        assert_eq!(overhead(&before, alias, stream), (0.0, 0.0), "pre-created");
    }

    const PLAIN: usize = 5;
    const STREAMS: usize = 4;
    for _ in 0..PLAIN {
        let resp = post(&proxy, "/v1/chat/completions", chat_body("fast", false)).await;
        assert_eq!(resp.status(), 200);
        let body: serde_json::Value = resp.json().await.unwrap();
        assert!(body["choices"][0]["message"]["content"].is_string());
    }
    for _ in 0..STREAMS {
        let resp = post(&proxy, "/v1/chat/completions", chat_body("fast", true)).await;
        assert_eq!(resp.status(), 200);
        let text = resp.text().await.unwrap();
        assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    }

    let m = proxy.settled_metrics().await;
    let (plain_count, plain_sum) = overhead(&m, "fast", "false");
    let (stream_count, stream_sum) = overhead(&m, "fast", "true");
    eprintln!(
        "overhead: non-streaming {plain_count} requests, {:.3} ms in all; streaming {stream_count} \
         requests, {:.3} ms in all; provider delay {DELAY:?} each",
        plain_sum * 1e3,
        stream_sum * 1e3
    );
    assert_eq!(plain_count, PLAIN as f64);
    assert_eq!(stream_count, STREAMS as f64);
    // The provider's delay (and connecting to it) is not sturnus's cost: the overhead of all
    // the requests together stays below the delay of one.
    for sum in [plain_sum, stream_sum] {
        assert!(sum > 0.0, "overhead sum {sum}");
        assert!(sum < DELAY.as_secs_f64(), "overhead sum {sum} s");
    }
    // Unused alias: its series exist and stay at zero.
    assert_eq!(overhead(&m, "idle", "false"), (0.0, 0.0));
    assert_eq!(overhead(&m, "idle", "true"), (0.0, 0.0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_reading_client_does_not_raise_the_overhead() {
    let (sim, proxy) = setup().await;
    let url = proxy.url("/v1/chat/completions");
    let client = patient_client();

    // A stream without end, read a little at a time for well over the provider's delay (the
    // socket buffers fill and sturnus's writes wait for the reader), then left.
    sim.behaviour.set_fault(Fault::EndlessStream);
    let resp = chat_ok(&client, &url, true).await;
    let mut body = resp.bytes_stream();
    let read = read_slowly(&mut body, 5 * DELAY, Duration::from_millis(20)).await;
    drop(body);
    assert!(read > 0);

    // A large answer in one piece, read slowly the same way, then to its end.
    const HUGE: u64 = 64 << 20;
    sim.behaviour.set_fault(Fault::HugeBody(HUGE));
    let resp = chat_ok(&client, &url, false).await;
    let mut body = resp.bytes_stream();
    let mut total = read_slowly(&mut body, 5 * DELAY, Duration::from_millis(20)).await;
    assert!(
        total < HUGE,
        "the answer was read before the reader slowed down"
    );
    while let Some(piece) = body.next().await {
        total += piece.unwrap().len() as u64;
    }
    assert_eq!(total, HUGE);

    let m = proxy.settled_metrics().await;
    let (stream_count, stream_sum) = overhead(&m, "fast", "true");
    let (plain_count, plain_sum) = overhead(&m, "fast", "false");
    eprintln!(
        "slow readers: streaming overhead {:.3} ms, non-streaming {:.3} ms; provider delay {DELAY:?}",
        stream_sum * 1e3,
        plain_sum * 1e3
    );
    assert_eq!((stream_count, plain_count), (1.0, 1.0));
    for sum in [stream_sum, plain_sum] {
        assert!(sum > 0.0, "overhead sum {sum}");
        assert!(
            sum < DELAY.as_secs_f64(),
            "a slow reader raised the overhead to {sum} s"
        );
    }
}
