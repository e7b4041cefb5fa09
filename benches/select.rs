//! Candidate selection: one alias with 5 warm candidates, picked through the same
//! `Alias::choose` the proxy calls, alone and while a second thread runs the whole request
//! cycle on the same candidates (pick, in-flight guard, latency and outcome updates), so the
//! statistics' cache lines bounce between cores (target: ≤ 200 ns per pick).
//!
//! `cargo bench --bench select`

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use sturnus::catalog::Catalog;
use sturnus::config::Config;
use sturnus::routing::{Mode, Outcome, RoutingParams};

const CONFIG: &str = r#"
[provider.a]
base_url = "http://127.0.0.1:9001/v1"
[provider.b]
base_url = "http://127.0.0.1:9002/v1"
[provider.c]
base_url = "http://127.0.0.1:9003/v1"
[provider.d]
base_url = "http://127.0.0.1:9004/v1"
[provider.e]
base_url = "http://127.0.0.1:9005/v1"

[model]
fast = [
  { provider = "a", model = "m" },
  { provider = "b", model = "m" },
  { provider = "c", model = "m" },
  { provider = "d", model = "m" },
  { provider = "e", model = "m" },
]
"#;

/// A catalog whose five candidates all have latency and success samples.
fn warm_catalog() -> Arc<Catalog> {
    let config = Config::parse(CONFIG, &|_| None).expect("benchmark config");
    let catalog = Catalog::build(&config).expect("benchmark catalog");
    for (i, c) in catalog.candidates.iter().enumerate() {
        for _ in 0..10 {
            c.stats.record_latency(
                Mode::NonStreaming,
                150_000.0 + 40_000.0 * i as f64,
                None,
                &catalog.params.rule.latency,
            );
            c.stats
                .record_outcome(Outcome::Success, 0, &RoutingParams::default());
        }
    }
    Arc::new(catalog)
}

/// What a request does with the routing state besides the pick: count itself in flight and
/// feed its latency and outcome back.
fn request_cycle(catalog: &Catalog, n: u64) {
    let alias = catalog.alias("fast").unwrap();
    let choice = alias.choose(Mode::NonStreaming, None, &catalog.params);
    let stats = &alias.candidates[choice.index].stats;
    let _inflight = stats.begin();
    let sample = 150_000.0 + (n % 97) as f64 * 1_000.0;
    stats.record_latency(
        Mode::NonStreaming,
        sample,
        None,
        &catalog.params.rule.latency,
    );
    stats.record_outcome(Outcome::Success, 0, &catalog.params);
}

fn select(c: &mut Criterion) {
    let catalog = warm_catalog();
    let mut group = c.benchmark_group("select 5 warm candidates");
    group.bench_function("pick, 1 thread", |b| {
        let alias = catalog.alias("fast").unwrap();
        b.iter(|| alias.choose(black_box(Mode::NonStreaming), None, &catalog.params))
    });
    group.bench_function("pick, 2 threads contending", |b| {
        b.iter_custom(|iters| {
            let stop = Arc::new(AtomicBool::new(false));
            let other = {
                let (catalog, stop) = (Arc::clone(&catalog), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        request_cycle(&catalog, n);
                        n += 1;
                    }
                })
            };
            let alias = catalog.alias("fast").unwrap();
            let start = Instant::now();
            for _ in 0..iters {
                black_box(alias.choose(black_box(Mode::NonStreaming), None, &catalog.params));
            }
            let elapsed = start.elapsed();
            stop.store(true, Ordering::Relaxed);
            other.join().unwrap();
            elapsed
        })
    });
    group.finish();
}

/// The benchmark group, private so its generated entry point needs no public docs.
mod group {
    use super::*;
    criterion_group!(benches, select);
}
criterion_main!(group::benches);
