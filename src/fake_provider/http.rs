//! Minimal HTTP/1.1 request-head parsing (httparse) for the fake provider, and the
//! [`Operation`] each path asks for.

use super::record::RecordedRequest;

/// Most headers a request may carry.
pub(crate) const MAX_HEADERS: usize = 64;
/// Largest request head accepted (the read buffer grows up to this for big headers).
pub(crate) const MAX_HEAD_BYTES: usize = 1 << 20;
/// Largest request body accepted.
pub(crate) const MAX_BODY_BYTES: usize = 64 << 20;

/// Which operation of the OpenAI API a path asks for (by suffix, so any prefix works).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    /// `.../chat/completions`
    Chat,
    /// `.../completions` (legacy text completions)
    Completions,
    /// `.../embeddings`
    Embeddings,
    /// `.../responses`
    Responses,
    /// `.../responses/{id}` and `.../responses/{id}/...`: a kept response.
    ResponseObject,
    /// `.../health`, the health endpoint self-hosted servers expose (any method).
    Health,
    /// Anything else.
    NotFound,
}

impl Operation {
    /// Whether this is one of the API's endpoints (what a request quota counts).
    pub(crate) fn is_api(self) -> bool {
        matches!(
            self,
            Operation::Chat
                | Operation::Completions
                | Operation::Embeddings
                | Operation::Responses
                | Operation::ResponseObject
        )
    }

    /// The operation a path asks for (query already removed).
    pub(crate) fn of(path: &str) -> Operation {
        let path = path.strip_suffix('/').unwrap_or(path);
        if path.ends_with("/chat/completions") {
            Operation::Chat
        } else if path.ends_with("/completions") {
            Operation::Completions
        } else if path.ends_with("/embeddings") {
            Operation::Embeddings
        } else if path.ends_with("/responses") {
            Operation::Responses
        } else if path.contains("/responses/") {
            Operation::ResponseObject
        } else if path.ends_with("/health") {
            Operation::Health
        } else {
            Operation::NotFound
        }
    }
}

/// How the request body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyFraming {
    /// Exactly this many bytes follow the head.
    Length(usize),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// The parts of a request head the server acts on, owned so the read buffer can be reused.
#[derive(Debug)]
pub(crate) struct RequestHead {
    /// The method is `POST`.
    pub(crate) is_post: bool,
    /// The endpoint addressed.
    pub(crate) operation: Operation,
    /// `1` for HTTP/1.1, `0` for HTTP/1.0.
    pub(crate) version: u8,
    /// Body framing.
    pub(crate) framing: BodyFraming,
    /// The connection may be reused after this request.
    pub(crate) keep_alive: bool,
    /// The client sent `Expect: 100-continue`.
    pub(crate) expect_continue: bool,
    /// The `{d}` of an Azure-style `/deployments/{d}/...` path.
    pub(crate) deployment: Option<String>,
    /// For [`Operation::ResponseObject`]: which kept response, and what to do with it.
    pub(crate) object: Option<ObjectTarget>,
    /// `METHOD path` for error messages, kept only for unroutable or non-POST requests.
    pub(crate) target: Option<String>,
    /// The full head, kept only while recording is on.
    pub(crate) record: Option<RecordedRequest>,
}

/// A request for a kept response: `METHOD .../responses/{id}[/{action}][?query]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ObjectTarget {
    /// The request method.
    pub(crate) method: String,
    /// The response id.
    pub(crate) id: String,
    /// The path after the id (empty, `cancel`, `input_items`).
    pub(crate) action: String,
    /// The query string (empty when none).
    pub(crate) query: String,
}

impl ObjectTarget {
    /// The target of `method path?query`, when the path names a kept response.
    fn of(method: &str, path: &str, query: Option<&str>) -> Option<ObjectTarget> {
        let (_, rest) = path.rsplit_once("/responses/")?;
        let (id, action) = rest.split_once('/').unwrap_or((rest, ""));
        Some(ObjectTarget {
            method: method.to_string(),
            id: id.to_string(),
            action: action.to_string(),
            query: query.unwrap_or_default().to_string(),
        })
    }
}

