//! The invariants the fuzz targets check (feature `invariants`), shared with the core's
//! `tests/hostile.rs` and `tests/load.rs`, so that every input kept in `fuzz/regressions/` is
//! replayed by a plain `cargo test`, without the fuzzer.
//!
//! Only `choicewise_core` (and its re-export of `choicewise-partial-json`), `serde`,
//! `serde_json`, `futures` and `tokio` are used here: the dependencies the root package's
//! integration tests have too. The framer-level target (`sse_framing`) needs `choicewise_sse`
//! and keeps its check in the fuzz crate; its inputs share the layout of [`StreamInput`], so
//! the replay runs them through [`check_pipeline`], which frames them as well.

use std::time::Duration;

use choicewise_core::wire::ChatCompletionChunk;
use choicewise_core::{ChatCompletion, ChoiceEvent, Completions, Source};
use choicewise_partial_json::PartialJson;
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

// ------------------------------------------------------------------------------ helpers

/// SplitMix64: a tiny deterministic generator, so that an input decides its own read split.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform-ish in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Cuts `bytes` into reads of the given sizes, cycling through them (a size of 0 counts as 1).
pub fn split<'a>(bytes: &'a [u8], sizes: &[usize]) -> Vec<&'a [u8]> {
    let mut reads = Vec::new();
    let mut at = 0;
    let mut i = 0;
    while at < bytes.len() {
        let n = sizes
            .get(i % sizes.len().max(1))
            .copied()
            .unwrap_or(usize::MAX)
            .max(1)
            .min(bytes.len() - at);
        reads.push(&bytes[at..at + n]);
        at += n;
        i += 1;
    }
    reads
}

/// Read sizes derived from a seed: 1 to 8 sizes, mostly small (so lines, CRLFs and
/// multi-byte characters are cut at every phase), sometimes large.
pub fn sizes_from_seed(seed: u64) -> Vec<usize> {
    let mut rng = Rng::new(seed);
    let count = 1 + rng.below(8) as usize;
    (0..count)
        .map(|_| match rng.below(4) {
            0 => 1,
            1 | 2 => 1 + rng.below(16) as usize,
            _ => 1 + rng.below(512) as usize,
        })
        .collect()
}

/// The input layout shared by `sse_framing` and `pipeline`: a byte choosing the event size
/// limit, two bytes seeding the read split, then the stream bytes.
#[derive(Debug, Clone)]
pub struct StreamInput<'a> {
    /// `None`: the default limit (8 MiB); else a small limit, to reach `EventTooLarge`.
    pub max_event_size: Option<usize>,
    pub sizes: Vec<usize>,
    pub data: &'a [u8],
}

impl<'a> StreamInput<'a> {
    pub fn decode(bytes: &'a [u8]) -> Self {
        let flags = bytes.first().copied().unwrap_or(0);
        let seed = u64::from(bytes.get(1).copied().unwrap_or(0))
            | u64::from(bytes.get(2).copied().unwrap_or(0)) << 8;
        StreamInput {
            max_event_size: (flags & 0x80 != 0).then(|| 16 + usize::from(flags & 0x7f) * 8),
            sizes: sizes_from_seed(seed),
            data: bytes.get(3..).unwrap_or_default(),
        }
    }
}

/// How long one completion may take before the check calls it a hang.
pub const HANG: Duration = Duration::from_secs(20);

// ------------------------------------------------------------------------------ chunk_parse

/// Whether two JSON values are equal, floats within a few units in the last place: serde_json
/// (built without its `float_roundtrip` feature) may parse the shortest representation of a
/// float it printed into a neighbouring float.
pub fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) => x == y || (x - y).abs() <= 1e-15 * x.abs().max(y.abs()),
                _ => false,
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_eq(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// Any bytes (read as UTF-8, lossily) as an event's data: parsing never panics; a parsed
/// chunk equals its `into_owned()` and a second parse, and survives serialise-then-parse
/// (up to float rounding, see [`json_eq`]).
pub fn check_chunk_parse(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let Ok(chunk) = serde_json::from_str::<ChatCompletionChunk<'_>>(&text) else {
        return;
    };
    let again = serde_json::from_str::<ChatCompletionChunk<'_>>(&text).expect("parsed once");
    assert_eq!(chunk, again, "parsing is not deterministic");
    let owned = chunk.clone().into_owned();
    assert_eq!(owned, chunk, "into_owned changed the chunk");
    // Serialised, a chunk is canonical (arguments sent as a JSON value become their string):
    // parsing that again gives the same serialisation.
    let serialised = serde_json::to_value(&owned).expect("a parsed chunk serialises");
    let text = serialised.to_string();
    let reparsed = serde_json::from_str::<ChatCompletionChunk<'_>>(&text)
        .unwrap_or_else(|e| panic!("its serialisation {text} does not parse: {e}"));
    let again = serde_json::to_value(&reparsed).expect("serialises");
    assert!(
        json_eq(&again, &serialised),
        "serialise then parse changed the chunk:\n{text}\n{again}"
    );
}

