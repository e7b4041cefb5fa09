//! Property tests: a text-level JSON generator (arbitrary whitespace, number text, escapes,
//! duplicate keys) checks splice exactness, agreement with serde_json on validity, the refusal
//! of duplicate "model" keys, and the conversation key.

use super::*;
use proptest::prelude::*;
use proptest::sample::{select, Index};
use serde_json::Value;

fn ws() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => Just(String::new()),
        1 => prop::collection::vec(select(vec![' ', '\t', '\n', '\r']), 1..4)
            .prop_map(|v| v.into_iter().collect()),
    ]
}

/// Any valid JSON number text serde_json can represent (exponent kept to two digits).
fn number() -> impl Strategy<Value = String> {
    (
        any::<bool>(),
        prop_oneof![Just("0".to_string()), "[1-9][0-9]{0,24}"],
        prop::option::of("[0-9]{1,20}"),
        prop::option::of(("[eE]", "[+-]?", "[0-9]{1,2}")),
    )
        .prop_map(|(neg, int, frac, exp)| {
            let mut s = if neg { "-".to_string() } else { String::new() };
            s += &int;
            if let Some(f) = frac {
                s = s + "." + &f;
            }
            if let Some((e, sign, d)) = exp {
                s = s + &e + &sign + &d;
            }
            s
        })
}

fn string_piece() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => any::<char>()
            .prop_filter("needs escaping", |c| !matches!(c, '"' | '\\') && *c >= ' ')
            .prop_map(String::from),
        2 => "[a-z ]{1,12}",
        1 => select(vec!["\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t"])
            .prop_map(String::from),
        // \uXXXX escapes, including surrogate pairs for astral characters, either hex case.
        1 => (any::<char>(), any::<bool>()).prop_map(|(c, upper)| {
            c.encode_utf16(&mut [0; 2])
                .iter()
                .map(|u| if upper { format!("\\u{u:04X}") } else { format!("\\u{u:04x}") })
                .collect()
        }),
        1 => select(vec!["model", "\\\"model\\\": \\\"x\\\"", "stream", "{\\\"model\\\":1}"])
            .prop_map(String::from),
    ]
}

fn string_text() -> impl Strategy<Value = String> {
    prop::collection::vec(string_piece(), 0..6).prop_map(|p| format!("\"{}\"", p.concat()))
}

fn model_key() -> impl Strategy<Value = String> {
    select(vec!["\"model\"", "\"mod\\u0065l\"", "\"\\u006Dodel\""]).prop_map(String::from)
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => string_text(),
        1 => model_key(),
        1 => select(vec!["\"stream\"", "\"str\\u0065am\""]).prop_map(String::from),
    ]
}

/// Render `[...]` or `{...}` from already-rendered members.
fn container(open: char, close: char, items: Vec<String>, empty_ws: String) -> String {
    if items.is_empty() {
        format!("{open}{empty_ws}{close}")
    } else {
        format!("{open}{}{close}", items.join(","))
    }
}

/// Any JSON value as text, nested up to four levels.
fn value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_string()),
        Just("true".to_string()),
        Just("false".to_string()),
        number(),
        string_text(),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            (
                prop::collection::vec((ws(), inner.clone(), ws()), 0..5),
                ws()
            )
                .prop_map(|(items, e)| {
                    let items = items.into_iter().map(|(a, v, b)| a + &v + &b).collect();
                    container('[', ']', items, e)
                }),
            (
                prop::collection::vec((ws(), key(), ws(), ws(), inner, ws()), 0..5),
                ws()
            )
                .prop_map(|(items, e)| {
                    let items = items
                        .into_iter()
                        .map(|(a, k, b, c, v, d)| a + &k + &b + ":" + &c + &v + &d)
                        .collect();
                    container('{', '}', items, e)
                }),
        ]
    })
}

/// One top-level member: (key, value) plus the whitespace around its four token gaps.
type Member = (String, String, [String; 4]);

/// A top-level member other than "model".
fn member() -> impl Strategy<Value = Member> {
    let kv = prop_oneof![
        3 => (key().prop_filter("one model", |k| !is_model_key(k)), value()),
        1 => (
            Just("\"stream\"".to_string()),
            prop_oneof![Just("true".to_string()), Just("false".to_string()), value()]
        ),
    ];
    (kv, [ws(), ws(), ws(), ws()]).prop_map(|((k, v), w)| (k, v, w))
}

fn is_model_key(key: &str) -> bool {
    serde_json::from_str::<String>(key).is_ok_and(|k| k == "model")
}

