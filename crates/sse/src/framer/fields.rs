//! Field interpretation (WHATWG "process the field", "dispatch the event"): one complete
//! line at a time into the pending event, dispatched at its blank line or, in the tolerant
//! mode, at the next `data:` line once the pending data is complete.

use std::ops::ControlFlow;

use memchr::memchr;

use super::State;
use crate::{DataLines, Event, SseError};

/// Whether data that grows at its end is one or more complete JSON objects (only whitespace
/// around and between them), checked structurally: brackets balance outside strings, and each
/// top-level value is an object. Not a validation; the caller parses the data anyway. Each
/// byte is looked at once, so asking after every line costs nothing more: an event of many
/// lines stays linear in its bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct ObjectScan {
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// A byte outside every object that may not be there: never complete objects again.
    invalid: bool,
    /// A form feed outside every object after the first value: only allowed at the very end
    /// (it is trimmed as whitespace there).
    form_feed: bool,
    /// The first byte that is not ASCII whitespace, if any yet.
    first: Option<u8>,
    /// The last byte that is not ASCII whitespace.
    last: u8,
    /// Bytes of the data taken in so far (see [`catch_up`](Self::catch_up)).
    upto: usize,
}

impl ObjectScan {
    /// Takes in the bytes appended to the data.
    pub(super) fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if b.is_ascii_whitespace() {
                if self.first.is_some() && !self.in_string && self.depth == 0 && b == 0x0C {
                    self.form_feed = true;
                }
                // Whitespace changes no state but a pending escape.
                if self.in_string {
                    self.escaped = false;
                }
                continue;
            }
            if self.first.is_none() {
                self.first = Some(b);
            }
            self.last = b;
            if self.form_feed {
                self.invalid = true;
            }
            if self.invalid {
                continue;
            }
            if self.in_string {
                match (self.escaped, b) {
                    (true, _) => self.escaped = false,
                    (false, b'\\') => self.escaped = true,
                    (false, b'"') => self.in_string = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' if self.depth > 0 => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' if self.depth > 0 => self.depth -= 1,
                // Outside every object: anything but whitespace and the next object's `{`.
                _ if self.depth == 0 => self.invalid = true,
                _ => {}
            }
        }
    }

    /// Takes in what `data` gained since the last call (it only grows until the scan is
    /// reset): the scan runs only when asked, so a stream whose events have their blank
    /// lines never pays for it.
    pub(super) fn catch_up(&mut self, data: &str) {
        if let Some(new) = data.as_bytes().get(self.upto..) {
            self.feed(new);
        }
        self.upto = data.len();
    }

    /// Whether the data taken in so far is one or more complete JSON objects.
    pub(super) fn complete(&self) -> bool {
        !self.invalid
            && self.first == Some(b'{')
            && self.last == b'}'
            && self.depth == 0
            && !self.in_string
    }
}

/// Whether the pending data may be dispatched without its blank line (tolerant mode): complete
/// JSON objects, or `[DONE]` alone on its one data line.
fn dispatchable_without_blank_line(st: &mut State) -> bool {
    if st.data_count == 1 && st.data.trim_ascii() == "[DONE]" {
        return true;
    }
    st.objects.catch_up(&st.data);
    st.objects.complete()
}

/// Runs of data lines remembered per event (see [`DataLines`]).
const MAX_DATA_RUNS: usize = 64;

