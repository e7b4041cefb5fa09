//! The aggregate memory budget for buffered request bodies.
//!
//! sturnus must read a whole request body before it can route it, so bodies are held in memory
//! for a moment. Each body's bytes are reserved here before they are read (from
//! `Content-Length`) or as they arrive (chunked uploads), and a [`Reservation`] gives them back
//! when it drops — as soon as the provider has the body, and on every error path, since no path
//! can forget a drop. A body that does not fit right now is refused with 429 and a
//! `Retry-After` derived from how fast the budget is draining; a body larger than the whole
//! budget is refused with 413. Responses never count: they are relayed chunk by chunk.
//!
//! The size comes from `routing.max_buffered_bytes`, else half the container's memory limit
//! ([`cgroup`]), else 4 × `routing.max_body_bytes`. The accounting is a handful of atomics.

pub mod cgroup;
mod drain;

use crate::config::RoutingConfig;
use cgroup::Detected;
use drain::DrainMeter;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// Longest `Retry-After` sturnus asks for, in seconds.
pub const MAX_RETRY_AFTER_SECS: u64 = 30;

/// Why bytes could not be reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The body alone is larger than the whole budget: it can never fit (413).
    TooLarge {
        /// The whole budget in bytes.
        limit: u64,
    },
    /// The budget is busy with other bodies: retry later (429).
    Busy {
        /// Whole seconds (at least 1) until enough is expected to have drained.
        retry_after_secs: u64,
        /// Bytes reserved by other requests when this one was refused.
        in_use: u64,
        /// The whole budget in bytes.
        limit: u64,
    },
}

/// The shared budget; one per process, reached through `App`.
pub struct Budget {
    limit: u64,
    source: String,
    used: AtomicU64,
    peak: AtomicU64,
    rejections: AtomicU64,
    drain: DrainMeter,
    epoch: Instant,
}

impl fmt::Debug for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Budget")
            .field("limit", &self.limit())
            .field("in_use", &self.in_use())
            .field("source", &self.source)
            .finish()
    }
}

impl Budget {
    /// A budget of `limit` bytes (`None`: no aggregate limit); `source` says where it came from.
    pub fn new(limit: Option<u64>, source: impl Into<String>) -> Arc<Budget> {
        Arc::new(Budget {
            limit: limit.unwrap_or(u64::MAX),
            source: source.into(),
            used: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            rejections: AtomicU64::new(0),
            drain: DrainMeter::new(),
            epoch: Instant::now(),
        })
    }

    /// The budget for a config, detecting the container's memory limit when it is not set.
    pub fn from_config(routing: &RoutingConfig) -> Arc<Budget> {
        let (limit, source) = resolve(routing.max_buffered_bytes, routing.max_body_bytes, || {
            cgroup::detect()
        });
        Budget::new(limit, source)
    }

    /// The whole budget in bytes; `None` when there is no aggregate limit.
    pub fn limit(&self) -> Option<u64> {
        (self.limit != u64::MAX).then_some(self.limit)
    }

    /// Where the size came from, for the startup log and `sturnus check`.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Bytes reserved right now.
    pub fn in_use(&self) -> u64 {
        self.used.load(Relaxed)
    }

    /// The most bytes ever reserved at once.
    pub fn peak(&self) -> u64 {
        self.peak.load(Relaxed)
    }

    /// How many requests were refused with 429 so far (for `sturnus_buffer_rejections_total`).
    pub fn rejections(&self) -> u64 {
        self.rejections.load(Relaxed)
    }

    /// One line for the startup log: the size and its source.
    pub fn describe(&self) -> String {
        match self.limit() {
            Some(n) => format!("{} ({n} bytes), {}", human(n), self.source),
            None => format!("unlimited, {}", self.source),
        }
    }

    /// Reserves `bytes` for one request body; the reservation is given back when dropped.
    pub fn reserve(self: &Arc<Self>, bytes: u64) -> Result<Reservation, Refusal> {
        let mut r = Reservation {
            budget: Arc::clone(self),
            bytes: 0,
        };
        r.grow_to(bytes)?;
        Ok(r)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Adds `extra` bytes to the reserved total if they fit.
    fn take(&self, held: u64, extra: u64) -> Result<(), Refusal> {
        if held.saturating_add(extra) > self.limit {
            return Err(Refusal::TooLarge { limit: self.limit });
        }
        let mut seen = 0;
        let taken = self.used.fetch_update(Relaxed, Relaxed, |cur| {
            seen = cur;
            cur.checked_add(extra).filter(|next| *next <= self.limit)
        });
        match taken {
            Ok(before) => {
                self.peak.fetch_max(before + extra, Relaxed);
                Ok(())
            }
            Err(_) => {
                self.rejections.fetch_add(1, Relaxed);
                let excess = seen.saturating_add(extra).saturating_sub(self.limit);
                Err(Refusal::Busy {
                    retry_after_secs: self.retry_after(excess),
                    in_use: seen,
                    limit: self.limit,
                })
            }
        }
    }

    /// Seconds until `excess` bytes are expected to drain at the recently observed rate.
    /// Before anything has drained there is nothing to go by, so the answer is the minimum.
    fn retry_after(&self, excess: u64) -> u64 {
        let secs = match self.drain.rate(self.now_ms()) {
            None => 1.0,
            Some(rate) if rate > 0.0 => (excess as f64 / rate).ceil(),
            Some(_) => MAX_RETRY_AFTER_SECS as f64,
        };
        (secs as u64).clamp(1, MAX_RETRY_AFTER_SECS)
    }

    fn give_back(&self, bytes: u64) {
        if bytes > 0 {
            self.used.fetch_sub(bytes, Relaxed);
            self.drain.note(bytes, self.now_ms());
        }
    }
}

/// Bytes held for one request body; dropping it gives them back to the budget.
pub struct Reservation {
    budget: Arc<Budget>,
    bytes: u64,
}

impl fmt::Debug for Reservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation")
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl Reservation {
    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Grows the reservation to `total` bytes (no-op if it already holds that many).
    pub fn grow_to(&mut self, total: u64) -> Result<(), Refusal> {
        if total <= self.bytes {
            return Ok(());
        }
        let extra = total - self.bytes;
        self.budget.take(self.bytes, extra)?;
        self.bytes = total;
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.give_back(self.bytes);
    }
}

/// The budget size and its source from the config and (only if needed) the container limit.
pub fn resolve(
    configured: Option<u64>,
    max_body_bytes: u64,
    detect: impl FnOnce() -> Detected,
) -> (Option<u64>, String) {
    match configured {
        Some(0) => (
            None,
            "no aggregate limit (routing.max_buffered_bytes = 0)".into(),
        ),
        Some(n) => (Some(n), "from routing.max_buffered_bytes".into()),
        None => {
            let fallback = max_body_bytes.saturating_mul(4);
            match detect() {
                Detected::Limited { bytes, file } => (
                    Some((bytes / 2).max(1)),
                    format!(
                        "half the container memory limit ({} in {})",
                        human(bytes),
                        file.display()
                    ),
                ),
                Detected::Unlimited { file } => (
                    Some(fallback),
                    format!(
                        "4 × routing.max_body_bytes (no container memory limit: {} sets none)",
                        file.display()
                    ),
                ),
                Detected::NotFound => (
                    Some(fallback),
                    "4 × routing.max_body_bytes (no cgroup memory limit found)".into(),
                ),
            }
        }
    }
}

/// `bytes` in binary units with one decimal (e.g. `64.0 MiB`).
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} bytes")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests;
