//! Added latency under an offered load: a producer thread makes the stream's events
//! available at a fixed rate, in small reads, each stamped with the instant it was made
//! available; the input stream stamps each read again when it hands it to its reader; consumers
//! stamp each content delta when it reaches them. Each content delta carries `⟨seq⟩`, the
//! position of its event in the stream, which ties the stamps.
//!
//! added latency = arrival at the consumer − the read completing its event reaching the
//! reader (what the demultiplexer adds: framing, parsing, routing, the hand-offs to the choice
//! actor and to the consumer task);
//! end-to-end latency = arrival at the consumer − availability at the producer (adds the
//! channel from the producer thread and the wake-up of the runtime, which any consumer of the
//! stream pays: the hand-written loop's figure is that floor).

use std::convert::Infallible;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use choicewise::{Completions, Source};
use futures::{StreamExt, TryStreamExt};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;

use crate::baseline::HandWritten;
use crate::r#gen::Generated;
use crate::stats::{median, percentile_sorted};

/// The sequence number a generated content delta starts with (`⟨123⟩ word`).
pub fn seq_of(text: &str) -> Option<usize> {
    let rest = text.strip_prefix('⟨')?;
    let end = rest.find('⟩')?;
    rest[..end].parse().ok()
}

/// Per event, when the read completing it reached the reader (nanoseconds since `base`).
struct Received {
    base: Instant,
    at: Vec<AtomicU64>,
}

