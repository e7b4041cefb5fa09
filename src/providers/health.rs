//! Active health checks for the providers that opt in with `health_check = { ... }`.
//!
//! The checking is `pingora-load-balancing`'s: each checked provider gets a [`HealthRegistry`]
//! holding the provider as its one target, checked by [`ProviderProbe`] (the crate's
//! [`HealthCheck`] trait) and run by the crate's [`HealthCheckService`], which counts
//! consecutive results against the provider's thresholds and reports each flip through
//! [`HealthCheck::health_status_change`]. One Pingora background service, [`HealthChecks`],
//! runs the loops of every checked provider. What comes out is one flag per provider,
//! [`HealthState`], which routing, `/status` and `/metrics` read.
//!
//! The crate's own `HttpHealthCheck` sends one fixed request to one fixed address, so it cannot
//! carry a Vertex AI token that is refreshed every hour, nor follow a provider host name to a
//! new address. The probe therefore builds each request as a proxied request is built: the
//! address from the provider's cached resolution, TLS with sturnus's trust roots and the
//! host's SNI, the provider's `Host` and current auth headers.

use super::{PeerSettings, Provider};
use crate::config::HealthCheckConfig;
use async_trait::async_trait;
use pingora::http::RequestHeader;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use pingora_core::connectors::http::Connector;
use pingora_core::{Error, ErrorType, Result};
use pingora_load_balancing::discovery;
use pingora_load_balancing::health_check::HealthCheck;
use pingora_load_balancing::{Backend, Backends, HealthCheckService, HealthRegistry};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// Most bytes of a health answer's body that are read (the status decides; the rest is dropped
/// with the connection).
const MAX_BODY_READ: usize = 64 * 1024;

/// The `User-Agent` of the checks, so a provider's logs tell them from client traffic.
const USER_AGENT: &str = concat!("sturnus-health-check/", env!("CARGO_PKG_VERSION"));

/// How many providers of this process are marked unhealthy: while none is, a pick need not
/// read every candidate's flag.
static UNHEALTHY: AtomicUsize = AtomicUsize::new(0);

/// True while some provider of this process is marked unhealthy ([`HealthState`]).
#[inline]
pub fn any_unhealthy() -> bool {
    UNHEALTHY.load(Relaxed) != 0
}

/// Whether a provider may take traffic, as its active health check last decided. A provider
/// without a check is always healthy; one with a check starts healthy until the check says
/// otherwise.
#[derive(Debug)]
pub struct HealthState {
    check: Option<HealthCheckConfig>,
    healthy: AtomicBool,
}

impl HealthState {
    /// The state of a provider with this check setting (`None`: not checked).
    pub fn new(check: Option<HealthCheckConfig>) -> Self {
        HealthState {
            check,
            healthy: AtomicBool::new(true),
        }
    }

    /// The provider's check setting, if it has one.
    pub fn check(&self) -> Option<&HealthCheckConfig> {
        self.check.as_ref()
    }

    /// False only while the provider's check has it marked unhealthy.
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Relaxed)
    }

    /// Records the check's verdict; true when it changed.
    pub fn set_healthy(&self, healthy: bool) -> bool {
        let changed = self.healthy.swap(healthy, Relaxed) != healthy;
        if changed && healthy {
            UNHEALTHY.fetch_sub(1, Relaxed);
        } else if changed {
            UNHEALTHY.fetch_add(1, Relaxed);
        }
        changed
    }
}

impl Drop for HealthState {
    /// A provider that goes while unhealthy no longer counts.
    fn drop(&mut self) {
        if !self.is_healthy() {
            UNHEALTHY.fetch_sub(1, Relaxed);
        }
    }
}

/// The health check of one provider, in the form `pingora-load-balancing` runs: a GET of the
/// configured path that passes on a 2xx answer within the check interval.
pub struct ProviderProbe {
    provider: Arc<Provider>,
    check: HealthCheckConfig,
    settings: PeerSettings,
    connector: Connector,
}

