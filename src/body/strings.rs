//! JSON string helpers: fast special-byte search, escaping and unescaping.

/// Bytes that end a fast run inside a JSON string: `"`, `\` and control characters.
const fn is_special(c: u8) -> bool {
    c == b'"' || c == b'\\' || c < 0x20
}

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// Bit mask with the high bit set in (at least) the lowest byte of `w` that is special.
///
/// Classic SWAR "has zero / has less" tricks: false positives can only occur in bytes
/// above a true match, so the lowest flagged byte is always exact.
#[inline(always)]
fn special_mask(w: u64) -> u64 {
    let q = w ^ (LO * b'"' as u64);
    let s = w ^ (LO * b'\\' as u64);
    ((q.wrapping_sub(LO) & !q) | (s.wrapping_sub(LO) & !s) | (w.wrapping_sub(LO * 0x20) & !w)) & HI
}

/// Bytes per step of [`find_special`]'s block loop.
const BLOCK: usize = 64;

/// Whether `block` holds a special byte. Each byte maps to 0 exactly when it is special (`"`,
/// `\\` or below 0x20), and the block's minimum is taken: a branch-free fold over a fixed-size
/// array, which the compiler turns into a few vector instructions for the whole block.
#[inline(always)]
fn block_has_special(block: &[u8; BLOCK]) -> bool {
    let zero_if_special = |c: u8| (c ^ b'"').min(c ^ b'\\').min(c.saturating_sub(0x1f));
    block
        .iter()
        .fold(u8::MAX, |lowest, &c| lowest.min(zero_if_special(c)))
        == 0
}

/// Index of the first special byte at or after `from` (or `b.len()` if none), and whether any
/// byte >= 0x80 may precede it (never a false "no", so ASCII-only runs can skip UTF-8 checks);
/// the hot loop of string scanning. Whole [`BLOCK`]s without a special byte are skipped (their
/// words OR-ed together for the high bit), then the special byte is found 8 bytes per step.
#[inline]
pub(super) fn find_special(b: &[u8], from: usize) -> (usize, bool) {
    let Some(rest) = b.get(from..) else {
        return (b.len(), false);
    };
    let (blocks, _) = rest.as_chunks::<BLOCK>();
    let mut skipped = 0;
    let mut seen = 0u64;
    for block in blocks {
        if block_has_special(block) {
            break;
        }
        for word in block.as_chunks::<8>().0 {
            seen |= u64::from_le_bytes(*word);
        }
        skipped += BLOCK;
    }
    // Whole 8-byte arrays, so each word is one load (no per-word slice copy).
    let (words, tail) = rest[skipped..].as_chunks::<8>();
    let mut i = from + skipped;
    for word in words {
        let w = u64::from_le_bytes(*word);
        seen |= w;
        let mask = special_mask(w);
        if mask != 0 {
            return (i + (mask.trailing_zeros() / 8) as usize, seen & HI != 0);
        }
        i += 8;
    }
    let mut high = seen & HI != 0;
    for &c in tail {
        if is_special(c) {
            break;
        }
        high |= c >= 0x80;
        i += 1;
    }
    (i, high)
}

/// Number of bytes `c` occupies once JSON-escaped (kept in sync with `escape_json_string`).
const fn escaped_width(c: u8) -> usize {
    match c {
        b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
        c if c < 0x20 => 6,
        _ => 1,
    }
}

/// Byte length of `s` after JSON escaping, so output sizes are known up front.
pub fn escaped_len(s: &str) -> usize {
    s.bytes().map(escaped_width).sum()
}

