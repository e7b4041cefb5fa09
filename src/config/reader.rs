//! Typed access to parsed TOML values that records problems (with key paths) instead of failing.

use super::error::one_line;
use super::expand::expand;
use std::fmt;
use toml::{Table, Value};

/// Appends `key` to a key path, quoting keys that are not bare TOML keys so that the path stays
/// one unambiguous line (`provider."my provider".api_key`).
pub(crate) fn join(parent: &str, key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    let key = if bare {
        key.to_string()
    } else {
        format!("{key:?}")
    };
    if parent.is_empty() {
        key
    } else {
        format!("{parent}.{key}")
    }
}

/// How a string value is quoted in a problem: as read when no `${...}` was expanded in it,
/// else as written in the file, since an expanded value may hold a secret from the environment.
pub(crate) fn quoted(raw: Option<&Value>, expanded: &str) -> String {
    match raw {
        Some(Value::String(written)) if written != expanded => format!("{written:?}"),
        _ => format!("{expanded:?}"),
    }
}

/// Appends an array index to a key path (`model.fast[1]`).
pub(crate) fn index(parent: &str, i: usize) -> String {
    format!("{parent}[{i}]")
}

/// Walks a parsed TOML document, expanding strings with `env` and collecting every problem.
pub(crate) struct Reader<'e> {
    env: &'e dyn Fn(&str) -> Option<String>,
    /// Problems found so far, one line each, prefixed with their key path.
    pub problems: Vec<String>,
}

impl<'e> Reader<'e> {
    /// Starts a walk that looks environment variables up with `env`.
    pub fn new(env: &'e dyn Fn(&str) -> Option<String>) -> Reader<'e> {
        Reader {
            env,
            problems: Vec::new(),
        }
    }

    /// Records a problem at `path`.
    pub fn problem(&mut self, path: &str, message: impl fmt::Display) {
        self.problems.push(one_line(&format!("{path}: {message}")));
    }

    /// Records a wrong-type problem.
    fn wrong_type(&mut self, path: &str, expected: &str, found: &Value) {
        self.problem(
            path,
            format_args!("expected {expected}, found {}", found.type_str()),
        );
    }

    /// Returns the table, or records that `path` should be one.
    pub fn table<'v>(&mut self, path: &str, value: &'v Value) -> Option<&'v Table> {
        match value {
            Value::Table(t) => Some(t),
            other => {
                self.wrong_type(path, "a table", other);
                None
            }
        }
    }

    /// Returns the string with `${...}` expanded, or records a type or expansion problem.
    pub fn string(&mut self, path: &str, value: &Value) -> Option<String> {
        match value {
            Value::String(s) => match expand(s, self.env) {
                Ok(v) => Some(v),
                Err(e) => {
                    self.problem(path, e);
                    None
                }
            },
            other => {
                self.wrong_type(path, "a string", other);
                None
            }
        }
    }

    /// Returns an integer or float as f64, or records a type problem.
    pub fn number(&mut self, path: &str, value: &Value) -> Option<f64> {
        match value {
            Value::Float(f) => Some(*f),
            Value::Integer(i) => Some(*i as f64),
            other => {
                self.wrong_type(path, "a number", other);
                None
            }
        }
    }

    /// Returns a boolean, or records a type problem.
    pub fn boolean(&mut self, path: &str, value: &Value) -> Option<bool> {
        match value {
            Value::Boolean(b) => Some(*b),
            other => {
                self.wrong_type(path, "a boolean", other);
                None
            }
        }
    }

    /// Returns an integer, or records a type problem.
    pub fn integer(&mut self, path: &str, value: &Value) -> Option<i64> {
        match value {
            Value::Integer(i) => Some(*i),
            other => {
                self.wrong_type(path, "an integer", other);
                None
            }
        }
    }

    /// Records every key of `table` not in `known`, with a "did you mean" hint when one is close.
    pub fn unknown_keys(&mut self, path: &str, table: &Table, known: &[&str]) {
        for key in table.keys() {
            if known.contains(&key.as_str()) {
                continue;
            }
            let key_path = join(path, key);
            match suggest(key, known.iter().copied()) {
                Some(s) => self.problem(&key_path, format_args!("unknown key (did you mean {s}?)")),
                None => self.problem(&key_path, "unknown key"),
            }
        }
    }
}

/// Returns the candidate closest to `word` when it is plausibly a typo of it.
pub(crate) fn suggest<'a>(
    word: &str,
    candidates: impl Iterator<Item = &'a str>,
) -> Option<&'a str> {
    if word.len() > 64 {
        return None;
    }
    candidates
        .filter(|c| c.len() <= 64)
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, c)| *d > 0 && *d <= (c.chars().count() / 3).max(2) && *d < c.chars().count())
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance between two short strings, counting a swap of neighbours as one edit.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let w = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * w];
    for (i, row) in d.chunks_mut(w).enumerate() {
        row[0] = i;
    }
    for (j, cell) in d.iter_mut().take(w).enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[(i - 1) * w + j] + 1)
                .min(d[i * w + j - 1] + 1)
                .min(d[(i - 1) * w + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[(i - 2) * w + j - 2] + 1);
            }
            d[i * w + j] = best;
        }
    }
    d[a.len() * w + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_quotes_non_bare_keys() {
        assert_eq!(join("", "listen"), "listen");
        assert_eq!(join("provider", "openai"), "provider.openai");
        assert_eq!(join("provider", "my.provider"), "provider.\"my.provider\"");
        assert_eq!(join("model", "a\nb"), "model.\"a\\nb\"");
        assert_eq!(join("model", ""), "model.\"\"");
        assert_eq!(index("model.fast", 1), "model.fast[1]");
    }

    #[test]
    fn distances() {
        assert_eq!(edit_distance("ewma_alpah", "ewma_alpha"), 1);
        assert_eq!(edit_distance("opnai", "openai"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn suggestions() {
        let keys = ["ewma_alpha", "exploit_k", "probe_floor"];
        assert_eq!(
            suggest("ewma_alpah", keys.iter().copied()),
            Some("ewma_alpha")
        );
        assert_eq!(
            suggest("probe_flor", keys.iter().copied()),
            Some("probe_floor")
        );
        assert_eq!(suggest("zzz", keys.iter().copied()), None);
        assert_eq!(suggest("ab", ["a"].iter().copied()), None);
    }

    #[test]
    fn reader_records_type_and_expansion_problems() {
        let env = |k: &str| (k == "SET").then(|| "v".to_string());
        let mut r = Reader::new(&env);
        assert_eq!(
            r.string("a", &Value::String("${SET}".into())),
            Some("v".into())
        );
        assert_eq!(r.string("b", &Value::Integer(1)), None);
        assert_eq!(r.string("c", &Value::String("${UNSET}".into())), None);
        assert_eq!(r.number("d", &Value::Integer(2)), Some(2.0));
        assert_eq!(r.number("e", &Value::Boolean(true)), None);
        assert_eq!(r.integer("f", &Value::Float(1.5)), None);
        assert!(r.table("g", &Value::Array(vec![])).is_none());
        assert_eq!(
            r.problems,
            vec![
                "b: expected a string, found integer",
                "c: environment variable UNSET is not set",
                "e: expected a number, found boolean",
                "f: expected an integer, found float",
                "g: expected a table, found array",
            ]
        );
    }
}
