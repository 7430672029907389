//! What is kept of a request: [`RequestRecord`] (one row of `requests`) and its samples'
//! [`SampleRecord`]s (rows of `samples`, with `samples = true`).

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// One request, as its client left it: one row of the `requests` table.
///
/// ```
/// use choicewise_records::RequestRecord;
/// let mut r = RequestRecord::new(1_764_240_000_000, "req-1", "m");
/// r.status = 200;
/// r.ended = "complete".into();
/// assert_eq!(r.day, "2025-11-27");
/// assert_eq!(r.id.len(), 32);
/// assert_ne!(r.id, RequestRecord::new(1_764_240_000_000, "req-1", "m").id);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RequestRecord {
    /// The record's own id, unique across processes: a record written twice (spooled, then
    /// replayed after a crash) is one row.
    pub id: String,
    /// When the request arrived, in milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// Its UTC day (`YYYY-MM-DD`), from `at_ms`: what `usage --by day` groups by.
    pub day: String,
    /// The request's `x-request-id`.
    pub request_id: String,
    /// The name of the key that sent it (`(unnamed)` for a key of `keys_env`; empty without
    /// `[auth]`).
    pub key: String,
    /// The configured model asked for (empty for any other).
    pub model: String,
    /// The client's API: `chat`, `messages`, `responses`.
    pub api: String,
    /// Its answer was streamed.
    pub stream: bool,
    /// The pick asked for (`vote`, `first_finished`, ...), when its samples started.
    pub pick: Option<String>,
    /// How the pick decided: `decided`, `undecided` (a vote no key won, answered by the first
    /// finish), `timed_out`, `none` (nothing picked); `None` for `all` and for a request
    /// whose samples never started.
    pub decision: Option<String>,
    /// Samples started, cancelled, failed.
    pub samples_started: i64,
    pub samples_cancelled: i64,
    pub samples_failed: i64,
    /// Every sample's tokens: each sample's upstream request bills its own prompt.
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    /// Some of the tokens are the gateway's estimate, not an upstream's report.
    pub estimated: bool,
    /// Each started sample's tokens.
    pub sample_tokens: Vec<SampleTokens>,
    /// The HTTP status it was answered with (499: its client left before any answer).
    pub status: i64,
    /// Why it ended: `complete`, or the log's `ended` label (`client_gone`,
    /// `every_choice_failed`, a refusal's code, ...).
    pub ended: String,
    /// From its arrival to its answer's first byte, in milliseconds, when an answer began.
    pub first_byte_ms: Option<f64>,
    /// From its arrival to its record.
    pub total_ms: f64,
    /// What its tokens cost at the configured prices (`None`: no price for its model).
    pub cost_usd: Option<f64>,
    /// Its samples, with `samples = true` (else empty).
    pub samples: Vec<SampleRecord>,
    /// Its samples' texts were cut to the record's bound ([`RequestRecord::fit`]): the row
    /// and every count are whole, some texts are not.
    #[serde(default)]
    pub samples_cut: bool,
}

/// One started sample's tokens, in [`RequestRecord::sample_tokens`].
///
/// ```
/// use choicewise_records::SampleTokens;
/// let t = SampleTokens { sample: 0, prompt: 12, completion: 30, estimated: false };
/// assert_eq!(serde_json::to_string(&t).unwrap(), r#"{"sample":0,"prompt":12,"completion":30,"estimated":false}"#);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleTokens {
    pub sample: u32,
    pub prompt: u64,
    pub completion: u64,
    pub estimated: bool,
}

/// One started sample of a request, with `samples = true`: one row of the `samples` table.
///
/// ```
/// use choicewise_records::SampleRecord;
/// let s = SampleRecord::new(2, "stop");
/// assert_eq!((s.sample, s.finish.as_str(), s.place), (2, "stop", None));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SampleRecord {
    /// Its sample number.
    pub sample: i64,
    /// Its `finish_reason`, `error` or `cancelled`.
    pub finish: String,
    /// Its place in the order the samples finished (`0` first), if it finished.
    pub place: Option<i64>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub estimated: bool,
    /// Its text content.
    pub content: Option<String>,
    /// Its whole assembled message (content, reasoning, tool calls), as Chat JSON.
    pub message: Option<String>,
    /// Its tokens' log-probabilities, as Chat's `logprobs` JSON, when the upstream gave them.
    pub logprobs: Option<String>,
    /// The output choice it became (`0`: the answer's first), when it was one: the answer
    /// a grade of the request ([`Grade`](crate::Grade)) speaks of.
    #[serde(default)]
    pub output: Option<i64>,
}

