//! Closing the unneeded upstreams: from a combinator's decision to every unneeded upstream
//! connection closed, over real loopback HTTP.
//!
//! Each run is a fresh fan-out of 5 requests sent by `choicewise_client::Client` (hyper)
//! to a fresh in-process [`TestServer`]: the first request to arrive is answered after
//! `delay` with one whole answer (`stop`), the 4 others with one event each and then
//! nothing, their connections held open. `first_finished()` picks the fast choice and
//! cancels the 4 others; with no choice of theirs wanted, the upstream readers drop the
//! response bodies and hyper closes those connections.
//!
//! The fan-out is built as `Client::source` builds its sources (each request's body from
//! `Client::stream`, opened as a source of core's `fan_out` with the request declared), with
//! each body wrapped to stamp its reads: the only way to see, without changing the library,
//! when the bytes the combinator decides on reached the reader. Left out: the client's idle
//! timeout on each source (nothing here is idle for long).
//!
//! The decision is bracketed by two stamps, both on the client's runtime:
//!
//! - **finish read** (no later than the decision): the read carrying the fast answer's
//!   `"finish_reason":"stop"` handed to its upstream reader. After it come the framing,
//!   parse and routing of the event, the choice closing, the combinator waking on it and
//!   deciding. **The target is judged from this stamp**: it can only overstate.
//! - **decision** (no earlier than the decision): the instant the winning choice's
//!   `message()` resolves, stamped by a watcher task of the harness that awaits every
//!   choice's `message()` as the combinator does (one task per choice, spawned as the choice
//!   appears); the combinator decides on that same wake-up. When the watcher's task runs only
//!   after the cancel (it saw a cancelled choice settle before the winner), the earliest
//!   stamp of the run is taken, and the run is counted: under load the figure from this
//!   stamp understates.
//!
//! **Closed**: the instant the server has seen the 4th stalled answer abandoned
//! (`TestServer::wait_disconnects`, the count of answers dropped before their end, which
//! hyper drops when it sees the socket closed), stamped by a task on the server's runtime.
//! The server runs on a runtime of its own (one worker thread), standing in for the other
//! end of the network: its detection does not queue behind the client's tasks. Every stamp
//! comes from the same monotonic clock.
//!
//! Baseline, the same number of runs, interleaved with ours: the same client's
//! `Client::stream` (a plain response body) on a stalled answer, its first event read,
//! the response dropped; from the drop to the server seeing the disconnect. Once with one
//! connection (the floor of closing one loopback HTTP connection), once with 4 responses
//! dropped at once (the floor of our scenario's 4).
//!
//! A run whose scenario did not happen as planned (a stalled upstream's choice had not
//! appeared, its first event routed, before the fast answer's finish was read: its
//! connection may not have reached the server's answer yet) is discarded and run again; the
//! count is printed. The decision always comes from
//! the fast answer: every run checks the selection (1 selected, its text, 4 cancelled) and
//! that the server counted exactly 4 disconnects.

use std::future::IntoFuture;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use choicewise_client::{Client, ClientError};
use choicewise_core::{Choices, Completions, Source};
use choicewise_test_support::within;
use choicewise_testserver::{TestServer, TestServerBuilder};
use futures::{Stream, StreamExt};
use serde_json::{Value, json};
use tokio::runtime::{Handle, Runtime};
use tokio::task::JoinSet;

use crate::stats::percentile_sorted;

/// Stalled upstreams per run (the unneeded ones).
pub const STALLED: usize = 4;
/// The fast answer's text.
const FAST_TEXT: &str = "fast";
/// The stalled answers' first (and only) content.
const STALLED_TEXT: &str = "thinking about it";
/// Longest wait for anything in a run before it is judged broken.
const PATIENCE: Duration = Duration::from_secs(10);
/// How often a run may be discarded (scenario not as planned) before the harness gives up.
const MAX_REDOS: usize = 50;

/// A one-choice stream answering `text` (`stop`), as a provider's n = 1 stream.
fn answer(text: &str) -> String {
    let content = serde_json::to_string(text).expect("a string serialises");
    format!(
        "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":{content}}},\"finish_reason\":null}}]}}\n\n\
         data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\n\
         data: [DONE]\n\n"
    )
}

/// An answer that sends its first event, then nothing, its connection kept open.
fn stalled() -> TestServerBuilder {
    let body = answer(STALLED_TEXT);
    let first_event = body.find("\n\n").expect("an event") + 2;
    TestServer::builder().body(body).stall_after(first_event)
}

fn request() -> Value {
    json!({"model": "m", "messages": [{"role": "user", "content": "What is 6 × 7?"}]})
}

