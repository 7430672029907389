//! Shared helpers for the integration tests: input generators, a driver, and
//! a slow reference model of the WHATWG event-stream interpretation.
#![allow(dead_code)]

use std::ops::ControlFlow;

use choicewise_sse::{Feed, Framer, OwnedEvent, Position, SseError, Tail};
use proptest::prelude::*;
use proptest::sample::Index;

/// Everything observable about framing one stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub events: Vec<OwnedEvent>,
    pub error: Option<SseError>,
    /// Position and tail at the end, only when there was no error.
    pub end: Option<(Position, Tail)>,
}

/// Feeds `pieces` in order (continuing after every event), then finishes, in strict WHATWG
/// mode (what the reference model implements).
pub fn frame(max: usize, pieces: &[&[u8]]) -> Outcome {
    frame_in(true, max, pieces)
}

/// [`frame`] in the given mode; the end is `finish_with` (which, in the tolerant mode, may
/// dispatch a last event without its blank line).
pub fn frame_in(strict: bool, max: usize, pieces: &[&[u8]]) -> Outcome {
    let mut framer = Framer::with_max_event_size(max).strict(strict);
    let mut events = Vec::new();
    for piece in pieces {
        let res = framer.feed(piece, |ev| {
            events.push(ev.to_owned());
            ControlFlow::Continue(())
        });
        match res {
            Ok(Feed::Consumed) => {}
            Ok(Feed::Stopped { .. }) => panic!("never asked to stop"),
            Err(error) => {
                // Poisoned: the same error again, no events.
                let again = framer.feed(b"data: x\n\n", |_| panic!("poisoned framer dispatched"));
                assert_eq!(again.as_ref(), Err(&error));
                return Outcome {
                    events,
                    error: Some(error),
                    end: None,
                };
            }
        }
    }
    let position = framer.position();
    let tail = framer.finish_with(|ev| {
        events.push(ev.to_owned());
        ControlFlow::Continue(())
    });
    Outcome {
        events,
        error: None,
        end: Some((position, tail)),
    }
}

/// Feeds `pieces` but asks to stop after every event, re-feeding the rest of
/// the piece each time (strict mode).
pub fn frame_stopping(max: usize, pieces: &[&[u8]]) -> Outcome {
    frame_stopping_in(true, max, pieces)
}

/// [`frame_stopping`] in the given mode.
pub fn frame_stopping_in(strict: bool, max: usize, pieces: &[&[u8]]) -> Outcome {
    let mut framer = Framer::with_max_event_size(max).strict(strict);
    let mut events = Vec::new();
    for piece in pieces {
        let mut rest: &[u8] = piece;
        loop {
            let mut got = 0;
            let res = framer.feed(rest, |ev| {
                events.push(ev.to_owned());
                got += 1;
                ControlFlow::Break(())
            });
            match res {
                Ok(Feed::Consumed) => {
                    assert_eq!(got, 0);
                    break;
                }
                Ok(Feed::Stopped { consumed }) => {
                    assert_eq!(got, 1);
                    assert!(consumed <= rest.len());
                    rest = &rest[consumed..];
                }
                Err(error) => {
                    return Outcome {
                        events,
                        error: Some(error),
                        end: None,
                    };
                }
            }
        }
    }
    let position = framer.position();
    let tail = framer.finish_with(|ev| {
        events.push(ev.to_owned());
        ControlFlow::Continue(())
    });
    Outcome {
        events,
        error: None,
        end: Some((position, tail)),
    }
}

/// Cuts `input` at the given (unsorted, possibly repeated) points.
pub fn split_at<'a>(input: &'a [u8], cuts: &[Index]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts.iter().map(|i| i.index(input.len() + 1)).collect();
    points.sort_unstable();
    let mut pieces = Vec::with_capacity(points.len() + 1);
    let mut prev = 0;
    for p in points {
        pieces.push(&input[prev..p]);
        prev = p;
    }
    pieces.push(&input[prev..]);
    pieces
}

/// Loose pieces of a realistic event stream, for "token soup" lines.
const TOKENS: &[(u32, &[u8])] = &[
    (6, b"data"),
    (2, b"event"),
    (2, b"id"),
    (2, b"retry"),
    (1, b"foo"),
    (6, b":"),
    (6, b" "),
    (5, b"\n"),
    (4, b"\r"),
    (4, b"\r\n"),
    (3, b"x"),
    (2, b"12"),
    (2, b"[DONE]"),
    (2, b"{\"a\":1}"),
    (2, "\u{e9}".as_bytes()),
    (2, "\u{1F600}".as_bytes()),
    (2, b"\xEF\xBB\xBF"),
    (1, b"\0"),
];

