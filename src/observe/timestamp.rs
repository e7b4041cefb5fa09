//! The `timestamp` of a JSON log line: UTC, RFC 3339, milliseconds
//! (`2026-11-30T07:46:55.123Z`). The date and time of day are formatted once per second per
//! thread; each line only adds its milliseconds.

use std::cell::Cell;
use std::time::Duration;

/// Length of `YYYY-MM-DDTHH:MM:SS`, the part cached per second.
const SECONDS_LEN: usize = 19;
/// Length of the whole text.
const LEN: usize = SECONDS_LEN + 5;

thread_local! {
    /// The last second formatted on this thread, and its text.
    static LAST: Cell<(u64, [u8; SECONDS_LEN])> = const { Cell::new((u64::MAX, [0; SECONDS_LEN])) };
}

/// A formatted timestamp, kept on the stack.
pub struct Stamp([u8; LEN]);

impl Stamp {
    /// The text.
    pub fn as_str(&self) -> &str {
        // Only ASCII digits and punctuation are ever written.
        std::str::from_utf8(&self.0).unwrap_or("")
    }
}

/// The current time.
pub fn now() -> Stamp {
    at(crate::clock::unix_now())
}

/// The time `since_epoch` after the Unix epoch.
fn at(since_epoch: Duration) -> Stamp {
    let secs = since_epoch.as_secs();
    let seconds_text = LAST.with(|last| {
        let (cached, text) = last.get();
        if cached == secs {
            return text;
        }
        let text = format_seconds(secs);
        last.set((secs, text));
        text
    });
    let millis = since_epoch.subsec_millis();
    let mut out = [0u8; LEN];
    out[..SECONDS_LEN].copy_from_slice(&seconds_text);
    out[SECONDS_LEN] = b'.';
    out[SECONDS_LEN + 1] = b'0' + (millis / 100) as u8;
    out[SECONDS_LEN + 2] = b'0' + (millis / 10 % 10) as u8;
    out[SECONDS_LEN + 3] = b'0' + (millis % 10) as u8;
    out[SECONDS_LEN + 4] = b'Z';
    Stamp(out)
}

/// `YYYY-MM-DDTHH:MM:SS` for a whole second since the epoch.
fn format_seconds(secs: u64) -> [u8; SECONDS_LEN] {
    let mut out = [b'0'; SECONDS_LEN];
    let stamp = i64::try_from(secs)
        .ok()
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .unwrap_or(jiff::Timestamp::MAX);
    let text = format!("{stamp:.0}");
    if let Some(prefix) = text.as_bytes().get(..SECONDS_LEN) {
        out.copy_from_slice(prefix);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_rfc3339_with_milliseconds() {
        for (secs, nanos) in [
            (0, 0),
            (1_796_024_815, 5_000_000),
            (1_796_024_815, 999_999_999),
            (1_796_024_816, 120_000_000),
            (1_796_024_815, 42_000_000),
            (951_782_400, 1_000_000),
        ] {
            let expected = format!(
                "{:.3}",
                jiff::Timestamp::new(secs as i64, nanos as i32).unwrap()
            );
            let got = at(Duration::new(secs, nanos));
            assert_eq!(got.as_str(), expected, "{secs}.{nanos:09}");
        }
    }

    #[test]
    fn now_is_close_to_the_clock() {
        let text = now().as_str().to_owned();
        let parsed: jiff::Timestamp = text.parse().unwrap();
        let diff = jiff::Timestamp::now().duration_since(parsed);
        assert!(diff.abs() < jiff::SignedDuration::from_secs(5), "{text}");
        assert_eq!(text.len(), LEN);
    }
}
