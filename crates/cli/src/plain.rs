//! The plain views: `--json` (the `collect()` object) and labelled lines, for pipes and files.

use std::collections::HashMap;
use std::io::Write;

use choicewise::{CallRef, ChoiceEvent, Completions, FunctionCallEvent, PartialArguments};
use futures::StreamExt;
use tokio::sync::mpsc;

/// `--json`: exactly the `collect()` object (with a combinator, its `"selected"` and `"vote"`
/// fields too); on error, what was assembled, then the error.
pub async fn json(
    completions: Completions,
    picked: Option<(
        crate::view::Pick,
        tokio::task::JoinHandle<choicewise::Selection>,
    )>,
) -> Result<(), String> {
    let completion = match completions.collect().await {
        Ok(c) => c,
        Err(incomplete) => incomplete.partial,
    };
    let mut value = serde_json::to_value(&completion).map_err(|e| e.to_string())?;
    let mut selection = None;
    if let Some((pick, task)) = picked {
        let picked = task.await.unwrap_or_default();
        if let Some(object) = value.as_object_mut() {
            for (key, field) in pick.json_fields(&picked) {
                object.insert(key.to_string(), field);
            }
        }
        selection = Some(picked);
    }
    let mut out = std::io::stdout().lock();
    let written = serde_json::to_writer_pretty(&mut out, &value)
        .map_err(std::io::Error::from)
        .and_then(|()| writeln!(out));
    match written {
        // The reader went away (`| head`): not an error of ours, as for any Unix filter.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        other => other.map_err(|e| e.to_string())?,
    }
    drop(out);
    for w in completions.warnings() {
        eprintln!("warning: {w}");
    }
    let verdict = crate::view::verdict(&completions).await;
    match selection {
        Some(selection) => {
            crate::view::picked_verdict(&selection, verdict.map_err(crate::Exit::from))
                .map_err(|e| e.message)
        }
        None => verdict,
    }
}

/// The default view: each choice's text and function calls as they arrive, one labelled line
/// at a time. One task per choice formats its own lines; one printer writes them.
pub async fn labelled(completions: Completions) -> Result<(), String> {
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
    if let Some(line) = usage_line(c) {
        let _ = tx.send(line);
    }
    drop(tx);
    let _ = printer.await;
    for w in completions.warnings() {
        eprintln!("warning: {w}");
    }
    crate::view::verdict(&completions).await
}

fn flush(tx: &mpsc::UnboundedSender<String>, label: &str, line: &mut String) {
    if !line.is_empty() {
        let _ = tx.send(format!("{label} {line}"));
        line.clear();
    }
}

/// `usage (reported): prompt 148, completion 207, total 355`, or for an estimate, how it was
/// counted; with several choices, each one's completion tokens after it:
/// `; per choice 15, 24, 24, 23 (reported)` or `; per choice ≈ 70, 68, 69 (estimated)`.
pub fn usage_line(c: &choicewise::ChatCompletion) -> Option<String> {
    let u = c.usage.as_ref()?;
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
    let mut line = format!(
        "usage ({how}): prompt {}, completion {}, total {}",
        u.prompt_tokens, u.completion_tokens, u.total_tokens
    );
    let per_choice: Vec<choicewise::ChoiceUsage> =
        c.choices.iter().filter_map(|choice| choice.usage).collect();
    if c.choices.len() > 1 && per_choice.len() == c.choices.len() {
        let reported = per_choice
            .iter()
            .all(|p| p.source == choicewise::UsageSource::Reported);
        let counts: Vec<String> = per_choice
            .iter()
            .map(|p| p.completion_tokens.to_string())
            .collect();
        line.push_str(&format!(
            "; per choice {}{} ({})",
            if reported { "" } else { "≈ " },
            counts.join(", "),
            if reported { "reported" } else { "estimated" }
        ));
    }
    Some(line)
}
