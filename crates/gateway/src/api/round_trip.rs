//! Round trips: every recorded Messages and Responses stream of `tests/fixtures`, read by the
//! library in its dialect, its one choice's events fed to the encoder of that API, and the
//! encoder's bytes read back by the library in the same dialect, give the same text,
//! reasoning, refusal, tool calls (ids, names, arguments), finish and stop reasons, usage,
//! and failure. Chat Completions recordings go through both encoders too; the raw event
//! sequence of both APIs is checked frame by frame.

use choicewise_core::{
    ChatCompletion, ChoiceEvent, ChoiceOutput, Completions, Dialect, Error, ErrorKind, Source,
};
use futures::StreamExt;
use serde_json::{Value, json};

use super::messages::{self, MessagesEncoder};
use super::responses::{self, ResponsesEncoder};
use super::{Encoder, Reply, Tokens};
use crate::answer::ending::{Cut, Failure, Initiator, OutputEnd};
use crate::upstream::engine::Summary;

/// An ending of a choice the gateway cut short (it shut down).
fn cut_short() -> OutputEnd {
    OutputEnd::Stopped(Initiator::Gateway(Cut::ShutDown))
}

/// The ending of a choice whose upstream reported this error.
fn upstream_failure(message: &str) -> OutputEnd {
    let sse = format!("data: {{\"error\":{{\"message\":\"{message}\"}}}}\n\n");
    let error = choicewise_core::Demux::new()
        .feed(sse.as_bytes())
        .unwrap_err();
    OutputEnd::Failed(Failure::Upstream(error))
}

/// How a choice as read ended, as the gateway decides it.
fn ended(choice: &ChoiceOutput) -> OutputEnd {
    let seen = crate::answer::ending::Seen {
        finish: choice.finish_reason.as_deref().map(Into::into),
        ..Default::default()
    };
    crate::answer::ending::decide(Some(&seen), None)
}

fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What the library reads from a stream: the completion (partial on error), its error, and
/// choice `index`'s events (without the error that ends them).
struct Read {
    completion: ChatCompletion,
    error: Option<Error>,
    events: Vec<ChoiceEvent>,
}

async fn read(bytes: Vec<u8>, dialect: Dialect, index: u32) -> Read {
    let reads = futures::stream::iter([Ok::<_, std::io::Error>(bytes)]);
    let completions = Completions::builder()
        .dialect(dialect)
        .estimate_usage(false)
        .start(Source::sse(reads));
    let (completion, error) = match completions.collect().await {
        Ok(c) => (c, None),
        Err(incomplete) => (incomplete.partial, Some(incomplete.error)),
    };
    let choice = completions.choice(index).await.expect("the choice");
    let mut stream = choice.events();
    let mut events = Vec::new();
    while let Some(Ok(event)) = stream.next().await {
        events.push(event);
    }
    Read {
        completion,
        error,
        events,
    }
}

fn reply(stop: &[&str]) -> Reply {
    Reply {
        model: "served-model".into(),
        reasoning: true,
        stop: stop.iter().map(|s| s.to_string()).collect(),
        echo: Default::default(),
        ..Reply::default()
    }
}

/// The encoder of the client API whose streams are the recording's `dialect`.
fn encoder(dialect: Dialect, reply: &Reply) -> Box<dyn Encoder> {
    match dialect {
        Dialect::Anthropic => Box::new(MessagesEncoder::new(reply)),
        Dialect::Responses => Box::new(ResponsesEncoder::new(reply)),
        other => unreachable!("no client API streams {other}"),
    }
}

/// Feeds a choice's events to `api`'s encoder as the gateway does, its end or failure last.
fn encode(api: Dialect, reply: &Reply, original: &Read, index: u32) -> Vec<u8> {
    let mut encoder = encoder(api, reply);
    let mut out = Vec::new();
    encoder.start(&mut out);
    for event in &original.events {
        encoder.event(event, &mut out);
    }
    let choice = original
        .completion
        .choices
        .iter()
        .find(|c| c.index == index);
    match (&original.error, encoder.finished()) {
        (Some(e), false) => {
            let end = OutputEnd::Failed(Failure::Upstream(e.clone()));
            encoder.failed(&end, None, &mut out);
        }
        _ => {
            let usage = original.completion.usage.as_ref().map(Tokens::from_usage);
            encoder.end(
                &usage.unwrap_or_default(),
                choice.and_then(|c| c.stop_reason.as_deref()),
                None,
                &mut out,
            );
        }
    }
    out
}

