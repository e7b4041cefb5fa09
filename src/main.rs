//! The sturnus binary: see [`sturnus::cli`].

/// jemalloc instead of the C library's allocator on Linux: every proxied request makes dozens of
/// small allocations (headers, ids, buffers), and the C library's allocator (musl's, in the static
/// binary, most of all) is slow at those. On macOS the system allocator serves.
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    let code = sturnus::cli::main();
    sturnus::observe::log_sink::flush();
    std::process::exit(code);
}
