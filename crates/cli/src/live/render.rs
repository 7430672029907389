//! Drawing the live view: the header, the columns (one per choice, as wide as the screen
//! allows) and their lines, wrapped to the column's width.

use std::time::Duration;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Paragraph};
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

use super::*;

fn seconds(d: Duration) -> String {
    format!("{:.2}s", d.as_secs_f64())
}

/// Draws the view from the top of the frame, as tall as its content (the columns grow until
/// they fill the screen, then follow their newest lines); returns the height used.
pub(super) fn render(frame: &mut Frame, m: &Model, options: &Options, interrupted: bool) -> u16 {
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
