//! End-to-end throughput: SSE bytes in, every choice's sub-streams drained by concurrent
//! tasks and `collect()` assembled; against the two baselines on the same reads.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use choicewise::{ChatCompletion, Completions, FunctionCallEvent, Source};
use futures::{StreamExt, TryStreamExt};
use tokio::runtime::Runtime;

use crate::baseline::{HandWritten, borrowed_parse};
use crate::r#gen::{ExpectedChoice, Generated};
use crate::stats::{median, min_max};

/// What the consumers of one choice saw.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    /// Content deltas received.
    pub deltas: usize,
    /// Content bytes received.
    pub content_bytes: usize,
    /// Function-call events received (started, fragments, finished).
    pub call_events: usize,
    /// Argument fragments received.
    pub fragments: usize,
    /// Argument bytes received.
    pub argument_bytes: usize,
}

impl Drained {
    /// The sum over all choices.
    pub fn total(drained: &[Drained]) -> Drained {
        drained.iter().fold(Drained::default(), |a, d| Drained {
            deltas: a.deltas + d.deltas,
            content_bytes: a.content_bytes + d.content_bytes,
            call_events: a.call_events + d.call_events,
            fragments: a.fragments + d.fragments,
            argument_bytes: a.argument_bytes + d.argument_bytes,
        })
    }
}

/// What a choicewise run leaves: the assembled completion, what each consumer drained, and
/// the handle itself (returned so that tearing the logs down is not timed, as the baselines'
/// maps are dropped untimed too).
pub type ChoicewiseRun = (ChatCompletion, Vec<Drained>, Completions);

/// Runs choicewise over `reads`: one task per choice drains `content()` and
/// `function_calls()` concurrently, then `collect()` assembles the completion.
pub async fn run_choicewise(reads: Vec<Arc<[u8]>>) -> ChoicewiseRun {
    drain(Completions::new(Source::sse(futures::stream::iter(
        reads.into_iter().map(Ok::<_, Infallible>),
    ))))
    .await
}

/// Drains a completion: one task per choice drains `content()` and `function_calls()`
/// concurrently, then `collect()` assembles the completion.
pub async fn drain(completions: Completions) -> ChoicewiseRun {
    let mut choices = completions.choices();
    let mut tasks = Vec::new();
    while let Some(choice) = choices.next().await {
        tasks.push(tokio::spawn(async move {
            let content = async {
                let mut d = Drained::default();
                let mut s = choice.content();
                while let Some(t) = s.try_next().await.expect("content streams end well") {
                    d.deltas += 1;
                    d.content_bytes += t.len();
                }
                d
            };
            let calls = async {
                let mut d = Drained::default();
                let mut s = choice.function_calls();
                while let Some(e) = s.try_next().await.expect("call streams end well") {
                    d.call_events += 1;
                    if let FunctionCallEvent::Arguments { fragment, .. } = e {
                        d.fragments += 1;
                        d.argument_bytes += fragment.len();
                    }
                }
                d
            };
            let (a, b) = futures::join!(content, calls);
            Drained {
                call_events: b.call_events,
                fragments: b.fragments,
                argument_bytes: b.argument_bytes,
                ..a
            }
        }));
    }
    let mut drained = Vec::new();
    for t in tasks {
        drained.push(t.await.expect("consumer tasks do not panic"));
    }
    let whole = completions
        .collect()
        .await
        .expect("generated streams complete");
    (whole, drained, completions)
}

/// Checks an assembled completion against what the generator says it must be.
pub fn check_completion(whole: &ChatCompletion, g: &Generated) -> Result<(), String> {
    if whole.choices.len() != g.expected.len() {
        return Err(format!(
            "{} choices, expected {}",
            whole.choices.len(),
            g.expected.len()
        ));
    }
    for (out, exp) in whole.choices.iter().zip(&g.expected) {
        let ExpectedChoice {
            index,
            content,
            tool_calls,
            finish_reason,
        } = exp;
        let m = &out.message;
        let ok = out.index == *index
            && m.content.as_deref().filter(|c| !c.is_empty()) == content.as_deref()
            && out.finish_reason.as_deref() == Some(*finish_reason)
            && m.tool_calls.len() == tool_calls.len()
            && m.tool_calls
                .iter()
                .zip(tool_calls)
                .all(|(t, (id, name, args))| {
                    t.id == *id && t.function.name == *name && t.function.arguments == *args
                });
        if !ok {
            return Err(format!("choice {index} differs from the generated one"));
        }
    }
    if whole.usage.is_none() {
        return Err("usage missing".into());
    }
    Ok(())
}

/// Checks the hand-written accumulator against the generator.
pub fn check_handwritten(h: &HandWritten, g: &Generated) -> Result<(), String> {
    for exp in &g.expected {
        let content = h.content.get(&exp.index).filter(|c| !c.is_empty());
        if content.map(String::as_str) != exp.content.as_deref()
            || h.finish.get(&exp.index).map(String::as_str) != Some(exp.finish_reason)
        {
            return Err(format!("hand-written: choice {} differs", exp.index));
        }
        for (k, (id, name, args)) in exp.tool_calls.iter().enumerate() {
            let c = h.calls.get(&(exp.index, k as u32));
            if !c.is_some_and(|c| c.id == *id && c.name == *name && c.arguments == *args) {
                return Err(format!("hand-written: call {k} of {} differs", exp.index));
            }
        }
    }
    Ok(())
}