impl ProviderProbe {
    /// The probe of a provider that has a check configured; `None` otherwise. Each check gets
    /// the interval to connect (at most `connect_timeout_secs`) and to answer.
    pub fn new(provider: Arc<Provider>, settings: &PeerSettings) -> Option<ProviderProbe> {
        let check = provider.health.check()?.clone();
        let settings = PeerSettings {
            connect_timeout: settings.connect_timeout.min(check.interval),
            read_timeout: check.interval,
            roots: settings.roots.clone(),
        };
        Some(ProviderProbe {
            provider,
            check,
            settings,
            // Its own connector: a check never borrows a kept-alive connection from client
            // traffic, so every check opens a connection (TCP, and TLS) as a new request would.
            connector: Connector::new(None),
        })
    }

    /// The request a check sends: `GET path` with the provider's `Host` and auth.
    async fn request(&self) -> Result<RequestHeader> {
        let provider = &self.provider;
        if let Err(why) = provider.credential_ready().await {
            return Error::e_explain(ErrorType::Custom("credential unavailable"), why.to_string());
        }
        let (mut parts, ()) = http::Request::get(self.check.path.as_str())
            .version(http::Version::HTTP_11)
            .body(())
            .or_else(|_| Error::e_explain(ErrorType::InternalError, "invalid health check path"))?
            .into_parts();
        let headers = &mut parts.headers;
        headers.insert(http::header::HOST, provider.host_value().clone());
        headers.insert(
            http::header::USER_AGENT,
            http::HeaderValue::from_static(USER_AGENT),
        );
        if let Err(why) = provider.authorize(headers) {
            return Error::e_explain(ErrorType::Custom("credential unavailable"), why.to_string());
        }
        Ok(RequestHeader::from(parts))
    }

    /// One check, without the overall time bound.
    async fn probe(&self) -> Result<()> {
        let request = self.request().await?;
        let peer = match self.provider.peer(&self.settings).await {
            Ok(peer) => peer,
            Err(why) => return Error::e_explain(ErrorType::ConnectNoRoute, why.to_string()),
        };
        let (mut session, _) = self.connector.get_http_session(&peer).await?;
        session.set_write_timeout(Some(self.settings.read_timeout));
        session.set_read_timeout(Some(self.settings.read_timeout));
        session.write_request_header(Box::new(request)).await?;
        session.finish_request_body().await?;
        session.read_response_header().await?;
        let status = session.response_header().map_or(0, |h| h.status.as_u16());
        if !(200..300).contains(&status) {
            return Error::e_explain(
                ErrorType::CustomCode("health check answer", status),
                format!("GET {} answered {status}", self.check.path),
            );
        }
        let mut read = 0;
        while read < MAX_BODY_READ {
            match session.read_response_body().await? {
                Some(chunk) => read += chunk.len(),
                None => break,
            }
        }
        Ok(())
    }
}

#[async_trait]
impl HealthCheck for ProviderProbe {
    async fn check(&self, _target: &Backend) -> Result<()> {
        match tokio::time::timeout(self.check.interval, self.probe()).await {
            Ok(result) => result,
            Err(_) => Error::e_explain(
                ErrorType::ReadTimedout,
                format!("no answer within {:?}", self.check.interval),
            ),
        }
    }

    async fn health_status_change(&self, _target: &Backend, healthy: bool) {
        let p = &self.provider;
        if !p.health.set_healthy(healthy) {
            return;
        }
        let path = &self.check.path;
        if healthy {
            log::info!(
                "provider {} passes its health check (GET {path}) again: back in rotation",
                p.name
            );
        } else {
            log::warn!(
                "provider {} failed its health check (GET {path}) {} time(s) in a row: its \
                 candidates get no traffic until it passes",
                p.name,
                self.check.unhealthy_after
            );
        }
    }

    fn backend_summary(&self, _target: &Backend) -> String {
        format!(
            "provider {} (health check GET {})",
            self.provider.name, self.check.path
        )
    }

    fn health_threshold(&self, success: bool) -> usize {
        let n = if success {
            self.check.healthy_after
        } else {
            self.check.unhealthy_after
        };
        n as usize
    }
}

/// One provider's checking: the crate's service over the provider's registry, and the view
/// that registers the provider as the registry's target.
struct ProviderChecks {
    provider: Arc<Provider>,
    service: HealthCheckService,
    target: Backends,
}

