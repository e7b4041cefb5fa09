//! Where JSON log lines go: stdout, with access lines written in batches.
//!
//! A `write(2)` per access line cost sturnus about a seventh of its CPU time under load, so
//! access lines collect in a buffer that goes out when it holds [`BATCH_BYTES`], or
//! [`FLUSH_DELAY`] after its first line, whichever comes first (the idea of nginx's
//! `access_log ... buffer= flush=`). Every other line is written at once, after whatever is
//! pending, so lines keep their order and warnings are never held back. [`flush`] empties the
//! buffer on the way out; a process killed outright loses at most [`FLUSH_DELAY`] of access lines.

use std::io::Write;
use std::sync::{Condvar, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Pending access lines are written once they reach this many bytes.
pub const BATCH_BYTES: usize = 32 * 1024;
/// Longest an access line waits in the buffer.
pub const FLUSH_DELAY: Duration = Duration::from_millis(50);

/// The pending bytes and the flusher's wake-up.
struct Sink {
    pending: Mutex<Vec<u8>>,
    wake: Condvar,
}

static SINK: LazyLock<Sink> = LazyLock::new(|| {
    let started = std::thread::Builder::new()
        .name("log flusher".into())
        .spawn(flusher);
    if let Err(e) = started {
        // Without the flusher every line is written at once (see `write_line`).
        eprintln!("sturnus: no log flusher thread ({e}); access lines are written unbatched");
        FLUSHER_MISSING.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    Sink {
        pending: Mutex::new(Vec::with_capacity(BATCH_BYTES * 2)),
        wake: Condvar::new(),
    }
});

static FLUSHER_MISSING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn pending() -> MutexGuard<'static, Vec<u8>> {
    SINK.pending.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Writes one complete line (newline included) to stdout: at once, or batched when `batch`.
pub fn write_line(line: &[u8], batch: bool) {
    let mut pending = pending();
    let was_empty = pending.is_empty();
    pending.extend_from_slice(line);
    let batch = batch && !FLUSHER_MISSING.load(std::sync::atomic::Ordering::Relaxed);
    if !batch || pending.len() >= BATCH_BYTES {
        write_out(&mut pending);
    } else if was_empty {
        SINK.wake.notify_one();
    }
}

/// Writes every pending line now (before the process exits).
pub fn flush() {
    write_out(&mut pending());
}

fn write_out(pending: &mut Vec<u8>) {
    if pending.is_empty() {
        return;
    }
    let mut out = std::io::stdout().lock();
    // Nowhere to report a failing stdout; the lines are dropped rather than kept growing.
    let _ = out.write_all(pending);
    let _ = out.flush();
    pending.clear();
}

/// Waits for a first pending line, gives the batch [`FLUSH_DELAY`] to fill, writes it.
fn flusher() {
    loop {
        let guard = pending();
        let guard = SINK
            .wake
            .wait_while(guard, |p| p.is_empty())
            .unwrap_or_else(PoisonError::into_inner);
        drop(guard);
        std::thread::sleep(FLUSH_DELAY);
        flush();
    }
}
