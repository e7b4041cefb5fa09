//! Prompt-cache affinity end to end: the turns of a conversation keep to the candidate their
//! key picks by weighted rendezvous over the shares, new conversations follow the shares, the
//! explicit `x-session-affinity` pin wins, a conversation moves off a failing candidate,
//! keyed picks exploit more sharply once most keyed answers hit the cache, and answers from the
//! provider's prompt cache raise the latency sturnus learns only while they are slow.

use crate::common;

use common::*;
use std::time::Duration;
use sturnus::routing::rendezvous::{identity, pick_by};

/// Two candidates `a` and `b` as alias `fast`, with `routing` as the `[routing]` table.
async fn with_routing(routing: &str) -> (FakeProvider, FakeProvider, Proxy) {
    two_candidates(&format!("[routing]\n{routing}")).await
}

/// Turn `turn` (1-based) of conversation `question` after `system`: the system prompt, the
/// first question, then an answer and a follow-up per earlier turn.
fn turn_body(system: &str, question: &str, turn: usize) -> String {
    let mut messages = vec![
        serde_json::json!({"role": "system", "content": system}),
        serde_json::json!({"role": "user", "content": question}),
    ];
    for t in 1..turn {
        messages.push(serde_json::json!({"role": "assistant", "content": format!("answer {t}")}));
        messages.push(serde_json::json!({"role": "user", "content": format!("follow-up {t}")}));
    }
    serde_json::json!({"model": "fast", "messages": messages}).to_string()
}

const SYSTEM: &str = "You are the support assistant of a bicycle shop. Answer briefly.";

/// The provider the key of conversation `question` lands on when `a` and `b` have these
/// shares, as every sidecar computes it.
fn lands_on(question: &str, share_a: f64, share_b: f64) -> &'static str {
    let body = turn_body(SYSTEM, question, 2);
    let inspected = sturnus::body::inspect(body.as_bytes()).unwrap();
    let key = inspected
        .conversation_key(body.as_bytes())
        .expect("a conversation key");
    let candidates = [(identity("a/ma"), share_a), (identity("b/mb"), share_b)];
    ["a", "b"][pick_by(key, candidates).unwrap()]
}

/// Sends `body` (optionally pinned) and returns the provider that served it.
async fn send(proxy: &Proxy, body: String, pin: Option<&str>) -> String {
    let mut req = client().post(proxy.url("/v1/chat/completions")).body(body);
    if let Some(pin) = pin {
        req = req.header("x-session-affinity", pin);
    }
    let resp = req.send().await.unwrap();
    let provider = served_by(&resp);
    resp.bytes().await.unwrap();
    provider
}

/// Warms both candidates with one-shot requests (unkeyed: they follow the shares).
async fn warm(proxy: &Proxy) {
    let c = client();
    for _ in 0..40 {
        let resp = send_chat(&c, proxy.url("/v1/chat/completions"), false).await;
        resp.bytes().await.unwrap();
    }
}

