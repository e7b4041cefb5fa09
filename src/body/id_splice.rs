//! The answer splice: a provider's Responses API answer with its response ids tagged with the
//! holder ([`super::holder_tag`]), and nothing else changed.
//!
//! A JSON answer whose top-level `object` is a response (`response`, `response.deleted`) gets
//! its top-level `id` and `previous_response_id` tagged; in a stream, every event whose data
//! carries a `response` object gets that object's two ids tagged. Tagging inserts the
//! [`SUFFIX_LEN`](super::holder_tag::SUFFIX_LEN) characters before each id's closing quote; every
//! other byte of the answer is kept (an empty id is not tagged). An answer that is not valid JSON, or has no such ids, is
//! left as it is.

use super::holder_tag::HolderTag;
use serde::Deserialize;
use serde_json::value::RawValue;

/// The members of a response object that hold response ids.
#[derive(Deserialize)]
struct ResponseIds<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    object: Option<&'a RawValue>,
    #[serde(borrow, default)]
    previous_response_id: Option<&'a RawValue>,
}

/// The member of a stream event that carries the response.
#[derive(Deserialize)]
struct EventResponse<'a> {
    #[serde(borrow, default)]
    response: Option<ResponseIds<'a>>,
}

/// One insertion: the suffix goes in at `at`.
type Insertion = (usize, [u8; super::holder_tag::SUFFIX_LEN]);

impl ResponseIds<'_> {
    /// Where the suffixes go in `text` (from which these were read), if this is a response.
    fn insertions(&self, text: &[u8], holder: &HolderTag, out: &mut Vec<Insertion>) {
        let is_response = self
            .object
            .and_then(|raw| serde_json::from_str::<std::borrow::Cow<'_, str>>(raw.get()).ok())
            .is_some_and(|object| object.starts_with("response"));
        if !is_response {
            return;
        }
        for raw in [self.id, self.previous_response_id].into_iter().flatten() {
            let Ok(id) = serde_json::from_str::<std::borrow::Cow<'_, str>>(raw.get()) else {
                continue;
            };
            if id.is_empty() {
                continue;
            }
            // The raw value is a slice of `text`: its closing quote is its last byte.
            let start = raw.get().as_ptr() as usize - text.as_ptr() as usize;
            let closing = start + raw.get().len() - 1;
            out.push((closing, holder.suffix(id.as_bytes())));
        }
    }
}

/// `text` with `insertions` (in order) made.
fn insert(text: &[u8], mut insertions: Vec<Insertion>) -> Vec<u8> {
    insertions.sort_by_key(|(at, _)| *at);
    let mut out = Vec::with_capacity(text.len() + insertions.len() * super::holder_tag::SUFFIX_LEN);
    let mut prev = 0;
    for (at, suffix) in &insertions {
        out.extend_from_slice(&text[prev..*at]);
        out.extend_from_slice(suffix);
        prev = *at;
    }
    out.extend_from_slice(&text[prev..]);
    out
}

/// A JSON answer with its response ids tagged with `holder`; `None` when there is nothing to
/// tag (not JSON, not a response), so the answer goes out as it came.
pub fn tag_json_answer(body: &[u8], holder: &HolderTag) -> Option<Vec<u8>> {
    let ids: ResponseIds<'_> = serde_json::from_slice(body).ok()?;
    let mut insertions = Vec::new();
    ids.insertions(body, holder, &mut insertions);
    (!insertions.is_empty()).then(|| insert(body, insertions))
}

/// One SSE event (its lines and the blank line ending it) with the ids of the response it
/// carries tagged; the event as it came when it carries none or has more than one data line.
pub fn tag_event<'a>(event: &'a [u8], holder: &HolderTag) -> std::borrow::Cow<'a, [u8]> {
    use std::borrow::Cow;
    let mut data = None;
    let mut at = 0;
    for line in event.split_inclusive(|&b| b == b'\n') {
        let start = at;
        at += line.len();
        let Some(value) = line.strip_prefix(b"data:") else {
            continue;
        };
        if data.is_some() {
            return Cow::Borrowed(event);
        }
        let skip = usize::from(value.first() == Some(&b' '));
        let value = &value[skip..];
        let trimmed = value
            .strip_suffix(b"\n")
            .map(|v| v.strip_suffix(b"\r").unwrap_or(v))
            .unwrap_or(value);
        let offset = start + 5 + skip;
        data = Some(offset..offset + trimmed.len());
    }
    let Some(span) = data else {
        return Cow::Borrowed(event);
    };
    let payload = &event[span.clone()];
    let Ok(parsed) = serde_json::from_slice::<EventResponse<'_>>(payload) else {
        return Cow::Borrowed(event);
    };
    let mut insertions = Vec::new();
    if let Some(response) = &parsed.response {
        response.insertions(payload, holder, &mut insertions);
    }
    if insertions.is_empty() {
        return Cow::Borrowed(event);
    }
    for (at, _) in &mut insertions {
        *at += span.start;
    }
    Cow::Owned(insert(event, insertions))
}

/// Most bytes kept while waiting for the end of one event; a longer event goes out as it came.
pub const MAX_EVENT_BYTES: usize = 4 << 20;

/// Tags the response ids of a stream of SSE events arriving in arbitrary pieces: each complete
/// event goes out tagged, the bytes of an unfinished one wait for the rest.
#[derive(Debug)]
pub struct StreamTagger {
    holder: HolderTag,
    pending: Vec<u8>,
    /// How far `pending` has been searched for an event's end.
    searched: usize,
}

impl StreamTagger {
    /// A tagger for a stream answered by the candidate `holder`.
    pub fn new(holder: HolderTag) -> StreamTagger {
        StreamTagger {
            holder,
            pending: Vec::new(),
            searched: 0,
        }
    }