/// A generated top-level object and the expected spans of its model string contents.
#[derive(Debug, Clone)]
struct Doc {
    text: String,
    spans: Vec<Range<usize>>,
}

/// Top-level object with one "model" member, a string, anywhere among other members.
fn doc() -> impl Strategy<Value = Doc> {
    (
        ws(),
        prop::collection::vec(member(), 0..6),
        (model_key(), string_text(), [ws(), ws(), ws(), ws()]),
        any::<Index>(),
        ws(),
    )
        .prop_map(|(lead, mut members, (k, v, w), at, trail)| {
            members.insert(at.index(members.len() + 1), (k, v, w));
            let mut text = lead + "{";
            let mut spans = Vec::new();
            for (n, (k, v, [a, b, c, d])) in members.into_iter().enumerate() {
                if n > 0 {
                    text.push(',');
                }
                text = text + &a + &k + &b + ":" + &c;
                if is_model_key(&k) && v.starts_with('"') {
                    spans.push(text.len() + 1..text.len() + v.len() - 1);
                }
                text = text + &v + &d;
            }
            text = text + "}" + &trail;
            Doc { text, spans }
        })
}

/// A document with a second top-level "model" member (any value) inserted before the first,
/// and the offset where the second one's value starts.
fn dup_doc() -> impl Strategy<Value = (String, usize)> {
    (doc(), model_key(), value(), ws()).prop_map(|(doc, k, v, w)| {
        let open = doc.text.find('{').map_or(0, |p| p + 1);
        let extra = format!("{w}{k}:{v},");
        let second = doc.spans[0].start - 1 + extra.len();
        let mut text = doc.text;
        text.insert_str(open, &extra);
        (text, second)
    })
}

/// A chat body: its text, the bytes of its opening messages, and the same body with the turns
/// after the opening cut to a random number.
#[derive(Debug, Clone)]
struct Conversation {
    text: String,
    opening: String,
    shorter: String,
}

