//! The plain views: `--json` (the `collect()` object) and labelled lines, for pipes and files.

use std::collections::HashMap;
use std::io::Write;

use choicewise::{
    CallRef, ChoiceEvent, Completions, FunctionCallEvent, PartialArguments, cancel::CancelReason,
};
use futures::StreamExt;
use tokio::sync::mpsc;

/// `--json`: exactly the `collect()` object (with a combinator, its `"selected"` and `"vote"`
/// fields too); on error, what was assembled, then the error.
pub async fn json(
    completions: Completions,
    picked: Option<(
        choicewise::Policy,
        tokio::task::JoinHandle<choicewise::Selection>,
    )>,
    sources: &crate::view::Sources,
    before_printing: impl FnOnce(),
) -> Result<(), String> {
    let completion = match completions.collect().await {
        Ok(c) => c,
        Err(incomplete) => incomplete.partial,
    };
    let mut value = completion_json(&completion, sources)?;
    let mut selection = None;
    if let Some((pick, task)) = picked {
        let picked = task.await.unwrap_or_default();
        if let Some(object) = value.as_object_mut() {
            for (key, field) in crate::view::Shown(&pick).json_fields(&picked) {
                object.insert(key.to_string(), field);
            }
        }
        selection = Some(picked);
    }
    before_printing();
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

/// The `collect()` object as JSON, each fan-out choice's `source` also naming its upstream's
/// `api` and `host`.
pub fn completion_json(
    completion: &choicewise::ChatCompletion,
    sources: &crate::view::Sources,
) -> Result<serde_json::Value, String> {
    let mut value = serde_json::to_value(completion).map_err(|e| e.to_string())?;
    if let Some(choices) = value["choices"].as_array_mut() {
        for choice in choices {
            let Some(source) = choice.get_mut("source").and_then(|s| s.as_object_mut()) else {
                continue;
            };
            let Some(label) = source["upstream"]
                .as_u64()
                .and_then(|k| sources.upstream(k as usize))
            else {
                continue;
            };
            source.insert("api".into(), serde_json::json!(label.api));
            source.insert("host".into(), serde_json::json!(label.host));
        }
    }
    Ok(value)
}

/// The default view: each choice's text and function calls as they arrive, one labelled line
/// at a time. One task per choice formats its own lines; one printer writes them. With a
/// combinator (`decision`), a choice it cancelled ends with `⊘ cancelled` (`⊘ low confidence`
/// when `--confidence` stopped it), and the usage line
/// waits for its decision to say what the cancelled choices had used.
pub async fn labelled(
    completions: Completions,
    decision: Option<crate::view::Decision>,
    sources: &crate::view::Sources,
) -> Result<(), String> {
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
        let label = match sources.of_choice(choice.index()) {
            Some(source) => format!("[choice {} {source}]", choice.index()),
            None => format!("[choice {}]", choice.index()),
        };
        tasks.push(tokio::spawn(async move {
            let mut line = String::new();
            // Each call's arguments, parsed as they grow, shown whenever their value changes.
            let mut growing: HashMap<CallRef, (PartialArguments, u64)> = HashMap::new();
            let mut events = choice.events();
            while let Some(event) = events.next().await {
                let event = match event {
                    Ok(e) => e,
                    Err(_) => {
                        // The error itself is said once, on stderr, with the run's others
                        // (`view::verdict`): here only where the choice's lines end.
                        flush(&tx, &label, &mut line);
                        let _ = tx.send(format!("{label} ✘ failed"));
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
                    ChoiceEvent::FunctionCall(FunctionCallEvent::Started {
                        call,
                        id,
                        name,
                        ..
                    }) => {
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
                    ChoiceEvent::Cancelled(reason) => {
                        flush(&tx, &label, &mut line);
                        // Stopped by --confidence, not cancelled because the vote was decided.
                        let why = match reason {
                            CancelReason::LowConfidence => "low confidence",
                            _ => "cancelled",
                        };
                        let _ = tx.send(format!("{label} ⊘ {why}"));
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
    let selection = crate::view::decided(decision).await;
    if let Some(line) = usage_line(c, selection.as_ref()) {
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
/// counted; then, for the sum of a fan-out's upstreams, its reported and estimated parts:
/// `; 3 upstreams: 2 reported (total 320), 1 estimated (total ≈ 100)` (`usage (reported +
/// estimated with …)` then) or `; 2 upstreams, all reported`, an upstream that failed before
/// answering counted apart (`; 3 upstreams: 2 reported (total 320), 1 never answered`); with
/// several choices, each one's
/// completion tokens: `; per choice 15, 24, 24, 23 (reported)` or `; per choice ≈ 70, 68, 69
/// (estimated)`; and when a combinator cancelled choices, what they had received (estimated
/// with tiktoken, [`Selection::cancelled_tokens`](choicewise::Selection::cancelled_tokens)):
/// `; cancelled choices had ≈ 131 tokens`.
pub fn usage_line(
    c: &choicewise::ChatCompletion,
    selection: Option<&choicewise::Selection>,
) -> Option<String> {
    use choicewise::UsageSource::{Estimated, Reported};
    if c.choices.is_empty() {
        // Nothing was seen: a usage line of zeros would only mislead.
        return None;
    }
    let u = c.usage.as_ref()?;
    // An upstream whose request failed before its stream began used no tokens: the library
    // counts it as a reported zero (no prompt, no completion, no provider field), which no
    // provider that answered reports (a prompt has tokens).
    let never_answered = |p: &&choicewise::Usage| {
        p.source == Reported && p.total_tokens == 0 && p.prompt_tokens == 0 && p.details.is_empty()
    };
    let silent = u.upstreams.iter().filter(never_answered).count();
    let reported_parts: Vec<&choicewise::Usage> = u
        .upstreams
        .iter()
        .filter(|p| p.source == Reported && !never_answered(p))
        .collect();
    let estimated_parts: Vec<&choicewise::Usage> = u
        .upstreams
        .iter()
        .filter(|p| p.source == Estimated)
        .collect();
    let how = match (&u.source, &u.estimate) {
        (Reported, _) => "reported".to_string(),
        (_, Some(e)) => format!(
            "{}estimated with {}{}{}",
            if reported_parts.is_empty() {
                ""
            } else {
                "reported + "
            },
            e.encoding,
            if e.model_known { "" } else { ", model unknown" },
            if e.prompt_counted {
                ""
            } else {
                ", prompt not counted: pass --request"
            },
        ),
        (_, None) if !reported_parts.is_empty() => "reported + estimated".to_string(),
        (_, None) => "estimated".to_string(),
    };
    if !u.upstreams.is_empty() && silent == u.upstreams.len() {
        // Every upstream failed before answering: no figure was reported.
        let n = u.upstreams.len();
        return Some(format!(
            "usage: none; {n} upstream{}, none answered",
            if n == 1 { "" } else { "s" }
        ));
    }
    let mut line = format!(
        "usage ({how}): prompt {}, completion {}, total {}",
        u.prompt_tokens, u.completion_tokens, u.total_tokens
    );
    let n = u.upstreams.len();
    let plural = |k: usize| if k == 1 { "" } else { "s" };
    let total =
        |parts: &[&choicewise::Usage]| -> u64 { parts.iter().map(|p| p.total_tokens).sum() };
    match (reported_parts.len(), estimated_parts.len(), silent) {
        (0, 0, 0) => {}
        (_, 0, 0) => line.push_str(&format!("; {n} upstream{}, all reported", plural(n))),
        (0, _, 0) => line.push_str(&format!("; {n} upstream{}, all estimated", plural(n))),
        (r, e, s) => {
            let mut parts = Vec::new();
            if r > 0 {
                parts.push(format!("{r} reported (total {})", total(&reported_parts)));
            }
            if e > 0 {
                parts.push(format!(
                    "{e} estimated (total ≈ {})",
                    total(&estimated_parts)
                ));
            }
            if s > 0 {
                parts.push(format!("{s} never answered"));
            }
            line.push_str(&format!("; {n} upstreams: {}", parts.join(", ")));
        }
    }
    let per_choice: Vec<choicewise::ChoiceUsage> =
        c.choices.iter().filter_map(|choice| choice.usage).collect();
    if c.choices.len() > 1 && per_choice.len() == c.choices.len() {
        let reported = per_choice.iter().all(|p| p.source == Reported);
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
    if let Some(s) = selection.filter(|s| !s.cancelled.is_empty()) {
        line.push_str(&format!(
            "; cancelled choices had ≈ {} tokens",
            s.cancelled_tokens
        ));
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use choicewise::{ChatCompletion, Selection, Usage};

    fn usage(json: serde_json::Value) -> Usage {
        serde_json::from_value(json).unwrap()
    }

    fn estimate() -> serde_json::Value {
        serde_json::json!({
            "encoding": "o200k_base", "model": "gpt-4o", "model_known": true,
            "prompt_counted": true, "choices": {"2": 100}
        })
    }

    fn completion(usage: Usage) -> ChatCompletion {
        let choice = choicewise::ChoiceOutput::new(0, choicewise::Message::assistant("hi"));
        let mut completion = ChatCompletion::new(vec![choice]);
        completion.usage = Some(usage);
        completion
    }

    #[test]
    fn a_single_streams_usage_line_is_as_before() {
        let c = completion(usage(serde_json::json!({
            "prompt_tokens": 148, "completion_tokens": 207, "total_tokens": 355,
            "source": "reported"
        })));
        assert_eq!(
            usage_line(&c, None).unwrap(),
            "usage (reported): prompt 148, completion 207, total 355"
        );
        // A combinator that cancelled nothing adds nothing.
        let mut nothing_cancelled = Selection::default();
        nothing_cancelled.selected = vec![0];
        assert_eq!(
            usage_line(&c, Some(&nothing_cancelled)),
            usage_line(&c, None)
        );
    }

    #[test]
    fn a_sum_of_upstreams_says_its_reported_and_estimated_parts() {
        let part = |prompt: u64, completion: u64, reported: bool| {
            let mut u = serde_json::json!({
                "prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "source": if reported { "reported" } else { "estimated" },
            });
            if !reported {
                u["estimate"] = estimate();
            }
            u
        };
        let mixed = completion(usage(serde_json::json!({
            "prompt_tokens": 120, "completion_tokens": 300, "total_tokens": 420,
            "source": "estimated", "estimate": estimate(),
            "upstreams": [part(40, 100, true), part(40, 100, true), part(40, 100, false)],
        })));
        assert_eq!(
            usage_line(&mixed, None).unwrap(),
            "usage (reported + estimated with o200k_base): prompt 120, completion 300, \
             total 420; 3 upstreams: 2 reported (total 280), 1 estimated (total ≈ 140)"
        );
        let reported = completion(usage(serde_json::json!({
            "prompt_tokens": 80, "completion_tokens": 200, "total_tokens": 280,
            "source": "reported",
            "upstreams": [part(40, 100, true), part(40, 100, true)],
        })));
        assert_eq!(
            usage_line(&reported, None).unwrap(),
            "usage (reported): prompt 80, completion 200, total 280; 2 upstreams, all reported"
        );
        let estimated = completion(usage(serde_json::json!({
            "prompt_tokens": 40, "completion_tokens": 100, "total_tokens": 140,
            "source": "estimated", "estimate": estimate(),
            "upstreams": [part(40, 100, false)],
        })));
        assert_eq!(
            usage_line(&estimated, None).unwrap(),
            "usage (estimated with o200k_base): prompt 40, completion 100, total 140; \
             1 upstream, all estimated"
        );
        let none = completion(usage(serde_json::json!({
            "prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0,
            "source": "reported", "upstreams": [part(0, 0, true), part(0, 0, true)],
        })));
        assert_eq!(
            usage_line(&none, None).unwrap(),
            "usage: none; 2 upstreams, none answered"
        );
        // An upstream refused before its stream (a 500) is no reported part.
        let refused = completion(usage(serde_json::json!({
            "prompt_tokens": 80, "completion_tokens": 200, "total_tokens": 280,
            "source": "reported",
            "upstreams": [part(40, 100, true), part(0, 0, true), part(40, 100, true)],
        })));
        assert_eq!(
            usage_line(&refused, None).unwrap(),
            "usage (reported): prompt 80, completion 200, total 280; \
             3 upstreams: 2 reported (total 280), 1 never answered"
        );
        let mixed = completion(usage(serde_json::json!({
            "prompt_tokens": 80, "completion_tokens": 200, "total_tokens": 280,
            "source": "estimated", "estimate": estimate(),
            "upstreams": [part(40, 100, true), part(0, 0, true), part(40, 100, false)],
        })));
        assert!(
            usage_line(&mixed, None).unwrap().ends_with(
                "3 upstreams: 1 reported (total 140), 1 estimated (total ≈ 140), 1 never answered"
            ),
            "{}",
            usage_line(&mixed, None).unwrap()
        );
    }

    #[test]
    fn the_usage_line_ends_with_what_the_cancelled_choices_had_used() {
        let c = completion(usage(serde_json::json!({
            "prompt_tokens": 0, "completion_tokens": 150, "total_tokens": 150,
            "source": "estimated", "estimate": estimate(),
        })));
        let mut selection = Selection::default();
        selection.selected = vec![1];
        selection.cancelled = vec![0, 2];
        selection.cancelled_tokens = 131;
        assert_eq!(
            usage_line(&c, Some(&selection)).unwrap(),
            "usage (estimated with o200k_base): prompt 0, completion 150, total 150; \
             cancelled choices had ≈ 131 tokens"
        );
    }
}