    /// The bytes to send for the next piece of the stream: the events it completes, tagged.
    pub fn push(&mut self, piece: &[u8]) -> Vec<u8> {
        self.pending.extend_from_slice(piece);
        let mut out = Vec::with_capacity(self.pending.len());
        let mut start = 0;
        let mut from = self.searched;
        while let Some(end) = event_end(&self.pending, from) {
            out.extend_from_slice(&tag_event(&self.pending[start..end], &self.holder));
            start = end;
            from = end;
        }
        self.pending.drain(..start);
        if self.pending.len() > MAX_EVENT_BYTES {
            out.append(&mut self.pending);
        }
        // The last two bytes may start an event's end that the next piece finishes.
        self.searched = self.pending.len().saturating_sub(2);
        out
    }

    /// The bytes left at the end of the stream (an event without its blank line), tagged.
    pub fn finish(&mut self) -> Vec<u8> {
        self.searched = 0;
        let rest = std::mem::take(&mut self.pending);
        tag_event(&rest, &self.holder).into_owned()
    }
}

/// The index just past the first blank line ending an event in `text`, searching from `from`.
fn event_end(text: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while let Some(found) = memchr::memchr(b'\n', text.get(i..)?) {
        let nl = i + found;
        match text.get(nl + 1..) {
            Some([b'\n', ..]) => return Some(nl + 2),
            Some([b'\r', b'\n', ..]) => return Some(nl + 3),
            _ => i = nl + 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::holder_tag::untag;
    use super::*;

    fn holder() -> HolderTag {
        HolderTag::of("a", "m")
    }

    #[test]
    fn a_json_response_gets_its_id_and_previous_id_tagged_and_nothing_else() {
        let body = br#"{ "id" : "resp_1", "object":"response","previous_response_id":"resp_0","output":[{"id":"msg_1"}]}"#;
        let out = tag_json_answer(body, &holder()).expect("tagged");
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let id = v["id"].as_str().unwrap();
        assert_eq!(untag(id).unwrap().provider_id, "resp_1");
        let previous = v["previous_response_id"].as_str().unwrap();
        assert_eq!(untag(previous).unwrap().provider_id, "resp_0");
        assert_eq!(v["output"][0]["id"], "msg_1");
        let expected = String::from_utf8_lossy(body)
            .replace("resp_1", id)
            .replace("resp_0", previous);
        assert_eq!(String::from_utf8(out).unwrap(), expected);
    }

    #[test]
    fn answers_that_are_not_responses_are_left_alone() {
        for body in [
            &br#"{"object":"list","data":[{"id":"msg_1"}],"first_id":"msg_1"}"#[..],
            br#"{"error":{"message":"no","code":"previous_response_not_found"}}"#,
            br#"{"id":"chatcmpl-1","object":"chat.completion"}"#,
            br#"{"id":"resp_1","object":"response""#,
            br#"{"id":"resp_1","id":"resp_2","object":"response"}"#,
            b"not json",
            br#"{"id":null,"object":"response"}"#,
        ] {
            assert_eq!(tag_json_answer(body, &holder()), None, "{body:?}");
        }
        let deleted = br#"{"id":"resp_1","object":"response.deleted","deleted":true}"#;
        assert!(tag_json_answer(deleted, &holder()).is_some());
    }

    #[test]
    fn an_escaped_id_is_tagged_over_its_decoded_text() {
        let body = br#"{"id":"resp\u005f1","object":"response"}"#;
        let out = tag_json_answer(body, &holder()).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            untag(v["id"].as_str().unwrap()).unwrap().provider_id,
            "resp_1"
        );
    }

    #[test]
    fn events_carrying_the_response_are_tagged_and_deltas_pass_as_they_came() {
        let created = b"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"object\":\"response\"}}\n\n";
        let delta = b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"delta\":\"hi\"}\n\n";
        let tagged = tag_event(created, &holder());
        let tagged_id = holder().tag("resp_1");
        assert_eq!(
            tagged.as_ref(),
            String::from_utf8_lossy(created)
                .replace("resp_1", &tagged_id)
                .as_bytes()
        );
        assert_eq!(tag_event(delta, &holder()).as_ref(), delta);
        let crlf = b"data:{\"response\":{\"id\":\"resp_1\",\"object\":\"response\"}}\r\n\r\n";
        assert!(String::from_utf8_lossy(&tag_event(crlf, &holder())).contains(&tagged_id));
        let two_lines =
            b"data: {\"response\":\ndata: {\"id\":\"resp_1\",\"object\":\"response\"}}\n\n";
        assert_eq!(tag_event(two_lines, &holder()).as_ref(), two_lines);
    }

    #[test]
    fn a_stream_split_anywhere_is_tagged_as_a_whole() {
        let stream = b"event: response.created\ndata: {\"response\":{\"id\":\"resp_1\",\"object\":\"response\"}}\n\nevent: x\ndata: {\"delta\":\"a\"}\r\n\r\ndata: {\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"completed\"}}\n\n";
        let mut whole = StreamTagger::new(holder());
        let mut expected = whole.push(stream);
        expected.extend(whole.finish());
        assert_eq!(
            expected.len(),
            stream.len() + 2 * super::super::holder_tag::SUFFIX_LEN
        );
        for cut in 0..stream.len() {
            for second in cut..stream.len() {
                let mut tagger = StreamTagger::new(holder());
                let mut out = tagger.push(&stream[..cut]);
                out.extend(tagger.push(&stream[cut..second]));
                out.extend(tagger.push(&stream[second..]));
                out.extend(tagger.finish());
                assert_eq!(out, expected, "cut at {cut} and {second}");
            }
        }
    }
}
