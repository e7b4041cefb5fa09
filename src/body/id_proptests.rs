//! Property tests of the response-id splices: the request's `previous_response_id` put back to
//! the provider's id, and the answer's ids tagged, change those bytes only, on generated JSON
//! text (arbitrary whitespace, member order, escapes, nested `id` keys) and streams cut anywhere.

use super::holder_tag::{untag, HolderTag, SUFFIX_LEN};
use super::id_splice::{tag_json_answer, StreamTagger};
use super::*;
use proptest::prelude::*;
use serde_json::Value;

fn ws() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(vec![' ', '\t', '\n', '\r']), 0..3)
        .prop_map(|v| v.into_iter().collect())
}

/// A JSON string literal (quotes included) with plain, escaped and non-ASCII text.
fn string_literal() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            "[a-zA-Z0-9_ -]{1,6}",
            Just("\\\"".to_string()),
            Just("\\u005f".to_string()),
            Just("\\n".to_string()),
            Just("é".to_string()),
        ],
        1..5,
    )
    .prop_map(|pieces| format!("\"{}\"", pieces.concat()))
}

/// Any member value: literals, numbers, strings, and objects with their own `id`.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("null".to_string()),
        Just("true".to_string()),
        "-?(0|[1-9][0-9]{0,3})(\\.[0-9]{1,3})?([eE][+-]?[0-9])?",
        string_literal(),
        (ws(), string_literal()).prop_map(|(w, id)| format!("{{{w}\"id\"{w}:{w}{id}}}")),
        (ws(), string_literal()).prop_map(|(w, id)| format!("[{w}{{\"id\":{id}}}{w}]")),
    ]
}

/// An object made of `fixed` members and some generated ones, in any order, any whitespace.
fn object(fixed: Vec<(String, String)>) -> impl Strategy<Value = String> {
    let others = prop::collection::vec(("[a-z_]{1,8}", value()), 0..5);
    (others, ws(), any::<prop::sample::Index>()).prop_flat_map(move |(others, w, at)| {
        let mut members: Vec<(String, String)> = others
            .into_iter()
            .filter(|(k, _)| !fixed.iter().any(|(f, _)| f == k))
            .collect();
        let mut members_fixed = fixed.clone();
        let n = members.len() + 1;
        for (i, member) in members_fixed.drain(..).enumerate() {
            members.insert((at.index(n) + i) % (members.len() + 1), member);
        }
        let w = w.clone();
        Just(format!(
            "{{{w}{}{w}}}",
            members
                .iter()
                .map(|(k, v)| format!("\"{k}\"{w}:{w}{v}"))
                .collect::<Vec<_>>()
                .join(&format!("{w},{w}"))
        ))
    })
}

/// A response object (or a deleted one's) with an `id`, maybe a `previous_response_id`, and
/// other members.
fn answer() -> impl Strategy<Value = String> {
    (
        string_literal(),
        prop::option::of(string_literal()),
        prop::sample::select(vec!["response", "response.deleted"]),
    )
        .prop_flat_map(|(id, previous, object_name)| {
            let mut fixed = vec![
                ("id".to_string(), id),
                ("object".to_string(), format!("\"{object_name}\"")),
            ];
            if let Some(previous) = previous {
                fixed.push(("previous_response_id".to_string(), previous));
            }
            object(fixed)
        })
}

/// `text` parsed (the generators only make valid JSON).
fn parse(text: &[u8]) -> Result<Value, TestCaseError> {
    serde_json::from_slice(text).map_err(|e| TestCaseError::fail(format!("invalid JSON: {e}")))
}

