//! OpenAI Responses and Anthropic Messages streams read as one choice: recorded streams of
//! each dialect (authored from the providers' public event references), whole and in small
//! read splits, recognised from the stream itself or forced.

use choicewise_core::Source;
use choicewise_core::{
    CallKind, ChatCompletion, ChoiceEvent, Completions, Demux, Dialect, Error, ErrorDetail,
    FunctionCallEvent, UsageSource, WarningKind,
};
use futures::TryStreamExt;

/// Collects a fixture under every split of `crate::common::SPLITS`, checking they agree; returns the
/// result and choice 0's events.
async fn run(
    name: &str,
    dialect: Option<Dialect>,
) -> (
    Result<ChatCompletion, (ChatCompletion, Error)>,
    Vec<ChoiceEvent>,
) {
    let bytes = crate::common::fixture(name);
    let mut reference: Option<String> = None;
    let mut out = None;
    for sizes in crate::common::SPLITS {
        let reads = crate::common::split(&bytes, sizes);
        let stream = futures::stream::iter(reads.into_iter().map(Ok::<_, std::io::Error>));
        let mut builder = Completions::builder();
        if let Some(dialect) = dialect {
            builder = builder.dialect(dialect);
        }
        let completions = builder.estimate_usage(false).start(Source::sse(stream));
        let result = completions
            .collect()
            .await
            .map_err(|inc| (inc.partial, inc.error));
        let choice = completions.choice(0).await.expect("one choice");
        let events: Vec<ChoiceEvent> = {
            let mut s = choice.events();
            let mut v = Vec::new();
            while let Ok(Some(e)) = s.try_next().await {
                v.push(e);
            }
            v
        };
        let seen = format!("{result:?} {events:?}");
        assert_eq!(
            reference.get_or_insert(seen.clone()),
            &seen,
            "{name} split {sizes:?}"
        );
        out = Some((result, events));
    }
    out.unwrap()
}

fn calls(c: &ChatCompletion) -> Vec<(String, String, String)> {
    c.choices[0]
        .message
        .tool_calls
        .iter()
        .map(|t| {
            (
                t.id.clone(),
                t.function.name.clone(),
                t.function.arguments.clone(),
            )
        })
        .collect()
}

/// The positions of the `Started` / `Finished` events of tool call `p` and of the choice's
/// `Finished`.
fn positions(events: &[ChoiceEvent], p: u32) -> (usize, usize, usize) {
    let find = |f: &dyn Fn(&ChoiceEvent) -> bool| events.iter().position(f).unwrap();
    let call = |e: &FunctionCallEvent| e.call().kind == CallKind::Tool && e.call().position == p;
    (
        find(
            &|e| matches!(e, ChoiceEvent::FunctionCall(f @ FunctionCallEvent::Started { .. }) if call(f)),
        ),
        find(
            &|e| matches!(e, ChoiceEvent::FunctionCall(f @ FunctionCallEvent::Finished { .. }) if call(f)),
        ),
        find(&|e| matches!(e, ChoiceEvent::Finished(_))),
    )
}

