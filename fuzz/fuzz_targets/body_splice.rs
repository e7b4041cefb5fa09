//! Any bytes as a request body: `inspect` never panics, whatever it rejects is a 400, and
//! whatever it accepts is spliced so that only the top-level `model` value changes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sturnus::body::inspect;
use sturnus::proxy::admission::inspect_body;

fuzz_target!(|data: &[u8]| {
    // The first byte chooses the replacement model name's length (taken from the input too).
    let (model, body) = match data.split_first() {
        Some((n, rest)) => {
            let n = (*n as usize % 24).min(rest.len());
            (String::from_utf8_lossy(&rest[..n]).into_owned(), &rest[n..])
        }
        None => (String::new(), data),
    };
    let ins = match inspect(body) {
        Err(_) => {
            let err = inspect_body(body, true).expect_err("inspect and inspect_body disagree");
            assert_eq!(err.status, 400);
            return;
        }
        Ok(ins) => ins,
    };
    let out = ins.splice(body, &model);
    assert_eq!(out.len(), ins.spliced_len(body, &model));
    let shared = bytes::Bytes::copy_from_slice(body);
    assert_eq!(ins.splice_parts(&shared, &model).concat(), out);
    // Outside the model values every byte is the input's.
    let mut i = 0;
    let mut o = 0;
    let mut escaped = Vec::new();
    sturnus::body::escape_json_string(&model, &mut escaped);
    for span in ins.model_spans() {
        let same = &body[i..span.start];
        assert_eq!(&out[o..o + same.len()], same);
        o += same.len() + escaped.len();
        i = span.end;
    }
    assert_eq!(&out[o..], &body[i..]);
    // And the document is the same but for `model` (when serde_json can represent it).
    if let Ok(mut expected) = serde_json::from_slice::<serde_json::Value>(body) {
        expected["model"] = serde_json::Value::String(model.clone());
        let got: serde_json::Value = serde_json::from_slice(&out).expect("spliced output parses");
        assert_eq!(got, expected);
    }
});
