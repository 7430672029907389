//! Deterministic generator of realistic OpenAI-style multi-choice SSE streams.
//!
//! The stream looks like what `POST /v1/chat/completions` with `stream: true, n: N,
//! stream_options: {include_usage: true}` sends today: ~295-byte `chat.completion.chunk`
//! events (with `"usage":null` and the `obfuscation` padding), one choice per chunk, the
//! choices interleaved in bursts and out of order (the first choice to speak is never choice
//! 0 when `n > 1`), about a quarter of the choices making two parallel tool calls whose
//! arguments arrive as small fragments, one finish chunk per choice, a final usage-only chunk
//! and `data: [DONE]`.
//!
//! Everything is derived from a seed with a tiny xorshift generator, so the same options give
//! the same bytes on every machine.

use std::fmt::Write as _;
use std::sync::Arc;

/// xorshift64* — small, fast, deterministic; plenty for shaping test data.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (any value, 0 included).
    pub fn new(seed: u64) -> Self {
        Rng((seed ^ 0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

/// Options of a generated stream.
#[derive(Debug, Clone)]
pub struct GenConfig {
    /// Number of choices (`n`).
    pub n: u32,
    /// Approximate size of the whole stream in bytes.
    pub target_bytes: usize,
    /// Seed of everything random.
    pub seed: u64,
    /// Prefix every content delta with `⟨seq⟩`, `seq` being the event's position in the
    /// stream (for latency measurements).
    pub seq_tags: bool,
}

/// What one choice must assemble to.
#[derive(Debug, Clone, Default)]
pub struct ExpectedChoice {
    /// The choice index.
    pub index: u32,
    /// The whole content (`None` for tool-call choices, whose content is `null`).
    pub content: Option<String>,
    /// The tool calls: id, function name, whole arguments.
    pub tool_calls: Vec<(String, String, String)>,
    /// The finish reason.
    pub finish_reason: &'static str,
}

/// A generated stream, with what it must assemble to.
#[derive(Debug, Clone)]
pub struct Generated {
    /// The SSE bytes, `data: [DONE]` included.
    pub bytes: Vec<u8>,
    /// End offset (exclusive, blank line included) of every SSE event, `[DONE]` last.
    pub event_ends: Vec<usize>,
    /// Number of `chat.completion.chunk` events (every event but `[DONE]`).
    pub chunks: usize,
    /// Number of content deltas (non-empty `content` strings).
    pub content_deltas: usize,
    /// Number of tool-call argument fragments (non-empty).
    pub argument_fragments: usize,
    /// Per choice, by index.
    pub expected: Vec<ExpectedChoice>,
    /// Order in which the choices first appear.
    pub first_appearance: Vec<u32>,
}

impl Generated {
    /// The stream cut into reads of `size` bytes (cutting events and characters anywhere),
    /// prepared up front so that no I/O or copying is measured.
    pub fn reads(&self, size: usize) -> Vec<Arc<[u8]>> {
        self.bytes.chunks(size.max(1)).map(Arc::from).collect()
    }

    /// Megabytes (10^6 bytes) of the stream.
    pub fn megabytes(&self) -> f64 {
        self.bytes.len() as f64 / 1e6
    }
}

/// One content token: its text and how it is written inside a JSON string.
struct Token {
    text: &'static str,
    json: &'static str,
}

const fn t(text: &'static str, json: &'static str) -> Token {
    Token { text, json }
}

const WORDS: &[&str] = &[
    " the",
    " of",
    " and",
    " to",
    " a",
    " in",
    " is",
    " that",
    " for",
    " it",
    " as",
    " with",
    " be",
    " on",
    " not",
    " this",
    " by",
    " are",
    " or",
    " from",
    " at",
    " which",
    " an",
    " stream",
    " choice",
    " token",
    " model",
    " response",
    " function",
    " value",
    " data",
    " however",
    " because",
    " example",
    " different",
    " result",
    " request",
    " server",
    " client",
    " parallel",
    " each",
    " first",
    " second",
    " order",
    " index",
    " message",
    ".",
    ",",
    ":",
    " (",
    ")",
    " 42",
    " 2024",
    "ing",
    "ed",
    "ly",
    " quickly",
    " JSON",
    " Rust",
];

/// Tokens that need escaping or are not ASCII, each ~6% of the time in total.
const SPECIAL: &[Token] = &[
    t("\n\n", "\\n\\n"),
    t("\n", "\\n"),
    t(" \"", " \\\""),
    t("\"", "\\\""),
    t(" C:\\temp", " C:\\\\temp"),
    t("\t", "\\t"),
    t(" café", " café"),
    t(" naïve", " na\\u00efve"),
    t(" 日本語", " 日本語"),
    t(" 🙂", " 🙂"),
    t(" 🚀", " \\ud83d\\ude80"),
    t(" Zürich", " Zürich"),
    t(" </script>", " <\\/script>"),
];

const FUNCTIONS: &[&str] = &[
    "get_weather",
    "search_documents",
    "create_event",
    "lookup_order",
];

const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

fn alnum(rng: &mut Rng, len: usize) -> String {
    (0..len)
        .map(|_| ALNUM[rng.below(ALNUM.len())] as char)
        .collect()
}

/// JSON string literal of `s` (quotes included).
fn json_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

/// What a choice sends, one chunk at a time.
enum Plan {
    Text {
        /// Content chunks still to send.
        left: usize,
        started: bool,
    },
    Tools {
        /// Per call: id, name, argument fragments; the position of the next fragment.
        calls: Vec<(String, String, Vec<String>)>,
        call: usize,
        fragment: usize,
        started_call: bool,
    },
}

struct ChoiceGen {
    index: u32,
    plan: Plan,
    finished: bool,
    expected: ExpectedChoice,
}

/// Arguments of one tool call, about `len` bytes of JSON text.
fn arguments_text(rng: &mut Rng, len: usize) -> String {
    let cities = ["Paris", "São Paulo", "Zürich", "東京", "New \"York\""];
    let mut args = format!(
        "{{\"location\":{},\"unit\":\"celsius\",\"days\":{},\"notes\":[",
        json_str(cities[rng.below(cities.len())]),
        rng.range(1, 14)
    );
    let mut first = true;
    while args.len() < len {
        if !first {
            args.push(',');
        }
        first = false;
        let mut note = String::new();
        for _ in 0..rng.range(2, 8) {
            note.push_str(WORDS[rng.below(WORDS.len())]);
        }
        args.push_str(&json_str(note.trim_start()));
    }
    args.push_str("]}");
    args
}

/// Cuts `s` into fragments of 1 to 7 characters (arguments tokens are short).
fn fragments(rng: &mut Rng, s: &str) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let len = rng.range(1, 7).min(chars.len() - i);
        out.push(chars[i..i + len].iter().collect());
        i += len;
    }
    out
}

impl ChoiceGen {
    fn new(rng: &mut Rng, index: u32, chunks: usize, tools: bool) -> Self {
        let mut expected = ExpectedChoice {
            index,
            ..ExpectedChoice::default()
        };
        let plan = if tools {
            // Two calls sharing the chunk budget; fragments average 4 characters.
            let mut calls = Vec::new();
            for k in 0..2 {
                let id = format!("call_{}", alnum(rng, 24));
                let name = FUNCTIONS[(index as usize + k) % FUNCTIONS.len()].to_string();
                let args = arguments_text(rng, (chunks / 2).max(1) * 4);
                let frags = fragments(rng, &args);
                expected.tool_calls.push((id.clone(), name.clone(), args));
                calls.push((id, name, frags));
            }
            expected.finish_reason = "tool_calls";
            Plan::Tools {
                calls,
                call: 0,
                fragment: 0,
                started_call: false,
            }
        } else {
            expected.content = Some(String::new());
            expected.finish_reason = "stop";
            Plan::Text {
                left: chunks,
                started: false,
            }
        };
        ChoiceGen {
            index,
            plan,
            finished: false,
            expected,
        }
    }

    /// Writes the next `choices[0]` object of this choice into `out`; returns what it
    /// carried: 1 for a content delta, 2 for an argument fragment, 0 otherwise.
    fn next_choice(&mut self, rng: &mut Rng, seq: usize, seq_tags: bool, out: &mut String) -> u8 {
        let index = self.index;
        let finish = |out: &mut String, reason: &str| {
            let _ = write!(
                out,
                "{{\"index\":{index},\"delta\":{{}},\"logprobs\":null,\"finish_reason\":\"{reason}\"}}"
            );
        };
        match &mut self.plan {
            Plan::Text { left, started } => {
                if !*started {
                    *started = true;
                    let _ = write!(
                        out,
                        "{{\"index\":{index},\"delta\":{{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null}},\"logprobs\":null,\"finish_reason\":null}}"
                    );
                    return 0;
                }
                if *left == 0 {
                    finish(out, "stop");
                    self.finished = true;
                    return 0;
                }
                *left -= 1;
                let (text, json) = if rng.chance(0.06) {
                    let s = &SPECIAL[rng.below(SPECIAL.len())];
                    (s.text, s.json)
                } else {
                    let w = WORDS[rng.below(WORDS.len())];
                    (w, w)
                };
                let content = self.expected.content.as_mut().expect("a text choice");
                let _ = write!(out, "{{\"index\":{index},\"delta\":{{\"content\":\"");
                if seq_tags {
                    let tag = format!("⟨{seq}⟩");
                    content.push_str(&tag);
                    out.push_str(&tag);
                }
                content.push_str(text);
                out.push_str(json);
                out.push_str("\"},\"logprobs\":null,\"finish_reason\":null}");
                1
            }
            Plan::Tools {
                calls,
                call,
                fragment,
                started_call,
            } => {
                if *call == calls.len() {
                    finish(out, "tool_calls");
                    self.finished = true;
                    return 0;
                }
                let (id, name, frags) = &calls[*call];
                if !*started_call {
                    *started_call = true;
                    let role = if *call == 0 {
                        "\"role\":\"assistant\",\"content\":null,"
                    } else {
                        ""
                    };
                    let _ = write!(
                        out,
                        "{{\"index\":{index},\"delta\":{{{role}\"tool_calls\":[{{\"index\":{call},\"id\":\"{id}\",\"type\":\"function\",\"function\":{{\"name\":\"{name}\",\"arguments\":\"\"}}}}]{refusal}}},\"logprobs\":null,\"finish_reason\":null}}",
                        refusal = if *call == 0 { ",\"refusal\":null" } else { "" },
                    );
                    return 0;
                }
                let frag = json_str(&frags[*fragment]);
                let _ = write!(
                    out,
                    "{{\"index\":{index},\"delta\":{{\"tool_calls\":[{{\"index\":{call},\"function\":{{\"arguments\":{frag}}}}}]}},\"logprobs\":null,\"finish_reason\":null}}"
                );
                *fragment += 1;
                if *fragment == frags.len() {
                    *call += 1;
                    *fragment = 0;
                    *started_call = false;
                }
                2
            }
        }
    }
}

/// Average size of a chunk event on the wire, bytes (`data: `, JSON, blank line): the
/// envelope of a real OpenAI chunk is ~285 bytes before its content and padding.
pub const CHUNK_BYTES: usize = 295;

/// The usage-only chunk of `stream_options.include_usage` (`"choices":[]`), `head` being the
/// event's beginning up to `"choices":[`.
fn usage_event(head: &str, prompt_tokens: usize, completion_tokens: usize, pad: &str) -> String {
    format!(
        "{head}],\"usage\":{{\"prompt_tokens\":{prompt_tokens},\"completion_tokens\":{completion_tokens},\"total_tokens\":{total},\"prompt_tokens_details\":{{\"cached_tokens\":0,\"audio_tokens\":0}},\"completion_tokens_details\":{{\"reasoning_tokens\":0,\"audio_tokens\":0,\"accepted_prediction_tokens\":0,\"rejected_prediction_tokens\":0}}}},\"obfuscation\":\"{pad}\"}}\n\n",
        total = prompt_tokens + completion_tokens,
    )
}

/// Generates a stream.
pub fn generate(config: &GenConfig) -> Generated {
    let n = config.n.max(1) as usize;
    let mut rng = Rng::new(config.seed ^ ((n as u64) << 32));
    let total_chunks = (config.target_bytes / CHUNK_BYTES).max(n * 4);

    // About a quarter of the choices make tool calls (none when n = 1): indexes 3, 7, 11...
    // Choices of different lengths (±20%), the total kept at `total_chunks`.
    let weights: Vec<usize> = (0..n).map(|_| rng.range(80, 120)).collect();
    let weight_sum: usize = weights.iter().sum();
    let mut choices: Vec<ChoiceGen> = (0..n)
        .map(|i| {
            let chunks = total_chunks * weights[i] / weight_sum;
            ChoiceGen::new(&mut rng, i as u32, chunks.max(2), i % 4 == 3)
        })
        .collect();

    // Order of first appearance: a shuffle that never starts with choice 0 (when n > 1).
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.below(i + 1));
    }
    if n > 1 && order[0] == 0 {
        order.swap(0, 1 + rng.below(n - 1));
    }

    let id = format!("chatcmpl-{}", alnum(&mut rng, 29));
    let fingerprint = format!("fp_{}", alnum(&mut rng, 10).to_lowercase());
    let created = 1_753_800_000 + rng.below(1_000_000) as u64;
    let head = format!(
        "data: {{\"id\":\"{id}\",\"object\":\"chat.completion.chunk\",\"created\":{created},\"model\":\"gpt-4o-mini\",\"system_fingerprint\":\"{fingerprint}\",\"choices\":["
    );

    let mut bytes = Vec::with_capacity(config.target_bytes + config.target_bytes / 8);
    let mut event_ends = Vec::with_capacity(total_chunks + n * 4);
    let mut choice_json = String::with_capacity(512);
    let mut content_deltas = 0;
    let mut argument_fragments = 0;
    let push_event =
        |bytes: &mut Vec<u8>, event_ends: &mut Vec<usize>, rng: &mut Rng, body: &str| {
            bytes.extend_from_slice(head.as_bytes());
            bytes.extend_from_slice(body.as_bytes());
            bytes.extend_from_slice(b"],\"usage\":null,\"obfuscation\":\"");
            // The obfuscation field: random padding of varying length, as OpenAI's.
            let pad = rng.range(1, 16);
            bytes.extend(std::iter::repeat_with(|| ALNUM[rng.below(ALNUM.len())]).take(pad));
            bytes.extend_from_slice(b"\"}\n\n");
            event_ends.push(bytes.len());
        };

    let mut started = 0;
    let mut active: Vec<usize> = Vec::new();
    let mut first_appearance = Vec::new();
    while started < n || !active.is_empty() {
        let current = if started < n && (active.is_empty() || rng.chance(0.5)) {
            let c = order[started];
            started += 1;
            active.push(c);
            first_appearance.push(c as u32);
            active.len() - 1
        } else {
            rng.below(active.len())
        };
        // Bursts: a choice often sends several chunks in a row.
        let burst = 1 + rng.below(4) + if rng.chance(0.2) { rng.below(12) } else { 0 };
        for _ in 0..burst {
            let c = &mut choices[active[current]];
            choice_json.clear();
            let seq = event_ends.len();
            match c.next_choice(&mut rng, seq, config.seq_tags, &mut choice_json) {
                1 => content_deltas += 1,
                2 => argument_fragments += 1,
                _ => {}
            }
            push_event(&mut bytes, &mut event_ends, &mut rng, &choice_json);
            if c.finished {
                active.swap_remove(current);
                break;
            }
        }
    }

    // The usage-only chunk of `stream_options.include_usage`.
    let completion_tokens = event_ends.len();
    let prompt_tokens = 20 + rng.below(400);
    let pad = alnum(&mut rng, 8);
    let usage_event = usage_event(&head, prompt_tokens, completion_tokens, &pad);
    bytes.extend_from_slice(usage_event.as_bytes());
    event_ends.push(bytes.len());
    let chunks = event_ends.len();
    bytes.extend_from_slice(b"data: [DONE]\n\n");
    event_ends.push(bytes.len());

    Generated {
        bytes,
        event_ends,
        chunks,
        content_deltas,
        argument_fragments,
        expected: choices.into_iter().map(|c| c.expected).collect(),
        first_appearance,
    }
}