/// What must survive the trip, of one choice.
fn essentials(c: &ChoiceOutput, stop_reason: bool) -> Value {
    let m = &c.message;
    let calls: Vec<Value> = (m.tool_calls.iter())
        .map(|t| json!([t.id, t.function.name, t.function.arguments]))
        .collect();
    // An empty text is no text (a role chunk's `""` shows nothing in these APIs).
    let text = |t: &Option<String>| t.clone().filter(|t| !t.is_empty());
    json!({
        "content": text(&m.content), "reasoning": text(&m.reasoning_content),
        "refusal": text(&m.refusal),
        "calls": calls, "finish": c.finish_reason,
        "stop_reason": if stop_reason { json!(c.stop_reason) } else { Value::Null },
    })
}

/// The frames' event names and data.
fn frames(bytes: &[u8]) -> Vec<(String, Value)> {
    let text = std::str::from_utf8(bytes).expect("UTF-8");
    assert!(text.ends_with("\n\n"), "a frame is left open: {text:?}");
    (text.split_terminator("\n\n"))
        .map(|frame| {
            let (event, data) = frame.split_once('\n').expect("two lines");
            let name = event.strip_prefix("event: ").expect("an event line");
            let data: Value =
                serde_json::from_str(data.strip_prefix("data: ").expect("a data line")).unwrap();
            (name.to_string(), data)
        })
        .collect()
}

/// The rules of each API's sequence, whatever the content: names agree with `type`s, blocks
/// or items open and close in order, Responses' sequence numbers count from 0.
fn well_formed(api: Dialect, bytes: &[u8]) {
    let frames = frames(bytes);
    let names: Vec<&str> = frames.iter().map(|(n, _)| n.as_str()).collect();
    for (name, data) in &frames {
        assert_eq!(data["type"], name.as_str(), "{names:?}");
    }
    match api {
        Dialect::Anthropic => {
            // A failure before anything else is a lone `error` event.
            assert!(
                names[0] == "message_start" || names == ["error"],
                "{names:?}"
            );
            let last = *names.last().unwrap();
            assert!(last == "message_stop" || last == "error", "{names:?}");
            let (mut open, mut next) = (None, 0);
            for (name, data) in &frames {
                let index = data["index"].as_u64();
                match name.as_str() {
                    "content_block_start" => {
                        assert_eq!((open, index), (None, Some(next)), "{names:?}");
                        open = index;
                        next += 1;
                    }
                    "content_block_delta" => assert_eq!(open, index, "{names:?}"),
                    "content_block_stop" => assert_eq!(open.take(), index, "{names:?}"),
                    "message_delta" | "message_stop" => assert_eq!(open, None),
                    _ => {}
                }
            }
            let pings = names.iter().filter(|n| **n == "ping").count();
            assert_eq!(pings, usize::from(next > 0), "{names:?}");
        }
        Dialect::Responses => {
            assert_eq!(names[..2], ["response.created", "response.in_progress"]);
            let last = *names.last().unwrap();
            assert!(
                [
                    "response.completed",
                    "response.incomplete",
                    "response.failed"
                ]
                .contains(&last),
                "{names:?}"
            );
            let mut open: Option<u64> = None;
            let mut items = 0;
            for (k, (name, data)) in frames.iter().enumerate() {
                assert_eq!(data["sequence_number"], k, "{names:?}");
                let index = data["output_index"].as_u64();
                match name.as_str() {
                    "response.output_item.added" => {
                        assert_eq!((open, index), (None, Some(items)), "{names:?}");
                        open = index;
                    }
                    "response.output_item.done" => {
                        assert_eq!(open.take(), index, "{names:?}");
                        items += 1;
                    }
                    n if n.starts_with("response.output_item") => unreachable!(),
                    _ if index.is_some() => assert_eq!(open, index, "{name}: {names:?}"),
                    _ => {}
                }
            }
            if last != "response.failed" {
                assert_eq!(open, None);
                let output = &frames.last().unwrap().1["response"]["output"];
                assert_eq!(output.as_array().map(Vec::len), Some(items as usize));
            }
        }
        other => unreachable!("{other} requests are not translated"),
    }
}

