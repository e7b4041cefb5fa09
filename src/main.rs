//! The sturnus binary: see [`sturnus::cli`].

/// jemalloc instead of the C library's allocator: every proxied request makes dozens of small
/// allocations (headers, ids, buffers), and the C library's allocator (musl's, in the static
/// binary, most of all) is slow at those.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's built-in options (its `malloc_conf` string, read at start-up; `_RJEM_MALLOC_CONF`
/// in the environment still overrides it). Pingora gives each HTTP/1 body reader a 64 KiB
/// buffer, twice per request; by default jemalloc caches blocks only up to 32 KiB per thread,
/// so each of those went to the shared arena. Caching up to 64 KiB costs well under 1 MB of RSS.
#[export_name = "_rjem_malloc_conf"]
pub static JEMALLOC_CONF: &[u8; 17] = b"tcache_max:65536\0";

fn main() {
    let code = sturnus::cli::main();
    sturnus::observe::log_sink::flush();
    std::process::exit(code);
}
