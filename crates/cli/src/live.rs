//! The live view, when standard output is a terminal: one column per choice, in index order,
//! redrawn as the choices stream (ratatui over crossterm, inline below the prompt).
//!
//! Each column is headed with its choice index, an estimate of its tokens so far, its state
//! and its elapsed time. The token figure is a tiktoken count (`choicewise_usage`) of the
//! choice as assembled so far, taken on a blocking thread at most every 300 ms while the choice
//! streams, and replaced by [`Choice::completion_tokens`] when it ends: the same per-choice
//! figure as the usage estimate. A usage line ends the view.
//!
//! With a combinator (`--first`, `--vote`), a choice it cancelled reads `cancelled` where a
//! finish reason would show (`low confidence` when `--confidence` stopped it), and once it has
//! decided, each selected choice's column is marked
//! `★ selected` (with a double border); the usage line then says what the cancelled choices
//! had used.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use choicewise::{
    CallRef, Choice, ChoiceEvent, ChoiceOutput, Completions, FunctionCallEvent, Incomplete,
    PartialArguments, Selection, cancel::CancelReason,
};
use choicewise_usage::EncodingName;
use crossterm::event::{Event, EventStream, KeyCode, KeyEventKind, KeyModifiers};
use futures::StreamExt;
use ratatui::style::{Color, Style};
use ratatui::text::Line;
use ratatui::{TerminalOptions, Viewport};

use crate::Exit;
use crate::view::{Decision, Sources};

/// How often the screen is redrawn (the elapsed times move even when nothing arrives).
const FRAME: Duration = Duration::from_millis(50);
/// How often a streaming choice's tokens are counted again.
const COUNT_EVERY: Duration = Duration::from_millis(300);
/// The narrowest a column gets before columns wrap onto another row.
const MIN_COLUMN_WIDTH: u16 = 24;
/// The colour of a cancelled choice: neither finished (green) nor failed (red).
const CANCELLED: Color = Color::Magenta;
/// The colour of a choice `--confidence` stopped: cancelled, for a reason of its own.
const LOW_CONFIDENCE: Color = Color::LightMagenta;
/// The mark on a selected choice's column.
const SELECTED: &str = "★ selected";

/// What the view shows besides the choices.
#[derive(Debug, Clone)]
pub struct Options {
    /// When the request was sent (or the replay started): elapsed times count from here.
    pub start: Instant,
    /// What is being shown, for the top line (`replay demo`, `chat gpt-4o-mini`).
    pub title: String,
    /// The model, if known before the stream names it, to pick the encoding of live counts.
    pub model: Option<String>,
    /// Where each choice comes from, in a fan-out.
    pub sources: Sources,
}

