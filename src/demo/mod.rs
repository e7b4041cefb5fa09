//! `sturnus demo`: three fake providers, the real proxy in front of them, and live traffic.
//!
//! Needs no keys and no network: a fast, a slow and a flaky provider run in-process on loopback,
//! the real Pingora proxy routes between them under a generated config, and a table printed
//! every second shows the shares moving. Halfway through, the fast provider turns slow.

mod driver;
mod table;

use crate::app::App;
use crate::config::Config;
use crate::fake_provider::FakeProvider;
use crate::observe::LogFormat;
use driver::Tally;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the demo's fake providers behave at the start.
const PROVIDERS: [(&str, &str, u64); 3] = [
    ("swift", "swift-large", 40),
    ("steady", "steady-medium", 120),
    ("flaky", "flaky-small", 60),
];

/// The log filter of a demo without `--verbose`: the screen belongs to the tables, so access
/// lines and other info lines are off; warnings and errors still show.
pub const QUIET_FILTER: &str = "warn";

/// Runs the demo for `seconds` (at least 2) and returns the process exit code; `verbose` also
/// prints the log (access lines, startup) between the tables.
pub fn run(seconds: u64, verbose: bool) -> i32 {
    if verbose {
        crate::cli::init_logging();
    } else {
        crate::observe::logger::init_with_filter(LogFormat::Auto, QUIET_FILTER);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sturnus demo: cannot start a runtime: {e}");
            return 1;
        }
    };
    match runtime.block_on(demo(seconds.max(2))) {
        Ok(()) => {
            if !verbose {
                println!("(access logs were off; `sturnus demo --verbose` shows them)");
            }
            0
        }
        Err(e) => {
            eprintln!("sturnus demo: {e}");
            1
        }
    }
}

/// Why the demo cannot start.
#[derive(Debug, thiserror::Error)]
enum DemoError {
    /// A fake provider cannot listen.
    #[error("cannot start fake provider {name}: {source}")]
    Provider {
        /// The provider's name.
        name: &'static str,
        /// Why it cannot listen.
        source: std::io::Error,
    },
    /// No loopback port is free for the proxy.
    #[error("no free loopback port: {0}")]
    NoPort(std::io::Error),
    /// The generated config does not validate.
    #[error("generated config is invalid:\n{0}")]
    Config(crate::config::ConfigError),
    /// The proxy's state cannot be built from the config.
    #[error(transparent)]
    App(#[from] crate::app::AppError),
    /// The Pingora server cannot be configured.
    #[error(transparent)]
    Server(#[from] crate::server::ServerConfError),
    /// The proxy does not answer `/health`.
    #[error(transparent)]
    NotHealthy(#[from] driver::NotHealthy),
}

async fn demo(seconds: u64) -> Result<(), DemoError> {
    let mut sims = Vec::new();
    for (name, _, latency_ms) in PROVIDERS {
        let sim = FakeProvider::start(name)
            .await
            .map_err(|source| DemoError::Provider { name, source })?;
        sim.set_recording(false);
        sim.behaviour.set_latency(Duration::from_millis(latency_ms));
        sims.push(sim);
    }
    sims[2].behaviour.set_failure_every(3, 503);

    let listen = free_loopback_addr()?;
    let config =
        Config::parse(&config_text(listen, &sims), &|_| None).map_err(DemoError::Config)?;
    let app = App::new(config)?;
    let server = crate::server::build(Default::default(), app.clone(), true)?;
    std::thread::spawn(move || server.run_forever());
    driver::wait_healthy(listen).await?;

    println!("sturnus demo: proxy on http://{listen}/v1, alias \"chat\" over three fake providers");
    for (name, model, latency_ms) in PROVIDERS {
        let note = if name == "flaky" {
            ", fails 1 in 3 with 503"
        } else {
            ""
        };
        println!("  {name:<7} {model:<14} {latency_ms} ms to first chunk{note}");
    }
    println!("  halfway through, swift slows to 400 ms\n");

    let tally = Arc::new(Tally::new(PROVIDERS.len()));
    let stop = Instant::now() + Duration::from_secs(seconds);
    let workers: Vec<_> = (0..8)
        .map(|_| tokio::spawn(driver::worker(listen, tally.clone(), stop)))
        .collect();
    let mut slowed = false;
    for second in 1..=seconds {
        tokio::time::sleep_until((stop - Duration::from_secs(seconds - second)).into()).await;
        if !slowed && second * 2 >= seconds {
            sims[0].behaviour.set_latency(Duration::from_millis(400));
            slowed = true;
            println!(">>> swift is now slow (400 ms)\n");
        }
        println!("{}", table::render(second, &app, &tally.take()));
    }
    for w in workers {
        let _ = w.await;
    }
    println!("demo finished: sturnus moved traffic away from the provider that slowed down.");
    Ok(())
}

/// The generated config: one alias over the three fake providers.
fn config_text(listen: SocketAddr, sims: &[FakeProvider]) -> String {
    let mut text = format!("listen = \"{listen}\"\n\n");
    for ((name, _, _), sim) in PROVIDERS.iter().zip(sims) {
        text.push_str(&format!(
            "[provider.{name}]\nbase_url = \"{}/v1\"\n\n",
            sim.base_url()
        ));
    }
    text.push_str("[model]\nchat = [\n");
    for (name, model, _) in PROVIDERS {
        text.push_str(&format!(
            "  {{ provider = \"{name}\", model = \"{model}\" }},\n"
        ));
    }
    text.push_str("]\n");
    text
}

fn free_loopback_addr() -> Result<SocketAddr, DemoError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(DemoError::NoPort)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn generated_config_is_valid() {
        let mut sims = Vec::new();
        for (name, _, _) in PROVIDERS {
            sims.push(FakeProvider::start(name).await.unwrap());
        }
        let text = config_text("127.0.0.1:4999".parse().unwrap(), &sims);
        let config = Config::parse(&text, &|_| None).unwrap();
        assert_eq!(config.aliases[0].name, "chat");
        assert_eq!(config.aliases[0].candidates.len(), 3);
    }
}
