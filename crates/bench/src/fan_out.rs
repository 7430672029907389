//! Fan-out: `n` upstreams of one choice each in one completion (`Completions::builder().fan_out`,
//! one reader actor per upstream) against one stream of `n` choices carrying the same
//! choices, the chunks byte for byte the same but for their `index` field (see
//! `gen::split_choices`). Both are drained the same way: one task per choice, then
//! `collect()`.

use std::convert::Infallible;
use std::sync::Arc;

use choicewise::{Completions, Source, UsageSource};
use tokio::runtime::Runtime;

use crate::r#gen::{Generated, split_choices};
use crate::stats::{median, min_max};
use crate::throughput::{
    ChoicewiseRun, Drained, Figures, Sample, check_completion, drain, run_choicewise, timed,
};

/// Contender names.
pub const ONE_STREAM: &str = "one stream of n choices (Source::sse)";
/// Contender names.
pub const FAN_OUT: &str = "n upstreams of n = 1 (fan_out, n readers)";

/// The upstreams as one completion: upstream `k` (`n(1)`) is the completion's choice `k`.
pub async fn run_fan_out(upstreams: Vec<Vec<Arc<[u8]>>>) -> ChoicewiseRun {
    let sources = upstreams.into_iter().map(|reads| {
        Source::sse(futures::stream::iter(
            reads.into_iter().map(Ok::<_, Infallible>),
        ))
        .n(1)
    });
    drain(Completions::builder().fan_out(sources)).await
}

/// One contender's stream(s).
#[derive(Debug, Clone)]
pub struct Side {
    pub figures: Figures,
    /// Chunk events, usage-only chunks included.
    pub chunks: usize,
    pub megabytes: f64,
    /// Reads it was fed in, over all its upstreams.
    pub reads: usize,
}

impl Side {
    /// Median throughput of its own bytes, MB/s.
    pub fn mb_per_sec(&self) -> f64 {
        self.megabytes / self.figures.median_secs()
    }
}

/// The result of the fan-out benchmark.
#[derive(Debug, Clone)]
pub struct FanOutResult {
    /// Choices (and upstreams of the fan-out).
    pub n: usize,
    pub read_size: usize,
    pub one: Side,
    pub fan: Side,
    /// Per repetition, the one stream's time over the fan-out's (the two run back to back).
    pub paired: Vec<f64>,
    /// What the consumers drained (the same on both sides, checked at every repetition).
    pub drained: Drained,
}

impl FanOutResult {
    /// Fan-out throughput over the one stream's, on the same content: the ratio of the
    /// median times.
    pub fn ratio(&self) -> f64 {
        self.one.figures.median_secs() / self.fan.figures.median_secs()
    }
}

/// What the consumers of `g` must drain: every content delta and argument fragment, with
/// their bytes.
fn expected_drained(g: &Generated) -> (usize, usize, usize, usize) {
    let content: usize = g
        .expected
        .iter()
        .filter_map(|c| c.content.as_ref())
        .map(String::len)
        .sum();
    let arguments: usize = g
        .expected
        .iter()
        .flat_map(|c| &c.tool_calls)
        .map(|(_, _, args)| args.len())
        .sum();
    (g.content_deltas, content, g.argument_fragments, arguments)
}

/// Checks a run's consumers against the generator; returns their totals.
fn check_drained(drained: &[Drained], g: &Generated, who: &str) -> Drained {
    let t = Drained::total(drained);
    assert_eq!(drained.len(), g.expected.len(), "{who}: choices drained");
    assert_eq!(
        (t.deltas, t.content_bytes, t.fragments, t.argument_bytes),
        expected_drained(g),
        "{who}: content deltas, content bytes, argument fragments, argument bytes drained"
    );
    t
}

