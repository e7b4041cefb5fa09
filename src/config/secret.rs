//! A string that must never be printed: API keys and similar credentials.

use std::fmt;

/// An API key or other credential; `Debug` and `Display` print `***` so it cannot leak into logs.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a credential so that it is masked whenever it is formatted.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// Returns the real value, for the one place that needs it (building the upstream request).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_are_masked() {
        let s = Secret::new("sk-very-secret");
        assert_eq!(format!("{s:?}"), "***");
        assert_eq!(format!("{s}"), "***");
        assert_eq!(format!("{:?}", Some(s.clone())), "Some(***)");
        assert_eq!(s.expose(), "sk-very-secret");
    }
}
