//! Unit tests, one group per rule.

use std::ops::ControlFlow;

use crate::{Feed, Framer, OwnedEvent, Position, SseError, Tail};

/// Feeds `reads` in order, collecting events, stopping at the first error.
fn run_with(framer: &mut Framer, reads: &[&[u8]]) -> (Vec<OwnedEvent>, Option<SseError>) {
    let mut events = Vec::new();
    for read in reads {
        let res = framer.feed(read, |ev| {
            events.push(ev.to_owned());
            ControlFlow::Continue(())
        });
        match res {
            Ok(Feed::Consumed) => {}
            Ok(Feed::Stopped { .. }) => unreachable!("callback never breaks"),
            Err(err) => return (events, Some(err)),
        }
    }
    (events, None)
}

fn run(reads: &[&[u8]]) -> Vec<OwnedEvent> {
    let (events, err) = run_with(&mut Framer::new(), reads);
    assert_eq!(err, None);
    events
}

fn datas(events: &[OwnedEvent]) -> Vec<&str> {
    events.iter().map(|e| e.data.as_str()).collect()
}

fn ev(data: &str, line: u64, offset: u64) -> OwnedEvent {
    OwnedEvent {
        data: data.to_owned(),
        line,
        offset,
        ..OwnedEvent::default()
    }
}

/// Every way to split `input` into two reads, and all 1-byte reads.
fn all_splits(input: &[u8]) -> Vec<Vec<&[u8]>> {
    let mut out: Vec<Vec<&[u8]>> = (0..=input.len())
        .map(|i| vec![&input[..i], &input[i..]])
        .collect();
    out.push(input.chunks(1).collect());
    out
}

fn assert_split_invariant(input: &[u8]) -> Vec<OwnedEvent> {
    let whole = run_with(&mut Framer::new(), &[input]);
    for reads in all_splits(input) {
        assert_eq!(
            run_with(&mut Framer::new(), &reads),
            whole,
            "reads {reads:?}"
        );
    }
    assert_eq!(whole.1, None);
    whole.0
}

// ---------------------------------------------------------------- line ends

#[test]
fn lf_cr_and_crlf_line_ends() {
    for nl in ["\n", "\r", "\r\n"] {
        let input = format!("data: a{nl}data: b{nl}{nl}data: c{nl}{nl}");
        let events = assert_split_invariant(input.as_bytes());
        let w = nl.len() as u64;
        assert_eq!(events, [ev("a\nb", 1, 0), ev("c", 4, 14 + 3 * w)], "{nl:?}");
    }
}

#[test]
fn mixed_line_ends() {
    let events = assert_split_invariant(b"data: a\r\ndata: b\rdata: c\n\r\n");
    assert_eq!(datas(&events), ["a\nb\nc"]);
}

#[test]
fn crlf_split_across_reads_is_one_line_end() {
    let mut f = Framer::new();
    let (events, err) = run_with(&mut f, &[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]);
    assert_eq!(err, None);
    assert_eq!(events, [ev("a\nb", 1, 0)]);
    assert_eq!(
        f.position(),
        Position {
            line: 4,
            offset: 20
        }
    );
}

#[test]
fn cr_then_cr_across_reads_is_a_blank_line() {
    assert_eq!(run(&[b"data: a\r", b"\r"]), [ev("a", 1, 0)]);
}

#[test]
fn pending_cr_survives_empty_reads() {
    let mut f = Framer::new();
    let (events, err) = run_with(&mut f, &[b"data: a\r", b"", b"", b"\n", b"\n"]);
    assert_eq!((events, err), (vec![ev("a", 1, 0)], None));
    assert_eq!(
        f.position(),
        Position {
            line: 3,
            offset: 10
        }
    );
}

#[test]
fn cr_then_other_byte_across_reads() {
    assert_eq!(
        run(&[b"data: a\r", b"data: b\r", b"\r"]),
        [ev("a\nb", 1, 0)]
    );
}

