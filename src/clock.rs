//! The two clocks sturnus reads. Wall-clock time is for what leaves the process (log time
//! stamps, token claims, the hand-over file); the monotonic clock is for every duration and
//! deadline inside it, so a clock step (NTP, a resumed VM) cannot stretch or erase one.

use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Time since the Unix epoch by the wall clock (zero if the clock reads before 1970).
pub fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Microseconds on a monotonic clock, counted from an arbitrary origin fixed at first use: only
/// differences between two readings mean anything.
pub fn monotonic_us() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    u64::try_from(origin.elapsed().as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wall_clock_reads_after_2020() {
        assert!(unix_now().as_secs() > 1_577_836_800);
    }

    #[test]
    fn the_monotonic_clock_never_goes_back() {
        let a = monotonic_us();
        std::thread::sleep(Duration::from_millis(2));
        let b = monotonic_us();
        assert!(b >= a + 1_000, "{a} -> {b}");
    }
}
