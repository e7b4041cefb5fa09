//! Wiring a Pingora server: the proxy service on `listen`, the metrics service on
//! `metrics_listen` (when set), with sturnus's own defaults.

use crate::app::App;
use crate::providers::gcp::Refresher;
use crate::proxy::header_guard::HeaderGuard;
use crate::proxy::Sturnus;
use pingora::server::configuration::{Opt, ServerConf};
use pingora::server::Server;
use std::sync::Arc;

/// Builds a bootstrapped Pingora server running the sturnus proxy for `app` (and, when a
/// provider uses Google tokens, the background service keeping them fresh).
pub fn build(opt: Opt, app: Arc<App>) -> Result<Server, String> {
    let conf = server_conf(&opt)?;
    let mut server = Server::new_with_opt_and_conf(opt, conf);
    server.bootstrap();
    let proxy = pingora_proxy::http_proxy(&server.configuration, Sturnus::new(app.clone()));
    let guarded = HeaderGuard::new(proxy, app.config.routing.header_timeout);
    let mut service =
        pingora_core::services::listening::Service::new("sturnus proxy".to_string(), guarded);
    service.add_tcp(&app.config.listen.to_string());
    server.add_service(service);
    log::info!(
        "memory budget for request bodies: {}",
        app.budget.describe()
    );
    let roots = app.peer_settings.roots.clone();
    if let Some(refresher) = Refresher::for_providers(&app.catalog.providers, roots) {
        let service = pingora::services::background::background_service("google tokens", refresher);
        server.add_service(service);
    }
    if let Some(addr) = app.config.metrics_listen {
        server.add_service(crate::metrics_listener::service(app.clone(), addr));
    }
    if let Some(warning) = listen_warning(app.config.listen) {
        log::warn!("{warning}");
    }
    Ok(server)
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

/// Pingora's server config: the `-c` YAML when given, else defaults fit for a sidecar.
fn server_conf(opt: &Opt) -> Result<ServerConf, String> {
    match &opt.conf {
        Some(path) => {
            let mut conf = ServerConf::load_from_yaml(path)
                .map_err(|e| format!("{path}: cannot load the Pingora server config: {e}"))?;
            conf.merge_with_opt(opt);
            Ok(conf)
        }
        None => {
            let mut conf = ServerConf::default();
            conf.merge_with_opt(opt);
            Ok(conf)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
