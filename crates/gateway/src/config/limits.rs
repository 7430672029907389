//! `[limits]`: what a request, a connection and the process may take, and the memory
//! ceiling's marks resolved from them.

use serde::Deserialize;

/// `[limits]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Limits {
    /// The most choices (`n`) a request may ask for.
    pub max_n: u32,
    /// The most samples a request may ask for (the `choicewise` extension's `samples`).
    pub max_samples: u32,
    /// The largest request body, in bytes.
    pub max_body_bytes: usize,
    /// The most requests served at once; more are answered 429.
    pub max_concurrent_requests: usize,
    /// How long an upstream may send nothing before its choices fail (seconds, default
    /// 300): a stalled upstream never holds a request forever.
    pub upstream_idle_timeout_s: f64,
    /// The most idle connections kept open to each upstream for the next request (default
    /// 64). A steady load with more requests in flight to one upstream than this opens a new
    /// connection for some of them (and closes one after) again and again; each kept
    /// connection is closed after 60 to 120 s of idleness. 0 keeps none.
    pub upstream_idle_connections: usize,
    /// How long a client may take to send a request's headers (seconds, default 10); then
    /// its connection is closed.
    pub header_read_timeout_s: f64,
    /// How long a client may take to send a request's body (seconds, default 30); then it
    /// is answered 408.
    pub body_read_timeout_s: f64,
    /// How long a connection may stay open with no request in flight and nothing received
    /// (seconds, default 60); then it is closed.
    pub idle_connection_timeout_s: f64,
    /// The most client connections open at once (default 4096); beyond it new connections
    /// are closed at once, and logged.
    pub max_connections: usize,
    /// The largest request head (request line and headers), in bytes (default 32768);
    /// a larger one is answered 431.
    pub max_header_bytes: usize,
    /// How long a client may take nothing of an answer it is sent (seconds, default 60, as
    /// nginx's `send_timeout`); then the answer ends, its samples are cancelled and its
    /// slot freed.
    pub client_stall_timeout_s: f64,
    /// A model's retries over the last 10 s may be at most this share of its first tries,
    /// in percent (default 20; at least 10 retries are always allowed); each model has a
    /// budget of its own.
    pub retry_budget_percent: f64,
    /// The most bytes one choice's updates may take (default 16777216, 16 MiB): past it that
    /// choice fails alone and the others go on. One upstream answer's bytes are also cut at
    /// it times the samples it carries (a native request for 4 samples may send 4 times
    /// that): past that the answer's choices fail as an upstream's failure does, and its
    /// connection is closed. With the memory ceiling on, a request whose samples times this
    /// times 4 (what the gateway may hold per byte of an answer) passes its high watermark is
    /// refused before it starts (400 `samples_over_memory`).
    pub max_answer_bytes: usize,
    /// The process's memory, in MiB, above which new requests are refused with 503 and
    /// `Retry-After` while those in flight go on: its resident set plus the request bodies
    /// admitted and not yet answered. Default: three quarters of the memory the process may
    /// use (its cgroup's limit, else the machine's); 0 turns the ceiling off.
    pub memory_high_watermark_mb: Option<u64>,
    /// Once refusing, the memory in MiB below which requests are admitted again (default: 90%
    /// of the high watermark).
    pub memory_low_watermark_mb: Option<u64>,
    /// The most one key (without `[auth]`, one peer address) may hold of the memory ceiling
    /// for request bodies that have not arrived yet, in bytes (default: half of the high
    /// watermark, so that one key's idle uploads leave the other keys at least the other
    /// half; 0: no cap): each such request is charged its route's cost of what may arrive,
    /// and one beside the key's others that would pass the cap is answered 429 with
    /// `Retry-After`. A request alone is never refused by it.
    pub max_unsent_bytes_per_key: Option<u64>,
    /// How long one request may run, from its arrival to its answer's end (seconds,
    /// default 600): then whatever still runs ends as a failure in the client's API's terms
    /// (a 504 before the answer began, its choices ending with an error after), and is
    /// logged.
    pub request_deadline_s: f64,
    /// The most upstream requests one client request may cause, its samples, hedges,
    /// replacements, retries and fallbacks together (default 64); past it, its next try
    /// fails as a 502 `upstream_requests_bound`.
    pub max_upstream_requests_per_request: usize,
    /// The least a client must take of its answer, in bytes per second of the time the
    /// answer waits for it to take more (default 4096; 0: no minimum), over each
    /// `client_stall_timeout_s` of such waiting: a client that drains its answer slower ends
    /// it as a stalled one does.
    pub client_min_bytes_per_s: f64,
    /// The memory ceiling's high mark in bytes, once resolved by the gateway serving these
    /// limits (reading the machine's memory once, not per request).
    #[serde(skip)]
    pub(crate) resolved_high: Option<u64>,
}

