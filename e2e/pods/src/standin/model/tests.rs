//! The model stand-in's unit tests.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use serde::Deserialize;

use super::*;

fn req(v: Value) -> ChatRequest {
    ChatRequest::deserialize(&v).expect("a chat request")
}

fn meta() -> Meta {
    Meta {
        seq: 7,
        created: 1_800_000_000,
        model: "m1".into(),
    }
}

const USAGE: Usage = Usage {
    input: 10,
    output: 5,
};

/// Shaped like OpenClaw's: a long system prompt, the user turn with its
/// timestamp and Runtime annotations, then internal context as parts.
fn openclaw_request(history: &[&str], user: &str, tools: Value) -> Value {
    let mut messages =
        vec![json!({"role": "system", "content": "You are a personal assistant. ".repeat(100)})];
    for h in history {
        messages.push(json!({"role": "user", "content": format!("[Sat 2026-12-05 10:00 UTC] {h}\n\nRuntime: agent=main | host=x")}));
        messages
            .push(json!({"role": "assistant", "content": format!("model-standin answer: {h}")}));
    }
    messages.push(json!({"role": "user", "content": format!("[Sun 2026-12-06 03:53 UTC] {user}\n\nRuntime: agent=main | model=standin/m1 | channel=webchat")}));
    messages.push(json!({"role": "user", "content": [
        {"type": "text", "text": format!("{INTERNAL_CONTEXT_MARKER}\nsession state\n<<<END_OPENCLAW_INTERNAL_CONTEXT>>>")}
    ]}));
    json!({
        "model": "m1",
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
        "tools": tools,
        "tool_choice": "auto",
        "max_completion_tokens": 8192,
        "store": false,
    })
}

fn tools(names: &[&str]) -> Value {
    names
        .iter()
        .map(|n| json!({"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}))
        .collect()
}

#[test]
fn a_codex_shaped_responses_input_is_answered_with_the_users_request() {
    // As OpenClaw's Codex plugin has Codex send it (a real capture,
    // shortened): Codex's context, then the runtime's context with the
    // user's request last.
    let part = |t: &str| json!([{"type": "input_text", "text": t}]);
    let input = json!([
        {"type": "message", "role": "developer", "content": part("You are a personal agent")},
        {"type": "message", "role": "user", "content": part("# AGENTS.md instructions for /w\n\n<INSTRUCTIONS>")},
        {"type": "message", "role": "user", "content": part("<environment_context>\n  <cwd>/w</cwd>")},
        {"type": "message", "role": "user", "content": part(
            "OpenClaw runtime context for this turn:\nTreat this as context.\n\n## Docs\n\nCurrent user request:\nfirst nonce-1")},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        {"type": "message", "role": "user", "content": part(
            "OpenClaw runtime context for this turn:\nTreat this as context.\n\nCurrent user request:\nsecond nonce-2")}
    ]);
    let conv = responses_conversation(&input);
    assert_eq!(conv.user.as_deref(), Some("second nonce-2"));
    assert_eq!(conv.history, vec!["first nonce-1".to_string()]);
}

#[test]
fn openclaw_shaped_request_is_answered_with_the_user_text() {
    let r = req(openclaw_request(
        &[],
        "hello nonce-42",
        tools(&["read", "write"]),
    ));
    assert_eq!(
        chat_reply(&r, "wxyz"),
        Reply::Text(
            "model-standin answer: hello nonce-42 | history: none | key: wxyz | model: m1".into()
        )
    );
}

#[test]
fn history_is_the_earlier_user_texts_in_order() {
    let r = req(openclaw_request(
        &["first one", "second"],
        "third",
        json!([]),
    ));
    let Reply::Text(t) = chat_reply(&r, "none") else {
        panic!("text expected")
    };
    assert_eq!(
        t,
        "model-standin answer: third | history: first one ; second | key: none | model: m1"
    );
}

#[test]
fn user_text_is_cleaned() {
    assert_eq!(
        clean_user_text("[Sun 2026-12-06 03:53 UTC] hi there"),
        "hi there"
    );
    assert_eq!(clean_user_text("plain\n\nRuntime: x"), "plain");
    assert_eq!(clean_user_text("a\nb\r\n\r\nrest"), "a\nb");
    // Not a timestamp bracket: kept.
    assert_eq!(clean_user_text("[x]y"), "[x]y");
    assert_eq!(clean_user_text("  "), "");
}

#[test]
fn write_file_calls_write_only_when_offered() {
    let offered = req(openclaw_request(
        &[],
        "write-file notes/a.txt hello  world",
        tools(&["read", "write"]),
    ));
    let Reply::ToolCall { name, arguments } = chat_reply(&offered, "none") else {
        panic!("tool call expected")
    };
    assert_eq!(name, "write");
    let args: Value = serde_json::from_str(&arguments).expect("JSON arguments");
    assert_eq!(
        args,
        json!({"path": "notes/a.txt", "content": "hello  world"})
    );

    let not_offered = req(openclaw_request(
        &[],
        "write-file notes/a.txt hello",
        tools(&["read"]),
    ));
    assert!(
        matches!(chat_reply(&not_offered, "none"), Reply::Text(t) if t.starts_with("model-standin answer: write-file notes/a.txt hello |"))
    );
}

#[test]
fn read_file_calls_read_only_when_offered() {
    let offered = req(openclaw_request(
        &[],
        "read-file notes/a.txt",
        tools(&["read"]),
    ));
    assert_eq!(
        chat_reply(&offered, "none"),
        Reply::ToolCall {
            name: "read".into(),
            arguments: json!({"path": "notes/a.txt"}).to_string()
        }
    );
    let none = req(openclaw_request(&[], "read-file notes/a.txt", Value::Null));
    assert!(matches!(chat_reply(&none, "none"), Reply::Text(_)));
    assert_eq!(parse_command("read-file"), None);
    assert_eq!(parse_command("read-filex a"), None);
}

#[test]
fn a_tool_result_followed_by_internal_context_still_answers_the_turn() {
    let mut body = openclaw_request(&[], "write-file a.txt hi", tools(&["write"]));
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "write", "arguments": "{}"}}]}));
    messages.push(
        json!({"role": "tool", "tool_call_id": "call_1", "content": "Successfully wrote 2 bytes"}),
    );
    messages.push(json!({"role": "user", "content": [
        {"type": "text", "text": format!("{INTERNAL_CONTEXT_MARKER}\nstate")}]}));
    assert_eq!(
        chat_reply(&req(body), "none"),
        Reply::Text("tool-result: Successfully wrote 2 bytes".into())
    );
}