/// Checks that `out` is `text` with `SUFFIX_LEN` bytes inserted at each of `at` (ascending).
fn only_inserted(text: &[u8], out: &[u8], at: &[usize]) -> Result<(), TestCaseError> {
    prop_assert_eq!(out.len(), text.len() + at.len() * SUFFIX_LEN);
    let (mut i, mut o) = (0, 0);
    for &p in at {
        prop_assert_eq!(&out[o..o + p - i], &text[i..p]);
        o += p - i + SUFFIX_LEN;
        i = p;
    }
    prop_assert_eq!(&out[o..], &text[i..]);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_previous_response_id_splice_changes_only_that_value(
        body in object(vec![
            ("model".into(), "\"fast\"".into()),
            ("previous_response_id".into(), "\"resp_x\\u005fy\"".into()),
        ]),
        provider_id in "[a-zA-Z0-9_\"\\\\]{0,12}",
    ) {
        let bytes = body.as_bytes();
        let ins = inspect(bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let previous = ins.previous_response_id(bytes);
        prop_assert_eq!(previous.as_deref(), Some("resp_x_y"));
        let rewrite = Rewrite { model: "m-1", previous_response_id: Some(&provider_id) };
        let out = ins.splice_as(bytes, rewrite);
        prop_assert_eq!(out.len(), ins.spliced_len_as(bytes, rewrite));
        let shared = bytes::Bytes::copy_from_slice(bytes);
        prop_assert_eq!(ins.splice_parts_as(&shared, rewrite).concat(), out.clone());
        let mut expected = parse(bytes)?;
        expected["model"] = Value::String("m-1".into());
        expected["previous_response_id"] = Value::String(provider_id.clone());
        prop_assert_eq!(parse(&out)?, expected);
        // Byte for byte: the text before, between and after the two values is the client's.
        let text = String::from_utf8_lossy(bytes);
        let out_text = String::from_utf8_lossy(&out);
        let mut escaped = Vec::new();
        escape_json_string(&provider_id, &mut escaped);
        let escaped = String::from_utf8_lossy(&escaped);
        let rebuilt = text
            .replacen("\"fast\"", "\"m-1\"", 1)
            .replacen("\"resp_x\\u005fy\"", &format!("\"{escaped}\""), 1);
        prop_assert_eq!(out_text, rebuilt);
    }

    #[test]
    fn the_answer_splice_inserts_the_suffix_before_each_ids_closing_quote_only(
        body in answer(),
        provider in "[a-z]{1,6}",
    ) {
        let holder = HolderTag::of(&provider, "m");
        let out = tag_json_answer(body.as_bytes(), &holder)
            .ok_or_else(|| TestCaseError::fail("not tagged"))?;
        let input = parse(body.as_bytes())?;
        let got = parse(&out)?;
        let mut expected = input.clone();
        for key in ["id", "previous_response_id"] {
            let Some(original) = input[key].as_str() else { continue };
            let tagged = got[key].as_str().unwrap_or_default();
            let back = untag(tagged).ok_or_else(|| TestCaseError::fail("untaggable"))?;
            prop_assert_eq!(back.provider_id, original);
            prop_assert_eq!(back.holder, holder);
            expected[key] = got[key].clone();
        }
        prop_assert_eq!(got, expected);
        only_inserted(body.as_bytes(), &out, &top_level_string_ends(&body))?;
    }

    #[test]
    fn a_stream_cut_anywhere_is_tagged_event_by_event(
        events in prop::collection::vec(
            prop_oneof![
                string_literal().prop_map(|id| format!(
                    "event: response.created\ndata: {{\"type\":\"response.created\",\"response\":{{\"id\":{id},\"object\":\"response\"}}}}"
                )),
                string_literal().prop_map(|d| format!("event: response.output_text.delta\ndata: {{\"delta\":{d},\"id\":\"x\"}}")),
                Just(": keep-alive".to_string()),
            ],
            1..6,
        ),
        crlf in any::<bool>(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..4),
    ) {
        let end = if crlf { "\r\n\r\n" } else { "\n\n" };
        let stream: String = events.iter().map(|e| format!("{e}{end}")).collect();
        let bytes = stream.as_bytes();
        let holder = HolderTag::of("p", "m");
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let mut tagger = StreamTagger::new(holder);
        let mut out = Vec::new();
        let mut prev = 0;
        for cut in cuts.into_iter().chain([bytes.len()]) {
            out.extend(tagger.push(&bytes[prev..cut]));
            prev = cut;
        }
        out.extend(tagger.finish());
        let expected: Vec<u8> = events
            .iter()
            .flat_map(|e| {
                let event = format!("{e}{end}");
                super::id_splice::tag_event(event.as_bytes(), &holder).into_owned()
            })
            .collect();
        prop_assert_eq!(&out, &expected);
        let created = events.iter().filter(|e| e.starts_with("event: response.created")).count();
        prop_assert_eq!(out.len(), bytes.len() + created * SUFFIX_LEN);
    }
}

/// The offsets of the closing quotes of the top-level `id` and `previous_response_id` string
/// values of `body` (a generated object whose other members' keys are lowercase letters).
fn top_level_string_ends(body: &str) -> Vec<usize> {
    let bytes = body.as_bytes();
    let mut ends = Vec::new();
    let (mut depth, mut i) = (0usize, 0usize);
    let mut key: Option<String> = None;
    let mut expecting_key = false;
    while i < bytes.len() {
        match bytes[i] {
            b'{' | b'[' => {
                depth += 1;
                expecting_key = bytes[i] == b'{';
                i += 1;
            }
            b'}' | b']' => {
                depth -= 1;
                i += 1;
            }
            b',' => {
                expecting_key = depth == 1 || expecting_key;
                i += 1;
            }
            b'"' => {
                let start = i;
                i += 1;
                while bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                let text = &body[start + 1..i];
                if depth == 1 && expecting_key {
                    key = Some(text.to_string());
                    expecting_key = false;
                } else if depth == 1
                    && matches!(key.as_deref(), Some("id" | "previous_response_id"))
                {
                    ends.push(i);
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    ends
}
