//! Command line: sturnus's own flags and subcommands next to Pingora's (`-c`, `-d`, `-t`, `-u`).

use crate::app::App;
use crate::config::{self, Config};
use crate::observe::{self, LogFormat};
use clap::{Parser, Subcommand};
use pingora::server::configuration::Opt;
use std::path::PathBuf;

/// sturnus: an LLM routing sidecar on Pingora.
#[derive(Parser, Debug)]
#[command(name = "sturnus", version, about, long_about = None)]
pub struct Cli {
    /// Path of the sturnus config file (TOML).
    #[arg(long, global = true, default_value = "./config.toml")]
    pub config: PathBuf,

    /// File of KEY=VALUE lines loaded into the environment (existing variables win).
    #[arg(long, global = true)]
    pub env_file: Option<PathBuf>,

    /// Log format: JSON lines when stdout is not a terminal (auto), or always json / pretty.
    #[arg(
        long,
        global = true,
        env = "STURNUS_LOG_FORMAT",
        value_enum,
        default_value_t
    )]
    pub log_format: LogFormat,

    /// Pingora's own server flags.
    #[command(flatten)]
    pub pingora: Opt,

    /// What to do (default: serve).
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// sturnus subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the proxy (the default).
    Serve,
    /// Validate the config, print the resolved aliases with secrets masked, exit 0 or 1.
    Check,
    /// Run a self-contained demo: simulated providers, the real proxy, live routing tables.
    Demo {
        /// How long to drive traffic, in seconds.
        #[arg(long, default_value_t = 20)]
        seconds: u64,
    },
    /// Compare routing strategies in a deterministic simulation (see docs/routing.md).
    Simulate(crate::simulate::SimulateArgs),
}

/// Parses the command line and runs it; returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    if let Some(path) = &cli.env_file {
        if let Err(e) = config::load_env_file(path) {
            eprintln!("sturnus: --env-file: {e}");
            return 1;
        }
    }
    match cli.command {
        Some(Command::Check) => check(&cli.config),
        Some(Command::Demo { seconds }) => crate::demo::run(seconds),
        Some(Command::Simulate(args)) => crate::simulate::main(&args),
        None | Some(Command::Serve) => serve(&cli.config, cli.pingora, cli.log_format),
    }
}

/// Loads and validates the config, printing every problem; `None` when it is unusable.
fn load(path: &std::path::Path) -> Option<Config> {
    match Config::load(path) {
        Ok(config) => Some(config),
        Err(e) => {
            eprintln!("sturnus: invalid config {}:\n{e}", path.display());
            None
        }
    }
}

fn check(path: &std::path::Path) -> i32 {
    let Some(config) = load(path) else {
        return 1;
    };
    let summary = config.describe();
    let app = match App::new(config) {
        Ok(app) => app,
        Err(e) => {
            eprintln!("sturnus: invalid config {}:\n{e}", path.display());
            return 1;
        }
    };
    println!("{summary}");
    println!(
        "memory budget for request bodies: {}",
        app.budget.describe()
    );
    if let Some(warning) = crate::server::listen_warning(app.config.listen) {
        println!("warning: {warning}");
    }
    println!("config OK");
    0
}

fn serve(path: &std::path::Path, opt: Opt, log_format: LogFormat) -> i32 {
    observe::logger::init(log_format);
    let Some(config) = load(path) else {
        return 1;
    };
    let app = match App::new(config) {
        Ok(app) => app,
        Err(e) => {
            eprintln!("sturnus: {e}");
            return 1;
        }
    };
    observe::log_startup(&app.config);
    let server = match crate::server::build(opt, app) {
        Ok(server) => server,
        Err(e) => {
            eprintln!("sturnus: {e}");
            return 1;
        }
    };
    server.run_forever()
}

/// Installs the logger in its default format (see [`observe::logger`]).
pub fn init_logging() {
    observe::logger::init(LogFormat::Auto);
}
