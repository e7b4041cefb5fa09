//! The black-box tests, as one test binary: each module starts the real sturnus binary on
//! loopback (or runs its subcommands) against fake providers. One binary links Pingora
//! once; run one module with `cargo test --test integration -- passthrough::`.

mod common;

mod arm64;
mod auth;
mod cli;
mod client_closed;
mod connections;
mod docs;
mod edge_tls;
mod errors;
mod faults;
mod health_checks;
mod healthcheck;
mod hostile;
mod idle_clients;
mod kubernetes;
mod load;
mod observability;
mod overhead;
mod passthrough;
mod prefix;
mod providers;
mod quota;
mod responses;
mod routing;
mod shutdown;
mod simulate;
mod static_binary;
mod tls;
mod upgrade;
mod vertex;
