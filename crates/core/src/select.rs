//! Combinators that pick choices while they stream ([`Completions::first_finished`],
//! [`Completions::vote`]) and cancel what is no longer needed.

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use serde::Serialize;
use tokio::task::JoinSet;

use crate::completions::Completions;
use crate::error::Incomplete;
use crate::response::ChoiceOutput;

/// What a combinator picked, and what it cancelled to get there.
///
/// ```
/// # use choicewise_core::Completions;
/// # #[tokio::main] async fn main() {
/// let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n";
/// let selection = Completions::from_reader(sse.as_bytes()).first_finished(None).await;
/// assert_eq!(selection.selected, [0]);
/// assert!(selection.cancelled.is_empty());
/// assert_eq!(selection.reason, None);
/// # }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Selection {
    /// The indexes picked, ascending; empty when nothing could be (see `reason`).
    pub selected: Vec<u32>,
    /// The indexes the combinator cancelled, ascending.
    pub cancelled: Vec<u32>,
    /// Completion tokens the cancelled choices had received, estimated with tiktoken.
    pub cancelled_tokens: u64,
    /// The deadline passed before the answer was certain.
    pub timed_out: bool,
    /// Why nothing was selected, when nothing was.
    pub reason: Option<String>,
    /// The tally, for [`Completions::vote`].
    pub vote: Option<Tally>,
}

/// The outcome of a [`Completions::vote`]: the winning key and its support.
///
/// ```
/// use choicewise_core::Tally;
/// let t = Tally { key: "42".into(), votes: 3, counted: 3, choices: 5 };
/// assert_eq!(serde_json::to_value(&t).unwrap()["votes"], 3);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tally {
    /// The winning key.
    pub key: String,
    /// Votes for it.
    pub votes: usize,
    /// Votes counted: finished choices that had a key.
    pub counted: usize,
    /// Choices of the completion (expected, when known, else seen).
    pub choices: usize,
}

/// Whether a finish reason counts as a good finish for the combinators.
fn good(output: &ChoiceOutput) -> bool {
    !output.cancelled && matches!(output.finish_reason.as_deref(), Some("stop" | "tool_calls"))
}

/// Watches every choice's message as it settles, calling `decide` with each; stops when
/// `decide` returns `true`, the deadline passes (returns `true` then) or every choice is in.
async fn watch(
    completions: &Completions,
    deadline: Option<Duration>,
    mut decide: impl FnMut(Result<ChoiceOutput, Incomplete<ChoiceOutput>>, usize, bool) -> bool,
) -> bool {
    let sleep = tokio::time::sleep(deadline.unwrap_or(Duration::MAX));
    tokio::pin!(sleep);
    let mut choices = completions.choices();
    let mut listed = false;
    let mut seen = 0usize;
    let mut tasks = JoinSet::new();
    loop {
        if listed && tasks.is_empty() {
            return false;
        }
        tokio::select! {
            next = choices.next(), if !listed => match next {
                Some(choice) => {
                    seen += 1;
                    tasks.spawn(async move { choice.message().await });
                }
                None => listed = true,
            },
            Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                if let Ok(result) = joined
                    && decide(result, seen, listed)
                {
                    return false;
                }
            }
            () = &mut sleep, if deadline.is_some() => return true,
        }
    }
}

impl Completions {
    /// Waits for the first choice to finish with `stop` or `tool_calls` (not `length`,
    /// `content_filter`, an error or a cancel) and returns it, cancelling every other choice
    /// at once (dropping the upstreams nobody needs any more). Nothing is selected when no
    /// choice finishes so, or when `deadline` passes first (then every choice is cancelled).
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # use futures::stream;
    /// # #[tokio::main] async fn main() {
    /// let fast = "data: {\"choices\":[{\"delta\":{\"content\":\"done\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let slow = "data: {\"choices\":[{\"delta\":{\"content\":\"thinking\"}}]}\n\n";
    /// let stalled = futures::StreamExt::chain(stream::iter([Ok::<_, std::io::Error>(slow)]), stream::pending());
    /// let c = Completions::fan_out().sse(stalled).n(1).reader(fast.as_bytes()).n(1).start();
    /// let selection = c.first_finished(None).await;
    /// assert_eq!((selection.selected, selection.cancelled), (vec![1], vec![0]));
    /// assert!(c.outcome().await.is_ok()); // the stalled upstream was dropped
    /// # }
    /// ```
    pub async fn first_finished(&self, deadline: Option<Duration>) -> Selection {
        let mut winner = None;
        let timed_out = watch(self, deadline, |result, _, _| match result {
            Ok(output) if good(&output) => {
                winner = Some(output.index);
                true
            }
            _ => false,
        })
        .await;
        let reason = match (winner, timed_out) {
            (Some(_), _) => None,
            (None, true) => Some("the deadline passed before any choice finished".to_string()),
            (None, false) => Some("no choice finished with stop or tool_calls".to_string()),
        };
        self.conclude(winner.into_iter().collect(), timed_out, reason, None)
            .await
    }

