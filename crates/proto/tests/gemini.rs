//! Gemini's `streamGenerateContent?alt=sse` records through the public `Demux`: candidates
//! routed by `index` in any order, every finish reason, function calls, thoughts, usage
//! and the upstream's errors.
use serde_json::{Value, json};

use choicewise_proto::driver::Splitter;
use choicewise_proto::{
    ChatCompletion, Demux, Dialect, ErrorKind, Incomplete, StreamConfig, Usage,
};

/// Records as Gemini writes them: `data:` lines, no event names, no end marker.
fn sse(records: &[Value]) -> Vec<u8> {
    (records.iter())
        .map(|r| format!("data: {r}\r\n\r\n"))
        .collect::<String>()
        .into_bytes()
}

/// The completion of `records`, read with the dialect given (`Some`) or recognised.
#[allow(clippy::result_large_err)]
fn read(
    dialect: Option<Dialect>,
    records: &[Value],
) -> Result<ChatCompletion, Incomplete<ChatCompletion>> {
    let mut config = StreamConfig::default();
    config.dialect = dialect;
    let mut demux = Demux::with_config(config);
    // Fed in pieces of 7 bytes: records split anywhere.
    for piece in sse(records).chunks(7) {
        if demux.feed(piece).is_err() {
            break;
        }
    }
    demux.finish()
}

/// The usage the reader keeps from `records` (the demultiplexer's completion has none: the
/// caller adds it).
fn usage_of(records: &[Value]) -> Option<Usage> {
    let mut splitter = Splitter::new(&StreamConfig::default());
    let _ = splitter.feed(&sse(records));
    splitter.meta().usage().usage()
}

fn text(index: u32, t: &str) -> Value {
    json!({"index": index, "content": {"role": "model", "parts": [{"text": t}]}})
}

fn done(index: u32, reason: &str) -> Value {
    json!({"index": index, "content": {"role": "model", "parts": []}, "finishReason": reason})
}

fn record(candidates: Vec<Value>) -> Value {
    json!({"candidates": candidates, "modelVersion": "gemini-2.5-flash", "responseId": "r1"})
}

#[test]
fn candidates_interleaved_out_of_order_are_each_a_choice() {
    let records = [
        record(vec![text(2, "C"), text(0, "A")]),
        record(vec![text(1, "B"), text(2, "c")]),
        record(vec![done(2, "STOP"), text(0, "a")]),
        record(vec![
            json!({"index": 1, "content": {"parts": [{"text": "b"}]}, "finishReason": "MAX_TOKENS"}),
        ]),
        json!({"candidates": [done(0, "STOP")], "usageMetadata": {"promptTokenCount": 5,
            "candidatesTokenCount": 6, "thoughtsTokenCount": 4, "totalTokenCount": 15,
            "cachedContentTokenCount": 2}}),
    ];
    for dialect in [Some(Dialect::Gemini), None] {
        let done = read(dialect, &records).unwrap();
        assert_eq!(done.id, "r1");
        assert_eq!(done.model, "gemini-2.5-flash");
        let got: Vec<_> = (done.choices.iter())
            .map(|c| {
                (
                    c.index,
                    c.message.content.as_deref(),
                    c.finish_reason.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (0, Some("Aa"), Some("stop")),
                (1, Some("Bb"), Some("length")),
                (2, Some("Cc"), Some("stop"))
            ]
        );
        assert!(done.choices.iter().all(|c| c.message.role == "assistant"));
        let usage = usage_of(&records).unwrap();
        assert_eq!(
            (
                usage.prompt_tokens,
                usage.completion_tokens,
                usage.total_tokens
            ),
            (5, 10, 15)
        );
        let usage = serde_json::to_value(&usage).unwrap();
        assert_eq!(usage["completion_tokens_details"]["reasoning_tokens"], 4);
        assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 2);
    }
}

