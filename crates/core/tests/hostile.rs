//! Hostile inputs: each ends with a typed error naming where, or stays within a documented
//! bound, and none hangs (every test runs under a timeout). The table in
//! `docs/reliability.md` ("Hostile inputs") lists them with their results.
//!
//! Also replays `fuzz/regressions/**` (inputs the fuzzers found bugs with) and the fuzz seeds
//! in `fuzz/seeds/**` through the fuzz targets' own invariants (the test kit's
//! `invariants`), so CI covers them without the fuzzer.
//!
//! A counting allocator (`heap`) checks the memory bounds; the tests of this file run one at a
//! time (each holds `heap::alone()`) so that their heap figures do not blur each other.

mod common;

use choicewise_test_support::invariants;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use choicewise_core::Source;
use choicewise_core::input::SseError;
use choicewise_core::{
    ChatCompletion, ChoiceEvent, Completions, CompletionsBuilder, Error, ErrorDetail,
    FunctionCallEvent, Incomplete, WarningKind,
};
use choicewise_test_support::{DONE, content_chunk, sse_chunk, within};
use futures::{Stream, StreamExt, TryStreamExt};
use serde_json::{Value, json};

/// No test here may take longer (debug build, two cores shared with others).
const LIMIT: Duration = Duration::from_secs(60);

fn builder() -> CompletionsBuilder {
    Completions::builder().estimate_usage(false)
}

/// Where each event of `events` starts: (line, byte offset), events of `data: ...\n\n`.
fn positions(events: &[String]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let (mut line, mut offset) = (1u64, 0u64);
    for e in events {
        out.push((line, offset));
        line += e.matches('\n').count() as u64;
        offset += e.len() as u64;
    }
    out
}

async fn collect_str(events: &[String]) -> Result<ChatCompletion, Incomplete<ChatCompletion>> {
    let reads = vec![Ok::<_, std::io::Error>(events.concat().into_bytes())];
    within(
        LIMIT,
        "collect",
        builder()
            .start(Source::sse(futures::stream::iter(reads)))
            .collect(),
    )
    .await
}

/// A lazily generated upstream that counts how many reads were taken from it.
fn counted<S: Stream + Send + 'static>(
    stream: S,
) -> (impl Stream<Item = S::Item>, Arc<AtomicUsize>) {
    let taken = Arc::new(AtomicUsize::new(0));
    let counter = taken.clone();
    let stream = stream.map(move |x| {
        counter.fetch_add(1, Ordering::SeqCst);
        x
    });
    (stream, taken)
}

fn text_of(c: &ChatCompletion, index: u32) -> Option<&str> {
    c.choices
        .iter()
        .find(|c| c.index == index)
        .and_then(|c| c.message.content.as_deref())
}

/// A counting allocator (the kit's): the heap's live bytes and their peak, to check the memory
/// bounds.
mod heap {
    use choicewise_test_support::CountingAlloc;

    static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    /// Every test of this file holds this: they run one at a time, so that the heap figures
    /// (and `live_actors()`) of one are not blurred by another.
    pub async fn alone() -> tokio::sync::MutexGuard<'static, ()> {
        ALONE.lock().await
    }

    #[global_allocator]
    static GLOBAL: CountingAlloc = CountingAlloc::new();

    /// Live heap bytes now (counted from the first allocation, so never negative).
    pub fn live() -> u64 {
        u64::try_from(GLOBAL.live()).unwrap_or(0)
    }

    /// Runs `f` and returns its result with the peak heap growth during it.
    pub async fn peak_during<T>(f: impl std::future::Future<Output = T>) -> (T, u64) {
        let (out, growth) = GLOBAL.peak_during(f).await;
        (out, u64::try_from(growth).unwrap_or(0))
    }
}

// ------------------------------------------------------------------------------ indexes

#[tokio::test]
async fn choice_index_u32_max_is_a_choice_and_out_of_range_indexes_are_typed_errors() {
    let _alone = heap::alone().await;
    let events = [content_chunk(4294967295, "max", Some("stop")), DONE.into()];
    let completions = builder().start(Source::reader(std::io::Cursor::new(events.concat())));
    let choice = within(LIMIT, "choice", completions.choice(u32::MAX))
        .await
        .expect("choice 4294967295 exists");
    let text: Vec<_> = within(LIMIT, "content", choice.content().try_collect::<Vec<_>>())
        .await
        .unwrap();
    assert_eq!(text.concat(), "max");
    let whole = within(LIMIT, "collect", completions.collect())
        .await
        .unwrap();
    assert_eq!(whole.choices.len(), 1);
    assert_eq!(whole.choices[0].index, u32::MAX);

    for bad in [-1i64, 4294967296, i64::MIN, i64::MAX] {
        let events = [
            content_chunk(0, "before", None),
            content_chunk(bad, "x", None),
            content_chunk(0, "after", Some("stop")),
        ];
        let inc = collect_str(&events).await.unwrap_err();
        assert!(
            matches!(inc.error.detail(), ErrorDetail::InvalidChoiceIndex { index, line: 3 } if *index == bad),
            "{bad}: {:?}",
            inc.error
        );
        assert_eq!(text_of(&inc.partial, 0), Some("before"), "{bad}");
    }
    // Beyond i64 (or not an integer) the chunk does not parse: a JSON error at its line.
    for bad in ["9223372036854775808", "1.5", "\"0\""] {
        let events = [
            content_chunk(0, "before", None),
            format!("data: {{\"choices\":[{{\"index\":{bad},\"delta\":{{}}}}]}}\n\n"),
        ];
        let at = positions(&events)[1];
        let inc = collect_str(&events).await.unwrap_err();
        assert!(
            matches!(inc.error.detail(), ErrorDetail::Json { line, offset, .. } if (*line, *offset) == at),
            "{bad}: {:?}",
            inc.error
        );
        assert_eq!(text_of(&inc.partial, 0), Some("before"));
    }
}