/// One recording through its API's encoder and back: the same essentials, usage and failure.
async fn round_trip(name: &str, api: Dialect, stop: &[&str]) -> (Read, Read, Vec<u8>) {
    let dialect = api;
    let original = read(fixture(name), dialect, 0).await;
    let reply = reply(stop);
    let bytes = encode(api, &reply, &original, 0);
    well_formed(api, &bytes);
    let back = read(bytes.clone(), dialect, 0).await;
    assert_eq!(
        essentials(&back.completion.choices[0], true),
        essentials(&original.completion.choices[0], true),
        "{name}"
    );
    let usage = |r: &Read| {
        (r.completion.usage.as_ref()).map(|u| (u.prompt_tokens, u.completion_tokens, u.source))
    };
    if original.error.is_none() {
        // A failure carries no usage in either API.
        assert_eq!(usage(&back), usage(&original), "{name}");
    }
    assert_eq!(
        back.error.as_ref().map(Error::kind),
        original.error.as_ref().map(Error::kind),
        "{name}: {:?}",
        back.error
    );
    (original, back, bytes)
}

#[tokio::test]
async fn every_anthropic_recording_comes_back_the_same() {
    for name in [
        "anthropic_tools.sse",
        "anthropic_max_tokens.sse",
        "anthropic_refusal.sse",
        "anthropic_error.sse",
        "anthropic_stop_sequence.sse",
    ] {
        round_trip(name, Dialect::Anthropic, &[]).await;
    }
    // The one stop sequence asked for is named; the failure keeps its cause.
    let (_, back, bytes) =
        round_trip("anthropic_stop_sequence.sse", Dialect::Anthropic, &["4."]).await;
    assert_eq!(
        back.completion.choices[0].stop_reason.as_deref(),
        Some("stop_sequence")
    );
    let delta = frames(&bytes)
        .into_iter()
        .find(|(n, _)| n == "message_delta")
        .unwrap();
    assert_eq!(
        delta.1["delta"],
        json!({"stop_reason": "stop_sequence", "stop_sequence": "4."})
    );
    let (original, back, _) = round_trip("anthropic_error.sse", Dialect::Anthropic, &[]).await;
    assert_eq!(back.error.unwrap().kind(), ErrorKind::Upstream);
    assert_eq!(
        back.completion.choices[0].message.content.as_deref(),
        Some("Partial answ")
    );
    assert!(original.error.unwrap().to_string().contains("Overloaded"));
}

#[tokio::test]
async fn every_responses_recording_comes_back_the_same() {
    for name in [
        "responses_text.sse",
        "responses_tools.sse",
        "responses_incomplete.sse",
        "responses_failed.sse",
        "responses_text_then_call.sse",
        "responses_max_output_tokens.sse",
    ] {
        round_trip(name, Dialect::Responses, &[]).await;
    }
    let (_, back, bytes) =
        round_trip("responses_max_output_tokens.sse", Dialect::Responses, &[]).await;
    assert_eq!(
        back.completion.choices[0].finish_reason.as_deref(),
        Some("length")
    );
    let last = frames(&bytes).pop().unwrap().1;
    assert_eq!(
        last["response"]["incomplete_details"]["reason"],
        "max_output_tokens"
    );
    let (_, back, _) = round_trip("responses_failed.sse", Dialect::Responses, &[]).await;
    assert_eq!(back.error.unwrap().kind(), ErrorKind::Upstream);
}

#[tokio::test]
async fn chat_completions_choices_go_out_in_both_apis() {
    for (name, index) in [
        ("deepseek_reasoning_content.sse", 0),
        ("openai_n3_tools.sse", 0),
        ("openai_n3_tools.sse", 1),
        ("openai_n3_tools.sse", 2),
        ("openai_refusal.sse", 1),
    ] {
        let original = read(fixture(name), Dialect::Chat, index).await;
        let want = original
            .completion
            .choices
            .iter()
            .find(|c| c.index == index)
            .unwrap();
        for (api, dialect) in [
            (Dialect::Anthropic, Dialect::Anthropic),
            (Dialect::Responses, Dialect::Responses),
        ] {
            let bytes = encode(api, &reply(&[]), &original, index);
            well_formed(api, &bytes);
            let back = read(bytes, dialect, 0).await;
            assert!(
                back.error.is_none(),
                "{name} {index} {api:?}: {:?}",
                back.error
            );
            let mut want = essentials(want, false);
            if api == Dialect::Anthropic {
                // Anthropic has no refusal: its text is text.
                if let Some(refusal) = want["refusal"].as_str().map(str::to_string) {
                    want["content"] = json!(format!(
                        "{}{refusal}",
                        want["content"].as_str().unwrap_or_default()
                    ));
                    want["refusal"] = Value::Null;
                }
            }
            assert_eq!(
                essentials(&back.completion.choices[0], false),
                want,
                "{name} {index} {api:?}"
            );
        }
    }
}

