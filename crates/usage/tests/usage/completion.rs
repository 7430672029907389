//! Completion estimates equal tiktoken's own counts of the same strings.

use choicewise_usage::{
    CompletionParts, EncodingName, PARALLEL_TOOL_CALLS_OVERHEAD, TOOL_CALL_COMPLETION_OVERHEAD,
    ToolCallPart, count_completion, count_completion_detailed, count_text,
};
use proptest::prelude::*;
use tiktoken_rs::{CoreBPE, cl100k_base_singleton, o200k_base_singleton};

const BOTH: [EncodingName; 2] = [EncodingName::O200kBase, EncodingName::Cl100kBase];

fn bpe(enc: EncodingName) -> &'static CoreBPE {
    match enc {
        EncodingName::O200kBase => o200k_base_singleton(),
        EncodingName::Cl100kBase => cl100k_base_singleton(),
    }
}

fn tiktoken(enc: EncodingName, s: &str) -> u64 {
    bpe(enc).encode_ordinary(s).len() as u64
}

const SAMPLES: &[&str] = &[
    "",
    "tiktoken is great!",
    "antidisestablishmentarianism",
    "2 + 2 = 4",
    "お誕生日おめでとう",
    "Things working well together will increase revenue.",
    "fn main() {\n    println!(\"hello\");\n}\n",
    "<|endoftext|> and <|im_start|> are plain text here",
    "   leading and trailing spaces   \n\n\t",
    "emoji 👩‍👩‍👧‍👦 and combining e\u{301}",
];

#[test]
fn content_only_equals_encode_ordinary() {
    for enc in BOTH {
        for s in SAMPLES {
            let parts = CompletionParts {
                content: Some(s),
                ..CompletionParts::default()
            };
            assert_eq!(
                count_completion(enc, &parts),
                tiktoken(enc, s),
                "{enc} {s:?}"
            );
            assert_eq!(count_text(enc, s), tiktoken(enc, s));
        }
    }
}

#[test]
fn notebook_string_counts() {
    // "tiktoken is great!" is 6 tokens in cl100k_base (cookbook, section 3).
    assert_eq!(
        count_text(EncodingName::Cl100kBase, "tiktoken is great!"),
        6
    );
    // "antidisestablishmentarianism" is 6 tokens in cl100k_base (section 5).
    assert_eq!(
        count_text(EncodingName::Cl100kBase, "antidisestablishmentarianism"),
        6
    );
    // "2 + 2 = 4": 7; "お誕生日おめでとう": 9 (section 5).
    assert_eq!(count_text(EncodingName::Cl100kBase, "2 + 2 = 4"), 7);
    assert_eq!(
        count_text(EncodingName::Cl100kBase, "お誕生日おめでとう"),
        9
    );
}

#[test]
fn reasoning_and_refusal_are_plain_text() {
    for enc in BOTH {
        let parts = CompletionParts {
            content: Some("The answer is 42."),
            reasoning: Some("Six times seven is forty-two."),
            refusal: Some("I can't help with that."),
            ..CompletionParts::default()
        };
        let n = count_completion_detailed(enc, &parts);
        assert_eq!(n.content, tiktoken(enc, "The answer is 42."));
        assert_eq!(n.reasoning, tiktoken(enc, "Six times seven is forty-two."));
        assert_eq!(n.refusal, tiktoken(enc, "I can't help with that."));
        assert_eq!(n.tool_calls, 0);
        assert_eq!(n.total, n.content + n.reasoning + n.refusal);
        assert_eq!(count_completion(enc, &parts), n.total);
    }
}

#[test]
fn tool_calls_count_name_arguments_and_overhead() {
    for enc in BOTH {
        let args = r#"{"location": "Boston, MA", "unit": "celsius"}"#;
        let one = [ToolCallPart {
            name: "get_current_weather",
            arguments: args,
        }];
        let parts = CompletionParts {
            tool_calls: &one,
            ..CompletionParts::default()
        };
        let expected = tiktoken(enc, "get_current_weather")
            + tiktoken(enc, args)
            + TOOL_CALL_COMPLETION_OVERHEAD;
        assert_eq!(count_completion(enc, &parts), expected);

        // The legacy function_call counts the same and is never "parallel".
        let legacy = CompletionParts {
            function_call: Some(one[0]),
            ..CompletionParts::default()
        };
        assert_eq!(count_completion(enc, &legacy), expected);

        let two = [
            one[0],
            ToolCallPart {
                name: "get_time",
                arguments: "{}",
            },
        ];
        let parts = CompletionParts {
            content: Some("Checking."),
            tool_calls: &two,
            ..CompletionParts::default()
        };
        let n = count_completion_detailed(enc, &parts);
        assert_eq!(
            n.tool_calls,
            expected
                + tiktoken(enc, "get_time")
                + tiktoken(enc, "{}")
                + TOOL_CALL_COMPLETION_OVERHEAD
                + PARALLEL_TOOL_CALLS_OVERHEAD
        );
        assert_eq!(n.total, n.tool_calls + tiktoken(enc, "Checking."));
    }
}