#[tokio::test]
async fn a_hundred_thousand_distinct_choice_indexes_stop_at_the_129th() {
    let _alone = heap::alone().await;
    // One event per new index (large indexes: the hash-map path), generated lazily.
    let started = Instant::now();
    let index = |i: u32| u32::MAX - 3 * i;
    let (stream, taken) = counted(futures::stream::iter(0..100_000u32).map(move |i| {
        Ok::<_, std::io::Error>(content_chunk(i64::from(index(i)), "x", None).into_bytes())
    }));
    let (inc, peak) = heap::peak_during(within(
        LIMIT,
        "collect",
        builder().start(Source::sse(stream)).collect(),
    ))
    .await;
    let inc = inc.unwrap_err();
    eprintln!(
        "100,000 indexes, one per event: peak heap growth {} KiB",
        peak / 1024
    );
    assert!(peak < 8 * MIB, "peak heap growth {peak}");
    assert!(
        matches!(inc.error.detail(), ErrorDetail::TooManyChoices { index: i, limit: 128, line: 257 } if *i == index(128)),
        "{:?}",
        inc.error
    );
    assert_eq!(inc.partial.choices.len(), 128);
    assert_eq!(taken.load(Ordering::SeqCst), 129, "stops at the 129th read");

    // All in one chunk (one 2.8 MB line): the first 128 are routed, then the error.
    let choices: Vec<Value> = (0..100_000)
        .map(|i| json!({"index": i, "delta": {"content": "y"}}))
        .collect();
    let events = [sse_chunk(json!({ "choices": choices }))];
    drop(choices);
    let (inc, peak) = heap::peak_during(collect_str(&events)).await;
    let inc = inc.unwrap_err();
    eprintln!(
        "100,000 indexes in one {} KB chunk: peak heap growth {} MiB",
        events[0].len() / 1000,
        peak / MIB
    );
    assert!(peak < 64 * MIB, "peak heap growth {peak}");
    assert!(
        matches!(
            inc.error.detail(),
            ErrorDetail::TooManyChoices {
                index: 128,
                limit: 128,
                line: 1
            }
        ),
        "{:?}",
        inc.error
    );
    assert_eq!(inc.partial.choices.len(), 128);
    assert!(
        inc.partial
            .choices
            .iter()
            .all(|c| c.message.content.as_deref() == Some("y"))
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_hundred_thousand_tool_calls_fail_their_choice_only() {
    let _alone = heap::alone().await;
    // Choice 1 speaks first and last; choice 0 opens 100,000 tool calls, 100 per event, in
    // events generated as they are read.
    let per_event = 100;
    let tool_event = move |e: usize| {
        let calls: Vec<Value> = (0..per_event)
            .map(|k| {
                let i = e * per_event + k;
                json!({"index": i, "id": format!("call_{i}"), "type": "function",
                       "function": {"name": "f", "arguments": "{}"}})
            })
            .collect();
        sse_chunk(json!({"choices": [{"index": 0, "delta": {"tool_calls": calls}}]}))
    };
    let first = content_chunk(1, "other ", None);
    let last = [
        content_chunk(1, "choice", Some("stop")),
        sse_chunk(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})),
        DONE.to_string(),
    ];
    // The 129th call (index 128) is in the second tool-call event: lines 5-6.
    let line = positions(&[first.clone(), tool_event(0)])[1].0 + 2;
    settle().await;
    let start_heap = heap::live();
    let started = Instant::now();
    let reads = futures::stream::iter(0..1002).map(move |r| {
        Ok::<_, std::io::Error>(match r {
            0 => first.clone().into_bytes(),
            1..=1000 => tool_event(r - 1).into_bytes(),
            _ => last.concat().into_bytes(),
        })
    });
    let completions = builder().start(Source::sse(reads));
    let c0 = within(LIMIT, "choice 0", completions.choice(0))
        .await
        .unwrap();
    let c1 = within(LIMIT, "choice 1", completions.choice(1))
        .await
        .unwrap();
    let inc = within(LIMIT, "message 0", c0.message()).await.unwrap_err();
    let expected = |e: &Error| {
        matches!(e.detail(), ErrorDetail::InvalidToolCall { choice: 0, what, line: l, .. }
                 if what == "more than 128 tool calls" && *l == line)
    };
    assert!(expected(&inc.error), "{:?}", inc.error);
    assert_eq!(inc.partial.message.tool_calls.len(), 128);
    assert_eq!(inc.partial.message.tool_calls[127].id, "call_127");
    let ok = within(LIMIT, "message 1", c1.message()).await.unwrap();
    assert_eq!(ok.message.content.as_deref(), Some("other choice"));
    assert_eq!(ok.finish_reason.as_deref(), Some("stop"));
    // The stream itself ended well; collect() reports the choice's error with everything.
    assert!(
        within(LIMIT, "outcome", completions.outcome())
            .await
            .is_ok()
    );
    let inc = within(LIMIT, "collect", completions.collect())
        .await
        .unwrap_err();
    // What is kept once the actors are done: choice 0's 128 calls and their events, choice 1,
    // not the 99,872 others.
    settle().await;
    let kept = heap::live().saturating_sub(start_heap);
    eprintln!("100,000 tool calls: {} KiB kept", kept / 1024);
    assert!(kept < 4 * MIB, "{kept} bytes kept");
    assert!(expected(&inc.error), "{:?}", inc.error);
    assert_eq!(inc.partial.choices[0].message.tool_calls.len(), 128);
    assert_eq!(text_of(&inc.partial, 1), Some("other choice"));
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );

    // A tool-call index outside 0..=4294967295 is refused by the choice's actor: it fails
    // that choice only; the other choice goes on to its finish.
    for bad in [-1i64, 4294967296] {
        let events = [
            content_chunk(1, "other", None),
            sse_chunk(
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": bad}]}}]}),
            ),
            content_chunk(1, " more", Some("stop")),
            DONE.to_string(),
        ];
        let inc = collect_str(&events).await.unwrap_err();
        assert!(
            matches!(inc.error.detail(), ErrorDetail::InvalidToolCall { choice: 0, what, line: 3, .. }
                     if what.contains(&bad.to_string())),
            "{bad}: {:?}",
            inc.error
        );
        assert_eq!(text_of(&inc.partial, 1), Some("other more"));
        assert_eq!(
            inc.partial.choices[1].finish_reason.as_deref(),
            Some("stop")
        );
    }
}

