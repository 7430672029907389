//! A pick stated as data: `Policy`, checked in one place with errors naming their field,
//! its serde form (the gateway's extension), its request plan's opening, and
//! `Completions::pick` running it.

use std::time::Duration;

use choicewise_core::defaults::DEFAULT_MIN_VOTES;
use choicewise_core::plan::Opening;
use choicewise_core::policy::PolicyLimits;
use choicewise_core::{Completions, Measure, PickRule, Policy, PolicyErrorKind, Source};
use choicewise_test_support::{content_chunk, within};
use futures::stream;
use serde_json::{Value, json};

const SETTLED: Duration = Duration::from_secs(20);

fn limits() -> PolicyLimits {
    PolicyLimits::new(1).max_samples(16)
}

fn read(v: Value) -> Result<Policy, choicewise_core::PolicyError> {
    Policy::from_json(v.as_object().unwrap(), &limits())
}

#[test]
fn every_refusal_names_its_field_and_what_is_wrong() {
    let two = PolicyLimits::new(2).max_samples(16);
    let e = Policy::from_json(
        json!({"samples": 1, "select": "vote"}).as_object().unwrap(),
        &two,
    )
    .unwrap_err();
    assert_eq!((e.field(), e.kind()), ("samples", PolicyErrorKind::Samples));
    assert_eq!(
        e.to_string(),
        "\"samples\" must be an integer from n (2) to 16 (max_samples), not 1"
    );
    for (ext, field, kind, says) in [
        (
            json!({"samples": 17, "select": "vote"}),
            "samples",
            PolicyErrorKind::Samples,
            "max_samples",
        ),
        (
            json!({"samples": "3"}),
            "samples",
            PolicyErrorKind::Samples,
            "not \"3\"",
        ),
        (
            json!({"samples": 3, "select": "best"}),
            "select",
            PolicyErrorKind::UnknownRule,
            "unknown \"select\": \"best\" (first_token, first_finished or vote)",
        ),
        (
            json!({"samples": 3, "select": 1}),
            "select",
            PolicyErrorKind::Invalid,
            "must be a string",
        ),
        (
            json!({"samples": 3}),
            "select",
            PolicyErrorKind::NeedsRule,
            "\"samples\" above n needs \"select\"",
        ),
        (
            json!({"take": 2}),
            "take",
            PolicyErrorKind::UnknownField,
            "unknown field \"take\" (samples, select, vote_by, hedge_after_ms, window, confidence, min_votes, vote_normalize, deadline_ms)",
        ),
        (
            json!({"samples": 3, "select": "vote", "vote_by": "("}),
            "vote_by",
            PolicyErrorKind::Invalid,
            "\"vote_by\" is not a valid regular",
        ),
        (
            json!({"samples": 3, "select": "vote", "vote_by": format!("({})", vec!["\\w{50}"; 20].join("|"))}),
            "vote_by",
            PolicyErrorKind::PatternTooLarge,
            "too large once compiled",
        ),
        (
            json!({"samples": 3, "select": "vote", "hedge_after_ms": 50}),
            "hedge_after_ms",
            PolicyErrorKind::GoesWith,
            "\"hedge_after_ms\" goes with \"select\": \"first_token\"",
        ),
        (
            json!({"samples": 3, "select": "first_token", "hedge_after_ms": 0}),
            "hedge_after_ms",
            PolicyErrorKind::Invalid,
            "\"hedge_after_ms\" must be at least 10",
        ),
        (
            json!({"samples": 3, "select": "first_token", "hedge_after_ms": -1}),
            "hedge_after_ms",
            PolicyErrorKind::Invalid,
            "whole number of milliseconds",
        ),
        (
            json!({"samples": 3, "select": "first_finished", "window": 2}),
            "window",
            PolicyErrorKind::GoesWith,
            "\"window\" goes with \"select\": \"vote\"",
        ),
        (
            json!({"samples": 3, "select": "vote", "window": 0}),
            "window",
            PolicyErrorKind::Invalid,
            "must be an integer of 1 or more, not 0",
        ),
        (
            json!({"samples": 3, "select": "first_token", "confidence": {}}),
            "confidence",
            PolicyErrorKind::GoesWith,
            "\"confidence\" goes with \"select\": \"vote\"",
        ),
        (
            json!({"samples": 3, "select": "first_token", "vote_by": "x"}),
            "vote_by",
            PolicyErrorKind::GoesWith,
            "\"vote_by\" goes with",
        ),
        (
            json!({"samples": 3, "select": "first_token", "min_votes": 2}),
            "min_votes",
            PolicyErrorKind::GoesWith,
            "\"min_votes\" goes with",
        ),
        (
            json!({"samples": 3, "select": "first_token", "vote_normalize": true}),
            "vote_normalize",
            PolicyErrorKind::GoesWith,
            "goes with",
        ),
        (
            json!({"samples": 3, "select": "vote", "min_votes": 4}),
            "min_votes",
            PolicyErrorKind::Invalid,
            "(4) is more than \"samples\" (3)",
        ),
        (
            json!({"samples": 1, "select": "vote"}),
            "min_votes",
            PolicyErrorKind::Invalid,
            "(2, the default) is more than",
        ),
        (
            json!({"samples": 3, "select": "vote", "confidence": {"warmup": 65}}),
            "confidence.warmup",
            PolicyErrorKind::Invalid,
            "\"confidence.warmup\" must be an integer from 1 to 64, not 65",
        ),
        (
            json!({"samples": 3, "select": "vote", "confidence": {"keep": 0}}),
            "confidence.keep",
            PolicyErrorKind::Invalid,
            "must be a number above 0 and at most 1, not 0",
        ),
        (
            json!({"samples": 3, "select": "vote", "confidence": {"depth": 1}}),
            "confidence.depth",
            PolicyErrorKind::UnknownField,
            "unknown field \"confidence.depth\" (measure, warmup, keep",
        ),
        (
            json!({"samples": 3, "select": "vote", "confidence": {"measure": "mean"}}),
            "confidence.measure",
            PolicyErrorKind::Invalid,
            "unknown \"confidence.measure\": \"mean\" (sampled, top_k)",
        ),
        (
            json!({"samples": 3, "select": "vote", "confidence": {"measure": 1}}),
            "confidence.measure",
            PolicyErrorKind::Invalid,
            "\"confidence.measure\" must be a string (sampled, top_k), not 1",
        ),
        (
            json!({"samples": 3, "select": "vote", "confidence": 1}),
            "confidence",
            PolicyErrorKind::Invalid,
            "must be an object",
        ),
        (
            json!({"samples": 3, "select": "vote", "deadline_ms": 0}),
            "deadline_ms",
            PolicyErrorKind::Invalid,
            "1 or more",
        ),
    ] {
        let e = read(ext.clone()).unwrap_err();
        assert_eq!((e.field(), e.kind()), (field, kind), "{ext}: {e}");
        assert!(e.to_string().contains(says), "{ext}: {e}");
    }
}

