//! Recordings: a stream's raw SSE bytes with the time each event arrived (`docs/recording.md`).
//!
//! A recording is plain SSE that any SSE reader can read: a header comment, then the bytes as
//! received, with a timing comment before the first line of each event:
//!
//! ```text
//! : choicewise-recording v1
//! : t=412.375
//! data: {"choices":[{"index":2,"delta":{"content":"Lis"}}]}
//!
//! : t=430.002
//! data: [DONE]
//!
//! ```
//!
//! [`Recorder`] writes one from the reads of a stream and their arrival times; [`Unstamper`]
//! takes a recording apart again (the original bytes and the stamps) and [`play`] turns it into
//! a byte stream that honours the stamps at a speed factor.

use std::io::{self, Write};
use std::time::{Duration, Instant};

use futures::Stream;
use tokio::io::{AsyncRead, AsyncReadExt};

/// The first line of a recording.
pub const HEADER: &str = ": choicewise-recording v1";
/// The start of a timing comment; milliseconds follow.
const STAMP: &[u8] = b": t=";
/// A stamp line is short; a longer candidate is an ordinary comment.
const MAX_STAMP_LINE: usize = 32;
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Where the line scanner is, shared by the writer and the reader.
#[derive(Debug, Clone, Copy)]
struct Lines {
    /// The previous line was blank (or nothing came yet): the next non-blank line starts an
    /// event.
    between_events: bool,
    /// The next byte starts a line.
    at_line_start: bool,
    /// The last byte was a CR: an LF now belongs to the same line end.
    after_cr: bool,
}

impl Lines {
    fn new() -> Self {
        Lines {
            between_events: true,
            at_line_start: true,
            after_cr: false,
        }
    }

    /// Advances over one byte; returns true when it is the first byte of an event's first line.
    fn step(&mut self, b: u8) -> bool {
        if std::mem::take(&mut self.after_cr) && b == b'\n' {
            return false; // the LF of a CRLF: the line has already ended
        }
        let eol = b == b'\r' || b == b'\n';
        self.after_cr = b == b'\r';
        if self.at_line_start {
            if eol {
                self.between_events = true; // a blank line: the event (if any) is over
                return false;
            }
            self.at_line_start = false;
            return std::mem::replace(&mut self.between_events, false);
        }
        if eol {
            self.at_line_start = true;
        }
        false
    }
}

/// Writes a recording: the header, then every read's bytes exactly as received, each event
/// preceded by `: t=<ms>` — the time, since `start`, of the read that brought the event's
/// first byte.
///
/// ```ignore
/// let mut rec = Recorder::new(Vec::new(), start);
/// rec.write(b"data: {}\n\n", start + Duration::from_millis(5))?;
/// assert_eq!(rec.finish()?, b": choicewise-recording v1\n: t=5.000\ndata: {}\n\n");
/// ```
#[derive(Debug)]
pub struct Recorder<W: Write> {
    out: W,
    start: Instant,
    header_written: bool,
    /// The first bytes, held while they may be the start of a byte-order mark, with the
    /// arrival of the read that brought them.
    held: Option<(Vec<u8>, Instant)>,
    lines: Lines,
}

impl<W: Write> Recorder<W> {
    /// A recorder whose stamps count from `start` (when the request was sent).
    pub fn new(out: W, start: Instant) -> Self {
        Recorder {
            out,
            start,
            header_written: false,
            held: None,
            lines: Lines::new(),
        }
    }

    /// Writes the header, after a byte-order mark if the stream starts with one (a BOM is only
    /// honoured at the very start of a stream, so it stays there).
    fn header(&mut self, bom: bool) -> io::Result<()> {
        self.header_written = true;
        if bom {
            self.out.write_all(BOM)?;
        }
        self.out.write_all(HEADER.as_bytes())?;
        self.out.write_all(b"\n")
    }

