//! `--env-file`: load `KEY=VALUE` lines into the process environment at startup.
//!
//! Format: one `KEY=VALUE` per line; blank lines and lines starting with `#` are ignored; an
//! optional `export ` prefix is accepted; the value may be wrapped in matching single or double
//! quotes (taken literally, no escapes; `#` allowed inside). An unquoted value ends at a `#` that
//! follows whitespace (an inline comment); otherwise it is the rest of the line, trimmed. KEY is
//! `[A-Za-z_][A-Za-z0-9_]*`. Error messages name the line but never echo a value.

use super::expand::is_var_name;
use std::fmt;
use std::path::{Path, PathBuf};

/// What is wrong with one line of an env file (never its value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// No `=` on the line.
    #[error("expected KEY=VALUE")]
    NotAPair,
    /// A key that is not a portable variable name.
    #[error("invalid variable name (use letters, digits and _, not starting with a digit)")]
    BadName,
    /// A value holding NUL, which no environment variable can.
    #[error("value of {key} contains a NUL character")]
    Nul {
        /// The variable whose value it is.
        key: String,
    },
    /// An opening quote without its closing one.
    #[error("unterminated {quote} quote")]
    Unterminated {
        /// `"` or `'`.
        quote: char,
    },
    /// Text other than a comment after a quoted value.
    #[error("unexpected text after the closing quote")]
    AfterQuote,
}

/// Every bad line of an env file, as `(1-based line number, problem)` in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLines(pub Vec<(usize, LineError)>);

impl fmt::Display for BadLines {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (line, problem)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "line {line}: {problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for BadLines {}

/// Why `--env-file` could not be loaded; names the file, never a value.
#[derive(Debug, thiserror::Error)]
pub enum EnvFileError {
    /// The file could not be read.
    #[error("env file {}: cannot read: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Some lines are malformed.
    #[error("env file {}: {lines}", path.display())]
    Lines {
        /// The file.
        path: PathBuf,
        /// Every bad line.
        lines: BadLines,
    },
}

/// Parses env-file text into `(key, value)` pairs in file order; the error lists every bad line.
pub fn parse_env_file(text: &str) -> Result<Vec<(String, String)>, BadLines> {
    let mut pairs = Vec::new();
    let mut errors = Vec::new();
    for (i, line) in text.lines().enumerate() {
        match parse_line(line) {
            Ok(Some(pair)) => pairs.push(pair),
            Ok(None) => {}
            Err(e) => errors.push((i + 1, e)),
        }
    }
    if errors.is_empty() {
        Ok(pairs)
    } else {
        Err(BadLines(errors))
    }
}

/// Reads an env file and sets each variable that is not already set in the process environment
/// (so the real environment wins); returns how many variables it set. Call once at startup,
/// before any thread is spawned. When a key repeats in the file, its last value is used.
pub fn load_env_file(path: &Path) -> Result<usize, EnvFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| EnvFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let pairs = parse_env_file(&text).map_err(|lines| EnvFileError::Lines {
        path: path.to_path_buf(),
        lines,
    })?;
    let mut last: Vec<(String, String)> = Vec::new();
    for (key, value) in pairs {
        match last.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => last.push((key, value)),
        }
    }
    let mut set = 0;
    for (key, value) in last {
        if std::env::var_os(&key).is_none() {
            // Keys are validated names and values contain no NUL, so set_var cannot panic.
            std::env::set_var(&key, &value);
            set += 1;
        }
    }
    Ok(set)
}

/// Parses one line: `None` for blank and comment lines.
fn parse_line(line: &str) -> Result<Option<(String, String)>, LineError> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let line = match line.strip_prefix("export") {
        Some(rest) if rest.starts_with([' ', '\t']) => rest.trim_start(),
        _ => line,
    };
    let (key, raw) = line.split_once('=').ok_or(LineError::NotAPair)?;
    let key = key.trim();
    if !is_var_name(key) {
        return Err(LineError::BadName);
    }
    let value = parse_value(raw)?;
    if value.contains('\0') {
        return Err(LineError::Nul {
            key: key.to_string(),
        });
    }
    Ok(Some((key.to_string(), value)))
}

