//! W3C Trace Context (`traceparent`, `tracestate`) and the `x-request-id` of each request.
//!
//! sturnus is one span in the caller's trace: a valid incoming `traceparent` keeps its trace-id
//! and flags, sturnus's own span id becomes the parent-id sent upstream, and `tracestate` passes
//! unchanged. An absent or invalid header (wrong length, uppercase hex, all-zero ids, version
//! `ff`, several headers) starts a new trace with random ids; the stale `tracestate` is dropped.

use crate::routing::{RngSource, ThreadRng};
use http::HeaderName;

/// Request header carrying the trace context.
pub const TRACEPARENT: &str = "traceparent";
/// Request header carrying vendor-specific trace state, forwarded unchanged.
pub const TRACESTATE: &str = "tracestate";
/// Request and response header carrying the request's id.
pub const REQUEST_ID: &str = "x-request-id";
/// [`TRACEPARENT`] as a header name, for inserting without parsing the name each time.
pub static TRACEPARENT_NAME: HeaderName = HeaderName::from_static(TRACEPARENT);
/// [`TRACESTATE`] as a header name.
pub static TRACESTATE_NAME: HeaderName = HeaderName::from_static(TRACESTATE);
/// [`REQUEST_ID`] as a header name.
pub static REQUEST_ID_NAME: HeaderName = HeaderName::from_static(REQUEST_ID);

/// Longest client-supplied `x-request-id` sturnus keeps (longer ones are replaced).
const MAX_REQUEST_ID: usize = 128;

/// Flags of a trace sturnus starts: sampled, since the access log records the span.
const NEW_TRACE_FLAGS: u8 = 0x01;

/// One request's place in a distributed trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// The trace this request belongs to (never all zero).
    pub trace_id: [u8; 16],
    /// sturnus's own span: the parent-id the provider receives (never all zero).
    pub span_id: [u8; 8],
    /// The caller's span, when a valid `traceparent` came in.
    pub parent_id: Option<[u8; 8]>,
    /// Trace flags, kept from the caller.
    pub flags: u8,
}

/// The fields of a valid `traceparent` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// 16-byte trace id.
    pub trace_id: [u8; 16],
    /// 8-byte parent (caller's span) id.
    pub parent_id: [u8; 8],
    /// Trace flags.
    pub flags: u8,
}

impl TraceContext {
    /// A new trace with random ids (no caller context).
    pub fn new_root() -> TraceContext {
        let mut rng = ThreadRng;
        TraceContext {
            trace_id: nonzero_bytes(&mut rng),
            span_id: nonzero_bytes(&mut rng),
            parent_id: None,
            flags: NEW_TRACE_FLAGS,
        }
    }

    /// Continues the caller's trace, or starts a new one when `values` (every `traceparent`
    /// header of the request) is not exactly one valid header.
    pub fn from_headers<'a>(mut values: impl Iterator<Item = &'a [u8]>) -> TraceContext {
        let parsed = match (values.next(), values.next()) {
            (Some(only), None) => std::str::from_utf8(only).ok().and_then(parse),
            _ => None,
        };
        match parsed {
            Some(p) => TraceContext {
                trace_id: p.trace_id,
                span_id: nonzero_bytes(&mut ThreadRng),
                parent_id: Some(p.parent_id),
                flags: p.flags,
            },
            None => TraceContext::new_root(),
        }
    }

    /// Whether this continues a caller's trace (so its `tracestate` belongs to it).
    pub fn continued(&self) -> bool {
        self.parent_id.is_some()
    }

    /// The `traceparent` sent upstream: same trace, sturnus's span as the parent.
    pub fn traceparent(&self) -> String {
        let mut out = Vec::with_capacity(55);
        out.extend_from_slice(b"00-");
        push_hex(&mut out, &self.trace_id);
        out.push(b'-');
        push_hex(&mut out, &self.span_id);
        out.push(b'-');
        push_hex(&mut out, &[self.flags]);
        ascii_string(out)
    }

    /// The trace id as 32 lowercase hex digits.
    pub fn trace_id_hex(&self) -> Hex<32> {
        Hex::of(&self.trace_id)
    }

    /// sturnus's span id as 16 lowercase hex digits.
    pub fn span_id_hex(&self) -> Hex<16> {
        Hex::of(&self.span_id)
    }

    /// The caller's span id as 16 lowercase hex digits, if there was one.
    pub fn parent_id_hex(&self) -> Option<Hex<16>> {
        self.parent_id.as_ref().map(|p| Hex::of(p))
    }
}

