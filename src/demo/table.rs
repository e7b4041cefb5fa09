//! The demo's once-a-second table: per candidate, live share, observed traffic, TTFC, success.

use super::driver::Counts;
use crate::app::App;
use crate::routing::{now_us, Mode};
use std::fmt::Write;

/// Renders one second's table for the demo's single alias.
pub fn render(second: u64, app: &App, counts: &[Counts]) -> String {
    let alias = &app.catalog.aliases[0];
    let shares = alias.shares(Mode::NonStreaming, &app.catalog.params);
    let now = now_us();
    let total: u64 = counts.iter().map(|c| c.ok + c.failed).sum();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "t={second:>2}s  {total:>4} req/s   candidate              share  served    latency  success"
    );
    for (i, candidate) in alias.candidates.iter().enumerate() {
        let c = counts.get(i).copied().unwrap_or_default();
        let served = c.ok + c.failed;
        let observed = if total > 0 {
            100.0 * served as f64 / total as f64
        } else {
            0.0
        };
        let ttfc = candidate
            .stats
            .latency_ms(Mode::NonStreaming)
            .map_or("     cold".to_string(), |ms| format!("{ms:>6.1} ms"));
        let bar = "#".repeat((shares[i] * 20.0).round() as usize);
        let _ = writeln!(
            out,
            "                    {:<22} {:>5.1}%  {:>5.1}%  {}  {:>6.1}%  {bar}",
            candidate.affinity,
            100.0 * shares[i],
            observed,
            ttfc,
            100.0
                * candidate
                    .stats
                    .success_at(now, &app.catalog.params.rule.success),
        );
    }
    out
}
