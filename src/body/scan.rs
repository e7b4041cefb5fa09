//! Single-pass strict RFC 8259 validator that records the top-level "model" and "stream" members
//! and the opening messages of a conversation.
//!
//! Iterative (explicit container stack in a `u128` bitset), so hostile nesting cannot overflow the
//! call stack; allocates nothing.

use super::opening::{Found, Opening};
use super::strings::{decoded_eq, find_special};
use super::BodyError;
use std::ops::Range;

/// Deepest container nesting accepted (serde_json's own limit is 127).
pub const MAX_DEPTH: usize = 128;

/// The value of the top-level "model" member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ModelValue {
    /// A string; `span` covers its contents, `escaped` says whether they contain escapes.
    Str { span: Range<usize>, escaped: bool },
    /// Any non-string value.
    NotString,
}

/// Top-level facts gathered while validating a document.
#[derive(Debug, Default)]
pub(super) struct Scan {
    /// Whether the top-level value is an object.
    pub top_is_object: bool,
    /// The first top-level "model" member, if any.
    pub model: Option<ModelValue>,
    /// Byte offset of the value of a second top-level "model" member, if there is one.
    pub duplicate_model_at: Option<usize>,
    /// Whether the last top-level "stream" member is the literal `true`.
    pub stream: bool,
    /// The first top-level "previous_response_id" member, if any (a Responses API follow-up).
    pub previous_response_id: Option<ModelValue>,
    /// Byte offset of the value of a second top-level "previous_response_id", if there is one.
    pub duplicate_previous_at: Option<usize>,
    /// The conversation's opening messages (see [`Opening`]), if it has them.
    pub opening: Option<Found>,
}

/// Which interesting key a member value belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    Other,
    Model,
    Stream,
    /// Top-level "previous_response_id".
    Previous,
    /// Top-level "messages" or "input": a conversation's message list.
    Conversation,
    /// "role" of a message in the conversation's list.
    Role,
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
    depth: usize,
    /// Bit `d` set when the container at depth `d + 1` is an object.
    objects: u128,
}

/// Validate `b` as one strict JSON text and collect the top-level facts routing needs; the
/// conversation's opening too when `OPENING`.
pub(super) fn scan<const OPENING: bool>(b: &[u8]) -> Result<Scan, BodyError> {
    let mut s = Scanner {
        b,
        i: 0,
        depth: 0,
        objects: 0,
    };
    let mut out = Scan::default();
    let mut opening = Opening::default();
    let mut pending = Key::Other;
    s.skip_ws();
    out.top_is_object = s.peek() == Some(b'{');
    'value: loop {
        s.skip_ws();
        let key = std::mem::replace(&mut pending, Key::Other);
        let Some(c) = s.peek() else {
            return Err(s.fail(s.i, "unexpected end of input"));
        };
        match key {
            Key::Model if out.model.is_some() => {
                out.duplicate_model_at.get_or_insert(s.i);
            }
            Key::Model if c != b'"' => out.model = Some(ModelValue::NotString),
            Key::Stream => out.stream = c == b't',
            Key::Previous if out.previous_response_id.is_some() => {
                out.duplicate_previous_at.get_or_insert(s.i);
            }
            Key::Previous if c != b'"' => out.previous_response_id = Some(ModelValue::NotString),
            Key::Conversation => opening.list_starts(c == b'['),
            _ if OPENING && s.depth == 2 && opening.in_list() => {
                opening.message_starts(c == b'{', s.i)
            }
            _ => {}
        }
        match c {
            b'{' => {
                s.push(true)?;
                s.skip_ws();
                match s.peek() {
                    Some(b'}') => {
                        s.pop();
                        if OPENING {
                            opening.closed(s.depth, s.i);
                        }
                    }
                    Some(b'"') => {
                        pending = s.member_key::<OPENING>(opening.in_list())?;
                        continue 'value;
                    }
                    _ => return Err(s.fail(s.i, "expected '\"' or '}'")),
                }
            }
            b'[' => {
                s.push(false)?;
                s.skip_ws();
                if s.peek() == Some(b']') {
                    s.pop();
                    if OPENING {
                        opening.closed(s.depth, s.i);
                    }
                } else {
                    continue 'value;
                }
            }
            b'"' => {
                let (span, escaped) = s.string()?;
                match key {
                    Key::Model if out.duplicate_model_at.is_none() => {
                        out.model = Some(ModelValue::Str { span, escaped });
                    }
                    Key::Previous if out.duplicate_previous_at.is_none() => {
                        out.previous_response_id = Some(ModelValue::Str { span, escaped });
                    }
                    Key::Role => {
                        let is = |name: &[u8]| spelled(&b[span.clone()], escaped, name);
                        opening.role(is(b"system") || is(b"developer"));
                    }
                    _ => {}
                }
            }
            b't' => s.literal(b"true")?,
            b'f' => s.literal(b"false")?,
            b'n' => s.literal(b"null")?,
            b'-' | b'0'..=b'9' => s.number()?,
            _ if s.i == 0 && b.starts_with(b"\xEF\xBB\xBF") => {
                return Err(s.fail(0, "byte order mark is not allowed"))
            }
            _ => return Err(s.fail(s.i, "unexpected character")),
        }
        // A value just ended: close containers until one continues with ','.
        while s.depth > 0 {
            s.skip_ws();
            let in_object = s.objects >> (s.depth - 1) & 1 == 1;
            match s.peek() {
                Some(b',') => {
                    s.i += 1;
                    if in_object {
                        s.skip_ws();
                        if s.peek() != Some(b'"') {
                            return Err(s.fail(s.i, "expected '\"' after ','"));
                        }
                        pending = s.member_key::<OPENING>(opening.in_list())?;
                    }
                    continue 'value;
                }
                Some(b'}') if in_object => s.pop(),
                Some(b']') if !in_object => s.pop(),
                _ if in_object => return Err(s.fail(s.i, "expected ',' or '}'")),
                _ => return Err(s.fail(s.i, "expected ',' or ']'")),
            }
            if OPENING {
                opening.closed(s.depth, s.i);
            }
        }
        break;
    }
    s.skip_ws();
    if s.i != b.len() {
        return Err(s.fail(s.i, "trailing characters after JSON value"));
    }
    out.opening = opening.found();
    Ok(out)
}