/// The choices of `g` as separate streams of one choice each, as `n` requests of `n = 1`
/// with the same prompt would send them (for the fan-out benchmark). Stream `i` carries
/// choice `i`'s chunks of `g` in the same order, byte for byte but for `"index":0` in place
/// of `"index":i`, then a usage-only chunk of its own (the same prompt tokens, its own
/// completion tokens) and `data: [DONE]`.
pub fn split_choices(g: &Generated) -> Vec<Vec<u8>> {
    const CHOICES: &str = "\"choices\":[";
    const INDEX: &str = "{\"index\":";
    let n = g.expected.len();
    let event = |k: usize| {
        let start = if k == 0 { 0 } else { g.event_ends[k - 1] };
        std::str::from_utf8(&g.bytes[start..g.event_ends[k]]).expect("generated events are UTF-8")
    };
    let mut streams = vec![Vec::with_capacity(g.bytes.len() / n + 4096); n];
    let mut events = vec![0usize; n];
    // Every event but the last two (the usage-only chunk and `[DONE]`) carries one choice.
    for k in 0..g.chunks - 1 {
        let e = event(k);
        let at = e.find(CHOICES).expect("a chunk event") + CHOICES.len();
        let rest = e[at..].strip_prefix(INDEX).expect("one choice per chunk");
        let comma = rest.find(',').expect("an index");
        let i: usize = rest[..comma].parse().expect("a numeric index");
        let out = &mut streams[i];
        out.extend_from_slice(&e.as_bytes()[..at]);
        out.extend_from_slice(INDEX.as_bytes());
        out.push(b'0');
        out.extend_from_slice(&rest.as_bytes()[comma..]);
        events[i] += 1;
    }
    let usage = event(g.chunks - 1);
    let head = &usage[..usage.find(CHOICES).expect("the usage chunk") + CHOICES.len()];
    const PROMPT: &str = "\"prompt_tokens\":";
    let prompt = &usage[usage.find(PROMPT).expect("prompt tokens") + PROMPT.len()..];
    let prompt_tokens: usize = prompt[..prompt.find(',').expect("a number")]
        .parse()
        .expect("prompt tokens");
    for (i, out) in streams.iter_mut().enumerate() {
        let pad = alnum(&mut Rng::new(i as u64), 8);
        out.extend_from_slice(usage_event(head, prompt_tokens, events[i], &pad).as_bytes());
        out.extend_from_slice(b"data: [DONE]\n\n");
    }
    streams
}

