//! sturnus configuration: the only place that parses TOML.
//!
//! [`Config::parse`] reads TOML text, expands `${VAR}` / `${VAR:-default}` inside string values
//! only (never keys or comments; `$$` is a literal `$`; full rules in `expand.rs`), validates
//! everything, and returns either an immutable [`Config`] or a [`ConfigError`] listing every
//! problem, one line each, prefixed with its key path. [`load_env_file`] implements `--env-file`. API keys are held in [`Secret`] so
//! they never show up in `Debug`, `Display`, [`Config::describe`] or error messages.

mod alias;
mod auth;
mod base_url;
mod describe;
mod env_file;
mod error;
mod expand;
mod health_check;
mod listen_tls;
mod parse;
mod provider;
mod reader;
mod routing;
mod schema;
mod secret;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

pub use auth::{AuthConfig, ClientLimits, JwtConfig, JwtKeySource, StaticKey};
pub use base_url::{BaseUrl, UrlError};
pub use env_file::{load_env_file, parse_env_file, BadLines, EnvFileError, LineError};
pub use error::ConfigError;
pub use listen_tls::ListenTls;
pub use schema::{
    AliasConfig, CandidateConfig, Config, HealthCheckConfig, ProviderConfig, ProviderKind,
    RoutingConfig,
};
pub use secret::Secret;

use std::net::SocketAddr;
use std::path::Path;

impl Config {
    /// Parses and validates config text; `${VAR}` references are resolved with `env`.
    pub fn parse(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        parse::parse(text, env, None)
    }

    /// Reads the config file at `path` and parses it against the real process environment.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::load_with_listen(path, None)
    }

    /// As [`Config::load`], with `listen` (from `--listen` / `STURNUS_LISTEN`) replacing the
    /// file's `listen` when given; `metrics_listen` is checked against the address used.
    pub fn load_with_listen(
        path: &Path,
        listen: Option<SocketAddr>,
    ) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::single(format_args!("cannot read {}: {e}", path.display()))
        })?;
        parse::parse(&text, &|name| std::env::var(name).ok(), listen)
    }

    /// Looks a provider up by name.
    pub fn provider(&self, name: &str) -> Option<&ProviderConfig> {
        self.providers.iter().find(|p| p.name == name)
    }

    /// Looks a model alias up by name.
    pub fn alias(&self, name: &str) -> Option<&AliasConfig> {
        self.aliases.iter().find(|a| a.name == name)
    }

    /// Human summary for `sturnus check`; shows whether API keys are set, never their value.
    pub fn describe(&self) -> String {
        describe::describe(self)
    }
}
