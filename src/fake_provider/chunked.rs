//! Incremental decoder for `Transfer-Encoding: chunked` request bodies.

/// Why a chunked body could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChunkedError {
    /// A size line, a chunk terminator or a trailer line is malformed.
    Malformed,
    /// The decoded body would exceed the allowed size.
    TooLarge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Expecting `hex-size[;ext]\r\n`.
    Size,
    /// Inside chunk data with this many bytes left.
    Data(u64),
    /// Expecting the `\r\n` after chunk data.
    DataEnd,
    /// After the last (zero) chunk: trailer lines until an empty line.
    Trailers,
    /// The body is complete.
    Done,
}

/// Longest size or trailer line accepted before calling the body malformed.
const MAX_LINE: usize = 8 * 1024;

/// Decodes a chunked body fed in arbitrary pieces.
#[derive(Debug)]
pub(crate) struct ChunkedDecoder {
    state: State,
    limit: usize,
}

impl ChunkedDecoder {
    /// A decoder that refuses bodies longer than `limit` bytes.
    pub(crate) fn new(limit: usize) -> ChunkedDecoder {
        ChunkedDecoder {
            state: State::Size,
            limit,
        }
    }

    /// Whether the terminating chunk and trailers have been seen.
    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes as much of `input` as possible, appending body bytes to `out`.
    ///
    /// Returns how many bytes of `input` were consumed; unconsumed bytes must be offered again
    /// (with more appended) on the next call. Stops consuming once the body is complete, so
    /// bytes of a pipelined next request are left alone.
    pub(crate) fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, ChunkedError> {
        let mut pos = 0;
        loop {
            let rest = &input[pos..];
            match self.state {
                State::Done => return Ok(pos),
                State::Size => match httparse::parse_chunk_size(rest) {
                    Ok(httparse::Status::Complete((used, size))) => {
                        pos += used;
                        self.state = if size == 0 {
                            State::Trailers
                        } else {
                            let total = (out.len() as u64).saturating_add(size);
                            if total > self.limit as u64 {
                                return Err(ChunkedError::TooLarge);
                            }
                            State::Data(size)
                        };
                    }
                    Ok(httparse::Status::Partial) => return short_line(rest, pos),
                    Err(_) => return Err(ChunkedError::Malformed),
                },
                State::Data(left) => {
                    if rest.is_empty() {
                        return Ok(pos);
                    }
                    let take = usize::try_from(left).unwrap_or(usize::MAX).min(rest.len());
                    out.extend_from_slice(&rest[..take]);
                    pos += take;
                    let left = left - take as u64;
                    self.state = if left == 0 {
                        State::DataEnd
                    } else {
                        State::Data(left)
                    };
                }
                State::DataEnd => {
                    if rest.len() < 2 {
                        return Ok(pos);
                    }
                    if &rest[..2] != b"\r\n" {
                        return Err(ChunkedError::Malformed);
                    }
                    pos += 2;
                    self.state = State::Size;
                }
                State::Trailers => match rest.windows(2).position(|w| w == b"\r\n") {
                    Some(0) => {
                        pos += 2;
                        self.state = State::Done;
                    }
                    Some(end) => pos += end + 2,
                    None => return short_line(rest, pos),
                },
            }
        }
    }
}