/// The non-streaming shares of `a` and `b` on `/status`.
async fn shares(proxy: &Proxy) -> (f64, f64) {
    let status = proxy.status().await;
    let share = |p| {
        status_candidate(&status, p)["share"]["non_streaming"]
            .as_f64()
            .unwrap()
    };
    (share("a"), share("b"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_conversations_turns_keep_to_one_candidate_and_new_ones_follow_the_shares() {
    // b fails every request, so it sits at the whole probe floor (with no successful answer it
    // has no latency to scale its part of the floor by): shares exactly 0.8 / 0.2, whatever the
    // machine's noise. The provider that answers is what is checked, not the answer.
    let (a, b, proxy) = with_routing("probe_floor = 0.2\nprefix_affinity = true\n").await;
    a.behaviour.set_latency(Duration::from_millis(2));
    b.behaviour.set_fault(Fault::Status(500));
    warm(&proxy).await;
    let (share_a, share_b) = shares(&proxy).await;
    assert!((share_a - 0.8).abs() < 1e-9 && (share_b - 0.2).abs() < 1e-9);

    // Conversations whose key lands on b and on a: every turn, the first included, goes there.
    let questions: Vec<String> = (0..200)
        .map(|i| format!("Question {i}: which tyre?"))
        .collect();
    let on_b: Vec<&String> = questions
        .iter()
        .filter(|q| lands_on(q, 0.8, 0.2) == "b")
        .collect();
    let on_a: Vec<&String> = questions
        .iter()
        .filter(|q| lands_on(q, 0.8, 0.2) == "a")
        .collect();
    assert!(on_b.len() >= 3 && on_a.len() >= 3);
    for (q, want) in on_b
        .iter()
        .take(3)
        .map(|q| (q, "b"))
        .chain(on_a.iter().take(3).map(|q| (q, "a")))
    {
        for turn in 1..=7 {
            let got = send(&proxy, turn_body(SYSTEM, q, turn), None).await;
            assert_eq!(got, want, "turn {turn} of {q:?}");
        }
    }

    // Many new conversations: each lands where its key says, so they split as the shares.
    let mut to_b = 0;
    for q in &questions {
        let got = send(&proxy, turn_body(SYSTEM, q, 2), None).await;
        assert_eq!(got, lands_on(q, 0.8, 0.2), "{q:?}");
        to_b += usize::from(got == "b");
    }
    let fraction = to_b as f64 / questions.len() as f64;
    assert!(
        (0.1..=0.3).contains(&fraction),
        "b got {fraction} of new conversations"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_explicit_header_wins_over_the_derived_key() {
    let (a, b, proxy) = with_routing("probe_floor = 0.5\nprefix_affinity = true\n").await;
    a.behaviour.set_latency(Duration::from_millis(2));
    b.behaviour.set_latency(Duration::from_millis(2));
    warm(&proxy).await;
    // Even shares: find a conversation keyed to a and one keyed to b, then pin each to the
    // other candidate.
    let questions: Vec<String> = (0..50)
        .map(|i| format!("Order {i}: where is it?"))
        .collect();
    for want in ["a", "b"] {
        let q = questions
            .iter()
            .find(|q| lands_on(q, 0.5, 0.5) == want)
            .unwrap();
        let other = if want == "a" { "b" } else { "a" };
        let pin = format!("{other}/m{other}");
        for turn in 2..=5 {
            assert_eq!(send(&proxy, turn_body(SYSTEM, q, turn), None).await, want);
            let pinned = send(&proxy, turn_body(SYSTEM, q, turn), Some(&pin)).await;
            assert_eq!(pinned, other, "the pin lost to the key on turn {turn}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn with_prefix_affinity_off_a_conversation_spreads() {
    // Off is the default; it is spelled out here all the same.
    let (a, b, proxy) = with_routing("probe_floor = 0.5\nprefix_affinity = false\n").await;
    a.behaviour.set_latency(Duration::from_millis(2));
    b.behaviour.set_latency(Duration::from_millis(2));
    let mut seen = std::collections::HashSet::new();
    // Even shares: 60 turns of one conversation all on one side has odds of 2^-59.
    for turn in 0..60 {
        seen.insert(
            send(
                &proxy,
                turn_body(SYSTEM, "Is it raining?", 2 + turn % 5),
                None,
            )
            .await,
        );
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_conversation_moves_off_a_candidate_that_starts_failing_and_stays_moved() {
    let (a, b, proxy) = with_routing("prefix_affinity = true\n").await;
    a.behaviour.set_latency(Duration::from_millis(5));
    b.behaviour.set_latency(Duration::from_millis(15));
    warm(&proxy).await;
    // A conversation that lands on a while a has 80 % or more, and on b while b has.
    let q = (0..100)
        .map(|i| format!("Ticket {i}: my chain squeaks"))
        .find(|q| lands_on(q, 0.8, 0.2) == "a" && lands_on(q, 0.2, 0.8) == "b")
        .unwrap();
    for turn in 2..=4 {
        assert_eq!(send(&proxy, turn_body(SYSTEM, &q, turn), None).await, "a");
    }
    // a fails every request from now on: its share falls and the conversation moves to b
    // within a few turns (no retry: the client sees the failures meanwhile).
    a.behaviour.set_fault(Fault::Status(503));
    let mut served = Vec::new();
    for turn in 5..=30 {
        served.push(send(&proxy, turn_body(SYSTEM, &q, turn), None).await);
    }
    let moved = served.iter().position(|p| p == "b").expect("never moved");
    assert!(moved <= 12, "moved after {moved} failing turns: {served:?}");
    assert!(
        served[moved..].iter().all(|p| p == "b"),
        "it came back to the failing candidate: {served:?}"
    );
    // The key lands on a whenever a has 80 % or more: its share fell below that.
    let (share_a, _) = shares(&proxy).await;
    assert!(share_a < 0.8, "a kept {share_a}");
}

/// The alias's keyed state on `/status`: the non-streaming keyed hit rate and exponent, and
/// `a`'s and `b`'s non-streaming shares and keyed shares.
async fn keyed_state(proxy: &Proxy) -> (f64, f64, [f64; 2], [f64; 2]) {
    let status = proxy.status().await;
    let keyed = &status["aliases"][0]["keyed"];
    let of = |p, field: &str| {
        status_candidate(&status, p)[field]["non_streaming"]
            .as_f64()
            .unwrap()
    };
    (
        keyed["hit_rate"]["non_streaming"].as_f64().unwrap(),
        keyed["exploit_k"]["non_streaming"].as_f64().unwrap(),
        [of("a", "share"), of("b", "share")],
        [of("a", "keyed_share"), of("b", "keyed_share")],
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn keyed_picks_exploit_more_sharply_once_most_keyed_answers_hit_the_cache() {
    let (a, b, proxy) = with_routing("prefix_affinity = true\n").await;
    a.behaviour.set_latency(Duration::from_millis(40));
    b.behaviour.set_latency(Duration::from_millis(48));
    warm(&proxy).await;
    let (rate, exploit_k, share, keyed_share) = keyed_state(&proxy).await;
    assert_eq!((rate, exploit_k), (0.0, 6.0));
    assert_eq!(
        share, keyed_share,
        "no keyed answer yet: the shares as they are"
    );

    // From now on every answer reports a prompt-cache hit, quicker than the misses: the
    // latency estimates (the misses') and so the shares stay as they are.
    for p in [&a, &b] {
        p.behaviour.set_latency(Duration::from_millis(8));
        p.behaviour.set_cached_tokens(1024);
    }
    let questions: Vec<String> = (0..240).map(|i| format!("Order {i}: a bell?")).collect();
    // 94 keyed hits take the rate from 0 past 0.85; 46 more let the smoothed shares settle.
    for q in &questions[..140] {
        send(&proxy, turn_body(SYSTEM, q, 2), None).await;
    }
    let (rate, exploit_k, after_share, keyed_share) = keyed_state(&proxy).await;
    assert!(rate > 0.85, "hit rate {rate}");
    assert_eq!(exploit_k, 24.0);
    assert_eq!(after_share, share, "the hits moved the shares");
    // The slower candidate keeps less of the new conversations than of the random picks.
    let slower = usize::from(share[1] < share[0]);
    assert!(
        keyed_share[slower] < share[slower],
        "keyed {keyed_share:?}, shares {share:?}"
    );
    // New conversations land where their keys say over the sharpened shares.
    for q in &questions[140..] {
        let got = send(&proxy, turn_body(SYSTEM, q, 2), None).await;
        assert_eq!(got, lands_on(q, keyed_share[0], keyed_share[1]), "{q:?}");
    }
}

/// Candidate `provider`'s non-streaming latency estimate on `/status`, in ms.
async fn latency_ms(proxy: &Proxy, provider: &str) -> f64 {
    let status = proxy.status().await;
    status_candidate(&status, provider)["non_streaming"]["latency_ms"]
        .as_f64()
        .unwrap()
}

/// Sends `n` one-line chats pinned to candidate `a`.
async fn to_a(proxy: &Proxy, n: usize) {
    for _ in 0..n {
        let served = send(proxy, chat_body("fast", false), Some("a/ma")).await;
        assert_eq!(served, "a");
    }
}

/// With `prefix_affinity` set to `on`: candidate `a`, its latency estimate after three misses
/// at 40 ms, and the estimate after five more answers at 2 ms that report a prompt-cache hit
/// (`usage.prompt_tokens_details.cached_tokens`).
async fn quick_hits_after_slow_misses(on: bool) -> (FakeProvider, Proxy, f64, f64) {
    let (a, _b, proxy) = with_routing(&format!("prefix_affinity = {on}\n")).await;
    a.behaviour.set_latency(Duration::from_millis(40));
    to_a(&proxy, 3).await;
    let cold = latency_ms(&proxy, "a").await;
    assert!(cold >= 40.0, "{cold}");
    a.behaviour.set_latency(Duration::from_millis(2));
    a.behaviour.set_cached_tokens(1024);
    to_a(&proxy, 5).await;
    let after = latency_ms(&proxy, "a").await;
    (a, proxy, cold, after)
}

#[tokio::test(flavor = "multi_thread")]
async fn answers_from_the_prompt_cache_raise_the_latency_sturnus_learns_only_while_slow() {
    let (a, proxy, cold, after_hits) = quick_hits_after_slow_misses(true).await;
    assert_eq!(after_hits, cold, "quick hits moved the estimate");
    // Slow hits are a slowdown all the same.
    a.behaviour.set_latency(Duration::from_millis(150));
    to_a(&proxy, 2).await;
    let slowed = latency_ms(&proxy, "a").await;
    assert!(slowed > cold + 30.0, "{slowed} after {cold}");
    // Once the hits are quick again, the estimate is the misses' again.
    a.behaviour.set_latency(Duration::from_millis(2));
    to_a(&proxy, 5).await;
    let recovered = latency_ms(&proxy, "a").await;
    assert_eq!(recovered, cold, "{recovered} after {slowed}");
    // Quick misses bring it down.
    a.behaviour.set_cached_tokens(0);
    to_a(&proxy, 5).await;
    let quick = latency_ms(&proxy, "a").await;
    assert!(quick < cold / 2.0, "{quick} after {cold}");
}

#[tokio::test(flavor = "multi_thread")]
async fn without_prefix_affinity_a_quick_hit_counts_like_any_answer() {
    let (_a, _proxy, cold, after_hits) = quick_hits_after_slow_misses(false).await;
    assert!(after_hits < cold / 2.0, "{after_hits} after {cold}");
}
