//! Spend read back: [`Store::usage`], grouped by key, model, API and day.

use serde::Serialize;
use sqlx::Row;

use crate::store::Db;
use crate::{RecordsError, Store};

/// What [`Store::usage`] groups by (`--by key,model,day`).
///
/// ```
/// use choicewise_records::By;
/// assert_eq!(By::parse_list("key,model,day").unwrap(), [By::Key, By::Model, By::Day]);
/// assert!(By::parse_list("key,colour").unwrap_err().to_string().contains("colour"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum By {
    Key,
    Model,
    Day,
    Api,
}

impl By {
    /// Its name in `--by` and in the JSON rows.
    pub fn as_str(self) -> &'static str {
        match self {
            By::Key => "key",
            By::Model => "model",
            By::Day => "day",
            By::Api => "api",
        }
    }

    fn column(self) -> &'static str {
        match self {
            By::Key => "key_name",
            By::Model => "model",
            By::Day => "day",
            By::Api => "api",
        }
    }

    /// A comma-separated list: `key`, `model`, `day`, `api`, each at most once.
    pub fn parse_list(list: &str) -> Result<Vec<By>, RecordsError> {
        let mut by = Vec::new();
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let one = match name {
                "key" => By::Key,
                "model" => By::Model,
                "day" => By::Day,
                "api" => By::Api,
                other => {
                    return Err(RecordsError::Query(format!(
                        "--by: {other:?} is not one of key, model, day, api"
                    )));
                }
            };
            if by.contains(&one) {
                return Err(RecordsError::Query(format!("--by: {name} named twice")));
            }
            by.push(one);
        }
        Ok(by)
    }
}

/// `--since`: a duration back from `now_ms` (`7d`, `12h`, `30m`) or a day (`2026-11-01`, UTC),
/// as milliseconds since the Unix epoch.
///
/// ```
/// use choicewise_records::parse_since;
/// let now = 1_795_737_600_000; // 2026-11-27
/// assert_eq!(parse_since("7d", now).unwrap(), now - 7 * 86_400_000);
/// assert_eq!(parse_since("2026-11-26", now).unwrap(), now - 86_400_000);
/// assert!(parse_since("7 weeks", now).is_err());
/// ```
pub fn parse_since(since: &str, now_ms: i64) -> Result<i64, RecordsError> {
    let bad = || {
        RecordsError::Query(format!(
            "--since {since:?}: say a duration (30m, 12h, 7d) or a day (YYYY-MM-DD)"
        ))
    };
    let s = since.trim();
    if let Some((y, rest)) = s.split_once('-') {
        let (m, d) = rest.split_once('-').ok_or_else(bad)?;
        let (y, m, d): (i64, i64, i64) = (
            y.parse().map_err(|_| bad())?,
            m.parse().map_err(|_| bad())?,
            d.parse().map_err(|_| bad())?,
        );
        if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
            return Err(bad());
        }
        return Ok(days_from_civil(y, m, d) * 86_400_000);
    }
    let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let n: i64 = s[..split].parse().map_err(|_| bad())?;
    let unit = match &s[split..] {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 7 * 86_400_000,
        _ => return Err(bad()),
    };
    Ok(now_ms.saturating_sub(n.saturating_mul(unit)))
}

/// Howard Hinnant's `days_from_civil`.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A usage query: the groups, and from when.
///
/// ```
/// use choicewise_records::{By, UsageQuery};
/// let q = UsageQuery::new(vec![By::Key, By::Day]).since(1_795_737_600_000);
/// assert_eq!(q.by, [By::Key, By::Day]);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct UsageQuery {
    pub by: Vec<By>,
    /// Requests arrived at or after this time (milliseconds since the Unix epoch).
    pub since_ms: Option<i64>,
}

impl UsageQuery {
    /// Grouped by `by` (none: one row of everything), since ever.
    pub fn new(by: Vec<By>) -> Self {
        UsageQuery { by, since_ms: None }
    }

    /// Only the requests arrived at or after `since_ms`.
    pub fn since(mut self, since_ms: i64) -> Self {
        self.since_ms = Some(since_ms);
        self
    }
}

