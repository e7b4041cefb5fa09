//! Property tests: arbitrary input never panics, and every problem is one line that starts with a
//! key path (or `config:`) and never contains a secret.

use super::tests::{env, FULL, SECRETS};
use super::Config;
use proptest::prelude::*;

/// Checks that `line` starts with `config: ` or with a key path followed by `: `.
fn starts_with_key_path(line: &str) -> bool {
    if line.starts_with("config: ") {
        return true;
    }
    let b = line.as_bytes();
    let mut i = 0;
    loop {
        if b.get(i) == Some(&b'"') {
            i += 1;
            loop {
                match b.get(i) {
                    None => return false,
                    Some(b'\\') => i += 2,
                    Some(b'"') => {
                        i += 1;
                        break;
                    }
                    Some(_) => i += 1,
                }
            }
        } else {
            let start = i;
            while b
                .get(i)
                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'-')
            {
                i += 1;
            }
            if i == start {
                return false;
            }
        }
        while b.get(i) == Some(&b'[') {
            let start = i + 1;
            i = start;
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            if i == start || b.get(i) != Some(&b']') {
                return false;
            }
            i += 1;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
        } else {
            break;
        }
    }
    line.get(i..).is_some_and(|rest| rest.starts_with(": "))
}

/// Parses `text` and checks every invariant on the outcome.
fn check(text: &str) -> Result<(), TestCaseError> {
    match Config::parse(text, &env) {
        Ok(cfg) => {
            let shown = format!("{cfg:?}\n{}", cfg.describe());
            for s in SECRETS {
                prop_assert!(!shown.contains(s));
            }
        }
        Err(e) => {
            prop_assert!(!e.problems.is_empty());
            for p in &e.problems {
                prop_assert!(
                    !p.contains('\n') && !p.contains('\r'),
                    "multi-line problem: {:?}",
                    p
                );
                prop_assert!(starts_with_key_path(p), "bad prefix: {:?}", p);
                for s in SECRETS {
                    prop_assert!(!p.contains(s), "secret leaked: {:?}", p);
                }
            }
        }
    }
    Ok(())
}

/// Applies (position, operation, character) edits to `base`: 0 replaces, 1 inserts, 2 deletes.
fn mutate(base: &str, edits: &[(usize, u8, char)]) -> String {
    let mut chars: Vec<char> = base.chars().collect();
    for &(pos, op, c) in edits {
        if chars.is_empty() {
            chars.push(c);
            continue;
        }
        let at = pos % chars.len();
        match op {
            0 => chars[at] = c,
            1 => chars.insert(at, c),
            _ => {
                chars.remove(at);
            }
        }
    }
    chars.into_iter().collect()
}

/// Characters that matter to TOML and to `${}` expansion, plus a few arbitrary ones.
fn interesting_char() -> impl Strategy<Value = char> {
    prop_oneof![
        prop::sample::select(vec![
            '[', ']', '{', '}', '"', '\'', '=', ',', '.', '\n', '#', '$', ':', '-', ' ', '0', '9',
            'a', '\\', '\u{0}', '\u{7}', 'é',
        ]),
        any::<char>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_strings_never_panic(text in any::<String>()) {
        check(&text)?;
    }

    #[test]
    fn toml_like_strings_never_panic(text in "[a-z_\\[\\]\\.=\"'{}$:, \n#0-9-]{0,160}") {
        check(&text)?;
    }

    #[test]
    fn mutated_valid_config_never_panics(
        edits in prop::collection::vec((any::<usize>(), 0u8..3, interesting_char()), 1..12)
    ) {
        check(&mutate(FULL, &edits))?;
    }
}

#[test]
fn key_path_checker_accepts_and_rejects() {
    assert!(starts_with_key_path("config: x"));
    assert!(starts_with_key_path("listen: x"));
    assert!(starts_with_key_path("model.fast[1].provider: x"));
    assert!(starts_with_key_path("provider.\"a \\\"b\".api_key: x"));
    assert!(!starts_with_key_path("oops"));
    assert!(!starts_with_key_path(": x"));
    assert!(!starts_with_key_path("model.fast[]: x"));
}

#[test]
fn the_unmutated_full_config_is_valid() {
    assert!(Config::parse(FULL, &env).is_ok());
    assert_eq!(
        mutate("abc", &[(1, 0, 'x'), (0, 1, 'y'), (5, 2, 'z')]),
        "yxc"
    );
}

/// One segment of a problem's key path.
#[derive(Debug, Clone, PartialEq)]
enum Segment {
    Key(String),
    Index(usize),
}

/// The key path a problem line starts with, split into segments (`None` for `config:` lines or
/// lines that do not start with a key path).
fn key_path(line: &str) -> Option<Vec<Segment>> {
    if line.starts_with("config: ") || !starts_with_key_path(line) {
        return None;
    }
    let mut segments = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        let mut key = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next()? {
                    '\\' => key.push(chars.next()?),
                    '"' => break,
                    c => key.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    key.push(c);
                    chars.next();
                } else {
                    break;
                }
            }
        }
        segments.push(Segment::Key(key));
        while chars.peek() == Some(&'[') {
            chars.next();
            let mut n = String::new();
            while let Some(c) = chars.next_if(|c| c.is_ascii_digit()) {
                n.push(c);
            }
            chars.next();
            segments.push(Segment::Index(n.parse().ok()?));
        }
        if chars.peek() == Some(&'.') {
            chars.next();
        } else {
            return Some(segments);
        }
    }
}

