//! The token count of one text: tiktoken's pre-tokenizer on `regex-automata`, then byte-pair
//! merges on tiktoken-rs's own tables.
//!
//! tiktoken-rs matches its split patterns with fancy-regex, because of one lookahead,
//! `\s+(?!\S)` ("a whitespace run, less its last character when a non-space follows"). The
//! pattern here is the same without it, as a multi-pattern regex searched leftmost-first:
//! `[P, \s+\s, \s+]`, where `P` holds the alternatives before `\s+(?!\S)` plus `\s+$`. A
//! match of `\s+\s` gives its last character back (the same technique as GitHub's
//! `bpe-openai` crate), which is what the lookahead would have left; `\s+` catches the single
//! whitespace character (cl100k_base's closing `\s`, o200k_base's `\s+`). Each piece is
//! searched from the end of the previous one, so that a piece given back starts the next.
//! `tests/pretokenizer_equivalence.rs` checks the counts against tiktoken-rs's own.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::OnceLock;

use regex_automata::meta::{Cache, Regex};
use regex_automata::{Anchored, Input};
use rustc_hash::FxHashMap;
use tiktoken_rs::{Rank, byte_pair_split};

/// cl100k_base's split pattern up to `\s+(?!\S)`, then `\s+$`, as tiktoken-rs 0.12 spells it
/// (`cl100k_base()`), without its possessive quantifiers: none of them changes a match here
/// (nothing after `\p{L}++`, `\p{N}{1,3}+` or `\s++$` in their alternative could match less,
/// and the optional prefix and the symbol run are followed by what they cannot be).
const CL100K_PIECES: &str = concat!(
    r"'(?i:[sdmt]|ll|ve|re)",
    r"|[^\r\n\p{L}\p{N}]?\p{L}+",
    r"|\p{N}{1,3}",
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*",
    r"|\s+$",
    r"|\s*[\r\n]",
);

/// o200k_base's split pattern up to `\s+(?!\S)` (tiktoken-rs 0.12's `O200K_BASE_PAT_STR`),
/// with `\s+$` in its place.
const O200K_PIECES: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}",
    r"| ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"|\s*[\r\n]+",
    r"|\s+$",
);

/// The pattern whose match gives its last character back: `\s+(?!\S)`.
const RUN_BEFORE_NON_SPACE: usize = 1;

/// o200k_base's ordinary tokens in rank order, as the build script wrote them from
/// tiktoken-rs's table (`build.rs`): each its length (two bytes, little endian), then its bytes.
static O200K_RANKS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/o200k_base.ranks"));

/// cl100k_base's, as [`O200K_RANKS`].
static CL100K_RANKS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cl100k_base.ranks"));

/// The ranks of the tokens of a table of the build script's, each token's rank its place.
fn ranks_of(table: &[u8], expected: usize) -> FxHashMap<Vec<u8>, Rank> {
    let mut ranks = FxHashMap::with_capacity_and_hasher(expected, Default::default());
    let mut rest = table;
    let mut rank: Rank = 0;
    while let [lo, hi, tail @ ..] = rest {
        let len = usize::from(u16::from_le_bytes([*lo, *hi]));
        let (token, tail) = tail.split_at(len.min(tail.len()));
        ranks.insert(token.to_vec(), rank);
        rank += 1;
        rest = tail;
    }
    ranks
}

/// Pieces this long or longer are merged by tiktoken's heap-based merge ([`merged_len`]),
/// shorter ones by its vector-based one (`byte_pair_split`), as `encode_ordinary` does.
const LARGE_PIECE: usize = 100;

/// Pieces longer than this many bytes are counted by [`linear_count`] rather than merged:
/// merging a piece takes time `O(n log n)` and about 50 bytes of memory per byte of it
/// ([`merged_len`]), so a piece of megabytes (a client's padding, a flood of one
/// character) would cost hundreds of MiB. No piece of a language's text is near this long:
/// a Thai or Chinese sentence, a run of emoji or of symbols, each one piece, count exactly.
pub(crate) const LONG_PIECE: usize = 64 * 1024;

/// The estimate of a piece over [`LONG_PIECE`] bytes: one token per four bytes, about what
/// byte-pair encodings average on text.
pub(crate) fn linear_count(bytes: usize) -> u64 {
    bytes.div_ceil(4) as u64
}

mod ascii;

/// Which encoding's split pattern: its regex ([`Split::regex`]), its scan of an ASCII text
/// (`ascii.rs`) and its place among a thread's search states (the discriminant).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Split {
    O200k = 0,
    Cl100k = 1,
}

impl Split {
    fn regex(self) -> &'static str {
        match self {
            Split::O200k => O200K_PIECES,
            Split::Cl100k => CL100K_PIECES,
        }
    }
}

