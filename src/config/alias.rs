//! Reading the `[model]` table: alias name -> ordered list of (provider, model) candidates.

use super::reader::{index, join, quoted, suggest, Reader};
use super::schema::{AliasConfig, CandidateConfig};
use toml::Value;

/// Shown when there is no alias at all.
const NO_ALIASES: &str =
    "no model aliases defined; add one like [model] fast = [{ provider = \"openai\", model = \"gpt-4o-mini\" }]";

/// Reads `[model]`, checking candidates against the declared provider names.
pub(crate) fn read_aliases(
    r: &mut Reader,
    value: Option<&Value>,
    providers: &[String],
) -> Vec<AliasConfig> {
    let mut out = Vec::new();
    let Some(value) = value else {
        r.problem("model", NO_ALIASES);
        return out;
    };
    let Some(table) = r.table("model", value) else {
        return out;
    };
    if table.is_empty() {
        r.problem("model", NO_ALIASES);
    }
    for (name, v) in table {
        let path = join("model", name);
        if !is_header_safe(name) {
            r.problem(
                &path,
                "alias name must be non-empty printable ASCII without control characters or surrounding spaces",
            );
        }
        if let Some(candidates) = read_candidates(r, &path, v, providers) {
            out.push(AliasConfig {
                name: name.clone(),
                candidates,
            });
        }
    }
    out
}

/// Tells whether a name can go into an HTTP header value unchanged: non-empty printable ASCII,
/// no control characters, no leading or trailing space.
pub(crate) fn is_header_safe(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !s.starts_with(' ')
        && !s.ends_with(' ')
}

/// Reads one alias's candidate array; `None` when it has no usable candidates.
fn read_candidates(
    r: &mut Reader,
    path: &str,
    v: &Value,
    providers: &[String],
) -> Option<Vec<CandidateConfig>> {
    let Value::Array(items) = v else {
        r.problem(
            path,
            format_args!(
                "expected an array of {{ provider = \"...\", model = \"...\" }} tables, found {}",
                v.type_str()
            ),
        );
        return None;
    };
    if items.is_empty() {
        r.problem(path, "alias has no candidates");
        return None;
    }
    let mut seen: Vec<(usize, CandidateConfig)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let item_path = index(path, i);
        let Some(c) = read_candidate(r, &item_path, item, providers) else {
            continue;
        };
        match seen.iter().find(|(_, s)| *s == c) {
            Some((first, _)) => r.problem(
                &item_path,
                format_args!(
                    "duplicate candidate (provider {:?}, model {:?}), same as {}",
                    c.provider,
                    c.model,
                    index(path, *first)
                ),
            ),
            None => seen.push((i, c)),
        }
    }
    Some(seen.into_iter().map(|(_, c)| c).collect())
}

/// Reads one `{ provider, model }` candidate.
fn read_candidate(
    r: &mut Reader,
    path: &str,
    item: &Value,
    providers: &[String],
) -> Option<CandidateConfig> {
    let Value::Table(t) = item else {
        r.problem(
            path,
            format_args!(
                "expected a table like {{ provider = \"...\", model = \"...\" }}, found {}",
                item.type_str()
            ),
        );
        return None;
    };
    r.unknown_keys(path, t, &["provider", "model"]);
    let provider = required_string(r, path, t.get("provider"), "provider").and_then(|p| {
        if providers.contains(&p) {
            return Some(p);
        }
        let hint = match suggest(&p, providers.iter().map(String::as_str)) {
            Some(s) => format!(" (did you mean {s}?)"),
            None if providers.is_empty() => " (no providers are configured)".to_string(),
            None => String::new(),
        };
        let shown = quoted(t.get("provider"), &p);
        r.problem(
            &join(path, "provider"),
            format_args!("unknown provider {shown}{hint}"),
        );
        None
    });
    let model = required_string(r, path, t.get("model"), "model").and_then(|m| {
        if is_header_safe(&m) {
            return Some(m);
        }
        r.problem(
            &join(path, "model"),
            "model name must be non-empty printable ASCII without control characters or surrounding spaces",
        );
        None
    });
    Some(CandidateConfig {
        provider: provider?,
        model: model?,
    })
}

