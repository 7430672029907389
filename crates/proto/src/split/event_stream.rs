//! AWS's binary event stream, the framing of Bedrock's ConverseStream: each message its
//! prelude (total length, headers' length, the prelude's CRC), its headers, its payload and
//! the message's CRC, read by AWS's own decoder (`aws-smithy-eventstream`). A message's
//! `:message-type` says what it is: an `event` (its `:event-type` the event's type, its
//! payload the event's JSON), an `exception` (`:exception-type`, its payload's `message`)
//! or an `error` (`:error-code`, `:error-message`), the last two the upstream's error.

use std::ops::ControlFlow;

use aws_smithy_eventstream::frame::read_message_from;
use aws_smithy_types::event_stream::{HeaderValue, Message};
use serde_json::{Value, json};

use choicewise_sse::DataLines;

use super::{Splitter, Step};
use crate::dialect::Dialect;
use crate::error::{Error, ErrorDetail, UpstreamError};

/// The prelude: the total length, the headers' length, the prelude's CRC.
const PRELUDE: usize = 12;
/// The smallest message: a prelude and the message's CRC.
const SMALLEST: usize = PRELUDE + 4;

/// Whether a stream whose first byte is `first` is an event stream: a message's total
/// length is a big-endian `u32` under 16 MiB, so its first byte is 0, which no
/// server-sent event begins with.
pub(crate) fn starts_an_event_stream(first: u8) -> bool {
    first == 0
}

/// One message of the stream, as the splitter reads it.
#[derive(Debug)]
pub(crate) enum Frame<'a> {
    /// An event: its type and its payload (JSON text).
    Event { kind: &'a str, payload: &'a str },
    /// The upstream's error, sent as an exception or an error message.
    Error(Error),
}

/// The framer of one event stream: the bytes of a message not yet whole, and where the
/// stream is.
#[derive(Debug)]
pub(crate) struct EventStream {
    pending: Vec<u8>,
    /// Messages read so far.
    messages: u64,
    /// The stream's offset of `pending`'s first byte.
    offset: u64,
    /// The largest message accepted, in bytes.
    max_message: usize,
}

impl EventStream {
    pub(crate) fn new(max_message: usize) -> EventStream {
        EventStream {
            pending: Vec::new(),
            messages: 0,
            offset: 0,
            max_message: max_message.max(SMALLEST),
        }
    }

    /// The bytes of a message begun but not whole.
    pub(crate) fn pending_bytes(&self) -> usize {
        self.pending.len()
    }

    /// The messages read so far, and the stream offset after them.
    pub(crate) fn position(&self) -> (u64, u64) {
        (self.messages, self.offset)
    }