/// One encoding's pre-tokenizer and merge ranks.
pub(crate) struct Bpe {
    pieces: Regex,
    split: Split,
    ranks: FxHashMap<Vec<u8>, Rank>,
}

impl Bpe {
    /// The process's o200k_base tokenizer, built on the first call.
    pub(crate) fn o200k_base() -> &'static Bpe {
        static O200K: OnceLock<Bpe> = OnceLock::new();
        O200K.get_or_init(|| Bpe::new(Split::O200k, O200K_RANKS, 199_998))
    }

    /// The process's cl100k_base tokenizer, built on the first call.
    pub(crate) fn cl100k_base() -> &'static Bpe {
        static CL100K: OnceLock<Bpe> = OnceLock::new();
        CL100K.get_or_init(|| Bpe::new(Split::Cl100k, CL100K_RANKS, 100_256))
    }

    /// The pre-tokenizer of `split`, and the ranks of the ordinary tokens written in `table`
    /// by the build script (`expected` of them).
    fn new(split: Split, table: &[u8], expected: usize) -> Bpe {
        let pieces = Regex::new_many(&[split.regex(), r"\s+\s", r"\s+"])
            .expect("the pre-tokenizer's patterns are valid");
        let ranks = ranks_of(table, expected);
        debug_assert_eq!(ranks.len(), expected, "the build script's table");
        let bpe = Bpe {
            pieces,
            split,
            ranks,
        };
        // A first count here, at load, builds what the regex's first search builds, so that
        // the first count of a request does not.
        bpe.count_with(&mut bpe.pieces.create_cache(), "warm up");
        bpe
    }

    /// The number of tokens of `text`: `encode_ordinary(text).len()` of tiktoken.
    pub(crate) fn count(&self, text: &str) -> u64 {
        if text.is_ascii() {
            return self.count_ascii(text.as_bytes());
        }
        thread_local! {
            /// Each thread's search state for each encoding's pre-tokenizer (no shared pool),
            /// on the heap: a thread-local's own block is static TLS, of which a library
            /// loaded at run time (the Python extension) gets only a little.
            static CACHES: RefCell<[Option<Box<Cache>>; 2]> = const { RefCell::new([None, None]) };
        }
        CACHES
            .try_with(|caches| match caches.try_borrow_mut() {
                Ok(mut caches) => {
                    let cache = caches[self.split as usize]
                        .get_or_insert_with(|| Box::new(self.pieces.create_cache()));
                    self.count_with(cache, text)
                }
                Err(_) => self.count_with(&mut self.pieces.create_cache(), text),
            })
            // The thread is ending and its caches are gone.
            .unwrap_or_else(|_| self.count_with(&mut self.pieces.create_cache(), text))
    }

    fn count_with(&self, cache: &mut Cache, text: &str) -> u64 {
        self.count_pieces(text.as_bytes(), |start| {
            self.regex_piece_end(cache, text, start)
        })
    }

    /// [`Bpe::count`] of a text that is all ASCII: its pieces found by a scan, not the regex.
    fn count_ascii(&self, text: &[u8]) -> u64 {
        self.count_pieces(text, |start| self.split.ascii_piece_end(text, start))
    }

    /// The tokens of `text`'s pieces, each ending where `piece_end` says of its start.
    fn count_pieces(&self, text: &[u8], mut piece_end: impl FnMut(usize) -> usize) -> u64 {
        let mut tokens = 0u64;
        let mut start = 0;
        while start < text.len() {
            let end = piece_end(start);
            tokens += match end - start {
                long if long > LONG_PIECE => linear_count(long),
                _ => self.piece_tokens(&text[start..end]),
            };
            start = end;
        }
        tokens
    }

    /// Where the piece starting at `start` (a character boundary before the end) ends, by
    /// the split pattern's regex.
    fn regex_piece_end(&self, cache: &mut Cache, text: &str, start: usize) -> usize {
        let input = Input::new(text).range(start..).anchored(Anchored::Yes);
        match self.pieces.search_with(cache, &input) {
            Some(m) if m.pattern().as_usize() == RUN_BEFORE_NON_SPACE => {
                // At least two whitespace characters: give the last back.
                let last = text[m.range()]
                    .chars()
                    .next_back()
                    .map_or(0, char::len_utf8);
                m.end() - last
            }
            Some(m) if m.end() > start => m.end(),
            // Never: every character starts a piece (`\s+` or one of the classes of `P`).
            // One character is then a piece of its own, so that counting goes on.
            _ => start + text[start..].chars().next().map_or(1, char::len_utf8),
        }
    }

    fn piece_tokens(&self, piece: &[u8]) -> u64 {
        if piece.len() == 1 || self.ranks.contains_key(piece) {
            1
        } else if piece.len() < LARGE_PIECE {
            byte_pair_split(piece, &self.ranks).len() as u64
        } else {
            merged_len(&self.ranks, piece) as u64
        }
    }
}

