//! `choicewise replay`: a recorded stream, choice by choice.

use std::io::Write;
use std::path::PathBuf;

use std::collections::HashMap;

use choicewise::{CallRef, ChoiceEvent, Completions, FunctionCallEvent, PartialArguments};
use clap::Args;
use futures::StreamExt;
use tokio::sync::mpsc;

/// The stream replayed when no file is given: a recorded n = 3 completion whose choices
/// first appear out of order, one of them making two parallel tool calls.
const DEMO: &[u8] = include_bytes!("../assets/demo.sse");

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The SSE file to replay, or `-` for standard input. Without it, a bundled demo stream.
    file: Option<PathBuf>,
    /// Print the assembled completion as one `chat.completion` JSON object instead.
    #[arg(long)]
    json: bool,
    /// The request body (JSON) the stream answers, to count prompt tokens when the stream
    /// carries no usage.
    #[arg(long, value_name = "FILE")]
    request: Option<PathBuf>,
}

pub async fn run(args: ReplayArgs) -> Result<(), String> {
    let mut builder = Completions::builder();
    if let Some(path) = &args.request {
        let text = tokio::fs::read(path)
            .await
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let request = serde_json::from_slice(&text)
            .map_err(|e| format!("{}: not a JSON request body: {e}", path.display()))?;
        builder = builder.request(request);
    }
    let completions = match args.file.as_deref() {
        None => builder.from_reader(DEMO),
        Some(p) if p.as_os_str() == "-" => builder.from_reader(tokio::io::stdin()),
        Some(p) => {
            let file = tokio::fs::File::open(p)
                .await
                .map_err(|e| format!("cannot open {}: {e}", p.display()))?;
            builder.from_reader(file)
        }
    };
    if args.json {
        json(completions).await
    } else {
        labelled(completions).await
    }
}

/// `--json`: exactly the `collect()` object; on error, what was assembled, then the error.
async fn json(completions: Completions) -> Result<(), String> {
    let (completion, error) = match completions.collect().await {
        Ok(c) => (c, None),
        Err(incomplete) => (incomplete.partial, Some(incomplete.error)),
    };
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, &completion).map_err(|e| e.to_string())?;
    writeln!(out).map_err(|e| e.to_string())?;
    for w in completions.warnings() {
        eprintln!("warning: {w}");
    }
    match error {
        None => Ok(()),
        Some(e) => Err(e.to_string()),
    }
}

/// The default view: each choice's text and function calls as they arrive, one labelled line
/// at a time. One task per choice formats its own lines; one printer writes them.
async fn labelled(completions: Completions) -> Result<(), String> {
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let printer = tokio::spawn(async move {
        while let Some(line) = rx.recv().await {
            let mut out = std::io::stdout().lock();
            if writeln!(out, "{line}").is_err() {
                break;
            }
        }
    });
    let mut tasks = Vec::new();
    let mut choices = completions.choices();
    while let Some(choice) = choices.next().await {
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            let label = format!("[choice {}]", choice.index());
            let mut line = String::new();
            // Each call's arguments, parsed as they grow, shown whenever their value changes.
            let mut growing: HashMap<CallRef, (PartialArguments, u64)> = HashMap::new();
            let mut events = choice.events();
            while let Some(event) = events.next().await {
                let event = match event {
                    Ok(e) => e,
                    Err(e) => {
                        flush(&tx, &label, &mut line);
                        let _ = tx.send(format!("{label} ✘ {e}"));
                        break;
                    }
                };
                match event {
                    ChoiceEvent::Content(t) | ChoiceEvent::Refusal(t) => {
                        for (i, part) in t.split('\n').enumerate() {
                            if i > 0 {
                                flush(&tx, &label, &mut line);
                            }
                            line.push_str(part);
                        }
                    }
                    ChoiceEvent::FunctionCall(FunctionCallEvent::Started { call, id, name }) => {
                        flush(&tx, &label, &mut line);
                        let _ = tx.send(format!(
                            "{label} → {call}: {}{}",
                            name.as_deref().unwrap_or("?"),
                            id.map(|id| format!(" ({id})")).unwrap_or_default()
                        ));
                    }
                    ChoiceEvent::FunctionCall(FunctionCallEvent::Arguments { call, fragment }) => {
                        let (args, shown) = growing.entry(call).or_default();
                        args.push(&fragment);
                        if let Some(value) = args.value().filter(|_| args.revision() != *shown) {
                            *shown = args.revision();
                            let _ = tx.send(format!("{label} … {call} {value}"));
                        }
                    }
                    ChoiceEvent::FunctionCall(FunctionCallEvent::Finished {
                        call,
                        arguments,
                        value,
                        repaired,
                        ..
                    }) => {
                        let note = match (&value, repaired) {
                            (Err(e), _) => format!(" ({e})"),
                            (Ok(_), true) => " (repaired: raw control characters escaped)".into(),
                            (Ok(_), false) => String::new(),
                        };
                        let _ = tx.send(format!("{label} ← {call} arguments: {arguments}{note}"));
                    }
                    ChoiceEvent::Finished(reason) => {
                        flush(&tx, &label, &mut line);
                        let _ = tx.send(format!("{label} ✔ finished: {reason}"));
                    }
                    _ => {}
                }
            }
            flush(&tx, &label, &mut line);
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    let outcome = completions.collect().await;
    let (Ok(c) | Err(choicewise::Incomplete { partial: c, .. })) = &outcome;
    if let Some(usage) = &c.usage {
        let _ = tx.send(usage_line(usage));
    }
    drop(tx);
    let _ = printer.await;
    for w in completions.warnings() {
        eprintln!("warning: {w}");
    }
    outcome.map(|_| ()).map_err(|e| e.error.to_string())
}

fn flush(tx: &mpsc::UnboundedSender<String>, label: &str, line: &mut String) {
    if !line.is_empty() {
        let _ = tx.send(format!("{label} {line}"));
        line.clear();
    }
}

/// `usage (reported): prompt 148, completion 207, total 355`, or for an estimate, how it was
/// counted.
fn usage_line(u: &choicewise::Usage) -> String {
    let how = match (&u.source, &u.estimate) {
        (choicewise::UsageSource::Reported, _) => "reported".to_string(),
        (_, Some(e)) => format!(
            "estimated with {}{}{}",
            e.encoding,
            if e.model_known { "" } else { ", model unknown" },
            if e.prompt_counted {
                ""
            } else {
                ", prompt not counted: pass --request"
            },
        ),
        (_, None) => "estimated".to_string(),
    };
    format!(
        "usage ({how}): prompt {}, completion {}, total {}",
        u.prompt_tokens, u.completion_tokens, u.total_tokens
    )
}
