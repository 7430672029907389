//! `choicewise usage`: spend by key, model and day, read from a gateway's `[records]`
//! database (docs/records.md).

use std::io::Write;

use choicewise_records::{By, Store, UsageQuery, UsageRow, parse_since};

use crate::Exit;

/// `choicewise usage --records URL [--by key,model,day] [--since 7d] [--json]`.
#[derive(Debug, clap::Args)]
pub(crate) struct UsageArgs {
    /// The records database a gateway writes (`[records] url`): `sqlite://PATH` or
    /// `postgres://USER@HOST/DB`.
    #[arg(long, value_name = "URL")]
    records: String,
    /// Group by these, comma-separated: key, model, day (UTC), api.
    #[arg(long, value_name = "FIELDS", default_value = "key,model,day")]
    by: String,
    /// Only the requests since then: a duration back (30m, 12h, 7d, 2w) or a day
    /// (YYYY-MM-DD, UTC).
    #[arg(long, value_name = "WHEN")]
    since: Option<String>,
    /// Print a JSON array: per group its fields and `requests`, `failed`, `prompt_tokens`,
    /// `completion_tokens`, `cost_usd`.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run(args: UsageArgs) -> Result<(), Exit> {
    let usage_error = |message: String| Exit { message, code: 2 };
    let by = By::parse_list(&args.by).map_err(|e| usage_error(e.to_string()))?;
    let mut query = UsageQuery::new(by.clone());
    if let Some(since) = &args.since {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        query = query.since(parse_since(since, now).map_err(|e| usage_error(e.to_string()))?);
    }
    let store = Store::open_existing(&args.records)
        .await
        .map_err(|e| Exit::from(e.to_string()))?;
    let report = store
        .usage_report(&query)
        .await
        .map_err(|e| Exit::from(e.to_string()))?;
    store.close().await;
    let rows = report.rows;
    let text = if args.json {
        let mut text = serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?;
        text.push('\n');
        text
    } else {
        table(&by, &rows)
    };
    let mut notes = Vec::new();
    if !report.skipped.is_empty() {
        notes.push(report.skipped.to_string());
    }
    notes.extend(bounds(&rows));
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Exit::from(format!("cannot write the usage: {e}")))?;
    // The notes do not fail the report: it is written.
    let mut err = std::io::stderr().lock();
    for note in notes {
        for line in note.lines() {
            let _ = writeln!(err, "choicewise: usage: {line}");
        }
    }
    Ok(())
}

/// What a reader should know of sums at their bounds: a count at `u64::MAX` (where it
/// stops), a cost that is not a finite number.
fn bounds(rows: &[UsageRow]) -> Vec<String> {
    let mut notes = Vec::new();
    let total = total(rows);
    let counts = |r: &UsageRow| [r.requests, r.failed, r.prompt_tokens, r.completion_tokens];
    if rows
        .iter()
        .chain([&total])
        .any(|r| counts(r).contains(&u64::MAX))
    {
        notes.push(format!(
            "a sum reached {} (the most a count holds) and stops there",
            u64::MAX
        ));
    }
    if rows.iter().chain([&total]).any(|r| !r.cost_usd.is_finite()) {
        notes.push("a cost's sum is not a finite number: shown as \"not finite\"".into());
    }
    notes
}

/// The rows' sums, each stopping at its bound.
fn total(rows: &[UsageRow]) -> UsageRow {
    let sum = |f: fn(&UsageRow) -> u64| rows.iter().map(f).fold(0u64, u64::saturating_add);
    UsageRow {
        group: Vec::new(),
        requests: sum(|r| r.requests),
        failed: sum(|r| r.failed),
        prompt_tokens: sum(|r| r.prompt_tokens),
        completion_tokens: sum(|r| r.completion_tokens),
        cost_usd: rows.iter().map(|r| r.cost_usd).sum(),
    }
}

/// A cost as a cell: 4 decimals, or `not finite`.
fn cost(usd: f64) -> String {
    match usd.is_finite() {
        true => format!("{usd:.4}"),
        false => "not finite".into(),
    }
}

