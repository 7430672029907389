//! Showing a completion: `--json`, the plain labelled lines, or the live view on a terminal,
//! with the combinator asked for.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use choicewise::{ChoiceEvent, Completions, FunctionCallEvent, Policy};
use futures::StreamExt;
use tokio::sync::watch;

use crate::view::{Shown, ViewArgs, picked_verdict};
use crate::{Exit, live, plain};

/// Whether the live view will be used.
pub fn live(view: &ViewArgs) -> bool {
    !view.json && !view.plain && live::available()
}

/// Shows the completion as chosen, until it ends, with the pick its flags stated (checked by
/// [`ViewArgs::policy`]).
pub async fn show(
    completions: Completions,
    pick: Option<Policy>,
    view: &ViewArgs,
    options: live::Options,
) -> Result<(), Exit> {
    let (publish, decision) = watch::channel(None);
    let selection = pick.clone().map(|policy| {
        let completions = completions.clone();
        tokio::spawn(async move {
            let selection = completions.pick(&policy).await;
            publish.send_replace(Some(selection.clone()));
            selection
        })
    });
    let decision = selection.is_some().then_some(decision);
    let shown = if view.json {
        let picked = match (&pick, selection) {
            (Some(p), Some(task)) => Some((p.clone(), task)),
            _ => None,
        };
        let progress = progress_wanted().then(|| Progress::start(&completions, options.start));
        let clear = progress.as_ref().map(|p| p.task.abort_handle());
        let json = plain::json(completions.clone(), picked, &options.sources, move || {
            if let Some(task) = clear {
                task.abort();
                clear_line();
            }
        });
        let shown = tokio::select! {
            shown = json => shown.map_err(Exit::from),
            _ = tokio::signal::ctrl_c() => {
                if let Some(progress) = &progress {
                    progress.clear();
                }
                // What was assembled, the unfinished choices cancelled (finish_reason null).
                completions.cancel().await;
                let completion = match completions.collect().await {
                    Ok(c) => c,
                    Err(incomplete) => incomplete.partial,
                };
                if let Ok(value) = plain::completion_json(&completion, &options.sources) {
                    let mut out = std::io::stdout().lock();
                    let _ = serde_json::to_writer_pretty(&mut out, &value);
                    let _ = writeln!(out);
                }
                Err(Exit { message: "interrupted".into(), code: 130 })
            }
        };
        if let Some(progress) = progress {
            progress.stop();
        }
        return shown;
    } else if live(view) {
        live::run(completions.clone(), options, decision).await
    } else {
        tokio::select! {
            shown = plain::labelled(completions.clone(), decision, &options.sources) => shown.map_err(Exit::from),
            _ = tokio::signal::ctrl_c() => Err(Exit { message: "interrupted".into(), code: 130 }),
        }
    };
    match (pick, selection) {
        (Some(pick), Some(task)) => {
            let selection = task.await.unwrap_or_default();
            println!("{}", Shown(&pick).summary(&selection));
            picked_verdict(&selection, shown)
        }
        _ => shown,
    }
}

/// Whether `--json` shows its progress: standard error is a terminal (or
/// `CHOICEWISE_PROGRESS=1` says to, for tests).
fn progress_wanted() -> bool {
    std::io::stderr().is_terminal() || std::env::var("CHOICEWISE_PROGRESS").is_ok_and(|v| v == "1")
}

/// One line on standard error while `--json` waits for the end: the choices so far, their
/// text deltas (about one token each) and the time, redrawn in place and cleared at the end.
struct Progress {
    task: tokio::task::JoinHandle<()>,
}

impl Progress {
    fn start(completions: &Completions, start: Instant) -> Self {
        let choices = Arc::new(AtomicUsize::new(0));
        let deltas = Arc::new(AtomicU64::new(0));
        let counting = {
            let (completions, choices, deltas) =
                (completions.clone(), choices.clone(), deltas.clone());
            async move {
                let mut all = completions.choices();
                while let Some(choice) = all.next().await {
                    choices.fetch_add(1, Ordering::Relaxed);
                    let deltas = deltas.clone();
                    tokio::spawn(async move {
                        let mut events = choice.events();
                        while let Some(Ok(event)) = events.next().await {
                            if matches!(
                                event,
                                ChoiceEvent::Content(_)
                                    | ChoiceEvent::Reasoning(_)
                                    | ChoiceEvent::Refusal(_)
                                    | ChoiceEvent::FunctionCall(
                                        FunctionCallEvent::Arguments { .. }
                                    )
                            ) {
                                deltas.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    });
                }
            }
        };
        let task = tokio::spawn(async move {
            tokio::spawn(counting);
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(200));
            loop {
                tick.tick().await;
                let n = choices.load(Ordering::Relaxed);
                let line = format!(
                    "⋯ {n} choice{} · ≈ {} tokens · {:.1} s",
                    if n == 1 { "" } else { "s" },
                    deltas.load(Ordering::Relaxed),
                    start.elapsed().as_secs_f64()
                );
                let mut err = std::io::stderr().lock();
                let _ = write!(err, "\r\x1b[2K{line}");
                let _ = err.flush();
            }
        });
        Progress { task }
    }

    /// Clears the line.
    fn clear(&self) {
        self.task.abort();
        clear_line();
    }

    fn stop(self) {
        self.clear();
    }
}

/// Clears the line the progress was drawn on.
fn clear_line() {
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "\r\x1b[2K");
    let _ = err.flush();
}