/// Medians of one contender over the repetitions.
#[derive(Debug, Clone)]
pub struct Figures {
    /// The contender's name.
    pub name: &'static str,
    /// Wall times of the repetitions, seconds.
    pub secs: Vec<f64>,
    /// CPU times of the repetitions (all threads of the process), seconds.
    pub cpu_secs: Vec<f64>,
}

impl Figures {
    /// The figures of `samples`.
    pub fn new(name: &'static str, samples: &[Sample]) -> Self {
        Figures {
            name,
            secs: samples.iter().map(|s| s.wall).collect(),
            cpu_secs: samples.iter().map(|s| s.cpu).collect(),
        }
    }

    /// Median wall time, seconds.
    pub fn median_secs(&self) -> f64 {
        median(&self.secs)
    }

    /// Median throughput in chunks per second.
    pub fn chunks_per_sec(&self, chunks: usize) -> f64 {
        chunks as f64 / self.median_secs()
    }

    /// Median throughput in MB/s (10^6 bytes).
    pub fn mb_per_sec(&self, mb: f64) -> f64 {
        mb / self.median_secs()
    }
}

/// The result of the throughput benchmark for one `n`.
#[derive(Debug, Clone)]
pub struct ThroughputResult {
    /// Number of choices.
    pub n: u32,
    /// Chunks in the stream.
    pub chunks: usize,
    /// Megabytes in the stream.
    pub mb: f64,
    /// The order in which the choices first appear, e.g. `3, 0, 2, 1`.
    pub first_appearance: String,
    /// Borrowed parse, hand-written loop, choicewise, then async-openai when built with it.
    pub figures: Vec<Figures>,
}

impl ThroughputResult {
    /// The figures of one contender.
    pub fn get(&self, name: &str) -> &Figures {
        self.find(name).expect("a known contender")
    }

    /// The figures of one contender, if it was measured.
    pub fn find(&self, name: &str) -> Option<&Figures> {
        self.figures.iter().find(|f| f.name == name)
    }
}

/// Contender names.
pub const BORROWED: &str = "framing + borrowed parse only";
/// Contender names.
pub const HANDWRITTEN: &str = "hand-written loop (own framing)";
/// Contender names.
pub const ASYNC_OPENAI: &str = "eventsource-stream + async-openai + hand loop";
/// Contender names.
pub const CHOICEWISE: &str = "choicewise (actors, n consumer tasks, collect)";
/// Contender names: the reader actor's share of the work alone.
pub const SPLIT: &str = "choicewise reader's share (framing + split)";
/// Contender names: the whole demultiplexer on one thread, without actors.
pub const DEMUX: &str = "choicewise Demux, one thread (no actors)";

/// The reader's share alone: framing, chunk envelopes and the split into per-choice raw
/// updates, which are dropped. Returns the number of reads.
pub fn split_only(reads: &[Arc<[u8]>]) -> usize {
    let mut demux = choicewise::Demux::new();
    reads.iter().filter(|r| demux.split_only(r)).count()
}

/// The whole demultiplexer on this thread: every update parsed and merged, `finish()`.
pub fn demux_serial(reads: &[Arc<[u8]>]) -> ChatCompletion {
    let mut demux = choicewise::Demux::new();
    for read in reads {
        demux.feed(read).expect("generated streams are well-formed");
    }
    demux.finish().expect("generated streams complete")
}

/// CPU time used so far by every thread of this process, from `/proc/self/task/*/schedstat`
/// (nanosecond resolution on Linux); `None` elsewhere.
pub fn process_cpu() -> Option<Duration> {
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path().join("schedstat");
        // A thread may end between the listing and the read: skip it.
        if let Ok(s) = std::fs::read_to_string(path) {
            total += s.split_whitespace().next()?.parse::<u64>().ok()?;
        }
    }
    Some(Duration::from_nanos(total))
}

/// One timed repetition: wall time and CPU time of the whole process, seconds.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Wall time, seconds.
    pub wall: f64,
    /// CPU time of the whole process, seconds.
    pub cpu: f64,
}

/// Runs `f` once, timed.
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, Sample) {
    let cpu = process_cpu();
    let start = Instant::now();
    let out = f();
    let wall = start.elapsed();
    let cpu = match (cpu, process_cpu()) {
        (Some(a), Some(b)) => b.saturating_sub(a).as_secs_f64(),
        _ => f64::NAN,
    };
    (
        out,
        Sample {
            wall: wall.as_secs_f64(),
            cpu,
        },
    )
}

