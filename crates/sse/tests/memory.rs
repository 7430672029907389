//! A runaway line (no line end) must fail early with bounded memory.

use std::ops::ControlFlow;

use choicewise_sse::{Framer, SseError};

#[test]
fn runaway_line_64mib_in_64kib_reads_with_1mib_limit() {
    const MAX: usize = 1 << 20;
    const READ: usize = 64 << 10;
    const TOTAL: usize = 64 << 20;
    let mut read = vec![b'x'; READ];
    read[..6].copy_from_slice(b"data: ");
    let mut framer = Framer::with_max_event_size(MAX);
    framer
        .feed(b"data: ok\n\n", |_| ControlFlow::Continue(()))
        .unwrap();
    let mut fed = 10usize;
    let mut max_held = 0;
    let mut error = None;
    while fed < TOTAL + 10 {
        let res = framer.feed(&read, |_| panic!("no event expected"));
        max_held = max_held.max(framer.buffered_bytes());
        if let Err(e) = res {
            error = Some(e);
            break;
        }
        fed += READ;
    }
    let error = error.expect("a 64 MiB line must be refused");
    assert_eq!(
        error,
        SseError::EventTooLarge {
            limit: MAX,
            line: 3,
            offset: 10
        }
    );
    // Failed as soon as the limit was crossed: within one read past it.
    assert!(fed <= MAX + READ + 10, "fed {fed} bytes before failing");
    assert!(max_held <= MAX + READ, "held {max_held} bytes");
    // Poisoned.
    assert_eq!(
        framer.feed(b"\n\n", |_| ControlFlow::Continue(())),
        Err(error)
    );
}

#[test]
fn runaway_data_lines_are_bounded_too() {
    // Many complete data lines, never a blank line.
    const MAX: usize = 1 << 20;
    let mut framer = Framer::with_max_event_size(MAX);
    let line = format!("data: {}\n", "y".repeat(1000));
    let read = line.repeat(64);
    let mut error = None;
    for _ in 0..1000 {
        if let Err(e) = framer.feed(read.as_bytes(), |_| ControlFlow::Continue(())) {
            error = Some(e);
            break;
        }
        assert!(framer.buffered_bytes() <= MAX + read.len());
    }
    assert_eq!(
        error,
        Some(SseError::EventTooLarge {
            limit: MAX,
            line: 1,
            offset: 0
        })
    );
    assert!(framer.buffered_bytes() <= MAX + read.len());
}

#[test]
fn large_event_within_limit_is_delivered() {
    const MAX: usize = 1 << 20;
    let mut framer = Framer::with_max_event_size(MAX);
    let big = "z".repeat(MAX - 6);
    let input = format!("data: {big}\n\n");
    let mut got = 0;
    for read in input.as_bytes().chunks(7919) {
        framer
            .feed(read, |ev| {
                assert_eq!(ev.data.len(), MAX - 6);
                got += 1;
                ControlFlow::Continue(())
            })
            .unwrap();
    }
    assert_eq!(got, 1);
    assert!(framer.buffered_bytes() <= 2 * MAX);
}