/// Parses a `traceparent` value per W3C Trace Context level 1; `None` when it is invalid.
/// Versions above `00` are read by their first four fields, as the spec asks.
pub fn parse(value: &str) -> Option<TraceParent> {
    let b = value.as_bytes();
    if b.len() < 55 {
        return None;
    }
    let [version] = hex_array::<1>(&b[0..2])?;
    if version == 0xff || (version == 0 && b.len() != 55) || (b.len() > 55 && b[55] != b'-') {
        return None;
    }
    if b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
        return None;
    }
    let trace_id: [u8; 16] = hex_array(&b[3..35])?;
    let parent_id: [u8; 8] = hex_array(&b[36..52])?;
    let [flags] = hex_array::<1>(&b[53..55])?;
    if trace_id == [0; 16] || parent_id == [0; 8] {
        return None;
    }
    Some(TraceParent {
        trace_id,
        parent_id,
        flags,
    })
}

/// The request id to use: the client's `x-request-id` when it is short, printable and safe to
/// log (`[A-Za-z0-9._:/+=-]`, at most 128 bytes), otherwise a fresh random one.
pub fn request_id(client: Option<&[u8]>) -> String {
    match client {
        Some(v) if is_safe_id(v) => String::from_utf8_lossy(v).into_owned(),
        _ => new_request_id(),
    }
}

/// Whether an id from elsewhere (client or provider) may be echoed and logged as it is.
pub fn is_safe_id(v: &[u8]) -> bool {
    !v.is_empty()
        && v.len() <= MAX_REQUEST_ID
        && v.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"._:/+=-".contains(c))
}

/// A random request id in the UUID v4 text form.
pub fn new_request_id() -> String {
    let mut rng = ThreadRng;
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&rng.next_u64().to_le_bytes());
    b[8..].copy_from_slice(&rng.next_u64().to_le_bytes());
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    // The text is built on the stack and copied into the string once.
    let mut text = [b'-'; 36];
    let mut at = 0;
    for group in [&b[0..4], &b[4..6], &b[6..8], &b[8..10], &b[10..16]] {
        let end = at + group.len() * 2;
        // The slice is exactly twice the group's length, which is all `encode_to_slice` asks.
        let _ = hex::encode_to_slice(group, &mut text[at..end]);
        at = end + 1;
    }
    ascii_string(text.to_vec())
}

