use serde_json::json;

use super::*;

fn update(line: u64) -> ChoiceUpdate {
    ChoiceUpdate {
        line,
        ..ChoiceUpdate::default()
    }
}

fn tool(index: Option<u32>, id: Option<&str>, name: Option<&str>, args: &str) -> ToolFragment {
    ToolFragment {
        index,
        id: id.map(text),
        kind: None,
        function: CallFragment {
            name: name.map(text),
            arguments: Some(text(args)),
            arguments_not_string: false,
        },
    }
}

fn apply(acc: &mut ChoiceAccumulator, u: ChoiceUpdate) -> Vec<ChoiceEvent> {
    let mut out = Vec::new();
    acc.apply(u, &mut out).unwrap();
    out
}

fn warnings(events: &[ChoiceEvent]) -> Vec<WarningKind> {
    events
        .iter()
        .filter_map(|e| match e {
            ChoiceEvent::Warning(w) => Some(w.kind.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn text_comes_before_the_finish_of_the_same_update() {
    let mut acc = ChoiceAccumulator::new(0, 8);
    let events = apply(
        &mut acc,
        ChoiceUpdate {
            content: Some(text("last")),
            finish_reason: Some(text("stop")),
            ..update(1)
        },
    );
    assert_eq!(
        events,
        vec![
            ChoiceEvent::Content(text("last")),
            ChoiceEvent::Finished(text("stop"))
        ]
    );
}

#[test]
fn data_after_finish_is_kept_with_a_warning_and_a_second_finish_is_ignored() {
    let mut acc = ChoiceAccumulator::new(3, 8);
    apply(
        &mut acc,
        ChoiceUpdate {
            finish_reason: Some(text("stop")),
            ..update(1)
        },
    );
    let events = apply(
        &mut acc,
        ChoiceUpdate {
            content: Some(text("late")),
            finish_reason: Some(text("length")),
            ..update(2)
        },
    );
    assert_eq!(
        warnings(&events),
        vec![
            WarningKind::DataAfterFinish,
            WarningKind::SecondFinish {
                kept: "stop".into(),
                ignored: "length".into()
            }
        ]
    );
    let out = acc.output();
    assert_eq!(out.message.content.as_deref(), Some("late"));
    assert_eq!(out.finish_reason.as_deref(), Some("stop"));
    // Annotations alone after the finish are not data.
    let events = apply(
        &mut acc,
        ChoiceUpdate {
            content_filter_results: Some(Box::new(json!({"hate": {}}))),
            ..update(3)
        },
    );
    assert!(warnings(&events).is_empty());
}

#[test]
fn conflicting_set_once_values_keep_the_first_and_warn() {
    let mut acc = ChoiceAccumulator::new(0, 8);
    apply(
        &mut acc,
        ChoiceUpdate {
            role: Some(text("assistant")),
            ..update(1)
        },
    );
    apply(
        &mut acc,
        ChoiceUpdate {
            tool_calls: vec![tool(Some(0), Some("call_1"), Some("f"), "{")],
            ..update(2)
        },
    );
    // Same id again: ignored silently; another id without a name: kept first, warned.
    let e1 = apply(
        &mut acc,
        ChoiceUpdate {
            tool_calls: vec![tool(Some(0), Some("call_1"), None, "}")],
            ..update(3)
        },
    );
    assert!(warnings(&e1).is_empty());
    let e2 = apply(
        &mut acc,
        ChoiceUpdate {
            role: Some(text("user")),
            tool_calls: vec![tool(Some(0), Some("call_2"), None, "")],
            ..update(4)
        },
    );
    assert_eq!(warnings(&e2).len(), 2, "{e2:?}");
    let out = acc.output();
    assert_eq!(out.message.role, "assistant");
    assert_eq!(out.message.tool_calls.len(), 1);
    assert_eq!(out.message.tool_calls[0].id, "call_1");
    assert_eq!(out.message.tool_calls[0].function.arguments, "{}");
}

#[test]
fn calls_finish_when_the_next_starts_and_late_fragments_are_appended_with_a_warning() {
    let mut acc = ChoiceAccumulator::new(0, 8);
    apply(
        &mut acc,
        ChoiceUpdate {
            tool_calls: vec![tool(Some(0), Some("a"), Some("f"), "{")],
            ..update(1)
        },
    );
    let events = apply(
        &mut acc,
        ChoiceUpdate {
            tool_calls: vec![tool(Some(1), Some("b"), Some("g"), "{}")],
            ..update(2)
        },
    );
    let kinds: Vec<_> = events
        .iter()
        .map(|e| match e {
            ChoiceEvent::FunctionCall(FunctionCallEvent::Finished {
                call, arguments, ..
            }) => {
                format!("finished {} {arguments}", call.position)
            }
            ChoiceEvent::FunctionCall(FunctionCallEvent::Started { call, .. }) => {
                format!("started {}", call.position)
            }
            ChoiceEvent::FunctionCall(FunctionCallEvent::Arguments { call, fragment }) => {
                format!("args {} {fragment}", call.position)
            }
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(kinds, vec!["finished 0 {", "started 1", "args 1 {}"]);
    let late = apply(
        &mut acc,
        ChoiceUpdate {
            tool_calls: vec![tool(Some(0), None, None, "}")],
            ..update(3)
        },
    );
    assert!(matches!(
        warnings(&late)[..],
        [WarningKind::FragmentAfterCallEnd {
            call: CallRef { position: 0, .. }
        }]
    ));
    assert_eq!(acc.output().message.tool_calls[0].function.arguments, "{}");
}

#[test]
fn legacy_function_call_and_arguments_sent_as_json() {
    let mut acc = ChoiceAccumulator::new(0, 8);
    let events = apply(
        &mut acc,
        ChoiceUpdate {
            function_call: Some(Box::new(CallFragment {
                name: Some(text("lookup")),
                arguments: Some(text("{\"q\":1}")),
                arguments_not_string: true,
            })),
            finish_reason: Some(text("function_call")),
            ..update(1)
        },
    );
    assert_eq!(warnings(&events), vec![WarningKind::ArgumentsNotString]);
    assert!(events.iter().any(|e| matches!(e,
        ChoiceEvent::FunctionCall(FunctionCallEvent::Finished { call: CallRef { kind: CallKind::Function, .. }, arguments, .. })
        if &**arguments == "{\"q\":1}")));
    let f = acc.output().message.function_call.unwrap();
    assert_eq!(
        (f.name.as_str(), f.arguments.as_str()),
        ("lookup", "{\"q\":1}")
    );
}

#[test]
fn logprobs_arrays_concatenate_key_by_key() {
    let mut acc = ChoiceAccumulator::new(0, 8);
    let raw = |json: &str| Some(UpdateLogprobs::Raw(Logprobs::from_json(json).unwrap()));
    apply(
        &mut acc,
        ChoiceUpdate {
            logprobs: raw(r#"{"content": [{"token": "a"}], "refusal": null}"#),
            ..update(1)
        },
    );
    apply(
        &mut acc,
        ChoiceUpdate {
            logprobs: raw(r#"{"content": [{"token": "b"}]}"#),
            ..update(2)
        },
    );
    let merged = acc.output().logprobs.unwrap();
    assert_eq!(
        merged.to_value(),
        json!({"content": [{"token": "a"}, {"token": "b"}], "refusal": null})
    );
    // Each element's text as sent.
    assert_eq!(
        merged.json(),
        r#"{"content":[{"token": "a"},{"token": "b"}],"refusal":null}"#
    );
}

#[test]
fn token_confidences_are_events_and_no_logprobs() {
    let mut acc = ChoiceAccumulator::new(0, 8);
    let mut out = Vec::new();
    acc.apply(
        ChoiceUpdate {
            logprobs: Some(UpdateLogprobs::Confidence(Box::new([1.5, 2.0]))),
            ..update(1)
        },
        &mut out,
    )
    .unwrap();
    assert_eq!(
        out,
        [
            ChoiceEvent::TokenConfidence(1.5),
            ChoiceEvent::TokenConfidence(2.0)
        ]
    );
    assert_eq!(acc.output().logprobs, None);
}

#[test]
fn too_many_tool_calls_is_a_typed_error_after_the_earlier_ones() {
    let mut acc = ChoiceAccumulator::new(5, 2);
    let mut out = Vec::new();
    let calls = (0..3)
        .map(|i| tool(Some(i), Some(&format!("c{i}")), Some("f"), "{}"))
        .collect();
    let err = acc
        .apply(
            ChoiceUpdate {
                tool_calls: calls,
                ..update(9)
            },
            &mut out,
        )
        .unwrap_err();
    assert!(
        matches!(
            err.detail(),
            ErrorDetail::InvalidToolCall {
                choice: 5,
                line: 9,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(acc.output().message.tool_calls.len(), 2);
}

#[test]
fn null_content_and_empty_content_stay_apart() {
    let mut acc = ChoiceAccumulator::new(0, 8);
    assert_eq!(acc.output().message.content, None);
    let events = apply(
        &mut acc,
        ChoiceUpdate {
            content: Some(text("")),
            ..update(1)
        },
    );
    assert!(events.is_empty(), "an empty string is no content event");
    assert_eq!(acc.output().message.content.as_deref(), Some(""));
}

#[test]
fn a_taken_output_is_the_output_with_its_texts_moved() {
    let mut acc = ChoiceAccumulator::new(3, 8);
    apply(
        &mut acc,
        ChoiceUpdate {
            content: Some(text("the answer")),
            reasoning: Some(text("thinking")),
            refusal: Some(text("no")),
            tool_calls: vec![tool(Some(0), Some("call_1"), Some("f"), "{}")],
            finish_reason: Some(text("stop")),
            ..update(1)
        },
    );
    let copied = acc.output();
    let taken = acc.take_output();
    assert_eq!(taken, copied);
    assert_eq!(taken.message.content.as_deref(), Some("the answer"));
    // The texts left the accumulator; the rest of it stays.
    let left = acc.output();
    assert_eq!(
        (left.message.content, left.message.reasoning_content),
        (None, None)
    );
    assert_eq!(left.message.tool_calls, copied.message.tool_calls);
}

#[test]
fn long_arguments_are_checked_without_a_tree() {
    use super::{INCREMENTAL_CHECK_BYTES, parse_final};
    let text = |s: String| -> crate::Text { s.into() };
    let wide = format!("[{}0]", "0,".repeat(INCREMENTAL_CHECK_BYTES));
    let parsed = parse_final(&text(wide.clone()));
    assert_eq!(parsed.value.unwrap().as_str(), wide, "kept as its text");
    // Deeper than serde_json's 128 and longer than the incremental parser takes: checked
    // level by level, up to the incremental parser's depth.
    let deep = |n: usize, inner: &str| format!("{}{inner}{}", "[".repeat(n), "]".repeat(n));
    let wide_inside = deep(
        300,
        "1,".repeat(INCREMENTAL_CHECK_BYTES).trim_end_matches(','),
    );
    assert!(parse_final(&text(wide_inside)).value.is_ok());
    let keys = format!(
        "{}{}{}",
        "{\"a\": ".repeat(200),
        r#"{"s": "x\"y", "n": -1.5e3, "t": true, "z": null, "e": [], "o": {}}"#,
        "}".repeat(200)
    );
    let padded = format!("{keys}{}", " ".repeat(INCREMENTAL_CHECK_BYTES));
    assert!(parse_final(&text(padded)).value.is_ok());
    // Too deep: refused where it goes past 512, cut or whole, long or short.
    for too_deep in ["[".repeat(100_000), deep(100_000, ""), deep(600, "1")] {
        let e = parse_final(&text(too_deep)).value.unwrap_err();
        assert_eq!(e.offset, Some(512), "{e}");
        assert!(e.message.contains("512"), "{e}");
    }
    // Brackets inside strings are text, escaped quotes too.
    let with = |n: usize| format!(r#"["[[\"[[", {}]"#, deep(n, "1"));
    assert!(parse_final(&text(with(511))).value.is_ok());
    let e = parse_final(&text(with(512))).value.unwrap_err();
    assert_eq!(e.offset, Some(11 + 511), "{e}");
    assert!(parse_final(&text(deep(512, "1"))).value.is_ok());
    // A bad token, a byte out of place, a cut: each named at its byte.
    let long = "0,".repeat(INCREMENTAL_CHECK_BYTES);
    let at = 1 + long.len();
    for (bad, offset) in [
        (format!("[{long}tru]"), at),
        (format!("[{long}1 2]"), at + 2),
        (format!("[{long}1"), at + 1),
        (format!("[{long}1]]"), at + 2),
    ] {
        let e = parse_final(&text(bad.clone())).value.unwrap_err();
        // serde_json names the byte where it stopped, up to a token's length past its start.
        let got = e.offset.unwrap() as usize;
        assert!(
            (offset..=offset + 3).contains(&got),
            "{e}: {:?}",
            &bad[at..]
        );
    }
}
