//! docs/reliability.md names, for every promise, the test that holds it: each named test exists,
//! in the file the row names (or anywhere under `src/` and `tests/` when the row names none).

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
