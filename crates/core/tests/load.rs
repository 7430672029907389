//! Load: thousands of concurrent completions (n = 4), each with a seeded random fault, checked
//! against an independent accumulation of what was sent.
//!
//! ```sh
//! LOAD_COMPLETIONS=2000 LOAD_SEED=1 LOAD_ROUNDS=1 cargo test --test load -- --nocapture
//! ```
//!
//! For every completion: the result equals the orderly reference, or carries the expected
//! typed error with everything before the fault kept (`Incomplete.partial` equals the
//! reference of the prefix); every choice's `content()` ends as expected; nothing hangs (one
//! overall timeout); and afterwards `live_actors()` is back to where it started (a
//! process-wide counter: this file has ONE test). The figures are printed (`--nocapture`) and
//! recorded in `docs/reliability.md`.

use choicewise_test_support::invariants;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use choicewise_core::diagnostics::live_actors;
use choicewise_core::{ChatCompletion, Completions, Error, ErrorDetail, Source};
use choicewise_test_support::{DONE, rss_bytes, sse_chunk, within};
use futures::StreamExt;
use invariants::{Rng, split};
use serde_json::{Value, json};

const CHOICES: u32 = 4;
const IDLE: Duration = Duration::from_millis(100);
const OVERALL: Duration = Duration::from_secs(120);

/// Completions whose choice actors retire between reads (see `check_one`).
static RETIRING: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    None,
    /// `{"error": ...}` between two events.
    Upstream,
    /// The stream ends inside an event, without `[DONE]`.
    ConnectionDrop,
    /// The byte stream yields an `Err`.
    Transport,
    /// The byte stream stops sending (idle timeout 100 ms).
    Stall,
    /// The consumer drops its `Choice`s and sub-streams after a few items.
    ConsumerDropsEarly,
    /// Every handle is dropped mid-stream.
    AllHandlesDropped,
}

const FAULTS: [Fault; 7] = [
    Fault::None,
    Fault::Upstream,
    Fault::ConnectionDrop,
    Fault::Transport,
    Fault::Stall,
    Fault::ConsumerDropsEarly,
    Fault::AllHandlesDropped,
];

// ------------------------------------------------------------------------------ generation

