//! The response bodies (pure): `chat.completion` objects and chunks, the
//! `response` object and its streaming events, and their SSE frames.

use axum::body::Bytes;
use serde_json::{Value, json};

use super::Reply;

/// What every object of one answer shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// Numbers the ids: `chatcmpl-standin-<seq>`, `call_<seq>`, ...
    pub seq: u64,
    pub created: u64,
    pub model: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
}

/// A rough token count (4 bytes a token): deterministic, never zero.
pub fn tokens(bytes: usize) -> u64 {
    u64::try_from(bytes.div_ceil(4).max(1)).unwrap_or(u64::MAX)
}

fn chat_usage(u: Usage) -> Value {
    json!({
        "prompt_tokens": u.input,
        "completion_tokens": u.output,
        "total_tokens": u.input + u.output,
    })
}

fn tool_call(meta: &Meta, name: &str, arguments: &str) -> Value {
    json!({
        "id": format!("call_{}", meta.seq),
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    })
}

/// A non-streaming `chat.completion`.
pub fn chat_completion(meta: &Meta, reply: &Reply, usage: Usage) -> Value {
    let message = match reply {
        Reply::Text(text) => json!({"role": "assistant", "content": text}),
        Reply::ToolCall { name, arguments } => json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [tool_call(meta, name, arguments)],
        }),
    };
    json!({
        "id": format!("chatcmpl-standin-{}", meta.seq),
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": reply.finish_reason(),
        }],
        "usage": chat_usage(usage),
    })
}

/// `text` in two or three pieces (fewer when it is shorter), split on
/// character boundaries, so a client's delta handling is exercised.
pub fn split_deltas(text: &str) -> Vec<&str> {
    let n = text.chars().count();
    let parts = n.min(3);
    if parts < 2 {
        return vec![text];
    }
    let mut out = Vec::with_capacity(parts);
    let mut start = 0;
    for k in 1..parts {
        let at = text
            .char_indices()
            .nth(k * n / parts)
            .map_or(text.len(), |(i, _)| i);
        out.push(&text[start..at]);
        start = at;
    }
    out.push(&text[start..]);
    out
}

/// The `chat.completion.chunk`s of a streamed answer: the role, the content
/// (or the tool call), the finish reason, then the usage with no choices.
pub fn chat_chunks(meta: &Meta, reply: &Reply, usage: Usage) -> Vec<Value> {
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({
            "id": format!("chatcmpl-standin-{}", meta.seq),
            "object": "chat.completion.chunk",
            "created": meta.created,
            "model": meta.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        })
    };
    let mut chunks = Vec::new();
    match reply {
        Reply::Text(text) => {
            chunks.push(chunk(json!({"role": "assistant", "content": ""}), None));
            for piece in split_deltas(text) {
                chunks.push(chunk(json!({"content": piece}), None));
            }
        }
        Reply::ToolCall { name, arguments } => {
            chunks.push(chunk(json!({"role": "assistant", "content": null}), None));
            let mut call = tool_call(meta, name, arguments);
            call["index"] = json!(0);
            chunks.push(chunk(json!({"tool_calls": [call]}), None));
        }
    }
    chunks.push(chunk(json!({}), Some(reply.finish_reason())));
    chunks.push(json!({
        "id": format!("chatcmpl-standin-{}", meta.seq),
        "object": "chat.completion.chunk",
        "created": meta.created,
        "model": meta.model,
        "choices": [],
        "usage": chat_usage(usage),
    }));
    chunks
}

/// Chat Completions SSE frames: `data: <json>` each, then `data: [DONE]`.
pub fn chat_sse(chunks: &[Value]) -> Vec<Bytes> {
    chunks
        .iter()
        .map(|c| Bytes::from(format!("data: {c}\n\n")))
        .chain([Bytes::from_static(b"data: [DONE]\n\n")])
        .collect()
}

fn message_item(meta: &Meta, text: &str, status: &str) -> Value {
    let content = if status == "completed" {
        json!([{"type": "output_text", "text": text, "annotations": []}])
    } else {
        json!([])
    };
    json!({
        "type": "message",
        "id": format!("msg_standin_{}", meta.seq),
        "status": status,
        "role": "assistant",
        "content": content,
    })
}

/// A `response` object; `in_progress` has no output yet.
pub fn response_object(meta: &Meta, text: &str, usage: Usage, status: &str) -> Value {
    let done = status == "completed";
    json!({
        "id": format!("resp_standin_{}", meta.seq),
        "object": "response",
        "created_at": meta.created,
        "status": status,
        "model": meta.model,
        "output": if done { json!([message_item(meta, text, status)]) } else { json!([]) },
        "usage": if done {
            json!({
                "input_tokens": usage.input,
                "output_tokens": usage.output,
                "total_tokens": usage.input + usage.output,
            })
        } else {
            Value::Null
        },
    })
}

/// The Responses streaming events of a text answer, in order.
pub fn response_events(meta: &Meta, text: &str, usage: Usage) -> Vec<Value> {
    let item_id = format!("msg_standin_{}", meta.seq);
    let part = |t: &str| json!({"type": "output_text", "text": t, "annotations": []});
    let at = json!({"item_id": item_id, "output_index": 0, "content_index": 0});
    let with = |mut base: Value, extra: Value| {
        if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
            b.extend(e);
        }
        base
    };
    let mut events = vec![
        json!({"type": "response.created",
               "response": response_object(meta, text, usage, "in_progress")}),
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": message_item(meta, text, "in_progress")}),
        with(
            at.clone(),
            json!({"type": "response.content_part.added", "part": part("")}),
        ),
    ];
    for piece in split_deltas(text) {
        events.push(with(
            at.clone(),
            json!({"type": "response.output_text.delta", "delta": piece}),
        ));
    }
    events.extend([
        with(
            at.clone(),
            json!({"type": "response.output_text.done", "text": text}),
        ),
        with(
            at,
            json!({"type": "response.content_part.done", "part": part(text)}),
        ),
        json!({"type": "response.output_item.done", "output_index": 0,
               "item": message_item(meta, text, "completed")}),
        json!({"type": "response.completed",
               "response": response_object(meta, text, usage, "completed")}),
    ]);
    for (n, e) in events.iter_mut().enumerate() {
        e["sequence_number"] = json!(n);
    }
    events
}

/// Responses SSE frames: `event: <type>` and `data: <json>` each.
pub fn responses_sse(events: &[Value]) -> Vec<Bytes> {
    events
        .iter()
        .map(|e| {
            let kind = e.get("type").and_then(Value::as_str).unwrap_or_default();
            Bytes::from(format!("event: {kind}\ndata: {e}\n\n"))
        })
        .collect()
}