#[cfg(test)]
mod tests {
    use super::*;
    use choicewise::wire::ChatCompletionChunk;
    use choicewise_sse::Framer;
    use std::ops::ControlFlow;

    fn small(n: u32, seq_tags: bool) -> Generated {
        generate(&GenConfig {
            n,
            target_bytes: 300_000,
            seed: 7,
            seq_tags,
        })
    }

    #[test]
    fn split_choices_carry_the_same_choices() {
        let g = small(16, false);
        let streams = split_choices(&g);
        assert_eq!(streams.len(), 16);
        let mut choice_bytes = 0;
        for (i, s) in streams.iter().enumerate() {
            let mut demux = choicewise::Demux::new();
            demux.feed(s).unwrap();
            let whole = demux.finish().unwrap();
            assert_eq!(whole.choices.len(), 1);
            let (out, exp) = (&whole.choices[0], &g.expected[i]);
            assert_eq!(out.index, 0);
            let content = out.message.content.as_deref().filter(|c| !c.is_empty());
            assert_eq!(content, exp.content.as_deref());
            assert_eq!(out.finish_reason.as_deref(), Some(exp.finish_reason));
            let calls: Vec<_> = out
                .message
                .tool_calls
                .iter()
                .map(|t| {
                    (
                        t.id.as_str(),
                        t.function.name.as_str(),
                        t.function.arguments.as_str(),
                    )
                })
                .collect();
            let expected: Vec<_> = exp
                .tool_calls
                .iter()
                .map(|(id, name, args)| (id.as_str(), name.as_str(), args.as_str()))
                .collect();
            assert_eq!(calls, expected);
            // The choice's chunks end where its usage-only chunk begins, which counts them.
            let text = std::str::from_utf8(s).unwrap();
            let usage_at = text.rfind("data: {").unwrap();
            choice_bytes += usage_at;
            let usage_data = text[usage_at + 6..].split("\n\n").next().unwrap();
            let usage: serde_json::Value = serde_json::from_str(usage_data).unwrap();
            assert_eq!(
                usage["usage"]["completion_tokens"].as_u64().unwrap() as usize,
                text[..usage_at].matches("data: {").count()
            );
        }
        // The same chunk bytes but for the index: one digit fewer per chunk of choices 10+.
        let index_digits: usize = g.event_ends[..g.chunks - 1]
            .iter()
            .zip(std::iter::once(&0).chain(&g.event_ends))
            .map(|(&end, &start)| {
                let e = std::str::from_utf8(&g.bytes[start..end]).unwrap();
                let marker = "\"choices\":[{\"index\":";
                let i = e.find(marker).unwrap() + marker.len();
                e[i..].find(',').unwrap() - 1
            })
            .sum();
        let usage_start = g.event_ends[g.chunks - 2];
        assert_eq!(choice_bytes, usage_start - index_digits);
    }

