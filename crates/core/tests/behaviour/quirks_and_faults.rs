//! Fixtures that the OpenAI SDK cannot accumulate (provider quirks) or that end badly
//! (errors, truncation): each choice's exact result, the typed error and where it points.

use choicewise_core::{ChatCompletion, Completions, ErrorDetail, Incomplete, Source, WarningKind};
use choicewise_test_support::upstream;
use futures::{StreamExt, TryStreamExt};

async fn run(name: &str) -> Vec<Result<ChatCompletion, Incomplete<ChatCompletion>>> {
    let bytes = crate::common::fixture(name);
    let mut results = Vec::new();
    for split in crate::common::SPLITS {
        results.push(crate::common::collect_reads(crate::common::split(&bytes, split)).await);
    }
    // The same result whatever the reads.
    for r in &results[1..] {
        match (r, &results[0]) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{name}"),
            (Err(a), Err(b)) => {
                assert_eq!(a.partial, b.partial, "{name}");
                assert_eq!(a.error.to_string(), b.error.to_string(), "{name}");
            }
            _ => panic!("{name}: outcome depends on the read split"),
        }
    }
    results
}

fn calls(c: &ChatCompletion, choice: usize) -> Vec<(String, String, String)> {
    c.choices[choice]
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

fn owned(v: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    v.iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect()
}

#[tokio::test]
async fn repeated_ids_types_and_names_are_set_once_and_empty_finish_is_not_a_finish() {
    let c = run("quirks_ids_repeated.sse").await.remove(0).unwrap();
    assert_eq!(
        calls(&c, 0),
        owned(&[
            (
                "call_nRQtZE7VWn2GxoETQEGJ3Xxp",
                "get_weather",
                r#"{"city": "Madrid"}"#
            ),
            (
                "call_g5hCvuSeoqfxhaMcz5YfyE4k",
                "get_weather",
                r#"{"city": "Seville"}"#
            ),
        ])
    );
    assert_eq!(c.choices[0].message.tool_calls[0].kind, "function");
    assert_eq!(c.choices[0].finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(
        c.choices[1].message.content.as_deref(),
        Some(
            "I'd check a weather service for Madrid and Seville; both are usually sunny in spring."
        )
    );
    assert_eq!(c.choices[1].finish_reason.as_deref(), Some("stop"));
}

#[tokio::test]
async fn a_new_id_with_a_name_at_the_same_index_opens_a_new_call() {
    let c = run("quirks_index_zero.sse").await.remove(0).unwrap();
    assert_eq!(
        calls(&c, 0),
        owned(&[
            ("call_8713xy23", "get_weather", r#"{"city":"Rome"}"#),
            ("call_44218a43", "get_time", r#"{"timezone":"Europe/Rome"}"#),
        ])
    );
    assert_eq!(
        c.choices[0].message.content.as_deref(),
        Some(""),
        "only empty strings: \"\" not null"
    );
    assert_eq!(
        c.choices[1].message.content.as_deref(),
        Some("Rome is usually mild in October, around 20 °C.")
    );
}

#[tokio::test]
async fn fragments_without_index_follow_their_id_or_the_latest_call() {
    let c = run("quirks_no_index.sse").await.remove(0).unwrap();
    assert_eq!(
        calls(&c, 0),
        owned(&[
            (
                "call_nPgeoF05WPSUzt8gpaxY",
                "get_weather",
                r#"{"city":"Kyoto"}"#
            ),
            (
                "call_ZXTyAPpuoFCgyUodeYym",
                "get_weather",
                r#"{"city":"Osaka"}"#
            ),
        ])
    );
    assert_eq!(c.choices[0].finish_reason.as_deref(), Some("tool_calls"));
}

#[tokio::test]
async fn wire_quirks_frame_like_a_clean_stream_and_concatenated_objects_warn() {
    let bytes = crate::common::fixture("quirks_wire.sse");
    let c = run("quirks_wire.sse").await.remove(0).unwrap();
    assert_eq!(
        c.choices[0].message.content.as_deref(),
        Some("Line one of the answer.\nLine two — with an em dash.")
    );
    assert_eq!(
        c.choices[1].message.content.as_deref(),
        Some("Short and sweet 😀")
    );
    let completions = Completions::new(Source::reader(std::io::Cursor::new(bytes)));
    completions.collect().await.unwrap();
    let warnings = completions.warnings();
    assert!(
        warnings
            .iter()
            .any(|w| matches!(w.kind, WarningKind::ConcatenatedObjects { count: 2 })),
        "{warnings:?}"
    );
}

#[tokio::test]
async fn an_error_mid_stream_ends_open_choices_with_it_after_their_text() {
    let results = run("error_mid_stream.sse").await;
    let inc = results.into_iter().next().unwrap().unwrap_err();
    let ErrorDetail::Upstream(e) = inc.error.detail() else {
        panic!("{:?}", inc.error)
    };
    assert_eq!(
        e.message,
        "The server had an error while processing your request."
    );
    assert_eq!(e.kind.as_deref(), Some("server_error"));
    assert_eq!(e.code.as_deref(), Some("internal_error"));
    assert!(e.line > 1);
    let texts: Vec<_> = inc
        .partial
        .choices
        .iter()
        .map(|c| c.message.content.clone())
        .collect();
    assert_eq!(
        texts,
        vec![
            Some("Sourdough needs three things: flour, water, and a lively starter. Feed the starter".to_string()),
            Some("The short answer: keep your starter warm (24–26 °C) and feed it twice a".to_string()),
        ]
    );
    // Each choice's own streams: the text first, then the error; [DONE] after it changes nothing.
    let completions = Completions::new(Source::reader(std::io::Cursor::new(
        crate::common::fixture("error_mid_stream.sse"),
    )));
    let choice = completions.choice(1).await.unwrap();
    let mut content = choice.content();
    let mut text = String::new();
    let err = loop {
        match content.try_next().await {
            Ok(Some(t)) => text.push_str(&t),
            Ok(None) => panic!("ended without the error"),
            Err(e) => break e,
        }
    };
    assert!(matches!(err.detail(), ErrorDetail::Upstream(_)));
    assert_eq!(
        text,
        "The short answer: keep your starter warm (24–26 °C) and feed it twice a"
    );
    let message = choice.message().await.unwrap_err();
    assert_eq!(message.partial.finish_reason, None);
    assert!(completions.outcome().await.is_err());
}

#[tokio::test]
async fn a_cut_stream_is_a_truncation_error_naming_the_discarded_tail() {
    let bytes = crate::common::fixture("missing_done_truncated.sse");
    let inc = run("missing_done_truncated.sse")
        .await
        .remove(0)
        .unwrap_err();
    let ErrorDetail::Truncated {
        line,
        offset,
        pending_bytes,
        unfinished,
    } = inc.error.detail()
    else {
        panic!("{:?}", inc.error)
    };
    assert_eq!(unfinished, &vec![1]);
    assert!(*pending_bytes > 0);
    // The tail starts at the beginning of the last (cut) line.
    let last_line_start = bytes.iter().rposition(|&b| b == b'\n').unwrap() + 1;
    assert_eq!(*offset as usize, last_line_start);
    assert_eq!(
        *line as usize,
        bytes.iter().filter(|&&b| b == b'\n').count() + 1
    );
    assert_eq!(*pending_bytes as usize, bytes.len() - last_line_start);
    assert!(
        inc.error.to_string().contains(&format!("line {line}")),
        "{}",
        inc.error
    );
    let c = &inc.partial;
    assert_eq!(c.choices[0].finish_reason.as_deref(), Some("stop"));
    assert_eq!(
        calls(c, 1),
        owned(&[
            (
                "call_Co3fRDI6RWb8Srddl39bTlS6",
                "get_weather",
                r#"{"city":"Oslo"}"#
            ),
            ("call_nl2MjRQpo5VAFGH8CHCOYBB3", "get_weather", r#"{"city"#),
        ])
    );
}

#[tokio::test]
async fn no_done_is_fine_when_every_choice_finished() {
    let c = run("missing_done_finished.sse").await.remove(0).unwrap();
    assert!(c.choices.iter().all(|c| c.finish_reason.is_some()));
    assert!(c.usage.is_some());
}

#[tokio::test]
async fn an_error_chunk_with_finish_error_keeps_the_text_and_reports_the_error() {
    let inc = run("openrouter_error_finish.sse")
        .await
        .remove(0)
        .unwrap_err();
    let ErrorDetail::Upstream(e) = inc.error.detail() else {
        panic!("{:?}", inc.error)
    };
    assert_eq!(e.code.as_deref(), Some("502"));
    assert_eq!(e.message, "Provider returned error");
    let choice = &inc.partial.choices[0];
    assert_eq!(choice.finish_reason.as_deref(), Some("error"));
    assert_eq!(
        choice.message.content.as_deref(),
        Some(
            "Here are three ideas for a rainy afternoon: bake a loaf of bread, start a jigsaw puzzle, or"
        )
    );
}

#[tokio::test]
async fn azure_annotations_are_kept_and_do_not_reopen_a_finished_choice() {
    let c = run("azure_filters.sse").await.remove(0).unwrap();
    assert!(c.prompt_filter_results.is_some());
    assert!(c.created > 0);
    assert!(c.id.starts_with("chatcmpl-"), "{}", c.id);
    for choice in &c.choices {
        assert_eq!(choice.finish_reason.as_deref(), Some("stop"));
        assert!(choice.content_filter_results.is_some());
    }
    let completions = Completions::new(Source::reader(std::io::Cursor::new(
        crate::common::fixture("azure_filters.sse"),
    )));
    completions.collect().await.unwrap();
    assert!(
        !completions
            .warnings()
            .iter()
            .any(|w| w.kind == WarningKind::DataAfterFinish),
        "annotation-only updates after a finish are not data: {:?}",
        completions.warnings()
    );
}

#[tokio::test]
async fn invalid_utf8_is_a_typed_error_naming_its_line_after_the_earlier_data() {
    let mut bytes = b"data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\n".to_vec();
    bytes.extend_from_slice(b"data: {\"choices\":[{\"delta\":{\"content\":\"\xff\"}}]}\n\n");
    let inc = crate::common::collect_reads(vec![bytes]).await.unwrap_err();
    assert!(
        matches!(
            inc.error.detail(),
            ErrorDetail::Sse(choicewise_core::input::SseError::InvalidUtf8 { line: 3, .. })
        ),
        "{:?}",
        inc.error
    );
    assert!(inc.error.to_string().contains("line 3"), "{}", inc.error);
    assert_eq!(
        inc.partial.choices[0].message.content.as_deref(),
        Some("ok")
    );
}

#[tokio::test]
async fn data_after_done_is_not_interpreted_and_is_reported() {
    let sse = concat!(
        "data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"after\"}}]}\n\n",
    );
    let completions = Completions::new(Source::reader(sse.as_bytes()));
    let c = completions.collect().await.unwrap();
    assert_eq!(c.choices[0].message.content.as_deref(), Some("a"));
    assert!(
        completions
            .warnings()
            .iter()
            .any(|w| matches!(w.kind, WarningKind::DataAfterDone { .. })),
        "{:?}",
        completions.warnings()
    );
}

#[tokio::test]
async fn a_runaway_event_fails_early_without_reading_the_rest() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    // 1 GiB of one `data:` line, generated lazily in 64 KiB reads.
    let reads_taken = Arc::new(AtomicUsize::new(0));
    let counter = reads_taken.clone();
    let block = vec![b'x'; 64 * 1024];
    let stream = futures::stream::iter(0..16 * 1024).map(move |i| {
        counter.fetch_add(1, Ordering::SeqCst);
        Ok::<_, std::io::Error>(if i == 0 {
            b"data: ".to_vec()
        } else {
            block.clone()
        })
    });
    let completions = Completions::builder()
        .max_event_size(1 << 20)
        .start(Source::sse(stream));
    let err = completions.outcome().await.unwrap_err();
    assert!(
        matches!(
            err.detail(),
            ErrorDetail::Sse(choicewise_core::input::SseError::EventTooLarge {
                limit: 1_048_576,
                line: 1,
                offset: 0
            })
        ),
        "{err:?}"
    );
    assert!(
        reads_taken.load(Ordering::SeqCst) <= 20,
        "read far past the limit"
    );
}

/// NVIDIA Dynamo's frontend sends a tool call's `finish_reason` before its last argument
/// fragment. The call stays open while its arguments are an incomplete JSON value, so its
/// `Finished` carries the whole arguments; the choice's finish follows it; a warning names the
/// case. A stream that ends before the fragment finishes the call with what it has.
#[tokio::test]
async fn finish_before_the_last_argument_fragment_keeps_the_call_open() {
    let head = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":1,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{\"index\":0,\"id\":\"call_2\",\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"arguments\":\"{}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
    );
    let tail = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"Paris\\\"}\"}}]}}]}\n\n",
        "data: [DONE]\n\n",
    );
    for (stream, arguments, warned) in [
        (format!("{head}{tail}"), r#"{"city": "Paris"}"#, true),
        (format!("{head}data: [DONE]\n\n"), r#"{"city": "#, false),
    ] {
        for split in crate::common::SPLITS {
            let reads = crate::common::split(stream.as_bytes(), split);
            let completions = Completions::new(Source::sse(upstream(reads)));
            let choice = completions.choice(0).await.unwrap();
            let events: Vec<_> = choice.events().try_collect().await.unwrap();
            let finished: Vec<_> = events
                .iter()
                .filter_map(|e| match e {
                    choicewise_core::ChoiceEvent::FunctionCall(
                        choicewise_core::FunctionCallEvent::Finished { arguments, .. },
                    ) => Some(arguments.to_string()),
                    _ => None,
                })
                .collect();
            assert_eq!(finished, [arguments], "{split:?}");
            // The choice's finish comes last, after the call's.
            assert!(matches!(
                events.last(),
                Some(choicewise_core::ChoiceEvent::Finished(r)) if &**r == "tool_calls"
            ));
            let whole = completions.collect().await.unwrap();
            let call = &whole.choices[0].message.tool_calls[0];
            assert_eq!(call.function.arguments, arguments);
            assert_eq!(
                whole.choices[0].finish_reason.as_deref(),
                Some("tool_calls")
            );
            assert_eq!(
                whole.choices[1].message.tool_calls[0].function.arguments,
                "{}"
            );
            let kinds: Vec<_> = completions.warnings().into_iter().map(|w| w.kind).collect();
            let expected = if warned {
                vec![WarningKind::FinishBeforeArguments {
                    call: choicewise_core::CallRef {
                        kind: choicewise_core::CallKind::Tool,
                        position: 0,
                    },
                }]
            } else {
                vec![]
            };
            assert_eq!(kinds, expected, "{split:?}");
            if warned {
                assert!(completions.warnings()[0].to_string().contains("kept open"));
            }
        }
    }
}

/// Events written one `data:` line each without the blank line between them (hand-rolled
/// servers, editors' test recordings): each line is applied as it completes, also the last one
/// at the end of input, with one warning; the result equals the same stream with its blank
/// lines.
#[tokio::test]
async fn data_lines_without_blank_lines_are_applied_line_by_line_with_a_warning() {
    let proper = String::from_utf8(crate::common::fixture("openai_n3_tools.sse")).unwrap();
    let reference = crate::common::collect_reads(vec![proper.clone().into_bytes()])
        .await
        .unwrap();
    let squeezed = proper.replace("\n\n", "\n");
    let without_done = squeezed.replace("data: [DONE]\n", "");
    for stream in [squeezed, without_done] {
        for split in crate::common::SPLITS {
            let reads = crate::common::split(stream.as_bytes(), split);
            let completions = Completions::new(Source::sse(upstream(reads)));
            let whole = completions.collect().await.unwrap();
            assert_eq!(whole.choices, reference.choices, "{split:?}");
            assert_eq!(whole.usage, reference.usage);
            let warnings = completions.warnings();
            assert_eq!(warnings.len(), 1, "{warnings:?}");
            assert_eq!(warnings[0].kind, WarningKind::EventsWithoutBlankLines);
            assert_eq!(warnings[0].line, 1);
        }
    }
    // A choice is readable while the stream is still open: the line is applied when the next
    // one starts, not at the end.
    let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Vec<u8>, std::io::Error>>();
    let completions = Completions::new(Source::sse(rx));
    tx.unbounded_send(Ok(
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"!\"}}]}\n".to_vec(),
    ))
    .unwrap();
    let choice = completions.choice(0).await.unwrap();
    let mut content = choice.content();
    assert_eq!(&*content.try_next().await.unwrap().unwrap(), "Hi");
    drop(tx);
    assert_eq!(&*content.try_next().await.unwrap().unwrap(), "!");
}