#[test]
fn line_numbers_count_each_line_end_once() {
    let mut f = Framer::new();
    f.feed(b"a\r\nb\rc\n\r\n\n\r", |_| ControlFlow::Continue(()))
        .unwrap();
    assert_eq!(
        f.position(),
        Position {
            line: 7,
            offset: 11
        }
    );
    f.feed(b"\n", |_| ControlFlow::Continue(())).unwrap();
    assert_eq!(
        f.position(),
        Position {
            line: 7,
            offset: 12
        }
    );
}

// ---------------------------------------------------------------------- BOM

#[test]
fn bom_is_skipped_at_stream_start() {
    let events = assert_split_invariant(b"\xEF\xBB\xBFdata: x\n\n");
    assert_eq!(events, [ev("x", 1, 3)]);
}

#[test]
fn bom_split_into_single_bytes() {
    let mut f = Framer::new();
    let (events, err) = run_with(&mut f, &[b"\xEF", b"\xBB", b"\xBF", b"data: x\n\n"]);
    assert_eq!((events, err), (vec![ev("x", 1, 3)], None));
}

#[test]
fn bom_alone_then_finish_is_clean() {
    let mut f = Framer::new();
    f.feed(b"\xEF\xBB\xBF", |_| ControlFlow::Continue(()))
        .unwrap();
    assert_eq!(f.position(), Position { line: 1, offset: 3 });
    let tail = f.finish();
    assert!(tail.is_clean());
    assert_eq!((tail.line, tail.offset), (1, 3));
}

#[test]
fn only_one_bom_is_skipped() {
    // The second BOM is part of the first line: field name "\u{FEFF}data".
    let events = assert_split_invariant(b"\xEF\xBB\xBF\xEF\xBB\xBFdata: x\n\ndata: y\n\n");
    assert_eq!(events, [ev("y", 3, 15)]);
}

#[test]
fn bom_elsewhere_is_data() {
    let events = assert_split_invariant(b"data: \xEF\xBB\xBFx\n\n\xEF\xBB\xBFdata: y\n\n");
    assert_eq!(datas(&events), ["\u{FEFF}x"]);
}

#[test]
fn partial_bom_followed_by_other_bytes_is_line_content() {
    // "\xEF\xBB" then "x": not a BOM, and not UTF-8 either.
    let err = SseError::InvalidUtf8 {
        line: 1,
        offset: 0,
        byte_offset: 0,
    };
    for reads in all_splits(b"\xEF\xBBx\n") {
        assert_eq!(
            run_with(&mut Framer::new(), &reads),
            (vec![], Some(err.clone()))
        );
    }
    // U+FE80 shares the BOM's first byte: it starts an ordinary first line.
    let events = assert_split_invariant(b"\xEF\xBA\x80\n\ndata: z\n\n");
    assert_eq!(events, [ev("z", 3, 5)]);
}

#[test]
fn partial_bom_at_finish_is_a_partial_line() {
    let mut f = Framer::new();
    f.feed(b"\xEF\xBB", |_| ControlFlow::Continue(())).unwrap();
    let tail = f.finish();
    assert_eq!(
        tail,
        Tail {
            pending_bytes: 2,
            pending_data: None,
            partial_line: b"\xEF\xBB".to_vec(),
            line: 1,
            offset: 0,
            complete_lines: false
        }
    );
}

// -------------------------------------------------------------------- UTF-8

#[test]
fn multibyte_characters_split_across_reads() {
    let input = "data: é😀ü\nevent: 😀\n\n".as_bytes();
    let events = assert_split_invariant(input);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].data, "é😀ü");
    assert_eq!(events[0].event, "😀");
}

#[test]
fn invalid_utf8_reports_line_and_offsets() {
    let input = b"data: ok\n\ndata: caf\xC3(\n\n";
    let err = SseError::InvalidUtf8 {
        line: 3,
        offset: 10,
        byte_offset: 19,
    };
    for reads in all_splits(input) {
        let (events, e) = run_with(&mut Framer::new(), &reads);
        assert_eq!(datas(&events), ["ok"]);
        assert_eq!(e, Some(err.clone()));
    }
    assert_eq!(
        err.to_string(),
        "invalid UTF-8 in SSE line 3 (line starts at byte 10, first invalid byte at 19)"
    );
}