/// What the gateway may hold of an answer, at most, per byte its upstreams send: the answer
/// side's bound, held by its cost fuzzer over every shape it tries (docs/reliability.md,
/// "The cost of an answer"). A request's worst case is its samples ×
/// [`max_answer_bytes`](Limits::max_answer_bytes) × this.
pub(crate) const ANSWER_COST: u64 = 4;

impl Limits {
    /// What a policy is checked against for a request of `n` choices: `max_samples`.
    pub(crate) fn policy_limits(&self, n: u32) -> choicewise_core::policy::PolicyLimits {
        choicewise_core::policy::PolicyLimits::new(n).max_samples(self.max_samples)
    }

    /// The memory ceiling's two marks in bytes, defaults resolved (`0, 0`: off): `memory`
    /// is what the process may use, for the default.
    pub(crate) fn memory_watermarks_of(&self, memory: Option<u64>) -> (u64, u64) {
        let high = match self.memory_high_watermark_mb {
            Some(mb) => mb.saturating_mul(1 << 20),
            None => memory.map_or(0, |bytes| bytes / 4 * 3),
        };
        let low = match self.memory_low_watermark_mb {
            Some(mb) => mb.saturating_mul(1 << 20),
            None => high / 10 * 9,
        };
        (high, low)
    }

    /// What one key may hold unsent ([`max_unsent_bytes_per_key`](Self::max_unsent_bytes_per_key)),
    /// its default resolved against the ceiling's high mark `high` (0: no cap).
    pub(crate) fn unsent_cap(&self, high: u64) -> u64 {
        self.max_unsent_bytes_per_key.unwrap_or(high / 2)
    }

    /// The memory ceiling's high mark in bytes (0: off), as resolved when the gateway
    /// started, else read now.
    pub(crate) fn memory_high(&self) -> u64 {
        self.resolved_high
            .unwrap_or_else(|| self.memory_watermarks().0)
    }

    /// The most a request of `samples` samples may hold of its answer, in bytes: its
    /// samples × `max_answer_bytes` × [`ANSWER_COST`].
    pub(crate) fn answer_worst(&self, samples: u32) -> u64 {
        (self.max_answer_bytes as u64)
            .saturating_mul(ANSWER_COST)
            .saturating_mul(u64::from(samples))
    }

    /// The most samples one request may carry for its answer's worst case
    /// ([`answer_worst`](Self::answer_worst)) to fit under the memory ceiling's high mark
    /// `high`; `None` when the ceiling is off (`high` 0).
    pub(crate) fn samples_within(&self, high: u64) -> Option<u32> {
        let one = self.answer_worst(1).max(1);
        (high > 0).then(|| u32::try_from(high / one).unwrap_or(u32::MAX))
    }

    /// The memory ceiling's two marks in bytes, defaults resolved (`0, 0`: off).
    pub(crate) fn memory_watermarks(&self) -> (u64, u64) {
        let memory = match self.memory_high_watermark_mb {
            Some(_) => None,
            None => memory_available(),
        };
        self.memory_watermarks_of(memory)
    }
}

/// The memory the process may use: its cgroup's limit (v2 `memory.max`, v1
/// `memory.limit_in_bytes`) or the machine's memory, whichever is smaller; `None` where
/// neither can be read.
pub(super) fn memory_available() -> Option<u64> {
    let machine = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib << 10)
    });
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok()?.trim().parse::<u64>().ok());
    match (machine, cgroup) {
        (Some(m), Some(c)) => Some(m.min(c)),
        (m, c) => m.or(c),
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_n: 16,
            max_samples: 16,
            max_body_bytes: 8 * 1024 * 1024,
            max_concurrent_requests: 1024,
            upstream_idle_timeout_s: 300.0,
            upstream_idle_connections: 64,
            header_read_timeout_s: 10.0,
            body_read_timeout_s: 30.0,
            idle_connection_timeout_s: 60.0,
            max_connections: 4096,
            max_header_bytes: 32 * 1024,
            client_stall_timeout_s: 60.0,
            retry_budget_percent: 20.0,
            max_answer_bytes: 16 * 1024 * 1024,
            memory_high_watermark_mb: None,
            memory_low_watermark_mb: None,
            max_unsent_bytes_per_key: None,
            request_deadline_s: 600.0,
            max_upstream_requests_per_request: 64,
            client_min_bytes_per_s: 4096.0,
            resolved_high: None,
        }
    }
}
