//! Spend read back: [`Store::usage`], grouped by key, model, API and day.

use serde::Serialize;
use sqlx::Row;

use crate::RecordsQuery;
use crate::read::{Dialect, MOST_COST_USD, Skipped, Want, check_all};
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

/// What [`Store::usage_report`] found: the groups' spend, and the rows it left out.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use choicewise_records::{By, RequestRecord, Store, UsageQuery};
/// let dir = tempfile::tempdir()?;
/// let url = format!("sqlite://{}", dir.path().join("r.db").display());
/// let store = Store::connect(&url).await?;
/// let mut r = RequestRecord::new(1_795_737_600_000, "req-1", "m");
/// (r.status, r.prompt_tokens) = (200, 10);
/// let mut damaged = RequestRecord::new(1_795_737_600_000, "req-2", "m");
/// damaged.id = "two".into();
/// store.write(&[r, damaged]).await?;
/// let pool = sqlx::SqlitePool::connect(&url).await?;
/// sqlx::query("UPDATE requests SET cost_usd = 1e300 WHERE id = 'two'").execute(&pool).await?;
/// let report = store.usage_report(&UsageQuery::new(vec![By::Model])).await?;
/// assert_eq!((report.rows[0].requests, report.rows[0].prompt_tokens), (1, 10));
/// assert_eq!(report.skipped.count, 1);
/// assert_eq!(
///     report.skipped.named[0].to_string(),
///     r#"requests id "two": cost_usd holds the real 1.0e+300, wanted null or a cost from 0 to 1e12"#
/// );
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct UsageReport {
    /// One row per group, ordered by the groups.
    pub rows: Vec<UsageRow>,
    /// The rows of `requests` left out: a column read that does not hold what the writer
    /// writes there.
    pub skipped: Skipped,
}

/// A count from the sums of its halves (`x >> 32`, `x & 0xFFFFFFFF`: each summed without
/// overflow, a half of a count being under 2^32 and a group under 2^31 rows), at most
/// `u64::MAX`.
fn joined(high: i64, low: i64) -> u64 {
    let sum = i128::from(high) * (1 << 32) + i128::from(low);
    u64::try_from(sum.max(0)).unwrap_or(u64::MAX)
}

/// The most one request's cost may be, as a number: [`MOST_COST_USD`].
const MOST_COST: f64 = 1e12;

impl Store {
    /// The spend of the requests `query` names, one row per group, ordered by the groups.
    /// The rows of `requests` that cannot be read are left out:
    /// [`usage_report`](Self::usage_report) counts and names them.
    pub async fn usage(&self, query: &UsageQuery) -> Result<Vec<UsageRow>, RecordsError> {
        Ok(self.usage_report(query).await?.rows)
    }

