use super::*;
use std::path::PathBuf;

#[test]
fn reservations_are_given_back_on_drop() {
    let b = Budget::new(Some(1000), "test");
    let r1 = b.reserve(600).unwrap();
    assert_eq!(b.in_use(), 600);
    let mut r2 = b.reserve(100).unwrap();
    r2.grow_to(400).unwrap();
    assert_eq!(r2.bytes(), 400);
    assert_eq!(b.in_use(), 1000);
    drop(r1);
    assert_eq!(b.in_use(), 400);
    drop(r2);
    assert_eq!(b.in_use(), 0);
    assert_eq!(b.peak(), 1000);
    assert_eq!(b.rejections(), 0);
}

#[test]
fn a_body_larger_than_the_budget_is_too_large_not_busy() {
    let b = Budget::new(Some(1000), "test");
    assert_eq!(
        b.reserve(1001).unwrap_err(),
        Refusal::TooLarge { limit: 1000 }
    );
    let mut r = b.reserve(10).unwrap();
    assert_eq!(
        r.grow_to(1001).unwrap_err(),
        Refusal::TooLarge { limit: 1000 }
    );
    assert_eq!(r.bytes(), 10, "a refused growth keeps what was held");
    assert_eq!(b.rejections(), 0, "413s are not buffer rejections");
}

#[test]
fn a_full_budget_refuses_with_busy_and_counts_it() {
    let b = Budget::new(Some(1000), "test");
    let _held = b.reserve(900).unwrap();
    match b.reserve(200) {
        Err(Refusal::Busy {
            retry_after_secs,
            in_use,
            limit,
        }) => {
            assert!(retry_after_secs >= 1);
            assert_eq!((in_use, limit), (900, 1000));
        }
        other => panic!("{other:?}"),
    }
    let mut r = b.reserve(100).unwrap();
    assert!(matches!(r.grow_to(101), Err(Refusal::Busy { .. })));
    assert_eq!(b.rejections(), 2);
    assert_eq!(b.in_use(), 1000);
}

#[test]
fn retry_after_follows_the_drain_rate() {
    let b = Budget::new(Some(10_000_000), "test");
    // Nothing drained yet: the minimum.
    let held = b.reserve(10_000_000).unwrap();
    assert!(matches!(
        b.reserve(1),
        Err(Refusal::Busy {
            retry_after_secs: 1,
            ..
        })
    ));
    drop(held);
    // ~1 MB/s observed over a second, and 9 MB more must drain: 9 s.
    let b2 = Budget::new(Some(10_000_000), "test");
    b2.drain.note(1_000_000, 0);
    b2.drain.rate(1_000);
    let slow = b2.retry_after(9_000_000);
    assert_eq!(slow, 9, "9 MB at 1 MB/s");
    let b3 = Budget::new(Some(10_000_000), "test");
    b3.drain.note(100_000_000, 0);
    b3.drain.rate(1_000);
    assert_eq!(b3.retry_after(9_000_000), 1, "fast drain: the minimum");
    let b4 = Budget::new(Some(10_000_000), "test");
    b4.drain.note(1_000, 0);
    b4.drain.rate(1_000);
    assert_eq!(b4.retry_after(9_000_000), MAX_RETRY_AFTER_SECS, "capped");
}

#[test]
fn concurrent_reservations_never_exceed_the_limit() {
    let b = Budget::new(Some(10_000), "test");
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let b = b.clone();
            std::thread::spawn(move || {
                let mut ok = 0;
                for i in 0..5_000u64 {
                    if let Ok(mut r) = b.reserve(1 + i % 700) {
                        let _ = r.grow_to(2 + i % 1500);
                        ok += 1;
                    }
                }
                ok
            })
        })
        .collect();
    let ok: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(ok > 0);
    assert_eq!(b.in_use(), 0);
    assert!(b.peak() <= 10_000);
}

#[test]
fn no_aggregate_limit() {
    let b = Budget::new(None, "test");
    assert_eq!(b.limit(), None);
    let r = b.reserve(u64::MAX / 2).unwrap();
    assert!(b.reserve(u64::MAX / 4).is_ok());
    drop(r);
    assert!(b.describe().starts_with("unlimited"));
}

#[test]
fn size_comes_from_config_then_cgroup_then_max_body() {
    let never = || -> Detected { panic!("must not detect when configured") };
    assert_eq!(resolve(Some(5), 7, never).0, Some(5));
    assert_eq!(resolve(Some(0), 7, never).0, None);
    let (n, src) = resolve(None, 7, || Detected::Limited {
        bytes: 1 << 30,
        file: PathBuf::from("/sys/fs/cgroup/memory.max"),
    });
    assert_eq!(n, Some(512 << 20));
    assert!(
        src.contains("half the container memory limit (1.0 GiB in /sys/fs/cgroup/memory.max)"),
        "{src}"
    );
    let (n, src) = resolve(None, 7, || Detected::Unlimited {
        file: PathBuf::from("/x/memory.max"),
    });
    assert_eq!(n, Some(28));
    assert!(src.contains("4 × routing.max_body_bytes"), "{src}");
    let (n, src) = resolve(None, 7, || Detected::NotFound);
    assert_eq!(n, Some(28));
    assert!(src.contains("no cgroup memory limit found"), "{src}");
}

#[test]
fn describe_and_human_sizes() {
    assert_eq!(human(512), "512 bytes");
    assert_eq!(human(64 << 20), "64.0 MiB");
    assert_eq!(human(3 << 29), "1.5 GiB");
    let b = Budget::new(Some(64 << 20), "from routing.max_buffered_bytes");
    assert_eq!(
        b.describe(),
        "64.0 MiB (67108864 bytes), from routing.max_buffered_bytes"
    );
}
