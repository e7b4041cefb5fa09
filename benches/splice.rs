//! Body splice throughput: strict JSON validation of the whole body plus the byte-exact
//! `model` splice, on a 1 KB and a 1 MB chat body (target: ≥ 1 GB/s on 1 MB); and the cost of
//! the conversation key: the scan that finds the opening messages plus their hash (what a later
//! turn pays with prefix affinity) against the scan without, on 1 MB bodies (target: ≤ 1.1 ×).
//!
//! `cargo bench --bench splice`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use sturnus::body;

/// The provider model spliced in (longer than the alias, as in practice).
const MODEL: &str = "gpt-4o-mini-2024-07-18";

/// A chat body of about `size` bytes: a few messages with escapes and non-ASCII text.
fn chat_body(size: usize) -> Vec<u8> {
    let text = "The quick brown fox jumps over the lazy dog. Lorem ipsum \\\"quoted\\\" \
                text, caf\u{e9} \u{65e5}\u{672c}\\n ";
    let mut s = String::from(r#"{"model": "fast", "messages": ["#);
    let mut first = true;
    while s.len() + 200 < size {
        if !first {
            s.push_str(", ");
        }
        first = false;
        let room = size - s.len() - 100;
        let content: String = text.chars().cycle().take(room.min(4096)).collect();
        // Never cut an escape in half.
        let content = content.trim_end_matches('\\');
        s.push_str(&format!(r#"{{"role": "user", "content": "{content}"}}"#));
    }
    s.push_str(r#"], "temperature": 0.30, "max_tokens": 256, "stream": true}"#);
    s.into_bytes()
}

fn splice(c: &mut Criterion) {
    let mut group = c.benchmark_group("splice");
    for (label, size) in [("1 KB", 1024), ("1 MB", 1 << 20)] {
        let body = chat_body(size);
        body::inspect(&body).expect("the benchmark body is valid");
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(
            BenchmarkId::new("inspect+splice", label),
            &body,
            |b, body| {
                b.iter(|| {
                    let inspected = body::inspect(black_box(body)).unwrap();
                    inspected.splice(body, black_box(MODEL))
                })
            },
        );
        group.bench_with_input(BenchmarkId::new("inspect", label), &body, |b, body| {
            b.iter(|| body::inspect(black_box(body)).unwrap())
        });
    }
    group.finish();
}

/// A 1 MB chat body whose opening is one system message of nearly the whole size: the most the
/// key can hash.
fn long_system_prompt_body(size: usize) -> Vec<u8> {
    let prompt = "You are a careful assistant. ".repeat(size / 30);
    format!(
        r#"{{"model": "fast", "messages": [{{"role": "system", "content": "{prompt}"}}, {{"role": "user", "content": "hi"}}], "stream": true}}"#
    )
    .into_bytes()
}

fn conversation_key(c: &mut Criterion) {
    let mut group = c.benchmark_group("conversation_key");
    let bodies = [
        ("1 MB chat, 4 KB opening", chat_body(1 << 20)),
        ("1 MB system prompt", long_system_prompt_body(1 << 20)),
    ];
    for (label, body) in &bodies {
        assert!(body::inspect(body)
            .unwrap()
            .conversation_key(body)
            .is_some());
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(BenchmarkId::new("with key", label), body, |b, body| {
            b.iter(|| {
                let body = black_box(body);
                body::inspect(body).unwrap().conversation_key(body)
            })
        });
        group.bench_with_input(BenchmarkId::new("without key", label), body, |b, body| {
            b.iter(|| body::inspect_unkeyed(black_box(body)).unwrap())
        });
    }
    group.finish();
}

/// The benchmark group, private so its generated entry point needs no public docs.
mod group {
    use super::*;
    criterion_group!(benches, splice, conversation_key);
}
criterion_main!(group::benches);
