//! Records read back: [`Store::record_reader`], one request at a time, for `choicewise picks
//! record --from-records`; [`Store::records`], all at once, for tests and audits.
//!
//! Both, and [`Store::usage`](crate::Store::usage), read a row through one check: each column
//! it reads must hold what the writer writes there (SQLite keeps whatever a hand, a tool or a
//! damaged file put in a column). A row that fails it is left out, counted and named by its
//! record id (or, when that id is not text, SQLite's `rowid`) in a [`Skipped`], and the rest
//! is read.

use std::collections::VecDeque;
use std::fmt;

use sqlx::Row;

use crate::record::{RequestRecord, SampleRecord};
use crate::store::Db;
use crate::{RecordsError, Store};

mod columns;

pub(crate) use columns::{
    Columns, Dialect, MOST_COST_USD, Want, check_all, fault_columns, fault_of, name_columns,
    quoted_name, request_name,
};

/// Which records [`Store::records`] and [`Store::record_reader`] read.
///
/// ```
/// let q = choicewise_records::RecordsQuery::since(0).model("m").with_samples();
/// assert_eq!(q.model.as_deref(), Some("m"));
/// assert!(q.samples);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RecordsQuery {
    /// Requests arrived at or after this time (milliseconds since the Unix epoch).
    pub since_ms: i64,
    /// Only this model's.
    pub model: Option<String>,
    /// Read each request's samples too.
    pub samples: bool,
    /// At most this many requests; `None`: every one.
    pub limit: Option<i64>,
    /// Only this key's requests (its name).
    pub key: Option<String>,
    /// Only the records of this request id (the `x-request-id` answered).
    pub request_id: Option<String>,
    /// The newest first (by arrival, then id) rather than the oldest.
    pub newest_first: bool,
    /// Start after this record (its arrival and id), in the query's order: the next page
    /// of a listing that ended there.
    pub after: Option<(i64, String)>,
}

impl RecordsQuery {
    /// The requests arrived since `since_ms`, without their samples.
    pub fn since(since_ms: i64) -> Self {
        RecordsQuery {
            since_ms,
            model: None,
            samples: false,
            limit: None,
            key: None,
            request_id: None,
            newest_first: false,
            after: None,
        }
    }

    /// Only the requests made with the key named `key`.
    ///
    /// ```
    /// let q = choicewise_records::RecordsQuery::since(0).key("team-a");
    /// assert_eq!(q.key.as_deref(), Some("team-a"));
    /// ```
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Only the records of the request answered with `x-request-id: request_id`.
    ///
    /// ```
    /// let q = choicewise_records::RecordsQuery::since(0).request_id("req-1");
    /// assert_eq!(q.request_id.as_deref(), Some("req-1"));
    /// ```
    pub fn request_id(mut self, request_id: impl Into<String>) -> Self {
        self.request_id = Some(request_id.into());
        self
    }

    /// The newest first: a listing of the last requests.
    ///
    /// ```
    /// assert!(choicewise_records::RecordsQuery::since(0).newest_first().newest_first);
    /// ```
    pub fn newest_first(mut self) -> Self {
        self.newest_first = true;
        self
    }

    /// Start after the record that arrived at `at_ms` with id `id`, in the query's order.
    ///
    /// ```
    /// let q = choicewise_records::RecordsQuery::since(0).after(5, "r-1");
    /// assert_eq!(q.after, Some((5, "r-1".to_string())));
    /// ```
    pub fn after(mut self, at_ms: i64, id: impl Into<String>) -> Self {
        self.after = Some((at_ms, id.into()));
        self
    }

    /// Only `model`'s requests.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Their samples read too.
    pub fn with_samples(mut self) -> Self {
        self.samples = true;
        self
    }

    /// At most `limit` requests.
    pub fn limit(mut self, limit: i64) -> Self {
        self.limit = Some(limit);
        self
    }
}