#[test]
fn a_tool_result_is_echoed_trimmed_and_bounded() {
    let mut body = openclaw_request(&[], "read-file a.txt", tools(&["read"]));
    let messages = body["messages"].as_array_mut().expect("messages");
    messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a.txt\"}"}}
    ]}));
    messages.push(json!({"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "  file body\n"}]}));
    assert_eq!(
        chat_reply(&req(body.clone()), "none"),
        Reply::Text("tool-result: file body".into())
    );

    let long = "é".repeat(3000);
    body["messages"]
        .as_array_mut()
        .expect("messages")
        .push(json!({"role": "tool", "tool_call_id": "call_2", "content": long}));
    let Reply::Text(t) = chat_reply(&req(body), "none") else {
        panic!("text expected")
    };
    assert_eq!(t.chars().count(), "tool-result: ".len() + 2000);
}

#[test]
fn key_tail_is_the_last_four_characters() {
    let mut h = HeaderMap::new();
    assert_eq!(key_tail(bearer(&h)), "none");
    h.insert(
        header::AUTHORIZATION,
        "Bearer sk-test-abcd1234".parse().expect("header"),
    );
    assert_eq!(key_tail(bearer(&h)), "1234");
    h.insert(header::AUTHORIZATION, "bearer ab".parse().expect("header"));
    assert_eq!(key_tail(bearer(&h)), "ab");
    h.insert(
        header::AUTHORIZATION,
        "Basic abcdef".parse().expect("header"),
    );
    assert_eq!(key_tail(bearer(&h)), "none");
}

#[test]
fn completion_carries_the_tool_call_with_string_arguments() {
    let reply = Reply::ToolCall {
        name: "write".into(),
        arguments: json!({"path": "p", "content": "c"}).to_string(),
    };
    let c = chat_completion(&meta(), &reply, USAGE);
    assert_eq!(c["object"], "chat.completion");
    assert_eq!(c["choices"][0]["finish_reason"], "tool_calls");
    let call = &c["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["id"], "call_7");
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "write");
    assert!(call["function"]["arguments"].is_string());
    assert_eq!(c["usage"]["total_tokens"], 15);

    let t = chat_completion(&meta(), &Reply::Text("hi".into()), USAGE);
    assert_eq!(t["choices"][0]["message"]["content"], "hi");
    assert_eq!(t["choices"][0]["finish_reason"], "stop");
}

#[test]
fn streamed_text_is_role_deltas_finish_usage_done() {
    let text = "model-standin answer: héllo | history: none";
    let chunks = chat_chunks(&meta(), &Reply::Text(text.into()), USAGE);
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let deltas: Vec<&str> = chunks[1..chunks.len() - 2]
        .iter()
        .map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .expect("content")
        })
        .collect();
    assert!((2..=3).contains(&deltas.len()), "{deltas:?}");
    assert_eq!(deltas.concat(), text);
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["delta"], json!({}));
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 5);
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );

    let frames = chat_sse(&chunks);
    assert_eq!(frames.len(), chunks.len() + 1);
    assert!(
        frames
            .iter()
            .all(|f| f.starts_with(b"data: ") && f.ends_with(b"\n\n"))
    );
    assert_eq!(
        frames.last().map(|f| &f[..]),
        Some(&b"data: [DONE]\n\n"[..])
    );
}