impl ProviderChecks {
    fn new(probe: ProviderProbe) -> ProviderChecks {
        let interval = probe.check.interval;
        let provider = probe.provider.clone();
        let registry = Arc::new(HealthRegistry::new());
        registry.set_health_check(Box::new(probe));
        // The registry needs one target to check. The probe stands for the provider and
        // resolves the provider's host itself (as requests do), so the target's address is
        // only a key.
        let placeholder = Backend::new("0.0.0.0:0").expect("a literal socket address");
        let target = Backends::new_with_health_registry(
            discovery::Static::new(BTreeSet::from([placeholder])),
            registry.clone(),
        );
        let mut service = HealthCheckService::new(registry);
        service.health_check_frequency = Some(interval);
        ProviderChecks {
            provider,
            service,
            target,
        }
    }

    /// Registers the target, then checks it every interval until shutdown.
    async fn run(&self, shutdown: ShutdownWatch) {
        if let Some(check) = self.provider.health.check() {
            log::info!(
                "provider {}: health check GET {} every {:?} (out after {} failure(s) in a row, \
                 back after {} pass(es))",
                self.provider.name,
                check.path,
                check.interval,
                check.unhealthy_after,
                check.healthy_after
            );
        }
        if let Err(e) = self.target.update(|_| {}).await {
            log::error!("health check target not registered: {e}");
            return;
        }
        self.service.start(shutdown).await;
    }
}

/// The Pingora background service running the health checks of every provider that has one.
pub struct HealthChecks {
    providers: Vec<Arc<ProviderChecks>>,
}

impl HealthChecks {
    /// The checks of the providers that configure one, or `None` when none does.
    pub fn for_providers(providers: &[Arc<Provider>], settings: &PeerSettings) -> Option<Self> {
        let providers: Vec<Arc<ProviderChecks>> = providers
            .iter()
            .filter_map(|p| ProviderProbe::new(p.clone(), settings))
            .map(|probe| Arc::new(ProviderChecks::new(probe)))
            .collect();
        (!providers.is_empty()).then_some(HealthChecks { providers })
    }
}

#[async_trait]
impl BackgroundService for HealthChecks {
    async fn start(&self, shutdown: ShutdownWatch) {
        let mut tasks = tokio::task::JoinSet::new();
        for checks in &self.providers {
            let (checks, shutdown) = (checks.clone(), shutdown.clone());
            tasks.spawn(async move { checks.run(shutdown).await });
        }
        while tasks.join_next().await.is_some() {}
    }
}

