//! Wiring a Pingora server: the proxy service on `listen`, the metrics service on
//! `metrics_listen` (when set), the signal handling and drain of [`crate::lifecycle`], with
//! sturnus's own server defaults.

use crate::app::App;
use crate::lifecycle::{drain, handover, outlive::Outliving, signals};
use crate::providers::gcp::Refresher;
use crate::providers::health::HealthChecks;
use crate::proxy::header_guard::HeaderGuard;
use crate::proxy::Sturnus;
use pingora::server::configuration::{Opt, ServerConf};
use pingora::server::{RunArgs, Server};
use pingora::services::background::background_service;
use pingora_core::services::listening::Service;
use std::sync::Arc;

/// Longest wait after SIGTERM (or after the upgrade hand-over) for in-flight requests and
/// streams, when the `-c` file does not set `grace_period_seconds`. Unmodified Pingora waits
/// 300 s; a pod's default termination grace is 30 s. sturnus exits as soon as it has drained.
pub const GRACE_PERIOD_SECS: u64 = 20;
/// Time the runtimes get to stop after the grace period, when `-c` does not set
/// `graceful_shutdown_timeout_seconds`. Grace plus this stays under a pod's 30 s.
pub const SHUTDOWN_TIMEOUT_SECS: u64 = 5;
// The whole drain fits Kubernetes' default termination grace of 30 s.
const _: () = assert!(GRACE_PERIOD_SECS + SHUTDOWN_TIMEOUT_SECS < 30);
/// Timeouts longer than this many seconds use Tokio's timer instead of Pingora's shared timer
/// thread, when sturnus runs without `-c`. Every proxied request arms several long timeouts
/// (provider read and write, pooled-connection idle) that are almost always cancelled; Tokio's
/// timer forgets a cancelled one at once and costs less to arm.
pub const TOKIO_TIMER_ABOVE_SECS: u64 = 1;
/// `upgrade_sock` when sturnus runs without `-c`.
pub const UPGRADE_SOCK: &str = "/tmp/sturnus_upgrade.sock";
/// `pid_file` (written only with `-d`) when sturnus runs without `-c`.
pub const PID_FILE: &str = "/tmp/sturnus.pid";

/// A bootstrapped Pingora server with sturnus's services, ready to run.
pub struct Built {
    server: Server,
    watch: signals::Watch,
}

impl Built {
    /// Runs until shutdown, then exits the process with status 0 (as Pingora's `run_forever`).
    /// After a drain the process normally exits earlier, from [`drain::exit`].
    pub fn run_forever(self) -> ! {
        self.server.run(RunArgs {
            shutdown_signal: Box::new(self.watch),
        });
        crate::observe::log_sink::flush();
        std::process::exit(0)
    }
}

/// Builds a bootstrapped Pingora server running the sturnus services for `app`, with the signal
/// watcher to run it with. With `-u` this takes the sockets (and routing state) over from the
/// running instance.
pub fn build(mut opt: Opt, app: Arc<App>) -> Result<Built, ServerConfError> {
    let conf = server_conf(&opt)?;
    // The file is loaded above; Pingora would only warn that it ignores it.
    opt.conf = None;
    let upgrade = opt.upgrade;
    let mut server = Server::new_with_opt_and_conf(opt, conf);
    server.bootstrap();
    let snapshot = handover::path_for(&server.configuration.upgrade_sock);
    if upgrade {
        import_routing_state(&app, &snapshot);
    }

    let (listener, watch) = signals::pair(app.clone(), snapshot);
    let signals = server.add_service(background_service("signals", listener));

    let proxy = pingora_proxy::http_proxy(&server.configuration, Sturnus::new(app.clone()));
    let guarded = HeaderGuard::new(proxy, app.config.routing.header_timeout);
    let tracked = drain::Tracked::new(guarded, app.lifecycle.clone(), drain::exit);
    let mut proxy = Service::new("sturnus proxy".to_string(), tracked);
    proxy.add_tcp(&app.config.listen.to_string());
    server.add_service(proxy).add_dependency(&signals);
    log::info!(
        "memory budget for request bodies: {}",
        app.budget.describe()
    );

    let roots = app.peer_settings.roots.clone();
    if let Some(refresher) = Refresher::for_providers(&app.catalog.providers, roots) {
        server.add_service(background_service("google tokens", refresher));
    }
    if let Some(checks) = HealthChecks::for_providers(&app.catalog.providers, &app.peer_settings) {
        server.add_service(background_service("provider health checks", checks));
    }
    if let Some(addr) = app.config.metrics_listen {
        let metrics = crate::metrics_listener::service(app.clone(), addr);
        let metrics = Outliving::new(metrics, app.lifecycle.clone());
        server.add_service(metrics).add_dependency(&signals);
    }
    if let Some(warning) = listen_warning(app.config.listen) {
        log::warn!("{warning}");
    }
    Ok(Built { server, watch })
}

/// The warning for a `listen` address other clients can reach, if it is one.
pub fn listen_warning(listen: std::net::SocketAddr) -> Option<String> {
    (!listen.ip().is_loopback()).then(|| {
        format!(
            "listen = {listen} is not a loopback address: anyone who can reach it can send \
             requests that sturnus signs with your provider credentials"
        )
    })
}

