//! Measures, in one run, following a ~100 KB arguments object delivered in
//! 4-byte fragments (push + `value()` after every fragment) against one
//! `serde_json::from_str` of the whole text, and the quadratic
//! close-and-re-parse baseline (on 10 KB, and on 100 KB with `--full`).
//!
//! ```text
//! cargo run --release -p choicewise-partial-json --example ratio [-- --full]
//! ```
//!
//! The verdict uses the medians of runs of each measured in its own loop;
//! the minima (least disturbed by other load on the machine) are printed
//! too.

use std::hint::black_box;
use std::time::{Duration, Instant};

use choicewise_partial_json::PartialJson;
use serde_json::Value;

use choicewise_test_support::json_workload as support;

const TARGET: f64 = 3.0;
const RUNS: usize = 41;

/// Median and minimum of `runs` timings of `f` (after one warm-up run).
fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, Duration) {
    black_box(f());
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            black_box(f());
            start.elapsed()
        })
        .collect();
    times.sort();
    (times[times.len() / 2], times[0])
}

fn incremental(fragments: &[&str]) -> Value {
    let mut parser = PartialJson::new();
    for fragment in fragments {
        parser.push(fragment).unwrap();
        black_box(parser.value());
    }
    parser.finish().unwrap()
}

fn quadratic(fragments: &[&str]) -> usize {
    let mut prefix = String::new();
    let mut ok = 0;
    for fragment in fragments {
        prefix.push_str(fragment);
        if black_box(support::close_and_reparse(&prefix)).is_some() {
            ok += 1;
        }
    }
    ok
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

fn main() {
    let full = std::env::args().any(|a| a == "--full");
    let doc = support::realistic_doc(100_000);
    let fragments = support::fragments(&doc, 4);
    assert_eq!(
        incremental(&fragments),
        serde_json::from_str::<Value>(&doc).unwrap()
    );
    if std::env::args().any(|a| a == "--profile-incremental") {
        // For `perf record` / `valgrind`: only the incremental loop.
        for _ in 0..20 {
            black_box(incremental(&fragments));
        }
        return;
    }
    if std::env::args().any(|a| a == "--profile-setup") {
        return;
    }
    if std::env::args().any(|a| a == "--profile-from-str") {
        for _ in 0..20 {
            black_box(serde_json::from_str::<Value>(&doc).unwrap());
        }
        return;
    }
    let (inc, inc_min) = time(RUNS, || incremental(&fragments));
    let (whole, whole_min) = time(RUNS, || serde_json::from_str::<Value>(&doc).unwrap());
    let measured = ratio(inc, whole);
    println!(
        "doc: {} bytes, {} fragments of 4 bytes; {RUNS} runs each",
        doc.len(),
        fragments.len()
    );
    println!("incremental push+value(): median {inc:?}, min {inc_min:?}");
    println!("serde_json::from_str whole: median {whole:?}, min {whole_min:?}");
    println!("ratio of minima: {:.2}x", ratio(inc_min, whole_min));
    let verdict = if measured <= TARGET { "PASS" } else { "FAIL" };
    println!("{verdict} partial_json_vs_from_str measured={measured:.2}x target={TARGET}x");

    let small = support::realistic_doc(10_000);
    let small_fragments = support::fragments(&small, 4);
    let (small_whole, _) = time(RUNS, || serde_json::from_str::<Value>(&small).unwrap());
    let (small_inc, _) = time(RUNS, || incremental(&small_fragments));
    let (small_quad, _) = time(5, || quadratic(&small_fragments));
    println!(
        "10 KB doc ({} bytes, {} fragments): incremental {:.2}x from_str; quadratic close-and-reparse {small_quad:?} = {:.0}x from_str, {:.0}x incremental",
        small.len(),
        small_fragments.len(),
        ratio(small_inc, small_whole),
        ratio(small_quad, small_whole),
        ratio(small_quad, small_inc),
    );
    if full {
        let (quad, _) = time(1, || quadratic(&fragments));
        println!(
            "100 KB doc: quadratic close-and-reparse {quad:?} = {:.0}x from_str, {:.0}x incremental",
            ratio(quad, whole),
            ratio(quad, inc),
        );
    } else {
        println!("(pass --full to also time the quadratic baseline on the 100 KB doc, ~seconds)");
    }
}