/// JSON-escape a model name for insertion between quotes.
pub fn escape_json_string(s: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let b = s.as_bytes();
    let mut run = 0;
    for (i, &c) in b.iter().enumerate() {
        if escaped_width(c) == 1 {
            continue;
        }
        out.extend_from_slice(&b[run..i]);
        run = i + 1;
        let short = match c {
            b'"' => b'"',
            b'\\' => b'\\',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            0x08 => b'b',
            0x0c => b'f',
            _ => {
                let hex = [
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[usize::from(c >> 4)],
                    HEX[usize::from(c & 0xf)],
                ];
                out.extend_from_slice(&hex);
                continue;
            }
        };
        out.extend_from_slice(&[b'\\', short]);
    }
    out.extend_from_slice(&b[run..]);
}

/// Value of four hex digits, or `None` if `d` is not exactly four hex digits.
pub(super) fn hex4(d: &[u8]) -> Option<u32> {
    if d.len() != 4 {
        return None;
    }
    d.iter()
        .try_fold(0u32, |acc, &h| Some(acc * 16 + (h as char).to_digit(16)?))
}

/// Decode the contents of a JSON string (between the quotes) into raw UTF-8 bytes.
///
/// Returns `None` if the contents are malformed (impossible after scanning) or if the
/// decoded form would exceed `max` bytes (lets key comparison stop early).
pub(super) fn unescape(raw: &[u8], max: usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(raw.len().min(max));
    let mut i = 0;
    while i < raw.len() {
        let run_end = raw[i..]
            .iter()
            .position(|&c| c == b'\\')
            .map_or(raw.len(), |p| i + p);
        out.extend_from_slice(&raw[i..run_end]);
        i = run_end;
        if out.len() > max {
            return None;
        }
        if i == raw.len() {
            break;
        }
        let ch = match *raw.get(i + 1)? {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let hi = hex4(raw.get(i + 2..i + 6)?)?;
                i += 6;
                let cp = if (0xD800..0xDC00).contains(&hi) {
                    if raw.get(i..i + 2)? != b"\\u" {
                        return None;
                    }
                    let lo = hex4(raw.get(i + 2..i + 6)?)?;
                    if !(0xDC00..0xE000).contains(&lo) {
                        return None;
                    }
                    i += 6;
                    0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                } else {
                    hi
                };
                let mut buf = [0u8; 4];
                out.extend_from_slice(char::from_u32(cp)?.encode_utf8(&mut buf).as_bytes());
                continue;
            }
            _ => return None,
        };
        i += 2;
        let mut buf = [0u8; 4];
        out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
    }
    (out.len() <= max).then_some(out)
}

