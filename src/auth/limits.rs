//! Per-client limits (`max_inflight`, `requests_per_minute`) on Pingora's own estimators
//! (`pingora-limits`), keyed by the client's name, so every key and token of one name shares
//! them.

use super::Client;
use pingora_limits::inflight::{Guard, Inflight};
use pingora_limits::rate::{Rate, RateComponents};
use std::time::Duration;

/// The window of `requests_per_minute`.
const MINUTE: Duration = Duration::from_secs(60);

/// Which limit refused a request (the `limit` label of `sturnus_client_rate_limited_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// `max_inflight`.
    MaxInflight,
    /// `requests_per_minute`.
    RequestsPerMinute,
}

impl Limit {
    /// The config key, as the metric label and the message say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::MaxInflight => "max_inflight",
            Limit::RequestsPerMinute => "requests_per_minute",
        }
    }
}

/// A request over one of its client's limits: which, and when to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    /// The limit it is over.
    pub limit: Limit,
    /// The configured value of that limit.
    pub value: u32,
    /// Seconds until a retry may pass (`Retry-After`).
    pub retry_after_secs: u64,
}

/// Holds a request's place under its client's `max_inflight` until dropped.
pub struct Slot {
    _inflight: Option<Guard>,
}

/// The counters every client's limits share.
pub struct Limiter {
    inflight: Inflight,
    rate: Rate,
}

impl Default for Limiter {
    fn default() -> Self {
        Self::new()
    }
}

impl Limiter {
    /// Counters with nothing counted.
    pub fn new() -> Limiter {
        Limiter {
            inflight: Inflight::new(),
            rate: Rate::new(MINUTE),
        }
    }

    /// Admits one request of `client`, or says which limit it is over. A refused request is
    /// not counted against the client.
    pub fn admit(&self, client: &Client) -> Result<Slot, Limited> {
        let name: &str = &client.name;
        let inflight = match client.limits.max_inflight {
            Some(max) => {
                let (guard, now) = self.inflight.incr(name, 1);
                if now > i64::from(max) as isize {
                    return Err(Limited {
                        limit: Limit::MaxInflight,
                        value: max,
                        retry_after_secs: 1,
                    });
                }
                Some(guard)
            }
            None => None,
        };
        if let Some(rpm) = client.limits.requests_per_minute {
            self.rate.observe(&name, 1);
            let over = self.rate.rate_with(&name, |c| minute_retry_after(c, rpm));
            if let Some(retry_after_secs) = over {
                self.rate.observe(&name, -1);
                return Err(Limited {
                    limit: Limit::RequestsPerMinute,
                    value: rpm,
                    retry_after_secs,
                });
            }
        }
        Ok(Slot {
            _inflight: inflight,
        })
    }
}

/// With this request counted: `None` when the requests of the last minute (the previous
/// window's count weighted by the part of it still within a minute, plus the current
/// window's) are within `limit`, else the whole seconds until they will be again.
fn minute_retry_after(c: RateComponents, limit: u32) -> Option<u64> {
    let limit = f64::from(limit);
    let (prev, curr) = (c.prev_samples.max(0) as f64, c.curr_samples.max(0) as f64);
    let f = c.current_interval_fraction;
    if prev * (1.0 - f) + curr <= limit {
        return None;
    }
    let window = c.interval.as_secs_f64();
    let rest_of_window = (1.0 - f) * window;
    // The current window alone is full: only its end (when it becomes the previous one and
    // starts to fade) lets requests in again.
    let wait = if curr >= limit || prev <= 0.0 {
        rest_of_window + window * (1.0 - (limit - 1.0).max(0.0) / curr.max(1.0)).max(0.0)
    } else {
        // The previous window fades out: wait until prev × (1 − f') + curr ≤ limit − 1.
        let f_needed = 1.0 - (limit - 1.0 - curr).max(0.0) / prev;
        ((f_needed - f) * window).min(rest_of_window)
    };
    Some(wait.ceil().max(1.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClientLimits;
    use std::sync::Arc;

    fn client(name: &str, max_inflight: Option<u32>, rpm: Option<u32>) -> Client {
        Client {
            name: Arc::from(name),
            aliases: None,
            limits: ClientLimits {
                max_inflight,
                requests_per_minute: rpm,
            },
        }
    }

    #[test]
    fn max_inflight_admits_up_to_the_limit_and_frees_a_place_on_drop() {
        let l = Limiter::new();
        let a = client("a", Some(2), None);
        let first = l.admit(&a).unwrap();
        let _second = l.admit(&a).unwrap();
        let refused = l.admit(&a).err().unwrap();
        assert_eq!(refused.limit, Limit::MaxInflight);
        assert!(
            l.admit(&client("b", Some(2), None)).is_ok(),
            "another client is unaffected"
        );
        drop(first);
        assert!(l.admit(&a).is_ok());
    }

    #[test]
    fn requests_per_minute_refuses_the_burst_beyond_the_limit_and_not_another_client() {
        let l = Limiter::new();
        let a = client("a", None, Some(3));
        let b = client("b", None, Some(3));
        let passed = (0..5).filter(|_| l.admit(&a).is_ok()).count();
        assert_eq!(passed, 3);
        let refused = l.admit(&a).err().unwrap();
        assert_eq!(refused.limit, Limit::RequestsPerMinute);
        assert!(refused.retry_after_secs >= 1 && refused.retry_after_secs <= 120);
        assert!((0..3).all(|_| l.admit(&b).is_ok()));
    }

    fn components(prev: isize, curr: isize, f: f64) -> RateComponents {
        let mut c = Rate::new(MINUTE).rate_with(&"none", |c| c);
        c.prev_samples = prev;
        c.curr_samples = curr;
        c.current_interval_fraction = f;
        c
    }

    #[test]
    fn retry_after_follows_the_sliding_minute() {
        assert_eq!(minute_retry_after(components(0, 10, 0.5), 10), None);
        // The current window is full half-way through: at least the rest of it.
        let wait = minute_retry_after(components(0, 11, 0.5), 10).unwrap();
        assert!((30..=60).contains(&wait), "{wait}");
        // The previous window was full, the current one is quiet: it fades within the window.
        let wait = minute_retry_after(components(20, 1, 0.25), 10).unwrap();
        assert!((1..=45).contains(&wait), "{wait}");
    }
}
