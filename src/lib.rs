//! sturnus: a small, fast, auditable LLM routing sidecar built on Pingora.
//!
//! Clients ask for a model alias; sturnus sends each request to whichever interchangeable
//! (provider, model) candidate is fastest and healthy right now, rewriting only the `model`
//! value of the body. See `README.md` for the product and `docs/` for depth.
//!
//! Public are the modules the binary, the tests, the benchmarks and the fuzz targets use, and
//! those the public modules' documentation refers to; the rest are crate-private.

pub(crate) mod admin;
pub(crate) mod api;
pub(crate) mod app;
pub mod auth;
pub mod body;
pub(crate) mod budget;
pub mod catalog;
pub mod cli;
pub(crate) mod clock;
pub mod config;
pub(crate) mod container;
#[cfg(feature = "tooling")]
pub(crate) mod demo;
#[cfg(feature = "tooling")]
pub mod fake_provider;
pub(crate) mod healthcheck;
pub(crate) mod lifecycle;
pub(crate) mod metrics_listener;
pub mod observe;
pub(crate) mod providers;
pub mod proxy;
#[cfg(test)]
mod readme_tables;
pub mod routing;
pub mod server;
#[cfg(feature = "tooling")]
pub mod simulate;
