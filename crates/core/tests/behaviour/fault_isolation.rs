//! A malformed update of one choice fails that choice only: the other choices go on and end
//! exactly as they would have without it, in every position of the poison and under any read
//! split; the poisoned choice keeps what it had and names its index, line and byte offset.

use crate::common::streams::{completion, interleave, orderly};

use std::sync::LazyLock;

use choicewise_core::Source;
use choicewise_core::{
    ChatCompletion, ChoiceEvent, ChoiceOutput, Completions, Error, ErrorDetail, WarningKind,
};
use choicewise_test_support::{sse_stream, upstream};
use futures::TryStreamExt;
use proptest::prelude::*;
use serde_json::{Value, json};

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
});

/// The updates that poison a choice, each a different fault of its own.
fn poisons(index: u32) -> Vec<Value> {
    vec![
        json!({"index": index, "delta": {"content": 5}}),
        json!({"index": index, "delta": "x"}),
        json!({"index": index, "delta": {"tool_calls": {"index": 0}}}),
        json!({"index": index, "delta": {"tool_calls": [{"index": -1}]}}),
        json!({"index": index, "delta": {"role": "assistant", "refusal": ["no"]}, "finish_reason": 3}),
        json!({"index": index, "delta": {"content": choicewise_test_support::fault::PANIC_CHOICE}}),
    ]
}

/// Whether `e` is a choice-level error of choice `index`.
fn names_choice(e: &Error, index: u32) -> bool {
    match e.detail() {
        ErrorDetail::InvalidUpdate { choice, .. } | ErrorDetail::InvalidToolCall { choice, .. } => {
            *choice == index
        }
        ErrorDetail::ActorFailed { choice, .. } => *choice == Some(index),
        _ => false,
    }
}

/// What a run gives: the completion (with the error, if any) and each choice's events and
/// error.
#[derive(Debug)]
struct Run {
    completion: ChatCompletion,
    error: Option<Error>,
    choices: Vec<(u32, Vec<ChoiceEvent>, Option<Error>)>,
    warnings: Vec<choicewise_core::Warning>,
}

async fn run(reads: Vec<Vec<u8>>) -> Run {
    let completions = Completions::builder()
        .fault_hook(choicewise_test_support::fault::Markers)
        .estimate_usage(false)
        .start(Source::sse(upstream(reads)));
    let (completion, error) = match completions.collect().await {
        Ok(c) => (c, None),
        Err(inc) => (inc.partial, Some(inc.error)),
    };
    let mut choices = Vec::new();
    for c in &completion.choices {
        let choice = completions.choice(c.index).await.unwrap();
        let mut events = Vec::new();
        let mut stream = choice.events();
        let end = loop {
            match stream.try_next().await {
                Ok(Some(e)) => events.push(e),
                Ok(None) => break None,
                Err(e) => break Some(e),
            }
        };
        choices.push((c.index, events, end));
    }
    Run {
        completion,
        error,
        choices,
        warnings: completions.warnings(),
    }
}

fn sse_of(chunks: &[Value]) -> Vec<u8> {
    sse_stream(chunks).into_bytes()
}