/// A row left out by a reader, and why.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use choicewise_records::{RecordsQuery, RequestRecord, Store};
/// let dir = tempfile::tempdir()?;
/// let url = format!("sqlite://{}", dir.path().join("r.db").display());
/// let store = Store::connect(&url).await?;
/// let mut r = RequestRecord::new(1_795_737_600_000, "req-1", "m");
/// r.id = "one".into();
/// store.write(&[r]).await?;
/// // A hand puts a real number where the writer keeps an integer.
/// let pool = sqlx::SqlitePool::connect(&url).await?;
/// sqlx::query("UPDATE requests SET status = 200.5").execute(&pool).await?;
/// let mut reader = store.record_reader(RecordsQuery::since(0));
/// assert!(reader.next().await?.is_none());
/// let row = &reader.skipped().named[0];
/// assert_eq!((row.table, row.name.as_str()), ("requests", r#"id "one""#));
/// assert_eq!(row.why, "status holds the real 200.5, wanted an integer");
/// assert_eq!(row.to_string(), r#"requests id "one": status holds the real 200.5, wanted an integer"#);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SkippedRow {
    /// Its table: `requests` or `samples`.
    pub table: &'static str,
    /// Which row: `id "…"` (its record id), `rowid N` (SQLite's, when the id is not text), or
    /// for a sample `request "…", sample N`.
    pub name: String,
    /// What is wrong with it: each column that does not hold what it should, or why its value
    /// could not be decoded.
    pub why: String,
}

impl fmt::Display for SkippedRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.table, self.name, self.why)
    }
}

/// The rows a reader left out: how many, and the first [`Skipped::NAMED`] of them named (a
/// database of a million damaged rows is not listed whole).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use choicewise_records::{RecordsQuery, Store};
/// let dir = tempfile::tempdir()?;
/// let store = Store::connect(&format!("sqlite://{}", dir.path().join("r.db").display())).await?;
/// let mut reader = store.record_reader(RecordsQuery::since(0));
/// while reader.next().await?.is_some() {}
/// assert!(reader.skipped().is_empty());
/// assert_eq!(reader.skipped().to_string(), "no row left out");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Skipped {
    /// The rows left out.
    pub count: u64,
    /// The first of them, at most [`Skipped::NAMED`].
    pub named: Vec<SkippedRow>,
}

impl Skipped {
    /// The most rows named.
    pub const NAMED: usize = 20;

    /// No row was left out.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// One more row left out.
    pub(crate) fn push(&mut self, row: SkippedRow) {
        self.count += 1;
        if self.named.len() < Self::NAMED {
            self.named.push(row);
        }
    }
}

/// One line saying how many rows were left out, then one line per row named, then how many
/// more there were.
impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.count {
            0 => return f.write_str("no row left out"),
            1 => f.write_str("1 row could not be read and was left out:")?,
            n => write!(f, "{n} rows could not be read and were left out:")?,
        }
        for row in &self.named {
            write!(f, "\n  {row}")?;
        }
        let more = self.count.saturating_sub(self.named.len() as u64);
        if more > 0 {
            write!(f, "\n  and {more} more")?;
        }
        Ok(())
    }
}

/// The filter of `requests` `query` names, over `$1` (its arrival) and the parameters after
/// it (model, key, request id, each when given, in that order: [`bind_filter!`]); the
/// indexes serve arrival and model. A SQLite `at_ms` that is text or a blob is later than any
/// number there: such a row is taken, for its check to name it. The parameters it uses.
pub(crate) fn filter(query: &RecordsQuery) -> (String, usize) {
    let mut sql = "at_ms >= $1".to_string();
    let mut used = 1;
    for (column, given) in [
        ("model", query.model.is_some()),
        ("key_name", query.key.is_some()),
        ("request_id", query.request_id.is_some()),
    ] {
        if given {
            used += 1;
            sql.push_str(&format!(" AND {column} = ${used}"));
        }
    }
    (sql, used)
}

/// Binds [`filter`]'s parameters of `$query` to the statement `$q`.
macro_rules! bind_filter {
    ($q:expr, $query:expr) => {{
        let mut q = $q.bind($query.since_ms);
        for value in [&$query.model, &$query.key, &$query.request_id]
            .into_iter()
            .flatten()
        {
            q = q.bind(value);
        }
        q
    }};
}

/// Rows of `requests` read a page at a time by [`RecordReader`].
const PAGE: usize = 16;

