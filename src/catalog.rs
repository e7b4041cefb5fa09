//! The routing table: aliases → candidates, each bound to its provider and live statistics.
//!
//! Built once from config. A candidate (provider, model) appears once however many aliases list
//! it, so its statistics are shared by all of them.

use crate::body::holder_tag::HolderTag;
use crate::config::Config;
use crate::providers::{health, Provider, ProviderError};
use crate::routing::{self, affinity, CandidateStats, Choice, Mode, RoutingParams};
use http::HeaderValue;
use std::collections::HashMap;
use std::sync::Arc;

/// One (provider, model) pair traffic can go to.
#[derive(Debug)]
pub struct Candidate {
    /// The provider serving this candidate.
    pub provider: Arc<Provider>,
    /// The provider-side model name spliced into the request body.
    pub model: String,
    /// Live latency/success statistics, shared by every alias listing this candidate.
    pub stats: Arc<CandidateStats>,
    /// The `x-session-affinity` value naming this candidate: `provider/model`.
    pub affinity: String,
    /// [`Candidate::affinity`] and the provider's name as response header values, built once
    /// so each response clones them instead of validating and copying (`None`: not a valid
    /// header value, so the header is left out).
    pub header_values: (Option<HeaderValue>, Option<HeaderValue>),
    /// The candidate's rendezvous identity, from [`Candidate::affinity`]: the same on every
    /// sidecar, so a conversation key picks the same candidate everywhere.
    pub identity: u64,
    /// The tag the Responses API objects it issues carry in their ids, from its provider name
    /// and model: the same on every sidecar with the same config.
    pub holder: HolderTag,
}

impl Candidate {
    /// Whether it may take traffic: false while its provider fails its active health check.
    pub fn is_available(&self) -> bool {
        self.provider.health.is_healthy()
    }

    /// Its state on `/status`: `unhealthy` while unavailable, else cold, warm or degraded.
    pub fn state(&self, params: &RoutingParams, now_us: u64) -> &'static str {
        if self.is_available() {
            self.stats.health(params, now_us).as_str()
        } else {
            "unhealthy"
        }
    }
}

/// One alias with its candidates in config order.
#[derive(Debug)]
pub struct Alias {
    /// The name clients put in `"model"`.
    pub name: String,
    /// Candidates in config order.
    pub candidates: Vec<Arc<Candidate>>,
    /// The same candidates' statistics, in the same order (what the selector reads).
    stats: Vec<Arc<CandidateStats>>,
    /// The same candidates' rendezvous identities, in the same order.
    identities: Vec<u64>,
    /// The shares the alias's conversation keys are picked over, smoothed across its keyed
    /// picks, in the same order.
    smoothed: Vec<routing::SmoothedShare>,
    /// The share of its keyed answers its providers' prompt caches served, which sets how
    /// sharply its keyed picks exploit (shared with the requests it routes by key).
    pub keyed_hits: Arc<routing::KeyedHits>,
}

impl Alias {
    /// Picks the candidate for one request: the affinity pin when it names a healthy candidate
    /// of this alias, otherwise a latency-weighted draw; among the available candidates only,
    /// unless none is available.
    pub fn choose(&self, mode: Mode, pin: Option<&str>, params: &RoutingParams) -> Choice {
        self.choose_keyed(mode, pin, None, params)
    }

    /// As [`Alias::choose`], for a request that may carry a conversation key: with a key and
    /// no honoured pin, the candidate is the key's weighted rendezvous pick over the shares.
    pub fn choose_keyed(
        &self,
        mode: Mode,
        pin: Option<&str>,
        conversation: Option<u64>,
        params: &RoutingParams,
    ) -> Choice {
        let pinned = pin.and_then(|value| {
            affinity::position(
                value,
                self.candidates
                    .iter()
                    .map(|c| (c.provider.name.as_str(), c.model.as_str())),
            )
        });
        // While no provider is unhealthy, every candidate is available without reading its flag.
        let checked = health::any_unhealthy();
        let available = |i: usize| !checked || self.candidates[i].is_available();
        let keyed = conversation.map(|key| routing::Keyed {
            key,
            identities: &self.identities,
            smoothed: &self.smoothed,
            exploit: self.keyed_hits.exploit(mode, &params.rule.keyed),
        });
        routing::choose_available_keyed(
            &self.stats,
            available,
            mode,
            pinned,
            keyed,
            params,
            &mut routing::ThreadRng,
        )
        .unwrap_or(Choice {
            index: 0,
            pinned_honoured: false,
            drawn: Default::default(),
        })
    }

    /// Current raw routing weights of the candidates for one mode (for `/status`).
    pub fn weights(&self, mode: Mode, params: &RoutingParams) -> Vec<f64> {
        routing::weights_available(
            &self.stats,
            |i| self.candidates[i].is_available(),
            mode,
            params,
        )
    }

