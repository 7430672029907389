//! Function-call arguments while they stream: partial values, typed snapshots, the text of
//! one field, repair of raw control characters, invalid arguments, and finality.

use choicewise_core::{CallKind, ChoiceEvent, Completions, ErrorDetail, FunctionCallEvent, Source};
use choicewise_test_support::{DONE, sse_chunk, upstream};
use futures::{StreamExt, TryStreamExt};
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize, PartialEq)]
struct Answer {
    answer: Option<String>,
    confidence: Option<f64>,
    #[serde(default)]
    sources: Vec<Value>,
}

fn golden_arguments(index: usize) -> Value {
    let golden: Value =
        serde_json::from_slice(&crate::common::fixture("expected/answer_question.json")).unwrap();
    let args = golden["choices"][index]["tool_calls"][0]["function"]["arguments"]
        .as_str()
        .unwrap();
    serde_json::from_str(args).unwrap()
}

fn reads_stream(reads: Vec<Vec<u8>>) -> Completions {
    Completions::new(Source::sse(upstream(reads)))
}

#[tokio::test]
async fn the_answer_field_streams_as_decoded_text_under_any_split() {
    let bytes = crate::common::fixture("answer_question.sse");
    for split in crate::common::SPLITS {
        let completions = reads_stream(crate::common::split(&bytes, split));
        for index in [0usize, 1] {
            let choice = completions.choice(index as u32).await.unwrap();
            let pieces: Vec<_> = choice
                .argument_text("answer_question", "/answer")
                .try_collect()
                .await
                .unwrap();
            assert!(
                pieces.len() > 5,
                "streamed, not all at once: {}",
                pieces.len()
            );
            assert_eq!(
                pieces.concat(),
                golden_arguments(index)["answer"].as_str().unwrap(),
                "choice {index}, reads of {split:?}"
            );
        }
    }
}

#[tokio::test]
async fn typed_snapshots_grow_as_prefixes_and_end_with_the_final_value() {
    let completions = Completions::new(Source::reader(std::io::Cursor::new(
        crate::common::fixture("answer_question.sse"),
    )));
    let choice = completions.choice(0).await.unwrap();
    let snapshots: Vec<_> = choice
        .arguments::<Answer>("answer_question")
        .try_collect()
        .await
        .unwrap();
    let last = snapshots.last().unwrap();
    assert!(last.is_final);
    assert_eq!(snapshots.iter().filter(|s| s.is_final).count(), 1);
    let expected: Answer = serde_json::from_value(golden_arguments(0)).unwrap();
    assert_eq!(last.value, expected);
    let full = expected.answer.unwrap();
    let mut previous = String::new();
    for s in &snapshots {
        let answer = s.value.answer.clone().unwrap_or_default();
        assert!(full.starts_with(&answer), "{answer:?} is not a prefix");
        assert!(answer.len() >= previous.len(), "answers only grow");
        previous = answer;
        if let Some(c) = s.value.confidence {
            assert_eq!(c, 0.92, "a number shows only once complete");
        }
    }
    assert!(snapshots.len() > 10, "{} snapshots", snapshots.len());
}

#[tokio::test]
async fn partial_values_are_consistent_with_the_final_value_after_every_fragment() {
    let completions = Completions::new(Source::reader(std::io::Cursor::new(
        crate::common::fixture("answer_question.sse"),
    )));
    let choice = completions.choice(1).await.unwrap();
    let final_value = golden_arguments(1);
    let mut calls = choice.function_calls();
    let mut fragments = 0;
    while let Some(event) = calls.try_next().await.unwrap() {
        if let FunctionCallEvent::Arguments { call, .. } = event {
            fragments += 1;
            let partial = calls.partial(call).cloned().unwrap_or(Value::Null);
            if let Value::Object(map) = &partial {
                for (key, value) in map {
                    let expected = &final_value[key];
                    match (value, expected) {
                        (Value::String(p), Value::String(f)) => assert!(f.starts_with(p.as_str())),
                        (Value::Array(p), Value::Array(f)) => assert!(p.len() <= f.len()),
                        _ => assert_eq!(value, expected, "{key}"),
                    }
                }
            }
        }
    }
    assert!(fragments > 10);
}

