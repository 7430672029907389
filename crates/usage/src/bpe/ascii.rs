//! The pre-tokenizer's pieces of a text that is all ASCII, found by a scan of its bytes
//! rather than a search of the split pattern's regex a piece: the same pieces, for less
//! (docs/benchmarks.md has the gateway's figures).
//!
//! On ASCII the patterns' classes are plain: `\p{L}` is `[A-Za-z]` (`\p{Lu}` the capitals,
//! `\p{Ll}` the small letters; no `\p{Lt}`, `\p{Lm}`, `\p{Lo}` or `\p{M}` character is
//! ASCII), `\p{N}` is `[0-9]`, `\s` is `[\t\n\x0B\x0C\r ]`. The scan takes the alternatives in
//! the patterns' order, each as the regex's leftmost-first search would match it (greedy,
//! then backtracking), the whitespace run before a non-space giving its last character back as
//! the regex's `\s+\s` does. `tests::each_piece_is_the_regexs` holds it to the regex.

use super::Split;

/// `\s` on ASCII: the space and `\t`, `\n`, `\x0B`, `\x0C`, `\r` (`u8::is_ascii_whitespace`
/// leaves out `\x0B`).
fn space(b: u8) -> bool {
    matches!(b, b'\t'..=b'\r' | b' ')
}

fn newline(b: u8) -> bool {
    b == b'\r' || b == b'\n'
}

/// `[^\s\p{L}\p{N}]`: neither whitespace, a letter nor a digit.
fn symbol(b: u8) -> bool {
    !space(b) && !b.is_ascii_alphanumeric()
}

/// `[^\r\n\p{L}\p{N}]`: the one character a word may start with before its letters.
fn before_word(b: u8) -> bool {
    !newline(b) && !b.is_ascii_alphanumeric()
}

/// The end of the run from `i` of the bytes `class` takes.
fn run(text: &[u8], mut i: usize, class: impl Fn(u8) -> bool) -> usize {
    while i < text.len() && class(text[i]) {
        i += 1;
    }
    i
}

impl Split {
    /// Where the piece that starts at `start` ends (`start < text.len()`, `text` all ASCII):
    /// the end of the split pattern's match there (less the character a run of whitespace
    /// before a non-space gives back).
    pub(super) fn ascii_piece_end(self, text: &[u8], start: usize) -> usize {
        let at = |i: usize| text.get(i).copied();
        let c = text[start];
        let word = match self {
            Split::Cl100k => cl100k_word(text, start),
            Split::O200k => o200k_word(text, start),
        };
        if let Some(end) = word {
            return end;
        }
        // `\p{N}{1,3}`: at most three digits read, however long their run (reading the run
        // to its end at each piece would take a run of n digits n²/6 steps).
        if c.is_ascii_digit() {
            return run(&text[..text.len().min(start + 3)], start, |b| {
                b.is_ascii_digit()
            });
        }
        // ` ?[^\s\p{L}\p{N}]+`, then `[\r\n]*` (cl100k) or `[\r\n/]*` (o200k).
        let symbols = if c == b' ' && at(start + 1).is_some_and(symbol) {
            start + 1
        } else {
            start
        };
        if symbol(text[symbols]) {
            let end = run(text, symbols, symbol);
            return match self {
                Split::Cl100k => run(text, end, newline),
                Split::O200k => run(text, end, |b| newline(b) || b == b'/'),
            };
        }
        // What is left starts a run of whitespace (every byte is a letter, a digit, a symbol
        // or whitespace).
        let end = run(text, start, space);
        let last_newline = text[start..end].iter().rposition(|&b| newline(b));
        match (self, last_newline) {
            // `\s+$` before `\s*[\r\n]` in cl100k_base, after `\s*[\r\n]+` in o200k_base:
            // each ends after the run's last newline.
            (Split::Cl100k, _) if end == text.len() => end,
            (_, Some(i)) => start + i + 1,
            _ if end == text.len() => end,
            // `\s+\s` less its last character, then `\s+` (one character).
            _ => (end - 1).max(start + 1),
        }
    }
}