// ------------------------------------------------------------------------------ partial_json

pub use crate::prefix::is_prefix_consistent;

/// Whether a JSON text has an object with a repeated key anywhere (serde_json keeps the last;
/// partial snapshots are not prefix-consistent then, by design).
pub fn has_duplicate_keys(text: &str) -> bool {
    struct Walk(bool);
    impl<'de> serde::de::DeserializeSeed<'de> for &mut Walk {
        type Value = ();
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> serde::de::Visitor<'de> for &mut Walk {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element_seed(&mut *self)?.is_some() {}
            Ok(())
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut keys = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<String>()? {
                self.0 |= !keys.insert(key);
                map.next_value_seed(&mut *self)?;
            }
            Ok(())
        }
    }
    let mut walk = Walk(false);
    let mut de = serde_json::Deserializer::from_str(text);
    let _ = serde::de::DeserializeSeed::deserialize(&mut walk, &mut de);
    walk.0
}

/// The fragments of a `partial_json` input: the first byte seeds the split, the rest is the
/// text (read as UTF-8, lossily), cut at character boundaries.
pub fn partial_json_fragments(bytes: &[u8]) -> (String, Vec<String>) {
    let seed = u64::from(bytes.first().copied().unwrap_or(0));
    let text = String::from_utf8_lossy(bytes.get(1..).unwrap_or_default()).into_owned();
    let sizes = sizes_from_seed(seed);
    let mut fragments = Vec::new();
    let mut at = 0;
    let mut i = 0;
    while at < text.len() {
        let mut end = (at + sizes[i % sizes.len()]).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        fragments.push(text[at..end].to_string());
        at = end;
        i += 1;
    }
    (text, fragments)
}

/// Any text, in fragments: the parser never panics; however it is split, it gives the same
/// result as in one piece; it accepts exactly what serde_json accepts (beyond serde_json's
/// nesting limit of 128 it may accept more), with the same value; a prefix of a valid text
/// never errors and every intermediate value is prefix-consistent with the final one.
pub fn check_partial_json(bytes: &[u8]) {
    let (text, fragments) = partial_json_fragments(bytes);
    let whole = {
        let mut p = PartialJson::new();
        p.push(&text).and_then(|()| p.finish())
    };
    let expected = serde_json::from_str::<Value>(&text);
    let consistent = expected.is_ok() && !has_duplicate_keys(&text);
    let mut p = PartialJson::new();
    let mut failed = false;
    for fragment in &fragments {
        if let Err(e) = p.push(fragment) {
            assert!(
                expected.is_err(),
                "a prefix of valid JSON {text:?} failed at {fragment:?}: {e}"
            );
            failed = true;
            break;
        }
        if let (true, Some(snapshot), Ok(complete)) = (consistent, p.snapshot(), &expected) {
            assert!(
                is_prefix_consistent(snapshot, complete),
                "value {:?} after {fragment:?} is not a prefix of {complete} (text {text:?})",
                p.value()
            );
        }
    }
    let split = if failed {
        Err(p.error().cloned().expect("failed push leaves its error"))
    } else {
        p.finish()
    };
    assert_eq!(split, whole, "split {fragments:?} changed the result");
    match expected {
        Ok(v) => assert_eq!(whole, Ok(v), "disagrees with serde_json on {text:?}"),
        Err(e) if e.to_string().contains("recursion limit") => {}
        Err(e) => assert!(
            whole.is_err(),
            "accepted {text:?}, which serde_json rejects: {e}"
        ),
    }
}

// ------------------------------------------------------------------------------ pipeline

