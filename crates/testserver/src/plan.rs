//! What one streamed response writes: the body cut into writes, keep-alive comments between
//! events, a delay before each write. Pure and deterministic for a seed.

use std::time::Duration;

use bytes::Bytes;

/// A small deterministic generator (SplitMix64): enough for test schedules, no dependency.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi` (`lo` if `hi <= lo`).
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// True with probability `1 / n`.
    pub(crate) fn one_in(&mut self, n: u64) -> bool {
        n != 0 && self.next_u64().is_multiple_of(n)
    }
}

/// The keep-alive comment inserted between events.
pub(crate) const PING: &[u8] = b": ping\n\n";

/// How the body is cut and paced.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    pub seed: u64,
    /// Write sizes, uniform in this range; `None`: the whole body in one write.
    pub writes: Option<(usize, usize)>,
    /// Prefer cutting inside multi-byte UTF-8 characters.
    pub split_utf8: bool,
    /// The delay before each write, uniform in `0..=max`.
    pub max_delay: Duration,
    /// A keep-alive comment after an event with probability `1 / n` (`None`: never).
    pub pings: Option<u64>,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            seed: 0,
            writes: None,
            split_utf8: true,
            max_delay: Duration::ZERO,
            pings: None,
        }
    }
}

/// One write of a response body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Write {
    pub delay: Duration,
    pub bytes: Bytes,
}

/// The ends of the events of an SSE body: offsets just after each blank line (`\n\n`,
/// `\r\n\r\n`, `\r\r`, in any mix), where a keep-alive comment can go without changing the
/// events. The very end of the body is not included.
pub(crate) fn event_ends(body: &[u8]) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut line_start = 0;
    let mut i = 0;
    while i < body.len() {
        let b = body[i];
        if b == b'\n' || b == b'\r' {
            let mut next = i + 1;
            if b == b'\r' && body.get(next) == Some(&b'\n') {
                next += 1;
            }
            if i == line_start && next < body.len() {
                ends.push(next);
            }
            line_start = next;
            i = next;
        } else {
            i += 1;
        }
    }
    ends
}

/// The body with keep-alive comments inserted between events.
pub(crate) fn with_pings(body: &[u8], every: Option<u64>, rng: &mut Rng) -> Vec<u8> {
    let Some(every) = every else {
        return body.to_vec();
    };
    let mut out = Vec::with_capacity(body.len() + body.len() / 8);
    let mut from = 0;
    for end in event_ends(body) {
        out.extend_from_slice(&body[from..end]);
        from = end;
        if rng.one_in(every) {
            out.extend_from_slice(PING);
        }
    }
    out.extend_from_slice(&body[from..]);
    out
}

/// Cuts `body` into writes as `shape` says.
pub(crate) fn plan(body: &[u8], shape: &Shape) -> Vec<Write> {
    let mut rng = Rng::new(shape.seed);
    let body = Bytes::from(with_pings(body, shape.pings, &mut rng));
    let max_delay = shape.max_delay.as_micros() as u64;
    let mut writes = Vec::new();
    let mut pos = 0;
    while pos < body.len() {
        let mut end = match shape.writes {
            None => body.len(),
            Some((lo, hi)) => {
                let size = rng.range(lo.max(1) as u64, hi.max(1) as u64) as usize;
                (pos + size).min(body.len())
            }
        };
        if shape.split_utf8 && shape.writes.is_some() && rng.one_in(2) {
            // Cut just after the first byte of a multi-byte character in this write, if any.
            if let Some(lead) = body[pos..end].iter().position(|&b| b >= 0xC0) {
                end = pos + lead + 1;
            }
        }
        let delay = Duration::from_micros(rng.range(0, max_delay));
        writes.push(Write {
            delay,
            bytes: body.slice(pos..end),
        });
        pos = end;
    }
    writes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(writes: &[Write]) -> Vec<u8> {
        writes
            .iter()
            .flat_map(|w| w.bytes.iter().copied())
            .collect()
    }

    #[test]
    fn event_ends_in_any_line_ending() {
        assert_eq!(event_ends(b"data: a\n\ndata: b\n\n"), vec![9]);
        assert_eq!(event_ends(b"data: a\r\n\r\ndata: b\r\n\r\n"), vec![11]);
        assert_eq!(event_ends(b"data: a\r\rdata: b\n\n"), vec![9]);
        // A blank line first is an event end too (an empty block), the end of input is not.
        assert_eq!(event_ends(b"\ndata: a\n\n"), vec![1]);
        assert!(event_ends(b"data: a\ndata: b\n").is_empty());
    }

    #[test]
    fn pings_only_between_events() {
        let body = b"data: a\n\ndata: b\r\n\r\ndata: [DONE]\n\n";
        let mut rng = Rng::new(1);
        let out = with_pings(body, Some(1), &mut rng);
        assert_eq!(
            out,
            b"data: a\n\n: ping\n\ndata: b\r\n\r\n: ping\n\ndata: [DONE]\n\n".to_vec()
        );
    }

    #[test]
    fn writes_cover_the_body_and_are_deterministic() {
        let body = "data: {\"content\":\"café — 😀\"}\n\n".repeat(20);
        let shape = Shape {
            seed: 7,
            writes: Some((1, 9)),
            split_utf8: true,
            max_delay: Duration::from_millis(1),
            pings: None,
        };
        let a = plan(body.as_bytes(), &shape);
        assert_eq!(joined(&a), body.as_bytes());
        assert_eq!(a, plan(body.as_bytes(), &shape));
        assert!(a.iter().all(|w| !w.bytes.is_empty() && w.bytes.len() <= 9));
        assert!(a.iter().all(|w| w.delay <= Duration::from_millis(1)));
        // Some writes end inside a multi-byte character.
        let split = a
            .iter()
            .filter(|w| std::str::from_utf8(&w.bytes).is_err())
            .count();
        assert!(split > 5, "{split}");
        let other = plan(body.as_bytes(), &Shape { seed: 8, ..shape });
        assert_ne!(a, other);
    }

    #[test]
    fn one_write_by_default() {
        let w = plan(b"data: [DONE]\n\n", &Shape::default());
        assert_eq!(w.len(), 1);
        assert!(plan(b"", &Shape::default()).is_empty());
    }
}
