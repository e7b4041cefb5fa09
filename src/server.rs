//! Wiring a Pingora server: the proxy service on `listen`, the metrics service on
//! `metrics_listen` (when set), the signal handling and drain of `lifecycle`, with
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
use pingora_core::listeners::tls::TlsSettings;
use pingora_core::listeners::{L4BufferSettings, ListenerConfig, DEFAULT_L4_WRITE_BUFFER_SIZE};
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
/// The plain listener's socket buffers: no read buffer (Pingora's default is 64 KiB per
/// connection, kept for the connection's life), since the header guard reads each request
/// header into its own buffer and bodies are read in large pieces; Pingora's write buffer.
const PLAIN_LISTENER_BUFFERS: L4BufferSettings = L4BufferSettings {
    read: Some(0),
    write: Some(DEFAULT_L4_WRITE_BUFFER_SIZE),
};
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
    /// After a drain the process normally exits earlier, from `lifecycle::drain::exit`.
    pub fn run_forever(self) -> ! {
        self.server.run(RunArgs {
            shutdown_signal: Box::new(self.watch),
        });
        crate::observe::log_sink::flush();
        std::process::exit(0)
    }
}

/// Builds a bootstrapped Pingora server running the sturnus services for `app`, with the signal
/// watcher to run it with; `anonymous` (requests without a credential are served) warns about
/// a listener others can reach. With `-u` this takes the sockets (and routing state) over from the
/// running instance.
pub fn build(mut opt: Opt, app: Arc<App>, anonymous: bool) -> Result<Built, ServerConfError> {
    let conf = server_conf(&opt)?;
    // Read before the server starts: a graceful upgrade's new process reads them afresh.
    let tls = match &app.config.listen_tls {
        Some(tls) => Some((tls.listen, tls_settings(tls)?)),
        None => None,
    };
    // Every sidecar of the fleet lulls the same candidate at the same moment.
    crate::routing::lull::align_to_wall_clock();
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
    let draining = drain::Draining::new(guarded, app.lifecycle.clone(), drain::exit);
    let mut proxy = Service::new("sturnus proxy".to_string(), draining);
    proxy.add_listener(
        ListenerConfig::tcp(app.config.listen.to_string()).l4_buffer(PLAIN_LISTENER_BUFFERS),
    );
    if let Some(tls) = tls {
        proxy.add_tls_with_settings(&tls.0.to_string(), None, tls.1);
    }
    server.add_service(proxy).add_dependency(&signals);
    log::info!(
        "memory budget for request bodies: {}",
        app.budget.describe()
    );
    log_upstream(
        app.connect_upstream(&server.configuration),
        &server.configuration,
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
    if let Some(warning) = listen_warning(app.config.listen).filter(|_| anonymous) {
        log::warn!("{warning}");
    }
    Ok(Built { server, watch })
}

/// Pingora's TLS settings for `[listen_tls]`: its certificate chain and key, ALPN `h2` and
/// `http/1.1`.
pub fn tls_settings(tls: &crate::config::ListenTls) -> Result<TlsSettings, ServerConfError> {
    let (cert, key) = (
        tls.cert.display().to_string(),
        tls.key.display().to_string(),
    );
    let mut settings =
        TlsSettings::intermediate(&cert, &key).map_err(|problem| ServerConfError::Tls {
            cert: cert.clone(),
            key: key.clone(),
            problem,
        })?;
    settings.enable_h2();
    Ok(settings)
}

/// Logs the provider connection settings taken from the server configuration.
fn log_upstream(upstream: &crate::app::Upstream, conf: &ServerConf) {
    log::info!(
        "provider connections: up to {} idle kept alive (upstream_keepalive_pool_size {} × {} \
         thread(s)); a request whose write to a pooled connection fails is resent {} \
         (max_retries {})",
        upstream.pool_size,
        conf.upstream_keepalive_pool_size,
        conf.threads.max(1),
        if upstream.max_resends == 0 {
            "never"
        } else {
            "once"
        },
        upstream.max_resends
    );
}

/// Whether requests without a credential are served: no `[auth]`, or `allow_anonymous`.
pub fn serves_anonymous(config: &crate::config::Config) -> bool {
    config.auth.as_ref().is_none_or(|a| a.allow_anonymous)
}

/// The refusal to start for a listener others can reach (a non-loopback `listen`, any
/// `listen_tls`) with no
/// `[auth]`, naming the fixes; `allow_anonymous` (`--allow-anonymous`) is the explicit choice
/// to serve it anyway.
pub fn exposure_refusal(config: &crate::config::Config, allow_anonymous: bool) -> Option<String> {
    let exposed = match &config.listen_tls {
        Some(tls) => format!("listen_tls.listen = {}", tls.listen),
        None if !config.listen.ip().is_loopback() => {
            format!("listen = {} is not a loopback address", config.listen)
        }
        None => return None,
    };
    if config.auth.is_some() || allow_anonymous {
        return None;
    }
    Some(format!(
        "refusing to start: {exposed} and there is no [auth], so \
         anyone who can reach it would send requests signed with your provider credentials. \
         Add client keys ([auth] with [[auth.key]], see docs/operations.md), or, when only \
         clients you trust can reach the port (a published container port behind your own \
         network controls), say so with --allow-anonymous (STURNUS_ALLOW_ANONYMOUS=true) or \
         [auth] allow_anonymous = true"
    ))
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
pub enum ServerConfError {
    /// Pingora could not read or parse the YAML.
    #[error("{path}: cannot load the Pingora server config: {problem}")]
    Load {
        /// The YAML file's path.
        path: String,
        /// Pingora's error.
        problem: Box<pingora_core::Error>,
    },
    /// The `[listen_tls]` certificate or key cannot be used.
    #[error("listen_tls: cannot use cert {cert} with key {key}: {problem}")]
    Tls {
        /// The certificate file.
        cert: String,
        /// The key file.
        key: String,
        /// Pingora's error.
        problem: Box<pingora_core::Error>,
    },
    /// A source address for provider connections that is not an IP address of its family.
    #[error("{key}: `{value}` is not an {family} address")]
    BindAddress {
        /// `client_bind_to_ipv4` or `client_bind_to_ipv6`.
        key: &'static str,
        /// The value given.
        value: String,
        /// `IPv4` or `IPv6`.
        family: &'static str,
    },
}

/// Pingora's server config: the `-c` YAML when given, else [`sidecar_defaults`]. Grace periods
/// the YAML leaves unset take sturnus's defaults too, not Pingora's 300 s.
pub fn server_conf(opt: &Opt) -> Result<ServerConf, ServerConfError> {
    let mut conf = match &opt.conf {
        Some(path) => {
            ServerConf::load_from_yaml(path).map_err(|problem| ServerConfError::Load {
                path: path.clone(),
                problem,
            })?
        }
        None => sidecar_defaults(),
    };
    conf.grace_period_seconds.get_or_insert(GRACE_PERIOD_SECS);
    conf.graceful_shutdown_timeout_seconds
        .get_or_insert(SHUTDOWN_TIMEOUT_SECS);
    conf.merge_with_opt(opt);
    check_bind_addresses(&conf)?;
    Ok(conf)
}

/// Refuses source addresses for provider connections that are not IP addresses of their
/// family (Pingora's connector would panic on them at start).
fn check_bind_addresses(conf: &ServerConf) -> Result<(), ServerConfError> {
    let bad = |key, value: &String, family| ServerConfError::BindAddress {
        key,
        value: value.clone(),
        family,
    };
    for v4 in &conf.client_bind_to_ipv4 {
        if v4.parse::<std::net::Ipv4Addr>().is_err() {
            return Err(bad("client_bind_to_ipv4", v4, "IPv4"));
        }
    }
    for v6 in &conf.client_bind_to_ipv6 {
        if v6.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(bad("client_bind_to_ipv6", v6, "IPv6"));
        }
    }
    Ok(())
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
    fn provider_connection_settings_come_from_the_file() {
        let path = std::env::temp_dir().join(format!("sturnus-pool-{}.yaml", std::process::id()));
        std::fs::write(
            &path,
            "---\nversion: 1\nthreads: 2\nupstream_keepalive_pool_size: 3\nmax_retries: 1\n\
             client_bind_to_ipv4: [\"127.0.0.1\"]\n",
        )
        .unwrap();
        let conf = server_conf(&opt(path.to_str())).unwrap();
        std::fs::remove_file(&path).ok();
        let upstream = crate::app::Upstream::from_server_conf(&conf);
        assert_eq!((upstream.pool_size, upstream.max_resends), (6, 1));
        let defaults = crate::app::Upstream::from_server_conf(&server_conf(&opt(None)).unwrap());
        assert_eq!(defaults.pool_size, 128);
    }

    #[test]
    fn a_source_address_that_is_not_an_ip_is_refused() {
        let path = std::env::temp_dir().join(format!("sturnus-bind-{}.yaml", std::process::id()));
        std::fs::write(&path, "---\nversion: 1\nclient_bind_to_ipv4: [\"eth0\"]\n").unwrap();
        let err = server_conf(&opt(path.to_str())).unwrap_err().to_string();
        std::fs::remove_file(&path).ok();
        assert!(
            err.contains("client_bind_to_ipv4") && err.contains("eth0"),
            "{err}"
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