/// Reads a required string key of a candidate.
fn required_string(r: &mut Reader, parent: &str, v: Option<&Value>, key: &str) -> Option<String> {
    let path = join(parent, key);
    match v {
        Some(v) => r.string(&path, v),
        None => {
            r.problem(&path, "required key is missing");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toml::Table;

    fn env(name: &str) -> Option<String> {
        (name == "MODEL").then(|| "gpt-4o".to_string())
    }

    fn read(text: &str) -> (Vec<AliasConfig>, Vec<String>) {
        let doc: Table = text.parse().unwrap();
        let providers = vec!["openai".to_string(), "groq".to_string()];
        let mut r = Reader::new(&env);
        let a = read_aliases(&mut r, doc.get("model"), &providers);
        (a, r.problems)
    }

    fn c(provider: &str, model: &str) -> CandidateConfig {
        CandidateConfig {
            provider: provider.into(),
            model: model.into(),
        }
    }

    #[test]
    fn aliases_keep_config_order() {
        let (a, p) = read(
            "[model]\nzeta = [{ provider = \"groq\", model = \"llama\" }, { provider = \"openai\", model = \"${MODEL}\" }]\n\
             alpha = [{ provider = \"openai\", model = \"gpt-4o-mini\" }]",
        );
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(a.len(), 2);
        assert_eq!(a[0].name, "zeta");
        assert_eq!(
            a[0].candidates,
            vec![c("groq", "llama"), c("openai", "gpt-4o")]
        );
        assert_eq!(a[1].name, "alpha");
    }

    #[test]
    fn array_of_tables_syntax_works() {
        let (a, p) = read("[[model.fast]]\nprovider = \"groq\"\nmodel = \"m\"\n[[model.fast]]\nprovider = \"openai\"\nmodel = \"m\"");
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(a[0].candidates, vec![c("groq", "m"), c("openai", "m")]);
    }

    #[test]
    fn missing_or_empty_model_table() {
        assert_eq!(read("").1, vec![format!("model: {NO_ALIASES}")]);
        assert_eq!(read("[model]").1, vec![format!("model: {NO_ALIASES}")]);
        assert_eq!(
            read("model = []").1,
            vec!["model: expected a table, found array"]
        );
    }

    #[test]
    fn empty_alias_and_wrong_shapes() {
        assert_eq!(
            read("[model]\nfast = []\nslow = \"openai/gpt\"\nmid = [\"openai\"]").1,
            vec![
                "model.fast: alias has no candidates",
                "model.slow: expected an array of { provider = \"...\", model = \"...\" } tables, found string",
                "model.mid[0]: expected a table like { provider = \"...\", model = \"...\" }, found string",
            ]
        );
    }

    #[test]
    fn unknown_provider_with_suggestion() {
        assert_eq!(
            read("[model]\nfast = [{ provider = \"groq\", model = \"m\" }, { provider = \"opnai\", model = \"m\" }, { provider = \"zzz\", model = \"m\" }]").1,
            vec![
                "model.fast[1].provider: unknown provider \"opnai\" (did you mean openai?)",
                "model.fast[2].provider: unknown provider \"zzz\"",
            ]
        );
    }

    #[test]
    fn no_providers_configured_hint() {
        let doc: Table = "[model]\nfast = [{ provider = \"a\", model = \"m\" }]"
            .parse()
            .unwrap();
        let mut r = Reader::new(&env);
        read_aliases(&mut r, doc.get("model"), &[]);
        assert_eq!(
            r.problems,
            vec!["model.fast[0].provider: unknown provider \"a\" (no providers are configured)"]
        );
    }

    #[test]
    fn duplicates_missing_keys_and_bad_model_names() {
        assert_eq!(
            read(
                "[model]\nfast = [{ provider = \"groq\", model = \"m\" }, { provider = \"groq\", model = \"m\" }, \
                 { model = \"x\" }, { provider = \"groq\", model = \"a\\u0007b\", modle = 1 }, { provider = \"groq\", model = \"\" }]"
            )
            .1,
            vec![
                "model.fast[1]: duplicate candidate (provider \"groq\", model \"m\"), same as model.fast[0]",
                "model.fast[2].provider: required key is missing",
                "model.fast[3].modle: unknown key (did you mean model?)",
                "model.fast[3].model: model name must be non-empty printable ASCII without control characters or surrounding spaces",
                "model.fast[4].model: model name must be non-empty printable ASCII without control characters or surrounding spaces",
            ]
        );
    }

    #[test]
    fn bad_alias_names() {
        let (_, p) = read("[model]\n\"\" = [{ provider = \"groq\", model = \"m\" }]\n\"a\\tb\" = [{ provider = \"groq\", model = \"m\" }]");
        assert_eq!(
            p,
            vec![
                "model.\"\": alias name must be non-empty printable ASCII without control characters or surrounding spaces",
                "model.\"a\\tb\": alias name must be non-empty printable ASCII without control characters or surrounding spaces",
            ]
        );
    }

    #[test]
    fn header_safety() {
        assert!(is_header_safe("gpt-4o"));
        assert!(is_header_safe("meta-llama/Llama-3.1 8B:free"));
        assert!(!is_header_safe(""));
        assert!(!is_header_safe(" x"));
        assert!(!is_header_safe("x\r\nSet-Cookie: a"));
        assert!(!is_header_safe("modèle"));
    }
}