/// One group's spend. Serialised as `usage --json` prints it: the `--by` fields, then
/// `requests`, `failed`, `prompt_tokens`, `completion_tokens`, `cost_usd`.
///
/// ```
/// use choicewise_records::{By, UsageRow};
/// let row = UsageRow { group: vec![(By::Model, "m".into())], requests: 2, failed: 1,
///     prompt_tokens: 10, completion_tokens: 20, cost_usd: 0.5 };
/// assert_eq!(
///     serde_json::to_string(&row).unwrap(),
///     r#"{"model":"m","requests":2,"failed":1,"prompt_tokens":10,"completion_tokens":20,"cost_usd":0.5}"#
/// );
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct UsageRow {
    /// Its value of each `--by` field, in their order.
    pub group: Vec<(By, String)>,
    pub requests: u64,
    /// Answered with a status of 400 or more (refusals, failures, clients gone: 499).
    pub failed: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// At the prices configured when each request was recorded (0 without one).
    pub cost_usd: f64,
}

impl Serialize for UsageRow {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.group.len() + 5))?;
        for (by, value) in &self.group {
            map.serialize_entry(by.as_str(), value)?;
        }
        map.serialize_entry("requests", &self.requests)?;
        map.serialize_entry("failed", &self.failed)?;
        map.serialize_entry("prompt_tokens", &self.prompt_tokens)?;
        map.serialize_entry("completion_tokens", &self.completion_tokens)?;
        map.serialize_entry("cost_usd", &self.cost_usd)?;
        map.end()
    }
}

impl Store {
    /// The spend of the requests `query` names, one row per group, ordered by the groups.
    pub async fn usage(&self, query: &UsageQuery) -> Result<Vec<UsageRow>, RecordsError> {
        let columns: Vec<&str> = query.by.iter().map(|b| b.column()).collect();
        let mut sql = String::from("SELECT ");
        for c in &columns {
            sql.push_str(c);
            sql.push_str(", ");
        }
        sql.push_str(
            "CAST(COUNT(*) AS BIGINT) AS requests, \
             CAST(COALESCE(SUM(CASE WHEN status >= 400 THEN 1 ELSE 0 END), 0) AS BIGINT) AS failed, \
             CAST(COALESCE(SUM(prompt_tokens), 0) AS BIGINT) AS prompt_tokens, \
             CAST(COALESCE(SUM(completion_tokens), 0) AS BIGINT) AS completion_tokens, \
             CAST(COALESCE(SUM(cost_usd), 0) AS DOUBLE PRECISION) AS cost_usd \
             FROM requests WHERE at_ms >= $1",
        );
        if !columns.is_empty() {
            let list = columns.join(", ");
            sql.push_str(&format!(" GROUP BY {list} ORDER BY {list}"));
        }
        let since = query.since_ms.unwrap_or(i64::MIN);
        macro_rules! rows {
            ($pool:expr) => {{
                let rows = sqlx::query(&sql)
                    .bind(since)
                    .fetch_all($pool)
                    .await
                    .map_err(|e| self.db_error(e))?;
                (rows.iter())
                    .map(|row| -> Result<UsageRow, sqlx::Error> {
                        let mut group = Vec::with_capacity(query.by.len());
                        for (i, by) in query.by.iter().enumerate() {
                            group.push((*by, row.try_get::<String, _>(i)?));
                        }
                        let n = query.by.len();
                        let count =
                            |i: usize| row.try_get::<i64, _>(n + i).map(|v| v.max(0) as u64);
                        Ok(UsageRow {
                            group,
                            requests: count(0)?,
                            failed: count(1)?,
                            prompt_tokens: count(2)?,
                            completion_tokens: count(3)?,
                            cost_usd: row.try_get::<f64, _>(n + 4)?,
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| self.db_error(e))
            }};
        }
        match &self.db {
            Db::Sqlite(pool) => rows!(pool),
            Db::Postgres(pool) => rows!(pool),
        }
    }
}