    /// Records one read, which arrived at `arrived`.
    pub fn write(&mut self, bytes: &[u8], arrived: Instant) -> io::Result<()> {
        if self.header_written {
            return self.scan(bytes, arrived);
        }
        let (mut first, first_arrived) = self.held.take().unwrap_or((Vec::new(), arrived));
        first.extend_from_slice(bytes);
        if first.len() < BOM.len() && BOM.starts_with(&first) && !first.is_empty() {
            self.held = Some((first, first_arrived));
            return Ok(());
        }
        if first.starts_with(BOM) {
            // Only a BOM's bytes were held, so what follows it came in this read.
            self.header(true)?;
            return self.scan(&first[BOM.len()..], arrived);
        }
        self.header(false)?;
        let earlier = first.len() - bytes.len();
        self.scan(&first[..earlier], first_arrived)?;
        self.scan(bytes, arrived)
    }

    fn scan(&mut self, bytes: &[u8], arrived: Instant) -> io::Result<()> {
        let mut from = 0;
        for (i, &b) in bytes.iter().enumerate() {
            if self.lines.step(b) {
                self.out.write_all(&bytes[from..i])?;
                from = i;
                let micros = arrived.saturating_duration_since(self.start).as_micros();
                writeln!(self.out, ": t={}.{:03}", micros / 1000, micros % 1000)?;
            }
        }
        self.out.write_all(&bytes[from..])
    }

