//! Checks behind the fuzz targets in `fuzz_targets/`. The invariants of the targets that need
//! only `choicewise_core` live in the test kit (`choicewise_test_support::invariants`), which
//! the core's `tests/hostile.rs` replays too, so the inputs kept in `fuzz/regressions/` are
//! replayed by `cargo test` without the fuzzer.

pub use choicewise_test_support::invariants;

use std::ops::ControlFlow;
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use choicewise_sse::{Feed, Framer, OwnedEvent, SseError, Tail};

use invariants::{Scenario, StreamInput, Update, split};

/// One current-thread runtime per fuzzing process (the actors run on it during `block_on`).
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a tokio runtime")
    })
}

/// Waits (bounded) until every actor of the previous runs has stopped: a completion whose
/// handles are all dropped must not leave an actor behind.
pub fn assert_no_actor_left() {
    runtime().block_on(async {
        for round in 0..12_000 {
            if choicewise_core::diagnostics::live_actors() == 0 {
                return;
            }
            if round < 10_000 {
                tokio::task::yield_now().await;
            } else {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        }
        panic!(
            "{} actors still alive after every handle was dropped",
            choicewise_core::diagnostics::live_actors()
        );
    });
}

// ------------------------------------------------------------------------------ sse_framing

/// What framing a byte string gives: the events, the error, the (normalised, absolute)
/// offsets where a `[DONE]` callback stopped the framer, the final position and the tail.
#[derive(Debug, Clone, PartialEq)]
pub struct Framed {
    pub events: Vec<OwnedEvent>,
    pub error: Option<SseError>,
    pub stops: Vec<u64>,
    pub end: Option<(choicewise_sse::Position, Tail)>,
}

/// Frames `reads` (consecutive pieces of `data`). With `stop_at_done`, the callback breaks
/// at every `[DONE]` event and framing resumes with the rest of that read, so the result
/// must be the same as without breaking, stops aside.
pub fn frame(data: &[u8], reads: &[&[u8]], limit: Option<usize>, stop_at_done: bool) -> Framed {
    let mut framer = match limit {
        Some(l) => Framer::with_max_event_size(l),
        None => Framer::new(),
    };
    let mut out = Framed {
        events: Vec::new(),
        error: None,
        stops: Vec::new(),
        end: None,
    };
    let mut base = 0usize;
    for read in reads {
        let mut rest: &[u8] = read;
        let mut at = base;
        loop {
            let events = &mut out.events;
            let fed = framer.feed(rest, |ev| {
                events.push(ev.to_owned());
                if stop_at_done && ev.data == "[DONE]" {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            });
            if let Some(limit) = limit {
                assert!(
                    framer.buffered_bytes() <= 4 * limit,
                    "the framer holds {} bytes with a limit of {limit}",
                    framer.buffered_bytes()
                );
            }
            match fed {
                Ok(Feed::Consumed) => break,
                Ok(Feed::Stopped { consumed }) => {
                    assert!(consumed <= rest.len(), "consumed more than it was given");
                    // A CR ending the read counts as consumed and its LF, in the next read,
                    // is skipped; in one read the LF is consumed with it. Normalise.
                    let mut stop = at + consumed;
                    if stop > 0 && data.get(stop) == Some(&b'\n') && data[stop - 1] == b'\r' {
                        stop += 1;
                    }
                    out.stops.push(stop as u64);
                    rest = &rest[consumed..];
                    at += consumed;
                }
                Err(e) => {
                    // Poisoned: the same error again, whatever comes.
                    assert_eq!(
                        framer.feed(b"data: x\n\n", |_| ControlFlow::Continue(())),
                        Err(e.clone())
                    );
                    out.error = Some(e);
                    return out;
                }
            }
        }
        base += read.len();
    }
    let position = framer.position();
    assert_eq!(
        position.offset,
        data.len() as u64,
        "position after all reads"
    );
    out.end = Some((position, framer.finish()));
    out
}

/// Framing a byte string gives the same events, error, stops and tail however it is split
/// into reads, and breaking at `[DONE]` then resuming changes nothing but the stops.
pub fn check_framing(bytes: &[u8]) {
    let input = StreamInput::decode(bytes);
    let data = input.data;
    let limit = input.max_event_size;
    let whole = frame(data, &[data], limit, false);
    let whole_stopping = frame(data, &[data], limit, true);
    assert_eq!(
        (
            &whole_stopping.events,
            &whole_stopping.error,
            &whole_stopping.end
        ),
        (&whole.events, &whole.error, &whole.end),
        "breaking at [DONE] and resuming changed the framing"
    );
    let mut splits = vec![input.sizes.clone()];
    if data.len() <= 4096 {
        splits.push(vec![1]);
    }
    for sizes in splits {
        let reads = split(data, &sizes);
        assert_eq!(
            frame(data, &reads, limit, true),
            whole_stopping,
            "the read split {sizes:?} changed the framing"
        );
        assert_eq!(frame(data, &reads, limit, false), whole);
    }
    // Event positions are increasing and point at the event's first field line.
    for pair in whole.events.windows(2) {
        assert!(pair[0].offset < pair[1].offset && pair[0].line < pair[1].line);
    }
}

// ------------------------------------------------------------------------------ merge

/// Small alphabets, so that ids and names collide and the merge rules (a new id with a name
/// opens a call, set-once conflicts, fragments without index) are reached often.
fn pick<'a>(options: &[&'a str], n: u8) -> &'a str {
    options[usize::from(n) % options.len()]
}

