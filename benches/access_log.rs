//! The access log's cost: serializing one access line (every field set, as for a routed
//! request) into the JSON the log sink receives, time stamp included: into a new buffer, and
//! into one kept from line to line as the logger does.
//!
//! `cargo bench --bench access_log`

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use sturnus::observe::flat_json::Buffer;
use sturnus::observe::{AccessRecord, Verdict};

/// An access record for a routed streaming request, every field present.
fn routed() -> AccessRecord<'static> {
    AccessRecord {
        request_id: "3449abb3-dc01-4f5b-bb87-ac7338b2746d",
        trace_id: "4bf92f3577b34da6a3ce929d0e0e4736",
        span_id: "2a2d064b2bdb3395",
        parent_span_id: Some("00f067aa0ba902b7"),
        method: "POST",
        path: "/v1/chat/completions",
        client: None,
        alias: Some("fast"),
        provider: Some("groq"),
        model: Some("llama-3.3-70b"),
        stream: Some(true),
        route: Some("pick"),
        status: Some(200),
        outcome: Verdict::Success,
        error_kind: None,
        ttfc_ms: Some(182.411),
        duration_ms: 2310.07,
        request_bytes: 412,
        response_bytes: 5120,
        upstream_request_id: Some("req_01hxyz"),
    }
}

fn access_line(c: &mut Criterion) {
    let record = routed();
    c.bench_function("access_log/one line", |b| {
        b.iter(|| black_box(black_box(&record).to_json_line()))
    });
    let mut line = Buffer::with_capacity(1024);
    c.bench_function("access_log/one line, reused buffer", |b| {
        b.iter(|| {
            line.bytes.clear();
            black_box(black_box(&record).append_json_line(&mut line));
        })
    });
}

/// The benchmark group, private so its generated entry point needs no public docs.
mod group {
    use super::*;
    criterion_group!(benches, access_line);
}
criterion_main!(group::benches);
