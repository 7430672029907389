//! `count_text` splits text with its own pre-tokenizer (regex-automata, no lookahead) and
//! merges with tiktoken-rs's ranks: its counts equal tiktoken-rs's `encode_ordinary` on
//! generated texts mixing every kind of character the split patterns tell apart, and on the
//! texts of this crate's tests, sources and documentation.

use choicewise_usage::{EncodingName, count_text};
use tiktoken_rs::CoreBPE;

/// A small deterministic generator (SplitMix64): the same texts on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.range(0, items.len() - 1)]
    }
}

const WHITESPACE: &[char] = &[' ', ' ', ' ', '\t', '\r', '\n', '\u{a0}', '\u{3000}'];
const PUNCTUATION: &[char] = &[
    '!', '"', '#', '$', '%', '&', '(', ')', '*', '+', ',', '-', '.', '/', '/', ':', ';', '<', '=',
    '>', '?', '@', '[', '\\', ']', '^', '_', '`', '{', '|', '}', '~', '\'', '«', '»', '—', '…',
];
/// Letters and marks beyond ASCII: CJK, Cyrillic, Greek, accented, a combining acute (on its
/// own or after a letter), titlecase (Lt) and modifier (Lm) letters, the long s and the
/// Kelvin sign (both case-fold to ASCII letters of the contractions), Devanagari with its
/// vowel sign.
const LETTERS: &[&str] = &[
    "中",
    "文字",
    "お誕生日",
    "привет",
    "Москва",
    "Ωμέγα",
    "λόγος",
    "é",
    "Ñ",
    "ü",
    "Ça",
    "e\u{301}",
    "\u{301}",
    "A\u{301}\u{301}",
    "\u{1c5}",
    "\u{1c5}a",
    "\u{2b0}",
    "x\u{2b0}",
    "\u{17f}",
    "\u{212a}",
    "क\u{93f}",
    "Ǆ",
    "ß",
    "İ",
];
const EMOJI: &[&str] = &["👍", "👍🏽", "🎉", "👩‍👩‍👧‍👦", "❤️", "🇫🇷"];
const CONTRACTIONS: &[&str] = &["s", "t", "re", "ve", "m", "ll", "d", "\u{17f}", "x"];

fn ascii_word(rng: &mut Rng, out: &mut String) {
    let case = rng.range(0, 3);
    for i in 0..rng.range(1, 8) {
        let c = (b'a' + rng.range(0, 25) as u8) as char;
        let upper = match case {
            0 => false,
            1 => true,
            2 => i == 0,
            _ => rng.range(0, 1) == 1,
        };
        out.push(if upper { c.to_ascii_uppercase() } else { c });
    }
}

fn contraction(rng: &mut Rng, out: &mut String) {
    out.push('\'');
    for c in rng.pick(CONTRACTIONS).chars() {
        out.push(if rng.range(0, 2) == 0 {
            c.to_ascii_uppercase()
        } else {
            c
        });
    }
}

fn whitespace_run(rng: &mut Rng, out: &mut String, lo: usize, hi: usize) {
    for _ in 0..rng.range(lo, hi) {
        out.push(rng.pick(WHITESPACE));
    }
}

/// One short stretch of one kind.
fn atom(rng: &mut Rng, out: &mut String) {
    match rng.range(0, 11) {
        0 | 1 => ascii_word(rng, out),
        2 => contraction(rng, out),
        3 => {
            for _ in 0..rng.range(1, 7) {
                out.push((b'0' + rng.range(0, 9) as u8) as char);
            }
        }
        4 => {
            for _ in 0..rng.range(1, 3) {
                out.push(rng.pick(PUNCTUATION));
            }
        }
        5 => out.push(rng.pick(WHITESPACE)),
        6 | 7 => whitespace_run(rng, out, 1, 6),
        8 | 9 => out.push_str(rng.pick(LETTERS)),
        10 => out.push_str(rng.pick(EMOJI)),
        _ => out.push_str(rng.pick(&["'", "' ", " '", "'s", "\r\n", "\n\n", "/\n", " \n "])),
    }
}

