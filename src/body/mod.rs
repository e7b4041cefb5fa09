//! Request-body inspection and the byte-exact model splice.
//!
//! Clients send OpenAI-style JSON bodies naming a model alias. sturnus validates the body as strict
//! RFC 8259 JSON in one pass ([`inspect`]), learns the alias and whether the client wants a stream,
//! and then forwards the body with *only* the bytes of the top-level "model" string value replaced
//! by the chosen provider model ([`Inspected::splice`]); every other byte (key order, whitespace,
//! number text, escapes, nested "model" keys) reaches the provider untouched. A body with two
//! top-level "model" keys is refused: sturnus and the provider could read different ones.
//!
//! The same pass finds the opening messages of a conversation; [`Inspected::conversation_key`]
//! hashes them (on demand: only a request routed by it needs it), so the turns of one conversation
//! can be kept together.

pub mod holder_tag;
pub mod id_splice;
mod opening;
mod scan;
mod strings;

#[cfg(test)]
mod id_proptests;
#[cfg(test)]
mod proptests;

use std::fmt;
use std::ops::Range;

pub use scan::MAX_DEPTH;
pub use strings::{escape_json_string, escaped_len};

/// Why a request body was rejected; Display gives a precise, client-facing message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Not strict RFC 8259 JSON: `reason` describes the problem found at byte `offset`.
    InvalidJson {
        /// Byte offset of the problem.
        offset: usize,
        /// What is wrong there.
        reason: &'static str,
    },
    /// Valid JSON whose top-level value is not an object.
    NotAnObject,
    /// The top-level object has no "model" member.
    MissingModel,
    /// The top-level "model" member is not a string.
    ModelNotString,
    /// More than one top-level "model" member; `offset` is where the second one's value starts.
    DuplicateModel {
        /// Byte offset of the second value.
        offset: usize,
    },
    /// More than one top-level "previous_response_id" member; `offset` is where the second
    /// one's value starts.
    DuplicatePreviousResponseId {
        /// Byte offset of the second value.
        offset: usize,
    },
    /// Containers nest deeper than [`MAX_DEPTH`].
    TooDeep,
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::InvalidJson { offset, reason } => {
                write!(
                    f,
                    "request body is not valid JSON: {reason} at byte {offset}"
                )
            }
            BodyError::NotAnObject => f.write_str("request body must be a JSON object"),
            BodyError::MissingModel => f.write_str("missing required parameter: 'model'"),
            BodyError::ModelNotString => f.write_str("'model' must be a string"),
            BodyError::DuplicateModel { offset } => write!(
                f,
                "duplicate parameter 'model': the request body has more than one top-level \
                 'model' key (another at byte {offset}); send exactly one"
            ),
            BodyError::DuplicatePreviousResponseId { offset } => write!(
                f,
                "duplicate parameter 'previous_response_id': the request body has more than one \
                 top-level 'previous_response_id' key (another at byte {offset}); send at most one"
            ),
            BodyError::TooDeep => write!(
                f,
                "request body is not valid JSON: nesting exceeds {MAX_DEPTH} levels"
            ),
        }
    }
}

impl std::error::Error for BodyError {}

impl BodyError {
    /// The request parameter at fault, for the OpenAI error object's `param` field.
    pub fn param(&self) -> Option<&'static str> {
        match self {
            BodyError::MissingModel
            | BodyError::ModelNotString
            | BodyError::DuplicateModel { .. } => Some("model"),
            BodyError::DuplicatePreviousResponseId { .. } => Some("previous_response_id"),
            _ => None,
        }
    }
}

/// What routing needs to know about a request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspected {
    /// The requested model alias (unescaped), from the top-level "model" member.
    pub model: String,
    /// Whether the last top-level "stream" member is the literal `true`.
    pub stream: bool,
    /// Whether more messages follow the opening ones: a later turn of the conversation, not its
    /// first (always false without a conversation key).
    pub continued: bool,
    /// Whether the opening starts with a system prompt (`system`/`developer` messages): a
    /// conversation's first turn, unlike a lone question (always false without a key).
    pub prompted: bool,
    /// Byte range of the conversation's opening messages, if the request has them and was
    /// inspected for them ([`inspect`]).
    opening: Option<Range<usize>>,
    /// Byte range of the contents (between the quotes) of the top-level "model" string value.
    model_span: Range<usize>,
    /// Byte range of the contents of the top-level "previous_response_id" string value, and
    /// whether they contain escapes.
    previous: Option<(Range<usize>, bool)>,
}