#[test]
fn invalid_utf8_in_comment_or_unknown_field_is_an_error() {
    let (_, err) = run_with(&mut Framer::new(), &[b": \xFF\n"]);
    assert_eq!(
        err,
        Some(SseError::InvalidUtf8 {
            line: 1,
            offset: 0,
            byte_offset: 2
        })
    );
    let (_, err) = run_with(&mut Framer::new(), &[b"\n\nfoo\xFF: x\n"]);
    assert_eq!(
        err,
        Some(SseError::InvalidUtf8 {
            line: 3,
            offset: 2,
            byte_offset: 5
        })
    );
}

#[test]
fn truncated_character_in_partial_line_is_not_an_error_until_line_end() {
    let mut f = Framer::new();
    f.feed(b"data: \xC3", |_| ControlFlow::Continue(()))
        .unwrap();
    let tail = f.finish();
    assert_eq!(tail.partial_line, b"data: \xC3");
    assert!(!tail.complete_lines);
}

// ------------------------------------------------------------ comments, blanks

#[test]
fn comments_are_ignored() {
    let events = assert_split_invariant(b": hi\ndata: a\n: mid\ndata: b\n\n:\n\n");
    assert_eq!(events, [ev("a\nb", 2, 5)]);
}

#[test]
fn comment_lines_do_not_start_an_event() {
    let events = assert_split_invariant(b": c\n: d\ndata: a\n\n");
    assert_eq!(events, [ev("a", 3, 8)]);
}

#[test]
fn blank_line_without_data_does_not_dispatch_and_resets() {
    let input = b"event: x\nid: 1\nretry: 5\n\ndata: a\n\n\n\n";
    let events = assert_split_invariant(input);
    assert_eq!(
        events,
        [OwnedEvent {
            event: String::new(),
            data: "a".into(),
            id: Some("1".into()),
            retry: None,
            line: 5,
            offset: 25
        }]
    );
}

#[test]
fn event_type_resets_after_dispatch() {
    let events = assert_split_invariant(b"event: a\ndata: 1\n\ndata: 2\n\n");
    assert_eq!(events[0].event, "a");
    assert_eq!(events[1].event, "");
    assert_eq!(events[1].as_event().event_type(), "message");
}

// ------------------------------------------------------------------- fields

#[test]
fn single_leading_space_is_removed() {
    let events = assert_split_invariant(b"data:a\n\ndata: a\n\ndata:  a\n\ndata:a \n\n");
    assert_eq!(datas(&events), ["a", "a", " a", "a "]);
}

#[test]
fn line_without_colon_is_field_with_empty_value() {
    let events = assert_split_invariant(b"data\n\ndata\ndata\n\nevent\ndata: x\n\n");
    assert_eq!(datas(&events), ["", "\n", "x"]);
    assert_eq!(events[2].event, "");
}

#[test]
fn empty_data_field_dispatches_empty_event() {
    let events = assert_split_invariant(b"data:\n\n");
    assert_eq!(events, [ev("", 1, 0)]);
}

#[test]
fn data_lines_are_joined_with_newline() {
    let events = assert_split_invariant(b"data: a\ndata:b\ndata: \ndata: c\n\n");
    assert_eq!(datas(&events), ["a\nb\n\nc"]);
}

#[test]
fn values_keep_further_colons() {
    let events = assert_split_invariant(b"data: {\"a\": 1}\nevent: x:y\n\n");
    assert_eq!(events[0].data, "{\"a\": 1}");
    assert_eq!(events[0].event, "x:y");
}

#[test]
fn field_names_are_case_sensitive_and_exact() {
    let events = assert_split_invariant(b"Data: a\ndata : b\n data: c\ndata: d\n\n");
    assert_eq!(events, [ev("d", 1, 0)]);
}

#[test]
fn last_event_field_wins() {
    let events = assert_split_invariant(b"event: a\nevent: b\ndata: x\n\n");
    assert_eq!(events[0].event, "b");
}

#[test]
fn unknown_fields_are_ignored_but_start_the_event() {
    let events = assert_split_invariant(b"foo: bar\ndata: x\n\n");
    assert_eq!(events, [ev("x", 1, 0)]);
}