/// Found by the `merge_interleaving` fuzzer (fixed in 4104359): a tool call over
/// max_tool_calls after the choice's finish was swallowed (the streams had closed `Ok`), the
/// later updates dropped, and `collect()` returned `Ok` without them.
#[tokio::test]
async fn a_tool_call_over_the_limit_after_the_finish_is_not_silently_dropped() {
    let _alone = heap::alone().await;
    let tool = |i: i64| {
        sse_chunk(json!({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": i, "id": format!("call_{i}"), "function": {"name": "f", "arguments": "{}"}}]}}]}))
    };
    let sse = [
        content_chunk(0, "a", Some("stop")), // line 1
        tool(0),                             // line 3: after the finish: kept, with a warning
        tool(1),                             // line 5: a second call, over max_tool_calls(1)
        content_chunk(0, " late", None),     // line 7: data after the finish: kept, with a warning
        DONE.to_string(),
    ]
    .concat();
    let completions = builder()
        .max_tool_calls(1)
        .start(Source::reader(std::io::Cursor::new(sse)));
    let result = within(LIMIT, "collect", completions.collect()).await;
    // (Before 4104359: Ok, content "a", one tool call: " late" gone and nothing said so.)
    let inc = result.expect_err("the InvalidToolCall is reported");
    assert!(
        matches!(
            inc.error.detail(),
            ErrorDetail::InvalidToolCall {
                choice: 0,
                line: 5,
                ..
            }
        ),
        "{:?}",
        inc.error
    );
    assert_eq!(inc.partial.choices[0].message.tool_calls.len(), 1);
}

// ------------------------------------------------------------------------------ nesting

/// The depth of a value, without recursion.
fn depth(v: &Value) -> usize {
    let mut d = 0;
    let mut v = v;
    loop {
        d += 1;
        match v {
            Value::Array(a) if !a.is_empty() => v = &a[a.len() - 1],
            Value::Object(o) if !o.is_empty() => v = o.values().next_back().unwrap(),
            _ => return d,
        }
    }
}

#[tokio::test]
async fn deeply_nested_arguments_overflow_no_stack() {
    let _alone = heap::alone().await;
    const N: usize = 100_000;
    // Call 0: 100,000 `[`; call 1: 100,000 `[` then 100,000 `]` (valid JSON, too deep).
    let mut events = Vec::new();
    for (call, text) in [(0, "[".repeat(N)), (1, "[".repeat(N) + &"]".repeat(N))] {
        events.push(sse_chunk(
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": call, "id": format!("call_{call}"), "type": "function",
             "function": {"name": "deep", "arguments": ""}}]}}]}),
        ));
        for piece in text.as_bytes().chunks(1000) {
            let piece = std::str::from_utf8(piece).unwrap();
            events.push(sse_chunk(
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": call, "function": {"arguments": piece}}]}}]}),
            ));
        }
    }
    events.push(sse_chunk(
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
    ));
    events.push(DONE.into());
    let completions = builder().start(Source::reader(std::io::Cursor::new(events.concat())));
    let choice = within(LIMIT, "choice", completions.choice(0))
        .await
        .unwrap();

    // The Finished events: the parse fails at the depth limit (512), it does not recurse.
    let all: Vec<ChoiceEvent> = within(LIMIT, "events", choice.events().try_collect())
        .await
        .unwrap();
    let finished: Vec<_> = all
        .iter()
        .filter_map(|e| match e {
            ChoiceEvent::FunctionCall(FunctionCallEvent::Finished {
                value, arguments, ..
            }) => Some((value.clone(), arguments.len())),
            _ => None,
        })
        .collect();
    assert_eq!(finished.len(), 2);
    for (value, len) in &finished {
        let err = value.as_ref().unwrap_err();
        assert_eq!(err.offset, Some(512), "{err}");
        assert!(err.message.contains("512"), "{err}");
        assert!(*len == N || *len == 2 * N);
    }

    // Partial values after every fragment: at most 512 deep.
    let mut calls = choice.function_calls();
    let mut deepest = 0;
    while let Some(e) = within(LIMIT, "function_calls", calls.next()).await {
        if let FunctionCallEvent::Arguments { call, .. } = e.unwrap() {
            if let Some(v) = calls.partial(call) {
                deepest = deepest.max(depth(v));
            }
            let _ = calls.snapshot(call);
        }
    }
    assert_eq!(deepest, 512);

    // Typed snapshots: partial values deserialise (512 deep), the final ones are errors.
    let typed: Vec<_> = within(
        LIMIT,
        "arguments",
        choice.arguments::<Value>(None).collect::<Vec<_>>(),
    )
    .await;
    let errors: Vec<_> = typed.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(errors.len(), 2, "{errors:?}");
    for e in errors {
        assert!(
            matches!(e.detail(), ErrorDetail::InvalidArguments { choice: 0, error, .. } if error.offset == Some(512)),
            "{e:?}"
        );
    }
    assert!(
        typed
            .iter()
            .any(|r| r.as_ref().is_ok_and(|s| depth(&s.value) == 512))
    );
    let texts: Vec<_> = within(
        LIMIT,
        "argument_text",
        choice.argument_text(None, "a").collect::<Vec<_>>(),
    )
    .await;
    assert!(texts.is_empty());

    // The message keeps the raw arguments.
    let whole = within(LIMIT, "collect", completions.collect())
        .await
        .unwrap();
    let calls = &whole.choices[0].message.tool_calls;
    assert_eq!(
        (
            calls[0].function.arguments.len(),
            calls[1].function.arguments.len()
        ),
        (N, 2 * N)
    );
}