    /// The spend of the requests `query` names, one row per group, ordered by the groups,
    /// summed by the database; and the rows left out, counted and named: those whose
    /// columns summed or grouped by do not hold what the writer writes there (a group's name
    /// that is not text, a status that is not an integer, a count that is not an integer of
    /// at least 0, a cost that is not null or a number from 0 to 1e12). The counts' sums are
    /// exact, and stop at `u64::MAX`; the costs' sums are finite.
    ///
    /// The sums are asked first as they are, with per group what betrays a row that does not
    /// hold what it should (a sum that is not an integer, a least count below 0, a cost out
    /// of its range, a name that is not text), which costs little. Only when a group shows
    /// one, or a sum overflows, is every row checked, and the rows left out named.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use choicewise_records::{By, RequestRecord, Store, UsageQuery};
    /// let dir = tempfile::tempdir()?;
    /// let url = format!("sqlite://{}", dir.path().join("r.db").display());
    /// let store = Store::connect(&url).await?;
    /// let mut records = Vec::new();
    /// for (i, key) in ["a", "a", "b"].into_iter().enumerate() {
    ///     let mut r = RequestRecord::new(1_795_737_600_000, format!("req-{i}"), "m");
    ///     (r.key, r.completion_tokens) = (key.into(), i64::MAX);
    ///     records.push(r);
    /// }
    /// store.write(&records).await?;
    /// let report = store.usage_report(&UsageQuery::new(vec![By::Key])).await?;
    /// // Exact past i64::MAX: 2 * (2^63 - 1).
    /// assert_eq!(report.rows[0].completion_tokens, u64::MAX - 1);
    /// assert_eq!(report.rows[1].completion_tokens, i64::MAX as u64);
    /// assert!(report.skipped.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn usage_report(&self, query: &UsageQuery) -> Result<UsageReport, RecordsError> {
        let since = query.since_ms.unwrap_or(i64::MIN);
        let mut report = match self.usage_unchecked(query, since).await {
            Ok(Some(rows)) => UsageReport {
                rows,
                skipped: Skipped::default(),
            },
            // A row to leave out, or a sum past a bound (or the database failed, which the
            // checked query then says).
            Ok(None) | Err(_) => self.usage_checked(query, since).await?,
        };
        if query.by.is_empty() && report.rows.is_empty() {
            report.rows.push(UsageRow {
                group: Vec::new(),
                requests: 0,
                failed: 0,
                prompt_tokens: 0,
                completion_tokens: 0,
                cost_usd: 0.0,
            });
        }
        Ok(report)
    }

    /// The sums as they are, and per group what betrays a row to leave out: `None` when a
    /// group shows one.
    async fn usage_unchecked(
        &self,
        query: &UsageQuery,
        since: i64,
    ) -> Result<Option<Vec<UsageRow>>, RecordsError> {
        let d = self.dialect();
        let columns: Vec<&str> = query.by.iter().map(|b| b.column()).collect();
        let mut sql = String::from("SELECT ");
        for c in &columns {
            sql.push_str(c);
            sql.push_str(", ");
        }
        // SQLite's SUM is a real number when any of its rows is not an integer (a real,
        // text, a blob), and fails on an overflow; PostgreSQL keeps its columns' types, and
        // its sums of counts fail when cast past a BIGINT.
        let (count, least, statuses): (fn(&str) -> String, &str, &str) = match d {
            Dialect::Sqlite => (
                |c: &str| format!("SUM({c})"),
                "MIN(MIN(prompt_tokens, completion_tokens))",
                "SUM(status)",
            ),
            Dialect::Postgres => (
                |c: &str| format!("CAST(SUM({c}) AS BIGINT)"),
                "MIN(LEAST(prompt_tokens, completion_tokens))",
                "CAST(NULL AS BIGINT)",
            ),
        };
        sql.push_str(&format!(
            "CAST(COUNT(*) AS BIGINT), \
             CAST(COALESCE(SUM(CASE WHEN status >= 400 THEN 1 ELSE 0 END), 0) AS BIGINT), \
             {}, {}, CAST(COALESCE(SUM(cost_usd), 0) AS DOUBLE PRECISION), \
             {least}, MIN(cost_usd), MAX(cost_usd), {statuses} \
             FROM requests WHERE at_ms >= $1",
            count("prompt_tokens"),
            count("completion_tokens"),
        ));
        if !columns.is_empty() {
            let list = columns.join(", ");
            sql.push_str(&format!(" GROUP BY {list} ORDER BY {list}"));
        }
        macro_rules! rows {
            ($pool:expr) => {{
                let rows = sqlx::query(&sql)
                    .bind(since)
                    .fetch_all($pool)
                    .await
                    .map_err(|e| self.db_error(e))?;
                let mut out = Vec::with_capacity(rows.len());
                for row in &rows {
                    let n = query.by.len();
                    let mut group = Vec::with_capacity(n);
                    for (i, by) in query.by.iter().enumerate() {
                        match group_value(row, i) {
                            Some(value) => group.push((*by, value)),
                            None => return Ok(None),
                        }
                    }
                    // A count: an integer of at least 0 (none: no row).
                    let count = |i: usize| match row.try_get::<Option<i64>, _>(i) {
                        Ok(v) if v.unwrap_or(0) >= 0 => Some(v.unwrap_or(0) as u64),
                        _ => None,
                    };
                    // A cost: none, or a number in its range.
                    let cost = |i: usize| match row.try_get::<Option<f64>, _>(i) {
                        Ok(c) => c.is_none_or(|c| (0.0..=MOST_COST).contains(&c)),
                        Err(_) => false,
                    };
                    let (Some(requests), Some(failed), Some(prompt), Some(completion)) =
                        (count(n), count(n + 1), count(n + 2), count(n + 3))
                    else {
                        return Ok(None);
                    };
                    let Ok(cost_usd) = row.try_get::<f64, _>(n + 4) else {
                        return Ok(None);
                    };
                    let statuses = row.try_get::<Option<i64>, _>(n + 8);
                    if count(n + 5).is_none()
                        || !cost(n + 6)
                        || !cost(n + 7)
                        || statuses.is_err()
                        || !cost_usd.is_finite()
                    {
                        return Ok(None);
                    }
                    out.push(UsageRow {
                        group,
                        requests,
                        failed,
                        prompt_tokens: prompt,
                        completion_tokens: completion,
                        cost_usd,
                    });
                }
                out
            }};
        }
        Ok(Some(match &self.db {
            Db::Sqlite(pool) => rows!(pool),
            Db::Postgres(pool) => rows!(pool),
        }))
    }

    /// The sums of the rows that hold what they should, every row checked; the others
    /// counted and named.
    async fn usage_checked(
        &self,
        query: &UsageQuery,
        since: i64,
    ) -> Result<UsageReport, RecordsError> {
        let d = self.dialect();
        let mut checked: Vec<(&str, Want)> = Vec::new();
        checked.extend(query.by.iter().map(|b| (b.column(), Want::Text)));
        checked.extend([
            ("status", Want::Integer),
            ("prompt_tokens", Want::Count),
            ("completion_tokens", Want::Count),
            ("cost_usd", Want::Cost),
        ]);
        let columns: Vec<&str> = query.by.iter().map(|b| b.column()).collect();
        let mut sql = String::from("SELECT ");
        for c in &columns {
            sql.push_str(c);
            sql.push_str(", ");
        }
        // A row left out is in a group of its own (`cw_good` false), its sums unread: they
        // only must not fail (halves of counts, costs in their range).
        let halves = |c: &str| {
            format!(
                "CAST(COALESCE(SUM({c} >> 32), 0) AS BIGINT), \
                 CAST(COALESCE(SUM({c} & 4294967295), 0) AS BIGINT)"
            )
        };
        sql.push_str(&format!(
            "CAST(CASE WHEN {} THEN 1 ELSE 0 END AS BIGINT) AS cw_good, \
             CAST(COUNT(*) AS BIGINT), \
             CAST(COALESCE(SUM(CASE WHEN status >= 400 THEN 1 ELSE 0 END), 0) AS BIGINT), \
             {}, {}, \
             CAST(COALESCE(SUM(CASE WHEN cost_usd BETWEEN 0 AND {MOST_COST_USD} THEN cost_usd END), 0) \
             AS DOUBLE PRECISION) \
             FROM requests WHERE at_ms >= $1 GROUP BY ",
            check_all(&checked, d),
            halves("prompt_tokens"),
            halves("completion_tokens"),
        ));
        for c in &columns {
            sql.push_str(c);
            sql.push_str(", ");
        }
        sql.push_str("cw_good");
        if !columns.is_empty() {
            sql.push_str(&format!(" ORDER BY {}", columns.join(", ")));
        }
        let mut report = UsageReport::default();
        let mut bad = 0;
        macro_rules! rows {
            ($pool:expr) => {{
                let rows = sqlx::query(&sql)
                    .bind(since)
                    .fetch_all($pool)
                    .await
                    .map_err(|e| self.db_error(e))?;
                for row in &rows {
                    let n = query.by.len();
                    let int = |i: usize| row.try_get::<i64, _>(i).map_err(|e| self.db_error(e));
                    let requests = int(n + 1)?.max(0) as u64;
                    if int(n)? != 1 {
                        bad += requests;
                        continue;
                    }
                    let mut group = Vec::with_capacity(n);
                    for (i, by) in query.by.iter().enumerate() {
                        group.push((*by, group_value(row, i).unwrap_or_default()));
                    }
                    report.rows.push(UsageRow {
                        group,
                        requests,
                        failed: int(n + 2)?.max(0) as u64,
                        prompt_tokens: joined(int(n + 3)?, int(n + 4)?),
                        completion_tokens: joined(int(n + 5)?, int(n + 6)?),
                        cost_usd: row.try_get::<f64, _>(n + 7).map_err(|e| self.db_error(e))?,
                    });
                }
            }};
        }
        match &self.db {
            Db::Sqlite(pool) => rows!(pool),
            Db::Postgres(pool) => rows!(pool),
        }
        if bad > 0 {
            let refused = format!("NOT {}", check_all(&checked, d));
            report.skipped.named = self
                .name_refused(&checked, &RecordsQuery::since(since), &refused)
                .await?;
            report.skipped.count = bad;
        }
        Ok(report)
    }
}

