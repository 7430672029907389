//! Records read back: [`Store::records`], for `choicewise picks record --from-records` and
//! for tests and audits.

use sqlx::Row;

use crate::record::{RequestRecord, SampleRecord};
use crate::store::Db;
use crate::{RecordsError, Store};

/// Which records [`Store::records`] reads.
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
    /// At most this many requests (the oldest first); `None`: every one.
    pub limit: Option<i64>,
}

impl RecordsQuery {
    /// The requests arrived since `since_ms`, without their samples.
    pub fn since(since_ms: i64) -> Self {
        RecordsQuery {
            since_ms,
            model: None,
            samples: false,
            limit: None,
        }
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

const COLUMNS: &str = "id, at_ms, request_id, key_name, model, api, stream, pick, decision, \
    samples_started, samples_cancelled, samples_failed, prompt_tokens, completion_tokens, \
    estimated, sample_tokens, status, ended, first_byte_ms, total_ms, cost_usd";

impl Store {
    /// The records `query` names, oldest first (by arrival, then id), with their samples
    /// (by sample number) when asked.
    pub async fn records(&self, query: &RecordsQuery) -> Result<Vec<RequestRecord>, RecordsError> {
        let mut sql = format!("SELECT {COLUMNS} FROM requests WHERE at_ms >= $1");
        if query.model.is_some() {
            sql.push_str(" AND model = $2");
        }
        sql.push_str(" ORDER BY at_ms, id");
        if let Some(limit) = query.limit {
            sql.push_str(&format!(" LIMIT {}", limit.max(0)));
        }
        let samples_sql = "SELECT sample, finish, place, prompt_tokens, completion_tokens, \
            estimated, content, message, logprobs FROM samples WHERE request = $1 ORDER BY sample";
        macro_rules! read {
            ($pool:expr) => {{
                let mut q = sqlx::query(&sql).bind(query.since_ms);
                if let Some(model) = &query.model {
                    q = q.bind(model);
                }
                let rows = q.fetch_all($pool).await.map_err(|e| self.db_error(e))?;
                let mut records = Vec::with_capacity(rows.len());
                for row in &rows {
                    let mut r = request_of(row).map_err(|e| self.db_error(e))?;
                    if query.samples {
                        let rows = sqlx::query(samples_sql)
                            .bind(&r.id)
                            .fetch_all($pool)
                            .await
                            .map_err(|e| self.db_error(e))?;
                        for row in &rows {
                            r.samples
                                .push(sample_of(row).map_err(|e| self.db_error(e))?);
                        }
                    }
                    records.push(r);
                }
                Ok(records)
            }};
        }
        match &self.db {
            Db::Sqlite(pool) => read!(pool),
            Db::Postgres(pool) => read!(pool),
        }
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
    r.sample_tokens =
        serde_json::from_str(&tokens).map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
    r.status = row.try_get("status")?;
    r.ended = row.try_get("ended")?;
    r.first_byte_ms = row.try_get("first_byte_ms")?;
    r.total_ms = row.try_get("total_ms")?;
    r.cost_usd = row.try_get("cost_usd")?;
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
    Ok(s)
}
