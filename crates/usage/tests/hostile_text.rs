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

/// 200,000 small messages (6 MB of text) are counted one at a time: the heap grows by a
/// fraction of the text, never by the tree of every message at once (about 40 times it).
#[test]
fn many_messages_are_counted_one_at_a_time() {
    use choicewise_usage::{count_prompt, count_prompt_fields};
    let enc = EncodingName::O200kBase;
    count_text(enc, "warm up");
    let message = r#"{"role":"user","content":"hi there"}"#;
    let mut text = String::with_capacity(200_000 * (message.len() + 1) + 2);
    text.push('[');
    for i in 0..200_000 {
        if i > 0 {
            text.push(',');
        }
        text.push_str(message);
    }
    text.push(']');
    HEAP.reset_peak();
    let before = HEAP.live();
    let counted = count_prompt_fields(enc, [("messages", text.as_bytes())]).expect("counted");
    let grew = HEAP.peak() - before;
    assert!(
        grew < (text.len() as i64) / 4,
        "counting {} MB of messages took {} MiB of heap",
        text.len() / 1_000_000,
        grew >> 20
    );
    // The same count as the whole request parsed.
    let whole =
        serde_json::json!({"messages": serde_json::from_str::<serde_json::Value>(&text).unwrap()});
    assert_eq!(counted, count_prompt(enc, &whole).unwrap());
    assert_eq!(counted.total, 200_000 * (3 + 1 + 2) + 3);
}
