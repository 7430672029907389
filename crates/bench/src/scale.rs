//! Scale: thousands of concurrent completions in one process. Memory per idle completion
//! (its choice actors retired, waiting for more; and, for comparison, with every actor kept),
//! and total throughput when all of them stream at once.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use choicewise::defaults::DEFAULT_HIBERNATE_AFTER;
use choicewise::diagnostics::live_actors;
use choicewise::{Choice, Completions, Source};
use choicewise_test_support::rss_bytes;
use futures::StreamExt;
use tokio::runtime::Runtime;

use crate::r#gen::Generated;
use crate::heap;

/// The first chunk of each of `n` choices: enough for every choice actor to exist.
fn opening(n: u32) -> Vec<u8> {
    let mut out = String::new();
    for i in (0..n).rev() {
        out.push_str(&format!(
            "data: {{\"id\":\"chatcmpl-scale\",\"object\":\"chat.completion.chunk\",\"created\":1,\
             \"model\":\"gpt-4o-mini\",\"choices\":[{{\"index\":{i},\"delta\":{{\"role\":\"assistant\",\
             \"content\":\"\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
        ));
    }
    out.into_bytes()
}

async fn wait_for_actors(done: impl Fn(usize) -> bool, deadline: Duration) -> usize {
    let start = Instant::now();
    while !done(live_actors()) && start.elapsed() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    live_actors()
}

pub struct IdleFigures {
    pub completions: usize,
    /// Live heap bytes per completion once its upstream has been quiet for `hibernate_after`
    /// (the default): the choice actors have retired.
    pub heap_per_completion: f64,
    /// RSS growth per completion then. More than the heap: glibc keeps the pages of the
    /// retired actors, fragmented among live data, for later allocations.
    pub rss_per_completion: f64,
    /// RSS growth per completion of a second batch of as many, set up while the first is
    /// held: the freed pages are reused.
    pub rss_per_completion_second: f64,
    /// Live actors then (one reader per completion).
    pub actors: usize,
    /// Live heap bytes per completion with every choice actor kept, as while streaming.
    pub heap_per_active_completion: f64,
    pub active_actors: usize,
}

struct Reading {
    heap: i64,
    rss: u64,
}

fn reading() -> Reading {
    Reading {
        heap: heap::live(),
        rss: rss_bytes(),
    }
}

/// `count` completions of `n` choices, each with its choices open and its upstream idle,
/// holding the `Completions` and every `Choice` handle, as a gateway waiting on slow models
/// would: the memory per completion once the choice actors have retired, and, for comparison,
/// with every actor kept.
pub fn idle(rt: &Runtime, count: usize, n: u32) -> IdleFigures {
    heap::counting();
    rt.block_on(async {
        let base = live_actors();
        // Warm up the runtime and allocator so their one-time costs are not counted.
        drop(hold(1, n, DEFAULT_HIBERNATE_AFTER).await);
        wait_for_actors(|a| a == base, Duration::from_secs(10)).await;
        let per = |from: &Reading, to: &Reading| {
            (
                (to.heap - from.heap) as f64 / count as f64,
                to.rss.saturating_sub(from.rss) as f64 / count as f64,
            )
        };
        let settle = |expected: usize| async move {
            let actors = wait_for_actors(|a| a == expected, Duration::from_secs(60)).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
            actors
        };

        let before = reading();
        let first = hold(count, n, DEFAULT_HIBERNATE_AFTER).await;
        let actors = settle(base + count).await - base;
        let after_first = reading();
        let second = hold(count, n, DEFAULT_HIBERNATE_AFTER).await;
        settle(base + 2 * count).await;
        let after_second = reading();
        drop((first, second));
        settle(base).await;
        let (heap_idle, rss_idle) = per(&before, &after_first);
        let (_, rss_second) = per(&after_first, &after_second);

        let before = reading();
        let kept = hold(count, n, Duration::MAX).await;
        let active_actors = settle(base + count * (n as usize + 1)).await - base;
        let (heap_active, _) = per(&before, &reading());
        drop(kept);
        settle(base).await;
        IdleFigures {
            completions: count,
            heap_per_completion: heap_idle,
            rss_per_completion: rss_idle,
            rss_per_completion_second: rss_second,
            actors,
            heap_per_active_completion: heap_active,
            active_actors,
        }
    })
}

async fn hold(count: usize, n: u32, quiet: Duration) -> Vec<(Completions, Vec<Choice>)> {
    let mut held = Vec::with_capacity(count);
    let first = opening(n);
    for _ in 0..count {
        let upstream = futures::stream::iter([Ok::<_, Infallible>(first.clone())])
            .chain(futures::stream::pending());
        let completions = Completions::builder()
            .hibernate_after(quiet)
            .start(Source::sse(upstream));
        held.push(completions);
    }
    let mut out = Vec::with_capacity(count);
    for completions in held {
        let choices: Vec<Choice> = completions.choices().take(n as usize).collect().await;
        out.push((completions, choices));
    }
    out
}