/// Validate a request body and extract the model alias, the stream flag and the conversation key.
pub fn inspect(body: &[u8]) -> Result<Inspected, BodyError> {
    inspect_as::<true>(body)
}

/// As [`inspect`], without looking for a conversation key (`conversation_key` gives `None`): for
/// routing that does not use it, and the baseline of the key's cost in the benchmark.
pub fn inspect_unkeyed(body: &[u8]) -> Result<Inspected, BodyError> {
    inspect_as::<false>(body)
}

fn inspect_as<const KEY: bool>(body: &[u8]) -> Result<Inspected, BodyError> {
    let scan = scan::scan::<KEY>(body)?;
    if !scan.top_is_object {
        return Err(BodyError::NotAnObject);
    }
    if let Some(offset) = scan.duplicate_model_at {
        return Err(BodyError::DuplicateModel { offset });
    }
    if let Some(offset) = scan.duplicate_previous_at {
        return Err(BodyError::DuplicatePreviousResponseId { offset });
    }
    let (span, escaped) = match scan.model {
        None => return Err(BodyError::MissingModel),
        Some(scan::ModelValue::NotString) => return Err(BodyError::ModelNotString),
        Some(scan::ModelValue::Str { span, escaped }) => (span, escaped),
    };
    let bad = BodyError::InvalidJson {
        offset: span.start,
        reason: "invalid string",
    };
    let raw = body.get(span.clone()).ok_or_else(|| bad.clone())?;
    let model = if escaped {
        strings::unescape(raw, usize::MAX).and_then(|v| String::from_utf8(v).ok())
    } else {
        std::str::from_utf8(raw).ok().map(str::to_owned)
    };
    let found = scan
        .opening
        .filter(|found| body.get(found.range.clone()).is_some());
    let opening = found.as_ref().map(|found| found.range.clone());
    Ok(Inspected {
        model: model.ok_or(bad)?,
        stream: scan.stream,
        continued: opening
            .as_ref()
            .is_some_and(|range| followed_by_element(body, range.end)),
        prompted: found.is_some_and(|found| found.led),
        opening,
        model_span: span,
        previous: match scan.previous_response_id {
            Some(scan::ModelValue::Str { span, escaped }) => Some((span, escaped)),
            _ => None,
        },
    })
}

/// Whether the array element ending just before `end` is followed by another one: the next
/// byte other than JSON whitespace is a comma (the body is valid JSON, scanned).
fn followed_by_element(body: &[u8], end: usize) -> bool {
    let rest = body.get(end..).unwrap_or_default();
    rest.iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        .is_some_and(|&b| b == b',')
}

/// Seed of the conversation-key hash: a constant, so every sidecar derives the same key.
const CONVERSATION_SEED: u64 = 0x7374_7572_6e75_7321;

/// Most bytes the conversation key reads from each end of a long opening. The key stays cheap
/// on any body (an opening can be most of a large request), while it still tells conversations
/// apart: the system prompt starts the opening and the first question ends it.
pub const KEY_SPAN: usize = 4096;

/// The 64-bit key of a conversation whose opening messages are the bytes `opening`: a hash of
/// all of them, or, beyond `2 × KEY_SPAN` bytes, of their length and first and last
/// [`KEY_SPAN`] bytes.
pub fn conversation_key(opening: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    let hasher = foldhash::quality::FixedState::with_seed(CONVERSATION_SEED);
    match opening.len() {
        n if n <= 2 * KEY_SPAN => hasher.hash_one(opening),
        n => hasher.hash_one((n, &opening[..KEY_SPAN], &opening[n - KEY_SPAN..])),
    }
}

impl Inspected {
    /// Hash of the conversation's opening messages (the same on every turn of a conversation),
    /// or `None` for a request that has none (embeddings, a string prompt) or was inspected
    /// unkeyed. Computed on each call, for the requests that are routed by it.
    ///
    /// `body` must be the exact bytes given to [`inspect`].
    pub fn conversation_key(&self, body: &[u8]) -> Option<u64> {
        let opening = body.get(self.opening.clone()?)?;
        Some(conversation_key(opening))
    }

    /// Byte range of the contents of the top-level "model" string value (one element).
    pub fn model_spans(&self) -> &[Range<usize>] {
        std::slice::from_ref(&self.model_span)
    }

