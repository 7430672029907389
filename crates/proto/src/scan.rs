//! A structural scan of one chunk: the reader's fast path. Pure and synchronous.
//!
//! The reader needs a chunk's top-level fields and, for each element of `choices`, its
//! `index`, whether it carries a `finish_reason`, and where it starts and ends. A typed
//! parse reads every byte of every delta; this scan only walks the structure: inside a
//! choice it jumps from quote to quote (`memchr`) and counts brackets, and leaves the
//! validation of the choice's contents to the choice's own parse (`decode`), which runs on
//! the choice's actor.
//!
//! The chunks of one stream repeat their head (`id`, `object`, `created`, `model`,
//! `system_fingerprint`), so the scan remembers the last chunk's head up to `choices` and
//! starts a chunk that repeats it byte for byte at its choices ([`Head`]).
//!
//! The scan is a fast path, never the judge: on anything unusual (a key with escapes, a
//! duplicate `choices`, a field of an unexpected type, invalid JSON outside the choices,
//! nesting past 128 levels, trailing data) it returns `None` and the reader parses the chunk
//! with serde instead, which gives the same result or the precise error. Top-level values
//! other than the choices are validated here (JSON grammar), so a malformed unknown field
//! is still the stream's error.

use std::ops::Range;

/// What the scan found in one chunk. Ranges are byte ranges of the chunk's data.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Scanned {
    pub id: Option<Range<usize>>,
    pub model: Option<Range<usize>>,
    pub created: Option<Range<usize>>,
    pub system_fingerprint: Option<Range<usize>>,
    pub service_tier: Option<Range<usize>>,
    pub usage: Option<Range<usize>>,
    pub prompt_filter_results: Option<Range<usize>>,
    pub error: Option<Range<usize>>,
    pub choices: Vec<ScannedChoice>,
}

/// One element of a chunk's `choices`, as the scan found it (a relay's
/// [`ChoiceFacts`](crate::chunks::ChoiceFacts)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedChoice {
    /// The element, braces included.
    pub range: Range<usize>,
    /// Its `index` (absent or `null`: `None`).
    pub index: Option<i64>,
    /// Its `finish_reason` is a non-empty string.
    pub finishes: bool,
}

/// Nesting deeper than this is left to serde (its recursion limit is 128).
const MAX_DEPTH: u32 = 128;

/// A head longer than this is not remembered (a chunk with a large field before its choices
/// is rare and unlike the next).
const MAX_HEAD: usize = 512;

/// The head of the last chunk scanned: its bytes up to the value of `choices`. The chunks of
/// one stream repeat their head (`id`, `object`, `created`, `model`, `system_fingerprint`
/// are the same in every chunk), so a chunk that starts with the same bytes is scanned from
/// its choices: the scan's state at that point depends on those bytes only.
///
/// A head is remembered only when the fields it holds are facts that a repeated chunk adds
/// nothing to (`id`, `model`, `created`, `system_fingerprint`, `service_tier`, unknown
/// keys): the scan of a chunk that repeats it leaves them out (`None`), and the reader, which
/// recorded them from the chunk before, loses nothing. A head holding `usage`,
/// `prompt_filter_results` or `error` is scanned in every chunk.
#[derive(Debug, Default)]
pub(crate) struct Head {
    bytes: Box<[u8]>,
    /// The fields the head holds (see [`Field`]): a later duplicate is serde's to judge.
    seen: u8,
}

impl Head {
    /// Whether a chunk of these bytes starts with the head: its scan starts at its choices,
    /// its head's fields left out.
    pub(crate) fn repeats(&self, chunk: &[u8]) -> bool {
        !self.bytes.is_empty() && chunk.starts_with(&self.bytes)
    }

    /// Its length in bytes (up to the value of `choices`).
    pub(crate) fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Remembers `head` (the bytes up to the value of `choices`) holding `seen`.
    fn remember(&mut self, head: &[u8], seen: u8) {
        if head.len() <= MAX_HEAD && seen & !Field::INERT == 0 {
            self.bytes = head.into();
            self.seen = seen;
        }
    }
}

/// The top-level fields the scan records.
#[derive(Debug, Clone, Copy)]
enum Field {
    Id,
    Model,
    Created,
    SystemFingerprint,
    ServiceTier,
    Usage,
    PromptFilterResults,
    Error,
}

impl Field {
    /// The fields whose facts a repeated chunk adds nothing to (see [`Head`]).
    const INERT: u8 = Field::Id.bit()
        | Field::Model.bit()
        | Field::Created.bit()
        | Field::SystemFingerprint.bit()
        | Field::ServiceTier.bit();