/// Waits for more bytes of an unfinished line unless it is already unreasonably long.
fn short_line(rest: &[u8], pos: usize) -> Result<usize, ChunkedError> {
    if rest.len() > MAX_LINE {
        Err(ChunkedError::Malformed)
    } else {
        Ok(pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode_all(input: &[u8]) -> Result<(Vec<u8>, usize), ChunkedError> {
        let mut d = ChunkedDecoder::new(1 << 20);
        let mut out = Vec::new();
        let used = d.feed(input, &mut out)?;
        assert!(d.is_done(), "body should be complete");
        Ok((out, used))
    }

    #[test]
    fn decodes_chunks_with_extensions_and_trailers() {
        let input = b"5;name=v\r\nhello\r\n6\r\n world\r\n0\r\nx-trailer: 1\r\n\r\nNEXT";
        let (body, used) = decode_all(input).expect("valid");
        assert_eq!(body, b"hello world");
        assert_eq!(&input[used..], b"NEXT");
    }

    #[test]
    fn accepts_uppercase_hex() {
        let (body, _) = decode_all(b"A\r\n0123456789\r\n0\r\n\r\n").expect("valid");
        assert_eq!(body, b"0123456789");
    }

    #[test]
    fn byte_by_byte_feeding_matches_whole_feeding() {
        let input = b"3\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n";
        let mut d = ChunkedDecoder::new(1024);
        let mut out = Vec::new();
        let mut pending = Vec::new();
        for &b in input.iter() {
            pending.push(b);
            let used = d.feed(&pending, &mut out).expect("valid");
            pending.drain(..used);
        }
        assert!(d.is_done());
        assert!(pending.is_empty());
        assert_eq!(out, b"abc0123456789abcdef");
    }

    #[test]
    fn rejects_malformed_input() {
        let mut out = Vec::new();
        assert_eq!(
            ChunkedDecoder::new(1024).feed(b"zz\r\n", &mut out),
            Err(ChunkedError::Malformed)
        );
        assert_eq!(
            ChunkedDecoder::new(1024).feed(b"3\r\nabcXX", &mut out),
            Err(ChunkedError::Malformed)
        );
        let endless = vec![b'1'; MAX_LINE + 10];
        assert_eq!(
            ChunkedDecoder::new(1024).feed(&endless, &mut out),
            Err(ChunkedError::Malformed)
        );
    }

    #[test]
    fn enforces_the_size_limit() {
        let mut out = Vec::new();
        assert_eq!(
            ChunkedDecoder::new(4).feed(b"5\r\nhello\r\n0\r\n\r\n", &mut out),
            Err(ChunkedError::TooLarge)
        );
        assert_eq!(
            ChunkedDecoder::new(4).feed(b"ffffffffffffffff\r\n", &mut out),
            Err(ChunkedError::TooLarge)
        );
    }

    fn encode(body: &[u8], sizes: &[usize]) -> Vec<u8> {
        let mut enc = Vec::new();
        let mut rest = body;
        let mut i = 0;
        while !rest.is_empty() {
            let n = sizes[i % sizes.len()].clamp(1, rest.len());
            enc.extend_from_slice(format!("{n:x}\r\n").as_bytes());
            enc.extend_from_slice(&rest[..n]);
            enc.extend_from_slice(b"\r\n");
            rest = &rest[n..];
            i += 1;
        }
        enc.extend_from_slice(b"0\r\n\r\n");
        enc
    }

    proptest! {
        #[test]
        fn round_trips_any_chunking_and_any_split(
            body in proptest::collection::vec(any::<u8>(), 0..2000),
            sizes in proptest::collection::vec(1usize..300, 1..8),
            splits in proptest::collection::vec(1usize..64, 1..16),
        ) {
            let enc = encode(&body, &sizes);
            let mut d = ChunkedDecoder::new(1 << 20);
            let mut out = Vec::new();
            let mut pending: Vec<u8> = Vec::new();
            let mut offered = 0;
            let mut i = 0;
            while offered < enc.len() {
                let n = splits[i % splits.len()].min(enc.len() - offered);
                pending.extend_from_slice(&enc[offered..offered + n]);
                offered += n;
                i += 1;
                let used = d.feed(&pending, &mut out).expect("valid encoding");
                pending.drain(..used);
            }
            prop_assert!(d.is_done());
            prop_assert!(pending.is_empty());
            prop_assert_eq!(out, body);
        }

        #[test]
        fn never_panics_on_arbitrary_bytes(input in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut out = Vec::new();
            let _ = ChunkedDecoder::new(1024).feed(&input, &mut out);
        }
    }
}