fn one_call_stream(fragments: &[&str]) -> String {
    let mut sse = String::new();
    for (i, f) in fragments.iter().enumerate() {
        let call = if i == 0 {
            serde_json::json!({"index": 0, "id": "call_1", "type": "function", "function": {"name": "answer_question", "arguments": f}})
        } else {
            serde_json::json!({"index": 0, "function": {"arguments": f}})
        };
        let chunk = serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]});
        sse.push_str(&sse_chunk(chunk));
    }
    sse.push_str(
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
    );
    sse.push_str(DONE);
    sse
}

#[tokio::test]
async fn raw_control_characters_are_repaired_and_flagged() {
    let sse = one_call_stream(&["{\"answer\": \"one", "\ntwo\t", "three\"}"]);
    let completions = Completions::new(Source::reader(std::io::Cursor::new(sse)));
    let choice = completions.choice(0).await.unwrap();
    let text: Vec<_> = choice
        .argument_text(None, "answer")
        .try_collect()
        .await
        .unwrap();
    assert_eq!(text.concat(), "one\ntwo\tthree");
    let events: Vec<_> = choice.function_calls().try_collect().await.unwrap();
    let Some(FunctionCallEvent::Finished {
        arguments,
        value,
        repaired,
        ..
    }) = events.last()
    else {
        panic!("{events:?}")
    };
    assert!(*repaired);
    assert_eq!(
        value.as_ref().unwrap().to_value()["answer"],
        "one\ntwo\tthree"
    );
    assert_eq!(
        &**arguments, "{\"answer\": \"one\ntwo\tthree\"}",
        "raw arguments kept as sent"
    );
    let message = choice.message().await.unwrap();
    assert_eq!(
        message.message.tool_calls[0].function.arguments,
        "{\"answer\": \"one\ntwo\tthree\"}"
    );
}

#[tokio::test]
async fn invalid_arguments_are_a_typed_error_with_the_byte_offset_and_the_stream_goes_on() {
    let sse = [
        one_call_stream(&["{\"answer\": \"x\",", " oops}"]).replace(DONE, "").replace(
            ",\"finish_reason\":\"tool_calls\"",
            "",
        ),
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_2\",\"function\":{\"name\":\"answer_question\",\"arguments\":\"{\\\"answer\\\":\\\"y\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n".to_string(),
    ]
    .concat();
    let completions = Completions::new(Source::reader(std::io::Cursor::new(sse)));
    let choice = completions.choice(0).await.unwrap();
    let items: Vec<_> = choice.arguments::<Answer>(None).collect().await;
    let errors: Vec<_> = items.iter().filter_map(|i| i.as_ref().err()).collect();
    assert_eq!(errors.len(), 1, "{items:?}");
    let ErrorDetail::InvalidArguments {
        choice: 0,
        call,
        error,
    } = errors[0].detail()
    else {
        panic!("{:?}", errors[0])
    };
    assert_eq!((call.kind, call.position), (CallKind::Tool, 0));
    assert_eq!(error.offset, Some(16), "{error}"); // the `o` of `oops`
    assert!(error.to_string().contains("at byte 16"), "{error}");
    let finals: Vec<_> = items
        .iter()
        .filter_map(|i| i.as_ref().ok())
        .filter(|s| s.is_final)
        .collect();
    assert_eq!(finals.len(), 1);
    assert_eq!(finals[0].value.answer.as_deref(), Some("y"));
    // The raw string stays available.
    let message = choice.message().await.unwrap();
    assert_eq!(
        message.message.tool_calls[0].function.arguments,
        "{\"answer\": \"x\", oops}"
    );
}

#[tokio::test]
async fn a_call_is_final_only_at_its_end_never_because_its_prefix_parses() {
    // `{"a":1}` parses after two fragments, but the call goes on (more whitespace, then the
    // finish comes later): Finished must come only with the finish_reason.
    let sse = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"1}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"meanwhile\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\" \"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"after\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"},{\"index\":1,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    );
    let completions = Completions::new(Source::reader(sse.as_bytes()));
    let choice = completions.choice(0).await.unwrap();
    let events: Vec<_> = choice.events().try_collect().await.unwrap();
    let position = |pred: &dyn Fn(&ChoiceEvent) -> bool| events.iter().position(pred).unwrap();
    let finished = position(&|e| {
        matches!(
            e,
            ChoiceEvent::FunctionCall(FunctionCallEvent::Finished { .. })
        )
    });
    let after = position(&|e| matches!(e, ChoiceEvent::Content(t) if &**t == "after"));
    let finish = position(&|e| matches!(e, ChoiceEvent::Finished(_)));
    assert!(after < finished && finished < finish, "{events:?}");
}