/// A bad update of choice 0 between healthy ones: choice 0 fails with the error (returned),
/// keeping "kept"; choice 1 goes on to its finish.
async fn a_bad_update(data: &str) -> Error {
    let events = [
        content_chunk(0, "kept", None),
        content_chunk(1, "other", None),
        format!("data: {data}\n\n"),
        content_chunk(1, " choice", Some("stop")),
        content_chunk(0, " ignored", Some("stop")),
        DONE.to_string(),
    ];
    let inc = collect_str(&events).await.unwrap_err();
    assert_eq!(text_of(&inc.partial, 0), Some("kept"), "{data}");
    assert_eq!(inc.partial.choices[0].finish_reason, None, "{data}");
    assert_eq!(text_of(&inc.partial, 1), Some("other choice"), "{data}");
    assert_eq!(
        inc.partial.choices[1].finish_reason.as_deref(),
        Some("stop"),
        "{data}"
    );
    inc.error
}

#[tokio::test]
async fn a_deeply_nested_delta_fails_its_choice() {
    let _alone = heap::alone().await;
    const N: usize = 100_000;
    let deep = "[".repeat(N) + &"]".repeat(N);
    // The third event, after two of two lines each: line 5, at its byte offset.
    let at = (
        5,
        (content_chunk(0, "kept", None).len() + content_chunk(1, "other", None).len()) as u64,
    );
    for data in [
        // Arguments sent as a JSON value, logprobs (both kept as values): serde_json's
        // recursion limit (128).
        format!("{{\"choices\":[{{\"delta\":{{\"function_call\":{{\"arguments\":{deep}}}}}}}]}}"),
        format!("{{\"choices\":[{{\"delta\":{{}},\"logprobs\":{deep}}}]}}"),
    ] {
        let error = a_bad_update(&data).await;
        assert!(
            matches!(error.detail(), ErrorDetail::InvalidUpdate { choice: 0, line, offset, message }
                     if (*line, *offset) == at && message.contains("recursion limit")),
            "{error:?}"
        );
    }
    // An unknown field is skipped without recursion, however deep: the stream goes on.
    let events = [
        content_chunk(0, "a", None),
        format!("data: {{\"choices\":[],\"extra\":{deep}}}\n\n"),
        content_chunk(0, "b", Some("stop")),
    ];
    assert_eq!(text_of(&collect_str(&events).await.unwrap(), 0), Some("ab"));
}

// ------------------------------------------------------------------------------ UTF-8

#[tokio::test]
async fn invalid_utf8_in_a_json_string_and_in_a_comment() {
    let _alone = heap::alone().await;
    let first = content_chunk(0, "ok", None);
    let base = first.len() as u64;
    // In a JSON string on line 3: the line, its start and the exact bad byte.
    let mut bytes = first.clone().into_bytes();
    bytes.extend_from_slice(b"data: {\"choices\":[{\"delta\":{\"content\":\"caf\xe9\"}}]}\n\n");
    let bad = base + "data: {\"choices\":[{\"delta\":{\"content\":\"caf".len() as u64;
    let inc = within(LIMIT, "collect", common::collect_reads(vec![bytes]))
        .await
        .unwrap_err();
    assert!(
        matches!(
            inc.error.detail(),
            ErrorDetail::Sse(SseError::InvalidUtf8 { line: 3, offset, byte_offset })
                if *offset == base && *byte_offset == bad
        ),
        "{:?}",
        inc.error
    );
    assert_eq!(text_of(&inc.partial, 0), Some("ok"));

    // In a comment: every line must be UTF-8, comments too (the framer validates a line
    // before looking at it).
    let mut bytes = first.clone().into_bytes();
    bytes.extend_from_slice(b": caf\xe9\n");
    bytes.extend_from_slice(content_chunk(0, "!", Some("stop")).as_bytes());
    let inc = within(LIMIT, "collect", common::collect_reads(vec![bytes]))
        .await
        .unwrap_err();
    assert!(
        matches!(
            inc.error.detail(),
            ErrorDetail::Sse(SseError::InvalidUtf8 { line: 3, offset, byte_offset })
                if *offset == base && *byte_offset == base + 5
        ),
        "{:?}",
        inc.error
    );
    assert_eq!(text_of(&inc.partial, 0), Some("ok"));

    // Escaped, a lone surrogate is valid UTF-8 on the wire but not a valid JSON string: in a
    // delta, its choice's own error.
    let error = a_bad_update("{\"choices\":[{\"delta\":{\"content\":\"\\ud800\"}}]}").await;
    assert!(
        matches!(
            error.detail(),
            ErrorDetail::InvalidUpdate {
                choice: 0,
                line: 5,
                ..
            }
        ),
        "{error:?}"
    );
}