/// The rows as an aligned table, the groups first, then a total line.
fn table(by: &[By], rows: &[UsageRow]) -> String {
    let mut head: Vec<String> = by.iter().map(|b| b.as_str().to_string()).collect();
    head.extend(
        [
            "requests",
            "failed",
            "prompt_tokens",
            "completion_tokens",
            "cost_usd",
        ]
        .map(String::from),
    );
    let line = |group: Vec<String>, r: &UsageRow| {
        let mut cells = group;
        cells.extend([
            r.requests.to_string(),
            r.failed.to_string(),
            r.prompt_tokens.to_string(),
            r.completion_tokens.to_string(),
            cost(r.cost_usd),
        ]);
        cells
    };
    let mut lines = vec![head];
    for r in rows {
        let group = r.group.iter().map(|(_, v)| shown(v)).collect();
        lines.push(line(group, r));
    }
    let total = total(rows);
    if rows.len() > 1 || by.is_empty() {
        let mut group = vec![String::new(); by.len()];
        if let Some(first) = group.first_mut() {
            *first = "total".into();
        }
        lines.push(line(group, &total));
    }
    let widths: Vec<usize> = (0..lines[0].len())
        .map(|i| {
            lines
                .iter()
                .map(|l| l[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let groups = by.len();
    let mut text = String::new();
    for l in &lines {
        let cells: Vec<String> = (l.iter().enumerate())
            .map(|(i, c)| padded(c, widths[i], i < groups))
            .collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    text
}

/// The most characters a cell shows: a longer value is cut, ending in `…`.
const CELL: usize = 64;

/// A group's value as a cell: `-` for none (no key, no configured model), control
/// characters escaped, at most [`CELL`] characters.
fn shown(value: &str) -> String {
    if value.is_empty() {
        return "-".into();
    }
    let escaped: String = value.escape_debug().collect();
    match escaped.char_indices().nth(CELL - 1) {
        Some((cut, _)) if escaped.chars().count() > CELL => format!("{}…", &escaped[..cut]),
        _ => escaped,
    }
}

/// `cell` padded with spaces to `width` characters, on the right (`left`) or the left. Not
/// `format!`'s width, which cannot be over `u16::MAX`.
fn padded(cell: &str, width: usize, left: bool) -> String {
    let pad = " ".repeat(width.saturating_sub(cell.chars().count()));
    match left {
        true => format!("{cell}{pad}"),
        false => format!("{pad}{cell}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_aligns_its_columns_and_totals_them() {
        let row = |key: &str, requests, cost| UsageRow {
            group: vec![(By::Key, key.to_string())],
            requests,
            failed: 1,
            prompt_tokens: 10,
            completion_tokens: 20,
            cost_usd: cost,
        };
        let text = table(&[By::Key], &[row("team-a", 2, 0.5), row("", 10, 0.25)]);
        assert_eq!(
            text,
            "key     requests  failed  prompt_tokens  completion_tokens  cost_usd\n\
             team-a         2       1             10                 20    0.5000\n\
             -             10       1             10                 20    0.2500\n\
             total         12       2             20                 40    0.7500\n"
        );
    }

    #[test]
    fn a_long_name_is_cut_and_sums_at_their_bounds_are_said() {
        let row = |key: String, tokens, cost| UsageRow {
            group: vec![(By::Key, key)],
            requests: 1,
            failed: 0,
            prompt_tokens: tokens,
            completion_tokens: 0,
            cost_usd: cost,
        };
        let rows = [
            row("k".repeat(65_536), u64::MAX, f64::INFINITY),
            row("b".into(), 1, 0.5),
        ];
        let text = table(&[By::Key], &rows);
        let first = text.lines().nth(1).unwrap();
        assert!(
            first.starts_with(&format!("{}…  ", "k".repeat(63))),
            "{first}"
        );
        assert!(first.contains("  18446744073709551615  "), "{first}");
        assert!(first.ends_with("  not finite"), "{first}");
        let total = text.lines().last().unwrap();
        assert!(total.starts_with("total "), "{total}");
        assert!(total.contains("  18446744073709551615  "), "{total}");
        assert!(total.ends_with("  not finite"), "{total}");
        assert!(!text.contains("inf") && !text.contains("NaN"), "{text}");
        let notes = bounds(&rows);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].contains("18446744073709551615 (the most a count holds)"));
        assert!(notes[1].contains("not a finite number"));
        assert!(bounds(&rows[1..]).is_empty());
    }
}