/// Parses the part after `=`: quoted, or unquoted with an optional inline comment.
fn parse_value(raw: &str) -> Result<String, LineError> {
    let v = raw.trim();
    let quote = v.chars().next().filter(|c| *c == '"' || *c == '\'');
    if let Some(q) = quote {
        let body = &v[1..];
        let end = body.find(q).ok_or(LineError::Unterminated { quote: q })?;
        let tail = body[end + 1..].trim_start();
        if !tail.is_empty() && !tail.starts_with('#') {
            return Err(LineError::AfterQuote);
        }
        return Ok(body[..end].to_string());
    }
    let bytes = v.as_bytes();
    let comment =
        (1..bytes.len()).find(|&i| bytes[i] == b'#' && bytes[i - 1].is_ascii_whitespace());
    Ok(match comment {
        Some(i) => v[..i].trim_end().to_string(),
        None => v.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(text: &str) -> Vec<(String, String)> {
        parse_env_file(text).unwrap()
    }

    fn p(k: &str, v: &str) -> (String, String) {
        (k.to_string(), v.to_string())
    }

    #[test]
    fn basic_lines_comments_and_blanks() {
        let text = "# comment\n\nA=1\n  B = two words  \r\n   # indented comment\nC=\n";
        assert_eq!(
            pairs(text),
            vec![p("A", "1"), p("B", "two words"), p("C", "")]
        );
    }

    #[test]
    fn export_prefix() {
        assert_eq!(
            pairs("export A=1\nexport\tB=2"),
            vec![p("A", "1"), p("B", "2")]
        );
        // A variable literally named like the prefix still works.
        assert_eq!(pairs("exportX=1"), vec![p("exportX", "1")]);
    }

    #[test]
    fn quotes_are_stripped_and_literal() {
        let text = "A=\"x y # z\"\nB='sk-$abc'\nC=\"\"\nD='a \"b\"' # note\nE=\"=\"";
        assert_eq!(
            pairs(text),
            vec![
                p("A", "x y # z"),
                p("B", "sk-$abc"),
                p("C", ""),
                p("D", "a \"b\""),
                p("E", "=")
            ]
        );
    }

    #[test]
    fn inline_comments_and_hashes_in_values() {
        assert_eq!(pairs("A=abc # note"), vec![p("A", "abc")]);
        assert_eq!(pairs("A=abc#def"), vec![p("A", "abc#def")]);
        assert_eq!(pairs("A=#abc"), vec![p("A", "#abc")]);
    }

    #[test]
    fn value_may_contain_equals() {
        assert_eq!(pairs("A=b=c"), vec![p("A", "b=c")]);
    }

    #[test]
    fn errors_name_the_line_and_not_the_value() {
        let e = parse_env_file("A=1\nnot a pair\n1X=2\nB=\"sk-secret\nC='x' y")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2: expected KEY=VALUE"), "{e}");
        assert!(e.contains("line 3: invalid variable name"), "{e}");
        assert!(e.contains("line 4: unterminated \" quote"), "{e}");
        assert!(
            e.contains("line 5: unexpected text after the closing quote"),
            "{e}"
        );
        assert!(!e.contains("sk-secret"));
    }

    #[test]
    fn nul_is_rejected() {
        assert_eq!(
            parse_env_file("A=a\0b").unwrap_err(),
            BadLines(vec![(1, LineError::Nul { key: "A".into() })])
        );
    }

    #[test]
    fn load_sets_only_unset_variables() {
        let dir = std::env::temp_dir().join(format!("sturnus-envfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("test.env");
        let fresh = format!("STURNUS_ENVFILE_FRESH_{}", std::process::id());
        // PATH is always set, so the file must not override it.
        std::fs::write(&path, format!("{fresh}=one\n{fresh}=two\nPATH=/nowhere\n")).unwrap();
        let before = std::env::var("PATH").unwrap();
        assert_eq!(load_env_file(&path).unwrap(), 1);
        assert_eq!(std::env::var(&fresh).unwrap(), "two");
        assert_eq!(std::env::var("PATH").unwrap(), before);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn load_errors_name_the_path() {
        let e = load_env_file(Path::new("/definitely/not/here.env"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/definitely/not/here.env"), "{e}");
    }
}
