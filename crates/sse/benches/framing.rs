//! Framing throughput: ~50 MB of realistic chat-completion chunk events
//! (`data: {...}\n\n`, ~270 bytes each) fed in 64 KiB reads.

use std::hint::black_box;
use std::ops::ControlFlow;
use std::time::Duration;

use choicewise_sse::Framer;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const TARGET_BYTES: usize = 50_000_000;
const READ: usize = 64 * 1024;

/// Builds the stream and returns it with its number of events.
fn stream() -> (Vec<u8>, u64) {
    let mut out = Vec::with_capacity(TARGET_BYTES + 512);
    let mut events = 0u64;
    while out.len() < TARGET_BYTES {
        let choice = events % 4;
        let line = format!(
            "data: {{\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\
\"created\":1741569952,\"model\":\"gpt-4o-2024-08-06\",\"system_fingerprint\":\"fp_eb9dce56a8\",\
\"choices\":[{{\"index\":{choice},\"delta\":{{\"content\":\" token{events:07}\"}},\"logprobs\":null,\
\"finish_reason\":null}}]}}\n\n"
        );
        out.extend_from_slice(line.as_bytes());
        events += 1;
    }
    (out, events)
}

fn framing(c: &mut Criterion) {
    let (input, events) = stream();
    eprintln!(
        "framing bench: {} bytes, {} events, {:.1} bytes/event",
        input.len(),
        events,
        input.len() as f64 / events as f64
    );
    let mut group = c.benchmark_group("framing");
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_secs(1));
    group.sample_size(10);
    group.throughput(Throughput::Bytes(input.len() as u64));
    group.bench_function("chunks_64k_reads", |b| {
        b.iter(|| {
            let mut framer = Framer::new();
            let mut seen = 0u64;
            let mut bytes = 0usize;
            for read in input.chunks(READ) {
                framer
                    .feed(black_box(read), |ev| {
                        seen += 1;
                        bytes += ev.data.len();
                        ControlFlow::Continue(())
                    })
                    .unwrap();
            }
            assert_eq!(seen, events);
            black_box(bytes)
        })
    });
    group.finish();
}

criterion_group!(benches, framing);
criterion_main!(benches);