/// Whether escaped string contents `raw` decode exactly to `target`.
pub(super) fn decoded_eq(raw: &[u8], target: &[u8]) -> bool {
    unescape(raw, target.len()).as_deref() == Some(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_special_agrees_with_naive_search() {
        let mut data: Vec<u8> = (0u8..=255).collect();
        data.extend_from_slice(b"plain ascii text with no specials at all!");
        for start in 0..data.len() {
            for end in start..data.len().min(start + 40) {
                let slice = &data[start..end];
                let naive = slice
                    .iter()
                    .position(|&c| is_special(c))
                    .unwrap_or(slice.len());
                let (at, high) = find_special(slice, 0);
                assert_eq!(at, naive, "slice {start}..{end}");
                if slice[..at].iter().any(|&c| c >= 0x80) {
                    assert!(high, "missed non-ASCII in {start}..{end}");
                }
            }
        }
        // Each special byte at each position within and past a word.
        for pos in 0..20 {
            for special in [b'"', b'\\', 0x00, 0x1f, b'\n'] {
                let mut v = vec![b'a'; 24];
                v[pos] = special;
                assert_eq!(find_special(&v, 0), (pos, false));
                assert_eq!(find_special(&v, pos + 1), (24, false));
            }
        }
        assert_eq!(find_special(b"abc", 10), (3, false));
        // 0x20, 0x7f and high bytes are not special; high bytes are reported.
        let odd = [0x20, 0x7f, 0x80, 0xff, 0xe9, 0x21, 0x5b, 0x5d, 0x23];
        assert_eq!(find_special(&odd, 0), (9, true));
        assert_eq!(find_special(&odd[4..], 0), (5, true));
        assert_eq!(find_special(b"0123456789abcdef", 0), (16, false));
    }

    #[test]
    fn find_special_agrees_with_naive_search_across_whole_blocks() {
        for len in [63, 64, 65, 128, 150, 260] {
            for pos in 0..len {
                for special in [b'"', b'\\', 0x00, 0x1f] {
                    let mut v = vec![b'a'; len];
                    v[pos] = special;
                    assert_eq!(find_special(&v, 0), (pos, false), "len {len} at {pos}");
                    assert_eq!(
                        find_special(&v, pos + 1),
                        (len, false),
                        "len {len} after {pos}"
                    );
                }
                let mut high = vec![b' '; len];
                high[pos] = 0xc3;
                assert_eq!(
                    find_special(&high, 0),
                    (len, true),
                    "len {len}, high at {pos}"
                );
                assert_eq!(find_special(&high, pos + 1), (len, false));
                high.push(b'"');
                assert_eq!(
                    find_special(&high, 0),
                    (len, true),
                    "len {len}, high at {pos}"
                );
            }
        }
    }

    #[test]
    fn escape_covers_quotes_backslashes_and_controls() {
        let mut out = Vec::new();
        escape_json_string("a\"b\\c\nd\re\tf\u{8}\u{c}\u{1}\u{1f}é/\u{7f}", &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "a\\\"b\\\\c\\nd\\re\\tf\\b\\f\\u0001\\u001fé/\u{7f}"
        );
    }

    #[test]
    fn escaped_len_matches_escape_output_for_every_byte() {
        for c in 0u8..0x80 {
            let s = (c as char).to_string();
            let mut out = Vec::new();
            escape_json_string(&s, &mut out);
            assert_eq!(out.len(), escaped_len(&s), "byte {c:#x}");
        }
        let mut out = Vec::new();
        escape_json_string("gpt-4o-mini", &mut out);
        assert_eq!(out, b"gpt-4o-mini");
    }

    #[test]
    fn unescape_decodes_every_escape_form() {
        let raw = br#"a\"\\\/\b\f\n\r\t\u00e9\u00E9\ud83d\ude00z"#;
        let got = unescape(raw, usize::MAX).unwrap();
        assert_eq!(
            String::from_utf8(got).unwrap(),
            "a\"\\/\u{8}\u{c}\n\r\té\u{e9}\u{1f600}z"
        );
    }

    #[test]
    fn unescape_rejects_malformed_and_oversized() {
        assert_eq!(unescape(br"\x", usize::MAX), None);
        assert_eq!(unescape(br"\u12", usize::MAX), None);
        assert_eq!(unescape(br"\ud800", usize::MAX), None);
        assert_eq!(unescape(br"\ud800\u0041", usize::MAX), None);
        assert_eq!(unescape(br"\udc00", usize::MAX), None);
        assert_eq!(unescape(b"\\", usize::MAX), None);
        assert_eq!(unescape(b"abcdef", 5), None);
        assert_eq!(unescape(b"abcde", 5).as_deref(), Some(&b"abcde"[..]));
    }

    #[test]
    fn decoded_eq_compares_unescaped_text() {
        assert!(decoded_eq(br"mod\u0065l", b"model"));
        assert!(decoded_eq(br"\u006D\u006f\u0064\u0065\u006c", b"model"));
        assert!(!decoded_eq(br"mod\u0065ls", b"model"));
        assert!(!decoded_eq(br"mod\u0065", b"model"));
        assert!(!decoded_eq(br"Mod\u0065l", b"model"));
    }

    #[test]
    fn hex4_parses_both_cases_and_rejects_junk() {
        assert_eq!(hex4(b"00e9"), Some(0xe9));
        assert_eq!(hex4(b"FFFF"), Some(0xffff));
        assert_eq!(hex4(b"00g9"), None);
        assert_eq!(hex4(b"+0e9"), None);
        assert_eq!(hex4(b"123"), None);
    }
}
