//! Session-affinity header values: `<provider>/<model>`.
//!
//! Provider names never contain '/', models may, so a value splits at the FIRST '/'. Parsing is
//! strict (visible ASCII only, bounded length) because the value comes from untrusted clients.

/// Longest accepted header value, in bytes.
pub const MAX_LEN: usize = 512;

/// Split a header value into `(provider, model)`; `None` if empty parts, non-visible-ASCII bytes
/// or longer than [`MAX_LEN`]. Surrounding spaces/tabs (HTTP optional whitespace) are ignored.
pub fn parse(value: &str) -> Option<(&str, &str)> {
    let value = value.trim_matches(|c| c == ' ' || c == '\t');
    if value.len() > MAX_LEN || !value.bytes().all(|b| b.is_ascii_graphic()) {
        return None;
    }
    let (provider, model) = value.split_once('/')?;
    if provider.is_empty() || model.is_empty() {
        return None;
    }
    Some((provider, model))
}

/// Header value naming a candidate (the inverse of [`parse`]).
pub fn format(provider: &str, model: &str) -> String {
    let mut s = String::with_capacity(provider.len() + 1 + model.len());
    s.push_str(provider);
    s.push('/');
    s.push_str(model);
    s
}

/// Index of the candidate a header value names, given the alias's `(provider, model)` pairs in
/// config order; `None` if the value is malformed or names no candidate of this alias.
pub fn position<'a, I>(value: &str, candidates: I) -> Option<usize>
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
{
    let wanted = parse(value)?;
    candidates.into_iter().position(|c| c == wanted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for (p, m) in [("openai", "gpt-4o"), ("groq", "llama-3.1-8b-instant")] {
            let v = format(p, m);
            assert_eq!(parse(&v), Some((p, m)));
        }
    }

    #[test]
    fn model_with_slash_splits_at_first() {
        let v = format("together", "meta-llama/Llama-3-70b/instruct");
        assert_eq!(v, "together/meta-llama/Llama-3-70b/instruct");
        assert_eq!(
            parse(&v),
            Some(("together", "meta-llama/Llama-3-70b/instruct"))
        );
    }

    #[test]
    fn optional_whitespace_trimmed() {
        assert_eq!(parse("  a/b\t"), Some(("a", "b")));
    }

    #[test]
    fn garbage_rejected() {
        let long = format!("p/{}", "m".repeat(MAX_LEN));
        for bad in [
            "",
            "/",
            "nomodel",
            "/model",
            "provider/",
            "pro vider/model",
            "provider/mo\u{e9}del",
            "provider/model\n",
            "provider/mo\x7fdel",
            "a\0/b",
            long.as_str(),
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
        let max = format!("p/{}", "m".repeat(MAX_LEN - 2));
        assert_eq!(max.len(), MAX_LEN);
        assert!(parse(&max).is_some());
    }

    #[test]
    fn position_finds_candidate() {
        let cands = [("openai", "gpt-4o"), ("together", "meta/llama")];
        assert_eq!(position("together/meta/llama", cands), Some(1));
        assert_eq!(position("openai/gpt-4o", cands), Some(0));
        assert_eq!(position("openai/gpt-5", cands), None);
        assert_eq!(position("garbage", cands), None);
    }
}
