//! Unit tests for inspect/splice on hand-picked tricky bodies.

use super::*;

fn ok(body: &str) -> Inspected {
    match inspect(body.as_bytes()) {
        Ok(i) => i,
        Err(e) => panic!("{body:?} rejected: {e}"),
    }
}

fn err(body: &[u8]) -> BodyError {
    match inspect(body) {
        Ok(i) => panic!("{:?} accepted: {i:?}", String::from_utf8_lossy(body)),
        Err(e) => e,
    }
}

fn invalid(body: &[u8]) -> (usize, &'static str) {
    match err(body) {
        BodyError::InvalidJson { offset, reason } => (offset, reason),
        other => panic!(
            "{:?}: expected InvalidJson, got {other:?}",
            String::from_utf8_lossy(body)
        ),
    }
}

fn splice_str(body: &str, model: &str) -> String {
    let ins = ok(body);
    let out = ins.splice(body.as_bytes(), model);
    assert_eq!(out.len(), ins.spliced_len(body.as_bytes(), model));
    String::from_utf8(out).unwrap()
}

#[test]
fn splices_only_the_model_value_bytes() {
    let body = r#"{"model": "fast", "messages": [{"role":"user","content":"hi"}], "temperature": 0.30, "stream": true}"#;
    let ins = ok(body);
    assert_eq!(ins.model, "fast");
    assert!(ins.stream);
    assert_eq!(ins.model_spans(), std::slice::from_ref(&(11..15)));
    assert_eq!(
        splice_str(body, "gpt-4o-mini"),
        body.replace("\"fast\"", "\"gpt-4o-mini\"")
    );
}

#[test]
fn preserves_whitespace_and_number_text_everywhere() {
    let body = " \t\r\n{ \n\"a\" :\t-0 , \"b\":1e400,\"c\" : 1234567890123456789012345 ,\"d\":[ 0.30 ,-1.5E-7, 2e+3 ] ,\r\n \"model\"\t:\n\"x\" , \"e\" : { } , \"f\" : [ ] } \n\t";
    let ins = ok(body);
    assert_eq!(ins.model, "x");
    assert!(!ins.stream);
    assert_eq!(
        splice_str(body, "claude"),
        body.replace("\"x\"", "\"claude\"")
    );
}

#[test]
fn model_not_first_and_nested_model_keys_untouched() {
    let body = r#"{"messages":[{"model":"x","content":{"model":"y"}}],"meta":{"model":"z"},"model":"fast","tools":[["model"]]}"#;
    let ins = ok(body);
    assert_eq!(ins.model, "fast");
    assert_eq!(ins.model_spans().len(), 1);
    assert_eq!(
        splice_str(body, "m2"),
        body.replace("\"model\":\"fast\"", "\"model\":\"m2\"")
    );
}

#[test]
fn model_text_inside_string_values_is_ignored() {
    let body = r#"{"content":"\"model\": \"evil\"","model":"fast","x":"model"}"#;
    let ins = ok(body);
    assert_eq!(ins.model, "fast");
    assert_eq!(
        splice_str(body, "real"),
        r#"{"content":"\"model\": \"evil\"","model":"real","x":"model"}"#
    );
}

#[test]
fn escapes_in_other_strings_are_preserved_verbatim() {
    let body = r#"{"s":"q\"b\\s\/\b\f\n\r\t\u00e9\ud83d\ude00é😀","model":"fast"}"#;
    assert_eq!(
        splice_str(body, "n"),
        body.replace("\"model\":\"fast\"", "\"model\":\"n\"")
    );
}

#[test]
fn model_value_is_unescaped_and_replacement_is_escaped() {
    let body = r#"{"model":"fa\u0073t\n\"é\ud83d\ude00"}"#;
    let ins = ok(body);
    assert_eq!(ins.model, "fast\n\"é\u{1f600}");
    assert_eq!(
        splice_str(body, "a\"b\\c\u{1}"),
        r#"{"model":"a\"b\\c\u0001"}"#
    );
}

