//! Whether a provider's answer says its prompt cache held the request's prefix: the usage
//! counter of prompt tokens read from the cache, `cached_tokens` (OpenAI, Azure OpenAI and the
//! OpenAI-compatible servers that report it, in `prompt_tokens_details` or
//! `input_tokens_details`), `cache_read_input_tokens` (Anthropic) or `cachedContentTokenCount`
//! (Google). It is read from the response body's first chunk, where a non-streaming answer's
//! usage usually is, and an Anthropic stream's (`message_start`); an OpenAI stream reports
//! usage only in its last chunk, so its answers count as misses.

use memchr::memmem::Finder;
use std::sync::LazyLock;

/// The counters' names, each with its opening quote; all three start with `"cache`.
const COUNTERS: [&[u8]; 3] = [
    b"\"cached_tokens\"",
    b"\"cache_read_input_tokens\"",
    b"\"cachedContentTokenCount\"",
];

/// Finds where a counter's name may start: the text all three share.
static PREFIX: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"cache"));

/// Whether `chunk` reports a positive count of prompt tokens read from the provider's cache.
pub fn reports_hit(chunk: &[u8]) -> bool {
    PREFIX.find_iter(chunk).any(|at| {
        let rest = &chunk[at..];
        COUNTERS
            .iter()
            .find(|name| rest.starts_with(name))
            .is_some_and(|name| positive_count(&rest[name.len()..]))
    })
}

/// Whether `rest`, what follows a counter's name, is `: N` (JSON whitespace allowed) with N a
/// positive number (JSON numbers have no leading zeros, so a first digit of 1 to 9).
fn positive_count(rest: &[u8]) -> bool {
    let mut bytes = rest
        .iter()
        .copied()
        .skip_while(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    if bytes.next() != Some(b':') {
        return false;
    }
    let mut value = bytes.skip_while(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    matches!(value.next(), Some(b'1'..=b'9'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn each_providers_usage_with_cached_tokens_is_a_hit() {
        let openai = br#"{"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":2006,"completion_tokens":300,"total_tokens":2306,"prompt_tokens_details":{"cached_tokens":1920,"audio_tokens":0}}}"#;
        let responses =
            br#"{"usage":{"input_tokens":2006,"input_tokens_details":{"cached_tokens": 1024}}}"#;
        let anthropic = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":21,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":188086,\"output_tokens\":1}}}\n\n";
        let google = br#"{"candidates":[],"usageMetadata":{"promptTokenCount":4000,"cachedContentTokenCount" :
 3500}}"#;
        for chunk in [&openai[..], responses, anthropic, google] {
            assert!(reports_hit(chunk), "{}", String::from_utf8_lossy(chunk));
        }
    }

    #[test]
    fn a_zero_count_a_missing_one_or_garbage_is_a_miss() {
        for chunk in [
            &br#"{"usage":{"prompt_tokens_details":{"cached_tokens":0}}}"#[..],
            br#"{"usage":{"cache_creation_input_tokens":2048,"cache_read_input_tokens":0}}"#,
            br#"{"usage":{"prompt_tokens":10}}"#,
            br#"{"cached_tokens":null}"#,
            br#"{"cached_tokens":"5"}"#,
            br#"{"cached_tokens":-5}"#,
            br#"{"content":"\"cached_tokens\" is a field name"}"#,
            br#"{"cached_tokens_total":5}"#,
            b"\"cached_tokens\"",
            b"\"cache",
            b"",
        ] {
            assert!(!reports_hit(chunk), "{}", String::from_utf8_lossy(chunk));
        }
    }

    proptest! {
        #[test]
        fn any_bytes_are_read_without_panicking(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = reports_hit(&bytes);
        }

        #[test]
        fn a_positive_count_anywhere_in_a_chunk_is_found(
            before in "[a-z ,{}\\[\\]:0-9\"]{0,60}", count in 1u64..1_000_000, after in "[a-z ,{}]{0,20}"
        ) {
            let chunk = format!("{before}\"cache_read_input_tokens\": {count}{after}");
            prop_assert!(reports_hit(chunk.as_bytes()));
        }
    }
}