/// Everything a consumer can observe of one completion, in comparable form.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    /// `collect()`: the completion, or the partial one with the error (as `Debug`).
    pub result: Result<ChatCompletion, (ChatCompletion, String)>,
    /// Per choice in order of first appearance: its index, its events, and the error that
    /// ended its streams, if any.
    pub choices: Vec<(u32, Vec<ChoiceEvent>, Option<String>)>,
    /// Each failed choice's error by index, a late one included (an update after the finish
    /// that broke a limit, which does not end the streams): `choice_errors()`.
    pub errors: Vec<(u32, String)>,
    /// `warnings()`, as `Debug`, sorted (the choices' actors report concurrently).
    pub warnings: Vec<String>,
}

/// Runs one completion over `reads` and observes everything.
pub async fn observe(completions: Completions) -> Observed {
    let result = match completions.collect().await {
        Ok(c) => Ok(c),
        Err(inc) => Err((inc.partial, format!("{:?}", inc.error))),
    };
    let mut indexes = Vec::new();
    {
        let mut choices = completions.choices();
        while let Some(choice) = choices.next().await {
            indexes.push(choice);
        }
    }
    let mut choices = Vec::new();
    for choice in indexes {
        let mut events = Vec::new();
        let mut error = None;
        let mut stream = choice.events();
        loop {
            match stream.try_next().await {
                Ok(Some(e)) => events.push(e),
                Ok(None) => break,
                Err(e) => {
                    error = Some(format!("{e:?}"));
                    break;
                }
            }
        }
        choices.push((choice.index(), events, error));
    }
    let errors = completions
        .choice_errors()
        .await
        .into_iter()
        .map(|(index, e)| (index, format!("{e:?}")))
        .collect();
    let mut warnings: Vec<String> = completions
        .warnings()
        .iter()
        .map(|w| format!("{w:?}"))
        .collect();
    warnings.sort();
    Observed {
        result,
        choices,
        errors,
        warnings,
    }
}

/// Feeds `reads` to `Source::sse` and observes the result, failing on a hang.
pub async fn run_reads(reads: Vec<Vec<u8>>, max_event_size: Option<usize>) -> Observed {
    run_reads_paced(reads, max_event_size, false).await
}

/// As `run_reads`; with `retiring`, the upstream yields before every read and the choice
/// actors retire whenever it waits (`hibernate_after(0)`), so that retirements race updates.
pub async fn run_reads_paced(
    reads: Vec<Vec<u8>>,
    max_event_size: Option<usize>,
    retiring: bool,
) -> Observed {
    let mut builder = Completions::builder().estimate_usage(false);
    if let Some(limit) = max_event_size {
        builder = builder.max_event_size(limit);
    }
    let completions = if retiring {
        let stream = futures::stream::iter(reads).then(|read| async move {
            tokio::task::yield_now().await;
            Ok::<_, std::io::Error>(read)
        });
        builder
            .hibernate_after(std::time::Duration::ZERO)
            .start(Source::sse(stream))
    } else {
        let stream = futures::stream::iter(reads.into_iter().map(Ok::<_, std::io::Error>));
        builder.start(Source::sse(stream))
    };
    match tokio::time::timeout(HANG, observe(completions)).await {
        Ok(observed) => observed,
        Err(_) => panic!("the completion did not end within {HANG:?}"),
    }
}

/// The same observation without the warnings that legitimately depend on the read split:
/// `DataAfterDone` counts the bytes after `[DONE]` *in the same read*.
fn split_independent(mut o: Observed) -> Observed {
    o.warnings.retain(|w| !w.contains("DataAfterDone"));
    o
}

/// Feeds `reads` to a [`choicewise_core::Demux`] (no runtime) and observes what the actors'
/// consumers would: the result, each choice's events and the error that ended its streams,
/// the warnings.
pub fn observe_demux(reads: &[&[u8]], max_event_size: Option<usize>) -> Observed {
    let mut builder = Completions::builder();
    if let Some(limit) = max_event_size {
        builder = builder.max_event_size(limit);
    }
    let mut demux = builder.demux();
    for read in reads {
        if demux.feed(read).is_err() {
            break;
        }
    }
    let result = match demux.finish() {
        Ok(c) => Ok(c),
        Err(inc) => Err((inc.partial, format!("{:?}", inc.error))),
    };
    let choices = demux
        .indexes()
        .into_iter()
        .map(|index| {
            let ended_by = demux.ended(index).and_then(Result::err);
            (
                index,
                demux.events(index),
                ended_by.map(|e| format!("{e:?}")),
            )
        })
        .collect();
    let mut errors: Vec<(u32, String)> = demux
        .indexes()
        .into_iter()
        .filter_map(|index| {
            let (_, error) = demux.choice(index)?;
            error.map(|e| (index, format!("{e:?}")))
        })
        .collect();
    errors.sort_by_key(|(index, _)| *index);
    let mut warnings: Vec<String> = demux.warnings().iter().map(|w| format!("{w:?}")).collect();
    warnings.sort();
    Observed {
        result,
        choices,
        errors,
        warnings,
    }
}