impl State {
    /// Interprets one complete line (without its line end).
    #[inline]
    pub(super) fn line<F>(
        &mut self,
        line: &[u8],
        line_no: u64,
        line_offset: u64,
        on_event: &mut F,
    ) -> Result<ControlFlow<()>, SseError>
    where
        F: FnMut(Event<'_>) -> ControlFlow<()>,
    {
        let Some(&first) = line.first() else {
            return Ok(self.dispatch(on_event));
        };
        if self.data.len() + line.len() > self.max {
            let (line, offset) = self.event_start.unwrap_or((line_no, line_offset));
            return Err(SseError::EventTooLarge {
                limit: self.max,
                line,
                offset,
            });
        }
        // The fast check first; the standard library's names where invalid UTF-8 begins.
        let checked = simdutf8::basic::from_utf8(line).or_else(|_| std::str::from_utf8(line));
        let text = match checked {
            Ok(text) => text,
            Err(err) => {
                return Err(SseError::InvalidUtf8 {
                    line: line_no,
                    offset: line_offset,
                    byte_offset: line_offset + err.valid_up_to() as u64,
                });
            }
        };
        if first == b':' {
            return Ok(ControlFlow::Continue(()));
        }
        if self.event_start.is_none() {
            self.event_start = Some((line_no, line_offset));
        }
        if self.field_lines >= self.max_lines {
            let (line, offset) = self.event_start.unwrap_or((line_no, line_offset));
            return Err(SseError::TooManyLines {
                limit: self.max_lines,
                line,
                offset,
            });
        }
        let (name, value) = match memchr(b':', line) {
            Some(colon) => {
                let value = &text[colon + 1..];
                (&text[..colon], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (text, ""),
        };
        let mut flow = ControlFlow::Continue(());
        if name == "data" && self.has_data && !self.strict && dispatchable_without_blank_line(self)
        {
            // Tolerant mode: the pending event ended without its blank line.
            let (first, _) = self.event_start.unwrap_or((line_no, line_offset));
            self.note_unterminated(first);
            flow = self.dispatch(on_event);
            self.event_start = Some((line_no, line_offset));
        }
        self.field_lines += 1;
        match name {
            "data" => {
                let add = value.len() + usize::from(self.has_data);
                let len = self.data.len() + add;
                if len > self.data.capacity() {
                    // Grow geometrically, but never past the limit.
                    let cap = self
                        .data
                        .capacity()
                        .saturating_mul(2)
                        .max(len)
                        .min(self.max.max(len));
                    self.data.reserve_exact(cap - self.data.len());
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.has_data = true;
                self.data.push_str(value);
                let contiguous = self.data_runs.last().is_some_and(|&(first, index)| {
                    first + u64::from(self.data_count - index) == line_no
                });
                if !contiguous && self.data_runs.len() < MAX_DATA_RUNS {
                    self.data_runs.push((line_no, self.data_count));
                }
                self.data_count = self.data_count.saturating_add(1);
            }
            "event" => {
                self.event_type.clear();
                self.event_type.push_str(value);
            }
            // An ID containing NUL is ignored.
            "id" if memchr(0, value.as_bytes()).is_none() => {
                self.last_id.clear();
                self.last_id.push_str(value);
            }
            // ASCII digits only; values overflowing u64 are ignored.
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                if let Ok(ms) = value.parse::<u64>() {
                    self.retry = Some(ms);
                    self.reconnection_time = Some(ms);
                }
            }
            _ => {}
        }
        // A break from a dispatch without blank line comes after this line was taken in, so
        // that feeding can resume after it.
        Ok(flow)
    }

    pub(super) fn note_unterminated(&mut self, line: u64) {
        self.unterminated += 1;
        self.first_unterminated.get_or_insert(line);
    }

    /// Handles a blank line: dispatches the pending event if it has data, and
    /// resets the per-event state either way.
    #[inline]
    pub(super) fn dispatch<F>(&mut self, on_event: &mut F) -> ControlFlow<()>
    where
        F: FnMut(Event<'_>) -> ControlFlow<()>,
    {
        let flow = if self.has_data {
            let (line, offset) = self.event_start.unwrap_or_default();
            on_event(Event {
                event: &self.event_type,
                data: &self.data,
                id: (!self.last_id.is_empty()).then_some(self.last_id.as_str()),
                retry: self.retry,
                line,
                offset,
                data_lines: DataLines {
                    runs: &self.data_runs,
                },
            })
        } else {
            ControlFlow::Continue(())
        };
        self.data.clear();
        self.has_data = false;
        self.data_runs.clear();
        self.data_count = 0;
        self.objects = ObjectScan::default();
        self.field_lines = 0;
        self.event_type.clear();
        self.retry = None;
        self.event_start = None;
        flow
    }
}

#[cfg(test)]
mod tests {
    use super::ObjectScan;
    use proptest::prelude::*;

    /// The whole-string check the scan replaces, as it was: the reference.
    fn complete_objects(data: &str) -> bool {
        let bytes = data.trim_ascii().as_bytes();
        if bytes.first() != Some(&b'{') || bytes.last() != Some(&b'}') {
            return false;
        }
        let mut depth = 0usize;
        let mut in_string = false;
        let mut escaped = false;
        for &b in bytes {
            if in_string {
                match (escaped, b) {
                    (true, _) => escaped = false,
                    (false, b'\\') => escaped = true,
                    (false, b'"') => in_string = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' if depth > 0 => in_string = true,
                b'{' | b'[' => depth += 1,
                b'}' | b']' if depth > 0 => depth -= 1,
                b' ' | b'\t' | b'\n' | b'\r' if depth == 0 => {}
                _ if depth == 0 => return false,
                _ => {}
            }
        }
        depth == 0 && !in_string
    }

    fn scanned(parts: &[String]) -> bool {
        let mut scan = ObjectScan::default();
        for part in parts {
            scan.feed(part.as_bytes());
        }
        scan.complete()
    }

    #[test]
    fn known_cases() {
        for (data, want) in [
            ("{}", true),
            (" {\"a\":[1,{}]}\n{} ", true),
            ("\x0c{}\x0c", true),
            ("{}\x0c{}", false),
            ("{} []", false),
            ("{}[]{}", true),
            ("[DONE]", false),
            ("{\"a\":\"}\"", false),
            ("{\"a\\\" }\"}", true),
            ("", false),
            ("\n\n\n", false),
        ] {
            assert_eq!(complete_objects(data), want, "{data:?}");
            assert_eq!(scanned(&[data.to_owned()]), want, "{data:?}");
        }
    }

    proptest! {
        #[test]
        fn the_scan_agrees_with_the_whole_string_check(
            parts in proptest::collection::vec("[{}\\[\\]\"\\\\ \t\n\r\x0ca:0]{0,8}", 0..8)
        ) {
            let whole: String = parts.concat();
            prop_assert_eq!(scanned(&parts), complete_objects(&whole), "{:?}", whole);
        }
    }
}