impl SampleRecord {
    /// Sample `sample`, ended with `finish`; the rest empty.
    pub fn new(sample: i64, finish: impl Into<String>) -> Self {
        SampleRecord {
            sample,
            finish: finish.into(),
            place: None,
            prompt_tokens: 0,
            completion_tokens: 0,
            estimated: false,
            content: None,
            message: None,
            logprobs: None,
            output: None,
        }
    }

    /// Its texts' bytes: what it weighs in the writer's queue.
    pub(crate) fn weight(&self) -> usize {
        let len = |s: &Option<String>| s.as_ref().map_or(0, String::len);
        64 + self.finish.len() + len(&self.content) + len(&self.message) + len(&self.logprobs)
    }
}

impl RequestRecord {
    /// A record of the request `request_id` for `model`, arrived at `at_ms`; its id made
    /// here, its other fields empty (status 0) for the gateway to fill.
    pub fn new(at_ms: i64, request_id: impl Into<String>, model: impl Into<String>) -> Self {
        RequestRecord {
            id: new_id(),
            at_ms,
            day: day_of(at_ms),
            request_id: request_id.into(),
            key: String::new(),
            model: model.into(),
            api: String::new(),
            stream: false,
            pick: None,
            decision: None,
            samples_started: 0,
            samples_cancelled: 0,
            samples_failed: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
            estimated: false,
            sample_tokens: Vec::new(),
            status: 0,
            ended: String::new(),
            first_byte_ms: None,
            total_ms: 0.0,
            cost_usd: None,
            samples: Vec::new(),
            samples_cut: false,
        }
    }

    /// What it weighs in the writer's queue, in bytes (about).
    pub(crate) fn weight(&self) -> usize {
        256 + self.request_id.len()
            + self.key.len()
            + self.model.len()
            + self.ended.len()
            + 48 * self.sample_tokens.len()
            + self.samples.iter().map(SampleRecord::weight).sum::<usize>()
    }
}

impl RequestRecord {
    /// Cuts its samples' texts until it weighs at most `max_bytes`, so that a request whose
    /// samples are too large to keep still has its row: the log-probabilities go first
    /// (the largest first), then the assembled messages, then the contents are cut to an
    /// equal share each (on a character's boundary). Sets
    /// [`samples_cut`](Self::samples_cut) and returns whether anything was cut.
    ///
    /// ```
    /// use choicewise_records::{RequestRecord, SampleRecord};
    /// let mut r = RequestRecord::new(1_795_737_600_000, "req-1", "m");
    /// for i in 0..4 {
    ///     let mut s = SampleRecord::new(i, "stop");
    ///     s.content = Some("x".repeat(1000));
    ///     s.logprobs = Some("[0.5]".repeat(10_000));
    ///     r.samples.push(s);
    /// }
    /// assert!(r.fit(16 << 10));
    /// assert!(r.samples_cut);
    /// assert!(r.samples.iter().all(|s| s.logprobs.is_none() && s.content.as_ref().unwrap().len() == 1000));
    /// assert!(!r.fit(16 << 10)); // it fits now
    /// ```
    pub fn fit(&mut self, max_bytes: usize) -> bool {
        if self.weight() <= max_bytes {
            return false;
        }
        type Field = fn(&mut SampleRecord) -> &mut Option<String>;
        let fields: [Field; 2] = [|s| &mut s.logprobs, |s| &mut s.message];
        for field in fields {
            let mut order: Vec<usize> = (0..self.samples.len()).collect();
            let mut lens: Vec<usize> = (self.samples.iter_mut())
                .map(|s| field(s).as_ref().map_or(0, String::len))
                .collect();
            order.sort_by_key(|&i| std::cmp::Reverse(lens[i]));
            for i in order {
                if self.weight() <= max_bytes {
                    break;
                }
                *field(&mut self.samples[i]) = None;
                lens[i] = 0;
            }
        }
        let weight = self.weight();
        if weight > max_bytes && !self.samples.is_empty() {
            let contents: usize = (self.samples.iter())
                .map(|s| s.content.as_ref().map_or(0, String::len))
                .sum();
            let share = max_bytes.saturating_sub(weight - contents) / self.samples.len();
            for s in &mut self.samples {
                if let Some(text) = &mut s.content
                    && text.len() > share
                {
                    let mut end = share;
                    while !text.is_char_boundary(end) {
                        end -= 1;
                    }
                    text.truncate(end);
                }
            }
        }
        self.samples_cut = true;
        true
    }
}