/// cl100k_base's first alternatives: `'(?i:[sdmt]|ll|ve|re)`, then
/// `[^\r\n\p{L}\p{N}]?\p{L}+`.
fn cl100k_word(text: &[u8], start: usize) -> Option<usize> {
    if let Some(end) = contraction(text, start, &[b"s", b"d", b"m", b"t", b"ll", b"ve", b"re"]) {
        return Some(end);
    }
    let letters = match text[start] {
        c if c.is_ascii_alphabetic() => start,
        c if before_word(c) && text.get(start + 1).is_some_and(u8::is_ascii_alphabetic) => {
            start + 1
        }
        _ => return None,
    };
    Some(run(text, letters, |b| b.is_ascii_alphabetic()))
}

/// o200k_base's first two alternatives: a word of capitals then small letters, at least one
/// small (`[^\r\n\p{L}\p{N}]?\p{Lu}*\p{Ll}+`), else of capitals then any small ones
/// (`[^\r\n\p{L}\p{N}]?\p{Lu}+\p{Ll}*`), each with an optional contraction after it.
fn o200k_word(text: &[u8], start: usize) -> Option<usize> {
    // Where a word's letters may start, in the regex's order: after the one character before
    // them (`?` is greedy), or here. Each with where its capitals and its small letters end.
    let words = [start + 1, start].map(|letters| {
        let starts = letters == start || (letters < text.len() && before_word(text[start]));
        let capitals = run(text, letters, |b| b.is_ascii_uppercase());
        let smalls = run(text, capitals, |b| b.is_ascii_lowercase());
        (starts, letters, capitals, smalls)
    });
    let with_contraction = |end: usize| {
        contraction(text, end, &[b"s", b"t", b"re", b"ve", b"m", b"ll", b"d"]).unwrap_or(end)
    };
    // The first alternative from either start (a small letter at least), then the second
    // (a capital at least).
    let first = words
        .iter()
        .find(|&&(starts, _, capitals, smalls)| starts && smalls > capitals);
    let second = || {
        words
            .iter()
            .find(|&&(starts, letters, capitals, _)| starts && capitals > letters)
    };
    first
        .or_else(second)
        .map(|&(_, _, _, smalls)| with_contraction(smalls))
}

/// `'` then the first of `suffixes` that follows it, case-insensitively: where it ends.
fn contraction(text: &[u8], at: usize, suffixes: &[&[u8]]) -> Option<usize> {
    if text.get(at) != Some(&b'\'') {
        return None;
    }
    let rest = &text[at + 1..];
    suffixes
        .iter()
        .find(|s| rest.len() >= s.len() && rest[..s.len()].eq_ignore_ascii_case(s))
        .map(|s| at + 1 + s.len())
}

#[cfg(test)]
mod tests {
    use crate::bpe::{Bpe, Split};

    /// The characters the patterns tell apart on ASCII: small and capital letters (those of
    /// the contractions among them), digits, the apostrophe, each whitespace character, `/`
    /// (o200k_base's own) and other symbols, a control character.
    const ALPHABET: &[u8] = b"aZsTlLvrE'0 \t\n\r\x0B\x0C/!\x01";

    /// Every piece the scan finds is the regex's, at every start, over every text of up to
    /// four characters from [`ALPHABET`] and a thousand longer ones from it.
    #[test]
    fn each_piece_is_the_regexs() {
        for (split, bpe) in [
            (Split::Cl100k, Bpe::cl100k_base()),
            (Split::O200k, Bpe::o200k_base()),
        ] {
            let mut cache = bpe.pieces.create_cache();
            let mut check = |text: &[u8]| {
                let s = std::str::from_utf8(text).unwrap();
                for start in 0..text.len() {
                    assert_eq!(
                        split.ascii_piece_end(text, start),
                        bpe.regex_piece_end(&mut cache, s, start),
                        "{split:?} at {start} of {s:?}"
                    );
                }
            };
            let k = ALPHABET.len();
            for len in 1..=4u32 {
                for mut n in 0..k.pow(len) {
                    let mut text = Vec::new();
                    for _ in 0..len {
                        text.push(ALPHABET[n % k]);
                        n /= k;
                    }
                    check(&text);
                }
            }
            // Longer texts: runs of a class, so that words, numbers and runs of whitespace
            // grow past what four characters hold.
            let mut seed = 0x9e37_79b9_7f4a_7c15u64;
            let mut next = || {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed
            };
            for _ in 0..1000 {
                let mut text = Vec::new();
                while text.len() < 40 {
                    let b = ALPHABET[next() as usize % k];
                    let repeat = 1 + next() as usize % 4;
                    text.extend(std::iter::repeat_n(b, repeat));
                }
                check(&text);
            }
        }
    }
}