// ------------------------------------------------------------------------------ not chunks

/// `data` as the second of three events (after a comment line): the error it gives, with the
/// first event's text kept.
async fn not_a_chunk(data: &str) -> Error {
    let events = [
        content_chunk(0, "kept", None),
        format!(": comment\ndata: {data}\n\n"),
        content_chunk(0, "never", Some("stop")),
    ];
    let inc = collect_str(&events).await.unwrap_err();
    assert_eq!(text_of(&inc.partial, 0), Some("kept"), "{data}");
    inc.error
}

#[tokio::test]
async fn chunks_that_are_not_objects_are_json_errors_at_their_line() {
    let _alone = heap::alone().await;
    // The event is the `data:` line after the comment: line 4, at its byte offset.
    let offset = (content_chunk(0, "kept", None).len() + ": comment\n".len()) as u64;
    for data in ["\"a string\"", "42", "-0.5", "null", "true", "[1,2]"] {
        let error = not_a_chunk(data).await;
        assert!(
            matches!(error.detail(), ErrorDetail::Json { line: 4, offset: o, .. } if *o == offset),
            "{data}: {error:?}"
        );
    }
    // An empty object is a chunk without choices: nothing happens.
    let events = [
        content_chunk(0, "a", Some("stop")),
        "data: {}\n\n".into(),
        DONE.into(),
    ];
    assert_eq!(text_of(&collect_str(&events).await.unwrap(), 0), Some("a"));
}

/// Fixed in 4104359: serde's derived `visit_seq` read an array's elements as the fields.
#[tokio::test]
async fn chunks_that_are_arrays_are_json_errors() {
    let _alone = heap::alone().await;
    // docs/reliability.md: "an event's data is not a chunk (invalid JSON, an array, a string)
    // -> Error::Json". Before 4104359 `[]` and `[null]` were empty chunks, `["id", null, 5]` a chunk
    // with id "id" and created 5, and a choice written as `[0, {"content": "x"}]` was routed
    // to choice 0 with content "x".
    for data in [
        "[]",
        "[null]",
        "[\"id\", null, 5]",
        "{\"choices\": [[0, {\"content\": \"x\"}]]}",
    ] {
        let error = not_a_chunk(data).await;
        assert!(
            matches!(error.detail(), ErrorDetail::Json { line: 4, .. }),
            "{data}: {error:?}"
        );
    }
    // A delta written as an array is its choice's own error; the other choice goes on.
    let error = a_bad_update("{\"choices\": [{\"index\": 0, \"delta\": [null, \"x\"]}]}").await;
    assert!(
        matches!(error.detail(), ErrorDetail::InvalidUpdate { choice: 0, line: 5, message, .. }
                 if message.contains("expected a JSON object")),
        "{error:?}"
    );
}

/// Fixed in 4104359: the line was the event's first field line plus serde's line within the
/// data.
#[tokio::test]
async fn a_json_error_names_the_line_it_is_on() {
    let _alone = heap::alone().await;
    let first = content_chunk(0, "a", None); // lines 1-2
    for (rest, line) in [
        // `event:` before the data: the error is on line 4, reported on line 3.
        ("event: message\ndata: null\n\n", 4),
        // A comment between two data lines: the error is on line 5, reported on line 4.
        ("data: {\"choices\":\n: note\ndata: oops}\n\n", 5),
        // id and retry before two data lines: the error is on line 6, reported on line 4.
        ("id: 5\nretry: 10\ndata: {\"choices\":\ndata: oops}\n\n", 6),
    ] {
        let events = [first.clone(), rest.to_string()];
        let inc = collect_str(&events).await.unwrap_err();
        assert!(
            matches!(inc.error.detail(), ErrorDetail::Json { line: l, offset, .. } if *l == line && *offset == first.len() as u64),
            "{rest:?}: {:?}",
            inc.error
        );
    }
}

// ------------------------------------------------------------------------------ [DONE]

