//! Latency- and health-aware routing across an alias's (provider, model) candidates.
//!
//! Self-contained: depends on no other sturnus module and takes plain parameters.
//! - [`attempt`]: what the proxy reports of one upstream attempt (mode, outcome, error kind).
//! - [`tracker`]: per-candidate stats (latency estimate per mode, success rate, in-flight, last
//!   error, counters) shared by every alias listing the candidate, read by a pick without locks.
//! - [`latency_mean`]: the latency estimate, the mean of a candidate's answers since their level
//!   last changed.
//! - [`selector`]: the pure share computation, the weighted pick and the pin rule.
//! - [`available`]: the same pick and shares restricted to the candidates that may take
//!   traffic (whose provider passes its active health check).
//! - [`affinity`]: the `<provider>/<model>` session-affinity header value.
//! - [`params`]: every constant of the rule, in one struct with documented defaults.
//! - [`rng`]: small thread-local and seedable random sources.
//! - [`pressure`]: the age of requests still waiting for an answer and `Retry-After` back-off,
//!   the signals that arrive before a response does.
//! - [`rendezvous`]: weighted rendezvous hashing, a sticky stateless pick of a candidate per key
//!   (prefix affinity: one conversation keeps its candidate, conversations follow the shares).
//! - [`keyed_shares`]: the shares a key is picked over, smoothed across an alias's keyed picks.
//! - [`keyed_hits`]: how sharply an alias's keyed picks exploit, from the share of its keyed
//!   answers that its providers' prompt caches served.
//! - [`quota`]: pacing a candidate whose announced quota would run out before its reset.
//! - [`load`]: the latency this proxy's own in-flight requests add at a candidate, which keeps
//!   a busy proxy from piling its own traffic onto one provider.
//! - [`congestion`]: the discount on a candidate whose latency is queueing that traffic like
//!   ours causes, which keeps a fleet of sidecars from herding.

pub mod affinity;
pub mod attempt;
pub mod available;
pub mod congestion;
pub mod keyed_hits;
pub mod keyed_shares;
pub mod latency_mean;
pub mod load;
pub mod lull;
pub mod params;
pub mod pressure;
pub mod quota;
pub mod rendezvous;
pub mod rng;
pub mod selector;
pub mod send_order;
pub mod success_rate;
pub mod tracker;

pub use attempt::{ErrorKind, Mode, Outcome};
pub use available::{
    choose_available, choose_available_keyed, shares_available, weights_available,
};
pub use keyed_hits::KeyedHits;
pub use keyed_shares::SmoothedShare;
pub use params::{ParamOutOfRange, ParamRange, RoutingParams, RuleOverrideError, RuleParams};
pub use pressure::now_us;
pub use quota::{QuotaKind, QuotaView};
pub use rng::{RngSource, SplitMix64, ThreadRng};
pub use selector::{
    charged_latency_us, choose, choose_at, choose_keyed, choose_keyed_at, pick_index, shares,
    shares_for, shares_for_at, weights, weights_for, Choice, Drawn, Keyed, INLINE_CANDIDATES,
};
pub use tracker::{
    Answer, CandidateStats, Health, InflightGuard, OwnedInflightGuard, Snapshot, StatsSnapshot,
    WaitGuard,
};