/// Field names, including unknown and near-miss ones.
const NAMES: &[&[u8]] = &[
    b"data", b"data", b"data", b"event", b"id", b"retry", b"foo", b"", b"Data", b"data ",
];

/// What may follow a field name.
const SEPARATORS: &[&[u8]] = &[b": ", b": ", b":", b":  ", b""];

/// Pieces of field values.
const VALUES: &[&[u8]] = &[
    b"x",
    b"12",
    b"0",
    b"[DONE]",
    b"{\"a\":1}",
    b":",
    b" ",
    "\u{e9}".as_bytes(),
    "\u{1F600}".as_bytes(),
    b"\xEF\xBB\xBF",
    b"\0",
];

/// Line ends.
const ENDS: &[&[u8]] = &[b"\n", b"\n", b"\r", b"\r\n"];

/// Raw bytes that make lines invalid UTF-8 (a lone BOM byte among them).
const BROKEN: &[&[u8]] = &[b"\xFF", b"\xC3", b"\xF0\x9F", b"\xEF", b"\xBB"];

fn concat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// One line (or a few, for token soup) of a stream.
fn line(broken: bool) -> BoxedStrategy<Vec<u8>> {
    use proptest::sample::select;
    let value_weighted: Vec<(u32, BoxedStrategy<&'static [u8]>)> =
        std::iter::once((10, select(VALUES).boxed()))
            .chain(broken.then(|| (1, select(BROKEN).boxed())))
            .collect();
    let value = proptest::strategy::Union::new_weighted(value_weighted);
    let field = (
        select(NAMES),
        select(SEPARATORS),
        proptest::collection::vec(value.clone(), 0..4),
        select(ENDS),
    )
        .prop_map(|(name, sep, value, end)| {
            let mut out = concat(&[name, sep]);
            out.extend(value.concat());
            out.extend_from_slice(end);
            out
        });
    let comment = (proptest::collection::vec(value, 0..3), select(ENDS)).prop_map(|(v, end)| {
        let mut out = b":".to_vec();
        out.extend(v.concat());
        out.extend_from_slice(end);
        out
    });
    let mut soup_weighted: Vec<(u32, BoxedStrategy<&'static [u8]>)> =
        TOKENS.iter().map(|&(w, t)| (w, Just(t).boxed())).collect();
    if broken {
        soup_weighted.push((2, select(BROKEN).boxed()));
    }
    let soup =
        proptest::collection::vec(proptest::strategy::Union::new_weighted(soup_weighted), 0..8)
            .prop_map(|t| t.concat());
    prop_oneof![
        8 => field,
        4 => select(ENDS).prop_map(<[u8]>::to_vec),
        1 => comment,
        1 => soup,
    ]
    .boxed()
}

/// A stream of mostly well-formed lines from a realistic alphabet, sometimes
/// starting with a BOM, sometimes ending inside a line, and (when `broken`)
/// sometimes containing invalid UTF-8.
pub fn stream(broken: bool) -> impl Strategy<Value = Vec<u8>> {
    (
        any::<bool>(),
        proptest::collection::vec(line(broken), 0..24),
        proptest::option::of(line(broken)),
    )
        .prop_map(|(bom, lines, last)| {
            let mut out = Vec::new();
            if bom {
                out.extend_from_slice(b"\xEF\xBB\xBF");
            }
            for l in lines {
                out.extend(l);
            }
            if let Some(mut last) = last {
                // Maybe cut the last line short.
                if last.len() > 1 && last.len() % 2 == 0 {
                    last.truncate(last.len() / 2);
                }
                out.extend(last);
            }
            out
        })
}

/// A maximum event size: usually large, sometimes small enough to trigger.
pub fn max_size() -> impl Strategy<Value = usize> {
    prop_oneof![3 => Just(choicewise_sse::DEFAULT_MAX_EVENT_SIZE), 1 => 0usize..40]
}

// ------------------------------------------------------------------ the model

struct Line<'a> {
    bytes: &'a [u8],
    number: u64,
    offset: u64,
    terminated: bool,
}

/// Splits the whole input into lines (after removing a leading BOM).
fn lines(input: &[u8]) -> Vec<Line<'_>> {
    let (body, base) = match input.strip_prefix(b"\xEF\xBB\xBF") {
        Some(body) => (body, 3),
        None => (input, 0),
    };
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < body.len() {
        let end_len = match (body[i], body.get(i + 1)) {
            (b'\r', Some(b'\n')) => 2,
            (b'\r', _) | (b'\n', _) => 1,
            _ => {
                i += 1;
                continue;
            }
        };
        out.push(Line {
            bytes: &body[start..i],
            number: out.len() as u64 + 1,
            offset: (base + start) as u64,
            terminated: true,
        });
        i += end_len;
        start = i;
    }
    if start < body.len() {
        out.push(Line {
            bytes: &body[start..],
            number: out.len() as u64 + 1,
            offset: (base + start) as u64,
            terminated: false,
        });
    }
    out
}

