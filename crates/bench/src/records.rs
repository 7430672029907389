//! `choicewise-bench records-usage`: how long `choicewise usage` takes on a records database
//! of many rows (docs/records.md's target: 1M rows answered in under 2 s, SQLite and
//! PostgreSQL). The rows are made here, spread over `--keys` keys, `--models` models and
//! `--days` days, written in batches as the gateway's writer writes them; then the usage by
//! key, model and day is asked three times and the median timed.

use std::time::Instant;

use choicewise_records::{By, RequestRecord, SampleTokens, Store, UsageQuery};

use crate::stats::median;
use crate::{Report, Target, runtime};

/// `records-usage`'s settings.
#[derive(Debug, Clone, clap::Args)]
pub struct RecordsUsageArgs {
    /// The database (`sqlite://PATH`, made if missing, or `postgres://...`); default a
    /// SQLite file in a temporary folder.
    #[arg(long)]
    pub url: Option<String>,
    /// Rows to make (none when the database already holds at least this many).
    #[arg(long, default_value_t = 1_000_000)]
    pub rows: u64,
    #[arg(long, default_value_t = 20)]
    pub keys: u64,
    #[arg(long, default_value_t = 5)]
    pub models: u64,
    #[arg(long, default_value_t = 30)]
    pub days: u64,
}

/// 2026-11-01T00:00:00Z.
const START_MS: i64 = 1_793_491_200_000;

fn row(i: u64, args: &RecordsUsageArgs) -> RequestRecord {
    let at = START_MS + ((i * 86_400_000 * args.days) / args.rows.max(1)) as i64;
    let mut r = RequestRecord::new(
        at,
        format!("bench-{i}"),
        format!("model-{}", i % args.models),
    );
    r.key = format!("key-{}", i % args.keys);
    r.api = "chat".into();
    r.status = if i.is_multiple_of(50) { 502 } else { 200 };
    r.ended = if r.status == 200 {
        "complete"
    } else {
        "every_choice_failed"
    }
    .into();
    (r.prompt_tokens, r.completion_tokens) = (120, 40 + (i % 200) as i64);
    r.sample_tokens = vec![SampleTokens {
        sample: 0,
        prompt: 120,
        completion: r.completion_tokens as u64,
        estimated: false,
    }];
    r.cost_usd = Some(0.0001);
    r.total_ms = 250.0;
    r
}

pub fn run(args: &RecordsUsageArgs) -> Report {
    let rt = runtime(2);
    let mut report = Report::default();
    let dir = std::env::temp_dir().join(format!("choicewise-records-usage-{}", std::process::id()));
    let url = match &args.url {
        Some(url) => url.clone(),
        None => {
            let _ = std::fs::create_dir_all(&dir);
            format!("sqlite://{}", dir.join("records.db").display())
        }
    };
    let result = rt.block_on(async {
        let store = Store::connect(&url).await.map_err(|e| e.to_string())?;
        let have = store.count().await.map_err(|e| e.to_string())?;
        if have < args.rows {
            let filled = Instant::now();
            let mut batch = Vec::with_capacity(4_096);
            for i in have..args.rows {
                batch.push(row(i, args));
                if batch.len() == 4_096 {
                    store.write(&batch).await.map_err(|e| e.to_string())?;
                    batch.clear();
                }
            }
            store.write(&batch).await.map_err(|e| e.to_string())?;
            println!(
                "{} rows written in {:.1} s",
                args.rows - have,
                filled.elapsed().as_secs_f64()
            );
        }
        let query = UsageQuery::new(vec![By::Key, By::Model, By::Day]);
        let mut times = Vec::new();
        let mut groups = 0;
        for _ in 0..3 {
            let t = Instant::now();
            let rows = store.usage(&query).await.map_err(|e| e.to_string())?;
            times.push(t.elapsed().as_secs_f64());
            groups = rows.len();
        }
        store.close().await;
        Ok::<_, String>((times, groups))
    });
    match result {
        Ok((times, groups)) => {
            let shown = choicewise_records::shown_url(&url);
            let scheme = shown.split("://").next().unwrap_or_default().to_string();
            println!(
                "usage --by key,model,day on {} rows of {shown}: {groups} groups; runs {}",
                args.rows,
                times
                    .iter()
                    .map(|t| format!("{t:.3} s"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            report.targets.push(Target {
                name: if scheme == "sqlite" {
                    "records_usage_1m_rows_s_sqlite"
                } else {
                    "records_usage_1m_rows_s_postgres"
                },
                measured: median(&times),
                target: 2.0,
                at_least: false,
                unit: "s",
            });
        }
        Err(e) => report.info.push(format!("INFO records-usage: {e}")),
    }
    if args.url.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    report
}