    /// Plurality vote over `key` of each choice that finishes with `stop` or `tool_calls`
    /// (a choice whose key is `None` does not vote), decided **early**: as soon as the
    /// choices still running (and those still to appear, when the upstreams' `n` are known)
    /// could no longer change the winner even all voting for the runner-up, the rest are
    /// cancelled. Selected: every finished choice whose key won.
    ///
    /// Ties: when every choice is in (or the deadline passed) and several keys share the
    /// most votes, the key that received its first vote earliest wins. Nothing is selected
    /// when no choice voted (all failed, were cut off, or had no key).
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # use futures::stream;
    /// # #[tokio::main] async fn main() {
    /// let answer = |a: &'static str| format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{a}\"}},\"finish_reason\":\"stop\"}}]}}\n\n");
    /// let stalled = || stream::pending::<Result<String, std::io::Error>>();
    /// let ready = |a| stream::iter([Ok::<_, std::io::Error>(answer(a))]);
    /// let c = Completions::fan_out()
    ///     .sse(ready("42")).n(1)
    ///     .sse(stalled()).n(1)
    ///     .sse(ready(" 42 ")).n(1)
    ///     .sse(ready("42")).n(1)
    ///     .start();
    /// // Decided at the third 42: the stalled upstream could not change the winner.
    /// let selection = c.vote(|m| m.message.content.as_deref().map(|t| t.trim().to_string()), None).await;
    /// let tally = selection.vote.unwrap();
    /// assert_eq!((tally.key.as_str(), tally.votes, tally.counted, tally.choices), ("42", 3, 3, 4));
    /// assert_eq!(selection.selected, [0, 2, 3]);
    /// assert!(c.outcome().await.is_ok()); // the stalled upstream was dropped
    /// # }
    /// ```
    pub async fn vote<F>(&self, key: F, deadline: Option<Duration>) -> Selection
    where
        F: Fn(&ChoiceOutput) -> Option<String>,
    {
        let expected = self.expected_choices();
        // Key → (votes, order of its first vote); voters by key.
        let mut counts: HashMap<String, (usize, usize)> = HashMap::new();
        let mut voters: HashMap<String, Vec<u32>> = HashMap::new();
        let mut counted = 0usize;
        let mut settled = 0usize;
        let mut total = 0usize;
        let leader = |counts: &HashMap<String, (usize, usize)>| {
            let mut ranked: Vec<(&String, &(usize, usize))> = counts.iter().collect();
            ranked.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.1.1.cmp(&b.1.1)));
            let first = ranked.first().map(|(k, (v, _))| ((*k).clone(), *v));
            let second = ranked.get(1).map_or(0, |(_, (v, _))| *v);
            (first, second)
        };
        let timed_out = watch(self, deadline, |result, seen, listed| {
            settled += 1;
            total = expected.unwrap_or(seen).max(seen);
            if let Ok(output) = result
                && good(&output)
                && let Some(k) = key(&output)
            {
                counted += 1;
                let order = counts.len();
                counts.entry(k.clone()).or_insert((0, order)).0 += 1;
                voters.entry(k).or_default().push(output.index);
            }
            let (first, second) = leader(&counts);
            let remaining = match (expected, listed) {
                (_, true) => seen - settled,
                (Some(n), false) => n.max(seen) - settled,
                (None, false) => return false,
            };
            first.is_some_and(|(_, votes)| votes > second + remaining)
        })
        .await;
        let total = total.max(self.choice_count());
        let (winner, _) = leader(&counts);
        let (selected, vote, reason) = match winner {
            Some((k, votes)) => {
                let mut picked = voters.remove(&k).unwrap_or_default();
                picked.sort_unstable();
                let tally = Tally {
                    key: k,
                    votes,
                    counted,
                    choices: total,
                };
                (picked, Some(tally), None)
            }
            None => (
                Vec::new(),
                None,
                Some(match timed_out {
                    true => "the deadline passed before any choice voted".to_string(),
                    false => "no choice finished with a key to vote on".to_string(),
                }),
            ),
        };
        self.conclude(selected, timed_out, reason, vote).await
    }

    /// Cancels everything not selected and counts what the cancelled choices had received.
    async fn conclude(
        &self,
        mut selected: Vec<u32>,
        timed_out: bool,
        reason: Option<String>,
        vote: Option<Tally>,
    ) -> Selection {
        selected.sort_unstable();
        let mut cancelled = self.cancel();
        cancelled.sort_unstable();
        let outputs = self.outputs_of(&cancelled);
        let model = self.model();
        let cancelled_tokens = tokio::task::spawn_blocking(move || {
            let encoding =
                choicewise_usage::encoding_for_model(model.as_deref().unwrap_or_default());
            outputs
                .iter()
                .map(|o| o.completion_tokens(encoding.name))
                .sum()
        })
        .await
        .unwrap_or(0);
        Selection {
            selected,
            cancelled,
            cancelled_tokens,
            timed_out,
            reason,
            vote,
        }
    }
}