#[tokio::test]
async fn done_then_more_reads_are_never_taken() {
    let _alone = heap::alone().await;
    let first = content_chunk(0, "a", Some("stop")) + DONE;
    let mut later =
        (content_chunk(0, "late", None) + &content_chunk(1, "new choice", None)).into_bytes();
    later.extend_from_slice(b"garbage\xff");
    let reads = vec![first.into_bytes(), later, b"more".to_vec()];
    let (stream, taken) = counted(futures::stream::iter(reads).map(Ok::<_, std::io::Error>));
    let completions = builder().start(Source::sse(stream));
    let whole = within(LIMIT, "collect", completions.collect())
        .await
        .unwrap();
    assert_eq!(
        taken.load(Ordering::SeqCst),
        1,
        "a read after [DONE] was taken"
    );
    assert_eq!(whole.choices.len(), 1);
    assert_eq!(text_of(&whole, 0), Some("a"));
    assert!(
        completions.warnings().is_empty(),
        "{:?}",
        completions.warnings()
    );

    // `[DONE]` cut across reads, and `[DONE]` without its blank line at the end of input.
    let reads = vec![
        b"data: [DO".to_vec(),
        b"NE]\n\n".to_vec(),
        b"data: {oops}\n\n".to_vec(),
    ];
    let (stream, taken) = counted(futures::stream::iter(reads).map(Ok::<_, std::io::Error>));
    assert!(
        within(
            LIMIT,
            "outcome",
            builder().start(Source::sse(stream)).outcome()
        )
        .await
        .is_ok()
    );
    assert_eq!(taken.load(Ordering::SeqCst), 2);
    let reads = vec![Ok::<_, std::io::Error>(b"data: [DONE]\n".to_vec())];
    let c = builder().start(Source::sse(futures::stream::iter(reads)));
    assert!(within(LIMIT, "outcome", c.outcome()).await.is_ok());
}

#[tokio::test]
async fn deltas_after_done_in_the_same_read_are_counted_not_applied() {
    let _alone = heap::alone().await;
    let after = content_chunk(0, "late", None) + &content_chunk(5, "new", Some("stop"));
    let sse = content_chunk(0, "a", Some("stop")) + DONE + &after;
    let completions = builder().start(Source::reader(std::io::Cursor::new(sse)));
    let whole = within(LIMIT, "collect", completions.collect())
        .await
        .unwrap();
    assert_eq!(whole.choices.len(), 1, "choice 5 came after [DONE]");
    assert_eq!(text_of(&whole, 0), Some("a"));
    let warnings = completions.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(
        warnings[0].kind,
        WarningKind::DataAfterDone { bytes: after.len() }
    );
    assert_eq!((warnings[0].choice, warnings[0].line), (None, 5));
    // Only whitespace after it: nothing to report.
    let sse = content_chunk(0, "a", Some("stop")) + "data: [DONE]\n\n\r\n \n";
    let completions = builder().start(Source::reader(std::io::Cursor::new(sse)));
    within(LIMIT, "collect", completions.collect())
        .await
        .unwrap();
    assert!(completions.warnings().is_empty());
    // A `data:` line after `[DONE]` without the blank line between them: strictly (WHATWG)
    // one event whose data is no longer `[DONE]`; in the default tolerant mode `[DONE]` is an
    // event of its own and ends the stream (the line that ended it, `data: {}`, is taken as
    // that event's end: only bytes after it would count as data after `[DONE]`).
    let sse = content_chunk(0, "a", Some("stop")) + "data: [DONE]\ndata: {}\n\n";
    let strict = builder()
        .strict_sse(true)
        .start(Source::reader(std::io::Cursor::new(sse.clone())));
    let inc = within(LIMIT, "collect", strict.collect())
        .await
        .unwrap_err();
    assert!(
        matches!(inc.error.detail(), ErrorDetail::Json { line: 3, .. }),
        "{:?}",
        inc.error
    );
    let tolerant = builder().start(Source::reader(std::io::Cursor::new(sse)));
    within(LIMIT, "collect", tolerant.collect()).await.unwrap();
    let kinds: Vec<_> = tolerant.warnings().into_iter().map(|w| w.kind).collect();
    assert_eq!(kinds, [WarningKind::EventsWithoutBlankLines]);
}

// ------------------------------------------------------------------------------ emptiness

#[tokio::test]
async fn an_empty_stream_is_a_completion_without_choices() {
    let _alone = heap::alone().await;
    let nothing = futures::stream::empty::<Result<Vec<u8>, std::io::Error>>();
    let c = builder().start(Source::sse(nothing));
    let whole = within(LIMIT, "collect", c.collect()).await.unwrap();
    assert!(whole.choices.is_empty());
    assert!(c.warnings().is_empty());
    // A thousand empty reads: the same.
    let reads = (0..1000).map(|_| Ok::<_, std::io::Error>(Vec::new()));
    let c = builder().start(Source::sse(futures::stream::iter(reads)));
    assert!(
        within(LIMIT, "collect", c.collect())
            .await
            .unwrap()
            .choices
            .is_empty()
    );
    let c = builder().start(Source::reader(&b""[..]));
    assert!(
        within(LIMIT, "collect", c.collect())
            .await
            .unwrap()
            .choices
            .is_empty()
    );
    // Whitespace only: blank lines dispatch nothing.
    let c = builder().start(Source::reader(&b"\n\n\r\n\r\r\n"[..]));
    assert!(
        within(LIMIT, "collect", c.collect())
            .await
            .unwrap()
            .choices
            .is_empty()
    );
}