    #[test]
    fn deterministic() {
        assert_eq!(small(4, false).bytes, small(4, false).bytes);
    }

    #[test]
    fn every_event_parses_and_chunks_are_about_295_bytes() {
        for n in [1, 4, 16] {
            let g = small(n, false);
            let mut framer = Framer::new();
            let mut events = 0;
            framer
                .feed(&g.bytes, |ev| {
                    events += 1;
                    if ev.data != "[DONE]" {
                        let c: ChatCompletionChunk = serde_json::from_str(ev.data)
                            .unwrap_or_else(|e| panic!("{e}: {}", ev.data));
                        assert!(c.choices.len() <= 1);
                    }
                    ControlFlow::Continue(())
                })
                .unwrap();
            assert_eq!(events, g.chunks + 1);
            let avg = g.bytes.len() / g.chunks;
            assert!((280..310).contains(&avg), "n={n}: {avg} bytes per chunk");
            if n > 1 {
                assert_ne!(g.first_appearance[0], 0);
            }
            assert_eq!(g.expected.len(), n as usize);
            assert_eq!(
                g.expected
                    .iter()
                    .filter(|e| !e.tool_calls.is_empty())
                    .count(),
                n as usize / 4
            );
            for e in &g.expected {
                for (_, _, args) in &e.tool_calls {
                    serde_json::from_str::<serde_json::Value>(args).unwrap();
                }
            }
        }
    }
}