#[cfg(all(test, feature = "tooling"))]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::fake_provider::{FakeProvider, Fault};
    use std::time::{Duration, Instant};

    /// A provider named `p` in front of `sim`, with an API key and `health_check = {check}`.
    fn provider(sim: &FakeProvider, check: &str) -> Arc<Provider> {
        let text = format!(
            "[provider.p]\nbase_url = \"{}/v1\"\napi_key = \"sk-health\"\nhealth_check = {check}\n\
             [model]\nm = [{{ provider = \"p\", model = \"x\" }}]\n",
            sim.base_url()
        );
        let config = Config::parse(&text, &|_| None).unwrap();
        Arc::new(Provider::from_config(&config.providers[0]).unwrap())
    }

    fn settings() -> PeerSettings {
        PeerSettings {
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(60),
            roots: crate::providers::tls::build(None).unwrap(),
        }
    }

    fn target() -> Backend {
        Backend::new("0.0.0.0:0").unwrap()
    }

    #[test]
    fn a_provider_marked_unhealthy_is_counted_until_it_passes_or_goes() {
        let a = HealthState::new(None);
        assert!(a.set_healthy(false));
        assert!(
            any_unhealthy(),
            "its flag is not skipped while it is unhealthy"
        );
        assert!(!a.set_healthy(false), "a verdict that changes nothing");
        assert!(any_unhealthy());
        let b = HealthState::new(None);
        assert!(b.set_healthy(false));
        drop(b);
        assert!(any_unhealthy(), "dropping another leaves this one counted");
        assert!(a.set_healthy(true));
        assert!(a.is_healthy());
    }

    #[tokio::test]
    async fn a_check_is_a_get_with_the_providers_host_and_auth_that_passes_on_2xx() {
        let sim = FakeProvider::start("hc").await.unwrap();
        let p = provider(&sim, "{ path = \"/health?deep=1\", interval_secs = 0.5 }");
        let probe = ProviderProbe::new(p, &settings()).unwrap();
        probe.check(&target()).await.unwrap();
        let sent = sim.requests().pop().unwrap();
        assert_eq!(
            (sent.method.as_str(), sent.path.as_str()),
            ("GET", "/health")
        );
        assert_eq!(sent.query.as_deref(), Some("deep=1"));
        assert_eq!(sent.header("authorization"), Some("Bearer sk-health"));
        assert_eq!(sent.header("host"), Some(sim.addr.to_string().as_str()));
        assert_eq!(sent.header("user-agent"), Some(USER_AGENT));

        sim.behaviour.set_health_status(503);
        let err = probe.check(&target()).await.unwrap_err();
        assert!(err.to_string().contains("answered 503"), "{err}");
        sim.behaviour.set_health_status(204);
        probe.check(&target()).await.unwrap();

        sim.behaviour.set_fault(Fault::RefuseConnections);
        assert!(probe.check(&target()).await.is_err());
        // A provider that never answers fails within the interval.
        sim.behaviour.set_fault(Fault::NeverAnswer);
        let started = Instant::now();
        assert!(probe.check(&target()).await.is_err());
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        sim.shutdown();
        assert!(probe.check(&target()).await.is_err());
    }

    #[tokio::test]
    async fn the_crate_flips_the_provider_after_consecutive_results_only() {
        let sim = FakeProvider::start("hc").await.unwrap();
        let p = provider(
            &sim,
            "{ path = \"/health\", unhealthy_after = 2, healthy_after = 2 }",
        );
        let checks = HealthChecks::for_providers(std::slice::from_ref(&p), &settings()).unwrap();
        let one = &checks.providers[0];
        one.target.update(|_| {}).await.unwrap();
        let pass = || one.target.run_health_check(false);

        pass().await;
        assert!(p.health.is_healthy());
        sim.behaviour.set_health_status(500);
        pass().await;
        assert!(p.health.is_healthy(), "one failure is not enough");
        sim.behaviour.set_health_status(200);
        pass().await;
        sim.behaviour.set_health_status(500);
        pass().await;
        assert!(p.health.is_healthy(), "the failures were not consecutive");
        pass().await;
        assert!(!p.health.is_healthy(), "two failures in a row");
        sim.behaviour.set_health_status(200);
        pass().await;
        assert!(!p.health.is_healthy(), "one pass is not enough");
        pass().await;
        assert!(p.health.is_healthy(), "two passes in a row");
    }

    #[tokio::test]
    async fn the_background_service_checks_every_interval_until_shutdown() {
        let sim = FakeProvider::start("hc").await.unwrap();
        let p = provider(
            &sim,
            "{ path = \"/health\", interval_secs = 0.05, unhealthy_after = 1 }",
        );
        let unchecked = {
            let text = "[provider.q]\nbase_url = \"http://127.0.0.1:9/v1\"\n";
            let config = Config::parse(
                &format!("{text}[model]\nm = [{{ provider = \"q\", model = \"x\" }}]\n"),
                &|_| None,
            )
            .unwrap();
            Arc::new(Provider::from_config(&config.providers[0]).unwrap())
        };
        assert!(
            HealthChecks::for_providers(std::slice::from_ref(&unchecked), &settings()).is_none()
        );
        let checks =
            Arc::new(HealthChecks::for_providers(&[unchecked, p.clone()], &settings()).unwrap());
        assert_eq!(checks.providers.len(), 1);
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        let running = tokio::spawn({
            let checks = checks.clone();
            async move { checks.start(shutdown).await }
        });
        let wait_for = |healthy: bool| {
            let p = p.clone();
            async move {
                let deadline = Instant::now() + Duration::from_secs(5);
                while p.health.is_healthy() != healthy {
                    assert!(Instant::now() < deadline, "never became healthy={healthy}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        };
        sim.behaviour.set_health_status(503);
        wait_for(false).await;
        sim.behaviour.set_health_status(200);
        wait_for(true).await;
        let checked = sim.request_count();
        assert!(checked >= 2, "{checked}");
        stop.send_replace(true);
        tokio::time::timeout(Duration::from_secs(2), running)
            .await
            .expect("stops at shutdown")
            .unwrap();
    }
}
