//! The two clocks sturnus reads. Wall-clock time is for what leaves the process (log time
//! stamps, token claims, the hand-over file); the monotonic clock is for every duration and
//! deadline inside it, so a clock step (NTP, a resumed VM) cannot stretch or erase one.

#[cfg(not(target_os = "linux"))]
use std::sync::OnceLock;
#[cfg(not(target_os = "linux"))]
use std::time::Instant;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Time since the Unix epoch by the wall clock (zero if the clock reads before 1970).
pub fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Microseconds on a monotonic clock, counted from an arbitrary origin: only differences
/// between two readings mean anything.
#[cfg(target_os = "linux")]
pub fn monotonic_us() -> u64 {
    linux_us(nix::time::ClockId::CLOCK_MONOTONIC)
}

/// [`monotonic_us`] as it stood at the kernel's last tick (a few milliseconds ago at most):
/// less than half its cost to read, for what every pick reads and needs only to the
/// millisecond (the lulls). Same origin as [`monotonic_us`], never ahead of it.
#[cfg(target_os = "linux")]
pub fn coarse_monotonic_us() -> u64 {
    linux_us(nix::time::ClockId::CLOCK_MONOTONIC_COARSE)
}

/// One of Linux's monotonic clocks in µs since boot (the kernel does not fail these reads).
#[cfg(target_os = "linux")]
fn linux_us(clock: nix::time::ClockId) -> u64 {
    nix::time::clock_gettime(clock).map_or(0, |t| {
        u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000
            + u64::try_from(t.tv_nsec()).unwrap_or(0) / 1_000
    })
}

/// Microseconds on a monotonic clock, counted from an arbitrary origin fixed at first use: only
/// differences between two readings mean anything.
#[cfg(not(target_os = "linux"))]
pub fn monotonic_us() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    u64::try_from(origin.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// [`monotonic_us`]: no cheaper clock of the same origin is read here.
#[cfg(not(target_os = "linux"))]
pub fn coarse_monotonic_us() -> u64 {
    monotonic_us()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wall_clock_reads_after_2020() {
        assert!(unix_now().as_secs() > 1_577_836_800);
    }

    #[test]
    fn the_coarse_clock_is_the_monotonic_clock_a_tick_behind() {
        let before = monotonic_us();
        let coarse = coarse_monotonic_us();
        let after = monotonic_us();
        assert!(coarse <= after, "{coarse} > {after}");
        // A kernel tick is at most 10 ms (HZ 100).
        assert!(coarse + 10_000 >= before, "{coarse} vs {before}");
    }

    #[test]
    fn the_monotonic_clock_never_goes_back() {
        let a = monotonic_us();
        std::thread::sleep(Duration::from_millis(2));
        let b = monotonic_us();
        assert!(b >= a + 1_000, "{a} -> {b}");
    }
}
