//! What the partial-JSON benchmarks parse (its criterion bench, its `examples/ratio.rs`, and
//! the harness's `partial-json`): a realistic arguments document, fragmenting, and the
//! quadratic "close and re-parse" baseline.

use serde_json::{Value, json};

/// Deterministic pseudo-random numbers (64-bit LCG).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const WORDS: &[&str] = &[
    "the",
    "model",
    "streams",
    "arguments",
    "in",
    "small",
    "fragments",
    "and",
    "a",
    "parser",
    "must",
    "keep",
    "up",
    "with",
    "them",
    "café",
    "naïve",
    "résumé",
    "東京",
    "データ",
    "🙂",
    "\"quoted\"",
    "back\\slash",
    "tab\there",
    "line\nbreak",
    "price",
    "€42",
    "100%",
    "C:/path",
    "señor",
    "über",
    "emoji 🚀",
    "x²",
    "α/β",
    "<tag>",
    "{braces}",
    "[brackets]",
    "comma,",
];

fn sentence(rng: &mut Lcg, words: usize) -> String {
    let mut s = String::new();
    for i in 0..words {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
    }
    s.push('.');
    s
}

/// Escapes every non-ASCII character of serialized JSON as `\uXXXX`
/// (surrogate pairs for astral characters), like `ensure_ascii` does.
pub fn ensure_ascii(json: &str) -> String {
    let mut out = String::with_capacity(json.len() * 2);
    for c in json.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut buf = [0u16; 2];
            for unit in c.encode_utf16(&mut buf) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

/// A realistic function-call arguments object of about `target` bytes:
/// a long `answer` text (raw UTF-8 and JSON escapes), `citations` objects
/// (`\u` escapes, including surrogate pairs) and a `scores` array of numbers.
pub fn realistic_doc(target: usize) -> String {
    let mut rng = Lcg(0x5eed);
    let mut answer = String::new();
    while answer.len() < target * 2 / 5 {
        answer.push_str(&sentence(&mut rng, 12));
        answer.push(if rng.below(5) == 0 { '\n' } else { ' ' });
    }
    // Keys in schema order (not sorted), as models emit them; non-ASCII
    // escaped as `\uXXXX`.
    let mut citations = String::from("[");
    let mut id = 0;
    while citations.len() < target * 2 / 5 {
        if id > 0 {
            citations.push_str(", ");
        }
        citations.push_str(&format!(
            "{{\"id\": {id}, \"url\": {}, \"title\": {}, \"snippet\": {}, \"relevance\": {}, \"verified\": {}, \"tags\": [\"source\", \"web\"]}}",
            json!(format!("https://example.com/docs/{}/page-{id}.html", rng.below(1000))),
            ensure_ascii(&json!(sentence(&mut rng, 5)).to_string()),
            ensure_ascii(&json!(sentence(&mut rng, 20)).to_string()),
            rng.below(1000) as f64 / 1000.0,
            rng.below(2) == 0,
        ));
        id += 1;
    }
    citations.push(']');
    let mut scores = Vec::new();
    let mut scores_len = 0;
    while scores_len < target / 5 {
        let v: Value = match rng.below(4) {
            0 => json!(rng.below(100_000)),
            1 => json!(-(rng.below(1000) as i64)),
            2 => json!(rng.below(1_000_000) as f64 / 7.0),
            _ => json!((rng.below(1000) as f64) * 1e-7),
        };
        scores_len += v.to_string().len() + 1;
        scores.push(v);
    }
    format!(
        "{{\"answer\": {}, \"citations\": {citations}, \"scores\": {}, \"done\": true}}",
        serde_json::to_string(&answer).unwrap(),
        serde_json::to_string(&scores).unwrap(),
    )
}

/// Splits `doc` into fragments of `size` bytes (moved back to character
/// boundaries).
pub fn fragments(doc: &str, size: usize) -> Vec<&str> {
    let mut out = Vec::with_capacity(doc.len() / size + 1);
    let mut start = 0;
    while start < doc.len() {
        let mut end = (start + size).min(doc.len());
        while !doc.is_char_boundary(end) {
            end += 1;
        }
        out.push(&doc[start..end]);
        start = end;
    }
    out
}

/// The usual non-incremental approach: close whatever is open in `prefix`
/// and parse the result from scratch (one or two `serde_json` parses of the
/// whole prefix). Approximate; returns `None` when it cannot make sense of
/// the prefix.
pub fn close_and_reparse(prefix: &str) -> Option<Value> {
    let mut stack = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    let mut last_boundary = 0; // just after the last `,` `[` `{` outside strings
    for (i, b) in prefix.bytes().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                stack.push(b);
                last_boundary = i + 1;
            }
            b'}' | b']' => {
                stack.pop();
            }
            b',' => last_boundary = i + 1,
            _ => {}
        }
    }
    let close = |s: &mut String, stack: &[u8]| {
        for &open in stack.iter().rev() {
            s.push(if open == b'{' { '}' } else { ']' });
        }
    };
    let mut candidate = prefix.to_owned();
    if in_string {
        if escaped {
            candidate.pop();
        } else if let Some(p) = candidate.rfind("\\u")
            && candidate.len() - p < 6
        {
            candidate.truncate(p);
        }
        candidate.push('"');
    }
    close(&mut candidate, &stack);
    if let Ok(v) = serde_json::from_str(&candidate) {
        return Some(v);
    }
    // Drop the incomplete last member/element and try again.
    let mut candidate = prefix[..last_boundary].to_owned();
    if candidate.ends_with(',') {
        candidate.pop();
    }
    close(&mut candidate, &stack);
    serde_json::from_str(&candidate).ok()
}