#[derive(Debug, Clone)]
enum Upd {
    Start,
    Text(String),
    ToolStart { call: u32, id: String, name: String },
    ToolArgs { call: u32, args: String },
    Finish(&'static str),
}

fn entry(index: u32, u: &Upd) -> Value {
    match u {
        Upd::Start => json!({"index": index, "delta": {"role": "assistant", "content": ""}}),
        Upd::Text(t) => json!({"index": index, "delta": {"content": t}, "finish_reason": null}),
        Upd::ToolStart { call, id, name } => json!({"index": index, "delta": {"tool_calls": [
            {"index": call, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}}),
        Upd::ToolArgs { call, args } => json!({"index": index, "delta": {"tool_calls": [
            {"index": call, "function": {"arguments": args}}]}}),
        Upd::Finish(r) => json!({"index": index, "delta": {}, "finish_reason": r}),
    }
}

const WORDS: &[&str] = &[
    "the ",
    "choice ",
    "é",
    "😀",
    "\"quoted\" ",
    "new\nline ",
    "tab\t",
    "\\",
    "日本 ",
    "",
];

/// One choice's updates, in its own order.
fn choice_updates(rng: &mut Rng, index: u32) -> Vec<Upd> {
    let mut out = vec![Upd::Start];
    for _ in 0..rng.below(8) {
        let mut t = String::new();
        for _ in 0..1 + rng.below(3) {
            t.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
        }
        out.push(Upd::Text(t));
    }
    let calls = if rng.below(3) == 0 {
        1 + rng.below(2)
    } else {
        0
    };
    for call in 0..calls as u32 {
        out.push(Upd::ToolStart {
            call,
            id: format!("call_{index}_{call}_{}", rng.below(1000)),
            name: format!("fn_{call}"),
        });
        let args = format!(
            "{{\"city\": \"Zürich {}\", \"days\": {}}}",
            rng.below(99),
            rng.below(9)
        );
        let mut at = 0;
        while at < args.len() {
            let mut end = (at + 1 + rng.below(12) as usize).min(args.len());
            while !args.is_char_boundary(end) {
                end += 1;
            }
            out.push(Upd::ToolArgs {
                call,
                args: args[at..end].to_string(),
            });
            at = end;
        }
    }
    out.push(Upd::Finish(match (calls, rng.below(4)) {
        (0, 0) => "length",
        (0, _) => "stop",
        _ => "tool_calls",
    }));
    out
}

/// A completion: its chunks (each a list of (choice, update)), interleaved at random, several
/// choices per chunk at times.
fn completion(rng: &mut Rng) -> Vec<Vec<(u32, Upd)>> {
    let mut pending: Vec<(u32, std::collections::VecDeque<Upd>)> = (0..CHOICES)
        .map(|i| (i, choice_updates(rng, i).into()))
        .collect();
    let mut chunks: Vec<Vec<(u32, Upd)>> = Vec::new();
    while !pending.is_empty() {
        let k = rng.below(pending.len() as u64) as usize;
        let index = pending[k].0;
        let u = pending[k].1.pop_front().unwrap();
        if pending[k].1.is_empty() {
            pending.remove(k);
        }
        let joins = rng.below(4) == 0
            && chunks
                .last()
                .is_some_and(|c| c.iter().all(|(i, _)| *i != index));
        match chunks.last_mut() {
            Some(last) if joins => last.push((index, u)),
            _ => chunks.push(vec![(index, u)]),
        }
    }
    chunks
}

fn event(id: usize, chunk: &[(u32, Upd)]) -> String {
    let entries: Vec<Value> = chunk.iter().map(|(i, u)| entry(*i, u)).collect();
    let c = json!({"id": format!("chatcmpl-{id}"), "object": "chat.completion.chunk",
                   "created": 1, "model": "m", "choices": entries});
    sse_chunk(c)
}

const UPSTREAM_ERROR: &str =
    "data: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\",\"code\":503}}\n\n";

// ------------------------------------------------------------------------------ reference

/// One choice as an independent accumulator sees it: content, tool calls (id, name,
/// arguments) in order, finish reason.
type Expected = BTreeMap<
    u32,
    (
        Option<String>,
        Vec<(String, String, String)>,
        Option<String>,
    ),
>;

fn reference(chunks: &[Vec<(u32, Upd)>]) -> Expected {
    let mut out: Expected = BTreeMap::new();
    for (index, u) in chunks.iter().flatten() {
        let (content, calls, finish) = out.entry(*index).or_default();
        match u {
            Upd::Start => {
                content.get_or_insert_with(String::new);
            }
            Upd::Text(t) => content.get_or_insert_with(String::new).push_str(t),
            Upd::ToolStart { id, name, .. } => {
                calls.push((id.clone(), name.clone(), String::new()))
            }
            Upd::ToolArgs { call, args } => calls[*call as usize].2.push_str(args),
            Upd::Finish(r) => {
                finish.get_or_insert_with(|| r.to_string());
            }
        }
    }
    out
}

fn observed(c: &ChatCompletion) -> Expected {
    c.choices
        .iter()
        .map(|c| {
            let calls = c
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
                .collect();
            (
                c.index,
                (c.message.content.clone(), calls, c.finish_reason.clone()),
            )
        })
        .collect()
}

fn unfinished(e: &Expected) -> Vec<u32> {
    e.iter()
        .filter(|(_, (_, _, finish))| finish.is_none())
        .map(|(i, _)| *i)
        .collect()
}

// ------------------------------------------------------------------------------ one run

/// Records the upstream's drop.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

type Read = Result<Vec<u8>, std::io::Error>;

fn reads_of(bytes: &[u8], rng: &mut Rng) -> Vec<Read> {
    let sizes: Vec<usize> = (0..1 + rng.below(4))
        .map(|_| 1 + rng.below(300) as usize)
        .collect();
    split(bytes, &sizes)
        .into_iter()
        .map(|r| Ok(r.to_vec()))
        .collect()
}

/// Reads every choice's `content()` concurrently: per choice, the text and how it ended.
async fn read_contents(c: &Completions) -> BTreeMap<u32, (String, Option<Error>)> {
    let mut tasks = Vec::new();
    let mut choices = c.choices();
    while let Some(choice) = choices.next().await {
        tasks.push(tokio::spawn(async move {
            let mut text = String::new();
            let mut end = None;
            let mut content = choice.content();
            while let Some(item) = content.next().await {
                match item {
                    Ok(t) => text.push_str(&t),
                    Err(e) => end = Some(e),
                }
            }
            (choice.index(), (text, end))
        }));
    }
    let mut out = BTreeMap::new();
    for t in tasks {
        let (i, v) = t.await.expect("a content reader panicked");
        out.insert(i, v);
    }
    out
}

/// The check of one completion; `Err` describes what went wrong.
async fn run_one(id: usize, seed: u64) -> (Fault, Result<(), String>) {
    let mut rng = Rng::new(seed);
    let fault = FAULTS[rng.below(FAULTS.len() as u64) as usize];
    (fault, check_one(id, seed, fault, rng).await)
}

async fn check_one(id: usize, seed: u64, fault: Fault, mut rng: Rng) -> Result<(), String> {
    let chunks = completion(&mut rng);
    let events: Vec<String> = chunks.iter().map(|c| event(id, c)).collect();
    let starts: Vec<usize> = events
        .iter()
        .scan(0, |at, e| {
            let s = *at;
            *at += e.len();
            Some(s)
        })
        .collect();
    let body = events.concat();
    let full = reference(&chunks);
    let check = |what: &str, ok: bool, detail: &dyn std::fmt::Debug| -> Result<(), String> {
        if ok {
            Ok(())
        } else {
            Err(format!(
                "completion {id} ({fault:?}, seed {seed}): {what}: {detail:?}"
            ))
        }
    };
    // What the stream is, what `collect()` must give, what ends the unfinished choices.
    type ErrorCheck = Box<dyn Fn(&Error) -> bool + Send>;
    let (reads, prefix, expected_error): (Vec<Read>, Expected, Option<ErrorCheck>) = match fault {
        Fault::None | Fault::ConsumerDropsEarly | Fault::AllHandlesDropped => (
            reads_of((body.clone() + DONE).as_bytes(), &mut rng),
            full.clone(),
            None,
        ),
        Fault::Upstream => {
            let k = rng.below(events.len() as u64 + 1) as usize;
            let bytes = events[..k].concat() + UPSTREAM_ERROR + &events[k..].concat() + DONE;
            let line = 2 * k as u64 + 1;
            (
                reads_of(bytes.as_bytes(), &mut rng),
                reference(&chunks[..k]),
                Some(Box::new(move |e: &Error| {
                    matches!(e.detail(), ErrorDetail::Upstream(u) if u.message == "overloaded" && u.line == line
                             && u.code.as_deref() == Some("503"))
                })),
            )
        }
        Fault::ConnectionDrop => {
            let k = rng.below(events.len() as u64) as usize;
            let cut = starts[k] + 1 + rng.below(events[k].len() as u64 - 1) as usize;
            let prefix = reference(&chunks[..k]);
            let expected = (
                2 * k as u64 + 1,
                starts[k] as u64,
                (cut - starts[k]) as u64,
                unfinished(&prefix),
            );
            (
                reads_of(&body.as_bytes()[..cut], &mut rng),
                prefix,
                Some(Box::new(move |e: &Error| {
                    matches!(e.detail(), ErrorDetail::Truncated { line, offset, pending_bytes, unfinished }
                             if (*line, *offset, *pending_bytes, unfinished.clone()) == expected)
                })),
            )
        }
        Fault::Transport | Fault::Stall => {
            let cut = rng.below(body.len() as u64 + 1) as usize;
            let complete = starts
                .iter()
                .zip(&events)
                .filter(|(s, e)| *s + e.len() <= cut)
                .count();
            let mut reads = reads_of(&body.as_bytes()[..cut], &mut rng);
            let check: ErrorCheck = if fault == Fault::Transport {
                reads.push(Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "connection reset",
                )));
                Box::new(move |e: &Error| {
                    matches!(e.detail(), ErrorDetail::Transport { offset, message, .. }
                             if *offset == cut as u64 && message == "connection reset")
                })
            } else {
                Box::new(move |e: &Error| {
                    matches!(e.detail(), ErrorDetail::IdleTimeout { after, offset }
                             if *after == IDLE && *offset == cut as u64)
                })
            };
            (reads, reference(&chunks[..complete]), Some(check))
        }
    };

    let dropped = Arc::new(AtomicBool::new(false));
    let guard = DropFlag(dropped.clone());
    let stall = matches!(fault, Fault::Stall | Fault::AllHandlesDropped);
    let reads = if fault == Fault::AllHandlesDropped {
        // Half the reads, then silence: the consumer drops everything meanwhile.
        let half = reads.len() / 2;
        reads.into_iter().take(half.max(1)).collect()
    } else {
        reads
    };
    // Half the completions pause now and then between reads, with the choice actors retiring
    // after 1 ms of quiet: they come back for the next update, racing the pauses.
    let retiring = rng.below(2) == 0;
    let pauses: Vec<bool> = (0..reads.len())
        .map(|_| retiring && rng.below(4) == 0)
        .collect();
    if retiring {
        RETIRING.fetch_add(1, Ordering::Relaxed);
    }
    let paced =
        futures::stream::iter(reads.into_iter().zip(pauses)).then(|(read, pause)| async move {
            if pause {
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            read
        });
    let upstream = paced.chain(futures::stream::poll_fn(move |_| {
        let _ = &guard;
        if stall {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(None)
        }
    }));
    let mut builder = Completions::builder().estimate_usage(false);
    if fault == Fault::Stall {
        builder = builder.idle_timeout(IDLE);
    }
    if retiring {
        builder = builder.hibernate_after(Duration::from_millis(1));
    }
    let completions = builder.start(Source::sse(upstream));

    match fault {
        Fault::AllHandlesDropped => {
            let mut choices = completions.choices();
            if let Some(choice) = choices.next().await {
                let mut content = choice.content();
                let _ = tokio::time::timeout(Duration::from_millis(5), content.next()).await;
                drop((content, choice));
            }
            drop((choices, completions));
            let deadline = Instant::now() + Duration::from_secs(10);
            while !dropped.load(Ordering::SeqCst) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            return check(
                "the upstream was not dropped",
                dropped.load(Ordering::SeqCst),
                &(),
            );
        }
        Fault::ConsumerDropsEarly => {
            let mut choices = completions.choices();
            for _ in 0..2 {
                let Some(choice) = choices.next().await else {
                    break;
                };
                let mut content = choice.content();
                let mut events = choice.events();
                let mut calls = choice.function_calls();
                let _ = content.next().await;
                let _ = events.next().await;
                let _ = tokio::time::timeout(Duration::from_millis(1), calls.next()).await;
                drop((content, events, calls, choice));
            }
            drop(choices);
        }
        _ => {}
    }

    let contents = if fault == Fault::ConsumerDropsEarly {
        None
    } else {
        Some(read_contents(&completions).await)
    };
    let result = completions.collect().await;
    let (partial, error) = match result {
        Ok(c) => (c, None),
        Err(inc) => (inc.partial, Some(inc.error)),
    };
    let got = observed(&partial);
    check(
        "collect() differs from the reference",
        got == prefix,
        &(&got, &prefix),
    )?;
    match (&error, &expected_error) {
        (None, None) => {}
        (Some(e), Some(ok)) => check("unexpected error", ok(e), e)?,
        _ => check("wrong outcome", false, &error)?,
    }
    // Every choice's content() gave its text, then ended: cleanly if it finished before the
    // fault, with the stream's error otherwise.
    if let Some(contents) = contents {
        let keys: Vec<_> = contents.keys().collect();
        check(
            "choices()",
            keys == prefix.keys().collect::<Vec<_>>(),
            &keys,
        )?;
        for (index, (text, end)) in &contents {
            let (content, _, finish) = &prefix[index];
            check(
                "content()",
                Some(text) == content.as_ref() || (text.is_empty() && content.is_none()),
                &(index, text, content),
            )?;
            match (end, finish, &expected_error) {
                (None, Some(_), _) | (None, None, None) => {}
                (Some(e), None, Some(ok)) => check("content() error", ok(e), e)?,
                _ => check("content() end", false, &(index, end, finish))?,
            }
        }
    }
    Ok(())
}

// ------------------------------------------------------------------------------ the test

#[test]
fn thousands_of_concurrent_completions_with_random_faults() {
    let count: usize = std::env::var("LOAD_COMPLETIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let seed: u64 = std::env::var("LOAD_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let rounds: usize = std::env::var("LOAD_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let actors_before = live_actors();
    let rss_before = rss_bytes();
    let mut rss_after_rounds = Vec::new();
    let mut results = Vec::new();
    let started = Instant::now();
    for round in 0..rounds {
        results.extend(runtime.block_on(async {
            let tasks: Vec<_> = (0..count)
                .map(|i| {
                    let s = seed
                        .wrapping_mul(0x1000_0000_01b3)
                        .wrapping_add((round * count + i) as u64);
                    tokio::spawn(run_one(i, s))
                })
                .collect();
            let all = futures::future::join_all(tasks);
            within(OVERALL, &format!("{count} completions ending"), all).await
        }));
        rss_after_rounds.push(rss_bytes());
    }
    let wall = started.elapsed();
    // Every actor stops once its completion is over and its handles are gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    while live_actors() != actors_before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let actors_after = live_actors();
    drop(runtime);
    let mut by_fault: BTreeMap<Fault, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    for r in results {
        let (fault, outcome) = r.expect("a completion's task panicked");
        *by_fault.entry(fault).or_default() += 1;
        if let Err(e) = outcome {
            failures.push(e);
        }
    }
    let mib = |b: u64| format!("{:.1}", b as f64 / 1048576.0);
    let after: Vec<String> = rss_after_rounds.iter().map(|&b| mib(b)).collect();
    println!(
        "load: {rounds} x {count} concurrent completions (n={CHOICES}, seed {seed}) in {:.2} s; \
         faults {by_fault:?}; {} with actors retiring between reads; RSS {} MiB before, {} MiB after each round; live actors \
         {actors_before} before, {actors_after} after; {} failures",
        wall.as_secs_f64(),
        RETIRING.load(Ordering::Relaxed),
        mib(rss_before),
        after.join(" / "),
        failures.len()
    );
    for f in failures.iter().take(5) {
        println!("  {f}");
    }
    assert!(failures.is_empty(), "{} completions failed", failures.len());
    assert_eq!(actors_after, actors_before, "actors left behind");
}