/// The observation without the usage (`Demux` counts none; the actors report the stream's).
fn without_usage(mut o: Observed) -> Observed {
    match &mut o.result {
        Ok(c) | Err((c, _)) => c.usage = None,
    }
    o
}

/// Arbitrary bytes through `Demux`, without a runtime: never a panic, and the same
/// observation whole, in the input's split, and (for short inputs) in single bytes.
pub fn check_demux(bytes: &[u8]) {
    let input = StreamInput::decode(bytes);
    let whole = split_independent(observe_demux(&[input.data], input.max_event_size));
    let mut splits = vec![input.sizes.clone()];
    if input.data.len() <= 2048 {
        splits.push(vec![1]);
    }
    for sizes in splits {
        let reads = split(input.data, &sizes);
        let observed = split_independent(observe_demux(&reads, input.max_event_size));
        assert_eq!(
            observed, whole,
            "the read split {sizes:?} changed the outcome"
        );
    }
}

/// Arbitrary bytes through the whole pipeline: never a panic (an `ActorFailed` would be one,
/// caught), never a hang, and the same observation whole, in the input's split, and (for
/// short inputs) in single bytes.
pub async fn check_pipeline(bytes: &[u8]) {
    let input = StreamInput::decode(bytes);
    let whole = run_reads(vec![input.data.to_vec()], input.max_event_size).await;
    if let Err((_, error)) = &whole.result {
        assert!(!error.contains("ActorFailed"), "a caught panic: {error}");
    }
    let whole = split_independent(whole);
    // The actors and the runtime-free demultiplexer agree.
    let demux = split_independent(observe_demux(&[input.data], input.max_event_size));
    assert_eq!(
        without_usage(demux),
        without_usage(whole.clone()),
        "Demux and the actors differ"
    );
    let mut splits = vec![input.sizes.clone()];
    if input.data.len() <= 2048 {
        splits.push(vec![1]);
    }
    for (k, sizes) in splits.into_iter().enumerate() {
        let reads: Vec<Vec<u8>> = split(input.data, &sizes)
            .into_iter()
            .map(<[u8]>::to_vec)
            .collect();
        let retiring = k == 0;
        if retiring {
            let observed = run_reads_paced(reads.clone(), input.max_event_size, true).await;
            assert_eq!(
                split_independent(observed),
                whole,
                "retiring the actors between the reads of {sizes:?} changed the outcome"
            );
        }
        let observed = split_independent(run_reads(reads, input.max_event_size).await);
        assert_eq!(
            observed, whole,
            "the read split {sizes:?} changed the outcome"
        );
    }
}

// ------------------------------------------------------------------------------ merge

/// One update of one choice, as the merge target generates them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Update {
    Role(String),
    Content(String),
    Reasoning(String),
    Refusal(String),
    Tool {
        index: Option<u32>,
        id: Option<String>,
        kind: Option<String>,
        name: Option<String>,
        arguments: Option<String>,
    },
    Function {
        name: Option<String>,
        arguments: Option<String>,
    },
    /// Arguments sent as a JSON value instead of a string.
    ToolJson {
        index: Option<u32>,
        value: Value,
    },
    Logprobs(Vec<String>),
    Finish(Option<String>),
}

/// A multi-choice completion and how to scramble it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    /// Choice `i`'s updates (choice index `indexes[i]`).
    pub choices: Vec<Vec<Update>>,
    /// The index of each choice (distinct).
    pub indexes: Vec<u32>,
    /// Which choice's next update comes next in the interleaved stream.
    pub picks: Vec<u8>,
    /// Whether an update joins the previous chunk (when that chunk has no update of its
    /// choice).
    pub group: Vec<bool>,
    /// The read sizes of the interleaved stream.
    pub sizes: Vec<usize>,
    /// `max_tool_calls`, when not the default.
    pub max_tool_calls: Option<usize>,
}

