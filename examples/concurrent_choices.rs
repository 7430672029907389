//! One tokio task per choice, each printing its own content as it arrives: no index
//! bookkeeping anywhere. Runs offline on the bundled recorded n = 3 stream.
//!
//! ```sh
//! cargo run --example concurrent_choices
//! ```

use choicewise::{Completions, Source};
use futures::{StreamExt, TryStreamExt};

/// A recorded stream whose choices first appear in the order 2, 0, 1.
const RECORDED: &[u8] = include_bytes!("../tests/fixtures/demo.sse");

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Any source works: an HTTP body stream (`Source::sse`), a file or socket
    // (`Source::reader`), or chunks another client already parsed (`Source::parsed`).
    let completions = Completions::new(Source::reader(RECORDED));

    let mut tasks = Vec::new();
    let mut choices = completions.choices();
    while let Some(choice) = choices.next().await {
        tasks.push(tokio::spawn(async move {
            let mut text = String::new();
            let mut content = choice.content();
            while let Some(delta) = content.try_next().await? {
                text.push_str(&delta);
            }
            let message = choice.message().await?;
            Ok::<_, choicewise::Error>(format!(
                "choice {} ({} chars, finish: {}): {}",
                choice.index(),
                text.chars().count(),
                message.finish_reason.as_deref().unwrap_or("none"),
                if text.is_empty() {
                    "(no text: it called tools)"
                } else {
                    &text
                },
            ))
        }));
    }
    for task in tasks {
        println!("{}\n", task.await??);
    }
    Ok(())
}