#[tokio::test]
async fn anthropic_text_thinking_and_tool_calls() {
    for dialect in [None, Some(Dialect::Anthropic)] {
        let (result, events) = run("anthropic_tools.sse", dialect).await;
        let c = result.expect("a complete message");
        assert_eq!(
            (c.id.as_str(), c.model.as_str()),
            ("msg_01Tools", "claude-sonnet-4-5")
        );
        let m = &c.choices[0].message;
        assert_eq!(m.role, "assistant");
        assert_eq!(m.content.as_deref(), Some("Let me check both cities."));
        assert_eq!(
            m.reasoning_content.as_deref(),
            Some("The user wants the weather in two cities.")
        );
        assert_eq!(
            calls(&c),
            vec![
                (
                    "toolu_01Paris".into(),
                    "get_weather".into(),
                    r#"{"city": "Paris", "unit": "c"}"#.into()
                ),
                // A tool_use block without argument fragments: `{}`.
                ("toolu_02Now".into(), "get_time".into(), "{}".into()),
            ]
        );
        assert_eq!(c.choices[0].finish_reason.as_deref(), Some("tool_calls"));
        let usage = c.usage.unwrap();
        assert_eq!(
            (usage.prompt_tokens, usage.completion_tokens, usage.source),
            (472, 89, UsageSource::Reported)
        );
        // Each call finishes at its content_block_stop: the first before the second starts
        // (the stop is its own event), both before the message's finish.
        let (_, first_done, finish) = positions(&events, 0);
        let (second_started, second_done, _) = positions(&events, 1);
        assert!(
            first_done < second_started && second_done < finish,
            "{events:?}"
        );
        let ChoiceEvent::FunctionCall(FunctionCallEvent::Finished { value, .. }) =
            &events[first_done]
        else {
            unreachable!()
        };
        assert_eq!(value.as_ref().unwrap().to_value()["city"], "Paris");
    }
}

#[tokio::test]
async fn an_anthropic_call_finishes_exactly_at_its_block_stop() {
    // Without the runtime: feed event by event and look at the events after each.
    let bytes = crate::common::fixture("anthropic_tools.sse");
    let text = String::from_utf8(bytes).unwrap();
    let mut demux = Completions::builder().demux();
    let mut finished_at = None;
    for (k, event) in text.split_inclusive("\n\n").enumerate() {
        demux.feed(event.as_bytes()).unwrap();
        let done = demux.events(0).iter().any(|e| {
            matches!(e, ChoiceEvent::FunctionCall(FunctionCallEvent::Finished { call, .. }) if call.position == 0)
        });
        if done && finished_at.is_none() {
            finished_at = Some((k, event.to_string()));
        }
    }
    let (_, event) = finished_at.unwrap();
    assert!(
        event.contains("content_block_stop") && event.contains("\"index\":2"),
        "{event}"
    );
}

#[tokio::test]
async fn anthropic_max_tokens_cuts_a_call_and_the_last_event_lacks_its_blank_line() {
    let (result, events) = run("anthropic_max_tokens.sse", None).await;
    let c = result.expect("a complete message");
    assert_eq!(c.choices[0].finish_reason.as_deref(), Some("length"));
    // The call keeps what it received.
    assert_eq!(
        calls(&c)[0].2,
        "{\"path\": \"notes.md\", \"body\": \"First line\\nSecond li"
    );
    let usage = c.usage.unwrap();
    assert_eq!((usage.prompt_tokens, usage.completion_tokens), (30, 16));
    assert!(matches!(events.last(), Some(ChoiceEvent::Finished(r)) if &**r == "length"));
}

#[tokio::test]
async fn an_anthropic_error_event_is_a_typed_error_with_everything_kept() {
    let (result, _) = run("anthropic_error.sse", None).await;
    let (partial, error) = result.unwrap_err();
    let ErrorDetail::Upstream(u) = error.detail() else {
        panic!("{error:?}")
    };
    assert_eq!((u.kind.as_deref(), u.line), (Some("overloaded_error"), 10));
    assert_eq!(
        partial.choices[0].message.content.as_deref(),
        Some("Partial answ")
    );
}

#[tokio::test]
async fn responses_text_with_a_reasoning_summary_and_a_foreign_done() {
    let (result, _) = run("responses_text.sse", None).await;
    let c = result.expect("complete");
    assert_eq!(
        (c.id.as_str(), c.model.as_str()),
        ("resp_0Text", "gpt-5-mini")
    );
    assert_eq!(c.created, 1_761_000_000);
    let m = &c.choices[0].message;
    assert_eq!(
        m.content.as_deref(),
        Some("There are three r's in strawberry.")
    );
    assert_eq!(m.reasoning_content.as_deref(), Some("Counting letters."));
    assert_eq!(c.choices[0].finish_reason.as_deref(), Some("stop"));
    let u = c.usage.unwrap();
    assert_eq!(
        (u.prompt_tokens, u.completion_tokens, u.total_tokens),
        (18, 42, 60)
    );
}

