//! The live view drawn on a test terminal.

use super::*;
use choicewise::Source;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use unicode_width::UnicodeWidthStr;

/// Three choices as a `--first` run leaves them: 0 cancelled mid-sentence, 1 finished and
/// selected, 2 failed.
async fn picked_model() -> Model {
    let sse = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Still thinking\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"Pack light.\"},\"finish_reason\":\"stop\"}]}\n\n",
        "data: {\"choices\":[{\"index\":2,\"delta\":{\"content\":\"Hm\"}}]}\n\n",
    );
    let completions = Completions::new(Source::reader(sse.as_bytes()));
    let choices: Vec<Choice> = completions.choices().collect().await;
    let at = Duration::from_millis(1500);
    let mut columns: Vec<Column> = choices.into_iter().map(Column::new).collect();
    columns[0].apply(ChoiceEvent::Content("Still thinking".into()), at);
    columns[0].apply(ChoiceEvent::Cancelled(CancelReason::Decided), at);
    columns[1].apply(ChoiceEvent::Content("Pack light.".into()), at);
    columns[1].apply(ChoiceEvent::Finished("stop".into()), at);
    columns[2].apply(ChoiceEvent::Content("Hm".into()), at);
    columns[2].state = State::Failed("the connection closed".into());
    columns[2].ended_at = Some(at);
    for (column, tokens) in columns.iter_mut().zip([3, 4, 1]) {
        column.tokens = tokens;
        column.tokens_final = true;
    }
    let mut selection = Selection::default();
    selection.selected = vec![1];
    selection.cancelled = vec![0];
    selection.cancelled_tokens = 3;
    Model {
        columns,
        usage: Some("usage (estimated with o200k_base): prompt 0, completion 8, total 8; cancelled choices had ≈ 3 tokens".into()),
        end: Some(Ok(())),
        ended_at: Some(at),
        selection: Some(selection),
    }
}

/// The frame `render` draws on a `width` × `height` screen, as text.
fn frame(m: &Model, width: u16, height: u16) -> String {
    frame_of(m, width, height, false, Sources::default())
}

fn frame_of(m: &Model, width: u16, height: u16, interrupted: bool, sources: Sources) -> String {
    let options = Options {
        start: Instant::now(),
        title: "replay of a test".into(),
        model: None,
        sources,
    };
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal
        .draw(|frame| {
            render(frame, m, &options, interrupted);
        })
        .unwrap();
    let buffer = terminal.backend().buffer();
    let mut text = String::new();
    for y in 0..height {
        let mut row = String::new();
        for x in 0..width {
            row.push_str(buffer[(x, y)].symbol());
        }
        text.push_str(row.trim_end());
        text.push('\n');
    }
    text
}

/// The line of the frame holding `needle`.
fn line_with<'a>(text: &'a str, needle: &str) -> &'a str {
    text.lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no {needle:?} in\n{text}"))
}

#[tokio::test]
async fn the_selected_choice_is_marked_and_a_cancelled_one_says_so() {
    let m = picked_model().await;
    let text = frame(&m, 132, 10);
    let top = line_with(&text, " choice 0 ");
    // Each column's header: its own state, the mark on the selected one only.
    assert!(top.contains(" choice 0 · cancelled "), "{text}");
    assert!(
        top.contains(" choice 1 · finished: stop · ★ selected "),
        "{text}"
    );
    assert!(top.contains(" choice 2 · error "), "{text}");
    assert_eq!(top.matches("★").count(), 1, "{text}");
    // The selected column has a double border; the others a plain one.
    assert_eq!(top.matches('╔').count(), 1, "{text}");
    assert_eq!(top.matches('┌').count(), 2, "{text}");
    let column_1 = top.find('╔').unwrap();
    assert!(top[column_1..].starts_with("╔ choice 1 "), "{text}");
    // The cancelled column's body ends with the cancel; the failed one with its error.
    assert_eq!(text.matches("⊘ cancelled").count(), 1, "{text}");
    let left_of = line_with(&text, "⊘ cancelled").split("⊘ cancelled").next();
    assert!(left_of.is_some_and(|l| l.chars().count() < 44), "{text}");
    assert!(text.contains("✘ the connection closed"), "{text}");
    assert!(text.contains("cancelled choices had ≈ 3 tokens"), "{text}");
}

#[tokio::test]
async fn narrow_columns_keep_the_marks() {
    let m = picked_model().await;
    // 30 columns each: the index and the reason alone, the mark in full.
    let text = frame(&m, 90, 10);
    let top = line_with(&text, " 0 · ");
    assert!(top.contains(" 0 · cancelled "), "{text}");
    assert!(top.contains(" 1 · stop · ★ selected "), "{text}");
    // 24 each: the star alone.
    let text = frame(&m, 72, 10);
    let top = line_with(&text, " 0 · ");
    assert!(top.contains(" 0 · cancelled "), "{text}");
    assert!(top.contains(" 1 · stop · ★ "), "{text}");
    assert!(!top.contains("selected"), "{text}");
    assert_eq!(top.matches('╔').count(), 1, "{text}");
}

#[tokio::test]
async fn before_the_decision_nothing_is_marked() {
    let mut m = picked_model().await;
    m.selection = None;
    let text = frame(&m, 132, 10);
    assert!(!text.contains('★'), "{text}");
    assert!(!text.contains('╔'), "{text}");
    assert!(text.contains(" choice 0 · cancelled "), "{text}");
}