/// A record id: this process's random 64 bits, then a count: unique across processes (with
/// the odds of two processes drawing the same 64 bits) and within one.
pub(crate) fn new_id() -> String {
    static PROCESS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let process = *PROCESS.get_or_init(|| {
        let mut h = std::hash::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.write_u32(std::process::id());
        h.finish()
    });
    let count = COUNT.fetch_add(1, Ordering::Relaxed);
    // As `format!("{process:016x}{count:016x}")`, without its formatting machinery.
    let mut id = String::with_capacity(32);
    for n in [process, count] {
        for shift in (0..16).rev() {
            id.push(char::from(
                b"0123456789abcdef"[(n >> (4 * shift)) as usize & 0xf],
            ));
        }
    }
    id
}

/// The UTC day (`YYYY-MM-DD`) of a time in milliseconds since the Unix epoch.
///
/// ```
/// assert_eq!(choicewise_records::day_of(0), "1970-01-01");
/// assert_eq!(choicewise_records::day_of(951_782_400_000), "2000-02-29");
/// assert_eq!(choicewise_records::day_of(-1), "1969-12-31");
/// ```
pub fn day_of(at_ms: i64) -> String {
    let (y, m, d) = civil_from_days(at_ms.div_euclid(86_400_000));
    if !(0..=9999).contains(&y) {
        return format!("{y:04}-{m:02}-{d:02}");
    }
    // As the `format!` above, without its formatting machinery.
    let digit = |n: u32| char::from(b'0' + (n % 10) as u8);
    let y = y as u32;
    let mut day = String::with_capacity(10);
    day.extend([
        digit(y / 1000),
        digit(y / 100),
        digit(y / 10),
        digit(y),
        '-',
    ]);
    day.extend([digit(m / 10), digit(m), '-', digit(d / 10), digit(d)]);
    day
}

/// Howard Hinnant's `civil_from_days`: the proleptic Gregorian date of a day count.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_match_a_known_calendar() {
        // 2026-11-27T00:00:00Z and the last millisecond before it.
        assert_eq!(day_of(1_795_737_600_000), "2026-11-27");
        assert_eq!(day_of(1_795_737_599_999), "2026-11-26");
        assert_eq!(day_of(1_709_164_800_000), "2024-02-29");
        assert_eq!(day_of(4_102_444_800_000), "2100-01-01");
    }

    /// The days written by hand read as `format!` writes them, every day of years 0 to
    /// 9999 (a stride through them) and past them.
    #[test]
    fn days_are_written_as_format_writes_them() {
        let formatted = |at_ms: i64| {
            let (y, m, d) = civil_from_days(at_ms.div_euclid(86_400_000));
            format!("{y:04}-{m:02}-{d:02}")
        };
        let (first, last) = (-62_167_219_200_000_i64, 253_402_300_799_999_i64);
        for at_ms in (first - 3 * 86_400_000..last + 3 * 86_400_000).step_by(86_400_000 * 7 + 1) {
            assert_eq!(day_of(at_ms), formatted(at_ms), "{at_ms}");
        }
        assert_eq!(day_of(first), "0000-01-01");
        assert_eq!(day_of(last), "9999-12-31");
        assert_eq!(day_of(last + 1), "10000-01-01");
        assert_eq!(day_of(first - 1), "-001-12-31");
    }

    /// An id is the process's 16 hex digits and a count's 16, as `format!` writes them.
    #[test]
    fn ids_are_the_process_and_a_count_in_hex() {
        let (a, b) = (new_id(), new_id());
        assert_eq!((a.len(), b.len()), (32, 32));
        assert_eq!(a[..16], b[..16], "one process");
        let count = |id: &str| u64::from_str_radix(&id[16..], 16).unwrap();
        assert!(count(&b) > count(&a));
        let process = u64::from_str_radix(&a[..16], 16).unwrap();
        assert_eq!(a, format!("{process:016x}{:016x}", count(&a)));
    }
}
