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
    PartialArguments, Selection,
};
use choicewise_usage::EncodingName;
use crossterm::event::{Event, EventStream, KeyCode, KeyEventKind, KeyModifiers};
use futures::StreamExt;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Paragraph};
use ratatui::{Frame, TerminalOptions, Viewport};
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

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
            ChoiceEvent::FunctionCall(FunctionCallEvent::Started { call, id, name }) => {
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
                        view.shown = serde_json::to_string_pretty(&*v).unwrap_or_default();
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
            ChoiceEvent::Cancelled => {
                // Marked before the cancel is sent, so known by now.
                self.state = match self.choice.stopped_for_low_confidence() {
                    true => State::LowConfidence,
                    false => State::Cancelled,
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

fn seconds(d: Duration) -> String {
    format!("{:.2}s", d.as_secs_f64())
}

/// Draws the view from the top of the frame, as tall as its content (the columns grow until
/// they fill the screen, then follow their newest lines); returns the height used.
fn render(frame: &mut Frame, m: &Model, options: &Options, interrupted: bool) -> u16 {
    let area = frame.area();
    let elapsed = m.ended_at.unwrap_or_else(|| options.start.elapsed());
    let (status, color) = match (&m.end, interrupted) {
        (_, true) => ("interrupted", Color::Red),
        (None, _) => ("streaming · Ctrl-C to stop", Color::Yellow),
        (Some(Ok(())), _) => ("done", Color::Green),
        (Some(Err(_)), _) => ("failed", Color::Red),
    };
    let n = m.columns.len();
    let top = Line::from(vec![
        Span::styled("choicewise", Style::new().bold()),
        Span::raw(format!(
            " · {} · {n} choice{} · {} · ",
            options.title,
            if n == 1 { "" } else { "s" },
            seconds(elapsed)
        )),
        Span::styled(status, Style::new().fg(color)),
    ]);
    frame.render_widget(top, Rect { height: 1, ..area });
    // Below the columns: the usage, and the error that ended the stream, if one did.
    // (The top line says when Ctrl-C stopped the view: once.)
    let mut notes = vec![match (&m.usage, interrupted) {
        (Some(usage), _) => (usage.clone(), Style::new()),
        (None, true) => (
            "usage: none, the stream was stopped".to_string(),
            Style::new().fg(Color::DarkGray),
        ),
        (None, false) => (
            "usage: when the stream ends".to_string(),
            Style::new().fg(Color::DarkGray),
        ),
    }];
    if let Some(Err(e)) = &m.end {
        notes.push((format!("✘ {e}"), Style::new().fg(Color::Red)));
    }
    let footer: Vec<Line<'static>> = notes
        .into_iter()
        .flat_map(|(text, style)| {
            wrap(&text, area.width as usize)
                .into_iter()
                .map(move |l| Line::styled(l, style))
        })
        .collect();
    let room = area.height.saturating_sub(1 + footer.len() as u16);
    let body = Rect {
        y: area.y + 1,
        height: room,
        ..area
    };
    let used = render_columns(frame, m, options, body, interrupted);
    let footer_area = Rect {
        y: body.y + used,
        height: footer.len() as u16,
        ..area
    };
    let height = footer_area.height;
    frame.render_widget(Paragraph::new(footer), footer_area.intersection(area));
    (1 + used + height).min(area.height)
}

/// Draws the columns, each row as tall as its longest column (within `area`); returns the
/// height used.
fn render_columns(
    frame: &mut Frame,
    m: &Model,
    options: &Options,
    area: Rect,
    interrupted: bool,
) -> u16 {
    // In index order, whatever order the choices appeared in.
    let mut columns: Vec<&Column> = m.columns.iter().collect();
    columns.sort_by_key(|c| c.choice.index());
    let n = columns.len();
    if n == 0 {
        let waiting = if m.end.is_some() {
            "no choices"
        } else {
            "waiting for the first choice…"
        };
        let line = Line::styled(waiting, Style::new().fg(Color::DarkGray));
        frame.render_widget(line, Rect { height: 1, ..area });
        return 1;
    }
    let per_row = ((area.width / MIN_COLUMN_WIDTH).max(1) as usize).min(n);
    let widths =
        Layout::horizontal(vec![Constraint::Fill(1); per_row]).split(Rect { height: 1, ..area });
    // Each column's lines, wrapped to its inner width (the borders take 2).
    let bodies: Vec<Vec<Line<'static>>> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| c.lines(widths[i % per_row].width.saturating_sub(2) as usize))
        .collect();
    let wanted: Vec<u16> = bodies
        .chunks(per_row)
        .map(|row| {
            let tallest = row.iter().map(Vec::len).max().unwrap_or(0);
            (tallest.max(1) as u16).saturating_add(2)
        })
        .collect();
    let heights: Vec<u16> = if wanted.iter().sum::<u16>() <= area.height {
        wanted
    } else {
        // Not enough room: rows share the screen, each no taller than it needs.
        let rows = Layout::vertical(
            wanted
                .iter()
                .map(|&h| Constraint::Max(h))
                .collect::<Vec<_>>(),
        )
        .split(area);
        rows.iter().map(|r| r.height).collect()
    };
    let mut y = area.y;
    for (r, height) in heights.iter().enumerate() {
        for c in 0..per_row {
            let i = r * per_row + c;
            let Some(column) = columns.get(i).copied() else {
                break;
            };
            let cell = Rect {
                x: widths[c].x,
                y,
                width: widths[c].width,
                height: *height,
            };
            let selected = m.selected(column.choice.index());
            render_column(
                frame,
                column,
                (selected, interrupted),
                &bodies[i],
                options,
                cell.intersection(area),
            );
        }
        y += height;
    }
    y - area.y
}

/// One column: the index, the state and (when the combinator picked it) [`SELECTED`] on the top
/// border, the tokens and the elapsed time on the bottom one.
fn render_column(
    frame: &mut Frame,
    column: &Column,
    (selected, interrupted): (bool, bool),
    lines: &[Line<'static>],
    options: &Options,
    area: Rect,
) {
    let elapsed = column.ended_at.unwrap_or_else(|| options.start.elapsed());
    let (state, color) = match &column.state {
        // Stopped by Ctrl-C while it streamed.
        State::Streaming if interrupted => ("interrupted".to_string(), Color::Red),
        State::Streaming => ("streaming".to_string(), Color::Yellow),
        State::Finished(reason) => (format!("finished: {reason}"), Color::Green),
        State::Failed(_) => ("error".to_string(), Color::Red),
        State::Cancelled => ("cancelled".to_string(), CANCELLED),
        State::LowConfidence => ("low confidence".to_string(), LOW_CONFIDENCE),
    };
    // Shortened when the column is narrow: the index alone and the finish reason alone, then
    // the mark alone.
    let index = column.choice.index();
    let short_state = match &column.state {
        State::Finished(reason) => reason.clone(),
        _ => state.clone(),
    };
    let source = options
        .sources
        .of_choice(index)
        .map(|s| format!("· {s} "))
        .unwrap_or_default();
    let tiers = [
        (format!(" choice {index} {source}"), state, SELECTED),
        (format!(" {index} "), short_state.clone(), SELECTED),
        (format!(" {index} "), short_state, "★"),
    ];
    let width = |(name, state, mark): &(String, String, &str)| {
        let mark = if selected { 2 + mark.width() + 1 } else { 0 };
        name.width() + 2 + state.width() + 1 + mark
    };
    // The widest that fits between the corners, else the shortest.
    let (name, state, mark) = tiers
        .into_iter()
        .rev()
        .reduce(|narrower, wider| {
            if width(&wider) + 2 <= area.width as usize {
                wider
            } else {
                narrower
            }
        })
        .expect("three tiers");
    let mut title = vec![
        Span::styled(name, Style::new().bold()),
        Span::raw("· "),
        Span::styled(state, Style::new().fg(color)),
        Span::raw(" "),
    ];
    if selected {
        title.push(Span::raw("· "));
        title.push(Span::styled(mark, Style::new().fg(Color::Green).bold()));
        title.push(Span::raw(" "));
    }
    let footer = Line::raw(format!(" ≈{} tok · {} ", column.tokens, seconds(elapsed)));
    let block = Block::bordered()
        .title(Line::from(title))
        .title_bottom(footer)
        .border_type(if selected {
            BorderType::Double
        } else {
            BorderType::Plain
        })
        .border_style(Style::new().fg(match column.state {
            State::Streaming => Color::DarkGray,
            _ => color,
        }));
    let inner = block.inner(area);
    // The newest lines: the column follows the text as it grows.
    let skip = lines.len().saturating_sub(inner.height as usize);
    frame.render_widget(Paragraph::new(lines[skip..].to_vec()).block(block), area);
}

/// Wraps text to `width` columns: at spaces where possible, inside a word longer than a line.
/// Tabs become spaces and other control characters are dropped, so that what is drawn is what
/// was measured.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut out = Vec::new();
    for logical in text.split('\n') {
        let clean: String = logical
            .chars()
            .map(|c| if c == '\t' { ' ' } else { c })
            .filter(|c| !c.is_control())
            .collect();
        let mut line = String::new();
        let mut used = 0;
        for word in clean.split_inclusive(' ') {
            let word_width = word.trim_end_matches(' ').width();
            if used + word_width > width && used > 0 {
                out.push(line.trim_end_matches(' ').to_string());
                line.clear();
                used = 0;
            }
            if word_width > width {
                // A word longer than a line: cut it.
                for c in word.chars() {
                    let w = c.width().unwrap_or(0);
                    if used + w > width {
                        out.push(std::mem::take(&mut line));
                        used = 0;
                    }
                    line.push(c);
                    used += w;
                }
                continue;
            }
            line.push_str(word);
            used += word.width();
        }
        out.push(line.trim_end_matches(' ').to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use choicewise::Source;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    /// Three choices as a `--first` run leaves them: 0 cancelled mid-sentence, 1 finished and
    /// selected, 2 failed.
    async fn picked_model() -> Model {
        let sse = concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Still thinking\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"Pack light.\"},\"finish_reason\":\"stop\"}]}\n\n",
            "data: {\"choices\":[{\"index\":2,\"delta\":{\"content\":\"Hm\"}}]}\n\n",
        );
        let completions = Completions::new(Source::reader(sse.as_bytes()));
        let choices: Vec<Choice> = completions.choices().collect().await;
        let at = Duration::from_millis(1500);
        let mut columns: Vec<Column> = choices.into_iter().map(Column::new).collect();
        columns[0].apply(ChoiceEvent::Content("Still thinking".into()), at);
        columns[0].apply(ChoiceEvent::Cancelled, at);
        columns[1].apply(ChoiceEvent::Content("Pack light.".into()), at);
        columns[1].apply(ChoiceEvent::Finished("stop".into()), at);
        columns[2].apply(ChoiceEvent::Content("Hm".into()), at);
        columns[2].state = State::Failed("the connection closed".into());
        columns[2].ended_at = Some(at);
        for (column, tokens) in columns.iter_mut().zip([3, 4, 1]) {
            column.tokens = tokens;
            column.tokens_final = true;
        }
        let mut selection = Selection::default();
        selection.selected = vec![1];
        selection.cancelled = vec![0];
        selection.cancelled_tokens = 3;
        Model {
            columns,
            usage: Some("usage (estimated with o200k_base): prompt 0, completion 8, total 8; cancelled choices had ≈ 3 tokens".into()),
            end: Some(Ok(())),
            ended_at: Some(at),
            selection: Some(selection),
        }
    }

    /// The frame `render` draws on a `width` × `height` screen, as text.
    fn frame(m: &Model, width: u16, height: u16) -> String {
        frame_of(m, width, height, false, Sources::default())
    }

    fn frame_of(m: &Model, width: u16, height: u16, interrupted: bool, sources: Sources) -> String {
        let options = Options {
            start: Instant::now(),
            title: "replay of a test".into(),
            model: None,
            sources,
        };
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        terminal
            .draw(|frame| {
                render(frame, m, &options, interrupted);
            })
            .unwrap();
        let buffer = terminal.backend().buffer();
        let mut text = String::new();
        for y in 0..height {
            let mut row = String::new();
            for x in 0..width {
                row.push_str(buffer[(x, y)].symbol());
            }
            text.push_str(row.trim_end());
            text.push('\n');
        }
        text
    }

    /// The line of the frame holding `needle`.
    fn line_with<'a>(text: &'a str, needle: &str) -> &'a str {
        text.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no {needle:?} in\n{text}"))
    }

    #[tokio::test]
    async fn the_selected_choice_is_marked_and_a_cancelled_one_says_so() {
        let m = picked_model().await;
        let text = frame(&m, 132, 10);
        let top = line_with(&text, " choice 0 ");
        // Each column's header: its own state, the mark on the selected one only.
        assert!(top.contains(" choice 0 · cancelled "), "{text}");
        assert!(
            top.contains(" choice 1 · finished: stop · ★ selected "),
            "{text}"
        );
        assert!(top.contains(" choice 2 · error "), "{text}");
        assert_eq!(top.matches("★").count(), 1, "{text}");
        // The selected column has a double border; the others a plain one.
        assert_eq!(top.matches('╔').count(), 1, "{text}");
        assert_eq!(top.matches('┌').count(), 2, "{text}");
        let column_1 = top.find('╔').unwrap();
        assert!(top[column_1..].starts_with("╔ choice 1 "), "{text}");
        // The cancelled column's body ends with the cancel; the failed one with its error.
        assert_eq!(text.matches("⊘ cancelled").count(), 1, "{text}");
        let left_of = line_with(&text, "⊘ cancelled").split("⊘ cancelled").next();
        assert!(left_of.is_some_and(|l| l.chars().count() < 44), "{text}");
        assert!(text.contains("✘ the connection closed"), "{text}");
        assert!(text.contains("cancelled choices had ≈ 3 tokens"), "{text}");
    }

    #[tokio::test]
    async fn narrow_columns_keep_the_marks() {
        let m = picked_model().await;
        // 30 columns each: the index and the reason alone, the mark in full.
        let text = frame(&m, 90, 10);
        let top = line_with(&text, " 0 · ");
        assert!(top.contains(" 0 · cancelled "), "{text}");
        assert!(top.contains(" 1 · stop · ★ selected "), "{text}");
        // 24 each: the star alone.
        let text = frame(&m, 72, 10);
        let top = line_with(&text, " 0 · ");
        assert!(top.contains(" 0 · cancelled "), "{text}");
        assert!(top.contains(" 1 · stop · ★ "), "{text}");
        assert!(!top.contains("selected"), "{text}");
        assert_eq!(top.matches('╔').count(), 1, "{text}");
    }

    #[tokio::test]
    async fn before_the_decision_nothing_is_marked() {
        let mut m = picked_model().await;
        m.selection = None;
        let text = frame(&m, 132, 10);
        assert!(!text.contains('★'), "{text}");
        assert!(!text.contains('╔'), "{text}");
        assert!(text.contains(" choice 0 · cancelled "), "{text}");
    }

    #[tokio::test]
    async fn columns_are_in_index_order_and_say_when_ctrl_c_stopped_them() {
        // Choices appearing as 2, 0, 1.
        let sse = concat!(
            "data: {\"choices\":[{\"index\":2,\"delta\":{\"content\":\"c\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"b\"}}]}\n\n",
        );
        let completions = Completions::new(Source::reader(sse.as_bytes()));
        let choices: Vec<Choice> = completions.choices().collect().await;
        assert_eq!(choices[0].index(), 2);
        let m = Model {
            columns: choices.into_iter().map(Column::new).collect(),
            ..Model::default()
        };
        let text = frame_of(&m, 132, 8, true, Sources::default());
        let top = line_with(&text, " choice 0 ");
        let at = |i: u32| top.find(&format!(" choice {i} ")).unwrap();
        assert!(at(0) < at(1) && at(1) < at(2), "{text}");
        assert_eq!(top.matches("interrupted").count(), 3, "{text}");
        assert!(!top.contains("streaming"), "{text}");
        // The top line says it once; the notes do not repeat it.
        assert_eq!(text.matches("interrupted").count(), 4, "{text}");
        let streaming = frame_of(&m, 132, 8, false, Sources::default());
        assert_eq!(
            line_with(&streaming, " choice 0 ")
                .matches("streaming")
                .count(),
            3
        );
        // A fan-out mixing sources names each choice's in its header; one source needs none.
        let label = |api: &str, model: &str, host: &str| crate::view::SourceLabel {
            api: api.into(),
            model: model.into(),
            host: host.into(),
        };
        let mixed = Sources::new(
            vec![
                label("chat", "m", "127.0.0.1:1"),
                label("anthropic", "c", "h:2"),
                label("chat", "m", "127.0.0.1:1"),
            ],
            1,
        );
        let text = frame_of(&m, 200, 8, false, mixed);
        let top = line_with(&text, " choice 0 ");
        assert!(top.contains(" choice 1 · anthropic:c@h:2 "), "{text}");
        assert!(top.contains(" choice 2 · chat:m@127.0.0.1:1 "), "{text}");
        let same = Sources::new(vec![label("chat", "m", "x"), label("chat", "m", "x")], 1);
        assert!(!frame_of(&m, 200, 8, false, same).contains("chat:m@x"));
    }

    /// A sample `--confidence` stops reads `low confidence`, not `cancelled`: two confident
    /// warmup samples (confidence 4, "41" and "42", so undecided), then one that hesitates
    /// (confidence 0.5) and would go on for ever.
    #[tokio::test]
    async fn a_choice_stopped_for_low_confidence_says_so() {
        use choicewise::Confidence;
        use futures::stream;
        let event = |text: &str, c: f64, finish: bool| {
            let token = serde_json::json!({"token": text, "logprob": -c / 2.0, "top_logprobs": [
                {"token": text, "logprob": -c / 2.0}, {"token": "~", "logprob": -1.5 * c}]});
            let chunk = serde_json::json!({"choices": [{"index": 0, "delta": {"content": text},
                "logprobs": {"content": [token]},
                "finish_reason": if finish { Some("stop") } else { None }}]});
            Ok::<_, std::io::Error>(format!("data: {chunk}\n\n"))
        };
        let completions = Completions::builder().samples(3, move |k| {
            let source = |events| Source::sse(stream::iter(events)).n(1);
            match k {
                0 => source(vec![event("42", 4.0, true)]),
                1 => source(vec![event("41", 4.0, true)]),
                _ => {
                    let hesitant = vec![event("hmm", 0.5, false), event("hmm", 0.5, false)];
                    Source::sse(stream::iter(hesitant).chain(stream::pending())).n(1)
                }
            }
        });
        let pick = completions
            .vote(|o| o.message.content.clone())
            .min_votes(1)
            .confidence(Confidence::new().warmup(2).group_tokens(2));
        let selection = tokio::time::timeout(Duration::from_secs(20), pick)
            .await
            .expect("the vote ends once the unsure sample is stopped");
        assert_eq!(
            selection.confidence.as_ref().map(|r| r.stopped().to_vec()),
            Some(vec![2])
        );
        let choices: Vec<Choice> = completions.choices().collect().await;
        let mut columns: Vec<Column> = choices.into_iter().map(Column::new).collect();
        let at = Duration::from_millis(100);
        for column in &mut columns {
            let events: Vec<_> = column.choice.events().collect().await;
            for event in events.into_iter().flatten() {
                column.apply(event, at);
            }
        }
        assert_eq!(columns[2].state, State::LowConfidence);
        let m = Model {
            columns,
            end: Some(Ok(())),
            ended_at: Some(at),
            selection: Some(selection),
            ..Model::default()
        };
        let text = frame(&m, 132, 10);
        let top = line_with(&text, " choice 0 ");
        assert!(top.contains(" choice 2 · low confidence "), "{text}");
        assert!(text.contains("⊘ low confidence"), "{text}");
        assert!(!text.contains("cancelled"), "{text}");
    }

    #[test]
    fn wrap_breaks_at_spaces_and_cuts_long_words() {
        assert_eq!(wrap("the quick brown fox", 10), ["the quick", "brown fox"]);
        assert_eq!(wrap("abcdefghij klm", 4), ["abcd", "efgh", "ij", "klm"]);
        assert_eq!(wrap("a\n\nb", 5), ["a", "", "b"]);
        assert_eq!(wrap("", 5), [""]);
        assert_eq!(wrap("日本語のテキスト", 6), ["日本語", "のテキ", "スト"]);
        for line in wrap(&"lorem ipsum dolor sit amet ".repeat(20), 13) {
            assert!(line.width() <= 13, "{line:?}");
        }
    }
}