#[test]
fn empty_parts_count_zero() {
    for enc in BOTH {
        assert_eq!(count_completion(enc, &CompletionParts::default()), 0);
    }
}

#[test]
fn long_runs_below_the_cut_match_tiktoken() {
    // Up to 65,536 whitespace characters in a row, counts are tiktoken's own.
    let texts = [
        " ".repeat(65_536) + "x",
        "\n".repeat(70_000),
        "word ".repeat(20_000),
        "a".repeat(256) + " " + &"b".repeat(256),
        "\u{3000}".repeat(60_000) + "end",
    ];
    for enc in BOTH {
        for s in &texts {
            assert_eq!(
                count_text(enc, s),
                tiktoken(enc, s),
                "{enc} len {}",
                s.len()
            );
        }
    }
}

#[test]
fn only_pieces_over_64_kib_are_counted_linearly() {
    // Runs of letters or symbols are pieces counted exactly, however long, up to 64 KiB; a
    // longer piece costs memory in proportion to it and is counted as a token per four
    // bytes, the rest of the text as tiktoken counts it.
    for enc in BOTH {
        let run = "!".repeat(5001);
        assert_eq!(count_text(enc, &run), tiktoken(enc, &run));
        let text = format!("Hello there. {} bye", "z".repeat(4000));
        assert_eq!(count_text(enc, &text), tiktoken(enc, &text));
        let flood = format!("Hello there. {} bye", "z".repeat(70_000));
        let expected =
            tiktoken(enc, "Hello there.") + 70_001_u64.div_ceil(4) + tiktoken(enc, " bye");
        assert_eq!(count_text(enc, &flood), expected, "the piece is \" zzz…\"");
        // Digits and mixed words are pieces of their own: counted exactly.
        let mixed = "ab1".repeat(1000);
        assert_eq!(count_text(enc, &mixed), tiktoken(enc, &mixed));
    }
}

#[test]
fn runs_that_panic_tiktoken_are_counted() {
    // tiktoken-rs's encode_ordinary panics (fancy-regex stack overflow) on
    // about a million whitespace characters in a row; count_text does not.
    for enc in BOTH {
        let s = " ".repeat(1_000_100) + "x";
        let n = count_text(enc, &s);
        assert!(n > 0 && n < s.len() as u64, "{enc} {n}");
        // A run of spaces cut twice still counts exactly like tiktoken
        // (the cut length is a multiple of the longest space token); other
        // whitespace may be a token off per cut.
        let s = " ".repeat(140_000) + "x";
        assert_eq!(count_text(enc, &s), tiktoken(enc, &s), "{enc}");
    }
    // Multi-byte whitespace too (U+00A0, two bytes each).
    let s = "\u{a0}".repeat(1_000_100);
    assert!(count_text(EncodingName::O200kBase, &s) > 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_content_equals_encode_ordinary(s in any::<String>()) {
        for enc in BOTH {
            let parts = CompletionParts { content: Some(&s), ..CompletionParts::default() };
            prop_assert_eq!(count_completion(enc, &parts), tiktoken(enc, &s));
        }
    }

    #[test]
    fn parts_add_up(content in ".{0,200}", reasoning in ".{0,200}", name in "[a-z_]{1,20}", args in ".{0,100}") {
        for enc in BOTH {
            let calls = [ToolCallPart { name: &name, arguments: &args }];
            let parts = CompletionParts {
                content: Some(&content),
                reasoning: Some(&reasoning),
                tool_calls: &calls,
                ..CompletionParts::default()
            };
            prop_assert_eq!(
                count_completion(enc, &parts),
                tiktoken(enc, &content) + tiktoken(enc, &reasoning) + tiktoken(enc, &name)
                    + tiktoken(enc, &args) + TOOL_CALL_COMPLETION_OVERHEAD
            );
        }
    }
}
