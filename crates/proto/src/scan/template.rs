//! Chunks that repeat one before them but for their text: most of a stream's.
//!
//! A [`Template`] is a chunk the scan read from its choices (its head repeated), whose one
//! choice's `delta` is one string ([`Varying::text`]): its bytes around that text, and what
//! the scan found. A chunk made of the same bytes around another string, whose first
//! unescaped quote is where the template's text ended, has the same structure token for
//! token: the scan reads nothing of a string inside a choice but where it ends, so its every
//! decision is the same. Its facts are the template's, each place after the text moved by
//! the two texts' difference in length.
//!
//! A template may also let a top-level string after `choices` vary ([`Varying::tail`]),
//! such as OpenAI's `obfuscation`, a padding of random length in every chunk: that string
//! is validated as the scan validates every top-level value (escapes, control characters),
//! and the places after it move by its own difference in length.

use std::ops::Range;

use super::{MAX_HEAD, Scanned, ScannedChoice, Varying, string_end, valid_string};

/// The most templates kept, the newest replacing the oldest: one a choice, when a few are
/// interleaved.
const TEMPLATES: usize = 4;

/// The most bytes a template keeps around its text.
const MAX_TEMPLATE: usize = 2 * MAX_HEAD;

/// Past this many copies kept in a row with none used, one in this many is kept
/// ([`Misses`]).
const MISSES: u32 = 8;

/// The copies kept (or passed over) since one was last used: a template, or a choice's kept
/// element (`decode::Repeats`). Past [`MISSES`] in a row, one copy in [`MISSES`] is kept: a
/// stream whose chunks never repeat (each with log-probabilities of its own, say) stops paying
/// for copies it never uses, and still finds one to use if it changes.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Misses(u32);

impl Misses {
    /// One more copy that may be kept: whether to keep it.
    pub(crate) fn keeps(&mut self) -> bool {
        self.0 = self.0.wrapping_add(1);
        self.0 <= MISSES || self.0.is_multiple_of(MISSES)
    }

    /// A copy kept was used.
    pub(crate) fn hit(&mut self) {
        self.0 = 0;
    }
}

/// The last chunks kept as [`Template`]s.
#[derive(Debug, Default)]
pub(super) struct Templates {
    pub(super) each: [Template; TEMPLATES],
    /// The one the next chunk kept replaces.
    pub(super) next: usize,
    /// Chunks kept or passed over since one was last filled from a template.
    misses: Misses,
}

impl Templates {
    pub(super) fn clear(&mut self) {
        self.each.iter_mut().for_each(Template::clear);
    }

    /// `b`'s facts from the template it repeats, if any.
    pub(super) fn fill(&mut self, b: &[u8], out: &mut Scanned) -> bool {
        let filled = self.each.iter().any(|t| t.fill(b, out));
        if filled {
            self.misses.hit();
        }
        filled
    }

    /// Keeps the chunk `b`, scanned from its choices, which has a text (see [`Misses`]).
    pub(super) fn keep(&mut self, b: &[u8], scanned: &Scanned, varying: Varying) {
        if !self.misses.keeps() {
            return;
        }
        self.each[self.next].keep(b, scanned, varying);
        self.next = (self.next + 1) % TEMPLATES;
    }
}

/// One chunk kept: its bytes up to its text's contents, from the text's closing quote to
/// its tail string's contents (empty without one), and from there to its end.
#[derive(Debug, Default)]
pub(super) struct Template {
    /// Up to the text's contents (its opening quote included); empty for no template.
    before: Vec<u8>,
    /// From the text's closing quote to the tail's contents (its opening quote included);
    /// empty for no tail.
    middle: Vec<u8>,
    /// From the last varying string's closing quote to the chunk's end.
    pub(super) after: Vec<u8>,
    scanned: Scanned,
    /// Where its text and tail were.
    varying: Varying,
}

impl Template {
    fn clear(&mut self) {
        self.before.clear();
        self.middle.clear();
        self.after.clear();
    }

    /// `b`'s facts, filled into `out`, if `b` is the template's bytes around other strings.
    fn fill(&self, b: &[u8], out: &mut Scanned) -> bool {
        let t = &self.scanned;
        let Some(text) = self.varying.text.clone() else {
            return false;
        };
        let (before, middle, after) = (&self.before[..], &self.middle[..], &self.after[..]);
        if before.is_empty()
            || b.len() < before.len() + middle.len() + after.len()
            || !b.ends_with(after)
            || !b.starts_with(before)
        {
            return false;
        }
        // The text's closing quote: the first unescaped one after its opening quote.
        let Some(close) = string_end(b, before.len() - 1).map(|end| end - 1) else {
            return false;
        };
        let at = match self.varying.tail.clone() {
            None => {
                if close != b.len() - after.len() {
                    return false;
                }
                (text.end, close, usize::MAX, 0)
            }
            Some(old) => {
                if !b[close..].starts_with(middle) {
                    return false;
                }
                let open = close + middle.len() - 1;
                match valid_string(b, open) {
                    Some(end) if end - 1 == b.len() - after.len() => {
                        (text.end, close, old.end, end - 1)
                    }
                    _ => return false,
                }
            }
        };
        // Each place of the facts is before the text's contents, between the text's closing
        // quote and the tail's contents, or from the tail's closing quote on.
        let (old_close, close, old_tail_close, tail_close) = at;
        let moved = |r: &Range<usize>| {
            let at = |p: usize| match p {
                p if p < old_close => p,
                p if p < old_tail_close => p - old_close + close,
                p => p - old_tail_close + tail_close,
            };
            at(r.start)..at(r.end)
        };
        fields(out, t, moved);
        out.text = Some(text.start..close);
        out.choices.extend(t.choices.iter().map(|c| ScannedChoice {
            range: moved(&c.range),
            ..c.clone()
        }));
        true
    }

    /// Keeps the chunk `b` (which repeated the head) as the template, if it has a text.
    fn keep(&mut self, b: &[u8], s: &Scanned, varying: Varying) {
        self.clear();
        let Some(text) = varying.text.clone() else {
            return;
        };
        let kept = match &varying.tail {
            Some(tail) => text.start + (tail.start - text.end) + (b.len() - tail.end),
            None => text.start + (b.len() - text.end),
        };
        if kept > MAX_TEMPLATE {
            return;
        }
        self.before.extend_from_slice(&b[..text.start]);
        match &varying.tail {
            Some(tail) => {
                self.middle.extend_from_slice(&b[text.end..tail.start]);
                self.after.extend_from_slice(&b[tail.end..]);
            }
            None => self.after.extend_from_slice(&b[text.end..]),
        }
        self.scanned.choices.clone_from(&s.choices);
        fields(&mut self.scanned, s, Range::clone);
        self.varying = varying;
    }
}

/// Each field `from` found, its place as `moved` says, into `to` (the choices apart).
fn fields(to: &mut Scanned, from: &Scanned, moved: impl Fn(&Range<usize>) -> Range<usize>) {
    for (to, from) in [
        (&mut to.id, &from.id),
        (&mut to.model, &from.model),
        (&mut to.created, &from.created),
        (&mut to.system_fingerprint, &from.system_fingerprint),
        (&mut to.service_tier, &from.service_tier),
        (&mut to.usage, &from.usage),
        (&mut to.prompt_filter_results, &from.prompt_filter_results),
        (&mut to.error, &from.error),
    ] {
        *to = from.as_ref().map(&moved);
    }
}
