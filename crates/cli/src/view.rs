//! Choosing the view: `--json`, the plain labelled lines, or the live view on a terminal.

use choicewise::Completions;
use clap::Args;

use crate::{Exit, live, plain};

/// How a completion is shown (shared by `replay` and `chat`).
#[derive(Debug, Clone, Args)]
pub struct ViewArgs {
    /// Print the assembled completion as one `chat.completion` JSON object instead (exactly
    /// `collect()`).
    #[arg(long)]
    pub json: bool,
    /// Plain labelled lines even on a terminal (the view used when stdout is not one).
    #[arg(long, conflicts_with = "json")]
    pub plain: bool,
}

impl ViewArgs {
    /// Whether the live view will be used.
    pub fn live(&self) -> bool {
        !self.json && !self.plain && live::available()
    }
}

/// Shows the completion as chosen, until it ends.
pub async fn show(
    completions: Completions,
    view: &ViewArgs,
    options: live::Options,
) -> Result<(), Exit> {
    if view.json {
        plain::json(completions).await.map_err(Exit::from)
    } else if view.live() {
        live::run(completions, options).await
    } else {
        plain::labelled(completions).await.map_err(Exit::from)
    }
}

/// How a shown completion ended: `Ok`, or one line per failure: the stream's error first,
/// then every choice that failed on its own, each naming its index and line.
pub async fn verdict(completions: &Completions) -> Result<(), String> {
    let stream = completions.outcome().await.err().map(|e| e.to_string());
    let mut lines: Vec<String> = stream.iter().cloned().collect();
    for (index, error) in completions.choice_errors().await {
        let text = error.to_string();
        if stream.as_ref() == Some(&text) {
            continue;
        }
        if text.contains(&format!("choice {index}")) {
            lines.push(text);
        } else {
            lines.push(format!("choice {index}: {text}"));
        }
    }
    match lines.is_empty() {
        true => Ok(()),
        false => Err(lines.join("\n")),
    }
}