    /// Ends the recording (writing the header if nothing came) and flushes it.
    pub fn finish(mut self) -> io::Result<W> {
        if !self.header_written {
            self.header(false)?;
            if let Some((held, arrived)) = self.held.take() {
                self.scan(&held, arrived)?;
            }
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

/// What [`Unstamper`] takes out of a recording.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// Bytes of the original stream.
    Bytes(Vec<u8>),
    /// The bytes that follow arrived this long after the request was sent.
    Stamp(Duration),
}

#[derive(Debug)]
enum Mode {
    /// Not yet known whether the input starts with the header; what came so far.
    Start(Vec<u8>),
    /// No header: plain SSE, passed through untouched and untimed.
    Plain,
    /// A recording: stamps are taken out.
    Recording {
        lines: Lines,
        /// A line that may be a stamp, held back until it ends or proves not to be one.
        candidate: Option<Vec<u8>>,
        /// The stamp or header just taken out ended with a CR: drop an LF right after it.
        skip_lf: bool,
    },
}

/// Takes a recording apart, incrementally: the original bytes, and the stamps between them.
/// Input without the header is plain SSE and passes through untouched (it plays instantly).
#[derive(Debug)]
pub struct Unstamper {
    mode: Mode,
}

impl Default for Unstamper {
    fn default() -> Self {
        Unstamper {
            mode: Mode::Start(Vec::new()),
        }
    }
}

/// Parses a complete stamp line (without its line end): `: t=` then digits, optionally a dot
/// and more digits.
fn parse_stamp(line: &[u8]) -> Option<Duration> {
    let number = std::str::from_utf8(line.strip_prefix(STAMP)?).ok()?;
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(frac) || number.ends_with('.') {
        return None;
    }
    // Exact to the nanosecond: milliseconds, then up to six decimals.
    let ms: u64 = whole.parse().ok()?;
    let nanos: u64 = format!("{:0<6.6}", frac).parse().ok()?;
    Some(Duration::from_millis(ms) + Duration::from_nanos(nanos))
}

/// Whether `line` can still grow into a stamp line.
fn could_be_stamp(line: &[u8]) -> bool {
    if line.len() > MAX_STAMP_LINE {
        return false;
    }
    let head = line.len().min(STAMP.len());
    line[..head] == STAMP[..head]
        && line[head..]
            .iter()
            .all(|b| b.is_ascii_digit() || *b == b'.')
}

impl Unstamper {
    /// A reader at the start of its input.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the next bytes of the recording, appending what they hold to `out`.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<Piece>) {
        match &mut self.mode {
            Mode::Plain => push_bytes(out, input),
            Mode::Start(seen) => {
                seen.extend_from_slice(input);
                let seen = std::mem::take(seen);
                match header_end(&seen, false) {
                    None => self.mode = Mode::Start(seen),
                    Some(end) => self.start(&seen, end, out),
                }
            }
            Mode::Recording { .. } => self.unstamp(input, out),
        }
    }

    /// The input has ended: gives back whatever was held.
    pub fn finish(&mut self, out: &mut Vec<Piece>) {
        match &mut self.mode {
            Mode::Plain => {}
            Mode::Start(seen) => {
                let seen = std::mem::take(seen);
                let end = header_end(&seen, true).unwrap_or(HeaderEnd::Plain);
                self.start(&seen, end, out);
            }
            Mode::Recording { candidate, .. } => {
                // A final partial line is kept as it is.
                if let Some(line) = candidate.take() {
                    push_bytes(out, &line);
                }
            }
        }
    }

    fn start(&mut self, seen: &[u8], end: HeaderEnd, out: &mut Vec<Piece>) {
        match end {
            HeaderEnd::Plain => {
                self.mode = Mode::Plain;
                push_bytes(out, seen);
            }
            HeaderEnd::At { bom, end, cr } => {
                push_bytes(out, &seen[..bom]);
                self.mode = Mode::Recording {
                    lines: Lines::new(),
                    candidate: None,
                    skip_lf: cr,
                };
                self.unstamp(&seen[end..], out);
            }
        }
    }

    fn unstamp(&mut self, input: &[u8], out: &mut Vec<Piece>) {
        let Mode::Recording {
            lines,
            candidate,
            skip_lf,
        } = &mut self.mode
        else {
            unreachable!("unstamp outside a recording");
        };
        let mut from = 0; // start of the bytes not yet given out
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            if std::mem::take(skip_lf) && b == b'\n' {
                from = i + 1;
                i += 1;
                continue;
            }
            if let Some(line) = candidate {
                if b == b'\r' || b == b'\n' {
                    if let Some(at) = parse_stamp(line) {
                        out.push(Piece::Stamp(at));
                        *candidate = None;
                        *skip_lf = b == b'\r';
                        from = i + 1;
                        i += 1;
                        continue;
                    }
                } else {
                    line.push(b);
                    if could_be_stamp(line) {
                        i += 1;
                        continue;
                    }
                    line.pop();
                }
                // Not a stamp: an ordinary line, given out as it is.
                push_bytes(out, line);
                *candidate = None;
                from = i;
                // The held line's first byte already moved the scanner; go on with this byte.
            } else if lines.at_line_start && lines.between_events && b == b':' {
                push_bytes(out, &input[from..i]);
                lines.step(b);
                *candidate = Some(vec![b]);
                i += 1;
                from = i;
                continue;
            }
            lines.step(b);
            i += 1;
        }
        if candidate.is_none() {
            push_bytes(out, &input[from..]);
        }
    }
}

/// Where a recording's header ends, if the input starts with one.
#[derive(Debug, Clone, Copy)]
enum HeaderEnd {
    Plain,
    At {
        /// A byte-order mark before the header (given back, first).
        bom: usize,
        /// The first byte after the header line.
        end: usize,
        /// The header line ended with a CR (an LF may follow in the next read).
        cr: bool,
    },
}

