//! The typed dialects' readers (Anthropic Messages, OpenAI Responses) through the public
//! `Demux`: one finish per choice, custom tools' calls.
use serde_json::{Value, json};

use choicewise_proto::{ChatCompletion, Demux, Dialect, StreamConfig, WarningKind};

/// A typed dialect's events as an SSE text.
fn sse(events: &[Value]) -> Vec<u8> {
    (events.iter())
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect::<String>()
        .into_bytes()
}

/// The completion of `events` in `dialect` (custom tools `custom`), and whether a
/// second finish was warned of.
fn read(dialect: Dialect, events: &[Value], custom: &[&str]) -> (ChatCompletion, bool) {
    let mut config = StreamConfig::default();
    config.dialect = Some(dialect);
    config.custom_tools = custom.iter().map(|s| s.to_string()).collect();
    let mut demux = Demux::with_config(config);
    demux.feed(&sse(events)).unwrap();
    let done = demux.finish().unwrap();
    let second =
        (demux.warnings().iter()).any(|w| matches!(w.kind, WarningKind::SecondFinish { .. }));
    (done, second)
}

fn anthropic_start() -> Vec<Value> {
    vec![
        json!({"type": "message_start", "message": {"id": "m", "role": "assistant",
            "usage": {"input_tokens": 3}}}),
        json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": "Hi"}}),
        json!({"type": "content_block_stop", "index": 0}),
    ]
}

fn stop(reason: &str) -> Value {
    json!({"type": "message_delta", "delta": {"stop_reason": reason},
        "usage": {"output_tokens": 2}})
}

#[test]
fn the_first_finish_wins_and_needs_no_stream_end() {
    let mut two = anthropic_start();
    two.extend([
        stop("end_turn"),
        stop("max_tokens"),
        json!({"type": "message_stop"}),
    ]);
    let (done, second) = read(Dialect::Anthropic, &two, &[]);
    let choice = &done.choices[0];
    assert_eq!(choice.finish_reason.as_deref(), Some("stop"));
    assert_eq!(choice.stop_reason.as_deref(), Some("end_turn"));
    assert!(second);
    // Cut after its stop reason, before `message_stop`: finished all the same.
    let mut cut = anthropic_start();
    cut.push(stop("tool_use"));
    let (done, _) = read(Dialect::Anthropic, &cut, &[]);
    assert_eq!(done.choices[0].finish_reason.as_deref(), Some("tool_calls"));

    let completed = |kind: &str, usage: u64| {
        json!({"type": kind, "response": {"id": "r", "status": "completed",
            "incomplete_details": {"reason": "max_output_tokens"},
            "usage": {"input_tokens": 1, "output_tokens": usage}}})
    };
    let events = [
        json!({"type": "response.output_text.delta", "output_index": 0, "delta": "Hi"}),
        completed("response.completed", 2),
        completed("response.incomplete", 9),
    ];
    let (done, second) = read(Dialect::Responses, &events, &[]);
    assert_eq!(done.choices[0].finish_reason.as_deref(), Some("stop"));
    assert!(second);
}

#[test]
fn custom_tools_calls_are_read_as_custom_calls() {
    let mut anthropic = vec![
        json!({"type": "message_start", "message": {"id": "m", "role": "assistant"}}),
        json!({"type": "content_block_start", "index": 0, "content_block":
            {"type": "tool_use", "id": "t1", "name": "apply_patch", "input": {}}}),
        json!({"type": "content_block_delta", "index": 0, "delta":
            {"type": "input_json_delta", "partial_json": "{\"input\": \"*** Be"}}),
        json!({"type": "content_block_delta", "index": 0, "delta":
            {"type": "input_json_delta", "partial_json": "gin\"}"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block":
            {"type": "tool_use", "id": "t2", "name": "w", "input": {"a": 1}}}),
        json!({"type": "content_block_stop", "index": 1}),
    ];
    anthropic.extend([stop("tool_use"), json!({"type": "message_stop"})]);
    let (done, _) = read(Dialect::Anthropic, &anthropic, &["apply_patch"]);
    let calls = &done.choices[0].message.tool_calls;
    assert_eq!(
        (calls[0].kind.as_str(), calls[0].function.arguments.as_str()),
        ("custom", "*** Begin")
    );
    assert_eq!(
        (calls[1].kind.as_str(), calls[1].function.arguments.as_str()),
        ("function", "{\"a\":1}")
    );
    // Without the tool named, the same call is a function's.
    let (done, _) = read(Dialect::Anthropic, &anthropic, &[]);
    assert_eq!(done.choices[0].message.tool_calls[0].kind, "function");

    let item = |input: &str| {
        json!({"type": "custom_tool_call", "call_id": "c", "name": "apply_patch",
            "input": input})
    };
    let responses = [
        json!({"type": "response.output_item.added", "output_index": 0, "item": item("")}),
        json!({"type": "response.custom_tool_call_input.delta", "output_index": 0,
            "delta": "*** Be"}),
        json!({"type": "response.custom_tool_call_input.delta", "output_index": 0,
            "delta": "gin"}),
        json!({"type": "response.custom_tool_call_input.done", "output_index": 0,
            "input": "*** Begin"}),
        json!({"type": "response.output_item.done", "output_index": 0,
            "item": item("*** Begin")}),
        json!({"type": "response.completed", "response": {"id": "r"}}),
    ];
    let (done, _) = read(Dialect::Responses, &responses, &[]);
    let call = &done.choices[0].message.tool_calls[0];
    assert_eq!(
        (call.kind.as_str(), call.function.name.as_str()),
        ("custom", "apply_patch")
    );
    assert_eq!(call.function.arguments, "*** Begin");
    assert_eq!(done.choices[0].finish_reason.as_deref(), Some("tool_calls"));
}