/// A text of a few atoms, sometimes ending in a whitespace run.
fn short_text(rng: &mut Rng) -> String {
    let mut s = String::new();
    for _ in 0..rng.range(1, 10) {
        atom(rng, &mut s);
    }
    if rng.range(0, 3) == 0 {
        whitespace_run(rng, &mut s, 1, 6);
    }
    s
}

/// A text with one piece of 100 to 256 bytes (merged by tiktoken's merge for long pieces):
/// a whitespace run, a word, a run of symbols or of digits and letters.
fn long_text(rng: &mut Rng) -> String {
    let mut s = short_text(rng);
    let len = rng.range(100, 250);
    match rng.range(0, 3) {
        0 => whitespace_run(rng, &mut s, len, len),
        1 => {
            s.push(' ');
            while s.len() < len {
                ascii_word(rng, &mut s);
            }
        }
        2 => {
            s.push(' ');
            for _ in 0..len {
                s.push(rng.pick(&['%', '=', '-', '*', '#']));
            }
        }
        _ => {
            for _ in 0..len / 2 {
                s.push_str(rng.pick(&["ab", "x1", "é\u{301}", " \t"]));
            }
        }
    }
    s.push_str(&short_text(rng));
    s
}

fn reference(enc: EncodingName) -> CoreBPE {
    match enc {
        EncodingName::O200kBase => tiktoken_rs::o200k_base(),
        EncodingName::Cl100kBase => tiktoken_rs::cl100k_base(),
    }
    .expect("tiktoken-rs's embedded table")
}

const BOTH: [EncodingName; 2] = [EncodingName::O200kBase, EncodingName::Cl100kBase];

fn assert_same(enc: EncodingName, bpe: &CoreBPE, text: &str) {
    let shown = match text.char_indices().nth(300) {
        Some((end, _)) => format!("{:?}… ({} bytes)", &text[..end], text.len()),
        None => format!("{text:?}"),
    };
    assert_eq!(
        count_text(enc, text),
        bpe.encode_ordinary(text).len() as u64,
        "{enc} {shown}"
    );
}

#[test]
fn generated_texts_count_as_tiktoken_does() {
    for enc in BOTH {
        let bpe = reference(enc);
        let mut rng = Rng(0x5eed_0001);
        for _ in 0..20_000 {
            assert_same(enc, &bpe, &short_text(&mut rng));
        }
        for _ in 0..1000 {
            assert_same(enc, &bpe, &long_text(&mut rng));
        }
    }
}

/// Whitespace before each kind of piece, and at the end: the rule `\s+(?!\S)` decides these.
#[test]
fn whitespace_runs_before_anything_count_as_tiktoken_does() {
    let after = [
        "", "a", "A", "7", "!", "/", "'s", "中", "\u{301}", "👍", "\u{1c5}",
    ];
    for enc in BOTH {
        let bpe = reference(enc);
        for a in WHITESPACE {
            for b in WHITESPACE {
                for c in ["", " ", "\n", "\u{3000}"] {
                    for next in after {
                        for before in ["", "x", "."] {
                            assert_same(enc, &bpe, &format!("{before}{a}{b}{c}{next}"));
                            assert_same(enc, &bpe, &format!("{before}{a}{next}"));
                        }
                    }
                }
            }
        }
    }
}

/// The texts of this crate's tests (every line, and each file whole), its sources and its
/// documentation.
const TEXTS: &[&str] = &[
    include_str!("completion.rs"),
    include_str!("errors_and_robustness.rs"),
    include_str!("../hostile_text.rs"),
    include_str!("model_mapping.rs"),
    include_str!("observed_counts.rs"),
    include_str!("published_examples.rs"),
    include_str!("pretokenizer_equivalence.rs"),
    include_str!("../../src/bpe.rs"),
    include_str!("../../src/encoding.rs"),
    include_str!("../../src/prompt.rs"),
    include_str!("../../src/completion.rs"),
    include_str!("../../../../docs/usage.md"),
];

