//! Grades of requests from production (`POST /v1/feedback`), kept beside their records in
//! the table `feedback`: one row per grade given, a request's latest its grade.

use serde::{Deserialize, Serialize};

use crate::RecordsError;
use crate::store::{Db, Store, fault_error};

/// A grade of a request: whether its answer was right, as someone said later (a test that
/// passed, a user who accepted it).
///
/// ```
/// use choicewise_records::Grade;
/// let g = Grade::new(0.0, "wrong", "team-a", 1_795_737_600_000).source("ci");
/// assert_eq!((g.score, g.outcome.as_str(), g.source.as_deref()), (0.0, "wrong", Some("ci")));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Grade {
    /// `1` for right, `0` for wrong, or the score given, from 0 to 1.
    pub score: f64,
    /// `right`, `wrong` or `score`: how it was given.
    pub outcome: String,
    /// Who said it (a test suite, a reviewer, a user), when told.
    pub source: Option<String>,
    /// The key that gave it (its name, as the request's record names keys), or
    /// `(operator)`.
    pub by: String,
    /// When it was given, in milliseconds since the Unix epoch.
    pub at_ms: i64,
}

impl Grade {
    /// A grade of `score` given as `outcome` by the key named `by` at `at_ms`.
    ///
    /// ```
    /// let g = choicewise_records::Grade::new(1.0, "right", "team-a", 0);
    /// assert_eq!(g.source, None);
    /// ```
    pub fn new(score: f64, outcome: impl Into<String>, by: impl Into<String>, at_ms: i64) -> Self {
        Grade {
            score,
            outcome: outcome.into(),
            source: None,
            by: by.into(),
            at_ms,
        }
    }

    /// Who said it.
    ///
    /// ```
    /// let g = choicewise_records::Grade::new(1.0, "right", "k", 0).source("reviewer");
    /// assert_eq!(g.source.as_deref(), Some("reviewer"));
    /// ```
    pub fn source(mut self, source: impl Into<String>) -> Self {
        self.source = Some(source.into());
        self
    }
}

impl Store {
    /// The keys (their names, as the records keep them) of the requests recorded with the
    /// id `request_id`: empty when none is.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use choicewise_records::{Grade, RequestRecord, Store};
    /// let dir = tempfile::tempdir()?;
    /// let store = Store::connect(&format!("sqlite://{}", dir.path().join("r.db").display())).await?;
    /// let mut r = RequestRecord::new(1_795_737_600_000, "req-1", "m");
    /// r.key = "team-a".into();
    /// store.write(&[r]).await?;
    /// assert_eq!(store.request_keys("req-1").await?, ["team-a"]);
    /// assert!(store.request_keys("req-2").await?.is_empty());
    /// assert_eq!(store.grade("req-1").await?, None);
    /// store.add_grade("req-1", &Grade::new(0.0, "wrong", "team-a", 1)).await?;
    /// store.add_grade("req-1", &Grade::new(1.0, "right", "team-a", 2)).await?;
    /// assert_eq!(store.grade("req-1").await?.map(|g| g.outcome), Some("right".into()));
    /// # Ok(()) }
    /// ```
    pub async fn request_keys(&self, request_id: &str) -> Result<Vec<String>, RecordsError> {
        let sqlite = "SELECT DISTINCT key_name FROM requests WHERE request_id = ?";
        let postgres = "SELECT DISTINCT key_name FROM requests WHERE request_id = $1";
        match &self.db {
            Db::Sqlite(pool) => {
                (sqlx::query_scalar(sqlite).bind(request_id))
                    .fetch_all(pool)
                    .await
            }
            Db::Postgres(pool) => {
                (sqlx::query_scalar(postgres).bind(request_id))
                    .fetch_all(pool)
                    .await
            }
        }
        .map_err(|e| fault_error(self.shown(), &e))
    }