#[test]
fn id_persists_across_events() {
    let events = assert_split_invariant(b"id: 1\ndata: a\n\ndata: b\n\nid: 2\n\ndata: c\n\n");
    let ids: Vec<_> = events.iter().map(|e| e.id.as_deref()).collect();
    assert_eq!(ids, [Some("1"), Some("1"), Some("2")]);
}

#[test]
fn id_with_nul_is_ignored() {
    let mut f = Framer::new();
    let (events, _) = run_with(&mut f, &[b"id: 1\ndata: a\n\nid: 2\0x\ndata: b\n\n"]);
    assert_eq!(events[1].id.as_deref(), Some("1"));
    assert_eq!(f.last_event_id(), Some("1"));
}

#[test]
fn empty_id_resets_last_event_id() {
    let events = assert_split_invariant(b"id: 1\ndata: a\n\nid\ndata: b\n\nid:\ndata: c\n\n");
    let ids: Vec<_> = events.iter().map(|e| e.id.as_deref()).collect();
    assert_eq!(ids, [Some("1"), None, None]);
}

#[test]
fn retry_requires_ascii_digits() {
    let input = b"retry: 10\ndata: a\n\nretry: 1x\ndata: b\n\nretry:  5\ndata: c\n\n\
retry: -1\ndata: d\n\nretry:\ndata: e\n\nretry: 99999999999999999999999\ndata: f\n\n\
retry: 7\nretry: x\ndata: g\n\nretry: \xD9\xA3\ndata: h\n\n";
    let events = assert_split_invariant(input);
    let retries: Vec<_> = events.iter().map(|e| e.retry).collect();
    assert_eq!(
        retries,
        [Some(10), None, None, None, None, None, Some(7), None]
    );
}

#[test]
fn retry_sets_reconnection_time_even_without_dispatch() {
    let mut f = Framer::new();
    let (events, _) = run_with(&mut f, &[b"retry: 250\n\n"]);
    assert!(events.is_empty());
    assert_eq!(f.reconnection_time(), Some(250));
}

#[test]
fn event_positions() {
    let input = b": c\r\n\r\nevent: e\r\ndata: 1\r\n\r\n\r\nid: 9\rdata: 2\r\r";
    let events = assert_split_invariant(input);
    assert_eq!((events[0].line, events[0].offset), (3, 7));
    assert_eq!((events[1].line, events[1].offset), (7, 30));
}

// ------------------------------------------------------------------ stopping