#[derive(Debug, Arbitrary)]
pub enum ArbUpdate {
    Role(u8),
    Content(String),
    Reasoning(String),
    Refusal(String),
    Tool {
        index: Option<u8>,
        id: Option<u8>,
        kind: Option<u8>,
        name: Option<u8>,
        arguments: Option<String>,
    },
    Function {
        name: Option<u8>,
        arguments: Option<String>,
    },
    ToolJson {
        index: Option<u8>,
        value: u8,
    },
    Logprobs(Vec<u8>),
    Finish(Option<u8>),
}

impl From<ArbUpdate> for Update {
    fn from(u: ArbUpdate) -> Update {
        let s = |o: &[&str], n: u8| pick(o, n).to_string();
        let ids = ["call_a", "call_b", "call_c", "", "call_a"];
        let names = ["get_weather", "get_time", "", "f"];
        match u {
            ArbUpdate::Role(r) => Update::Role(s(&["assistant", "", "tool", "assistant"], r)),
            ArbUpdate::Content(t) => Update::Content(t),
            ArbUpdate::Reasoning(t) => Update::Reasoning(t),
            ArbUpdate::Refusal(t) => Update::Refusal(t),
            ArbUpdate::Tool {
                index,
                id,
                kind,
                name,
                arguments,
            } => Update::Tool {
                index: index.map(|i| u32::from(i % 12)),
                id: id.map(|i| s(&ids, i)),
                kind: kind.map(|k| s(&["function", "", "custom"], k)),
                name: name.map(|n| s(&names, n)),
                arguments,
            },
            ArbUpdate::Function { name, arguments } => Update::Function {
                name: name.map(|n| s(&names, n)),
                arguments,
            },
            ArbUpdate::ToolJson { index, value } => Update::ToolJson {
                index: index.map(|i| u32::from(i % 12)),
                value: match value % 4 {
                    0 => serde_json::json!({"city": "Paris", "days": value}),
                    1 => serde_json::json!([1, "two", null]),
                    2 => serde_json::json!(value),
                    _ => serde_json::json!(true),
                },
            },
            ArbUpdate::Logprobs(tokens) => {
                Update::Logprobs(tokens.iter().map(|t| format!("t{t}")).collect())
            }
            ArbUpdate::Finish(r) => {
                Update::Finish(r.map(|r| s(&["stop", "length", "tool_calls", "", "error"], r)))
            }
        }
    }
}

#[derive(Debug, Arbitrary)]
pub struct ArbScenario {
    pub choices: Vec<Vec<ArbUpdate>>,
    pub indexes: Vec<u32>,
    pub picks: Vec<u8>,
    pub group: Vec<bool>,
    pub sizes: Vec<u8>,
    pub max_tool_calls: Option<u8>,
}

impl ArbScenario {
    /// The scenario the check runs (`None` for an empty one).
    pub fn scenario(self) -> Option<Scenario> {
        Scenario {
            choices: self
                .choices
                .into_iter()
                .map(|c| c.into_iter().map(Update::from).collect())
                .collect(),
            indexes: self.indexes,
            picks: self.picks,
            group: self.group,
            sizes: self.sizes.iter().map(|&s| usize::from(s).max(1)).collect(),
            max_tool_calls: self.max_tool_calls.map(|m| usize::from(m % 8)),
        }
        .normalise()
    }
}
