//! The sturnus binary: see [`sturnus::cli`].

fn main() {
    std::process::exit(sturnus::cli::main());
}