#[tokio::test]
async fn responses_parallel_calls_by_output_index_and_arguments_only_in_done() {
    let (result, events) = run("responses_tools.sse", Some(Dialect::Responses)).await;
    let c = result.expect("complete");
    assert_eq!(
        calls(&c),
        vec![
            (
                "call_Weather".into(),
                "get_weather".into(),
                r#"{"city": "Oslo"}"#.into()
            ),
            (
                "call_Time".into(),
                "get_time".into(),
                r#"{"tz": "Europe/Oslo"}"#.into()
            ),
        ]
    );
    assert_eq!(c.choices[0].finish_reason.as_deref(), Some("tool_calls"));
    let (_, first_done, finish) = positions(&events, 0);
    let (second_started, _, _) = positions(&events, 1);
    assert!(first_done < second_started && second_started < finish);
    // The second call's arguments came only with `.done`: one fragment, then Finished.
    let fragments = events
        .iter()
        .filter(|e| matches!(e, ChoiceEvent::FunctionCall(FunctionCallEvent::Arguments { call, .. }) if call.position == 1))
        .count();
    assert_eq!(fragments, 1);
}

#[tokio::test]
async fn responses_refusal_incomplete_and_unknown_events() {
    let bytes = crate::common::fixture("responses_incomplete.sse");
    let completions = Completions::new(Source::reader(std::io::Cursor::new(bytes)));
    let c = completions.collect().await.expect("complete");
    assert_eq!(
        c.choices[0].message.refusal.as_deref(),
        Some("I can't help with that.")
    );
    assert_eq!(
        c.choices[0].finish_reason.as_deref(),
        Some("content_filter")
    );
    let unknown: Vec<String> = completions
        .warnings()
        .into_iter()
        .filter_map(|w| match w.kind {
            WarningKind::UnknownEvent { kind } => Some(kind),
            _ => None,
        })
        .collect();
    assert_eq!(
        unknown,
        [
            "response.web_search_call.searching",
            "response.custom_future_event"
        ]
    );
}

#[tokio::test]
async fn a_failed_response_is_an_upstream_error() {
    let (result, _) = run("responses_failed.sse", None).await;
    let (partial, error) = result.unwrap_err();
    let ErrorDetail::Upstream(u) = error.detail() else {
        panic!("{error:?}")
    };
    assert_eq!(u.code.as_deref(), Some("server_error"));
    assert_eq!(partial.choices[0].message.content.as_deref(), Some("Half"));
}