    /// Reads every message `bytes` completes, giving each to `each` with its number (from
    /// 1) and offset, until `each` breaks. Whether it broke.
    ///
    /// # Errors
    ///
    /// A message whose length is out of bounds, whose CRC or headers are wrong, or whose
    /// payload is not UTF-8: [`ErrorDetail::EventStream`].
    pub(crate) fn feed(
        &mut self,
        bytes: &[u8],
        mut each: impl FnMut(Frame<'_>, u64, u64) -> ControlFlow<()>,
    ) -> Result<bool, Error> {
        // The usual read holds whole messages: they are read from it in place.
        let mut owned = std::mem::take(&mut self.pending);
        let input: &[u8] = if owned.is_empty() {
            bytes
        } else {
            owned.extend_from_slice(bytes);
            &owned
        };
        let mut at = 0;
        let mut stopped = false;
        let mut failed = None;
        while input.len() - at >= PRELUDE {
            let rest = &input[at..];
            let total = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            let (number, offset) = (self.messages + 1, self.offset + at as u64);
            if !(SMALLEST..=self.max_message).contains(&total) {
                failed = Some(framing(
                    number,
                    offset,
                    format!(
                        "a message of {total} bytes (from {SMALLEST} to {} allowed)",
                        self.max_message
                    ),
                ));
                break;
            }
            if rest.len() < total {
                break;
            }
            self.messages = number;
            at += total;
            let flow = match read_message_from(&rest[..total]) {
                Ok(message) => match frame(&message, number) {
                    Ok(frame) => each(frame, number, offset),
                    Err(what) => {
                        failed = Some(framing(number, offset, what));
                        break;
                    }
                },
                Err(e) => {
                    failed = Some(framing(number, offset, e.to_string()));
                    break;
                }
            };
            if flow.is_break() {
                stopped = true;
                break;
            }
        }
        self.offset += at as u64;
        if let Some(e) = failed {
            return Err(e);
        }
        if !stopped {
            // The start of the next message waits for the rest of it.
            if owned.is_empty() {
                self.pending.extend_from_slice(&bytes[at..]);
            } else {
                owned.drain(..at);
                self.pending = owned;
            }
        }
        Ok(stopped)
    }
}

impl Splitter {
    /// The stream's framing, from its first byte: its API's, when the API is given;
    /// else an AWS event stream when the byte begins one (its API then the one framed so),
    /// server-sent events otherwise.
    pub(super) fn choose_framing(&mut self, first: u8) {
        use crate::upstream::Framing;
        let event_stream = match self.dialect {
            Some(dialect) => dialect.api().framing() == Framing::EventStream,
            None => starts_an_event_stream(first),
        };
        if event_stream {
            self.event_stream = Some(Box::new(EventStream::new(self.max_event_size)));
            self.dialect = self.dialect.or_else(|| {
                (Dialect::ALL.into_iter()).find(|d| d.api().framing() == Framing::EventStream)
            });
        }
    }

    /// [`feed`](Self::feed) for an AWS event stream: each message's event read as a typed
    /// dialect's, an exception or error message the upstream's error.
    pub(super) fn feed_event_stream(&mut self, bytes: &[u8]) -> Step {
        let Some(mut stream) = self.event_stream.take() else {
            return Step::Continue;
        };
        let mut stop: Option<Result<(), Error>> = None;
        let fed = stream.feed(bytes, |frame, number, offset| {
            let read = match frame {
                Frame::Event { kind, payload } => {
                    self.event(kind, payload, number, offset, DataLines::default())
                }
                Frame::Error(e) => Err(e),
            };
            super::go_on(read, &mut stop)
        });
        self.event_stream = Some(stream);
        self.offset += bytes.len() as u64;
        match fed {
            Err(e) => Step::End(Err(e)),
            Ok(false) => Step::Continue,
            Ok(true) => Step::End(stop.unwrap_or(Ok(()))),
        }
    }

    /// [`end_of_input`](Splitter::end_of_input) of an event stream: fine if no message is
    /// begun and every choice finished, a truncation error otherwise.
    pub(super) fn end_of_event_stream(&mut self) -> Step {
        let Some(stream) = &self.event_stream else {
            return Step::End(Ok(()));
        };
        let ((messages, offset), pending_bytes) =
            (stream.position(), stream.pending_bytes() as u64);
        let unfinished = self.unfinished();
        if pending_bytes == 0 && unfinished.is_empty() {
            return Step::End(Ok(()));
        }
        Step::End(Err(Error::from(ErrorDetail::Truncated {
            line: messages,
            offset,
            pending_bytes,
            unfinished,
        })))
    }
}

fn framing(message: u64, offset: u64, what: String) -> Error {
    Error::from(ErrorDetail::EventStream {
        message,
        offset,
        what,
    })
}

/// The string value of header `name`, if the message has one.
fn header<'m>(message: &'m Message, name: &str) -> Option<&'m str> {
    (message.headers().iter())
        .find(|h| h.name().as_str() == name)
        .and_then(|h| match h.value() {
            HeaderValue::String(s) => Some(s.as_str()),
            _ => None,
        })
}