    /// Keeps `grade` of the request `request_id` (see [`request_keys`](Self::request_keys)
    /// for whether it is recorded): its latest grade from now on.
    pub async fn add_grade(&self, request_id: &str, grade: &Grade) -> Result<(), RecordsError> {
        let sqlite = "INSERT INTO feedback (id, request_id, at_ms, score, outcome, source, \
                      key_name) VALUES (?, ?, ?, ?, ?, ?, ?)";
        let postgres = "INSERT INTO feedback (id, request_id, at_ms, score, outcome, source, \
                        key_name) VALUES ($1, $2, $3, $4, $5, $6, $7)";
        let id = crate::record::new_id();
        macro_rules! insert {
            ($pool:expr, $sql:expr) => {
                sqlx::query($sql)
                    .bind(&id)
                    .bind(request_id)
                    .bind(grade.at_ms)
                    .bind(grade.score)
                    .bind(&grade.outcome)
                    .bind(&grade.source)
                    .bind(&grade.by)
                    .execute($pool)
                    .await
                    .map(drop)
            };
        }
        match &self.db {
            Db::Sqlite(pool) => insert!(pool, sqlite),
            Db::Postgres(pool) => insert!(pool, postgres),
        }
        .map_err(|e| fault_error(self.shown(), &e))
    }

    /// The latest grade of the request `request_id`, if it has one.
    pub async fn grade(&self, request_id: &str) -> Result<Option<Grade>, RecordsError> {
        let sqlite = "SELECT score, outcome, source, key_name, at_ms FROM feedback \
                      WHERE request_id = ? ORDER BY at_ms DESC, rowid DESC LIMIT 1";
        let postgres = "SELECT score, outcome, source, key_name, at_ms FROM feedback \
                        WHERE request_id = $1 ORDER BY at_ms DESC, id DESC LIMIT 1";
        type Row = (f64, String, Option<String>, String, i64);
        let row: Option<Row> = match &self.db {
            Db::Sqlite(pool) => {
                (sqlx::query_as(sqlite).bind(request_id))
                    .fetch_optional(pool)
                    .await
            }
            Db::Postgres(pool) => {
                (sqlx::query_as(postgres).bind(request_id))
                    .fetch_optional(pool)
                    .await
            }
        }
        .map_err(|e| fault_error(self.shown(), &e))?;
        Ok(row.map(|(score, outcome, source, by, at_ms)| Grade {
            score,
            outcome,
            source,
            by,
            at_ms,
        }))
    }

    /// The latest grade of each of `request_ids` that has one (as [`grade`](Self::grade)
    /// gives it), asked [`GRADES_AT_ONCE`] at a time.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use choicewise_records::{Grade, Store};
    /// let dir = tempfile::tempdir()?;
    /// let store = Store::connect(&format!("sqlite://{}", dir.path().join("r.db").display())).await?;
    /// store.add_grade("a", &Grade::new(0.0, "wrong", "ci", 1)).await?;
    /// store.add_grade("a", &Grade::new(1.0, "right", "ci", 2)).await?;
    /// let grades = store.grades(&["a", "b"]).await?;
    /// assert_eq!((grades.len(), grades["a"].outcome.as_str()), (1, "right"));
    /// # Ok(()) }
    /// ```
    pub async fn grades(
        &self,
        request_ids: &[&str],
    ) -> Result<std::collections::HashMap<String, Grade>, RecordsError> {
        type Row = (String, f64, String, Option<String>, String, i64);
        let mut grades = std::collections::HashMap::new();
        for ids in request_ids.chunks(GRADES_AT_ONCE) {
            let (order, places) = match &self.db {
                Db::Sqlite(_) => ("rowid", vec!["?".to_string(); ids.len()]),
                Db::Postgres(_) => ("id", (1..=ids.len()).map(|i| format!("${i}")).collect()),
            };
            // Oldest first: the latest of a request is the last one kept.
            let sql = format!(
                "SELECT request_id, score, outcome, source, key_name, at_ms FROM feedback \
                 WHERE request_id IN ({}) ORDER BY at_ms, {order}",
                places.join(", ")
            );
            macro_rules! read {
                ($pool:expr) => {{
                    let mut q = sqlx::query_as::<_, Row>(&sql);
                    for id in ids {
                        q = q.bind(*id);
                    }
                    q.fetch_all($pool).await
                }};
            }
            let rows = match &self.db {
                Db::Sqlite(pool) => read!(pool),
                Db::Postgres(pool) => read!(pool),
            }
            .map_err(|e| fault_error(self.shown(), &e))?;
            for (request_id, score, outcome, source, by, at_ms) in rows {
                let grade = Grade {
                    score,
                    outcome,
                    source,
                    by,
                    at_ms,
                };
                grades.insert(request_id, grade);
            }
        }
        Ok(grades)
    }
}

/// The request ids [`Store::grades`] asks of the database in one query.
pub const GRADES_AT_ONCE: usize = 500;