/// Measures the contenders on the same reads, interleaved, `reps` times each (only
/// choicewise when `only_choicewise`, e.g. under a profiler).
pub fn measure(
    rt: &Runtime,
    g: &Generated,
    read_size: usize,
    reps: usize,
    only_choicewise: bool,
) -> ThroughputResult {
    let reads = g.reads(read_size);
    let mut borrowed = Vec::new();
    let mut hand = Vec::new();
    let mut cw = Vec::new();
    let mut split = Vec::new();
    let mut serial = Vec::new();
    #[cfg_attr(not(feature = "openai-baseline"), allow(unused_mut))]
    let mut openai: Vec<Sample> = Vec::new();
    // One untimed warm-up round (page faults, allocator, runtime threads), checked.
    let expected_updates = g.chunks - 1;
    assert_eq!(borrowed_parse(&reads), expected_updates);
    let warm = reads.clone();
    let (whole, drained, _) = rt
        .block_on(rt.spawn(run_choicewise(warm)))
        .expect("the choicewise task does not panic");
    check_completion(&whole, g).expect("choicewise assembles the generated stream");
    let deltas: usize = drained.iter().map(|d| d.deltas).sum();
    let fragments: usize = drained.iter().map(|d| d.fragments).sum();
    assert_eq!(deltas, g.content_deltas, "content deltas drained");
    assert_eq!(
        fragments, g.argument_fragments,
        "argument fragments drained"
    );
    drop(whole);

    for _ in 0..reps {
        if only_choicewise {
            let (out, d) = timed(|| {
                rt.block_on(rt.spawn(run_choicewise(reads.clone())))
                    .expect("the choicewise task does not panic")
            });
            cw.push(d);
            drop(out);
            continue;
        }
        let (updates, d) = timed(|| borrowed_parse(&reads));
        assert_eq!(updates, expected_updates);
        borrowed.push(d);

        let (_, d) = timed(|| split_only(&reads));
        split.push(d);
        let (whole, d) = timed(|| demux_serial(&reads));
        serial.push(d);
        assert_eq!(whole.choices.len(), g.expected.len());
        drop(whole);

        let r = reads.clone();
        let (h, d) = timed(|| {
            rt.block_on(rt.spawn(async move {
                let mut h = HandWritten::default();
                let mut s = futures::stream::iter(r.into_iter().map(Ok::<_, Infallible>));
                while let Some(read) = s.next().await {
                    let Ok(read) = read;
                    h.feed(&read);
                }
                h
            }))
            .expect("the hand-written task does not panic")
        });
        hand.push(d);
        check_handwritten(&h, g).expect("the hand-written loop is right");
        drop(h);

        #[cfg(feature = "openai-baseline")]
        {
            let r = reads.clone();
            let (acc, d) = timed(|| {
                rt.block_on(rt.spawn(crate::openai::run(r)))
                    .expect("the async-openai task does not panic")
            });
            openai.push(d);
            crate::openai::check(&acc, g).expect("the async-openai baseline is right");
        }

        let r = reads.clone();
        let (out, d) = timed(|| {
            rt.block_on(rt.spawn(run_choicewise(r)))
                .expect("the choicewise task does not panic")
        });
        cw.push(d);
        drop(out);
    }
    ThroughputResult {
        n: g.expected.len() as u32,
        chunks: g.chunks,
        mb: g.megabytes(),
        first_appearance: g
            .first_appearance
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        figures: vec![
            Figures::new(BORROWED, &borrowed),
            Figures::new(HANDWRITTEN, &hand),
            Figures::new(CHOICEWISE, &cw),
            Figures::new(SPLIT, &split),
            Figures::new(DEMUX, &serial),
            Figures::new(ASYNC_OPENAI, &openai),
        ]
        .into_iter()
        .filter(|f| !f.secs.is_empty())
        .collect(),
    }
}

/// Prints the table of one result.
pub fn print(r: &ThroughputResult) {
    let cw = r.get(CHOICEWISE).median_secs();
    println!(
        "\n### throughput, n = {} ({} chunks, {:.1} MB, {} reps)\n",
        r.n,
        r.chunks,
        r.mb,
        r.get(CHOICEWISE).secs.len()
    );
    println!("first appearance order: {}\n", r.first_appearance);
    println!(
        "| {:<48} | {:>9} | {:>11} | {:>7} | {:>15} | {:>14} | {:>10} |",
        "contender",
        "median ms",
        "chunks/s",
        "MB/s",
        "MB/s min–max",
        "choicewise ÷ x",
        "CPU ms/run"
    );
    println!(
        "|{:-<50}|{:->11}|{:->13}|{:->9}|{:->17}|{:->16}|{:->12}|",
        "", "", "", "", "", "", ""
    );
    for f in &r.figures {
        let (lo, hi) = min_max(&f.secs);
        println!(
            "| {:<48} | {:>9.1} | {:>11.0} | {:>7.1} | {:>15} | {:>13.2}x | {:>10.1} |",
            f.name,
            f.median_secs() * 1e3,
            f.chunks_per_sec(r.chunks),
            f.mb_per_sec(r.mb),
            format!("{:.1}–{:.1}", r.mb / hi, r.mb / lo),
            f.median_secs() / cw,
            median(&f.cpu_secs) * 1e3,
        );
    }
}