#[test]
fn an_event_of_another_dialect_is_an_error_naming_it() {
    let mut demux = Completions::builder().dialect(Dialect::Anthropic).demux();
    let e = demux
        .feed(b"data: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n")
        .unwrap_err();
    assert!(
        matches!(e.detail(), ErrorDetail::WrongDialect { expected: Dialect::Anthropic, found, line: 1 } if found == "response.output_text.delta"),
        "{e:?}"
    );
    let mut demux = Demux::new();
    demux
        .feed(b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n")
        .unwrap();
    let e = demux
        .feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n")
        .unwrap_err();
    assert!(
        matches!(e.detail(), ErrorDetail::WrongDialect { found, line: 4, .. } if found == "chat.completion.chunk"),
        "{e:?}"
    );
}

#[test]
fn chat_streams_are_still_recognised_as_chat() {
    for name in [
        "demo.sse",
        "openai_n3_tools.sse",
        "azure_filters.sse",
        "vllm_n4_reasoning.sse",
    ] {
        let mut demux = Demux::new();
        let bytes = crate::common::fixture(name);
        for read in bytes.chunks(97) {
            if demux.feed(read).is_err() {
                break;
            }
        }
        let whole = demux.finish().unwrap();
        assert!(whole.choices.len() >= 2, "{name}");
    }
}

#[tokio::test]
async fn the_providers_own_stop_reason_is_kept_beside_the_mapped_finish() {
    let cases = [
        ("anthropic_tools.sse", "tool_calls", "tool_use"),
        ("anthropic_max_tokens.sse", "length", "max_tokens"),
        ("responses_text.sse", "stop", "completed"),
        ("responses_tools.sse", "tool_calls", "completed"),
        (
            "responses_incomplete.sse",
            "content_filter",
            "content_filter",
        ),
        ("anthropic_refusal.sse", "content_filter", "refusal"),
    ];
    for (name, finish, raw) in cases {
        let (result, _) = run(name, None).await;
        let c = result.unwrap_or_else(|(partial, _)| partial);
        let choice = &c.choices[0];
        assert_eq!(
            (
                choice.finish_reason.as_deref(),
                choice.stop_reason.as_deref()
            ),
            (Some(finish), Some(raw)),
            "{name}"
        );
        assert_eq!(serde_json::to_value(choice).unwrap()["stop_reason"], raw);
    }
    // Chat Completions streams have no other reason: the field is left out.
    let (result, _) = run("demo.sse", None).await;
    let c = result.map_err(|(_, e)| e).unwrap();
    assert!(c.choices.iter().all(|c| c.stop_reason.is_none()));
    assert!(
        serde_json::to_value(&c.choices[0])
            .unwrap()
            .get("stop_reason")
            .is_none()
    );
}

/// The JSON of every event of an SSE fixture, as another client would hand them over
/// already parsed (`[DONE]` left out).
fn parsed_events(name: &str) -> Vec<serde_json::Value> {
    let text = String::from_utf8(crate::common::fixture(name)).unwrap();
    text.replace("\r\n", "\n")
        .split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            let data = data.join("\n");
            (!data.trim().is_empty() && data.trim() != "[DONE]")
                .then(|| serde_json::from_str(&data).unwrap_or_else(|e| panic!("{name}: {e}")))
        })
        .collect()
}

fn from_events(events: Vec<serde_json::Value>) -> Completions {
    let stream = futures::stream::iter(events.into_iter().map(Ok::<_, std::io::Error>));
    Completions::builder()
        .estimate_usage(false)
        .start(Source::parsed(stream))
}

#[tokio::test]
async fn parsed_events_of_every_dialect_give_what_their_bytes_give() {
    for name in [
        "anthropic_tools.sse",
        "anthropic_max_tokens.sse",
        "anthropic_error.sse",
        "anthropic_refusal.sse",
        "responses_text.sse",
        "responses_tools.sse",
        "responses_incomplete.sse",
        "responses_failed.sse",
        "demo.sse",
        "openai_n3_tools.sse",
        "vllm_n4_reasoning.sse",
    ] {
        let (from_bytes, bytes_events) = run(name, None).await;
        let completions = from_events(parsed_events(name));
        let from_values = completions
            .collect()
            .await
            .map_err(|inc| (inc.partial, inc.error));
        match (&from_bytes, &from_values) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{name}"),
            (Err((a, ea)), Err((b, eb))) => {
                assert_eq!(a, b, "{name}");
                // Positions differ (lines vs events); the error is the same.
                assert_eq!(ea.kind(), eb.kind(), "{name}: {ea} / {eb}");
            }
            _ => panic!("{name}: {from_bytes:?} vs {from_values:?}"),
        }
        // The synchronous Demux, fed the same values, assembles the same messages.
        let mut demux = Demux::new();
        for event in parsed_events(name) {
            if demux.feed_parsed(event).is_err() {
                break;
            }
        }
        let by_demux = demux.finish().unwrap_or_else(|inc| inc.partial);
        let by_actors = from_values.as_ref().unwrap_or_else(|(p, _)| p);
        let messages = |c: &ChatCompletion| -> Vec<_> {
            c.choices
                .iter()
                .map(|c| (c.message.clone(), c.finish_reason.clone()))
                .collect()
        };
        assert_eq!(messages(&by_demux), messages(by_actors), "{name}");
        let choice = completions.choice(0).await.unwrap();
        let mut events = Vec::new();
        let mut stream = choice.events();
        while let Ok(Some(e)) = stream.try_next().await {
            events.push(e);
        }
        assert_eq!(events, bytes_events, "{name}");
    }
}