#[tokio::test]
async fn a_stream_of_only_comments() {
    let _alone = heap::alone().await;
    // 100,000 keep-alive comments, generated lazily: a completion without choices.
    let reads = (0..100_000).map(|_| Ok::<_, std::io::Error>(b": keep-alive\n\n".to_vec()));
    let c = builder().start(Source::sse(futures::stream::iter(reads)));
    let whole = within(LIMIT, "collect", c.collect()).await.unwrap();
    assert!(whole.choices.is_empty());
    // Cut inside a comment line: a truncation naming the partial line.
    let c = builder().start(Source::reader(&b": keep-alive\n\n: keep"[..]));
    let err = within(LIMIT, "outcome", c.outcome()).await.unwrap_err();
    assert!(
        matches!(
            err.detail(),
            ErrorDetail::Truncated {
                line: 3,
                offset: 14,
                pending_bytes: 6,
                unfinished
            } if unfinished.is_empty()
        ),
        "{err:?}"
    );
    // Fields that are not data (retry, id, event, unknown) without data dispatch nothing.
    let c = builder().start(Source::reader(
        &b"retry: 10\nid: 7\nevent: ping\nfoo: bar\n\n"[..],
    ));
    assert!(
        within(LIMIT, "collect", c.collect())
            .await
            .unwrap()
            .choices
            .is_empty()
    );
}