    #[cfg(test)]
    const ALL: [Field; 8] = [
        Field::Id,
        Field::Model,
        Field::Created,
        Field::SystemFingerprint,
        Field::ServiceTier,
        Field::Usage,
        Field::PromptFilterResults,
        Field::Error,
    ];

    fn of(key: &[u8]) -> Option<Field> {
        Some(match key {
            b"id" => Field::Id,
            b"model" => Field::Model,
            b"created" => Field::Created,
            b"system_fingerprint" => Field::SystemFingerprint,
            b"service_tier" => Field::ServiceTier,
            b"usage" => Field::Usage,
            b"prompt_filter_results" => Field::PromptFilterResults,
            b"error" => Field::Error,
            _ => return None,
        })
    }

    const fn bit(self) -> u8 {
        1 << self as u8
    }

    /// Whether the field must be a string or `null`.
    fn is_string(self) -> bool {
        matches!(
            self,
            Field::Id | Field::Model | Field::SystemFingerprint | Field::ServiceTier
        )
    }

    fn slot(self, out: &mut Scanned) -> &mut Option<Range<usize>> {
        match self {
            Field::Id => &mut out.id,
            Field::Model => &mut out.model,
            Field::Created => &mut out.created,
            Field::SystemFingerprint => &mut out.system_fingerprint,
            Field::ServiceTier => &mut out.service_tier,
            Field::Usage => &mut out.usage,
            Field::PromptFilterResults => &mut out.prompt_filter_results,
            Field::Error => &mut out.error,
        }
    }
}

/// Scans a chunk; `None` when the serde path must decide. `reuse` lends the choices' vector
/// (kept by the caller between chunks, so that a chunk costs no allocation for it); `head`
/// is the head of a chunk scanned before (see [`Head`]), updated for the next. A chunk that
/// repeats it is scanned from its choices, and the fields of its head are left out.
pub(crate) fn scan(data: &str, reuse: Vec<ScannedChoice>, head: &mut Head) -> Option<Scanned> {
    let b = data.as_bytes();
    let mut out = Scanned {
        choices: reuse,
        ..Scanned::default()
    };
    out.choices.clear();
    if !head.bytes.is_empty() && b.starts_with(&head.bytes) {
        // The head ends where the first scan's whitespace ended; this chunk may have more.
        let p = choices(b, ws(b, head.bytes.len()), &mut out.choices)?;
        return match after_member(b, p)? {
            // `choices` is read: no head to remember.
            Some(p) => members(b, p, out, head.seen, None),
            None => Some(out),
        };
    }
    let mut p = ws(b, 0);
    if b.get(p) != Some(&b'{') {
        return None;
    }
    p = ws(b, p + 1);
    if b.get(p) == Some(&b'}') {
        return (ws(b, p + 1) == b.len()).then_some(out);
    }
    members(b, p, out, 0, Some(head))
}

/// The members of the chunk's object from `p` (at a key) to its end. `seen`: the fields
/// already read (a duplicate goes to serde); `head`: where to remember the head when
/// `choices` is reached, `None` when it was read already.
fn members(
    b: &[u8],
    mut p: usize,
    mut out: Scanned,
    mut seen: u8,
    mut head: Option<&mut Head>,
) -> Option<Scanned> {
    let mut seen_choices = head.is_none();
    loop {
        let (key, after) = key(b, p)?;
        p = ws(b, after);
        if b.get(p) != Some(&b':') {
            return None;
        }
        p = ws(b, p + 1);
        if key == b"choices" {
            if std::mem::replace(&mut seen_choices, true) {
                return None;
            }
            if let Some(head) = head.take() {
                head.remember(&b[..p], seen);
            }
            p = choices(b, p, &mut out.choices)?;
        } else {
            let (end, kind) = value(b, p)?;
            if let Some(field) = Field::of(key) {
                if seen & field.bit() != 0 || (field.is_string() && kind > Kind::StringOrNull) {
                    // A duplicate, or a string field of another type: serde's error.
                    return None;
                }
                seen |= field.bit();
                *field.slot(&mut out) = (kind != Kind::Null).then_some(p..end);
            }
            p = end;
        }
        match after_member(b, p)? {
            Some(next) => p = next,
            None => return Some(out),
        }
    }
}