/// Why a request head was rejected; each maps to a status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeadError {
    /// Malformed request or framing (400).
    BadRequest(&'static str),
    /// More than [`MAX_HEADERS`] headers or more than [`MAX_HEAD_BYTES`] of head (431).
    TooLarge,
    /// A declared body beyond [`MAX_BODY_BYTES`] (413).
    BodyTooLarge,
}

impl HeadError {
    /// The status code to answer with.
    pub(crate) fn status(self) -> u16 {
        match self {
            HeadError::BadRequest(_) => 400,
            HeadError::TooLarge => 431,
            HeadError::BodyTooLarge => 413,
        }
    }

    /// The error message to answer with.
    pub(crate) fn message(self) -> &'static str {
        match self {
            HeadError::BadRequest(m) => m,
            HeadError::TooLarge => "request header fields too large",
            HeadError::BodyTooLarge => "request body too large",
        }
    }
}

/// Parses a request head from the start of `buf`.
///
/// `Ok(None)` means more bytes are needed; `Ok(Some((n, head)))` means the head took `n` bytes.
/// With `record` the whole head is copied into [`RequestHead::record`].
pub(crate) fn parse_head(
    buf: &[u8],
    record: bool,
) -> Result<Option<(usize, RequestHead)>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let used = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD_BYTES => {
            return Err(HeadError::TooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
        Err(_) => return Err(HeadError::BadRequest("malformed HTTP request")),
    };
    let method = req.method.unwrap_or("");
    let raw_path = req.path.unwrap_or("/");
    let version = req.version.unwrap_or(1);
    let (path, query) = match raw_path.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (raw_path, None),
    };

    let mut content_length: Option<usize> = None;
    let mut chunked = false;
    let mut close = false;
    let mut keep_alive_token = false;
    let mut expect_continue = false;
    for h in req.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("content-length") {
            let n = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .ok_or(HeadError::BadRequest("invalid content-length"))?;
            if content_length.is_some_and(|prev| prev != n) {
                return Err(HeadError::BadRequest("conflicting content-length"));
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            let last = h.value.rsplit(|&b| b == b',').next().unwrap_or(b"");
            if !last.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                return Err(HeadError::BadRequest("unsupported transfer-encoding"));
            }
            chunked = true;
        } else if name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive_token |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case("expect") {
            expect_continue = h.value.trim_ascii().eq_ignore_ascii_case(b"100-continue");
        }
    }

    let framing = if chunked {
        BodyFraming::Chunked
    } else {
        let n = content_length.unwrap_or(0);
        if n > MAX_BODY_BYTES {
            return Err(HeadError::BodyTooLarge);
        }
        BodyFraming::Length(n)
    };
    let operation = Operation::of(path);
    let is_post = method == "POST";
    let target = (operation == Operation::NotFound || !is_post).then(|| format!("{method} {path}"));
    let record = record.then(|| RecordedRequest {
        method: method.to_string(),
        path: path.to_string(),
        query: query.map(str::to_string),
        headers: req
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_ascii_lowercase(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect(),
        body: Vec::new(),
    });
    let head = RequestHead {
        is_post,
        operation,
        version,
        framing,
        keep_alive: if version >= 1 {
            !close
        } else {
            keep_alive_token && !close
        },
        expect_continue,
        deployment: deployment_of(path),
        object: (operation == Operation::ResponseObject)
            .then(|| ObjectTarget::of(method, path, query))
            .flatten(),
        target,
        record,
    };
    Ok(Some((used, head)))
}