/// Whether the live view can be used: standard output is a terminal.
pub fn available() -> bool {
    std::io::stdout().is_terminal()
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum TextKind {
    Content,
    Reasoning,
    Refusal,
}

#[derive(Debug)]
struct CallView {
    call: CallRef,
    name: Option<String>,
    id: Option<String>,
    arguments: PartialArguments,
    revision: Option<u64>,
    /// The arguments' value so far, pretty-printed.
    shown: String,
    /// How the call ended: a note and whether the arguments are valid.
    end: Option<(String, bool)>,
}

#[derive(Debug)]
enum Piece {
    Text(TextKind, String),
    Call(Box<CallView>),
    Note(String),
}

#[derive(Debug, Clone, PartialEq)]
enum State {
    Streaming,
    Finished(String),
    Failed(String),
    /// Cancelled by the combinator before it finished.
    Cancelled,
    /// Stopped by `--confidence`: a group of its tokens fell below the threshold.
    LowConfidence,
}

#[derive(Debug)]
struct Column {
    choice: Choice,
    pieces: Vec<Piece>,
    state: State,
    ended_at: Option<Duration>,
    tokens: u64,
    /// The token figure is the choice's final one.
    tokens_final: bool,
    /// Something arrived since the tokens were last counted.
    changed: bool,
}

impl Column {
    fn new(choice: Choice) -> Self {
        Column {
            choice,
            pieces: Vec::new(),
            state: State::Streaming,
            ended_at: None,
            tokens: 0,
            tokens_final: false,
            changed: false,
        }
    }

    fn text(&mut self, kind: TextKind, text: &str) {
        if let Some(Piece::Text(k, t)) = self.pieces.last_mut()
            && *k == kind
        {
            t.push_str(text);
            return;
        }
        self.pieces.push(Piece::Text(kind, text.to_string()));
    }

    fn call(&mut self, call: CallRef) -> &mut CallView {
        let at = self
            .pieces
            .iter()
            .rposition(|p| matches!(p, Piece::Call(c) if c.call == call));
        let at = match at {
            Some(at) => at,
            None => {
                self.pieces.push(Piece::Call(Box::new(CallView {
                    call,
                    name: None,
                    id: None,
                    arguments: PartialArguments::new(),
                    revision: None,
                    shown: String::new(),
                    end: None,
                })));
                self.pieces.len() - 1
            }
        };
        match &mut self.pieces[at] {
            Piece::Call(c) => c,
            _ => unreachable!("a call's position holds a call"),
        }
    }

    fn apply(&mut self, event: ChoiceEvent, elapsed: Duration) {
        self.changed = true;
        match event {
            ChoiceEvent::Content(t) => self.text(TextKind::Content, &t),
            ChoiceEvent::Reasoning(t) => self.text(TextKind::Reasoning, &t),
            ChoiceEvent::Refusal(t) => self.text(TextKind::Refusal, &t),
            ChoiceEvent::FunctionCall(FunctionCallEvent::Started { call, id, name, .. }) => {
                let view = self.call(call);
                view.name = name.map(|n| n.to_string());
                view.id = id.map(|i| i.to_string());
            }
            ChoiceEvent::FunctionCall(FunctionCallEvent::Arguments { call, fragment }) => {
                let view = self.call(call);
                view.arguments.push(&fragment);
                let revision = view.arguments.revision();
                if view.revision != Some(revision)
                    && let Some(value) = view.arguments.value()
                {
                    view.revision = Some(revision);
                    view.shown = serde_json::to_string_pretty(value).unwrap_or_default();
                }
            }
            ChoiceEvent::FunctionCall(FunctionCallEvent::Finished {
                call,
                value,
                repaired,
                ..
            }) => {
                let view = self.call(call);
                view.end = Some(match (value, repaired) {
                    (Ok(v), repaired) => {
                        view.shown =
                            serde_json::to_string_pretty(&v.to_value()).unwrap_or_default();
                        let note = if repaired {
                            "✔ arguments complete (raw control characters escaped)"
                        } else {
                            "✔ arguments complete"
                        };
                        (note.to_string(), true)
                    }
                    (Err(e), _) => (format!("✘ {e}"), false),
                });
            }
            ChoiceEvent::Warning(w) => self.pieces.push(Piece::Note(format!("⚠ {}", w.kind))),
            ChoiceEvent::Finished(reason) => {
                self.state = State::Finished(reason.to_string());
                self.ended_at = Some(elapsed);
            }
            ChoiceEvent::Cancelled(reason) => {
                self.state = match reason {
                    CancelReason::LowConfidence => State::LowConfidence,
                    _ => State::Cancelled,
                };
                self.ended_at = Some(elapsed);
            }
            _ => {}
        }
    }

    /// The column's body, wrapped to `width`.
    fn lines(&self, width: usize) -> Vec<Line<'static>> {
        let mut out = Vec::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(kind, text) => {
                    let style = match kind {
                        TextKind::Content => Style::new(),
                        TextKind::Reasoning => Style::new().fg(Color::DarkGray).italic(),
                        TextKind::Refusal => Style::new().fg(Color::Red),
                    };
                    for line in wrap(text, width) {
                        out.push(Line::styled(line, style));
                    }
                }
                Piece::Call(call) => {
                    if !out.is_empty() {
                        out.push(Line::default());
                    }
                    let head = format!(
                        "→ {} {}{}",
                        call.call,
                        call.name.as_deref().unwrap_or("?"),
                        call.id
                            .as_deref()
                            .map(|id| format!(" ({id})"))
                            .unwrap_or_default()
                    );
                    for line in wrap(&head, width) {
                        out.push(Line::styled(line, Style::new().fg(Color::Cyan).bold()));
                    }
                    for line in wrap(&call.shown, width) {
                        out.push(Line::styled(line, Style::new().fg(Color::Blue)));
                    }
                    if let Some((note, ok)) = &call.end {
                        let color = if *ok { Color::Green } else { Color::Red };
                        for line in wrap(note, width) {
                            out.push(Line::styled(line, Style::new().fg(color)));
                        }
                    }
                }
                Piece::Note(note) => {
                    for line in wrap(note, width) {
                        out.push(Line::styled(line, Style::new().fg(Color::Yellow)));
                    }
                }
            }
        }
        match &self.state {
            State::Failed(e) => {
                for line in wrap(&format!("✘ {e}"), width) {
                    out.push(Line::styled(line, Style::new().fg(Color::Red).bold()));
                }
            }
            State::Cancelled => {
                out.push(Line::styled(
                    "⊘ cancelled",
                    Style::new().fg(CANCELLED).bold(),
                ));
            }
            State::LowConfidence => {
                out.push(Line::styled(
                    "⊘ low confidence",
                    Style::new().fg(LOW_CONFIDENCE).bold(),
                ));
            }
            State::Streaming | State::Finished(_) => {}
        }
        out
    }
}

