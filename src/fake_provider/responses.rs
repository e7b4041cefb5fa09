//! OpenAI wire formats: response heads, JSON bodies and error bodies, written into reusable
//! buffers without going through `serde_json::Value`.

use std::io::Write;

/// Facts about one answer that every body of it repeats.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx<'a> {
    /// Per-provider request number, used in ids.
    pub(crate) n: u64,
    /// Unix seconds.
    pub(crate) created: u64,
    /// The model named by the request (unescaped).
    pub(crate) model: &'a str,
    /// The assistant's non-streaming answer, e.g. `Hello from fast` (unescaped).
    pub(crate) content: &'a str,
    /// Estimated prompt tokens.
    pub(crate) prompt_tokens: u64,
    /// Prompt tokens read from the prompt cache (reported only when positive).
    pub(crate) cached_tokens: u64,
    /// The id of a Responses API answer (unescaped ASCII, from the provider's store).
    pub(crate) response_id: &'a str,
}

impl Ctx<'_> {
    /// Completion tokens of the non-streaming answer (its word count).
    pub(crate) fn content_tokens(&self) -> u64 {
        self.content.split_whitespace().count() as u64
    }
}

/// Appends `s` JSON-escaped (without quotes).
pub(crate) fn push_json_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if esc.is_empty() {
            let _ = write!(out, "\\u{b:04x}");
        } else {
            out.extend_from_slice(esc);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
}

/// Appends a decimal number.
fn push_num(out: &mut Vec<u8>, n: u64) {
    let _ = write!(out, "{n}");
}

/// The reason phrase for a status code.
pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

/// Keeps a status writable as a final response status (`200..=599`), else 500.
pub(crate) fn sane_status(status: u16) -> u16 {
    if (200..=599).contains(&status) {
        status
    } else {
        500
    }
}

/// How a response head ends the connection question.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Conn {
    /// The request's HTTP minor version.
    pub(crate) version: u8,
    /// The connection stays open afterwards.
    pub(crate) keep_alive: bool,
}