/// Starts `builder` on the server's runtime.
async fn start(server_rt: &Handle, builder: TestServerBuilder) -> Arc<TestServer> {
    let server = server_rt
        .spawn(builder.start())
        .await
        .expect("the server starts without panicking")
        .expect("the test server binds 127.0.0.1");
    Arc::new(server)
}

/// The instant the server has seen `count` clients go away mid-stream, stamped on the
/// server's runtime.
fn closed_at(
    server_rt: &Handle,
    server: &Arc<TestServer>,
    count: usize,
) -> tokio::task::JoinHandle<Instant> {
    let server = server.clone();
    server_rt.spawn(async move {
        server.wait_disconnects(count).await;
        Instant::now()
    })
}

fn client(server: &TestServer) -> Client {
    Client::builder()
        .base_url(server.base_url())
        .build()
        .expect("a client of the test server")
}

/// The bytes of the fast answer's finish, as the server sends them.
const FINISH: &[u8] = b"\"finish_reason\":\"stop\"";

/// An upstream body that stamps the first read carrying [`FINISH`] as it hands it to the
/// reader.
struct Stamped<S> {
    body: Pin<Box<S>>,
    finish_read: Arc<OnceLock<Instant>>,
}

impl<S, B, E> Stream for Stamped<S>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
{
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = self.body.as_mut().poll_next(cx);
        if let Poll::Ready(Some(Ok(read))) = &next
            && read.as_ref().windows(FINISH.len()).any(|w| w == FINISH)
        {
            let _ = self.finish_read.set(Instant::now());
        }
        next
    }
}

/// `copies` requests of `request` as one completion, as `Client::source` makes them, each
/// body stamping the read that carries a finish.
fn fan_out(
    client: &Client,
    request: &Value,
    copies: usize,
    finish_read: &Arc<OnceLock<Instant>>,
) -> Completions {
    let sources = (0..copies).map(|_| {
        let client = client.clone();
        let body = request.clone();
        let finish_read = finish_read.clone();
        let open = async move {
            let reads = client.stream(&body).await?;
            Ok::<_, ClientError>(Source::sse(Stamped {
                body: Box::pin(reads),
                finish_read,
            }))
        };
        Source::open(open).n(1).request(request.clone())
    });
    Completions::builder().fan_out(sources.collect::<Vec<_>>())
}

/// What the watcher saw of one choice.
struct Watched {
    index: u32,
    /// When the choice appeared (its first event routed).
    appeared: Instant,
    /// When its `message()` resolved (a cancelled choice's at its cancel).
    settled: Instant,
}

/// Every choice, watched as the combinator watches: one task per choice, spawned as it
/// appears, awaiting its `message()`.
async fn watch(mut choices: Choices) -> Vec<Watched> {
    let mut tasks = JoinSet::new();
    while let Some(choice) = choices.next().await {
        let appeared = Instant::now();
        tasks.spawn(async move {
            let _ = choice.message().await;
            Watched {
                index: choice.index(),
                appeared,
                settled: Instant::now(),
            }
        });
    }
    let mut watched = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        watched.push(joined.expect("the watcher's tasks do not panic"));
    }
    watched
}

/// One run of ours.
struct Ours {
    /// From the finish read to the server seeing the 4th stalled connection closed.
    from_read: Duration,
    /// From the decision (the watcher's stamp) to the same.
    from_decision: Duration,
    /// From the decision to `first_finished().await` returning (it also counts the
    /// cancelled choices' tokens).
    returned: Duration,
    /// The watcher saw a cancelled choice settle before the winner: its wake-up came after
    /// the cancel, and the decision is then the earliest stamp (later than the true one).
    late_stamp: bool,
}

