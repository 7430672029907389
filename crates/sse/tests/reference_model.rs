//! Property: the framer agrees with a slow, obviously-correct model that
//! splits the whole input into lines first.

mod common;

use common::{frame, max_size, model, split_at, stream};
use proptest::prelude::*;
use proptest::sample::Index;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Valid UTF-8 streams: events, final position and tail.
    #[test]
    fn framer_matches_model_on_valid_streams(input in stream(false), max in max_size()) {
        prop_assert_eq!(frame(max, &[&input]), model(&input, max));
    }

    /// Streams with invalid UTF-8, fed in arbitrary pieces: errors included.
    #[test]
    fn framer_matches_model_on_broken_streams(
        input in stream(true),
        cuts in proptest::collection::vec(any::<Index>(), 0..12),
        max in max_size(),
    ) {
        let pieces = split_at(&input, &cuts);
        prop_assert_eq!(frame(max, &pieces), model(&input, max));
    }
}

/// A few hand-written inputs through the model itself, so that the model is
/// checked against the rules and not only against the framer.
#[test]
fn model_sanity() {
    let out = model(
        b"\xEF\xBB\xBFid: 1\r\ndata: a\rdata:b\n\nevent: e\ndata\n\n",
        1 << 20,
    );
    assert_eq!(out.error, None);
    assert_eq!(out.events.len(), 2);
    assert_eq!(out.events[0].data, "a\nb");
    assert_eq!((out.events[0].line, out.events[0].offset), (1, 3));
    assert_eq!(out.events[1].data, "");
    assert_eq!(out.events[1].event, "e");
    assert_eq!(out.events[1].id.as_deref(), Some("1"));
    let (position, tail) = out.end.unwrap();
    assert_eq!((position.line, position.offset), (8, 41));
    assert!(tail.is_clean());
}
