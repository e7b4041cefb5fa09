//! `${VAR}` / `${VAR:-default}` expansion inside config string values.
//!
//! Expansion runs on string values only, after TOML parsing, so an environment variable can never
//! inject TOML, and keys and comments are never expanded. Rules:
//! - `${NAME}`: the variable's value (an empty value stays empty); unset is an error.
//! - `${NAME:-default}`: the value, or the literal `default` when unset or empty.
//! - `$$`: a literal `$` (escape, as in Docker Compose), so `$${X}` gives the text `${X}`.
//! - `$` followed by anything other than `{` or `$` stays literal.
//! - NAME is `[A-Za-z_][A-Za-z0-9_]*`; defaults are literal text (no nested `${`); values are
//!   not expanded again.
//!
//! Error messages never contain the string being expanded (it may hold a secret), only the name.

/// Why a `${...}` reference cannot be expanded; names the variable, never the text around it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ExpandError {
    /// `${` without its `}`.
    #[error("unterminated \"${{\" (missing \"}}\"; write $$ for a literal $)")]
    Unterminated,
    /// `${...}` whose inside is not `NAME` or `NAME:-default`.
    #[error(
        "invalid environment variable reference: use ${{NAME}} or ${{NAME:-default}}, NAME made of letters, digits and _"
    )]
    InvalidReference,
    /// A default that holds another `${`.
    #[error("nested \"${{\" in the default of ${{{name}:-...}} is not supported")]
    NestedDefault {
        /// The variable whose default is nested.
        name: String,
    },
    /// `${NAME}` with NAME unset and no default.
    #[error("environment variable {name} is not set")]
    Unset {
        /// The unset variable.
        name: String,
    },
}

/// Expands `${...}` references in `input` using `lookup`; the error says what is wrong, naming
/// the variable where there is one.
pub(crate) fn expand(
    input: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(r) = after.strip_prefix('$') {
            out.push('$');
            rest = r;
        } else if let Some(r) = after.strip_prefix('{') {
            let end = r.find('}').ok_or(ExpandError::Unterminated)?;
            out.push_str(&reference(&r[..end], lookup)?);
            rest = &r[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Resolves the inside of one `${...}`.
fn reference(inner: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, ExpandError> {
    let (name, default) = match inner.find(":-") {
        Some(j) => (&inner[..j], Some(&inner[j + 2..])),
        None => (inner, None),
    };
    if !is_var_name(name) {
        return Err(ExpandError::InvalidReference);
    }
    if default.is_some_and(|d| d.contains("${")) {
        return Err(ExpandError::NestedDefault {
            name: name.to_string(),
        });
    }
    match (lookup(name), default) {
        (Some(v), Some(d)) if v.is_empty() => Ok(d.to_string()),
        (Some(v), _) => Ok(v),
        (None, Some(d)) => Ok(d.to_string()),
        (None, None) => Err(ExpandError::Unset {
            name: name.to_string(),
        }),
    }
}

/// Tells whether `name` is a portable environment variable name.
pub(crate) fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "KEY" => Some("sk-123".into()),
            "EMPTY" => Some(String::new()),
            "TRICKY" => Some("${KEY}\"\nx = 1".into()),
            _ => None,
        }
    }

    fn ex(s: &str) -> Result<String, ExpandError> {
        expand(s, &env)
    }

    #[test]
    fn plain_text_is_unchanged() {
        assert_eq!(ex("hello world").unwrap(), "hello world");
        assert_eq!(ex("").unwrap(), "");
    }

    #[test]
    fn expands_set_variables() {
        assert_eq!(ex("${KEY}").unwrap(), "sk-123");
        assert_eq!(ex("Bearer ${KEY}!").unwrap(), "Bearer sk-123!");
        assert_eq!(ex("${KEY}${KEY}").unwrap(), "sk-123sk-123");
    }

    #[test]
    fn defaults_apply_when_unset_or_empty() {
        assert_eq!(ex("${NOPE:-fallback}").unwrap(), "fallback");
        assert_eq!(ex("${EMPTY:-fallback}").unwrap(), "fallback");
        assert_eq!(ex("${KEY:-fallback}").unwrap(), "sk-123");
        assert_eq!(ex("${NOPE:-}").unwrap(), "");
        assert_eq!(ex("${NOPE:-a:b-c}").unwrap(), "a:b-c");
    }

    #[test]
    fn set_but_empty_without_default_is_empty() {
        assert_eq!(ex("${EMPTY}").unwrap(), "");
    }

    #[test]
    fn unset_without_default_names_the_variable() {
        assert_eq!(
            ex("x${NOPE}y").unwrap_err().to_string(),
            "environment variable NOPE is not set"
        );
    }

    #[test]
    fn dollar_rules() {
        assert_eq!(ex("$$").unwrap(), "$");
        assert_eq!(ex("$${KEY}").unwrap(), "${KEY}");
        assert_eq!(ex("a$b").unwrap(), "a$b");
        assert_eq!(ex("cost: 5$").unwrap(), "cost: 5$");
        assert_eq!(ex("$").unwrap(), "$");
        assert_eq!(ex("$$$").unwrap(), "$$");
    }

    #[test]
    fn unterminated_is_an_error() {
        assert_eq!(
            ex("${KEY").unwrap_err().to_string(),
            "unterminated \"${\" (missing \"}\"; write $$ for a literal $)"
        );
        assert_eq!(ex("abc ${").unwrap_err(), ExpandError::Unterminated);
    }

    #[test]
    fn invalid_names_are_errors_without_echoing_the_value() {
        for bad in ["${}", "${1A}", "${A B}", "${A:?x}", "${:-x}", "${A-b}"] {
            let e = ex(bad).unwrap_err().to_string();
            assert!(
                e.contains("invalid environment variable reference"),
                "{bad}: {e}"
            );
        }
        let e = ex("sk-secret ${bad name}").unwrap_err().to_string();
        assert!(!e.contains("sk-secret"));
    }

    #[test]
    fn nested_default_is_rejected() {
        assert_eq!(
            ex("${NOPE:-${KEY}}").unwrap_err().to_string(),
            "nested \"${\" in the default of ${NOPE:-...} is not supported"
        );
    }

    #[test]
    fn values_are_not_expanded_again() {
        assert_eq!(ex("${TRICKY}").unwrap(), "${KEY}\"\nx = 1");
    }

    #[test]
    fn var_names() {
        assert!(is_var_name("A"));
        assert!(is_var_name("_a1"));
        assert!(!is_var_name(""));
        assert!(!is_var_name("1a"));
        assert!(!is_var_name("a-b"));
    }
}
