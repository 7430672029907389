use super::*;

fn split_str(s: &mut Splitter, data: &str) -> Result<Flow, Error> {
    s.event("", data, 1, 0, DataLines::default())
}

fn splitter(max_choices: usize) -> Splitter {
    Splitter::new(&StreamConfig {
        max_event_size: 1 << 20,
        max_choices,
        ..StreamConfig::default()
    })
}

fn json(s: &Splitter, slot: usize, k: usize) -> &str {
    let batch = &s.slots[slot].batch;
    match &batch.updates[k].body {
        Body::Json(r) => &batch.text[r.clone()],
        Body::Parsed(_) | Body::Update(_) => panic!("not raw JSON"),
    }
}

#[test]
fn splits_choices_by_index_in_order_of_first_appearance() {
    let mut s = splitter(8);
    split_str(
        &mut s,
        r#"{"choices":[{"index":2,"delta":{"content":"a"}},{"index":0,"delta":{"content":"b"}}]}"#,
    )
    .unwrap();
    split_str(
        &mut s,
        r#"{"choices":[{"delta":{"content":"c"},"finish_reason":"stop","extra":[1]}]}"#,
    )
    .unwrap();
    let order: Vec<u32> = s.slots.iter().map(|s| s.index).collect();
    assert_eq!(order, vec![2, 0]);
    assert_eq!(s.slots[1].batch.updates.len(), 2);
    assert_eq!(json(&s, 0, 0), r#"{"index":2,"delta":{"content":"a"}}"#);
    assert_eq!(
        json(&s, 1, 1),
        r#"{"delta":{"content":"c"},"finish_reason":"stop","extra":[1]}"#
    );
    assert!(s.slots[1].finished);
    assert_eq!(s.unfinished(), vec![2]);
}

#[test]
fn a_malformed_delta_is_split_raw_for_its_choice_to_judge() {
    let mut s = splitter(8);
    split_str(
        &mut s,
        r#"{"choices":[{"index":0,"delta":{"content":5}},{"index":1,"delta":"x","finish_reason":7}]}"#,
    )
    .unwrap();
    assert_eq!(json(&s, 0, 0), r#"{"index":0,"delta":{"content":5}}"#);
    assert_eq!(
        json(&s, 1, 0),
        r#"{"index":1,"delta":"x","finish_reason":7}"#
    );
    assert!(!s.slots[1].finished, "a finish that is not a string");
}

#[test]
fn invalid_and_excess_choice_indexes_are_typed_errors() {
    let mut s = splitter(2);
    let e = split_str(&mut s, r#"{"choices":[{"index":-1,"delta":{}}]}"#).unwrap_err();
    assert!(matches!(
        e.detail(),
        ErrorDetail::InvalidChoiceIndex { index: -1, .. }
    ));
    let e = split_str(&mut s, r#"{"choices":[{"index":4294967296,"delta":{}}]}"#).unwrap_err();
    assert!(matches!(e.detail(), ErrorDetail::InvalidChoiceIndex { .. }));
    split_str(
        &mut s,
        r#"{"choices":[{"index":4294967295,"delta":{}},{"index":0}]}"#,
    )
    .unwrap();
    let e = split_str(&mut s, r#"{"choices":[{"index":7,"delta":{}}]}"#).unwrap_err();
    assert!(matches!(
        e.detail(),
        ErrorDetail::TooManyChoices {
            index: 7,
            limit: 2,
            ..
        }
    ));
}

#[test]
fn usage_only_chunk_is_authoritative_and_empty_usage_is_ignored() {
    let mut s = splitter(8);
    let running = r#"{"choices":[{"delta":{}}],"usage":{"completion_tokens":3}}"#;
    split_str(&mut s, running).unwrap();
    assert_eq!(s.meta.usage.usage().unwrap().completion_tokens, 3);
    split_str(&mut s, r#"{"choices":[],"usage":{"total_tokens":9}}"#).unwrap();
    let later = r#"{"choices":[{"delta":{}}],"usage":{"completion_tokens":5}}"#;
    split_str(&mut s, later).unwrap();
    split_str(&mut s, r#"{"choices":[{"delta":{}}],"usage":{}}"#).unwrap();
    split_str(&mut s, r#"{"choices":[{"delta":{}}],"usage":null}"#).unwrap();
    assert_eq!(s.meta.usage.usage().unwrap().total_tokens, 9);
}

#[test]
fn running_per_choice_counts_combine_across_choices_not_within_one() {
    let mut s = splitter(8);
    for (i, c) in [(0, 1), (1, 1), (0, 2), (1, 2), (0, 3), (1, 5)] {
        let usage = format!(
            r#"{{"prompt_tokens":10,"completion_tokens":{c},"total_tokens":{}}}"#,
            10 + c
        );
        let data = format!(r#"{{"choices":[{{"index":{i},"delta":{{}}}}],"usage":{usage}}}"#);
        split_str(&mut s, &data).unwrap();
    }
    let u = s.meta.usage.usage().unwrap();
    assert_eq!(
        (u.prompt_tokens, u.completion_tokens, u.total_tokens),
        (10, 8, 18)
    );
}

#[test]
fn error_payload_after_choices_keeps_the_choices() {
    let mut s = splitter(8);
    let e = split_str(&mut s, r#"{"choices":[{"delta":{"content":""},"finish_reason":"error"}],"error":{"code":502,"message":"upstream"}}"#).unwrap_err();
    let ErrorDetail::Upstream(u) = e.detail() else {
        panic!("{e:?}")
    };
    assert_eq!(u.code.as_deref(), Some("502"));
    assert_eq!(s.slots[0].batch.updates.len(), 1);
}

#[test]
fn done_error_events_and_concatenated_objects() {
    let mut s = splitter(8);
    assert_eq!(split_str(&mut s, " [DONE]").unwrap(), Flow::Done);
    let e = s
        .event(
            "error",
            r#"{"error":{"message":"boom"}}"#,
            3,
            0,
            DataLines::default(),
        )
        .unwrap_err();
    assert!(e.to_string().contains("boom"), "{e}");
    split_str(
        &mut s,
        r#"{"choices":[{"delta":{"content":"a"}}]}{"choices":[{"delta":{"content":"b"}}]}"#,
    )
    .unwrap();
    assert_eq!(s.slots[0].batch.updates.len(), 2);
    assert!(matches!(
        s.warnings[0].kind,
        WarningKind::ConcatenatedObjects { count: 2 }
    ));
}

#[test]
fn non_object_chunks_are_json_errors_with_their_line() {
    let mut s = splitter(8);
    for data in [
        "[1,2]",
        "\"text\"",
        "{\"choices\": [",
        "{\"choices\":[{\"index\":\"0\"}]}",
        "{\"choices\":[\"x\"]}",
    ] {
        let e = s
            .event("", data, 41, 1000, DataLines::default())
            .unwrap_err();
        assert!(
            matches!(
                e.detail(),
                ErrorDetail::Json {
                    line: 41,
                    offset: 1000,
                    ..
                }
            ),
            "{data}: {e:?}"
        );
    }
}

#[test]
fn empty_finish_reasons_do_not_finish() {
    let mut s = splitter(8);
    split_str(
        &mut s,
        r#"{"choices":[{"delta":{"role":""},"finish_reason":""}]}"#,
    )
    .unwrap();
    assert!(!s.slots[0].finished);
    split_str(&mut s, r#"{"choices":[{"delta":{},"finish_reason":null}]}"#).unwrap();
    assert!(!s.slots[0].finished);
    assert_eq!(json(&s, 0, 1), r#"{"delta":{},"finish_reason":null}"#);
}

#[test]
fn the_batch_pool_keeps_two_emptied_batches_of_bounded_size() {
    let filled = |bytes: usize| {
        let mut b = Batch::default();
        b.push_json(&"x".repeat(bytes), 1, 0);
        b
    };
    let mut pool = BatchPool::default();
    pool.put(filled(10));
    pool.put(filled(20));
    pool.put(filled(30));
    // A burst's batch is freed rather than kept.
    let mut pool_large = BatchPool::default();
    pool_large.put(filled(BatchPool::KEEP_BYTES + 1));
    assert!(pool_large.take().is_none());
    let mut kept = 0;
    while let Some(b) = pool.take() {
        assert!(b.is_empty() && b.text.is_empty() && b.text.capacity() >= 10);
        kept += 1;
    }
    assert_eq!(kept, BatchPool::KEEP);
    pool.put(filled(10));
    pool.clear();
    assert!(pool.take().is_none());
}

#[test]
fn a_first_event_names_its_dialect_by_type_event_or_record_keys() {
    let cases = [
        (
            r#"{"type": "message_start", "message": {}}"#,
            "",
            Dialect::Anthropic,
        ),
        (r#"{"message": {}}"#, "message_start", Dialect::Anthropic),
        (
            r#"{"type": "response.created"}"#,
            "message_start",
            Dialect::Responses,
        ),
        (r#"{"candidates": [{"index": 0}]}"#, "", Dialect::Gemini),
        // An escaped key is read as the key it stands for.
        (r#"{"usage\u004detadata": {}}"#, "", Dialect::Gemini),
        // A type wins over a record's keys; a type no API knows is Chat's.
        (
            r#"{"candidates": [], "type": "ping"}"#,
            "",
            Dialect::Anthropic,
        ),
        (
            r#"{"type": "chat.completion.chunk", "candidates": []}"#,
            "",
            Dialect::Chat,
        ),
        (r#"{"id": "c", "choices": []}"#, "", Dialect::Chat),
        // Not an object, a type that is not a string, a type twice: its event line, or Chat.
        (r#"[1]"#, "content_block_delta", Dialect::Anthropic),
        (r#"{"type": 5, "candidates": []}"#, "", Dialect::Chat),
        (r#"{"type": "ping", "type": "ping"}"#, "", Dialect::Chat),
        (
            r#"{"promptFeedback": {"blockReason": "SAFETY"}, "x": [1, {"y": "z"}]}"#,
            "",
            Dialect::Gemini,
        ),
    ];
    for (data, event, dialect) in cases {
        assert_eq!(
            detect::detect(event, data),
            dialect,
            "{data} (event {event:?})"
        );
    }
}