/// The `requests` columns the readers read, and what each must hold.
const REQUEST_COLUMNS: &[(&str, Want)] = &[
    ("id", Want::Text),
    ("at_ms", Want::Integer),
    ("request_id", Want::Text),
    ("key_name", Want::Text),
    ("model", Want::Text),
    ("api", Want::Text),
    ("stream", Want::Integer),
    ("pick", Want::TextOrNull),
    ("decision", Want::TextOrNull),
    ("samples_started", Want::Integer),
    ("samples_cancelled", Want::Integer),
    ("samples_failed", Want::Integer),
    ("prompt_tokens", Want::Integer),
    ("completion_tokens", Want::Integer),
    ("estimated", Want::Integer),
    ("sample_tokens", Want::Text),
    ("status", Want::Integer),
    ("ended", Want::Text),
    ("first_byte_ms", Want::RealOrNull),
    ("total_ms", Want::Real),
    ("cost_usd", Want::RealOrNull),
    ("samples_cut", Want::Integer),
];

/// The `samples` columns the readers read, and what each must hold.
const SAMPLE_COLUMNS: &[(&str, Want)] = &[
    ("sample", Want::Integer),
    ("finish", Want::Text),
    ("place", Want::IntegerOrNull),
    ("prompt_tokens", Want::Integer),
    ("completion_tokens", Want::Integer),
    ("estimated", Want::Integer),
    ("content", Want::TextOrNull),
    ("message", Want::TextOrNull),
    ("logprobs", Want::TextOrNull),
    ("output", Want::IntegerOrNull),
];

fn names(columns: Columns<'_>) -> String {
    let names: Vec<&str> = columns.iter().map(|(c, _)| *c).collect();
    names.join(", ")
}

/// The records a [`RecordsQuery`] names, read a request at a time, oldest first (by arrival,
/// then id), each with its samples (by sample number) when asked: what it holds at once is a
/// page of 16 requests' rows and one request's samples, whatever the number of records.
/// Made by [`Store::record_reader`].
///
/// The pages are read by their keys (`(at_ms, id)` after the last one read), each page a
/// statement of its own: no read stays open on the database between two pages.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use choicewise_records::{RecordsQuery, RequestRecord, SampleRecord, Store};
/// let dir = tempfile::tempdir()?;
/// let store = Store::connect(&format!("sqlite://{}", dir.path().join("r.db").display())).await?;
/// let records: Vec<RequestRecord> = (0..40)
///     .map(|i| {
///         let mut r = RequestRecord::new(1_795_737_600_000 + i, format!("req-{i}"), "m");
///         r.samples.push(SampleRecord::new(0, "stop"));
///         r
///     })
///     .collect();
/// store.write(&records).await?;
/// let mut reader = store.record_reader(RecordsQuery::since(0).model("m").with_samples());
/// let mut read = 0;
/// while let Some(r) = reader.next().await? {
///     assert_eq!(r.request_id, format!("req-{read}"));
///     assert_eq!(r.samples.len(), 1);
///     read += 1;
/// }
/// assert_eq!(read, 40);
/// assert!(reader.skipped().is_empty());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RecordReader<'s> {
    store: &'s Store,
    query: RecordsQuery,
    /// The key of the last row read: the next page starts after it.
    after: Option<(i64, String)>,
    page: VecDeque<RequestRecord>,
    returned: i64,
    /// The last page was short: no row is left after it.
    exhausted: bool,
    /// The rows whose keys cannot be paged by (SQLite) have been counted.
    keys_checked: bool,
    skipped: Skipped,
}

impl Store {
    /// The records `query` names, oldest first (by arrival, then id), with their samples
    /// (by sample number) when asked, all at once: for a few records (tests, audits);
    /// [`record_reader`](Self::record_reader) reads any number. A row that cannot be read is
    /// an error naming it (the reader leaves such rows out and goes on).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use choicewise_records::{RecordsQuery, RequestRecord, Store};
    /// let dir = tempfile::tempdir()?;
    /// let store = Store::connect(&format!("sqlite://{}", dir.path().join("r.db").display())).await?;
    /// store.write(&[RequestRecord::new(1_795_737_600_000, "req-1", "m")]).await?;
    /// let records = store.records(&RecordsQuery::since(0)).await?;
    /// assert_eq!(records[0].request_id, "req-1");
    /// # Ok(()) }
    /// ```
    pub async fn records(&self, query: &RecordsQuery) -> Result<Vec<RequestRecord>, RecordsError> {
        let mut reader = self.record_reader(query.clone());
        let mut records = Vec::new();
        while let Some(r) = reader.next().await? {
            records.push(r);
        }
        if !reader.skipped().is_empty() {
            return Err(RecordsError::Database(format!(
                "{}: {}",
                self.shown(),
                reader.skipped()
            )));
        }
        Ok(records)
    }

