//! Show the `answer` field of an `answer_question` tool call while the model is still writing
//! it, as a UI would: decoded text appended piece by piece, then the typed, complete result.
//! Runs offline on a bundled recorded stream where two choices answer at once (choice 1 first).
//!
//! ```sh
//! cargo run --example partial_answer
//! ```

use std::io::Write;

use choicewise::{Completions, Source};
use futures::{StreamExt, TryStreamExt};
use serde::Deserialize;

const RECORDED: &[u8] = include_bytes!("../tests/fixtures/answer_question.sse");

/// The tool's arguments. Fields not written yet are `None` in the snapshots.
#[derive(Debug, Deserialize)]
struct AnswerQuestion {
    answer: Option<String>,
    confidence: Option<f64>,
    #[serde(default)]
    sources: Vec<serde_json::Value>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let completions = Completions::new(Source::reader(RECORDED));
    let mut choices = completions.choices();
    while let Some(choice) = choices.next().await {
        println!("── choice {} ──", choice.index());
        // The text of the `answer` field, decoded, as the model writes it.
        let mut answer = choice.argument_text("answer_question", "/answer");
        while let Some(piece) = answer.try_next().await? {
            print!("{piece}");
            std::io::stdout().flush()?;
        }
        println!();
        // The same call, typed: the last snapshot is the complete, final value.
        let snapshots: Vec<_> = choice
            .arguments::<AnswerQuestion>("answer_question")
            .try_collect()
            .await?;
        if let Some(last) = snapshots.last() {
            println!(
                "({} snapshots; final: confidence {:?}, {} source(s), {} chars)\n",
                snapshots.len(),
                last.value.confidence,
                last.value.sources.len(),
                last.value
                    .answer
                    .as_deref()
                    .unwrap_or_default()
                    .chars()
                    .count(),
            );
        }
    }
    Ok(())
}
