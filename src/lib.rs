//! sturnus: a small, fast, auditable LLM routing sidecar built on Pingora.
//!
//! Clients ask for a model alias; sturnus sends each request to whichever interchangeable
//! (provider, model) candidate is fastest and healthy right now, rewriting only the `model`
//! value of the body. See `README.md` for the product and `docs/` for depth.

pub mod admin;
pub mod api;
pub mod app;
pub mod body;
pub mod budget;
pub mod catalog;
pub mod cli;
pub mod clock;
pub mod config;
pub mod container;
#[cfg(feature = "tooling")]
pub mod demo;
pub mod healthcheck;
pub mod lifecycle;
pub mod metrics_listener;
pub mod observe;
pub mod providers;
pub mod proxy;
pub mod routing;
pub mod server;
#[cfg(feature = "tooling")]
pub mod simulate;
#[cfg(feature = "tooling")]
pub mod simulated;