#[test]
fn stop_reports_consumed_and_rest_can_be_fed_later() {
    let input = b"data: 1\n\ndata: 2\r\n\r\ndata: 3\n\n";
    let mut f = Framer::new();
    let mut seen = Vec::new();
    let feed = f
        .feed(input, |e| {
            seen.push(e.to_owned());
            if e.data == "2" {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
    assert_eq!(feed, Feed::Stopped { consumed: 20 });
    assert_eq!(
        f.position(),
        Position {
            line: 5,
            offset: 20
        }
    );
    let (rest, err) = run_with(&mut f, &[&input[20..]]);
    assert_eq!(err, None);
    seen.extend(rest);
    assert_eq!(seen, [ev("1", 1, 0), ev("2", 3, 9), ev("3", 5, 20)]);
}

#[test]
fn stop_on_cr_at_end_of_read_skips_following_lf() {
    let mut f = Framer::new();
    let feed = f.feed(b"data: 1\r\r", |_| ControlFlow::Break(())).unwrap();
    assert_eq!(feed, Feed::Stopped { consumed: 9 });
    let (events, err) = run_with(&mut f, &[b"\ndata: 2\n\n"]);
    assert_eq!((events, err), (vec![ev("2", 3, 10)], None));
}

#[test]
fn stop_on_last_event_of_read() {
    let mut f = Framer::new();
    let feed = f.feed(b"data: 1\n\n", |_| ControlFlow::Break(())).unwrap();
    assert_eq!(feed, Feed::Stopped { consumed: 9 });
}

#[test]
fn stop_inside_a_line_spanning_reads() {
    let mut f = Framer::new();
    f.feed(b"data: 1\n", |_| ControlFlow::Break(())).unwrap();
    let feed = f
        .feed(b"\ndata: 2\n\n", |_| ControlFlow::Break(()))
        .unwrap();
    assert_eq!(feed, Feed::Stopped { consumed: 1 });
}

// -------------------------------------------------------------------- errors

#[test]
fn event_too_large_names_event_start() {
    let mut f = Framer::with_max_event_size(20);
    let (events, err) = run_with(
        &mut f,
        &[b"data: 1\n\nid: 5\ndata: 0123456789\ndata: abcdef\n"],
    );
    assert_eq!(datas(&events), ["1"]);
    assert_eq!(
        err,
        Some(SseError::EventTooLarge {
            limit: 20,
            line: 3,
            offset: 9
        })
    );
    assert_eq!(
        err.unwrap().to_string(),
        "SSE event starting at line 3 (byte 9) exceeds the maximum event size of 20 bytes"
    );
}

#[test]
fn event_too_large_is_split_invariant() {
    let input = b"data: 1\n\n: comment\ndata: 0123456789\ndata: abcdef\n";
    let err = SseError::EventTooLarge {
        limit: 20,
        line: 4,
        offset: 19,
    };
    for reads in all_splits(input) {
        let (events, e) = run_with(&mut Framer::with_max_event_size(20), &reads);
        assert_eq!(datas(&events), ["1"]);
        assert_eq!(e, Some(err.clone()), "{reads:?}");
    }
}

#[test]
fn event_exactly_at_limit_is_accepted() {
    // Pending data (10 bytes) + raw line "data: 0123456789" (16 bytes) = 26.
    let input = b"data: 0123456789\ndata: 0123456789\n\n";
    let (events, err) = run_with(&mut Framer::with_max_event_size(26), &[input]);
    assert_eq!(
        (datas(&events), err),
        (vec!["0123456789\n0123456789"], None)
    );
    let (_, err) = run_with(&mut Framer::with_max_event_size(25), &[input]);
    assert_eq!(
        err,
        Some(SseError::EventTooLarge {
            limit: 25,
            line: 1,
            offset: 0
        })
    );
}

#[test]
fn runaway_line_fails_before_its_end() {
    let mut f = Framer::with_max_event_size(100);
    let mut err = None;
    let mut fed = 0;
    while err.is_none() {
        err = f.feed(&[b'a'; 30], |_| ControlFlow::Continue(())).err();
        fed += 30;
        assert!(fed <= 150, "no error after {fed} bytes");
        assert!(f.buffered_bytes() <= 100);
    }
    assert_eq!(
        err,
        Some(SseError::EventTooLarge {
            limit: 100,
            line: 1,
            offset: 0
        })
    );
}

#[test]
fn runaway_comment_line_fails_too() {
    let mut f = Framer::with_max_event_size(10);
    let err = f.feed(b"data: x\n\n: a very long comment", |_| {
        ControlFlow::Continue(())
    });
    assert_eq!(
        err,
        Err(SseError::EventTooLarge {
            limit: 10,
            line: 3,
            offset: 9
        })
    );
}

#[test]
fn zero_limit_rejects_any_non_blank_line() {
    let mut f = Framer::with_max_event_size(0);
    assert_eq!(
        f.feed(b"\n\r\n", |_| ControlFlow::Continue(())),
        Ok(Feed::Consumed)
    );
    assert_eq!(
        f.feed(b"x", |_| ControlFlow::Continue(())),
        Err(SseError::EventTooLarge {
            limit: 0,
            line: 3,
            offset: 3
        })
    );
}

#[test]
fn errors_poison_until_finish() {
    let mut f = Framer::new();
    let err = f
        .feed(b"data: \xFF\n", |_| ControlFlow::Continue(()))
        .unwrap_err();
    let mut called = false;
    let again = f.feed(b"data: fine\n\n", |_| {
        called = true;
        ControlFlow::Continue(())
    });
    assert_eq!(again, Err(err));
    assert!(!called);
    f.finish();
    assert_eq!(
        run_with(&mut f, &[b"data: fine\n\n"]),
        (vec![ev("fine", 1, 0)], None)
    );
}

// --------------------------------------------------------------- tail/finish

#[test]
fn finish_clean_end() {
    let mut f = Framer::new();
    run_with(&mut f, &[b"data: a\n\n: trailing comment\r\n"]);
    assert_eq!(
        f.finish(),
        Tail {
            pending_bytes: 0,
            pending_data: None,
            partial_line: vec![],
            line: 4,
            offset: 29,
            complete_lines: true
        }
    );
}

#[test]
fn finish_empty_stream() {
    let tail = Framer::new().finish();
    assert!(tail.is_clean() && tail.complete_lines);
    assert_eq!((tail.line, tail.offset), (1, 0));
}

#[test]
fn finish_unterminated_event() {
    let mut f = Framer::new();
    let (events, _) = run_with(&mut f, &[b"data: 1\n\nevent: x\ndata: [DONE]\r"]);
    assert_eq!(events.len(), 1);
    assert_eq!(
        f.finish(),
        Tail {
            pending_bytes: 22,
            pending_data: Some("[DONE]".into()),
            partial_line: vec![],
            line: 3,
            offset: 9,
            complete_lines: true
        }
    );
}

#[test]
fn finish_event_without_data() {
    let mut f = Framer::new();
    run_with(&mut f, &[b"id: 3\n"]);
    let tail = f.finish();
    assert_eq!(
        (tail.pending_bytes, tail.pending_data, tail.complete_lines),
        (6, None, true)
    );
}

#[test]
fn finish_partial_line() {
    let mut f = Framer::new();
    run_with(&mut f, &[b"data: 1\n\ndata: [DO", b"NE"]);
    assert_eq!(
        f.finish(),
        Tail {
            pending_bytes: 11,
            pending_data: None,
            partial_line: b"data: [DONE".to_vec(),
            line: 3,
            offset: 9,
            complete_lines: false
        }
    );
}

#[test]
fn finish_partial_line_after_complete_field_lines() {
    let mut f = Framer::new();
    run_with(&mut f, &[b"data: a\ndata: b\nda"]);
    assert_eq!(
        f.finish(),
        Tail {
            pending_bytes: 18,
            pending_data: Some("a\nb".into()),
            partial_line: b"da".to_vec(),
            line: 1,
            offset: 0,
            complete_lines: false
        }
    );
}

#[test]
fn finish_resets_for_a_new_stream() {
    let mut f = Framer::with_max_event_size(1000);
    run_with(&mut f, &[b"id: 1\nretry: 5\ndata: a\n\ndata: partial"]);
    f.finish();
    assert_eq!(f.position(), Position { line: 1, offset: 0 });
    assert_eq!((f.last_event_id(), f.reconnection_time()), (None, None));
    assert_eq!(f.max_event_size(), 1000);
    assert_eq!(
        run_with(&mut f, &[b"\xEF\xBB\xBFdata: b\n\n"]),
        (vec![ev("b", 1, 3)], None)
    );
}

// --------------------------------------------------------------------- misc

#[test]
fn debug_does_not_dump_buffers() {
    let mut f = Framer::new();
    run_with(&mut f, &[b"data: secret-ish payload\n"]);
    let dbg = format!("{f:?}");
    assert!(dbg.contains("pending_data_len: 18"), "{dbg}");
    assert!(!dbg.contains("payload"), "{dbg}");
}

#[test]
fn data_buffer_is_reused_without_growth() {
    let mut f = Framer::new();
    run_with(&mut f, &[b"data: 0123456789\n\n"]);
    let before = f.buffered_bytes();
    for _ in 0..100 {
        run_with(&mut f, &[b"data: 0123456789\n\n"]);
    }
    assert_eq!(f.buffered_bytes(), before);
}

// ---------------------------------------------------------------- tolerant mode (the default)

#[test]
fn data_lines_without_blank_lines_are_events_when_each_is_a_complete_object() {
    let input =
        b"data: {\"a\":\"}{\"}\r\n: note\r\ndata: {\"b\":[1,{\"c\":2}]} \r\ndata: [DONE]\r\n";
    let events = assert_split_invariant(input);
    assert_eq!(
        events,
        [
            ev("{\"a\":\"}{\"}", 1, 0),
            ev("{\"b\":[1,{\"c\":2}]} ", 3, 26)
        ]
    );
    let mut framer = Framer::new();
    run_with(&mut framer, &[input]);
    assert_eq!(framer.unterminated_events(), 2);
    assert_eq!(framer.first_unterminated_line(), Some(1));
    // The last one, [DONE], stays pending, as without the tolerant mode.
    assert_eq!(framer.finish().pending_data.as_deref(), Some("[DONE]"));
}

#[test]
fn an_object_spread_over_several_data_lines_stays_one_event() {
    let input = b"data: {\"a\":\ndata: 1}\ndata: {\"b\":2}\n\n";
    let mut framer = Framer::new();
    let (events, _) = run_with(&mut framer, &[input]);
    // The first two lines only together are an object: they wait; then each is applied.
    assert_eq!(datas(&events), ["{\"a\":\n1}", "{\"b\":2}"]);
    assert_eq!(framer.unterminated_events(), 1);
    // Not objects (strings, numbers, arrays, prefixes): joined, as WHATWG says.
    for input in [
        &b"data: 1\ndata: 2\n\n"[..],
        b"data: \"x\"\ndata: \"y\"\n\n",
        b"data: [1]\ndata: [2]\n\n",
        b"data: {\"a\":\"\\\"}\ndata: }\n\n",
        b"data: {} x\ndata: {}\n\n",
    ] {
        let mut framer = Framer::new();
        let (events, _) = run_with(&mut framer, &[input]);
        assert_eq!(events.len(), 1, "{}", String::from_utf8_lossy(input));
        assert_eq!(framer.unterminated_events(), 0);
    }
}

#[test]
fn strict_mode_keeps_the_whatwg_rules() {
    let input = b"data: {\"a\":1}\ndata: {\"b\":2}\n\n";
    let mut framer = Framer::new().strict(true);
    let (events, _) = run_with(&mut framer, &[input]);
    assert_eq!(datas(&events), ["{\"a\":1}\n{\"b\":2}"]);
    let mut framer = Framer::new().strict(true);
    run_with(&mut framer, &[b"data: {\"a\":1}\n"]);
    let mut late = Vec::new();
    let tail = framer.finish_with(|e| {
        late.push(e.to_owned());
        ControlFlow::Continue(())
    });
    assert!(late.is_empty());
    assert_eq!(tail.pending_data.as_deref(), Some("{\"a\":1}"));
    // finish() keeps the mode.
    assert!(framer.is_strict());
}

#[test]
fn at_the_end_a_pending_object_is_dispatched_but_not_a_partial_line() {
    let mut framer = Framer::new();
    run_with(&mut framer, &[b"data: {\"a\":1}\ndata: {\"b\":2}\n"]);
    let mut late = Vec::new();
    let tail = framer.finish_with(|e| {
        late.push(e.to_owned());
        ControlFlow::Continue(())
    });
    assert_eq!(late, [ev("{\"b\":2}", 2, 14)]);
    assert!(tail.is_clean());
    run_with(&mut framer, &[b"data: {\"a\":1}"]);
    let tail = framer.finish_with(|_| panic!("a partial line is not dispatched"));
    assert!(!tail.complete_lines);
}

#[test]
fn a_break_at_a_dispatch_without_blank_line_resumes_where_it_stopped() {
    let input = b"data: [DONE]\ndata: {\"late\":1}\n\n";
    let mut framer = Framer::new();
    let mut seen = Vec::new();
    let feed = framer
        .feed(input, |e| {
            seen.push(e.data.to_owned());
            ControlFlow::Break(())
        })
        .unwrap();
    // The line that dispatched [DONE] is consumed (and taken in).
    assert_eq!(feed, Feed::Stopped { consumed: 30 });
    assert_eq!(seen, ["[DONE]"]);
    run_with(&mut framer, &[&input[30..]]);
    assert_eq!(framer.finish().pending_bytes, 0);
}

// ---------------------------------------------------------------- work and line bounds

/// CPU time this thread has used (Linux: `/proc/thread-self/stat`, in clock ticks of
/// 10 ms), or `None` where it cannot be read.
fn thread_cpu() -> Option<std::time::Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(std::time::Duration::from_millis(ticks * 10))
}

/// Frames `input` in reads of 16 KiB with `framer`; the events' count and the error.
fn frame_in_reads(framer: &mut Framer, input: &[u8]) -> (usize, Option<SseError>) {
    let mut events = 0;
    for read in input.chunks(16 * 1024) {
        let fed = framer.feed(read, |_| {
            events += 1;
            ControlFlow::Continue(())
        });
        if let Err(e) = fed {
            return (events, Some(e));
        }
    }
    (events, None)
}

#[test]
fn an_event_of_many_empty_data_lines_costs_linear_time() {
    // 1 MiB of `data:` lines with nothing after the colon: one event of 209,715 lines,
    // every bound but the size lifted. Each line was once a scan of the whole pending data.
    let input = b"data:\n".repeat(1024 * 1024 / 5);
    for end in [&b"\n"[..], b"data: {\"a\":1}\n"] {
        let mut framer = Framer::with_max_event_size(2 << 20).max_lines(u32::MAX);
        let before = thread_cpu();
        let (events, err) = frame_in_reads(&mut framer, &input);
        assert_eq!((events, err), (0, None));
        let (events, err) = frame_in_reads(&mut framer, end);
        assert_eq!(err, None);
        assert_eq!(
            events,
            usize::from(end == b"\n"),
            "the blank line dispatches"
        );
        if let (Some(before), Some(after)) = (before, thread_cpu()) {
            let used = after - before;
            assert!(used < std::time::Duration::from_secs(1), "{used:?} of CPU");
        }
    }
}

#[test]
fn an_event_of_many_lines_of_one_object_costs_linear_time() {
    // An object opened and never closed, one line at a time, with `}` ending each line: the
    // pending data always looks like it may be complete.
    let mut input = b"data: {{\n".to_vec();
    input.extend(b"data: }\n".repeat(1024 * 1024 / 8));
    let mut framer = Framer::with_max_event_size(2 << 20).max_lines(u32::MAX);
    let before = thread_cpu();
    let (events, err) = frame_in_reads(&mut framer, &input);
    assert_eq!(err, None);
    assert!(
        events > 0,
        "the tolerant mode still dispatches the complete ones"
    );
    if let (Some(before), Some(after)) = (before, thread_cpu()) {
        let used = after - before;
        assert!(used < std::time::Duration::from_secs(1), "{used:?} of CPU");
    }
}

#[test]
fn five_mib_of_empty_data_lines_end_at_the_line_bound() {
    let input = b"data:\n".repeat(5 * 1024 * 1024 / 6);
    let mut framer = Framer::new();
    let (events, err) = frame_in_reads(&mut framer, &input);
    assert_eq!(events, 0);
    assert_eq!(
        err,
        Some(SseError::TooManyLines {
            limit: crate::DEFAULT_MAX_EVENT_LINES,
            line: 1,
            offset: 0
        })
    );
    let e = err.unwrap();
    assert!(e.to_string().contains("more than 65536 lines"), "{e}");
    // Poisoned, as the other errors are.
    assert_eq!(framer.feed(b"\n", |_| ControlFlow::Continue(())), Err(e));
}

#[test]
fn the_line_bound_counts_field_lines_of_one_event() {
    // Comments and blank lines do not count; each event starts again.
    let input = b": c\n: c\ndata: a\ndata: b\n: c\n\ndata: c\nevent: x\n\n";
    let mut framer = Framer::new().max_lines(2);
    assert_eq!(
        run_with(&mut framer, &[input]),
        (
            vec![
                ev("a\nb", 3, 8),
                OwnedEvent {
                    event: "x".into(),
                    ..ev("c", 7, 29)
                }
            ],
            None
        )
    );
    let mut framer = Framer::new().max_lines(2);
    let (events, err) = run_with(&mut framer, &[b"data: a\n\nid: 1\ndata: b\nretry: 5\n\n"]);
    assert_eq!(datas(&events), ["a"]);
    assert_eq!(
        err,
        Some(SseError::TooManyLines {
            limit: 2,
            line: 3,
            offset: 9
        })
    );
}