#[tokio::test]
async fn ten_thousand_empty_data_events_end_at_the_first() {
    let _alone = heap::alone().await;
    // `data:` alone dispatches an event whose data is empty (WHATWG); empty data is not a
    // chunk: a JSON error at the first one, nothing read after that read.
    let (stream, taken) = counted(
        futures::stream::iter(0..10_000).map(|_| Ok::<_, std::io::Error>(b"data:\n\n".to_vec())),
    );
    let err = within(
        LIMIT,
        "outcome",
        builder().start(Source::sse(stream)).outcome(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            err.detail(),
            ErrorDetail::Json {
                line: 1,
                offset: 0,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(taken.load(Ordering::SeqCst), 1);
    // Empty data after real chunks: the same error at its own line, the chunks kept.
    let events = [content_chunk(0, "kept", None), "data: \n\n".into()];
    let inc = collect_str(&events).await.unwrap_err();
    assert!(
        matches!(inc.error.detail(), ErrorDetail::Json { line: 3, offset, .. } if *offset == events[0].len() as u64)
    );
    assert_eq!(text_of(&inc.partial, 0), Some("kept"));
}

// ------------------------------------------------------------------------------ size

#[tokio::test]
async fn a_ten_mib_data_line_works_below_the_limit() {
    let _alone = heap::alone().await;
    let text = "abcdefghij".repeat(MIB as usize); // 10 MiB
    let line = content_chunk(0, &text, Some("stop")) + DONE;
    let reads = |line: &str| -> Vec<Result<Vec<u8>, std::io::Error>> {
        line.as_bytes()
            .chunks(64 * 1024)
            .map(|c| Ok(c.to_vec()))
            .collect()
    };
    let started = Instant::now();
    let c = builder()
        .max_event_size(16 * MIB as usize)
        .start(Source::sse(futures::stream::iter(reads(&line))));
    let (whole, peak) = heap::peak_during(within(LIMIT, "collect", c.collect())).await;
    let whole = whole.unwrap();
    eprintln!("a 10 MiB data line: peak heap growth {} MiB", peak / MIB);
    assert!(peak < 64 * MIB, "peak heap growth {peak}");
    assert_eq!(text_of(&whole, 0).map(str::len), Some(10 * MIB as usize));
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    // With the default limit (8 MiB) the same line is refused, without reading it all.
    let (stream, taken) = counted(futures::stream::iter(reads(&line)));
    let err = within(
        LIMIT,
        "outcome",
        builder().start(Source::sse(stream)).outcome(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            err.detail(),
            ErrorDetail::Sse(SseError::EventTooLarge {
                limit: 8_388_608,
                line: 1,
                offset: 0
            })
        ),
        "{err:?}"
    );
    assert!(
        taken.load(Ordering::SeqCst) <= 8 * 16 + 1,
        "read past the limit"
    );
}

// ------------------------------------------------------------------------------ amplification

const MIB: u64 = 1 << 20;

/// How much the process's heap grows while `sse` is collected and its result, the handle and
/// its warnings are still held.
async fn retained(sse: String) -> u64 {
    settle().await;
    let before = heap::live();
    let completions = builder().start(Source::reader(std::io::Cursor::new(sse)));
    let result = within(LIMIT, "collect", completions.collect()).await;
    let warnings = completions.warnings();
    let grown = heap::live().saturating_sub(before);
    drop((result, warnings, completions));
    settle().await;
    grown
}

/// Waits until the actors of earlier completions have stopped (and freed their state). An
/// earlier test releases `heap::alone()` before its runtime has dropped its actors, and a
/// multi-threaded runtime waits for a step under way (a large input's, in a debug build, on
/// a loaded machine: over 5 s once in CI) before it drops them: up to 30 s, then a leak.
async fn settle() {
    for _ in 0..3_000 {
        if choicewise_core::diagnostics::live_actors() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "{} actors still alive",
        choicewise_core::diagnostics::live_actors()
    );
}

/// Fixed in 4104359: every warning copied the kept and the ignored value whole, twice (the
/// choice's events and `Completions::warnings()`).
#[tokio::test]
async fn repeated_conflicts_do_not_copy_a_large_kept_value_per_warning() {
    let _alone = heap::alone().await;
    let big = "v".repeat(MIB as usize);
    let cases = [
        // A 1 MiB role, then 300 chunks with another role: ~14 KB more input.
        (
            sse_chunk(json!({"choices": [{"delta": {"role": big}}]})),
            sse_chunk(json!({"choices": [{"delta": {"role": "a"}}]})),
        ),
        // A 1 MiB finish reason, then 300 other finishes.
        (
            sse_chunk(json!({"choices": [{"delta": {}, "finish_reason": big}]})),
            sse_chunk(json!({"choices": [{"delta": {}, "finish_reason": "stop"}]})),
        ),
        // A tool call with a 1 MiB name, then 300 fragments naming it otherwise.
        (
            sse_chunk(json!({"choices": [{"delta": {"tool_calls": [
                {"index": 0, "id": "c", "function": {"name": big}}]}}]})),
            sse_chunk(json!({"choices": [{"delta": {"tool_calls": [
                {"index": 0, "function": {"name": "g"}}]}}]})),
        ),
    ];
    let mut worst = 0;
    let mut report = Vec::new();
    for (what, (first, repeat)) in ["role", "finish_reason", "tool name"]
        .into_iter()
        .zip(cases)
    {
        let sse = first + &repeat.repeat(300) + DONE;
        let input = sse.len() as u64;
        let grown = retained(sse).await;
        worst = worst.max(grown);
        report.push(format!(
            "{what}: {} KiB for {} KiB",
            grown / 1024,
            input / 1024
        ));
    }
    // Before 4104359: 600 to 900 MiB for ~1 MiB of input.
    eprintln!("repeated conflicts, retained: {report:?}");
    assert!(worst < 64 * MIB, "retained: {report:?}");
}

/// Fixed in 4104359: the error that ends a stream was deep-copied to every open choice and
/// every sub-stream reading it.
#[tokio::test]
async fn a_large_error_is_not_copied_to_every_open_choice() {
    let _alone = heap::alone().await;
    let open: Vec<Value> = (0..128)
        .map(|i| json!({"index": i, "delta": {"content": "x"}}))
        .collect();
    let choices = sse_chunk(json!({ "choices": open }));
    let big = "m".repeat(2 * MIB as usize);
    let mut worst = 0;
    let mut report = Vec::new();
    for (what, error_event) in [
        ("upstream", sse_chunk(json!({"error": {"message": big}}))),
        ("json", sse_chunk(json!(big))),
    ] {
        let sse = choices.clone() + &error_event;
        let input = sse.len() as u64;
        let grown = retained(sse).await;
        worst = worst.max(grown);
        report.push(format!(
            "{what}: {} KiB for {} KiB",
            grown / 1024,
            input / 1024
        ));
    }
    // Before 4104359: ~550 MiB (upstream) and ~240 MiB (JSON) for 2 MiB of input.
    eprintln!("a large error, retained: {report:?}");
    assert!(worst < 64 * MIB, "retained: {report:?}");
}

// ------------------------------------------------------------------------------ fuzz inputs

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if path.is_file() && !name.starts_with('.') && !name.ends_with(".md") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The kept inputs of bugs not fixed yet (`fuzz/regressions/KNOWN_BUGS`).
fn known_bugs(root: &Path) -> Vec<PathBuf> {
    std::fs::read_to_string(root.join("KNOWN_BUGS"))
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| root.join(l))
        .collect()
}

/// Runs one kept fuzz input through its target's invariant.
async fn replay_one(target: &str, path: &Path) {
    let bytes = std::fs::read(path).unwrap();
    eprintln!("replaying {}", path.display());
    match target {
        // The framer is not reachable from here: a framing input goes through the whole
        // pipeline, which frames it under the same splits.
        "sse_framing" | "pipeline" => invariants::check_pipeline(&bytes).await,
        "chunk_parse" => invariants::check_chunk_parse(&bytes),
        "demux" => invariants::check_demux(&bytes),
        "partial_json" => invariants::check_partial_json(&bytes),
        _ => {
            let scenario: invariants::Scenario = serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("{}: not a scenario: {e}", path.display()));
            invariants::check_merge(&scenario).await;
        }
    }
}

const TARGETS: [&str; 6] = [
    "sse_framing",
    "pipeline",
    "demux",
    "chunk_parse",
    "partial_json",
    "merge_interleaving",
];

/// Replays every kept input under `root` but the open bugs'; returns how many.
async fn replay(root: &Path) -> usize {
    let skip = known_bugs(root);
    let mut count = 0;
    for target in TARGETS {
        for path in files_under(&root.join(target)) {
            if !skip.contains(&path) {
                replay_one(target, &path).await;
                count += 1;
            }
        }
    }
    count
}

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzz_regressions_and_seeds_replay() {
    let _alone = heap::alone().await;
    let fuzz = fuzz_dir();
    let regressions = within(LIMIT, "regressions", replay(&fuzz.join("regressions"))).await;
    let seeds = within(LIMIT, "seeds", replay(&fuzz.join("seeds"))).await;
    eprintln!("replayed {regressions} regression inputs and {seeds} seeds");
    assert!(seeds > 0, "no fuzz seeds found under {}", fuzz.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "bug: replays the inputs of the open bugs listed in fuzz/regressions/KNOWN_BUGS \
            (none at the moment)"]
async fn fuzz_regressions_of_open_bugs() {
    let _alone = heap::alone().await;
    let root = fuzz_dir().join("regressions");
    for path in known_bugs(&root) {
        let target = path
            .strip_prefix(&root)
            .ok()
            .and_then(|p| p.components().next())
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .unwrap_or_default();
        within(LIMIT, "replay", replay_one(&target, &path)).await;
    }
}