/// After a member's value at `p`: the next key (`Some`), or the object's end with nothing
/// after it but whitespace (`None`); `None` outright for anything else.
fn after_member(b: &[u8], p: usize) -> Option<Option<usize>> {
    let p = ws(b, p);
    match b.get(p) {
        Some(b',') => Some(Some(ws(b, p + 1))),
        Some(b'}') => (ws(b, p + 1) == b.len()).then_some(None),
        _ => None,
    }
}

/// The kind of a scanned value (ordered: `Null` and `String` are the string fields' kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Null,
    String,
    StringOrNull,
    Any,
}

fn ws(b: &[u8], mut p: usize) -> usize {
    while let Some(c) = b.get(p) {
        match c {
            b' ' | b'\n' | b'\r' | b'\t' => p += 1,
            _ => break,
        }
    }
    p
}

/// A key without escapes: its bytes and the position after its closing quote.
fn key(b: &[u8], p: usize) -> Option<(&[u8], usize)> {
    if b.get(p) != Some(&b'"') {
        return None;
    }
    let len = memchr::memchr2(b'"', b'\\', &b[p + 1..])?;
    if b[p + 1 + len] != b'"' {
        return None;
    }
    Some((&b[p + 1..p + 1 + len], p + 2 + len))
}

/// The `choices` value: `null` or an array of objects.
fn choices(b: &[u8], mut p: usize, out: &mut Vec<ScannedChoice>) -> Option<usize> {
    if b[p..].starts_with(b"null") {
        return Some(p + 4);
    }
    if b.get(p) != Some(&b'[') {
        return None;
    }
    p = ws(b, p + 1);
    if b.get(p) == Some(&b']') {
        return Some(p + 1);
    }
    loop {
        let (choice, end) = choice(b, p)?;
        out.push(choice);
        p = ws(b, end);
        match b.get(p) {
            Some(b',') => p = ws(b, p + 1),
            Some(b']') => return Some(p + 1),
            _ => return None,
        }
    }
}

/// One element of `choices`: its depth-1 `index` and `finish_reason`, the rest skipped by
/// structure only (the choice's own parse validates it).
fn choice(b: &[u8], start: usize) -> Option<(ScannedChoice, usize)> {
    if b.get(start) != Some(&b'{') {
        return None;
    }
    let mut found = ScannedChoice {
        range: start..start,
        index: None,
        finishes: false,
    };
    let (mut seen_index, mut seen_finish) = (false, false);
    let mut p = ws(b, start + 1);
    if b.get(p) == Some(&b'}') {
        found.range = start..p + 1;
        return Some((found, p + 1));
    }
    loop {
        let (key, after) = key(b, p)?;
        p = ws(b, after);
        if b.get(p) != Some(&b':') {
            return None;
        }
        p = ws(b, p + 1);
        match key {
            b"index" => {
                if std::mem::replace(&mut seen_index, true) {
                    return None;
                }
                let end = scalar_end(b, p);
                found.index = integer(&b[p..end])?;
                p = end;
            }
            b"finish_reason" => {
                if std::mem::replace(&mut seen_finish, true) {
                    return None;
                }
                let end = skip(b, p)?;
                found.finishes = b[p] == b'"' && end > p + 2;
                p = end;
            }
            _ => p = skip(b, p)?,
        }
        p = ws(b, p);
        match b.get(p) {
            Some(b',') => p = ws(b, p + 1),
            Some(b'}') => {
                found.range = start..p + 1;
                return Some((found, p + 1));
            }
            _ => return None,
        }
    }
}

/// An index token: `null` (`Some(None)`), or an integer that fits in an `i64`; `None` for
/// anything else (serde decides).
fn integer(token: &[u8]) -> Option<Option<i64>> {
    if token == b"null" {
        return Some(None);
    }
    let (negative, digits) = match token.split_first()? {
        (b'-', rest) => (true, rest),
        _ => (false, token),
    };
    if digits.is_empty() || digits.len() > 18 || (digits[0] == b'0' && digits.len() > 1) {
        // Long numbers (rare) go to serde, which knows the exact range.
        return None;
    }
    let mut value: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        value = value * 10 + i64::from(d - b'0');
    }
    Some(Some(if negative { -value } else { value }))
}

/// The end of a number or literal token.
fn scalar_end(b: &[u8], mut p: usize) -> usize {
    while let Some(c) = b.get(p) {
        match c {
            b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t' => break,
            _ => p += 1,
        }
    }
    p
}