/// What a message is, by its `:message-type`.
fn frame(message: &Message, number: u64) -> Result<Frame<'_>, String> {
    let payload = std::str::from_utf8(message.payload())
        .map_err(|e| format!("a payload that is not UTF-8 ({e})"))?;
    match header(message, ":message-type") {
        Some("event") => {
            let kind = header(message, ":event-type")
                .ok_or_else(|| "an event without its :event-type header".to_string())?;
            Ok(Frame::Event { kind, payload })
        }
        Some("exception") => {
            let kind = header(message, ":exception-type").unwrap_or("exception");
            let parsed: Value = serde_json::from_str(payload).unwrap_or(Value::Null);
            let text = (parsed.get("message").or_else(|| parsed.get("Message")))
                .and_then(Value::as_str)
                .unwrap_or(payload);
            let value = json!({"type": kind, "message": text});
            Ok(Frame::Error(upstream(&value, number)))
        }
        Some("error") => {
            let code = header(message, ":error-code").unwrap_or("error");
            let text = header(message, ":error-message").unwrap_or(payload);
            let value = json!({"type": code, "message": text});
            Ok(Frame::Error(upstream(&value, number)))
        }
        Some(other) => Err(format!("a message of type {other:?}")),
        None => Err("a message without its :message-type header".to_string()),
    }
}