    /// A reader of the records `query` names, one request at a time ([`RecordReader`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use choicewise_records::{RecordsQuery, RequestRecord, Store};
    /// let dir = tempfile::tempdir()?;
    /// let store = Store::connect(&format!("sqlite://{}", dir.path().join("r.db").display())).await?;
    /// let old = RequestRecord::new(1_795_737_600_000, "req-old", "m");
    /// let new = RequestRecord::new(1_795_737_600_000 + 60_000, "req-new", "m");
    /// store.write(&[old, new]).await?;
    /// let mut reader = store.record_reader(RecordsQuery::since(1_795_737_600_000 + 1).limit(5));
    /// assert_eq!(reader.next().await?.map(|r| r.request_id).as_deref(), Some("req-new"));
    /// assert!(reader.next().await?.is_none());
    /// # Ok(()) }
    /// ```
    pub fn record_reader(&self, query: RecordsQuery) -> RecordReader<'_> {
        RecordReader {
            store: self,
            after: query.after.clone(),
            query,
            page: VecDeque::new(),
            returned: 0,
            exhausted: false,
            keys_checked: false,
            skipped: Skipped::default(),
        }
    }

    pub(crate) fn dialect(&self) -> Dialect {
        match &self.db {
            Db::Sqlite(_) => Dialect::Sqlite,
            Db::Postgres(_) => Dialect::Postgres,
        }
    }

    /// The first [`Skipped::NAMED`] rows of `requests` that `query`'s [`filter`] takes and
    /// `refused` (SQL) is true of, named, with the faults `columns`' check finds in each.
    pub(crate) async fn name_refused(
        &self,
        columns: Columns<'_>,
        query: &RecordsQuery,
        refused: &str,
    ) -> Result<Vec<SkippedRow>, RecordsError> {
        let d = self.dialect();
        let (filter, _) = filter(query);
        let sql = format!(
            "SELECT {}, {} FROM requests WHERE {filter} AND {refused} LIMIT {}",
            name_columns(d),
            fault_columns(columns, d),
            Skipped::NAMED
        );
        macro_rules! named {
            ($pool:expr) => {{
                let q = bind_filter!(sqlx::query(&sql), query);
                let rows = q.fetch_all($pool).await.map_err(|e| self.db_error(e))?;
                rows.iter()
                    .map(|row| SkippedRow {
                        table: "requests",
                        name: request_name(
                            row.try_get::<Option<String>, _>(0)
                                .ok()
                                .flatten()
                                .as_deref(),
                            row.try_get::<Option<i64>, _>(1).ok().flatten(),
                        ),
                        why: fault_of(row, 2, columns)
                            .unwrap_or_else(|| "its columns do not hold what they should".into()),
                    })
                    .collect()
            }};
        }
        Ok(match &self.db {
            Db::Sqlite(pool) => named!(pool),
            Db::Postgres(pool) => named!(pool),
        })
    }
}