#[test]
fn escaped_key_names_match_model_and_stream() {
    let body = r#"{"mod\u0065l":"fast","\u0073tream":true}"#;
    let ins = ok(body);
    assert_eq!(ins.model, "fast");
    assert!(ins.stream);
    assert_eq!(
        splice_str(body, "z"),
        r#"{"mod\u0065l":"z","\u0073tream":true}"#
    );
    // Near misses are other keys.
    assert_eq!(err(br#"{"mod\u0065ls":"fast"}"#), BodyError::MissingModel);
    assert_eq!(err(br#"{"Model":"fast"}"#), BodyError::MissingModel);
    assert_eq!(err(br#"{"model ":"fast"}"#), BodyError::MissingModel);
}

#[test]
fn duplicate_model_keys_are_refused_wherever_they_are() {
    assert_eq!(
        err(br#"{"model":"a","x":1,"model":7,"model":"b"}"#),
        BodyError::DuplicateModel { offset: 27 }
    );
    // Equal values, an escaped spelling of the key, and a non-string first value all count.
    assert_eq!(
        err(br#"{"model":"a","model":"a"}"#),
        BodyError::DuplicateModel { offset: 21 }
    );
    assert_eq!(
        err(br#"{"model":"a","mod\u0065l":"b"}"#),
        BodyError::DuplicateModel { offset: 26 }
    );
    assert_eq!(
        err(br#"{"model":null, "model":"a"}"#),
        BodyError::DuplicateModel { offset: 23 }
    );
    // Broken JSON is reported as such even with a duplicate before the break.
    assert!(matches!(
        err(br#"{"model":"a","model":"b",}"#),
        BodyError::InvalidJson { .. }
    ));
    // Nested "model" keys are not duplicates.
    let ins = ok(r#"{"model":"a","o":{"model":"b","model":"c"},"l":[{"model":1}]}"#);
    assert_eq!(ins.model, "a");
    assert_eq!(ins.model_spans().len(), 1);
}

#[test]
fn duplicate_stream_keys_follow_the_last() {
    let ins = ok(r#"{"stream":true,"model":"a","stream":false}"#);
    assert!(!ins.stream);
    let ins = ok(r#"{"stream":false,"model":"a","stream":true}"#);
    assert!(ins.stream);
}

#[test]
fn stream_must_be_literal_true_at_top_level() {
    for (body, want) in [
        (r#"{"model":"a","stream":true}"#, true),
        (r#"{"model":"a","stream":"true"}"#, false),
        (r#"{"model":"a","stream":1}"#, false),
        (r#"{"model":"a","stream":[true]}"#, false),
        (r#"{"model":"a","o":{"stream":true}}"#, false),
        (r#"{"model":"a"}"#, false),
    ] {
        assert_eq!(ok(body).stream, want, "{body}");
    }
}

#[test]
fn empty_model_and_empty_replacement_work() {
    let body = r#"{"model":""}"#;
    assert_eq!(ok(body).model, "");
    assert_eq!(splice_str(body, "long-name"), r#"{"model":"long-name"}"#);
    assert_eq!(splice_str(r#"{"model":"abc"}"#, ""), r#"{"model":""}"#);
}

#[test]
fn error_variants_and_messages() {
    assert_eq!(err(b"{}"), BodyError::MissingModel);
    assert_eq!(err(b"[1,2]"), BodyError::NotAnObject);
    assert_eq!(err(b"\"model\""), BodyError::NotAnObject);
    assert_eq!(err(br#"{"model":["fast"]}"#), BodyError::ModelNotString);
    assert_eq!(err(br#"{"model":null}"#), BodyError::ModelNotString);
    assert_eq!(
        BodyError::NotAnObject.to_string(),
        "request body must be a JSON object"
    );
    assert_eq!(
        BodyError::MissingModel.to_string(),
        "missing required parameter: 'model'"
    );
    assert_eq!(
        BodyError::ModelNotString.to_string(),
        "'model' must be a string"
    );
    assert_eq!(
        BodyError::TooDeep.to_string(),
        "request body is not valid JSON: nesting exceeds 128 levels"
    );
    assert_eq!(
        err(br#"{"model": "a",}"#).to_string(),
        "request body is not valid JSON: expected '\"' after ',' at byte 14"
    );
    assert_eq!(
        BodyError::DuplicateModel { offset: 21 }.to_string(),
        "duplicate parameter 'model': the request body has more than one top-level 'model' key \
         (another at byte 21); send exactly one"
    );
    assert_eq!(BodyError::MissingModel.param(), Some("model"));
    assert_eq!(BodyError::ModelNotString.param(), Some("model"));
    assert_eq!(
        BodyError::DuplicateModel { offset: 1 }.param(),
        Some("model")
    );
    assert_eq!(BodyError::NotAnObject.param(), None);
    assert_eq!(BodyError::TooDeep.param(), None);
    assert_eq!(invalid_err(b"x").param(), None);
}

fn invalid_err(body: &[u8]) -> BodyError {
    let e = err(body);
    assert!(matches!(e, BodyError::InvalidJson { .. }));
    e
}

#[test]
fn invalid_json_reasons_and_offsets() {
    let cases: &[(&[u8], usize, &str)] = &[
        (b"", 0, "unexpected end of input"),
        (b"   ", 3, "unexpected end of input"),
        (b"{\"model\":\"a\"", 12, "unexpected end of input"),
        (b"{\"model\":\"a", 11, "unexpected end of input"),
        (
            b"\xEF\xBB\xBF{\"model\":\"a\"}",
            0,
            "byte order mark is not allowed",
        ),
        (b"{\"model\":\"a\",}", 13, "expected '\"' after ','"),
        (b"[1,]", 3, "unexpected character"),
        (
            b"{\"model\":\"a\"} x",
            14,
            "trailing characters after JSON value",
        ),
        (
            b"{\"model\":\"a\"}{}",
            13,
            "trailing characters after JSON value",
        ),
        (
            b"{\"model\":\"a\"}\x00",
            13,
            "trailing characters after JSON value",
        ),
        (b"{\"model\":\"a\" /* c */}", 13, "expected ',' or '}'"),
        (b"// c\n{\"model\":\"a\"}", 0, "unexpected character"),
        (b"{\"x\":NaN,\"model\":\"a\"}", 5, "unexpected character"),
        (b"{\"x\":Infinity}", 5, "unexpected character"),
        (b"{\"x\":-Infinity}", 6, "expected digit in number"),
        (b"{\"x\":01}", 5, "leading zeros are not allowed"),
        (b"{\"x\":-00}", 6, "leading zeros are not allowed"),
        (b"{\"x\":1.}", 7, "expected digit after decimal point"),
        (b"{\"x\":.5}", 5, "unexpected character"),
        (b"{\"x\":1e}", 7, "expected digit in exponent"),
        (b"{\"x\":1e+}", 8, "expected digit in exponent"),
        (b"{\"x\":+1}", 5, "unexpected character"),
        (b"{\"x\":0x10}", 6, "expected ',' or '}'"),
        (b"{\"x\":tru}", 8, "invalid literal"),
        (b"{\"x\":True}", 5, "unexpected character"),
        (b"{\"x\":nul", 8, "unexpected end of input"),
        (b"{\"x\":\"a\tb\"}", 7, "control character in string"),
        (b"{\"x\":\"a\nb\"}", 7, "control character in string"),
        (b"{\"x\":\"\\x\"}", 6, "invalid escape sequence"),
        (b"{\"x\":\"\\'\"}", 6, "invalid escape sequence"),
        (b"{\"x\":\"\\u12g4\"}", 10, "invalid unicode escape"),
        (
            b"{\"x\":\"\\ud800\"}",
            6,
            "lone high surrogate in unicode escape",
        ),
        (
            b"{\"x\":\"\\ud800\\u0041\"}",
            6,
            "lone high surrogate in unicode escape",
        ),
        (
            b"{\"x\":\"\\udc00\"}",
            6,
            "lone low surrogate in unicode escape",
        ),
        (b"{\"x\":\"\xff\"}", 6, "invalid UTF-8 in string"),
        (b"{\"x\":\"ab\xc3\"}", 8, "invalid UTF-8 in string"),
        (b"{\"x\":\"\xed\xa0\x80\"}", 6, "invalid UTF-8 in string"),
        (b"{\"x\":\xc3\xa9}", 5, "unexpected character"),
        (b"{'model':'a'}", 1, "expected '\"' or '}'"),
        (b"{model:\"a\"}", 1, "expected '\"' or '}'"),
        (b"{\"model\" \"a\"}", 9, "expected ':' after object key"),
        (b"{\"a\":1 \"b\":2}", 7, "expected ',' or '}'"),
        (b"[1 2]", 3, "expected ',' or ']'"),
        (b"[1}", 2, "expected ',' or ']'"),
        (b"{\"a\":1]", 6, "expected ',' or '}'"),
        (b"\x0c{\"model\":\"a\"}", 0, "unexpected character"),
        (
            b"{\"model\":\"a\"}\x0b",
            13,
            "trailing characters after JSON value",
        ),
        (b"{\"model\":\"a\"\xc2\xa0}", 12, "expected ',' or '}'"),
        (b"{\"x\":\"\\u00", 10, "unexpected end of input"),
    ];
    for &(body, offset, reason) in cases {
        assert_eq!(
            invalid(body),
            (offset, reason),
            "body {:?}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn validation_errors_win_over_semantic_errors() {
    // A broken document is reported as invalid JSON even when it is also not an object.
    assert!(matches!(err(b"[1,"), BodyError::InvalidJson { .. }));
    assert!(matches!(err(b"{\"a\":1,}"), BodyError::InvalidJson { .. }));
    assert!(matches!(
        err(b"{\"model\":1} trailing"),
        BodyError::InvalidJson { .. }
    ));
}

#[test]
fn depth_limit_is_enforced_without_recursion() {
    let nest = |n: usize| {
        let mut s = String::from("{\"model\":\"a\",\"x\":");
        s.push_str(&"[".repeat(n - 1));
        s.push_str(&"]".repeat(n - 1));
        s.push('}');
        s
    };
    assert_eq!(ok(&nest(MAX_DEPTH)).model, "a");
    assert_eq!(err(nest(MAX_DEPTH + 1).as_bytes()), BodyError::TooDeep);
    let hostile = "[".repeat(1_000_000);
    assert_eq!(err(hostile.as_bytes()), BodyError::TooDeep);
    let objects = "{\"a\":".repeat(200);
    assert_eq!(err(objects.as_bytes()), BodyError::TooDeep);
    // Mixed containers keep their kinds straight across all 128 levels.
    let mut mixed = String::from("{\"model\":\"a\",\"x\":");
    for d in 1..MAX_DEPTH {
        mixed.push_str(if d % 2 == 0 { "{\"k\":" } else { "[" });
    }
    mixed.push('0');
    for d in (1..MAX_DEPTH).rev() {
        mixed.push(if d % 2 == 0 { '}' } else { ']' });
    }
    mixed.push('}');
    assert_eq!(ok(&mixed).model, "a");
}

#[test]
fn long_strings_and_odd_lengths_scan_correctly() {
    for len in 0..40 {
        let filler = "é".repeat(len) + &"a".repeat(len);
        let body = format!(r#"{{"content":"{filler}\"","model":"m{filler}"}}"#);
        let ins = ok(&body);
        assert_eq!(ins.model, format!("m{filler}"));
        assert_eq!(
            splice_str(&body, "q"),
            format!(r#"{{"content":"{filler}\"","model":"q"}}"#)
        );
    }
}

#[test]
fn unicode_outside_ascii_is_allowed_in_strings() {
    let body = "{\"model\":\"mødel-日本-😀\",\"k\u{7f}\":\"\u{7f}\u{fffe}\"}";
    assert_eq!(ok(body).model, "mødel-日本-😀");
}

/// The conversation key of `body`, which must be accepted.
fn key(body: &str) -> Option<u64> {
    ok(body).conversation_key(body.as_bytes())
}

/// The key of a conversation whose opening messages are exactly `opening`.
fn key_of(opening: &str) -> Option<u64> {
    Some(conversation_key(opening.as_bytes()))
}

const SYSTEM: &str = r#"{"role": "system", "content": "You are terse."}"#;
const USER: &str = r#"{"role":"user","content":[{"type":"text","text":"hi"}]}"#;

#[test]
fn conversation_key_covers_system_messages_and_the_first_message_after_them() {
    let one = format!(r#"{{"model":"m","messages":[{SYSTEM}, {USER}]}}"#);
    assert_eq!(key(&one), key_of(&format!("{SYSTEM}, {USER}")));
    let later = format!(
        r#"{{"messages":[{SYSTEM}, {USER},{{"role":"assistant","content":"yo"}},{{"role":"user","content":"more"}}],"model":"m","stream":true}}"#
    );
    assert_eq!(key(&later), key(&one), "more turns keep the key");
    let other = one.replace("terse", "verbose");
    assert_ne!(key(&other), key(&one), "another system prompt, another key");
    let no_system = format!(r#"{{"model":"m","messages":[{USER},{{"role":"assistant"}}]}}"#);
    assert_eq!(key(&no_system), key_of(USER));
    let developer = r#"{"model":"m","messages":[{"role":"developer","content":"d"},{"role":"system"},{"role":"user","content":"q"}]}"#;
    assert_eq!(
        key(developer),
        key_of(
            r#"{"role":"developer","content":"d"},{"role":"system"},{"role":"user","content":"q"}"#
        )
    );
}

#[test]
fn conversation_key_reads_responses_input_items() {
    let body = r#"{"model":"m","instructions":"x","input":[{"type":"message","role":"system","content":"s"},{"type":"message","role":"user","content":"u"},{"type":"function_call_output"}]}"#;
    assert_eq!(
        key(body),
        key_of(
            r#"{"type":"message","role":"system","content":"s"},{"type":"message","role":"user","content":"u"}"#
        )
    );
    let tool_first = r#"{"model":"m","input":[{"type":"function_call_output","output":"o"}]}"#;
    assert_eq!(
        key(tool_first),
        key_of(r#"{"type":"function_call_output","output":"o"}"#)
    );
}

#[test]
fn requests_without_an_opening_have_no_conversation_key() {
    for body in [
        r#"{"model":"e","input":"one string to embed"}"#,
        r#"{"model":"e","input":["a","b"]}"#,
        r#"{"model":"e","input":[[1,2,3],[4]]}"#,
        r#"{"model":"e","input":[["a"],{"role":"user"}]}"#,
        r#"{"model":"c","prompt":"Say hi"}"#,
        r#"{"model":"c","messages":[]}"#,
        r#"{"model":"c","messages":[{"role":"system","content":"only"}]}"#,
        r#"{"model":"c","messages":"not a list"}"#,
        r#"{"model":"c","messages":null}"#,
        r#"{"model":"c","o":{"messages":[{"role":"user"}]}}"#,
        r#"{"model":"c","messages":[{"role":"user"}],"input":"last wins"}"#,
    ] {
        assert_eq!(key(body), None, "{body}");
    }
}

#[test]
fn conversation_key_edge_cases() {
    // Escaped key and role spellings are the same key and role.
    let escaped = r#"{"model":"m","m\u0065ssages":[{"r\u006fle":"syst\u0065m"},{"role":"user"}]}"#;
    assert_eq!(
        key(escaped),
        key_of(r#"{"r\u006fle":"syst\u0065m"},{"role":"user"}"#)
    );
    // A non-string role, a nested "role" and an empty message are not system messages.
    assert_eq!(
        key(r#"{"model":"m","messages":[{"role":1},{"role":"user"}]}"#),
        key_of(r#"{"role":1}"#)
    );
    assert_eq!(
        key(r#"{"model":"m","messages":[{"c":{"role":"system"}},{"role":"user"}]}"#),
        key_of(r#"{"c":{"role":"system"}}"#)
    );
    assert_eq!(
        key(r#"{"model":"m","messages":[ {} ,{"role":"user"}]}"#),
        key_of("{}")
    );
    // The last role of a message counts; the last "messages" member counts.
    assert_eq!(
        key(r#"{"model":"m","messages":[{"role":"user","role":"system"},{"role":"user"}]}"#),
        key_of(r#"{"role":"user","role":"system"},{"role":"user"}"#)
    );
    assert_eq!(
        key(r#"{"messages":"x","model":"m","messages":[{"role":"user"}]}"#),
        key_of(r#"{"role":"user"}"#)
    );
    // The splice is unaffected by the key.
    let body = format!(r#"{{"model":"fast","messages":[{SYSTEM},{USER}]}}"#);
    assert_eq!(
        splice_str(&body, "gpt"),
        body.replace(r#""fast""#, r#""gpt""#)
    );
    // Invalid JSON after a complete opening is still invalid.
    assert!(matches!(
        err(format!(r#"{{"model":"m","messages":[{USER}],}}"#).as_bytes()),
        BodyError::InvalidJson { .. }
    ));
}

#[test]
fn a_long_opening_is_keyed_by_its_length_and_both_ends() {
    let body = |system: &str, question: &str| {
        format!(
            r#"{{"model":"m","messages":[{{"role":"system","content":"{system}"}},{{"role":"user","content":"{question}"}},{{"role":"assistant","content":"a"}}]}}"#
        )
    };
    let prompt = "You are a careful assistant. ".repeat(1000);
    let a = key(&body(&prompt, "What is the capital of France?"));
    assert!(a.is_some());
    // Every turn of the same conversation: the same key.
    assert_eq!(a, key(&body(&prompt, "What is the capital of France?")));
    // Another first question after the same long system prompt: another key.
    assert_ne!(a, key(&body(&prompt, "What is the capital of Spain?")));
    // The same first and last bytes (the prompt repeats) around a longer middle: another key.
    let longer = format!("{prompt}You are a careful assistant. ");
    assert_ne!(a, key(&body(&longer, "What is the capital of France?")));
    // Short openings are hashed whole.
    let short = r#"{"role":"user","content":"hi"}"#;
    assert_eq!(
        key(&format!(r#"{{"model":"m","messages":[{short}]}}"#)),
        key_of(short)
    );
    assert!(short.len() <= 2 * crate::body::KEY_SPAN);
}

#[test]
fn continued_says_whether_messages_follow_the_opening() {
    let continued = |body: &str| ok(body).continued;
    assert!(!continued(&format!(
        r#"{{"model":"m","messages":[{SYSTEM}, {USER}]}}"#
    )));
    assert!(!continued(&format!(
        r#"{{"model":"m","messages":[{SYSTEM}, {USER} ] }}"#
    )));
    assert!(continued(&format!(
        r#"{{"model":"m","messages":[{SYSTEM}, {USER} ,{{"role":"assistant","content":"yo"}}]}}"#
    )));
    assert!(continued(&format!(
        "{{\"model\":\"m\",\"messages\":[{USER}\n\t ,\r{{\"role\":\"user\"}}]}}"
    )));
    let responses =
        r#"{"model":"m","input":[{"role":"user","content":"u"},{"type":"function_call_output"}]}"#;
    assert!(continued(responses));
    // Without an opening there is nothing to continue; the unkeyed scan never says so.
    assert!(!continued(
        r#"{"model":"c","messages":[{"role":"system"},{"role":"system"}]}"#
    ));
    assert!(!continued(r#"{"model":"e","input":["a","b"]}"#));
    let later = format!(r#"{{"model":"m","messages":[{USER},{USER}]}}"#);
    assert!(!crate::body::inspect_unkeyed(later.as_bytes()).is_ok_and(|i| i.continued));
}

#[test]
fn prompted_says_whether_the_opening_starts_with_a_system_prompt() {
    let prompted = |body: &str| ok(body).prompted;
    assert!(prompted(&format!(
        r#"{{"model":"m","messages":[{SYSTEM}, {USER}]}}"#
    )));
    assert!(prompted(&format!(
        r#"{{"model":"m","messages":[{{"role":"developer","content":"d"}},{SYSTEM},{USER},{USER}]}}"#
    )));
    assert!(!prompted(&format!(
        r#"{{"model":"m","messages":[{USER}]}}"#
    )));
    assert!(!prompted(&format!(
        r#"{{"model":"m","messages":[{USER},{SYSTEM},{USER}]}}"#
    )));
    // Only system messages: no opening at all.
    assert!(!prompted(
        r#"{"model":"c","messages":[{"role":"system"},{"role":"system"}]}"#
    ));
    assert!(!prompted(r#"{"model":"e","input":"a"}"#));
    let first = format!(r#"{{"model":"m","messages":[{SYSTEM},{USER}]}}"#);
    assert!(!crate::body::inspect_unkeyed(first.as_bytes()).is_ok_and(|i| i.prompted));
}