#[derive(Debug, Default)]
struct Model {
    columns: Vec<Column>,
    /// The usage line, once the stream has ended.
    usage: Option<String>,
    /// The stream's end: `Ok`, or its error.
    end: Option<Result<(), String>>,
    ended_at: Option<Duration>,
    /// The combinator's decision, once made (never without a combinator).
    selection: Option<Selection>,
}

impl Model {
    /// Whether the combinator selected this choice.
    fn selected(&self, index: u32) -> bool {
        self.selection
            .as_ref()
            .is_some_and(|s| s.selected.contains(&index))
    }
}

type Shared = Arc<Mutex<Model>>;

fn lock(model: &Shared) -> MutexGuard<'_, Model> {
    model
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Shows the completion live until it ends or Ctrl-C; the terminal is restored either way.
/// With a combinator, `decision` brings its selection into the view as soon as it is made.
pub async fn run(
    completions: Completions,
    options: Options,
    decision: Option<Decision>,
) -> Result<(), Exit> {
    let (_, rows) = crossterm::terminal::size().unwrap_or((80, 24));
    let height = rows.saturating_sub(1).max(8);
    let mut terminal = match ratatui::try_init_with_options(TerminalOptions {
        viewport: Viewport::Inline(height),
    }) {
        Ok(t) => t,
        Err(e) => {
            ratatui::restore();
            eprintln!("choicewise: no live view ({e}); plain lines instead");
            return crate::plain::labelled(completions, decision, &options.sources)
                .await
                .map_err(Exit::from);
        }
    };
    let restore = Restore;

    let model: Shared = Arc::default();
    let encoding = choicewise_usage::encoding_for_model(options.model.as_deref().unwrap_or(""));
    let mut work = tokio::spawn(drive(
        completions.clone(),
        decision,
        model.clone(),
        options.start,
        encoding.name,
    ));
    let mut keys = Some(EventStream::new());
    let mut frames = tokio::time::interval(FRAME);
    frames.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let interrupt = tokio::signal::ctrl_c();
    tokio::pin!(interrupt);
    let mut interrupted = false;
    loop {
        tokio::select! {
            _ = frames.tick() => {}
            _ = &mut work => break,
            _ = &mut interrupt => {
                interrupted = true;
                break;
            }
            key = async { keys.as_mut()?.next().await }, if keys.is_some() => match key {
                Some(Ok(Event::Key(k)))
                    if k.kind == KeyEventKind::Press
                        && k.modifiers.contains(KeyModifiers::CONTROL)
                        && matches!(k.code, KeyCode::Char('c') | KeyCode::Char('d')) =>
                {
                    interrupted = true;
                    break;
                }
                Some(Ok(_)) => {}
                // No terminal to read keys from: Ctrl-C still arrives as a signal.
                Some(Err(_)) | None => keys = None,
            },
        }
        let m = lock(&model);
        let _ = terminal.draw(|frame| {
            render(frame, &m, &options, interrupted);
        });
    }
    if interrupted {
        work.abort();
    }
    drop(keys);
    let mut used = 0;
    let mut top = 0;
    {
        let m = lock(&model);
        let _ = terminal.draw(|frame| {
            top = frame.area().y;
            used = render(frame, &m, &options, interrupted);
        });
    }
    // Leave the last frame on the screen and the cursor on the line below it.
    let _ = terminal.set_cursor_position((0, (top + used).saturating_sub(1)));
    let _ = terminal.show_cursor();
    drop(restore);
    println!();
    for w in completions.warnings() {
        eprintln!("warning: {w}");
    }
    if interrupted {
        // The view's last frame already says "interrupted": no second message.
        return Err(Exit {
            message: String::new(),
            code: 130,
        });
    }
    let end = lock(&model).end.clone();
    end.unwrap_or_else(|| Err("the view ended early".into()))
        .map_err(Exit::from)
}

