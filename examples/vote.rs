//! Self-consistency: five choices answer an arithmetic question and a majority vote over the
//! final number decides, as soon as three agree. The two still running are cancelled then,
//! not after they finish. Runs offline against the project's loopback test server (one
//! request per choice, as against a provider that ignores `n`).
//!
//! ```sh
//! cargo run --example vote
//! ```

use std::time::{Duration, Instant};

use choicewise::ChoiceOutput;
use choicewise::Completions;
use choicewise_client::Client;
use choicewise_testserver::{TestServer, TestServerBuilder};
use serde_json::json;

/// A reasoning answer streamed word by word, ending with its final number.
fn answer(reasoning: &str, result: u32, pace: Duration) -> TestServerBuilder {
    TestServer::builder()
        .body(choicewise_testserver::answer(&format!(
            "{reasoning}\nAnswer: {result}"
        )))
        .random_writes(20, 60)
        .max_write_delay(pace)
}

/// The vote's key: the number after the last "Answer:".
fn final_number(output: &ChoiceOutput) -> Option<String> {
    let text = output.message.content.as_deref()?;
    let (_, tail) = text.rsplit_once("Answer:")?;
    let number: String = tail
        .trim()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    (!number.is_empty()).then_some(number)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let fast = Duration::from_millis(5);
    let slow = Duration::from_millis(400);
    let server = answer("17 × 23 = 17 × 20 + 17 × 3 = 340 + 51.", 391, fast)
        .then(answer("17 × 23: 7 × 3 = 21, carry 2 ... I will double-check each step carefully before answering.", 381, slow))
        .then(answer("23 × 17 = 23 × 10 + 23 × 7 = 230 + 161.", 391, fast))
        .then(answer("Let me think about this slowly, digit by digit, to be sure of every partial product.", 391, slow))
        .then(answer("20 × 17 = 340, plus 3 × 17 = 51.", 391, fast))
        .start()
        .await?;

    let client = Client::builder().base_url(server.base_url()).build()?;
    let request = json!({
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "What is 17 × 23? End with 'Answer: N'."}],
    });
    let started = Instant::now();
    let completions =
        Completions::builder().fan_out((0..5).map(|_| client.source(request.clone())));
    let selection = completions
        .vote(final_number)
        .deadline(Duration::from_secs(60))
        .await;

    let tally = selection.vote.ok_or("no choice voted")?;
    println!(
        "after {:.2?}: {} wins with {} of {} votes counted ({} choices)",
        started.elapsed(),
        tally.key,
        tally.votes,
        tally.counted,
        tally.choices
    );
    println!("selected choices {:?}", selection.selected);
    println!(
        "cancelled choices {:?} before they finished (≈ {} tokens received)",
        selection.cancelled, selection.cancelled_tokens
    );
    let whole = completions.collect().await?;
    for choice in &whole.choices {
        let state = match (choice.cancelled, choice.finish_reason.as_deref()) {
            (true, _) => "cancelled".to_string(),
            (false, reason) => format!("finished: {}", reason.unwrap_or("none")),
        };
        println!(
            "  choice {} ({state}): {:?}",
            choice.index,
            final_number(choice)
        );
    }
    Ok(())
}