impl RecordReader<'_> {
    /// The next record, with its samples when the query asks for them; `None` after the last.
    /// A row that cannot be read is left out and named in [`skipped`](Self::skipped).
    pub async fn next(&mut self) -> Result<Option<RequestRecord>, RecordsError> {
        if !self.keys_checked {
            self.count_unkeyed().await?;
            self.keys_checked = true;
        }
        loop {
            if self.query.limit.is_some_and(|limit| self.returned >= limit) {
                return Ok(None);
            }
            if let Some(mut r) = self.page.pop_front() {
                if self.query.samples {
                    self.read_samples(&mut r).await?;
                }
                self.returned += 1;
                return Ok(Some(r));
            }
            if self.exhausted {
                return Ok(None);
            }
            self.read_page().await?;
        }
    }

    /// The rows left out so far.
    pub fn skipped(&self) -> &Skipped {
        &self.skipped
    }

    /// SQLite only: the rows whose `at_ms` is not an integer or whose id is not text, which
    /// the pages (read by those keys) cannot take, counted and named.
    async fn count_unkeyed(&mut self) -> Result<(), RecordsError> {
        let Db::Sqlite(pool) = &self.store.db else {
            return Ok(());
        };
        let (filter, _) = filter(&self.query);
        let refused = "NOT (typeof(at_ms) = 'integer' AND typeof(id) = 'text')";
        let sql = format!("SELECT COUNT(*) FROM requests WHERE {filter} AND {refused}");
        let count = bind_filter!(sqlx::query_scalar::<_, i64>(&sql), self.query)
            .fetch_one(pool)
            .await
            .map_err(|e| self.store.db_error(e))?;
        if count == 0 {
            return Ok(());
        }
        let named = (self.store)
            .name_refused(REQUEST_COLUMNS, &self.query, refused)
            .await?;
        let listed = named.len() as u64;
        for row in named {
            self.skipped.push(row);
        }
        self.skipped.count += (count.max(0) as u64).saturating_sub(listed);
        Ok(())
    }

    /// The next page of `requests` rows: the good ones decoded into the page, the others
    /// left out.
    async fn read_page(&mut self) -> Result<(), RecordsError> {
        let d = self.store.dialect();
        let (filter, used) = filter(&self.query);
        let mut sql = format!(
            "SELECT {}, {} FROM requests WHERE {filter}",
            fault_columns(REQUEST_COLUMNS, d),
            names(REQUEST_COLUMNS),
        );
        if d == Dialect::Sqlite {
            sql.push_str(" AND typeof(at_ms) = 'integer' AND typeof(id) = 'text'");
        }
        let (past, order) = match self.query.newest_first {
            false => (">", "at_ms, id"),
            true => ("<", "at_ms DESC, id DESC"),
        };
        if self.after.is_some() {
            sql.push_str(&format!(
                " AND (at_ms, id) {past} (${}, ${})",
                used + 1,
                used + 2
            ));
        }
        let mut page = PAGE;
        if let Some(limit) = self.query.limit {
            page = page.min(usize::try_from(limit.saturating_sub(self.returned)).unwrap_or(0));
        }
        sql.push_str(&format!(" ORDER BY {order} LIMIT {page}"));
        macro_rules! page {
            ($pool:expr) => {{
                let mut q = bind_filter!(sqlx::query(&sql), self.query);
                if let Some((at_ms, id)) = &self.after {
                    q = q.bind(*at_ms).bind(id);
                }
                let rows = q
                    .fetch_all($pool)
                    .await
                    .map_err(|e| self.store.db_error(e))?;
                let fetched = rows.len();
                for row in &rows {
                    // The keys are good: the query takes no other row.
                    let at_ms: i64 = row.try_get("at_ms").map_err(|e| self.store.db_error(e))?;
                    let id: String = row.try_get("id").map_err(|e| self.store.db_error(e))?;
                    let name = || request_name(Some(&id), None);
                    match fault_of(row, 0, REQUEST_COLUMNS) {
                        Some(why) => self.skipped.push(SkippedRow {
                            table: "requests",
                            name: name(),
                            why,
                        }),
                        None => match request_of(row) {
                            Ok(r) => self.page.push_back(r),
                            Err(e) => self.skipped.push(SkippedRow {
                                table: "requests",
                                name: name(),
                                why: decode_error(&e),
                            }),
                        },
                    }
                    self.after = Some((at_ms, id));
                }
                fetched
            }};
        }
        let fetched = match &self.store.db {
            Db::Sqlite(pool) => page!(pool),
            Db::Postgres(pool) => page!(pool),
        };
        if fetched < page || page == 0 {
            self.exhausted = true;
        }
        Ok(())
    }

    /// Request `r`'s samples, by sample number; the ones that cannot be read left out.
    async fn read_samples(&mut self, r: &mut RequestRecord) -> Result<(), RecordsError> {
        let d = self.store.dialect();
        let rowid = match d {
            Dialect::Sqlite => "rowid",
            Dialect::Postgres => "CAST(NULL AS BIGINT)",
        };
        let sql = format!(
            "SELECT {}, {rowid} AS cw_rowid, {} FROM samples WHERE request = $1 ORDER BY sample",
            fault_columns(SAMPLE_COLUMNS, d),
            names(SAMPLE_COLUMNS)
        );
        let rowid_at = SAMPLE_COLUMNS.len() + 1;
        macro_rules! samples {
            ($pool:expr) => {{
                let rows = sqlx::query(&sql)
                    .bind(&r.id)
                    .fetch_all($pool)
                    .await
                    .map_err(|e| self.store.db_error(e))?;
                for row in &rows {
                    let name = || {
                        let which = match row.try_get::<i64, _>("sample") {
                            Ok(sample) => format!("sample {sample}"),
                            Err(_) => match row.try_get::<Option<i64>, _>(rowid_at) {
                                Ok(Some(rowid)) => format!("rowid {rowid}"),
                                _ => "a sample".into(),
                            },
                        };
                        format!("request {}, {which}", quoted_name(&r.id))
                    };
                    let sample = match fault_of(row, 0, SAMPLE_COLUMNS) {
                        Some(why) => Err(why),
                        None => sample_of(row).map_err(|e| decode_error(&e)),
                    };
                    match sample {
                        Ok(s) => r.samples.push(s),
                        Err(why) => self.skipped.push(SkippedRow {
                            table: "samples",
                            name: name(),
                            why,
                        }),
                    }
                }
            }};
        }
        match &self.store.db {
            Db::Sqlite(pool) => samples!(pool),
            Db::Postgres(pool) => samples!(pool),
        }
        Ok(())
    }
}