/// The end of a string starting at `p` (its opening quote), escapes skipped, not validated.
fn string_end(b: &[u8], p: usize) -> Option<usize> {
    let mut q = p + 1;
    loop {
        q += memchr::memchr2(b'"', b'\\', b.get(q..)?)?;
        match b[q] {
            b'"' => return Some(q + 1),
            _ => q += 2,
        }
    }
}

/// Skips one value by structure: strings by their quotes, containers by counting brackets.
fn skip(b: &[u8], p: usize) -> Option<usize> {
    match b.get(p)? {
        b'"' => string_end(b, p),
        b'{' | b'[' => {
            let mut depth = 0u32;
            let mut q = p;
            loop {
                match *b.get(q)? {
                    b'"' => {
                        q = string_end(b, q)?;
                        continue;
                    }
                    b'{' | b'[' => {
                        depth += 1;
                        if depth > MAX_DEPTH {
                            return None;
                        }
                    }
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(q + 1);
                        }
                    }
                    _ => {}
                }
                q += 1;
            }
        }
        _ => Some(scalar_end(b, p)),
    }
}

/// One top-level value, validated (JSON grammar, escapes, control characters): its end and
/// kind.
fn value(b: &[u8], p: usize) -> Option<(usize, Kind)> {
    match *b.get(p)? {
        b'"' => Some((valid_string(b, p)?, Kind::String)),
        b'n' => b[p..].starts_with(b"null").then_some((p + 4, Kind::Null)),
        b't' => b[p..].starts_with(b"true").then_some((p + 4, Kind::Any)),
        b'f' => b[p..].starts_with(b"false").then_some((p + 5, Kind::Any)),
        b'-' | b'0'..=b'9' => Some((number(b, p)?, Kind::Any)),
        b'{' | b'[' => Some((container(b, p)?, Kind::Any)),
        _ => None,
    }
}

/// A string with valid escapes and no raw control character: its end.
fn valid_string(b: &[u8], p: usize) -> Option<usize> {
    let mut q = p + 1;
    loop {
        // Jump to the next quote or backslash; the bytes passed over must not be control
        // characters (a check the compiler vectorises).
        let run = memchr::memchr2(b'"', b'\\', b.get(q..)?)?;
        if b[q..q + run].iter().any(|&c| c < 0x20) {
            return None;
        }
        q += run;
        if b[q] == b'"' {
            return Some(q + 1);
        }
        match *b.get(q + 1)? {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => q += 2,
            b'u' => {
                let hex = b.get(q + 2..q + 6)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                q += 6;
            }
            _ => return None,
        }
    }
}

/// A number by the JSON grammar: its end.
fn number(b: &[u8], mut p: usize) -> Option<usize> {
    let digits = |b: &[u8], p: usize| {
        let n = b[p..].iter().take_while(|c| c.is_ascii_digit()).count();
        (n > 0).then_some(p + n)
    };
    if b[p] == b'-' {
        p += 1;
    }
    p = match b.get(p)? {
        b'0' => p + 1,
        _ => digits(b, p)?,
    };
    if b.get(p) == Some(&b'.') {
        p = digits(b, p + 1)?;
    }
    if matches!(b.get(p), Some(b'e' | b'E')) {
        p += 1;
        if matches!(b.get(p), Some(b'+' | b'-')) {
            p += 1;
        }
        p = digits(b, p)?;
    }
    Some(p)
}

/// An object or array, validated, without recursion: its end.
fn container(b: &[u8], p: usize) -> Option<usize> {
    // One bit per level: set for an object.
    let mut objects: u128 = 0;
    let mut depth = 0u32;
    let mut q = p;
    loop {
        // At a value.
        q = ws(b, q);
        match *b.get(q)? {
            open @ (b'{' | b'[') => {
                if depth == MAX_DEPTH {
                    return None;
                }
                let object = open == b'{';
                objects = (objects << 1) | u128::from(object);
                depth += 1;
                q = ws(b, q + 1);
                let close = if object { b'}' } else { b']' };
                if b.get(q) == Some(&close) {
                    objects >>= 1;
                    depth -= 1;
                    q += 1;
                } else {
                    if object {
                        q = member_key(b, q)?;
                    }
                    continue;
                }
            }
            _ => q = value(b, q)?.0,
        }
        // After a value: a comma, or the end of the containers it closes.
        loop {
            if depth == 0 {
                return Some(q);
            }
            q = ws(b, q);
            let object = objects & 1 == 1;
            match *b.get(q)? {
                b',' => {
                    q = ws(b, q + 1);
                    if object {
                        q = member_key(b, q)?;
                    }
                    break;
                }
                b'}' if object => {}
                b']' if !object => {}
                _ => return None,
            }
            objects >>= 1;
            depth -= 1;
            q += 1;
        }
    }
}

