//! Watch each choice's tool calls start, grow and finish, then run them from the assembled
//! message. Runs offline on the bundled recorded n = 3 stream, where choice 1 makes two
//! parallel tool calls while the other choices answer in text.
//!
//! ```sh
//! cargo run --example function_calls
//! ```

use choicewise::{Completions, FunctionCallEvent, Source};
use futures::{StreamExt, TryStreamExt};

const RECORDED: &[u8] = include_bytes!("../tests/fixtures/demo.sse");

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let completions = Completions::new(Source::reader(RECORDED));
    let mut choices = completions.choices();
    let mut tasks = Vec::new();
    while let Some(choice) = choices.next().await {
        tasks.push(tokio::spawn(async move {
            let mut calls = choice.function_calls();
            while let Some(event) = calls.try_next().await? {
                match event {
                    FunctionCallEvent::Started { call, id, name, .. } => println!(
                        "choice {}: {call} started: {} {}",
                        choice.index(),
                        name.as_deref().unwrap_or("?"),
                        id.as_deref().unwrap_or("")
                    ),
                    FunctionCallEvent::Arguments { call, fragment } => {
                        println!("choice {}: {call} += {fragment:?}", choice.index())
                    }
                    FunctionCallEvent::Finished {
                        call,
                        name,
                        arguments,
                        ..
                    } => println!(
                        "choice {}: {call} finished: {}({arguments})",
                        choice.index(),
                        name.as_deref().unwrap_or("?")
                    ),
                    _ => {}
                }
            }
            Ok::<_, choicewise::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }

    // The assembled message has every call whole, ready to execute.
    let completion = completions.collect().await?;
    for choice in &completion.choices {
        for call in &choice.message.tool_calls {
            let args = call.function.arguments_json()?;
            println!(
                "choice {} would run {}({args}) as {}",
                choice.index, call.function.name, call.id
            );
        }
    }
    Ok(())
}