/// A decoding error as a row's reason: the column and what was wrong, without the driver's
/// Rust type names.
fn decode_error(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::ColumnDecode { index, source } => {
            format!("{} cannot be read: {source}", index.trim_matches('"'))
        }
        sqlx::Error::Decode(source) => format!("cannot be read: {source}"),
        e => format!("cannot be read: {e}"),
    }
}

/// A `requests` row.
fn request_of<R: Row>(row: &R) -> Result<RequestRecord, sqlx::Error>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<String>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> bool: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> f64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<f64>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let at_ms: i64 = row.try_get("at_ms")?;
    let mut r = RequestRecord::new(
        at_ms,
        row.try_get::<String, _>("request_id")?,
        row.try_get::<String, _>("model")?,
    );
    r.id = row.try_get("id")?;
    r.key = row.try_get("key_name")?;
    r.api = row.try_get("api")?;
    r.stream = row.try_get("stream")?;
    r.pick = row.try_get("pick")?;
    r.decision = row.try_get("decision")?;
    r.samples_started = row.try_get("samples_started")?;
    r.samples_cancelled = row.try_get("samples_cancelled")?;
    r.samples_failed = row.try_get("samples_failed")?;
    r.prompt_tokens = row.try_get("prompt_tokens")?;
    r.completion_tokens = row.try_get("completion_tokens")?;
    r.estimated = row.try_get("estimated")?;
    let tokens: String = row.try_get("sample_tokens")?;
    r.sample_tokens = serde_json::from_str(&tokens).map_err(|e| sqlx::Error::ColumnDecode {
        index: "sample_tokens".into(),
        source: Box::new(e),
    })?;
    r.status = row.try_get("status")?;
    r.ended = row.try_get("ended")?;
    r.first_byte_ms = row.try_get("first_byte_ms")?;
    r.total_ms = row.try_get("total_ms")?;
    r.cost_usd = row.try_get("cost_usd")?;
    r.samples_cut = row.try_get("samples_cut")?;
    Ok(r)
}

/// A `samples` row.
fn sample_of<R: Row>(row: &R) -> Result<SampleRecord, sqlx::Error>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<String>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<i64>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> bool: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let mut s = SampleRecord::new(row.try_get("sample")?, row.try_get::<String, _>("finish")?);
    s.place = row.try_get("place")?;
    s.prompt_tokens = row.try_get("prompt_tokens")?;
    s.completion_tokens = row.try_get("completion_tokens")?;
    s.estimated = row.try_get("estimated")?;
    s.content = row.try_get("content")?;
    s.message = row.try_get("message")?;
    s.logprobs = row.try_get("logprobs")?;
    s.output = row.try_get("output")?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_name_is_cut_and_escaped() {
        assert_eq!(quoted_name("a\nb"), r#""a\nb""#);
        let long = "x".repeat(65_536);
        let shown = quoted_name(&long);
        assert_eq!(shown.chars().count(), 64 + 3);
        assert!(shown.ends_with("x…\""));
    }

    #[test]
    fn skipped_rows_are_counted_and_the_first_named() {
        let mut s = Skipped::default();
        for i in 0..25 {
            s.push(SkippedRow {
                table: "requests",
                name: format!("rowid {i}"),
                why: "key_name holds a blob of 3 bytes, wanted text".into(),
            });
        }
        assert_eq!((s.count, s.named.len()), (25, Skipped::NAMED));
        let text = s.to_string();
        assert!(text.starts_with("25 rows could not be read and were left out:\n  requests rowid 0: key_name holds a blob"), "{text}");
        assert!(text.ends_with("\n  and 5 more"), "{text}");
    }
}