/// The number of tokens byte-pair merging makes of `piece` (two bytes or more), by
/// `encode_ordinary`'s merge for pieces of [`LARGE_PIECE`] bytes or more: tiktoken's
/// `_byte_pair_merge_large`, which tiktoken-rs does not export. A heap holds the candidate
/// merges, lowest rank first and leftmost among equals, so that a long piece (a whitespace run
/// of thousands of characters) merges in time `O(n log n)`, where `byte_pair_split` takes
/// `O(n²)`.
fn merged_len(ranks: &FxHashMap<Vec<u8>, Rank>, piece: &[u8]) -> usize {
    #[derive(PartialEq, Eq)]
    struct Merge {
        start: usize,
        rank: Rank,
    }
    impl Ord for Merge {
        // Reversed: `BinaryHeap` pops its greatest, the merge wanted is the least.
        fn cmp(&self, other: &Self) -> Ordering {
            other
                .rank
                .cmp(&self.rank)
                .then_with(|| other.start.cmp(&self.start))
        }
    }
    impl PartialOrd for Merge {
        fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
            Some(self.cmp(other))
        }
    }
    /// The part starting at a byte: where it ends, where the part after it ends, the rank
    /// of the two merged (`Rank::MAX`: no such token), where the part before it starts.
    /// Only the entries at the start of a part are kept up to date.
    struct Part {
        prev: usize,
        end: usize,
        next_end: usize,
        next_rank: Rank,
    }

    let mut parts: Vec<Part> = (0..piece.len())
        .map(|i| Part {
            prev: i.wrapping_sub(1),
            end: i + 1,
            next_end: i + 2,
            next_rank: Rank::MAX,
        })
        .collect();
    let mut heap = BinaryHeap::with_capacity(piece.len());
    for i in 0..piece.len() - 1 {
        if let Some(&rank) = ranks.get(&piece[i..i + 2]) {
            heap.push(Merge { start: i, rank });
            parts[i].next_rank = rank;
        }
    }
    // The candidate merge of the part at `start` with the one after it, ending at `next_end`.
    let candidate =
        |parts: &mut Vec<Part>, heap: &mut BinaryHeap<Merge>, start: usize, next_end: usize| {
            parts[start].next_end = next_end;
            parts[start].next_rank = Rank::MAX;
            if next_end <= piece.len()
                && let Some(&rank) = ranks.get(&piece[start..next_end])
            {
                heap.push(Merge { start, rank });
                parts[start].next_rank = rank;
            }
        };
    let mut tokens = piece.len();
    while let Some(left) = heap.pop() {
        if left.rank != parts[left.start].next_rank {
            // Outdated: one of its two parts has merged since.
            continue;
        }
        let left_start = left.start;
        let right_start = parts[left_start].end;
        let right_end = parts[left_start].next_end;
        let right_next_end = parts[right_start].next_end;
        parts[left_start].end = right_end;
        candidate(&mut parts, &mut heap, left_start, right_next_end);
        if right_end < parts.len() {
            parts[right_end].prev = left_start;
        }
        if left_start > 0 {
            let prev_start = parts[left_start].prev;
            candidate(&mut parts, &mut heap, prev_start, right_end);
        }
        parts[right_start].next_rank = Rank::MAX;
        tokens -= 1;
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ranks the build script embedded are tiktoken-rs's own, token for token.
    #[test]
    fn the_embedded_ranks_are_tiktoken_rs_own() {
        for (name, table, embedded, expected) in [
            (
                "o200k_base",
                tiktoken_rs::o200k_base().unwrap(),
                O200K_RANKS,
                199_998,
            ),
            (
                "cl100k_base",
                tiktoken_rs::cl100k_base().unwrap(),
                CL100K_RANKS,
                100_256,
            ),
        ] {
            let ranks = ranks_of(embedded, expected);
            assert_eq!(ranks.len(), expected, "{name}");
            for (token, &rank) in &ranks {
                assert_eq!(
                    table.decode_bytes(&[rank]).ok().as_deref(),
                    Some(token.as_slice()),
                    "{name}: rank {rank}"
                );
            }
            // The next rank is special (or none): the table holds every ordinary token.
            let next = Rank::try_from(expected).unwrap();
            let special = table.special_tokens();
            assert!(
                table.decode_bytes(&[next]).is_err()
                    || special
                        .iter()
                        .any(|s| table.encode_with_special_tokens(s) == [next]),
                "{name}: rank {next}"
            );
        }
    }

    /// A table cut short (a length past its end) gives what it holds, not a panic.
    #[test]
    fn a_table_cut_short_gives_what_it_holds() {
        let ranks = ranks_of(&[1, 0, b'a', 2, 0, b'b'], 2);
        assert_eq!(ranks.get(b"a".as_slice()), Some(&0));
        assert_eq!(ranks.get(b"b".as_slice()), Some(&1));
    }
}
