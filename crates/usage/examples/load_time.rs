//! First-use cost of the BPE tables, which criterion cannot measure (a
//! table loads once per process). Run in a fresh process, release build:
//!
//! ```text
//! cargo run --release -p choicewise-usage --example load_time            # o200k then cl100k
//! cargo run --release -p choicewise-usage --example load_time -- cl100k  # cl100k then o200k
//! ```
//!
//! For each table it prints the time of the first `*_singleton()` call (parse
//! the embedded table, build the regexes), of the first `encode_ordinary` on
//! it, and of a second identical encode for comparison.

use std::time::{Duration, Instant};

use choicewise_usage::{EncodingName, count_prompt, preload};
use tiktoken_rs::{CoreBPE, cl100k_base_singleton, o200k_base_singleton};

const SAMPLE: &str = "Streamed completions often carry no usage; we then estimate the token counts \
                      with tiktoken and flag them as estimated. fn main() { println!(\"hi\"); }";

fn time<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let out = f();
    (out, start.elapsed())
}

fn measure(label: &str, load: fn() -> &'static CoreBPE) {
    let (bpe, load_time) = time(load);
    let (n, first) = time(|| bpe.encode_ordinary(SAMPLE).len());
    let (_, second) = time(|| bpe.encode_ordinary(SAMPLE).len());
    let (_, again) = time(load);
    println!(
        "{label:<12} first singleton call {:>9.3} ms | first encode ({n} tokens) {:>8.3} ms | \
         second encode {:>8.3} ms | later singleton call {:>6.3} µs",
        ms(load_time),
        ms(first),
        ms(second),
        again.as_secs_f64() * 1e6,
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let cl100k_first = std::env::args()
        .nth(1)
        .is_some_and(|a| a.starts_with("cl100k"));
    let o200k = (
        "o200k_base",
        o200k_base_singleton as fn() -> &'static CoreBPE,
    );
    let cl100k = (
        "cl100k_base",
        cl100k_base_singleton as fn() -> &'static CoreBPE,
    );
    let order = if cl100k_first {
        [cl100k, o200k]
    } else {
        [o200k, cl100k]
    };
    for (label, load) in order {
        measure(label, load);
    }
    // Through this crate: tables are already loaded, so this is counting only.
    let request =
        serde_json::json!({"model": "gpt-4o", "messages": [{"role": "user", "content": SAMPLE}]});
    let ((), preload_again) = time(|| preload(EncodingName::O200kBase));
    let (n, first_prompt) =
        time(|| count_prompt(EncodingName::O200kBase, &request).map(|c| c.total));
    println!(
        "choicewise-usage: preload after load {:.3} µs | first count_prompt {:.3} ms ({n:?} tokens)",
        preload_again.as_secs_f64() * 1e6,
        ms(first_prompt)
    );
}
