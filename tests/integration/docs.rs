//! What the docs claim about the code, checked: docs/reliability.md names, for every promise,
//! the test that holds it, and each named test exists in the file the row names (or anywhere
//! under `src/` and `tests/` when the row names none); the `/status` example of
//! docs/observability.md has the fields a running sturnus serves; the README's command line
//! names only subcommands and flags the binary has.

use crate::common::one_provider;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The text inside each pair of backticks of `cell`.
fn code_spans(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// Whether `span` is a test's name: a lowercase snake_case identifier.
fn is_test_name(span: &str) -> bool {
    span.contains('_')
        && span
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Whether `file` defines a function `name`.
fn defines(file: &Path, name: &str) -> bool {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.contains(&format!("fn {name}("))
}

#[test]
fn every_test_docs_reliability_names_exists_where_it_says() {
    let doc = std::fs::read_to_string(root().join("docs/reliability.md")).unwrap();
    let mut everywhere = Vec::new();
    rust_files(&root().join("src"), &mut everywhere);
    rust_files(&root().join("tests"), &mut everywhere);
    let mut named = 0;
    let mut missing = Vec::new();
    for row in doc
        .lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|---"))
    {
        let last = row
            .trim_end_matches('|')
            .rsplit(" | ")
            .next()
            .unwrap_or_default();
        let mut file: Option<PathBuf> = None;
        for span in code_spans(last) {
            if span.ends_with(".rs") {
                file = Some(root().join(span));
            } else if is_test_name(span) {
                named += 1;
                let found = match &file {
                    Some(f) => defines(f, span),
                    None => everywhere.iter().any(|f| defines(f, span)),
                };
                if !found {
                    missing.push(format!("{span} (in {file:?})"));
                }
            }
        }
    }
    assert!(
        named > 50,
        "only {named} test names found in docs/reliability.md"
    );
    assert!(
        missing.is_empty(),
        "docs/reliability.md names missing tests: {missing:#?}"
    );
}

/// The path of every object key in `v` (`.a.b`; an array's elements share one path), and
/// separately those whose value is `null`.
#[derive(Default)]
struct Fields {
    all: std::collections::BTreeSet<String>,
    null: Vec<String>,
}

impl Fields {
    fn of(v: &Value) -> Fields {
        let mut fields = Fields::default();
        fields.walk(v, "");
        fields
    }

    fn walk(&mut self, v: &Value, prefix: &str) {
        match v {
            Value::Object(map) => {
                for (k, child) in map {
                    let path = format!("{prefix}.{k}");
                    self.all.insert(path.clone());
                    if child.is_null() {
                        self.null.push(path.clone());
                    }
                    self.walk(child, &path);
                }
            }
            Value::Array(items) => {
                for item in items {
                    self.walk(item, &format!("{prefix}[]"));
                }
            }
            _ => {}
        }
    }

    /// The fields of `self` that `other` lacks, except below a field `other` has as `null`.
    fn beyond(&self, other: &Fields) -> Vec<String> {
        let below_null = |p: &String| other.null.iter().any(|n| p.starts_with(&format!("{n}.")));
        self.all
            .difference(&other.all)
            .filter(|p| !below_null(p))
            .cloned()
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_status_example_of_docs_observability_has_the_served_fields() {
    let doc = std::fs::read_to_string(root().join("docs/observability.md")).unwrap();
    let section = doc
        .split_once("\n## /status\n")
        .expect("a /status section")
        .1;
    let start = section.find("```json\n").expect("a JSON example") + "```json\n".len();
    let len = section[start..].find("```").expect("a closed block");
    let example: Value = serde_json::from_str(&section[start..start + len]).expect("JSON");
    let (_sim, proxy) = one_provider("m", None, "").await;
    let (documented, served) = (Fields::of(&example), Fields::of(&proxy.status().await));
    let undocumented = served.beyond(&documented);
    let unserved = documented.beyond(&served);
    assert!(
        undocumented.is_empty(),
        "served, not in the example: {undocumented:?}"
    );
    assert!(
        unserved.is_empty(),
        "in the example, not served: {unserved:?}"
    );
}

/// `sturnus ARGS --help`, as text.
fn help(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sturnus"))
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "sturnus {args:?} --help");
    String::from_utf8(out.stdout).unwrap()
}

/// Every `--flag` in `text`.
fn flags(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(str::to_string)
        .collect()
}

#[test]
fn the_readme_command_line_names_real_subcommands_and_flags() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let section = readme
        .split_once("\n## Command line\n")
        .expect("a Command line section")
        .1;
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    let mut rows = 0;
    for row in section.lines().filter(|l| l.starts_with("| `sturnus")) {
        rows += 1;
        let command = code_spans(row)[0];
        let sub = command
            .split_whitespace()
            .nth(1)
            .filter(|w| !w.starts_with('[') && !w.starts_with('-'));
        let known = flags(&help(&sub.into_iter().collect::<Vec<_>>()));
        for flag in flags(command) {
            assert!(known.contains(&flag), "`{command}`: sturnus has no {flag}");
        }
    }
    assert!(rows >= 5, "{rows} commands in README's table");
    let global = section
        .split_once("Global flags:")
        .expect("a Global flags paragraph")
        .1;
    let global = &global[..global.find("Pingora's flags").unwrap_or(global.len())];
    let top = help(&[]);
    for flag in flags(global) {
        assert!(
            top.contains(&flag),
            "README's global flag {flag} is not sturnus's"
        );
    }
}