/// A member's key and colon: the position of its value.
fn member_key(b: &[u8], q: usize) -> Option<usize> {
    if b.get(q) != Some(&b'"') {
        return None;
    }
    let q = ws(b, valid_string(b, q)?);
    (b.get(q) == Some(&b':')).then_some(q + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field<'a>(data: &'a str, r: &Option<Range<usize>>) -> Option<&'a str> {
        r.clone().map(|r| &data[r])
    }

    #[test]
    fn finds_the_envelope_and_each_choice() {
        let data = r#" {"id":"c1","object":"chat.completion.chunk","created":17,"model":"m",
            "obfuscation":"x\"y","choices":[{"index":2,"delta":{"content":"a}\"{"},"logprobs":null},
            {"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":[1]}"}}]},"finish_reason":"stop","index":0}],
            "usage":null,"extra":{"a":[1,2.5e-3,true,false,null,{}]}} "#;
        let s = scan(data, Vec::new(), &mut Head::default()).expect("scanned");
        assert_eq!(field(data, &s.id), Some(r#""c1""#));
        assert_eq!(field(data, &s.model), Some(r#""m""#));
        assert_eq!(field(data, &s.created), Some("17"));
        assert_eq!(s.usage, None);
        assert_eq!(s.choices.len(), 2);
        assert_eq!(s.choices[0].index, Some(2));
        assert!(!s.choices[0].finishes);
        assert_eq!(
            &data[s.choices[0].range.clone()],
            r#"{"index":2,"delta":{"content":"a}\"{"},"logprobs":null}"#
        );
        assert_eq!(s.choices[1].index, Some(0));
        assert!(s.choices[1].finishes);
        assert!(data[s.choices[1].range.clone()].ends_with(r#""index":0}"#));
    }

    #[test]
    fn agrees_with_serde_on_every_element() {
        // Each element: (index, finishes) the same as a typed parse says.
        let data = r#"{"choices":[{"index":null,"finish_reason":""},{"finish_reason":null,"index":7},
            {"index":3,"finish_reason":"length"},{}]}"#;
        let s = scan(data, Vec::new(), &mut Head::default()).unwrap();
        let got: Vec<_> = s.choices.iter().map(|c| (c.index, c.finishes)).collect();
        assert_eq!(
            got,
            vec![
                (None, false),
                (Some(7), false),
                (Some(3), true),
                (None, false)
            ]
        );
    }

    /// Scans `chunks` in order with one head, as the reader does, and each alone: the
    /// results must be the same, but for the fields of a repeated head, left out.
    fn assert_warm_equals_cold(chunks: &[String]) {
        let mut head = Head::default();
        for data in chunks {
            let repeated = (!head.bytes.is_empty() && data.as_bytes().starts_with(&head.bytes))
                .then_some(head.bytes.len());
            let warm = scan(data, Vec::new(), &mut head);
            let mut cold = scan(data, Vec::new(), &mut Head::default());
            if let (Some(cold), Some(len)) = (&mut cold, repeated) {
                for field in Field::ALL {
                    let slot = field.slot(cold);
                    if slot.as_ref().is_some_and(|r| r.end <= len) {
                        *slot = None;
                    }
                }
            }
            assert_eq!(warm, cold, "{data}");
        }
    }

    #[test]
    fn a_repeated_head_is_scanned_from_its_choices() {
        let head =
            r#"{"id":"c1","object":"chat.completion.chunk","created":17,"model":"m","choices":"#;
        let chunks: Vec<String> = [
            r#"[{"index":0,"delta":{"content":"a"}}]}"#,
            r#"[{"index":1,"finish_reason":"stop"}],"usage":null}"#,
            // Whitespace where the first had none, then invalid or duplicate members: the
            // same verdicts as a scan from the start.
            r#"  [{"index":2}] } "#,
            r#"[{"index":0}],"id":"again"}"#,
            r#"[{"index":0}],"choices":[]}"#,
            r#"[{"index":0}],"x":tru}"#,
            r#"[{"index":0}]}{"#,
            r#"null,"usage":{"prompt_tokens":1}}"#,
            r#"[],"usage":null,"obfuscation":"ab"}"#,
        ]
        .iter()
        .map(|rest| format!("{head}{rest}"))
        .collect();
        assert_warm_equals_cold(&chunks);
        let mut warm = Head::default();
        let s = scan(&chunks[0], Vec::new(), &mut warm).expect("scanned");
        assert_eq!(field(&chunks[0], &s.id), Some(r#""c1""#));
        assert_eq!(&*warm.bytes, head.as_bytes());
        // The repeated head's facts were recorded from the chunk before: left out.
        let s = scan(&chunks[1], Vec::new(), &mut warm).expect("scanned");
        assert_eq!((s.id, s.created, s.model), (None, None, None));
        assert_eq!(s.choices[0].index, Some(1));
        assert!(s.choices[0].finishes);
        // A duplicate of a head field after the choices is still serde's to judge.
        assert!(scan(&chunks[3], Vec::new(), &mut warm).is_none());
    }

    #[test]
    fn a_head_with_usage_or_an_error_is_not_remembered() {
        for head in [
            r#"{"usage":{"total_tokens":3},"choices":"#,
            r#"{"id":"a","prompt_filter_results":[],"choices":"#,
            r#"{"error":null,"choices":"#,
        ] {
            let mut warm = Head::default();
            let data = format!("{head}[]}}");
            scan(&data, Vec::new(), &mut warm).expect("scanned");
            assert!(warm.bytes.is_empty(), "{head}");
        }
    }

    proptest::proptest! {
        /// Any sequence of chunks made of heads that share prefixes, whitespace, valid and
        /// invalid bodies and trailers: scanning with the last chunk's head changes nothing.
        #[test]
        fn the_head_never_changes_a_result(
            parts in proptest::collection::vec((0usize..8, 0usize..4, 0usize..7), 1..12)
        ) {
            let heads = [
                r#"{"id":"a","model":"m","choices":"#,
                r#"{"id":"a","model":"m","choices": "#,
                r#"{"id":"a","model":"m2","choices":"#,
                r#"{"id":"a","model":"m","created":1,"choices":"#,
                r#"{"id":"a","model":"m","created":12,"choices":"#,
                r#"{ "model" : "m" , "choices" :"#,
                r#"{"usage":{"total_tokens":1},"model":"m","choices":"#,
                r#"{"id":"a","model":"m","choices":"#,
            ];
            let bodies = [
                r#"[{"index":0,"delta":{"content":"x"}"}}]"#,
                r#" [{"index":1,"finish_reason":"stop"},{"index":0}]"#,
                "[]",
                r#"[{"index":"0"}]"#,
            ];
            let tails = [
                "}",
                r#","usage":null}"#,
                r#","id":"b"}"#,
                r#","model":"m"}"#,
                r#","x":[1,]}"#,
                " } ",
                r#","usage":{"total_tokens":3},"choices":[]}"#,
            ];
            let chunks: Vec<String> = parts
                .iter()
                .map(|&(h, b, t)| format!("{}{}{}", heads[h], bodies[b], tails[t]))
                .collect();
            assert_warm_equals_cold(&chunks);
        }
    }

    #[test]
    fn leaves_anything_unusual_to_serde() {
        for data in [
            "[1]",
            "{",
            r#"{"choices":[],"x":tru}"#,
            r#"{"choices":[],"x":"\q"}"#,
            "{\"choices\":[],\"x\":\"\u{1}\"}",
            r#"{"choices":[],"x":01}"#,
            r#"{"choices":[],"x":[1,]}"#,
            r#"{"choices":[],"x":{"a" 1}}"#,
            r#"{"choices":[],"choices":[]}"#,
            r#"{"id":5,"choices":[]}"#,
            r#"{"choices":[{"index":"0"}]}"#,
            r#"{"choices":[{"index":1.5}]}"#,
            r#"{"choices":[{"index":0,"index":1}]}"#,
            r#"{"choices":["x"]}"#,
            r#"{"ch\u006fices":[]}"#,
            r#"{"choices":[]}{"choices":[]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"x"}]}"#,
        ] {
            assert!(
                scan(data, Vec::new(), &mut Head::default()).is_none(),
                "{data}"
            );
        }
        let deep = format!(
            r#"{{"choices":[],"x":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert!(scan(&deep, Vec::new(), &mut Head::default()).is_none());
        let ok = format!(
            r#"{{"choices":[],"x":{}{}}}"#,
            "[".repeat(100),
            "]".repeat(100)
        );
        assert!(scan(&ok, Vec::new(), &mut Head::default()).is_some());
    }
}
