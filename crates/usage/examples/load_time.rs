//! First-use cost of the BPE tables, which criterion cannot measure (a
//! table loads once per process). Run in a fresh process, release build:
//!
//! ```text
//! cargo run --release -p choicewise-usage --example load_time            # o200k then cl100k
//! cargo run --release -p choicewise-usage --example load_time -- cl100k  # cl100k then o200k
//! ```
//!
//! For each table it prints the time of the first `preload` (build the map of
//! the ranks the build script embedded, build the pre-tokenizer), of
//! the first `count_text` with it, and of a second identical count for
//! comparison.

use std::time::{Duration, Instant};

use choicewise_usage::{EncodingName, count_prompt, count_text, preload};

const SAMPLE: &str = "Streamed completions often carry no usage; we then estimate the token counts \
                      with tiktoken and flag them as estimated. fn main() { println!(\"hi\"); }";

fn time<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let out = f();
    (out, start.elapsed())
}

fn measure(enc: EncodingName) {
    let ((), load_time) = time(|| preload(enc));
    let (n, first) = time(|| count_text(enc, SAMPLE));
    let (_, second) = time(|| count_text(enc, SAMPLE));
    let ((), again) = time(|| preload(enc));
    println!(
        "{:<12} first preload {:>9.3} ms | first count ({n} tokens) {:>8.3} ms | \
         second count {:>8.3} ms | later preload {:>6.3} µs",
        enc.as_str(),
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
    let order = if cl100k_first {
        [EncodingName::Cl100kBase, EncodingName::O200kBase]
    } else {
        [EncodingName::O200kBase, EncodingName::Cl100kBase]
    };
    for enc in order {
        measure(enc);
    }
    // A whole request: tables are already loaded, so this is counting only.
    let request =
        serde_json::json!({"model": "gpt-4o", "messages": [{"role": "user", "content": SAMPLE}]});
    let (n, first_prompt) =
        time(|| count_prompt(EncodingName::O200kBase, &request).map(|c| c.total));
    println!(
        "choicewise-usage: first count_prompt {:.3} ms ({n:?} tokens)",
        ms(first_prompt)
    );
}
