//! The sturnus binary: see [`sturnus::cli`].

fn main() {
    let code = sturnus::cli::main();
    sturnus::observe::log_sink::flush();
    std::process::exit(code);
}