/// The `{d}` segment of an Azure-style `.../deployments/{d}/...` path.
fn deployment_of(path: &str) -> Option<String> {
    let (_, after) = path.split_once("/deployments/")?;
    let name = after.split('/').next()?;
    (!name.is_empty()).then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &str) -> RequestHead {
        match parse_head(raw.as_bytes(), true) {
            Ok(Some((n, head))) => {
                assert_eq!(n, raw.len());
                head
            }
            other => panic!("unexpected parse result {other:?}"),
        }
    }

    #[test]
    fn routes_by_suffix_under_any_prefix() {
        assert_eq!(Operation::of("/v1/chat/completions"), Operation::Chat);
        assert_eq!(
            Operation::of("/openai/v1/chat/completions"),
            Operation::Chat
        );
        assert_eq!(
            Operation::of("/v1/projects/p/locations/l/endpoints/openapi/chat/completions"),
            Operation::Chat
        );
        assert_eq!(
            Operation::of("/openai/deployments/d/chat/completions/"),
            Operation::Chat
        );
        assert_eq!(Operation::of("/v1/completions"), Operation::Completions);
        assert_eq!(Operation::of("/v1/embeddings"), Operation::Embeddings);
        assert_eq!(Operation::of("/v1/responses"), Operation::Responses);
        assert_eq!(Operation::of("/v1/models"), Operation::NotFound);
        assert_eq!(Operation::of("/health"), Operation::Health);
        assert_eq!(Operation::of("/v1/health/"), Operation::Health);
        assert_eq!(Operation::of("/"), Operation::NotFound);
    }

    #[test]
    fn parses_framing_connection_and_recording() {
        let h = parse(
            "POST /openai/deployments/gpt4o/chat/completions?api-version=2024 HTTP/1.1\r\n\
             Host: x\r\nAPI-Key: secret\r\nContent-Length: 12\r\nConnection: close\r\n\r\n",
        );
        assert!(h.is_post);
        assert_eq!(h.operation, Operation::Chat);
        assert_eq!(h.framing, BodyFraming::Length(12));
        assert!(!h.keep_alive);
        assert_eq!(h.deployment.as_deref(), Some("gpt4o"));
        assert!(h.target.is_none());
        let rec = h.record.expect("recording on");
        assert_eq!(rec.method, "POST");
        assert_eq!(rec.path, "/openai/deployments/gpt4o/chat/completions");
        assert_eq!(rec.query.as_deref(), Some("api-version=2024"));
        assert_eq!(
            rec.headers[1],
            ("api-key".to_string(), "secret".to_string())
        );
    }

    #[test]
    fn chunked_and_keep_alive_rules() {
        let h = parse("POST /v1/embeddings HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n");
        assert_eq!(h.framing, BodyFraming::Chunked);
        assert!(h.keep_alive);
        assert!(h.expect_continue);
        let h10 = parse("GET /x HTTP/1.0\r\n\r\n");
        assert!(!h10.keep_alive);
        assert_eq!(h10.target.as_deref(), Some("GET /x"));
        let h10k = parse("GET /x HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
        assert!(h10k.keep_alive);
        assert_eq!(h10k.framing, BodyFraming::Length(0));
    }

    #[test]
    fn partial_heads_wait_for_more_bytes() {
        assert!(matches!(parse_head(b"POST /v1/chat/comp", false), Ok(None)));
        assert!(matches!(
            parse_head(b"POST / HTTP/1.1\r\nHost: x\r\n", false),
            Ok(None)
        ));
    }

    #[test]
    fn rejects_bad_heads() {
        let bad = |raw: &str| parse_head(raw.as_bytes(), false).map(|_| ()).unwrap_err();
        assert_eq!(bad("\x01\x02 garbage\r\n\r\n").status(), 400);
        assert_eq!(
            bad("POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n").status(),
            400
        );
        assert_eq!(
            bad("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n").status(),
            400
        );
        assert_eq!(
            bad("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n").status(),
            400
        );
        assert_eq!(
            bad("POST / HTTP/1.1\r\nContent-Length: 999999999999\r\n\r\n").status(),
            413
        );
        let many: String = (0..MAX_HEADERS + 1)
            .map(|i| format!("h{i}: v\r\n"))
            .collect();
        assert_eq!(bad(&format!("POST / HTTP/1.1\r\n{many}\r\n")).status(), 431);
        let huge = format!("POST / HTTP/1.1\r\nx: {}", "a".repeat(MAX_HEAD_BYTES + 1));
        assert_eq!(bad(&huge).status(), 431);
    }

    #[test]
    fn no_recording_means_no_copy() {
        let raw = b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
        let (_, h) = parse_head(raw, false).expect("ok").expect("complete");
        assert!(h.record.is_none());
        assert!(h.deployment.is_none());
    }
}
