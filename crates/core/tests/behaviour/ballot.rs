//! One ballot and one finish order behind every pick: a tie goes to the key whose voter the
//! stream finished first, an undecided vote answers with the ballot's leader, the tally is
//! listed in the ballot's order with the answer's key first, and "first finished" is the
//! first the stream finished, on every run, whichever choice's actor happens to run first.

use std::time::Duration;

use choicewise_core::{Completions, Source, VoteKey};
use choicewise_test_support::within;

const SETTLED: Duration = Duration::from_secs(20);

/// One chunk: choice `index` calls `name` with `arguments` (a JSON string's contents),
/// finishing with `tool_calls` when `finish`.
fn call(index: u32, name: &str, arguments: &str, finish: bool) -> String {
    let update = serde_json::json!({"choices": [{
        "index": index,
        "delta": {"tool_calls": [{"index": 0, "id": format!("call_{index}"), "type": "function",
                   "function": {"name": name, "arguments": arguments}}]},
        "finish_reason": if finish { Some("tool_calls") } else { None },
    }]});
    format!("data: {update}\n\n")
}

/// Choice `index`'s finish alone.
fn finish(index: u32) -> String {
    format!(
        "data: {{\"choices\":[{{\"index\":{index},\"delta\":{{}},\"finish_reason\":\"tool_calls\"}}]}}\n\n"
    )
}

