use super::*;

fn field<'a>(data: &'a str, r: &Option<Range<usize>>) -> Option<&'a str> {
    r.clone().map(|r| &data[r])
}

#[test]
fn finds_the_envelope_and_each_choice() {
    let data = r#" {"id":"c1","object":"chat.completion.chunk","created":17,"model":"m",
        "obfuscation":"x\"y","choices":[{"index":2,"delta":{"content":"a}\"{"},"logprobs":null},
        {"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":[1]}"}}]},"finish_reason":"stop","index":0}],
        "usage":null,"extra":{"a":[1,2.5e-3,true,false,null,{}]}} "#;
    let s = scan(data, Vec::new(), &mut Head::default()).expect("scanned");
    assert_eq!(field(data, &s.id), Some(r#""c1""#));
    assert_eq!(field(data, &s.model), Some(r#""m""#));
    assert_eq!(field(data, &s.created), Some("17"));
    assert_eq!(s.usage, None);
    assert_eq!(s.choices.len(), 2);
    assert_eq!(s.choices[0].index, Some(2));
    assert!(!s.choices[0].finishes);
    assert_eq!(
        &data[s.choices[0].range.clone()],
        r#"{"index":2,"delta":{"content":"a}\"{"},"logprobs":null}"#
    );
    assert_eq!(s.choices[1].index, Some(0));
    assert!(s.choices[1].finishes);
    assert!(data[s.choices[1].range.clone()].ends_with(r#""index":0}"#));
}

#[test]
fn agrees_with_serde_on_every_element() {
    // Each element: (index, finishes) the same as a typed parse says.
    let data = r#"{"choices":[{"index":null,"finish_reason":""},{"finish_reason":null,"index":7},
        {"index":3,"finish_reason":"length"},{}]}"#;
    let s = scan(data, Vec::new(), &mut Head::default()).unwrap();
    let got: Vec<_> = s.choices.iter().map(|c| (c.index, c.finishes)).collect();
    assert_eq!(
        got,
        vec![
            (None, false),
            (Some(7), false),
            (Some(3), true),
            (None, false)
        ]
    );
}

/// Scans `chunks` in order with one head, as the reader does, and each alone: the
/// results must be the same, but for the fields of a repeated head, left out.
fn assert_warm_equals_cold(chunks: &[String]) {
    let mut head = Head::default();
    for data in chunks {
        let repeated = (!head.bytes.is_empty() && data.as_bytes().starts_with(&head.bytes))
            .then_some(head.bytes.len());
        let warm = scan(data, Vec::new(), &mut head);
        let mut cold = scan(data, Vec::new(), &mut Head::default());
        if let (Some(cold), Some(len)) = (&mut cold, repeated) {
            for field in Field::ALL {
                let slot = field.slot(cold);
                if slot.as_ref().is_some_and(|r| r.end <= len) {
                    *slot = None;
                }
            }
        }
        assert_eq!(warm, cold, "{data}");
    }
}

#[test]
fn a_repeated_head_is_scanned_from_its_choices() {
    let head = r#"{"id":"c1","object":"chat.completion.chunk","created":17,"model":"m","choices":"#;
    let chunks: Vec<String> = [
        r#"[{"index":0,"delta":{"content":"a"}}]}"#,
        r#"[{"index":1,"finish_reason":"stop"}],"usage":null}"#,
        // Whitespace where the first had none, then invalid or duplicate members: the
        // same verdicts as a scan from the start.
        r#"  [{"index":2}] } "#,
        r#"[{"index":0}],"id":"again"}"#,
        r#"[{"index":0}],"choices":[]}"#,
        r#"[{"index":0}],"x":tru}"#,
        r#"[{"index":0}]}{"#,
        r#"null,"usage":{"prompt_tokens":1}}"#,
        r#"[],"usage":null,"obfuscation":"ab"}"#,
    ]
    .iter()
    .map(|rest| format!("{head}{rest}"))
    .collect();
    assert_warm_equals_cold(&chunks);
    let mut warm = Head::default();
    let s = scan(&chunks[0], Vec::new(), &mut warm).expect("scanned");
    assert_eq!(field(&chunks[0], &s.id), Some(r#""c1""#));
    assert_eq!(&*warm.bytes, head.as_bytes());
    // The repeated head's facts were recorded from the chunk before: left out.
    let s = scan(&chunks[1], Vec::new(), &mut warm).expect("scanned");
    assert_eq!((s.id, s.created, s.model), (None, None, None));
    assert_eq!(s.choices[0].index, Some(1));
    assert!(s.choices[0].finishes);
    // A duplicate of a head field after the choices is still serde's to judge.
    assert!(scan(&chunks[3], Vec::new(), &mut warm).is_none());
}

#[test]
fn a_head_with_usage_or_an_error_is_not_remembered() {
    for head in [
        r#"{"usage":{"total_tokens":3},"choices":"#,
        r#"{"id":"a","prompt_filter_results":[],"choices":"#,
        r#"{"error":null,"choices":"#,
    ] {
        let mut warm = Head::default();
        let data = format!("{head}[]}}");
        scan(&data, Vec::new(), &mut warm).expect("scanned");
        assert!(warm.bytes.is_empty(), "{head}");
    }
}

proptest::proptest! {
    /// Any sequence of chunks made of heads that share prefixes, whitespace, valid and
    /// invalid bodies and trailers: scanning with the last chunk's head changes nothing.
    #[test]
    fn the_head_never_changes_a_result(
        parts in proptest::collection::vec((0usize..8, 0usize..13, 0usize..7), 1..12)
    ) {
        let heads = [
            r#"{"id":"a","model":"m","choices":"#,
            r#"{"id":"a","model":"m","choices": "#,
            r#"{"id":"a","model":"m2","choices":"#,
            r#"{"id":"a","model":"m","created":1,"choices":"#,
            r#"{"id":"a","model":"m","created":12,"choices":"#,
            r#"{ "model" : "m" , "choices" :"#,
            r#"{"usage":{"total_tokens":1},"model":"m","choices":"#,
            r#"{"id":"a","model":"m","choices":"#,
        ];
        let bodies = [
            r#"[{"index":0,"delta":{"content":"x"}"}}]"#,
            r#" [{"index":1,"finish_reason":"stop"},{"index":0}]"#,
            "[]",
            r#"[{"index":"0"}]"#,
            // Texts, which a template carries from chunk to chunk.
            r#"[{"index":0,"delta":{"content":"a"}}]"#,
            r#"[{"index":0,"delta":{"content":"b}]\"{"}}]"#,
            r#"[{"index":0,"delta":{"content":""}}]"#,
            r#"[{"index":0,"delta":{"content":"c\\"}}]"#,
            r#"[{"index":0,"delta":{"content":"d"e"}}]"#,
            r#"[{"index":0,"delta":{"content":"f\"}}]"#,
            r#"[{"index":0,"delta":{"content":"g"},"finish_reason":"stop"}]"#,
            r#"[{"index":0,"delta":{"reasoning_content":"h"},"finish_reason":null}]"#,
            r#"[{"index":0,"delta":{"content":"i"}},{"index":1,"delta":{"content":"j"}}]"#,
        ];
        let tails = [
            "}",
            r#","usage":null}"#,
            r#","id":"b"}"#,
            r#","model":"m"}"#,
            r#","x":[1,]}"#,
            " } ",
            r#","usage":{"total_tokens":3},"choices":[]}"#,
        ];
        let chunks: Vec<String> = parts
            .iter()
            .map(|&(h, b, t)| format!("{}{}{}", heads[h], bodies[b], tails[t]))
            .collect();
        assert_warm_equals_cold(&chunks);
    }
}

proptest::proptest! {
    /// Chunks that repeat a head and a tail around texts of quotes, backslashes, brackets
    /// and letters: a template's facts are always the scan's, and its text is where the
    /// chunk's is.
    #[test]
    fn a_template_never_changes_a_result(
        parts in proptest::collection::vec(
            (proptest::collection::vec(0usize..9, 0..8), 0usize..4, 0usize..6, 0usize..5, proptest::collection::vec(0usize..7, 0..4)),
            1..24,
        )
    ) {
        let alphabet = ["\"", "\\", "}", "]", "{", "a", " ", "\\u00e9", "é"];
        let tails = [
            r#"}}]}"#,
            r#"},"logprobs":null,"finish_reason":null}],"usage":null}"#,
            r#"},"finish_reason":"stop"}]}"#,
            r#"}}],"obfuscation":"x\"y"}"#,
        ];
        // A padding after the choices, varying as OpenAI's `obfuscation` does, before or
        // after other fields (one the scan records); `{}` its contents, some not valid in
        // a JSON string.
        let paddings = [
            "",
            r#","obfuscation":"{}""#,
            r#","id":"i2","obfuscation":"{}","n":1"#,
            r#","obfuscation":"{}","usage":{"total_tokens":3}"#,
            r#","obfuscation":"{}","created":7"#,
        ];
        let padded = ["a", "bc", "\\\"", "\\\\", "\\q", "\u{1}", "\\u00e9"];
        // Interleaved choices: more of them than the templates kept.
        let head = |index| {
            format!(r#"{{"id":"c","model":"m","choices":[{{"index":{index},"delta":{{"content":""#)
        };
        let chunks: Vec<String> = parts
            .iter()
            .map(|(text, t, index, padding, contents)| {
                let text: String = text.iter().map(|&c| alphabet[c]).collect();
                let contents: String = contents.iter().map(|&c| padded[c]).collect();
                let padding = paddings[*padding].replace("{}", &contents);
                let tail = tails[*t];
                let tail = match tail.strip_suffix('}') {
                    Some(open) => format!("{open}{padding}}}"),
                    None => tail.to_string(),
                };
                format!("{}{text}\"{tail}", head(index))
            })
            .collect();
        assert_warm_equals_cold(&chunks);
    }
}

#[test]
fn a_template_carries_a_stream_of_texts() {
    let chunk = |text: &str, tail: &str, padding: &str| {
        format!(
            r#"{{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{{"content":"{text}"}},"finish_reason":{tail}}}],"usage":null,"obfuscation":"{padding}"}}"#
        )
    };
    let chunks = [
        chunk("a", "null", "xy"),
        chunk("bc", "null", "x"),
        chunk(r#"d\"e"#, "null", "xyz"),
        chunk("", "null", r#"\"\\"#),
        chunk("f", r#""stop""#, ""),
    ];
    assert_warm_equals_cold(&chunks);
    let mut head = Head::default();
    let mut kept = Vec::new();
    for data in &chunks {
        let s = scan(data, Vec::new(), &mut head).expect("scanned");
        let element = &data[s.choices[0].range.clone()];
        assert!(element.starts_with(r#"{"index":0"#) && element.ends_with('}'));
        kept.push(head.templates.as_ref().map_or(0, |t| t.next));
    }
    // The first chunk set the head; the second was scanned from its choices and kept; the
    // third and fourth were the second's bytes around other texts and paddings, filled from
    // it; the fifth, another finish, was scanned and kept.
    assert_eq!(kept, [0, 1, 1, 1, 2]);
}

#[test]
fn a_stream_that_never_repeats_keeps_few_templates() {
    // Each chunk's log-probabilities its own: no chunk repeats another but for its text.
    let chunk = |text: &str, k: usize| {
        format!(
            r#"{{"id":"c","model":"m","choices":[{{"index":0,"delta":{{"content":"{text}"}},"logprobs":{{"k":{k}}}}}]}}"#
        )
    };
    let mut chunks: Vec<String> = (0..41).map(|k| chunk("t", k)).collect();
    // Then one repeating the last, which was kept.
    chunks.push(chunk("other", 40));
    assert_warm_equals_cold(&chunks);
    let mut head = Head::default();
    let mut keeps = 0;
    let mut filled = false;
    for data in &chunks {
        let before = head.templates.as_ref().map(|t| t.next);
        scan(data, Vec::new(), &mut head).expect("scanned");
        let after = head.templates.as_ref().map(|t| t.next);
        keeps += usize::from(before != after);
        filled = before.is_some() && before == after;
    }
    // The first chunk set the head; of the next 40, the first 8 were kept, then one in 8:
    // the 16th, 24th, 32nd and 40th. The last chunk was filled from the 40th.
    assert_eq!(keeps, 12);
    assert!(filled);
}

#[test]
fn leaves_anything_unusual_to_serde() {
    for data in [
        "[1]",
        "{",
        r#"{"choices":[],"x":tru}"#,
        r#"{"choices":[],"x":"\q"}"#,
        "{\"choices\":[],\"x\":\"\u{1}\"}",
        r#"{"choices":[],"x":01}"#,
        r#"{"choices":[],"x":[1,]}"#,
        r#"{"choices":[],"x":{"a" 1}}"#,
        r#"{"choices":[],"choices":[]}"#,
        r#"{"id":5,"choices":[]}"#,
        r#"{"choices":[{"index":"0"}]}"#,
        r#"{"choices":[{"index":1.5}]}"#,
        r#"{"choices":[{"index":0,"index":1}]}"#,
        r#"{"choices":["x"]}"#,
        r#"{"ch\u006fices":[]}"#,
        r#"{"choices":[]}{"choices":[]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"x"}]}"#,
    ] {
        assert!(
            scan(data, Vec::new(), &mut Head::default()).is_none(),
            "{data}"
        );
    }
    let deep = format!(
        r#"{{"choices":[],"x":{}{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    assert!(scan(&deep, Vec::new(), &mut Head::default()).is_none());
    let ok = format!(
        r#"{{"choices":[],"x":{}{}}}"#,
        "[".repeat(100),
        "]".repeat(100)
    );
    assert!(scan(&ok, Vec::new(), &mut Head::default()).is_some());
}
