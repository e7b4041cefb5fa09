//! Command line: sturnus's own flags and subcommands next to Pingora's (`-c`, `-d`, `-t`, `-u`).

use crate::app::App;
use crate::config::{self, Config};
use crate::observe::{self, LogFormat};
use clap::{Parser, Subcommand};
use pingora::server::configuration::Opt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

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

    /// Address the proxy listens on, replacing the config's `listen` (e.g. 0.0.0.0:4000 in a
    /// container whose port is published).
    #[arg(long, global = true, env = "STURNUS_LISTEN", value_name = "ADDR")]
    pub listen: Option<SocketAddr>,

    /// Serve requests without a client credential even on a listener others can reach (a
    /// non-loopback `listen` without `[auth]`), which sturnus otherwise refuses: for a
    /// container whose port is published on purpose, behind your own network controls.
    #[arg(long, global = true, env = "STURNUS_ALLOW_ANONYMOUS")]
    pub allow_anonymous: bool,

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
    /// GET a health URL: exit 0 on 200, else 1 with one line saying why (for exec probes).
    Healthcheck {
        /// The URL to check (plain http).
        #[arg(long, default_value = crate::healthcheck::DEFAULT_URL)]
        url: String,
        /// Connect and read timeout, in seconds.
        #[arg(long, default_value_t = 5)]
        timeout: u64,
    },
    /// Run a self-contained demo: fake providers, the real proxy, live routing tables.
    #[cfg_attr(
        not(feature = "tooling"),
        command(about = "Run a self-contained demo (not in this build)")
    )]
    Demo {
        /// How long to drive traffic, in seconds (at least 2).
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// Also print the log (access lines, startup), which the tables otherwise keep to
        /// warnings.
        #[arg(long)]
        verbose: bool,
    },
    /// Compare routing strategies in a deterministic simulation (see docs/routing.md).
    #[cfg(feature = "tooling")]
    Simulate(crate::simulate::SimulateArgs),
    /// Compare routing strategies in a deterministic simulation (not in this build).
    #[cfg(not(feature = "tooling"))]
    Simulate {
        /// The simulator's arguments, ignored.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
        args: Vec<String>,
    },
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
        Some(Command::Check) => check(&cli.config, cli.listen, cli.allow_anonymous),
        #[cfg(feature = "tooling")]
        Some(Command::Demo { seconds, verbose }) => crate::demo::run(seconds, verbose),
        #[cfg(feature = "tooling")]
        Some(Command::Simulate(args)) => crate::simulate::main(&args),
        #[cfg(not(feature = "tooling"))]
        Some(Command::Demo { .. }) => not_built("demo"),
        #[cfg(not(feature = "tooling"))]
        Some(Command::Simulate { .. }) => not_built("simulate"),
        Some(Command::Healthcheck { url, timeout }) => {
            crate::healthcheck::main(&url, std::time::Duration::from_secs(timeout.max(1)))
        }
        None | Some(Command::Serve) => serve(
            &cli.config,
            cli.listen,
            cli.allow_anonymous,
            cli.pingora,
            cli.log_format,
        ),
    }
}

/// The answer of a tooling subcommand in a build without the `tooling` feature (the shipped
/// binary): it says so and exits 2.
#[cfg(not(feature = "tooling"))]
fn not_built(subcommand: &str) -> i32 {
    eprintln!(
        "sturnus: `sturnus {subcommand}` is not in this build (built without the `tooling` \
         feature, as the release image is); run it from a default build: cargo run -- {subcommand}"
    );
    2
}

/// Loads and validates the config (with `--listen` applied), printing every problem; `None`
/// when it is unusable, or when it would serve anyone who reaches it without `[auth]` and
/// without `--allow-anonymous`.
fn load(path: &Path, listen: Option<SocketAddr>, allow_anonymous: bool) -> Option<Config> {
    match Config::load_with_listen(path, listen) {
        Ok(config) => match crate::server::exposure_refusal(&config, allow_anonymous) {
            Some(refusal) => {
                eprintln!("sturnus: {refusal}");
                None
            }
            None => Some(config),
        },
        Err(e) => {
            eprintln!("sturnus: invalid config {}:\n{e}", path.display());
            None
        }
    }
}

fn check(path: &Path, listen: Option<SocketAddr>, allow_anonymous: bool) -> i32 {
    let Some(config) = load(path, listen, allow_anonymous) else {
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
    if let Some(Err(e)) = app
        .config
        .listen_tls
        .as_ref()
        .map(crate::server::tls_settings)
    {
        eprintln!("sturnus: {e}");
        return 1;
    }
    println!("{summary}");
    println!(
        "memory budget for request bodies: {}",
        app.budget.describe()
    );
    for warning in listen_warnings(&app) {
        println!("warning: {warning}");
    }
    println!("config OK");
    0
}

fn serve(
    path: &Path,
    listen: Option<SocketAddr>,
    allow_anonymous: bool,
    opt: Opt,
    log_format: LogFormat,
) -> i32 {
    observe::logger::init(log_format);
    if opt.upgrade && !cfg!(target_os = "linux") {
        eprintln!(
            "sturnus: -u (graceful upgrade) needs Linux: Pingora passes sockets on only there"
        );
        return 1;
    }
    let Some(config) = load(path, listen, allow_anonymous) else {
        return 1;
    };
    let anonymous = crate::server::serves_anonymous(&config);
    let app = match App::new(config) {
        Ok(app) => app,
        Err(e) => {
            eprintln!("sturnus: {e}");
            return 1;
        }
    };
    observe::log_startup(&app.config);
    if let Some(warning) = container_warning(&app) {
        log::warn!("{warning}");
    }
    match crate::server::build(opt, app, anonymous) {
        Ok(server) => server.run_forever(),
        Err(e) => {
            eprintln!("sturnus: {e}");
            1
        }
    }
}

/// What `sturnus check` warns about the listener: reachable by others, or unreachable through
/// a container's published port.
fn listen_warnings(app: &App) -> impl Iterator<Item = String> {
    crate::server::listen_warning(app.config.listen)
        .filter(|_| crate::server::serves_anonymous(&app.config))
        .into_iter()
        .chain(container_warning(app))
}

/// The warning for a loopback listener inside a container (see [`crate::container`]).
fn container_warning(app: &App) -> Option<String> {
    crate::container::loopback_warning(app.config.listen, &crate::container::detect())
}

/// Installs the logger in its default format (see [`observe::logger`]).
pub fn init_logging() {
    observe::logger::init(LogFormat::Auto);
}
