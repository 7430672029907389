//! Property: framing does not depend on how the stream is cut into reads, in the strict
//! WHATWG mode and in the default tolerant mode alike.

mod common;

use common::{frame_in, frame_stopping_in, max_size, split_at, stream};
use proptest::prelude::*;
use proptest::sample::Index;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Arbitrary cuts give the same events, error, final position and tail as
    /// one read of the whole input.
    #[test]
    fn arbitrary_splits_match_whole_input(
        input in stream(true),
        cuts in proptest::collection::vec(any::<Index>(), 0..12),
        max in max_size(),
    ) {
        for strict in [true, false] {
            let whole = frame_in(strict, max, &[&input]);
            let pieces = split_at(&input, &cuts);
            prop_assert_eq!(frame_in(strict, max, &pieces), whole);
        }
    }

    /// One-byte reads (every CR/LF, BOM and UTF-8 boundary split).
    #[test]
    fn one_byte_reads_match_whole_input(input in stream(true), max in max_size()) {
        for strict in [true, false] {
            let whole = frame_in(strict, max, &[&input]);
            let pieces: Vec<&[u8]> = input.chunks(1).collect();
            prop_assert_eq!(frame_in(strict, max, &pieces), whole);
        }
    }

    /// Stopping after every event and feeding the rest again loses nothing.
    #[test]
    fn stopping_and_resuming_matches_whole_input(
        input in stream(true),
        cuts in proptest::collection::vec(any::<Index>(), 0..6),
        max in max_size(),
    ) {
        for strict in [true, false] {
            let whole = frame_in(strict, max, &[&input]);
            let pieces = split_at(&input, &cuts);
            prop_assert_eq!(frame_stopping_in(strict, max, &pieces), whole);
        }
    }

    /// Completely arbitrary bytes never panic and are split-invariant too.
    #[test]
    fn arbitrary_bytes(
        input in proptest::collection::vec(any::<u8>(), 0..200),
        cuts in proptest::collection::vec(any::<Index>(), 0..8),
        max in max_size(),
    ) {
        for strict in [true, false] {
            let whole = frame_in(strict, max, &[&input]);
            let pieces = split_at(&input, &cuts);
            prop_assert_eq!(frame_in(strict, max, &pieces), whole);
        }
    }
}