/// One message object with the given role text (already a JSON string) and any content.
fn message(role: impl Strategy<Value = String>) -> impl Strategy<Value = String> {
    (role, value(), ws(), ws())
        .prop_map(|(role, content, a, b)| format!(r#"{{{a}"role":{role},"content"{b}:{content}}}"#))
}

fn system_role() -> impl Strategy<Value = String> {
    select(vec![r#""system""#, r#""developer""#, r#""system""#]).prop_map(String::from)
}

fn other_role() -> impl Strategy<Value = String> {
    select(vec![
        r#""user""#,
        r#""assistant""#,
        r#""tool""#,
        r#""User""#,
    ])
    .prop_map(String::from)
}

fn conversation() -> impl Strategy<Value = Conversation> {
    let any_role = prop_oneof![system_role(), other_role()];
    (
        prop::collection::vec(message(system_role()), 0..3),
        message(other_role()),
        prop::collection::vec(message(any_role), 0..5),
        prop::collection::vec(ws(), 8),
        any::<Index>(),
        any::<bool>(),
        string_text(),
    )
        .prop_map(|(systems, first, later, gaps, cut, model_first, model)| {
            let sep = |n: usize| format!("{},{}", gaps[n % 4], gaps[4 + n % 4]);
            let opening_messages: Vec<String> = systems.into_iter().chain([first]).collect();
            let mut opening = String::new();
            for (n, m) in opening_messages.iter().enumerate() {
                if n > 0 {
                    opening += &sep(n);
                }
                opening += m;
            }
            let with = |later: &[String]| {
                let mut list = format!("[{}{opening}", gaps[0]);
                for (n, m) in later.iter().enumerate() {
                    list = list + &sep(n) + m;
                }
                list = list + &gaps[1] + "]";
                let model = format!(r#""model":{model}"#);
                let messages = format!(r#""messages"{}:{list}"#, gaps[2]);
                let (a, b) = if model_first {
                    (model, messages)
                } else {
                    (messages, model)
                };
                format!(r#"{{{a},"temperature":0.5,{b}}}"#)
            };
            let shorter = with(&later[..cut.index(later.len() + 1)]);
            Conversation {
                text: with(&later),
                opening,
                shorter,
            }
        })
}

fn model_name() -> impl Strategy<Value = String> {
    prop_oneof!["[a-z0-9./:-]{0,30}", any::<String>()]
}

/// Bytes biased towards JSON syntax so mutations hit interesting paths.
fn json_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        any::<u8>(),
        select(b"{}[],:\"\\0123456789eE.-+tfnlu \t\r\n".to_vec()),
    ]
}

/// A generated document (object or any value) with up to three byte edits.
fn mutated() -> impl Strategy<Value = Vec<u8>> {
    let base = prop_oneof![
        3 => doc().prop_map(|d| d.text),
        1 => dup_doc().prop_map(|(text, _)| text),
        1 => conversation().prop_map(|c| c.text),
        1 => (ws(), value(), ws()).prop_map(|(a, v, b)| a + &v + &b),
    ];
    let edit = (0u8..3, any::<Index>(), json_byte());
    (base, prop::collection::vec(edit, 0..3)).prop_map(|(text, edits)| {
        let mut b = text.into_bytes();
        for (kind, at, byte) in edits {
            let i = at.index(b.len() + 1);
            match kind {
                0 => b.insert(i, byte),
                _ if i == b.len() => {}
                1 => {
                    b.remove(i);
                }
                _ => b[i] = byte,
            }
        }
        b
    })
}

/// How many top-level members of the JSON object text `bytes` are named "model" (serde_json's
/// `Value` keeps only the last, so they are counted while deserializing).
fn top_level_model_keys(bytes: &[u8]) -> usize {
    struct Count(usize);
    struct Visitor;
    impl<'de> serde::de::Visitor<'de> for Visitor {
        type Value = Count;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Count, A::Error> {
            let mut n = 0;
            while let Some(key) = map.next_key::<String>()? {
                n += usize::from(key == "model");
                map.next_value::<serde::de::IgnoredAny>()?;
            }
            Ok(Count(n))
        }
    }
    impl<'de> serde::Deserialize<'de> for Count {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Count, D::Error> {
            d.deserialize_map(Visitor)
        }
    }
    serde_json::from_slice::<Count>(bytes).map_or(0, |c| c.0)
}

/// `inspect` must reach the same verdict as serde_json (last duplicate wins) on any bytes.
fn check_agreement(bytes: &[u8]) -> Result<(), TestCaseError> {
    let ours = inspect(bytes);
    let unkeyed = inspect_unkeyed(bytes);
    prop_assert_eq!(
        unkeyed
            .as_ref()
            .map(|i| (&i.model, i.stream, i.model_spans())),
        ours.as_ref().map(|i| (&i.model, i.stream, i.model_spans()))
    );
    prop_assert!(unkeyed
        .iter()
        .all(|i| !i.continued && i.conversation_key(bytes).is_none()));
    let theirs = match serde_json::from_slice::<Value>(bytes) {
        // serde_json rejects floats beyond f64 range (e.g. 1e400); RFC 8259 does not.
        Err(e) if e.to_string().contains("number out of range") => return Ok(()),
        Err(e) => {
            prop_assert!(
                matches!(ours, Err(BodyError::InvalidJson { .. })),
                "serde_json: {e}, ours: {ours:?}"
            );
            return Ok(());
        }
        Ok(v) => v,
    };
    let Value::Object(map) = &theirs else {
        prop_assert_eq!(ours, Err(BodyError::NotAnObject));
        return Ok(());
    };
    if top_level_model_keys(bytes) > 1 {
        prop_assert!(
            matches!(ours, Err(BodyError::DuplicateModel { .. })),
            "duplicate model accepted: {ours:?}"
        );
        return Ok(());
    }
    let model = match map.get("model") {
        None => {
            prop_assert_eq!(ours, Err(BodyError::MissingModel));
            return Ok(());
        }
        Some(Value::String(m)) => m,
        Some(_) => {
            prop_assert_eq!(ours, Err(BodyError::ModelNotString));
            return Ok(());
        }
    };
    let ins = ours.map_err(|e| TestCaseError::fail(format!("serde_json accepted, we said {e}")))?;
    prop_assert_eq!(&ins.model, model);
    prop_assert_eq!(ins.stream, map.get("stream") == Some(&Value::Bool(true)));
    let out = ins.splice(bytes, "X\"y");
    prop_assert_eq!(out.len(), ins.spliced_len(bytes, "X\"y"));
    let mut expected = theirs.clone();
    expected["model"] = Value::String("X\"y".into());
    prop_assert_eq!(serde_json::from_slice::<Value>(&out).ok(), Some(expected));
    Ok(())
}

proptest! {
    #[test]
    fn splice_changes_only_model_value_bytes(doc in doc(), new_model in model_name()) {
        let body = doc.text.as_bytes();
        let ins = inspect(body).map_err(|e| TestCaseError::fail(format!("rejected: {e}")))?;
        prop_assert_eq!(ins.model_spans(), &doc.spans[..]);
        let input: Value = serde_json::from_slice(body)
            .map_err(|e| TestCaseError::fail(format!("generator bug: {e}")))?;
        prop_assert_eq!(Some(ins.model.as_str()), input["model"].as_str());
        prop_assert_eq!(ins.stream, input.get("stream") == Some(&Value::Bool(true)));

        let out = ins.splice(body, &new_model);
        prop_assert_eq!(out.len(), ins.spliced_len(body, &new_model));
        let shared = bytes::Bytes::copy_from_slice(body);
        let parts = ins.splice_parts(&shared, &new_model);
        prop_assert!(parts.iter().all(|p| !p.is_empty() || new_model.is_empty()));
        prop_assert_eq!(parts.concat(), out.clone(), "splice_parts differs from splice");
        // Outside the spans bytes are identical; each inserted run decodes to the new model.
        let width = escaped_len(&new_model);
        let (mut i, mut o) = (0, 0);
        for span in &doc.spans {
            let same = &body[i..span.start];
            prop_assert_eq!(&out[o..o + same.len()], same);
            o += same.len();
            let inserted = [b"\"", &out[o..o + width], b"\""].concat();
            let decoded: String = serde_json::from_slice(&inserted)
                .map_err(|e| TestCaseError::fail(format!("bad escape: {e}")))?;
            prop_assert_eq!(&decoded, &new_model);
            o += width;
            i = span.end;
        }
        prop_assert_eq!(&out[o..], &body[i..]);

        let mut expected = input.clone();
        expected["model"] = Value::String(new_model.clone());
        let got: Value = serde_json::from_slice(&out)
            .map_err(|e| TestCaseError::fail(format!("spliced output invalid: {e}")))?;
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn agrees_with_serde_json_on_generated_and_mutated_docs(bytes in mutated()) {
        check_agreement(&bytes)?;
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        check_agreement(&bytes)?;
    }

    #[test]
    fn arbitrary_json_ish_bytes_agree(bytes in prop::collection::vec(json_byte(), 0..64)) {
        check_agreement(&bytes)?;
    }

    #[test]
    fn escaped_model_names_round_trip(name in any::<String>()) {
        let mut esc = Vec::new();
        escape_json_string(&name, &mut esc);
        prop_assert_eq!(esc.len(), escaped_len(&name));
        let quoted = [b"\"", &esc[..], b"\""].concat();
        prop_assert_eq!(serde_json::from_slice::<String>(&quoted).ok(), Some(name));
    }
}

proptest! {
    #[test]
    fn duplicate_models_are_refused_at_the_second((text, second) in dup_doc()) {
        prop_assert_eq!(
            inspect(text.as_bytes()),
            Err(BodyError::DuplicateModel { offset: second })
        );
    }

    #[test]
    fn conversation_key_is_the_hash_of_the_opening_messages(c in conversation()) {
        let ins = inspect(c.text.as_bytes())
            .map_err(|e| TestCaseError::fail(format!("rejected: {e}")))?;
        prop_assert_eq!(
            ins.conversation_key(c.text.as_bytes()),
            Some(conversation_key(c.opening.as_bytes()))
        );
        let unkeyed = inspect_unkeyed(c.text.as_bytes()).map(|i| i.conversation_key(c.text.as_bytes()));
        prop_assert_eq!(unkeyed, Ok(None));
    }

    #[test]
    fn more_turns_keep_the_conversation_key(c in conversation()) {
        let long = inspect(c.text.as_bytes()).map(|i| i.conversation_key(c.text.as_bytes()));
        let short = inspect(c.shorter.as_bytes()).map(|i| i.conversation_key(c.shorter.as_bytes()));
        prop_assert_eq!(long, short);
    }

    #[test]
    fn another_opening_gives_another_key(a in conversation(), b in conversation()) {
        let key = |c: &Conversation| {
            let body = c.text.as_bytes();
            inspect(body).ok().and_then(|i| i.conversation_key(body))
        };
        if a.opening != b.opening {
            prop_assert_ne!(key(&a), key(&b));
        }
    }

    #[test]
    fn the_splice_keeps_conversation_bodies_exact(c in conversation(), new_model in model_name()) {
        let body = c.text.as_bytes();
        let ins = inspect(body).map_err(|e| TestCaseError::fail(format!("rejected: {e}")))?;
        let out = ins.splice(body, &new_model);
        let span = ins.model_spans()[0].clone();
        let width = escaped_len(&new_model);
        prop_assert_eq!(&out[..span.start], &body[..span.start]);
        prop_assert_eq!(&out[span.start + width..], &body[span.end..]);
        let again = inspect(&out).map_err(|e| TestCaseError::fail(format!("spliced: {e}")))?;
        prop_assert_eq!(again.conversation_key(&out), ins.conversation_key(body));
        prop_assert_eq!(again.model, new_model);
    }
}