/// Whether `path` leads to a value inside `doc`.
fn resolves(doc: &toml::Value, path: &[Segment]) -> bool {
    let mut at = doc;
    for seg in path {
        let next = match seg {
            Segment::Key(k) => at.as_table().and_then(|t| t.get(k)),
            Segment::Index(i) => at.as_array().and_then(|a| a.get(*i)),
        };
        match next {
            Some(v) => at = v,
            None => return false,
        }
    }
    true
}

/// Keys a generated table may use: the schema's own plus near-misses and odd names.
fn key_from(known: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(known).prop_map(String::from),
        1 => "[a-z_-]{1,10}",
        1 => prop::sample::select(vec!["with space", "dotted.key", "ümlaut", ""])
            .prop_map(String::from),
    ]
}

/// Any TOML scalar (or a small array of them), biased towards values the schema cares about.
fn scalar() -> impl Strategy<Value = toml::Value> {
    use toml::Value as V;
    let leaf = prop_oneof![
        3 => prop::sample::select(vec![
            "https://api.openai.com/v1", "http://127.0.0.1:9/v1", "ftp://x", "not a url",
            "127.0.0.1:4000", "0.0.0.0:4040", "[::1]:80", "${OPENAI_API_KEY}", "${NOT_SET}",
            "${EMPTY:-}", "$$", "groq", "openai", "", "2024-10-21", "v1beta",
        ])
        .prop_map(|s| V::String(s.into())),
        1 => any::<String>().prop_map(V::String),
        2 => prop_oneof![any::<i64>(), -5i64..100_000].prop_map(V::Integer),
        2 => prop_oneof![any::<f64>(), -1.0f64..2.0].prop_map(V::Float),
        1 => any::<bool>().prop_map(V::Boolean),
    ];
    prop_oneof![
        6 => leaf.clone(),
        1 => prop::collection::vec(leaf, 0..3).prop_map(V::Array),
    ]
}

/// A table with keys from `known` and values from `value`.
fn table_of(
    known: &'static [&'static str],
    value: impl Strategy<Value = toml::Value>,
) -> impl Strategy<Value = toml::Value> {
    prop::collection::vec((key_from(known), value), 0..5)
        .prop_map(|kv| toml::Value::Table(kv.into_iter().collect()))
}

/// A `[provider.NAME]` table (or occasionally something that is not a table).
fn provider_value() -> impl Strategy<Value = toml::Value> {
    const KEYS: &[&str] = super::provider::KEYS;
    const KIND_KEYS: &[&str] = &[
        "resource_name",
        "api_version",
        "version",
        "project_id",
        "location",
    ];
    let field = prop_oneof![
        3 => scalar(),
        1 => table_of(KIND_KEYS, scalar()),
    ];
    prop_oneof![
        6 => table_of(KEYS, field),
        1 => scalar(),
    ]
}