    /// The shares a new conversation's key is picked over for one mode, before the smoothing
    /// across keyed picks (for `/status`): the current shares, with the exponent the alias's
    /// keyed hit rate sets ([`routing::KeyedHits::exploit`]).
    pub fn keyed_shares(&self, mode: Mode, params: &RoutingParams) -> Vec<f64> {
        self.shares(
            mode,
            &params.with_exploit_factor(self.keyed_hits.exploit(mode, &params.rule.keyed)),
        )
    }

    /// Current traffic shares of the candidates for one mode (for `/status` and metrics).
    pub fn shares(&self, mode: Mode, params: &RoutingParams) -> Vec<f64> {
        routing::shares_available(
            &self.stats,
            |i| self.candidates[i].is_available(),
            mode,
            params,
        )
    }
}

/// All aliases, candidates and providers of a running configuration.
#[derive(Debug)]
pub struct Catalog {
    /// Aliases in config order.
    pub aliases: Vec<Alias>,
    /// Every distinct candidate, in order of first appearance.
    pub candidates: Vec<Arc<Candidate>>,
    /// Every provider, in config order.
    pub providers: Vec<Arc<Provider>>,
    /// Routing parameters from `[routing]`.
    pub params: RoutingParams,
    by_name: HashMap<String, usize>,
}

/// Why the routing table cannot be built from a config.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// A provider cannot be built.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// A candidate names a provider that is not configured.
    #[error("unknown provider {0}")]
    UnknownProvider(String),
}

impl Catalog {
    /// Builds the table from a validated config.
    pub fn build(config: &Config) -> Result<Catalog, CatalogError> {
        let providers = crate::providers::build_all(&config.providers)?;
        let mut candidates: Vec<Arc<Candidate>> = Vec::new();
        let mut aliases = Vec::with_capacity(config.aliases.len());
        for alias in &config.aliases {
            let mut members = Vec::with_capacity(alias.candidates.len());
            for c in &alias.candidates {
                let existing = candidates
                    .iter()
                    .find(|k| k.provider.name == c.provider && k.model == c.model);
                let candidate = match existing {
                    Some(k) => k.clone(),
                    None => {
                        let provider = providers
                            .iter()
                            .find(|p| p.name == c.provider)
                            .ok_or_else(|| CatalogError::UnknownProvider(c.provider.clone()))?
                            .clone();
                        let affinity = affinity::format(&provider.name, &c.model);
                        let header_values = (
                            HeaderValue::from_str(&affinity).ok(),
                            HeaderValue::from_str(&provider.name).ok(),
                        );
                        let k = Arc::new(Candidate {
                            holder: HolderTag::of(&provider.name, &c.model),
                            identity: routing::rendezvous::identity(&affinity),
                            affinity,
                            header_values,
                            provider,
                            model: c.model.clone(),
                            stats: Arc::new(CandidateStats::new()),
                        });
                        candidates.push(k.clone());
                        k
                    }
                };
                members.push(candidate);
            }
            aliases.push(Alias {
                name: alias.name.clone(),
                stats: members.iter().map(|c| c.stats.clone()).collect(),
                identities: members.iter().map(|c| c.identity).collect(),
                smoothed: members.iter().map(|_| Default::default()).collect(),
                keyed_hits: Arc::default(),
                candidates: members,
            });
        }
        let by_name = aliases
            .iter()
            .enumerate()
            .map(|(i, a)| (a.name.clone(), i))
            .collect();
        let r = &config.routing;
        Ok(Catalog {
            aliases,
            candidates,
            providers,
            params: RoutingParams {
                ewma_alpha: r.ewma_alpha,
                exploit_k: r.exploit_k,
                probe_floor: r.probe_floor,
                error_threshold: r.error_threshold,
                rule: r.rule,
            },
            by_name,
        })
    }

    /// The alias a client asked for, if configured.
    pub fn alias(&self, name: &str) -> Option<&Alias> {
        self.by_name.get(name).map(|&i| &self.aliases[i])
    }

    /// The first alias listing the candidate with tag `holder`, and its place there: where a
    /// request for an object that candidate holds is counted.
    pub fn holder(&self, holder: &HolderTag) -> Option<(&Alias, usize)> {
        self.aliases
            .iter()
            .find_map(|alias| Some((alias, alias.holder_position(holder)?)))
    }
}

impl Alias {
    /// The place among this alias's candidates of the one with tag `holder`.
    pub fn holder_position(&self, holder: &HolderTag) -> Option<usize> {
        self.candidates.iter().position(|c| &c.holder == holder)
    }
}