#[test]
fn the_builder_refuses_what_the_json_form_refuses() {
    let e = Policy::builder()
        .select(PickRule::Vote)
        .samples(3)
        .take(2)
        .build(&limits())
        .unwrap_err();
    assert_eq!((e.field(), e.kind()), ("take", PolicyErrorKind::GoesWith));
    let e = Policy::builder()
        .select(PickRule::FirstFinished)
        .window(2)
        .build(&limits())
        .unwrap_err();
    assert_eq!(e.field(), "window");
    let e = Policy::builder()
        .select(PickRule::FirstToken)
        .samples(2)
        .hedge_after(Duration::from_millis(9))
        .build(&limits())
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "\"hedge_after_ms\" must be at least 10 (a shorter hedge would start every sample at once), not 9"
    );
    let ok = Policy::builder()
        .select(PickRule::FirstFinished)
        .take(2)
        .samples(3)
        .build(&limits())
        .unwrap();
    assert_eq!((ok.take(), ok.samples()), (2, 3));
}

#[test]
fn defaults_are_one_set() {
    let all = read(json!({})).unwrap();
    assert_eq!(
        (all.rule(), all.samples(), all.take()),
        (PickRule::All, 1, 1)
    );
    let n3 = Policy::from_json(&Default::default(), &PolicyLimits::new(3)).unwrap();
    assert_eq!((n3.samples(), n3.take()), (3, 3));
    let vote = read(json!({"samples": 5, "select": "vote"})).unwrap();
    assert_eq!(vote.min_votes(), DEFAULT_MIN_VOTES);
    assert_eq!(DEFAULT_MIN_VOTES, 2);
    assert!(vote.vote_key().is_some());
    let c = read(json!({"samples": 9, "select": "vote", "confidence": {"keep": 0.5}}))
        .unwrap()
        .confidence()
        .unwrap();
    // The default measure, `sampled`, with its own window; the keep stated.
    assert_eq!(
        (
            c.measure,
            c.warmup,
            c.keep,
            c.group_tokens,
            c.top_logprobs,
            c.consensus
        ),
        (Measure::Sampled, 8, 0.5, 4, 5, 0.95)
    );
    assert_eq!(c.asks_top_logprobs(), None);
    // `top_k`: DeepConf's defaults, whatever order the fields come in.
    let c = read(
        json!({"samples": 9, "select": "vote", "confidence": {"warmup": 4, "measure": "top_k"}}),
    )
    .unwrap()
    .confidence()
    .unwrap();
    assert_eq!(
        (
            c.measure,
            c.warmup,
            c.keep,
            c.group_tokens,
            c.asks_top_logprobs()
        ),
        (Measure::TopK, 4, 0.9, 64, Some(5))
    );
    // null is a field left out.
    let nulls = read(json!({"samples": null, "select": null, "window": null})).unwrap();
    assert_eq!(nulls.rule(), PickRule::All);
}