fn upstream(value: &Value, number: u64) -> Error {
    Error::from(ErrorDetail::Upstream(std::sync::Arc::new(
        UpstreamError::from_value(value, number),
    )))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use aws_smithy_eventstream::frame::write_message_to;
    use aws_smithy_types::event_stream::Header;

    /// One event message, framed.
    pub(crate) fn event(kind: &str, payload: &Value) -> Vec<u8> {
        message(
            &[(":event-type", kind), (":message-type", "event")],
            payload,
        )
    }

    pub(crate) fn message(headers: &[(&str, &str)], payload: &Value) -> Vec<u8> {
        let mut m = Message::new(payload.to_string().into_bytes());
        for (name, value) in headers {
            m = m.add_header(Header::new(
                name.to_string(),
                HeaderValue::String(value.to_string().into()),
            ));
        }
        let mut out = Vec::new();
        write_message_to(&m, &mut out).unwrap();
        out
    }

    fn read_all(stream: &mut EventStream, bytes: &[u8]) -> Result<Vec<String>, Error> {
        let mut seen = Vec::new();
        stream.feed(bytes, |frame, number, _| {
            seen.push(match frame {
                Frame::Event { kind, payload } => format!("{number} {kind} {payload}"),
                Frame::Error(e) => format!("{number} error {e}"),
            });
            ControlFlow::Continue(())
        })?;
        Ok(seen)
    }

    #[test]
    fn messages_split_anywhere_are_read_whole_in_order() {
        let mut bytes = event("messageStart", &json!({"role": "assistant"}));
        bytes.extend(event(
            "contentBlockDelta",
            &json!({"delta": {"text": "Hi"}}),
        ));
        bytes.extend(message(
            &[
                (":message-type", "exception"),
                (":exception-type", "throttlingException"),
            ],
            &json!({"message": "slow down"}),
        ));
        let whole = read_all(&mut EventStream::new(1 << 20), &bytes).unwrap();
        assert_eq!(whole.len(), 3);
        assert!(whole[2].contains("slow down"), "{whole:?}");
        for cut in 1..bytes.len() {
            let mut stream = EventStream::new(1 << 20);
            let mut seen = read_all(&mut stream, &bytes[..cut]).unwrap();
            seen.extend(read_all(&mut stream, &bytes[cut..]).unwrap());
            assert_eq!(seen, whole, "cut at {cut}");
            assert_eq!(stream.pending_bytes(), 0);
        }
        let mut stream = EventStream::new(1 << 20);
        let mut seen = Vec::new();
        for b in &bytes {
            seen.extend(read_all(&mut stream, std::slice::from_ref(b)).unwrap());
        }
        assert_eq!(seen, whole);
        assert_eq!(stream.position(), (3, bytes.len() as u64));
    }

    /// A Bedrock answer: reasoning, text, a tool call, its stop and usage.
    fn answer(stop: Option<&str>) -> Vec<u8> {
        let mut events = vec![
            event("messageStart", &json!({"role": "assistant", "p": "abcd"})),
            event(
                "contentBlockDelta",
                &json!({"contentBlockIndex": 0, "delta": {"text": "Hello"}}),
            ),
            event(
                "contentBlockDelta",
                &json!({"contentBlockIndex": 0, "delta": {"text": " there"}}),
            ),
            event("contentBlockStop", &json!({"contentBlockIndex": 0})),
            event(
                "contentBlockStart",
                &json!({"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "tu1", "name": "sh"}}}),
            ),
            event(
                "contentBlockDelta",
                &json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": "{\"cmd\": \"ls\"}"}}}),
            ),
            event("contentBlockStop", &json!({"contentBlockIndex": 1})),
        ];
        if let Some(stop) = stop {
            events.push(event("messageStop", &json!({"stopReason": stop})));
            events.push(event(
                "metadata",
                &json!({"usage": {"inputTokens": 9, "outputTokens": 4, "totalTokens": 13}}),
            ));
        }
        events.concat()
    }

    #[test]
    fn a_bedrock_stream_is_one_choice_whether_its_api_is_given_or_recognised() {
        use crate::{Demux, Dialect, StreamConfig};
        for dialect in [Some(Dialect::Bedrock), None] {
            let config = StreamConfig {
                dialect,
                ..StreamConfig::default()
            };
            let mut demux = Demux::with_config(config);
            for piece in answer(Some("tool_use")).chunks(5) {
                demux.feed(piece).unwrap();
            }
            let done = demux.finish().unwrap();
            let choice = &done.choices[0];
            assert_eq!(choice.message.content.as_deref(), Some("Hello there"));
            let call = &choice.message.tool_calls[0];
            assert_eq!(
                (call.id.as_str(), call.function.name.as_str()),
                ("tu1", "sh")
            );
            assert_eq!(call.function.arguments, "{\"cmd\": \"ls\"}");
            assert_eq!(choice.finish_reason.as_deref(), Some("tool_calls"));
        }
        // Cut before its stop: the choice is unfinished, the stream truncated.
        let mut demux = Demux::with_config(StreamConfig::default());
        let cut = answer(None);
        demux.feed(&cut[..cut.len() - 3]).unwrap();
        let e = demux.finish().unwrap_err();
        assert!(
            matches!(e.error.detail(), ErrorDetail::Truncated { pending_bytes, .. } if *pending_bytes > 0),
            "{e}"
        );
        // An exception after some text: the upstream's error, named.
        let mut bytes = answer(None);
        bytes.extend(message(
            &[
                (":message-type", "exception"),
                (":exception-type", "modelStreamErrorException"),
            ],
            &json!({"message": "the model failed"}),
        ));
        let mut demux = Demux::with_config(StreamConfig::default());
        let e = demux.feed(&bytes).unwrap_err();
        assert!(
            matches!(e.detail(), ErrorDetail::Upstream(u)
                if u.kind.as_deref() == Some("modelStreamErrorException") && u.message == "the model failed"),
            "{e}"
        );
    }

    #[test]
    fn a_bad_crc_a_huge_length_and_a_missing_type_are_framing_errors() {
        let mut bytes = event("messageStart", &json!({}));
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let e = read_all(&mut EventStream::new(1 << 20), &bytes).unwrap_err();
        assert!(
            matches!(
                e.detail(),
                ErrorDetail::EventStream {
                    message: 1,
                    offset: 0,
                    ..
                }
            ),
            "{e}"
        );
        let huge = [0, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let e = read_all(&mut EventStream::new(1 << 20), &huge).unwrap_err();
        assert!(e.to_string().contains("4194304 bytes"), "{e}");
        let untyped = message(&[(":event-type", "x")], &json!({}));
        let e = read_all(&mut EventStream::new(1 << 20), &untyped).unwrap_err();
        assert!(e.to_string().contains(":message-type"), "{e}");
    }
}