/// The names of the frames, runs of one name as one.
fn runs(bytes: &[u8]) -> Vec<String> {
    let mut names: Vec<String> = frames(bytes).into_iter().map(|(n, _)| n).collect();
    names.dedup();
    names
}

#[tokio::test]
async fn the_event_sequences_are_the_apis_own() {
    let (_, _, bytes) = round_trip("anthropic_tools.sse", Dialect::Anthropic, &[]).await;
    assert_eq!(
        runs(&bytes),
        [
            "message_start",
            "content_block_start", // thinking
            "ping",
            "content_block_delta",
            "content_block_stop",
            "content_block_start", // text
            "content_block_delta",
            "content_block_stop",
            "content_block_start", // tool_use toolu_01Paris
            "content_block_delta",
            "content_block_stop",
            "content_block_start", // tool_use toolu_02Now
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    let frames_ = frames(&bytes);
    let deltas: Vec<&str> = (frames_.iter())
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| d["delta"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        deltas[..3],
        ["thinking_delta", "thinking_delta", "text_delta"]
    );
    assert!(deltas[4..].iter().all(|d| *d == "input_json_delta"));
    let delta = &frames_[frames_.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(delta["usage"]["input_tokens"], 472);
    assert_eq!(delta["usage"]["output_tokens"], 89);

    let (_, _, bytes) = round_trip("responses_text.sse", Dialect::Responses, &[]).await;
    assert_eq!(
        runs(&bytes),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added", // reasoning
            "response.reasoning_summary_part.added",
            "response.reasoning_summary_text.delta",
            "response.reasoning_summary_text.done",
            "response.reasoning_summary_part.done",
            "response.output_item.done",
            "response.output_item.added", // message
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let (_, _, bytes) = round_trip("responses_tools.sse", Dialect::Responses, &[]).await;
    assert_eq!(
        runs(&bytes),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let last = frames(&bytes).pop().unwrap().1;
    let output = &last["response"]["output"];
    assert_eq!(output[0]["call_id"], "call_Weather");
    assert_eq!(output[1]["arguments"], "{\"tz\": \"Europe/Oslo\"}");
    assert_eq!(
        last["response"]["usage"],
        json!({"input_tokens": 55, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 31,
               "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 86})
    );
}

#[test]
fn the_choicewise_summary_rides_on_the_last_event() {
    let summary = Summary {
        samples: Some(3),
        selected: Some(vec![1]),
        decision: Some("first_finished"),
        ..Summary::default()
    };
    // Its fields as the extension writes them: `tries` always.
    let written = json!({"decision": "first_finished", "samples": 3, "selected": [1], "tries": []});
    for api in [Dialect::Anthropic, Dialect::Responses] {
        let mut encoder = encoder(api, &reply(&[]));
        let mut out = Vec::new();
        encoder.event(&ChoiceEvent::Content("Hi".into()), &mut out);
        encoder.event(&ChoiceEvent::Finished("stop".into()), &mut out);
        assert!(encoder.finished());
        let usage = Tokens {
            input: 3,
            output: 1,
            ..Tokens::default()
        };
        encoder.end(&usage, None, Some(&summary), &mut out);
        let mut frames = frames(&out);
        let (name, last) = frames.pop().unwrap();
        match api {
            Dialect::Anthropic => {
                assert_eq!(name, "message_stop");
                assert_eq!(frames.pop().unwrap().1["choicewise"], written);
            }
            Dialect::Responses => {
                assert_eq!(name, "response.completed");
                assert_eq!(last["choicewise"], written);
            }
            other => unreachable!("{other} requests are not translated"),
        }
        // Nothing after the end.
        let len = out.len();
        encoder.event(&ChoiceEvent::Content("late".into()), &mut out);
        encoder.failed(&OutputEnd::Failed(Failure::Missing), None, &mut out);
        encoder.end(&usage, None, None, &mut out);
        assert_eq!(out.len(), len);
    }
}

#[test]
fn odd_event_orders_give_well_formed_streams() {
    use choicewise_core::{CallKind, CallRef, FunctionCallEvent};
    let call = |position| CallRef {
        kind: CallKind::Tool,
        position,
    };
    let odd = [
        ChoiceEvent::Role("assistant".into()),
        ChoiceEvent::FunctionCall(FunctionCallEvent::Arguments {
            call: call(0),
            fragment: "{\"x\"".into(),
        }),
        ChoiceEvent::Refusal("no".into()),
        ChoiceEvent::Content("".into()),
        ChoiceEvent::Content("yes".into()),
        ChoiceEvent::Refusal(" and no".into()),
        ChoiceEvent::Reasoning("hm".into()),
        ChoiceEvent::FunctionCall(FunctionCallEvent::Started {
            call: call(0),
            id: None,
            name: None,
            custom: false,
        }),
        ChoiceEvent::FunctionCall(FunctionCallEvent::Started {
            call: call(1),
            id: Some("c1".into()),
            name: Some("f".into()),
            custom: false,
        }),
        ChoiceEvent::FunctionCall(FunctionCallEvent::Arguments {
            call: call(0),
            fragment: "late".into(),
        }),
        ChoiceEvent::FunctionCall(FunctionCallEvent::Arguments {
            call: call(1),
            fragment: "{}".into(),
        }),
        ChoiceEvent::Cancelled(choicewise_core::cancel::CancelReason::Decided),
        ChoiceEvent::Finished("stop".into()),
        ChoiceEvent::Finished("length".into()),
        ChoiceEvent::Content("after".into()),
    ];
    for api in [Dialect::Anthropic, Dialect::Responses] {
        for cut in 0..=odd.len() {
            for ending in 0..3 {
                let mut encoder = encoder(api, &reply(&["a", "b"]));
                let mut out = Vec::new();
                for event in &odd[..cut] {
                    encoder.event(event, &mut out);
                }
                match ending {
                    0 => encoder.end(&Tokens::default(), Some("stop_sequence"), None, &mut out),
                    1 => encoder.failed(&cut_short(), Some(&Summary::default()), &mut out),
                    _ => {
                        encoder.start(&mut out);
                        encoder.end(&Tokens::default(), None, None, &mut out);
                        encoder.failed(&cut_short(), None, &mut out);
                    }
                }
                well_formed(api, &out);
                let last = frames(&out).pop().unwrap();
                let failed = ["error", "response.failed"].contains(&last.0.as_str());
                // Without a finish, an end is a failure.
                assert_eq!(failed, ending == 1 || cut < 13, "{api:?} {cut} {ending}");
            }
        }
    }
}

#[tokio::test]
async fn non_streamed_answers() {
    let original = read(fixture("anthropic_tools.sse"), Dialect::Anthropic, 0).await;
    let choice = &original.completion.choices[0];
    let usage = Tokens::from_usage(original.completion.usage.as_ref().unwrap());
    let summary = Summary {
        decision: Some("vote"),
        ..Summary::default()
    };
    let m: Value = serde_json::from_slice(&messages::object_text(
        &reply(&[]),
        choice,
        &usage,
        Some(&summary),
    ))
    .unwrap();
    assert_eq!(m["type"], "message");
    assert_eq!(m["model"], "served-model");
    assert_eq!(
        m["content"],
        json!([
            {"type": "thinking", "thinking": "The user wants the weather in two cities.", "signature": ""},
            {"type": "text", "text": "Let me check both cities."},
            {"type": "tool_use", "id": "toolu_01Paris", "name": "get_weather", "input": {"city": "Paris", "unit": "c"}},
            {"type": "tool_use", "id": "toolu_02Now", "name": "get_time", "input": {}},
        ])
    );
    assert_eq!(
        (m["stop_reason"].as_str(), &m["stop_sequence"]),
        (Some("tool_use"), &Value::Null)
    );
    assert_eq!(m["usage"]["input_tokens"], 472);
    assert_eq!(m["usage"]["output_tokens"], 89);
    assert_eq!(m["choicewise"], json!({"decision": "vote", "tries": []}));
    // Without thinking asked for, none is answered.
    let mut plain = reply(&[]);
    plain.reasoning = false;
    assert_eq!(
        messages::message(&plain, choice, &usage, None)["content"][0]["type"],
        "text"
    );

    let r = responses::message(&reply(&[]), choice, &ended(choice), &usage, None);
    assert_eq!(
        (r["object"].as_str(), r["status"].as_str()),
        (Some("response"), Some("completed"))
    );
    let kinds: Vec<&str> = r["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["reasoning", "message", "function_call", "function_call"]
    );
    assert_eq!(r["output"][2]["call_id"], "toolu_01Paris");
    assert_eq!(
        r["output"][2]["arguments"],
        r#"{"city": "Paris", "unit": "c"}"#
    );
    assert_eq!(r["usage"]["total_tokens"], 561);
    assert!(r.get("choicewise").is_none());

    let cut = read(fixture("anthropic_max_tokens.sse"), Dialect::Anthropic, 0).await;
    let choice = &cut.completion.choices[0];
    let m = messages::message(&reply(&[]), choice, &Tokens::default(), None);
    assert_eq!(m["stop_reason"], "max_tokens");
    // Arguments cut short are not JSON: kept as their text.
    assert!(
        m["content"][0]["input"]
            .as_str()
            .unwrap()
            .starts_with("{\"path\"")
    );
    let r = responses::message(
        &reply(&[]),
        choice,
        &ended(choice),
        &Tokens::default(),
        None,
    );
    assert_eq!(r["status"], "incomplete");
    assert_eq!(r["incomplete_details"]["reason"], "max_output_tokens");
    let unfinished = ChoiceOutput::default();
    let none = Tokens::default();
    let r = responses::message(&reply(&[]), &unfinished, &ended(&unfinished), &none, None);
    assert_eq!(r["status"], "failed");
    // Its error is the verdict's: its words, and its code from its cause.
    let error = |end: &OutputEnd| responses::message(&reply(&[]), &unfinished, end, &none, None);
    assert_eq!(
        r["error"],
        json!({"code": "server_error",
               "message": "the upstream ended the choice without a finish reason"})
    );
    let shut = error(&cut_short());
    assert_eq!(shut["error"]["code"], "server_error");
    assert_eq!(shut["error"]["message"], crate::upstream::stop::SHUT_DOWN);
    let overflow = upstream_failure("maximum context length is 8192 tokens");
    assert_eq!(
        error(&overflow)["error"]["code"],
        responses::CONTEXT_LENGTH_EXCEEDED
    );
    let m = messages::message(&reply(&[]), &unfinished, &Tokens::default(), None);
    assert_eq!(m["stop_reason"], Value::Null);
}

/// A streamed failure's bytes come from the typed ending: its words, and in Responses its
/// code from its cause (an upstream's context overflow, which Codex CLI reads by its code;
/// the server's for anything else, a cut included); Anthropic's `error` event says the same
/// words.
#[test]
fn a_failures_code_and_words_come_from_its_ending() {
    let overflow = upstream_failure("prompt is too long: 210000 tokens > 200000 maximum");
    let cases = [
        (overflow, responses::CONTEXT_LENGTH_EXCEEDED),
        (cut_short(), "server_error"),
        (OutputEnd::Failed(Failure::NoFinishReason), "server_error"),
        (OutputEnd::Stopped(Initiator::Client), "server_error"),
    ];
    for (end, code) in cases {
        let why = end.why().unwrap();
        let mut out = Vec::new();
        ResponsesEncoder::new(&reply(&[])).failed(&end, None, &mut out);
        let (name, data) = frames(&out).pop().unwrap();
        assert_eq!(name, "response.failed", "{end}");
        assert_eq!(
            data["response"]["error"],
            json!({"code": code, "message": why}),
            "{end}"
        );
        let mut out = Vec::new();
        let summary = Summary {
            decision: Some("x"),
            ..Summary::default()
        };
        MessagesEncoder::new(&reply(&[])).failed(&end, Some(&summary), &mut out);
        let (name, data) = frames(&out).pop().unwrap();
        assert_eq!(name, "error", "{end}");
        assert_eq!(
            data,
            json!({"type": "error", "error": {"type": "api_error", "message": why},
                   "choicewise": {"decision": "x", "tries": []}}),
            "{end}"
        );
    }
}