/// Decides whether `seen` starts with the header; `None` when more input is needed.
fn header_end(seen: &[u8], at_eof: bool) -> Option<HeaderEnd> {
    let bom = if seen.starts_with(BOM) {
        BOM.len()
    } else if BOM.starts_with(seen) && !seen.is_empty() && !at_eof {
        return None;
    } else {
        0
    };
    let rest = &seen[bom..];
    let header = HEADER.as_bytes();
    if rest.len() <= header.len() {
        return if header.starts_with(rest) && !at_eof {
            None
        } else if rest == header {
            Some(HeaderEnd::At {
                bom,
                end: seen.len(),
                cr: false,
            })
        } else {
            Some(HeaderEnd::Plain)
        };
    }
    if !rest.starts_with(header) {
        return Some(HeaderEnd::Plain);
    }
    let end = bom + header.len();
    match seen[end] {
        b'\n' => Some(HeaderEnd::At {
            bom,
            end: end + 1,
            cr: false,
        }),
        b'\r' => match seen.get(end + 1) {
            Some(b'\n') => Some(HeaderEnd::At {
                bom,
                end: end + 2,
                cr: false,
            }),
            Some(_) => Some(HeaderEnd::At {
                bom,
                end: end + 1,
                cr: false,
            }),
            None => Some(HeaderEnd::At {
                bom,
                end: end + 1,
                cr: true,
            }),
        },
        _ => Some(HeaderEnd::Plain),
    }
}

fn push_bytes(out: &mut Vec<Piece>, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    if let Some(Piece::Bytes(last)) = out.last_mut() {
        last.extend_from_slice(bytes);
    } else {
        out.push(Piece::Bytes(bytes.to_vec()));
    }
}

/// Takes a whole recording apart: the original bytes and each stamp with the offset, in those
/// bytes, of the event it precedes.
#[cfg(test)]
pub fn unstamp(recording: &[u8]) -> (Vec<u8>, Vec<(usize, Duration)>) {
    let mut pieces = Vec::new();
    let mut reader = Unstamper::new();
    reader.feed(recording, &mut pieces);
    reader.finish(&mut pieces);
    let mut bytes = Vec::new();
    let mut stamps = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Bytes(b) => bytes.extend_from_slice(&b),
            Piece::Stamp(at) => stamps.push((bytes.len(), at)),
        }
    }
    (bytes, stamps)
}

/// Size of the reads of a file played from disk.
const FILE_READ: usize = 256 * 1024;