impl Scenario {
    /// Keeps the scenario within the bounds the check assumes: 1 to 6 choices with distinct
    /// indexes.
    pub fn normalise(mut self) -> Option<Self> {
        self.choices.truncate(6);
        self.indexes.truncate(self.choices.len());
        let mut next = 0;
        while self.indexes.len() < self.choices.len() {
            while self.indexes.contains(&next) {
                next += 1;
            }
            self.indexes.push(next);
        }
        let mut seen = std::collections::HashSet::new();
        for i in &mut self.indexes {
            while !seen.insert(*i) {
                *i = i.wrapping_add(1);
            }
        }
        (!self.choices.is_empty()).then_some(self)
    }
}

fn update_json(index: u32, u: &Update) -> Value {
    match u {
        Update::Role(r) => json!({"index": index, "delta": {"role": r}}),
        Update::Content(t) => json!({"index": index, "delta": {"content": t}}),
        Update::Reasoning(t) => json!({"index": index, "delta": {"reasoning_content": t}}),
        Update::Refusal(t) => json!({"index": index, "delta": {"refusal": t}}),
        Update::Tool {
            index: call,
            id,
            kind,
            name,
            arguments,
        } => {
            let mut t = json!({"function": {}});
            if let Some(c) = call {
                t["index"] = json!(c);
            }
            if let Some(id) = id {
                t["id"] = json!(id);
            }
            if let Some(k) = kind {
                t["type"] = json!(k);
            }
            if let Some(n) = name {
                t["function"]["name"] = json!(n);
            }
            if let Some(a) = arguments {
                t["function"]["arguments"] = json!(a);
            }
            json!({"index": index, "delta": {"tool_calls": [t]}})
        }
        Update::Function { name, arguments } => {
            json!({"index": index, "delta": {"function_call": {"name": name, "arguments": arguments}}})
        }
        Update::ToolJson { index: call, value } => {
            json!({"index": index, "delta": {"tool_calls": [{"index": call, "function": {"arguments": value}}]}})
        }
        Update::Logprobs(tokens) => {
            let content: Vec<Value> = tokens
                .iter()
                .map(|t| json!({"token": t, "logprob": -1.0}))
                .collect();
            json!({"index": index, "delta": {}, "logprobs": {"content": content}})
        }
        Update::Finish(reason) => json!({"index": index, "delta": {}, "finish_reason": reason}),
    }
}

/// SSE bytes of the given chunks (each a list of `choices[]` entries), with `[DONE]`.
pub fn sse(chunks: &[Vec<Value>]) -> Vec<u8> {
    let mut out = String::new();
    for entries in chunks {
        let chunk = json!({"id": "chatcmpl-fuzz", "object": "chat.completion.chunk",
                           "created": 1, "model": "m", "choices": entries});
        out.push_str(&format!("data: {chunk}\n\n"));
    }
    out.push_str("data: [DONE]\n\n");
    out.into_bytes()
}

/// Each choice's updates in one run, one per chunk.
pub fn orderly(s: &Scenario) -> Vec<Vec<Value>> {
    s.choices
        .iter()
        .zip(&s.indexes)
        .flat_map(|(updates, &i)| updates.iter().map(move |u| vec![update_json(i, u)]))
        .collect()
}

/// The choices' updates interleaved as `picks` says, grouped into chunks as `group` says.
pub fn interleaved(s: &Scenario) -> Vec<Vec<Value>> {
    let n = s.choices.len();
    let mut cursors = vec![0usize; n];
    let total: usize = s.choices.iter().map(Vec::len).sum();
    let mut chunks: Vec<(Vec<usize>, Vec<Value>)> = Vec::new();
    for k in 0..total {
        let mut c = usize::from(s.picks.get(k).copied().unwrap_or(0)) % n;
        while cursors[c] == s.choices[c].len() {
            c = (c + 1) % n;
        }
        let entry = update_json(s.indexes[c], &s.choices[c][cursors[c]]);
        cursors[c] += 1;
        let joins = s.group.get(k).copied().unwrap_or(false)
            && chunks.last().is_some_and(|(who, _)| !who.contains(&c));
        match chunks.last_mut() {
            Some((who, entries)) if joins => {
                who.push(c);
                entries.push(entry);
            }
            _ => chunks.push((vec![c], vec![entry])),
        }
    }
    chunks.into_iter().map(|(_, entries)| entries).collect()
}

