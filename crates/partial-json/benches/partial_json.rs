//! Incremental parsing vs. one `serde_json::from_str` vs. re-parsing the
//! prefix at every fragment.

use std::hint::black_box;
use std::time::Duration;

use choicewise_partial_json::PartialJson;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::Value;

use choicewise_test_support::json_workload as support;

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

fn bench(c: &mut Criterion) {
    for (label, size) in [("100k", 100_000), ("10k", 10_000)] {
        let doc = support::realistic_doc(size);
        let fragments = support::fragments(&doc, 4);
        assert_eq!(
            incremental(&fragments),
            serde_json::from_str::<Value>(&doc).unwrap()
        );
        let mut group = c.benchmark_group(format!("args_{label}"));
        group
            .sample_size(10)
            .measurement_time(Duration::from_secs(4))
            .warm_up_time(Duration::from_secs(1))
            .throughput(Throughput::Bytes(doc.len() as u64));
        group.bench_function("incremental_push_value_4B", |b| {
            b.iter(|| incremental(black_box(&fragments)))
        });
        group.bench_function("serde_json_from_str_whole", |b| {
            b.iter(|| serde_json::from_str::<Value>(black_box(&doc)).unwrap())
        });
        // Re-parsing every prefix of 100 KB takes seconds per iteration:
        // the quadratic baseline only runs on the 10 KB document.
        if size <= 10_000 {
            group.bench_function("quadratic_close_and_reparse_4B", |b| {
                b.iter(|| quadratic(black_box(&fragments)))
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