/// Whether string contents `raw` (with escapes when `escaped`) spell `name`.
fn spelled(raw: &[u8], escaped: bool, name: &[u8]) -> bool {
    if escaped {
        decoded_eq(raw, name)
    } else {
        raw == name
    }
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// Error at byte `at`; past the end it always reads "unexpected end of input".
    fn fail(&self, at: usize, reason: &'static str) -> BodyError {
        if at >= self.b.len() {
            BodyError::InvalidJson {
                offset: self.b.len(),
                reason: "unexpected end of input",
            }
        } else {
            BodyError::InvalidJson { offset: at, reason }
        }
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    /// Enter a container whose opening byte is at `self.i`.
    fn push(&mut self, object: bool) -> Result<(), BodyError> {
        if self.depth == MAX_DEPTH {
            return Err(BodyError::TooDeep);
        }
        self.objects = (self.objects & !(1 << self.depth)) | (u128::from(object) << self.depth);
        self.depth += 1;
        self.i += 1;
        Ok(())
    }

    /// Leave a container whose closing byte is at `self.i`.
    fn pop(&mut self) {
        self.depth -= 1;
        self.i += 1;
    }

    /// Parse an object key at `self.i` (a '"') plus the following ':'; classify top-level keys,
    /// and (when `OPENING`) the conversation's list and "role" in its messages when `in_list`.
    fn member_key<const OPENING: bool>(&mut self, in_list: bool) -> Result<Key, BodyError> {
        let (span, escaped) = self.string()?;
        let is = |name: &[u8]| spelled(&self.b[span.clone()], escaped, name);
        let key = match self.depth {
            1 if is(b"model") => Key::Model,
            1 if is(b"stream") => Key::Stream,
            1 if is(b"previous_response_id") => Key::Previous,
            1 if OPENING && (is(b"messages") || is(b"input")) => Key::Conversation,
            3 if OPENING && in_list && is(b"role") => Key::Role,
            _ => Key::Other,
        };
        self.skip_ws();
        if self.peek() != Some(b':') {
            return Err(self.fail(self.i, "expected ':' after object key"));
        }
        self.i += 1;
        Ok(key)
    }

    /// Scan a string starting at the '"' at `self.i`; returns its contents' span and whether
    /// they contain escapes.
    fn string(&mut self) -> Result<(Range<usize>, bool), BodyError> {
        let start = self.i + 1;
        let mut i = start;
        let mut escaped = false;
        let mut non_ascii = false;
        loop {
            let (at, high) = find_special(self.b, i);
            i = at;
            non_ascii |= high;
            match self.b.get(i) {
                Some(b'"') => break,
                Some(b'\\') => {
                    escaped = true;
                    i = self.escape(i)?;
                }
                Some(_) => return Err(self.fail(i, "control character in string")),
                None => return Err(self.fail(i, "unterminated string")),
            }
        }
        if non_ascii {
            if let Err(e) = std::str::from_utf8(&self.b[start..i]) {
                return Err(self.fail(start + e.valid_up_to(), "invalid UTF-8 in string"));
            }
        }
        self.i = i + 1;
        Ok((start..i, escaped))
    }

    /// Validate the escape sequence whose '\' is at `i`; returns the index just past it.
    fn escape(&self, i: usize) -> Result<usize, BodyError> {
        match self.b.get(i + 1) {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(i + 2),
            Some(b'u') => {
                let cp = self.hex4(i + 2)?;
                if (0xDC00..0xE000).contains(&cp) {
                    return Err(self.fail(i, "lone low surrogate in unicode escape"));
                }
                if !(0xD800..0xDC00).contains(&cp) {
                    return Ok(i + 6);
                }
                if self.b.get(i + 6) != Some(&b'\\') || self.b.get(i + 7) != Some(&b'u') {
                    return Err(self.fail(i, "lone high surrogate in unicode escape"));
                }
                let low = self.hex4(i + 8)?;
                if !(0xDC00..0xE000).contains(&low) {
                    return Err(self.fail(i, "lone high surrogate in unicode escape"));
                }
                Ok(i + 12)
            }
            _ => Err(self.fail(i, "invalid escape sequence")),
        }
    }

    /// Four hex digits starting at `at`.
    fn hex4(&self, at: usize) -> Result<u32, BodyError> {
        let mut cp = 0;
        for k in at..at + 4 {
            match self.b.get(k).and_then(|&h| (h as char).to_digit(16)) {
                Some(d) => cp = cp * 16 + d,
                None => return Err(self.fail(k, "invalid unicode escape")),
            }
        }
        Ok(cp)
    }

    /// Match the literal `lit` at `self.i`.
    fn literal(&mut self, lit: &[u8]) -> Result<(), BodyError> {
        for (k, &want) in lit.iter().enumerate() {
            if self.b.get(self.i + k) != Some(&want) {
                return Err(self.fail(self.i + k, "invalid literal"));
            }
        }
        self.i += lit.len();
        Ok(())
    }

    /// Index just past the run of ASCII digits starting at `i`.
    fn digits(&self, mut i: usize) -> usize {
        while let Some(b'0'..=b'9') = self.b.get(i) {
            i += 1;
        }
        i
    }

    /// Scan a number at `self.i`: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    fn number(&mut self) -> Result<(), BodyError> {
        let mut i = self.i;
        if self.b.get(i) == Some(&b'-') {
            i += 1;
        }
        match self.b.get(i) {
            Some(b'0') => {
                i += 1;
                if let Some(b'0'..=b'9') = self.b.get(i) {
                    return Err(self.fail(i - 1, "leading zeros are not allowed"));
                }
            }
            Some(b'1'..=b'9') => i = self.digits(i + 1),
            _ => return Err(self.fail(i, "expected digit in number")),
        }
        if self.b.get(i) == Some(&b'.') {
            let end = self.digits(i + 1);
            if end == i + 1 {
                return Err(self.fail(end, "expected digit after decimal point"));
            }
            i = end;
        }
        if let Some(b'e' | b'E') = self.b.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = self.b.get(i) {
                i += 1;
            }
            let end = self.digits(i);
            if end == i {
                return Err(self.fail(end, "expected digit in exponent"));
            }
            i = end;
        }
        self.i = i;
        Ok(())
    }
}