pub struct BusyFigures {
    pub completions: usize,
    pub chunks: usize,
    pub megabytes: f64,
    pub seconds: f64,
    pub peak_rss: u64,
    pub rss_before: u64,
}

/// `count` completions all streaming `g` at once (each choice drained by its own task, then
/// `collect()`); total throughput and the RSS reached.
pub fn busy(rt: &Runtime, g: &Arc<Generated>, count: usize) -> BusyFigures {
    let reads = g.reads(16 * 1024);
    rt.block_on(async {
        let rss_before = rss_bytes();
        let peak = Arc::new(std::sync::atomic::AtomicU64::new(rss_before));
        let sampler = {
            let peak = peak.clone();
            tokio::spawn(async move {
                loop {
                    peak.fetch_max(rss_bytes(), std::sync::atomic::Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        };
        let start = Instant::now();
        let mut tasks = Vec::with_capacity(count);
        for _ in 0..count {
            let reads = reads.clone();
            tasks.push(tokio::spawn(async move {
                let completions = Completions::new(Source::sse(futures::stream::iter(
                    reads.into_iter().map(Ok::<_, Infallible>),
                )));
                let mut drains = Vec::new();
                let mut choices = completions.choices();
                while let Some(choice) = choices.next().await {
                    drains.push(tokio::spawn(async move {
                        let mut content = choice.content();
                        let mut bytes = 0usize;
                        while let Some(Ok(t)) = content.next().await {
                            bytes += t.len();
                        }
                        bytes
                    }));
                }
                for d in drains {
                    let _ = d.await;
                }
                completions.collect().await.is_ok()
            }));
        }
        let mut ok = 0;
        for t in tasks {
            ok += usize::from(t.await.unwrap_or(false));
        }
        let seconds = start.elapsed().as_secs_f64();
        sampler.abort();
        assert_eq!(ok, count, "every completion assembled");
        BusyFigures {
            completions: count,
            chunks: g.chunks * count,
            megabytes: g.megabytes() * count as f64,
            seconds,
            peak_rss: peak.load(std::sync::atomic::Ordering::Relaxed),
            rss_before,
        }
    })
}

pub struct SlowConsumerFigures {
    pub megabytes: f64,
    /// Live heap held by the finished completion (its response: messages and event logs).
    pub response: i64,
    /// Peak heap growth while streaming, every choice read as it comes.
    pub peak_fast: i64,
    /// The same with choice 0's content read one delta, then not at all until the stream has
    /// ended.
    pub peak_slow: i64,
}

/// One completion of `g` from memory, each choice's content drained by its own task; with
/// `slow`, choice 0's reader takes one delta and then waits for the end of the stream before
/// reading on. Returns the completion, still held.
async fn stream_once(g: &Generated, slow: bool) -> Completions {
    let reads = g.reads(64 * 1024);
    let completions = Completions::new(Source::sse(futures::stream::iter(
        reads.into_iter().map(Ok::<_, Infallible>),
    )));
    let mut drains = Vec::new();
    let mut choices = completions.choices();
    while let Some(choice) = choices.next().await {
        let lagging = slow && choice.index() == 0;
        let done = completions.clone();
        drains.push(tokio::spawn(async move {
            let mut content = choice.content();
            let mut bytes = 0usize;
            if lagging {
                if let Some(Ok(t)) = content.next().await {
                    bytes += t.len();
                }
                let _ = done.outcome().await;
            }
            while let Some(Ok(t)) = content.next().await {
                bytes += t.len();
            }
            bytes
        }));
    }
    for d in drains {
        let _ = d.await;
    }
    let _ = completions.collect().await;
    completions
}

/// Peak memory with a slow consumer against the same stream read at full pace: a consumer
/// that lags must cost nothing beyond the response, which the completion holds anyway.
pub fn slow_consumer(rt: &Runtime, g: &Generated) -> SlowConsumerFigures {
    heap::counting();
    rt.block_on(async {
        drop(stream_once(g, false).await);
        let start = heap::live();
        let (held, peak_fast) = heap::peak_during(stream_once(g, false)).await;
        let response = heap::live() - start;
        drop(held);
        let (held, peak_slow) = heap::peak_during(stream_once(g, true)).await;
        drop(held);
        SlowConsumerFigures {
            megabytes: g.bytes.len() as f64 / 1e6,
            response,
            peak_fast,
            peak_slow,
        }
    })
}