/// A group's name as read: `None` when it is not text (SQLite keeps a blob where it is
/// given one); text that is not UTF-8 (SQLite keeps any bytes) shown as near as it can be.
fn group_value<R: Row>(row: &R, i: usize) -> Option<String>
where
    usize: sqlx::ColumnIndex<R>,
    for<'a> Option<String>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<Vec<u8>>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    use sqlx::{TypeInfo, ValueRef};
    let raw = row.try_get_raw(i).ok()?;
    if raw.is_null() || raw.type_info().name() != "TEXT" {
        return None;
    }
    match row.try_get::<Option<String>, _>(i) {
        Ok(value) => Some(value.unwrap_or_default()),
        Err(_) => {
            let bytes = row
                .try_get_unchecked::<Option<Vec<u8>>, _>(i)
                .ok()
                .flatten()?;
            Some(String::from_utf8_lossy(&bytes).into_owned())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cost_bound_is_one_number_in_sql_and_in_rust() {
        assert_eq!(MOST_COST_USD.parse::<f64>(), Ok(MOST_COST));
    }

    #[test]
    fn a_count_is_joined_from_its_halves_and_stops_at_u64_max() {
        let halves = |n: u64| ((n >> 32) as i64, (n & 0xFFFF_FFFF) as i64);
        let counts = [
            0,
            1,
            1 << 32,
            u64::from(u32::MAX),
            i64::MAX as u64,
            u64::MAX,
        ];
        for n in counts {
            let (high, low) = halves(n);
            assert_eq!(joined(high, low), n);
        }
        // Three rows of i64::MAX: past u64::MAX.
        let (high, low) = halves(i64::MAX as u64);
        assert_eq!(joined(3 * high, 3 * low), u64::MAX);
        assert_eq!(joined(-1, 0), 0);
    }
}