#[test]
fn a_record_without_an_index_is_candidate_0_and_usage_is_the_last_count() {
    let records = [
        json!({"candidates": [{"content": {"parts": [{"text": "Hi"}]}}],
            "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1}}),
        json!({"candidates": [{"content": {"parts": [{"text": "!"}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2}}),
    ];
    let done = read(None, &records).unwrap();
    assert_eq!(done.choices.len(), 1);
    assert_eq!(done.choices[0].message.content.as_deref(), Some("Hi!"));
    let usage = usage_of(&records).unwrap();
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.total_tokens
        ),
        (3, 2, 5)
    );
}

#[test]
fn every_finish_reason_in_chat_s_terms() {
    for (reason, finish) in [
        ("STOP", "stop"),
        ("MAX_TOKENS", "length"),
        ("SAFETY", "content_filter"),
        ("RECITATION", "content_filter"),
        ("PROHIBITED_CONTENT", "content_filter"),
        ("BLOCKLIST", "content_filter"),
        ("SPII", "content_filter"),
    ] {
        let done = read(
            None,
            &[record(vec![text(0, "x")]), record(vec![done(0, reason)])],
        )
        .unwrap();
        let choice = &done.choices[0];
        assert_eq!(choice.finish_reason.as_deref(), Some(finish), "{reason}");
        let kept = serde_json::to_value(choice).unwrap();
        assert_eq!(
            kept["stop_reason"], reason,
            "the provider's own reason is kept"
        );
    }
    // A candidate that fails fails alone: the others are whole.
    for reason in ["MALFORMED_FUNCTION_CALL", "OTHER", "SOMETHING_NEW"] {
        let records = [
            record(vec![text(0, "fine"), text(1, "half")]),
            record(vec![
                json!({"index": 1, "finishReason": reason, "finishMessage": "bad call"}),
                done(0, "STOP"),
            ]),
        ];
        let cut = read(None, &records).unwrap_err();
        assert_eq!(cut.error.kind(), ErrorKind::Upstream, "{reason}");
        let message = cut.error.to_string();
        assert!(
            message.contains(&format!("candidate 1 with {reason}: bad call")),
            "{message}"
        );
        let choices = &cut.partial.choices;
        assert_eq!(choices[0].finish_reason.as_deref(), Some("stop"));
        assert_eq!(choices[0].message.content.as_deref(), Some("fine"));
        assert_eq!(choices[1].message.content.as_deref(), Some("half"));
    }
}

#[test]
fn function_calls_are_whole_calls_and_stop_means_tool_calls() {
    let call = |name: &str, args: Value| json!({"functionCall": {"name": name, "args": args}});
    let records = [
        record(vec![
            json!({"index": 1, "content": {"role": "model", "parts": [
            {"text": "Let me look.", "thought": true},
            call("weather", json!({"city": "Paris", "units": ["C"]}))]}}),
        ]),
        record(vec![
            json!({"index": 1, "content": {"parts": [{"functionCall": {"name": "time"},
                "thoughtSignature": "CiQB"}]}, "finishReason": "STOP"}),
            json!({"index": 0, "content": {"parts": [{"text": "No call."}]}, "finishReason": "STOP"}),
        ]),
    ];
    let done = read(Some(Dialect::Gemini), &records).unwrap();
    let plain = &done.choices[0];
    assert_eq!(plain.finish_reason.as_deref(), Some("stop"));
    let called = &done.choices[1];
    assert_eq!(called.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(
        called.message.reasoning_content.as_deref(),
        Some("Let me look.")
    );
    assert_eq!(called.message.content, None);
    let calls: Vec<_> = (called.message.tool_calls.iter())
        .map(|c| {
            (
                c.id.as_str(),
                c.function.name.as_str(),
                c.function.arguments.as_str(),
            )
        })
        .collect();
    // Ids made unique to the stream (whatever its `responseId`), then the candidate and the
    // call: the next turn's first call is not this one's.
    let shape = |id: &str, candidate_call: &str| {
        let token = (id.strip_prefix("call_"))
            .and_then(|rest| rest.split_once('_'))
            .map(|(token, rest)| (token.to_string(), rest.to_string()));
        assert!(
            token.as_ref().is_some_and(|(t, rest)| t.contains('x')
                && t.chars().all(|c| c.is_ascii_hexdigit() || c == 'x')
                && rest.as_str() == candidate_call),
            "{id}"
        );
        token.unwrap().0
    };
    assert_eq!(calls.len(), 2);
    let first = shape(calls[0].0, "1_0");
    assert_eq!(
        (calls[0].1, calls[0].2),
        ("weather", r#"{"city":"Paris","units":["C"]}"#)
    );
    let (made, signature) = calls[1].0.split_once("__thought__").unwrap();
    assert_eq!(shape(made, "1_1"), first, "one token a stream");
    assert_eq!((signature, calls[1].1, calls[1].2), ("CiQB", "time", "{}"));
    // The same records again, as an upstream that repeats its `responseId` sends them: other
    // ids.
    let again = read(Some(Dialect::Gemini), &records).unwrap();
    let id = again.choices[1].message.tool_calls[0].id.as_str();
    assert_ne!(shape(id, "1_0"), first, "a token of its own");
}

#[test]
fn upstream_errors_and_blocked_prompts_end_the_stream() {
    let error = json!({"error": {"code": 429, "message": "Resource has been exhausted",
        "status": "RESOURCE_EXHAUSTED"}});
    let cut = read(Some(Dialect::Gemini), &[record(vec![text(0, "x")]), error]).unwrap_err();
    assert_eq!(cut.error.kind(), ErrorKind::Upstream);
    assert!(
        cut.error
            .to_string()
            .contains("Resource has been exhausted"),
        "{}",
        cut.error
    );
    assert_eq!(cut.partial.choices[0].message.content.as_deref(), Some("x"));

    let blocked = json!({"promptFeedback": {"blockReason": "SAFETY"},
        "usageMetadata": {"promptTokenCount": 4}});
    let cut = read(None, &[blocked]).unwrap_err();
    assert_eq!(cut.error.kind(), ErrorKind::Upstream);
    assert!(
        cut.error
            .to_string()
            .contains("blocked the prompt (SAFETY)"),
        "{}",
        cut.error
    );
}

#[test]
fn a_stream_cut_before_every_finish_is_truncated() {
    let cut = read(
        None,
        &[
            record(vec![text(0, "A"), text(1, "B")]),
            record(vec![done(0, "STOP")]),
        ],
    )
    .unwrap_err();
    assert_eq!(cut.error.kind(), ErrorKind::Truncated);
    let wrong = read(
        Some(Dialect::Gemini),
        &[json!({"type": "message_start", "message": {}})],
    )
    .unwrap_err();
    assert_eq!(wrong.error.kind(), ErrorKind::Dialect);
}

/// Proto3's JSON may write an integer as a string: a candidate's `"index": "1"` is
/// candidate 1; an index that is no number fails naming the line, not as "index -1" of a
/// number it never was.
#[test]
fn a_candidate_index_written_as_a_string_is_read() {
    let records = [
        json!({"candidates": [{"index": "1", "content": {"parts": [{"text": "B"}]}, "finishReason": "STOP"},
            {"index": 0, "content": {"parts": [{"text": "A"}]}, "finishReason": "STOP"}]}),
    ];
    let done = read(None, &records).unwrap();
    let texts: Vec<_> = (done.choices.iter())
        .map(|c| (c.index, c.message.content.clone()))
        .collect();
    assert_eq!(texts, [(0, Some("A".into())), (1, Some("B".into()))]);
}
