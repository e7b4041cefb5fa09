//! The error returned when a config cannot be loaded: every problem found, one line each.

use std::fmt;

/// All problems found in a config file; each one is a single line starting with its key path
/// (e.g. `routing.ewma_alpha: ...`) or with `config:` for file-level problems such as TOML syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// One human-readable line per problem, in the order they were found.
    pub problems: Vec<String>,
}

impl ConfigError {
    /// Builds an error holding a single file-level problem (prefixed with `config: `).
    pub fn single(message: impl fmt::Display) -> ConfigError {
        ConfigError {
            problems: vec![one_line(&format!("config: {message}"))],
        }
    }
}

/// Collapses line breaks so that every problem stays on exactly one line.
pub(crate) fn one_line(s: &str) -> String {
    s.split(['\n', '\r'])
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            f.write_str(problem)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_prints_one_problem_per_line() {
        let e = ConfigError {
            problems: vec!["a: one".into(), "b: two".into()],
        };
        assert_eq!(e.to_string(), "a: one\nb: two");
    }

    #[test]
    fn single_is_prefixed_and_flattened() {
        let e = ConfigError::single("bad\nthing\r\n here");
        assert_eq!(e.problems, vec!["config: bad; thing; here".to_string()]);
    }
}