/// An alias value: a list of `{ provider, model }` tables, mostly.
fn alias_value() -> impl Strategy<Value = toml::Value> {
    const KEYS: &[&str] = &["provider", "model"];
    let candidate = prop_oneof![
        5 => table_of(KEYS, scalar()),
        1 => scalar(),
    ];
    prop_oneof![
        6 => prop::collection::vec(candidate, 0..4).prop_map(toml::Value::Array),
        1 => scalar(),
    ]
}

/// A whole config document that is valid TOML but may break every rule of the schema.
fn config_doc() -> impl Strategy<Value = toml::Table> {
    const TOP: &[&str] = &["listen", "metrics_listen", "provider", "model", "routing"];
    const ROUTING: &[&str] = &[
        "ewma_alpha",
        "exploit_k",
        "probe_floor",
        "error_threshold",
        "connect_timeout_secs",
        "read_timeout_secs",
        "max_body_bytes",
        "max_buffered_bytes",
        "header_timeout_secs",
        "body_timeout_secs",
    ];
    const NAMES: &[&str] = &["openai", "groq", "azure", "my provider", "fast"];
    let providers = prop::collection::vec((key_from(NAMES), provider_value()), 0..4)
        .prop_map(|kv| toml::Value::Table(kv.into_iter().collect()));
    let aliases = prop::collection::vec((key_from(NAMES), alias_value()), 0..4)
        .prop_map(|kv| toml::Value::Table(kv.into_iter().collect()));
    (
        prop::option::of(scalar()),
        prop::option::of(scalar()),
        prop_oneof![4 => providers.prop_map(Some), 1 => Just(None), 1 => scalar().prop_map(Some)],
        prop_oneof![4 => aliases.prop_map(Some), 1 => Just(None), 1 => scalar().prop_map(Some)],
        prop::option::of(table_of(ROUTING, scalar())),
        prop::option::of((key_from(TOP), scalar())),
    )
        .prop_map(|(listen, metrics, provider, model, routing, extra)| {
            let mut t = toml::Table::new();
            let mut put = |k: &str, v: Option<toml::Value>| {
                if let Some(v) = v {
                    t.insert(k.to_string(), v);
                }
            };
            put("listen", listen);
            put("metrics_listen", metrics);
            put("provider", provider);
            put("model", model);
            put("routing", routing);
            if let Some((k, v)) = extra {
                t.entry(k).or_insert(v);
            }
            t
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Valid TOML with arbitrary content never panics, and every problem names its key: a
    /// path every proper prefix of which exists in the document (the last segment may be the
    /// key that is missing).
    #[test]
    fn every_problem_in_structured_toml_names_its_key(doc in config_doc()) {
        let Ok(text) = toml::to_string(&doc) else {
            return Ok(());
        };
        check(&text)?;
        let Err(e) = Config::parse(&text, &env) else {
            return Ok(());
        };
        let parsed = toml::Value::Table(text.parse::<toml::Table>().map_err(|e| {
            TestCaseError::fail(format!("generated TOML does not parse back: {e}"))
        })?);
        for p in &e.problems {
            let path = key_path(p).ok_or_else(|| {
                TestCaseError::fail(format!("valid TOML got a problem without a key: {p:?}\n{text}"))
            })?;
            prop_assert!(
                resolves(&parsed, &path[..path.len() - 1]),
                "{:?} names a key outside the document:\n{}", p, text
            );
        }
    }
}

#[test]
fn key_paths_split_into_segments() {
    use Segment::{Index as I, Key as K};
    assert_eq!(
        key_path("model.fast[1].provider: x"),
        Some(vec![
            K("model".into()),
            K("fast".into()),
            I(1),
            K("provider".into())
        ])
    );
    assert_eq!(
        key_path("provider.\"my \\\"p\\\"\".api_key: x"),
        Some(vec![
            K("provider".into()),
            K("my \"p\"".into()),
            K("api_key".into())
        ])
    );
    assert_eq!(key_path("config: TOML syntax error"), None);
    let doc: toml::Value = toml::from_str("[model]\nfast = [{ provider = \"a\" }]").unwrap();
    assert!(resolves(&doc, &[K("model".into()), K("fast".into()), I(0)]));
    assert!(!resolves(
        &doc,
        &[K("model".into()), K("fast".into()), I(1)]
    ));
}
