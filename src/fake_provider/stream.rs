//! Server-sent events of streaming answers, in OpenAI's chat, completions and Responses formats.

use std::io::Write;

use super::responses::{push_chat_usage, push_preamble, push_response_object, Ctx};

/// Which API's event format to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamApi {
    /// `chat.completion.chunk` events, then `[DONE]`.
    Chat,
    /// `text_completion` events, then `[DONE]`.
    Completions,
    /// `response.*` typed events (no `[DONE]`).
    Responses,
}

/// The sequence of SSE events of one streaming answer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamPlan<'a> {
    /// Event format.
    pub(crate) api: StreamApi,
    /// Shared answer facts.
    pub(crate) ctx: Ctx<'a>,
    /// Content chunks (`tok0 `, `tok1 `, ...).
    pub(crate) chunks: u32,
    /// The request asked for `stream_options.include_usage` (chat and completions only).
    pub(crate) include_usage: bool,
}

impl StreamPlan<'_> {
    /// How many events the answer has, `[DONE]` included.
    pub(crate) fn len(&self) -> u32 {
        let usage = u32::from(self.include_usage && self.api != StreamApi::Responses);
        self.chunks.saturating_add(2).saturating_add(usage)
    }

    /// Appends event `i` (`0..len()`), including its terminating blank line, to `out`.
    pub(crate) fn push_event(&self, i: u32, out: &mut Vec<u8>) {
        match self.api {
            StreamApi::Chat | StreamApi::Completions => self.push_classic(i, out),
            StreamApi::Responses => self.push_responses(i, out),
        }
    }

    fn push_classic(&self, i: u32, out: &mut Vec<u8>) {
        let chat = self.api == StreamApi::Chat;
        let last = self.len() - 1;
        if i >= last {
            out.extend_from_slice(b"data: [DONE]\n\n");
            return;
        }
        out.extend_from_slice(b"data: {");
        if chat {
            push_preamble(out, &self.ctx, "chatcmpl-sim-", "chat.completion.chunk");
        } else {
            push_preamble(out, &self.ctx, "cmpl-sim-", "text_completion");
        }
        if i < self.chunks {
            if chat {
                out.extend_from_slice(b"\"choices\":[{\"index\":0,\"delta\":{");
                if i == 0 {
                    out.extend_from_slice(b"\"role\":\"assistant\",");
                }
                out.extend_from_slice(b"\"content\":\"");
                push_token(out, i);
                out.extend_from_slice(b"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
            } else {
                out.extend_from_slice(b"\"choices\":[{\"text\":\"");
                push_token(out, i);
                out.extend_from_slice(
                    b"\",\"index\":0,\"logprobs\":null,\"finish_reason\":null}]}\n\n",
                );
            }
        } else if i == self.chunks {
            if chat {
                out.extend_from_slice(
                    b"\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}]}\n\n",
                );
            } else {
                out.extend_from_slice(
                    b"\"choices\":[{\"text\":\"\",\"index\":0,\"logprobs\":null,\"finish_reason\":\"stop\"}]}\n\n",
                );
            }
        } else {
            out.extend_from_slice(b"\"choices\":[],");
            let cached = self.ctx.cached_tokens;
            push_chat_usage(out, self.ctx.prompt_tokens, u64::from(self.chunks), cached);
            out.extend_from_slice(b"}\n\n");
        }
    }

    fn push_responses(&self, i: u32, out: &mut Vec<u8>) {
        if i == 0 {
            out.extend_from_slice(
                b"event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":",
            );
            push_response_object(out, &self.ctx, "in_progress", None);
            out.extend_from_slice(b"}\n\n");
        } else if i <= self.chunks {
            out.extend_from_slice(
                b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":",
            );
            let _ = write!(out, "{i},\"item_id\":\"msg_sim_{}", self.ctx.n);
            out.extend_from_slice(b"\",\"output_index\":0,\"content_index\":0,\"delta\":\"");
            push_token(out, i - 1);
            out.extend_from_slice(b"\"}\n\n");
        } else {
            let mut text = Vec::new();
            for t in 0..self.chunks {
                push_token(&mut text, t);
            }
            let text = String::from_utf8_lossy(&text);
            out.extend_from_slice(
                b"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":",
            );
            let _ = write!(out, "{i},\"response\":");
            push_response_object(out, &self.ctx, "completed", Some(&text));
            out.extend_from_slice(b"}\n\n");
        }
    }
}