#[test]
fn the_serde_form_is_the_extension() {
    let ext = json!({"samples": 4, "select": "vote", "vote_by": "Answer: (\\d+)", "window": 2,
        "min_votes": 3, "vote_normalize": true, "deadline_ms": 5000,
        "confidence": {"measure": "top_k", "warmup": 2, "keep": 0.5, "group_tokens": 16, "top_logprobs": 3, "consensus": 0.9}});
    let policy: Policy = serde_json::from_value(ext.clone()).unwrap();
    assert_eq!(serde_json::to_value(&policy).unwrap(), ext);
    assert_eq!(policy.deadline(), Some(Duration::from_secs(5)));
    assert_eq!(policy.opening(), Opening::First(2));
    let hedged: Policy = serde_json::from_value(
        json!({"samples": 2, "select": "first_token", "hedge_after_ms": 300}),
    )
    .unwrap();
    assert_eq!(hedged.opening(), Opening::Hedged);
    assert_eq!(hedged.hedge_after(), Some(Duration::from_millis(300)));
    let e = serde_json::from_value::<Policy>(json!({"samples": 2})).unwrap_err();
    assert!(e.to_string().contains("needs \"select\""), "{e}");
    let windowed = read(json!({"samples": 6, "select": "vote", "window": 3})).unwrap();
    assert_eq!(windowed.opening(), Opening::First(3));
    assert_eq!(
        read(json!({"samples": 3, "select": "first_finished"}))
            .unwrap()
            .opening(),
        Opening::All
    );
}

#[test]
fn a_policy_is_checked_again_for_another_n() {
    let policy =
        read(json!({"samples": 2, "select": "first_token", "hedge_after_ms": 100})).unwrap();
    let two = policy
        .checked_for(&PolicyLimits::new(2).max_samples(16))
        .unwrap();
    assert_eq!((two.take(), two.samples()), (2, 2));
    let e = policy
        .checked_for(&PolicyLimits::new(3).max_samples(16))
        .unwrap_err();
    assert_eq!(e.kind(), PolicyErrorKind::Samples);
    assert!(e.to_string().contains("from n (3)"), "{e}");
    let e = policy
        .checked_for(&PolicyLimits::new(1).max_samples(1))
        .unwrap_err();
    assert!(e.to_string().contains("to 1 (max_samples)"), "{e}");
}

