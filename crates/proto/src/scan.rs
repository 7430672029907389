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
    /// When the chunk has one choice whose `delta` is an object of one member, a string:
    /// that string's contents (see [`Varying::text`]).
    pub text: Option<Range<usize>>,
}

impl Scanned {
    /// As [`Scanned::default`], its choices' vector kept for the next chunk.
    pub(crate) fn clear(&mut self) {
        let mut choices = std::mem::take(&mut self.choices);
        choices.clear();
        *self = Scanned {
            choices,
            ..Scanned::default()
        };
    }
}

/// The parts of a chunk that the next chunks vary, most of a stream: a [`Template`]'s
/// holes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Varying {
    /// When the chunk has one choice whose `delta` is an object of one member, a string
    /// (`{"content":"…"}`): that string's contents, its quotes left out.
    pub text: Option<Range<usize>>,
    /// The contents of the last top-level string after `choices` (a padding, such as
    /// OpenAI's `obfuscation`).
    pub tail: Option<Range<usize>>,
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
    /// The last chunks that repeated the head and had a text, their facts for the next:
    /// one a choice, when several are interleaved. Made on the first (a stream's state
    /// stays small until then).
    templates: Option<Box<Templates>>,
}

mod template;
pub(crate) use template::Misses;
use template::Templates;

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
            if let Some(templates) = &mut self.templates {
                templates.clear();
            }
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
    let mut out = Scanned {
        choices: reuse,
        ..Scanned::default()
    };
    scan_into(data, &mut out, head)?;
    Some(out)
}

/// As [`scan`], into `out` (cleared first, its choices' vector reused), for a caller that
/// keeps its facts between chunks rather than move them: whether the chunk repeated `head`
/// (as [`Head::repeats`] said before the scan); `None` when the serde path must decide,
/// `out` then holding what was found before the scan gave up.
pub(crate) fn scan_into(data: &str, out: &mut Scanned, head: &mut Head) -> Option<bool> {
    let b = data.as_bytes();
    out.clear();
    if head.repeats(b) {
        if head.templates.as_mut().is_some_and(|t| t.fill(b, out)) {
            return Some(true);
        }
        let mut varying = Varying::default();
        from_choices(b, out, head, &mut varying)?;
        out.text.clone_from(&varying.text);
        if varying.text.is_some() {
            head.templates.get_or_insert_default().keep(b, out, varying);
        }
        return Some(true);
    }
    let mut p = ws(b, 0);
    if b.get(p) != Some(&b'{') {
        return None;
    }
    p = ws(b, p + 1);
    if b.get(p) == Some(&b'}') {
        return (ws(b, p + 1) == b.len()).then_some(false);
    }
    let mut varying = Varying::default();
    members(b, p, out, 0, Some(head), &mut varying)?;
    out.text = varying.text;
    Some(false)
}

/// A chunk that repeats `head`, scanned from its choices.
fn from_choices(b: &[u8], out: &mut Scanned, head: &Head, varying: &mut Varying) -> Option<()> {
    // The head ends where the first scan's whitespace ended; this chunk may have more.
    let p = choices(
        b,
        ws(b, head.bytes.len()),
        &mut out.choices,
        &mut varying.text,
    )?;
    match after_member(b, p)? {
        // `choices` is read: no head to remember.
        Some(p) => members(b, p, out, head.seen, None, varying),
        None => Some(()),
    }
}

/// The members of the chunk's object from `p` (at a key) to its end. `seen`: the fields
/// already read (a duplicate goes to serde); `head`: where to remember the head when
/// `choices` is reached, `None` when it was read already.
fn members(
    b: &[u8],
    mut p: usize,
    out: &mut Scanned,
    mut seen: u8,
    mut head: Option<&mut Head>,
    varying: &mut Varying,
) -> Option<()> {
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
            p = choices(b, p, &mut out.choices, &mut varying.text)?;
        } else {
            let (end, kind) = value(b, p)?;
            if kind == Kind::String && seen_choices {
                varying.tail = Some(p + 1..end - 1);
            }
            if let Some(field) = Field::of(key) {
                if seen & field.bit() != 0 || (field.is_string() && kind > Kind::StringOrNull) {
                    // A duplicate, or a string field of another type: serde's error.
                    return None;
                }
                seen |= field.bit();
                *field.slot(out) = (kind != Kind::Null).then_some(p..end);
            }
            p = end;
        }
        match after_member(b, p)? {
            Some(next) => p = next,
            None => return Some(()),
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

/// The `choices` value: `null` or an array of objects; `text`, the sole choice's text (see
/// [`Varying::text`]).
fn choices(
    b: &[u8],
    mut p: usize,
    out: &mut Vec<ScannedChoice>,
    text: &mut Option<Range<usize>>,
) -> Option<usize> {
    *text = None;
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
    let first = out.len();
    loop {
        let (choice, end, delta) = choice(b, p)?;
        out.push(choice);
        p = ws(b, end);
        match b.get(p) {
            Some(b',') => p = ws(b, p + 1),
            Some(b']') => {
                if out.len() == first + 1 {
                    *text = delta;
                }
                return Some(p + 1);
            }
            _ => return None,
        }
    }
}

/// One element of `choices`: its depth-1 `index` and `finish_reason`, the rest skipped by
/// structure only (the choice's own parse validates it); and its `delta`'s text, if that
/// is an object of one string (see [`Varying::text`]).
fn choice(b: &[u8], start: usize) -> Option<(ScannedChoice, usize, Option<Range<usize>>)> {
    if b.get(start) != Some(&b'{') {
        return None;
    }
    let mut found = ScannedChoice {
        range: start..start,
        index: None,
        finishes: false,
    };
    let (mut seen_index, mut seen_finish) = (false, false);
    let mut text = None;
    let mut p = ws(b, start + 1);
    if b.get(p) == Some(&b'}') {
        found.range = start..p + 1;
        return Some((found, p + 1, None));
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
            b"delta" => match sole_string(b, p) {
                Some((contents, end)) => (text, p) = (Some(contents), end),
                None => p = skip(b, p)?,
            },
            _ => p = skip(b, p)?,
        }
        p = ws(b, p);
        match b.get(p) {
            Some(b',') => p = ws(b, p + 1),
            Some(b'}') => {
                found.range = start..p + 1;
                return Some((found, p + 1, text));
            }
            _ => return None,
        }
    }
}

/// The contents of the text of a choice's element `b` (braces included), its quotes left
/// out: the string of its `delta`, when that is an object of one member, a string.
pub(crate) fn choice_text(b: &[u8]) -> Option<Range<usize>> {
    match choice(b, 0)? {
        (_, end, text) if end == b.len() => text,
        _ => None,
    }
}

/// When the value at `p` is an object of one member whose value is a string: that
/// string's contents, and the object's end (where [`skip`] would end it).
fn sole_string(b: &[u8], p: usize) -> Option<(Range<usize>, usize)> {
    if b.get(p) != Some(&b'{') {
        return None;
    }
    let (_, after) = key(b, ws(b, p + 1))?;
    let q = ws(b, after);
    if b.get(q) != Some(&b':') {
        return None;
    }
    let open = ws(b, q + 1);
    if b.get(open) != Some(&b'"') {
        return None;
    }
    let close = string_end(b, open)?;
    let end = ws(b, close);
    (b.get(end) == Some(&b'}')).then_some((open + 1..close - 1, end + 1))
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
pub(crate) fn string_end(b: &[u8], p: usize) -> Option<usize> {
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
mod tests;
