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
    let rows = store
        .usage(&query)
        .await
        .map_err(|e| Exit::from(e.to_string()))?;
    store.close().await;
    let text = if args.json {
        let mut text = serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?;
        text.push('\n');
        text
    } else {
        table(&by, &rows)
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Exit::from(format!("cannot write the usage: {e}")))
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
            format!("{:.4}", r.cost_usd),
        ]);
        cells
    };
    let mut lines = vec![head];
    for r in rows {
        let group = r.group.iter().map(|(_, v)| shown(v)).collect();
        lines.push(line(group, r));
    }
    let total = UsageRow {
        group: Vec::new(),
        requests: rows.iter().map(|r| r.requests).sum(),
        failed: rows.iter().map(|r| r.failed).sum(),
        prompt_tokens: rows.iter().map(|r| r.prompt_tokens).sum(),
        completion_tokens: rows.iter().map(|r| r.completion_tokens).sum(),
        cost_usd: rows.iter().map(|r| r.cost_usd).sum(),
    };
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
            .map(|(i, c)| match i < groups {
                true => format!("{c:<w$}", w = widths[i]),
                false => format!("{c:>w$}", w = widths[i]),
            })
            .collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    text
}

/// A group's value as a cell: `-` for none (no key, no configured model), control
/// characters escaped.
fn shown(value: &str) -> String {
    if value.is_empty() {
        return "-".into();
    }
    value.escape_debug().to_string()
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
}