/// Imports the routing-state snapshot the old process wrote at SIGQUIT, logging the outcome.
fn import_routing_state(app: &App, snapshot: &std::path::Path) {
    match handover::restore(&app.catalog, snapshot) {
        Ok(Some(r)) => log::info!(
            "routing state taken over: {} candidate(s) carried, {} dropped, {} new (cold)",
            r.carried,
            r.dropped,
            r.new
        ),
        Ok(None) => log::info!(
            "no routing state at {}; candidates start cold",
            snapshot.display()
        ),
        Err(e) => log::warn!("routing state not taken over: {e}"),
    }
}

/// Why the `-c` Pingora server config cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{path}: cannot load the Pingora server config: {problem}")]
pub struct ServerConfError {
    /// The YAML file's path.
    pub path: String,
    /// Pingora's error.
    pub problem: Box<pingora_core::Error>,
}

/// Pingora's server config: the `-c` YAML when given, else [`sidecar_defaults`]. Grace periods
/// the YAML leaves unset take sturnus's defaults too, not Pingora's 300 s.
pub fn server_conf(opt: &Opt) -> Result<ServerConf, ServerConfError> {
    let mut conf = match &opt.conf {
        Some(path) => ServerConf::load_from_yaml(path).map_err(|problem| ServerConfError {
            path: path.clone(),
            problem,
        })?,
        None => sidecar_defaults(),
    };
    conf.grace_period_seconds.get_or_insert(GRACE_PERIOD_SECS);
    conf.graceful_shutdown_timeout_seconds
        .get_or_insert(SHUTDOWN_TIMEOUT_SECS);
    conf.merge_with_opt(opt);
    Ok(conf)
}

/// The server config sturnus uses without `-c`: Pingora's defaults with short grace periods and
/// sturnus's own socket and pid file names.
pub fn sidecar_defaults() -> ServerConf {
    ServerConf {
        grace_period_seconds: Some(GRACE_PERIOD_SECS),
        graceful_shutdown_timeout_seconds: Some(SHUTDOWN_TIMEOUT_SECS),
        upgrade_sock: UPGRADE_SOCK.to_string(),
        pid_file: PID_FILE.to_string(),
        fast_timeout_to_tokio_threshold_seconds: Some(TOKIO_TIMER_ABOVE_SECS),
        ..ServerConf::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opt(conf: Option<&str>) -> Opt {
        Opt {
            conf: conf.map(str::to_string),
            ..Opt::default()
        }
    }

    #[test]
    fn without_a_file_the_sidecar_defaults_apply() {
        let conf = server_conf(&opt(None)).unwrap();
        assert_eq!(conf.grace_period_seconds, Some(GRACE_PERIOD_SECS));
        assert_eq!(
            conf.graceful_shutdown_timeout_seconds,
            Some(SHUTDOWN_TIMEOUT_SECS)
        );
        assert_eq!(conf.upgrade_sock, UPGRADE_SOCK);
        assert_eq!(conf.pid_file, PID_FILE);
        assert_eq!(
            conf.fast_timeout_to_tokio_threshold_seconds,
            Some(TOKIO_TIMER_ABOVE_SECS)
        );
    }

    #[test]
    fn a_file_without_grace_periods_gets_sturnus_defaults_not_300s() {
        let path = std::env::temp_dir().join(format!("sturnus-conf-{}.yaml", std::process::id()));
        std::fs::write(&path, "---\nversion: 1\nthreads: 3\n").unwrap();
        let conf = server_conf(&opt(path.to_str())).unwrap();
        std::fs::remove_file(&path).ok();
        assert_eq!(conf.threads, 3);
        assert_eq!(conf.grace_period_seconds, Some(GRACE_PERIOD_SECS));
        assert_eq!(
            conf.graceful_shutdown_timeout_seconds,
            Some(SHUTDOWN_TIMEOUT_SECS)
        );
    }

    #[test]
    fn the_example_file_matches_the_built_in_defaults() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/conf/pingora.yaml");
        let conf = server_conf(&opt(Some(path))).unwrap();
        assert_eq!(conf.grace_period_seconds, Some(GRACE_PERIOD_SECS));
        assert_eq!(
            conf.graceful_shutdown_timeout_seconds,
            Some(SHUTDOWN_TIMEOUT_SECS)
        );
        assert_eq!(
            conf.fast_timeout_to_tokio_threshold_seconds,
            Some(TOKIO_TIMER_ABOVE_SECS)
        );
    }

    #[test]
    fn an_unreadable_file_is_a_clear_error() {
        let err = server_conf(&opt(Some("/nonexistent/pingora.yaml")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/pingora.yaml"), "{err}");
    }

    #[test]
    fn only_non_loopback_listeners_are_warned_about() {
        assert!(listen_warning("127.0.0.1:4000".parse().unwrap()).is_none());
        assert!(listen_warning("[::1]:4000".parse().unwrap()).is_none());
        let w = listen_warning("0.0.0.0:4000".parse().unwrap()).unwrap();
        assert!(
            w.contains("0.0.0.0:4000") && w.contains("credentials"),
            "{w}"
        );
        assert!(listen_warning("[::]:4000".parse().unwrap()).is_some());
        assert!(listen_warning("10.1.2.3:4000".parse().unwrap()).is_some());
    }
}
