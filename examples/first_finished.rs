//! Best-of-three by speed: send the same question three times at once, take the first answer
//! that finishes properly, and stop paying for the other two (their connections are closed,
//! so the provider stops generating). Runs offline against the project's loopback test
//! server, whose three answers stream at different paces.
//!
//! ```sh
//! cargo run --example first_finished
//! ```

use std::time::{Duration, Instant};

use choicewise::Completions;
use choicewise_client::Client;
use choicewise_testserver::{TestServer, answer};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let slow = "Lisbon in late autumn is mild but changeable: pack layers, a light waterproof \
                jacket, comfortable shoes for the hills and cobbles, and something warm for the \
                evenings by the river. ";
    // Three providers' worth of pacing: a quick short answer and two slow long ones.
    let server = TestServer::builder()
        .body(answer(&slow.repeat(4)))
        .random_writes(8, 24)
        .max_write_delay(Duration::from_millis(60))
        .then(
            TestServer::builder()
                .body(answer("Layers, a rain jacket and good walking shoes."))
                .delay(Duration::from_millis(300)),
        )
        .then(
            TestServer::builder()
                .body(answer(&slow.repeat(6)))
                .random_writes(8, 24)
                .max_write_delay(Duration::from_millis(60)),
        )
        .start()
        .await?;

    let client = Client::builder().base_url(server.base_url()).build()?;
    let request = json!({
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "What should I pack for Lisbon in November?"}],
    });
    let started = Instant::now();
    let completions =
        Completions::builder().fan_out((0..3).map(|_| client.source(request.clone())));

    let selection = completions
        .first_finished()
        .deadline(Duration::from_secs(30))
        .await;
    let Some(&winner) = selection.selected.first() else {
        return Err(format!("nothing selected: {:?}", selection.reason).into());
    };
    let output = completions
        .choice(winner)
        .await
        .ok_or("the winner is listed")?
        .message()
        .await?;
    println!(
        "after {:.2?}: choice {winner} finished first:",
        started.elapsed()
    );
    println!("  {}", output.message.content.unwrap_or_default());
    println!(
        "cancelled choices {:?}, which had received ≈ {} tokens",
        selection.cancelled, selection.cancelled_tokens
    );

    // The unneeded requests were abandoned: the server saw both connections go away.
    tokio::time::timeout(Duration::from_secs(5), server.wait_disconnects(2)).await?;
    println!(
        "the server saw {} connections closed early",
        server.disconnects()
    );
    Ok(())
}