/// `N` random bytes, never all zero (an all-zero id is invalid in W3C Trace Context).
fn nonzero_bytes<const N: usize>(rng: &mut impl RngSource) -> [u8; N] {
    let mut out = [0u8; N];
    while out == [0u8; N] {
        for chunk in out.chunks_mut(8) {
            let r = rng.next_u64().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
    }
    out
}

/// Appends `bytes` as lowercase hex.
fn push_hex(out: &mut Vec<u8>, bytes: &[u8]) {
    let start = out.len();
    out.resize(start + bytes.len() * 2, 0);
    // The slice is exactly twice the input's length, which is all `encode_to_slice` asks.
    let _ = hex::encode_to_slice(bytes, &mut out[start..]);
}

/// `N` lowercase hex digits, kept on the stack: the access line writes three ids per request.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Hex<const N: usize>([u8; N]);

impl<const N: usize> Hex<N> {
    /// The digits of `bytes` (`N / 2` of them).
    fn of(bytes: &[u8]) -> Self {
        let mut out = [b'0'; N];
        // `bytes` holds exactly `N / 2` bytes at every call site.
        let _ = hex::encode_to_slice(bytes, &mut out);
        Hex(out)
    }
}

impl<const N: usize> std::ops::Deref for Hex<N> {
    type Target = str;

    fn deref(&self) -> &str {
        // Only hex digits are ever written.
        std::str::from_utf8(&self.0).unwrap_or("")
    }
}

impl<const N: usize> PartialEq<&str> for Hex<N> {
    fn eq(&self, other: &&str) -> bool {
        &**self == *other
    }
}

impl<const N: usize> std::fmt::Debug for Hex<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

/// A string from bytes this module wrote (hex digits and dashes: always ASCII).
fn ascii_string(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_default()
}

/// Bytes from lowercase hex digits (uppercase is invalid in `traceparent`).
fn hex_array<const N: usize>(digits: &[u8]) -> Option<[u8; N]> {
    if !digits
        .iter()
        .all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
    {
        return None;
    }
    let mut out = [0u8; N];
    hex::decode_to_slice(digits, &mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_header_is_continued_with_a_new_span() {
        let ctx = TraceContext::from_headers([VALID.as_bytes()].into_iter());
        assert_eq!(ctx.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(ctx.parent_id_hex().as_deref(), Some("00f067aa0ba902b7"));
        assert_ne!(ctx.span_id_hex(), "00f067aa0ba902b7");
        assert!(ctx.continued());
        let out = ctx.traceparent();
        assert_eq!(&out[..36], &VALID[..36]);
        assert_eq!(&out[52..], "-01");
        assert_eq!(parse(&out).unwrap().parent_id, ctx.span_id);
    }

    #[test]
    fn flags_are_kept() {
        let v = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        let ctx = TraceContext::from_headers([v.as_bytes()].into_iter());
        assert!(ctx.traceparent().ends_with("-00"));
    }

    #[test]
    fn invalid_headers_are_rejected() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-011",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz",
            "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn future_versions_are_read_by_their_first_fields() {
        let v = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds";
        assert!(parse(v).is_some());
        assert!(parse(&v[..55]).is_some());
    }

    #[test]
    fn absent_invalid_or_repeated_headers_start_a_new_valid_trace() {
        let fresh = [
            TraceContext::from_headers(std::iter::empty()),
            TraceContext::from_headers([b"garbage".as_slice()].into_iter()),
            TraceContext::from_headers([VALID.as_bytes(), VALID.as_bytes()].into_iter()),
        ];
        for ctx in fresh {
            assert!(!ctx.continued());
            let p = parse(&ctx.traceparent()).expect("valid");
            assert_ne!(p.trace_id, [0; 16]);
            assert_ne!(ctx.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        }
        let a = TraceContext::new_root();
        let b = TraceContext::new_root();
        assert_ne!(a.trace_id, b.trace_id);
    }

    #[test]
    fn ids_are_lowercase_hex_in_their_textual_forms() {
        assert_eq!(Hex::<8>::of(&[0x00, 0xab, 0x0f, 0xf0]), "00ab0ff0");
        let ctx = TraceContext {
            trace_id: [0xab; 16],
            span_id: [0x01; 8],
            parent_id: None,
            flags: 0x0c,
        };
        assert_eq!(
            ctx.traceparent(),
            format!("00-{}-{}-0c", "ab".repeat(16), "01".repeat(8))
        );
        let id = new_request_id();
        let groups: Vec<&str> = id.split('-').collect();
        assert_eq!(
            groups.iter().map(|g| g.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(groups
            .iter()
            .all(|g| g.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))));
        assert!(matches!(groups[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'));
    }

    #[test]
    fn request_ids_are_kept_when_safe_and_generated_otherwise() {
        assert_eq!(request_id(Some(b"req-123_abc")), "req-123_abc");
        for bad in [
            b"".as_slice(),
            b"has space",
            b"new\nline",
            b"quote\"",
            &[b'a'; 129],
        ] {
            let id = request_id(Some(bad));
            assert_eq!(id.len(), 36, "{id}");
            assert!(is_safe_id(id.as_bytes()));
        }
        let id = request_id(None);
        assert_eq!(id.as_bytes()[14], b'4');
        assert_ne!(id, request_id(None));
    }
}
