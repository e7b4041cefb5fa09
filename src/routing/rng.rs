//! Tiny, fast random numbers for candidate picking.
//!
//! Routing needs one uniform draw per request, not cryptographic quality. [`SplitMix64`] is an
//! explicit, seedable generator (the simulator uses it for reproducible runs); [`ThreadRng`] is a
//! zero-sized handle onto a per-thread SplitMix64 seeded from time, thread identity and the
//! process-random hasher keys, so worker threads never share or lock generator state.

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

/// Source of uniform random numbers that the selector draws from (real or seeded).
pub trait RngSource {
    /// Next 64 uniformly distributed random bits.
    fn next_u64(&mut self) -> u64;

    /// Uniform float in `[0, 1)` built from the top 53 bits of [`RngSource::next_u64`].
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

impl<R: RngSource + ?Sized> RngSource for &mut R {
    fn next_u64(&mut self) -> u64 {
        (**self).next_u64()
    }
}

/// Golden-ratio increment of the SplitMix64 sequence.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// One SplitMix64 output step for state `z` (already advanced).
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Seedable SplitMix64 generator: deterministic sequences for tests and the simulator.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// Generator whose sequence is fully determined by `seed` (any value, including 0, is fine).
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }
}

impl RngSource for SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN);
        mix(self.state)
    }
}

thread_local! {
    /// Per-thread generator state; 0 means "not seeded yet".
    static THREAD_STATE: Cell<u64> = const { Cell::new(0) };
}

/// Fresh seed from wall-clock time, the thread's identity and the process-random hasher keys.
/// Once per thread, so kept out of line of the draws.
#[cold]
#[inline(never)]
fn thread_seed() -> u64 {
    let nanos = crate::clock::unix_now().as_nanos() as u64;
    let mut h = RandomState::new().build_hasher();
    h.write_u64(nanos);
    std::hash::Hash::hash(&std::thread::current().id(), &mut h);
    let local = 0u8;
    h.write_usize(&local as *const u8 as usize);
    // Never 0, the "unseeded" marker.
    mix(h.finish()) | 1
}

/// Zero-sized handle to this thread's generator; cheap to create anywhere (`ThreadRng`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadRng;

impl RngSource for ThreadRng {
    fn next_u64(&mut self) -> u64 {
        THREAD_STATE.with(|cell| {
            let mut s = cell.get();
            if s == 0 {
                s = thread_seed();
            }
            s = s.wrapping_add(GOLDEN);
            // Keep the "unseeded" marker reserved: skip the one state equal to 0.
            if s == 0 {
                s = GOLDEN;
            }
            cell.set(s);
            mix(s)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_is_deterministic_per_seed() {
        let mut a = SplitMix64::new(42);
        let mut b = SplitMix64::new(42);
        let mut c = SplitMix64::new(43);
        let xa: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let xb: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        let xc: Vec<u64> = (0..8).map(|_| c.next_u64()).collect();
        assert_eq!(xa, xb);
        assert_ne!(xa, xc);
    }

    #[test]
    fn splitmix_known_vector() {
        // Reference output of SplitMix64 seeded with 0 (first value of the canonical sequence).
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn next_f64_in_unit_interval_and_roughly_uniform() {
        let mut r = SplitMix64::new(7);
        let n = 100_000;
        let mut sum = 0.0;
        for _ in 0..n {
            let x = r.next_f64();
            assert!((0.0..1.0).contains(&x));
            sum += x;
        }
        let mean = sum / n as f64;
        assert!((mean - 0.5).abs() < 0.01, "mean {mean}");
    }

    #[test]
    fn thread_rng_differs_between_threads_and_draws() {
        let mut r = ThreadRng;
        let a = r.next_u64();
        let b = r.next_u64();
        assert_ne!(a, b);
        let other = std::thread::spawn(|| ThreadRng.next_u64())
            .join()
            .unwrap_or(a);
        assert_ne!(other, a);
    }

    #[test]
    fn mut_ref_forwards() {
        let mut r = SplitMix64::new(1);
        let mut expected = SplitMix64::new(1);
        fn draw(mut src: impl RngSource) -> u64 {
            src.next_u64()
        }
        let via_ref = draw(&mut r);
        assert_eq!(via_ref, expected.next_u64());
    }
}