/// Appends the text of content chunk `i`: `tok<i> `.
fn push_token(out: &mut Vec<u8>, i: u32) {
    let _ = write!(out, "tok{i} ");
}

/// Appends `payload` framed as one HTTP/1.1 chunk.
pub(crate) fn push_http_chunk(out: &mut Vec<u8>, payload: &[u8]) {
    let _ = write!(out, "{:x}\r\n", payload.len());
    out.extend_from_slice(payload);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    const CTX: Ctx<'static> = Ctx {
        n: 3,
        created: 1_700_000_000,
        model: "m",
        content: "Hello from x",
        prompt_tokens: 4,
        cached_tokens: 0,
        response_id: "resp_sim_3",
    };

    fn events(plan: &StreamPlan) -> Vec<String> {
        (0..plan.len())
            .map(|i| {
                let mut out = Vec::new();
                plan.push_event(i, &mut out);
                String::from_utf8(out).expect("utf8")
            })
            .collect()
    }

    fn data(ev: &str) -> Value {
        let line = ev
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .expect("data line");
        serde_json::from_str(line).expect("JSON data")
    }

    #[test]
    fn chat_stream_has_role_tokens_stop_usage_and_done() {
        let plan = StreamPlan {
            api: StreamApi::Chat,
            ctx: CTX,
            chunks: 3,
            include_usage: true,
        };
        let evs = events(&plan);
        assert_eq!(evs.len(), 6);
        assert!(evs.iter().all(|e| e.ends_with("\n\n")));
        let first = data(&evs[0]);
        assert_eq!(first["object"], "chat.completion.chunk");
        assert_eq!(first["id"], "chatcmpl-sim-3");
        assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(first["choices"][0]["delta"]["content"], "tok0 ");
        assert!(first["choices"][0]["finish_reason"].is_null());
        assert!(data(&evs[1])["choices"][0]["delta"].get("role").is_none());
        assert_eq!(data(&evs[2])["choices"][0]["delta"]["content"], "tok2 ");
        assert_eq!(data(&evs[3])["choices"][0]["finish_reason"], "stop");
        let usage = data(&evs[4]);
        assert_eq!(usage["choices"], serde_json::json!([]));
        assert_eq!(usage["usage"]["completion_tokens"], 3);
        assert_eq!(evs[5], "data: [DONE]\n\n");
    }

    #[test]
    fn completions_stream_uses_text_completion_chunks() {
        let plan = StreamPlan {
            api: StreamApi::Completions,
            ctx: CTX,
            chunks: 2,
            include_usage: false,
        };
        let evs = events(&plan);
        assert_eq!(evs.len(), 4);
        assert_eq!(data(&evs[0])["object"], "text_completion");
        assert_eq!(data(&evs[1])["choices"][0]["text"], "tok1 ");
        assert_eq!(data(&evs[2])["choices"][0]["finish_reason"], "stop");
        assert_eq!(evs[3], "data: [DONE]\n\n");
    }

    #[test]
    fn responses_stream_uses_typed_events() {
        let plan = StreamPlan {
            api: StreamApi::Responses,
            ctx: CTX,
            chunks: 2,
            include_usage: true,
        };
        let evs = events(&plan);
        assert_eq!(evs.len(), 4);
        assert!(evs[0].starts_with("event: response.created\n"));
        assert_eq!(data(&evs[0])["response"]["status"], "in_progress");
        assert_eq!(data(&evs[1])["delta"], "tok0 ");
        assert_eq!(data(&evs[2])["item_id"], "msg_sim_3");
        let done = data(&evs[3]);
        assert_eq!(done["type"], "response.completed");
        assert_eq!(
            done["response"]["output"][0]["content"][0]["text"],
            "tok0 tok1 "
        );
    }

    #[test]
    fn zero_chunks_still_finishes() {
        let plan = StreamPlan {
            api: StreamApi::Chat,
            ctx: CTX,
            chunks: 0,
            include_usage: false,
        };
        let evs = events(&plan);
        assert_eq!(evs.len(), 2);
        assert_eq!(data(&evs[0])["choices"][0]["finish_reason"], "stop");
        assert_eq!(evs[1], "data: [DONE]\n\n");
    }

    #[test]
    fn http_chunks_are_hex_framed() {
        let mut out = Vec::new();
        push_http_chunk(&mut out, &[b'a'; 26]);
        assert_eq!(&out[..4], b"1a\r\n");
        assert!(out.ends_with(b"\r\n"));
        assert_eq!(out.len(), 4 + 26 + 2);
    }
}