/// Lines and byte offsets differ between two orderings of the same updates: set them to 0.
pub fn without_lines(mut o: Observed) -> Observed {
    fn strip_key(s: &str, key: &str) -> String {
        // `line: 12` → `line: 0` in the Debug form of errors.
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(at) = rest.find(key) {
            out.push_str(&rest[..at + key.len()]);
            rest = &rest[at + key.len()..];
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            out.push('0');
            rest = &rest[digits..];
        }
        out.push_str(rest);
        out
    }
    fn strip(s: &str) -> String {
        strip_key(&strip_key(s, "line: "), "offset: ")
    }
    if let Err((_, e)) = &mut o.result {
        *e = strip(e);
    }
    for (_, events, error) in &mut o.choices {
        for e in events.iter_mut() {
            if let ChoiceEvent::Warning(w) = e {
                w.line = 0;
            }
        }
        if let Some(e) = error {
            *e = strip(e);
        }
    }
    for (_, e) in &mut o.errors {
        *e = strip(e);
    }
    // Which choice appears first, and the completion's warnings (whose lines differ), are
    // properties of the ordering.
    o.choices.sort_by_key(|(i, ..)| *i);
    o.warnings.clear();
    o
}

/// Runs one SSE byte stream with the scenario's options.
pub async fn run_scenario_bytes(s: &Scenario, reads: Vec<Vec<u8>>) -> Observed {
    let mut builder = Completions::builder().estimate_usage(false);
    if let Some(m) = s.max_tool_calls {
        builder = builder.max_tool_calls(m);
    }
    let stream = futures::stream::iter(reads.into_iter().map(Ok::<_, std::io::Error>));
    match tokio::time::timeout(HANG, observe(builder.start(Source::sse(stream)))).await {
        Ok(o) => o,
        Err(_) => panic!("the completion did not end within {HANG:?}"),
    }
}

/// The orderly stream (each choice's updates in one run, one read) and the scenario's
/// interleaving and read split give the same result (`collect()` and every choice's events,
/// up to line numbers); and the text is what the updates say.
pub async fn check_merge(s: &Scenario) {
    let reference = run_scenario_bytes(s, vec![sse(&orderly(s))]).await;
    let shuffled = sse(&interleaved(s));
    let reads = split(&shuffled, &s.sizes)
        .into_iter()
        .map(<[u8]>::to_vec)
        .collect();
    let actual = run_scenario_bytes(s, reads).await;
    if let Err((_, error)) = &reference.result {
        assert!(!error.contains("ActorFailed"), "a caught panic: {error}");
    }
    let (mut reference, mut actual) = (without_lines(reference), without_lines(actual));
    // When several choices failed, `collect()` reports the first in order of first
    // appearance, which the interleaving decides: it must be one of the choices' errors (a
    // late one included: it ends no stream, so only `errors` has it).
    for o in [&mut reference, &mut actual] {
        let Err((_, e)) = &mut o.result else {
            continue;
        };
        if o.errors.iter().any(|(_, error)| error == e) {
            *e = "(the error of one of the choices)".to_string();
        }
    }
    assert_eq!(actual, reference, "the interleaving changed the result");
    // An independent accumulation of the text, when the choice did not fail.
    let Ok(completion) = &reference.result else {
        return;
    };
    for (updates, &index) in s.choices.iter().zip(&s.indexes) {
        let texts: Vec<&str> = updates
            .iter()
            .filter_map(|u| match u {
                Update::Content(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        let choice = completion.choices.iter().find(|c| c.index == index);
        let content = choice.and_then(|c| c.message.content.clone());
        let expected = (!texts.is_empty()).then(|| texts.concat());
        assert_eq!(content, expected, "choice {index}'s content");
    }
}

// ------------------------------------------------------------------------------ errors

/// Whether an observation ended with a given error variant (by its `Debug` name).
pub fn error_variant(o: &Observed) -> Option<&str> {
    match &o.result {
        Ok(_) => None,
        Err((_, e)) => Some(e.split(['(', ' ', '{']).next().unwrap_or_default()),
    }
}
