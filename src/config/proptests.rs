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