#[tokio::test]
async fn parsed_events_of_another_dialect_or_not_objects_are_errors_naming_the_event() {
    let mut events = parsed_events("anthropic_tools.sse");
    events.insert(
        2,
        serde_json::json!({"choices": [{"delta": {"content": "x"}}]}),
    );
    let e = from_events(events).outcome().await.unwrap_err();
    assert!(
        matches!(e.detail(), ErrorDetail::WrongDialect { expected: Dialect::Anthropic, found, line: 3 } if found == "chat.completion.chunk"),
        "{e:?}"
    );

    let chat = serde_json::json!({"choices": [{"delta": {"content": "x"}}]});
    let responses = serde_json::json!({"type": "response.output_text.delta", "delta": "x"});
    let e = from_events(vec![chat, responses])
        .outcome()
        .await
        .unwrap_err();
    assert!(
        matches!(e.detail(), ErrorDetail::WrongDialect { expected: Dialect::Chat, found, line: 2 } if found.starts_with("response.output_text.delta")),
        "{e:?}"
    );

    let e = from_events(vec![serde_json::json!([1, 2])])
        .outcome()
        .await
        .unwrap_err();
    assert!(
        matches!(e.detail(), ErrorDetail::Json { line: 1, message, .. } if message.contains("an array")),
        "{e:?}"
    );
}

#[tokio::test]
async fn a_typed_stream_of_parsed_events_that_stops_early_is_truncated_with_its_text_kept() {
    let events = parsed_events("responses_text.sse");
    let cut = events
        .iter()
        .position(|e| e["type"] == "response.output_text.delta")
        .unwrap()
        + 1;
    let completions = from_events(events[..cut].to_vec());
    let incomplete = completions.collect().await.unwrap_err();
    assert!(
        matches!(incomplete.error.detail(), ErrorDetail::Truncated { line, unfinished, .. } if *line == cut as u64 && unfinished == &[0]),
        "{:?}",
        incomplete.error
    );
    let text = incomplete.partial.choices[0].message.content.clone();
    assert!(text.is_some_and(|t| !t.is_empty()));
}

#[tokio::test]
async fn a_mixed_fan_out_keeps_each_sources_id_and_model() {
    let chat = crate::common::fixture("demo.sse");
    let completions = Completions::builder().fan_out([
        Source::parsed(futures::stream::iter(
            parsed_events("anthropic_tools.sse")
                .into_iter()
                .map(Ok::<_, std::io::Error>),
        ))
        .n(1),
        Source::parsed(futures::stream::iter(
            parsed_events("responses_text.sse")
                .into_iter()
                .map(Ok::<_, std::io::Error>),
        ))
        .n(1),
        Source::reader(std::io::Cursor::new(chat)),
    ]);
    let completion = completions.collect().await.unwrap();
    let sources: Vec<_> = completion
        .choices
        .iter()
        .map(|c| {
            let s = c
                .source
                .clone()
                .expect("a fan-out's choices name their source");
            (c.index, s.upstream, s.id, s.model)
        })
        .collect();
    let anthropic = &parsed_events("anthropic_tools.sse")[0]["message"];
    let responses = parsed_events("responses_text.sse")
        .into_iter()
        .find(|e| e["type"] == "response.created")
        .unwrap();
    let str_of = |v: &serde_json::Value| v.as_str().map(str::to_string);
    assert_eq!(
        sources[0],
        (0, 0, str_of(&anthropic["id"]), str_of(&anthropic["model"]))
    );
    assert_eq!(
        sources[1],
        (
            1,
            1,
            str_of(&responses["response"]["id"]),
            str_of(&responses["response"]["model"])
        )
    );
    assert!(sources[2..].iter().all(|s| s.1 == 2 && s.2.is_some()));
    assert!(sources.len() > 3, "demo.sse has several choices");
    // The JSON names the source of each choice.
    let json = serde_json::to_value(&completion).unwrap();
    assert_eq!(json["choices"][0]["source"]["upstream"], 0);
    // A single stream's choices have no source.
    let single = Completions::new(Source::reader(std::io::Cursor::new(
        crate::common::fixture("demo.sse"),
    )));
    let single = single.collect().await.unwrap();
    assert!(single.choices.iter().all(|c| c.source.is_none()));
    assert!(
        serde_json::to_value(&single).unwrap()["choices"][0]
            .get("source")
            .is_none()
    );
}