/// Plays a file: a recording through [`play`], plain SSE (no stamps to honour or scan) read
/// straight by a thread of its own in large reads, so that reading costs next to nothing
/// beside the framing.
pub fn play_file(
    path: &std::path::Path,
    speed: f64,
) -> io::Result<futures::stream::BoxStream<'static, io::Result<Vec<u8>>>> {
    use futures::StreamExt;
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut first = vec![0u8; FILE_READ];
    let mut n = 0;
    while n < first.len() {
        match file.read(&mut first[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    first.truncate(n);
    let at_eof = n < FILE_READ;
    if !matches!(header_end(&first, at_eof), Some(HeaderEnd::Plain)) {
        let input =
            tokio::io::AsyncReadExt::chain(io::Cursor::new(first), tokio::fs::File::from_std(file));
        return Ok(play(input, speed).boxed());
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel::<io::Result<Vec<u8>>>(4);
    std::thread::Builder::new()
        .name("choicewise-read".into())
        .spawn(move || {
            if !first.is_empty() && tx.blocking_send(Ok(first)).is_err() {
                return;
            }
            loop {
                let mut buf = vec![0u8; FILE_READ];
                let read = match file.read(&mut buf) {
                    Ok(0) => return,
                    Ok(k) => {
                        buf.truncate(k);
                        Ok(buf)
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => Err(e),
                };
                let failed = read.is_err();
                if tx.blocking_send(read).is_err() || failed {
                    return;
                }
            }
        })?;
    Ok(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed())
}

/// Plays a recording (or plain SSE) as a stream of byte chunks: each event is released when
/// its stamp, divided by `speed`, has elapsed since the first poll. `speed` 0 plays as fast as
/// the input can be read; input without stamps plays as it is read. Reads as it plays, so a
/// pipe can be played while it is written.
pub fn play<R>(input: R, speed: f64) -> impl Stream<Item = io::Result<Vec<u8>>> + Send
where
    R: AsyncRead + Send + Unpin + 'static,
{
    play_on(input, speed, || Wall(tokio::time::Instant::now()))
}

/// The time a recording is played by: how long since playing started, and a wait until a
/// given time since then. The wall clock plays; the tests play on a clock of their own.
trait Clock: Send + 'static {
    fn elapsed(&self) -> Duration;
    fn sleep_until(&mut self, at: Duration) -> impl std::future::Future<Output = ()> + Send;
}

/// The wall clock, from the first poll of the played stream.
struct Wall(tokio::time::Instant);

impl Clock for Wall {
    fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
    fn sleep_until(&mut self, at: Duration) -> impl std::future::Future<Output = ()> + Send {
        tokio::time::sleep_until(self.0 + at)
    }
}

/// [`play`] on any clock, made at the stream's first poll.
fn play_on<R, C: Clock>(
    mut input: R,
    speed: f64,
    clock: impl FnOnce() -> C + Send + 'static,
) -> impl Stream<Item = io::Result<Vec<u8>>> + Send
where
    R: AsyncRead + Send + Unpin + 'static,
{
    async_stream::try_stream! {
        let mut clock = clock();
        let mut reader = Unstamper::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut pieces = Vec::new();
        loop {
            let n = input.read(&mut buf).await?;
            if n == 0 {
                reader.finish(&mut pieces);
            } else {
                reader.feed(&buf[..n], &mut pieces);
            }
            let mut ready: Vec<u8> = Vec::new();
            for piece in pieces.drain(..) {
                match piece {
                    Piece::Bytes(b) => ready.extend_from_slice(&b),
                    Piece::Stamp(at) if speed > 0.0 => {
                        let due = at.div_f64(speed);
                        if due > clock.elapsed() {
                            if !ready.is_empty() {
                                yield std::mem::take(&mut ready);
                            }
                            clock.sleep_until(due).await;
                        }
                    }
                    Piece::Stamp(_) => {}
                }
            }
            if !ready.is_empty() {
                yield ready;
            }
            if n == 0 {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;
    use serde_json::Value;

    fn fixture(name: &str) -> Vec<u8> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/");
        std::fs::read(format!("{path}{name}")).unwrap()
    }

    /// A small deterministic generator, so that failures reproduce.
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, below: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % below
        }
    }

    /// Records `bytes` split into random reads, read `i` arriving at `i * 7` ms plus a bit.
    /// Returns the recording and, for each read, its offset and arrival since the start.
    fn record(bytes: &[u8], seed: u64) -> (Vec<u8>, Vec<(usize, Duration)>) {
        let start = Instant::now();
        let mut rng = Lcg(seed);
        let mut rec = Recorder::new(Vec::new(), start);
        let mut reads = Vec::new();
        let mut at = 0;
        let mut i = 0u64;
        while at < bytes.len() {
            let len = (1 + rng.next(40) as usize).min(bytes.len() - at);
            let arrived = Duration::from_micros(i * 7_000 + rng.next(1000));
            rec.write(&bytes[at..at + len], start + arrived).unwrap();
            reads.push((at, arrived));
            at += len;
            i += 1;
        }
        (rec.finish().unwrap(), reads)
    }

    /// The offsets where events begin (first byte of a non-blank line after a blank one).
    fn event_starts(bytes: &[u8]) -> Vec<usize> {
        let mut lines = Lines::new();
        let bom = if bytes.starts_with(BOM) { BOM.len() } else { 0 };
        (bom..bytes.len())
            .filter(|&i| lines.step(bytes[i]))
            .collect()
    }

    fn round_trip(original: &[u8], seed: u64) {
        let (recording, reads) = record(original, seed);
        let (bytes, stamps) = unstamp(&recording);
        assert_eq!(bytes, original, "bytes differ (seed {seed})");
        let starts = event_starts(original);
        assert_eq!(stamps.len(), starts.len());
        // Each stamp sits before an event and carries the arrival of the read that brought
        // the event's first byte, to the microsecond.
        for ((offset, at), start) in stamps.iter().zip(&starts) {
            assert_eq!(offset, start);
            let arrived = reads.iter().rev().find(|(o, _)| o <= start).unwrap().1;
            assert_eq!(*at, arrived, "seed {seed}, event at byte {start}");
        }
        // Fed byte by byte, the reader gives the same pieces as fed at once.
        let pieces = |step: usize| {
            let mut out = Vec::new();
            let mut reader = Unstamper::new();
            for part in recording.chunks(step) {
                reader.feed(part, &mut out);
            }
            reader.finish(&mut out);
            out
        };
        assert_eq!(pieces(1), pieces(recording.len().max(1)));
    }

    #[test]
    fn round_trips_keep_the_bytes_and_the_timings() {
        for name in [
            "openai_n3_tools.sse",
            "quirks_wire.sse",
            "azure_filters.sse",
            "missing_done_truncated.sse",
        ] {
            let original = fixture(name);
            for seed in 0..8 {
                round_trip(&original, seed);
            }
        }
    }

    #[test]
    fn line_endings_comments_bom_and_a_final_partial_line_are_kept() {
        let cases: [&[u8]; 6] = [
            b"data: a\r\n\r\ndata: b\r\n\r\n",
            b"data: a\r\rdata: b\r\r: keep-alive\r\r",
            b"\xEF\xBB\xBFdata: a\n\ndata: b\n\n",
            b"data: a\n\n: t=5\n\ndata: [DONE]\n\ndata: partial",
            b"\n\n\ndata: a\n\n\n\n: t=1.000 is not a stamp\ndata: b",
            b"",
        ];
        for case in cases {
            for seed in 0..16 {
                let (recording, _) = record(case, seed);
                assert!(
                    recording.starts_with(HEADER.as_bytes())
                        || recording.starts_with(&[BOM, HEADER.as_bytes()].concat())
                );
                round_trip(case, seed);
            }
        }
    }

    #[test]
    fn the_recording_is_sse_with_a_stamp_before_each_event() {
        let start = Instant::now();
        let mut rec = Recorder::new(Vec::new(), start);
        let ms = |m: u64| start + Duration::from_micros(m);
        rec.write(b"data: {\"a\":1}\n", ms(412_375)).unwrap();
        rec.write(b"\n: ping\n\ndata: [DO", ms(1_000_000)).unwrap();
        rec.write(b"NE]\r\n\r\n", ms(2_000_001)).unwrap();
        let text = String::from_utf8(rec.finish().unwrap()).unwrap();
        assert_eq!(
            text,
            ": choicewise-recording v1\n: t=412.375\ndata: {\"a\":1}\n\n\
             : t=1000.000\n: ping\n\n: t=1000.000\ndata: [DONE]\r\n\r\n"
        );
        let (_, stamps) = unstamp(text.as_bytes());
        let times: Vec<f64> = stamps.iter().map(|(_, t)| t.as_secs_f64()).collect();
        assert_eq!(times, [0.412375, 1.0, 1.0]);
    }

    #[test]
    fn a_file_without_the_header_is_plain_sse() {
        let plain = b": t=5\ndata: a\n\n";
        assert_eq!(unstamp(plain), (plain.to_vec(), vec![]));
        // A CRLF-converted recording still reads.
        let crlf = b": choicewise-recording v1\r\n: t=2.5\r\ndata: a\r\n\r\n";
        let (bytes, stamps) = unstamp(crlf);
        assert_eq!(bytes, b"data: a\r\n\r\n");
        assert_eq!(stamps, [(0, Duration::from_micros(2500))]);
    }

    #[tokio::test]
    async fn the_recording_of_a_fixture_replays_to_the_same_collect() {
        for name in [
            "openai_n3_tools.sse",
            "answer_question.sse",
            "vllm_n4_reasoning.sse",
        ] {
            let original = fixture(name);
            let (recording, _) = record(&original, 3);
            let direct = choicewise::Completions::new(choicewise::Source::reader(
                std::io::Cursor::new(original),
            ));
            let replayed = choicewise::Completions::new(choicewise::Source::sse(play(
                std::io::Cursor::new(recording),
                0.0,
            )));
            let json = |c: Result<_, choicewise::Incomplete<_>>| {
                let (Ok(c) | Err(choicewise::Incomplete { partial: c, .. })) = c;
                serde_json::to_value(c).unwrap()
            };
            let a: Value = json(direct.collect().await);
            let b: Value = json(replayed.collect().await);
            assert_eq!(a, b, "{name}");
        }
    }

    /// A clock that jumps to each time it is asked to wait for, and tells the time it is at.
    #[derive(Clone, Default)]
    struct Jumps(std::sync::Arc<std::sync::Mutex<Duration>>);

    impl Clock for Jumps {
        fn elapsed(&self) -> Duration {
            *self.0.lock().unwrap()
        }
        fn sleep_until(&mut self, at: Duration) -> impl std::future::Future<Output = ()> + Send {
            let mut now = self.0.lock().unwrap();
            *now = (*now).max(at);
            std::future::ready(())
        }
    }

    #[tokio::test]
    async fn play_honours_the_stamps_at_the_speed_factor() {
        let recording = b": choicewise-recording v1\n: t=0\ndata: a\n\n: t=300\ndata: b\n\n: t=900.5\ndata: [DONE]\n\n";
        for (speed, last) in [(1.0, 900.5), (3.0, 300.1666), (0.0, 0.0)] {
            let clock = Jumps::default();
            let at = clock.clone();
            let chunks: Vec<(Vec<u8>, f64)> = play_on(&recording[..], speed, move || clock)
                .map_ok(|b| (b, at.elapsed().as_secs_f64() * 1000.0))
                .try_collect()
                .await
                .unwrap();
            let bytes: Vec<u8> = chunks.iter().flat_map(|(b, _)| b.clone()).collect();
            assert_eq!(bytes, b"data: a\n\ndata: b\n\ndata: [DONE]\n\n");
            let end = chunks.last().unwrap().1;
            assert!((end - last).abs() < 1.0, "speed {speed}: ended at {end} ms");
            if speed > 0.0 {
                assert_eq!(chunks.len(), 3);
                let times: Vec<f64> = chunks.iter().map(|c| c.1).collect();
                assert!(
                    (times[1] - 300.0 / speed).abs() < 1.0,
                    "speed {speed}: {times:?}"
                );
            }
        }
    }

    const DEMO_SSE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/demo.sse");
    const DEMO_REC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/demo.rec");

    /// The demo stream with synthetic arrival times: the first event after 380 ms, then 4 to
    /// 28 ms between events, and now and then two events in one read.
    fn demo_recording() -> Vec<u8> {
        let original = std::fs::read(DEMO_SSE).unwrap();
        let start = Instant::now();
        let mut rec = Recorder::new(Vec::new(), start);
        let mut rng = Lcg(2024);
        let mut at = Duration::from_millis(380);
        let mut events = original.split_inclusive(|&b| b == b'\n').peekable();
        let mut read = Vec::new();
        while let Some(line) = events.next() {
            read.extend_from_slice(line);
            let event_over = line == b"\n";
            if event_over && (rng.next(8) != 0 || events.peek().is_none()) {
                rec.write(&read, start + at).unwrap();
                read.clear();
                at += Duration::from_micros(4_000 + rng.next(24_000));
            }
        }
        rec.write(&read, start + at).unwrap();
        rec.finish().unwrap()
    }

    #[test]
    #[ignore = "writes assets/demo.rec"]
    fn write_demo_recording() {
        std::fs::write(DEMO_REC, demo_recording()).unwrap();
    }

    #[test]
    fn the_demo_recording_is_the_demo_stream_with_times() {
        let recording = std::fs::read(DEMO_REC).unwrap();
        assert_eq!(
            recording,
            demo_recording(),
            "run the ignored write_demo_recording"
        );
        let (bytes, stamps) = unstamp(&recording);
        assert_eq!(bytes, std::fs::read(DEMO_SSE).unwrap());
        assert_eq!(stamps.len(), 209);
    }
}