/// One run of ours; `None` when the scenario did not happen as planned (to be run again).
async fn run_ours(server_rt: Handle, delay: Duration) -> Option<Ours> {
    let mut builder = TestServer::builder().body(answer(FAST_TEXT)).delay(delay);
    for _ in 0..STALLED {
        builder = builder.then(stalled());
    }
    let server = start(&server_rt, builder).await;
    let client = client(&server);
    let mut watch_closed = closed_at(&server_rt, &server, STALLED);

    let finish_read = Arc::new(OnceLock::new());
    let completions = fan_out(&client, &request(), 1 + STALLED, &finish_read);
    let watcher = tokio::spawn(watch(completions.choices()));
    let selection = within(
        PATIENCE,
        "close: first_finished",
        completions.first_finished().into_future(),
    )
    .await;
    let returned_at = Instant::now();
    let closed = tokio::time::timeout(PATIENCE, &mut watch_closed).await;
    if closed.is_err() {
        // Its task holds the server.
        watch_closed.abort();
    }
    let whole = within(PATIENCE, "close: collect", completions.collect())
        .await
        .expect("the completion ends well once the rest is cancelled");
    let watched = within(PATIENCE, "close: the watcher", watcher)
        .await
        .expect("the watcher does not panic");
    let read_at = *finish_read.get().expect("the finish was read");

    // The scenario: every stalled upstream's choice had appeared (its first event routed)
    // before the fast answer's finish was read. Else its connection may not have reached
    // the server's answer, or its choice appears while the cancel runs (see the report).
    let stalled_before = watched.iter().filter(|w| w.appeared < read_at).count();
    let as_planned = watched.len() == 1 + STALLED && stalled_before == STALLED;
    let closed_at = match closed {
        Ok(at) => at.expect("the server's watch does not panic"),
        Err(_) if !as_planned => return None,
        Err(_) => panic!(
            "close: the server saw {} of the {STALLED} stalled connections closed within \
             {PATIENCE:?} of the decision",
            server.disconnects()
        ),
    };
    if !as_planned {
        return None;
    }
    assert_eq!(
        (selection.selected.len(), selection.cancelled.len()),
        (1, STALLED),
        "close: one choice selected, the stalled ones cancelled ({selection:?})"
    );
    let winner = selection.selected[0];
    let won = &whole.choices[winner as usize];
    assert_eq!(won.message.content.as_deref(), Some(FAST_TEXT));
    for c in whole.choices.iter().filter(|c| c.index != winner) {
        assert!(c.cancelled, "close: the stalled choices were cancelled");
        assert_eq!(c.message.content.as_deref(), Some(STALLED_TEXT));
    }
    assert_eq!(
        server.disconnects(),
        STALLED,
        "close: only the stalled answers were abandoned"
    );
    let winner_at = watched
        .iter()
        .find(|w| w.index == winner)
        .map(|w| w.settled)
        .expect("the watcher saw the winner finish");
    let earliest = watched
        .iter()
        .map(|w| w.settled)
        .min()
        .expect("watched choices");
    assert!(
        read_at <= earliest,
        "close: the finish was read before the decision"
    );
    Some(Ours {
        from_read: closed_at.saturating_duration_since(read_at),
        from_decision: closed_at.saturating_duration_since(earliest),
        returned: returned_at.saturating_duration_since(earliest),
        late_stamp: earliest < winner_at,
    })
}

/// One baseline run: `connections` stalled responses of the same client, each with its first
/// event read, dropped at once; from the drop to the server seeing them all go away.
async fn run_baseline(server_rt: Handle, connections: usize) -> Duration {
    let server = start(&server_rt, stalled()).await;
    let client = client(&server);
    let closed = closed_at(&server_rt, &server, connections);
    let body = request();
    let responses = futures::future::join_all((0..connections).map(|_| async {
        let mut response = client.stream(&body).await.expect("the test server answers");
        let first = response.next().await.expect("the first event arrives");
        assert!(first.is_ok_and(|b| !b.is_empty()), "the first event");
        response
    }));
    let responses = within(PATIENCE, "close: the baseline's requests", responses).await;
    let dropped_at = Instant::now();
    drop(responses);
    let closed_at = within(PATIENCE, "close: the baseline's disconnects", closed)
        .await
        .expect("the server's watch does not panic");
    assert_eq!(server.disconnects(), connections);
    closed_at.saturating_duration_since(dropped_at)
}

/// Sorted durations, with their percentiles in ms.
#[derive(Debug, Clone, Default)]
pub struct Durations(pub Vec<Duration>);

impl Durations {
    fn sorted(mut v: Vec<Duration>) -> Self {
        v.sort_unstable();
        Durations(v)
    }
    /// A percentile (nearest rank), ms.
    pub fn p_ms(&self, p: f64) -> f64 {
        percentile_sorted(&self.0, p).as_secs_f64() * 1e3
    }
    /// The maximum, ms.
    pub fn max_ms(&self) -> f64 {
        self.0.last().copied().unwrap_or_default().as_secs_f64() * 1e3
    }
}

/// The figures of the close benchmark.
#[derive(Debug, Clone)]
pub struct CloseResult {
    pub runs: usize,
    pub delay: Duration,
    /// Finish read → the 4 stalled connections seen closed by the server (the target).
    pub from_read: Durations,
    /// Decision (the watcher's stamp) → the same.
    pub from_decision: Durations,
    /// Decision → `first_finished().await` returned.
    pub returned: Durations,
    /// Baseline: one stalled response dropped → seen closed.
    pub one: Durations,
    /// Baseline: 4 stalled responses dropped at once → all seen closed.
    pub four: Durations,
    /// Runs of ours discarded because the scenario did not happen as planned.
    pub redone: usize,
    /// Timed runs whose watcher woke for the winner after a cancelled choice had settled.
    pub late_stamps: usize,
}