#[tokio::test]
async fn an_anthropic_refusal_keeps_its_text_and_finishes_as_content_filter() {
    let (result, events) = run("anthropic_refusal.sse", None).await;
    let c = result.map_err(|(_, e)| e).unwrap();
    assert_eq!(c.id, "msg_04Ref");
    let choice = &c.choices[0];
    assert_eq!(
        choice.message.content.as_deref(),
        Some("I can't help with that.")
    );
    assert_eq!(choice.finish_reason.as_deref(), Some("content_filter"));
    assert_eq!(choice.stop_reason.as_deref(), Some("refusal"));
    // message_delta's cumulative output count supersedes message_start's.
    let usage = c.usage.unwrap();
    assert_eq!(
        (usage.prompt_tokens, usage.completion_tokens, usage.source),
        (31, 6, UsageSource::Reported)
    );
    assert!(
        matches!(events.last(), Some(ChoiceEvent::Finished { .. })),
        "{events:?}"
    );
}

/// An Anthropic message that stops (`message_stop`) without its `stop_reason` ends as a
/// Chat Completions choice whose stream ends without its `finish_reason`: no finish, the
/// same outcome, never a clean `stop`.
#[tokio::test]
async fn an_anthropic_stop_without_its_reason_ends_as_a_chat_choice_without_its_finish() {
    let anthropic = [
        r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"usage":{"input_tokens":3,"output_tokens":1}}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":2}}"#,
        r#"{"type":"message_stop"}"#,
    ]
    .iter()
    .map(|d| {
        let kind: serde_json::Value = serde_json::from_str(d).unwrap();
        format!("event: {}\ndata: {d}\n\n", kind["type"].as_str().unwrap())
    })
    .collect::<String>();
    let chat = concat!(
        r#"data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"},"finish_reason":null}]}"#,
        "\n\ndata: [DONE]\n\n"
    );
    let mut ends = Vec::new();
    for (bytes, dialect) in [
        (anthropic, Dialect::Anthropic),
        (chat.to_string(), Dialect::Chat),
    ] {
        let completions = Completions::builder()
            .dialect(dialect)
            .estimate_usage(false)
            .start(Source::reader(std::io::Cursor::new(bytes.into_bytes())));
        let choice = completions.choice(0).await.unwrap();
        let message = choice.message().await;
        let (finish, text) = match &message {
            Ok(m) => (m.finish_reason.clone(), m.message.content.clone()),
            Err(e) => (
                e.partial.finish_reason.clone(),
                e.partial.message.content.clone(),
            ),
        };
        assert_eq!(finish, None, "{dialect}: {message:?}");
        assert_eq!(text.as_deref(), Some("Hello"), "{dialect}");
        ends.push((message.is_ok(), completions.outcome().await.is_ok()));
    }
    assert_eq!(ends[0], ends[1], "anthropic and chat end alike");
}