/// Restores the terminal however the view ends (ratatui's panic hook covers panics).
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// Follows every choice into the model, counts tokens, records the combinator's decision as
/// soon as it is made, and the end and the usage.
async fn drive(
    completions: Completions,
    decision: Option<Decision>,
    model: Shared,
    start: Instant,
    encoding: EncodingName,
) {
    let counter = tokio::spawn(count_tokens(model.clone(), encoding));
    let marker = {
        let model = model.clone();
        tokio::spawn(async move {
            let selection = crate::view::decided(decision).await;
            lock(&model).selection = selection;
        })
    };
    let mut tasks = Vec::new();
    let mut choices = completions.choices();
    while let Some(choice) = choices.next().await {
        let slot = {
            let mut m = lock(&model);
            m.columns.push(Column::new(choice.clone()));
            m.columns.len() - 1
        };
        tasks.push(tokio::spawn(follow(choice, slot, model.clone(), start)));
    }
    for task in tasks {
        let _ = task.await;
    }
    let outcome = completions.collect().await;
    let ended_at = start.elapsed();
    counter.abort();
    // The usage line says what the cancelled choices had used: the decision first.
    let _ = marker.await;
    let (Ok(c) | Err(Incomplete { partial: c, .. })) = &outcome;
    {
        let mut m = lock(&model);
        m.usage = crate::plain::usage_line(c, m.selection.as_ref());
        m.ended_at = Some(ended_at);
    }
    let verdict = crate::view::verdict(&completions).await;
    lock(&model).end = Some(verdict);
}

/// One choice's events into its column; at its end, its final token count.
async fn follow(choice: Choice, slot: usize, model: Shared, start: Instant) {
    let mut events = choice.events();
    while let Some(event) = events.next().await {
        let mut m = lock(&model);
        let column = &mut m.columns[slot];
        match event {
            Ok(event) => column.apply(event, start.elapsed()),
            Err(e) => {
                column.state = State::Failed(e.to_string());
                column.ended_at = Some(start.elapsed());
            }
        }
    }
    let tokens = choice.completion_tokens().await;
    let mut m = lock(&model);
    let column = &mut m.columns[slot];
    column.tokens = tokens;
    column.tokens_final = true;
    if column.state == State::Streaming {
        column.state = State::Failed("ended without a finish".into());
        column.ended_at = Some(start.elapsed());
    }
}

/// Every [`COUNT_EVERY`], counts the tokens of the choices that changed, on a blocking thread.
async fn count_tokens(model: Shared, encoding: EncodingName) {
    let mut every = tokio::time::interval(COUNT_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let changed: Vec<(usize, ChoiceOutput)> = {
            let mut m = lock(&model);
            m.columns
                .iter_mut()
                .enumerate()
                .filter(|(_, c)| c.changed && !c.tokens_final)
                .map(|(i, c)| {
                    c.changed = false;
                    (i, c.choice.snapshot())
                })
                .collect()
        };
        if changed.is_empty() {
            continue;
        }
        let counted = tokio::task::spawn_blocking(move || {
            changed
                .into_iter()
                .map(|(i, output)| (i, output.completion_tokens(encoding)))
                .collect::<Vec<_>>()
        })
        .await;
        let mut m = lock(&model);
        for (i, n) in counted.unwrap_or_default() {
            if let Some(c) = m.columns.get_mut(i).filter(|c| !c.tokens_final) {
                c.tokens = n;
            }
        }
    }
}

mod render;

use render::render;
pub use render::wrap;

#[cfg(test)]
mod tests;
