//! Texts shaped to make a token count costly: each is counted within a bounded heap, whatever
//! its shape (the gateway counts any text a client sends to `count_tokens`).

use choicewise_test_support::CountingAlloc;
use choicewise_usage::{EncodingName, count_text};

#[global_allocator]
static HEAP: CountingAlloc = CountingAlloc::new();

/// 7.5 MiB of one unit repeated.
fn flood(unit: &str) -> String {
    unit.repeat((15 << 19) / unit.len())
}

/// The most the heap may grow while one 7.5 MiB text is counted (the text itself excluded).
const BOUND: i64 = 64 << 20;

#[test]
fn floods_of_any_shape_are_counted_in_a_bounded_heap() {
    for enc in [EncodingName::O200kBase, EncodingName::Cl100kBase] {
        // Load the tables before measuring.
        count_text(enc, "warm up");
        for (name, unit) in [
            // A letter and a combining mark, alternating: one pre-tokenizer piece for o200k.
            ("letter + combining acute", "a\u{301}"),
            ("letter + Hebrew point", "\u{5d0}\u{5b8}"),
            ("Devanagari sign", "\u{915}\u{94d}"),
            ("letters", "a"),
            ("symbols", "%"),
            ("digits", "7"),
            ("letter, symbol", "a%"),
            ("letter, digit", "a7"),
            ("spaces", " "),
            ("CJK", "\u{4e2d}"),
            ("emoji with modifier", "\u{1f44d}\u{1f3fd}"),
        ] {
            let text = flood(unit);
            HEAP.reset_peak();
            let before = HEAP.live();
            let tokens = count_text(enc, &text);
            let grew = HEAP.peak() - before;
            assert!(tokens > 0, "{name}");
            assert!(
                grew < BOUND,
                "{enc:?}, {name}: counting 7.5 MiB took {} MiB of heap",
                grew >> 20
            );
        }
    }
}