/// The chunks of a fixture, parsed.
fn chunks_of(name: &str) -> Vec<Value> {
    String::from_utf8(crate::common::fixture(name))
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| d.trim() != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

fn output(c: &ChatCompletion, index: u32) -> Option<&ChoiceOutput> {
    c.choices.iter().find(|c| c.index == index)
}

/// Checks a poisoned run against the clean one: every other choice exactly as clean; the
/// poisoned one failed with its own error, its events a prefix of the clean ones.
fn check(clean: &Run, poisoned: &Run, index: u32, what: &str) {
    for (i, events, end) in &clean.choices {
        let (_, got_events, got_end) = poisoned
            .choices
            .iter()
            .find(|(j, ..)| j == i)
            .unwrap_or_else(|| panic!("{what}: choice {i} missing"));
        if *i == index {
            let e = got_end
                .as_ref()
                .unwrap_or_else(|| panic!("{what}: no error"));
            assert!(names_choice(e, index), "{what}: {e:?}");
            assert!(
                events.starts_with(got_events),
                "{what}: the failed choice's events are not a prefix of the clean ones"
            );
            assert_eq!(
                output(&poisoned.completion, index).unwrap().finish_reason,
                None
            );
        } else {
            assert_eq!(got_events, events, "{what}: choice {i}'s events");
            assert_eq!(got_end.is_some(), end.is_some(), "{what}: choice {i}'s end");
            assert_eq!(
                output(&poisoned.completion, *i),
                output(&clean.completion, *i),
                "{what}: choice {i}'s message"
            );
        }
    }
    let error = poisoned
        .error
        .as_ref()
        .expect("collect() reports the failure");
    assert!(names_choice(error, index), "{what}: {error:?}");
}

// One test per recording, so that the harness runs them side by side.
#[test]
fn a_poisoned_choice_in_every_position_fails_alone_under_any_split_openai() {
    a_poisoned_choice_in_every_position_fails_alone("openai_n3_tools.sse");
}

#[test]
fn a_poisoned_choice_in_every_position_fails_alone_under_any_split_vllm() {
    a_poisoned_choice_in_every_position_fails_alone("vllm_n4_reasoning.sse");
}

fn a_poisoned_choice_in_every_position_fails_alone(fixture: &str) {
    let chunks = chunks_of(fixture);
    let clean = RUNTIME.block_on(run(vec![sse_of(&chunks)]));
    assert!(clean.error.is_none(), "{fixture}: {:?}", clean.error);
    let indexes: Vec<u32> = clean.choices.iter().map(|c| c.0).collect();
    for &index in &indexes {
        // The chunk with the choice's first update, and its last.
        let mine = |c: &Value| {
            c["choices"]
                .as_array()
                .is_some_and(|a| a.iter().any(|e| e["index"] == index))
        };
        let first = chunks.iter().position(mine).unwrap();
        let last = chunks.iter().rposition(mine).unwrap();
        for (p, poison) in poisons(index).into_iter().enumerate() {
            let alone = |at: usize| {
                let mut c = chunks.clone();
                c.insert(at, json!({"id": "x", "choices": [poison.clone()]}));
                c
            };
            // First seen (the poison is its first update), just before its last update
            // (its finish), and inside a chunk with another choice's update, before its
            // finish.
            let mut places = vec![
                ("first seen", alone(first)),
                ("before its last update", alone(last)),
            ];
            let with_others = chunks[..last].iter().position(|c| {
                c["choices"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|e| e["index"] != index))
            });
            if let Some(at) = with_others {
                let mut shared = chunks.clone();
                shared[at]["choices"]
                    .as_array_mut()
                    .unwrap()
                    .push(poison.clone());
                places.push(("in a chunk with others", shared));
            }
            for (k, (place, stream)) in places.into_iter().enumerate() {
                let bytes = sse_of(&stream);
                // Whole, and one other split in turn: every split meets every choice and
                // every place across the poisons, at two fifths of the runs of all of them
                // each time (a debug build's 20 s on 2 cores; split_invariance covers the
                // splits themselves).
                let splits = crate::common::SPLITS;
                let other = splits[1 + (p * 3 + k) % (splits.len() - 1)];
                for sizes in [splits[0], other] {
                    let what = format!("{fixture}, choice {index}, poison {p}, {place}, {sizes:?}");
                    let reads = crate::common::split(&bytes, sizes);
                    let poisoned = RUNTIME.block_on(run(reads));
                    check(&clean, &poisoned, index, &what);
                }
            }
        }
    }
}

#[test]
fn updates_after_the_failure_are_ignored_and_counted() {
    let sse = sse_of(&[
        json!({"choices": [{"index": 1, "delta": {"content": "a"}}]}),
        json!({"choices": [{"index": 0, "delta": {"content": 5}}]}),
        json!({"choices": [{"index": 0, "delta": {"content": "b"}}]}),
        json!({"choices": [{"index": 0, "delta": {"content": "c"}, "finish_reason": "stop"}]}),
        json!({"choices": [{"index": 1, "delta": {}, "finish_reason": "stop"}]}),
    ]);
    let r = RUNTIME.block_on(run(vec![sse]));
    let error = r.error.unwrap();
    assert!(
        matches!(error.detail(), ErrorDetail::InvalidUpdate { choice: 0, line: 3, offset, .. } if *offset > 0),
        "{error:?}"
    );
    assert_eq!(output(&r.completion, 0).unwrap().message.content, None);
    assert_eq!(
        output(&r.completion, 1).unwrap().finish_reason.as_deref(),
        Some("stop")
    );
    let ignored: Vec<_> = r
        .warnings
        .iter()
        .filter(|w| matches!(w.kind, WarningKind::IgnoredAfterFailure { updates: 2 }))
        .collect();
    assert_eq!(ignored.len(), 1, "{:?}", r.warnings);
    assert_eq!((ignored[0].choice, ignored[0].line), (Some(0), 5));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any interleaving × any read split × one random choice poisoned at a random place: the
    /// others are unaffected.
    #[test]
    fn any_interleaving_split_and_poisoned_choice_leave_the_others_alone(
        choices in completion(),
        picks in prop::collection::vec(0usize..4, 0..200),
        group in prop::collection::vec(any::<bool>(), 0..200),
        sizes in prop::collection::vec(1usize..40, 1..8),
        victim in any::<prop::sample::Index>(),
        place in any::<prop::sample::Index>(),
        kind in 0usize..6,
    ) {
        let clean = RUNTIME.block_on(run(vec![sse_of_entries(&orderly(&choices))]));
        let v = victim.index(choices.len());
        let index = v as u32;
        let mut poisoned_choices = choices.clone();
        // Before the victim's finish, so that its sub-streams end with the error.
        let at = place.index(poisoned_choices[v].len().max(1)).min(poisoned_choices[v].len().saturating_sub(1));
        poisoned_choices[v].insert(at, poisons(index)[kind].clone());
        let shuffled = sse_of_entries(&interleave(&poisoned_choices, &picks, &group));
        let poisoned = RUNTIME.block_on(run(crate::common::split(&shuffled, &sizes)));
        check(&clean, &poisoned, index, "property");
    }
}

fn sse_of_entries(chunks: &[Vec<Value>]) -> Vec<u8> {
    let values: Vec<Value> = chunks
        .iter()
        .map(|entries| json!({"id": "chatcmpl-x", "model": "m", "choices": entries}))
        .collect();
    sse_of(&values)
}