impl Received {
    fn new(events: usize) -> Arc<Self> {
        Arc::new(Received {
            base: Instant::now(),
            at: (0..events).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    fn stamp(&self, events: Range<usize>) {
        let now = self.base.elapsed().as_nanos() as u64;
        for e in &self.at[events] {
            e.store(now, Ordering::Relaxed);
        }
    }

    fn instant(&self, event: usize) -> Instant {
        self.base + Duration::from_nanos(self.at[event].load(Ordering::Relaxed))
    }
}

/// A read and the events it completes.
type Read = (Arc<[u8]>, Range<usize>);

/// What the producer did.
struct Produced {
    /// Per event, when the read that completed it was made available.
    available: Vec<Instant>,
    /// Reads sent.
    reads: usize,
    /// Time from the first to the last read.
    span: Duration,
}

/// Makes `g`'s events available at `rate` events per second through `tx`, from a thread of
/// its own that sleeps between reads (each read holds the events due since the previous one).
fn spawn_producer(
    g: Arc<Generated>,
    rate: f64,
    tx: mpsc::UnboundedSender<Read>,
) -> std::thread::JoinHandle<Produced> {
    std::thread::spawn(move || {
        let ends = &g.event_ends;
        let mut available = Vec::with_capacity(ends.len());
        let mut sent_events = 0;
        let mut sent_bytes = 0;
        let mut reads = 0;
        let start = Instant::now();
        while sent_events < ends.len() {
            let due = ((start.elapsed().as_secs_f64() * rate) as usize + 1).min(ends.len());
            if due > sent_events {
                let end = ends[due - 1];
                let read: Arc<[u8]> = Arc::from(&g.bytes[sent_bytes..end]);
                let now = Instant::now();
                available.resize(due, now);
                if tx.send((read, sent_events..due)).is_err() {
                    break;
                }
                reads += 1;
                sent_events = due;
                sent_bytes = end;
            }
            std::thread::sleep(Duration::from_micros(10));
        }
        Produced {
            available,
            reads,
            span: start.elapsed(),
        }
    })
}

/// The reads as a stream, stamping each as it is handed to its reader.
fn channel_stream(
    mut rx: mpsc::UnboundedReceiver<Read>,
    received: Arc<Received>,
) -> impl futures::Stream<Item = Result<Arc<[u8]>, Infallible>> + Send + 'static {
    futures::stream::poll_fn(move |cx| {
        rx.poll_recv(cx).map(|r| {
            r.map(|(read, events)| {
                received.stamp(events);
                Ok(read)
            })
        })
    })
}

/// Latencies of one run, µs, sorted.
#[derive(Debug, Clone)]
pub struct Run {
    /// Sorted added latencies of every content delta (from the read reaching the reader),
    /// nanoseconds.
    pub latencies_ns: Vec<u64>,
    /// Sorted end-to-end latencies (from availability at the producer), nanoseconds.
    pub end_to_end: Latencies,
    /// Events per read, on average.
    pub events_per_read: f64,
    /// The rate actually offered, events per second.
    pub offered_rate: f64,
}

/// Sorted latencies, nanoseconds.
#[derive(Debug, Clone)]
pub struct Latencies(pub Vec<u64>);

impl Latencies {
    /// A percentile in µs.
    pub fn p_us(&self, p: f64) -> f64 {
        percentile_sorted(&self.0, p) as f64 / 1e3
    }
}

impl Run {
    /// A percentile in µs.
    pub fn p_us(&self, p: f64) -> f64 {
        percentile_sorted(&self.latencies_ns, p) as f64 / 1e3
    }
    /// The share of deltas (%) whose latency exceeds `us` microseconds.
    pub fn share_over(&self, us: f64) -> f64 {
        let limit = (us * 1e3) as u64;
        let over = self.latencies_ns.len() - self.latencies_ns.partition_point(|&l| l <= limit);
        100.0 * over as f64 / self.latencies_ns.len().max(1) as f64
    }
    /// The maximum in µs.
    pub fn max_us(&self) -> f64 {
        self.latencies_ns.last().copied().unwrap_or(0) as f64 / 1e3
    }
}

fn finish_run(
    produced: Produced,
    received: &Received,
    arrivals: Vec<(usize, Instant)>,
    expected: usize,
) -> Run {
    assert_eq!(arrivals.len(), expected, "every content delta arrived");
    let sorted = |from: &dyn Fn(usize) -> Instant| {
        let mut l: Vec<u64> = arrivals
            .iter()
            .map(|&(seq, at)| at.saturating_duration_since(from(seq)).as_nanos() as u64)
            .collect();
        l.sort_unstable();
        l
    };
    Run {
        latencies_ns: sorted(&|seq| received.instant(seq)),
        end_to_end: Latencies(sorted(&|seq| produced.available[seq])),
        events_per_read: produced.available.len() as f64 / produced.reads.max(1) as f64,
        offered_rate: produced.available.len() as f64 / produced.span.as_secs_f64(),
    }
}

/// One paced run through choicewise: one consumer task per choice.
pub fn run_choicewise(rt: &Runtime, g: &Arc<Generated>, rate: f64) -> Run {
    let (tx, rx) = mpsc::unbounded_channel();
    let received = Received::new(g.event_ends.len());
    let stamps = received.clone();
    let consumers = rt.spawn(async move {
        let completions = Completions::new(Source::sse(channel_stream(rx, stamps)));
        let mut choices = completions.choices();
        let mut tasks = Vec::new();
        while let Some(choice) = choices.next().await {
            tasks.push(tokio::spawn(async move {
                let calls = async {
                    let mut s = choice.function_calls();
                    while s.try_next().await.expect("call streams end well").is_some() {}
                };
                let content = async {
                    let mut arrivals = Vec::with_capacity(1 << 16);
                    let mut s = choice.content();
                    while let Some(t) = s.try_next().await.expect("content streams end well") {
                        let at = Instant::now();
                        arrivals.push((seq_of(&t).expect("tagged content"), at));
                    }
                    arrivals
                };
                futures::join!(content, calls).0
            }));
        }
        let mut arrivals = Vec::new();
        for t in tasks {
            arrivals.extend(t.await.expect("consumers do not panic"));
        }
        completions
            .collect()
            .await
            .expect("generated streams complete");
        arrivals
    });
    let producer = spawn_producer(g.clone(), rate, tx);
    let arrivals = rt.block_on(consumers).expect("the run does not panic");
    let produced = producer.join().expect("the producer does not panic");
    finish_run(produced, &received, arrivals, g.content_deltas)
}

/// The hand-written loop: our framer, a borrowed parse of every chunk and the accumulator, in
/// the task that reads the stream; `on_content` gets each content delta's choice index and
/// text as it is parsed.
async fn hand_written_loop(
    reads: impl futures::Stream<Item = Result<Arc<[u8]>, Infallible>>,
    mut on_content: impl FnMut(usize, &str),
) {
    let mut h = HandWritten::default();
    let mut framer = choicewise_sse::Framer::new();
    let mut reads = std::pin::pin!(reads);
    while let Some(Ok(read)) = reads.next().await {
        let _ = framer.feed(&read, |ev| {
            if ev.data == "[DONE]" {
                return std::ops::ControlFlow::Break(());
            }
            let chunk: choicewise::wire::ChatCompletionChunk<'_> =
                serde_json::from_str(ev.data).expect("generated chunks parse");
            for c in &chunk.choices {
                if let Some(text) = c.delta.as_ref().and_then(|d| d.content.as_deref()) {
                    on_content(c.index.unwrap_or(0) as usize, text);
                }
            }
            h.apply(chunk);
            std::ops::ControlFlow::Continue(())
        });
    }
}

/// One paced run through the hand-written loop, stamping each content delta as it is parsed
/// (the floor: channel, wake-up, framing and parsing, no hand-off).
pub fn run_handwritten(rt: &Runtime, g: &Arc<Generated>, rate: f64) -> Run {
    let (tx, rx) = mpsc::unbounded_channel();
    let received = Received::new(g.event_ends.len());
    let stamps = received.clone();
    let consumer = rt.spawn(async move {
        let mut arrivals = Vec::with_capacity(1 << 18);
        hand_written_loop(channel_stream(rx, stamps), |_, text| {
            if let Some(seq) = seq_of(text) {
                arrivals.push((seq, Instant::now()));
            }
        })
        .await;
        arrivals
    });
    let producer = spawn_producer(g.clone(), rate, tx);
    let arrivals = rt.block_on(consumer).expect("the run does not panic");
    let produced = producer.join().expect("the producer does not panic");
    finish_run(produced, &received, arrivals, g.content_deltas)
}

/// One paced run through a hand-written fan-out: the hand-written loop sends each content
/// delta's text down an unbounded channel to its choice's own consumer task, spawned when the
/// index first appears; the consumer stamps it on arrival. The floor of handing each choice to
/// a task of its own, as choicewise's per-choice handles do: one task wake-up per choice per
/// read, through the same scheduler, and nothing else.
pub fn run_handwritten_fan_out(rt: &Runtime, g: &Arc<Generated>, rate: f64) -> Run {
    run_fan_out_floor(rt, g, rate, 1)
}

/// One paced run through a hand-written floor with the design's two hand-offs: the
/// hand-written loop sends each content delta's text down an unbounded channel to its choice's
/// own forwarding task (spawned when the index first appears, standing in for the choice
/// actor), which sends it down a second unbounded channel to a consumer task of that choice's
/// own (standing in for the consumer of the choice's handle); the consumer stamps it on
/// arrival. choicewise's design asks for exactly these two hand-offs (the reader parses → the
/// choice's actor, the only writer of the choice → the consumer's task), so this is the floor
/// of the design: two task wake-ups per choice per read through the same scheduler, and no
/// merge, log or fault isolation. [`run_handwritten_fan_out`] is the one-hand-off floor.
pub fn run_handwritten_two_handoff(rt: &Runtime, g: &Arc<Generated>, rate: f64) -> Run {
    run_fan_out_floor(rt, g, rate, 2)
}

/// The hand-written fan-out floors: each choice's texts pass `handoffs` unbounded channels,
/// through `handoffs - 1` forwarding tasks, to a consumer task that stamps their arrival.
fn run_fan_out_floor(rt: &Runtime, g: &Arc<Generated>, rate: f64, handoffs: usize) -> Run {
    type Arrivals = Vec<(usize, Instant)>;
    let (tx, rx) = mpsc::unbounded_channel();
    let received = Received::new(g.event_ends.len());
    let stamps = received.clone();
    let reader = rt.spawn(async move {
        let mut choices: Vec<Option<mpsc::UnboundedSender<String>>> = Vec::new();
        let mut forwarders = Vec::new();
        let mut consumers = Vec::new();
        hand_written_loop(channel_stream(rx, stamps), |index, text| {
            if choices.len() <= index {
                choices.resize_with(index + 1, || None);
            }
            let choice = choices[index].get_or_insert_with(|| {
                let (mut to_next, mut from_last) = mpsc::unbounded_channel::<String>();
                consumers.push(tokio::spawn(async move {
                    let mut arrivals: Arrivals = Vec::with_capacity(1 << 16);
                    while let Some(text) = from_last.recv().await {
                        let at = Instant::now();
                        if let Some(seq) = seq_of(&text) {
                            arrivals.push((seq, at));
                        }
                    }
                    arrivals
                }));
                for _ in 1..handoffs {
                    let (to_forwarder, mut from_before) = mpsc::unbounded_channel::<String>();
                    let onward = to_next;
                    forwarders.push(tokio::spawn(async move {
                        while let Some(text) = from_before.recv().await {
                            let _ = onward.send(text);
                        }
                        // Dropping `onward` here closes the next channel.
                    }));
                    to_next = to_forwarder;
                }
                to_next
            });
            let _ = choice.send(text.to_owned());
        })
        .await;
        // Closing the first channels ends the forwarders, whose ends close the next ones, and
        // the consumers end last.
        drop(choices);
        for forwarder in forwarders {
            forwarder.await.expect("forwarders do not panic");
        }
        let mut arrivals = Vec::new();
        for consumer in consumers {
            arrivals.extend(consumer.await.expect("consumers do not panic"));
        }
        arrivals
    });
    let producer = spawn_producer(g.clone(), rate, tx);
    let arrivals = rt.block_on(reader).expect("the run does not panic");
    let produced = producer.join().expect("the producer does not panic");
    finish_run(produced, &received, arrivals, g.content_deltas)
}

/// What a hand-off of the ractor floor carries: a content delta's text, or the end of the
/// choice's stream.
enum Handoff {
    Text(String),
    End,
}

/// The ractor floor's stand-in for a choice actor: forwards every message to the choice's
/// consumer actor, one ractor message each, and stops after the end.
struct ForwardingActor;

impl ractor::Actor for ForwardingActor {
    type Msg = Handoff;
    type State = ractor::ActorRef<Handoff>;
    type Arguments = ractor::ActorRef<Handoff>;

    async fn pre_start(
        &self,
        _myself: ractor::ActorRef<Handoff>,
        next: ractor::ActorRef<Handoff>,
    ) -> Result<Self::State, ractor::ActorProcessingErr> {
        Ok(next)
    }

    async fn handle(
        &self,
        myself: ractor::ActorRef<Handoff>,
        message: Handoff,
        next: &mut ractor::ActorRef<Handoff>,
    ) -> Result<(), ractor::ActorProcessingErr> {
        let end = matches!(message, Handoff::End);
        next.send_message(message)?;
        if end {
            myself.stop(None);
        }
        Ok(())
    }
}

/// The ractor floor's stand-in for the consumer of a choice's handle: stamps each text on
/// arrival, and hands its arrivals over at the end.
struct ConsumingActor;

/// A consuming actor's arrivals so far, and where they go at the end.
struct Consuming {
    arrivals: Vec<(usize, Instant)>,
    done: Option<tokio::sync::oneshot::Sender<Vec<(usize, Instant)>>>,
}

impl ractor::Actor for ConsumingActor {
    type Msg = Handoff;
    type State = Consuming;
    type Arguments = tokio::sync::oneshot::Sender<Vec<(usize, Instant)>>;

    async fn pre_start(
        &self,
        _myself: ractor::ActorRef<Handoff>,
        done: Self::Arguments,
    ) -> Result<Consuming, ractor::ActorProcessingErr> {
        Ok(Consuming {
            arrivals: Vec::with_capacity(1 << 16),
            done: Some(done),
        })
    }

    async fn handle(
        &self,
        myself: ractor::ActorRef<Handoff>,
        message: Handoff,
        state: &mut Consuming,
    ) -> Result<(), ractor::ActorProcessingErr> {
        match message {
            Handoff::Text(text) => {
                let at = Instant::now();
                if let Some(seq) = seq_of(&text) {
                    state.arrivals.push((seq, at));
                }
            }
            Handoff::End => {
                if let Some(done) = state.done.take() {
                    let _ = done.send(std::mem::take(&mut state.arrivals));
                }
                myself.stop(None);
            }
        }
        Ok(())
    }
}

/// One paced run through the design's own floor: the pipeline of
/// [`run_handwritten_two_handoff`], with each hand-off one ractor actor message instead of an
/// unbounded Tokio channel. The hand-written loop sends each content delta's text to its
/// choice's forwarding actor (spawned when the index first appears, standing in for the
/// choice actor), which sends it on to a consuming actor of that choice's own (standing in
/// for the consumer of the choice's handle), which stamps it on arrival. This is what the
/// design costs with nothing else: two ractor messages per choice per read through the same
/// scheduler, no merge, log or fault isolation.
pub fn run_ractor_floor(rt: &Runtime, g: &Arc<Generated>, rate: f64) -> Run {
    use ractor::{ActorRef, ActorRuntime};
    let (tx, rx) = mpsc::unbounded_channel();
    let received = Received::new(g.event_ends.len());
    let stamps = received.clone();
    let reader = rt.spawn(async move {
        let mut choices: Vec<Option<ActorRef<Handoff>>> = Vec::new();
        let mut ends = Vec::new();
        let mut joins = Vec::new();
        hand_written_loop(channel_stream(rx, stamps), |index, text| {
            if choices.len() <= index {
                choices.resize_with(index + 1, || None);
            }
            let choice = choices[index].get_or_insert_with(|| {
                let (done, arrivals) = tokio::sync::oneshot::channel();
                let (consumer, consumer_join) =
                    ActorRuntime::spawn_instant(None, ConsumingActor, done)
                        .expect("an unnamed actor spawns");
                let (forwarder, forwarder_join) =
                    ActorRuntime::spawn_instant(None, ForwardingActor, consumer)
                        .expect("an unnamed actor spawns");
                ends.push(arrivals);
                joins.extend([consumer_join, forwarder_join]);
                forwarder
            });
            choice
                .send_message(Handoff::Text(text.to_owned()))
                .expect("the forwarding actor runs until the end");
        })
        .await;
        // The end follows every text through both actors; each stops after it.
        for choice in choices.iter().flatten() {
            choice
                .send_message(Handoff::End)
                .expect("the forwarding actor runs until the end");
        }
        let mut arrivals = Vec::new();
        for end in ends {
            arrivals.extend(
                end.await
                    .expect("consuming actors hand their arrivals over"),
            );
        }
        for join in joins {
            let started = join.await.expect("actors do not panic");
            started
                .expect("actors start")
                .await
                .expect("actors do not panic");
        }
        arrivals
    });
    let producer = spawn_producer(g.clone(), rate, tx);
    let arrivals = rt.block_on(reader).expect("the run does not panic");
    let produced = producer.join().expect("the producer does not panic");
    finish_run(produced, &received, arrivals, g.content_deltas)
}

/// Medians over runs of p50, p99, p99.9 and max, µs.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    /// Median of the runs' p50.
    pub p50: f64,
    /// Median of the runs' p99.
    pub p99: f64,
    /// Median of the runs' p99.9.
    pub p999: f64,
    /// Median of the runs' max.
    pub max: f64,
    /// Median of the runs' end-to-end p50 and p99 (from availability at the producer).
    pub end_to_end_p50: f64,
    pub end_to_end_p99: f64,
    /// Best (lowest) p99 of any run: the least disturbed by other processes.
    pub best_p99: f64,
    /// Worst p99 of any run.
    pub worst_p99: f64,
    /// Median share (%) of deltas later than 50 µs.
    pub over_50us: f64,
    /// Median share (%) of deltas later than 1 ms (stalls of the whole machine: other
    /// processes, the scheduler's time slices).
    pub over_1ms: f64,
    /// Events per read (mean over runs).
    pub events_per_read: f64,
    /// Offered rate (mean over runs).
    pub offered_rate: f64,
}

/// Summarises runs.
pub fn summarise(runs: &[Run]) -> Summary {
    let of = |f: &dyn Fn(&Run) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
    Summary {
        p50: of(&|r| r.p_us(50.0)),
        p99: of(&|r| r.p_us(99.0)),
        p999: of(&|r| r.p_us(99.9)),
        max: of(&|r| r.max_us()),
        end_to_end_p50: of(&|r| r.end_to_end.p_us(50.0)),
        end_to_end_p99: of(&|r| r.end_to_end.p_us(99.0)),
        over_50us: of(&|r| r.share_over(50.0)),
        over_1ms: of(&|r| r.share_over(1000.0)),
        best_p99: runs
            .iter()
            .map(|r| r.p_us(99.0))
            .fold(f64::INFINITY, f64::min),
        worst_p99: runs.iter().map(|r| r.p_us(99.0)).fold(0.0, f64::max),
        events_per_read: runs.iter().map(|r| r.events_per_read).sum::<f64>()
            / runs.len().max(1) as f64,
        offered_rate: runs.iter().map(|r| r.offered_rate).sum::<f64>() / runs.len().max(1) as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_tags() {
        assert_eq!(seq_of("⟨123⟩ word"), Some(123));
        assert_eq!(seq_of("word"), None);
    }

    /// Every contender delivers each tagged content delta once, on both kinds of runtime:
    /// a baseline that lost deltas would report a floor it never paid for.
    #[test]
    fn every_contender_delivers_every_delta() {
        let g = Arc::new(crate::r#gen::generate(&crate::r#gen::GenConfig {
            n: 4,
            target_bytes: 200 * crate::r#gen::CHUNK_BYTES,
            seed: 7,
            seq_tags: true,
        }));
        for workers in [1, 2] {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .enable_all()
                .build()
                .expect("a runtime");
            for run in [
                run_handwritten,
                run_handwritten_fan_out,
                run_handwritten_two_handoff,
                run_ractor_floor,
                run_choicewise,
            ] {
                // `finish_run` also asserts that as many deltas arrived as the stream holds.
                let r = run(&rt, &g, 1e6);
                assert_eq!(r.latencies_ns.len(), g.content_deltas);
            }
        }
    }
}
