//! Load tests, bounded in count and time, on loopback: a flood of uploads ten times the memory
//! budget, a thousand concurrent streams, and answers far larger than memory. They assert
//! behaviour; the figures they print (`--nocapture`) are the ones `docs/reliability.md` quotes.

use crate::common;

use common::*;
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Memory sturnus may use on top of the budget: the process itself, Pingora's buffers per
/// connection, the spliced copy of a body up to 64 KiB per request, allocator slack (debug
/// build).
const BASELINE_KIB: u64 = 64 * 1024;

/// A client that allows two minutes per request (the default allows 30 s).
fn patient_client() -> reqwest::Client {
    client_with_timeout(Duration::from_secs(120))
}

async fn setup(routing: &str) -> (FakeProvider, Proxy) {
    one_provider("m", None, &format!("[routing]\n{routing}")).await
}

/// Upload `i` of the flood: a chat body of `size` bytes whose content starts with its number.
fn upload(i: usize, size: usize) -> String {
    let head = format!(
        "{{\"model\":\"fast\",\"messages\":[{{\"role\":\"user\",\"content\":\"upload-{i:04} "
    );
    let tail = "\"}]}";
    let filler: String = "lorem ipsum dolor "
        .chars()
        .cycle()
        .take(size - head.len() - tail.len())
        .collect();
    format!("{head}{filler}{tail}")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_uploads_ten_times_the_budget() {
    const BUDGET: usize = 16 << 20;
    const SIZE: usize = 2 << 20;
    const COUNT: usize = 10 * BUDGET / SIZE;
    let (sim, proxy) = setup(&format!(
        "max_buffered_bytes = {BUDGET}\nmax_body_bytes = {}\n",
        4 << 20
    ))
    .await;
    let start_kib = proxy.memory_kib("VmHWM");
    let bodies: Vec<Arc<String>> = (0..COUNT).map(|i| Arc::new(upload(i, SIZE))).collect();
    let client = client();
    let started = Instant::now();
    let tasks: Vec<_> = bodies
        .iter()
        .map(|body| {
            let (client, url, body) = (
                client.clone(),
                proxy.url("/v1/chat/completions"),
                body.clone(),
            );
            tokio::spawn(async move {
                let resp = client
                    .post(url)
                    .header("content-type", "application/json")
                    .body(body.as_bytes().to_vec())
                    .send()
                    .await
                    .expect("every upload gets an answer");
                let status = resp.status().as_u16();
                let retry = resp.headers().get("retry-after").cloned();
                let text = resp.text().await.unwrap_or_default();
                (status, retry, text)
            })
        })
        .collect();
    let mut served = Vec::new();
    let mut refused = 0;
    for (i, task) in tasks.into_iter().enumerate() {
        let (status, retry, text) = task.await.unwrap();
        match status {
            200 => served.push(i),
            429 => {
                refused += 1;
                let secs: u64 = retry.unwrap().to_str().unwrap().parse().unwrap();
                assert!(secs >= 1);
                assert!(text.contains("memory_budget_exhausted"), "{text}");
            }
            other => panic!("upload {i}: status {other}: {text}"),
        }
    }
    let elapsed = started.elapsed();
    let peak_kib = proxy.memory_kib("VmHWM");
    let status = proxy.status().await;
    eprintln!(
        "flood: {COUNT} uploads of {} MiB against a {} MiB budget in {elapsed:?}: {} served, \
         {refused} refused with 429; sturnus VmHWM {} MiB at start, {} MiB after; budget peak {} bytes",
        SIZE >> 20,
        BUDGET >> 20,
        served.len(),
        start_kib / 1024,
        peak_kib / 1024,
        status["budget"]["peak_bytes"]
    );
    assert!(!served.is_empty(), "nothing was served");
    assert!(refused > 0, "the flood never exceeded the budget");
    assert_eq!(status["budget"]["rejections"], refused);
    assert!(status["budget"]["peak_bytes"].as_u64().unwrap() <= BUDGET as u64);
    assert!(
        peak_kib <= (BUDGET as u64 / 1024) + BASELINE_KIB,
        "peak RSS {peak_kib} KiB is over the budget plus {BASELINE_KIB} KiB"
    );
    // Every upload that was served reached the provider byte for byte (model spliced).
    let received = sim.requests();
    assert_eq!(received.len(), served.len());
    for i in served {
        let expected = bodies[i].replacen("\"fast\"", "\"m\"", 1);
        let marker = format!("upload-{i:04} ");
        let got = received
            .iter()
            .find(|r| {
                r.body
                    .windows(marker.len())
                    .take(200)
                    .any(|w| w == marker.as_bytes())
            })
            .unwrap_or_else(|| panic!("upload {i} never reached the provider"));
        assert!(
            got.body == expected.as_bytes(),
            "upload {i} arrived altered"
        );
    }
    proxy.expect_budget_full("the flood").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_concurrent_streams_complete_in_order() {
    const STREAMS: usize = 1000;
    const CHUNKS: u32 = 20;
    allow_open_files(8192);
    let (sim, proxy) = setup("").await;
    sim.set_recording(false);
    sim.behaviour.set_chunks(CHUNKS);
    sim.behaviour.set_chunk_interval(Duration::from_millis(20));
    let client = patient_client();
    let started = Instant::now();
    let tasks: Vec<_> = (0..STREAMS)
        .map(|_| {
            let (client, url) = (client.clone(), proxy.url("/v1/chat/completions"));
            tokio::spawn(async move {
                let resp = client
                    .post(url)
                    .body(chat_body("fast", true))
                    .send()
                    .await
                    .expect("stream request");
                assert_eq!(resp.status(), 200);
                let mut text = Vec::new();
                let mut body = resp.bytes_stream();
                while let Some(piece) = body.next().await {
                    text.extend_from_slice(&piece.expect("stream broke"));
                }
                String::from_utf8(text).unwrap()
            })
        })
        .collect();
    for task in tasks {
        let text = task.await.unwrap();
        let events: Vec<&str> = text
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .collect();
        assert_eq!(events.len(), CHUNKS as usize + 2, "{text}");
        for (i, event) in events[..CHUNKS as usize].iter().enumerate() {
            assert!(
                event.contains(&format!("\"tok{i} \"")),
                "event {i}: {event}"
            );
        }
        assert!(events[CHUNKS as usize].contains("\"finish_reason\":\"stop\""));
        assert_eq!(events[CHUNKS as usize + 1], "[DONE]");
    }
    eprintln!(
        "{STREAMS} concurrent streams of {} events completed in {:?}; sturnus VmHWM {} MiB",
        CHUNKS + 2,
        started.elapsed(),
        proxy.memory_kib("VmHWM") / 1024
    );
    assert_eq!(sim.request_count(), STREAMS as u64);
    let status = proxy.status().await;
    assert_eq!(status["aliases"][0]["candidates"][0]["in_flight"], 0);
    assert_eq!(status["aliases"][0]["candidates"][0]["failures"], 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn huge_and_endless_answers_do_not_grow_memory() {
    let (sim, proxy) = setup("read_timeout_secs = 5\n").await;
    // Warm up so the baseline includes the first request's allocations.
    let resp = post(&proxy, "/v1/chat/completions", chat_body("fast", false)).await;
    resp.bytes().await.unwrap();
    let before_kib = proxy.memory_kib("VmHWM");

    // A 1 GiB answer, relayed and counted, never held.
    const HUGE: u64 = 1 << 30;
    sim.behaviour.set_fault(Fault::HugeBody(HUGE));
    let started = Instant::now();
    let client = patient_client();
    let url = proxy.url("/v1/chat/completions");
    let resp = chat_ok(&client, &url, false).await;
    assert_eq!(resp.content_length(), Some(HUGE));
    let mut total = 0u64;
    let mut body = resp.bytes_stream();
    while let Some(piece) = body.next().await {
        total += piece.expect("huge body broke").len() as u64;
    }
    assert_eq!(total, HUGE);
    let huge_time = started.elapsed();
    let after_huge_kib = proxy.memory_kib("VmHWM");

    // An endless stream read slowly: sturnus must wait for the reader, not buffer.
    sim.behaviour.set_fault(Fault::EndlessStream);
    let resp = chat_ok(&client, &url, true).await;
    let started = Instant::now();
    let mut body = resp.bytes_stream();
    let slow = read_slowly(&mut body, Duration::from_secs(2), Duration::from_millis(10)).await;
    // Then read as fast as it comes for 16 MiB of small events, and leave.
    let mut fast = 0u64;
    while fast < 16 << 20 {
        fast += body.next().await.unwrap().unwrap().len() as u64;
    }
    drop(body);
    let endless_time = started.elapsed();
    let after_endless_kib = proxy.memory_kib("VmHWM");
    eprintln!(
        "answers: 1 GiB relayed in {huge_time:?}; endless stream: {slow} bytes read slowly, then \
         {} MiB in {endless_time:?}; sturnus VmHWM {} MiB before, {} MiB after 1 GiB, {} MiB after the stream",
        fast >> 20,
        before_kib / 1024,
        after_huge_kib / 1024,
        after_endless_kib / 1024
    );
    let growth = after_endless_kib.saturating_sub(before_kib);
    assert!(
        growth < 32 * 1024,
        "sturnus grew by {growth} KiB relaying answers"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while sim.open_connections() > 0 {
        assert!(
            Instant::now() < deadline,
            "the endless upstream was not closed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = proxy.status().await;
    assert_eq!(status["aliases"][0]["candidates"][0]["in_flight"], 0);
    assert_eq!(status["budget"]["in_use_bytes"], 0);
}