/// `runs` runs of ours and of both baselines, interleaved, after `warmup` untimed runs of
/// each (they load the token table the combinator counts the cancelled tokens with, and
/// warm the allocator and the sockets' paths).
pub fn measure(rt: &Runtime, runs: usize, warmup: usize, delay: Duration) -> CloseResult {
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("close-server")
        .enable_all()
        .build()
        .expect("the server's runtime");
    let handle = server_rt.handle().clone();
    let mut from_read = Vec::with_capacity(runs);
    let mut from_decision = Vec::with_capacity(runs);
    let mut returned = Vec::with_capacity(runs);
    let mut one = Vec::with_capacity(runs);
    let mut four = Vec::with_capacity(runs);
    let mut redone = 0;
    let mut late_stamps = 0;
    for i in 0..warmup + runs {
        let timed = i >= warmup;
        let o = loop {
            match rt.block_on(rt.spawn(run_ours(handle.clone(), delay))) {
                Ok(Some(o)) => break o,
                Ok(None) => {
                    redone += 1;
                    assert!(
                        redone <= MAX_REDOS,
                        "close: {redone} runs did not go as planned (a stalled upstream's \
                         choice not there before the finish): raise --delay-ms"
                    );
                }
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            }
        };
        let b1 = rt
            .block_on(rt.spawn(run_baseline(handle.clone(), 1)))
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        let b4 = rt
            .block_on(rt.spawn(run_baseline(handle.clone(), STALLED)))
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        if timed {
            from_read.push(o.from_read);
            from_decision.push(o.from_decision);
            returned.push(o.returned);
            late_stamps += usize::from(o.late_stamp);
            one.push(b1);
            four.push(b4);
        }
    }
    CloseResult {
        runs,
        delay,
        from_read: Durations::sorted(from_read),
        from_decision: Durations::sorted(from_decision),
        returned: Durations::sorted(returned),
        one: Durations::sorted(one),
        four: Durations::sorted(four),
        redone,
        late_stamps,
    }
}

pub fn print(r: &CloseResult) {
    println!(
        "\n### close: from first_finished's decision to the {STALLED} unneeded upstream \
         connections closed ({} runs; loopback HTTP, 1 fast upstream answering after {} ms + \
         {STALLED} stalled)\n",
        r.runs,
        r.delay.as_millis()
    );
    println!(
        "closed = the test server has seen the last of the {STALLED} stalled answers \
         abandoned. finish read = the read carrying the fast answer's finish handed to its \
         reader (before the decision: the target's figure); decision = the winning choice's \
         message() resolving in a watcher task (the combinator's wake-up). Baselines: the same \
         client's stalled responses dropped directly, from the drop. ms.\n"
    );
    println!(
        "| {:<62} | {:>7} | {:>7} | {:>7} |",
        "what", "p50", "p99", "max"
    );
    println!("|{:-<64}|{:->9}|{:->9}|{:->9}|", "", "", "", "");
    let rows = [
        (
            format!("choicewise: finish read → {STALLED} connections closed"),
            &r.from_read,
        ),
        (
            format!("choicewise: decision → {STALLED} connections closed"),
            &r.from_decision,
        ),
        (
            "choicewise: decision → first_finished().await returns".to_string(),
            &r.returned,
        ),
        (
            "baseline: 1 client response dropped → closed".to_string(),
            &r.one,
        ),
        (
            format!("baseline: {STALLED} client responses dropped at once → closed"),
            &r.four,
        ),
    ];
    for (name, d) in rows {
        println!(
            "| {:<62} | {:>7.3} | {:>7.3} | {:>7.3} |",
            name,
            d.p_ms(50.0),
            d.p_ms(99.0),
            d.max_ms()
        );
    }
    if r.late_stamps > 0 {
        println!(
            "\n{} of {} runs: the watcher woke for the winner after a cancelled choice had \
             settled (the decision row takes the run's earliest stamp, later than the true \
             decision: it understates those runs)",
            r.late_stamps, r.runs
        );
    }
    if r.redone > 0 {
        println!(
            "\n{} run(s) of ours discarded and run again: a stalled upstream's choice had not \
             appeared before the finish was read",
            r.redone
        );
    }
}