fn push_status_line(out: &mut Vec<u8>, status: u16) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_num(out, u64::from(status));
    out.push(b' ');
    out.extend_from_slice(reason(status).as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn push_connection(out: &mut Vec<u8>, conn: Conn) {
    if !conn.keep_alive {
        out.extend_from_slice(b"connection: close\r\n");
    } else if conn.version == 0 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
}

/// Appends a complete JSON response: head (with `extra` header lines, each ending in CRLF)
/// followed by `body`.
pub(crate) fn push_json_response(
    out: &mut Vec<u8>,
    status: u16,
    extra: &[u8],
    conn: Conn,
    body: &[u8],
) {
    push_json_head(out, status, extra, conn, body.len());
    out.extend_from_slice(body);
}

/// Appends the head of a JSON response whose body is `len` bytes.
pub(crate) fn push_json_head(out: &mut Vec<u8>, status: u16, extra: &[u8], conn: Conn, len: usize) {
    push_status_line(out, status);
    out.extend_from_slice(b"content-type: application/json\r\ncontent-length: ");
    push_num(out, len as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(extra);
    push_connection(out, conn);
    out.extend_from_slice(b"\r\n");
}

/// Appends the head of an SSE response; chunked unless the client speaks HTTP/1.0 (then the
/// body runs to connection close and `conn.keep_alive` must be false).
pub(crate) fn push_stream_head(out: &mut Vec<u8>, extra: &[u8], conn: Conn) {
    push_status_line(out, 200);
    out.extend_from_slice(b"content-type: text/event-stream\r\ncache-control: no-cache\r\n");
    if conn.version >= 1 {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    out.extend_from_slice(extra);
    push_connection(out, conn);
    out.extend_from_slice(b"\r\n");
}

/// The OpenAI error `type` that goes with a status.
pub(crate) fn error_type(status: u16) -> &'static str {
    match status {
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        _ => "server_error",
    }
}

/// Appends an OpenAI error body.
pub(crate) fn push_error_body(out: &mut Vec<u8>, status: u16, message: &str) {
    out.extend_from_slice(b"{\"error\":{\"message\":\"");
    push_json_str(out, message);
    out.extend_from_slice(b"\",\"type\":\"");
    out.extend_from_slice(error_type(status).as_bytes());
    out.extend_from_slice(b"\",\"param\":null,\"code\":null}}");
}

/// Appends `"usage":{...}` in chat/completions style, with `prompt_tokens_details` when some
/// prompt tokens came from the prompt cache.
pub(crate) fn push_chat_usage(out: &mut Vec<u8>, prompt: u64, completion: u64, cached: u64) {
    out.extend_from_slice(b"\"usage\":{\"prompt_tokens\":");
    push_num(out, prompt);
    out.extend_from_slice(b",\"completion_tokens\":");
    push_num(out, completion);
    out.extend_from_slice(b",\"total_tokens\":");
    push_num(out, prompt + completion);
    if cached > 0 {
        out.extend_from_slice(b",\"prompt_tokens_details\":{\"cached_tokens\":");
        push_num(out, cached);
        out.push(b'}');
    }
    out.push(b'}');
}

/// Appends `"id":"<prefix><n>","object":"<object>","created":<t>,"model":"<m>",`.
pub(crate) fn push_preamble(out: &mut Vec<u8>, ctx: &Ctx, id_prefix: &str, object: &str) {
    out.extend_from_slice(b"\"id\":\"");
    out.extend_from_slice(id_prefix.as_bytes());
    push_num(out, ctx.n);
    out.extend_from_slice(b"\",\"object\":\"");
    out.extend_from_slice(object.as_bytes());
    out.extend_from_slice(b"\",\"created\":");
    push_num(out, ctx.created);
    out.extend_from_slice(b",\"model\":\"");
    push_json_str(out, ctx.model);
    out.extend_from_slice(b"\",");
}

/// Appends a non-streaming `chat.completion` body.
pub(crate) fn push_chat_body(out: &mut Vec<u8>, ctx: &Ctx) {
    out.push(b'{');
    push_preamble(out, ctx, "chatcmpl-sim-", "chat.completion");
    out.extend_from_slice(
        b"\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"",
    );
    push_json_str(out, ctx.content);
    out.extend_from_slice(b"\"},\"logprobs\":null,\"finish_reason\":\"stop\"}],");
    push_chat_usage(
        out,
        ctx.prompt_tokens,
        ctx.content_tokens(),
        ctx.cached_tokens,
    );
    out.push(b'}');
}

/// Appends a non-streaming `text_completion` body.
pub(crate) fn push_completion_body(out: &mut Vec<u8>, ctx: &Ctx) {
    out.push(b'{');
    push_preamble(out, ctx, "cmpl-sim-", "text_completion");
    out.extend_from_slice(b"\"choices\":[{\"text\":\"");
    push_json_str(out, ctx.content);
    out.extend_from_slice(b"\",\"index\":0,\"logprobs\":null,\"finish_reason\":\"stop\"}],");
    push_chat_usage(
        out,
        ctx.prompt_tokens,
        ctx.content_tokens(),
        ctx.cached_tokens,
    );
    out.push(b'}');
}

/// Appends an embeddings `list` body with one fixed three-dimensional vector.
pub(crate) fn push_embedding_body(out: &mut Vec<u8>, ctx: &Ctx) {
    out.extend_from_slice(
        b"{\"object\":\"list\",\"data\":[{\"object\":\"embedding\",\"index\":0,\"embedding\":[0.1,0.2,0.3]}],\"model\":\"",
    );
    push_json_str(out, ctx.model);
    out.extend_from_slice(b"\",\"usage\":{\"prompt_tokens\":");
    push_num(out, ctx.prompt_tokens);
    out.extend_from_slice(b",\"total_tokens\":");
    push_num(out, ctx.prompt_tokens);
    out.extend_from_slice(b"}}");
}

/// Appends a Responses-API `response` object whose single message says `text`.
pub(crate) fn push_response_object(out: &mut Vec<u8>, ctx: &Ctx, status: &str, text: Option<&str>) {
    out.extend_from_slice(b"{\"id\":\"");
    push_json_str(out, ctx.response_id);
    out.extend_from_slice(b"\",\"object\":\"response\",\"created_at\":");
    push_num(out, ctx.created);
    out.extend_from_slice(b",\"model\":\"");
    push_json_str(out, ctx.model);
    out.extend_from_slice(b"\",\"status\":\"");
    out.extend_from_slice(status.as_bytes());
    out.extend_from_slice(b"\",\"output\":[");
    if let Some(text) = text {
        out.extend_from_slice(b"{\"type\":\"message\",\"id\":\"msg_sim_");
        push_num(out, ctx.n);
        out.extend_from_slice(
            b"\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"",
        );
        push_json_str(out, text);
        out.extend_from_slice(b"\",\"annotations\":[]}]}");
    }
    out.extend_from_slice(b"]");
    if let Some(text) = text {
        let output = text.split_whitespace().count() as u64;
        out.extend_from_slice(b",\"usage\":{\"input_tokens\":");
        push_num(out, ctx.prompt_tokens);
        out.extend_from_slice(b",\"output_tokens\":");
        push_num(out, output);
        out.extend_from_slice(b",\"total_tokens\":");
        push_num(out, ctx.prompt_tokens + output);
        out.push(b'}');
    }
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    const CTX: Ctx<'static> = Ctx {
        n: 7,
        created: 1_700_000_000,
        model: "gpt-\"q\"\n",
        content: "Hello from fast",
        prompt_tokens: 11,
        cached_tokens: 0,
        response_id: "resp_sim_7",
    };

    fn json(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).expect("valid JSON")
    }

    #[test]
    fn escapes_everything_json_needs() {
        let mut out = Vec::new();
        push_json_str(&mut out, "a\"b\\c\n\r\t\u{1}é");
        let v: String = serde_json::from_slice(&[b"\"".as_slice(), &out, b"\""].concat())
            .expect("valid JSON string");
        assert_eq!(v, "a\"b\\c\n\r\t\u{1}é");
    }

    #[test]
    fn chat_body_has_openai_shape() {
        let mut out = Vec::new();
        push_chat_body(&mut out, &CTX);
        let v = json(&out);
        assert_eq!(v["id"], "chatcmpl-sim-7");
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["created"], 1_700_000_000);
        assert_eq!(v["model"], "gpt-\"q\"\n");
        assert_eq!(v["choices"][0]["message"]["role"], "assistant");
        assert_eq!(v["choices"][0]["message"]["content"], "Hello from fast");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        assert_eq!(v["usage"]["prompt_tokens"], 11);
        assert_eq!(v["usage"]["completion_tokens"], 3);
        assert_eq!(v["usage"]["total_tokens"], 14);
        assert!(v["usage"].get("prompt_tokens_details").is_none());
    }

    #[test]
    fn a_cache_hit_reports_its_cached_tokens_as_openai_does() {
        let mut out = Vec::new();
        push_chat_body(
            &mut out,
            &Ctx {
                cached_tokens: 1024,
                ..CTX
            },
        );
        let v = json(&out);
        assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 1024);
        assert_eq!(v["usage"]["total_tokens"], 14);
    }

    #[test]
    fn completion_embedding_and_response_shapes() {
        let mut out = Vec::new();
        push_completion_body(&mut out, &CTX);
        let v = json(&out);
        assert_eq!(v["object"], "text_completion");
        assert_eq!(v["choices"][0]["text"], "Hello from fast");

        out.clear();
        push_embedding_body(&mut out, &CTX);
        let v = json(&out);
        assert_eq!(v["object"], "list");
        assert_eq!(
            v["data"][0]["embedding"],
            serde_json::json!([0.1, 0.2, 0.3])
        );
        assert_eq!(v["usage"]["total_tokens"], 11);

        out.clear();
        push_response_object(&mut out, &CTX, "completed", Some("hi there"));
        let v = json(&out);
        assert_eq!(v["id"], "resp_sim_7");
        assert_eq!(v["object"], "response");
        assert_eq!(v["status"], "completed");
        assert_eq!(v["output"][0]["content"][0]["text"], "hi there");
        assert_eq!(v["usage"]["output_tokens"], 2);

        out.clear();
        push_response_object(&mut out, &CTX, "in_progress", None);
        assert_eq!(json(&out)["output"], serde_json::json!([]));
    }

    #[test]
    fn error_bodies_pick_the_openai_type() {
        for (status, ty) in [
            (429, "rate_limit_error"),
            (400, "invalid_request_error"),
            (404, "invalid_request_error"),
            (500, "server_error"),
            (503, "server_error"),
        ] {
            let mut out = Vec::new();
            push_error_body(&mut out, status, "simulated failure");
            let v = json(&out);
            assert_eq!(v["error"]["type"], ty);
            assert_eq!(v["error"]["message"], "simulated failure");
            assert!(v["error"]["param"].is_null() && v["error"]["code"].is_null());
        }
    }

    #[test]
    fn heads_carry_framing_and_connection_headers() {
        let mut out = Vec::new();
        let conn = Conn {
            version: 1,
            keep_alive: true,
        };
        push_json_response(&mut out, 429, b"retry-after: 1\r\n", conn, b"{}");
        assert_eq!(
            out,
            b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\ncontent-length: 2\r\nretry-after: 1\r\n\r\n{}"
        );
        out.clear();
        push_stream_head(
            &mut out,
            b"",
            Conn {
                version: 1,
                keep_alive: false,
            },
        );
        let text = String::from_utf8(out.clone()).expect("ascii");
        assert!(text.contains("transfer-encoding: chunked\r\n"));
        assert!(text.contains("connection: close\r\n"));
        out.clear();
        push_stream_head(
            &mut out,
            b"",
            Conn {
                version: 0,
                keep_alive: false,
            },
        );
        assert!(!String::from_utf8(out)
            .expect("ascii")
            .contains("transfer-encoding"));
        assert_eq!(sane_status(99), 500);
        assert_eq!(sane_status(1000), 500);
        assert_eq!(sane_status(418), 418);
    }
}