    /// The top-level "previous_response_id" string (unescaped), when the request has one.
    ///
    /// `body` must be the exact bytes given to [`inspect`].
    pub fn previous_response_id<'b>(&self, body: &'b [u8]) -> Option<std::borrow::Cow<'b, str>> {
        let (span, escaped) = self.previous.clone()?;
        let raw = body.get(span)?;
        if escaped {
            let decoded = strings::unescape(raw, usize::MAX)?;
            String::from_utf8(decoded).ok().map(std::borrow::Cow::Owned)
        } else {
            std::str::from_utf8(raw)
                .ok()
                .map(std::borrow::Cow::Borrowed)
        }
    }

    /// Body with every top-level model string value replaced by `model` (JSON-escaped).
    ///
    /// `body` must be the exact bytes given to [`inspect`].
    pub fn splice(&self, body: &[u8], model: &str) -> Vec<u8> {
        self.splice_as(body, Rewrite::model(model))
    }

    /// Body with the values `rewrite` names replaced (JSON-escaped), every other byte kept.
    ///
    /// `body` must be the exact bytes given to [`inspect`].
    pub fn splice_as(&self, body: &[u8], rewrite: Rewrite<'_>) -> Vec<u8> {
        let edits = self.edits(rewrite);
        let mut out = Vec::with_capacity(self.spliced_len_as(body, rewrite));
        let mut prev = 0;
        for (span, value) in &edits {
            out.extend_from_slice(body.get(prev..span.start).unwrap_or_default());
            out.extend_from_slice(value);
            prev = span.end;
        }
        out.extend_from_slice(body.get(prev..).unwrap_or_default());
        out
    }

    /// The same output as [`Inspected::splice`] as a list of pieces that share `body`'s memory
    /// (the original bytes around each model value, and the new model value between them), so a
    /// large body is sent upstream without a second copy.
    pub fn splice_parts(&self, body: &bytes::Bytes, model: &str) -> Vec<bytes::Bytes> {
        self.splice_parts_as(body, Rewrite::model(model))
    }

    /// [`Inspected::splice_as`] as pieces sharing `body`'s memory (see
    /// [`Inspected::splice_parts`]).
    pub fn splice_parts_as(&self, body: &bytes::Bytes, rewrite: Rewrite<'_>) -> Vec<bytes::Bytes> {
        let edits = self.edits(rewrite);
        let mut parts = Vec::with_capacity(edits.len() * 2 + 1);
        let mut prev = 0;
        for (span, value) in edits {
            if span.start > prev && span.start <= body.len() {
                parts.push(body.slice(prev..span.start));
            }
            parts.push(bytes::Bytes::from(value));
            prev = span.end.min(body.len());
        }
        if prev < body.len() {
            parts.push(body.slice(prev..));
        }
        parts
    }

    /// Byte length of [`Inspected::splice`] output without building it (for Content-Length).
    pub fn spliced_len(&self, body: &[u8], model: &str) -> usize {
        self.spliced_len_as(body, Rewrite::model(model))
    }

    /// Byte length of [`Inspected::splice_as`] output without building it.
    pub fn spliced_len_as(&self, body: &[u8], rewrite: Rewrite<'_>) -> usize {
        let mut removed: usize = self.model_spans().iter().map(|s| s.len()).sum();
        let mut added = self.model_spans().len() * escaped_len(rewrite.model);
        if let (Some(id), Some((span, _))) = (rewrite.previous_response_id, &self.previous) {
            removed += span.len();
            added += escaped_len(id);
        }
        (body.len() + added).saturating_sub(removed)
    }

    /// The spans to replace, in body order, each with its new (escaped) contents.
    fn edits(&self, rewrite: Rewrite<'_>) -> Vec<(Range<usize>, Vec<u8>)> {
        let escape = |s: &str| {
            let mut escaped = Vec::with_capacity(escaped_len(s));
            escape_json_string(s, &mut escaped);
            escaped
        };
        let model = escape(rewrite.model);
        let mut edits: Vec<_> = self
            .model_spans()
            .iter()
            .map(|span| (span.clone(), model.clone()))
            .collect();
        if let (Some(id), Some((span, _))) = (rewrite.previous_response_id, &self.previous) {
            edits.push((span.clone(), escape(id)));
            edits.sort_by_key(|(span, _)| span.start);
        }
        edits
    }
}

/// What the provider's copy of a request body says instead of the client's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rewrite<'a> {
    /// The candidate's model, for the top-level "model".
    pub model: &'a str,
    /// The provider's own id of the held response, for the top-level "previous_response_id"
    /// (`None`: left as the client sent it).
    pub previous_response_id: Option<&'a str>,
}

impl<'a> Rewrite<'a> {
    /// Only the model changes.
    pub fn model(model: &'a str) -> Rewrite<'a> {
        Rewrite {
            model,
            previous_response_id: None,
        }
    }
}

#[cfg(test)]
mod tests;