#[tokio::test]
async fn columns_are_in_index_order_and_say_when_ctrl_c_stopped_them() {
    // Choices appearing as 2, 0, 1.
    let sse = concat!(
        "data: {\"choices\":[{\"index\":2,\"delta\":{\"content\":\"c\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"b\"}}]}\n\n",
    );
    let completions = Completions::new(Source::reader(sse.as_bytes()));
    let choices: Vec<Choice> = completions.choices().collect().await;
    assert_eq!(choices[0].index(), 2);
    let m = Model {
        columns: choices.into_iter().map(Column::new).collect(),
        ..Model::default()
    };
    let text = frame_of(&m, 132, 8, true, Sources::default());
    let top = line_with(&text, " choice 0 ");
    let at = |i: u32| top.find(&format!(" choice {i} ")).unwrap();
    assert!(at(0) < at(1) && at(1) < at(2), "{text}");
    assert_eq!(top.matches("interrupted").count(), 3, "{text}");
    assert!(!top.contains("streaming"), "{text}");
    // The top line says it once; the notes do not repeat it.
    assert_eq!(text.matches("interrupted").count(), 4, "{text}");
    let streaming = frame_of(&m, 132, 8, false, Sources::default());
    assert_eq!(
        line_with(&streaming, " choice 0 ")
            .matches("streaming")
            .count(),
        3
    );
    // A fan-out mixing sources names each choice's in its header; one source needs none.
    let label = |api: &str, model: &str, host: &str| crate::view::SourceLabel {
        api: api.into(),
        model: model.into(),
        host: host.into(),
    };
    let mixed = Sources::new(
        vec![
            label("chat", "m", "127.0.0.1:1"),
            label("anthropic", "c", "h:2"),
            label("chat", "m", "127.0.0.1:1"),
        ],
        1,
    );
    let text = frame_of(&m, 200, 8, false, mixed);
    let top = line_with(&text, " choice 0 ");
    assert!(top.contains(" choice 1 · anthropic:c@h:2 "), "{text}");
    assert!(top.contains(" choice 2 · chat:m@127.0.0.1:1 "), "{text}");
    let same = Sources::new(vec![label("chat", "m", "x"), label("chat", "m", "x")], 1);
    assert!(!frame_of(&m, 200, 8, false, same).contains("chat:m@x"));
}

/// A sample `--confidence` stops reads `low confidence`, not `cancelled`: two confident
/// warmup samples (confidence 4, "41" and "42", so undecided), then one that hesitates
/// (confidence 0.5) and would go on for ever.
#[tokio::test]
async fn a_choice_stopped_for_low_confidence_says_so() {
    use choicewise::confidence::{Confidence, Measure};
    use futures::stream;
    let event = |text: &str, c: f64, finish: bool| {
        let token = serde_json::json!({"token": text, "logprob": -c / 2.0, "top_logprobs": [
            {"token": text, "logprob": -c / 2.0}, {"token": "~", "logprob": -1.5 * c}]});
        let chunk = serde_json::json!({"choices": [{"index": 0, "delta": {"content": text},
            "logprobs": {"content": [token]},
            "finish_reason": if finish { Some("stop") } else { None }}]});
        Ok::<_, std::io::Error>(format!("data: {chunk}\n\n"))
    };
    let completions = Completions::builder().samples(3, move |k| {
        let source = |events| Source::sse(stream::iter(events)).n(1);
        match k {
            0 => source(vec![event("42", 4.0, true)]),
            1 => source(vec![event("41", 4.0, true)]),
            _ => {
                let hesitant = vec![event("hmm", 0.5, false), event("hmm", 0.5, false)];
                Source::sse(stream::iter(hesitant).chain(stream::pending())).n(1)
            }
        }
    });
    let pick = completions
        .vote(|o| o.message.content.clone())
        .min_votes(1)
        .confidence(
            Confidence::for_measure(Measure::TopK)
                .warmup(2)
                .group_tokens(2),
        );
    let selection = tokio::time::timeout(Duration::from_secs(20), pick)
        .await
        .expect("the vote ends once the unsure sample is stopped");
    assert_eq!(
        selection.confidence.as_ref().map(|r| r.stopped().to_vec()),
        Some(vec![2])
    );
    let choices: Vec<Choice> = completions.choices().collect().await;
    let mut columns: Vec<Column> = choices.into_iter().map(Column::new).collect();
    let at = Duration::from_millis(100);
    for column in &mut columns {
        let events: Vec<_> = column.choice.events().collect().await;
        for event in events.into_iter().flatten() {
            column.apply(event, at);
        }
    }
    assert_eq!(columns[2].state, State::LowConfidence);
    let m = Model {
        columns,
        end: Some(Ok(())),
        ended_at: Some(at),
        selection: Some(selection),
        ..Model::default()
    };
    let text = frame(&m, 132, 10);
    let top = line_with(&text, " choice 0 ");
    assert!(top.contains(" choice 2 · low confidence "), "{text}");
    assert!(text.contains("⊘ low confidence"), "{text}");
    assert!(!text.contains("cancelled"), "{text}");
}

#[test]
fn wrap_breaks_at_spaces_and_cuts_long_words() {
    assert_eq!(wrap("the quick brown fox", 10), ["the quick", "brown fox"]);
    assert_eq!(wrap("abcdefghij klm", 4), ["abcd", "efgh", "ij", "klm"]);
    assert_eq!(wrap("a\n\nb", 5), ["a", "", "b"]);
    assert_eq!(wrap("", 5), [""]);
    assert_eq!(wrap("日本語のテキスト", 6), ["日本語", "のテキ", "スト"]);
    for line in wrap(&"lorem ipsum dolor sit amet ".repeat(20), 13) {
        assert!(line.width() <= 13, "{line:?}");
    }
}