/// The string literals of a Rust source, their escapes (`\n`, `\t`, `\r`, `\"`, `\\`, `\'`,
/// `\0`, `\u{…}`) resolved; raw strings are left to the lines they are on.
fn string_literals(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = source.chars().peekable();
    let mut prev = ' ';
    while let Some(c) = chars.next() {
        if c == '"' && prev != '\'' && prev != '#' && prev != 'r' {
            let mut s = String::new();
            while let Some(c) = chars.next() {
                match c {
                    '"' => break,
                    '\\' => match chars.next() {
                        Some('n') => s.push('\n'),
                        Some('t') => s.push('\t'),
                        Some('r') => s.push('\r'),
                        Some('0') => s.push('\0'),
                        Some('u') => {
                            let hex: String =
                                chars.by_ref().skip(1).take_while(|&c| c != '}').collect();
                            if let Some(c) =
                                u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32)
                            {
                                s.push(c);
                            }
                        }
                        // A line continuation: the newline and the next line's indent.
                        Some('\n') => while chars.next_if(|c| c.is_whitespace()).is_some() {},
                        Some(c) => s.push(c),
                        None => break,
                    },
                    c => s.push(c),
                }
            }
            out.push(s);
            prev = '"';
        } else {
            prev = c;
        }
    }
    out
}

#[test]
fn the_crates_texts_count_as_tiktoken_does() {
    for enc in BOTH {
        let bpe = reference(enc);
        let mut literals = 0;
        for text in TEXTS {
            assert_same(enc, &bpe, text);
            for line in text.lines() {
                assert_same(enc, &bpe, line);
            }
            for literal in string_literals(text) {
                assert_same(enc, &bpe, &literal);
                literals += 1;
            }
        }
        assert!(literals > 500, "{literals} string literals");
    }
}

/// Whole languages and symbol runs, each a long piece or many: Thai and CJK without spaces or
/// punctuation, Devanagari, flags and skin-tone emoji, runs of one symbol and of several,
/// case mixes; short and over 256 bytes (where an estimate per character class once took
/// over: Thai +79%, 100 CJK characters -45%, flags -67%, `%` x 5,000 +1,482%).
#[test]
fn languages_emoji_and_symbol_runs_count_as_tiktoken_does() {
    let thai = "ภาษาไทยเป็นภาษาที่มีระดับเสียงของคำแน่นอนหรือวรรณยุกต์เช่นเดียวกับภาษาจีน";
    let cjk = "中华人民共和国是工人阶级领导的以工农联盟为基础的人民民主专政的社会主义国家";
    let japanese = "日本語の文章には単語の間に空白がありませんのでとても長い一つの塊になります";
    let devanagari = "हिन्दीविश्वकीएकप्रमुखभाषाहैएवंभारतकीराजभाषाहै";
    let flags = "🇫🇷🇩🇪🇯🇵🇺🇸🇧🇷🇮🇳";
    let skin = "👍🏽👋🏿🙋🏻‍♀️👨🏾‍💻🤝🏼";
    let texts: Vec<String> = vec![
        thai.to_string(),
        thai.repeat(8),
        format!("{} {}", thai.repeat(3), thai),
        cjk.to_string(),
        cjk.repeat(4),
        japanese.repeat(3),
        devanagari.repeat(6),
        format!("{} नमस्ते दुनिया", devanagari.repeat(2)),
        flags.repeat(20),
        skin.repeat(20),
        format!("ok {} ok", flags.repeat(10)),
        "%".repeat(5000),
        "!".repeat(1001),
        "=-".repeat(700),
        "#$%^&*()[]{}<>".repeat(40),
        "...".repeat(300) + "\n",
        "HelloWORLDfooBAR".repeat(40),
        "aBcDeFgHiJ".repeat(60),
        "ÀÉÎõüÇñßÆø".repeat(40),
        "ПриветМИРпока".repeat(30),
        format!("{}{}", "x".repeat(3000), "Y".repeat(3000)),
    ];
    for enc in BOTH {
        let bpe = reference(enc);
        for text in &texts {
            assert_same(enc, &bpe, text);
        }
    }
}