/// `samples` samples made on demand: the first silent, the others answering at once.
fn silent_first(samples: usize) -> Completions {
    Completions::builder().samples(samples, move |k| match k {
        0 => Source::sse(stream::pending::<Result<Vec<u8>, std::io::Error>>()).n(1),
        _ => {
            let chunk = content_chunk(0, "hedged", Some("stop")).into_bytes();
            Source::sse(stream::iter([Ok::<_, std::io::Error>(chunk)])).n(1)
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pick_runs_a_hedged_policy() {
    let policy =
        read(json!({"samples": 3, "select": "first_token", "hedge_after_ms": 50})).unwrap();
    let completions = silent_first(3);
    let selection = within(SETTLED, "the hedged pick", completions.pick(&policy)).await;
    assert_eq!(selection.selected, [1]);
    assert_eq!(selection.started, Some(2), "one hedge was enough");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pick_runs_a_vote_with_its_minimum_and_every_sample_for_all() {
    let answer = |a: &str| {
        let chunk = content_chunk(0, a, Some("stop")).into_bytes();
        Source::sse(stream::iter([Ok::<_, std::io::Error>(chunk)])).n(1)
    };
    // Every answer differs: the default minimum of two votes is not reached.
    let c = Completions::builder().fan_out([answer("1"), answer("2"), answer("3")]);
    let policy = read(json!({"samples": 3, "select": "vote"})).unwrap();
    let selection = within(SETTLED, "the vote", c.pick(&policy)).await;
    assert!(selection.selected.is_empty());
    assert!(
        selection
            .reason
            .as_deref()
            .unwrap()
            .starts_with("no key has 2 votes"),
        "{selection:?}"
    );
    let c = Completions::builder().fan_out([answer("1"), answer("2"), answer("3")]);
    let plurality = read(json!({"samples": 3, "select": "vote", "min_votes": 1})).unwrap();
    let selection = within(SETTLED, "the vote", c.pick(&plurality)).await;
    assert_eq!(selection.vote.unwrap().votes, 1);
    // Every sample: nothing picked, nothing cancelled.
    let c = Completions::builder().fan_out([answer("1"), answer("2")]);
    let all = Policy::from_json(&Default::default(), &PolicyLimits::new(2)).unwrap();
    let selection = within(SETTLED, "every sample", c.pick(&all)).await;
    assert_eq!(crate::common::ascending(&selection.selected), [0, 1]);
    assert!(selection.cancelled.is_empty());
    let whole = within(SETTLED, "collect", c.collect()).await.unwrap();
    assert_eq!(whole.choices.len(), 2);
}

/// Core names each field by its own name; a front end names them its own way, every field
/// the message mentions, not only the first.
#[test]
fn a_refusal_names_its_fields_neutrally_and_each_front_end_its_own_way() {
    let e = read(json!({"samples": 3, "select": "vote", "min_votes": 4})).unwrap_err();
    assert_eq!(
        e.to_string(),
        "\"min_votes\" (4) is more than \"samples\" (3): no key could win"
    );
    assert_eq!(
        e.message_naming(|f| format!("\"choicewise.{f}\"")),
        "\"choicewise.min_votes\" (4) is more than \"choicewise.samples\" (3): no key could win"
    );
    let flag = |f: &str| format!("--{}", f.replace('_', "-"));
    assert_eq!(
        e.problem_naming(flag),
        "(4) is more than --samples (3): no key could win"
    );
    let e = read(json!({"samples": 3})).unwrap_err();
    assert_eq!(
        e.message_naming(|f| format!("<{f}>")),
        "<samples> above n needs <select> (first_token, first_finished or vote)"
    );
    // A message that does not start with its field is whole in its problem.
    let e = read(json!({"select": "best"})).unwrap_err();
    assert_eq!(
        e.problem_naming(|f| format!("<{f}>")),
        "unknown <select>: \"best\" (first_token, first_finished or vote)"
    );
}
