//! The time `write_canonical_json` takes over one large object: the canonical form a vote
//! keys a tool call's arguments by, whose members it sorts. Release build:
//!
//! ```text
//! cargo run --release -p choicewise-proto --example canonical_keys            # 360,000 keys
//! cargo run --release -p choicewise-proto --example canonical_keys -- 100000  # another count
//! ```
//!
//! Prints the object's size and the median of seven calls.

use std::time::Instant;

fn main() {
    let count: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse().expect("the number of keys"))
        .unwrap_or(360_000);
    // Keys in an order that is not sorted, as a model writes them.
    let members = (0..count)
        .map(|i| format!("\"k{}\":{i}", (i * 7919) % count))
        .collect::<Vec<_>>()
        .join(",");
    let json = format!("{{{members}}}");
    let mut millis: Vec<f64> = (0..7)
        .map(|_| {
            let mut out = String::with_capacity(json.len());
            let started = Instant::now();
            choicewise_proto::write_canonical_json(&json, &mut out).expect("JSON");
            let took = started.elapsed().as_secs_f64() * 1e3;
            assert_eq!(out.len(), json.len(), "every member kept");
            took
        })
        .collect();
    millis.sort_by(f64::total_cmp);
    println!(
        "{count} keys, {} bytes: median {:.1} ms of 7 calls",
        json.len(),
        millis[3]
    );
}
