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
use tiktoken_rs::{CoreBPE, Rank, byte_pair_split};

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

/// One encoding's pre-tokenizer and merge ranks.
pub(crate) struct Bpe {
    pieces: Regex,
    ranks: FxHashMap<Vec<u8>, Rank>,
    /// Which of a thread's search states is this pre-tokenizer's.
    cache_slot: usize,
}

impl Bpe {
    /// The process's o200k_base tokenizer, built on the first call.
    pub(crate) fn o200k_base() -> &'static Bpe {
        static O200K: OnceLock<Bpe> = OnceLock::new();
        O200K.get_or_init(|| Bpe::load(0, O200K_PIECES, tiktoken_rs::o200k_base, 199_998))
    }

    /// The process's cl100k_base tokenizer, built on the first call.
    pub(crate) fn cl100k_base() -> &'static Bpe {
        static CL100K: OnceLock<Bpe> = OnceLock::new();
        CL100K.get_or_init(|| Bpe::load(1, CL100K_PIECES, tiktoken_rs::cl100k_base, 100_256))
    }

    /// [`Bpe::new`] of the table that `table` parses from tiktoken-rs's embedded copy.
    fn load<E: std::fmt::Debug>(
        cache_slot: usize,
        pieces: &str,
        table: fn() -> Result<CoreBPE, E>,
        expected: usize,
    ) -> Bpe {
        let table = table().expect("tiktoken-rs's embedded tables parse");
        Bpe::new(cache_slot, pieces, table, expected)
    }

    /// The pre-tokenizer from `pieces`, and the ranks of `table`'s ordinary tokens (ranks
    /// 0, 1, … up to the first that is not one, `expected` of them), after which `table` is
    /// dropped.
    fn new(cache_slot: usize, pieces: &str, table: CoreBPE, expected: usize) -> Bpe {
        let pieces = Regex::new_many(&[pieces, r"\s+\s", r"\s+"])
            .expect("the pre-tokenizer's patterns are valid");
        // The special tokens' ranks, which end the ordinary ones.
        let special: Vec<Rank> = (table.special_tokens().into_iter())
            .flat_map(|s| table.encode_with_special_tokens(s))
            .collect();
        let mut ranks = FxHashMap::with_capacity_and_hasher(expected, Default::default());
        for rank in (0..Rank::MAX).take_while(|r| !special.contains(r)) {
            let Ok(bytes) = table.decode_bytes(&[rank]) else {
                break;
            };
            ranks.insert(bytes, rank);
        }
        drop(table);
        let bpe = Bpe {
            pieces,
            ranks,
            cache_slot,
        };
        // The table just dropped leaves the allocator much to tidy up on its next large
        // allocation (milliseconds): a first count here, at load, pays for it, so that the
        // first count of a request does not.
        bpe.count_with(&mut bpe.pieces.create_cache(), "warm up");
        bpe
    }

    /// The number of tokens of `text`: `encode_ordinary(text).len()` of tiktoken.
    pub(crate) fn count(&self, text: &str) -> u64 {
        thread_local! {
            /// Each thread's search state for each encoding's pre-tokenizer (no shared pool),
            /// on the heap: a thread-local's own block is static TLS, of which a library
            /// loaded at run time (the Python extension) gets only a little.
            static CACHES: RefCell<[Option<Box<Cache>>; 2]> = const { RefCell::new([None, None]) };
        }
        CACHES
            .try_with(|caches| match caches.try_borrow_mut() {
                Ok(mut caches) => {
                    let cache = caches[self.cache_slot]
                        .get_or_insert_with(|| Box::new(self.pieces.create_cache()));
                    self.count_with(cache, text)
                }
                Err(_) => self.count_with(&mut self.pieces.create_cache(), text),
            })
            // The thread is ending and its caches are gone.
            .unwrap_or_else(|_| self.count_with(&mut self.pieces.create_cache(), text))
    }

    fn count_with(&self, cache: &mut Cache, text: &str) -> u64 {
        let mut tokens = 0u64;
        let mut start = 0;
        while start < text.len() {
            let end = self.piece_end(cache, text, start);
            tokens += match end - start {
                long if long > LONG_PIECE => linear_count(long),
                _ => self.piece_tokens(&text.as_bytes()[start..end]),
            };
            start = end;
        }
        tokens
    }

    /// Where the piece starting at `start` (a character boundary before the end) ends.
    fn piece_end(&self, cache: &mut Cache, text: &str, start: usize) -> usize {
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
