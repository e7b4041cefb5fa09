//! Wiring a Pingora server: the proxy service on `listen`, the metrics service on
//! `metrics_listen` (when set), with sturnus's own defaults.

use crate::app::App;
use crate::providers::gcp::Refresher;
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
    let mut proxy = pingora_proxy::http_proxy_service_with_name(
        &server.configuration,
        Sturnus::new(app.clone()),
        "sturnus proxy",
    );
    proxy.add_tcp(&app.config.listen.to_string());
    server.add_service(proxy);
    let roots = app.peer_settings.roots.clone();
    if let Some(refresher) = Refresher::for_providers(&app.catalog.providers, roots) {
        let service = pingora::services::background::background_service("google tokens", refresher);
        server.add_service(service);
    }
    if let Some(addr) = app.config.metrics_listen {
        server.add_service(crate::metrics_listener::service(app.clone(), addr));
    }
    Ok(server)
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