/// The obviously-correct (and slow) interpretation of a whole stream.
pub fn model(input: &[u8], max: usize) -> Outcome {
    let lines = lines(input);
    let mut events = Vec::new();
    let mut data: Vec<String> = Vec::new();
    let mut event = String::new();
    let mut last_id = String::new();
    let mut retry = None;
    let mut start: Option<(u64, u64)> = None;
    let mut line_count = 0;
    for line in &lines {
        let data_len = data
            .iter()
            .map(|d| d.len() + 1)
            .sum::<usize>()
            .saturating_sub(1);
        if !line.bytes.is_empty() && data_len + line.bytes.len() > max {
            let (l, o) = start.unwrap_or((line.number, line.offset));
            let error = SseError::EventTooLarge {
                limit: max,
                line: l,
                offset: o,
            };
            return Outcome {
                events,
                error: Some(error),
                end: None,
            };
        }
        if !line.terminated {
            break;
        }
        line_count += 1;
        if line.bytes.is_empty() {
            if !data.is_empty() {
                let (l, o) = start.unwrap();
                events.push(OwnedEvent {
                    event: event.clone(),
                    data: data.join("\n"),
                    id: if last_id.is_empty() {
                        None
                    } else {
                        Some(last_id.clone())
                    },
                    retry,
                    line: l,
                    offset: o,
                });
            }
            data.clear();
            event.clear();
            retry = None;
            start = None;
            continue;
        }
        let text = match std::str::from_utf8(line.bytes) {
            Ok(text) => text,
            Err(e) => {
                let error = SseError::InvalidUtf8 {
                    line: line.number,
                    offset: line.offset,
                    byte_offset: line.offset + e.valid_up_to() as u64,
                };
                return Outcome {
                    events,
                    error: Some(error),
                    end: None,
                };
            }
        };
        if text.starts_with(':') {
            continue;
        }
        start.get_or_insert((line.number, line.offset));
        let (name, value) = match text.split_once(':') {
            Some((n, v)) => (n, v.strip_prefix(' ').unwrap_or(v)),
            None => (text, ""),
        };
        match name {
            "data" => data.push(value.to_owned()),
            "event" => event = value.to_owned(),
            "id" if !value.contains('\0') => last_id = value.to_owned(),
            "retry" if !value.is_empty() && value.chars().all(|c| c.is_ascii_digit()) => {
                if let Ok(v) = value.parse() {
                    retry = Some(v);
                }
            }
            _ => {}
        }
    }
    let partial = lines.last().filter(|l| !l.terminated);
    let position = Position {
        line: line_count + 1,
        offset: input.len() as u64,
    };
    let tail_start = start.or(partial.map(|l| (l.number, l.offset)));
    let tail = match tail_start {
        None => Tail {
            pending_bytes: 0,
            pending_data: None,
            partial_line: vec![],
            line: position.line,
            offset: position.offset,
            complete_lines: true,
        },
        Some((line, offset)) => Tail {
            pending_bytes: input.len() as u64 - offset,
            pending_data: (!data.is_empty()).then(|| data.join("\n")),
            partial_line: partial.map(|l| l.bytes.to_vec()).unwrap_or_default(),
            line,
            offset,
            complete_lines: partial.is_none(),
        },
    };
    Outcome {
        events,
        error: None,
        end: Some((position, tail)),
    }
}