#[test]
fn streamed_tool_call_is_one_indexed_delta() {
    let reply = Reply::ToolCall {
        name: "read".into(),
        arguments: "{\"path\":\"a\"}".into(),
    };
    let chunks = chat_chunks(&meta(), &reply, USAGE);
    assert_eq!(chunks.len(), 4);
    let call = &chunks[1]["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(call["index"], 0);
    assert_eq!(call["id"], "call_7");
    assert_eq!(call["function"]["arguments"], "{\"path\":\"a\"}");
    assert_eq!(chunks[2]["choices"][0]["finish_reason"], "tool_calls");
}

#[test]
fn split_deltas_keeps_characters_whole() {
    assert_eq!(split_deltas(""), vec![""]);
    assert_eq!(split_deltas("a"), vec!["a"]);
    assert_eq!(split_deltas("ab"), vec!["a", "b"]);
    assert_eq!(split_deltas("ééé"), vec!["é", "é", "é"]);
    assert_eq!(split_deltas("abcdefg").concat(), "abcdefg");
}

#[test]
fn responses_input_string_or_items() {
    assert_eq!(
        responses_conversation(&json!("hi")),
        Conversation {
            user: Some("hi".into()),
            history: vec![]
        }
    );
    let items = json!([
        {"role": "developer", "content": "rules"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "one"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "x"}]},
        {"type": "function_call_output", "call_id": "c", "output": "o"},
        {"role": "user", "content": "two"},
    ]);
    assert_eq!(
        responses_conversation(&items),
        Conversation {
            user: Some("two".into()),
            history: vec!["one".into()]
        }
    );
}

#[test]
fn response_object_and_events() {
    let r = response_object(&meta(), "hello", USAGE, "completed");
    assert_eq!(r["object"], "response");
    assert_eq!(r["output"][0]["content"][0]["type"], "output_text");
    assert_eq!(r["output"][0]["content"][0]["text"], "hello");
    assert_eq!(r["usage"]["total_tokens"], 15);

    let events = response_events(&meta(), "hello", USAGE);
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["type"].as_str().expect("type"))
        .collect();
    let mut want = vec![
        "response.created",
        "response.output_item.added",
        "response.content_part.added",
    ];
    want.extend(["response.output_text.delta"; 3]);
    want.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(kinds, want);
    assert_eq!(events[0]["response"]["status"], "in_progress");
    assert_eq!(
        events[9]["response"]["output"][0]["content"][0]["text"],
        "hello"
    );
    let frames = responses_sse(&events);
    assert!(frames[0].starts_with(b"event: response.created\ndata: {"));
}

fn model(key: Option<&str>) -> Arc<Model> {
    let env = key
        .map(|k| ("MODEL_STANDIN_REQUIRE_KEY".to_string(), k.to_string()))
        .into_iter()
        .collect();
    Arc::new(Model::from_env(env))
}

#[tokio::test]
async fn bad_json_is_400_and_a_wrong_key_401() {
    let m = model(None);
    let resp = chat_completions(State(m.clone()), HeaderMap::new(), Bytes::from("{"))
        .await
        .into_response();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let resp = chat_completions(
        State(m.clone()),
        HeaderMap::new(),
        Bytes::from("{\"model\":\"m\"}"),
    )
    .await
    .into_response();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(m.seen.lock().expect("lock").count, 0);

    let m = model(Some("sk-right"));
    let mut h = HeaderMap::new();
    h.insert(
        header::AUTHORIZATION,
        "Bearer sk-wrong".parse().expect("header"),
    );
    let body = Bytes::from(json!({"model": "m", "messages": []}).to_string());
    let resp = chat_completions(State(m.clone()), h.clone(), body.clone())
        .await
        .into_response();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    h.insert(
        header::AUTHORIZATION,
        "Bearer sk-right".parse().expect("header"),
    );
    let resp = chat_completions(State(m.clone()), h, body)
        .await
        .into_response();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(m.seen.lock().expect("lock").count, 1);
}

#[test]
fn models_default_and_list() {
    assert_eq!(model(None).models, vec![DEFAULT_MODEL]);
    let env = [("MODEL_STANDIN_MODELS".to_string(), "a, b,,".to_string())]
        .into_iter()
        .collect();
    assert_eq!(Model::from_env(env).models, vec!["a", "b"]);
}