/// An n = 3 stream, in one read: three different calls, the stream finishing the choices in
/// the order `order`.
fn three_calls(order: [u32; 3]) -> String {
    let mut sse = String::new();
    for i in 0..3 {
        sse += &call(i, "Bash", &format!("{{\"command\": \"echo {i}\"}}"), false);
    }
    for i in order {
        sse += &finish(i);
    }
    sse + "data: [DONE]\n\n"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecided_vote_answers_with_the_first_finished_on_every_run() {
    let key = VoteKey::content();
    for order in [[2, 0, 1], [1, 2, 0], [0, 1, 2]] {
        for run in 0..100 {
            let sse = three_calls(order);
            let completions = Completions::new(Source::reader(std::io::Cursor::new(sse)).n(3));
            let k = key.clone();
            let selection = within(
                SETTLED,
                "the vote",
                completions
                    .vote(move |o| k.of(o))
                    .min_votes(2)
                    .or_first_finished(),
            )
            .await;
            let vote = selection.vote.expect("a tally");
            let first = order[0];
            assert_eq!(selection.selected, [first], "run {run} of {order:?}");
            assert!(!vote.decided);
            let want = format!("[[\"Bash\",{{\"command\":\"echo {first}\"}}]]");
            assert_eq!(vote.key, want, "run {run} of {order:?}");
            assert_eq!(vote.tally[0].key, vote.key, "tally[0] is the answer's key");
            // The tally in the ballot's order: 1:1:1, by finish.
            let listed: Vec<String> = vote.tally.iter().map(|v| v.key.clone()).collect();
            let expected: Vec<String> = order
                .iter()
                .map(|i| format!("[[\"Bash\",{{\"command\":\"echo {i}\"}}]]"))
                .collect();
            assert_eq!(listed, expected, "run {run} of {order:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_finished_is_the_streams_first_finish_on_every_run() {
    for order in [[2, 0, 1], [1, 2, 0], [0, 2, 1]] {
        for run in 0..100 {
            let completions =
                Completions::new(Source::reader(std::io::Cursor::new(three_calls(order))).n(3));
            let selection = within(SETTLED, "the pick", completions.first_finished()).await;
            assert_eq!(selection.selected, [order[0]], "run {run} of {order:?}");
            let completions =
                Completions::new(Source::reader(std::io::Cursor::new(three_calls(order))).n(3));
            let selection = within(SETTLED, "the pick", completions.first_finished().take(2)).await;
            assert_eq!(selection.selected, order[..2], "run {run} of {order:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tie_goes_to_the_key_whose_voter_finished_first() {
    // 2:2: "b" first voted by choice 1, but choice 2 ("a") finished before choice 1.
    let text = |i: u32, t: &str| {
        format!("data: {{\"choices\":[{{\"index\":{i},\"delta\":{{\"content\":\"{t}\"}}}}]}}\n\n")
    };
    let stop = |i: u32| {
        format!(
            "data: {{\"choices\":[{{\"index\":{i},\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\n"
        )
    };
    for run in 0..50 {
        let mut sse = text(0, "b") + &text(1, "b") + &text(2, "a") + &text(3, "a");
        for i in [2, 1, 0, 3] {
            sse += &stop(i);
        }
        let completions = Completions::new(Source::reader(std::io::Cursor::new(sse)).n(4));
        let selection = within(
            SETTLED,
            "the vote",
            completions.vote(|o| o.message.content.clone()),
        )
        .await;
        let vote = selection.vote.expect("a tally");
        assert_eq!(vote.key, "a", "run {run}");
        assert_eq!(crate::common::ascending(&selection.selected), [2, 3]);
        assert_eq!(vote.tally[0].key, "a");
        assert_eq!(vote.tally[1].key, "b");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_whose_arguments_are_not_json_do_not_outvote_a_valid_one() {
    let key = VoteKey::content();
    // Two samples call Bash with arguments cut off, and finish first; one valid call.
    let broken = r#"{"command": "echo step1""#;
    let mut sse = call(0, "Bash", broken, true) + &call(1, "Bash", broken, true);
    sse += &call(2, "Bash", r#"{"command": "echo step1"}"#, true);
    let completions = Completions::new(Source::reader(std::io::Cursor::new(sse)).n(3));
    let selection = within(
        SETTLED,
        "the vote",
        completions.vote(move |o| key.of(o)).or_first_finished(),
    )
    .await;
    assert_eq!(selection.selected, [2], "the valid call is answered");
    let vote = selection.vote.expect("a tally");
    assert_eq!(vote.key, r#"[["Bash",{"command":"echo step1"}]]"#);
    assert_eq!((vote.votes, vote.counted), (1, 1));
    // Only such calls: the first to finish is answered all the same, undecided.
    let key = VoteKey::content();
    let sse = call(1, "Bash", broken, true) + &call(0, "Bash", "{\"a\":", true);
    let completions = Completions::new(Source::reader(std::io::Cursor::new(sse)).n(2));
    let selection = within(
        SETTLED,
        "the vote",
        completions.vote(move |o| key.of(o)).or_first_finished(),
    )
    .await;
    assert_eq!(selection.selected, [1]);
    let vote = selection.vote.expect("a tally");
    assert!(!vote.decided && vote.key.is_empty() && vote.tally.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecided_vote_answers_with_the_plurality() {
    // 2:1:1:1 short of 3 votes: the key with 2 answers, not the first to finish ("c").
    let text = |i: u32, t: &str| {
        format!(
            "data: {{\"choices\":[{{\"index\":{i},\"delta\":{{\"content\":\"{t}\"}},\"finish_reason\":\"stop\"}}]}}\n\n"
        )
    };
    let sse = text(3, "c") + &text(1, "a") + &text(0, "b") + &text(2, "a") + &text(4, "d");
    let completions = Completions::new(Source::reader(std::io::Cursor::new(sse)).n(5));
    let selection = within(
        SETTLED,
        "the vote",
        (completions.vote(|o| o.message.content.clone()))
            .min_votes(3)
            .or_first_finished(),
    )
    .await;
    let vote = selection.vote.expect("a tally");
    assert!(!vote.decided);
    assert_eq!((vote.key.as_str(), vote.votes), ("a", 2));
    assert_eq!(selection.selected, [1], "the leader's first finisher");
    let listed: Vec<(&str, usize)> = vote
        .tally
        .iter()
        .map(|v| (v.key.as_str(), v.votes))
        .collect();
    assert_eq!(listed, [("a", 2), ("c", 1), ("b", 1), ("d", 1)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_that_no_key_can_win_waits_while_its_answer_can_change() {
    // 1:1:1 of 4 under min_votes 3: no key can win once the third finished, but the fourth
    // can still make a leader ("a" at 2), whose first voter is the answer: the vote waits
    // for it, and stops at the same place on every run, whichever choices' actors settled
    // first.
    let text = |i: u32, t: &str| {
        format!(
            "data: {{\"choices\":[{{\"index\":{i},\"delta\":{{\"content\":\"{t}\"}},\"finish_reason\":\"stop\"}}]}}\n\n"
        )
    };
    for run in 0..100 {
        let sse = text(3, "c") + &text(1, "a") + &text(0, "b") + &text(2, "a");
        let completions = Completions::new(Source::reader(std::io::Cursor::new(sse)).n(4));
        let selection = within(
            SETTLED,
            "the vote",
            (completions.vote(|o| o.message.content.clone()))
                .min_votes(3)
                .or_first_finished(),
        )
        .await;
        let vote = selection.vote.expect("a tally");
        assert!(!vote.decided, "run {run}");
        assert_eq!((vote.key.as_str(), vote.counted), ("a", 4), "run {run}");
        assert_eq!(selection.selected, [1], "run {run}");
    }
}

/// One sample's stream: a call of `Bash` with `arguments`, finished.
fn one_call(arguments: &str) -> String {
    call(0, "Bash", arguments, true) + "data: [DONE]\n\n"
}

/// A sample that opens `after` from now (its head late, as an upstream's can be), then
/// streams `sse`.
fn opening_after(after: Duration, sse: String) -> Source {
    Source::open(async move {
        tokio::time::sleep(after).await;
        Ok::<_, std::io::Error>(Source::reader(std::io::Cursor::new(sse)))
    })
    .n(1)
}

/// Two samples whose call's arguments are not JSON finish first, while a third, valid, is
/// still opening: no finished sample holds a key, so the vote waits for the one running and
/// answers it, whether the samples are fixed sources or made on demand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_without_a_key_waits_for_the_samples_still_running() {
    let key = VoteKey::content();
    let sources = || {
        [
            Source::reader(std::io::Cursor::new(one_call(r#"{"cmd": "ls"#))).n(1),
            opening_after(Duration::from_millis(20), one_call(r#"{"cmd" "ls"}"#)),
            opening_after(Duration::from_millis(150), one_call(r#"{"cmd":"ls"}"#)),
        ]
    };
    for made in [false, true] {
        let completions = if made {
            let mut sources: Vec<Option<Source>> = sources().into_iter().map(Some).collect();
            let replacement = || Source::reader(std::io::Cursor::new(one_call("{"))).n(1);
            (Completions::builder().replace_failed(6)).samples(3, move |i| {
                sources
                    .get_mut(i)
                    .and_then(Option::take)
                    .unwrap_or_else(replacement)
            })
        } else {
            Completions::builder().fan_out(sources())
        };
        let k = key.clone();
        let selection = within(
            SETTLED,
            "the vote",
            completions.vote(move |o| k.of(o)).or_first_finished(),
        )
        .await;
        assert_eq!(selection.selected, [2], "made {made}: {selection:?}");
        assert!(selection.vote.unwrap().decided, "made {made}");
    }
}