/// Measures both contenders on the same content, `reps` times each after one untimed,
/// checked warm-up, alternating which runs first.
pub fn measure(rt: &Runtime, g: &Generated, read_size: usize, reps: usize) -> FanOutResult {
    let reads = g.reads(read_size);
    let split = split_choices(g);
    let upstreams: Vec<Vec<Arc<[u8]>>> = split
        .iter()
        .map(|s| s.chunks(read_size.max(1)).map(Arc::from).collect())
        .collect();
    let fan_bytes: usize = split.iter().map(Vec::len).sum();
    let fan_reads: usize = upstreams.iter().map(Vec::len).sum();
    drop(split);

    // Warm-up, checked: both assemble what the generator says and drain the same.
    let (whole, drained, _) = rt
        .block_on(rt.spawn(run_choicewise(reads.clone())))
        .expect("the choicewise task does not panic");
    check_completion(&whole, g).expect("one stream assembles the generated stream");
    let one_total = check_drained(&drained, g, ONE_STREAM);
    let one_usage = whole.usage.clone();
    let (whole, drained, _) = rt
        .block_on(rt.spawn(run_fan_out(upstreams.clone())))
        .expect("the fan-out task does not panic");
    check_completion(&whole, g).expect("the fan-out assembles the generated choices");
    assert_eq!(check_drained(&drained, g, FAN_OUT), one_total);
    assert_eq!(
        whole
            .usage
            .as_ref()
            .map(|u| (u.completion_tokens, u.source)),
        one_usage
            .as_ref()
            .map(|u| (u.completion_tokens, UsageSource::Reported)),
        "the upstreams' reported completion tokens sum to the one stream's"
    );
    drop(whole);

    let mut one: Vec<Sample> = Vec::new();
    let mut fan: Vec<Sample> = Vec::new();
    let mut paired = Vec::new();
    for rep in 0..reps {
        let mut run_one = || {
            let r = reads.clone();
            let ((_, drained, c), d) = timed(|| {
                rt.block_on(rt.spawn(run_choicewise(r)))
                    .expect("the choicewise task does not panic")
            });
            assert_eq!(Drained::total(&drained), one_total, "{ONE_STREAM} drained");
            drop(c);
            one.push(d);
            d
        };
        let mut run_fan = || {
            let u = upstreams.clone();
            let ((_, drained, c), d) = timed(|| {
                rt.block_on(rt.spawn(run_fan_out(u)))
                    .expect("the fan-out task does not panic")
            });
            assert_eq!(Drained::total(&drained), one_total, "{FAN_OUT} drained");
            drop(c);
            fan.push(d);
            d
        };
        let (a, b) = if rep % 2 == 0 {
            let a = run_one();
            (a, run_fan())
        } else {
            let b = run_fan();
            (run_one(), b)
        };
        paired.push(a.wall / b.wall);
    }
    FanOutResult {
        n: g.expected.len(),
        read_size,
        one: Side {
            figures: Figures::new(ONE_STREAM, &one),
            chunks: g.chunks,
            megabytes: g.megabytes(),
            reads: reads.len(),
        },
        fan: Side {
            figures: Figures::new(FAN_OUT, &fan),
            chunks: g.chunks - 1 + g.expected.len(),
            megabytes: fan_bytes as f64 / 1e6,
            reads: fan_reads,
        },
        paired,
        drained: one_total,
    }
}

/// Prints the table of the result.
pub fn print(r: &FanOutResult) {
    let one = r.one.figures.median_secs();
    println!(
        "\n### fan-out: {n} upstreams of n = 1 against one n = {n} stream, same choices ({} reps)\n",
        r.one.figures.secs.len(),
        n = r.n,
    );
    println!(
        "the same {} content deltas ({} bytes) and {} argument fragments ({} bytes) drained by \
         {} consumer tasks on each side; {} KiB reads\n",
        r.drained.deltas,
        r.drained.content_bytes,
        r.drained.fragments,
        r.drained.argument_bytes,
        r.n,
        r.read_size / 1024,
    );
    println!(
        "| {:<44} | {:>8} | {:>6} | {:>6} | {:>9} | {:>11} | {:>7} | {:>13} | {:>10} |",
        "contender",
        "chunks",
        "MB",
        "reads",
        "median ms",
        "chunks/s",
        "MB/s",
        "MB/s min–max",
        "CPU ms/run"
    );
    println!(
        "|{:-<46}|{:->10}|{:->8}|{:->8}|{:->11}|{:->13}|{:->9}|{:->15}|{:->12}|",
        "", "", "", "", "", "", "", "", ""
    );
    for side in [&r.one, &r.fan] {
        let f = &side.figures;
        let (lo, hi) = min_max(&f.secs);
        println!(
            "| {:<44} | {:>8} | {:>6.1} | {:>6} | {:>9.1} | {:>11.0} | {:>7.1} | {:>13} | {:>10.1} |",
            f.name,
            side.chunks,
            side.megabytes,
            side.reads,
            f.median_secs() * 1e3,
            f.chunks_per_sec(side.chunks),
            side.mb_per_sec(),
            format!("{:.0}–{:.0}", side.megabytes / hi, side.megabytes / lo),
            median(&f.cpu_secs) * 1e3,
        );
    }
    let (lo, hi) = min_max(&r.paired);
    println!(
        "\nfan-out throughput ÷ one stream's, same content: {:.2}x (median times: {:.1} ms ÷ \
         {:.1} ms); per back-to-back pair, median {:.2}x, {:.2}–{:.2}x",
        r.ratio(),
        one * 1e3,
        r.fan.figures.median_secs() * 1e3,
        median(&r.paired),
        lo,
        hi,
    );
}
